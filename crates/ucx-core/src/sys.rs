//! Raw bindings to UCP: by default the ones shipped in `bindings/ucx-1.18.rs` (generated from
//! UCX 1.18's headers, the oldest UCX supported; UCX keeps its 1.x API and ABI compatible, so
//! they serve every newer 1.x library), with feature `bindgen` the ones build.rs generates from
//! the headers it finds. Each function calls through `library::api()`, the table filled when
//! UCX was opened. Everything outside this crate goes through the safe wrappers; this module
//! is private.
//!
//! Regenerating the shipped file: `scripts/ci/bindings-check.sh --write` (it also checks, in
//! CI, that the file is what bindgen makes of UCX 1.18's headers).
#![allow(non_camel_case_types, non_snake_case, non_upper_case_globals, dead_code, unused_imports, clippy::all)]
#![allow(unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks)]

#[cfg(not(feature = "bindgen"))]
include!("../bindings/ucx-1.18.rs");
#[cfg(feature = "bindgen")]
include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

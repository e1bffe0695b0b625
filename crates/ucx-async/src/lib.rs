//! tokio integration for UCX (placeholder: the reactor and endpoint futures are the subject of
//! the ucx-async issue). Re-exports [`ucx_core`] so users need one dependency.
#![deny(unsafe_op_in_unsafe_fn)]

pub use ucx_core as core;

//! Re-emits ucx-core's rpath for this crate's own tests, examples and benches (cargo does not
//! propagate `rustc-link-arg` from a dependency's build script).
fn main() {
    if let Ok(dir) = std::env::var("DEP_UCP_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}

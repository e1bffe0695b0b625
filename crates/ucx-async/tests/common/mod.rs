//! Shared by the test binaries that move device memory (feature `cuda`).

/// A CUDA context current on this thread, or `None` after printing why the test is skipped
/// (the GPU harness reads "skipped: no CUDA device"); never a transfer that was not made.
#[cfg(feature = "cuda")]
pub fn cuda() -> Option<cust::context::Context> {
    match cust::quick_init() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            // Debug, not Display: cust's Display asks the driver, which may be what is missing.
            eprintln!("skipped: no CUDA device ({e:?})");
            None
        }
    }
}

//! The extension's rpath to UCX (cargo does not propagate `rustc-link-arg` from a dependency's
//! build script, so ucx-core's does not reach us).
//!
//! - UCX from the `libucx` wheel (the default, and how release wheels are built): an rpath
//!   relative to the installed package, `site-packages/ucp/_ucx_async*.so` ->
//!   `site-packages/libucx/lib`, the directory of the wheel that `ucp` depends on. `import ucp`
//!   loads that UCX first anyway (`libucx.load_library()`); the rpath makes the extension find
//!   the same copy without it. No build-machine path: it means nothing where the wheel is
//!   installed (for `pip install .` it is a deleted build environment). An editable
//!   `maturin develop` build, whose extension stays in python/ucp, gets one all the same:
//!   maturin resolves `$ORIGIN` entries against the virtualenv and appends the result
//!   (.venv's libucx/lib).
//! - UCX from `UCX_DIR` or pkg-config: a UCX of this machine, linked by its absolute path.
fn main() {
    if std::env::var("DEP_UCP_FROM_WHEEL").as_deref() == Ok("1") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../libucx/lib");
    } else if let Ok(dir) = std::env::var("DEP_UCP_LIBDIR") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}

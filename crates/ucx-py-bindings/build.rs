//! Links the extension to libucp, with an rpath to it. ucx-core itself links nothing (it opens
//! UCX at run time and reuses a libucp already in the process first); the extension loads it
//! at import so that it always uses the UCX of the `libucx` wheel that `ucp` depends on.
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
    let Ok(dir) = std::env::var("DEP_UCP_LIBDIR") else { return };
    if std::env::var("DEP_UCP_FROM_WHEEL").as_deref() == Ok("1") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,$ORIGIN/../libucx/lib");
    } else {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
    // --no-as-needed: the extension calls no libucp symbol itself (ucx-core resolves them at
    // run time), and the linker would otherwise drop the dependency.
    println!("cargo:rustc-link-arg=-L{dir}");
    println!("cargo:rustc-link-arg=-Wl,--no-as-needed,-lucp,--as-needed");
}

//! The UCX version: the headers ucx-core was built against and the library loaded at run time,
//! and the check that the two can work together.
use crate::error::{Error, Result, Status};
use crate::sys;

/// The oldest UCX the crate supports (build.rs refuses older headers): UCX 1.15 leaves the
/// length of an inline-completed tag receive unset; 1.18 passes the test suite.
pub const MIN_SUPPORTED: (u32, u32) = (1, 18);

/// `(major, minor)` of the UCX headers the bindings were generated from: 1.18 for the shipped
/// bindings, those of the UCX build.rs found with feature `bindgen`.
pub const HEADERS: (u32, u32) = (sys::UCP_API_MAJOR, sys::UCP_API_MINOR);

/// The directory of the UCX libraries found at build time (one place [`crate::library`] looks
/// at run time); empty where none was found (the build needs none).
pub const BUILD_LIBDIR: &str = env!("UCXRS_BUILD_LIBDIR");

/// How build.rs found that UCX (e.g. `libucx wheel via .venv/bin/python, API 1.22`), or that
/// it found none.
pub const BUILD_FOUND_BY: &str = env!("UCXRS_BUILD_FOUND_BY");

/// `(major, minor, release)` of the UCX library loaded at run time (`ucp_get_version`),
/// loading it if needed ([`crate::library::load`]'s error if none is found). Does not
/// initialise UCX.
pub fn runtime() -> Result<(u32, u32, u32)> {
    crate::library::load()?;
    let (mut major, mut minor, mut release) = (0, 0, 0);
    // SAFETY: ucp_get_version only writes the three integers through valid pointers.
    unsafe { sys::ucp_get_version(&mut major, &mut minor, &mut release) };
    Ok((major, minor, release))
}

/// Checks that the loaded library can serve the API the crate was built against: same major
/// version, and a minor version no older than the headers' (newer headers may add fields to
/// parameter structs that an older library would not read).
pub fn check() -> Result<()> {
    let (major, minor, release) = runtime()?;
    if major != HEADERS.0 || minor < HEADERS.1 {
        let loaded = crate::library::load()?;
        return Err(Error::with_detail(
            "version::check",
            Status::Unsupported,
            format!(
                "the UCX library loaded at run time is {major}.{minor}.{release}, but ucx-core was \
                 built against UCX {}.{} headers; it was found as: {} ({}). \
                 Rebuild against the library you run with, or run with the one you built against \
                 (UCX_DIR=<its prefix>)",
                HEADERS.0,
                HEADERS.1,
                loaded.found_by(),
                loaded.path()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn loaded_library_matches_headers() {
        // Any 1.x library no older than the headers serves them (the shipped bindings are 1.18's).
        let (major, minor, _) = super::runtime().unwrap();
        assert_eq!(major, super::HEADERS.0);
        assert!(minor >= super::HEADERS.1, "UCX {major}.{minor} is older than the headers {:?}", super::HEADERS);
        super::check().unwrap();
    }
}

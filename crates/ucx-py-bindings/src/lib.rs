//! The pyo3 extension `ucp._ucx_async`: the native half of the Python package `ucp`.
//!
//! For now it exposes only what the pure-Python layer needs before UCX is initialised (the
//! loaded UCX version); the endpoint API is the subject of the Python-package issue.
#![deny(unsafe_op_in_unsafe_fn)]

use pyo3::prelude::*;

/// The version of the UCX library loaded at run time, as `(major, minor, release)`.
#[pyfunction]
fn get_ucx_version() -> (u32, u32, u32) {
    ucx_core::version::runtime()
}

#[pymodule]
fn _ucx_async(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(get_ucx_version, m)?)?;
    Ok(())
}

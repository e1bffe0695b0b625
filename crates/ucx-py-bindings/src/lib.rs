//! The pyo3 extension `ucp._ucx_async`: the native half of the Python package `ucp`.
//!
//! # Map of the crate
//! - [`context`]: `Context` (options, features, effective configuration, CUDA support).
//! - [`worker`]: `Worker` (progress with the GIL released, wakeup fd and arming, worker-wide
//!   tag receive and probe, flush, fence, active-message allocators, endpoint creation).
//! - [`endpoint`]: `Endpoint` (tag, stream and active-message operations, peer failure,
//!   close). [`listener`]: `Listener` and `ConnRequest`.
//! - [`engine`]: every operation in flight, the events UCX callbacks record, and the drain
//!   that resolves futures and runs Python callbacks after progress. [`target`]: where one
//!   operation's outcome goes (asyncio future or callback). [`am`]: active-message routing.
//! - [`rma`]: `MemoryHandle`, `RemoteKey`, and endpoint put/get.
//! - [`request`]: `Request`, the handle a transfer with a callback returns while in flight.
//! - [`buffer`]: Python buffers (buffer protocol, `__cuda_array_interface__`) without copies.
//! - [`host_pool`]: `HostPool`, receive buffers from host memory that is already backed.
//! - [`errors`]: UCX failures as UCX-Py's exception classes.
//! - [`collective`]: the communicator's tags and bootstrap messages for `ucp.collective`.
//! - [`multirail`]: multi-rail's hello, header, part tags and share arithmetic for
//!   `ucp.multirail`.
//! - [`topology`]: `Topology` (ucx-topology: device distances, `UCX_NET_DEVICES` choice).
//!
//! Everything Python-facing beyond these primitives (the handshake, tags, `ucp.core`) is
//! pure Python in `python/ucp`.
#![deny(unsafe_op_in_unsafe_fn)]

mod am;
mod buffer;
mod collective;
mod context;
mod cuda_stream;
mod endpoint;
mod engine;
mod errors;
mod host_pool;
mod listener;
mod multirail;
mod request;
mod rma;
mod target;
mod topology;
mod worker;

use pyo3::prelude::*;

/// The version of the UCX library loaded at run time, as `(major, minor, release)`.
#[pyfunction]
fn get_ucx_version() -> (u32, u32, u32) {
    ucx_core::version::runtime()
}

/// UCX-Py's `hash64bits` over two unsigned 64-bit ints (the handshake checksum), in Rust.
#[pyfunction]
fn hash64bits_u64(a: u64, b: u64) -> u64 {
    ucx_core::wire::hash64bits(&[a, b])
}

#[pymodule]
fn _ucx_async(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(get_ucx_version, m)?)?;
    m.add_function(wrap_pyfunction!(hash64bits_u64, m)?)?;
    m.add_function(wrap_pyfunction!(context::current_options, m)?)?;
    m.add_function(wrap_pyfunction!(collective::collective_user_tag, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_hello, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_hello_decode, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_header, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_header_len, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_header_decode, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_shares, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_ratio_weights, m)?)?;
    m.add_function(wrap_pyfunction!(multirail::multirail_part_tag, m)?)?;
    m.add_function(wrap_pyfunction!(collective::collective_own_tag, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_hello, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_hello_decode, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_table, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_table_decode, m)?)?;
    m.add_class::<context::Context>()?;
    m.add_class::<worker::Worker>()?;
    m.add_class::<endpoint::Endpoint>()?;
    m.add_class::<listener::Listener>()?;
    m.add_class::<listener::ConnRequestPy>()?;
    m.add_class::<request::Request>()?;
    m.add_class::<rma::MemoryHandle>()?;
    m.add_class::<rma::RemoteKey>()?;
    m.add_class::<host_pool::HostPool>()?;
    m.add_class::<host_pool::HostBuffer>()?;
    m.add_class::<topology::Topology>()?;
    m.add("FULL_MASK", ucx_core::FULL_MASK)?;
    Ok(())
}

//! The pyo3 extension `ucp._ucx_async`: the native half of the Python package `ucp`.
//!
//! # Map of the crate
//! Listed from the bottom up: a module uses only modules above it (no import circles;
//! `python/tests/test_layers.py` checks).
//! - [`sync`]: locking that tolerates poisoning. [`errors`]: UCX failures as UCX-Py's
//!   exception classes. [`buffer`]: Python buffers (buffer protocol,
//!   `__cuda_array_interface__`) without copies; [`cuda_stream`] waits for a CUDA buffer's
//!   stream before UCX touches the memory.
//! - [`outcome`]: what a finished operation gives Python, its name in errors, the length
//!   check. [`target`]: where one outcome goes (asyncio future or callback).
//! - [`engine`]: the operations in flight (`ucx_core::Inflight`), the events UCX callbacks
//!   queue, and the drain that delivers both after progress. It knows no endpoint type.
//! - [`request`]: `Request`, the handle a transfer with a callback returns while in flight.
//!   [`submit`]: what a submission gives Python (None, a future that cancels the operation
//!   when cancelled, or a `Request`), with the optional inline spin.
//! - [`am`]: `AmQueues`, UCX-Py's active-message receiving, queued per sender endpoint.
//! - [`endpoint_life`]: an endpoint's state shared with the engine and UCX's error callback:
//!   peer failure, our close, the close callback. [`single_copy`]: an endpoint's side of the
//!   same-host single-copy path (the hello exchange, descriptor sends, receives read through).
//!   [`endpoint`]: `Endpoint` (tag, stream, active-message and RMA operations, `close`).
//! - [`context`]: `Context`. [`rma`]: `MemoryHandle`, `RemoteKey`. [`listener`]: `Listener`
//!   and `ConnRequest`. [`worker`]: `Worker` (progress and the blocking-mode pass, wakeup
//!   fd, worker-wide receive and probe, flush, fence, endpoints and listeners).
//! - [`wire`]: UCX-Py's and UCXX's wire formats (handshake, control message, `send_obj`
//!   prefix, user tags, multi-frame header) from ucx-core, for `python/ucp`.
//! - Leaves: [`host_pool`] (`HostPool`, receive buffers from memory already backed),
//!   [`collective`] and [`multirail`] (their wire bytes for `ucp.collective` and
//!   `ucp.multirail`), [`collective_call`] (`ucp.collective`'s calls in one native
//!   call), [`shared_window`] (`SharedWindowMemory`: `ucp.collective.SharedWindow`'s
//!   window memory, the peers' windows mapped, the copies into them, views of its own),
//!   [`topology`] (`Topology`: device distances, `UCX_NET_DEVICES`), [`doctor`] (the UCX
//!   half of `python -m ucp.doctor`).
//!
//! Everything Python-facing beyond these primitives (the handshake's flow, the close
//! protocol's flow, `ucp.core`) is pure Python in `python/ucp`; the bytes are ucx-core's.
#![deny(unsafe_op_in_unsafe_fn)]

mod am;
mod buffer;
mod collective;
mod collective_call;
mod context;
mod cuda_stream;
mod doctor;
mod endpoint;
mod endpoint_life;
mod engine;
mod errors;
mod host_pool;
mod listener;
mod multirail;
mod outcome;
mod request;
mod rma;
mod shared_window;
mod single_copy;
mod submit;
mod sync;
mod target;
mod topology;
mod wire;
mod worker;

use pyo3::prelude::*;

/// The version of the UCX library loaded at run time, as `(major, minor, release)`.
#[pyfunction]
fn get_ucx_version(py: Python<'_>) -> PyResult<(u32, u32, u32)> {
    ucx_core::version::runtime().map_err(|e| errors::from_core(py, &e))
}

#[pymodule]
fn _ucx_async(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(get_ucx_version, m)?)?;
    m.add_function(wrap_pyfunction!(context::current_options, m)?)?;
    m.add_function(wrap_pyfunction!(context::library_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(worker::spin_budget_us, m)?)?;
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
    m.add_function(wrap_pyfunction!(collective::bootstrap_hello_admit, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_refusal, m)?)?;
    m.add_function(wrap_pyfunction!(collective::error_handling_parse, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_table, m)?)?;
    m.add_function(wrap_pyfunction!(collective::bootstrap_table_decode, m)?)?;
    m.add_function(wrap_pyfunction!(collective::rendezvous_text, m)?)?;
    m.add_function(wrap_pyfunction!(collective::rendezvous_parse, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_announce, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_announce_decode, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_announce_room, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_messages, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_auto_buffered, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_bounce_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(collective_call::collective_allgather, m)?)?;
    m.add_function(wrap_pyfunction!(collective_call::collective_alltoallv, m)?)?;
    m.add_function(wrap_pyfunction!(collective_call::collective_exchange_small, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_device_len, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_device_len_decode, m)?)?;
    m.add_function(wrap_pyfunction!(collective::alltoallv_device_part_batch, m)?)?;
    m.add_function(wrap_pyfunction!(collective::shared_window_entry, m)?)?;
    m.add_function(wrap_pyfunction!(collective::shared_window_entry_decode, m)?)?;
    m.add_function(wrap_pyfunction!(collective::shared_window_note_decode, m)?)?;
    m.add_class::<context::Context>()?;
    m.add_class::<worker::Worker>()?;
    m.add_class::<endpoint::Endpoint>()?;
    m.add_class::<listener::Listener>()?;
    m.add_class::<listener::ConnRequestPy>()?;
    m.add_class::<request::Request>()?;
    m.add_class::<rma::MemoryHandle>()?;
    m.add_class::<rma::RemoteKey>()?;
    m.add_class::<shared_window::SharedWindowMemory>()?;
    m.add_class::<shared_window::WindowView>()?;
    m.add_class::<host_pool::HostPool>()?;
    m.add_class::<host_pool::HostBuffer>()?;
    m.add_class::<topology::Topology>()?;
    m.add("FULL_MASK", ucx_core::FULL_MASK)?;
    wire::register(m)?;
    doctor::register(m)?;
    Ok(())
}

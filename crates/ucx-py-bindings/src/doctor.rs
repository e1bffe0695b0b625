//! The UCX half of `python -m ucp.doctor`, from ucx-core's `doctor`: the UCX loaded and mapped,
//! the transports per memory type and the protocol table of a host-memory tag send, each of a
//! context made from the environment (`UCX_*`, with `ucp`'s defaults once imported), and the
//! system settings that change what shared memory can do.
use std::collections::BTreeMap;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use ucx_core::doctor;

use crate::errors;

/// `{"version": (major, minor, release), "path": the libucp opened, "found_by": how,
/// "libraries": {"libucp": [paths mapped], ...}, "second_ucx": bool}`.
#[pyfunction]
pub(crate) fn doctor_ucx(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let loaded = ucx_core::library::load().map_err(|e| errors::from_core(py, &e))?;
    let version = ucx_core::version::runtime().map_err(|e| errors::from_core(py, &e))?;
    let libraries = doctor::mapped_ucx_libraries();
    let out = PyDict::new(py);
    out.set_item("version", version)?;
    out.set_item("path", loaded.path())?;
    out.set_item("found_by", loaded.found_by())?;
    out.set_item("second_ucx", doctor::second_ucx(&libraries))?;
    let by_name: BTreeMap<&str, Vec<String>> = libraries.into_iter().map(|l| (l.name, l.paths)).collect();
    out.set_item("libraries", by_name)?;
    Ok(out)
}

fn context(py: Python<'_>) -> PyResult<ucx_core::Context> {
    py.allow_threads(ucx_core::Context::new).map_err(|e| errors::from_core(py, &e))
}

/// `[(memory type, ["transport/device", ...]), ...]` for a context made from the environment.
#[pyfunction]
pub(crate) fn doctor_transports(py: Python<'_>) -> PyResult<Vec<(&'static str, Vec<String>)>> {
    let ctx = context(py)?;
    doctor::transports_by_memory_type(&ctx).map_err(|e| errors::from_core(py, &e))
}

/// The protocol table UCX selects for a host-memory tag send between two workers of a context
/// made from the environment, with peer error handling on or off: `(configuration,
/// operation, [(first, last or None, range, protocol, transport), ...])`.
#[pyfunction]
pub(crate) fn doctor_protocols(py: Python<'_>, error_handling: bool) -> PyResult<PyProtocolTable> {
    let ctx = context(py)?;
    let table = py
        .allow_threads(|| doctor::probe_tag_send_protocols(&ctx, error_handling))
        .map_err(|e| errors::from_core(py, &e))?;
    Ok(to_py(table))
}

type PyProtocolTable = (String, String, Vec<(u64, Option<u64>, String, String, String)>);

fn to_py(table: doctor::ProtocolTable) -> PyProtocolTable {
    let rows = table.rows.into_iter().map(|r| (r.first, r.last, r.range, r.protocol, r.transport)).collect();
    (table.config, table.operation, rows)
}

/// The protocol tables in UCX's text (an endpoint's `ucx_info()`, or log lines of
/// `UCX_PROTO_INFO=y`), each as `doctor_protocols` gives one.
#[pyfunction]
pub(crate) fn doctor_tables(text: &str) -> Vec<PyProtocolTable> {
    doctor::protocol_tables(text).into_iter().map(to_py).collect()
}

/// The transports of an endpoint's data lanes in its `ucx_info()` text.
#[pyfunction]
pub(crate) fn doctor_lane_transports(info: &str) -> Vec<String> {
    doctor::lane_transports(info)
}

/// `{"thp_enabled": ..., "thp_shmem_enabled": ..., "ptrace_scope": ...,
/// "tcp_congestion_control": ...}`, each `None` where the kernel has no such setting.
#[pyfunction]
pub(crate) fn doctor_system(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (enabled, shmem) = doctor::transparent_huge_pages();
    let out = PyDict::new(py);
    out.set_item("thp_enabled", enabled)?;
    out.set_item("thp_shmem_enabled", shmem)?;
    out.set_item("ptrace_scope", doctor::ptrace_scope())?;
    out.set_item("tcp_congestion_control", doctor::tcp_congestion_control())?;
    Ok(out)
}

pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(doctor_ucx, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_transports, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_protocols, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_system, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_tables, m)?)?;
    m.add_function(wrap_pyfunction!(doctor_lane_transports, m)?)?;
    m.add("DOCTOR_SIZES", doctor::SIZES.to_vec())?;
    m.add("DOCTOR_TAG_SEND_HOST", doctor::TAG_SEND_HOST)?;
    Ok(())
}

//! UCX-Py's and UCXX's wire formats for `python/ucp`, from ucx-core's `wire` (their one home):
//! the peer-info handshake, the control message, the `send_obj` length prefix, user tags and
//! UCXX's multi-frame header. Python keeps only the flow. Bytes that do not decode raise
//! `ValueError` naming what was wrong, except a bad handshake checksum, which raises
//! `RuntimeError("Checksum invalid! ...")` as UCX-Py did.
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ucx_core::wire::{self, multi_frame, obj_len, CtrlMsg, Flavour, PeerInfo, UcxxPeerInfo, WireError};

fn error(e: WireError) -> PyErr {
    match e {
        WireError::ChecksumInvalid { .. } => PyRuntimeError::new_err(e.to_string()),
        _ => PyValueError::new_err(e.to_string()),
    }
}

fn flavour(name: &str) -> PyResult<Flavour> {
    match name {
        "ucx-py" => Ok(Flavour::UcxPy),
        "ucxx" => Ok(Flavour::Ucxx),
        _ => Err(PyValueError::new_err(format!("wire protocol {name:?} is not \"ucx-py\" or \"ucxx\""))),
    }
}

/// The peer info this side sends: UCX-Py's (`msg_tag`, `ctrl_tag`, checksum; 24 bytes) or
/// UCXX's (`msg_tag`, checksum; 16 bytes).
#[pyfunction]
pub(crate) fn peer_info_encode<'py>(
    py: Python<'py>,
    protocol: &str,
    msg_tag: u64,
    ctrl_tag: u64,
) -> PyResult<Bound<'py, PyBytes>> {
    Ok(match flavour(protocol)? {
        Flavour::UcxPy => PyBytes::new(py, &PeerInfo { msg_tag, ctrl_tag }.encode()),
        Flavour::Ucxx => PyBytes::new(py, &UcxxPeerInfo { msg_tag }.encode()),
    })
}

/// The peer's `(msg_tag, ctrl_tag)` from its peer info (`ctrl_tag` None for UCXX).
#[pyfunction]
pub(crate) fn peer_info_decode(protocol: &str, bytes: &[u8]) -> PyResult<(u64, Option<u64>)> {
    match flavour(protocol)? {
        Flavour::UcxPy => PeerInfo::decode(bytes).map(|p| (p.msg_tag, Some(p.ctrl_tag))).map_err(error),
        Flavour::Ucxx => UcxxPeerInfo::decode(bytes).map(|p| (p.msg_tag, None)).map_err(error),
    }
}

/// Which protocol a listener speaks, from the first 16 bytes it sent.
#[pyfunction]
pub(crate) fn peer_info_detect(first: &[u8]) -> PyResult<&'static str> {
    let first: &[u8; wire::DETECT_LEN] = first.try_into().map_err(|_| {
        PyValueError::new_err(format!("peer info detection needs {} bytes, got {}", wire::DETECT_LEN, first.len()))
    })?;
    Ok(match wire::detect(first) {
        Flavour::UcxPy => "ucx-py",
        Flavour::Ucxx => "ucxx",
    })
}

/// UCX-Py's control message `(opcode, close_after_n_recv)` as bytes.
#[pyfunction]
pub(crate) fn ctrl_msg_encode(py: Python<'_>, opcode: u64, close_after_n_recv: u64) -> Bound<'_, PyBytes> {
    PyBytes::new(py, &CtrlMsg { opcode, close_after_n_recv }.encode())
}

/// `(opcode, close_after_n_recv)` from a control message.
#[pyfunction]
pub(crate) fn ctrl_msg_decode(bytes: &[u8]) -> PyResult<(u64, u64)> {
    CtrlMsg::decode(bytes).map(|m| (m.opcode, m.close_after_n_recv)).map_err(error)
}

/// `send_obj`'s length prefix for `nbytes`.
#[pyfunction]
pub(crate) fn obj_len_encode(py: Python<'_>, nbytes: u64) -> Bound<'_, PyBytes> {
    PyBytes::new(py, &obj_len::encode(nbytes))
}

/// The length a `send_obj` prefix announces.
#[pyfunction]
pub(crate) fn obj_len_decode(bytes: &[u8]) -> PyResult<u64> {
    obj_len::decode(bytes).map_err(error)
}

/// The UCX tag of a user's tag on an endpoint: `hash64bits(base, py_hash)` (UCX-Py's rule,
/// `py_hash` being Python's `hash()` of the user's tag).
#[pyfunction]
pub(crate) fn user_tag(base: u64, py_hash: i64) -> u64 {
    wire::user_tag(base, py_hash)
}

/// UCXX's multi-frame headers for `frames` (`(is_cuda, nbytes)` pairs): one per 100 frames,
/// and one for none.
#[pyfunction]
pub(crate) fn multi_frame_headers<'py>(py: Python<'py>, frames: Vec<(bool, u64)>) -> Vec<Bound<'py, PyBytes>> {
    let frames: Vec<multi_frame::Frame> =
        frames.into_iter().map(|(cuda, len)| multi_frame::Frame { cuda, len }).collect();
    multi_frame::encode_all(&frames).iter().map(|h| PyBytes::new(py, h)).collect()
}

/// `(another_header_follows, [(is_cuda, nbytes), ...])` from one multi-frame header.
#[pyfunction]
pub(crate) fn multi_frame_decode(bytes: &[u8]) -> PyResult<(bool, Vec<(bool, u64)>)> {
    let (more, frames) = multi_frame::decode(bytes).map_err(error)?;
    Ok((more, frames.into_iter().map(|f| (f.cuda, f.len)).collect()))
}

/// Our `ctrl_tag` for a UCX-Py handshake whose `msg_tag` is `msg_tag`: it carries the mark
/// of the same-host single-copy path (`wire::single_copy`), or is `None` where the path is
/// turned off in this process (`UCXA_SINGLE_COPY=0`; the caller draws a random one then, as
/// UCX-Py does). Whether one endpoint offers the path is its `offers_single_copy`.
#[pyfunction]
pub(crate) fn single_copy_ctrl_tag(msg_tag: u64) -> Option<u64> {
    ucx_core::single_copy::enabled().then(|| wire::single_copy::marked_ctrl_tag(msg_tag))
}

/// Whether a peer's UCX-Py peer info carries the single-copy mark.
#[pyfunction]
pub(crate) fn single_copy_marked(msg_tag: u64, ctrl_tag: u64) -> bool {
    wire::single_copy::is_marked(msg_tag, ctrl_tag)
}

/// The smallest message sent by same-host single copy (`UCXA_SINGLE_COPY_MIN`).
#[pyfunction]
pub(crate) fn single_copy_threshold() -> usize {
    ucx_core::single_copy::threshold()
}

/// Bytes of huge-page staging blocks this process holds now, in use or idle
/// (`UCXA_SINGLE_COPY_STAGING` bounds them; a diagnostic, e.g. to tell the pool's growth from
/// a leak).
#[pyfunction]
pub(crate) fn single_copy_staging_bytes() -> usize {
    ucx_core::single_copy::staging::held()
}

/// How many fresh staging blocks the kernel gave 4 KiB pages instead of huge ones in this
/// process (each pauses staging for a second).
#[pyfunction]
pub(crate) fn single_copy_staging_refusals() -> u64 {
    ucx_core::single_copy::staging::refused_blocks()
}

/// A communicator's key for `single_copy_pair_tags`: a hash of its ranks' worker addresses
/// `table` (computed once per communicator).
#[pyfunction]
pub(crate) fn single_copy_table_key(table: Vec<Vec<u8>>) -> u64 {
    let table: Vec<&[u8]> = table.iter().map(Vec::as_slice).collect();
    wire::single_copy::table_key(&table)
}

/// The single-copy data tags of the link between ranks `me` and `peer` of the communicator of
/// key `key`: `(receive tag, send tag)`, for `Endpoint.start_single_copy`.
#[pyfunction]
pub(crate) fn single_copy_pair_tags(key: u64, me: usize, peer: usize) -> (u64, u64) {
    wire::single_copy::pair_tags(key, me, peer)
}

/// Registers this module's functions and sizes on the extension module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(single_copy_threshold, m)?)?;
    m.add_function(wrap_pyfunction!(single_copy_staging_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(single_copy_staging_refusals, m)?)?;
    m.add_function(wrap_pyfunction!(single_copy_table_key, m)?)?;
    m.add_function(wrap_pyfunction!(single_copy_pair_tags, m)?)?;
    m.add_function(wrap_pyfunction!(single_copy_ctrl_tag, m)?)?;
    m.add_function(wrap_pyfunction!(single_copy_marked, m)?)?;
    m.add_function(wrap_pyfunction!(peer_info_encode, m)?)?;
    m.add_function(wrap_pyfunction!(peer_info_decode, m)?)?;
    m.add_function(wrap_pyfunction!(peer_info_detect, m)?)?;
    m.add_function(wrap_pyfunction!(ctrl_msg_encode, m)?)?;
    m.add_function(wrap_pyfunction!(ctrl_msg_decode, m)?)?;
    m.add_function(wrap_pyfunction!(obj_len_encode, m)?)?;
    m.add_function(wrap_pyfunction!(obj_len_decode, m)?)?;
    m.add_function(wrap_pyfunction!(user_tag, m)?)?;
    m.add_function(wrap_pyfunction!(multi_frame_headers, m)?)?;
    m.add_function(wrap_pyfunction!(multi_frame_decode, m)?)?;
    m.add("PEER_INFO_DETECT_LEN", wire::DETECT_LEN)?;
    m.add("PEER_INFO_UCXPY_LEN", PeerInfo::LEN)?;
    m.add("CTRL_MSG_LEN", CtrlMsg::LEN)?;
    m.add("MULTI_FRAME_HEADER_LEN", multi_frame::LEN)?;
    m.add("MULTI_FRAME_MAX_FRAMES", multi_frame::FRAMES)?;
    Ok(())
}

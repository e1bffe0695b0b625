//! The communicator's protocol for `ucp.collective`: its tags and its bootstrap messages,
//! from ucx-core's `wire` (the same rules as ucx-async's `Communicator`, so Python and Rust
//! ranks can share a job). Values that do not fit raise `ValueError` naming them.
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ucx_core::wire::alltoallv::{self, Announce};
use ucx_core::wire::bootstrap::{self, Answer, Hello};
use ucx_core::wire::collective_tag;
use ucx_core::wire::shared_window;

use crate::errors::value_error;

/// The tag of a point-to-point message with user tag `tag` from rank `source`.
#[pyfunction]
pub(crate) fn collective_user_tag(tag: u64, source: usize) -> PyResult<u64> {
    collective_tag::user(tag, source).map_err(value_error)
}

/// The tag of batch `batch` of the communicator's operation number `seq` from rank `source`.
#[pyfunction]
pub(crate) fn collective_own_tag(seq: u32, source: usize, batch: usize) -> PyResult<u64> {
    collective_tag::own(seq, source, batch).map_err(value_error)
}

/// A rank's hello to rank 0 (its rank, the world size, whether its endpoints have peer error
/// handling, its worker address) as bytes.
#[pyfunction]
#[pyo3(signature = (rank, size, address, error_handling = true))]
pub(crate) fn bootstrap_hello<'py>(
    py: Python<'py>,
    rank: u32,
    size: u32,
    address: &[u8],
    error_handling: bool,
) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &Hello { rank, size, error_handling, address: address.to_vec() }.encode())
}

/// Rank 0's reading of a hello for its job of `size` ranks with `error_handling`: the hello's
/// `(rank, worker address)`, or `ValueError` saying what does not fit (the text to refuse
/// with, `bootstrap_refusal`). Whether the rank joined twice is the caller's to track.
#[pyfunction]
pub(crate) fn bootstrap_hello_admit<'py>(
    py: Python<'py>,
    bytes: &[u8],
    size: u32,
    error_handling: bool,
) -> PyResult<(u32, Bound<'py, PyBytes>)> {
    let h = Hello::decode(bytes).map_err(value_error)?;
    h.admit(size, error_handling).map_err(value_error)?;
    Ok((h.rank, PyBytes::new(py, &h.address)))
}

/// Rank 0's table of every rank's worker address (a list of bytes, by rank), as bytes.
#[pyfunction]
pub(crate) fn bootstrap_table<'py>(py: Python<'py>, addresses: Vec<Vec<u8>>) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &bootstrap::encode_table(&addresses))
}

/// Rank 0's refusal of the job, saying `why`, as bytes (sent instead of the table).
#[pyfunction]
pub(crate) fn bootstrap_refusal<'py>(py: Python<'py>, why: &str) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &bootstrap::encode_refusal(why))
}

/// Decodes rank 0's answer into a list of worker addresses (bytes), by rank; a refusal raises
/// `ValueError("rank 0 refused this rank: ...")`.
#[pyfunction]
pub(crate) fn bootstrap_table_decode<'py>(py: Python<'py>, bytes: &[u8]) -> PyResult<Vec<Bound<'py, PyBytes>>> {
    match bootstrap::decode_answer(bytes).map_err(value_error)? {
        Answer::Table(table) => Ok(table.iter().map(|a| PyBytes::new(py, a)).collect()),
        Answer::Refused(why) => Err(value_error(format!("rank 0 refused this rank: {why}"))),
    }
}

/// Whether ranks use peer error handling, from the value of `UCXA_ERROR_HANDLING` (`None` or
/// empty: unset): `peer` → True, `none` → False, else `ValueError` naming the value.
#[pyfunction]
#[pyo3(signature = (value))]
pub(crate) fn error_handling_parse(value: Option<&str>) -> PyResult<bool> {
    bootstrap::error_handling_parse(value)
        .map_err(|e| value_error(format!("{}={:?}: {e}", bootstrap::ERROR_HANDLING_VAR, value.unwrap_or_default())))
}

/// The rendezvous file's text for rank 0 listening at `ip`:`port`. Raises `ValueError` if
/// `ip` is not an IP address.
#[pyfunction]
pub(crate) fn rendezvous_text(ip: &str, port: u16) -> PyResult<String> {
    let ip: std::net::IpAddr =
        ip.parse().map_err(|_| pyo3::exceptions::PyValueError::new_err(format!("{ip:?} is not an IP address")))?;
    Ok(bootstrap::rendezvous_text(std::net::SocketAddr::new(ip, port)))
}

/// Rank 0's `(ip, port)` from a rendezvous file's text; `ValueError` if it is not one.
#[pyfunction]
pub(crate) fn rendezvous_parse(text: &str) -> PyResult<(String, u16)> {
    let addr = bootstrap::rendezvous_parse(text).map_err(value_error)?;
    Ok((addr.ip().to_string(), addr.port()))
}

/// alltoallv's announcement of a part of `length` bytes sent in batches of `batch` (0: one
/// message), in a world of `world` ranks: the announcement's bytes, and whether the part
/// itself must follow them in the same message (an inline part). Raises `ValueError` if the
/// batches do not fit the tag layout.
#[pyfunction]
pub(crate) fn alltoallv_announce(
    py: Python<'_>,
    length: u64,
    batch: u32,
    world: usize,
) -> PyResult<(Bound<'_, PyBytes>, bool)> {
    let a = Announce::new(length, batch).map_err(value_error)?;
    Ok((PyBytes::new(py, &a.encode()), a.is_inline(alltoallv::inline_max(world))))
}

/// The room to receive one announcement message in, in a world of `world` ranks.
#[pyfunction]
pub(crate) fn alltoallv_announce_room(world: usize) -> usize {
    alltoallv::LEN + alltoallv::inline_max(world)
}

/// Decodes an announcement message (the bytes received) in a world of `world` ranks into
/// `(length, batch, inline part or None)`. Raises `ValueError` if the message is not exactly
/// what its announcement says.
#[pyfunction]
pub(crate) fn alltoallv_announce_decode<'py>(
    py: Python<'py>,
    message: &[u8],
    world: usize,
) -> PyResult<(u64, u32, Option<Bound<'py, PyBytes>>)> {
    let inline_max = alltoallv::inline_max(world);
    let (a, data) = Announce::decode_message(message, inline_max).map_err(value_error)?;
    Ok((a.len, a.batch, a.is_inline(inline_max).then(|| PyBytes::new(py, data))))
}

/// The messages of a part of `length` bytes in batches of `batch`: `(tag batch, start, stop)`
/// for each, in order.
#[pyfunction]
pub(crate) fn alltoallv_messages(length: u64, batch: u32) -> PyResult<Vec<(usize, u64, u64)>> {
    let a = Announce::new(length, batch).map_err(value_error)?;
    Ok((0..a.messages()).map(|k| (Announce::tag_batch(k), a.range(k).start, a.range(k).end)).collect())
}

/// Whether the automatic choice sends a part of `length` bytes to a peer whose endpoint uses
/// `transports` through the bounce pool.
#[pyfunction]
pub(crate) fn alltoallv_auto_buffered(transports: Vec<String>, length: u64) -> bool {
    alltoallv::auto_buffered(&transports, length)
}

/// A device part's length as the first operation of a device `alltoallv` carries it.
#[pyfunction]
pub(crate) fn alltoallv_device_len<'py>(py: Python<'py>, length: u64) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &alltoallv::device_len_encode(length))
}

/// Decodes a device part's length a peer sent; `ValueError` if it is not one.
#[pyfunction]
pub(crate) fn alltoallv_device_len_decode(bytes: &[u8]) -> PyResult<u64> {
    alltoallv::device_len_decode(bytes).map_err(value_error)
}

/// The tag's batch number of a device part's one message.
#[pyfunction]
pub(crate) fn alltoallv_device_part_batch() -> usize {
    alltoallv::DEVICE_PART_BATCH
}

/// The pool's defaults: `(batch bytes, depth)`.
#[pyfunction]
pub(crate) fn alltoallv_bounce_defaults() -> (u32, usize) {
    (alltoallv::DEFAULT_BATCH, alltoallv::DEFAULT_DEPTH)
}

/// A rank's shared-window entry (its window's address and slot, and packed key), padded so
/// that a key of `longest_key` bytes would fit: every rank's entry has the same length.
#[pyfunction]
pub(crate) fn shared_window_entry<'py>(
    py: Python<'py>,
    address: u64,
    slot: u64,
    key: &[u8],
    longest_key: usize,
) -> Bound<'py, PyBytes> {
    let mut out = Vec::new();
    shared_window::Entry { address, slot, key }.encode_into(shared_window::ENTRY_HEAD + longest_key, &mut out);
    PyBytes::new(py, &out)
}

/// A received shared-window entry as `(address, slot, key)`; `ValueError` if it does not
/// parse.
#[pyfunction]
pub(crate) fn shared_window_entry_decode<'py>(
    py: Python<'py>,
    bytes: &[u8],
) -> PyResult<(u64, u64, Bound<'py, PyBytes>)> {
    let e = shared_window::Entry::decode(bytes).map_err(value_error)?;
    Ok((e.address, e.slot, PyBytes::new(py, e.key)))
}

/// A received note as `(length, in_window)`; `ValueError` if it does not parse.
#[pyfunction]
pub(crate) fn shared_window_note_decode(bytes: &[u8]) -> PyResult<(u64, bool)> {
    let n = shared_window::Note::decode(bytes).map_err(value_error)?;
    Ok((n.len, n.in_window))
}

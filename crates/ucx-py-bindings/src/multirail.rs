//! Multi-rail's protocol for `ucp.multirail`: the hello, the header, the part tags and the
//! arithmetic that cuts a message, from ucx-core's `wire::multirail` (the same rules as
//! ucx-async's `RailGroup`, so a Python group and a Rust group talk to each other). Bytes that
//! do not decode and values out of range raise `ValueError` naming them.
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ucx_core::wire::multirail::{self, Header, Hello, MAX_RAILS, MAX_STAGES};

use crate::errors::value_error;

/// A rail's hello: `(group, rail, rails)` as bytes.
#[pyfunction]
pub(crate) fn multirail_hello<'py>(py: Python<'py>, group: u64, rail: u16, rails: u16) -> Bound<'py, PyBytes> {
    PyBytes::new(py, &Hello { group, rail, rails }.encode())
}

/// Decodes a hello into `(group, rail, rails)`.
#[pyfunction]
pub(crate) fn multirail_hello_decode(bytes: &[u8]) -> PyResult<(u64, u16, u16)> {
    let h = Hello::decode(bytes).map_err(value_error)?;
    Ok((h.group, h.rail, h.rails))
}

/// A chunk as Python walks it: `(rail, part, offset, length)` (see `Header::layout`).
type Chunk = (usize, u16, u64, u64);

fn layout(header: &Header) -> Vec<Chunk> {
    header.layout().into_iter().map(|c| (c.rail, c.part, c.offset, c.len)).collect()
}

/// A message's header: its size, chunks per rail and each rail's share. Also returns its
/// chunks, `(rail, part, offset, length)` each.
#[pyfunction]
pub(crate) fn multirail_header<'py>(
    py: Python<'py>,
    total: u64,
    stages: u16,
    shares: Vec<u64>,
) -> PyResult<(Bound<'py, PyBytes>, Vec<Chunk>)> {
    if shares.is_empty() || shares.len() > usize::from(MAX_RAILS) || !(1..=MAX_STAGES).contains(&stages) {
        return Err(value_error(format!(
            "{} rails and {stages} stages: 1 to {MAX_RAILS} rails, 1 to {MAX_STAGES} stages",
            shares.len()
        )));
    }
    if shares.iter().try_fold(0u64, |a, &s| a.checked_add(s)) != Some(total) {
        return Err(value_error(format!("shares {shares:?} do not add up to {total}")));
    }
    let header = Header { total, stages, shares };
    Ok((PyBytes::new(py, &header.encode()), layout(&header)))
}

/// The size of a header for a group of `rails` rails.
#[pyfunction]
pub(crate) fn multirail_header_len(rails: u16) -> usize {
    Header::len_for(rails)
}

/// Decodes a header into `(total, shares, chunks)`, chunks as `multirail_header` gives them.
#[pyfunction]
pub(crate) fn multirail_header_decode(bytes: &[u8]) -> PyResult<(u64, Vec<u64>, Vec<Chunk>)> {
    let h = Header::decode(bytes).map_err(value_error)?;
    let chunks = layout(&h);
    Ok((h.total, h.shares, chunks))
}

/// The weights of the seed's split ratio (the share on the peer rails) over `rails` rails.
#[pyfunction]
pub(crate) fn multirail_ratio_weights(rails: usize, ratio: f64) -> PyResult<Vec<f64>> {
    multirail::ratio_weights(rails, ratio)
        .ok_or_else(|| value_error(format!("split ratio {ratio} is not in [0, 1] (and 0 with one rail)")))
}

/// `total` bytes cut by `weights` into one share per rail.
#[pyfunction]
pub(crate) fn multirail_shares(weights: Vec<f64>, total: u64) -> PyResult<Vec<u64>> {
    if weights.is_empty()
        || weights.len() > usize::from(MAX_RAILS)
        || weights.iter().any(|w| !w.is_finite() || *w < 0.0)
        || weights.iter().all(|w| *w == 0.0)
    {
        return Err(value_error(format!(
            "rail weights {weights:?}: 1 to {MAX_RAILS}, each finite and >= 0, not all 0"
        )));
    }
    Ok(multirail::shares(&weights, total))
}

/// The tag of part `part` (0: the header, `s + 1`: stage `s`) of message `message` on a rail
/// whose endpoint sends on `base`.
#[pyfunction]
pub(crate) fn multirail_part_tag(base: u64, message: u64, part: u16) -> u64 {
    multirail::part_tag(base, message, part)
}

//! `ucp.collective`'s calls in one crossing into native code where they can be: a barrier,
//! an allgather of up to 1 KiB (and its variant with a message per rank, `SharedWindow`'s
//! notes), and an `alltoallv` whose parts ride in their announcements or go direct (one
//! message from the caller's memory). Every send is posted (announcements are
//! eager: they finish here), then each peer's message is taken in turn while the worker spins
//! for the caller's budget, a direct part's receive posted as its announcement is read; then
//! the worker spins until what was posted is done. Whatever is still in flight when the
//! budget runs out, whatever failed, and a part this call does not receive itself (in
//! batches, or with no room for it) go back to Python as leftovers, which the communicator
//! settles as it settles any call (`Communicator._finish_native`, `Posted`): one home for
//! failures, cancellation and the refusal of a part too large to allocate, in Python.
//!
//! Why native: each Python step of such a call (a send, a receive, a decode, a copy) cost 1
//! to 3 µs, several times what UCX takes to move a small message over shared memory, and a
//! settle through the event loop tens (two ranks' alltoallv, `examples/python/alltoall.py`:
//! 1 KiB 19–20 µs as Python steps, 3.3–4.0 µs here; 1 MiB 331–389 µs, 200–303 µs here).
use std::sync::Arc;
use std::time::{Duration, Instant};

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyInt, PyList, PyString, PyTuple};
use ucx_core::wire::alltoallv::{self, Announce};
use ucx_core::wire::collective_tag;
use ucx_core::{MemoryType, RecvBuffer, SendBuffer};

use crate::buffer::PyBuf;
use crate::endpoint::Endpoint;
use crate::engine::Engine;
use crate::errors::value_error;
use crate::submit::{self, SpinUs};

/// Leftovers, as `(kind, rank, value)` tuples. Kinds:
/// - `"send"`: a send still in flight (value: its future);
/// - `"recv"`: an exact receive still in flight (its future);
/// - `"announcing"`: an announcement's receive still in flight (its future; the message
///   lands in the rank's room);
/// - `"announced"`: an announcement whose part neither came inside it nor was received here
///   (its length in the room): Python posts the part's receives;
/// - `"send_failed"`, `"recv_failed"`: the exception.
struct Leftovers<'py> {
    list: Bound<'py, PyList>,
    /// Operations still in flight: kind (`"send"` or `"recv"`), rank, future; kept apart
    /// until [`Leftovers::finish`].
    in_flight: Vec<(&'static str, usize, Bound<'py, PyAny>)>,
    /// The bytes those operations move, for the last spin's budget.
    in_flight_bytes: usize,
}

impl<'py> Leftovers<'py> {
    fn new(py: Python<'py>) -> Leftovers<'py> {
        Leftovers { list: PyList::empty(py), in_flight: Vec::new(), in_flight_bytes: 0 }
    }

    fn push(&self, kind: &'static str, rank: usize, value: Bound<'py, PyAny>) -> PyResult<()> {
        let py = self.list.py();
        let kind = PyString::intern(py, kind);
        self.list.append(PyTuple::new(py, [kind.into_any(), rank.into_pyobject(py)?.into_any(), value])?)
    }

    fn failed(&self, kind: &'static str, rank: usize, e: PyErr) -> PyResult<()> {
        let py = self.list.py();
        self.push(kind, rank, e.into_value(py).into_bound(py).into_any())
    }

    /// What became of a send (`kind` `"send"`) or an exact receive (`"recv"`) of `nbytes`
    /// posted to or from `rank`: nothing to keep if it finished at once.
    fn posted(
        &mut self,
        kind: &'static str,
        rank: usize,
        nbytes: usize,
        posted: PyResult<Option<Py<PyAny>>>,
    ) -> PyResult<()> {
        match posted {
            Ok(None) => Ok(()),
            Ok(Some(fut)) => {
                let py = self.list.py();
                self.in_flight.push((kind, rank, fut.into_bound(py)));
                self.in_flight_bytes += nbytes;
                Ok(())
            }
            Err(e) => self.failed(if kind == "send" { "send_failed" } else { "recv_failed" }, rank, e),
        }
    }

    /// The leftovers. Where only operations in flight are left (eager messages of several
    /// fragments, direct parts being read), the worker spins until they are done, for up to
    /// `spin_us` grown with the bytes they move (`submit::collective_budget_for`), and those that
    /// succeeded are dropped: handing them to Python would cost the call a settle through its
    /// event loop. Otherwise they go to Python at once, where what else is left must be
    /// posted without delay.
    fn finish(mut self, engine: &Arc<Engine>, spin_us: u64) -> PyResult<Bound<'py, PyList>> {
        let py = self.list.py();
        if self.list.is_empty() && !self.in_flight.is_empty() && spin_us > 0 {
            let budget = submit::collective_budget_for(spin_us, self.in_flight_bytes);
            let deadline = Instant::now() + Duration::from_micros(budget);
            loop {
                let mut all_done = true;
                for (_, _, fut) in &self.in_flight {
                    all_done &= fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()?;
                }
                let left = left_us(deadline);
                if all_done || left == 0 {
                    break;
                }
                let spin = py.allow_threads(|| engine.spin_until(left, || engine.has_news()));
                engine.drain(py);
                if spin.disarmed {
                    engine.needs_progress(py);
                }
            }
        }
        for (kind, rank, fut) in std::mem::take(&mut self.in_flight) {
            let ok = fut.call_method0(pyo3::intern!(py, "done"))?.is_truthy()?
                && !fut.call_method0(pyo3::intern!(py, "cancelled"))?.is_truthy()?
                && fut.call_method0(pyo3::intern!(py, "exception"))?.is_none();
            if !ok {
                self.push(kind, rank, fut)?;
            }
        }
        Ok(self.list)
    }
}

/// The time left of a spin budget that ends at `deadline`, in whole microseconds (0: none).
fn left_us(deadline: Instant) -> u64 {
    u64::try_from(deadline.saturating_duration_since(Instant::now()).as_micros()).unwrap_or(u64::MAX)
}

/// The largest message a small gather sends ([`collective_allgather`]; larger ones go through
/// Python's general path, where every receive is posted before anything waits): UCX sends it
/// eagerly everywhere, so the sends finish at once.
const SMALL_ALLGATHER_MAX: usize = 1024;

/// `allgather` of operation `seq` for rank `me`: `mine` to every other rank, then each rank's
/// into its `len(mine)` bytes of `out` in turn (this rank's own copied there), the worker
/// spinning for up to `spin_us` in all. With `barrier`, `mine` and `out` are empty and the
/// empty messages are the barrier; otherwise an empty `mine` sends nothing (as ucx-async's
/// `allgather`). Raises `ValueError` if `out` is not `world * len(mine)` bytes. Returns the
/// leftovers (see the module doc; empty: all done), or `None`, having done nothing, where
/// `mine` is larger than [`SMALL_ALLGATHER_MAX`] or either is not host memory.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn collective_allgather<'py>(
    py: Python<'py>,
    eps: &Bound<'py, PyAny>,
    me: usize,
    seq: u32,
    mine: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    spin_us: u64,
    barrier: bool,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let eps = items::<Endpoint>(eps)?;
    let Ok(src) = PyBuf::readable(mine) else { return Ok(None) };
    if src.memory_type() != MemoryType::Host || src.byte_len() > SMALL_ALLGATHER_MAX {
        return Ok(None);
    }
    let message = host_bytes(&src).to_vec();
    drop(src);
    small_exchange(py, &eps, me, seq, |_| &message, out, spin_us, barrier)
}

/// [`collective_allgather`] with a message of its own for each rank: `sends[r]` (host
/// buffers, all of one length, at most [`SMALL_ALLGATHER_MAX`] bytes) to rank `r`, and each
/// rank's message to this rank into its slice of `out` (this rank's own `sends[me]` copied
/// there). For small per-peer messages, such as `SharedWindow`'s notes, in one crossing.
/// `ValueError` if the lengths differ or are too large, or a send is not host memory.
#[pyfunction]
pub(crate) fn collective_exchange_small<'py>(
    py: Python<'py>,
    eps: &Bound<'py, PyAny>,
    me: usize,
    seq: u32,
    sends: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    spin_us: u64,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let eps = items::<Endpoint>(eps)?;
    let mut messages = Vec::with_capacity(eps.len());
    for item in sends.try_iter()? {
        let buf = PyBuf::readable(&item?)?;
        if buf.memory_type() != MemoryType::Host {
            return Err(PyValueError::new_err(format!("the message for rank {} is not host memory", messages.len())));
        }
        messages.push(host_bytes(&buf).to_vec());
    }
    let n = messages.first().map_or(0, Vec::len);
    if messages.len() != eps.len() || n > SMALL_ALLGATHER_MAX || messages.iter().any(|m| m.len() != n) {
        let lens: Vec<usize> = messages.iter().map(Vec::len).collect();
        return Err(PyValueError::new_err(format!(
            "{} ranks need one message each, of one length up to {SMALL_ALLGATHER_MAX} bytes; got lengths {lens:?}",
            eps.len()
        )));
    }
    small_exchange(py, &eps, me, seq, |r| &messages[r], out, spin_us, false)
}

/// The body of [`collective_allgather`] and [`collective_exchange_small`]: `message(r)` (all of
/// one length) to every other rank, then each rank's into its slice of `out` in turn, this
/// rank's own copied there. See [`collective_allgather`] for `barrier` and the result.
#[allow(clippy::too_many_arguments)]
fn small_exchange<'py, 'm>(
    py: Python<'py>,
    eps: &[Bound<'py, Endpoint>],
    me: usize,
    seq: u32,
    message: impl Fn(usize) -> &'m [u8],
    out: &Bound<'py, PyAny>,
    spin_us: u64,
    barrier: bool,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let world = eps.len();
    if me >= world {
        return Err(PyValueError::new_err(format!("rank {me} is not below the world size {world}")));
    }
    let Ok(mut dst) = PyBuf::writable(out) else { return Ok(None) };
    if dst.memory_type() != MemoryType::Host {
        return Ok(None);
    }
    let own = message(me);
    let n = own.len();
    if dst.len() != n * world {
        return Err(PyValueError::new_err(format!(
            "out holds {} bytes, {world} ranks x {n} need {}",
            dst.len(),
            n * world
        )));
    }
    let mut left = Leftovers::new(py);
    if n == 0 && !barrier {
        return Ok(Some(left.list));
    }
    let deadline = Instant::now() + Duration::from_micros(spin_us);
    let tags = Tags::of(seq, me, world, 0)?;
    for (r, ep) in eps.iter().enumerate() {
        if r == me {
            continue;
        }
        left.posted("send", r, n, ep.get().send_bytes_checked(py, message(r).to_vec(), tags.mine))?;
    }
    // This rank's own part: copied, not sent to itself.
    if n > 0 {
        // SAFETY: `dst` holds `n * world` writable bytes (checked above) and `own` `n`
        // readable ones, a copy of the caller's (so the two never overlap); the export is held
        // and no Python code runs meanwhile.
        unsafe { std::ptr::copy_nonoverlapping(own.as_ptr(), dst.as_mut_ptr().add(me * n), n) };
    }
    for (r, ep) in eps.iter().enumerate() {
        if r == me {
            continue;
        }
        // In range: `out` holds `n * world` bytes (checked above).
        let part = PyBuf::writable(out)?
            .narrow(r * n, n)
            .ok_or_else(|| PyValueError::new_err(format!("out has no room for rank {r}'s {n} bytes")));
        let posted = part.and_then(|part| ep.get().recv_into_checked(py, part, tags.theirs[r], left_us(deadline)));
        left.posted("recv", r, n, posted)?;
    }
    drop(dst);
    crate::buffer::release_deferred(py);
    Ok(Some(left.finish(&eps[me].get().engine, spin_us)?))
}

/// The tags of one collective operation's batch: this rank's, and each rank's by rank.
struct Tags {
    mine: u64,
    theirs: Vec<u64>,
}

impl Tags {
    fn of(seq: u32, me: usize, world: usize, batch: usize) -> PyResult<Tags> {
        let mine = collective_tag::own(seq, me, batch).map_err(value_error)?;
        let theirs =
            (0..world).map(|r| collective_tag::own(seq, r, batch)).collect::<Result<_, _>>().map_err(value_error)?;
        Ok(Tags { mine, theirs })
    }
}

/// `alltoallv` of operation `seq` for rank `me` whose parts go inline or direct: sends every
/// announcement (a part of up to `inline_max(world)` bytes inside it; with `direct`, a larger
/// part as one message from its own memory right behind it), copies `parts[me]` into
/// `out[me]`, then takes each peer's announcement in turn into `rooms[r]` (a bytearray of the
/// announcement room): an inline part is copied into `out[r]`, a direct one received into it
/// (resized first); the worker spins for up to `spin_us` for the announcements (after the
/// own copy), then until what was posted is done. `out` becomes a list of one bytearray per
/// rank (kept where it already holds one: its memory is reused). Returns the leftovers (see
/// the module doc; empty: all done). Returns `None`, having done nothing, where a peer's part
/// is larger than the inline maximum and not `direct` (the caller's promise that no part goes
/// through the bounce pool), or a part is not host memory: the caller then takes its general
/// path.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub(crate) fn collective_alltoallv<'py>(
    py: Python<'py>,
    eps: &Bound<'py, PyAny>,
    me: usize,
    seq: u32,
    parts: &Bound<'py, PyAny>,
    out: &Bound<'py, PyList>,
    rooms: &Bound<'py, PyAny>,
    spin_us: u64,
    direct: bool,
) -> PyResult<Option<Bound<'py, PyList>>> {
    let (eps, parts, rooms) = (items::<Endpoint>(eps)?, items::<PyAny>(parts)?, items::<PyByteArray>(rooms)?);
    let world = eps.len();
    if parts.len() != world || rooms.len() != world || me >= world {
        return Err(PyValueError::new_err(format!(
            "{world} endpoints, {} parts and {} rooms for rank {me}: one of each per rank",
            parts.len(),
            rooms.len()
        )));
    }
    let inline_max = alltoallv::inline_max(world);
    let mut bufs = Vec::with_capacity(world);
    for (r, p) in parts.iter().enumerate() {
        // What the general path would refuse or treat otherwise is left to it, untouched.
        let Ok(buf) = PyBuf::readable(p) else { return Ok(None) };
        if buf.memory_type() != MemoryType::Host || (r != me && !direct && buf.byte_len() > inline_max) {
            return Ok(None);
        }
        bufs.push(buf);
    }
    let tags = Tags::of(seq, me, world, 0)?;
    let room_len = alltoallv::LEN + inline_max;
    if let Some(r) = rooms.iter().position(|room| room.len() != room_len) {
        return Err(PyValueError::new_err(format!("room {r} holds {} bytes, not {room_len}", rooms[r].len())));
    }
    let targets = bytearrays(py, out, world)?;

    let mut left = Leftovers::new(py);
    for (r, ep) in eps.iter().enumerate() {
        if r == me {
            continue;
        }
        let part = host_bytes(&bufs[r]);
        let announce = Announce::new(part.len() as u64, 0).map_err(value_error)?;
        let inline = if announce.is_inline(inline_max) { part.len() } else { 0 };
        let mut message = Vec::with_capacity(alltoallv::LEN + inline);
        announce.encode_message(part, inline_max, &mut message);
        let sent = ep.get().send_bytes_checked(py, message, tags.mine);
        let failed = sent.is_err();
        left.posted("send", r, alltoallv::LEN + inline, sent)?;
        if failed || announce.is_inline(inline_max) || announce.messages() == 0 {
            continue;
        }
        // A direct part: one message (batch 0) from the caller's memory, right behind.
        debug_assert_eq!(announce.messages(), 1);
        let tag = collective_tag::own(seq, me, Announce::tag_batch(0)).map_err(value_error)?;
        left.posted("send", r, part.len(), ep.get().tag_send_checked(py, &parts[r], tag, SpinUs::Fixed(0), false))?;
    }
    if let Err(e) = fill(&targets[me], host_bytes(&bufs[me])) {
        left.failed("recv_failed", me, e)?;
    }
    drop(bufs);
    crate::buffer::release_deferred(py);
    // The budget is for waiting on the peers: it starts after the own part's copy, which
    // for a 4 MiB part alone outlasts it, and grows with what this rank sends (the peers'
    // parts are of a like size in the calls that matter; their sizes are not known yet).
    let budget = submit::collective_budget_for(spin_us, left.in_flight_bytes);
    let deadline = Instant::now() + Duration::from_micros(budget);
    for (r, ep) in eps.iter().enumerate() {
        if r == me {
            continue;
        }
        let got = match ep.get().tag_recv_checked(
            py,
            rooms[r].as_any(),
            tags.theirs[r],
            SpinUs::Fixed(left_us(deadline)),
            true,
            false,
        ) {
            Ok(got) => got.map(|g| g.into_bound(py)),
            Err(e) => {
                left.failed("recv_failed", r, e)?;
                continue;
            }
        };
        // An up-to receive hands back its length, or its future: never nothing.
        let Some(got) = got else {
            left.failed(
                "recv_failed",
                r,
                PyValueError::new_err(format!("rank {r}'s announcement receive gave no length")),
            )?;
            continue;
        };
        if !got.is_instance_of::<PyInt>() {
            left.push("announcing", r, got)?;
            continue;
        }
        let n: usize = got.extract()?;
        // SAFETY: the GIL is held and no Python code runs while the slice lives, so nothing
        // resizes or writes the room meanwhile; UCX finished writing it (the receive is done).
        let message = unsafe { rooms[r].as_bytes() }.get(..n).unwrap_or_default();
        match Announce::decode_message(message, inline_max) {
            Err(e) => {
                left.failed("recv_failed", r, PyValueError::new_err(format!("rank {r} sent a bad announcement: {e}")))?
            }
            Ok((a, data)) if a.is_inline(inline_max) => {
                if let Err(e) = fill(&targets[r], data) {
                    left.failed("recv_failed", r, e)?;
                }
            }
            // A direct part (one message) into `out[r]`; a part in batches, or one there is
            // no room for, is Python's to receive (`Communicator._take_announcement`).
            Ok((a, _)) if a.batch == 0 && usize::try_from(a.len).is_ok_and(|n| targets[r].resize(n).is_ok()) => {
                let tag = collective_tag::own(seq, r, Announce::tag_batch(0)).map_err(value_error)?;
                let into = PyBuf::writable(targets[r].as_any());
                let posted = into.and_then(|into| ep.get().recv_into_checked(py, into, tag, 0));
                left.posted("recv", r, targets[r].len(), posted)?;
            }
            Ok(_) => left.push("announced", r, got)?,
        }
    }
    Ok(Some(left.finish(&eps[me].get().engine, spin_us)?))
}

/// The items of a list or tuple (any other sequence as pyo3 extracts it), each of type `T`.
/// By index: pyo3's `Vec` extraction goes through Python's generic iterator. Five alternating
/// pairs of `scripts/bench_collective_overhead.py` on 1 rank: `alltoallv_into` 1.24–1.26 ->
/// 1.09–1.15 µs, barrier 0.86–0.88 -> 0.78–0.84 µs (outliers aside).
fn items<'py, T: pyo3::type_object::PyTypeCheck>(seq: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, T>>> {
    let typed = |item: Bound<'py, PyAny>| item.downcast_into::<T>().map_err(PyErr::from);
    if let Ok(list) = seq.downcast::<PyList>() {
        return list.iter().map(typed).collect();
    }
    if let Ok(tuple) = seq.downcast::<PyTuple>() {
        return tuple.iter().map(typed).collect();
    }
    seq.extract::<Vec<Bound<'py, PyAny>>>()?.into_iter().map(typed).collect()
}

/// The bytes of a host buffer.
fn host_bytes(buf: &PyBuf) -> &[u8] {
    if buf.byte_len() == 0 {
        return &[];
    }
    // SAFETY: host memory of `byte_len` bytes, kept alive (and exported, so not resized) by
    // `buf` for as long as the slice borrows it.
    unsafe { std::slice::from_raw_parts(buf.as_ptr(), buf.byte_len()) }
}

/// Makes `out` a list of `world` bytearrays, keeping those it already holds.
fn bytearrays<'py>(py: Python<'py>, out: &Bound<'py, PyList>, world: usize) -> PyResult<Vec<Bound<'py, PyByteArray>>> {
    if out.len() > world {
        out.del_slice(world, out.len())?;
    }
    let mut targets = Vec::with_capacity(world);
    for r in 0..world {
        let kept = if r < out.len() { out.get_item(r)?.downcast_into::<PyByteArray>().ok() } else { None };
        let b = match kept {
            Some(b) => b,
            None => {
                let b = PyByteArray::new(py, &[]);
                if r < out.len() {
                    out.set_item(r, &b)?;
                } else {
                    out.append(&b)?;
                }
                b
            }
        };
        targets.push(b);
    }
    Ok(targets)
}

/// Makes `target` exactly `data` (resized in place: its memory is reused once it has grown).
fn fill(target: &Bound<'_, PyByteArray>, data: &[u8]) -> PyResult<()> {
    if target.len() != data.len() {
        target.resize(data.len())?;
    }
    if data.is_empty() {
        return Ok(());
    }
    // SAFETY: the GIL is held and no Python code runs while the slice lives; `data` may be
    // the same memory (a rank's own part passed as its output), so the copy allows overlap.
    unsafe {
        let dst = target.as_bytes_mut();
        std::ptr::copy(data.as_ptr(), dst.as_mut_ptr(), data.len());
    }
    Ok(())
}

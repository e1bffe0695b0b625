//! `Endpoint`: a UCX endpoint as UCX-Py's `UCXEndpoint` — tag, stream and active-message
//! operations returning futures, peer-failure state (`is_alive`, `raise_on_error`), the close
//! callback, and `close()`, which cancels what is in flight on it and closes it.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use ucx_core::{wire, AmSendOptions, CloseMode, EndpointParams, MemoryType, Owned, SendBuffer, Status, Submitted};

use crate::buffer::PyBuf;
use crate::engine::{lock, Engine, EpShared, Meta, Name};
use crate::errors::{self, End, Kind};
use crate::worker::meta;

/// How long `close()` waits for a flushing close before leaving it to finish in the background.
/// It blocks the event loop meanwhile: with 5 s, a soak whose clients were killed at random
/// (some mid-handshake, whose failure UCX had not reported yet) stalled the server for
/// seconds per close, and other clients' handshakes timed out.
const FLUSH_CLOSE_LIMIT: Duration = Duration::from_millis(100);

#[pyclass(frozen, weakref, module = "ucp._ucx_async")]
pub(crate) struct Endpoint {
    pub(crate) engine: Arc<Engine>,
    pub(crate) shared: Arc<EpShared>,
}

impl Endpoint {
    /// Creates an endpoint with `make`, wiring UCX's error callback to the engine.
    pub(crate) fn create(
        py: Python<'_>,
        engine: &Arc<Engine>,
        error_handling: bool,
        make: impl FnOnce(EndpointParams) -> ucx_core::Result<ucx_core::Endpoint>,
    ) -> PyResult<Endpoint> {
        let key = engine.next_key();
        let events = engine.events.clone();
        let params = EndpointParams::default()
            .error_handling(error_handling)
            .on_error(move |status| lock(&events).ep_errors.push((key, status)));
        let ep = make(params).map_err(|e| errors::from_core(py, &e))?;
        let shared = Arc::new(EpShared {
            key,
            handle: ep.id(),
            ep: Mutex::new(Some(ep)),
            error_handling,
            failure: Mutex::new(None),
            closed_because: Mutex::new(None),
            closing: AtomicBool::new(false),
            close_callback: Mutex::new(None),
        });
        lock(&engine.endpoints).insert(key, shared.clone());
        Ok(Endpoint { engine: engine.clone(), shared })
    }

    /// The UCX endpoint, or `UCXCloseError` once closed (saying why, if we closed it).
    pub(crate) fn ep(&self, py: Python<'_>) -> PyResult<ucx_core::Endpoint> {
        lock(&self.shared.ep).clone().ok_or_else(|| {
            let msg = match *lock(&self.shared.closed_because) {
                Some(why) => format!("Endpoint closed: {why}"),
                None => "Endpoint closed".to_string(),
            };
            errors::new(py, Kind::EndpointClosed, msg)
        })
    }

    fn name(&self, what: &'static str, tag: Option<u64>, nbytes: usize, given: Option<String>) -> Name {
        Name::or_op(given, what, self.shared.handle, tag, nbytes)
    }
}

/// An active message's data with UCX-Py's 4-byte memory-type header.
struct AmOut {
    header: [u8; wire::am_header::LEN],
    data: PyBuf,
}

#[pymethods]
impl Endpoint {
    /// The `ucp_ep_h`, as an int (stays the same after close).
    #[getter]
    fn handle(&self) -> usize {
        self.shared.handle
    }

    /// Whether the endpoint is open (not closed with `close()`).
    #[getter]
    fn initialized(&self) -> bool {
        lock(&self.shared.ep).is_some()
    }

    /// Whether UCX reported the peer failed (always true without error handling).
    fn is_alive(&self) -> bool {
        !self.shared.error_handling || self.failure().is_none()
    }

    /// Raises the failure UCX reported for the peer, if any (`UCXConnectionReset` for a reset,
    /// `UCXError("Endpoint 0x.. error: {status}")` otherwise).
    fn raise_on_error(&self, py: Python<'_>) -> PyResult<()> {
        match self.failure() {
            None => Ok(()),
            Some(s) => {
                let msg = format!("Endpoint {:#x} error: {s}", self.shared.handle);
                Err(errors::new(py, Kind::PeerFailure, msg))
            }
        }
    }

    /// Sets the zero-argument callable run (at most once) when the peer fails or the endpoint
    /// is closed.
    fn set_close_callback(&self, callback: Py<PyAny>) {
        *lock(&self.shared.close_callback) = Some(callback);
    }

    /// Marks the endpoint as closing by this side (before `Endpoint.close` tells the peer): a
    /// reset the peer answers with then fails pending operations as our close
    /// (`UCXEndpointClosed`), not as a peer failure.
    fn begin_close(&self) {
        self.shared.closing.store(true, Ordering::Release);
    }

    /// Closes the endpoint because a message it received went to a receive whose caller
    /// cancelled it (`Endpoint.recv` sees this when the cancel reached its task after the
    /// message did): later operations raise `UCXCloseError` saying so.
    fn close_for_lost_message(&self, py: Python<'_>) {
        self.engine.close_for_lost_message(py, self.shared.key);
    }

    /// `ucp_ep_print_info`.
    fn info(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.ep(py)?.info())
    }

    /// `(local, peer)` socket addresses as `(host, port)` tuples, for client-server endpoints.
    #[allow(clippy::type_complexity)]
    fn socket_addrs(&self, py: Python<'_>) -> PyResult<(Option<(String, u16)>, Option<(String, u16)>)> {
        let (l, p) = self.ep(py)?.socket_addrs().map_err(|e| errors::from_core(py, &e))?;
        let f = |a: Option<std::net::SocketAddr>| a.map(|a| (a.ip().to_string(), a.port()));
        Ok((f(l), f(p)))
    }

    /// Sends `buffer` with `tag`.
    #[pyo3(signature = (buffer, tag, on_done = None, name = None))]
    fn tag_send(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.send_spinning(py, buffer, tag, on_done, name, 0)
    }

    /// Receives (worker-wide, as UCX-Py) a message with exactly `tag` into `buffer`, which it
    /// must fill exactly; closing or losing this endpoint cancels it.
    #[pyo3(signature = (buffer, tag, on_done = None, name = None))]
    fn tag_recv(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.recv_spinning(py, buffer, tag, on_done, name, 0)
    }

    /// `Endpoint.send`'s checks and `tag_send` in one call: raises the peer's failure
    /// (as `raise_on_error`), then `UCXCloseError` if closed, else sends, progressing for up
    /// to `spin_us` before it returns a future (a rendezvous send finishes once the peer has
    /// fetched the data; see `worker::tag_recv`).
    #[pyo3(signature = (buffer, tag, spin_us = 0))]
    fn tag_send_checked(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        spin_us: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.raise_on_error(py)?;
        self.send_spinning(py, buffer, tag, None, None, spin_us)
    }

    /// `Endpoint.recv`'s checks and `tag_recv` in one call: unless a message with `tag` is
    /// already waiting (it can be received after the peer closed, not after we closed on a
    /// lost message), raises the peer's failure,
    /// then `UCXCloseError` if closed; then receives, progressing for up to `spin_us` before
    /// it returns a future (see `worker::tag_recv`).
    #[pyo3(signature = (buffer, tag, spin_us = 0))]
    fn tag_recv_checked(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        spin_us: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        // After a close that lost a message, a message waiting now may be the one after it:
        // never hand that out.
        let lost_one = lock(&self.shared.closed_because).is_some();
        if lost_one || self.engine.worker.tag_probe(tag, ucx_core::FULL_MASK).is_none() {
            self.raise_on_error(py)?;
            self.ep(py)?;
        }
        self.recv_spinning(py, buffer, tag, None, None, spin_us)
    }

    /// Sends `buffer` on the stream API.
    #[pyo3(signature = (buffer, on_done = None, name = None))]
    fn stream_send(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.ep(py)?;
        let buf = PyBuf::readable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let name = self.name("Stream send", None, buf.len(), name);
        let submitted = Owned::submit(Box::new(buf), false, |b| ep.stream_send(&*b));
        self.engine.track(py, submitted, on_done, meta(name, None, Some(self.shared.key)))
    }

    /// Receives exactly `len(buffer)` bytes from the stream API.
    #[pyo3(signature = (buffer, on_done = None, name = None))]
    fn stream_recv(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.ep(py)?;
        let buf = PyBuf::writable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let nbytes = buf.len();
        let name = self.name("Stream recv", None, nbytes, name);
        let submitted = Owned::submit(Box::new(buf), true, |b| ep.stream_recv(b));
        let meta = Meta { expect_len: Some(nbytes), ep: Some(self.shared.key), name, stream_recv: true, value: None };
        self.engine.track(py, submitted, on_done, meta)
    }

    /// Sends `buffer` as an active message to UCX-Py's handler, with its memory type.
    #[pyo3(signature = (buffer, on_done = None, name = None))]
    fn am_send(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.ep(py)?;
        let data = PyBuf::readable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let memory_type = if data.memory_type() == MemoryType::Cuda { MemoryType::Cuda } else { MemoryType::Host };
        let name = self.name("AM send", None, data.len(), name);
        let out = AmOut { header: wire::am_header::encode(memory_type.raw() as i32), data };
        let options = AmSendOptions { reply: true, ..AmSendOptions::default() };
        let submitted = Owned::submit(Box::new(out), false, |o| {
            ep.am_send(wire::am_header::UCXPY_AM_ID, &o.header, &o.data, options)
        });
        self.engine.track(py, submitted, on_done, meta(name, None, Some(self.shared.key)))
    }

    /// Receives the next active message from this endpoint's peer: a future of the object the
    /// registered allocator made (or None and `on_done(obj, exc)`).
    #[pyo3(signature = (on_done = None))]
    fn am_recv(&self, py: Python<'_>, on_done: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        crate::am::recv(&self.engine, py, self.shared.handle, on_done)
    }

    /// Puts back an active message that `am_recv` took but its caller never saw (cancelled as
    /// the message arrived): the next `am_recv` gets it, before anything that came later.
    fn am_requeue(&self, py: Python<'_>, message: Py<PyAny>) {
        crate::am::requeue(&self.engine, py, self.shared.handle, message);
    }

    /// Whether an active message from the peer is waiting to be received.
    fn am_probe(&self) -> bool {
        crate::am::probe(&self.engine, self.shared.handle)
    }

    /// Unpacks a peer's packed remote key for this endpoint.
    fn unpack_rkey(&self, py: Python<'_>, packed: &[u8]) -> PyResult<crate::rma::RemoteKey> {
        self.unpack_rkey_impl(py, packed)
    }

    /// Writes `buffer` to the peer's memory at `remote_addr` (`ucp_put_nbx`).
    #[pyo3(signature = (buffer, remote_addr, rkey, on_done = None))]
    fn put(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        remote_addr: u64,
        rkey: &crate::rma::RemoteKey,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.put_impl(py, buffer, remote_addr, rkey, on_done)
    }

    /// Reads the peer's memory at `remote_addr` into `buffer` (`ucp_get_nbx`).
    #[pyo3(signature = (buffer, remote_addr, rkey, on_done = None))]
    fn get(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        remote_addr: u64,
        rkey: &crate::rma::RemoteKey,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.get_impl(py, buffer, remote_addr, rkey, on_done)
    }

    /// Flushes the endpoint (`ucp_ep_flush_nbx`).
    #[pyo3(signature = (on_done = None))]
    fn flush(&self, py: Python<'_>, on_done: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.ep(py)?;
        let submitted = Owned::submit(Box::new(ep), false, |e| e.flush());
        self.engine.track(py, submitted, on_done, meta(Name::Given("ep flush".into()), None, Some(self.shared.key)))
    }

    /// Closes the endpoint without telling the peer (UCX-Py's `abort`): cancels its in-flight
    /// operations and waiting active-message receives, closes it (flushing if the peer is
    /// healthy, by force otherwise), and runs the close callback. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        close_shared(&self.engine, py, &self.shared, None)
    }
}

/// Closes an endpoint (see `Endpoint.close`); `why`, when we close it on our own, is what later
/// operations on it report.
pub(crate) fn close_shared(
    engine: &Engine,
    py: Python<'_>,
    shared: &EpShared,
    why: Option<&'static str>,
) -> PyResult<()> {
    let Some(ep) = lock(&shared.ep).take() else { return Ok(()) };
    if why.is_some() {
        *lock(&shared.closed_because) = why;
    }
    engine.cancel_ops_of(shared.key, End::Closed);
    crate::am::fail_waiting(engine, py, shared.handle, End::Closed);
    let force = shared.error_handling && (ep.status().is_err() || lock(&shared.failure).is_some() || why.is_some());
    let mode = if force { CloseMode::Force } else { CloseMode::Flush };
    let closed = py.allow_threads(|| close_within(&ep, mode));
    // Deliver the cancellations now, so awaiting tasks see them on their next step.
    engine.progress(py);
    // What the cancel and the close did not end waits for a message tail that can no longer
    // come (see `Engine::fail_stuck_ops_of`).
    engine.fail_stuck_ops_of(py, shared.key, End::Closed);
    lock(&engine.endpoints).remove(&shared.key);
    crate::am::forget(engine, shared.handle);
    shared.run_close_callback(py);
    closed.map_err(|e| errors::new(py, Kind::Error, format!("Error while closing endpoint: {e}")))
}

impl Endpoint {
    /// A tag send, spinning up to `spin_us` if UCX did not finish it at once.
    fn send_spinning(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
        spin_us: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.ep(py)?;
        let buf = PyBuf::readable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let name = self.name("Send", Some(tag), buf.len(), name);
        let meta = meta(name, None, Some(self.shared.key));
        self.engine.track_spinning(py, ep.tag_send_owned(buf, tag), on_done, meta, spin_us)
    }

    /// A worker-wide receive of exactly `tag`, registered on this endpoint, spinning up to
    /// `spin_us` if UCX did not finish it at once.
    fn recv_spinning(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
        spin_us: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        let shared = Some(&*self.shared);
        let pending = crate::worker::tag_recv(
            &self.engine,
            py,
            buffer,
            tag,
            ucx_core::FULL_MASK,
            on_done,
            shared,
            name,
            spin_us,
        )?;
        if pending.is_some() {
            self.fail_if_peer_gone(py);
        }
        Ok(pending)
    }

    /// Fails this endpoint's unfinished operations if its peer has failed. A receive posted
    /// after that can only be matched to a message that had already arrived, and UCX may
    /// match it to the head of a multi-fragment eager message whose tail died with the peer:
    /// the endpoint's failure has already been handled, so nothing else would ever end it.
    /// The worker is progressed first, so fragments UCX holds but has not processed yet can
    /// still complete it.
    fn fail_if_peer_gone(&self, py: Python<'_>) {
        if self.failure().is_none() {
            return;
        }
        self.engine.progress(py);
        if let Some(status) = self.failure() {
            self.engine.fail_stuck_ops_of(py, self.shared.key, End::PeerFailed(status));
        }
    }

    fn failure(&self) -> Option<Status> {
        if let Some(s) = *lock(&self.shared.failure) {
            return Some(s);
        }
        let ep = lock(&self.shared.ep).clone();
        ep.and_then(|ep| ep.status().err().map(|e| e.status()))
    }
}

impl Drop for Endpoint {
    /// Garbage collection closes an endpoint that is still open, as UCX-Py's finalizer did:
    /// its operations are canceled and its close callback runs.
    fn drop(&mut self) {
        if lock(&self.shared.ep).is_none() {
            return;
        }
        Python::with_gil(|py| {
            if let Err(e) = self.close(py) {
                e.write_unraisable(py, None);
            }
        });
    }
}

/// Closes `ep` with `mode`, forcing it if a flushing close has not finished in time.
fn close_within(ep: &ucx_core::Endpoint, mode: CloseMode) -> ucx_core::Result<()> {
    match ep.close(mode)? {
        Submitted::Done(_) => Ok(()),
        Submitted::InFlight(req) => {
            let deadline = Instant::now() + FLUSH_CLOSE_LIMIT;
            while !req.is_complete() && Instant::now() < deadline {
                ep.worker().progress();
            }
            if !req.is_complete() {
                // UCX cannot force a close already under way; let it finish in the background
                // (queued sends still reach a live peer).
                // SAFETY: the close request borrows the endpoint (UCX may call its error
                // handler until the close ends); the keepalive owns a handle to it.
                unsafe { req.detach_unchecked(Box::new(ep.clone()), false) };
                return Ok(());
            }
            match req.wait() {
                // A peer already gone is what closing is for, not a failure to report.
                Err(e)
                    if matches!(
                        e.status(),
                        Status::ConnectionReset | Status::EndpointTimeout | Status::NotConnected | Status::Unreachable
                    ) =>
                {
                    Ok(())
                }
                r => r.map(drop),
            }
        }
    }
}

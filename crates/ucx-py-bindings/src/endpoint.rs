//! `Endpoint`: a UCX endpoint as UCX-Py's `UCXEndpoint` — tag, stream, active-message and RMA
//! operations returning futures, peer-failure state (`is_alive`, `raise_on_error`), the close
//! callback, and `close()`. Its state shared with the engine and UCX callbacks, and closing,
//! live in `endpoint_life`.
use std::sync::atomic::Ordering;
use std::sync::Arc;

use pyo3::prelude::*;
use ucx_core::single_copy::Receive;
use ucx_core::{wire, AmSendOptions, EndpointParams, MemoryType, Owned, SendBuffer, FULL_MASK};

use crate::am::AmQueues;
use crate::buffer::{PyBuf, PyBufMut};
use crate::endpoint_life::EpShared;
use crate::engine::{Engine, OpOwner};
use crate::errors::{self, End, Kind};
use crate::outcome::{Expect, Name};
use crate::rma::RemoteKey;
use crate::single_copy;
use crate::submit::{self, SpinBudget, SpinUs, Submission};
use crate::sync::lock;

#[pyclass(frozen, weakref, module = "ucp._ucx_async")]
pub(crate) struct Endpoint {
    pub(crate) engine: Arc<Engine>,
    pub(crate) shared: Arc<EpShared>,
}

/// A worker-wide tag receive that must fill its buffer exactly (`Worker.tag_recv`,
/// `Endpoint.tag_recv` and `recv`).
pub(crate) struct TagRecv<'a> {
    pub(crate) tag: u64,
    /// The message may be shorter than the buffer; the receive then resolves to its length
    /// (`Endpoint.tag_recv_checked`'s `up_to`).
    pub(crate) up_to: bool,
    pub(crate) mask: u64,
    /// The endpoint whose closing or failure cancels the receive.
    pub(crate) ep: Option<&'a Arc<EpShared>>,
    pub(crate) name: Option<String>,
    /// How long to progress the worker (GIL released) before handing back a future.
    pub(crate) spin_us: SpinUs,
}

impl TagRecv<'_> {
    /// Posts the receive into `buffer`. With a spin, a receive UCX did not finish at once
    /// progresses the worker first: a reply that lands meanwhile completes the call inline.
    pub(crate) fn post(
        self,
        engine: &Arc<Engine>,
        buffer: &Bound<'_, PyAny>,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let buf = PyBuf::writable(buffer)?.check_cuda(engine.cuda_support)?;
        self.post_buf(engine, buffer.py(), buf, on_done)
    }

    /// [`TagRecv::post`] into memory already taken in (checked writable, CUDA ready).
    pub(crate) fn post_buf(
        self,
        engine: &Arc<Engine>,
        py: Python<'_>,
        buf: PyBufMut,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let nbytes = buf.len();
        let spin = SpinBudget { base: self.spin_us, nbytes, memory: buf.memory_type() };
        let name = Name::or_op(self.name, "Recv", self.ep.map_or(0, |e| e.handle), Some(self.tag), nbytes);
        let expect = Expect { up_to: self.up_to, ..Expect::new(name, Some(nbytes)) };
        let owner = self.ep.map(|e| e.clone() as Arc<dyn OpOwner>);
        // On an endpoint with a single-copy link, what arrives may be a descriptor.
        let link = self.ep.and_then(|e| Some((e.single_copy.get()?.clone(), lock(&e.ep).clone()?)));
        let Some(link) = link else {
            let submitted = engine.unclaimed.recv_owned(&engine.worker, buf, self.tag, self.mask);
            return submit::track_spinning(engine, py, Submission { submitted, expect, owner }, on_done, spin);
        };
        let submitted = engine
            .unclaimed
            .recv_owned(&engine.worker, Receive::new(buf), self.tag, self.mask)
            .map(|o| single_copy::read_through(o, link));
        submit::track_spinning(engine, py, Submission { submitted, expect, owner }, on_done, spin)
    }
}

impl Endpoint {
    /// Creates an endpoint with `make`, wiring UCX's error callback to the engine.
    pub(crate) fn create(
        py: Python<'_>,
        engine: &Arc<Engine>,
        am: &Arc<AmQueues>,
        error_handling: bool,
        make: impl FnOnce(EndpointParams) -> ucx_core::Result<ucx_core::Endpoint>,
    ) -> PyResult<Endpoint> {
        let shared = EpShared::create(py, engine, am, error_handling, make)?;
        Ok(Endpoint { engine: engine.clone(), shared })
    }

    /// The UCX endpoint, or `UCXCloseError` once closed (saying why, if we closed it).
    fn ep(&self, py: Python<'_>) -> PyResult<ucx_core::Endpoint> {
        lock(&self.shared.ep).clone().ok_or_else(|| {
            let msg = match lock(&self.shared.closed_because).as_deref() {
                Some(why) => format!("Endpoint closed: {why}"),
                None => "Endpoint closed".to_string(),
            };
            errors::new(py, Kind::EndpointClosed, msg)
        })
    }

    /// The UCX endpoint for a new operation, or what ended it: `UCXEndpointClosed` (saying why)
    /// once this side closed it or began to, else the peer's failure (`UCXPeerFailure`). No
    /// operation is handed to an endpoint that has ended: UCX would fail it with a bare status
    /// or, for a stream receive, never finish it.
    fn open_ep(&self, py: Python<'_>) -> PyResult<ucx_core::Endpoint> {
        let ep = self.ep(py)?;
        if self.shared.closing.load(Ordering::Acquire) && self.shared.failure().is_some() {
            // The reset the peer answers our close with.
            return Err(errors::new(py, Kind::EndpointClosed, "Endpoint closed".to_string()));
        }
        self.raise_on_error(py)?;
        Ok(ep)
    }

    fn name(&self, what: &'static str, tag: Option<u64>, nbytes: usize, given: Option<String>) -> Name {
        Name::or_op(given, what, self.shared.handle, tag, nbytes)
    }

    /// Tracks an operation of this endpoint (its closing or failure ends it).
    fn track<B: Send + 'static>(
        &self,
        py: Python<'_>,
        submitted: ucx_core::Result<Owned<B>>,
        expect: Expect,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        submit::track(&self.engine, py, Submission { submitted, expect, owner: Some(self.owner()) }, on_done)
    }

    fn owner(&self) -> Arc<dyn OpOwner> {
        self.shared.clone()
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
        !self.shared.error_handling || self.shared.failure().is_none()
    }

    /// Raises the failure UCX reported for the peer, if any (`UCXConnectionReset` for a reset,
    /// `UCXError("Endpoint 0x.. error: {status}")` otherwise).
    fn raise_on_error(&self, py: Python<'_>) -> PyResult<()> {
        match self.shared.failure() {
            None => Ok(()),
            Some(s) => {
                let msg = format!("Endpoint {:#x} error: {s}", self.shared.handle);
                Err(errors::new(py, Kind::PeerFailure, msg))
            }
        }
    }

    /// Raises what ended the endpoint, if it has ended: the peer's failure
    /// (`UCXPeerFailure`), else `UCXEndpointClosed` saying why it was closed.
    fn check_open(&self, py: Python<'_>) -> PyResult<()> {
        self.open_ep(py).map(drop)
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

    /// Records that the peer has our shutdown message (`Endpoint.close`, after its send
    /// completed): the peer closes its side then, and a close of ours that meets that reset
    /// succeeds.
    fn told_peer_to_close(&self) {
        self.shared.peer_told.store(true, Ordering::Release);
    }

    /// Closes the endpoint because a message it received went to a receive whose caller
    /// cancelled it (`Endpoint.recv` sees this when the cancel reached its task after the
    /// message did): later operations raise `UCXCloseError` saying so.
    fn close_for_lost_message(&self, py: Python<'_>) {
        self.shared.lost_message(&self.engine, py);
    }

    /// `ucp_ep_print_info`.
    fn info(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.ep(py)?.info())
    }

    /// The transports of the endpoint's data lanes (e.g. `["tcp"]`, `["rc_mlx5", "cma"]`).
    fn transports(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        Ok(self.ep(py)?.transports())
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
        self.send_spinning(py, buffer, tag, on_done, name, Sending { spin_us: SpinUs::Fixed(0), fast: false })
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
        self.recv_spinning(py, buffer, tag, on_done, name, SpinUs::Fixed(0))
    }

    /// `Endpoint.send`'s checks and `tag_send` in one call: raises the peer's failure
    /// (as `raise_on_error`), then `UCXCloseError` if closed, else sends, progressing for up
    /// to `spin_us` (microseconds, or a callable giving them: `submit::SpinUs`) before it
    /// returns a future (a rendezvous send finishes once the peer has
    /// fetched the data; see `TagRecv::post`).
    /// With `fast`, UCX completes the send as early as it can, copying eagerly where it would
    /// otherwise start a rendezvous (`ucx_core::Endpoint::tag_send_fast`; the collectives'
    /// announcements).
    #[pyo3(signature = (buffer, tag, spin_us = SpinUs::Fixed(0), fast = false))]
    pub(crate) fn tag_send_checked(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        spin_us: SpinUs,
        fast: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.send_spinning(py, buffer, tag, None, None, Sending { spin_us, fast })
    }

    /// `Endpoint.recv`'s checks and `tag_recv` in one call: unless a message with `tag` is
    /// already waiting (it can be received after the peer closed, not after we closed on a
    /// lost message), raises the peer's failure,
    /// then `UCXCloseError` if closed; then receives, progressing for up to `spin_us`
    /// (microseconds, or a callable giving them: `submit::SpinUs`) before it returns a future
    /// (see `TagRecv::post`). With `up_to`, the message may be shorter than `buffer` and the
    /// receive resolves to its length (returned at once if it finished at once): for messages
    /// whose size the receiver cannot know (the collectives' announcements, which may carry a
    /// small part). With `mark_large`, a receive of at least the single-copy threshold that
    /// finished at once returns `True` instead of `None`, so the caller can let its event loop
    /// run (`Endpoint.recv`) without working out the buffer's size in Python.
    #[pyo3(signature = (buffer, tag, spin_us = SpinUs::Fixed(0), up_to = false, mark_large = false))]
    pub(crate) fn tag_recv_checked(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        spin_us: SpinUs,
        up_to: bool,
        mark_large: bool,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.check_recv(py, tag)?;
        let recv = TagRecv { tag, up_to, mask: FULL_MASK, ep: Some(&self.shared), name: None, spin_us };
        let buf = PyBuf::writable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let large = mark_large && buf.len() >= ucx_core::single_copy::threshold();
        match self.post_recv(py, recv, buf, None)? {
            None if large => Ok(Some(pyo3::types::PyBool::new(py, true).to_owned().into_any().unbind())),
            pending => Ok(pending),
        }
    }

    /// Whether this endpoint offers the same-host single-copy path to a peer of ours (the mark
    /// its handshake carries): the path is on and UCX does not serve the endpoint by shared
    /// memory (`ucx_core::single_copy::offered`). False once the endpoint has ended.
    #[getter]
    fn offers_single_copy(&self, py: Python<'_>) -> bool {
        self.open_ep(py).is_ok_and(|ep| ucx_core::single_copy::offered_on(&ep))
    }

    /// Starts the same-host single-copy path with a peer that carried its mark in the
    /// handshake (`msg_recv`, `msg_send`: the endpoint's tags): the hello exchange runs
    /// natively in the background; until it is done, messages go the ordinary way. Does
    /// nothing where the endpoint does not offer the path (`offers_single_copy`), the path
    /// is already started, or the endpoint has ended.
    fn start_single_copy(&self, py: Python<'_>, msg_recv: u64, msg_send: u64) -> PyResult<()> {
        if self.shared.single_copy.get().is_some() {
            return Ok(());
        }
        // An endpoint that has already ended gets no path; its operations say why it ended.
        let Ok(ep) = self.open_ep(py) else { return Ok(()) };
        if !ucx_core::single_copy::offered_on(&ep) {
            return Ok(());
        }
        let link = Arc::new(ucx_core::single_copy::Link::new(msg_recv, msg_send));
        let _ = self.shared.single_copy.set(link.clone());
        single_copy::start(&self.engine, py, self.owner(), &ep, &link)
    }

    /// `(sending, receiving, sent, received)`: whether this side's large host messages go by
    /// single copy, whether it reads the peer's, and how many messages did each way.
    fn single_copy(&self) -> (bool, bool, u64, u64) {
        let c = self.shared.single_copy.get().map(|l| l.counts()).unwrap_or_default();
        (c.sending, c.receiving, c.sent, c.received)
    }

    /// Of the messages this side described for single copy, those it first copied onto huge
    /// pages (`UCXA_SINGLE_COPY_STAGING`).
    fn single_copy_staged(&self) -> u64 {
        self.shared.single_copy.get().map_or(0, |l| l.counts().staged)
    }

    /// Counts messages that wait on `tag` against this endpoint (`Endpoint` watches its own
    /// `msg_recv` and `ctrl_recv` tags; see `Worker.set_max_unclaimed_bytes`).
    fn watch_tag(&self, tag: u64) {
        self.shared.watch(&self.engine, tag);
    }

    /// Stream bytes that arrived before a stream receive asked for them, held for the next
    /// ones (counted against `Worker.set_max_unclaimed_bytes`'s cap).
    #[getter]
    fn stream_backlog(&self) -> usize {
        lock(&self.shared.stream).bytes()
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
        let ep = self.open_ep(py)?;
        let buf = PyBuf::readable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let name = self.name("Stream send", None, buf.len(), name);
        let submitted = Owned::submit(Box::new(buf), false, |b| ep.stream_send(&*b));
        self.track(py, submitted, Expect::new(name, None), on_done)
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
        let buf = PyBuf::writable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let nbytes = buf.len();
        // Bytes that arrived before the end can still be read; asking UCX for more cannot.
        let ep = if lock(&self.shared.stream).bytes() >= nbytes { self.ep(py)? } else { self.open_ep(py)? };
        let name = self.name("Stream recv", None, nbytes, name);
        // Bytes held from before come first; UCX gives the rest. Under the backlog's lock, so
        // no sweep takes bytes between the two.
        let mut backlog = lock(&self.shared.stream);
        let mut copied = 0;
        let submitted = Owned::submit(Box::new(buf), true, |b| {
            let (held, rest) = backlog.receive(&ep, b)?;
            copied = held;
            Ok(rest)
        });
        drop(backlog);
        let expect = Expect { stream_recv: true, ..Expect::new(name, Some(nbytes - copied)) };
        self.track(py, submitted, expect, on_done)
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
        let ep = self.open_ep(py)?;
        let data = PyBuf::readable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let memory_type = if data.memory_type() == MemoryType::Cuda { MemoryType::Cuda } else { MemoryType::Host };
        let name = self.name("AM send", None, data.len(), name);
        let out = AmOut { header: wire::am_header::encode(memory_type.raw() as i32), data };
        let options = AmSendOptions { reply: true, ..AmSendOptions::default() };
        let submitted = Owned::submit(Box::new(out), false, |o| {
            ep.am_send(wire::am_header::UCXPY_AM_ID, &o.header, &o.data, options)
        });
        self.track(py, submitted, Expect::new(name, None), on_done)
    }

    /// Receives the next active message from this endpoint's peer: a future of the object the
    /// registered allocator made (or None and `on_done(obj, exc)`).
    #[pyo3(signature = (on_done = None))]
    fn am_recv(&self, py: Python<'_>, on_done: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        self.shared.am.recv(&self.engine, py, self.shared.handle, on_done)
    }

    /// Puts back an active message that `am_recv` took but its caller never saw (cancelled as
    /// the message arrived): the next `am_recv` gets it, before anything that came later.
    fn am_requeue(&self, py: Python<'_>, message: Py<PyAny>) {
        self.shared.am.requeue(&self.engine, py, self.shared.handle, message);
    }

    /// Whether an active message from the peer is waiting to be received.
    fn am_probe(&self) -> bool {
        self.shared.am.probe(self.shared.handle)
    }

    /// Unpacks a peer's packed remote key for this endpoint.
    fn unpack_rkey(&self, py: Python<'_>, packed: &[u8]) -> PyResult<RemoteKey> {
        let key = self.open_ep(py)?.unpack_rkey(packed).map_err(|e| errors::from_core(py, &e))?;
        Ok(RemoteKey { inner: Arc::new(key) })
    }

    /// Writes `buffer` to the peer's memory at `remote_addr` (`ucp_put_nbx`).
    #[pyo3(signature = (buffer, remote_addr, rkey, on_done = None))]
    fn put(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        remote_addr: u64,
        rkey: &RemoteKey,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.open_ep(py)?;
        let buf = PyBuf::readable(buffer)?;
        // The key travels with the buffer: UCX uses it until the operation completes.
        let submitted = Owned::submit(Box::new((buf, rkey.inner.clone())), false, |b| ep.put(&b.0, remote_addr, &b.1));
        self.track(py, submitted, Expect::new(Name::Given("put".into()), None), on_done)
    }

    /// Reads the peer's memory at `remote_addr` into `buffer` (`ucp_get_nbx`).
    #[pyo3(signature = (buffer, remote_addr, rkey, on_done = None))]
    fn get(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        remote_addr: u64,
        rkey: &RemoteKey,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.open_ep(py)?;
        let buf = PyBuf::writable(buffer)?;
        let submitted =
            Owned::submit(Box::new((buf, rkey.inner.clone())), true, |b| ep.get(&mut b.0, remote_addr, &b.1));
        self.track(py, submitted, Expect::new(Name::Given("get".into()), None), on_done)
    }

    /// Flushes the endpoint (`ucp_ep_flush_nbx`).
    #[pyo3(signature = (on_done = None))]
    fn flush(&self, py: Python<'_>, on_done: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.open_ep(py)?;
        let submitted = Owned::submit(Box::new(ep), false, |e| e.flush());
        self.track(py, submitted, Expect::new(Name::Given("ep flush".into()), None), on_done)
    }

    /// Closes the endpoint without telling the peer (UCX-Py's `abort`): cancels its in-flight
    /// operations and waiting active-message receives, closes it (flushing if the peer is
    /// healthy, by force otherwise), and runs the close callback. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.shared.close(&self.engine, py, None)
    }
}

/// How a tag send goes: how long to spin if UCX did not finish it at once, and whether for fast
/// completion.
struct Sending {
    spin_us: SpinUs,
    fast: bool,
}

impl Endpoint {
    /// `tag_send_checked` (with `fast`, no spin) of bytes made in native code (a collective's
    /// announcement with its part inside): no Python object to make or export.
    pub(crate) fn send_bytes_checked(&self, py: Python<'_>, bytes: Vec<u8>, tag: u64) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.open_ep(py)?;
        let name = self.name("Send", Some(tag), bytes.len(), None);
        let op = Submission {
            submitted: ep.tag_send_owned_fast(bytes, tag),
            expect: Expect::new(name, None),
            owner: Some(self.owner()),
        };
        submit::track(&self.engine, py, op, None)
    }

    /// A tag send, spinning up to `how.spin_us` if UCX did not finish it at once.
    fn send_spinning(
        &self,
        py: Python<'_>,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        on_done: Option<&Bound<'_, PyAny>>,
        name: Option<String>,
        how: Sending,
    ) -> PyResult<Option<Py<PyAny>>> {
        let ep = self.open_ep(py)?;
        let buf = PyBuf::readable(buffer)?.check_cuda(self.engine.cuda_support)?;
        let name = self.name("Send", Some(tag), buf.len(), name);
        let spin = SpinBudget { base: how.spin_us, nbytes: buf.len(), memory: buf.memory_type() };
        let buf = match self.shared.single_copy.get().filter(|_| !how.fast) {
            Some(link) => match single_copy::send(&self.engine, &ep, link, buf, tag) {
                Ok(answer) => {
                    // A cancel leaves it to the answer (the peer may be reading the message):
                    // the message is delivered, as one UCX sent would be.
                    let expect = Expect { survives_cancel: true, ..Expect::new(name, None) };
                    let op = Submission { submitted: answer, expect, owner: Some(self.owner()) };
                    return submit::track_spinning(&self.engine, py, op, on_done, spin);
                }
                Err(buf) => buf,
            },
            None => buf,
        };
        // Small host messages go for fast completion either way (`ucx_core::fast_completion_pays`).
        let fast = how.fast || ucx_core::fast_completion_pays(buf.len(), buf.memory_type());
        let submitted = if fast { ep.tag_send_owned_fast(buf, tag) } else { ep.tag_send_owned(buf, tag) };
        let op = Submission { submitted, expect: Expect::new(name, None), owner: Some(self.owner()) };
        submit::track_spinning(&self.engine, py, op, on_done, spin)
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
        spin_us: SpinUs,
    ) -> PyResult<Option<Py<PyAny>>> {
        let recv = TagRecv { tag, up_to: false, mask: FULL_MASK, ep: Some(&self.shared), name, spin_us };
        self.post_recv(py, recv, PyBuf::writable(buffer)?.check_cuda(self.engine.cuda_support)?, on_done)
    }

    /// `tag_recv_checked` (exactly `buf`'s size) into memory already taken in: one part of a
    /// larger buffer (`PyBufMut::narrow`; an allgather's rank by rank).
    pub(crate) fn recv_into_checked(
        &self,
        py: Python<'_>,
        buf: PyBufMut,
        tag: u64,
        spin_us: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        self.check_recv(py, tag)?;
        let recv = TagRecv {
            tag,
            up_to: false,
            mask: FULL_MASK,
            ep: Some(&self.shared),
            name: None,
            spin_us: SpinUs::Fixed(spin_us),
        };
        self.post_recv(py, recv, buf, None)
    }

    /// Posts `recv` and, if it is left in flight, fails it at once should the peer be gone.
    fn post_recv(
        &self,
        py: Python<'_>,
        recv: TagRecv<'_>,
        buf: PyBufMut,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let up_to = recv.up_to;
        let pending = recv.post_buf(&self.engine, py, buf, on_done)?;
        // An up-to receive's return value is its length when it finished at once.
        let in_flight = pending.as_ref().is_some_and(|p| !(up_to && p.bind(py).is_instance_of::<pyo3::types::PyInt>()));
        if in_flight {
            self.fail_if_peer_gone(py);
        }
        Ok(pending)
    }

    /// `recv`'s checks before a receive: unless a message with `tag` is already waiting (it
    /// can be received after the peer closed, not after we closed on a lost message), raises
    /// the peer's failure, then `UCXCloseError` if closed.
    fn check_recv(&self, py: Python<'_>, tag: u64) -> PyResult<()> {
        // An open endpoint first: the usual case then needs no probe of UCX's queue.
        let Err(ended) = self.open_ep(py) else { return Ok(()) };
        // After a close that lost a message, a message waiting now may be the one after it:
        // never hand that out.
        let lost_one = lock(&self.shared.closed_because).is_some();
        if lost_one || !self.engine.unclaimed.probe(&self.engine.worker, tag, FULL_MASK) {
            return Err(ended);
        }
        Ok(())
    }

    /// Fails this endpoint's unfinished operations if its peer has failed. A receive posted
    /// after that can only be matched to a message that had already arrived, and UCX may
    /// match it to the head of a multi-fragment eager message whose tail died with the peer:
    /// the endpoint's failure has already been handled, so nothing else would ever end it.
    /// The worker is progressed first, so fragments UCX holds but has not processed yet can
    /// still complete it.
    fn fail_if_peer_gone(&self, py: Python<'_>) {
        if self.shared.failure().is_none() {
            return;
        }
        self.engine.progress(py);
        if let Some(status) = self.shared.failure() {
            self.engine.fail_stuck_ops_of(py, self.shared.key, End::PeerFailed(status));
        }
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

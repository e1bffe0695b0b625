//! The async [`Endpoint`]: a connection with the UCX-Py handshake behind it, data on its
//! per-endpoint tags, and failure and close propagated to every pending receive.
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::task::JoinHandle;
use ucx_core::wire::{am_header, CtrlMsg, Flavour};
use ucx_core::{
    AmSendOptions, CloseMode, EndpointParams, MemoryType, Overflow, RecvBuffer, SendBuffer, StreamBacklog, Submitted,
    WorkerAddress, FULL_MASK,
};

use crate::am::AmBuffer;
use crate::connect_error;
use crate::error::{Error, Result};
use crate::handshake::{self, Tags};
use crate::liveness::{watch_ctrl, AmWait, EpState, Watched, CLOSED};
use crate::op::{Completes, CompletesOwned, Load};
use crate::single_copy::{read_error, SingleCopy};
use crate::worker::{Swept, Worker};
use ucx_core::single_copy::Receive;

/// How long dropping one unreceived message may progress the worker (a rendezvous whose
/// sender is gone is never done; it is left to UCX).
const DISCARD_LIMIT: Duration = Duration::from_millis(100);

/// The handshake timeout when none is given (UCX-Py's `UCXPY_CONNECT_TIMEOUT` default).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Options for [`Endpoint::connect_with`] and listeners.
#[derive(Clone, Copy, Debug)]
pub struct ConnectOptions {
    /// How long each handshake step may take.
    pub timeout: Duration,
    /// Peer-failure handling (UCX's `UCP_ERR_HANDLING_MODE_PEER`); on by default.
    pub error_handling: bool,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { timeout: DEFAULT_CONNECT_TIMEOUT, error_handling: true }
    }
}

/// A connected endpoint. Cheap to clone; the last clone closes the connection.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EndpointInner>,
}

struct EndpointInner {
    core: ucx_core::Endpoint,
    /// The UCX endpoint's identity, which active messages report as their reply endpoint.
    core_id: usize,
    worker: Worker,
    tags: Option<Tags>,
    flavour: Option<Flavour>,
    state: Arc<EpState>,
    ctrl_task: Mutex<Option<JoinHandle<()>>>,
    /// Stream bytes that arrived before a stream receive asked for them (counted against the
    /// worker's cap); stream receives read it first, under its lock.
    stream: Mutex<StreamBacklog>,
    /// The same-host single-copy path, with a peer that carried its mark in the handshake.
    single_copy: Option<Arc<SingleCopy>>,
}

impl EndpointInner {
    /// Its key in the worker's hold of unreceived messages.
    fn key(&self) -> u64 {
        self.core_id as u64
    }

    /// Its own receive tags (what the peer sends to it).
    fn own_tags(&self) -> impl Iterator<Item = u64> {
        self.tags.into_iter().flat_map(|t| [Some(t.msg_recv), t.ctrl_recv]).flatten()
    }

    /// Gives held stream chunks back to UCX: before the UCX endpoint closes, which they need.
    fn clear_stream(&self) {
        self.stream.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }

    /// Drops what its peer sent that nobody received (held by the worker, or still in UCX's
    /// queue on its own tags): once the endpoint is closed nobody can, and UCX would keep it
    /// for the worker's life.
    fn drop_unreceived(&self) {
        let hold = &self.worker.inner.unclaimed;
        let mut dropped = hold.release(self.key());
        for tag in self.own_tags() {
            dropped.extend(hold.purge(self.worker.core(), tag));
        }
        for msg in dropped {
            msg.discard_within(DISCARD_LIMIT);
        }
    }
}

impl Swept for EndpointInner {
    fn over_limit(&self, overflow: Overflow) {
        #[cfg(feature = "tracing")]
        tracing::warn!(tags = ?self.tags, "ucx-async: closing an endpoint because {overflow}");
        self.state.go_down_unreceived(overflow);
        self.clear_stream();
        self.core.force_close_now();
        self.drop_unreceived();
    }

    fn fill_stream_backlog(&self) -> usize {
        self.stream.lock().unwrap_or_else(|p| p.into_inner()).fill(&self.core)
    }
}

impl Drop for EndpointInner {
    fn drop(&mut self) {
        if let Some(t) = self.ctrl_task.get_mut().ok().and_then(Option::take) {
            t.abort();
        }
        if let Some(sc) = &self.single_copy {
            sc.stop();
        }
        self.worker.inner.am.forget(self.core_id);
        self.clear_stream();
        self.drop_unreceived();
    }
}

fn params(state: &Arc<EpState>, worker: &Worker, error_handling: bool) -> EndpointParams {
    let s = state.clone();
    let signals = worker.inner.signals.clone();
    EndpointParams::default().error_handling(error_handling).on_error(move |status| {
        s.go_down(status.raw());
        signals.wake();
        #[cfg(feature = "tracing")]
        tracing::warn!(?status, "ucx-async: endpoint failed");
    })
}

/// Runs a connect or accept inside a `tracing` span named after it, with an event for its
/// outcome; without the `tracing` feature, just `fut`.
#[cfg(feature = "tracing")]
async fn traced<A: std::fmt::Debug>(
    fut: impl Future<Output = Result<Endpoint>>,
    what: &'static str,
    peer: A,
) -> Result<Endpoint> {
    use tracing::Instrument;
    let span = tracing::info_span!("ucx_endpoint", op = what, peer = ?peer);
    let r = fut.instrument(span.clone()).await;
    let _entered = span.enter();
    match &r {
        Ok(ep) => tracing::debug!(flavour = ?ep.flavour(), tags = ?ep.tags(), "ucx-async: {what} done"),
        Err(e) => tracing::warn!(error = %e, "ucx-async: {what} failed"),
    }
    r
}

#[cfg(not(feature = "tracing"))]
async fn traced<A>(fut: impl Future<Output = Result<Endpoint>>, _what: &'static str, _peer: A) -> Result<Endpoint> {
    fut.await
}

impl Endpoint {
    /// Connects to a listener at `addr` and performs the handshake, detecting whether the
    /// listener speaks UCX-Py's or UCXX's (ucx-async and UCX-Py listeners speak UCX-Py's).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the connection: the handshake's stream
    /// operations are cancelled (blocking for up to 50 ms, as a dropped [`Endpoint::send`]) and the
    /// UCX endpoint being made is force-closed, so the listener's side sees the connection fail.
    pub async fn connect(worker: &Worker, addr: SocketAddr) -> Result<Endpoint> {
        Self::connect_with(worker, addr, ConnectOptions::default()).await
    }

    /// [`Endpoint::connect`] with options.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the connection: the handshake's stream
    /// operations are cancelled (blocking for up to 50 ms, as a dropped [`Endpoint::send`]) and the
    /// UCX endpoint being made is force-closed, so the listener's side sees the connection fail.
    pub async fn connect_with(worker: &Worker, addr: SocketAddr, options: ConnectOptions) -> Result<Endpoint> {
        let connect = async {
            let state = Arc::new(EpState::new());
            let core = ucx_core::Endpoint::connect(worker.core(), addr, params(&state, worker, options.error_handling))
                .map_err(|e| connect_error::named(worker, addr, e.into()))?;
            let (flavour, tags, both_offer) = handshake::client(&core, &worker.inner.signals, options.timeout)
                .await
                .map_err(|e| connect_error::named(worker, addr, e))?;
            Ok(Self::established(worker, core, state, Some(tags), Some(flavour), both_offer))
        };
        traced(connect, "connect", addr).await
    }

    /// Connects to a worker by its address, without a handshake: data travels on the given
    /// tags (or on explicit tags with [`Endpoint::send_tag`] / [`Endpoint::recv_tag`]).
    pub fn connect_to_worker(worker: &Worker, address: &WorkerAddress, tags: Option<Tags>) -> Result<Endpoint> {
        Self::connect_to_worker_with(worker, address, tags, ConnectOptions::default())
    }

    /// [`Endpoint::connect_to_worker`] with options (only `error_handling` applies: there is
    /// no handshake to time out).
    pub fn connect_to_worker_with(
        worker: &Worker,
        address: &WorkerAddress,
        tags: Option<Tags>,
        options: ConnectOptions,
    ) -> Result<Endpoint> {
        let state = Arc::new(EpState::new());
        let params = params(&state, worker, options.error_handling);
        let core = ucx_core::Endpoint::connect_to_worker(worker.core(), address, params)?;
        Ok(Self::established(worker, core, state, tags, None, false))
    }

    /// [`Endpoint::connect_to_worker_with`] for a communicator's pair of ranks, which both
    /// start the single-copy hello exchange on `tags` (`ucx_core::wire::single_copy::pair_tags`);
    /// the caller has checked that their endpoints offer the path
    /// (`ucx_core::single_copy::offered`).
    pub(crate) fn connect_to_rank(
        worker: &Worker,
        address: &WorkerAddress,
        tags: Tags,
        options: ConnectOptions,
    ) -> Result<Endpoint> {
        let state = Arc::new(EpState::new());
        let params = params(&state, worker, options.error_handling);
        let core = ucx_core::Endpoint::connect_to_worker(worker.core(), address, params)?;
        Ok(Self::established(worker, core, state, Some(tags), None, true))
    }

    pub(crate) async fn accept(
        worker: &Worker,
        request: ucx_core::ConnRequest,
        flavour: Flavour,
        options: ConnectOptions,
    ) -> Result<Endpoint> {
        let client = request.client_addr();
        let accept = async {
            let state = Arc::new(EpState::new());
            let core =
                ucx_core::Endpoint::accept(worker.core(), request, params(&state, worker, options.error_handling))?;
            let (tags, both_offer) = handshake::server(&core, &worker.inner.signals, flavour, options.timeout).await?;
            Ok(Self::established(worker, core, state, Some(tags), Some(flavour), both_offer))
        };
        traced(accept, "accept", client).await
    }

    /// The endpoint after its handshake (if any); `single_copy`: both sides offer the
    /// single-copy path (the handshake's answer, or a communicator's decision for a pair of
    /// ranks), so the hello exchange starts.
    fn established(
        worker: &Worker,
        core: ucx_core::Endpoint,
        state: Arc<EpState>,
        tags: Option<Tags>,
        flavour: Option<Flavour>,
        both_offer: bool,
    ) -> Endpoint {
        let ctrl_task = tags.and_then(|t| t.ctrl_recv).map(|tag| {
            let (w, s) = (worker.clone(), state.clone());
            tokio::spawn(async move { watch_ctrl(w, s, tag).await })
        });
        let single_copy = match tags {
            Some(t) if both_offer => Some(SingleCopy::start(worker, &core, &state, t)),
            _ => None,
        };
        let inner = Arc::new(EndpointInner {
            core_id: core.id(),
            core,
            worker: worker.clone(),
            tags,
            flavour,
            state,
            ctrl_task: Mutex::new(ctrl_task),
            stream: Mutex::default(),
            single_copy,
        });
        for tag in inner.own_tags() {
            worker.inner.unclaimed.watch(tag, inner.key(), || Arc::downgrade(&inner) as Weak<dyn Swept>);
        }
        Endpoint { inner }
    }

    /// The endpoint's tags (`None` for a worker-address endpoint made without tags).
    pub fn tags(&self) -> Option<Tags> {
        self.inner.tags
    }

    /// Which handshake the connection used (`None` for worker-address endpoints).
    pub fn flavour(&self) -> Option<Flavour> {
        self.inner.flavour
    }

    /// The ucx-core endpoint (for operations this crate does not wrap).
    pub fn core(&self) -> &ucx_core::Endpoint {
        &self.inner.core
    }

    /// The worker it belongs to.
    pub fn worker(&self) -> &Worker {
        &self.inner.worker
    }

    /// Whether this endpoint's large host messages travel by single copy (same host, both
    /// sides ucx-async or `ucp`, each able to read the other's memory), and how many did. The
    /// hello exchange that turns it on runs in the background right after the connection is
    /// made: until it is done, and with any other peer, messages go the ordinary way.
    pub fn single_copy(&self) -> ucx_core::single_copy::Counts {
        self.inner.single_copy.as_ref().map(|sc| sc.counts()).unwrap_or_default()
    }

    /// `Ok` while usable; otherwise why not (closed, or the peer's failure status).
    pub fn status(&self) -> Result<()> {
        self.inner.state.check("Endpoint::status")
    }

    /// A UCX error of an operation on this endpoint, by cause: once the endpoint is down, why
    /// it went down (closed by either side, or the peer's failure), else UCX's error.
    /// Names a failed submission or completion on this endpoint by cause: the endpoint's own
    /// state if it is down, else a peer failure if UCX's status says the connection failed
    /// (a send to a dead peer can fail inside the call, before UCX has reported the endpoint
    /// failed), else UCX's error as it is.
    fn cause(&self, op: &'static str, e: ucx_core::Error) -> Error {
        match self.inner.state.check(op) {
            Err(down) => down,
            Ok(()) if e.status().is_peer_failure() => Error::PeerFailed { op, status: e.status() },
            Ok(()) => Error::Ucx(e),
        }
    }

    /// Awaits operation `s` of `op` on this endpoint, which moves `load` (the inline spin
    /// scales with it), naming its failure by cause.
    async fn finish(&self, op: &'static str, s: Submitted<'_>, load: Load) -> Result<()> {
        Completes::new(s, &self.inner.worker.inner.signals).moving(load).await.map(drop).map_err(|e| self.cause(op, e))
    }

    fn msg_tags(&self, op: &'static str) -> Result<Tags> {
        self.inner.tags.ok_or(Error::NoTags { op })
    }

    /// Sends `buf` as one message on the endpoint's tag.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf`. An operation UCX
    /// cannot cancel (a rendezvous send whose receiver never posts its receive) that is still
    /// running 50 ms after the cancel has its endpoint force-closed, which ends it; every later
    /// operation on the endpoint then fails. How much of the data reached the peer is unknown.
    /// [`Endpoint::send_owned`] never blocks and never closes the endpoint when dropped.
    pub async fn send<B: SendBuffer + ?Sized>(&self, buf: &B) -> Result<()> {
        let tag = self.msg_tags("Endpoint::send")?.msg_send;
        self.send_tag(buf, tag).await
    }

    /// Receives one message from the peer into `buf`; returns its length. A message longer
    /// than `buf` fails with `MessageTruncated`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the receive. A receive UCX
    /// has not yet matched to a message is withdrawn at once; the message goes to the next receive
    /// and the endpoint stays open. A receive UCX has matched (a message on its way) cannot be
    /// withdrawn: the drop blocks, progressing the worker, until that message has landed in `buf`,
    /// and the message is lost to the caller. If its sender fails partway through such a message,
    /// UCX never finishes the receive and the drop does not return (a limit of UCX;
    /// docs/reliability.md). [`Endpoint::recv_owned`] never blocks when dropped.
    pub async fn recv<B: RecvBuffer + ?Sized>(&self, buf: &mut B) -> Result<usize> {
        let tag = self.msg_tags("Endpoint::recv")?.msg_recv;
        self.recv_tag(buf, tag, FULL_MASK).await
    }

    /// `Ok` while the endpoint is up, or when it is down but a matching message has already
    /// arrived (it can still be received, as in UCX-Py); the endpoint's error otherwise.
    fn may_receive(&self, op: &'static str, tag: u64, mask: u64) -> Result<()> {
        match self.inner.state.check(op) {
            Err(e) if !self.inner.worker.tag_probe(tag, mask) => Err(e),
            _ => Ok(()),
        }
    }

    /// Sends `buf` with an explicit tag.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf`. An operation UCX
    /// cannot cancel (a rendezvous send whose receiver never posts its receive) that is still
    /// running 50 ms after the cancel has its endpoint force-closed, which ends it; every later
    /// operation on the endpoint then fails. How much of the data reached the peer is unknown.
    /// [`Endpoint::send_owned`] never blocks and never closes the endpoint when dropped.
    pub async fn send_tag<B: SendBuffer + ?Sized>(&self, buf: &B, tag: u64) -> Result<()> {
        self.send_tag_as(buf, tag, false).await
    }

    /// [`Endpoint::send_tag`] that UCX completes as early as it can, copying eagerly rather
    /// than starting a rendezvous whose handshake needs the receiver to run
    /// (`ucx_core::Endpoint::tag_send_fast`): for small messages that carry latency.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf`. An operation UCX
    /// cannot cancel (a rendezvous send whose receiver never posts its receive) that is still
    /// running 50 ms after the cancel has its endpoint force-closed, which ends it; every later
    /// operation on the endpoint then fails. How much of the data reached the peer is unknown.
    /// [`Endpoint::send_owned`] never blocks and never closes the endpoint when dropped.
    pub async fn send_tag_fast<B: SendBuffer + ?Sized>(&self, buf: &B, tag: u64) -> Result<()> {
        self.send_tag_as(buf, tag, true).await
    }

    async fn send_tag_as<B: SendBuffer + ?Sized>(&self, buf: &B, tag: u64, fast: bool) -> Result<()> {
        self.inner.state.check("Endpoint::send")?;
        self.inner.state.sends.fetch_add(1, Ordering::AcqRel);
        let core = &self.inner.core;
        if let Some(sc) =
            self.inner.single_copy.as_ref().filter(|sc| !fast && sc.link.sends(buf.byte_len(), buf.memory_type()))
        {
            if let Some(r) = sc.send(&self.inner.worker, core, &self.inner.state, buf, tag).await {
                return r.map_err(|e| self.down_or("Endpoint::send", e));
            }
        }
        // Small host messages go for fast completion either way (`ucx_core::fast_completion_pays`).
        let fast = fast || ucx_core::fast_completion_pays(buf.byte_len(), buf.memory_type());
        let s = if fast { core.tag_send_fast(buf, tag) } else { core.tag_send(buf, tag) };
        let s = s.map_err(|e| self.cause("Endpoint::send", e))?;
        self.finish("Endpoint::send_tag", s, Load::new(buf.byte_len(), buf.memory_type())).await
    }

    /// Receives a message whose tag matches `tag` under `mask`. Completes with an error naming
    /// the cause when this endpoint is closed or its peer fails first. (UCX matches receives
    /// per worker: the tag, not the endpoint, decides which message arrives here.)
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the receive. A receive UCX
    /// has not yet matched to a message is withdrawn at once; the message goes to the next receive
    /// and the endpoint stays open. A receive UCX has matched (a message on its way) cannot be
    /// withdrawn: the drop blocks, progressing the worker, until that message has landed in `buf`,
    /// and the message is lost to the caller. If its sender fails partway through such a message,
    /// UCX never finishes the receive and the drop does not return (a limit of UCX;
    /// docs/reliability.md). [`Endpoint::recv_owned`] never blocks when dropped.
    pub async fn recv_tag<B: RecvBuffer + ?Sized>(&self, buf: &mut B, tag: u64, mask: u64) -> Result<usize> {
        const OP: &str = "Endpoint::recv";
        self.may_receive(OP, tag, mask)?;
        let c = match &self.inner.single_copy {
            // What arrives may be a single-copy descriptor (see `ucx_core::single_copy::Receive`).
            Some(sc) => {
                let mut r = Receive::new(&mut *buf);
                let c = self.receive(OP, &mut r, tag, mask).await?;
                // SAFETY: the receive into `r` has finished.
                unsafe { sc.link.finish(&self.inner.core, c, &mut r) }
                    .map_err(|e| read_error(&self.inner.state, OP, e))?
            }
            None => self.receive(OP, buf, tag, mask).await?,
        };
        self.inner.state.recv_finished();
        yield_after_reading(c.length).await;
        Ok(c.length)
    }

    /// Posts a tag receive into `buf` for operation `op` and waits for it (the endpoint's
    /// failure or close ends the wait; dropping the future cancels it as `recv_tag` says).
    async fn receive<R: RecvBuffer + ?Sized>(
        &self,
        op: &'static str,
        buf: &mut R,
        tag: u64,
        mask: u64,
    ) -> Result<ucx_core::Completion> {
        let load = Load::new(buf.byte_len(), buf.memory_type());
        let s = self
            .inner
            .worker
            .inner
            .unclaimed
            .recv(self.inner.worker.core(), buf, tag, mask)
            .map_err(|e| self.cause(op, e))?;
        let fut = Completes::new(s, &self.inner.worker.inner.signals).moving(load);
        Watched::new(fut, &self.inner.state, Some(&self.inner.core)).await
    }

    /// `e`, or the endpoint's own error if it went down meanwhile (the error's cause).
    fn down_or(&self, op: &'static str, e: Error) -> Error {
        self.inner.state.check(op).err().unwrap_or(e)
    }

    /// [`Endpoint::send`] on a buffer the operation owns, returned when done. Dropping the
    /// future before then never blocks and never closes the endpoint: the buffer stays with
    /// UCX until the send finishes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe in the sense that matters for buffers: dropping the future never blocks and
    /// never closes the endpoint. The send goes on; UCX keeps the buffer and frees it when the send
    /// finishes (whether the peer receives it depends on that send).
    pub async fn send_owned<B: SendBuffer + Send + 'static>(&self, buf: B) -> Result<B> {
        let tag = self.msg_tags("Endpoint::send_owned")?.msg_send;
        self.inner.state.check("Endpoint::send_owned")?;
        self.inner.state.sends.fetch_add(1, Ordering::AcqRel);
        // By single copy, the buffer goes with the receive of the answer: dropping this future
        // leaves the message to be delivered, as below.
        let buf = match self.inner.single_copy.as_ref().filter(|sc| sc.link.sends(buf.byte_len(), buf.memory_type())) {
            Some(sc) => match sc.send_owned(&self.inner.worker, &self.inner.core, &self.inner.state, buf, tag).await {
                Ok(r) => return r.map_err(|e| self.down_or("Endpoint::send_owned", e)),
                Err(buf) => buf,
            },
            None => buf,
        };
        let load = Load::new(buf.byte_len(), buf.memory_type());
        let core = &self.inner.core;
        let op = if ucx_core::fast_completion_pays(buf.byte_len(), buf.memory_type()) {
            core.tag_send_owned_fast(buf, tag)
        } else {
            core.tag_send_owned(buf, tag)
        };
        let op = op.map_err(|e| self.cause("Endpoint::send_owned", e))?;
        let mut fut = CompletesOwned::new(op, &self.inner.worker.inner.signals, load);
        (&mut fut).await?;
        Ok(fut.op.take().and_then(ucx_core::Owned::into_buffer).expect("a completed operation returns its buffer"))
    }

    /// [`Endpoint::recv`] into a buffer the operation owns; returns it with the length
    /// received. Dropping the future before then cancels the receive without blocking.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future never blocks: the receive is cancelled, and the buffer stays with UCX
    /// until UCX lets go of it, then is freed. A message UCX had already matched to this receive is
    /// lost; an unmatched one goes to the next receive.
    pub async fn recv_owned<B: RecvBuffer + Send + 'static>(&self, buf: B) -> Result<(B, usize)> {
        const OP: &str = "Endpoint::recv_owned";
        let tag = self.msg_tags(OP)?.msg_recv;
        self.may_receive(OP, tag, FULL_MASK)?;
        let (buf, c) = match &self.inner.single_copy {
            // What arrives may be a single-copy descriptor (see `ucx_core::single_copy::Receive`).
            Some(sc) => {
                let (mut r, c) = self.receive_owned(OP, Receive::new(buf), tag).await?;
                // SAFETY: the receive into `r` has finished.
                let c = unsafe { sc.link.finish(&self.inner.core, c, &mut r) }
                    .map_err(|e| read_error(&self.inner.state, OP, e))?;
                (r.into_inner(), c)
            }
            None => self.receive_owned(OP, buf, tag).await?,
        };
        self.inner.state.recv_finished();
        yield_after_reading(c.length).await;
        Ok((buf, c.length))
    }

    /// Posts a tag receive into `buf`, owned by the operation, for operation `op` and waits for
    /// it; returns the buffer with the completion.
    async fn receive_owned<R: RecvBuffer + Send + 'static>(
        &self,
        op: &'static str,
        buf: R,
        tag: u64,
    ) -> Result<(R, ucx_core::Completion)> {
        let load = Load::new(buf.byte_len(), buf.memory_type());
        let posted = self
            .inner
            .worker
            .inner
            .unclaimed
            .recv_owned(self.inner.worker.core(), buf, tag, FULL_MASK)
            .map_err(|e| self.cause(op, e))?;
        let fut = CompletesOwned::new(posted, &self.inner.worker.inner.signals, load);
        let mut watched = Watched::new(fut, &self.inner.state, Some(&self.inner.core));
        let c = (&mut watched).await?;
        let buf =
            watched.fut.op.take().and_then(ucx_core::Owned::into_buffer).ok_or_else(|| Error::Protocol {
                op,
                detail: "a finished receive did not give its buffer back".into(),
            })?;
        Ok((buf, c))
    }

    /// Sends `buf` as an active message the UCX-Py way (handler 0, a 4-byte header with the
    /// buffer's memory type, the reply flag so the peer knows the sender).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf`. An operation UCX
    /// cannot cancel (a rendezvous send whose receiver never posts its receive) that is still
    /// running 50 ms after the cancel has its endpoint force-closed, which ends it; every later
    /// operation on the endpoint then fails. How much of the data reached the peer is unknown.
    /// [`Endpoint::send_owned`] never blocks and never closes the endpoint when dropped.
    pub async fn am_send<B: SendBuffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.inner.state.check("Endpoint::am_send")?;
        self.inner.state.sends.fetch_add(1, Ordering::AcqRel);
        let header = am_header::encode(buf.memory_type().raw() as i32);
        let opts = AmSendOptions { reply: true, ..Default::default() };
        let s = self
            .inner
            .core
            .am_send(am_header::UCXPY_AM_ID, &header, buf, opts)
            .map_err(|e| self.cause("Endpoint::am_send", e))?;
        self.finish("Endpoint::am_send", s, Load::NONE).await
    }

    /// Receives the next active message the peer sent with [`Endpoint::am_send`], in a buffer
    /// from the allocator registered for its memory type (eager messages: host memory).
    /// Fails with `Canceled` once the endpoint is closed and nothing is left to receive.
    ///
    /// # Cancel safety
    ///
    /// While no message has arrived, dropping the future loses nothing: the next message stays
    /// queued, first in line, for the next `am_recv`. Once a rendezvous message is being fetched
    /// into the allocator's buffer, dropping cancels the fetch as a dropped [`Endpoint::send`] does
    /// (blocking for up to 50 ms, then force-closing the endpoint), and the message is lost.
    pub async fn am_recv(&self) -> Result<Box<dyn AmBuffer>> {
        let router = &self.inner.worker.inner.am;
        let signals = &self.inner.worker.inner.signals;
        let msg = AmWait { router, signals, ep: self.inner.core_id, state: &self.inner.state, slot: None }.await?;
        let mt = am_header::receive_memory_type(msg.header(), msg.is_rendezvous())
            .map(|raw| MemoryType::from_raw(raw as u32))
            .map_err(|e| Error::Protocol { op: "Endpoint::am_recv", detail: e.to_string() })?;
        let mut buf = match router.allocator(mt) {
            Some(allocate) => allocate(msg.data_len()),
            None if mt == MemoryType::Host => return self.am_recv_host(msg).await,
            None => return Err(Error::NoAllocator { memory_type: mt }),
        };
        let s = msg.recv_into(&mut *buf)?.on_endpoint(&self.inner.core);
        Completes::new(s, &self.inner.worker.inner.signals).await?;
        self.inner.state.recv_finished();
        Ok(buf)
    }

    /// `am_recv` into the default host buffer, a `Vec<u8>`: the data the handler already
    /// copied out of UCX is handed over as it is, anything else is received into a new
    /// `Vec` without zeroing it first (UCX writes every byte; zeroing 1 MiB took as long as
    /// moving it).
    async fn am_recv_host(&self, mut msg: ucx_core::AmMessage) -> Result<Box<dyn AmBuffer>> {
        if let Some(data) = msg.take_copied() {
            self.inner.state.recv_finished();
            return Ok(Box::new(data));
        }
        let len = msg.data_len();
        let mut data = Vec::with_capacity(len);
        {
            let mut spare = crate::am::SpareCapacity::new(&mut data, len);
            let s = msg.recv_into(&mut spare)?.on_endpoint(&self.inner.core);
            Completes::new(s, &self.inner.worker.inner.signals).await?;
        }
        // SAFETY: the receive completed without error, so UCX wrote all `len` bytes (an active
        // message is delivered whole) into the spare capacity.
        unsafe { data.set_len(len) };
        self.inner.state.recv_finished();
        Ok(Box::new(data))
    }

    /// Unpacks a peer's packed remote key (from `ucx_core::MemoryHandle::pack_rkey`) for
    /// [`Endpoint::put`] and [`Endpoint::get`].
    pub fn unpack_rkey(&self, packed: &[u8]) -> Result<ucx_core::RemoteKey> {
        self.inner.state.check("Endpoint::unpack_rkey")?;
        self.inner.core.unpack_rkey(packed).map_err(|e| self.cause("Endpoint::unpack_rkey", e))
    }

    /// Writes `buf` into the peer's registered memory at `remote_addr` (one-sided).
    /// Completion means `buf` may be reused; [`Endpoint::flush`] makes the data visible.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf` (at most 50 ms;
    /// an operation still running then has its endpoint force-closed, which ends it, and every
    /// later operation on the endpoint fails). `buf` may have been partly written or read.
    pub async fn put<B: SendBuffer + ?Sized>(
        &self,
        buf: &B,
        remote_addr: u64,
        rkey: &ucx_core::RemoteKey,
    ) -> Result<()> {
        self.inner.state.check("Endpoint::put")?;
        let s = self.inner.core.put(buf, remote_addr, rkey).map_err(|e| self.cause("Endpoint::put", e))?;
        self.finish("Endpoint::put", s, Load::NONE).await
    }

    /// Reads the peer's registered memory at `remote_addr` into `buf` (one-sided).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf` (at most 50 ms;
    /// an operation still running then has its endpoint force-closed, which ends it, and every
    /// later operation on the endpoint fails). `buf` may have been partly written or read.
    pub async fn get<B: RecvBuffer + ?Sized>(
        &self,
        buf: &mut B,
        remote_addr: u64,
        rkey: &ucx_core::RemoteKey,
    ) -> Result<()> {
        self.inner.state.check("Endpoint::get")?;
        let s = self.inner.core.get(buf, remote_addr, rkey).map_err(|e| self.cause("Endpoint::get", e))?;
        self.finish("Endpoint::get", s, Load::NONE).await
    }

    /// Sends `buf` on the endpoint's stream.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the operation, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf`. An operation UCX
    /// cannot cancel (a rendezvous send whose receiver never posts its receive) that is still
    /// running 50 ms after the cancel has its endpoint force-closed, which ends it; every later
    /// operation on the endpoint then fails. How much of the data reached the peer is unknown.
    /// [`Endpoint::send_owned`] never blocks and never closes the endpoint when dropped.
    pub async fn stream_send<B: SendBuffer + ?Sized>(&self, buf: &B) -> Result<()> {
        self.inner.state.check("Endpoint::stream_send")?;
        let s = self.inner.core.stream_send(buf).map_err(|e| self.cause("Endpoint::stream_send", e))?;
        self.finish("Endpoint::stream_send", s, Load::new(buf.byte_len(), buf.memory_type())).await
    }

    /// Stream bytes that arrived before a stream receive asked for them, held for the next
    /// ones (counted against [`Worker::set_max_unclaimed_bytes`]'s cap).
    pub fn stream_backlog(&self) -> usize {
        self.inner.stream.lock().unwrap_or_else(|p| p.into_inner()).bytes()
    }

    /// Receives exactly `buf.byte_len()` bytes from the endpoint's stream. Bytes that arrived
    /// before (held by the worker's sweep) come first; into device memory they cannot, and
    /// the receive fails with `Unsupported` saying so.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future before it completes cancels the receive, then blocks
    /// the dropping thread, progressing the worker, until UCX has let go of `buf`. UCX cannot
    /// cancel a stream receive: 50 ms after the cancel its endpoint is force-closed, which ends it,
    /// and every later operation on the endpoint fails. Bytes already written into `buf` are lost
    /// to the stream.
    pub async fn stream_recv<B: RecvBuffer + ?Sized>(&self, buf: &mut B) -> Result<()> {
        self.inner.state.check("Endpoint::stream_recv")?;
        let load = Load::new(buf.byte_len(), buf.memory_type());
        // Under the backlog's lock, so no sweep takes bytes between the read and the post.
        let (_, s) = self.inner.stream.lock().unwrap_or_else(|p| p.into_inner()).receive(&self.inner.core, buf)?;
        self.finish("Endpoint::stream_recv", s, load).await
    }

    /// Completes every operation issued so far, remotely.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes cancels the flush (the operations issued before it
    /// go on); one still running 50 ms later has its endpoint force-closed, as for a dropped
    /// [`Endpoint::send`].
    pub async fn flush(&self) -> Result<()> {
        let s = self.inner.core.flush().map_err(|e| self.cause("Endpoint::flush", e))?;
        self.finish("Endpoint::flush", s, Load::NONE).await
    }

    /// Closes gracefully: tells a UCX-Py-speaking peer (control message with our send count,
    /// so it finishes receiving what we sent), fails our pending receives with `Canceled`,
    /// then closes the UCX endpoint with a flush (forcibly if the peer already failed), and
    /// drops what the peer sent on the endpoint's tags that was not received.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future midway leaves the close unfinished. Dropped while the shutdown message
    /// is being sent, that send is cancelled as in [`Endpoint::send`] and the endpoint stays up;
    /// dropped later, the endpoint is closed for this side and UCX's close is cancelled. Either way
    /// [`Endpoint::abort`] finishes the job, and dropping the last handle to the endpoint force-
    /// closes it (blocking until UCX has released it).
    pub async fn close(&self) -> Result<()> {
        let up = self.inner.state.check("close").is_ok();
        #[cfg(feature = "tracing")]
        tracing::debug!(tags = ?self.inner.tags, up, "ucx-async: closing endpoint");
        if up {
            if let Some(ctrl) = self.inner.tags.and_then(|t| t.ctrl_send) {
                let msg = CtrlMsg::shutdown(self.inner.state.sends.load(Ordering::Acquire)).encode();
                // A peer that is already gone cannot be told; closing goes on regardless.
                if let Ok(s) = self.inner.core.tag_send(&msg, ctrl) {
                    let _ = Completes::new(s, &self.inner.worker.inner.signals).await;
                };
            }
        }
        let mode = if self.inner.state.check("close").is_ok() { CloseMode::Flush } else { CloseMode::Force };
        self.inner.state.go_down(CLOSED);
        self.inner.clear_stream();
        let r = match self.inner.core.close(mode) {
            Ok(s) => Completes::new(s, &self.inner.worker.inner.signals).await.map(drop),
            Err(e) => Err(e),
        };
        self.inner.drop_unreceived();
        // A flush towards a peer that closed or vanished fails, at once or later (without
        // error handling, a forced close is a flush too: see `CloseMode::Force`); the endpoint
        // is released anyway.
        r.or_else(|e| if mode == CloseMode::Flush || e.status().is_peer_failure() { Ok(()) } else { Err(e.into()) })
    }

    /// Closes at once without telling the peer: pending receives fail with `Canceled`, UCX
    /// cancels pending sends. What the peer sent that was not received is dropped (as by
    /// [`Endpoint::close`]). Without peer error handling UCX cannot force a close: the
    /// endpoint is flushed instead, for at most 100 ms, and the rest finishes in the background
    /// (`ucx_core::Endpoint::force_close_now`).
    pub fn abort(&self) {
        #[cfg(feature = "tracing")]
        tracing::debug!(tags = ?self.inner.tags, "ucx-async: aborting endpoint");
        self.inner.state.go_down(CLOSED);
        self.inner.clear_stream();
        self.inner.core.force_close_now();
        self.inner.drop_unreceived();
    }
}

/// After a receive of `length` bytes: a large one may have been read through by single copy
/// within the call, never waiting, and a loop of such receives would hold the runtime's thread
/// (a current-thread runtime looks at its timers only every few dozen task polls, and tokio's
/// budget counts a receive as one operation whatever it copied): such a receive yields once.
/// 1 MiB messages streamed by single copy made a 10 ms timer fire 2 s late without it.
async fn yield_after_reading(length: usize) {
    if length >= ucx_core::single_copy::threshold() {
        tokio::task::yield_now().await;
    } else {
        tokio::task::coop::consume_budget().await;
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("tags", &self.inner.tags).field("flavour", &self.inner.flavour).finish()
    }
}

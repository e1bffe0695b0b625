//! An endpoint's life as the engine and UCX callbacks see it ([`EpShared`]): the failure UCX
//! reports for the peer, our own close (and why), the close callback; what a failure does to
//! the endpoint's operations, and how closing it ends them.
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use pyo3::prelude::*;
use ucx_core::{CloseMode, EndpointParams, Status, StreamBacklog};

use crate::am::AmQueues;
use crate::engine::{Engine, OpOwner};
use crate::errors::{self, End, Kind};
use crate::sync::lock;

/// How long `close()` waits for a flushing close before leaving it to finish in the background.
/// It blocks the event loop meanwhile: with 5 s, a soak whose clients were killed at random
/// (some mid-handshake, whose failure UCX had not reported yet) stalled the server for
/// seconds per close, and other clients' handshakes timed out.
const FLUSH_CLOSE_LIMIT: Duration = Duration::from_millis(100);

/// A Python endpoint's state, shared with the engine (as its operations' [`OpOwner`]) and
/// with UCX's error callback.
pub(crate) struct EpShared {
    pub(crate) key: u64,
    pub(crate) handle: usize,
    pub(crate) ep: Mutex<Option<ucx_core::Endpoint>>,
    pub(crate) error_handling: bool,
    /// The worker's active-message queues, where this endpoint's messages wait.
    pub(crate) am: Arc<AmQueues>,
    /// The failure UCX reported for the peer, kept after the endpoint is closed.
    pub(crate) failure: Mutex<Option<Status>>,
    /// Why we closed the endpoint ourselves, when it was not the caller's `close()`; later
    /// operations raise `UCXEndpointClosed` with it.
    pub(crate) closed_because: Mutex<Option<String>>,
    /// Set when this side began closing (`Endpoint.close` telling the peer first): the reset
    /// the peer answers with is our close, not a failure of the peer.
    pub(crate) closing: AtomicBool,
    /// Set once the peer has our shutdown message (`Endpoint.close`): it then closes its side,
    /// perhaps before ours closes, and the reset that gives our close is no failure.
    pub(crate) peer_told: AtomicBool,
    /// Set once `close` has finished: a failure reported after that is not news to anyone.
    closed: AtomicBool,
    pub(crate) close_callback: Mutex<Option<Py<PyAny>>>,
    /// Stream bytes that arrived before a stream receive asked for them (counted against the
    /// cap); stream receives read it first, under its lock.
    pub(crate) stream: Mutex<StreamBacklog>,
    /// The same-host single-copy link, with a peer that carried its mark in the handshake
    /// (`single_copy`).
    pub(crate) single_copy: OnceLock<Arc<ucx_core::single_copy::Link>>,
}

impl EpShared {
    /// Creates an endpoint with `make`, UCX's error callback queuing [`EpShared::on_failure`]
    /// for the engine's next drain.
    pub(crate) fn create(
        py: Python<'_>,
        engine: &Engine,
        am: &Arc<AmQueues>,
        error_handling: bool,
        make: impl FnOnce(EndpointParams) -> ucx_core::Result<ucx_core::Endpoint>,
    ) -> PyResult<Arc<EpShared>> {
        // The callback must not own the state (the state owns the endpoint, which owns the
        // callback), and the state exists only once UCX made the endpoint.
        let me: Arc<OnceLock<Weak<EpShared>>> = Arc::default();
        let (for_callback, events) = (me.clone(), engine.events());
        let params = EndpointParams::default().error_handling(error_handling).on_error(move |status| {
            // Looked up when the event runs: by then `create` has returned (it holds the GIL).
            let me = for_callback.clone();
            events.push(Box::new(move |engine, py| {
                if let Some(shared) = me.get().and_then(Weak::upgrade) {
                    shared.on_failure(engine, py, status);
                }
            }));
        });
        let ep = make(params).map_err(|e| errors::from_core(py, &e))?;
        let shared = Arc::new(EpShared {
            key: engine.next_key(),
            handle: ep.id(),
            ep: Mutex::new(Some(ep)),
            error_handling,
            am: am.clone(),
            failure: Mutex::new(None),
            closed_because: Mutex::new(None),
            closing: AtomicBool::new(false),
            peer_told: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            close_callback: Mutex::new(None),
            stream: Mutex::default(),
            single_copy: OnceLock::new(),
        });
        let _ = me.set(Arc::downgrade(&shared));
        Ok(shared)
    }

    /// Runs the close callback, at most once over the endpoint's life.
    pub(crate) fn run_close_callback(&self, py: Python<'_>) {
        let cb = lock(&self.close_callback).take();
        if let Some(cb) = cb {
            if let Err(e) = cb.bind(py).call0() {
                e.write_unraisable(py, None);
            }
        }
    }

    /// The peer failed: record it, cancel the endpoint's operations and waiting
    /// active-message receives, and run its close callback (UCX-Py's blocking-mode semantics,
    /// in both modes).
    fn on_failure(&self, engine: &Engine, py: Python<'_>, status: Status) {
        if self.closed.load(Ordering::Acquire) {
            return;
        }
        lock(&self.failure).get_or_insert(status);
        let end = if self.closing.load(Ordering::Acquire) { End::Closed } else { End::PeerFailed(status) };
        let n = engine.cancel_ops_of(self.key, end);
        engine.fail_stuck_ops_of(py, self.key, end);
        let waiting = self.am.fail_waiting(py, self.handle, end);
        engine.count_canceled_on_error(n + waiting as u64);
        self.run_close_callback(py);
    }

    /// Closes the endpoint (see `Endpoint.close`); `why`, when we close it on our own, is what
    /// later operations on it report.
    pub(crate) fn close(&self, engine: &Engine, py: Python<'_>, why: Option<String>) -> PyResult<()> {
        let Some(ep) = lock(&self.ep).take() else { return Ok(()) };
        // Held stream chunks go back to UCX while the endpoint still exists.
        lock(&self.stream).clear();
        let forced = why.is_some();
        if forced {
            *lock(&self.closed_because) = why;
        }
        engine.cancel_ops_of(self.key, End::Closed);
        self.am.fail_waiting(py, self.handle, End::Closed);
        // Without error handling ucx-core flushes instead (UCX refuses to force).
        let force = ep.status().is_err() || lock(&self.failure).is_some() || forced;
        let mode = if force { CloseMode::Force } else { CloseMode::Flush };
        let peer_told = self.peer_told.load(Ordering::Acquire);
        let closed = py.allow_threads(|| close_within(&ep, mode, peer_told));
        // Deliver the cancellations now, so awaiting tasks see them on their next step.
        engine.progress(py);
        // What the cancel and the close did not end waits for a message tail that can no
        // longer come (see `Engine::fail_stuck_ops_of`).
        engine.fail_stuck_ops_of(py, self.key, End::Closed);
        self.closed.store(true, Ordering::Release);
        self.am.forget(self.handle);
        // What its peer sent that nobody received can no longer be.
        engine.discard(py, engine.unclaimed.release(self.key));
        self.run_close_callback(py);
        closed.map_err(|e| errors::new(py, Kind::Error, format!("Error while closing endpoint: {e}")))
    }

    /// Counts messages waiting on `tag` against this endpoint (the cap of
    /// `ucx_core::unclaimed`); nothing once it is closed.
    pub(crate) fn watch(self: &Arc<Self>, engine: &Engine, tag: u64) {
        if lock(&self.ep).is_some() {
            engine.unclaimed.watch(tag, self.key, || Arc::downgrade(self) as Weak<dyn OpOwner>);
        }
    }

    /// The failure UCX reported for the peer, or the endpoint's status says.
    pub(crate) fn failure(&self) -> Option<Status> {
        if let Some(s) = *lock(&self.failure) {
            return Some(s);
        }
        let ep = lock(&self.ep).clone();
        ep.and_then(|ep| ep.status().err().map(|e| e.status()))
    }
}

impl OpOwner for EpShared {
    fn key(&self) -> u64 {
        self.key
    }

    fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    fn lost_message(&self, engine: &Engine, py: Python<'_>) {
        let why = "a receive on it was cancelled after UCX had matched a message to it, so the endpoint was \
                   closed rather than lose that message silently";
        if let Err(e) = self.close(engine, py, Some(why.to_string())) {
            e.write_unraisable(py, None);
        }
    }

    fn fill_stream_backlog(&self) -> usize {
        let Some(ep) = lock(&self.ep).clone() else { return 0 };
        lock(&self.stream).fill(&ep)
    }

    fn over_unclaimed_limit(&self, engine: &Engine, py: Python<'_>, overflow: &ucx_core::Overflow) {
        let why = format!("closed because {overflow} (UCXPY_MAX_UNCLAIMED_BYTES)");
        warn(py, &format!("Endpoint {:#x} {why}", self.handle));
        if let Err(e) = self.close(engine, py, Some(why)) {
            e.write_unraisable(py, None);
        }
    }
}

/// Logs `msg` as a warning on UCX-Py's logger, "ucx".
fn warn(py: Python<'_>, msg: &str) {
    let logged = py
        .import("logging")
        .and_then(|logging| logging.call_method1("getLogger", ("ucx",)))
        .and_then(|logger| logger.call_method1("warning", (msg,)));
    if let Err(e) = logged {
        e.write_unraisable(py, None);
    }
}

/// Closes `ep` with `mode`, leaving a flushing close that has not finished in time to finish in
/// the background. A peer that had already closed or left is no failure, except where the
/// close failed at once, the endpoint has no error handling and the peer was not told to close
/// (UCX-Py raised that: without error handling its close flushes too; with it, its close is
/// forced, which UCX never fails).
fn close_within(ep: &ucx_core::Endpoint, mode: CloseMode, peer_told: bool) -> ucx_core::Result<()> {
    match ep.close_within(mode, FLUSH_CLOSE_LIMIT) {
        // A peer we told to close may have done so before our close ran: its reset is then
        // what we asked for. With error handling, a flush that fails at once with the peer's
        // failure met a transport that had seen it before UCX called the error callback
        // (UCX queues that for its next progress); UCX-Py's forced close would not have
        // failed. Seen as `abort()` raising "Endpoint timeout" on a bootstrap endpoint whose
        // peer had just aborted its own.
        Err(e) if (peer_told || ep.error_handling()) && e.status().is_peer_failure() => Ok(()),
        Err(e) => Err(e),
        Ok(Some(Err(e))) if !e.status().is_peer_failure() => Err(e),
        Ok(_) => Ok(()),
    }
}

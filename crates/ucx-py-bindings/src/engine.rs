//! The engine behind one Python-visible worker: every operation in flight (UCXX's
//! `inflight_requests`), the events UCX callbacks report, and `drain`, which turns both into
//! resolved futures and Python callbacks.
//!
//! UCX callbacks run inside `ucp_worker_progress` with the GIL released; they never touch
//! Python. They only record (a completed operation's id, a failed endpoint, a connection
//! request, an active message) under short locks. `drain` runs afterwards on the progressing
//! thread with the GIL held and calls into Python with no lock held, so Python code it runs
//! may submit operations or progress again.
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context as TaskContext, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use pyo3::types::{PyCFunction, PyTuple};
use ucx_core::{AmMessage, Completion, ConnRequest, Owned, Status};

use crate::buffer;
use crate::errors::{self, End, Kind};
use crate::request::Request;
use crate::target::{py_true, Outcome, Target, Undelivered};

/// Spin rounds between two checks of the wakeup fd (see `Engine::spin_until`).
const FD_CHECK_ROUNDS: u32 = 16;

/// Locks a mutex, tolerating poisoning (a panic elsewhere must not wedge the worker).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An operation UCX may still be working on, whatever its buffer type.
pub(crate) trait Pending: Send {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Poll<ucx_core::Result<Completion>>;
    fn cancel(&self);
    fn is_complete(&self) -> bool;
}

impl<B: Send + 'static> Pending for Owned<B> {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Poll<ucx_core::Result<Completion>> {
        self.poll_complete(cx)
    }
    fn cancel(&self) {
        Owned::cancel(self)
    }
    fn is_complete(&self) -> bool {
        Owned::is_complete(self)
    }
}

/// How a finished operation's success is checked and reported.
pub(crate) struct Meta {
    /// Receives: the exact length expected (UCX-Py refuses shorter messages too).
    pub(crate) expect_len: Option<usize>,
    /// The endpoint whose closing or failure cancels the operation.
    pub(crate) ep: Option<u64>,
    /// The operation's name in error messages (`"<{name}>: ..."`).
    pub(crate) name: Name,
    /// Stream receives report connection statuses by name.
    pub(crate) stream_recv: bool,
    /// What success resolves to (default `True`).
    pub(crate) value: Option<Py<PyAny>>,
}

/// An operation's name for error messages, formatted only when one is raised.
pub(crate) enum Name {
    Given(String),
    Op { what: &'static str, ep: usize, tag: Option<u64>, nbytes: usize },
}

impl Name {
    /// The caller's `given` name, else one made from the operation (`ep`: the `ucp_ep_h`, 0
    /// for a worker-wide operation).
    pub(crate) fn or_op(given: Option<String>, what: &'static str, ep: usize, tag: Option<u64>, nbytes: usize) -> Name {
        given.map(Name::Given).unwrap_or(Name::Op { what, ep, tag, nbytes })
    }

    fn render(&self) -> String {
        match self {
            Name::Given(s) => s.clone(),
            Name::Op { what, ep, tag: Some(tag), nbytes } => {
                format!("[{what}] ep: {ep:#x}, tag: {tag:#x}, nbytes: {nbytes}")
            }
            Name::Op { what, ep, tag: None, nbytes } => format!("[{what}] ep: {ep:#x}, nbytes: {nbytes}"),
        }
    }
}

struct Op {
    pending: Box<dyn Pending>,
    sink: Sink,
    meta: Meta,
    /// Set when the operation was cancelled because its endpoint ended: its failure then
    /// raises that end's exception, not UCX's `UCXCanceled`.
    ended_by: Option<End>,
}

/// Where an operation's outcome goes.
pub(crate) enum Sink {
    /// To Python: a future or callback.
    Target(Target),
    /// To the active-message queue of the sender's endpoint (a rendezvous message fetched).
    AmRoute(usize),
}

impl Sink {
    /// Delivers `outcome`; a received value whose future was cancelled meanwhile goes to
    /// `undelivered`.
    fn deliver(
        self,
        engine: &Engine,
        py: Python<'_>,
        outcome: Outcome,
        undelivered: impl FnOnce() -> Option<Undelivered>,
    ) {
        match self {
            Sink::Target(t) => t.resolve_or(py, outcome, undelivered),
            Sink::AmRoute(handle) => crate::am::route(engine, py, handle, outcome),
        }
    }
}

/// Ids of operations whose completion callback has run, filled by their wakers.
#[derive(Default)]
struct DoneQueue(Mutex<Vec<u64>>);

struct OpWaker {
    id: u64,
    done: Arc<DoneQueue>,
}

impl Wake for OpWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.done.0).push(self.id);
    }
}

/// What UCX callbacks report besides completions.
#[derive(Default)]
pub(crate) struct Events {
    pub(crate) ep_errors: Vec<(u64, Status)>,
    pub(crate) conns: Vec<(Arc<Py<PyAny>>, ConnRequest)>,
    pub(crate) am: Vec<AmMessage>,
}

/// A Python endpoint's shared state, reachable from the engine by key.
pub(crate) struct EpShared {
    pub(crate) key: u64,
    pub(crate) handle: usize,
    pub(crate) ep: Mutex<Option<ucx_core::Endpoint>>,
    pub(crate) error_handling: bool,
    /// The failure UCX reported for the peer, kept after the endpoint is closed.
    pub(crate) failure: Mutex<Option<Status>>,
    /// Why we closed the endpoint ourselves, when it was not the caller's `close()`; later
    /// operations raise `UCXEndpointClosed` with it.
    pub(crate) closed_because: Mutex<Option<&'static str>>,
    /// Set when this side began closing (`Endpoint.close` telling the peer first): the reset
    /// the peer answers with is our close, not a failure of the peer.
    pub(crate) closing: AtomicBool,
    pub(crate) close_callback: Mutex<Option<Py<PyAny>>>,
}

impl EpShared {
    /// Runs the close callback, at most once over the endpoint's life.
    pub(crate) fn run_close_callback(&self, py: Python<'_>) {
        let cb = lock(&self.close_callback).take();
        if let Some(cb) = cb {
            if let Err(e) = cb.bind(py).call0() {
                e.write_unraisable(py, None);
            }
        }
    }
}

/// Arrived active messages, by the sender's endpoint handle, and receivers waiting for them.
#[derive(Default)]
pub(crate) struct AmRouting {
    /// Allocators by memory type: `[host, cuda]`; host defaults to `bytearray`.
    pub(crate) allocators: [Option<Py<PyAny>>; 2],
    pub(crate) queued: HashMap<usize, VecDeque<Outcome>>,
    pub(crate) waiting: HashMap<usize, VecDeque<Target>>,
}

pub(crate) struct Engine {
    /// This engine, for callbacks that may outlive a call (an outcome handed to another
    /// thread's loop).
    me: Weak<Engine>,
    pub(crate) worker: ucx_core::Worker,
    /// Whether the context loaded a CUDA transport.
    pub(crate) cuda_support: bool,
    ops: Mutex<HashMap<u64, Op>>,
    done: Arc<DoneQueue>,
    pub(crate) events: Arc<Mutex<Events>>,
    pub(crate) endpoints: Mutex<HashMap<u64, Arc<EpShared>>>,
    pub(crate) am: Mutex<AmRouting>,
    next_id: AtomicU64,
    /// Called when an operation needs progress the event loop might otherwise never give it:
    /// the blocking-mode drivers' dispatcher.
    pub(crate) progress_hook: Mutex<Option<Py<PyAny>>>,
    /// Operations canceled because their endpoint failed (UCX-Py's
    /// `cancel_inflight_messages` count).
    pub(crate) canceled_on_error: AtomicU64,
}

impl Engine {
    pub(crate) fn new(worker: ucx_core::Worker, cuda_support: bool) -> Arc<Engine> {
        Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            worker,
            cuda_support,
            ops: Mutex::default(),
            done: Arc::default(),
            events: Arc::default(),
            endpoints: Mutex::default(),
            am: Mutex::default(),
            next_id: AtomicU64::new(1),
            progress_hook: Mutex::default(),

            canceled_on_error: AtomicU64::new(0),
        })
    }

    /// A handle on this engine that does not keep it alive.
    pub(crate) fn weak(&self) -> Weak<Engine> {
        self.me.clone()
    }

    pub(crate) fn next_key(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Takes a submitted operation: finished inline, it is checked and `Ok(None)` returned (or
    /// its length error raised); in flight, it is tracked and the future (or `None` for a
    /// callback target) returned.
    pub(crate) fn track<B: Send + 'static>(
        self: &Arc<Self>,
        py: Python<'_>,
        submitted: ucx_core::Result<Owned<B>>,
        on_done: Option<&Bound<'_, PyAny>>,
        meta: Meta,
    ) -> PyResult<Option<Py<PyAny>>> {
        // A submission UCX refused at once is named by the operation first, as UCX-Py's
        // `<name>: status`, so callers (and logs) see which send or receive it was.
        let mut owned =
            submitted.map_err(|e| errors::new(py, Kind::Error, format!("<{}>: {e}", meta.name.render())))?;
        let (id, finished) = self.first_poll(&mut owned);
        if let Some(r) = finished {
            drop(owned);
            buffer::release_deferred(py);
            return outcome(py, r, &meta).map(|_| None);
        }
        let (target, ret) = Target::new(py, on_done)?;
        self.keep(py, id, owned, Sink::Target(target), meta);
        match ret {
            Some(fut) => {
                self.cancel_with(py, id, fut.bind(py))?;
                Ok(Some(fut))
            }
            // A callback target: hand back a request to poll or cancel.
            None => Ok(Some(Py::new(py, Request { id, engine: Arc::downgrade(self) })?.into_any())),
        }
    }

    /// Makes cancelling `fut` (a task cancel, a `wait_for` timeout) cancel operation `id` in
    /// UCX. The callback is added before any task awaits the future, so it runs before the
    /// cancelled task resumes: when the caller sees the cancellation, UCX has let go.
    fn cancel_with(self: &Arc<Self>, py: Python<'_>, id: u64, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        let engine = Arc::downgrade(self);
        let on_done = PyCFunction::new_closure(py, None, None, move |args: &Bound<'_, PyTuple>, _| -> PyResult<()> {
            let fut = args.get_item(0)?;
            if fut.call_method0(pyo3::intern!(args.py(), "cancelled"))?.is_truthy()? {
                if let Some(engine) = engine.upgrade() {
                    engine.canceled_by_caller(args.py(), id);
                }
            }
            Ok(())
        })?;
        fut.call_method1(pyo3::intern!(py, "add_done_callback"), (on_done,))?;
        Ok(())
    }

    /// The caller cancelled operation `id`'s future. UCX withdraws an unmatched receive at
    /// once. A receive it cannot withdraw (already matched: a rendezvous or multi-fragment
    /// message under way, a stream receive) or that finished before the cancel was seen has
    /// taken a message the caller will never see: its endpoint is closed so that the next
    /// receive fails clearly instead of silently getting the message after. A send UCX cannot
    /// withdraw goes on to completion (the peer receives it).
    fn canceled_by_caller(&self, py: Python<'_>, id: u64) {
        let receiving_on = {
            let ops = lock(&self.ops);
            // Already finished: `finish` dealt with a message it received.
            let Some(op) = ops.get(&id) else { return };
            op.pending.cancel();
            op.meta.ep.filter(|_| op.meta.expect_len.is_some())
        };
        // A withdrawn receive has completed (canceled) by now, and one that finished meanwhile
        // is `finish`'s to judge; one still running was matched and goes on without a reader.
        self.finish(py, id);
        if let Some(key) = receiving_on.filter(|_| self.is_inflight(id)) {
            self.close_for_lost_message(py, key);
        }
    }

    /// Closes endpoint `key` because a message it received went to a receive nobody awaits.
    pub(crate) fn close_for_lost_message(&self, py: Python<'_>, key: u64) {
        let shared = lock(&self.endpoints).get(&key).cloned();
        if let Some(shared) = shared {
            let why = "a receive on it was cancelled after UCX had matched a message to it, so the endpoint was \
                       closed rather than lose that message silently";
            if let Err(e) = crate::endpoint::close_shared(self, py, &shared, Some(why)) {
                e.write_unraisable(py, None);
            }
        }
    }

    /// Tracks an operation whose outcome goes to `sink` (rendezvous active messages,
    /// delivered to their endpoint's queue).
    pub(crate) fn track_with<B: Send + 'static>(&self, py: Python<'_>, mut owned: Owned<B>, sink: Sink, meta: Meta) {
        let (id, finished) = self.first_poll(&mut owned);
        match finished {
            Some(r) => sink.deliver(self, py, outcome(py, r, &meta), || None),
            None => self.keep(py, id, owned, sink, meta),
        }
    }

    /// Gives a submitted operation an id and a waker that queues that id on completion;
    /// returns the id and the result if UCX has already finished the operation.
    fn first_poll<B: Send + 'static>(&self, owned: &mut Owned<B>) -> (u64, Option<ucx_core::Result<Completion>>) {
        let id = self.next_key();
        let waker = Waker::from(Arc::new(OpWaker { id, done: self.done.clone() }));
        match owned.poll_complete(&mut TaskContext::from_waker(&waker)) {
            Poll::Ready(r) => {
                lock(&self.done.0).retain(|d| *d != id);
                (id, Some(r))
            }
            Poll::Pending => (id, None),
        }
    }

    /// Keeps an operation in flight until its completion is drained.
    fn keep<B: Send + 'static>(&self, py: Python<'_>, id: u64, owned: Owned<B>, sink: Sink, meta: Meta) {
        let finished_meanwhile = {
            let mut ops = lock(&self.ops);
            let complete = owned.is_complete();
            ops.insert(id, Op { pending: Box::new(owned), sink, meta, ended_by: None });
            complete
        };
        // Between the first poll and here the caller ran Python (making the future), which may
        // let another thread progress the worker and drain: that drain found no op under this
        // id and dropped its completion, so queue it again. (The callback marks an operation
        // complete before it wakes, so a completion after the insert is queued by its waker.)
        if finished_meanwhile {
            lock(&self.done.0).push(id);
        }
        self.needs_progress(py);
    }

    /// Asks the event-loop driver for a progress pass (the hook picks the driver of the
    /// calling thread's loop, and dedupes passes already scheduled).
    pub(crate) fn needs_progress(&self, py: Python<'_>) {
        let hook = lock(&self.progress_hook).as_ref().map(|h| h.clone_ref(py));
        if let Some(hook) = hook {
            if let Err(e) = hook.bind(py).call0() {
                e.write_unraisable(py, None);
            }
        }
    }

    /// Progresses the worker until `done()` or `spin_us` have passed (call it with the GIL
    /// released). Once armed, UCX polls the transports only after `arm()` has handled what the
    /// wakeup fd signals, so the fd is checked (a system call) every few rounds.
    pub(crate) fn spin_until(&self, spin_us: u64, done: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_micros(spin_us);
        let mut round = 0u32;
        while !done() && Instant::now() < deadline {
            self.worker.progress();
            round = round.wrapping_add(1);
            if round % FD_CHECK_ROUNDS == 0 && self.worker.wakeup_pending().unwrap_or(false) {
                let _ = self.worker.arm();
            }
        }
    }

    /// Submits with an inline spin: if `submitted` is in flight and `spin_us > 0`, progresses
    /// (GIL released) until it completes or `spin_us` pass, then tracks it as `track` does and
    /// only then delivers what else the spin completed: an endpoint failure the spin saw must
    /// find the operation tracked, to cancel it (UCX does not end a tag receive when an
    /// endpoint fails), and an event the spin consumed would otherwise wait for a pass that the
    /// sleeping loop never runs.
    pub(crate) fn track_spinning<B: Send + 'static>(
        self: &Arc<Self>,
        py: Python<'_>,
        submitted: ucx_core::Result<Owned<B>>,
        on_done: Option<&Bound<'_, PyAny>>,
        meta: Meta,
        spin_us: u64,
    ) -> PyResult<Option<Py<PyAny>>> {
        let (submitted, spun) = match submitted {
            Ok(op) if spin_us > 0 && !op.is_complete() => {
                let op = py.allow_threads(move || {
                    self.spin_until(spin_us, || op.is_complete());
                    op
                });
                (Ok(op), true)
            }
            other => (other, false),
        };
        let tracked = self.track(py, submitted, on_done, meta);
        if spun {
            self.drain(py);
        }
        tracked
    }

    /// Progresses the worker one batch (until idle, at most `PROGRESS_BATCH` rounds, so a
    /// peer that never stops sending cannot hold the event loop), with the GIL released, then
    /// delivers everything that happened. Returns whether anything was delivered.
    pub(crate) fn progress(&self, py: Python<'_>) -> bool {
        self.progress_pass(py).0
    }

    /// [`Engine::progress`], also saying whether UCX went idle (false: the batch ended at its
    /// bound, and the worker must not be armed before progressing again).
    pub(crate) fn progress_pass(&self, py: Python<'_>) -> (bool, bool) {
        let worker = &self.worker;
        let batch = py.allow_threads(|| worker.progress_batch());
        (self.drain(py), batch.idle)
    }

    /// Delivers completions and events to Python until none are left. Returns whether any
    /// were delivered.
    pub(crate) fn drain(&self, py: Python<'_>) -> bool {
        let mut any = false;
        loop {
            buffer::release_deferred(py);
            let events = std::mem::take(&mut *lock(&self.events));
            let ids = std::mem::take(&mut *lock(&self.done.0));
            if ids.is_empty() && events.ep_errors.is_empty() && events.conns.is_empty() && events.am.is_empty() {
                buffer::release_deferred(py);
                return any;
            }
            any = true;
            for id in ids {
                self.finish(py, id);
            }
            for (key, status) in events.ep_errors {
                self.on_ep_error(py, key, status);
            }
            for msg in events.am {
                crate::am::deliver(self, py, msg);
            }
            for (callback, request) in events.conns {
                let request = crate::listener::ConnRequestPy::wrap(request);
                if let Err(e) = Py::new(py, request).and_then(|r| callback.bind(py).call1((r,))) {
                    e.write_unraisable(py, None);
                }
            }
        }
    }

    fn finish(&self, py: Python<'_>, id: u64) {
        let Some(mut op) = lock(&self.ops).remove(&id) else { return };
        // The waker only matters for a stale wake-up (the operation still running), which UCX
        // completions never cause; then the operation goes back to wait.
        let waker = Waker::from(Arc::new(OpWaker { id, done: self.done.clone() }));
        match op.pending.poll(&mut TaskContext::from_waker(&waker)) {
            Poll::Ready(r) => {
                // A message received for a future the caller cancelled meanwhile (here, or on
                // its own loop before the hand-over ran) is lost to them: the endpoint it came
                // on is closed, so the next receive fails clearly instead of silently getting
                // the message after.
                let receive_on = op.meta.ep.filter(|_| op.meta.expect_len.is_some());
                let undelivered = || {
                    receive_on.map(|key| {
                        let engine = self.weak();
                        Box::new(move |py: Python<'_>, _: Py<PyAny>| {
                            if let Some(engine) = engine.upgrade() {
                                engine.close_for_lost_message(py, key);
                            }
                        }) as Undelivered
                    })
                };
                let out = match r {
                    // An operation UCX itself failed while we were closing its endpoint (the
                    // peer answering our close with a reset) failed because of our close.
                    Err(e) => {
                        match op.ended_by.or_else(|| op.meta.ep.filter(|k| self.is_closing(*k)).map(|_| End::Closed)) {
                            Some(end) => Err(end.error(py, format!("<{}>: {}", op.meta.name.render(), end.why()))),
                            None => outcome(py, Err(e), &op.meta),
                        }
                    }
                    ok => outcome(py, ok, &op.meta),
                };
                op.sink.deliver(self, py, out, undelivered);
            }
            Poll::Pending => {
                lock(&self.ops).insert(id, op);
            }
        }
    }

    /// Cancels every operation registered on endpoint `key` because it ended (`end`). Their
    /// futures fail with that end's exception once UCX reports the cancellation (a drain
    /// later). Returns how many.
    pub(crate) fn cancel_ops_of(&self, key: u64, end: End) -> u64 {
        let mut ops = lock(&self.ops);
        let mut n = 0;
        for op in ops.values_mut().filter(|op| op.meta.ep == Some(key)) {
            op.ended_by.get_or_insert(end);
            op.pending.cancel();
            n += 1;
        }
        n
    }

    /// A peer failed: record it, cancel the endpoint's operations and waiting active-message
    /// receives, and run its close callback (UCX-Py's blocking-mode semantics, in both modes).
    fn on_ep_error(&self, py: Python<'_>, key: u64, status: Status) {
        let shared = lock(&self.endpoints).get(&key).cloned();
        let Some(shared) = shared else { return };
        lock(&shared.failure).get_or_insert(status);
        let end = if shared.closing.load(Ordering::Acquire) { End::Closed } else { End::PeerFailed(status) };
        let n = self.cancel_ops_of(key, end);
        self.fail_stuck_ops_of(py, key, end);
        let waiting = crate::am::fail_waiting(self, py, shared.handle, end);
        self.canceled_on_error.fetch_add(n + waiting as u64, Ordering::Relaxed);
        shared.run_close_callback(py);
    }

    /// Fails the operations of endpoint `key` that its failure (or closing) and their cancel
    /// did not end; `why` says what happened. UCX ignores the cancel of a receive it has
    /// matched to a message, and one whose tail can no longer arrive (a multi-fragment eager
    /// message whose sender died, or whose endpoint we closed) never completes: its task hung.
    /// Each is failed now; its buffer stays with UCX (the `Owned` is let go), which is sound
    /// whatever UCX does later.
    pub(crate) fn fail_stuck_ops_of(&self, py: Python<'_>, key: u64, end: End) {
        let stuck: Vec<Op> = {
            let mut ops = lock(&self.ops);
            let ids: Vec<u64> = ops
                .iter()
                .filter(|(_, op)| op.meta.ep == Some(key) && !op.pending.is_complete())
                .map(|(id, _)| *id)
                .collect();
            ids.into_iter().filter_map(|id| ops.remove(&id)).collect()
        };
        for op in stuck {
            let msg = format!("<{}>: {} before UCX finished this", op.meta.name.render(), end.why());
            op.sink.deliver(self, py, Err(end.error(py, msg)), || None);
        }
    }

    /// Whether this side began closing endpoint `key`.
    fn is_closing(&self, key: u64) -> bool {
        lock(&self.endpoints).get(&key).is_some_and(|s| s.closing.load(Ordering::Acquire))
    }

    /// Whether a completion or event is waiting to be delivered.
    pub(crate) fn has_news(&self) -> bool {
        if !lock(&self.done.0).is_empty() {
            return true;
        }
        let ev = lock(&self.events);
        !(ev.ep_errors.is_empty() && ev.conns.is_empty() && ev.am.is_empty())
    }

    /// Whether operation `id` is still in flight.
    pub(crate) fn is_inflight(&self, id: u64) -> bool {
        lock(&self.ops).contains_key(&id)
    }

    /// Asks UCX to cancel operation `id`, if it is in flight.
    pub(crate) fn cancel_op(&self, id: u64) {
        if let Some(op) = lock(&self.ops).get(&id) {
            op.pending.cancel();
        }
    }

    /// How many operations are in flight.
    pub(crate) fn inflight(&self) -> usize {
        lock(&self.ops).len()
    }

    /// Cancels everything in flight, progresses until UCX has finished with all of it, and
    /// discards unreceived messages (used when the context goes).
    pub(crate) fn cancel_all(&self, py: Python<'_>) {
        for op in lock(&self.ops).values() {
            op.pending.cancel();
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(1);
        while self.inflight() > 0 && std::time::Instant::now() < deadline {
            self.progress(py);
        }
        // Messages nobody will receive (e.g. a peer's close message after we aborted) are
        // taken and discarded, so UCX does not warn about them when the worker goes.
        while let Some(msg) = self.worker.tag_probe_take(0, 0) {
            drop(msg);
        }
        // What UCX would not cancel is dropped: its buffer stays alive until UCX lets go.
        let rest = std::mem::take(&mut *lock(&self.ops));
        for (_, op) in rest {
            op.sink.deliver(self, py, Err(errors::new(py, Kind::Canceled, "the worker was closed")), || None);
        }
    }
}

/// A finished operation's outcome: length checked against what was expected.
fn outcome(py: Python<'_>, r: ucx_core::Result<Completion>, meta: &Meta) -> Outcome {
    match r {
        Ok(c) => match meta.expect_len {
            Some(n) if c.length != n => Err(errors::new(
                py,
                Kind::MsgTruncated,
                format!("<{}>: length mismatch: {} (got) != {} (expected)", meta.name.render(), c.length, n),
            )),
            _ => Ok(meta.value.as_ref().map(|v| v.clone_ref(py)).unwrap_or_else(|| py_true(py))),
        },
        Err(e) => Err(errors::from_status(py, &meta.name.render(), e.status(), meta.stream_recv)),
    }
}

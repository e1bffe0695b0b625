//! The engine behind one Python-visible worker: the operations in flight (a
//! [`ucx_core::Inflight`] table) and the events UCX callbacks report, and `drain`, which turns
//! both into resolved futures and Python calls after progress.
//!
//! UCX callbacks run inside `ucp_worker_progress` with the GIL released; they never touch
//! Python. A completion only queues its operation's id (in the table); any other callback
//! (an endpoint failing, a connection request, an active message) queues an [`Event`]: a
//! closure its owner wrote, which `drain` runs. `drain` runs afterwards on the progressing
//! thread with the GIL held and calls into Python with no lock held, so Python code it runs
//! may submit operations or progress again.
//!
//! The engine knows no endpoint, listener or active-message type: an operation names the
//! endpoint it belongs to through [`OpOwner`], and where its outcome goes through [`Sink`].
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use pyo3::prelude::*;
use ucx_core::unclaimed::{Hold, Scope, DEFAULT_LIMIT};
use ucx_core::{Inflight, Owned, ProbedMessage};

use crate::buffer;
use crate::errors::{self, End, Kind};
use crate::outcome::{Expect, Outcome};
use crate::sync::lock;
use crate::target::{Target, Undelivered};

/// Work a UCX callback hands to the next drain, which runs it with the GIL.
pub(crate) type Event = Box<dyn FnOnce(&Engine, Python<'_>) + Send>;

/// Events queued by UCX callbacks, shared with the closures that push them.
#[derive(Default)]
pub(crate) struct Events(Mutex<Vec<Event>>);

impl Events {
    /// Queues `event` for the next drain (callable without the GIL, from a UCX callback).
    pub(crate) fn push(&self, event: Event) {
        lock(&self.0).push(event);
    }

    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *lock(&self.0))
    }

    fn is_empty(&self) -> bool {
        lock(&self.0).is_empty()
    }
}

/// The endpoint an operation belongs to, as far as the engine needs it: closing or losing the
/// endpoint ends the operation.
pub(crate) trait OpOwner: Send + Sync {
    /// The endpoint's key, unique in its engine.
    fn key(&self) -> u64;
    /// Whether this side began closing it: a failure then counts as our close.
    fn is_closing(&self) -> bool;
    /// A message it received went to a receive nobody awaits: close it, so that the next
    /// receive fails clearly instead of silently getting the message after.
    fn lost_message(&self, engine: &Engine, py: Python<'_>);
    /// Its peer left more unreceived than the cap allows: close it, saying why.
    fn over_unclaimed_limit(&self, engine: &Engine, py: Python<'_>, overflow: &ucx_core::Overflow);
    /// Takes the stream bytes that arrived unasked into its backlog; returns how many it holds.
    fn fill_stream_backlog(&self) -> usize;
}

/// A closure that takes an operation's outcome in place of a Python target.
pub(crate) type Route = Box<dyn FnOnce(&Engine, Python<'_>, Outcome) + Send>;

/// Where an operation's outcome goes.
pub(crate) enum Sink {
    /// To Python: a future or callback.
    Target(Target),
    /// To a closure of the operation's owner (a rendezvous active message, routed to its
    /// endpoint's queue).
    Route(Route),
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
            Sink::Route(route) => route(engine, py, outcome),
        }
    }
}

/// One operation in flight: where its outcome goes and how it is checked.
struct Op {
    sink: Sink,
    expect: Expect,
    owner: Option<Arc<dyn OpOwner>>,
    /// Set when the operation was cancelled because its endpoint ended: its failure then
    /// raises that end's exception, not UCX's `UCXCanceled`.
    ended_by: Option<End>,
}

impl Op {
    /// The endpoint a receive belongs to: a message it takes that nobody sees is lost there.
    fn receiving_on(&self) -> Option<&Arc<dyn OpOwner>> {
        self.owner.as_ref().filter(|_| self.expect.len.is_some())
    }

    fn owned_by(&self, key: u64) -> bool {
        self.owner.as_ref().is_some_and(|o| o.key() == key)
    }
}

pub(crate) struct Engine {
    /// This engine, for callbacks that may outlive a call (an outcome handed to another
    /// thread's loop).
    me: Weak<Engine>,
    pub(crate) worker: ucx_core::Worker,
    /// Whether the context loaded a CUDA transport.
    pub(crate) cuda_support: bool,
    ops: Inflight<Op>,
    events: Arc<Events>,
    /// Messages that arrived before their receive, and the cap on what a peer may leave
    /// unreceived per endpoint (`UCXPY_MAX_UNCLAIMED_BYTES`). Every tag receive looks there
    /// first, so its sweeps may take every waiting message.
    pub(crate) unclaimed: Hold<dyn OpOwner>,
    /// Called when an operation needs progress the event loop might otherwise never give it:
    /// the blocking-mode drivers' dispatcher.
    progress_hook: Mutex<Option<Py<PyAny>>>,
    /// Operations canceled because their endpoint failed (UCX-Py's
    /// `cancel_inflight_messages` count).
    canceled_on_error: AtomicU64,
}

impl Engine {
    pub(crate) fn new(worker: ucx_core::Worker, cuda_support: bool) -> Arc<Engine> {
        Arc::new_cyclic(|me| Engine {
            me: me.clone(),
            worker,
            cuda_support,
            ops: Inflight::new(),
            events: Arc::default(),
            unclaimed: Hold::new(Some(DEFAULT_LIMIT), Scope::All),
            progress_hook: Mutex::default(),
            canceled_on_error: AtomicU64::new(0),
        })
    }

    /// A handle on this engine that does not keep it alive.
    pub(crate) fn weak(&self) -> Weak<Engine> {
        self.me.clone()
    }

    /// The event queue, for UCX callbacks to push to.
    pub(crate) fn events(&self) -> Arc<Events> {
        self.events.clone()
    }

    /// A fresh key (for endpoints); never equal to another key or operation id.
    pub(crate) fn next_key(&self) -> u64 {
        self.ops.next_id()
    }

    /// Gives a submitted operation its id; returns the id and the outcome if UCX finished it
    /// already (then it is not tracked). Otherwise [`Engine::keep`] it.
    pub(crate) fn start<B: Send + 'static>(
        &self,
        py: Python<'_>,
        owned: &mut Owned<B>,
        expect: &Expect,
    ) -> (u64, Option<Outcome>) {
        let (id, finished) = self.ops.start(owned);
        (id, finished.map(|r| expect.outcome(py, r)))
    }

    /// Keeps an operation in flight until its completion is drained, and asks for progress.
    pub(crate) fn keep<B: Send + 'static>(
        &self,
        py: Python<'_>,
        id: u64,
        owned: Owned<B>,
        sink: Sink,
        expect: Expect,
        owner: Option<Arc<dyn OpOwner>>,
    ) {
        self.ops.keep(id, owned, Op { sink, expect, owner, ended_by: None });
        self.needs_progress(py);
    }

    /// Tracks an operation whose outcome goes to `sink` (no Python future is involved).
    /// `owner`: the endpoint whose closing or failure ends it, if any.
    pub(crate) fn track_with<B: Send + 'static>(
        &self,
        py: Python<'_>,
        mut owned: Owned<B>,
        sink: Sink,
        expect: Expect,
        owner: Option<Arc<dyn OpOwner>>,
    ) {
        match self.start(py, &mut owned, &expect) {
            (_, Some(out)) => sink.deliver(self, py, out, || None),
            (id, None) => self.keep(py, id, owned, sink, expect, owner),
        }
    }

    /// The caller cancelled operation `id`'s future. UCX withdraws an unmatched receive at
    /// once. A receive it cannot withdraw (already matched: a rendezvous or multi-fragment
    /// message under way, a stream receive) or that finished before the cancel was seen has
    /// taken a message the caller will never see: its endpoint is closed so that the next
    /// receive fails clearly instead of silently getting the message after. A send UCX cannot
    /// withdraw goes on to completion (the peer receives it), and so does a single-copy send
    /// (`Expect::survives_cancel`), which is not even asked to stop.
    pub(crate) fn canceled_by_caller(&self, py: Python<'_>, id: u64) {
        if self.ops.inspect(id, |op| op.expect.survives_cancel) == Some(true) {
            return; // left to finish; its outcome goes to a cancelled future, which drops it
        }
        // Already finished: `finish` dealt with a message it received.
        let Some(receiving_on) = self.ops.cancel(id, |op| op.receiving_on().cloned()) else { return };
        // A withdrawn receive has completed (canceled) by now, and one that finished meanwhile
        // is `finish`'s to judge; one still running was matched and goes on without a reader.
        self.finish(py, id);
        if let Some(owner) = receiving_on.filter(|_| self.ops.contains(id)) {
            owner.lost_message(self, py);
        }
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

    /// Sets (or clears) the progress hook.
    pub(crate) fn set_progress_hook(&self, hook: Option<Py<PyAny>>) {
        *lock(&self.progress_hook) = hook;
    }

    /// Progresses the worker (call it with the GIL released) until `done()` or `spin_us`
    /// have passed: [`ucx_core::Worker::spin_until`], the one spin loop. The result says
    /// whether the spin left the worker unarmed; the caller then asks for a driver pass.
    pub(crate) fn spin_until(&self, spin_us: u64, done: impl FnMut() -> bool) -> ucx_core::Spin {
        self.worker.spin_until(Duration::from_micros(spin_us), done)
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
        let delivered = self.drain(py);
        // Closing runs Python (the close callback), so after the hold's lock is let go.
        for (owner, overflow) in self.unclaimed.sweep_if_due(&self.worker, |o| o.fill_stream_backlog()) {
            owner.over_unclaimed_limit(self, py, &overflow);
        }
        (delivered, batch.idle)
    }

    /// Delivers completions and events to Python until none are left. Returns whether any
    /// were delivered.
    pub(crate) fn drain(&self, py: Python<'_>) -> bool {
        let mut any = false;
        loop {
            buffer::release_deferred(py);
            let events = self.events.take();
            let ids = self.ops.take_done();
            if ids.is_empty() && events.is_empty() {
                buffer::release_deferred(py);
                return any;
            }
            any = true;
            for id in ids {
                self.finish(py, id);
            }
            for event in events {
                event(self, py);
            }
        }
    }

    fn finish(&self, py: Python<'_>, id: u64) {
        let Some((r, op)) = self.ops.finish(id) else { return };
        // A message received for a future the caller cancelled meanwhile (here, or on its own
        // loop before the hand-over ran) is lost to them: the endpoint it came on is closed, so
        // the next receive fails clearly instead of silently getting the message after.
        let receiving_on = op.receiving_on().cloned();
        let undelivered = || {
            receiving_on.map(|owner| {
                let engine = self.weak();
                Box::new(move |py: Python<'_>, _: Py<PyAny>| {
                    if let Some(engine) = engine.upgrade() {
                        owner.lost_message(&engine, py);
                    }
                }) as Undelivered
            })
        };
        let out = match r {
            // An operation UCX itself failed while we were closing its endpoint (the peer
            // answering our close with a reset) failed because of our close.
            Err(e) => {
                let closing = op.owner.as_ref().is_some_and(|o| o.is_closing());
                match op.ended_by.or(closing.then_some(End::Closed)) {
                    Some(end) => Err(end.error(py, format!("<{}>: {}", op.expect.name.render(), end.why()))),
                    None => op.expect.outcome(py, Err(e)),
                }
            }
            ok => op.expect.outcome(py, ok),
        };
        op.sink.deliver(self, py, out, undelivered);
    }

    /// Cancels every operation of endpoint `key` because it ended (`end`). Their futures fail
    /// with that end's exception once UCX reports the cancellation (a drain later). Returns
    /// how many.
    pub(crate) fn cancel_ops_of(&self, key: u64, end: End) -> u64 {
        self.ops.cancel_where(|op| {
            let mine = op.owned_by(key);
            if mine {
                op.ended_by.get_or_insert(end);
            }
            mine
        })
    }

    /// Fails the operations of endpoint `key` that its failure (or closing) and their cancel
    /// did not end; `end` says what happened. UCX ignores the cancel of a receive it has
    /// matched to a message, and one whose tail can no longer arrive (a multi-fragment eager
    /// message whose sender died, or whose endpoint we closed) never completes: its task hung.
    /// Each is failed now; its buffer stays with UCX until UCX lets go of it.
    pub(crate) fn fail_stuck_ops_of(&self, py: Python<'_>, key: u64, end: End) {
        for op in self.ops.take_unfinished_where(|op| op.owned_by(key)) {
            let msg = format!("<{}>: {} before UCX finished this", op.expect.name.render(), end.why());
            op.sink.deliver(self, py, Err(end.error(py, msg)), || None);
        }
    }

    /// Counts `n` operations cancelled because their endpoint failed.
    pub(crate) fn count_canceled_on_error(&self, n: u64) {
        self.canceled_on_error.fetch_add(n, Ordering::Relaxed);
    }

    /// How many operations were cancelled because their endpoint failed, since the last call.
    pub(crate) fn take_canceled_on_error(&self) -> u64 {
        self.canceled_on_error.swap(0, Ordering::Relaxed)
    }

    /// Whether a completion or event is waiting to be delivered.
    pub(crate) fn has_news(&self) -> bool {
        self.ops.has_done() || !self.events.is_empty()
    }

    /// Whether operation `id` is still in flight.
    pub(crate) fn is_inflight(&self, id: u64) -> bool {
        self.ops.contains(id)
    }

    /// Asks UCX to cancel operation `id`, if it is in flight.
    pub(crate) fn cancel_op(&self, id: u64) {
        self.ops.cancel(id, |_| ());
    }

    /// How many operations are in flight.
    pub(crate) fn inflight(&self) -> usize {
        self.ops.len()
    }

    /// Receives and drops `messages` (nobody can receive them any more), progressing with the
    /// GIL released up to 100 ms each: a rendezvous whose sender is gone is never done, and is
    /// left to UCX. Returns how many.
    pub(crate) fn discard(&self, py: Python<'_>, messages: Vec<ProbedMessage>) -> usize {
        let n = messages.len();
        py.allow_threads(|| {
            for m in messages {
                m.discard_within(Duration::from_millis(100));
            }
        });
        n
    }

    /// Cancels everything in flight, progresses until UCX has finished with all of it, and
    /// discards unreceived messages (used when the context goes).
    pub(crate) fn cancel_all(&self, py: Python<'_>) {
        self.ops.cancel_all();
        let deadline = std::time::Instant::now() + Duration::from_secs(1);
        while self.inflight() > 0 && std::time::Instant::now() < deadline {
            self.progress(py);
        }
        // Messages nobody will receive (e.g. a peer's close message after we aborted) are
        // taken and discarded, so UCX does not warn about them when the worker goes.
        self.discard(py, self.unclaimed.drain());
        while let Some(msg) = self.worker.tag_probe_take(0, 0) {
            drop(msg);
        }
        // What UCX would not cancel is dropped: its buffer stays alive until UCX lets go.
        for op in self.ops.take_all() {
            op.sink.deliver(self, py, Err(errors::new(py, Kind::Canceled, "the worker was closed")), || None);
        }
    }
}

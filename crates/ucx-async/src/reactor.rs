//! The reactor: a tokio task that drives `ucp_worker_progress` and sleeps on the worker's
//! wakeup fd, so completions (and the tasks waiting for them) run without a thread spinning.
//!
//! Event mode: progress a batch (until idle, or a bounded number of rounds, so a peer that
//! never stops sending cannot keep this task from yielding), arm (`UCS_ERR_BUSY` means more
//! to do: yield, progress again), then await the fd through `AsyncFd` or a local nudge. tokio
//! registers the fd edge-triggered, so the reactor always drains progress fully after a
//! wake-up before arming again; a wake-up
//! with nothing to do (UCX's keepalive timer fires the fd) just loops. Polling mode never
//! sleeps (its idle rounds yield the core now and then, `ucx_core::IdleYield`). Adaptive mode spins for a budget after the last event, then sleeps as in event mode.
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;
use ucx_core::Armed;

use crate::op::Load;
use crate::posting;
use crate::worker::Unclaimed;

/// How the reactor waits for UCX.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProgressMode {
    /// Sleep on the wakeup fd whenever UCX is idle (no CPU while idle).
    #[default]
    Event,
    /// Progress continuously, yielding to other tasks between rounds (lowest latency, one busy
    /// core).
    Polling,
    /// Progress continuously for `spin` after the last event, then sleep as in [`Event`].
    ///
    /// [`Event`]: ProgressMode::Event
    Adaptive {
        /// How long to keep spinning after UCX last did something.
        spin: Duration,
    },
}

/// The longest the reactor sleeps without progressing UCX in event and adaptive modes.
pub(crate) const IDLE_TICK: Duration = Duration::from_millis(100);

/// What submitters share with the reactor: whether it sleeps, and how to wake it.
pub(crate) struct Signals {
    sleeping: AtomicBool,
    nudge: Notify,
    /// The worker, which a waiting future progresses itself for a moment before yielding (a
    /// round trip through the scheduler costs more than the message), and for how long.
    worker: ucx_core::Worker,
    inline_spin: Duration,
}

/// How long a waiting future progresses the worker itself before it yields (and, in event
/// mode, lets the reactor sleep): it catches a reply over shared memory and keeps a window of
/// large sends flowing; it is spent only while an operation is awaited, so an idle process
/// stays idle. The measurements behind it: docs/spin.md.
const INLINE_SPIN: Duration = Duration::from_micros(20);

impl Signals {
    pub(crate) fn new(worker: &ucx_core::Worker, mode: ProgressMode) -> Signals {
        let inline_spin = match mode {
            ProgressMode::Event | ProgressMode::Polling => INLINE_SPIN,
            ProgressMode::Adaptive { spin } => spin.min(INLINE_SPIN),
        };
        Signals { sleeping: AtomicBool::new(false), nudge: Notify::new(), worker: worker.clone(), inline_spin }
    }

    /// Progresses the worker on the caller's thread until `done()` or the inline budget runs
    /// out ([`ucx_core::Worker::spin_until`], the one spin loop). The budget grows with what
    /// the operation moves ([`ucx_core::spin_budget`]: its bytes, or device memory). Inside a
    /// join, a large transfer's spin also ends when another operation a task waits for
    /// finishes (`posting::news_since`). Returns at once if `done()` already holds.
    pub(crate) fn spin_until(&self, load: Load, mut done: impl FnMut() -> bool) {
        let budget = ucx_core::spin_budget(self.inline_spin, load.bytes, load.memory);
        let spin = if let Some(start) = posting::news_since(load.bytes) {
            let mut news = false;
            let spin = self.worker.spin_until(budget, || {
                done() || {
                    news = ucx_core::wakes_here() != start;
                    news
                }
            });
            if news {
                posting::ended_on_news();
            }
            spin
        } else {
            self.worker.spin_until(budget, done)
        };
        // The spin armed the worker and UCX answered busy: a sleeping reactor would wait on an
        // fd that stays quiet, so it must progress again.
        if spin.disarmed {
            self.wake();
        }
    }

    /// Called after an operation was submitted and is in flight: a sleeping reactor must run
    /// progress at least once more, since UCX may need it to push the operation along.
    pub(crate) fn submitted(&self) {
        if self.sleeping.load(Ordering::SeqCst) {
            self.nudge.notify_one();
        }
    }

    /// Wakes the reactor unconditionally (e.g. to notice an endpoint error or a close).
    pub(crate) fn wake(&self) {
        self.nudge.notify_one();
    }
}

/// The worker's wakeup fd, owned by UCX; we only register it with tokio. Holding the worker
/// keeps the fd open for as long as tokio watches it.
struct WakeupFd(#[allow(dead_code)] ucx_core::Worker, RawFd);

impl AsRawFd for WakeupFd {
    fn as_raw_fd(&self) -> RawFd {
        self.1
    }
}

/// Progresses one batch, then takes down the endpoints whose peers left more unreceived than
/// the cap (the sweep runs at most every 10 ms).
fn progress(worker: &ucx_core::Worker, unclaimed: &Unclaimed) -> ucx_core::Batch {
    let batch = worker.progress_batch();
    for (ep, overflow) in unclaimed.sweep_if_due(worker, |ep| ep.fill_stream_backlog()) {
        ep.over_limit(overflow);
    }
    batch
}

/// Runs until the task is aborted (when the last handle to the worker goes).
pub(crate) async fn run(
    worker: ucx_core::Worker,
    signals: Arc<Signals>,
    mode: ProgressMode,
    unclaimed: Arc<Unclaimed>,
) -> io::Result<()> {
    if mode == ProgressMode::Polling {
        // Idle rounds give the core away now and then (to the peer process this one waits
        // for, where processes outnumber cores), as an operation's own spin does.
        let mut idle = ucx_core::IdleYield::default();
        loop {
            idle.round(progress(&worker, &unclaimed).idle);
            tokio::task::yield_now().await;
        }
    }
    let raw = worker.wakeup_fd().map_err(io::Error::other)?;
    // SAFETY: the fd belongs to the worker, which WakeupFd holds, so it stays open and the same
    // file for the AsyncFd's whole life; as_raw_fd always returns it.
    let fd = unsafe { AsyncFd::register_with_interest(WakeupFd(worker.clone(), raw), tokio::io::Interest::READABLE) }
        .map_err(io::Error::from)?;
    let spin = match mode {
        ProgressMode::Adaptive { spin } => spin,
        _ => Duration::ZERO,
    };
    loop {
        // Spin phase (adaptive only): keep progressing while UCX is busy or recently was.
        let mut last_event = Instant::now();
        loop {
            let batch = progress(&worker, &unclaimed);
            if batch.events > 0 {
                last_event = Instant::now();
            }
            // A batch that ended busy may leave work UCX will not signal on the fd: never
            // arm after one.
            if batch.idle && last_event.elapsed() >= spin {
                break;
            }
            tokio::task::yield_now().await;
        }
        // Sleep phase.
        signals.sleeping.store(true, Ordering::SeqCst);
        let armed = match worker.arm() {
            Ok(a) => a,
            Err(e) => {
                signals.sleeping.store(false, Ordering::SeqCst);
                return Err(io::Error::other(e));
            }
        };
        if armed == Armed::Busy {
            signals.sleeping.store(false, Ordering::SeqCst);
            // Yield before progressing again: UCX can answer busy round after round (a dead
            // peer's socket stays readable until its endpoint is failed and closed), and on a
            // current-thread runtime the futures that would see the failure, and close the
            // endpoint, run only when this task yields.
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            guard = fd.readable() => {
                let mut guard = guard?;
                guard.clear_ready();
            }
            _ = signals.nudge.notified() => {}
            // UCX detects some peer failures (a closed TCP connection, keepalive) only inside
            // progress, without making the fd readable; a slow tick bounds that delay.
            _ = tokio::time::sleep(IDLE_TICK) => {}
        }
        signals.sleeping.store(false, Ordering::SeqCst);
    }
}

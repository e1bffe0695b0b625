//! Whether an endpoint is still up, and the waits that watch it: the state its UCX error
//! callback and UCX-Py's close protocol update, and the receive futures that fail promptly,
//! with the cause, when it goes down.
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI8, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context as TaskContext, Poll, Waker};

use ucx_core::wire::CtrlMsg;
use ucx_core::{AmMessage, Overflow, Status, FULL_MASK};

use crate::error::{Error, Result};

use crate::am::AmRouter;
use crate::op::{Cancel, Completes, Load};
use crate::reactor::Signals;
use crate::worker::Worker;

/// Why an endpoint stopped: still up, closed by us, closed by the peer (its control message),
/// closed by us because the peer left too much unreceived, closed by us because a receive its
/// caller dropped had taken a message, or failed with a UCX status (negative).
pub(crate) const UP: i8 = 0;
pub(crate) const CLOSED: i8 = 1;
pub(crate) const CLOSED_BY_PEER: i8 = 2;
pub(crate) const UNRECEIVED: i8 = 3;
pub(crate) const LOST_MESSAGE: i8 = 4;

/// Shared with the UCX error callback and the control-message task: the endpoint's fate, the
/// receive counters UCX-Py's close protocol needs, and the wakers of pending receives.
#[derive(Default)]
pub(crate) struct EpState {
    /// UP, CLOSED, CLOSED_BY_PEER, or a negative UCX status.
    pub(crate) down: AtomicI8,
    pub(crate) sends: AtomicU64,
    pub(crate) finished_recvs: AtomicU64,
    /// Close once this many receives have finished (the peer's `close_after_n_recv`).
    pub(crate) close_after: AtomicU64,
    /// Set with `UNRECEIVED`: what the worker's sweep counted.
    overflow: OnceLock<Overflow>,
    waiters: Mutex<Waiters>,
}

#[derive(Default)]
struct Waiters {
    next: u64,
    wakers: HashMap<u64, Waker>,
}

impl EpState {
    pub(crate) fn new() -> Self {
        EpState { close_after: AtomicU64::new(u64::MAX), ..Default::default() }
    }

    /// Records why the endpoint went down (the first reason wins) and wakes every waiter.
    pub(crate) fn go_down(&self, why: i8) {
        let _ = self.down.compare_exchange(UP, why, Ordering::AcqRel, Ordering::Acquire);
        let wakers: Vec<Waker> = {
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            w.wakers.drain().map(|(_, w)| w).collect()
        };
        for w in wakers {
            w.wake();
        }
    }

    /// Goes down because the peer left more unreceived than the cap (`overflow`).
    pub(crate) fn go_down_unreceived(&self, overflow: Overflow) {
        let _ = self.overflow.set(overflow);
        self.go_down(UNRECEIVED);
    }

    /// Whether this side took the endpoint down (a close, the cap, or a lost message).
    pub(crate) fn closed_here(down: i8) -> bool {
        matches!(down, CLOSED | UNRECEIVED | LOST_MESSAGE)
    }

    /// `Ok` while up; the named error once down.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        match self.down.load(Ordering::Acquire) {
            UP => Ok(()),
            CLOSED => Err(Error::Closed { op }),
            CLOSED_BY_PEER => Err(Error::ClosedByPeer { op }),
            UNRECEIVED => Err(match self.overflow.get() {
                Some(&overflow) => Error::Unreceived { op, overflow },
                None => Error::Closed { op },
            }),
            LOST_MESSAGE => Err(Error::LostMessage { op }),
            raw => Err(Error::PeerFailed { op, status: status_of(raw) }),
        }
    }

    pub(crate) fn recv_finished(&self) {
        let n = self.finished_recvs.fetch_add(1, Ordering::AcqRel) + 1;
        if n >= self.close_after.load(Ordering::Acquire) {
            self.go_down(CLOSED_BY_PEER);
        }
    }

    pub(crate) fn register(&self, slot: &mut Option<u64>, waker: &Waker) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        let id = *slot.get_or_insert_with(|| {
            w.next += 1;
            w.next
        });
        w.wakers.insert(id, waker.clone());
    }

    pub(crate) fn unregister(&self, slot: Option<u64>) {
        if let Some(id) = slot {
            self.waiters.lock().unwrap_or_else(|p| p.into_inner()).wakers.remove(&id);
        }
    }
}

/// The status a failed endpoint stored (a negative UCX code).
pub(crate) fn status_of(raw: i8) -> Status {
    Status::from_code(raw).unwrap_or(Status::Other(raw))
}

/// A receive that also watches its endpoint: when the endpoint goes down, it cancels the
/// UCX receive and reports why.
pub(crate) struct Watched<'s, F: Cancel> {
    pub(crate) fut: F,
    pub(crate) state: &'s EpState,
    /// The endpoint whose peer sends what this receives: force-closed if the peer failed and
    /// the canceled receive still does not finish (see `poll`).
    pub(crate) ep: Option<&'s ucx_core::Endpoint>,
    pub(crate) slot: Option<u64>,
    pub(crate) canceled: bool,
    forced_close: bool,
    /// Set once `poll` returned the outcome: dropping it unfinished before then may lose a
    /// message (see `Drop`).
    finished: bool,
}

impl<'s, F: Cancel> Watched<'s, F> {
    pub(crate) fn new(fut: F, state: &'s EpState, ep: Option<&'s ucx_core::Endpoint>) -> Self {
        Watched { fut, state, ep, slot: None, canceled: false, forced_close: false, finished: false }
    }
}

impl<F: Future<Output = ucx_core::Result<ucx_core::Completion>> + Cancel + Unpin> Future for Watched<'_, F> {
    type Output = Result<ucx_core::Completion>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let r = this.poll_watching(cx);
        this.finished = r.is_ready();
        r
    }
}

impl<F: Future<Output = ucx_core::Result<ucx_core::Completion>> + Cancel + Unpin> Watched<'_, F> {
    fn poll_watching(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<ucx_core::Completion>> {
        let this = self;
        loop {
            if !this.canceled && this.state.down.load(Ordering::Acquire) != UP {
                this.canceled = true;
                this.fut.cancel();
            }
            match Pin::new(&mut this.fut).poll(cx) {
                Poll::Ready(Ok(c)) => return Poll::Ready(Ok(c)),
                Poll::Ready(Err(e)) if e.is_canceled() => {
                    return Poll::Ready(this.state.check("Endpoint::recv").and(Err(e.into())))
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                Poll::Pending => {}
            }
            // Only a receive that has to wait registers (most complete in their first poll),
            // and again on every later poll, as the task's waker may have changed. `go_down`
            // marks the state before it wakes the registered: if it ran before this
            // registration, the check below sees it, and the loop cancels and polls again.
            if this.canceled {
                // UCX ignores the cancel of a receive it has already matched to a rendezvous
                // message, and when that message's sender has failed the receive never ends
                // on its own (seen with shared memory: the survivor hung). Force-closing the
                // failed endpoint makes UCX purge what is in flight on it; then poll again.
                // If even that leaves it running (a multi-fragment eager message, matched
                // before its sender died: UCX keeps the receive for fragments that will never
                // come), the receive is abandoned and fails with the peer's error.
                let down = this.state.down.load(Ordering::Acquire);
                // Closed by us: a receive matched to a message whose tail can no longer come
                // (the endpoint is gone) ignores the cancel too; one on an owned buffer is let
                // go now. (A borrowed buffer is kept until UCX finishes: see `op`.)
                if EpState::closed_here(down) && this.fut.abandon_after_close() {
                    return Poll::Ready(Err(this
                        .state
                        .check("Endpoint::recv")
                        .err()
                        .unwrap_or(Error::Closed { op: "Endpoint::recv" })));
                }
                let failed = !matches!(down, UP | CLOSED | CLOSED_BY_PEER | UNRECEIVED);
                if failed {
                    if let Some(ep) = this.ep.take() {
                        ep.force_close_now();
                        this.forced_close = true;
                        continue;
                    }
                    if this.forced_close {
                        this.fut.abandon_after_peer_failure();
                        if let Err(e) = this.state.check("Endpoint::recv") {
                            return Poll::Ready(Err(e));
                        }
                    }
                }
                return Poll::Pending;
            }
            this.state.register(&mut this.slot, cx.waker());
            if this.state.down.load(Ordering::Acquire) == UP {
                return Poll::Pending;
            }
        }
    }
}

impl<F: Cancel> Drop for Watched<'_, F> {
    /// A receive for a caller (one with its endpoint) dropped unfinished is cancelled. If UCX
    /// had already matched a message to it, or it received one that nobody will now read,
    /// that message is lost to the caller: the endpoint goes down (`Error::LostMessage`) and
    /// is force-closed, so the next receive fails saying why instead of silently getting the
    /// message after, and the peer's sends fail instead of completing into nowhere.
    fn drop(&mut self) {
        self.state.unregister(self.slot.take());
        if self.finished || self.ep.is_none() || self.state.down.load(Ordering::Acquire) != UP {
            return;
        }
        if self.fut.cancel_lost_message() {
            self.state.go_down(LOST_MESSAGE);
            if let Some(ep) = self.ep {
                ep.force_close_now();
            }
        }
    }
}

/// Waits for the peer's control message (UCX-Py's close protocol) and applies it.
pub(crate) async fn watch_ctrl(worker: Worker, state: Arc<EpState>, tag: u64) {
    let mut buf = [0u8; CtrlMsg::LEN];
    let Ok(s) = worker.inner.unclaimed.recv(worker.core(), &mut buf, tag, FULL_MASK) else { return };
    let fut = Completes::new(s, &worker.inner.signals);
    if Watched::new(fut, &state, None).await.is_err() {
        return;
    }
    match CtrlMsg::decode(&buf) {
        Ok(m) if m.is_shutdown() => {
            #[cfg(feature = "tracing")]
            tracing::debug!(n = m.close_after_n_recv, "ucx-async: peer is closing");
            state.close_after.store(m.close_after_n_recv, Ordering::Release);
            if state.finished_recvs.load(Ordering::Acquire) >= m.close_after_n_recv {
                state.go_down(CLOSED_BY_PEER);
            }
        }
        Ok(m) => eprintln!("ucx-async: received unknown control opcode: {}", m.opcode),
        Err(e) => eprintln!("ucx-async: bad control message: {e}"),
    }
}

/// Waits for the next active message routed to an endpoint, or for the endpoint to go down.
pub(crate) struct AmWait<'s> {
    pub(crate) router: &'s AmRouter,
    pub(crate) signals: &'s Signals,
    pub(crate) ep: usize,
    pub(crate) state: &'s EpState,
    pub(crate) slot: Option<u64>,
}

impl Future for AmWait<'_> {
    type Output = Result<AmMessage>;

    fn poll(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        // Progress here for a moment first, as operations do (`Completes::poll`).
        // A message that arrives during the spin (the usual case) is taken there: no waker to
        // register or unregister.
        let mut arrived = None;
        this.signals.spin_until(Load::NONE, || {
            // The inline check first: most rounds find nothing queued.
            if arrived.is_none() && this.router.any_queued() {
                arrived = this.router.try_take(this.ep);
            }
            arrived.is_some()
        });
        if let Some(m) = arrived {
            return Poll::Ready(Ok(m));
        }
        this.state.register(&mut this.slot, cx.waker());
        if let Some(m) = this.router.take(this.ep, cx.waker()) {
            return Poll::Ready(Ok(m));
        }
        if let Err(e) = this.state.check("Endpoint::am_recv") {
            return Poll::Ready(Err(e));
        }
        Poll::Pending
    }
}

impl Drop for AmWait<'_> {
    fn drop(&mut self) {
        self.state.unregister(self.slot.take());
    }
}

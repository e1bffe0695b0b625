//! Awaiting a submitted UCX operation: the future that resolves when ucx-core's request
//! completes, nudging a sleeping reactor once so the operation gets progress.
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

use ucx_core::{Completion, MemoryType, Owned, Result, Submitted};

use crate::posting;
use crate::reactor::Signals;

/// What an operation moves, which sets how long its future spins before sleeping
/// (`Signals::spin_until`, [`ucx_core::spin_budget`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub(crate) bytes: usize,
    pub(crate) memory: MemoryType,
}

impl Load {
    /// An operation that moves nothing worth a longer spin (control messages, flushes).
    pub(crate) const NONE: Load = Load { bytes: 0, memory: MemoryType::Host };

    pub(crate) fn new(bytes: usize, memory: MemoryType) -> Load {
        Load { bytes, memory }
    }
}

/// Resolves when `submitted` completes. Dropping it before then cancels the operation and
/// waits until UCX has released its buffer (see `ucx_core::Request`).
pub(crate) struct Completes<'a, 's> {
    submitted: Option<Submitted<'a>>,
    signals: &'s Signals,
    nudged: bool,
    /// What the operation moves (it sets how long the future spins before sleeping).
    load: Load,
}

impl<'a, 's> Completes<'a, 's> {
    pub(crate) fn new(submitted: Submitted<'a>, signals: &'s Signals) -> Self {
        Completes { submitted: Some(submitted), signals, nudged: false, load: Load::NONE }
    }

    /// An operation that moves `load` (a longer spin before sleeping; see `Signals::spin_until`).
    pub(crate) fn moving(mut self, load: Load) -> Self {
        self.load = load;
        self
    }
}

/// An operation that can be asked to stop (it then completes with `Canceled`, or successfully
/// if it won the race).
pub(crate) trait Cancel {
    fn cancel(&self);

    /// Lets go of an operation UCX will not finish: a receive matched to a message whose
    /// sender failed (see `liveness::Watched`). It must not be polled again.
    fn abandon_after_peer_failure(&mut self);

    /// Lets go of an operation that survived a cancel after this side closed its endpoint,
    /// if that is sound for its buffer; returns whether it did. It must not be polled again
    /// if so.
    fn abandon_after_close(&mut self) -> bool;

    /// Cancels a receive whose caller let go of it unfinished, and says whether that lost a
    /// message: UCX withdraws a receive it has not matched at once (it completes canceled in
    /// the cancel call), so one still running had a message matched to it, and one that
    /// completed without error received a message nobody will see.
    fn cancel_lost_message(&self) -> bool;
}

/// [`Cancel::cancel_lost_message`]'s rule on an operation's result after its cancel.
fn lost_after_cancel(result: Option<ucx_core::Result<Completion>>) -> bool {
    !matches!(result, Some(Err(_)))
}

impl Cancel for Completes<'_, '_> {
    fn cancel(&self) {
        if let Some(Submitted::InFlight(r)) = &self.submitted {
            r.cancel();
        }
    }

    fn abandon_after_peer_failure(&mut self) {
        if let Some(Submitted::InFlight(r)) = self.submitted.take() {
            // SAFETY: called only for a receive on a failed endpoint's tag that survived a
            // cancel and the endpoint's forced close: UCX matched it to a message from that
            // endpoint's peer, whose remaining fragments can never arrive, so UCX writes into
            // the buffer no more.
            unsafe { r.detach_unchecked(Box::new(()), false) };
        }
    }

    fn abandon_after_close(&mut self) -> bool {
        // The peer may be alive: over shared memory it can still deliver the rest of a
        // message UCX matched to this receive, into a buffer the caller has back. Kept.
        false
    }

    fn cancel_lost_message(&self) -> bool {
        match &self.submitted {
            Some(Submitted::InFlight(r)) => {
                r.cancel();
                lost_after_cancel(r.result())
            }
            Some(Submitted::Done(_)) => true,
            None => false,
        }
    }
}

/// Resolves when an operation on an owned buffer completes; dropping it never blocks (the
/// buffer goes to UCX until it is done with it).
pub(crate) struct CompletesOwned<'s, B: Send + 'static> {
    pub(crate) op: Option<Owned<B>>,
    signals: &'s Signals,
    nudged: bool,
    load: Load,
}

impl<'s, B: Send + 'static> CompletesOwned<'s, B> {
    /// `load`: what the operation moves, as for `Completes::moving`.
    pub(crate) fn new(op: Owned<B>, signals: &'s Signals, load: Load) -> Self {
        CompletesOwned { op: Some(op), signals, nudged: false, load }
    }
}

impl<B: Send + 'static> Cancel for CompletesOwned<'_, B> {
    fn cancel(&self) {
        if let Some(op) = &self.op {
            op.cancel();
        }
    }

    fn abandon_after_peer_failure(&mut self) {
        // The buffer stays with UCX (and is freed if UCX ever completes the operation).
        drop(self.op.take());
    }

    fn abandon_after_close(&mut self) -> bool {
        // As above: whatever UCX still writes lands in a buffer only UCX holds.
        drop(self.op.take());
        true
    }

    fn cancel_lost_message(&self) -> bool {
        self.op.as_ref().is_some_and(|op| {
            op.cancel();
            lost_after_cancel(op.result())
        })
    }
}

impl<B: Send + 'static> Future for CompletesOwned<'_, B> {
    type Output = Result<Completion>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let Some(op) = this.op.as_mut() else { panic!("CompletesOwned polled after it finished") };
        // Spin before registering the waker (see `Completes::poll`).
        if posting::spin_allowed() {
            this.signals.spin_until(this.load, || op.is_complete());
        }
        let r = op.poll_complete(cx);
        if r.is_pending() && !this.nudged {
            this.nudged = true;
            this.signals.submitted();
        }
        r
    }
}

impl Future for Completes<'_, '_> {
    type Output = Result<Completion>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        match &this.submitted {
            Some(Submitted::Done(c)) => {
                let c = *c;
                this.submitted = None;
                Poll::Ready(Ok(c))
            }
            Some(Submitted::InFlight(r)) => {
                // Progress here for a moment before yielding, and before registering the
                // waker: a completion during the spin then wakes nobody (waking tokio's
                // block_on task from its own thread costs an eventfd write, and a poll). Not
                // while `try_join_posted` posts its operations.
                if posting::spin_allowed() {
                    this.signals.spin_until(this.load, || r.is_complete());
                }
                match r.poll_complete(cx) {
                    Poll::Ready(res) => {
                        this.submitted = None;
                        Poll::Ready(res)
                    }
                    Poll::Pending => {
                        if !this.nudged {
                            this.nudged = true;
                            this.signals.submitted();
                        }
                        Poll::Pending
                    }
                }
            }
            None => panic!("Completes polled after it finished"),
        }
    }
}

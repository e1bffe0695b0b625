//! A window of operations in flight, taken back oldest first: the bounce-buffer pipeline of
//! `alltoallv` (at most `depth` batches in flight per peer and direction). Each operation is
//! posted when it enters, and the window's room is allocated once, when it is made, and reused
//! by every operation after: `FuturesOrdered`, which this replaces, allocated a task per
//! message (a 1 MiB part in 4 KiB batches: 512 allocations per call on two ranks).
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use futures_util::future::{maybe_done, MaybeDone};

use crate::posting::Posting;

/// Up to `depth` futures in flight, each in a slot allocated once and reused.
pub(crate) struct Window<F: Future> {
    slots: Vec<Pin<Box<MaybeDone<F>>>>,
    /// The slot of the oldest future in flight.
    oldest: usize,
    len: usize,
}

impl<F: Future> Window<F> {
    /// An empty window with room for `depth` futures (at least one).
    pub(crate) fn new(depth: usize) -> Window<F> {
        Window { slots: (0..depth.max(1)).map(|_| Box::pin(MaybeDone::Gone)).collect(), oldest: 0, len: 0 }
    }

    /// Whether `depth` futures are in flight (the next [`Window::push`] must wait for
    /// [`Window::next`]).
    pub(crate) fn is_full(&self) -> bool {
        self.len == self.slots.len()
    }

    /// Starts `f` in the next free slot: polled once without spinning (see `posting`), so its
    /// operation is in UCX before this returns, and the caller can go on to prepare the next
    /// one. The window must not be full.
    pub(crate) async fn push(&mut self, f: F) {
        assert!(!self.is_full(), "Window::push on a full window");
        let i = (self.oldest + self.len) % self.slots.len();
        self.len += 1;
        // The slot's allocation is reused: the finished future it held is dropped in place.
        self.slots[i].as_mut().set(maybe_done(f));
        let mut slot = self.slots[i].as_mut();
        std::future::poll_fn(|cx| {
            let _posting = Posting::enter();
            // A future that finishes here keeps its output in its slot until its turn.
            let _ = slot.as_mut().poll(cx);
            Poll::Ready(())
        })
        .await;
    }

    /// The oldest future's output once it has finished, or `None` if the window is empty.
    /// Only the oldest may spin while it waits; the others are polled without spinning, so
    /// each wake costs one spin, not one per operation in flight. That suits operations on one
    /// worker (a peer's batches), which the oldest's spin progresses too; futures on several
    /// workers each need their own spin (tried for `try_join_posted`: multi-rail, a worker per
    /// rail, lost 7–20 %).
    pub(crate) async fn next(&mut self) -> Option<F::Output> {
        if self.len == 0 {
            return None;
        }
        let (oldest, len, n) = (self.oldest, self.len, self.slots.len());
        let slots = &mut self.slots;
        std::future::poll_fn(|cx| {
            {
                let _posting = Posting::enter();
                for k in 1..len {
                    let _ = slots[(oldest + k) % n].as_mut().poll(cx);
                }
            }
            slots[oldest].as_mut().poll(cx)
        })
        .await;
        let out = self.slots[oldest].as_mut().take_output();
        self.oldest = (oldest + 1) % n;
        self.len -= 1;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    /// Ready at its `ready_at`-th poll; records each poll and whether it could spin.
    struct Probe<'a> {
        id: usize,
        polls: usize,
        ready_at: usize,
        seen: &'a RefCell<Vec<(usize, bool)>>,
    }

    impl Future for Probe<'_> {
        type Output = usize;

        fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<usize> {
            self.polls += 1;
            self.seen.borrow_mut().push((self.id, crate::posting::spin_allowed()));
            if self.polls >= self.ready_at {
                return Poll::Ready(self.id);
            }
            cx.waker().wake_by_ref();
            Poll::Pending
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn futures_come_back_oldest_first_and_only_the_oldest_spins() {
        let seen = RefCell::new(Vec::new());
        let probe = |id, ready_at| Probe { id, polls: 0, ready_at, seen: &seen };
        let mut w = Window::new(2);
        assert!(w.next().await.is_none(), "empty");
        w.push(probe(0, 3)).await;
        w.push(probe(1, 1)).await; // finishes at once; waits for its turn
        assert!(w.is_full());
        assert_eq!(&seen.borrow()[..], &[(0, false), (1, false)], "each posted once, without spinning");
        seen.borrow_mut().clear();
        assert_eq!(w.next().await, Some(0), "the oldest first, though the other finished first");
        assert!(seen.borrow().iter().all(|&(id, spin)| id == 0 && spin), "only the oldest polled, spinning: {seen:?}");
        w.push(probe(2, 2)).await; // reuses the oldest's slot
        seen.borrow_mut().clear();
        assert_eq!(w.next().await, Some(1));
        assert_eq!(&seen.borrow()[..], &[(2, false)], "a finished one is not polled again; the younger does not spin");
        assert_eq!(w.next().await, Some(2));
        assert_eq!(w.next().await, None);
        assert!(crate::posting::spin_allowed(), "the flag is cleared");
    }
}

//! [`Inflight`]: every operation a caller has handed to UCX and not yet seen finish, by id,
//! and the ids whose completion callback has run (UCXX's `inflight_requests`). For callers
//! that cannot await each operation where it was submitted (a Python binding, a C API): they
//! submit, [`start`](Inflight::start) and [`keep`](Inflight::keep) the operation, progress the
//! worker, then [`finish`](Inflight::finish) each id [`take_done`](Inflight::take_done)
//! returns; ending an endpoint cancels its operations by predicate. Nothing here knows Python.
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context as TaskContext, Poll, Wake, Waker};

use crate::{Completion, Owned, Result};

/// An operation UCX may still be working on, whatever its buffer type.
pub trait Pending: Send {
    /// Polls for the outcome, registering `cx`'s waker.
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<Completion>>;
    /// Asks UCX to cancel the operation (it may finish anyway).
    fn cancel(&self);
    /// Whether UCX has finished the operation.
    fn is_complete(&self) -> bool;
}

impl<B: Send + 'static> Pending for Owned<B> {
    fn poll(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<Completion>> {
        self.poll_complete(cx)
    }
    fn cancel(&self) {
        Owned::cancel(self)
    }
    fn is_complete(&self) -> bool {
        Owned::is_complete(self)
    }
}

/// Locks a mutex, tolerating poisoning (a panic elsewhere must not wedge the table).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ids of operations whose completion callback has run, filled by their wakers.
#[derive(Default)]
struct DoneQueue(Mutex<Vec<u64>>);

struct IdWaker {
    id: u64,
    done: Arc<DoneQueue>,
}

impl Wake for IdWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        lock(&self.done.0).push(self.id);
    }
}

struct Entry<T> {
    pending: Box<dyn Pending>,
    data: T,
}

/// The table of operations in flight, each with the caller's `T` (where its outcome goes).
pub struct Inflight<T> {
    ops: Mutex<HashMap<u64, Entry<T>>>,
    done: Arc<DoneQueue>,
    next_id: AtomicU64,
}

impl<T> Default for Inflight<T> {
    fn default() -> Self {
        Inflight { ops: Mutex::default(), done: Arc::default(), next_id: AtomicU64::new(1) }
    }
}

impl<T> Inflight<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// A fresh id, never handed out before by this table (callers may use these for their own
    /// keys too).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Gives a submitted operation an id and a waker that queues that id when UCX completes
    /// it. Returns the id, and the result if UCX has already finished (then the operation is
    /// not tracked). Otherwise [`keep`](Inflight::keep) it under that id.
    pub fn start<B: Send + 'static>(&self, owned: &mut Owned<B>) -> (u64, Option<Result<Completion>>) {
        let id = self.next_id();
        // Finished already (UCX did it in the call, or a spin did): no waker of this id is
        // made, so none can have queued it, and the usual small send or receive allocates
        // nothing here.
        if owned.is_complete() {
            if let Poll::Ready(r) = owned.poll_complete(&mut TaskContext::from_waker(Waker::noop())) {
                return (id, Some(r));
            }
        }
        match owned.poll_complete(&mut TaskContext::from_waker(&self.waker(id))) {
            Poll::Ready(r) => {
                lock(&self.done.0).retain(|d| *d != id);
                (id, Some(r))
            }
            Poll::Pending => (id, None),
        }
    }

    /// Tracks a [`start`](Inflight::start)ed operation until its completion is taken.
    ///
    /// The caller may have run code between the two that let another thread progress the
    /// worker and drain the done queue; that drain found no entry for `id` and dropped its
    /// completion. So an operation already complete here is queued again. (UCX marks a request
    /// complete before its callback wakes, so a completion after the insert is queued by the
    /// waker.)
    pub fn keep(&self, id: u64, pending: impl Pending + 'static, data: T) {
        let complete = {
            let mut ops = lock(&self.ops);
            let complete = pending.is_complete();
            ops.insert(id, Entry { pending: Box::new(pending), data });
            complete
        };
        if complete {
            lock(&self.done.0).push(id);
        }
    }

    /// Takes the ids whose completion was reported since the last call, oldest first. An id
    /// may no longer be in the table (finished some other way); [`finish`](Inflight::finish)
    /// then returns `None`.
    pub fn take_done(&self) -> Vec<u64> {
        std::mem::take(&mut *lock(&self.done.0))
    }

    /// Whether a completion is waiting to be taken.
    pub fn has_done(&self) -> bool {
        !lock(&self.done.0).is_empty()
    }

    /// Removes operation `id` if UCX has finished it, returning its result and the caller's
    /// data. `None` if it is not in the table, or still running (it stays, waiting again).
    pub fn finish(&self, id: u64) -> Option<(Result<Completion>, T)> {
        let mut entry = lock(&self.ops).remove(&id)?;
        // The waker matters only for a stale wake-up (the operation still running), which UCX
        // completions never cause; then the operation goes back to wait.
        match entry.pending.poll(&mut TaskContext::from_waker(&self.waker(id))) {
            Poll::Ready(r) => Some((r, entry.data)),
            Poll::Pending => {
                lock(&self.ops).insert(id, entry);
                None
            }
        }
    }

    /// Asks UCX to cancel operation `id`, returning what `inspect` makes of its data; `None`
    /// if it is not in flight.
    pub fn cancel<R>(&self, id: u64, inspect: impl FnOnce(&T) -> R) -> Option<R> {
        let ops = lock(&self.ops);
        let entry = ops.get(&id)?;
        entry.pending.cancel();
        Some(inspect(&entry.data))
    }

    /// Asks UCX to cancel every operation whose data `select` picks (it may also mark the
    /// data, e.g. with why it was cancelled). Returns how many. Their completions arrive as
    /// usual, with [`Status::Canceled`](crate::Status::Canceled) unless they finished first.
    pub fn cancel_where(&self, mut select: impl FnMut(&mut T) -> bool) -> u64 {
        let mut ops = lock(&self.ops);
        let mut n = 0;
        for entry in ops.values_mut() {
            if select(&mut entry.data) {
                entry.pending.cancel();
                n += 1;
            }
        }
        n
    }

    /// Removes the unfinished operations whose data `select` picks and returns their data: for
    /// operations that will never complete (UCX ignores the cancel of a receive matched to a
    /// message whose tail can no longer arrive). Each buffer stays with UCX until UCX lets go
    /// of it ([`Owned`]'s drop), which is sound whatever UCX does later.
    pub fn take_unfinished_where(&self, select: impl Fn(&T) -> bool) -> Vec<T> {
        let mut ops = lock(&self.ops);
        let ids: Vec<u64> =
            ops.iter().filter(|(_, e)| select(&e.data) && !e.pending.is_complete()).map(|(id, _)| *id).collect();
        ids.into_iter().filter_map(|id| ops.remove(&id)).map(|e| e.data).collect()
    }

    /// Asks UCX to cancel everything in flight.
    pub fn cancel_all(&self) {
        for entry in lock(&self.ops).values() {
            entry.pending.cancel();
        }
    }

    /// Removes everything still in flight and returns its data (the buffers as in
    /// [`take_unfinished_where`](Inflight::take_unfinished_where)).
    pub fn take_all(&self) -> Vec<T> {
        std::mem::take(&mut *lock(&self.ops)).into_values().map(|e| e.data).collect()
    }

    /// What `inspect` makes of operation `id`'s data; `None` if it is not in flight.
    pub fn inspect<R>(&self, id: u64, inspect: impl FnOnce(&T) -> R) -> Option<R> {
        lock(&self.ops).get(&id).map(|e| inspect(&e.data))
    }

    /// Whether operation `id` is in flight.
    pub fn contains(&self, id: u64) -> bool {
        lock(&self.ops).contains_key(&id)
    }

    /// How many operations are in flight.
    pub fn len(&self) -> usize {
        lock(&self.ops).len()
    }

    /// Whether nothing is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn waker(&self, id: u64) -> Waker {
        Waker::from(Arc::new(IdWaker { id, done: self.done.clone() }))
    }
}

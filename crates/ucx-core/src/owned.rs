//! Operations that own their buffer: dropping one unfinished never blocks and never closes
//! anything; the buffer is handed to the request and freed when UCX is done with it.
//! What owning futures (ucx-async's `*_owned` methods) are built on.
use std::task::{Context as TaskContext, Poll};

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::request::{Completion, Request, Submitted};
use crate::worker::Worker;

/// An operation on a buffer it owns. Poll it with [`Owned::poll_complete`], then take the
/// buffer back with [`Owned::into_buffer`].
pub struct Owned<B: Send + 'static> {
    /// A leaked Box (so its address stays put while UCX uses it, however `Owned` moves, and no
    /// `Box` asserts unique access while UCX holds a reference); reclaimed exactly once.
    buffer: Option<std::ptr::NonNull<B>>,
    request: Option<Request<'static>>,
    result: Option<Result<Completion>>,
    /// Receives nobody waits for are canceled on drop; sends are left to finish.
    cancel_on_drop: bool,
    /// Applied once to a successful completion, with the buffer, before anyone sees it
    /// ([`Owned::then`]).
    then: Option<Then<B>>,
}

/// What [`Owned::then`] applies to a successful completion.
pub type Then<B> = Box<dyn FnOnce(&mut B, Completion) -> Result<Completion> + Send>;

impl<B: Send + 'static> Owned<B> {
    /// Starts an operation on a buffer it owns: `submit` gets the buffer (at an address that
    /// stays put until UCX is done with it) and submits the operation on it. With
    /// `cancel_on_drop`, dropping the result unfinished cancels the operation (right for
    /// receives); otherwise it is left to finish (sends). Either way the buffer is freed only
    /// once UCX has let go of it.
    pub fn submit(
        buffer: Box<B>,
        cancel_on_drop: bool,
        submit: impl for<'b> FnOnce(&'b mut B) -> Result<Submitted<'b>>,
    ) -> Result<Owned<B>> {
        let raw = std::ptr::NonNull::from(Box::leak(buffer));
        // SAFETY: the allocation is reclaimed (Box::from_raw) only after the request completed
        // (into_buffer checks, Drop checks) or by the request's keepalive once UCX is done
        // (detach), so this reference outlives every UCX access; nothing else touches it.
        let for_ucx: &mut B = unsafe { &mut *raw.as_ptr() };
        let submitted = match submit(for_ucx) {
            // SAFETY: only the lifetime changes (Submitted's borrow is a PhantomData); the
            // buffer it borrows lives until the request is released, as argued above, and the
            // higher-ranked closure cannot have kept the reference.
            Ok(s) => unsafe { std::mem::transmute::<Submitted<'_>, Submitted<'static>>(s) },
            Err(e) => {
                // SAFETY: UCX did not take the buffer; reclaim the leaked Box once.
                drop(unsafe { Box::from_raw(raw.as_ptr()) });
                return Err(e);
            }
        };
        let (request, result) = match submitted {
            Submitted::Done(c) => (None, Some(Ok(c))),
            Submitted::InFlight(r) => (Some(r), None),
        };
        Ok(Owned { buffer: Some(raw), request, result, cancel_on_drop, then: None })
    }

    /// Has `f` turn the operation's successful completion into its result, with the buffer
    /// in hand (UCX has let go of it by then): whoever polls the operation, whenever it
    /// finishes (at once included), sees `f`'s result instead. A protocol that puts something
    /// other than the message itself in the buffer (a single-copy descriptor) finishes the
    /// receive here. `f` is not called for a failed or cancelled operation.
    pub fn then(mut self, f: impl FnOnce(&mut B, Completion) -> Result<Completion> + Send + 'static) -> Self {
        self.then = Some(Box::new(f));
        if let Some(Ok(c)) = self.result.take() {
            self.result = Some(self.apply_then(c));
        }
        self
    }

    /// Applies the [`Owned::then`] step, if any, to completion `c`.
    fn apply_then(&mut self, c: Completion) -> Result<Completion> {
        match (self.then.take(), self.buffer) {
            // SAFETY: the operation has completed and its request is released (or never
            // existed): UCX no longer touches the buffer, and nothing else holds it.
            (Some(f), Some(b)) => f(unsafe { &mut *b.as_ptr() }, c),
            _ => Ok(c),
        }
    }

    /// Registers the waker and returns the result once UCX has finished.
    pub fn poll_complete(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<Completion>> {
        if let Some(r) = &self.result {
            return Poll::Ready(r.clone());
        }
        let Some(req) = &self.request else { return Poll::Pending };
        match req.poll_complete(cx) {
            Poll::Ready(r) => {
                self.request = None; // completed: releasing it does not block
                let r = match r {
                    Ok(c) => self.apply_then(c),
                    e => e,
                };
                self.result = Some(r.clone());
                Poll::Ready(r)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Whether UCX has finished.
    pub fn is_complete(&self) -> bool {
        self.result.is_some() || self.request.as_ref().is_some_and(Request::is_complete)
    }

    /// The result, once UCX has finished; `None` while in flight.
    pub fn result(&self) -> Option<Result<Completion>> {
        match (&self.result, &self.request) {
            (Some(r), _) => Some(r.clone()),
            (None, Some(req)) => req.result(),
            (None, None) => None,
        }
    }

    /// Cancels the operation (a receive completes as canceled; UCX may not stop a send).
    pub fn cancel(&self) {
        if let Some(r) = &self.request {
            r.cancel();
        }
    }

    /// The buffer back, once the operation has finished (`None` while in flight).
    pub fn into_buffer(mut self) -> Option<B> {
        if !self.is_complete() {
            return None;
        }
        self.request = None;
        // SAFETY: complete and released: UCX no longer uses it; reclaimed exactly once.
        self.buffer.take().map(|b| *unsafe { Box::from_raw(b.as_ptr()) })
    }
}

// SAFETY: the buffer is B: Send, owned by this value alone (UCX's use ends before it is touched
// again); the request is Send.
unsafe impl<B: Send + 'static> Send for Owned<B> {}

impl<B: Send + 'static> Drop for Owned<B> {
    fn drop(&mut self) {
        let Some(raw) = self.buffer.take() else { return };
        let reclaim = Reclaim(raw);
        match self.request.take() {
            // The buffer is freed by the request's keepalive once UCX has finished with it.
            Some(req) if !req.is_complete() => req.detach(Box::new(reclaim), self.cancel_on_drop),
            other => {
                drop(other);
                drop(reclaim);
            }
        }
    }
}

/// Frees a leaked buffer when dropped (after UCX is done with it).
struct Reclaim<B>(std::ptr::NonNull<B>);

// SAFETY: it owns a B: Send allocation and only frees it.
unsafe impl<B: Send> Send for Reclaim<B> {}

impl<B> Drop for Reclaim<B> {
    fn drop(&mut self) {
        // SAFETY: the pointer came from Box::leak and is reclaimed only here, exactly once.
        drop(unsafe { Box::from_raw(self.0.as_ptr()) });
    }
}

impl Endpoint {
    /// [`Endpoint::tag_send`] on a buffer the operation owns.
    pub fn tag_send_owned<B: SendBuffer + Send + 'static>(&self, buf: B, tag: u64) -> Result<Owned<B>> {
        Owned::submit(Box::new(buf), false, |b| self.tag_send(&*b, tag))
    }

    /// [`Endpoint::tag_send_owned`] for fast completion ([`Endpoint::tag_send_fast`]).
    pub fn tag_send_owned_fast<B: SendBuffer + Send + 'static>(&self, buf: B, tag: u64) -> Result<Owned<B>> {
        Owned::submit(Box::new(buf), false, |b| self.tag_send_fast(&*b, tag))
    }
}

impl Worker {
    /// [`Worker::tag_recv`] into a buffer the operation owns; dropping it unfinished cancels
    /// the receive without blocking.
    pub fn tag_recv_owned<B: RecvBuffer + Send + 'static>(&self, buf: B, tag: u64, mask: u64) -> Result<Owned<B>> {
        Owned::submit(Box::new(buf), true, |b| self.tag_recv(b, tag, mask))
    }
}

impl<B: Send + 'static> std::fmt::Debug for Owned<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Owned").field("complete", &self.is_complete()).finish()
    }
}

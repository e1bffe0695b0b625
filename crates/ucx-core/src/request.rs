//! In-flight operations: the completion state UCX fills in, and the [`Request`] handle that
//! reads it, wakes a task, cancels, and gives the request back to UCX exactly once.
//!
//! The state ([`Slot`]) lives inside UCX's own request memory: the context reserves
//! `size_of::<Slot>()` bytes per request (`request_size`) and initialises them once
//! (`request_init`); whoever releases a request resets the slot first, so a request UCX hands
//! out again always starts clean. An operation UCX completes inline returns no request at all,
//! so it costs no allocation (see [`Submitted::Done`]).
//!
//! Ownership of a pending request is decided by one atomic, `state`:
//! `PENDING -> DONE` (the completion callback won; the owner releases) or
//! `PENDING -> ORPHANED` (the owner let go first, see [`Request::detach`]; the callback
//! releases and drops whatever the owner left in the slot to keep its buffer alive).
use std::any::Any;
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicI8, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use atomic_waker::AtomicWaker;

use crate::endpoint::Endpoint;
use crate::error::{Error, Result, Status};
use crate::live::{self, Kind};
use crate::sys;
use crate::worker::Worker;

const PENDING: u8 = 0;
const DONE: u8 = 1;
const ORPHANED: u8 = 2;

/// What a finished operation reports: the bytes received (0 for sends) and, for tag receives,
/// the sender's tag.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Completion {
    /// Bytes received (tag, stream, active-message data receives); 0 for sends.
    pub length: usize,
    /// The tag the message was sent with (tag receives); 0 otherwise.
    pub sender_tag: u64,
}

/// Completion state stored in UCX's request memory.
#[repr(C)]
pub(crate) struct Slot {
    state: AtomicU8,
    status: AtomicI8,
    length: AtomicUsize,
    sender_tag: AtomicU64,
    /// Whether a waker was ever registered: most operations complete while their owner spins
    /// on [`Request::is_complete`], and then the completion skips the waker's two atomic
    /// read-modify-writes (and the release its two more), which are on the latency path.
    waited: AtomicBool,
    waker: AtomicWaker,
    /// Written by the owner only while it still owns the request (before PENDING -> ORPHANED).
    keepalive: UnsafeCell<Option<Box<dyn Any + Send>>>,
}

impl Slot {
    fn fresh() -> Slot {
        Slot {
            state: AtomicU8::new(PENDING),
            status: AtomicI8::new(sys::UCS_INPROGRESS),
            length: AtomicUsize::new(0),
            sender_tag: AtomicU64::new(0),
            waited: AtomicBool::new(false),
            waker: AtomicWaker::new(),
            keepalive: UnsafeCell::new(None),
        }
    }

    fn result(&self) -> Result<Completion> {
        let status = self.status.load(Ordering::Acquire);
        match Status::from_raw(status) {
            None => Ok(Completion {
                length: self.length.load(Ordering::Relaxed),
                sender_tag: self.sender_tag.load(Ordering::Relaxed),
            }),
            Some(s) => Err(Error::new("request", s)),
        }
    }
}

thread_local! {
    /// Completions on this thread that woke a waiting task (see [`wakes_here`]).
    static WAKES_HERE: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// How many completions have woken a task on this thread so far (completion callbacks run in
/// the progress call that finishes the operation, on the thread that made it). A thread that
/// spins on progress for one operation reads it to notice that another, which a task already
/// waits for, finished meanwhile: that task may have more to post (ucx-async's joins).
pub fn wakes_here() -> u64 {
    WAKES_HERE.with(std::cell::Cell::get)
}

/// Bytes UCX must reserve per request for a [`Slot`].
pub(crate) const SLOT_SIZE: usize = std::mem::size_of::<Slot>();

/// `request_init`: called by UCX once for each request's memory when its pool grows.
pub(crate) unsafe extern "C" fn init_slot(request: *mut c_void) {
    // SAFETY: UCX passes the start of SLOT_SIZE reserved bytes, aligned for the request
    // header that precedes them (8 bytes, enough for Slot; checked in a test).
    unsafe { std::ptr::write(request.cast::<Slot>(), Slot::fresh()) };
}

/// Records a completion. Runs inside `ucp_worker_progress` (or a cancel) on whatever thread
/// drives the worker; must not unwind into UCX.
unsafe fn complete(request: *mut c_void, status: sys::ucs_status_t, length: usize, tag: u64) {
    // SAFETY: every request we submit has an initialised Slot at its start (init_slot).
    let slot = unsafe { &*request.cast::<Slot>() };
    slot.length.store(length, Ordering::Relaxed);
    slot.sender_tag.store(tag, Ordering::Relaxed);
    slot.status.store(status, Ordering::Release);
    // SeqCst here and in `poll_complete` (`waited` set, then `state` read): either this side
    // sees `waited` and wakes, or that side sees DONE.
    match slot.state.compare_exchange(PENDING, DONE, Ordering::SeqCst, Ordering::Acquire) {
        Ok(_) if !slot.waited.load(Ordering::SeqCst) => {}
        Ok(_) => {
            WAKES_HERE.with(|w| w.set(w.get().wrapping_add(1)));
            let woke = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| slot.waker.wake()));
            if woke.is_err() {
                // A waker that panics cannot be reported to anyone from inside UCX.
                std::process::abort();
            }
        }
        // SAFETY: the owner orphaned the request, so it is ours to release, exactly once.
        Err(_) => unsafe { release(request) },
    }
}

/// Resets the slot and returns the request to UCX. The caller must own the request.
unsafe fn release(request: *mut c_void) {
    // SAFETY: as in `complete`; the caller has exclusive ownership now.
    let slot = unsafe { &*request.cast::<Slot>() };
    // SAFETY: exclusive ownership, so nobody else touches the keepalive cell.
    let keep = unsafe { (*slot.keepalive.get()).take() };
    if slot.waited.load(Ordering::Relaxed) {
        slot.waker.take();
        slot.waited.store(false, Ordering::Relaxed);
    }
    slot.status.store(sys::UCS_INPROGRESS, Ordering::Relaxed);
    slot.length.store(0, Ordering::Relaxed);
    slot.sender_tag.store(0, Ordering::Relaxed);
    slot.state.store(PENDING, Ordering::Release);
    // SAFETY: the request came from a UCX _nbx call and is released exactly once.
    unsafe { sys::ucp_request_free(request) };
    live::destroyed(Kind::Request);
    // UCX has finished with the buffer, so what kept it alive can go now.
    drop(keep);
}

pub(crate) unsafe extern "C" fn send_cb(request: *mut c_void, status: sys::ucs_status_t, _user: *mut c_void) {
    // SAFETY: UCX calls this with a request we submitted.
    unsafe { complete(request, status, 0, 0) }
}

pub(crate) unsafe extern "C" fn tag_recv_cb(
    request: *mut c_void,
    status: sys::ucs_status_t,
    info: *const sys::ucp_tag_recv_info_t,
    _user: *mut c_void,
) {
    // SAFETY: UCX passes a valid info pointer for the duration of the callback (or NULL).
    let (length, tag) = unsafe { info.as_ref() }.map_or((0, 0), |i| (i.length, i.sender_tag));
    // SAFETY: UCX calls this with a request we submitted.
    unsafe { complete(request, status, length, tag) }
}

pub(crate) unsafe extern "C" fn length_cb(
    request: *mut c_void,
    status: sys::ucs_status_t,
    length: usize,
    _user: *mut c_void,
) {
    // SAFETY: UCX calls this with a request we submitted.
    unsafe { complete(request, status, length, 0) }
}

/// An operation UCX accepted but has not finished. Holds the worker alive, and borrows the
/// operation's buffer for `'a` so the buffer cannot go away while UCX may touch it.
///
/// Dropping it unfinished cancels the operation and progresses the worker until UCX has let go
/// of the buffer. UCX cannot cancel every operation (a rendezvous send whose receiver never
/// comes, a stream receive): if one is still running 50 ms (`CANCEL_GRACE`) after the cancel, its
/// endpoint is force-closed, which ends it. Owners of `'static` buffers use
/// [`Request::detach`] instead, which never blocks and never closes anything.
#[must_use = "dropping a Request cancels it"]
pub struct Request<'a> {
    ptr: NonNull<c_void>,
    worker: Worker,
    /// For endpoint operations: the endpoint to force-close if UCX cannot cancel the operation
    /// (sends, stream receives), the only other way to make UCX let go of the buffer.
    endpoint: Option<Endpoint>,
    _buffer: PhantomData<&'a mut [u8]>,
}

/// How long a dropped request may take to finish after `ucp_request_cancel` before its
/// endpoint is force-closed.
const CANCEL_GRACE: Duration = Duration::from_millis(50);

// SAFETY: the slot is only touched through atomics (and the keepalive cell under the state
// protocol); the worker is created thread-safe (see Worker), so cancel/progress may run anywhere.
unsafe impl Send for Request<'_> {}
// SAFETY: as above; shared references only read atomics or register a waker atomically.
unsafe impl Sync for Request<'_> {}

impl<'a> Request<'a> {
    fn slot(&self) -> &Slot {
        // SAFETY: we own the request until Drop/detach, so its slot is valid.
        unsafe { self.ptr.cast::<Slot>().as_ref() }
    }

    /// Whether UCX has finished the operation.
    pub fn is_complete(&self) -> bool {
        // SeqCst (no dearer than Acquire for a load on x86 or ARMv8): `poll_complete`'s
        // re-check pairs with `complete` (see there).
        self.slot().state.load(Ordering::SeqCst) == DONE
    }

    /// The result, once complete; `None` while in flight.
    pub fn result(&self) -> Option<Result<Completion>> {
        self.is_complete().then(|| self.slot().result())
    }

    /// Registers `cx`'s waker to be woken by the completion callback and returns the result if
    /// the operation has finished. The waker fires on the thread that progresses the worker.
    pub fn poll_complete(&self, cx: &mut TaskContext<'_>) -> Poll<Result<Completion>> {
        if let Some(r) = self.result() {
            return Poll::Ready(r);
        }
        self.slot().waited.store(true, Ordering::SeqCst);
        self.slot().waker.register(cx.waker());
        match self.result() {
            Some(r) => Poll::Ready(r),
            None => Poll::Pending,
        }
    }

    /// Asks UCX to cancel the operation. It then completes with [`Status::Canceled`] (or with
    /// success, if it finished first) on a later progress, or at once for unmatched receives.
    pub fn cancel(&self) {
        if !self.is_complete() {
            // SAFETY: the request is live and belongs to this worker.
            unsafe { sys::ucp_request_cancel(self.worker.handle(), self.ptr.as_ptr()) };
        }
    }

    /// Progresses the worker (busy) until the operation finishes, and returns its result.
    pub fn wait(self) -> Result<Completion> {
        while !self.is_complete() {
            self.worker.progress();
        }
        self.slot().result()
    }
}

impl Request<'static> {
    /// Lets go of the request without waiting. `keepalive` (typically the buffer the
    /// operation uses, with anything else it needs) is dropped only once UCX has finished with
    /// it. With `cancel`, the operation is canceled first (right for receives nobody awaits).
    /// Only a request whose buffer is not borrowed (`'static`: owned by the keepalive) may be
    /// detached; [`Request::detach_unchecked`] is the unsafe form for a borrowed one.
    pub fn detach(self, keepalive: Box<dyn Any + Send>, cancel: bool) {
        if cancel {
            self.cancel();
        }
        let ptr = self.ptr.as_ptr();
        // SAFETY: we still own the request (state is PENDING or DONE, never ORPHANED here),
        // so nobody else reads or writes the keepalive cell.
        unsafe { *self.slot().keepalive.get() = Some(keepalive) };
        let won = self.slot().state.compare_exchange(PENDING, ORPHANED, Ordering::AcqRel, Ordering::Acquire);
        // Drop our worker handle without running Request::drop.
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is never used again, so the worker is read out exactly once.
        drop(unsafe { std::ptr::read(&this.worker) });
        // SAFETY: as above, read out exactly once.
        drop(unsafe { std::ptr::read(&this.endpoint) });
        if won.is_err() {
            // Completed before we let go: release it (and the keepalive) ourselves.
            // SAFETY: state is DONE, so the callback has run and we own the request.
            unsafe { release(ptr) };
        }
    }
}

impl<'a> Request<'a> {
    /// [`Request::detach`] for a request whose borrow ends now: the request is freed (and
    /// `keepalive` dropped) whenever UCX completes it.
    ///
    /// # Safety
    /// Whatever the request borrows must stay valid for as long as UCX may use it: `keepalive`
    /// must own it, or UCX must never access it again. Two uses: a close request, whose
    /// endpoint (with the error state UCX calls into) the keepalive holds; and a receive UCX
    /// matched to a message whose sender failed and whose endpoint was force-closed, which
    /// UCX can no longer write (the rest of that message could only come from that sender).
    pub unsafe fn detach_unchecked(self, keepalive: Box<dyn Any + Send>, cancel: bool) {
        // SAFETY: only the borrow's lifetime changes (it is a PhantomData); the caller
        // guarantees nothing UCX may still touch depends on the borrow.
        let this = unsafe { std::mem::transmute::<Request<'a>, Request<'static>>(self) };
        this.detach(keepalive, cancel);
    }
}

impl Drop for Request<'_> {
    fn drop(&mut self) {
        if !self.is_complete() {
            self.cancel();
            let deadline = Instant::now() + CANCEL_GRACE;
            while !self.is_complete() && Instant::now() < deadline {
                self.worker.progress();
            }
            if !self.is_complete() {
                if let Some(ep) = &self.endpoint {
                    ep.force_close_now();
                }
            }
            while !self.is_complete() {
                self.worker.progress();
            }
        }
        // SAFETY: state is DONE: the callback has run, and the request is ours to release.
        unsafe { release(self.ptr.as_ptr()) };
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("ptr", &self.ptr).field("complete", &self.is_complete()).finish()
    }
}

/// What submitting an operation gave: finished already (no request, no allocation), or a
/// [`Request`] to await.
#[derive(Debug)]
#[must_use = "an in-flight operation is canceled when dropped"]
pub enum Submitted<'a> {
    /// UCX finished the operation inside the call.
    Done(Completion),
    /// UCX will finish it during a later progress.
    InFlight(Request<'a>),
}

impl<'a> Submitted<'a> {
    /// Progresses the worker (busy) until the operation finishes.
    pub fn wait(self) -> Result<Completion> {
        match self {
            Submitted::Done(c) => Ok(c),
            Submitted::InFlight(r) => r.wait(),
        }
    }

    /// Interprets a `ucs_status_ptr_t` returned by an `_nbx` call. `inline` is what the call
    /// wrote through `recv_info` when it completed immediately.
    ///
    /// # Safety
    /// `ret` must come from an `_nbx` call on `worker` whose callback is one of this module's
    /// and whose buffer is borrowed for `'a`.
    pub(crate) unsafe fn from_status_ptr(
        op: &'static str,
        ret: sys::ucs_status_ptr_t,
        worker: &Worker,
        inline: Completion,
    ) -> Result<Submitted<'a>> {
        let addr = ret as usize;
        if addr == 0 {
            return Ok(Submitted::Done(inline));
        }
        // UCS_PTR_IS_ERR: error codes are small negative numbers cast to a pointer.
        if addr >= (sys::UCS_ERR_LAST as isize) as usize {
            let status = Status::from_raw(addr as isize as i8).unwrap_or(Status::Other(addr as isize as i8));
            return Err(Error::new(op, status));
        }
        live::created(Kind::Request);
        Ok(Submitted::InFlight(Request {
            // SAFETY: non-null (checked above) pointer to a UCX request.
            ptr: unsafe { NonNull::new_unchecked(ret) },
            worker: worker.clone(),
            endpoint: None,
            _buffer: PhantomData,
        }))
    }

    /// Ties the operation to `ep`: if dropped unfinished and UCX cannot cancel it, `ep` is
    /// force-closed to stop it (see [`Request`]). Endpoint operations do this themselves; use
    /// it for worker-level operations that serve one endpoint, e.g. fetching a rendezvous
    /// active message its sender is waiting on.
    pub fn on_endpoint(mut self, ep: &Endpoint) -> Self {
        if let Submitted::InFlight(r) = &mut self {
            r.endpoint = Some(ep.clone());
        }
        self
    }
}

/// A request parameter block with our completion callback and the given datatype settings.
pub(crate) fn params(cb: Callback, memory_type: Option<sys::ucs_memory_type_t>) -> sys::ucp_request_param_t {
    // SAFETY: ucp_request_param_t is plain C data; all-zero means "no fields set".
    let mut p: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    p.op_attr_mask = sys::UCP_OP_ATTR_FIELD_CALLBACK | sys::UCP_OP_ATTR_FIELD_DATATYPE;
    p.datatype = CONTIG_BYTES;
    match cb {
        Callback::Send => p.cb.send = Some(send_cb),
        Callback::TagRecv => p.cb.recv = Some(tag_recv_cb),
        Callback::StreamRecv => p.cb.recv_stream = Some(length_cb),
        Callback::AmRecv => p.cb.recv_am = Some(length_cb),
    }
    if let Some(mt) = memory_type {
        p.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_MEMORY_TYPE;
        p.memory_type = mt;
    }
    p
}

/// Which completion callback an operation takes.
#[derive(Clone, Copy)]
pub(crate) enum Callback {
    Send,
    TagRecv,
    StreamRecv,
    AmRecv,
}

/// `ucp_dt_make_contig(1)`: a contiguous buffer of bytes.
pub(crate) const CONTIG_BYTES: sys::ucp_datatype_t =
    (1 << sys::UCP_DATATYPE_SHIFT) as sys::ucp_datatype_t | sys::UCP_DATATYPE_CONTIG as sys::ucp_datatype_t;

//! The floor of the latency ladder (`scripts/bench_vs_perftest.sh`, `examples/core_lat.rs
//! --raw`): a tag ping-pong made of UCX's calls as `ucx_perftest` makes them, with none of
//! this crate's objects on the path: no [`crate::Request`], no slot protocol, a callback that
//! only counts and frees the request inside `ucp_worker_progress`. Between it and perftest is
//! what UCX costs as this crate sets it up (thread mode, features, run-time loading); between
//! it and `core_lat` is what ucx-core's safe requests cost. Not an API: a measuring stick.
use std::ffi::c_void;
use std::time::{Duration, Instant};

use crate::am::set_recv_handler;
use crate::error::{Error, Result, Status};
use crate::request::CONTIG_BYTES;
use crate::{sys, Endpoint, Worker};

/// Operations in flight and the first failure, shared with the callbacks through `user_data`.
#[derive(Default)]
struct Counts {
    sends: i64,
    recvs: i64,
    failed: Option<sys::ucs_status_t>,
}

/// Records a finished operation. Runs inside `ucp_worker_progress` on the calling thread.
///
/// # Safety
/// `user` is the `Counts` of the running ping-pong; `request` is UCX's, not yet freed.
unsafe fn finished(request: *mut c_void, status: sys::ucs_status_t, user: *mut c_void, recv: bool) {
    // SAFETY: the ping-pongs wait for every operation they submit, so their Counts outlive them.
    let counts = unsafe { &mut *user.cast::<Counts>() };
    match recv {
        true => counts.recvs -= 1,
        false => counts.sends -= 1,
    }
    if status != sys::UCS_OK && counts.failed.is_none() {
        counts.failed = Some(status);
    }
    // SAFETY: UCX hands over a request it no longer uses once the callback runs; freed once.
    unsafe { sys::ucp_request_free(request) };
}

unsafe extern "C" fn send_done(request: *mut c_void, status: sys::ucs_status_t, user: *mut c_void) {
    // SAFETY: UCX calls this with a request of tag_pingpong's and its user_data.
    unsafe { finished(request, status, user, false) }
}

unsafe extern "C" fn recv_done(
    request: *mut c_void,
    status: sys::ucs_status_t,
    _info: *const sys::ucp_tag_recv_info_t,
    user: *mut c_void,
) {
    // SAFETY: as in send_done.
    unsafe { finished(request, status, user, true) }
}

/// Whether an `_nbx` call's result is a request still in flight (false: done inline).
fn in_flight(ret: sys::ucs_status_ptr_t, op: &'static str) -> Result<bool> {
    let addr = ret as usize;
    // UCS_PTR_IS_ERR: error codes are small negative numbers cast to a pointer.
    if addr >= (sys::UCS_ERR_LAST as isize) as usize {
        return Err(Error::new(op, status_of(addr as isize as i8)));
    }
    Ok(addr != 0)
}

fn status_of(raw: sys::ucs_status_t) -> Status {
    Status::from_raw(raw).unwrap_or(Status::Other(raw))
}

/// Request parameters with a counting callback and `counts` as its user data.
fn params(counts: *mut Counts, recv: bool) -> sys::ucp_request_param_t {
    // SAFETY: plain C data; all-zero means "no fields set".
    let mut p: sys::ucp_request_param_t = unsafe { std::mem::zeroed() };
    p.op_attr_mask =
        sys::UCP_OP_ATTR_FIELD_CALLBACK | sys::UCP_OP_ATTR_FIELD_DATATYPE | sys::UCP_OP_ATTR_FIELD_USER_DATA;
    p.datatype = CONTIG_BYTES;
    match recv {
        true => p.cb.recv = Some(recv_done),
        false => p.cb.send = Some(send_done),
    }
    p.user_data = counts.cast();
    p
}

/// `iters` round trips: the initiator sends then receives, the other side receives then
/// sends. Returns the initiator's round-trip times (one clock read per round trip, as perftest
/// takes one timestamp per iteration); the other side's is empty. The loop of every rung of
/// the ladder (`examples/core_lat.rs` runs its ucx-core rungs through it too).
#[doc(hidden)]
pub fn rounds<E>(
    initiator: bool,
    iters: usize,
    mut send: impl FnMut() -> std::result::Result<(), E>,
    mut recv: impl FnMut() -> std::result::Result<(), E>,
) -> std::result::Result<Vec<Duration>, E> {
    let mut rtts = Vec::with_capacity(if initiator { iters } else { 0 });
    let mut t0 = Instant::now();
    for _ in 0..iters {
        if initiator {
            send()?;
            recv()?;
            let now = Instant::now();
            rtts.push(now - t0);
            t0 = now;
        } else {
            recv()?;
            send()?;
        }
    }
    Ok(rtts)
}

/// Progresses `worker` until `pending(counts)` is 0; then the first failure a callback saw.
///
/// # Safety
/// `worker` is live; `counts` is valid, and touched meanwhile only by this thread's callbacks.
unsafe fn wait(worker: sys::ucp_worker_h, counts: *mut Counts, pending: fn(&Counts) -> i64) -> Result<()> {
    // SAFETY: as the caller promises; the callbacks run inside ucp_worker_progress, between
    // these reads.
    unsafe {
        while pending(&*counts) > 0 {
            sys::ucp_worker_progress(worker);
        }
        match (*counts).failed {
            Some(status) => Err(Error::new("floor", status_of(status))),
            None => Ok(()),
        }
    }
}

/// [`rounds`] of 8-byte tag messages on `tag` between `ep`'s two sides, as perftest's
/// `tag_lat`, each side busy-polling `worker` until its operation is done.
#[doc(hidden)]
pub fn tag_pingpong(worker: &Worker, ep: &Endpoint, initiator: bool, iters: usize, tag: u64) -> Result<Vec<Duration>> {
    let (w, e) = (worker.handle(), ep.handle("floor::tag_pingpong")?);
    let mut counts = Counts::default();
    let counts_ptr: *mut Counts = &mut counts;
    let (send_params, recv_params) = (params(counts_ptr, false), params(counts_ptr, true));
    let out = [1u8; 8];
    let mut back = [0u8; 8];
    let back_ptr: *mut c_void = back.as_mut_ptr().cast();
    // The unsafe blocks below: the handles are live for the call; every operation is waited
    // for before the next one and before return, so `out`, `back` and `counts` outlive what
    // UCX does with them; `counts` is touched only through `counts_ptr`, here and in the
    // callbacks, which run on this thread inside ucp_worker_progress.
    let send = || {
        // SAFETY: see above.
        unsafe {
            let ret = sys::ucp_tag_send_nbx(e, out.as_ptr().cast(), out.len(), tag, &send_params);
            if in_flight(ret, "ucp_tag_send_nbx")? {
                (*counts_ptr).sends += 1;
            }
            wait(w, counts_ptr, |c| c.sends)
        }
    };
    let recv = || {
        // SAFETY: see above. Without RECV_INFO UCX always returns a request; its callback
        // counts it down.
        unsafe {
            let ret = sys::ucp_tag_recv_nbx(w, back_ptr, back.len(), tag, u64::MAX, &recv_params);
            if in_flight(ret, "ucp_tag_recv_nbx")? {
                (*counts_ptr).recvs += 1;
            }
            wait(w, counts_ptr, |c| c.recvs)
        }
    };
    rounds(initiator, iters, send, recv)
}

/// How [`am_pingpong`] sends: as `ucx_perftest`'s `ucp_am_lat` (no header, no reply
/// endpoint), or as UCX-Py's active messages, which ucx-async sends (its 4-byte header and
/// `UCP_AM_SEND_FLAG_REPLY`, so that the receiver learns which endpoint sent it).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AmStyle {
    /// No header, no reply flag.
    Perftest,
    /// UCX-Py's header and the reply flag.
    UcxPy,
}

/// Counts an arrived active message and lets UCX keep nothing (as perftest's handler).
unsafe extern "C" fn am_arrived(
    arg: *mut c_void,
    _header: *const c_void,
    _header_length: usize,
    _data: *mut c_void,
    _length: usize,
    _param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: `arg` is am_pingpong's Counts, registered only while it runs on this thread.
    unsafe { (*arg.cast::<Counts>()).recvs -= 1 };
    sys::UCS_OK
}

/// [`rounds`] of 8-byte active messages of id `id` (which must have no other handler),
/// sent in `style`; each side counts arrivals in its handler, as perftest's `ucp_am_lat`.
#[doc(hidden)]
pub fn am_pingpong(
    worker: &Worker,
    ep: &Endpoint,
    initiator: bool,
    iters: usize,
    id: u16,
    style: AmStyle,
) -> Result<Vec<Duration>> {
    let (w, e) = (worker.handle(), ep.handle("floor::am_pingpong")?);
    let mut counts = Counts::default();
    let counts_ptr: *mut Counts = &mut counts;
    // SAFETY: `counts` outlives the registration, which is cleared below before it goes.
    unsafe { set_recv_handler(w, id, Some(am_arrived), counts_ptr.cast())? };
    let mut send_params = params(counts_ptr, false);
    let header = crate::wire::am_header::encode(crate::MemoryType::Host.raw() as i32);
    let header: &[u8] = match style {
        AmStyle::Perftest => &[],
        AmStyle::UcxPy => {
            send_params.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
            send_params.flags = sys::UCP_AM_SEND_FLAG_REPLY;
            &header
        }
    };
    let out = [1u8; 8];
    // The unsafe blocks below: as in tag_pingpong; the handler's `counts` is cleared below,
    // before it goes.
    let send = || {
        // SAFETY: see above.
        unsafe {
            let ret = sys::ucp_am_send_nbx(
                e,
                u32::from(id),
                header.as_ptr().cast(),
                header.len(),
                out.as_ptr().cast(),
                out.len(),
                &send_params,
            );
            if in_flight(ret, "ucp_am_send_nbx")? {
                (*counts_ptr).sends += 1;
            }
            wait(w, counts_ptr, |c| c.sends)
        }
    };
    let recv = || {
        // SAFETY: see above. An arrival is expected before it is waited for: the handler
        // counts it down.
        unsafe {
            (*counts_ptr).recvs += 1;
            wait(w, counts_ptr, |c| c.recvs)
        }
    };
    let ran = rounds(initiator, iters, send, recv);
    // SAFETY: clearing the handler; nothing is registered with an argument any more.
    unsafe { set_recv_handler(w, id, None, std::ptr::null_mut())? };
    ran
}

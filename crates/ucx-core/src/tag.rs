//! Tag-matched messaging: sends on an endpoint, receives on the worker (UCX matches receives
//! worker-wide by tag and mask, not per endpoint), and probing for arrived messages.
use crate::buffer::{MemoryType, RecvBuffer, SendBuffer};
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::request::{self, Callback, Completion, Submitted};
use crate::sys;
use crate::worker::Worker;

/// What a tag receive reports before UCX fills it in.
const NO_INFO: sys::ucp_tag_recv_info_t = sys::ucp_tag_recv_info_t { sender_tag: 0, length: 0 };

/// Parameters for a tag receive that reports an inline completion through `info`.
fn recv_params(info: &mut sys::ucp_tag_recv_info_t, memory_type: MemoryType) -> sys::ucp_request_param_t {
    let mut params = request::params(Callback::TagRecv, memory_type.for_op());
    params.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_RECV_INFO;
    params.recv_info.tag_info = info;
    params
}

fn completion(info: &sys::ucp_tag_recv_info_t) -> Completion {
    Completion { length: info.length, sender_tag: info.sender_tag }
}

/// A mask that matches every bit of the tag (exact match).
pub const FULL_MASK: u64 = u64::MAX;

/// The largest host message for which [`fast_completion_pays`] holds.
pub const FAST_COMPLETION_MAX: usize = 1024;

/// Whether a send of `nbytes` of `memory` is better asked for fast completion
/// ([`Endpoint::tag_send_fast`]): host messages of up to [`FAST_COMPLETION_MAX`] bytes.
/// Over TCP (every endpoint with peer error handling), UCX 1.22 sends 1 B to 8 KiB by
/// zero-copy eager, which takes a request and a memory-handle lookup per send; asked for fast
/// completion it sends them eager short, copied into the socket's buffer and finished in the
/// call. Measured on the project's VM, one-way time in a ping-pong: `ucp`'s native send with
/// the flag against without, alternating blocks, 8 B 3 % and 1 KiB 4 % less (4 KiB 1 %, 8000 B
/// none); ucx-async's `bench -t tag_lat -s 8` over TCP, 6 alternating runs, 4 % less (median).
/// It stops at 1 KiB because a stream of 4 KiB sends (`bench -t tag_bw`, event mode) moved
/// between 200 and 700 MiB/s from run to run with either choice, so no gain there was shown.
/// Over shared memory, sends up to 1 KiB take the same protocols either way (eager short up to
/// 92 B, then eager copy: `UCX_PROTO_INFO=y`). The rule is ucx-async's and the Python
/// bindings' for their plain sends; [`Endpoint::tag_send`] itself passes no flag.
pub fn fast_completion_pays(nbytes: usize, memory: MemoryType) -> bool {
    nbytes <= FAST_COMPLETION_MAX && memory == MemoryType::Host
}

impl Endpoint {
    /// Sends `buf` with `tag` (`ucp_tag_send_nbx`).
    pub fn tag_send<'a, B: SendBuffer + ?Sized>(&self, buf: &'a B, tag: u64) -> Result<Submitted<'a>> {
        self.tag_send_flagged(buf, tag, 0)
    }

    /// [`Endpoint::tag_send`] asking UCX to complete it as early as it can
    /// (`UCP_OP_ATTR_FLAG_FAST_CMPL`): UCX then copies eagerly up to its fast-completion
    /// thresholds (256 KiB over shared memory, against about 5 KiB otherwise) instead of a
    /// rendezvous, whose handshake needs the receiver to run. For small messages that
    /// carry latency, not bandwidth.
    pub fn tag_send_fast<'a, B: SendBuffer + ?Sized>(&self, buf: &'a B, tag: u64) -> Result<Submitted<'a>> {
        self.tag_send_flagged(buf, tag, sys::UCP_OP_ATTR_FLAG_FAST_CMPL)
    }

    fn tag_send_flagged<'a, B: SendBuffer + ?Sized>(&self, buf: &'a B, tag: u64, flags: u32) -> Result<Submitted<'a>> {
        let ep = self.handle("ucp_tag_send_nbx")?;
        let mut params = request::params(Callback::Send, buf.memory_type().for_op());
        params.op_attr_mask |= flags;
        // SAFETY: the endpoint is live; buf is readable for byte_len() bytes and borrowed for
        // 'a, as long as the returned request.
        unsafe {
            let ret = sys::ucp_tag_send_nbx(ep, buf.as_ptr().cast(), buf.byte_len(), tag, &params);
            Submitted::from_status_ptr("ucp_tag_send_nbx", ret, self.worker(), Completion::default())
                .map(|s| s.on_endpoint(self))
        }
    }
}

/// A message found by [`Worker::tag_probe`] without removing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeInfo {
    /// The message's length in bytes.
    pub length: usize,
    /// The tag it was sent with.
    pub sender_tag: u64,
}

impl Worker {
    /// Receives a message whose tag matches `tag` under `mask` into `buf`
    /// (`ucp_tag_recv_nbx`). The completion reports the length received and the sender's tag; a
    /// message longer than `buf` fails with `MessageTruncated`.
    pub fn tag_recv<'a, B: RecvBuffer + ?Sized>(&self, buf: &'a mut B, tag: u64, mask: u64) -> Result<Submitted<'a>> {
        let mut info = NO_INFO;
        let params = recv_params(&mut info, buf.memory_type());
        // SAFETY: the worker is live; buf is writable for byte_len() bytes and borrowed for 'a;
        // `info` outlives the call, which is the only time UCX writes it.
        unsafe {
            let ret = sys::ucp_tag_recv_nbx(self.handle(), buf.as_mut_ptr().cast(), buf.byte_len(), tag, mask, &params);
            Submitted::from_status_ptr("ucp_tag_recv_nbx", ret, self, completion(&info))
        }
    }

    /// Whether a message matching `tag`/`mask` has arrived and is unclaimed; it stays queued
    /// (`ucp_tag_probe_nb` without removal).
    pub fn tag_probe(&self, tag: u64, mask: u64) -> Option<ProbeInfo> {
        self.probe(tag, mask, false).map(|(_, info)| info)
    }

    /// Takes a matching message out of the queue (`ucp_tag_probe_nb` with removal), to be
    /// received with [`ProbedMessage::recv_into`], typically into a buffer sized from
    /// [`ProbedMessage::info`].
    pub fn tag_probe_take(&self, tag: u64, mask: u64) -> Option<ProbedMessage> {
        self.probe(tag, mask, true).map(|(handle, info)| ProbedMessage { handle, info, worker: self.clone() })
    }

    /// `ucp_tag_probe_nb`: the message (removed from the queue if `remove`) and its info.
    fn probe(&self, tag: u64, mask: u64, remove: bool) -> Option<(sys::ucp_tag_message_h, ProbeInfo)> {
        let mut info = NO_INFO;
        // SAFETY: the worker is live; info outlives the call.
        let msg = unsafe { sys::ucp_tag_probe_nb(self.handle(), tag, mask, i32::from(remove), &mut info) };
        (!msg.is_null()).then_some((msg, ProbeInfo { length: info.length, sender_tag: info.sender_tag }))
    }
}

/// A message removed from the worker's queue by [`Worker::tag_probe_take`]. It must be
/// received; dropping it discards it ([`ProbedMessage::discard_within`], one second).
pub struct ProbedMessage {
    handle: sys::ucp_tag_message_h,
    info: ProbeInfo,
    worker: Worker,
}

// SAFETY: the message handle is an opaque UCX descriptor used through the MULTI-mode worker.
unsafe impl Send for ProbedMessage {}

impl ProbedMessage {
    /// Its length and tag.
    pub fn info(&self) -> ProbeInfo {
        self.info
    }

    /// Receives it into scratch memory and drops it, progressing the worker for up to
    /// `limit`. A message not received by then (a rendezvous whose sender is gone never is)
    /// is left to UCX with its scratch memory, which is freed if UCX ever finishes; nothing
    /// waits for it. Returns whether it was received.
    pub fn discard_within(self, limit: std::time::Duration) -> bool {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: `this` is an unreceived probed message, consumed here and never dropped.
        let received = unsafe { discard_probed(&this.worker, this.handle, this.info.length, limit) };
        // SAFETY: read out once to release the worker handle; `this` is not used again.
        drop(unsafe { std::ptr::read(&this.worker) });
        received
    }

    /// Receives it into `buf` (`ucp_tag_msg_recv_nbx`).
    pub fn recv_into<B: RecvBuffer + ?Sized>(self, buf: &mut B) -> Result<Submitted<'_>> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: read out once; `this` is not used or dropped again.
        let worker = unsafe { std::ptr::read(&this.worker) };
        // SAFETY: handle is an unreceived probed message of `worker`; buf is writable for its
        // length and borrowed as long as the request.
        unsafe { recv_probed(&worker, this.handle, buf) }
    }
}

/// # Safety
/// `msg` must be a probed-and-removed message of `worker`, received exactly once.
unsafe fn recv_probed<'a, B: RecvBuffer + ?Sized>(
    worker: &Worker,
    msg: sys::ucp_tag_message_h,
    buf: &'a mut B,
) -> Result<Submitted<'a>> {
    let mut info = NO_INFO;
    let params = recv_params(&mut info, buf.memory_type());
    // SAFETY: guaranteed by the caller; `info` outlives the call.
    unsafe {
        let ret = sys::ucp_tag_msg_recv_nbx(worker.handle(), buf.as_mut_ptr().cast(), buf.byte_len(), msg, &params);
        Submitted::from_status_ptr("ucp_tag_msg_recv_nbx", ret, worker, completion(&info))
    }
}

/// The most scratch memory discarding one message takes.
const DISCARD_SCRATCH: usize = 64 << 10;

/// Receives probed message `msg` of `len` bytes into scratch memory and drops it, progressing
/// `worker` for up to `limit`; see [`ProbedMessage::discard_within`]. Returns whether it was
/// received.
///
/// # Safety
/// `msg` must be a probed-and-removed message of `worker`, received exactly once.
unsafe fn discard_probed(worker: &Worker, msg: sys::ucp_tag_message_h, len: usize, limit: std::time::Duration) -> bool {
    // A longer message is received truncated, which UCX completes all the same (a rendezvous
    // then fetches nothing): the length is the peer's word, and must not size an allocation.
    let submitted = crate::Owned::submit(Box::new(vec![0u8; len.min(DISCARD_SCRATCH)]), false, |scratch| {
        // SAFETY: guaranteed by the caller; the scratch buffer is owned by the operation
        // until UCX is done with it.
        unsafe { recv_probed(worker, msg, &mut scratch[..]) }
    });
    let op = match submitted {
        Ok(op) => op,
        // Truncated at once (a rendezvous whose sender has been told to drop it): gone.
        Err(e) => return e.status() == crate::Status::MessageTruncated,
    };
    let deadline = std::time::Instant::now() + limit;
    while !op.is_complete() && std::time::Instant::now() < deadline {
        worker.progress();
    }
    op.is_complete()
}

impl Drop for ProbedMessage {
    fn drop(&mut self) {
        // SAFETY: a message still held here was never received (the consuming methods take
        // it out without dropping it); it is received only here.
        unsafe { discard_probed(&self.worker, self.handle, self.info.length, std::time::Duration::from_secs(1)) };
    }
}

impl std::fmt::Debug for ProbedMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbedMessage").field("info", &self.info).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_small_host_sends_go_for_fast_completion() {
        assert!(fast_completion_pays(0, MemoryType::Host));
        assert!(fast_completion_pays(FAST_COMPLETION_MAX, MemoryType::Host));
        assert!(!fast_completion_pays(FAST_COMPLETION_MAX + 1, MemoryType::Host));
        assert!(!fast_completion_pays(8, MemoryType::Cuda), "device memory keeps UCX's choice");
        assert!(!fast_completion_pays(8, MemoryType::Unknown), "so does memory of unknown type");
    }
}

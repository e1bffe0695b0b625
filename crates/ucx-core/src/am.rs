//! Active messages: sending a header plus data to a handler id on the peer, and receiving them
//! through a per-id handler that may take the data at once (eager) or fetch it later into a
//! buffer of its choice (rendezvous, `ucp_am_recv_data_nbx`).
use std::cell::Cell;
use std::ffi::c_void;
use std::sync::{Mutex, Weak};

use crate::buffer::{RecvBuffer, SendBuffer};
use crate::context::Features;
use crate::endpoint::Endpoint;
use crate::error::{Error, Result, Status};
use crate::live::{self, Kind};
use crate::request::{self, Callback, Completion, Submitted};
use crate::sys;
use crate::worker::{Worker, WorkerInner};

/// Which protocol an active-message send uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AmProto {
    /// UCX chooses by size.
    #[default]
    Auto,
    /// Force eager (`UCP_AM_SEND_FLAG_EAGER`).
    Eager,
    /// Force rendezvous (`UCP_AM_SEND_FLAG_RNDV`).
    Rendezvous,
}

/// Options of an active-message send.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AmSendOptions {
    /// Let the receiver's handler see this endpoint as the reply endpoint
    /// (`UCP_AM_SEND_FLAG_REPLY`); UCX-Py needs it to tell senders apart.
    pub reply: bool,
    /// Protocol selection.
    pub proto: AmProto,
}

impl Endpoint {
    /// Sends an active message to handler `id` on the peer: `header` (delivered whole to the
    /// handler) and `data` (`ucp_am_send_nbx`). Both stay borrowed until the send completes.
    pub fn am_send<'a, B: SendBuffer + ?Sized>(
        &self,
        id: u16,
        header: &'a [u8],
        data: &'a B,
        options: AmSendOptions,
    ) -> Result<Submitted<'a>> {
        self.worker().require(Features::AM, "ucp_am_send_nbx")?;
        let ep = self.handle("ucp_am_send_nbx")?;
        let mut params = request::params(Callback::Send, data.memory_type().for_op());
        let mut flags = 0;
        if options.reply {
            flags |= sys::UCP_AM_SEND_FLAG_REPLY;
        }
        flags |= match options.proto {
            AmProto::Auto => 0,
            AmProto::Eager => sys::UCP_AM_SEND_FLAG_EAGER,
            AmProto::Rendezvous => sys::UCP_AM_SEND_FLAG_RNDV,
        };
        params.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
        params.flags = flags;
        // SAFETY: the endpoint is live; header and data are readable and borrowed as long as
        // the returned request.
        unsafe {
            let ret = sys::ucp_am_send_nbx(
                ep,
                u32::from(id),
                header.as_ptr().cast(),
                header.len(),
                data.as_ptr().cast(),
                data.byte_len(),
                &params,
            );
            Submitted::from_status_ptr("ucp_am_send_nbx", ret, self.worker(), Completion::default())
                .map(|s| s.on_endpoint(self))
        }
    }
}

type Handler = Box<dyn FnMut(AmMessage) + Send>;

/// A registered handler, reached by UCX through the callback argument.
pub(crate) struct HandlerCell {
    worker: Weak<WorkerInner>,
    handler: Mutex<Handler>,
}

thread_local! {
    /// The data descriptor whose callback is running on this thread, and whether the handler
    /// already consumed or dropped it (then the callback must not ask UCX to keep it).
    static IN_CALLBACK: Cell<(*mut c_void, bool)> = const { Cell::new((std::ptr::null_mut(), false)) };
}

unsafe extern "C" fn on_am(
    arg: *mut c_void,
    header: *const c_void,
    header_length: usize,
    data: *mut c_void,
    length: usize,
    param: *const sys::ucp_am_recv_param_t,
) -> sys::ucs_status_t {
    // SAFETY: arg is the HandlerCell registered for this id; the worker keeps it alive.
    let cell = unsafe { &*arg.cast::<HandlerCell>() };
    // SAFETY: UCX passes valid params for the duration of the callback.
    let param = unsafe { &*param };
    // A worker being destroyed delivers nothing (its handlers may be going too). A load, not
    // an upgrade: only a message that keeps UCX's data holds the worker.
    if cell.worker.strong_count() == 0 {
        return sys::UCS_OK;
    }
    let attr = param.recv_attr;
    let rndv = attr & sys::UCP_AM_RECV_ATTR_FLAG_RNDV as u64 != 0;
    let holdable = attr & sys::UCP_AM_RECV_ATTR_FLAG_DATA as u64 != 0 && length > 0;
    // SAFETY: UCX guarantees header_length readable bytes during the callback.
    let header = Header::copy(unsafe { bytes(header, header_length) });
    let payload = if rndv || holdable {
        let Some(inner) = cell.worker.upgrade() else { return sys::UCS_OK };
        let (desc, len, worker) = (data, length, Worker::from_inner(inner));
        live::created(Kind::AmData);
        match rndv {
            true => Payload::Rendezvous { desc, len, worker },
            false => Payload::Held { desc, len, worker },
        }
    } else {
        // SAFETY: eager data is readable for `length` bytes during the callback.
        Payload::Copied(unsafe { bytes(data, length) }.to_vec())
    };
    let keeps = !matches!(payload, Payload::Copied(_));
    let reply_ep = if attr & sys::UCP_AM_RECV_ATTR_FIELD_REPLY_EP as u64 != 0 { param.reply_ep as usize } else { 0 };
    let msg = AmMessage { header, payload, reply_ep };

    IN_CALLBACK.with(|c| c.set((data, false)));
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut h = cell.handler.lock().unwrap_or_else(|p| p.into_inner());
        h(msg);
    }));
    let (_, let_go) = IN_CALLBACK.with(|c| c.replace((std::ptr::null_mut(), false)));
    if run.is_err() {
        eprintln!("ucx-core: an active-message handler panicked; the message was dropped");
    }
    if keeps && !let_go {
        // The handler kept the message: the data stays with UCX until released or received.
        sys::UCS_INPROGRESS
    } else {
        sys::UCS_OK
    }
}

/// `ucp_worker_set_am_recv_handler`: `cb` with `arg` receives active messages `id` on `worker`,
/// whole (`UCP_AM_FLAG_WHOLE_MSG`); `cb` `None` clears it.
///
/// # Safety
/// `worker` is live, and `arg` stays valid for `cb` until the handler is replaced or cleared, or
/// the worker destroyed.
pub(crate) unsafe fn set_recv_handler(
    worker: sys::ucp_worker_h,
    id: u16,
    cb: sys::ucp_am_recv_callback_t,
    arg: *mut c_void,
) -> Result<()> {
    // SAFETY: plain C struct; zero means "field not set".
    let mut p: sys::ucp_am_handler_param_t = unsafe { std::mem::zeroed() };
    p.field_mask = (sys::UCP_AM_HANDLER_PARAM_FIELD_ID
        | sys::UCP_AM_HANDLER_PARAM_FIELD_CB
        | sys::UCP_AM_HANDLER_PARAM_FIELD_ARG
        | sys::UCP_AM_HANDLER_PARAM_FIELD_FLAGS) as u64;
    p.id = u32::from(id);
    p.cb = cb;
    p.arg = arg;
    p.flags = sys::UCP_AM_FLAG_WHOLE_MSG;
    // SAFETY: as the caller promises.
    crate::error::check("ucp_worker_set_am_recv_handler", unsafe { sys::ucp_worker_set_am_recv_handler(worker, &p) })
}

/// `len` bytes at `ptr` (none when `len` is 0, whatever `ptr` is).
///
/// # Safety
/// Unless `len` is 0, `ptr` points to `len` readable bytes that outlive the returned slice.
unsafe fn bytes<'a>(ptr: *const c_void, len: usize) -> &'a [u8] {
    match len {
        0 => &[],
        // SAFETY: as the caller promises.
        _ => unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) },
    }
}

impl Worker {
    /// Registers `handler` for active messages with `id` (`ucp_worker_set_am_recv_handler`);
    /// it runs during [`Worker::progress`]. Replaces any earlier handler for `id`.
    pub fn set_am_handler(&self, id: u16, handler: impl FnMut(AmMessage) + Send + 'static) -> Result<()> {
        self.require(Features::AM, "ucp_worker_set_am_recv_handler")?;
        let cell = Box::new(HandlerCell { worker: self.downgrade(), handler: Mutex::new(Box::new(handler)) });
        let arg = (&*cell as *const HandlerCell).cast_mut().cast();
        // SAFETY: the worker is live; the cell lives in the worker's table until it is destroyed.
        unsafe { set_recv_handler(self.handle(), id, Some(on_am), arg)? };
        self.inner().am_handlers.lock().unwrap_or_else(|p| p.into_inner()).push((id, cell));
        Ok(())
    }
}

/// Headers up to this many bytes (UCX-Py's is 4) are kept in the message, not allocated.
const HEADER_INLINE: usize = 24;

/// An active message's header, copied out of UCX during its callback.
enum Header {
    Inline { len: u8, bytes: [u8; HEADER_INLINE] },
    Heap(Vec<u8>),
}

impl Header {
    fn copy(src: &[u8]) -> Header {
        if src.len() > HEADER_INLINE {
            return Header::Heap(src.to_vec());
        }
        let mut bytes = [0; HEADER_INLINE];
        bytes[..src.len()].copy_from_slice(src);
        // At most HEADER_INLINE (checked above), so it fits.
        Header::Inline { len: src.len() as u8, bytes }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            Header::Inline { len, bytes } => &bytes[..usize::from(*len)],
            Header::Heap(v) => v,
        }
    }
}

enum Payload {
    /// Copied out of UCX (empty, or data UCX could not let us hold).
    Copied(Vec<u8>),
    /// Eager data UCX keeps for us until `ucp_am_data_release` on `worker`.
    Held { desc: *mut c_void, len: usize, worker: Worker },
    /// Rendezvous: only a descriptor; the data is fetched by `ucp_am_recv_data_nbx` on `worker`.
    Rendezvous { desc: *mut c_void, len: usize, worker: Worker },
    /// Received or released.
    Gone,
}

/// An arrived active message: its header, its data (or the means to fetch it), and the
/// sender's reply endpoint. Dropping it releases the data to UCX.
pub struct AmMessage {
    header: Header,
    payload: Payload,
    reply_ep: usize,
}

// SAFETY: the descriptors are UCX data owned by this message and used through the MULTI-mode
// worker.
unsafe impl Send for AmMessage {}

impl AmMessage {
    /// The header the sender attached.
    pub fn header(&self) -> &[u8] {
        self.header.as_slice()
    }

    /// The data's length in bytes.
    pub fn data_len(&self) -> usize {
        match &self.payload {
            Payload::Copied(v) => v.len(),
            Payload::Held { len, .. } | Payload::Rendezvous { len, .. } => *len,
            Payload::Gone => 0,
        }
    }

    /// The data as an owned `Vec`, when the handler already had to copy it out of UCX (short
    /// eager messages): no second copy. `None` (and the message unchanged) otherwise.
    pub fn take_copied(&mut self) -> Option<Vec<u8>> {
        match std::mem::replace(&mut self.payload, Payload::Gone) {
            Payload::Copied(v) => Some(v),
            other => {
                self.payload = other;
                None
            }
        }
    }

    /// Whether the data must be fetched with [`AmMessage::recv_into`] (rendezvous).
    pub fn is_rendezvous(&self) -> bool {
        matches!(self.payload, Payload::Rendezvous { .. })
    }

    /// The data, if it arrived eagerly (`None` for rendezvous).
    pub fn data(&self) -> Option<&[u8]> {
        match &self.payload {
            Payload::Copied(v) => Some(v),
            // SAFETY: UCX keeps held eager data valid until we release it.
            Payload::Held { desc, len, .. } => Some(unsafe { std::slice::from_raw_parts(desc.cast::<u8>(), *len) }),
            Payload::Rendezvous { .. } | Payload::Gone => None,
        }
    }

    /// The sender's endpoint as seen here ([`Endpoint::id`] of the endpoint this worker has to
    /// it), when it sent with [`AmSendOptions::reply`].
    pub fn reply_ep(&self) -> Option<usize> {
        (self.reply_ep != 0).then_some(self.reply_ep)
    }

    /// Moves the data into `buf`: copies eager data (done at once), or starts the rendezvous
    /// fetch. `buf` must be at least [`AmMessage::data_len`] bytes.
    pub fn recv_into<B: RecvBuffer + ?Sized>(mut self, buf: &mut B) -> Result<Submitted<'_>> {
        let len = self.data_len();
        if buf.byte_len() < len {
            return Err(Error::with_detail(
                "AmMessage::recv_into",
                Status::MessageTruncated,
                format!("{len} bytes arrived for a {}-byte buffer", buf.byte_len()),
            ));
        }
        if let Payload::Rendezvous { desc, len, worker } = self.take_rendezvous() {
            let_go(desc);
            live::destroyed(Kind::AmData);
            let mut length = 0usize;
            let mut params = request::params(Callback::AmRecv, buf.memory_type().for_op());
            params.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_RECV_INFO;
            params.recv_info.length = &mut length;
            // SAFETY: desc is an unreceived rendezvous descriptor of this worker; buf is
            // writable for at least len bytes and borrowed as long as the request.
            return unsafe {
                let ret = sys::ucp_am_recv_data_nbx(worker.handle(), desc, buf.as_mut_ptr().cast(), len, &params);
                Submitted::from_status_ptr(
                    "ucp_am_recv_data_nbx",
                    ret,
                    &worker,
                    Completion { length: len, sender_tag: 0 },
                )
            };
        }
        if let Some(src) = self.data() {
            // SAFETY: buf is writable for at least len bytes; the regions cannot overlap (UCX
            // owns the source).
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), buf.as_mut_ptr(), len) };
        }
        Ok(Submitted::Done(Completion { length: len, sender_tag: 0 }))
    }
}

impl AmMessage {
    /// The payload, if it is a rendezvous (which leaves `Gone` behind); `Gone` otherwise, with
    /// the payload left in place.
    fn take_rendezvous(&mut self) -> Payload {
        match self.payload {
            Payload::Rendezvous { .. } => std::mem::replace(&mut self.payload, Payload::Gone),
            _ => Payload::Gone,
        }
    }
}

/// Records that the handler let go of `desc` inside its callback (so the callback returns
/// `UCS_OK` instead of keeping it). Returns whether we are inside that callback.
fn let_go(desc: *mut c_void) -> bool {
    IN_CALLBACK.with(|c| {
        let (cur, _) = c.get();
        if cur == desc {
            c.set((cur, true));
            true
        } else {
            false
        }
    })
}

impl Drop for AmMessage {
    fn drop(&mut self) {
        if let Payload::Held { desc, ref worker, .. } | Payload::Rendezvous { desc, ref worker, .. } = self.payload {
            live::destroyed(Kind::AmData);
            if !let_go(desc) {
                // SAFETY: UCX kept desc for us (the callback returned UCS_INPROGRESS) and it was
                // neither received nor released.
                unsafe { sys::ucp_am_data_release(worker.handle(), desc) };
            }
        }
    }
}

impl std::fmt::Debug for AmMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AmMessage")
            .field("header_len", &self.header().len())
            .field("data_len", &self.data_len())
            .field("rendezvous", &self.is_rendezvous())
            .finish()
    }
}

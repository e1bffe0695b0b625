//! The stream API: an ordered byte stream per endpoint (used by the UCX-Py handshake).
use crate::buffer::{RecvBuffer, SendBuffer};
use crate::endpoint::Endpoint;
use crate::error::Result;
use crate::request::{self, Callback, Completion, Submitted};
use crate::sys;

impl Endpoint {
    /// Sends `buf` on the endpoint's stream (`ucp_stream_send_nbx`).
    pub fn stream_send<'a, B: SendBuffer + ?Sized>(&self, buf: &'a B) -> Result<Submitted<'a>> {
        let ep = self.handle("ucp_stream_send_nbx")?;
        let params = request::params(Callback::Send, buf.memory_type().for_op());
        // SAFETY: the endpoint is live; buf is readable and borrowed as long as the request.
        unsafe {
            let ret = sys::ucp_stream_send_nbx(ep, buf.as_ptr().cast(), buf.byte_len(), &params);
            Submitted::from_status_ptr("ucp_stream_send_nbx", ret, self.worker(), Completion::default())
                .map(|s| s.on_endpoint(self))
        }
    }

    /// Receives exactly `buf.byte_len()` bytes from the endpoint's stream
    /// (`ucp_stream_recv_nbx` with `UCP_STREAM_RECV_FLAG_WAITALL`).
    pub fn stream_recv<'a, B: RecvBuffer + ?Sized>(&self, buf: &'a mut B) -> Result<Submitted<'a>> {
        self.stream_recv_from(buf, 0)
    }

    /// [`Endpoint::stream_recv`] into `buf` from byte `offset` on (the bytes before it came
    /// from a [`crate::stream_backlog::StreamBacklog`]); the completion's length counts the
    /// bytes after `offset`. An offset past the buffer is `InvalidParam`.
    pub fn stream_recv_from<'a, B: RecvBuffer + ?Sized>(&self, buf: &'a mut B, offset: usize) -> Result<Submitted<'a>> {
        let ep = self.handle("ucp_stream_recv_nbx")?;
        let Some(len) = buf.byte_len().checked_sub(offset) else {
            return Err(crate::Error::with_detail(
                "ucp_stream_recv_nbx",
                crate::Status::InvalidParam,
                "offset past the buffer",
            ));
        };
        let mut length = 0usize;
        let mut params = request::params(Callback::StreamRecv, buf.memory_type().for_op());
        params.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
        params.flags = sys::UCP_STREAM_RECV_FLAG_WAITALL;
        // SAFETY: the endpoint is live; buf is writable for byte_len() bytes, so for `len`
        // from `offset`, and borrowed as long as the request; `length` outlives the call.
        unsafe {
            let at = buf.as_mut_ptr().add(offset);
            let ret = sys::ucp_stream_recv_nbx(ep, at.cast(), len, &mut length, &params);
            Submitted::from_status_ptr("ucp_stream_recv_nbx", ret, self.worker(), Completion { length, sender_tag: 0 })
                .map(|s| s.on_endpoint(self))
        }
    }
}

//! Stream bytes that arrived before anyone received them, held on our side so they can be
//! counted and capped: UCX queues an endpoint's unread stream data with no bound.
//!
//! [`StreamData`] is one chunk UCX hands over without copying (`ucp_stream_recv_data_nb`),
//! given back on drop (`ucp_stream_data_release`). A [`StreamBacklog`] keeps an endpoint's
//! chunks in order; a stream receive must read it first and ask UCX only for the rest
//! ([`StreamBacklog::receive`]), which keeps the byte order. Stream data is always in our memory, so the backlog's length
//! is exactly what the peer has made us hold.
use std::collections::VecDeque;
use std::ptr::NonNull;

use crate::buffer::{MemoryType, RecvBuffer};
use crate::endpoint::Endpoint;
use crate::error::{Error, Result};
use crate::request::{Completion, Submitted};
use crate::sys;
use crate::Status;

/// The most chunks one [`StreamBacklog::fill`] takes, so a peer that never stops sending
/// cannot keep it going.
pub const FILL_LIMIT: usize = 1 << 16;

/// One chunk of an endpoint's stream, lent by UCX until dropped.
pub struct StreamData {
    ep: Endpoint,
    data: NonNull<u8>,
    len: usize,
}

// SAFETY: the chunk is plain bytes UCX lent us; releasing it goes through the MULTI-mode
// worker, from any thread.
unsafe impl Send for StreamData {}

impl StreamData {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: UCX lent `len` readable bytes at `data` until `ucp_stream_data_release`,
        // which only drop calls.
        unsafe { std::slice::from_raw_parts(self.data.as_ptr(), self.len) }
    }
}

impl Drop for StreamData {
    fn drop(&mut self) {
        // A closed endpoint cannot take the chunk back: its owner drops chunks before closing
        // ([`StreamBacklog::clear`]); one still held then is leaked, not released through a
        // destroyed endpoint.
        if let Ok(ep) = self.ep.handle("ucp_stream_data_release") {
            // SAFETY: `data` came from `ucp_stream_recv_data_nb` on this endpoint, which is
            // live, and is released once.
            unsafe { sys::ucp_stream_data_release(ep, self.data.as_ptr().cast()) };
        }
    }
}

impl Endpoint {
    /// Takes the stream data that has arrived, without copying (`ucp_stream_recv_data_nb`):
    /// `None` when there is none.
    pub fn stream_take(&self) -> Result<Option<StreamData>> {
        let ep = self.handle("ucp_stream_recv_data_nb")?;
        let mut len = 0usize;
        // SAFETY: the endpoint is live; `len` outlives the call.
        let ret = unsafe { sys::ucp_stream_recv_data_nb(ep, &mut len) };
        let addr = ret as usize;
        if addr == 0 {
            return Ok(None);
        }
        // UCS_PTR_IS_ERR: error codes are small negative numbers cast to a pointer.
        if addr >= (sys::UCS_ERR_LAST as isize) as usize {
            let status = Status::from_raw(addr as isize as i8).unwrap_or(Status::Other(addr as isize as i8));
            return Err(Error::new("ucp_stream_recv_data_nb", status));
        }
        // SAFETY: not null, not an error: a chunk of `len` bytes UCX lends until released.
        let data = unsafe { NonNull::new_unchecked(ret.cast::<u8>()) };
        Ok(Some(StreamData { ep: self.clone(), data, len }))
    }
}

/// An endpoint's stream chunks taken from UCX before anyone asked for them, in order.
#[derive(Default)]
pub struct StreamBacklog {
    chunks: VecDeque<StreamData>,
    /// How much of the first chunk has been read.
    offset: usize,
    bytes: usize,
}

impl StreamBacklog {
    /// An empty backlog.
    pub fn new() -> StreamBacklog {
        StreamBacklog::default()
    }

    /// Takes what `ep`'s stream has received (at most [`FILL_LIMIT`] chunks). Returns the
    /// bytes held after. A take that fails (the endpoint closing or failing meanwhile) ends
    /// the fill; what was held stays counted.
    pub fn fill(&mut self, ep: &Endpoint) -> usize {
        for _ in 0..FILL_LIMIT {
            let Ok(Some(chunk)) = ep.stream_take() else { break };
            self.bytes += chunk.len;
            self.chunks.push_back(chunk);
        }
        self.bytes
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.bytes == 0
    }

    /// Copies held bytes, oldest first, into `out` (as many as fit); gives finished chunks
    /// back to UCX. Returns how many were copied.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let mut copied = 0;
        while copied < out.len() {
            let Some(chunk) = self.chunks.front() else { break };
            let rest = &chunk.as_slice()[self.offset..];
            let n = rest.len().min(out.len() - copied);
            out[copied..copied + n].copy_from_slice(&rest[..n]);
            copied += n;
            self.offset += n;
            self.bytes -= n;
            if self.offset == chunk.len {
                self.chunks.pop_front();
                self.offset = 0;
            }
        }
        copied
    }

    /// A stream receive of exactly `buf.byte_len()` bytes on `ep`: the held bytes first, then
    /// UCX for the rest from where they ended ([`Endpoint::stream_recv_from`]). Returns how
    /// many came from here, and the operation for the rest (done at once when the backlog
    /// filled `buf`; its length counts only the rest). Call it under the lock that also
    /// guards [`StreamBacklog::fill`], so that no fill takes bytes between the two.
    pub fn receive<'a, B: RecvBuffer + ?Sized>(
        &mut self,
        ep: &Endpoint,
        buf: &'a mut B,
    ) -> Result<(usize, Submitted<'a>)> {
        let copied = self.read_into(buf)?;
        if copied == buf.byte_len() {
            return Ok((copied, Submitted::Done(Completion::default())));
        }
        Ok((copied, ep.stream_recv_from(buf, copied)?))
    }

    /// [`StreamBacklog::read`] into a receive buffer. Host memory only: bytes that arrived
    /// before a receive into device (or managed) memory cannot be copied there by the CPU
    /// (`Unsupported`, naming why).
    fn read_into<B: RecvBuffer + ?Sized>(&mut self, buf: &mut B) -> Result<usize> {
        if self.is_empty() || buf.byte_len() == 0 {
            return Ok(0);
        }
        if buf.memory_type() != MemoryType::Host {
            return Err(Error::with_detail(
                "stream receive",
                Status::Unsupported,
                "stream bytes that arrived before this receive are held in host memory and cannot be copied into device memory",
            ));
        }
        // SAFETY: a host RecvBuffer points to byte_len() writable bytes (the trait's
        // contract), and `buf` is borrowed mutably for as long as the slice lives.
        let out = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr(), buf.byte_len()) };
        Ok(self.read(out))
    }

    /// Gives everything held back to UCX (before the endpoint closes: see [`StreamData`]).
    pub fn clear(&mut self) {
        self.chunks.clear();
        self.offset = 0;
        self.bytes = 0;
    }
}

impl std::fmt::Debug for StreamBacklog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamBacklog").field("chunks", &self.chunks.len()).field("bytes", &self.bytes).finish()
    }
}

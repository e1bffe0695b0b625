//! Remote memory access: registering memory with UCX (`ucp_mem_map`), packing its remote key
//! for a peer, unpacking a peer's key on an endpoint, and one-sided put/get into its memory.
use std::marker::PhantomData;
use std::sync::Arc;

use crate::buffer::{MemoryType, RecvBuffer, SendBuffer};
use crate::context::{Context, Features};
use crate::endpoint::Endpoint;
use crate::error::{check, Error, Result, Status};
use crate::live::{self, Kind};
use crate::request::{self, Callback, Completion, Submitted};
use crate::sys;

/// Memory registered with UCX for remote access (`ucp_mem_h`). Either UCX allocated it
/// ([`MemoryHandle::allocate`], owned) or it maps a buffer the handle borrows for `'a`
/// ([`MemoryHandle::map`]).
pub struct MemoryHandle<'a> {
    inner: Arc<MemInner>,
    _buffer: PhantomData<&'a mut [u8]>,
}

struct MemInner {
    handle: sys::ucp_mem_h,
    context: Context,
    address: usize,
    length: usize,
    memory_type: MemoryType,
}

// SAFETY: a ucp_mem_h is an immutable registration; UCP contexts are thread-safe for mapping
// and packing.
unsafe impl Send for MemInner {}
// SAFETY: as above.
unsafe impl Sync for MemInner {}

impl Drop for MemInner {
    fn drop(&mut self) {
        // SAFETY: the handle is live and the context (held) outlives it.
        unsafe { sys::ucp_mem_unmap(self.context.handle(), self.handle) };
        live::destroyed(Kind::Memory);
    }
}

impl MemoryHandle<'static> {
    /// Has UCX allocate and register `length` bytes of host memory.
    pub fn allocate(context: &Context, length: usize) -> Result<MemoryHandle<'static>> {
        map_raw(context, std::ptr::null_mut(), length, MemoryType::Host, true)
    }
}

impl<'a> MemoryHandle<'a> {
    /// Registers `buf` (borrowed, writable by remote puts, for as long as the handle lives).
    pub fn map<B: RecvBuffer + ?Sized>(context: &Context, buf: &'a mut B) -> Result<MemoryHandle<'a>> {
        map_raw(context, buf.as_mut_ptr(), buf.byte_len(), buf.memory_type(), false)
    }

    /// Registers `buf` for remote reads only (its owner may not allow writes, e.g. an
    /// immutable Python `bytes`): peers can `get` from it; a `put` into it fails.
    pub fn map_readonly<B: SendBuffer + ?Sized>(context: &Context, buf: &'a B) -> Result<MemoryHandle<'a>> {
        let prot = sys::UCP_MEM_MAP_PROT_LOCAL_READ | sys::UCP_MEM_MAP_PROT_REMOTE_READ;
        map_with(context, buf.as_ptr().cast_mut(), buf.byte_len(), buf.memory_type(), false, prot)
    }

    /// The registered memory's address (what a peer passes to put/get).
    pub fn address(&self) -> u64 {
        self.inner.address as u64
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.inner.length
    }

    /// Where the registered memory lives.
    pub fn memory_type(&self) -> MemoryType {
        self.inner.memory_type
    }

    /// Whether it is empty.
    pub fn is_empty(&self) -> bool {
        self.inner.length == 0
    }

    /// The memory, for reading locally (UCX-allocated or mapped host memory).
    ///
    /// # Safety
    /// No remote put or local operation may write it while the slice is alive.
    pub unsafe fn as_slice(&self) -> &[u8] {
        // SAFETY: the registration covers `length` bytes at `address`; the caller rules out
        // concurrent writes.
        unsafe { std::slice::from_raw_parts(self.inner.address as *const u8, self.inner.length) }
    }

    /// The remote key a peer needs to access this memory (`ucp_rkey_pack`), as bytes to send.
    pub fn pack_rkey(&self) -> Result<Vec<u8>> {
        let mut buf = std::ptr::null_mut();
        let mut size = 0usize;
        // SAFETY: context and handle are live; UCX allocates the packed key.
        check("ucp_rkey_pack", unsafe {
            sys::ucp_rkey_pack(self.inner.context.handle(), self.inner.handle, &mut buf, &mut size)
        })?;
        // SAFETY: UCX returned `size` readable bytes.
        let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), size) }.to_vec();
        // SAFETY: buf came from ucp_rkey_pack and is released once.
        unsafe { sys::ucp_rkey_buffer_release(buf) };
        Ok(bytes)
    }
}

fn map_raw<'a>(
    context: &Context,
    address: *mut u8,
    length: usize,
    mt: MemoryType,
    allocate: bool,
) -> Result<MemoryHandle<'a>> {
    let prot = sys::UCP_MEM_MAP_PROT_LOCAL_READ
        | sys::UCP_MEM_MAP_PROT_LOCAL_WRITE
        | sys::UCP_MEM_MAP_PROT_REMOTE_READ
        | sys::UCP_MEM_MAP_PROT_REMOTE_WRITE;
    map_with(context, address, length, mt, allocate, prot)
}

fn map_with<'a>(
    context: &Context,
    address: *mut u8,
    length: usize,
    mt: MemoryType,
    allocate: bool,
    prot: u32,
) -> Result<MemoryHandle<'a>> {
    if !context.features().contains(Features::RMA) && !context.features().contains(Features::AM) {
        return Err(Error::with_detail("ucp_mem_map", Status::Unsupported, "the context lacks RMA"));
    }
    // SAFETY: plain C struct; zero means "field not set".
    let mut p: sys::ucp_mem_map_params_t = unsafe { std::mem::zeroed() };
    p.field_mask = (sys::UCP_MEM_MAP_PARAM_FIELD_ADDRESS
        | sys::UCP_MEM_MAP_PARAM_FIELD_LENGTH
        | sys::UCP_MEM_MAP_PARAM_FIELD_FLAGS
        | sys::UCP_MEM_MAP_PARAM_FIELD_PROT) as u64;
    p.address = address.cast();
    p.length = length;
    p.flags = if allocate { sys::UCP_MEM_MAP_ALLOCATE } else { 0 };
    p.prot = prot;
    if let Some(raw) = mt.for_op() {
        p.field_mask |= sys::UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE as u64;
        p.memory_type = raw;
    }
    let mut handle = std::ptr::null_mut();
    // SAFETY: context is live; address/length describe memory the caller keeps valid ('a).
    check("ucp_mem_map", unsafe { sys::ucp_mem_map(context.handle(), &p, &mut handle) })?;
    live::created(Kind::Memory);
    // SAFETY: plain C struct; zero is a valid initial value.
    let mut attr: sys::ucp_mem_attr_t = unsafe { std::mem::zeroed() };
    attr.field_mask = (sys::UCP_MEM_ATTR_FIELD_ADDRESS | sys::UCP_MEM_ATTR_FIELD_LENGTH) as u64;
    // SAFETY: the handle is live.
    let q = unsafe { sys::ucp_mem_query(handle, &mut attr) };
    let (address, length) =
        if q == sys::UCS_OK { (attr.address as usize, attr.length) } else { (address as usize, length) };
    Ok(MemoryHandle {
        inner: Arc::new(MemInner { handle, context: context.clone(), address, length, memory_type: mt }),
        _buffer: PhantomData,
    })
}

/// Whether `len` bytes from `start` lie inside one shared mapping of this process (a line of
/// `/proc/self/maps` whose permissions say `s`); false where /proc cannot tell.
fn in_one_shared_mapping(start: usize, len: usize) -> bool {
    crate::proc_maps::shared_mapping_holding(start, len, |_| Some(())).is_some()
}

/// A peer's remote key unpacked on an endpoint (`ucp_rkey_h`); it keeps the endpoint alive.
pub struct RemoteKey {
    handle: sys::ucp_rkey_h,
    endpoint: Endpoint,
}

// SAFETY: an rkey is immutable after unpacking and used through the MULTI-mode worker.
unsafe impl Send for RemoteKey {}
// SAFETY: as above.
unsafe impl Sync for RemoteKey {}

impl Drop for RemoteKey {
    fn drop(&mut self) {
        // SAFETY: the rkey is live; its endpoint (held) outlives it.
        unsafe { sys::ucp_rkey_destroy(self.handle) };
        live::destroyed(Kind::RemoteKey);
    }
}

impl RemoteKey {
    /// Where the peer's `len` bytes at `remote_addr` (inside the memory this key was packed
    /// from) appear in this process (`ucp_rkey_ptr`), to read and write with plain loads and
    /// stores instead of messages. UCX offers it for memory it shares between processes: a
    /// peer on this host whose memory UCX allocated ([`MemoryHandle::allocate`], in System V or
    /// POSIX shared memory), whatever the endpoint's error handling (the key maps the memory;
    /// no transport lane is involved). Elsewhere (a peer on another host, a mapped user buffer
    /// without xpmem) UCX answers `Status::Unreachable`.
    ///
    /// UCX does not check the address against the key's bounds, so this does: the whole range
    /// must lie inside one shared mapping of this process (`/proc/self/maps`), else
    /// `Status::InvalidParam` (a peer that announced more than it shares never has this
    /// process write into its own private memory).
    ///
    /// The pointer stays valid while this key lives and the peer keeps its handle. Both sides
    /// access the same memory, so they must agree on who writes where and when (a message
    /// after a write), as with any shared memory; dereferencing it is the caller's `unsafe`.
    pub fn local_ptr(&self, remote_addr: u64, len: usize) -> Result<*mut u8> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: the rkey is live (its endpoint held); UCX writes only `ptr`.
        check("ucp_rkey_ptr", unsafe { sys::ucp_rkey_ptr(self.handle, remote_addr, &mut ptr) })?;
        let start = ptr as usize;
        if !in_one_shared_mapping(start, len) {
            let detail = format!("{len} bytes at {remote_addr:#x} do not lie inside one shared mapping here");
            return Err(Error::with_detail("ucp_rkey_ptr", Status::InvalidParam, detail));
        }
        Ok(ptr.cast())
    }

    /// The endpoint it was unpacked on.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }
}

impl Endpoint {
    /// Unpacks a peer's packed remote key for use on this endpoint (`ucp_ep_rkey_unpack`).
    pub fn unpack_rkey(&self, packed: &[u8]) -> Result<RemoteKey> {
        let ep = self.handle("ucp_ep_rkey_unpack")?;
        let mut handle = std::ptr::null_mut();
        // SAFETY: the endpoint is live; packed is readable; UCX validates its contents.
        check("ucp_ep_rkey_unpack", unsafe { sys::ucp_ep_rkey_unpack(ep, packed.as_ptr().cast(), &mut handle) })?;
        live::created(Kind::RemoteKey);
        Ok(RemoteKey { handle, endpoint: self.clone() })
    }

    /// Writes `buf` to the peer's memory at `remote_addr` (`ucp_put_nbx`). Completion means the
    /// local buffer may be reused; [`Endpoint::flush`] makes it visible remotely.
    pub fn put<'a, B: SendBuffer + ?Sized>(
        &self,
        buf: &'a B,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Submitted<'a>> {
        let ep = self.rma_handle("ucp_put_nbx", rkey)?;
        let params = request::params(Callback::Send, buf.memory_type().for_op());
        // SAFETY: the endpoint and rkey are live; buf is readable and borrowed as long as the
        // request; UCX checks the remote range against the key.
        unsafe {
            let ret = sys::ucp_put_nbx(ep, buf.as_ptr().cast(), buf.byte_len(), remote_addr, rkey.handle, &params);
            Submitted::from_status_ptr("ucp_put_nbx", ret, self.worker(), Completion::default())
                .map(|s| s.on_endpoint(self))
        }
    }

    /// Reads the peer's memory at `remote_addr` into `buf` (`ucp_get_nbx`).
    pub fn get<'a, B: RecvBuffer + ?Sized>(
        &self,
        buf: &'a mut B,
        remote_addr: u64,
        rkey: &RemoteKey,
    ) -> Result<Submitted<'a>> {
        let ep = self.rma_handle("ucp_get_nbx", rkey)?;
        let params = request::params(Callback::Send, buf.memory_type().for_op());
        let len = buf.byte_len();
        // SAFETY: as for put; buf is writable.
        unsafe {
            let ret = sys::ucp_get_nbx(ep, buf.as_mut_ptr().cast(), len, remote_addr, rkey.handle, &params);
            Submitted::from_status_ptr("ucp_get_nbx", ret, self.worker(), Completion { length: len, sender_tag: 0 })
                .map(|s| s.on_endpoint(self))
        }
    }

    fn rma_handle(&self, op: &'static str, rkey: &RemoteKey) -> Result<sys::ucp_ep_h> {
        self.worker().require(Features::RMA, op)?;
        if rkey.endpoint.id() != self.id() {
            return Err(Error::with_detail(
                op,
                Status::InvalidParam,
                "the remote key was unpacked on another endpoint",
            ));
        }
        self.handle(op)
    }
}

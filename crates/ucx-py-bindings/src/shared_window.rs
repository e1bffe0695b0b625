//! The memory half of `ucp.collective.SharedWindow`: this rank's window (memory UCX allocates
//! in shared memory), the other ranks' windows mapped through their remote keys, the copies
//! of parts into them, and read-only views of this rank's own. Python runs the protocol (the
//! entries, notes and halves of ucx-core's `wire::shared_window`, as ucx-async's
//! `SharedWindow` does), so Python and Rust ranks share a job.
use std::ffi::{c_int, c_void};
use std::sync::atomic::{fence, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ucx_core::wire::shared_window::Note;
use ucx_core::{HugeSharedMapping, MemoryType, SendBuffer, Status};

use crate::buffer::PyBuf;
use crate::context::Context;
use crate::errors;
use crate::rma::RemoteKey;

/// A rank's window as this process reaches it.
struct Peer {
    /// Where it starts in this process.
    base: usize,
    slot: usize,
    /// Keeps a peer's window mapped (`None` for this rank's own).
    _key: Option<Arc<ucx_core::RemoteKey>>,
    /// The window attached again on huge pages, where `base` points (as in Rust's window).
    huge: Option<HugeSharedMapping>,
}

impl Peer {
    /// The window of `len` bytes UCX maps at `base`, reached through a second attachment on
    /// huge pages where one can be made.
    fn new(base: *mut u8, len: usize, slot: usize, key: Option<Arc<ucx_core::RemoteKey>>) -> Peer {
        let huge = HugeSharedMapping::of(base, len);
        let base = huge.as_ref().map_or(base, HugeSharedMapping::ptr) as usize;
        Peer { base, slot, _key: key, huge }
    }
}

struct Inner {
    /// This rank's window: `2 × size × slot` bytes.
    memory: ucx_core::MemoryHandle<'static>,
    slot: usize,
    size: usize,
    /// By rank: its window, once mapped (this rank's own from the start).
    peers: Mutex<Vec<Option<Peer>>>,
}

fn lock(peers: &Mutex<Vec<Option<Peer>>>) -> MutexGuard<'_, Vec<Option<Peer>>> {
    peers.lock().unwrap_or_else(|e| e.into_inner())
}

/// This rank's window and the others' as mapped here (see the module doc).
#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct SharedWindowMemory {
    inner: Arc<Inner>,
    rank: usize,
}

#[pymethods]
impl SharedWindowMemory {
    /// Allocates this rank's window: room for a part of up to `slot` bytes from each of `size`
    /// ranks, twice (two halves, used by turns), zeroed now rather than in the first call.
    #[new]
    fn new(py: Python<'_>, context: &Context, rank: usize, size: usize, slot: usize) -> PyResult<SharedWindowMemory> {
        if rank >= size {
            return Err(PyValueError::new_err(format!("rank {rank} is not below the world size {size}")));
        }
        let bytes = slot.checked_mul(2 * size).filter(|&b| b <= isize::MAX as usize);
        let bytes = bytes.ok_or_else(|| PyValueError::new_err(format!("a slot of {slot} bytes for {size} ranks")))?;
        let memory =
            ucx_core::MemoryHandle::allocate(&context.inner, bytes.max(1)).map_err(|e| errors::from_core(py, &e))?;
        ucx_core::huge_pages::advise_allocated(&memory);
        // On huge pages before any peer maps it, so that theirs are too (which touches it).
        let own = Peer::new(memory.address() as *mut u8, memory.len(), slot, None);
        if own.huge.is_none() {
            // First touches now, not in the first call.
            // SAFETY: UCX allocated `memory.len()` bytes for this handle, and no peer can
            // write them before its key is packed and sent.
            unsafe { std::ptr::write_bytes(memory.address() as *mut u8, 0, memory.len()) };
        }
        let mut peers: Vec<Option<Peer>> = (0..size).map(|_| None).collect();
        peers[rank] = Some(own);
        Ok(SharedWindowMemory { inner: Arc::new(Inner { memory, slot, size, peers: Mutex::new(peers) }), rank })
    }

    /// The window's address in this process (what a peer's key maps).
    #[getter]
    fn address(&self) -> u64 {
        self.inner.memory.address()
    }

    /// The most bytes a sender's part may have in this window.
    #[getter]
    fn slot(&self) -> usize {
        self.inner.slot
    }

    /// The window's packed remote key.
    fn pack_rkey<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let packed = self.inner.memory.pack_rkey().map_err(|e| errors::from_core(py, &e))?;
        Ok(PyBytes::new(py, &packed))
    }

    /// Maps rank `rank`'s window (at `address` in its process, slots of `slot` bytes) through
    /// `rkey`, its key unpacked on the endpoint to it. False where the memory cannot be mapped
    /// (another host): its parts then go as messages.
    fn map(&self, py: Python<'_>, rank: usize, rkey: &RemoteKey, address: u64, slot: u64) -> PyResult<bool> {
        if rank >= self.inner.size || rank == self.rank {
            return Err(PyValueError::new_err(format!("rank {rank} is not another rank of {}", self.inner.size)));
        }
        let len = usize::try_from(slot).ok().and_then(|s| s.checked_mul(2 * self.inner.size));
        let (Some(len), Ok(slot)) = (len, usize::try_from(slot)) else {
            return Err(PyValueError::new_err(format!("rank {rank} announced a slot of {slot} bytes")));
        };
        match rkey.inner.local_ptr(address, len) {
            Ok(base) => {
                lock(&self.inner.peers)[rank] = Some(Peer::new(base, len, slot, Some(rkey.inner.clone())));
                Ok(true)
            }
            Err(e) if e.status() == Status::Unreachable => Ok(false),
            Err(e) if e.status() == Status::InvalidParam => Err(PyValueError::new_err(format!(
                "rank {rank} announced a window of {len} bytes that its key does not map ({e})"
            ))),
            Err(e) => Err(errors::from_core(py, &e)),
        }
    }

    /// How many ranks' windows this rank reaches (itself included).
    #[getter]
    fn mapped(&self) -> usize {
        lock(&self.inner.peers).iter().filter(|p| p.is_some()).count()
    }

    /// How many of those this rank reaches through a second attachment on huge pages.
    #[getter]
    fn on_huge_pages(&self) -> usize {
        lock(&self.inner.peers).iter().flatten().filter(|p| p.huge.is_some()).count()
    }

    /// Copies each of `parts` (host buffers, one per rank) that fits its receiver's slot into
    /// slot `rank` of half `half` of that receiver's window, peers from the next rank on and
    /// this rank's own last; returns, by rank, the part's note (`wire::shared_window`: its
    /// length, and whether it went into the window) and whether it did.
    fn write<'py>(
        &self,
        py: Python<'py>,
        half: usize,
        parts: Vec<Bound<'py, PyAny>>,
    ) -> PyResult<(Vec<Bound<'py, PyBytes>>, Vec<bool>)> {
        let (me, size) = (self.rank, self.inner.size);
        if parts.len() != size {
            return Err(PyValueError::new_err(format!("{} parts for {size} ranks", parts.len())));
        }
        if half > 1 {
            return Err(PyValueError::new_err(format!("half {half} of a window of two")));
        }
        let bufs = parts.iter().map(PyBuf::readable).collect::<PyResult<Vec<_>>>()?;
        if let Some(r) = bufs.iter().position(|b| b.memory_type() != MemoryType::Host) {
            return Err(PyTypeError::new_err(format!("the part for rank {r} is not host memory")));
        }
        let peers = lock(&self.inner.peers);
        let fits: Vec<bool> =
            (0..size).map(|r| peers[r].as_ref().is_some_and(|p| bufs[r].byte_len() <= p.slot)).collect();
        for r in (1..=size).map(|k| (me + k) % size) {
            if let (true, Some(p)) = (fits[r], &peers[r]) {
                // SAFETY: `p.base` maps rank r's window of 2 × size × p.slot bytes, kept
                // mapped by its key (or this rank's own memory, held by `inner`); slot `me` of
                // this half is this rank's alone to write in this call (the protocol's rule);
                // the part fits the slot; the export keeps the source alive and unmoved.
                unsafe {
                    let at = (p.base as *mut u8).add((half * size + me) * p.slot);
                    std::ptr::copy_nonoverlapping(bufs[r].as_ptr(), at, bufs[r].byte_len());
                }
            }
        }
        // The copies are visible before any note that tells of them.
        fence(Ordering::Release);
        let notes = (0..size)
            .map(|r| PyBytes::new(py, &Note { len: bufs[r].byte_len() as u64, in_window: fits[r] }.encode()))
            .collect();
        Ok((notes, fits))
    }

    /// A read-only view of `length` bytes at slot `source` of half `half` of this rank's
    /// window: what rank `source` wrote there. Its bytes stay until that half is written
    /// again, two calls later.
    fn view(&self, half: usize, source: usize, length: usize) -> PyResult<WindowView> {
        let size = self.inner.size;
        if half > 1 || source >= size || length > self.inner.slot {
            return Err(PyValueError::new_err(format!(
                "no {length} bytes at slot {source} of half {half} (slots of {} bytes, {size} ranks)",
                self.inner.slot
            )));
        }
        // What the notes told of is read after them.
        fence(Ordering::Acquire);
        Ok(WindowView { inner: self.inner.clone(), offset: (half * size + source) * self.inner.slot, length })
    }
}

/// Bytes of a window, exported read-only through the buffer protocol; it keeps the window's
/// memory alive.
#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct WindowView {
    inner: Arc<Inner>,
    offset: usize,
    length: usize,
}

#[pymethods]
impl WindowView {
    /// # Safety
    /// `view` must be a `Py_buffer` the caller lets this fill (the buffer protocol's contract).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let len = isize::try_from(this.length).map_err(|_| PyBufferError::new_err("WindowView: too large"))?;
        let ptr = (this.inner.memory.address() as usize + this.offset) as *mut c_void;
        // SAFETY: `view` is the caller's to fill; the bytes lie inside the window (checked when
        // made), whose memory this object keeps alive (`inner`), and the export holds a
        // reference to the object (view->obj). Read-only (readonly = 1): writes are refused.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr, len, 1, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.length
    }
}

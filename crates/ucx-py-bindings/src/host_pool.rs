//! Receive buffers from a pool of host memory that earlier receives have already written.
//!
//! The kernel backs a fresh large allocation page by page on its first write. On the reference
//! VM that costs ~1.7 µs a 4 KiB page when warm (22 ms for 50 MB, three times the copy a
//! shared-memory receive makes), and at times seven times more (probably pages the host had
//! reclaimed). Memory a finished receive has written is already backed. `HostPool.allocate(n)` hands
//! out a `HostBuffer`: `n` writable bytes through the buffer protocol, uninitialised like
//! `numpy.empty`. Its block goes back to the pool when Python frees the buffer, which happens
//! only after every memoryview and array made from it is gone (each holds the buffer's export).
//! The pool keeps up to `max_bytes` of free blocks for the next allocation of about their size.
use std::alloc::{alloc, dealloc, Layout};
use std::collections::BTreeMap;
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyBufferError, PyMemoryError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;

/// Pooled blocks are whole pages, page-aligned (as UCX and NumPy like large buffers).
const PAGE: usize = 4096;
/// Buffers under the pool's `min_size` are aligned as `malloc` aligns (so that they cost
/// what `malloc` costs, not a page each).
const SMALL_ALIGN: usize = 16;

/// One allocation: `capacity` bytes at `ptr` aligned to `align` (a dangling pointer when
/// `capacity` is 0).
struct Block {
    ptr: NonNull<u8>,
    capacity: usize,
    align: usize,
}

// SAFETY: a block is memory owned by whoever holds the `Block`; nothing ties it to a thread.
unsafe impl Send for Block {}
// SAFETY: shared references only read `ptr` and `capacity`; the memory itself is written
// through the buffer protocol, whose users own that synchronisation (as for a bytearray).
unsafe impl Sync for Block {}

impl Block {
    fn new(capacity: usize, align: usize) -> PyResult<Block> {
        if capacity == 0 {
            return Ok(Block { ptr: NonNull::dangling(), capacity, align });
        }
        let layout = Block::layout(capacity, align)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc(layout) };
        let ptr = NonNull::new(ptr)
            .ok_or_else(|| PyMemoryError::new_err(format!("HostPool: cannot allocate {capacity} bytes")))?;
        Ok(Block { ptr, capacity, align })
    }

    fn layout(capacity: usize, align: usize) -> PyResult<Layout> {
        Layout::from_size_align(capacity, align)
            .map_err(|_| PyMemoryError::new_err(format!("HostPool: {capacity} bytes is too large")))
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        if self.capacity == 0 {
            return;
        }
        if let Ok(layout) = Block::layout(self.capacity, self.align) {
            // SAFETY: allocated in `Block::new` with this same layout, and freed only here.
            unsafe { dealloc(self.ptr.as_ptr(), layout) };
        }
    }
}

/// The free blocks, by capacity.
struct Cache {
    free: BTreeMap<usize, Vec<Block>>,
    cached_bytes: usize,
    max_bytes: usize,
    reused: u64,
}

impl Cache {
    /// The smallest free block of at least `capacity` bytes and at most twice that (a larger
    /// one would keep more memory resident than the buffer needs).
    fn take(&mut self, capacity: usize) -> Option<Block> {
        let (&size, _) = self.free.range(capacity..=capacity.saturating_mul(2)).next()?;
        let blocks = self.free.get_mut(&size)?;
        let block = blocks.pop()?;
        if blocks.is_empty() {
            self.free.remove(&size);
        }
        self.cached_bytes -= block.capacity;
        self.reused += 1;
        Some(block)
    }

    /// Keeps `block` for reuse if it fits under `max_bytes`; frees it otherwise.
    fn give_back(&mut self, block: Block) {
        if self.cached_bytes + block.capacity <= self.max_bytes {
            self.cached_bytes += block.capacity;
            self.free.entry(block.capacity).or_default().push(block);
        }
    }
}

fn lock(cache: &Mutex<Cache>) -> MutexGuard<'_, Cache> {
    // A panic while holding the lock leaves the cache consistent (every update is one step).
    cache.lock().unwrap_or_else(|p| p.into_inner())
}

/// A pool of host memory for receive buffers: blocks of at least `min_size` bytes return to
/// it when their buffer is freed, up to `max_bytes` held free.
#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct HostPool {
    cache: Arc<Mutex<Cache>>,
    min_size: usize,
}

#[pymethods]
impl HostPool {
    #[new]
    #[pyo3(signature = (max_bytes, min_size = 65536))]
    fn new(max_bytes: i64, min_size: i64) -> PyResult<HostPool> {
        let max_bytes = non_negative("max_bytes", max_bytes)?;
        let min_size = non_negative("min_size", min_size)?;
        let cache = Cache { free: BTreeMap::new(), cached_bytes: 0, max_bytes, reused: 0 };
        Ok(HostPool { cache: Arc::new(Mutex::new(cache)), min_size })
    }

    /// `nbytes` uninitialised, writable bytes; from a free block when one fits.
    fn allocate(&self, nbytes: i64) -> PyResult<HostBuffer> {
        let len = non_negative("nbytes", nbytes)?;
        if len < self.min_size {
            return Ok(HostBuffer { block: Some(Block::new(len, SMALL_ALIGN)?), len, pool: None });
        }
        let capacity = len
            .checked_next_multiple_of(PAGE)
            .ok_or_else(|| PyMemoryError::new_err(format!("HostPool: {len} bytes is too large")))?;
        let reused = lock(&self.cache).take(capacity);
        let block = match reused {
            Some(block) => block,
            None => Block::new(capacity, PAGE)?,
        };
        Ok(HostBuffer { block: Some(block), len, pool: Some(self.cache.clone()) })
    }

    /// Bytes held in free blocks now.
    #[getter]
    fn cached_bytes(&self) -> usize {
        lock(&self.cache).cached_bytes
    }

    /// The most bytes the pool holds free.
    #[getter]
    fn max_bytes(&self) -> usize {
        lock(&self.cache).max_bytes
    }

    /// Buffers smaller than this are allocated on their own and never pooled.
    #[getter]
    fn min_size(&self) -> usize {
        self.min_size
    }

    /// How many allocations a free block served.
    #[getter]
    fn reused(&self) -> u64 {
        lock(&self.cache).reused
    }

    /// Frees every free block (buffers in use return to the pool as usual).
    fn clear(&self) {
        let mut cache = lock(&self.cache);
        cache.free.clear();
        cache.cached_bytes = 0;
    }

    fn __repr__(&self) -> String {
        let cache = lock(&self.cache);
        format!(
            "<HostPool: {} of {} bytes free, min_size {}, reused {}>",
            cache.cached_bytes, cache.max_bytes, self.min_size, cache.reused
        )
    }
}

fn non_negative(what: &str, value: i64) -> PyResult<usize> {
    usize::try_from(value).map_err(|_| PyValueError::new_err(format!("HostPool: {what} must be >= 0, got {value}")))
}

/// Host memory from a [`HostPool`], exported through the buffer protocol (writable, one
/// dimension of bytes).
#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct HostBuffer {
    /// `Some` until drop hands it back.
    block: Option<Block>,
    len: usize,
    /// Where the block goes when this is freed (`None`: freed with it).
    pool: Option<Arc<Mutex<Cache>>>,
}

#[pymethods]
impl HostBuffer {
    /// # Safety
    /// `view` must be a `Py_buffer` the caller lets this fill (the buffer protocol's contract).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: c_int) -> PyResult<()> {
        let this = slf.get();
        let ptr = this.block.as_ref().map_or(NonNull::dangling(), |b| b.ptr);
        let len = isize::try_from(this.len).map_err(|_| PyBufferError::new_err("HostBuffer: too large to export"))?;
        // SAFETY: `view` is the caller's to fill; the memory is `len` bytes this object owns
        // until it is freed, and the export holds a reference to the object (view->obj), so
        // the memory outlives every export.
        let rc = unsafe { ffi::PyBuffer_FillInfo(view, slf.as_ptr(), ptr.as_ptr().cast::<c_void>(), len, 0, flags) };
        if rc != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {}

    fn __len__(&self) -> usize {
        self.len
    }

    fn __repr__(&self) -> String {
        format!("<HostBuffer: {} bytes{}>", self.len, if self.pool.is_some() { ", pooled" } else { "" })
    }
}

impl Drop for HostBuffer {
    fn drop(&mut self) {
        if let (Some(block), Some(pool)) = (self.block.take(), self.pool.as_ref()) {
            lock(pool).give_back(block);
        }
    }
}

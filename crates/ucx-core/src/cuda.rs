//! CUDA device buffers (feature `cuda`): `cust` buffers as [`crate::SendBuffer`] /
//! [`crate::RecvBuffer`] with `UCS_MEMORY_TYPE_CUDA`.
//!
//! [`cust::memory::DeviceBuffer<T>`] (for `T: DeviceCopy + Pod`) can be passed to any
//! operation that takes a buffer: tag, stream and active-message sends and receives, RMA. The
//! operation tells UCX the memory is [`MemoryType::Cuda`], so UCX moves it with its CUDA
//! transports (`cuda_copy`, `cuda_ipc`, GPUDirect RDMA) instead of reading it from the CPU.
//!
//! # Using it
//! - UCX must be built with CUDA support (the `libucx-cu12` wheel is); a UCX without it fails
//!   such operations instead of moving the bytes.
//! - UCX calls the CUDA driver on the thread that submits and progresses the operation, so the
//!   buffer's CUDA context must be current there (`cust::quick_init` makes it current on the
//!   calling thread; other threads need `cust::context::CurrentContext::set_current`).
//! - A byte range of a buffer is a buffer too: [`crate::SendChunks`] lends [`DeviceBytes`] and
//!   [`crate::RecvChunks`] [`DeviceBytesMut`], each borrowing the whole `DeviceBuffer`.
//!
//! # Why not `DeviceSlice`
//! In cust 0.3, [`cust::memory::DeviceSlice<T>`] is not a borrowed view but a `Copy` struct
//! holding a raw device pointer and a length: `let s = *buffer;` or `buffer.index(..)` give an
//! owned `DeviceSlice` whose life is not tied to the allocation, and which may outlive it or
//! alias a `&mut` to it. Implementing the buffer traits for it would let safe code hand UCX
//! freed device memory, so this module does not. Borrowing a `DeviceBuffer` ties the memory to
//! the operation, as [`SendBuffer`]'s contract requires.
use std::marker::PhantomData;

use cust::memory::{DeviceBuffer, DeviceCopy};

use crate::buffer::{MemoryType, Pod, RecvBuffer, SendBuffer};
use crate::chunks::{range_end, RecvChunks, SendChunks};

// SAFETY: a DeviceBuffer owns a device allocation of `len()` elements of T (cust allocates it
// with cuMemAlloc, checking `len * size_of::<T>()` for overflow, and frees it only on drop), so
// its device pointer addresses `byte_len()` bytes of CUDA device memory, reported as
// MemoryType::Cuda, that stay allocated while the buffer is borrowed. UCX reads them with
// the CUDA driver, never as host memory. An empty buffer (or one of zero-sized T) has a null
// pointer and a byte length of 0, which UCX does not dereference. Contents of a buffer made with
// the unsafe `DeviceBuffer::uninitialized` are the caller's responsibility, as cust documents.
unsafe impl<T: DeviceCopy + Pod> SendBuffer for DeviceBuffer<T> {
    fn as_ptr(&self) -> *const u8 {
        self.as_device_ptr().as_ptr().cast()
    }
    fn byte_len(&self) -> usize {
        std::mem::size_of::<T>() * self.len()
    }
    fn memory_type(&self) -> MemoryType {
        MemoryType::Cuda
    }
}

// SAFETY: as for SendBuffer: the allocation is writable device memory owned by the buffer, and
// `&mut self` makes the operation its only user for the borrow. T: Pod makes every byte
// pattern UCX writes a valid T (DeviceCopy alone does not promise that).
unsafe impl<T: DeviceCopy + Pod> RecvBuffer for DeviceBuffer<T> {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.as_device_ptr().as_mut_ptr().cast()
    }
}

/// A byte range of a [`DeviceBuffer`], borrowed from it: what [`SendChunks::chunk`] lends. The
/// address is kept as an integer (a device address is no host pointer), so the chunk is `Send`
/// as the buffer's borrow is.
#[derive(Debug, Clone, Copy)]
pub struct DeviceBytes<'a> {
    addr: usize,
    len: usize,
    _buffer: PhantomData<&'a ()>,
}

/// A writable byte range of a [`DeviceBuffer`], borrowed exclusively with the other ranges cut
/// from the same call: what [`RecvChunks::cut_mut`] lends.
#[derive(Debug)]
pub struct DeviceBytesMut<'a> {
    addr: usize,
    len: usize,
    _buffer: PhantomData<&'a mut ()>,
}

fn device_addr<T: DeviceCopy>(buf: &DeviceBuffer<T>) -> usize {
    buf.as_device_ptr().as_raw() as usize
}

impl<T: DeviceCopy + Pod> SendChunks for DeviceBuffer<T> {
    type Chunk<'a> = DeviceBytes<'a>;

    fn chunk(&self, at: usize, len: usize) -> DeviceBytes<'_> {
        range_end(at, len, self.byte_len());
        DeviceBytes { addr: device_addr(self) + at, len, _buffer: PhantomData }
    }
}

impl<T: DeviceCopy + Pod> RecvChunks for DeviceBuffer<T> {
    type ChunkMut<'a> = DeviceBytesMut<'a>;

    fn cut_mut(&mut self, lens: &[usize]) -> Vec<DeviceBytesMut<'_>> {
        let (base, size) = (device_addr(self), self.byte_len());
        let mut at = 0;
        lens.iter()
            .map(|&len| {
                let end = range_end(at, len, size);
                let chunk = DeviceBytesMut { addr: base + at, len, _buffer: PhantomData };
                at = end;
                chunk
            })
            .collect()
    }
}

/// `SendBuffer` for the chunk types: device memory at `addr`, `len` bytes.
macro_rules! device_chunk_send_buffer {
    ($($t:ident),*) => { $(
        // SAFETY: `addr..addr + len` lies inside a DeviceBuffer's allocation (checked when the
        // chunk was cut), which the chunk's lifetime keeps borrowed, so allocated, and not
        // written through the buffer (nor, for the exclusive kind, through another chunk: the
        // ranges of one `cut_mut` call are disjoint).
        unsafe impl SendBuffer for $t<'_> {
            fn as_ptr(&self) -> *const u8 {
                self.addr as *const u8
            }
            fn byte_len(&self) -> usize {
                self.len
            }
            fn memory_type(&self) -> MemoryType {
                MemoryType::Cuda
            }
        }
    )* };
}
device_chunk_send_buffer!(DeviceBytes, DeviceBytesMut);

// SAFETY: writable device memory of a Pod element type (any byte pattern is valid), disjoint
// from every other chunk of the same call.
unsafe impl RecvBuffer for DeviceBytesMut<'_> {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.addr as *mut u8
    }
}

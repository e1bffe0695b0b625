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
//! - The whole buffer is the message: to send part of one, copy it into a buffer of its own.
//!
//! # Why not `DeviceSlice`
//! In cust 0.3, [`cust::memory::DeviceSlice<T>`] is not a borrowed view but a `Copy` struct
//! holding a raw device pointer and a length: `let s = *buffer;` or `buffer.index(..)` give an
//! owned `DeviceSlice` whose life is not tied to the allocation, and which may outlive it or
//! alias a `&mut` to it. Implementing the buffer traits for it would let safe code hand UCX
//! freed device memory, so this module does not. Borrowing a `DeviceBuffer` ties the memory to
//! the operation, as [`SendBuffer`]'s contract requires.
use cust::memory::{DeviceBuffer, DeviceCopy};

use crate::buffer::{MemoryType, Pod, RecvBuffer, SendBuffer};

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

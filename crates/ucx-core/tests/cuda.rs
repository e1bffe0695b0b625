//! CUDA device buffers over loopback (feature `cuda`): device -> device, host -> device and
//! device -> host tag messages between two workers in one process.
//!
//! Needs a CUDA device and a UCX with CUDA support. Where `cust::quick_init()` fails (driver
//! but no device, or a driver that will not initialise), each GPU test prints "skipped: no CUDA
//! device (...)" and passes; it never reports a transfer it did not make. cust links `libcuda`
//! directly, so linking this binary needs a `libcuda.so` (the driver's, or the toolkit's
//! `lib64/stubs`) and running it needs the driver's `libcuda.so.1`; without a driver it cannot
//! start at all. `scripts/ci/cuda-check.sh` type-checks and lints it with no CUDA.
#![cfg(feature = "cuda")]
mod common;

use common::*;
use cust::context::Context as CudaContext;
use cust::memory::{CopyDestination, DeviceBuffer, DevicePointer};
use ucx_core::{MemoryType, RecvBuffer, SendBuffer, FULL_MASK};

/// Sizes that go through UCX's eager and rendezvous protocols.
const SIZES: [usize; 4] = [1, 4096, 65536, 4 << 20];

/// A CUDA context current on this thread, or `None` after printing why the test is skipped.
fn cuda() -> Option<CudaContext> {
    match cust::quick_init() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            // Debug, not Display: cust's Display asks the driver (cuGetErrorString), which may
            // be the thing that is missing.
            eprintln!("skipped: no CUDA device ({e:?})");
            None
        }
    }
}

/// Copies a device buffer back to the host.
fn to_host(buf: &DeviceBuffer<u8>) -> Vec<u8> {
    let mut host = vec![0u8; buf.len()];
    buf.copy_to(&mut host[..]).expect("device -> host copy");
    host
}

#[test]
fn device_buffer_reports_cuda_bytes_without_a_device() {
    // SAFETY: the buffer is never dereferenced nor given to UCX or CUDA: only its length and
    // memory type are read, and cust's Drop frees nothing for a null pointer.
    let b = unsafe { DeviceBuffer::<u32>::from_raw_parts(DevicePointer::null(), 10) };
    assert_eq!(b.byte_len(), 40);
    assert_eq!(SendBuffer::memory_type(&b), MemoryType::Cuda);
    assert!(SendBuffer::as_ptr(&b).is_null());
}

#[test]
fn device_chunks_are_byte_ranges_of_the_buffer_without_a_device() {
    use ucx_core::{RecvChunks, SendChunks};
    // SAFETY: as above: only addresses, lengths and memory types are read.
    let mut b = unsafe { DeviceBuffer::<u32>::from_raw_parts(DevicePointer::null(), 10) };
    let c = b.chunk(8, 12);
    assert_eq!((c.as_ptr() as usize, c.byte_len(), c.memory_type()), (8, 12, MemoryType::Cuda));
    let parts = b.cut_mut(&[3, 0, 37]);
    let got: Vec<(usize, usize)> = parts.iter().map(|p| (p.as_ptr() as usize, p.byte_len())).collect();
    assert_eq!(got, [(0, 3), (3, 0), (3, 37)]);
    assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| b.chunk(30, 11))).is_err(), "past the end");
}

#[test]
fn device_to_device() {
    let Some(_ctx) = cuda() else { return };
    let ctx = context();
    let p = connected_pair(&ctx);
    for n in SIZES {
        // Zeros into a buffer full of 0xAA: the receive has to overwrite every byte.
        let zeros = DeviceBuffer::<u8>::zeroed(n).expect("device alloc");
        let mut dst = DeviceBuffer::from_slice(&vec![0xAAu8; n]).expect("device alloc");
        let r = p.server.tag_recv(&mut dst, 0x10, FULL_MASK).unwrap();
        let s = p.client_ep.tag_send(&zeros, 0x10).unwrap();
        wait_on(&[&p.server, &p.client], s);
        assert_eq!(wait_on(&[&p.server, &p.client], r).length, n);
        assert!(to_host(&dst).iter().all(|&b| b == 0), "{n} zero bytes, device -> device");

        // And a pattern, so a receive that only cleared the buffer would not pass.
        let data = pattern(n, 11);
        let src = DeviceBuffer::from_slice(&data).expect("device alloc");
        let r = p.server.tag_recv(&mut dst, 0x11, FULL_MASK).unwrap();
        let s = p.client_ep.tag_send(&src, 0x11).unwrap();
        wait_on(&[&p.server, &p.client], s);
        assert_eq!(wait_on(&[&p.server, &p.client], r).length, n);
        assert_eq!(to_host(&dst), data, "{n} pattern bytes, device -> device");
    }
}

#[test]
fn host_to_device() {
    let Some(_ctx) = cuda() else { return };
    let ctx = context();
    let p = connected_pair(&ctx);
    for n in SIZES {
        let data = pattern(n, 23);
        let mut dst = DeviceBuffer::<u8>::zeroed(n).expect("device alloc");
        let r = p.server.tag_recv(&mut dst, 0x20, FULL_MASK).unwrap();
        let s = p.client_ep.tag_send(&data[..], 0x20).unwrap();
        wait_on(&[&p.server, &p.client], s);
        assert_eq!(wait_on(&[&p.server, &p.client], r).length, n);
        assert_eq!(to_host(&dst), data, "{n} bytes, host -> device");
    }
}

#[test]
fn device_to_host() {
    let Some(_ctx) = cuda() else { return };
    let ctx = context();
    let p = connected_pair(&ctx);
    for n in SIZES {
        let data = pattern(n, 37);
        let src = DeviceBuffer::from_slice(&data).expect("device alloc");
        let mut host = vec![0u8; n];
        let r = p.server.tag_recv(&mut host[..], 0x30, FULL_MASK).unwrap();
        let s = p.client_ep.tag_send(&src, 0x30).unwrap();
        wait_on(&[&p.server, &p.client], s);
        assert_eq!(wait_on(&[&p.server, &p.client], r).length, n);
        assert_eq!(host, data, "{n} bytes, device -> host");
    }
}

#[test]
fn device_buffer_of_u32_receives_as_u32() {
    let Some(_ctx) = cuda() else { return };
    let ctx = context();
    let p = connected_pair(&ctx);
    let data: Vec<u32> = (0..1000u32).map(|i| i.wrapping_mul(2_654_435_761)).collect();
    let mut dst = DeviceBuffer::<u32>::zeroed(data.len()).expect("device alloc");
    let r = p.server.tag_recv(&mut dst, 0x40, FULL_MASK).unwrap();
    let s = p.client_ep.tag_send(&data, 0x40).unwrap();
    wait_on(&[&p.server, &p.client], s);
    assert_eq!(wait_on(&[&p.server, &p.client], r).length, 4000);
    let mut back = vec![0u32; data.len()];
    dst.copy_to(&mut back[..]).expect("device -> host copy");
    assert_eq!(back, data);
    // The receive side's pointer is the allocation's.
    assert_eq!(RecvBuffer::as_mut_ptr(&mut dst).cast_const(), SendBuffer::as_ptr(&dst));
}

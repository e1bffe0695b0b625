//! ucx-core over real UCX: two workers in one process, connected over 127.0.0.1.
mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use ucx_core::*;

#[test]
fn tag_send_recv_reports_length_and_sender_tag() {
    let ctx = context();
    let p = connected_pair(&ctx);
    // Plain sends and sends for fast completion (eager where UCX can): the same bytes arrive.
    for fast in [false, true] {
        for &n in &[0usize, 1, 8, 4096, 8192, 65536, 300_000, 1 << 20, 4 << 20] {
            let data = pattern(n, 3);
            let mut buf = vec![0u8; n + 16];
            let r = p.server.tag_recv(&mut buf[..], 0xab00, 0xff00).unwrap();
            let s = match fast {
                false => p.client_ep.tag_send(&data[..], 0xab42),
                true => p.client_ep.tag_send_fast(&data[..], 0xab42),
            };
            wait_on(&[&p.server, &p.client], s.unwrap());
            let c = wait_on(&[&p.server, &p.client], r);
            assert_eq!(c.length, n);
            assert_eq!(c.sender_tag, 0xab42);
            assert_eq!(&buf[..n], &data[..], "{n} bytes, fast: {fast}");
        }
    }
}

#[test]
fn tag_recv_into_smaller_buffer_is_truncation_error() {
    let ctx = context();
    let p = connected_pair(&ctx);
    for &n in &[100usize, 100_000] {
        let mut small = [0u8; 10];
        let r = p.server.tag_recv(&mut small[..], 5, FULL_MASK).unwrap();
        let data = vec![1u8; n];
        let s = p.client_ep.tag_send(&data[..], 5).unwrap();
        let err = try_wait_on(&[&p.server, &p.client], r).unwrap_err();
        assert_eq!(err.status(), Status::MessageTruncated, "{n}: {err}");
        let _ = try_wait_on(&[&p.server, &p.client], s);
    }
}

#[test]
fn typed_pod_buffers_travel_as_bytes() {
    let ctx = context();
    let p = connected_pair(&ctx);
    let data: Vec<f64> = (0..1000).map(|i| i as f64 * 0.5).collect();
    let mut out = vec![0f64; 1000];
    let r = p.server.tag_recv(&mut out, 9, FULL_MASK).unwrap();
    wait_on(&[&p.server, &p.client], p.client_ep.tag_send(&data, 9).unwrap());
    assert_eq!(wait_on(&[&p.server, &p.client], r).length, 8000);
    assert_eq!(out, data);
}

#[test]
fn probe_keeps_or_takes_the_message() {
    let ctx = context();
    let p = connected_pair(&ctx);
    assert!(p.server.tag_probe(77, FULL_MASK).is_none());
    let data = pattern(300, 1);
    wait_on(&[&p.server, &p.client], p.client_ep.tag_send(&data[..], 77).unwrap());
    progress_until(&[&p.server, &p.client], "the message to arrive", || p.server.tag_probe(77, FULL_MASK).is_some());
    let info = p.server.tag_probe(77, FULL_MASK).unwrap();
    assert_eq!(info, ProbeInfo { length: 300, sender_tag: 77 });
    // Still there after a non-removing probe:
    let msg = p.server.tag_probe_take(77, FULL_MASK).expect("message still queued");
    assert_eq!(msg.info().length, 300);
    assert!(p.server.tag_probe(77, FULL_MASK).is_none(), "taken out of the queue");
    let mut buf = vec![0u8; msg.info().length];
    wait_on(&[&p.server, &p.client], msg.recv_into(&mut buf[..]).unwrap());
    assert_eq!(buf, data);

    // A taken message that is dropped is discarded, not left to match a later receive.
    wait_on(&[&p.server, &p.client], p.client_ep.tag_send(&[1u8, 2, 3][..], 78).unwrap());
    progress_until(&[&p.server, &p.client], "the message", || p.server.tag_probe(78, FULL_MASK).is_some());
    drop(p.server.tag_probe_take(78, FULL_MASK).unwrap());
    assert!(p.server.tag_probe(78, FULL_MASK).is_none());
}

#[test]
fn stream_send_recv_waits_for_all_bytes() {
    let ctx = context();
    let p = connected_pair(&ctx);
    let data = pattern(100_000, 5);
    let mut buf = vec![0u8; 100_000];
    let r = p.server_ep.stream_recv(&mut buf[..]).unwrap();
    // Two sends, one receive: WAITALL gathers both.
    wait_on(&[&p.server, &p.client], p.client_ep.stream_send(&data[..50_000]).unwrap());
    wait_on(&[&p.server, &p.client], p.client_ep.stream_send(&data[50_000..]).unwrap());
    assert_eq!(wait_on(&[&p.server, &p.client], r).length, 100_000);
    assert_eq!(buf, data);
}

#[test]
fn active_messages_eager_and_rendezvous_with_reply_endpoint() {
    let ctx = context();
    let p = connected_pair(&ctx);
    let got: Arc<Mutex<Vec<AmMessage>>> = Arc::default();
    let g = got.clone();
    p.server.set_am_handler(3, move |m| g.lock().unwrap().push(m)).unwrap();

    // Headers on both sides of what a message keeps inline (24 bytes) and what it allocates.
    let sizes = [(0usize, AmProto::Auto), (64, AmProto::Eager), (5000, AmProto::Auto), (1 << 20, AmProto::Rendezvous)];
    for ((n, proto), header_len) in sizes.into_iter().flat_map(|s| [0usize, 4, 24, 25, 300].map(|h| (s, h))) {
        let data = pattern(n, 9);
        let header = pattern(header_len, 3);
        let opts = AmSendOptions { reply: true, proto };
        let s = p.client_ep.am_send(3, &header, &data[..], opts).unwrap();
        progress_until(&[&p.server, &p.client], "an active message", || !got.lock().unwrap().is_empty());
        let msg = got.lock().unwrap().pop().unwrap();
        assert_eq!(msg.header(), &header[..], "{header_len}-byte header");
        assert_eq!(msg.data_len(), n);
        assert_eq!(msg.reply_ep(), Some(p.server_ep.id()), "reply ep is the server's endpoint to the client");
        if proto == AmProto::Rendezvous {
            assert!(msg.is_rendezvous());
            assert!(msg.data().is_none());
        }
        let mut buf = vec![0u8; n];
        let c = wait_on(&[&p.server, &p.client], msg.recv_into(&mut buf[..]).unwrap());
        assert_eq!(c.length, n);
        assert_eq!(buf, data, "{n} bytes, {proto:?}");
        wait_on(&[&p.server, &p.client], s);
    }
}

#[test]
fn active_message_dropped_by_handler_or_later_is_released() {
    let ctx = context();
    let p = connected_pair(&ctx);
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    // This handler drops every message inside the callback.
    p.server
        .set_am_handler(4, move |m| {
            s2.fetch_add(m.data_len(), Ordering::SeqCst);
        })
        .unwrap();
    for n in [10usize, 100_000] {
        let data = vec![7u8; n];
        let s = p.client_ep.am_send(4, &[], &data[..], AmSendOptions::default()).unwrap();
        wait_on(&[&p.server, &p.client], s);
    }
    progress_until(&[&p.server, &p.client], "both messages", || seen.load(Ordering::SeqCst) == 100_010);

    // Kept past the callback, then dropped unreceived.
    let kept: Arc<Mutex<Vec<AmMessage>>> = Arc::default();
    let k = kept.clone();
    p.server.set_am_handler(5, move |m| k.lock().unwrap().push(m)).unwrap();
    for n in [10usize, 100_000] {
        let data = vec![7u8; n];
        let s = p.client_ep.am_send(5, &[], &data[..], AmSendOptions::default()).unwrap();
        progress_until(&[&p.server, &p.client], "a kept message", || kept.lock().unwrap().len() == 1);
        kept.lock().unwrap().clear();
        let _ = try_wait_on(&[&p.server, &p.client], s);
    }
}

#[test]
fn am_send_without_the_feature_is_an_error() {
    let ctx = Context::builder().features(Features::TAG).option("NET_DEVICES", "lo").build().unwrap();
    let w = Worker::new(&ctx).unwrap();
    let e = w.set_am_handler(1, |_| {}).unwrap_err();
    assert_eq!(e.status(), Status::Unsupported);
    assert!(e.to_string().contains("AM"), "{e}");
    assert!(w.wakeup_fd().is_err(), "no WAKEUP feature");
}

#[test]
fn rma_put_get_with_registered_memory_and_remote_keys() {
    let ctx = context();
    let p = connected_pair(&ctx);
    // Server exposes UCX-allocated memory; client puts then gets.
    let mem = MemoryHandle::allocate(&ctx, 1 << 16).unwrap();
    assert!(mem.len() >= 1 << 16);
    let packed = mem.pack_rkey().unwrap();
    let rkey = p.client_ep.unpack_rkey(&packed).unwrap();
    let data = pattern(1 << 16, 11);
    wait_on(&[&p.server, &p.client], p.client_ep.put(&data[..], mem.address(), &rkey).unwrap());
    wait_on(&[&p.server, &p.client], p.client_ep.flush().unwrap());
    // SAFETY: nothing writes the memory now.
    assert_eq!(unsafe { mem.as_slice() }[..data.len()], data[..]);
    let mut back = vec![0u8; 1000];
    wait_on(&[&p.server, &p.client], p.client_ep.get(&mut back[..], mem.address() + 500, &rkey).unwrap());
    assert_eq!(back, data[500..1500]);

    // Mapping a user buffer works the same way.
    let mut user = vec![0u8; 4096];
    {
        let mapped = MemoryHandle::map(&ctx, &mut user[..]).unwrap();
        let rk = p.client_ep.unpack_rkey(&mapped.pack_rkey().unwrap()).unwrap();
        wait_on(&[&p.server, &p.client], p.client_ep.put(&[9u8; 16][..], mapped.address() + 8, &rk).unwrap());
        wait_on(&[&p.server, &p.client], p.client_ep.flush().unwrap());
    }
    assert_eq!(&user[8..24], &[9u8; 16]);
    assert!(user[..8].iter().all(|&b| b == 0));

    // A key unpacked on another endpoint is refused.
    let e = p.server_ep.put(&[1u8][..], mem.address(), &rkey).unwrap_err();
    assert_eq!(e.status(), Status::InvalidParam);
}

#[test]
fn a_peers_shared_memory_is_reached_through_its_key_as_a_local_pointer() {
    let ctx = context();
    let (a, b) = (Worker::new(&ctx).unwrap(), Worker::new(&ctx).unwrap());
    let to_b = |error_handling| {
        let params = EndpointParams::default().error_handling(error_handling);
        Endpoint::connect_to_worker(&a, &b.address().unwrap(), params).unwrap()
    };
    // b's memory, allocated by UCX (in shared memory), reached by a.
    let mem = MemoryHandle::allocate(&ctx, 1 << 16).unwrap();
    let packed = mem.pack_rkey().unwrap();
    let ep = to_b(false);
    let rkey = ep.unpack_rkey(&packed).unwrap();
    let at = rkey.local_ptr(mem.address() + 100, 5000).unwrap();
    let data = pattern(5000, 3);
    // SAFETY: the key lives, and nothing else touches these 5000 bytes of the 64 KiB.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), at, data.len()) };
    // SAFETY: nothing writes the memory now.
    assert_eq!(unsafe { mem.as_slice() }[100..5100], data[..]);
    // The other way: the owner writes, the key's side reads.
    // SAFETY: the owner's memory, 64 KiB; nothing else touches these 4 bytes.
    unsafe { std::ptr::copy_nonoverlapping([7u8; 4].as_ptr(), (mem.address() + 60000) as *mut u8, 4) };
    let seen = rkey.local_ptr(mem.address() + 60000, 4).unwrap();
    // SAFETY: the key lives; nothing writes these bytes now.
    assert_eq!(unsafe { std::slice::from_raw_parts(seen, 4) }, [7u8; 4]);

    // Memory UCX did not allocate is not shared: a key to a mapped user buffer has no pointer.
    let mut user = vec![0u8; 4096];
    let mapped = MemoryHandle::map(&ctx, &mut user[..]).unwrap();
    let e = ep.unpack_rkey(&mapped.pack_rkey().unwrap()).unwrap().local_ptr(mapped.address(), 8).unwrap_err();
    assert_eq!(e.status(), Status::Unreachable, "{e}");
    drop(mapped);
    // With error handling, where UCX sends messages between local processes over TCP instead
    // of shared memory, the key still maps the memory: the pointer is the key's, not a lane's.
    let key = to_b(true).unpack_rkey(&packed).unwrap();
    // SAFETY: the key lives; only reads.
    assert_eq!(unsafe { std::slice::from_raw_parts(key.local_ptr(mem.address() + 100, 8).unwrap(), 8) }, &data[..8]);

    // UCX maps any address through a key, in bounds or not; the range is checked against this
    // process's shared mappings, so a peer that claims more than it shares is refused.
    assert!(rkey.local_ptr(mem.address(), mem.len()).is_ok());
    for (at, len) in [(0, mem.len() + (1 << 20)), (mem.len() as u64 + (1 << 30), 1), (0, usize::MAX)] {
        let e = rkey.local_ptr(mem.address() + at, len).unwrap_err();
        assert_eq!(e.status(), Status::InvalidParam, "{e}");
    }
    let e = rkey.local_ptr(mem.address() - (1 << 30), 1).unwrap_err();
    assert_eq!(e.status(), Status::InvalidParam, "{e}");
}

#[test]
fn worker_address_endpoints_round_trip_through_bytes() {
    let ctx = context();
    let a = Worker::new(&ctx).unwrap();
    let b = Worker::new(&ctx).unwrap();
    let addr = b.address().unwrap();
    let bytes = addr.as_bytes().to_vec();
    assert!(bytes.len() > 16);
    let addr = WorkerAddress::from_bytes(&bytes).unwrap();
    let ep = Endpoint::connect_to_worker(&a, &addr, EndpointParams::default()).unwrap();
    let mut buf = [0u8; 5];
    let r = b.tag_recv(&mut buf, 0xdead_beef, FULL_MASK).unwrap();
    wait_on(&[&a, &b], ep.tag_send(b"hello", 0xdead_beef).unwrap());
    wait_on(&[&a, &b], r);
    assert_eq!(&buf, b"hello");
}

#[test]
fn listener_binds_given_ipv4_and_ipv6_and_reports_port() {
    let ctx = context();
    let p = connected_pair_at(&ctx, "127.0.0.1:0".parse().unwrap());
    let a = p.listener.local_addr();
    assert_eq!(a.ip().to_string(), "127.0.0.1");
    assert_ne!(a.port(), 0);
    let (local, remote) = p.client_ep.socket_addrs().unwrap();
    assert_eq!(remote.unwrap().port(), a.port());
    assert_eq!(local.unwrap().ip().to_string(), "127.0.0.1");

    let w = Worker::new(&ctx).unwrap();
    // IPv6 needs a context whose tcp transport uses IPv6 (tests/address_family.rs).
    let ctx6 = Context::builder().option("NET_DEVICES", "lo").option("TCP_AF_PRIO", "inet6,inet").build().unwrap();
    let w6 = Worker::new(&ctx6).unwrap();
    let l6 = Listener::bind(&w6, "[::1]:0".parse().unwrap(), |_| {}).unwrap();
    assert_eq!(l6.local_addr().ip().to_string(), "::1");
    assert_ne!(l6.local_addr().port(), 0);
    // The same port twice is refused, naming the address.
    let e = Listener::bind(&w, a, |_| {}).unwrap_err();
    assert!(e.to_string().contains(&a.to_string()), "{e}");
}

#[test]
fn rejected_connection_fails_the_client() {
    let ctx = context();
    let server = Worker::new(&ctx).unwrap();
    let client = Worker::new(&ctx).unwrap();
    let seen = Arc::new(Mutex::new(None));
    let s = seen.clone();
    let l = Listener::bind(&server, "127.0.0.1:0".parse().unwrap(), move |req| {
        *s.lock().unwrap() = req.client_addr();
        req.reject().unwrap();
    })
    .unwrap();
    let failed = Arc::new(Mutex::new(None));
    let f = failed.clone();
    let ep = Endpoint::connect(
        &client,
        l.local_addr(),
        EndpointParams::default().on_error(move |st| *f.lock().unwrap() = Some(st)),
    )
    .unwrap();
    progress_until(&[&server, &client], "the client's error callback", || failed.lock().unwrap().is_some());
    assert_eq!(seen.lock().unwrap().unwrap().ip().to_string(), "127.0.0.1");
    assert!(ep.status().is_err());
}

#[test]
fn a_refused_endpoint_describes_itself_without_crashing() {
    // UCX 1.22's ucp_ep_print_info read past its table of transports on the lanes that stand
    // in for a failed endpoint's: after a connect to a closed port, about half the calls
    // crashed the process.
    let client = Worker::new(&context()).unwrap();
    for _ in 0..10 {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
        let ep = Endpoint::connect(&client, port, EndpointParams::default()).unwrap();
        progress_until(&[&client], "the refused connect's failure", || ep.status().is_err());
        assert!(ep.info().starts_with("(failed endpoint: "), "{}", ep.info());
        assert!(ep.transports().is_empty());
    }
}

#[test]
fn peer_failure_reaches_error_callback_and_status() {
    let ctx = context();
    let p = connected_pair(&ctx);
    let failed = Arc::new(Mutex::new(None));
    // Replace the client endpoint by one with a callback: connect again.
    let f = failed.clone();
    let pending: Arc<Mutex<Vec<ConnRequest>>> = Arc::default();
    let pp = pending.clone();
    let l = Listener::bind(&p.server, "127.0.0.1:0".parse().unwrap(), move |r| pp.lock().unwrap().push(r)).unwrap();
    let ep = Endpoint::connect(
        &p.client,
        l.local_addr(),
        EndpointParams::default().on_error(move |s| *f.lock().unwrap() = Some(s)),
    )
    .unwrap();
    progress_until(&[&p.server, &p.client], "request", || !pending.lock().unwrap().is_empty());
    let sep = Endpoint::accept(&p.server, pending.lock().unwrap().pop().unwrap(), EndpointParams::default()).unwrap();
    let mut b = [0u8; 1];
    let r = p.client.tag_recv(&mut b, 2, FULL_MASK).unwrap();
    wait_on(&[&p.server, &p.client], sep.tag_send(&[1u8], 2).unwrap());
    wait_on(&[&p.server, &p.client], r);
    // The server side goes away abruptly.
    wait_on(&[&p.server, &p.client], sep.close(CloseMode::Force).unwrap());
    progress_until(&[&p.server, &p.client], "the peer failure", || failed.lock().unwrap().is_some());
    let st = failed.lock().unwrap().unwrap();
    assert!(matches!(st, Status::ConnectionReset | Status::EndpointTimeout | Status::Other(_)), "{st:?}");
    assert_eq!(ep.status().unwrap_err().status(), st);
    // The other pair is unaffected.
    let mut b = [0u8; 3];
    let r = p.server.tag_recv(&mut b, 3, FULL_MASK).unwrap();
    wait_on(&[&p.server, &p.client], p.client_ep.tag_send(b"abc", 3).unwrap());
    wait_on(&[&p.server, &p.client], r);
    assert_eq!(&b, b"abc");
}

#[test]
fn closed_endpoint_refuses_operations_with_a_clear_error() {
    let ctx = context();
    let p = connected_pair(&ctx);
    wait_on(&[&p.server, &p.client], p.client_ep.close(CloseMode::Flush).unwrap());
    assert!(p.client_ep.is_closed());
    let e = p.client_ep.tag_send(&[1u8][..], 1).unwrap_err();
    assert_eq!(e.status(), Status::NotConnected);
    assert!(e.to_string().contains("closed"), "{e}");
    // Closing twice is harmless.
    assert!(matches!(p.client_ep.close(CloseMode::Force).unwrap(), Submitted::Done(_)));
}

#[test]
fn cancel_a_pending_receive() {
    let ctx = context();
    let w = Worker::new(&ctx).unwrap();
    let mut buf = [0u8; 64];
    let Submitted::InFlight(r) = w.tag_recv(&mut buf[..], 1234, FULL_MASK).unwrap() else {
        panic!("nothing was sent, so the receive cannot complete inline");
    };
    assert!(!r.is_complete());
    r.cancel();
    progress_until(&[&w], "the cancellation", || r.is_complete());
    assert!(r.wait().unwrap_err().is_canceled());
}

#[test]
fn dropping_pending_receives_never_writes_into_freed_memory() {
    let ctx = context();
    let p = connected_pair(&ctx);
    for round in 0..2000u64 {
        let mut buf = vec![0u8; 256];
        let r = p.server.tag_recv(&mut buf[..], 5000 + round, FULL_MASK).unwrap();
        drop(r); // cancels and waits until UCX has let go of buf
        drop(buf);
    }
    // A message sent now to one of those tags is not swallowed by a dropped receive.
    wait_on(&[&p.server, &p.client], p.client_ep.tag_send(&[42u8; 8][..], 5000).unwrap());
    let mut b = [0u8; 8];
    let r = p.server.tag_recv(&mut b, 5000, FULL_MASK).unwrap();
    wait_on(&[&p.server, &p.client], r);
    assert_eq!(b, [42u8; 8]);
}

#[test]
fn detached_requests_keep_their_buffer_until_ucx_is_done() {
    let ctx = context();
    let p = connected_pair(&ctx);
    struct Flag(Arc<AtomicUsize>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    let dropped = Arc::new(AtomicUsize::new(0));
    // A large send (rendezvous) detached before the peer receives: its buffer must survive.
    let data = pattern(4 << 20, 2);
    let data_ptr: &'static [u8] = Box::leak(data.clone().into_boxed_slice());
    let s = p.client_ep.tag_send(data_ptr, 99).unwrap();
    if let Submitted::InFlight(r) = s {
        // The leaked slice lives forever; the flag shows when UCX let go.
        r.detach(Box::new(Flag(dropped.clone())), false);
        assert_eq!(dropped.load(Ordering::SeqCst), 0, "not released before the transfer ends");
    } else {
        dropped.fetch_add(1, Ordering::SeqCst);
    }
    let mut buf = vec![0u8; 4 << 20];
    let r = p.server.tag_recv(&mut buf[..], 99, FULL_MASK).unwrap();
    wait_on(&[&p.server, &p.client], r);
    assert_eq!(buf, data);
    progress_until(&[&p.server, &p.client], "the detached send to be released", || dropped.load(Ordering::SeqCst) == 1);

    // A detached, canceled receive is released at once with its keepalive, which here owns
    // the receive buffer (the pattern an owning future uses).
    struct OwnedBuf(*mut [u8], #[allow(dead_code)] Flag);
    // SAFETY: the pointer is a leaked Box reclaimed exactly once, in Drop.
    unsafe impl Send for OwnedBuf {}
    impl Drop for OwnedBuf {
        fn drop(&mut self) {
            // SAFETY: from Box::into_raw below; UCX has let go of it when the keepalive drops.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }
    let raw: *mut [u8] = Box::into_raw(vec![0u8; 32].into_boxed_slice());
    // SAFETY: the allocation lives until OwnedBuf drops it, which happens after UCX is done.
    let r = p.server.tag_recv(unsafe { &mut *raw }, 31337, FULL_MASK).unwrap();
    let keep = OwnedBuf(raw, Flag(dropped.clone()));
    match r {
        Submitted::InFlight(r) => r.detach(Box::new(keep), true),
        Submitted::Done(_) => panic!("nothing was sent on tag 31337"),
    }
    progress_until(&[&p.server, &p.client], "the canceled receive", || dropped.load(Ordering::SeqCst) == 2);
}

#[test]
fn flush_fence_arm_signal_and_info() {
    let ctx = context();
    let p = connected_pair(&ctx);
    p.client.fence().unwrap();
    wait_on(&[&p.server, &p.client], p.client.flush().unwrap());
    wait_on(&[&p.server, &p.client], p.client_ep.flush().unwrap());

    // Arm: drain, then arm until Armed; a signal makes the fd readable.
    let fd = p.server.wakeup_fd().unwrap();
    let mut tries = 0;
    while p.server.arm().unwrap() == Armed::Busy {
        p.server.progress_batch();
        tries += 1;
        assert!(tries < 10_000);
    }
    assert!(!readable(fd, 0), "armed and idle: nothing to read");
    let w = p.server.clone();
    std::thread::spawn(move || w.signal().unwrap()).join().unwrap();
    assert!(readable(fd, 2000), "signal from another thread wakes the fd");

    // An incoming message also wakes an armed worker.
    p.server.progress_batch();
    while p.server.arm().unwrap() == Armed::Busy {
        p.server.progress_batch();
    }
    let mut b = [0u8; 2];
    let r = p.server.tag_recv(&mut b, 8, FULL_MASK).unwrap();
    let s = p.client_ep.tag_send(b"hi", 8).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !readable(fd, 0) {
        p.client.progress();
        assert!(std::time::Instant::now() < deadline, "no wake-up for an incoming message");
    }
    wait_on(&[&p.server, &p.client], s);
    wait_on(&[&p.server, &p.client], r);

    assert!(p.server.info().contains("UCP worker"), "{}", p.server.info());
    assert!(ctx.info().contains("UCP context"), "{}", ctx.info());
    assert!(!p.client_ep.info().is_empty());
}

fn readable(fd: i32, timeout_ms: i32) -> bool {
    let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut pfd, 1, timeout_ms) > 0 }
}

#[test]
fn thread_modes_are_granted_and_reported() {
    let ctx = context();
    assert_eq!(Worker::new(&ctx).unwrap().thread_mode().unwrap(), ThreadMode::Multi);
    // SAFETY: this worker is used by this thread only.
    let single = unsafe { Worker::with_thread_mode(&ctx, ThreadMode::Single) }.unwrap();
    assert_eq!(single.thread_mode().unwrap(), ThreadMode::Single);
    single.progress();
}

#[test]
fn dropping_an_uncancelable_send_closes_its_endpoint_instead_of_hanging() {
    // Force the rendezvous protocol (older UCX sends 1 MiB eagerly over TCP).
    let ctx = Context::builder().option("NET_DEVICES", "lo").option("RNDV_THRESH", "1024").build().unwrap();
    let p = connected_pair(&ctx);
    let data = vec![3u8; 1 << 20];
    let s = p.client_ep.tag_send(&data[..], 555).unwrap();
    assert!(matches!(s, Submitted::InFlight(_)), "a 1 MiB send waits for its receiver");
    // Nobody receives tag 555 and UCX cannot cancel a rendezvous send: dropping it must still
    // return, by force-closing the endpoint, after which the buffer is free to go.
    let t0 = std::time::Instant::now();
    drop(s);
    assert!(t0.elapsed() < std::time::Duration::from_secs(5), "{:?}", t0.elapsed());
    drop(data);
    assert!(p.client_ep.is_closed());
    assert_eq!(p.client_ep.tag_send(b"x", 1).unwrap_err().status(), Status::NotConnected);
    // Other connections of the same workers are unaffected.
    let q = connected_pair(&ctx);
    let mut b = [0u8; 2];
    let r = q.server.tag_recv(&mut b, 556, FULL_MASK).unwrap();
    wait_on(&[&q.server, &q.client], q.client_ep.tag_send(b"ok", 556).unwrap());
    wait_on(&[&q.server, &q.client], r);
    assert_eq!(&b, b"ok");
}

#[test]
fn owned_operations_never_block_on_drop_and_free_their_buffers() {
    let ctx = context();
    let p = connected_pair(&ctx);
    // Thousands of receives dropped mid-flight: canceled, their buffers freed by UCX's side.
    for i in 0..2000u64 {
        let r = p.server.tag_recv_owned(vec![0u8; 256], 70_000 + i, FULL_MASK).unwrap();
        drop(r);
    }
    // Rendezvous sends dropped before anyone receives: the drop returns at once, the endpoint
    // stays open, and the receiver still gets every byte later (the buffer lived on).
    let mut sends = Vec::new();
    for i in 0..20u64 {
        sends.push(p.client_ep.tag_send_owned(pattern(1 << 20, i as u8), 80_000 + i).unwrap());
    }
    let t0 = std::time::Instant::now();
    drop(sends);
    assert!(t0.elapsed() < std::time::Duration::from_millis(500), "{:?}", t0.elapsed());
    assert!(!p.client_ep.is_closed());
    for i in 0..20u64 {
        let mut buf = vec![0u8; 1 << 20];
        let r = p.server.tag_recv(&mut buf[..], 80_000 + i, FULL_MASK).unwrap();
        wait_on(&[&p.server, &p.client], r);
        assert_eq!(buf, pattern(1 << 20, i as u8));
    }
    // Completed owned operations give their buffer back.
    let r = p.server.tag_recv_owned([0u8; 4], 90_000, FULL_MASK).unwrap();
    let s = p.client_ep.tag_send_owned(*b"abcd", 90_000).unwrap();
    progress_until(&[&p.server, &p.client], "owned ops", || r.is_complete() && s.is_complete());
    assert_eq!(r.into_buffer(), Some(*b"abcd"));
    assert_eq!(s.into_buffer(), Some(*b"abcd"));
}

#[test]
fn shared_memory_is_attached_again_at_a_huge_page_boundary_on_huge_pages() {
    let ctx = context();
    let (a, b) = (Worker::new(&ctx).unwrap(), Worker::new(&ctx).unwrap());
    let ep = Endpoint::connect_to_worker(&a, &b.address().unwrap(), EndpointParams::default()).unwrap();
    let mem = MemoryHandle::allocate(&ctx, 8 << 20).unwrap();
    let rkey = ep.unpack_rkey(&mem.pack_rkey().unwrap()).unwrap();
    let ucx = rkey.local_ptr(mem.address(), mem.len()).unwrap();
    let sysv = std::fs::read_to_string("/proc/self/maps").unwrap().lines().any(|l| {
        let lo = l.split('-').next().and_then(|lo| usize::from_str_radix(lo, 16).ok());
        lo == Some(ucx as usize) && l.contains("/SYSV")
    });
    if !sysv {
        eprintln!("UCX allocated this memory elsewhere than in System V shared memory: nothing to attach");
        return;
    }
    // Through the key's mapping and the owner's alike.
    for at in [ucx, mem.address() as *mut u8] {
        let huge = HugeSharedMapping::of(at.wrapping_add(100), 5000).expect("a second attachment");
        assert_ne!(huge.ptr(), at.wrapping_add(100));
        assert_eq!((huge.ptr() as usize - 100) % (2 << 20), 0, "at a 2 MiB boundary");
        let data = pattern(5000, 9);
        // SAFETY: the attachment and the key live, and nothing else touches these bytes.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), huge.ptr(), data.len()) };
        // SAFETY: nothing writes the memory now.
        assert_eq!(unsafe { std::slice::from_raw_parts(ucx.wrapping_add(100), 5000) }, &data[..], "the same memory");
        // SAFETY: as above; the owner writes at the end, the attachment reads.
        unsafe { std::ptr::write_bytes(ucx.wrapping_add((8 << 20) - 4), 5, 4) };
        // SAFETY: the attachment lives and covers the whole segment.
        let end = unsafe { std::slice::from_raw_parts(huge.ptr().wrapping_add((8 << 20) - 104), 4) };
        assert_eq!(end, [5u8; 4]);
        // Huge pages where the kernel collapses shared memory (6.1 on, unless told `deny`).
        let release: Vec<u32> = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .split(['.', '-'])
            .take(2)
            .map(|n| n.parse().unwrap_or(0))
            .collect();
        let setting = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/shmem_enabled").unwrap_or_default();
        if release >= vec![6, 1] && !setting.is_empty() && !setting.contains("[deny]") {
            assert_eq!(huge.huge_bytes(), Some(8 << 20), "all of it mapped, on huge pages");
        }
        let base = huge.ptr() as usize - 100;
        drop(huge);
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        assert!(!maps.contains(&format!("{base:x}-")), "detached on drop");
    }
    // Nothing to attach: ordinary memory, a range past the segment, a segment under 2 MiB.
    let heap = vec![0u8; 4 << 20];
    assert!(HugeSharedMapping::of(heap.as_ptr(), heap.len()).is_none());
    assert!(HugeSharedMapping::of(ucx, mem.len() + 1).is_none());
    let small = MemoryHandle::allocate(&ctx, 1 << 20).unwrap();
    assert!(HugeSharedMapping::of(small.address() as *const u8, 10).is_none());
}

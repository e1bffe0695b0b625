//! ucx-core between two processes over 127.0.0.1: this test binary re-runs itself as the
//! peer (the `peer_process` test does nothing unless `UCXRS_TEST_PEER` names a role).
mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use ucx_core::*;

const ROLE: &str = "UCXRS_TEST_PEER";

/// Kills the peer if the test ends early.
struct Peer(Child);
impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts this binary as the peer with `role`; returns it and the port it printed.
fn spawn_peer(role: &str) -> (Peer, u16) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "peer_process", "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let mut peer = Peer(child);
    let mut lines = BufReader::new(out).lines();
    let port = loop {
        match lines.next() {
            Some(Ok(l)) => {
                // The harness prints "test peer_process ... " before the peer's own output.
                if let Some((_, p)) = l.split_once("PORT ") {
                    break p.trim().parse().unwrap();
                }
            }
            _ => {
                let status = peer.0.wait();
                panic!("peer exited before printing its port: {status:?}");
            }
        }
    };
    // Keep draining its stdout so it never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (peer, port)
}

fn wait_exit(peer: &mut Peer, worker: &Worker) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        worker.progress();
        if let Some(s) = peer.0.try_wait().unwrap() {
            return s;
        }
        assert!(Instant::now() < deadline, "peer did not exit");
    }
}

#[test]
fn peer_process() {
    match std::env::var(ROLE).as_deref() {
        Ok("server") => serve(),
        Ok("hold") => hold(),
        _ => {}
    }
}

/// Accepts one connection on 127.0.0.1 and prints the port.
fn accept_one(worker: &Worker) -> (Listener, Endpoint) {
    let pending: Arc<Mutex<Vec<ConnRequest>>> = Arc::default();
    let p = pending.clone();
    let listener = Listener::bind(worker, "127.0.0.1:0".parse().unwrap(), move |r| p.lock().unwrap().push(r)).unwrap();
    println!("PORT {}", listener.local_addr().port());
    progress_until(&[worker], "a client", || !pending.lock().unwrap().is_empty());
    let req = pending.lock().unwrap().pop().unwrap();
    (listener, Endpoint::accept(worker, req, EndpointParams::default()).unwrap())
}

fn recv_exact(w: &Worker, tag: u64, len: usize) -> Vec<u8> {
    let mut buf = vec![0u8; len];
    let c = wait_on(&[w], w.tag_recv(&mut buf[..], tag, FULL_MASK).unwrap());
    assert_eq!(c.length, len);
    buf
}

fn recv_any(w: &Worker, tag: u64) -> Vec<u8> {
    progress_until(&[w], "a probed message", || w.tag_probe(tag, FULL_MASK).is_some());
    let msg = w.tag_probe_take(tag, FULL_MASK).unwrap();
    let mut buf = vec![0u8; msg.info().length];
    wait_on(&[w], msg.recv_into(&mut buf[..]).unwrap());
    buf
}

fn send(w: &Worker, ep: &Endpoint, data: &[u8], tag: u64) {
    wait_on(&[w], ep.tag_send(data, tag).unwrap());
}

/// The server side of `every_operation_between_two_processes`.
fn serve() {
    let ctx = context();
    let w = Worker::new(&ctx).unwrap();
    let (_listener, ep) = accept_one(&w);
    // Tag echo.
    for &n in SIZES {
        let data = recv_exact(&w, 1, n);
        send(&w, &ep, &data, 2);
    }
    // Stream echo.
    let mut buf = vec![0u8; 100_000];
    wait_on(&[&w], ep.stream_recv(&mut buf[..]).unwrap());
    wait_on(&[&w], ep.stream_send(&buf[..]).unwrap());
    // AM echo, header included.
    let got: Arc<Mutex<Vec<AmMessage>>> = Arc::default();
    let g = got.clone();
    w.set_am_handler(7, move |m| g.lock().unwrap().push(m)).unwrap();
    for _ in SIZES {
        progress_until(&[&w], "an AM", || !got.lock().unwrap().is_empty());
        let m = got.lock().unwrap().remove(0);
        let header = m.header().to_vec();
        let mut data = vec![0u8; m.data_len()];
        wait_on(&[&w], m.recv_into(&mut data[..]).unwrap());
        wait_on(&[&w], ep.am_send(7, &header, &data[..], AmSendOptions::default()).unwrap());
    }
    // RMA: expose memory, let the client put into it, check.
    let mem = MemoryHandle::allocate(&ctx, 1 << 16).unwrap();
    send(&w, &ep, &mem.pack_rkey().unwrap(), 10);
    send(&w, &ep, &mem.address().to_le_bytes(), 11);
    recv_exact(&w, 12, 1);
    // SAFETY: the client has finished its put (it flushed before telling us).
    let ok = unsafe { mem.as_slice() }[..1 << 16] == pattern(1 << 16, 42)[..];
    send(&w, &ep, &[ok as u8], 13);
    // Worker address: the client connects to it and says hello.
    send(&w, &ep, w.address().unwrap().as_bytes(), 20);
    let hello = recv_any(&w, 21);
    send(&w, &ep, &hello, 22);
    // Wait for the client to say goodbye, then close.
    recv_exact(&w, 99, 1);
    wait_on(&[&w], ep.close(CloseMode::Flush).unwrap());
}

/// Accepts a connection and then does nothing until killed.
fn hold() {
    let ctx = context();
    let w = Worker::new(&ctx).unwrap();
    let (_l, _ep) = accept_one(&w);
    println!("READY");
    loop {
        w.progress();
        std::thread::sleep(Duration::from_millis(1));
    }
}

const SIZES: &[usize] = &[8, 65_536, 4 << 20];

#[test]
fn every_operation_between_two_processes() {
    let (mut peer, port) = spawn_peer("server");
    let ctx = context();
    let w = Worker::new(&ctx).unwrap();
    let ep = Endpoint::connect(&w, ([127, 0, 0, 1], port).into(), EndpointParams::default()).unwrap();

    for &n in SIZES {
        let data = pattern(n, n as u8);
        send(&w, &ep, &data, 1);
        assert_eq!(recv_exact(&w, 2, n), data, "tag echo of {n} bytes");
    }

    let data = pattern(100_000, 3);
    wait_on(&[&w], ep.stream_send(&data[..]).unwrap());
    let mut back = vec![0u8; 100_000];
    wait_on(&[&w], ep.stream_recv(&mut back[..]).unwrap());
    assert_eq!(back, data, "stream echo");

    let got: Arc<Mutex<Vec<AmMessage>>> = Arc::default();
    let g = got.clone();
    w.set_am_handler(7, move |m| g.lock().unwrap().push(m)).unwrap();
    for &n in SIZES {
        let data = pattern(n, 9);
        let header = (n as u64).to_le_bytes();
        wait_on(&[&w], ep.am_send(7, &header, &data[..], AmSendOptions { reply: true, ..Default::default() }).unwrap());
        progress_until(&[&w], "the AM echo", || !got.lock().unwrap().is_empty());
        let m = got.lock().unwrap().remove(0);
        assert_eq!(m.header(), &header);
        let mut buf = vec![0u8; m.data_len()];
        wait_on(&[&w], m.recv_into(&mut buf[..]).unwrap());
        assert_eq!(buf, data, "AM echo of {n} bytes");
    }

    let rkey = ep.unpack_rkey(&recv_any(&w, 10)).unwrap();
    let addr = u64::from_le_bytes(recv_exact(&w, 11, 8).try_into().unwrap());
    wait_on(&[&w], ep.put(&pattern(1 << 16, 42)[..], addr, &rkey).unwrap());
    let mut readback = vec![0u8; 100];
    wait_on(&[&w], ep.get(&mut readback[..], addr + 1000, &rkey).unwrap());
    assert_eq!(readback, pattern(1 << 16, 42)[1000..1100]);
    wait_on(&[&w], ep.flush().unwrap());
    send(&w, &ep, &[1], 12);
    assert_eq!(recv_exact(&w, 13, 1), [1], "the server saw our put");

    let address = WorkerAddress::from_bytes(&recv_any(&w, 20)).unwrap();
    let by_addr = Endpoint::connect_to_worker(&w, &address, EndpointParams::default()).unwrap();
    send(&w, &by_addr, b"via worker address", 21);
    assert_eq!(recv_any(&w, 22), b"via worker address");

    send(&w, &ep, &[0], 99);
    let status = wait_exit(&mut peer, &w);
    assert!(status.success(), "server process failed: {status:?}");
}

#[test]
fn a_killed_peer_fails_the_endpoint_and_spares_others() {
    let (mut peer, port) = spawn_peer("hold");
    let (mut other, other_port) = spawn_peer("hold");
    let ctx = Context::builder().option("NET_DEVICES", "lo").option("KEEPALIVE_INTERVAL", "1s").build().unwrap();
    let w = Worker::new(&ctx).unwrap();
    let failed = Arc::new(Mutex::new(None));
    let f = failed.clone();
    let ep = Endpoint::connect(
        &w,
        ([127, 0, 0, 1], port).into(),
        EndpointParams::default().on_error(move |s| *f.lock().unwrap() = Some(s)),
    )
    .unwrap();
    let healthy = Endpoint::connect(&w, ([127, 0, 0, 1], other_port).into(), EndpointParams::default()).unwrap();
    // Make sure both connections are wired up before the kill.
    wait_on(&[&w], ep.flush().unwrap());
    wait_on(&[&w], healthy.flush().unwrap());
    peer.0.kill().unwrap();
    peer.0.wait().unwrap();
    let t0 = Instant::now();
    progress_until(&[&w], "the error callback for the killed peer", || failed.lock().unwrap().is_some());
    let status = failed.lock().unwrap().unwrap();
    eprintln!("killed peer reported as {status:?} after {:?}", t0.elapsed());
    assert!(ep.status().is_err());
    assert!(healthy.status().is_ok(), "the other endpoint is unaffected");
    wait_on(&[&w], healthy.flush().unwrap());
    drop(ep);
    other.0.kill().unwrap();
}

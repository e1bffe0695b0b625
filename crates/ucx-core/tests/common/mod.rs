//! Shared set-up for ucx-core's loopback tests: contexts restricted to the loopback device,
//! connected worker pairs, and progress loops that fail instead of hanging.
#![allow(dead_code)]
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ucx_core::{ConnRequest, Context, Endpoint, EndpointParams, Listener, Worker};

/// A context whose network transports use only `lo`, so no test traffic leaves loopback.
pub fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").build().expect("context")
}

/// Progresses every worker until `done()` holds; panics after 20 s naming `what`.
pub fn progress_until(workers: &[&Worker], what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        for w in workers {
            w.progress();
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
    }
}

/// A server worker with a listener on 127.0.0.1 and a client worker connected to it; the
/// server side is accepted. Returns (server worker, client worker, server ep, client ep,
/// listener).
pub struct Pair {
    pub server: Worker,
    pub client: Worker,
    pub server_ep: Endpoint,
    pub client_ep: Endpoint,
    pub listener: Listener,
}

pub fn connected_pair(ctx: &Context) -> Pair {
    connected_pair_at(ctx, "127.0.0.1:0".parse().unwrap())
}

pub fn connected_pair_at(ctx: &Context, bind: SocketAddr) -> Pair {
    let server = Worker::new(ctx).unwrap();
    let client = Worker::new(ctx).unwrap();
    let pending: Arc<Mutex<Vec<ConnRequest>>> = Arc::default();
    let p = pending.clone();
    let listener = Listener::bind(&server, bind, move |req| p.lock().unwrap().push(req)).unwrap();
    let mut target = listener.local_addr();
    if target.ip().is_unspecified() {
        target.set_ip("127.0.0.1".parse().unwrap());
    }
    let client_ep = Endpoint::connect(&client, target, EndpointParams::default()).unwrap();
    progress_until(&[&server, &client], "a connection request", || !pending.lock().unwrap().is_empty());
    let req = pending.lock().unwrap().pop().unwrap();
    let server_ep = Endpoint::accept(&server, req, EndpointParams::default()).unwrap();
    // One round trip makes sure both sides are wired up.
    let mut b = [0u8; 1];
    let r = server.tag_recv(&mut b, 1, u64::MAX).unwrap();
    let s = client_ep.tag_send(&[7u8], 1).unwrap();
    wait_on(&[&server, &client], s);
    wait_on(&[&server, &client], r);
    assert_eq!(b, [7]);
    Pair { server, client, server_ep, client_ep, listener }
}

/// Waits for a submitted operation while progressing all the workers (one worker's progress
/// alone cannot finish a transfer whose peer lives on another worker in this thread).
pub fn wait_on(workers: &[&Worker], s: ucx_core::Submitted<'_>) -> ucx_core::Completion {
    try_wait_on(workers, s).expect("operation failed")
}

pub fn try_wait_on(workers: &[&Worker], s: ucx_core::Submitted<'_>) -> ucx_core::Result<ucx_core::Completion> {
    match s {
        ucx_core::Submitted::Done(c) => Ok(c),
        ucx_core::Submitted::InFlight(r) => {
            progress_until(workers, "an operation", || r.is_complete());
            r.wait()
        }
    }
}

/// A recognisable pattern of `n` bytes.
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

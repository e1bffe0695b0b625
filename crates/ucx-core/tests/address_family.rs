//! IPv4 and IPv6 through listeners: a context's tcp transport uses one address family per
//! device (`UCX_TCP_AF_PRIO`), and UCX 1.22 corrupts the heap when a connection of the other
//! family reaches it (an IPv6 peer address copied into room for an IPv4 one). Such connections
//! are refused with `Unsupported`, on both sides, before UCX sees them; a context made with
//! `TCP_AF_PRIO=inet6,inet` connects over IPv6. Every test here ran the process into glibc's
//! abort before the check existed.
mod common;

use std::net::{SocketAddr, UdpSocket};
use std::sync::{Arc, Mutex};

use common::*;
use ucx_core::*;

/// Returns from the test, saying so, where this machine has no IPv6 loopback.
macro_rules! skip_without_ipv6 {
    () => {
        if UdpSocket::bind("[::1]:0").is_err() {
            eprintln!("skipped: no IPv6 loopback");
            return;
        }
    };
}

/// A context on `lo` whose tcp transport uses IPv6 there.
fn context_v6() -> Context {
    Context::builder().option("NET_DEVICES", "lo").option("TCP_AF_PRIO", "inet6,inet").build().expect("context")
}

fn assert_refused(e: &Error, what: &str) {
    assert_eq!(e.status(), Status::Unsupported, "{what}: {e}");
    let text = e.to_string();
    assert!(text.contains("TCP_AF_PRIO=inet6,inet") || text.contains("TCP_AF_PRIO=inet,inet6"), "{what}: {text}");
    assert!(text.contains(" on lo "), "{what} names the device: {text}");
}

#[test]
fn the_context_records_the_settings_it_was_made_with() {
    let ctx = context_v6();
    assert_eq!(ctx.setting("TCP_AF_PRIO"), Some("inet6,inet"));
    assert_eq!(ctx.setting("NET_DEVICES"), Some("lo"));
    assert_eq!(ctx.setting("NO_SUCH_SETTING"), None);
}

#[test]
fn ipv6_connects_and_carries_data_on_an_ipv6_context() {
    skip_without_ipv6!();
    let p = connected_pair_at(&context_v6(), "[::1]:0".parse().unwrap());
    assert_eq!(p.listener.local_addr().ip().to_string(), "::1");
    let (local, remote) = p.client_ep.socket_addrs().unwrap();
    assert_eq!(remote.unwrap(), p.listener.local_addr());
    assert_eq!(local.unwrap().ip().to_string(), "::1");
    let mut buf = vec![0u8; 100_000];
    let data = pattern(buf.len(), 3);
    let r = p.server.tag_recv(&mut buf, 9, u64::MAX).unwrap();
    let s = p.client_ep.tag_send(&data, 9).unwrap();
    wait_on(&[&p.server, &p.client], s);
    wait_on(&[&p.server, &p.client], r);
    assert_eq!(buf, data);
}

/// On `ctx`, whose tcp transport uses the other family than `addr`'s: a listener at `addr` is
/// refused, and so is a connect to one there (made on `other`, whose family matches).
fn refused_both_ways(ctx: &Context, addr: &str, other: &Context) {
    let w = Worker::new(ctx).unwrap();
    let e = Listener::bind(&w, addr.parse().unwrap(), |_| {}).expect_err("the listener is refused");
    assert_refused(&e, "bind");
    let wo = Worker::new(other).unwrap();
    let l = Listener::bind(&wo, addr.parse().unwrap(), |_| {}).unwrap();
    let e = Endpoint::connect(&w, l.local_addr(), EndpointParams::default()).expect_err("the connect is refused");
    assert_refused(&e, "connect");
    assert!(e.to_string().contains(&l.local_addr().to_string()), "names the address: {e}");
}

#[test]
fn ipv6_on_an_ipv4_context_is_refused_not_aborted() {
    skip_without_ipv6!();
    refused_both_ways(&context(), "[::1]:0", &context_v6());
}

#[test]
fn ipv4_on_an_ipv6_context_is_refused() {
    skip_without_ipv6!();
    refused_both_ways(&context_v6(), "127.0.0.1:0", &context());
}

#[test]
fn a_wildcard_listener_on_an_ipv4_context_refuses_an_ipv6_client_and_lives() {
    skip_without_ipv6!();
    // The server listens on every address (`[::]` also takes IPv6 clients) but its tcp
    // transport uses IPv4: accepting an IPv6 client is what corrupted the server's heap.
    let server = Worker::new(&context()).unwrap();
    let pending: Arc<Mutex<Vec<ConnRequest>>> = Arc::default();
    let p = pending.clone();
    let l = Listener::bind(&server, "[::]:0".parse().unwrap(), move |req| p.lock().unwrap().push(req)).unwrap();
    let client = Worker::new(&context_v6()).unwrap();
    let to: SocketAddr = format!("[::1]:{}", l.local_addr().port()).parse().unwrap();
    let client_ep = Endpoint::connect(&client, to, EndpointParams::default()).unwrap();
    progress_until(&[&server, &client], "a connection request", || !pending.lock().unwrap().is_empty());
    let req = pending.lock().unwrap().pop().unwrap();
    let e = Endpoint::accept(&server, req, EndpointParams::default()).expect_err("refused");
    assert_refused(&e, "accept");
    assert!(e.to_string().contains("the client's address [::1]:"), "{e}");
    // The request was rejected: the client hears of it, and both processes live on.
    progress_until(&[&server, &client], "the client's failure", || client_ep.status().is_err());
}

//! A failed connect says why, by cause, naming the address: no listener answered
//! (`Error::Refused`: a closed port, an IPv6 connect to a listener on IPv4 only), as against a
//! listener that answered and then failed (not a refusal).
use std::net::{SocketAddr, TcpListener, UdpSocket};
use std::time::{Duration, Instant};

use ucx_async::core::wire::{PeerInfo, DETECT_LEN};
use ucx_async::core::{CloseMode, Context, EndpointParams, Status};
use ucx_async::{Endpoint, Error, Listener, ProgressMode, Worker};

fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").build().expect("context")
}

/// A TCP port on 127.0.0.1 that nothing listens on (bound, then let go).
fn closed_port() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap()
}

fn assert_refused(e: &Error, addr: SocketAddr) {
    match e {
        Error::Refused { addr: a, status } => {
            assert_eq!(*a, addr, "{e}");
            assert!(matches!(status, Status::ConnectionReset | Status::NotConnected | Status::Rejected), "{e}");
        }
        other => panic!("expected Error::Refused, got {other:?}"),
    }
    assert!(e.to_string().contains(&addr.to_string()), "the message names the address: {e}");
    assert!(!e.is_disconnect(), "there was never an endpoint to lose: {e}");
}

#[tokio::test]
async fn a_connect_to_a_closed_port_is_refused_naming_the_address() {
    let w = Worker::new(&context(), ProgressMode::Event).unwrap();
    for _ in 0..3 {
        let addr = closed_port();
        let t0 = Instant::now();
        let e = Endpoint::connect(&w, addr).await.expect_err("nothing listens there");
        assert_refused(&e, addr);
        assert!(t0.elapsed() < Duration::from_secs(2), "refused at once, not after the handshake timeout");
    }
}

#[tokio::test]
async fn an_ipv6_connect_to_a_listener_on_ipv4_only_is_refused() {
    if UdpSocket::bind("[::1]:0").is_err() {
        eprintln!("skipped: no IPv6 loopback");
        return;
    }
    let ws = Worker::new(&context(), ProgressMode::Event).unwrap();
    let listener = Listener::bind(&ws, "127.0.0.1:0".parse().unwrap()).unwrap();
    let ctx6 = Context::builder().option("NET_DEVICES", "lo").option("TCP_AF_PRIO", "inet6,inet").build().unwrap();
    let wc = Worker::new(&ctx6, ProgressMode::Event).unwrap();
    let addr: SocketAddr = format!("[::1]:{}", listener.local_addr().port()).parse().unwrap();
    let e = Endpoint::connect(&wc, addr).await.expect_err("nothing listens on [::1] there");
    assert_refused(&e, addr);
}

#[tokio::test]
async fn a_listener_that_answers_and_then_fails_is_not_a_refusal() {
    // A bare ucx-core listener in a thread: it accepts, sends the first 16 bytes of UCX-Py's
    // 24-byte handshake, and closes. The client got an answer, so its failure is the peer's.
    let ctx = context();
    let server = ucx_async::core::Worker::new(&ctx).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let listener = ucx_async::core::Listener::bind(&server, "127.0.0.1:0".parse().unwrap(), move |req| {
        let _ = tx.send(req);
    })
    .unwrap();
    let addr = listener.local_addr();
    let thread = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let req = loop {
            server.progress();
            if let Ok(req) = rx.try_recv() {
                break req;
            }
            assert!(Instant::now() < deadline, "no connection request");
        };
        let ep = ucx_async::core::Endpoint::accept(&server, req, EndpointParams::default()).unwrap();
        let info = PeerInfo { msg_tag: 1, ctrl_tag: 2 }.encode();
        ep.stream_send(&info[..DETECT_LEN]).unwrap().wait().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        ep.close(CloseMode::Force).unwrap().wait().ok();
        for _ in 0..1000 {
            server.progress();
        }
        drop(listener);
    });
    let w = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let e = Endpoint::connect(&w, addr).await.expect_err("the listener went away mid-handshake");
    thread.join().unwrap();
    assert!(!matches!(e, Error::Refused { .. }), "the listener answered: {e:?}");
    assert!(e.status().is_peer_failure() || matches!(e, Error::HandshakeTimeout { .. }), "{e:?}");
}

//! No operation on an endpoint that has ended reports success, whoever ended it and however:
//! each way (`close`, `abort`, the unreceived-bytes cap, a receive dropped after UCX matched
//! a message to it, the peer's failure) against each operation (tag, owned tag, active
//! message, stream, RMA, flush), each failing with the error of its cause. Real UCX over
//! 127.0.0.1.
use std::future::Future;
use std::time::{Duration, Instant};

use ucx_async::core::{Context, MemoryHandle};
use ucx_async::{Endpoint, Error, Listener, ProgressMode, Worker};

fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").build().expect("context")
}

async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum How {
    Close,
    Abort,
    Cap,
    DroppedMatchedRecv,
    PeerFailed,
}

/// The error class every later operation must fail with after `how`.
fn expected(how: How, e: &Error) -> bool {
    match how {
        How::Close | How::Abort => matches!(e, Error::Closed { .. }),
        How::DroppedMatchedRecv => matches!(e, Error::LostMessage { .. }),
        How::Cap => matches!(e, Error::Unreceived { .. }),
        How::PeerFailed => matches!(e, Error::PeerFailed { .. }),
    }
}

/// Ends the server's endpoint `how`.
async fn end(how: How, server: &Endpoint, client: &Endpoint, server_worker: &Worker) {
    match how {
        How::Close => server.close().await.unwrap(),
        How::Abort => server.abort(),
        How::Cap => {
            server_worker.set_max_unclaimed_bytes(Some(64 << 10));
            let msg = vec![1u8; 2048];
            for _ in 0..100 {
                if client.send(&msg[..]).await.is_err() {
                    break;
                }
            }
            until("the cap to take the endpoint down", || server.status().is_err()).await;
        }
        How::DroppedMatchedRecv => {
            const BIG: usize = 256 << 20;
            let data = vec![1u8; BIG];
            let c = client.clone();
            // A fast send: UCX's own protocol (never a same-host single-copy descriptor, which
            // is read whole within the receive's first poll), so the data is under way when
            // the receive is dropped.
            let tag = client.tags().unwrap().msg_send;
            let send = tokio::spawn(async move { c.send_tag_fast(&data[..], tag).await });
            let mut buf = vec![0u8; BIG];
            // The message has arrived (its rendezvous request, at least): the receive is
            // matched to it at once, then dropped while its data is under way.
            let tag = server.tags().unwrap().msg_recv;
            until("the message to arrive", || server.worker().tag_probe(tag, u64::MAX)).await;
            {
                let mut recv = std::pin::pin!(server.recv(&mut buf[..]));
                let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
                // One poll posts it (and spins for at most a millisecond); 256 MiB takes longer.
                assert!(recv.as_mut().poll(&mut cx).is_pending(), "received already");
            } // dropped here, unfinished
              // The sender's send ends (UCX may already have delivered its data into the dropped
              // receive's buffer, so it may succeed: the message was received, then dropped by
              // the receiver).
            let sent = tokio::time::timeout(Duration::from_secs(10), send).await;
            sent.expect("the sender's send hangs after the receiver dropped its receive").unwrap().ok();
        }
        How::PeerFailed => {
            client.abort();
            until("the peer's failure to be reported", || server.status().is_err()).await;
        }
    }
}

async fn check(how: How) {
    let ctx = context();
    let ws = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let wc = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let listener = Listener::bind(&ws, "127.0.0.1:0".parse().unwrap()).unwrap();
    let (server, client) = tokio::join!(listener.accept(), Endpoint::connect(&wc, listener.local_addr()));
    let (server, client) = (server.unwrap(), client.unwrap());
    let mem = MemoryHandle::allocate(&ctx, 64).unwrap();
    let rkey = server.unpack_rkey(&mem.pack_rkey().unwrap()).unwrap();
    end(how, &server, &client, &ws).await;
    let mut results: Vec<(&str, Result<(), Error>)> = Vec::new();
    let t = Duration::from_secs(10);
    macro_rules! op {
        ($name:expr, $fut:expr) => {
            let r = tokio::time::timeout(t, $fut).await.unwrap_or_else(|_| panic!("{how:?}: {} hung", $name));
            results.push(($name, r.map(drop)));
        };
    }
    let mut small = [0u8; 8];
    let big = vec![1u8; 8 << 20];
    op!("send 8 B", server.send(&small[..]));
    op!("send 8 MiB", server.send(&big[..]));
    op!("recv", server.recv(&mut small[..]));
    op!("send_owned", server.send_owned(vec![1u8; 8]));
    op!("recv_owned", server.recv_owned(vec![0u8; 8]));
    op!("am_send", server.am_send(&small[..]));
    op!("am_recv", server.am_recv());
    op!("stream_send", server.stream_send(&small[..]));
    op!("stream_recv", server.stream_recv(&mut small[..]));
    op!("put", server.put(&small[..], mem.address(), &rkey));
    op!("get", server.get(&mut small[..], mem.address(), &rkey));
    op!("flush", server.flush());
    results.push(("unpack_rkey", server.unpack_rkey(&mem.pack_rkey().unwrap()).map(drop)));
    let wrong: Vec<String> = results
        .iter()
        .filter(|(_, r)| !matches!(r, Err(e) if expected(how, e)))
        .map(|(name, r)| format!("{name}: {r:?}"))
        .collect();
    assert!(wrong.is_empty(), "after {how:?}, operations that did not fail with its error:\n{}", wrong.join("\n"));
    client.abort();
}

#[tokio::test]
async fn after_close() {
    check(How::Close).await;
}

#[tokio::test]
async fn after_abort() {
    check(How::Abort).await;
}

#[tokio::test]
async fn after_the_cap() {
    check(How::Cap).await;
}

// Two threads: dropping the matched receive progresses the server's worker until UCX lets go
// of it, which takes the client's reactor sending the rest of the message meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_matched_receive_was_dropped() {
    check(How::DroppedMatchedRecv).await;
}

#[tokio::test]
async fn after_the_peer_failed() {
    check(How::PeerFailed).await;
}

//! The cap on what a peer may leave unreceived on an endpoint (`Worker::set_max_unclaimed_bytes`)
//! over real UCX on 127.0.0.1: a flood over it takes the endpoint down with
//! `Error::Unreceived` and leaves another endpoint alone, in both reactor modes; messages held
//! for a slow receiver (a large rendezvous first) come out whole and in order; closing drops
//! what was held; tags that are not an endpoint's own stay in UCX; no cap holds nothing.
use std::time::{Duration, Instant};

use ucx_async::core::{Context, FULL_MASK};
use ucx_async::{Endpoint, Error, Listener, ProgressMode, Worker};

fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").build().expect("context")
}

/// A server worker with a listener, and `n` clients (each on its own worker) connected to it.
async fn clients(mode: ProgressMode, n: usize) -> (Worker, Listener, Vec<(Endpoint, Endpoint)>) {
    let ctx = context();
    let server = Worker::new(&ctx, mode).unwrap();
    let listener = Listener::bind(&server, "127.0.0.1:0".parse().unwrap()).unwrap();
    let mut pairs = Vec::new();
    for _ in 0..n {
        let w = Worker::new(&ctx, mode).unwrap();
        let (s, c) = tokio::join!(listener.accept(), Endpoint::connect(&w, listener.local_addr()));
        pairs.push((s.unwrap(), c.unwrap()));
    }
    (server, listener, pairs)
}

/// Waits (yielding to the reactors) until `cond()`; panics after 10 s naming `what`.
async fn until(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

async fn flood_over_the_cap(mode: ProgressMode) {
    let (server, _l, pairs) = clients(mode, 2).await;
    server.set_max_unclaimed_bytes(Some(256 << 10));
    let (flooded, flooder) = &pairs[0];
    let (other, other_client) = &pairs[1];
    // 200 messages of 2 KiB (eager) that nobody receives: 400 KiB.
    let msg = vec![1u8; 2048];
    for _ in 0..200 {
        if flooder.send(&msg[..]).await.is_err() {
            break; // the server closed the endpoint already
        }
    }
    until("the flooded endpoint to go down", || flooded.status().is_err()).await;
    let mut buf = vec![0u8; 2048];
    match flooded.recv(&mut buf[..]).await {
        Err(Error::Unreceived { overflow, .. }) => {
            assert_eq!(overflow.limit, 256 << 10);
            assert!(overflow.counted > 256 << 10, "{overflow:?}");
        }
        other => panic!("expected Error::Unreceived, got {other:?}"),
    }
    assert!(flooded.recv(&mut buf[..]).await.unwrap_err().is_disconnect());
    assert_eq!(server.unclaimed(), (0, 0), "what was held for it is dropped");
    // The other endpoint on the same worker is untouched.
    let (sent, got) = tokio::join!(other_client.send(&msg[..]), other.recv(&mut buf[..]));
    sent.unwrap();
    assert_eq!(got.unwrap(), 2048);
}

#[tokio::test]
async fn a_flood_over_the_cap_takes_the_endpoint_down_event_mode() {
    flood_over_the_cap(ProgressMode::Event).await;
}

#[tokio::test]
async fn a_flood_over_the_cap_takes_the_endpoint_down_polling_mode() {
    flood_over_the_cap(ProgressMode::Polling).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_messages_come_out_whole_and_in_order() {
    let (server, _l, pairs) = clients(ProgressMode::Event, 1).await;
    // 1 MiB: the 50 KiB behind the large message fit, the large one itself would not.
    server.set_max_unclaimed_bytes(Some(1 << 20));
    let (receiver, sender) = pairs.into_iter().next().unwrap();
    let big: Vec<u8> = (0..4 << 20).map(|i: usize| (i * 13) as u8).collect();
    let s = sender.clone();
    let expect = big.clone();
    let big_send = tokio::spawn(async move { s.send(&big[..]).await });
    until("the large message to be held", || server.unclaimed().0 == 1).await;
    for i in 0..50u8 {
        sender.send(&[i; 1024][..]).await.unwrap();
    }
    until("all 51 messages to be held", || server.unclaimed().0 == 51).await;
    assert!(receiver.status().is_ok(), "the next message of a tag never counts against the cap");
    let mut got = vec![0u8; 4 << 20];
    assert_eq!(receiver.recv(&mut got[..]).await.unwrap(), 4 << 20);
    assert!(got == expect, "the large message came out changed");
    big_send.await.unwrap().unwrap();
    for i in 0..50u8 {
        let mut one = [0u8; 1024];
        receiver.recv(&mut one[..]).await.unwrap();
        assert_eq!(one, [i; 1024], "message {i} came out of order");
    }
    assert_eq!(server.unclaimed(), (0, 0));
}

#[tokio::test]
async fn closing_drops_what_the_peer_left_unreceived() {
    let (server, _l, pairs) = clients(ProgressMode::Event, 1).await;
    let (receiver, sender) = &pairs[0];
    for _ in 0..10 {
        sender.send(&[5u8; 1000][..]).await.unwrap();
    }
    until("the messages to be held", || server.unclaimed().0 == 10).await;
    let own = receiver.tags().unwrap().msg_recv;
    receiver.abort();
    assert_eq!(server.unclaimed(), (0, 0));
    assert!(server.core().tag_probe(own, FULL_MASK).is_none(), "nothing left in UCX's queue either");
}

#[tokio::test]
async fn other_tags_stay_in_ucx_and_no_cap_holds_nothing() {
    let (server, _l, pairs) = clients(ProgressMode::Event, 1).await;
    let (receiver, sender) = &pairs[0];
    sender.send_tag(&[1u8; 100][..], 0xABCD).await.unwrap();
    until("the message on another tag to arrive", || server.core().tag_probe(0xABCD, FULL_MASK).is_some()).await;
    tokio::time::sleep(Duration::from_millis(30)).await; // a few sweeps
    assert_eq!(server.unclaimed(), (0, 0), "a tag that is not an endpoint's own is not swept");
    assert!(server.core().tag_probe(0xABCD, FULL_MASK).is_some());
    assert_eq!(server.max_unclaimed_bytes(), Some(1 << 30), "the default cap");
    server.set_max_unclaimed_bytes(None);
    sender.send(&[2u8; 100][..]).await.unwrap();
    let own = receiver.tags().unwrap().msg_recv;
    until("the message to arrive", || server.core().tag_probe(own, FULL_MASK).is_some()).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(server.unclaimed(), (0, 0), "no cap: nothing is swept");
    let mut buf = [0u8; 100];
    assert_eq!(receiver.recv(&mut buf[..]).await.unwrap(), 100);
    assert_eq!(buf, [2u8; 100]);
}

#[tokio::test]
async fn unread_stream_bytes_count_against_the_cap() {
    let (server, _l, pairs) = clients(ProgressMode::Event, 1).await;
    server.set_max_unclaimed_bytes(Some(256 << 10));
    let (receiver, sender) = &pairs[0];
    let chunk = vec![1u8; 64 << 10];
    for _ in 0..8 {
        if sender.stream_send(&chunk[..]).await.is_err() {
            break;
        }
    }
    until("the endpoint to go down", || receiver.status().is_err()).await;
    match receiver.stream_recv(&mut [0u8; 8][..]).await {
        Err(Error::Unreceived { overflow, .. }) => {
            assert!(overflow.stream && overflow.counted > 256 << 10, "{overflow:?}")
        }
        other => panic!("expected Error::Unreceived, got {other:?}"),
    }
}

#[tokio::test]
async fn stream_bytes_held_before_a_receive_come_first_and_in_order() {
    let (_server, _l, pairs) = clients(ProgressMode::Event, 1).await;
    let (receiver, sender) = &pairs[0];
    let first: Vec<u8> = (0..120_000usize).map(|i| (i * 31) as u8).collect();
    for part in [&first[..100], &first[100..5_000], &first[5_000..]] {
        sender.stream_send(part).await.unwrap();
    }
    until("the stream bytes to be held", || receiver.stream_backlog() == first.len()).await;
    let mut head = vec![0u8; 50_000];
    receiver.stream_recv(&mut head[..]).await.unwrap();
    assert!(head == first[..50_000]);
    // More than is held: the rest of the backlog, then UCX.
    let later = vec![7u8; 4_000];
    let mut rest = vec![0u8; first.len() - 50_000 + later.len()];
    let (got, sent) = tokio::join!(receiver.stream_recv(&mut rest[..]), async {
        tokio::task::yield_now().await;
        sender.stream_send(&later[..]).await
    });
    got.unwrap();
    sent.unwrap();
    assert!(rest[..first.len() - 50_000] == first[50_000..]);
    assert!(rest[first.len() - 50_000..] == later[..]);
    assert_eq!(receiver.stream_backlog(), 0);
}

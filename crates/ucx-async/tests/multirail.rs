//! Multi-rail over real UCX on 127.0.0.1, each rail on its own context and worker (as rails
//! on different devices would be), the two sides on their own threads and runtimes (as two
//! processes would be: one side blocked must not stall the other): every size from 0 B to
//! 16 MiB (256 MiB with `UCXA_TEST_MULTIRAIL_LONG=1`) at every rail count, ratio and stage count
//! of the sweep arrives intact; bad splits and mismatched rails are refused; a failed rail
//! fails the message on both sides without a hang; a dropped receive aborts the group. With
//! feature `cuda`, device buffers split over rails (skipped without a CUDA device).
mod common;

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use ucx_async::core::Context;
use ucx_async::{Endpoint, Error, Listener, ProgressMode, RailGroup, RailListener, Split, Worker};

const LIMIT: Duration = Duration::from_secs(60);

/// One context and worker per rail (distinct contexts, as per-NIC rails have).
fn workers(rails: usize) -> Vec<Worker> {
    (0..rails)
        .map(|_| {
            let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
            Worker::new(&ctx, ProgressMode::Event).unwrap()
        })
        .collect()
}

/// Runs `accepting(group)` on a thread and runtime of its own, with `rails` listeners, and
/// `connecting(group)` here once connected to `route(their addresses)` (rail i to listener i
/// unless `route` reorders them); returns both results.
async fn run<A, AF, C, CF, TA, TC>(
    rails: usize,
    route: impl FnOnce(Vec<SocketAddr>) -> Vec<SocketAddr>,
    accepting: A,
    connecting: C,
) -> (TA, TC)
where
    A: FnOnce(Result<RailGroup, Error>) -> AF + Send + 'static,
    AF: Future<Output = TA>,
    TA: Send + 'static,
    C: FnOnce(Result<RailGroup, Error>) -> CF,
    CF: Future<Output = TC>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let ws = workers(rails);
            let listeners: Vec<Listener> =
                ws.iter().map(|w| Listener::bind(w, "127.0.0.1:0".parse().unwrap()).unwrap()).collect();
            tx.send(listeners.iter().map(Listener::local_addr).collect::<Vec<_>>()).unwrap();
            let group = RailGroup::accept(&listeners).await;
            let keep = open_rails(&group);
            let out = tokio::time::timeout(LIMIT, accepting(group)).await.expect("the accepting side finishes");
            let _ = done_rx.await;
            drop(keep);
            out
        })
    });
    let addrs = route(rx.recv().unwrap());
    let ws = workers(rails);
    let dial: Vec<_> = ws.iter().zip(addrs).collect();
    let group = RailGroup::connect(&dial).await;
    let keep = open_rails(&group);
    let mine = tokio::time::timeout(LIMIT, connecting(group)).await.expect("the connecting side finishes");
    let _ = done_tx.send(());
    let theirs = tokio::task::spawn_blocking(move || server.join()).await.unwrap().expect("no panic on the other side");
    drop(keep);
    (theirs, mine)
}

/// Clones of a group's rails, held until both sides are done: a side that finishes first
/// (its last send complete) must not close the connection the other is still reading from.
fn open_rails(group: &Result<RailGroup, Error>) -> Vec<Endpoint> {
    group.as_ref().map(|g| g.rails().to_vec()).unwrap_or_default()
}

fn pattern(len: usize, seed: u64) -> Vec<u8> {
    (0..len).map(|i| ((i as u64).wrapping_mul(31) ^ seed ^ (i as u64 >> 12)) as u8).collect()
}

/// Receives one message and checks it is `expected`, and that nothing was written past it.
async fn expect(group: &RailGroup, expected: &[u8]) {
    let mut got = vec![0xeeu8; expected.len() + 3];
    assert_eq!(group.recv(&mut got).await.unwrap(), expected.len());
    assert!(got[..expected.len()] == *expected, "bytes differ at {} bytes", expected.len());
    assert_eq!(&got[expected.len()..], &[0xee; 3], "written past the message");
}

/// The sweep: (rails, split, message size, seed), in the order both sides walk it.
fn sweep(rails: usize) -> Vec<(Split, usize, u64)> {
    let mut sizes = vec![0usize, 1, 7, 4096, 65_537, 1 << 20, 16 << 20];
    if std::env::var_os("UCXA_TEST_MULTIRAIL_LONG").is_some() {
        sizes.push(256 << 20);
    }
    let ratios: &[f64] = if rails == 1 { &[0.0] } else { &[0.0, 0.5, 0.75, 1.0] };
    let mut out = Vec::new();
    for &ratio in ratios {
        for stages in [1usize, 3] {
            for &size in &sizes {
                out.push((Split::ratio(rails, ratio).unwrap().stages(stages).unwrap(), size, out.len() as u64));
            }
        }
    }
    // Uneven weights too.
    out.push((Split::weights((1..=rails).map(|w| w as f64).collect()).unwrap().stages(2).unwrap(), 3 << 20, 99));
    out
}

#[tokio::test(flavor = "current_thread")]
async fn every_size_ratio_and_stage_count_arrives_intact() {
    for rails in [1usize, 2, 4] {
        let (n, ()) = run(
            rails,
            std::convert::identity,
            move |g| async move {
                let g = g.unwrap();
                for (_, size, seed) in sweep(rails) {
                    expect(&g, &pattern(size, seed)).await;
                }
                // And the other direction.
                g.send(&pattern(5 << 20, 7), &Split::even(rails).unwrap().stages(2).unwrap()).await.unwrap();
                sweep(rails).len()
            },
            |g| async move {
                let g = g.unwrap();
                for (split, size, seed) in sweep(rails) {
                    g.send(&pattern(size, seed), &split).await.unwrap();
                }
                expect(&g, &pattern(5 << 20, 7)).await;
            },
        )
        .await;
        assert!(n >= 15, "{n} messages");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn messages_are_received_in_order_while_sends_overlap() {
    let msgs: Vec<Vec<u8>> = (0..8).map(|i| pattern(100_000 * (i + 1), i as u64)).collect();
    let expected = msgs.clone();
    run(
        2,
        std::convert::identity,
        move |g| async move {
            let g = g.unwrap();
            for m in &expected {
                expect(&g, m).await;
            }
        },
        |g| async move {
            let g = g.unwrap();
            let split = Split::even(2).unwrap().stages(2).unwrap();
            futures_util::future::try_join_all(msgs.iter().map(|m| g.send(m, &split))).await.unwrap();
        },
    )
    .await;
}

/// `send_profiled` sends as `send` does, and times every non-empty chunk once: each on the
/// rail and with the length its share gives, all within the call.
#[tokio::test(flavor = "current_thread")]
async fn a_profiled_send_times_every_chunk_on_its_rail() {
    let split = Split::weights(vec![1.0, 2.0, 0.0]).unwrap().stages(2).unwrap();
    let size = 3 << 20;
    let (_, times) = run(
        3,
        std::convert::identity,
        move |g| async move { expect(&g.unwrap(), &pattern(size, 5)).await },
        |g| async move {
            let g = g.unwrap();
            let t = std::time::Instant::now();
            let times = g.send_profiled(&pattern(size, 5), &split).await.unwrap();
            (times, t.elapsed())
        },
    )
    .await;
    let (times, took) = times;
    // Two stages on rails 0 and 1; rail 2's share is empty, so it sends nothing.
    assert_eq!(times.len(), 4, "{times:?}");
    let on = |rail: usize| times.iter().filter(|c| c.rail == rail).map(|c| c.bytes).sum::<u64>();
    assert_eq!((on(0), on(1), on(2)), (1 << 20, 2 << 20, 0), "{times:?}");
    let mut parts: Vec<(usize, u16)> = times.iter().map(|c| (c.rail, c.part)).collect();
    parts.sort_unstable();
    parts.dedup();
    assert_eq!(parts.len(), 4, "every chunk once: {times:?}");
    assert!(times.iter().all(|c| c.part > 0 && c.finished <= took), "{times:?} within {took:?}");
}

#[tokio::test(flavor = "current_thread")]
async fn bad_input_is_refused_with_the_reason() {
    let (e, ()) = run(
        2,
        std::convert::identity,
        |g| async move {
            let g = g.unwrap();
            // A message bigger than the receive buffer: refused by name, and the group
            // aborted (the rest of the message would otherwise be read as the next one).
            let mut small = vec![0u8; 100];
            let e = g.recv(&mut small).await.unwrap_err();
            assert!(matches!(g.recv(&mut small).await, Err(Error::Closed { .. })));
            e.to_string()
        },
        |g| async move {
            let g = g.unwrap();
            let e = g.send(b"x", &Split::even(3).unwrap()).await.unwrap_err();
            assert!(e.to_string().contains("the split has 3 rails, the group 2"), "{e}");
            // The receiver refuses it and aborts: this send fails or finishes, never hangs.
            let _ = g.send(&pattern(10_000, 1), &Split::even(2).unwrap()).await;
        },
    )
    .await;
    assert!(e.contains("a message of 10000 bytes does not fit the 100-byte buffer"), "{e}");
    assert!(RailGroup::from_endpoints(Vec::new()).is_err());
}

#[tokio::test(flavor = "current_thread")]
async fn rails_in_the_wrong_order_are_refused() {
    // Rail 0 dials rail 1's listener and the other way round.
    let (e, _) = run(
        2,
        |mut a| {
            a.swap(0, 1);
            a
        },
        |g| async move { g.err().expect("refused").to_string() },
        |g| async move { g.is_ok() },
    )
    .await;
    // Whichever listener hears first names the mismatch.
    let named = ["rail 0: the connection says it is rail 1 of 2", "rail 1: the connection says it is rail 0 of 2"];
    assert!(named.iter().any(|n| e.contains(n)), "{e}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_rail_fails_the_message_on_both_sides() {
    let data = pattern(64 << 20, 5);
    let split = Split::even(2).unwrap().stages(4).unwrap();
    let (received, sent) = run(
        2,
        std::convert::identity,
        |g| async move {
            let g = g.unwrap();
            let mut got = vec![0u8; 64 << 20];
            // Rail 1 fails while the receive waits on it. (A timer racing the transfer would
            // not do: on one host 64 MiB can arrive within a few milliseconds.)
            let fail = async {
                tokio::time::sleep(Duration::from_millis(20)).await;
                g.rails()[1].abort();
            };
            let (received, ()) = tokio::join!(g.recv(&mut got), fail);
            // The group is unusable now, and says so at once.
            assert!(matches!(g.recv(&mut got).await, Err(Error::Closed { .. })));
            received.map(drop)
        },
        |g| async move {
            let g = g.unwrap();
            // The send starts once the receiver's rail 1 has failed.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let sent = g.send(&data, &split).await;
            let later = tokio::time::timeout(Duration::from_secs(10), g.send(&data, &split)).await;
            assert!(later.expect("no hang").is_err(), "a send after the failure");
            sent
        },
    )
    .await;
    let e = received.expect_err("the receive fails");
    assert!(matches!(e, Error::Rail { .. }), "{e}");
    if let Err(e) = sent {
        assert!(matches!(e, Error::Rail { .. }), "{e}");
    }
}

#[tokio::test(flavor = "current_thread")]
async fn a_receive_dropped_midway_aborts_the_group() {
    let data = pattern(32 << 20, 6);
    let (e, _) = run(
        2,
        std::convert::identity,
        |g| async move {
            let g = g.unwrap();
            let mut got = vec![0u8; 32 << 20];
            let _ = tokio::time::timeout(Duration::from_millis(5), g.recv(&mut got)).await;
            g.recv(&mut got).await.expect_err("the group is aborted")
        },
        |g| async move {
            let g = g.unwrap();
            tokio::time::timeout(Duration::from_secs(10), g.send(&data, &Split::even(2).unwrap().stages(2).unwrap()))
                .await
                .expect("the send does not hang")
        },
    )
    .await;
    assert!(matches!(e, Error::Closed { .. }), "{e}");
}

#[tokio::test(flavor = "current_thread")]
async fn a_rail_listener_assembles_groups_from_clients_connecting_at_once() {
    let (tx, rx) = std::sync::mpsc::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    // The server: a RailListener; each group echoes one message back on itself.
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let ws = workers(2);
            let mut listener = RailListener::bind(&[&ws[0], &ws[1]], "127.0.0.1:0".parse().unwrap()).unwrap();
            tx.send(listener.local_addrs()).unwrap();
            let mut keep = Vec::new();
            for _ in 0..3 {
                let g = tokio::time::timeout(LIMIT, listener.accept()).await.expect("a group").unwrap();
                let mut buf = vec![0u8; 1 << 20];
                let n = g.recv(&mut buf).await.unwrap();
                g.send(&buf[..n], &Split::even(2).unwrap().stages(2).unwrap()).await.unwrap();
                keep.push(g);
            }
            let _ = done_rx.await;
        })
    });
    let addrs = rx.recv().unwrap();
    // A stray connection that says nothing useful must not stop the listener.
    let stray_worker = workers(1);
    let stray = ucx_async::Endpoint::connect(&stray_worker[0], addrs[1]).await.unwrap();
    stray.send(&b"not a hello at all"[..]).await.unwrap();
    // Three clients whose rails connect interleaved.
    let ws: Vec<Vec<Worker>> = (0..3).map(|_| workers(2)).collect();
    let clients = ws.iter().enumerate().map(|(k, w)| {
        let addrs = addrs.clone();
        async move {
            let dial = [(&w[0], addrs[0]), (&w[1], addrs[1])];
            let g = RailGroup::connect(&dial).await.unwrap();
            let mine = pattern(300_000 + k * 1000, k as u64);
            g.send(&mine, &Split::ratio(2, 0.5).unwrap()).await.unwrap();
            expect(&g, &mine).await; // its own bytes back: the server paired its rails
            g
        }
    });
    let groups = tokio::time::timeout(LIMIT, futures_util::future::join_all(clients)).await.expect("no hang");
    let _ = done_tx.send(());
    tokio::task::spawn_blocking(move || server.join()).await.unwrap().expect("no panic on the server");
    drop(groups);
}

/// Device buffers split over two rails in two stages (feature `cuda`): device to device,
/// device to host and host to device, every byte checked. Both groups live on this thread,
/// where the CUDA context is current (UCX calls the driver on the thread that progresses).
/// Without a CUDA device it prints "skipped: no CUDA device" and passes.
#[cfg(feature = "cuda")]
#[tokio::test(flavor = "current_thread")]
async fn device_buffers_split_over_rails_arrive_intact() {
    use cust::memory::{CopyDestination, DeviceBuffer};
    let Some(_cuda) = common::cuda() else { return };
    let to_host = |b: &DeviceBuffer<u8>| {
        let mut host = vec![0u8; b.len()];
        b.copy_to(&mut host[..]).expect("device -> host copy");
        host
    };
    let (accepting, connecting) = (workers(2), workers(2));
    let listeners: Vec<Listener> =
        accepting.iter().map(|w| Listener::bind(w, "127.0.0.1:0".parse().unwrap()).unwrap()).collect();
    let dial: Vec<(&Worker, SocketAddr)> = connecting.iter().zip(listeners.iter().map(Listener::local_addr)).collect();
    let (rx, tx) = tokio::join!(RailGroup::accept(&listeners), RailGroup::connect(&dial));
    let (rx, tx) = (rx.unwrap(), tx.unwrap());
    let split = Split::ratio(2, 0.5).unwrap().stages(2).unwrap();
    for n in [1, 65_536, (4 << 20) + 3] {
        let data = pattern(n, n as u64);
        let src = DeviceBuffer::from_slice(&data).unwrap();
        let mut dst = DeviceBuffer::from_slice(&vec![0xAAu8; n]).unwrap();
        let (sent, got) = tokio::time::timeout(LIMIT, async { tokio::join!(tx.send(&src, &split), rx.recv(&mut dst)) })
            .await
            .expect("device to device: no hang");
        sent.unwrap();
        assert_eq!(got.unwrap(), n);
        assert!(to_host(&dst) == data, "{n} bytes device to device");

        let mut host = vec![0xAAu8; n];
        let (sent, got) = tokio::join!(tx.send(&src, &split), rx.recv(&mut host));
        sent.unwrap();
        assert_eq!(got.unwrap(), n);
        assert!(host == data, "{n} bytes device to host");

        let mut dst = DeviceBuffer::from_slice(&vec![0xAAu8; n]).unwrap();
        let (sent, got) = tokio::join!(tx.send(&data, &split), rx.recv(&mut dst));
        sent.unwrap();
        assert_eq!(got.unwrap(), n);
        assert!(to_host(&dst) == data, "{n} bytes host to device");
    }
}

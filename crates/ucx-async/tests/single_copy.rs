//! The same-host single-copy path between two ucx-async endpoints over real UCX (peer error
//! handling on, where UCX itself moves host data over TCP): it turns on after the handshake,
//! large messages travel by it whole and in order beside small ones that do not, a receive
//! too small for one fails as a truncation, and endpoints made from worker addresses (no
//! handshake, no mark) never use it, nor do endpoints UCX serves by shared memory (no error
//! handling, or `UCX_MM_ERROR_HANDLING=y`).
use std::time::{Duration, Instant};

use ucx_async::core::single_copy::Counts;
use ucx_async::core::{Context, Status};
use ucx_async::{ConnectOptions, Endpoint, Flavour, Listener, ProgressMode, Worker};

fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").build().expect("context")
}

async fn pair() -> (Endpoint, Endpoint, Listener) {
    let ctx = context();
    let (ws, wc) = (Worker::new(&ctx, ProgressMode::Event).unwrap(), Worker::new(&ctx, ProgressMode::Event).unwrap());
    let listener = Listener::bind(&ws, "127.0.0.1:0".parse().unwrap()).unwrap();
    let (s, c) = tokio::join!(listener.accept(), Endpoint::connect(&wc, listener.local_addr()));
    (s.unwrap(), c.unwrap(), listener)
}

/// Waits until both sides send and receive by single copy; panics after 10 s.
async fn until_on(a: &Endpoint, b: &Endpoint) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (x, y) = (a.single_copy(), b.single_copy());
        if x.sending && x.receiving && y.sending && y.receiving {
            return;
        }
        assert!(Instant::now() < deadline, "the single-copy path did not turn on: {x:?} {y:?}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether this kernel gives huge pages to memory that asks for them and can say where
/// memory sits (`ucx_core::huge_pages::bytes_on_huge_pages`).
fn huge_pages_here() -> bool {
    let on = matches!(ucx_async::core::doctor::transparent_huge_pages().0.as_deref(), Some("always" | "madvise"));
    on && ucx_async::core::huge_pages::bytes_on_huge_pages([0u8; 8].as_ptr(), 8).is_some()
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect()
}

/// Sends 1 MiB of `pattern(_, seed)` from `from` to `to` and checks that it arrived whole.
async fn send_1mib(from: &Endpoint, to: &Endpoint, seed: u8) {
    let data = pattern(1 << 20, seed);
    let mut got = vec![0u8; 1 << 20];
    let (sent, received) = tokio::join!(from.send(&data[..]), to.recv(&mut got[..]));
    sent.unwrap();
    received.unwrap();
    assert!(got == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_messages_travel_by_single_copy_whole_and_in_order() {
    let (server, client, _l) = pair().await;
    until_on(&server, &client).await;
    let refused = ucx_async::core::single_copy::staging::refused_blocks();
    let min = ucx_async::core::single_copy::threshold();
    let sizes = [0usize, 8, min - 1, min, 1 << 20, (16 << 20) + 3];
    let srv = server.clone();
    let echo = tokio::spawn(async move {
        for &n in &sizes {
            let mut buf = vec![0u8; n];
            let got = srv.recv(&mut buf[..]).await.unwrap();
            assert_eq!(got, n);
            srv.send(&buf[..]).await.unwrap();
        }
    });
    for (i, &n) in sizes.iter().enumerate() {
        let data = pattern(n, i as u8);
        client.send(&data[..]).await.unwrap();
        let mut back = vec![0u8; n];
        assert_eq!(client.recv(&mut back[..]).await.unwrap(), n);
        assert!(back == data, "{n} bytes came back different");
    }
    echo.await.unwrap();
    let large = sizes.iter().filter(|&&n| n >= min).count() as u64;
    let (c, s) = (client.single_copy(), server.single_copy());
    assert_eq!((c.sent, c.received, s.sent, s.received), (large, large, large, large), "{c:?} {s:?}");
    // `Vec`s sit on 4 KiB pages: where the kernel has huge pages, each large message went
    // from a copy on them (ucx_core::single_copy::staging), which the peer reads faster.
    // (Unless the kernel had none free for a fresh block meanwhile: staging then pauses.)
    if huge_pages_here() && ucx_async::core::single_copy::staging::refused_blocks() == refused {
        assert_eq!((c.staged, s.staged), (large, large), "{c:?} {s:?}");
    }
    // Owned buffers take the path too.
    let data = pattern(1 << 20, 9);
    let (sent, got) = tokio::join!(client.send_owned(data.clone()), server.recv_owned(vec![0u8; 1 << 20]));
    assert_eq!(sent.unwrap(), data);
    let (buf, n) = got.unwrap();
    assert_eq!((n, buf == data), (1 << 20, true));
    assert_eq!(client.single_copy().sent, large + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_too_small_for_a_single_copy_message_is_a_truncation() {
    let (server, client, _l) = pair().await;
    until_on(&server, &client).await;
    let data = pattern(1 << 20, 1);
    let limit = Duration::from_secs(10);
    // Half the message's room, fewer bytes than a descriptor (the sender must still be
    // answered), and none; borrowed and owned.
    for room in [1 << 19, 63, 8, 0] {
        let mut small = vec![0u8; room];
        let both = async { tokio::join!(client.send(&data[..]), server.recv(&mut small[..])) };
        let (sent, got) = tokio::time::timeout(limit, both).await.expect("the sender is answered");
        sent.unwrap();
        assert_eq!(got.unwrap_err().status(), Status::MessageTruncated, "{room} bytes");
        let both = async { tokio::join!(client.send(&data[..]), server.recv_owned(vec![0u8; room])) };
        let (sent, got) = tokio::time::timeout(limit, both).await.expect("the sender is answered (owned receive)");
        sent.unwrap();
        assert_eq!(got.unwrap_err().status(), Status::MessageTruncated, "{room} bytes, owned");
    }
    // Small messages still arrive whole in small receives, and the endpoint goes on.
    for room in [63usize, 8] {
        client.send(&data[..5]).await.unwrap();
        let mut small = vec![0u8; room];
        assert_eq!(server.recv(&mut small[..]).await.unwrap(), 5);
        assert_eq!(&small[..5], &data[..5]);
        client.send(&data[..5]).await.unwrap();
        let (small, n) = server.recv_owned(vec![0u8; room]).await.unwrap();
        assert_eq!((n, &small[..5]), (5, &data[..5]));
    }
    let mut whole = vec![0u8; 1 << 20];
    let (sent, got) = tokio::join!(client.send(&data[..]), server.recv(&mut whole[..]));
    sent.unwrap();
    assert_eq!(got.unwrap(), 1 << 20);
    assert!(whole == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_single_copy_send_never_delivers_freed_memory() {
    let (server, client, _l) = pair().await;
    until_on(&server, &client).await;
    let n = 8 << 20;
    // Sends dropped before their answers: each receive gets the whole message (read while
    // the guard held) or fails saying the sender let go of it, never other bytes. Odd rounds
    // send from huge pages, which the peer reads in place; even ones from a `Vec`, which goes
    // from a copy whose block the next message takes again.
    let mut outcomes = (0, 0);
    for round in 0..8u8 {
        let data = match round % 2 {
            0 => pattern(n, round),
            _ => {
                let mut huge = ucx_async::core::huge_pages::zeroed(n);
                huge.copy_from_slice(&pattern(n, round));
                huge
            }
        };
        let mut buf = vec![0u8; n];
        let srv = server.clone();
        let recv = tokio::spawn(async move {
            let r = srv.recv(&mut buf[..]).await;
            (r, buf)
        });
        let send = client.send(&data[..]);
        let _ = tokio::time::timeout(Duration::from_micros(50 + 100 * u64::from(round)), send).await;
        drop(data);
        let (r, buf) = recv.await.unwrap();
        match r {
            Ok(got) => {
                assert_eq!(got, n);
                assert!(buf == pattern(n, round), "round {round}: a receive got other bytes than those sent");
                outcomes.0 += 1;
            }
            Err(e) => {
                assert!(e.to_string().contains("let go of the message"), "round {round}: {e}");
                outcomes.1 += 1;
            }
        }
    }
    eprintln!("whole: {}, refused: {}", outcomes.0, outcomes.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_address_endpoints_do_not_use_it() {
    let ctx = context();
    let (wa, wb) = (Worker::new(&ctx, ProgressMode::Event).unwrap(), Worker::new(&ctx, ProgressMode::Event).unwrap());
    let tags = ucx_async::Tags { msg_send: 11, msg_recv: 12, ctrl_send: None, ctrl_recv: None };
    let back = ucx_async::Tags { msg_send: 12, msg_recv: 11, ctrl_send: None, ctrl_recv: None };
    let a = Endpoint::connect_to_worker(&wa, &wb.core().address().unwrap(), Some(tags)).unwrap();
    let b = Endpoint::connect_to_worker(&wb, &wa.core().address().unwrap(), Some(back)).unwrap();
    send_1mib(&a, &b, 3).await;
    assert_eq!(a.single_copy(), Default::default());
}

/// A connected pair of `ctx` with `error_handling`, after a 1 MiB echo (whole), and the
/// counts of the client's and the server's paths.
async fn echo_1mib(ctx: &Context, error_handling: bool) -> (Counts, Counts) {
    let (ws, wc) = (Worker::new(ctx, ProgressMode::Event).unwrap(), Worker::new(ctx, ProgressMode::Event).unwrap());
    let options = ConnectOptions { error_handling, ..ConnectOptions::default() };
    let listener = Listener::bind_with(&ws, "127.0.0.1:0".parse().unwrap(), Flavour::UcxPy, options).unwrap();
    let (s, c) = tokio::join!(listener.accept(), Endpoint::connect_with(&wc, listener.local_addr(), options));
    let (server, client) = (s.unwrap(), c.unwrap());
    // Time for a hello exchange to finish, where one starts.
    let deadline = Instant::now() + Duration::from_millis(500);
    while !(client.single_copy().sending && server.single_copy().sending) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    send_1mib(&client, &server, 5).await;
    let counts = (client.single_copy(), server.single_copy());
    let _ = tokio::join!(client.close(), server.close());
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taken_only_where_ucx_would_use_tcp() {
    if ["UCXA_SINGLE_COPY", "UCX_MM_ERROR_HANDLING", "UCX_TLS"].iter().any(|v| std::env::var_os(v).is_some()) {
        eprintln!("skipped: UCXA_SINGLE_COPY, UCX_MM_ERROR_HANDLING or UCX_TLS is set");
        return;
    }
    let (c, s) = echo_1mib(&context(), true).await;
    assert!(c.sending && s.receiving && c.sent == 1 && s.received == 1, "by default: {c:?} {s:?}");
    // UCX moves host data between local endpoints by shared memory (and CMA) itself here.
    let off = Counts::default();
    assert_eq!(echo_1mib(&context(), false).await, (off, off), "without error handling");
    let mm = Context::builder().option("NET_DEVICES", "lo").option("MM_ERROR_HANDLING", "y").build().unwrap();
    assert_eq!(echo_1mib(&mm, true).await, (off, off), "with UCX_MM_ERROR_HANDLING=y");
}

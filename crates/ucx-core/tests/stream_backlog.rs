//! `StreamBacklog` over real UCX on loopback: stream bytes taken before anyone asked are
//! counted exactly and read back in order, a receive finishes from the backlog and then from
//! UCX at the offset it reached (or at once, when the backlog fills it), and chunks given
//! back leave the stream usable.
mod common;

use common::*;
use ucx_core::StreamBacklog;

/// Sends `data` on the client's stream and waits until the send is done.
fn send(pair: &Pair, data: &[u8]) {
    wait_on(&[&pair.server, &pair.client], pair.client_ep.stream_send(data).unwrap());
}

/// Fills `backlog` from the server's endpoint until it holds `n` bytes.
fn fill_to(pair: &Pair, backlog: &mut StreamBacklog, n: usize) {
    progress_until(&[&pair.server, &pair.client], "stream bytes", || backlog.fill(&pair.server_ep) >= n);
    assert_eq!(backlog.bytes(), n, "the backlog counts exactly what arrived");
}

#[test]
fn held_bytes_come_back_in_order_then_ucx_gives_the_rest() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut backlog = StreamBacklog::new();
    let first = pattern(75_100, 1);
    for part in [&first[..100], &first[100..5_100], &first[5_100..]] {
        send(&pair, part);
    }
    fill_to(&pair, &mut backlog, first.len());
    let mut head = vec![0u8; 30_000];
    assert_eq!(backlog.read(&mut head), 30_000);
    assert_eq!(head, first[..30_000]);
    // A receive larger than what is held: the backlog first, then UCX from where it ended.
    let mut rest = vec![0u8; 50_000];
    let (copied, recv) = backlog.receive(&pair.server_ep, &mut rest[..]).unwrap();
    assert_eq!(copied, 45_100);
    assert!(backlog.is_empty());
    let later = pattern(4_900, 2);
    send(&pair, &later);
    assert_eq!(wait_on(&[&pair.server, &pair.client], recv).length, 4_900);
    assert_eq!(rest[..copied], first[30_000..]);
    assert_eq!(rest[copied..], later[..]);
}

#[test]
fn chunks_given_back_leave_the_stream_usable() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut backlog = StreamBacklog::new();
    send(&pair, &pattern(10_000, 3));
    fill_to(&pair, &mut backlog, 10_000);
    // One the backlog fills entirely is done at once.
    let mut some = vec![0u8; 4_000];
    let (copied, recv) = backlog.receive(&pair.server_ep, &mut some[..]).unwrap();
    assert!(copied == 4_000 && matches!(recv, ucx_core::Submitted::Done(_)));
    drop(recv);
    assert_eq!(some, pattern(10_000, 3)[..4_000]);
    backlog.clear();
    assert_eq!(backlog.bytes(), 0);
    let next = pattern(64, 4);
    let mut got = vec![0u8; 64];
    let recv = pair.server_ep.stream_recv(&mut got[..]).unwrap();
    send(&pair, &next);
    wait_on(&[&pair.server, &pair.client], recv);
    assert_eq!(got, next);
}

#[test]
fn an_offset_past_the_buffer_is_refused() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut buf = [0u8; 8];
    let e = pair.server_ep.stream_recv_from(&mut buf[..], 9).unwrap_err();
    assert_eq!(e.status(), ucx_core::Status::InvalidParam);
}

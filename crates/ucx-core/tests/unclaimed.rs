//! `Unclaimed` over real UCX on loopback: a sweep takes a watched tag's waiting messages in
//! the order they came and receives get them before anything still in UCX; what it counts
//! leaves out the next message of each tag; an owner over the limit is reported; other tags'
//! messages count against no one; held rendezvous messages can be dropped without fetching them.
mod common;

use common::*;
use ucx_core::{Owned, Unclaimed, Worker, FULL_MASK};

/// Sends `data` with `tag` from the client; the send is kept going until dropped.
fn send(pair: &Pair, data: Vec<u8>, tag: u64) -> Owned<Vec<u8>> {
    pair.client_ep.tag_send_owned(data, tag).unwrap()
}

/// Progresses both workers for a while, so that what the client sent has arrived.
fn settle(pair: &Pair) {
    for _ in 0..2000 {
        pair.server.progress();
        pair.client.progress();
    }
}

/// A waker for a poll of something already complete.
struct NoWake;

impl std::task::Wake for NoWake {
    fn wake(self: std::sync::Arc<Self>) {}
}

/// Receives the next message with `tag` the way a receive must: from `held` first, else
/// from UCX. Returns its bytes.
fn recv_next(pair: &Pair, held: &mut Unclaimed, tag: u64, len: usize) -> Vec<u8> {
    let mut op = match held.take(tag, FULL_MASK) {
        Some(msg) => Owned::submit(Box::new(vec![0u8; len]), true, |b| msg.recv_into(b)).unwrap(),
        None => pair.server.tag_recv_owned(vec![0u8; len], tag, FULL_MASK).unwrap(),
    };
    progress_until(&[&pair.server, &pair.client], "a receive", || op.is_complete());
    let waker = std::task::Waker::from(std::sync::Arc::new(NoWake));
    let mut cx = std::task::Context::from_waker(&waker);
    let std::task::Poll::Ready(done) = op.poll_complete(&mut cx) else { panic!("complete but pending") };
    assert_eq!(done.unwrap().length, len);
    op.into_buffer().unwrap()
}

/// Drops whatever is held, so no send is left pending when the workers go.
fn discard_all(pair: &Pair, held: &mut Unclaimed) {
    for msg in held.drain() {
        assert!(msg.discard_within(std::time::Duration::from_secs(5)));
    }
    settle(pair);
}

fn swept(held: &mut Unclaimed, worker: &Worker) -> Vec<ucx_core::Overflow> {
    held.sweep(worker)
}

#[test]
fn held_messages_come_first_and_in_order() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(None);
    held.watch(50, 1);
    let _sends: Vec<_> = (0..3u8).map(|i| send(&pair, vec![i; 100], 50)).collect();
    settle(&pair);
    assert!(swept(&mut held, &pair.server).is_empty());
    assert_eq!(held.held(), (3, 300));
    assert!(pair.server.tag_probe(50, FULL_MASK).is_none(), "the sweep took them out of UCX's queue");
    // One more, left in UCX: it must come after the held ones.
    let _last = send(&pair, vec![3; 100], 50);
    settle(&pair);
    for i in 0..4u8 {
        assert_eq!(recv_next(&pair, &mut held, 50, 100), vec![i; 100], "message {i} out of order");
    }
    assert_eq!(held.held(), (0, 0));
}

#[test]
fn the_next_message_of_each_tag_is_not_counted_and_an_owner_over_the_limit_is_reported() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(Some(64 << 10));
    held.watch(60, 7);
    held.watch(61, 7);
    held.watch(62, 8);
    // One large message first on each tag, as a peer that sends before its receive is posted:
    // not counted.
    let big = send(&pair, pattern(1 << 20, 1), 60);
    let _other = send(&pair, pattern(1 << 20, 2), 62);
    settle(&pair);
    assert!(swept(&mut held, &pair.server).is_empty(), "the next message of a tag never counts");
    // Two 40 KiB messages more on tag 60 and one on 61: owner 7 counts 80 KiB (61's only
    // message is its next one), over 64 KiB. Owner 8 counts 40 KiB.
    let _more = [60, 60, 61].map(|tag| send(&pair, pattern(40 << 10, 3), tag));
    let _more8 = send(&pair, pattern(40 << 10, 5), 62);
    settle(&pair);
    let over = swept(&mut held, &pair.server);
    assert_eq!(over.len(), 1, "{over:?}");
    assert_eq!((over[0].owner, over[0].messages, over[0].counted), (7, 4, 80 << 10), "{over:?}");
    assert!(over[0].to_string().contains("limit of 65536 bytes"));
    // The rendezvous message is still whole when received from the hold.
    assert_eq!(recv_next(&pair, &mut held, 60, 1 << 20), pattern(1 << 20, 1));
    drop(big);
    discard_all(&pair, &mut held);
}

#[test]
fn a_masked_take_gets_the_oldest_match_across_tags() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(None);
    for tag in [0x71, 0x72, 0x73] {
        held.watch(tag, 1);
    }
    let _s: Vec<_> =
        [(0x72u64, 1u8), (0x71, 2), (0x73, 3), (0x72, 4)].iter().map(|&(t, b)| send(&pair, vec![b; 8], t)).collect();
    settle(&pair);
    swept(&mut held, &pair.server);
    let order: Vec<u8> = std::iter::from_fn(|| held.take(0x70, !0xf))
        .map(|m| {
            let op = Owned::submit(Box::new(vec![0u8; 8]), true, |b| m.recv_into(b)).unwrap();
            progress_until(&[&pair.server, &pair.client], "a receive", || op.is_complete());
            op.into_buffer().unwrap()[0]
        })
        .collect();
    assert_eq!(order, vec![1, 2, 3, 4]);
}

#[test]
fn tags_nobody_watches_are_held_but_count_against_no_one() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(Some(0));
    assert!(swept(&mut held, &pair.server).is_empty());
    let _s = [send(&pair, vec![9; 4096], 81), send(&pair, vec![8; 4096], 81)];
    settle(&pair);
    assert!(swept(&mut held, &pair.server).is_empty());
    assert_eq!(held.held(), (0, 0), "nothing is swept while no tag is watched");
    held.watch(80, 1);
    assert!(swept(&mut held, &pair.server).is_empty(), "tag 81 is nobody's");
    assert_eq!(held.held(), (2, 8192));
    assert!(held.holds(81));
    held.unwatch(1);
    assert!(!held.is_watching());
    assert_eq!(recv_next(&pair, &mut held, 81, 4096), vec![9; 4096]);
    assert_eq!(recv_next(&pair, &mut held, 81, 4096), vec![8; 4096]);
}

#[test]
fn dropping_held_messages_ends_their_senders_even_a_large_rendezvous() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(None);
    held.watch(90, 1);
    // 16 MiB: more than the discard's scratch, so it is received truncated.
    let sends = [send(&pair, pattern(16 << 20, 1), 90), send(&pair, vec![1; 100], 90)];
    settle(&pair);
    swept(&mut held, &pair.server);
    assert_eq!(held.held().0, 2);
    for msg in held.take_all(90) {
        assert!(msg.discard_within(std::time::Duration::from_secs(5)), "a held message could not be dropped");
    }
    progress_until(&[&pair.server, &pair.client], "the senders", || sends.iter().all(Owned::is_complete));
    assert!(!held.holds(90));
    assert!(pair.server.tag_probe(90, FULL_MASK).is_none());
}

#[test]
fn releasing_an_owner_takes_only_its_tags_messages() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(None);
    held.watch(100, 1);
    held.watch(101, 1);
    held.watch(102, 2);
    let _s: Vec<_> = [100u64, 101, 102, 101].iter().map(|&t| send(&pair, vec![t as u8; 16], t)).collect();
    settle(&pair);
    swept(&mut held, &pair.server);
    let released = held.release(1);
    assert_eq!(released.len(), 3);
    assert!(released.iter().all(|m| m.info().sender_tag != 102));
    for msg in released {
        assert!(msg.discard_within(std::time::Duration::from_secs(5)));
    }
    assert_eq!(held.held(), (1, 16), "owner 2's message stays");
    assert_eq!(recv_next(&pair, &mut held, 102, 16), vec![102; 16]);
}

#[test]
fn sweeping_watched_tags_leaves_the_others_in_ucx() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let mut held = Unclaimed::new(Some(1000));
    held.watch(110, 1);
    let _s: Vec<_> = [110u64, 111, 110, 110].iter().map(|&t| send(&pair, vec![t as u8; 600], t)).collect();
    settle(&pair);
    let over = held.sweep_watched(&pair.server);
    assert_eq!(held.held(), (3, 1800));
    assert_eq!((over.len(), over.first().map(|o| o.counted)), (1, Some(1200)), "{over:?}");
    assert!(pair.server.tag_probe(111, FULL_MASK).is_some(), "another tag's message stays in UCX");
    assert_eq!(recv_next(&pair, &mut held, 111, 600), vec![111; 600]);
    discard_all(&pair, &mut held);
}

/// An owner of a [`ucx_core::Hold`] that leaves it when dropped, as an endpoint does.
struct Leaver {
    hold: std::sync::Arc<ucx_core::Hold<Leaver>>,
    key: u64,
}

impl Drop for Leaver {
    fn drop(&mut self) {
        self.hold.release(self.key);
    }
}

#[test]
fn an_owner_whose_last_handle_goes_during_a_sweep_leaves_without_a_deadlock() {
    // The sweep's upgraded handle can be an owner's last: its other holder drops it on another
    // thread meanwhile. Here the other holder lets go from inside the sweep (the stream-bytes
    // callback), so the sweep's handle is the last every time; the owner's drop then calls
    // `release`, which takes the hold's lock. The progress loops of CI's listener test hung
    // there while the sweep still held the lock.
    let ctx = context();
    let pair = connected_pair(&ctx);
    let hold = std::sync::Arc::new(ucx_core::Hold::<Leaver>::new(Some(1 << 20), ucx_core::unclaimed::Scope::Watched));
    let owner = std::sync::Arc::new(Leaver { hold: hold.clone(), key: 7 });
    hold.watch(120, 7, || std::sync::Arc::downgrade(&owner));
    let other_holder = std::sync::Mutex::new(Some(owner));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let worker = pair.server.clone();
    let sweeper = std::thread::spawn(move || {
        let over = hold.sweep_if_due(&worker, |_| {
            other_holder.lock().unwrap().take();
            0
        });
        let _ = done_tx.send((over.len(), other_holder.lock().unwrap().is_none()));
    });
    let outcome = done_rx.recv_timeout(std::time::Duration::from_secs(10));
    assert_eq!(outcome, Ok((0, true)), "the sweep did not return within 10 s: it deadlocked on its own lock");
    sweeper.join().unwrap();
}

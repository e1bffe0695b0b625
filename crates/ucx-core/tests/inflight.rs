//! `Inflight` over real UCX on loopback: an operation finished at start is answered at once,
//! completions are queued by id and taken with their data, cancelling by predicate reaches
//! exactly the chosen operations, a completion drained before the operation was kept is not
//! lost, `spin_until` stops on `done` or its budget, and `wakes_here` counts only completions
//! that woke a task.
mod common;

use std::time::{Duration, Instant};

use common::*;
use ucx_core::{Inflight, Status, FULL_MASK};

/// Keeps a receive of `len` bytes with `tag` on the server, under data `data`; returns its id.
fn keep_recv(pair: &Pair, table: &Inflight<&'static str>, tag: u64, len: usize, data: &'static str) -> u64 {
    let mut owned = pair.server.tag_recv_owned(vec![0u8; len], tag, FULL_MASK).unwrap();
    let (id, finished) = table.start(&mut owned);
    assert!(finished.is_none(), "a receive with no message yet cannot be finished");
    table.keep(id, owned, data);
    id
}

/// Progresses both workers until the table reports a completion; returns the ids.
fn done_ids(pair: &Pair, table: &Inflight<&'static str>) -> Vec<u64> {
    progress_until(&[&pair.server, &pair.client], "a completion", || table.has_done());
    table.take_done()
}

#[test]
fn a_completion_is_queued_by_id_and_taken_with_its_data() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let table = Inflight::new();
    let id = keep_recv(&pair, &table, 10, 4, "first");
    assert!(table.contains(id));
    assert_eq!(table.len(), 1);
    wait_on(&[&pair.server, &pair.client], pair.client_ep.tag_send(&[1u8, 2, 3, 4], 10).unwrap());
    assert_eq!(done_ids(&pair, &table), vec![id]);
    let (result, data) = table.finish(id).expect("finished");
    assert_eq!(result.unwrap().length, 4);
    assert_eq!(data, "first");
    assert!(table.is_empty());
    assert!(table.finish(id).is_none(), "an id is finished once");
}

#[test]
fn an_operation_finished_at_start_is_answered_and_neither_queued_nor_kept() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let table: Inflight<&'static str> = Inflight::new();
    wait_on(&[&pair.server, &pair.client], pair.client_ep.tag_send(&[5u8, 6, 7], 12).unwrap());
    // The message is there before the receive, so UCX finishes the receive in the call.
    progress_until(&[&pair.server, &pair.client], "the message to arrive", || {
        pair.server.tag_probe(12, FULL_MASK).is_some()
    });
    let mut owned = pair.server.tag_recv_owned(vec![0u8; 3], 12, FULL_MASK).unwrap();
    assert!(owned.is_complete(), "a receive of a message already there finishes in the call");
    let (first, finished) = table.start(&mut owned);
    assert_eq!(finished.expect("finished at start").unwrap().length, 3);
    assert_eq!(owned.into_buffer().unwrap(), vec![5, 6, 7]);
    assert!(table.is_empty() && !table.has_done(), "nothing kept or queued for a finished operation");
    let second = keep_recv(&pair, &table, 13, 1, "next");
    assert!(second > first, "ids stay fresh");
}

#[test]
fn cancel_where_cancels_only_the_chosen_operations() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let table = Inflight::new();
    let a = keep_recv(&pair, &table, 20, 8, "a");
    let b = keep_recv(&pair, &table, 21, 8, "b");
    assert_eq!(table.cancel_where(|d| *d == "a"), 1);
    assert_eq!(done_ids(&pair, &table), vec![a]);
    let (result, _) = table.finish(a).unwrap();
    assert_eq!(result.unwrap_err().status(), Status::Canceled);
    assert!(table.contains(b), "the other receive is still in flight");
    assert_eq!(table.cancel(b, |d| d.len()), Some(1));
    assert_eq!(done_ids(&pair, &table), vec![b]);
    assert!(table.finish(b).unwrap().0.is_err());
    assert_eq!(table.cancel(b, |_| ()), None, "nothing to cancel once finished");
}

#[test]
fn a_completion_drained_before_keep_is_queued_again() {
    // Another thread may progress and drain between `start` and `keep`: that drain finds no
    // entry for the id. `keep` must queue the completion again, or it is lost.
    let ctx = context();
    let pair = connected_pair(&ctx);
    let table = Inflight::new();
    let mut owned = pair.server.tag_recv_owned(vec![0u8; 2], 30, FULL_MASK).unwrap();
    let (id, finished) = table.start(&mut owned);
    assert!(finished.is_none());
    wait_on(&[&pair.server, &pair.client], pair.client_ep.tag_send(&[5u8, 6], 30).unwrap());
    progress_until(&[&pair.server, &pair.client], "the receive", || owned.is_complete());
    // The drain of the other thread: the id is taken, but nothing is there to finish.
    assert_eq!(table.take_done(), vec![id]);
    assert!(table.finish(id).is_none());
    table.keep(id, owned, "late");
    assert_eq!(table.take_done(), vec![id], "keep queued the completion again");
    let (result, data) = table.finish(id).unwrap();
    assert_eq!((result.unwrap().length, data), (2, "late"));
}

#[test]
fn take_unfinished_where_removes_only_running_chosen_operations() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let table = Inflight::new();
    let stuck = keep_recv(&pair, &table, 40, 8, "stuck");
    let other = keep_recv(&pair, &table, 41, 8, "other");
    assert_eq!(table.take_unfinished_where(|d| *d == "stuck"), vec!["stuck"]);
    assert!(!table.contains(stuck));
    assert!(table.contains(other));
    table.cancel_all();
    // The removed receive's drop cancelled it too: its id may be reported, with nothing left
    // to finish.
    progress_until(&[&pair.server, &pair.client], "the cancel", || table.take_done().contains(&other));
    assert!(table.finish(stuck).is_none());
    assert!(table.finish(other).unwrap().0.is_err());
    assert!(table.take_all().is_empty());
}

#[test]
fn spin_until_stops_when_done_or_when_the_budget_is_spent() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    // Nothing will arrive: the spin ends at its budget, not long after it.
    let started = Instant::now();
    let spin = pair.server.spin_until(Duration::from_millis(20), || false);
    let took = started.elapsed();
    assert!(!spin.done);
    assert!(took >= Duration::from_millis(20) && took < Duration::from_secs(2), "spun {took:?}");
    // A message already sent: the spin ends as soon as the receive completes.
    let owned = pair.server.tag_recv_owned(vec![0u8; 3], 50, FULL_MASK).unwrap();
    wait_on(&[&pair.client], pair.client_ep.tag_send(&[1u8, 2, 3], 50).unwrap());
    let spin = pair.server.spin_until(Duration::from_secs(10), || owned.is_complete());
    assert!(spin.done);
    assert_eq!(owned.into_buffer(), Some(vec![1u8, 2, 3]));
}

#[test]
fn wakes_here_counts_the_completions_that_woke_a_waiting_task() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    let (mut waited, mut unwaited) = ([0u8; 4], [0u8; 4]);
    let ucx_core::Submitted::InFlight(w) = pair.server.tag_recv(&mut waited[..], 60, FULL_MASK).unwrap() else {
        panic!("nothing was sent yet")
    };
    let ucx_core::Submitted::InFlight(u) = pair.server.tag_recv(&mut unwaited[..], 61, FULL_MASK).unwrap() else {
        panic!("nothing was sent yet")
    };
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    assert!(w.poll_complete(&mut cx).is_pending(), "a task now waits for the first receive");
    let before = ucx_core::wakes_here();
    wait_on(&[&pair.client], pair.client_ep.tag_send(&[1u8; 4], 61).unwrap());
    wait_on(&[&pair.client], pair.client_ep.tag_send(&[2u8; 4], 60).unwrap());
    // The server progresses on this thread, so its completions run here.
    progress_until(&[&pair.server, &pair.client], "both receives", || w.is_complete() && u.is_complete());
    assert_eq!(ucx_core::wakes_here() - before, 1, "only the receive a task waited for woke one");
    let elsewhere = std::thread::spawn(ucx_core::wakes_here).join().unwrap();
    assert_eq!(elsewhere, 0, "another thread's count is its own");
    drop((w, u));
    assert_eq!((waited, unwaited), ([2u8; 4], [1u8; 4]));
}

#[test]
fn spin_until_arms_only_a_worker_someone_armed() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    // Never armed (a polling reactor): a readable wakeup fd is left alone. An arm here would
    // make a shared-memory peer signal every later message through a socket (a system call on
    // each side), which is what made polling latency double in some runs.
    pair.server.signal().unwrap();
    assert!(pair.server.wakeup_pending().unwrap());
    let spin = pair.server.spin_until(Duration::from_millis(5), || false);
    assert!(!spin.done);
    assert!(pair.server.wakeup_pending().unwrap(), "the spin consumed the wakeup: it armed the worker");
    // Once armed (a reactor that sleeps on the fd), the spin hands what the fd signals to the
    // transports (an arm, which drains it), as before.
    while pair.server.arm().unwrap() == ucx_core::Armed::Busy {
        pair.server.progress();
    }
    pair.server.signal().unwrap();
    assert!(pair.server.wakeup_pending().unwrap());
    pair.server.spin_until(Duration::from_millis(5), || false);
    assert!(!pair.server.wakeup_pending().unwrap(), "an armed worker's spin left the wakeup unhandled");
}

/// Pins the calling thread to one CPU (the first it may run on).
fn pin_to_one_cpu() -> usize {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; the calls get and set this thread's
    // affinity through pointers to it, valid for the calls.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set), 0);
        let cpu = (0..libc::CPU_SETSIZE as usize).find(|&c| libc::CPU_ISSET(c, &set)).expect("some CPU");
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one), 0);
        cpu
    }
}

fn pin_to(cpu: usize) {
    // SAFETY: as in pin_to_one_cpu.
    unsafe {
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut one);
        assert_eq!(libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one), 0);
    }
}

#[test]
fn a_spin_that_shares_its_core_yields_more_often() {
    let ctx = context();
    let pair = connected_pair(&ctx);
    // A thread that burns the same CPU as the spin: the spin's yields let it run, so they take
    // long, and the spin shortens its period to give the core away sooner.
    let cpu = pin_to_one_cpu();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let burner = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin_to(cpu);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                std::hint::spin_loop();
            }
        })
    };
    std::thread::sleep(Duration::from_millis(20));
    // Each yield that lets the burner run shortens the period to the contended one; one that
    // returns at once (the scheduler does not always switch) doubles it back. So the period is
    // read after each of many short spins, and must have been shortened at some point.
    let mut shortest = u32::MAX;
    for _ in 0..50 {
        let spin = pair.server.spin_until(Duration::from_millis(4), || false);
        assert!(!spin.done);
        shortest = shortest.min(ucx_core::spin_yield_period());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    burner.join().unwrap();
    assert!(
        shortest < ucx_core::SPIN_YIELD_ROUNDS,
        "a spin sharing its core with a busy thread never shortened its yield period"
    );
    assert!(shortest >= ucx_core::SPIN_YIELD_ROUNDS_CONTENDED);
}

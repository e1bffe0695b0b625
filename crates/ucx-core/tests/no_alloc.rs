//! An operation UCX completes inline costs no heap allocation on our side, nor does a sweep of
//! a hold with nothing over its cap: counted with a global allocator. (UCX's own C
//! allocations are its business and not counted.)
//!
//! One test per binary, so the counter sees only this test's thread... and the test harness:
//! the count is taken only around the measured loop.
mod common;
#[path = "common/counting_alloc.rs"]
mod counting_alloc;

use common::*;
use counting_alloc::{allocations, Counting};
use ucx_core::*;

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn inline_sends_and_receives_allocate_nothing() {
    let ctx = context();
    let p = connected_pair(&ctx);
    let msg = [5u8; 8];
    let mut buf = [0u8; 8];
    // Warm up UCX's pools and lanes.
    for _ in 0..100 {
        let s = p.client_ep.tag_send(&msg, 3).unwrap();
        wait_on(&[&p.server, &p.client], s);
        let r = p.server.tag_recv(&mut buf, 3, FULL_MASK).unwrap();
        wait_on(&[&p.server, &p.client], r);
    }
    let mut inline = 0;
    let before = allocations();
    for _ in 0..1000 {
        let send = p.client_ep.tag_send(&msg, 3).unwrap();
        let send_inline = matches!(send, Submitted::Done(_));
        drop(send);
        // Let the message land in the server's unexpected queue, then receive it inline.
        while p.server.tag_probe(3, FULL_MASK).is_none() {
            p.server.progress();
            p.client.progress();
        }
        let recv = p.server.tag_recv(&mut buf, 3, FULL_MASK).unwrap();
        if let (true, Submitted::Done(c)) = (send_inline, &recv) {
            assert_eq!(c.length, 8);
            inline += 1;
        }
        drop(recv);
    }
    let allocated = allocations() - before;
    assert!(inline > 900, "only {inline} of 1000 send+receive pairs completed inline");
    assert_eq!(allocated, 0, "{allocated} heap allocations in 1000 inline send+receive pairs");

    // The progress loop sweeps a hold every 10 ms beside those operations: once it has seen
    // its owners, a sweep with nothing over the cap allocates nothing either.
    let hold = Hold::<u64>::new(Some(1 << 20), unclaimed::Scope::Watched);
    let owners: Vec<std::sync::Arc<u64>> = (0..4).map(std::sync::Arc::new).collect();
    for (key, owner) in owners.iter().enumerate() {
        hold.watch(100 + key as u64, key as u64, || std::sync::Arc::downgrade(owner));
    }
    let mut swept = 0;
    let sweep = |swept: &mut usize| {
        std::thread::sleep(std::time::Duration::from_millis(11));
        let over = hold.sweep_if_due(&p.server, |_| {
            *swept += 1;
            0
        });
        assert!(over.is_empty());
    };
    sweep(&mut swept);
    let before = allocations();
    for _ in 0..20 {
        sweep(&mut swept);
    }
    let allocated = allocations() - before;
    assert_eq!(swept, 4 * 21, "every sweep looked at the four owners");
    assert_eq!(allocated, 0, "{allocated} heap allocations in 20 sweeps");
}

//! No heap allocation per operation on the hot path when UCX completes it inline: a send that
//! completes inside `ucp_tag_send_nbx` and a receive of a message that already arrived, both
//! awaited through ucx-async's futures, counted with a global allocator. One test per binary.
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use ucx_async::core::Context;
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

struct Counting;
static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: same contract as ours.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[tokio::test]
async fn inline_completions_allocate_nothing() {
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let (ws, wc) =
        (Worker::new(&ctx, ProgressMode::Polling).unwrap(), Worker::new(&ctx, ProgressMode::Polling).unwrap());
    let listener = Listener::bind(&ws, "127.0.0.1:0".parse().unwrap()).unwrap();
    let (server, client) = tokio::join!(listener.accept(), Endpoint::connect(&wc, listener.local_addr()));
    let (server, client) = (server.unwrap(), client.unwrap());
    let msg = [5u8; 8];
    let mut buf = [0u8; 8];
    // Warm up UCX's lanes and our waiter tables.
    for _ in 0..200 {
        client.send(&msg).await.unwrap();
        server.recv(&mut buf).await.unwrap();
    }
    let tag = server.tags().unwrap().msg_recv;
    let mut measured = 0;
    let mut allocated = 0;
    for _ in 0..1000 {
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        client.send(&msg).await.unwrap();
        let sent = ALLOCATIONS.load(Ordering::Relaxed) - before;
        // Let the message arrive first, so the receive completes inline.
        while ws.core().tag_probe(tag, u64::MAX).is_none() {
            tokio::task::yield_now().await;
        }
        let before = ALLOCATIONS.load(Ordering::Relaxed);
        assert_eq!(server.recv(&mut buf).await.unwrap(), 8);
        allocated += sent + ALLOCATIONS.load(Ordering::Relaxed) - before;
        measured += 1;
    }
    assert_eq!(measured, 1000);
    assert_eq!(allocated, 0, "{allocated} heap allocations in 1000 inline send + receive pairs");
}

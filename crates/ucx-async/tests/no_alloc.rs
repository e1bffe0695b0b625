//! No heap allocation per operation on the hot path when UCX completes it inline: a send that
//! completes inside `ucp_tag_send_nbx` and a receive of a message that already arrived, both
//! awaited through ucx-async's futures, counted with a global allocator. One test per binary.

#[path = "../../ucx-core/tests/common/counting_alloc.rs"]
mod counting_alloc;

use counting_alloc::{allocations, Counting};
use ucx_async::core::Context;
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

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
        let before = allocations();
        client.send(&msg).await.unwrap();
        let sent = allocations() - before;
        // Let the message arrive first, so the receive completes inline.
        while !ws.tag_probe(tag, u64::MAX) {
            tokio::task::yield_now().await;
        }
        let before = allocations();
        assert_eq!(server.recv(&mut buf).await.unwrap(), 8);
        allocated += sent + allocations() - before;
        measured += 1;
    }
    assert_eq!(measured, 1000);
    assert_eq!(allocated, 0, "{allocated} heap allocations in 1000 inline send + receive pairs");
}

//! Criterion benchmarks of ucx-async over 127.0.0.1 (the peer on its own thread and runtime):
//! tag ping-pong latency (8 B to 1 MiB), streaming bandwidth (1 MiB and 64 MiB messages, 8 in
//! flight) and message rate (8 B, 256 in flight), each in event, polling and adaptive modes;
//! and the cost of one call into UCX (`ffi_call`: ucx-core opens UCX at run time and calls
//! through a table of function pointers, where a linked library is called through the PLT).
//!
//! `cargo bench -p ucx-async --bench transfer` (add `-- latency` etc. to filter).
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tokio::runtime::Runtime;
use ucx_async::core::Context;
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

const MODES: [(&str, ProgressMode); 3] = [
    ("event", ProgressMode::Event),
    ("polling", ProgressMode::Polling),
    ("adaptive", ProgressMode::Adaptive { spin: Duration::from_micros(100) }),
];

/// What the peer thread does with each message.
#[derive(Clone, Copy)]
enum Peer {
    /// Sends it back.
    Echo,
    /// Receives it; answers a 1-byte message with a 1-byte acknowledgement.
    Sink,
}

/// A client endpoint on this thread's runtime, connected to a peer on its own thread and
/// runtime (as two processes would be: neither side's progress waits for the other's task).
struct Pair {
    rt: Runtime,
    client: Endpoint,
    _worker: Worker,
    peer: Option<std::thread::JoinHandle<()>>,
}

fn context() -> Context {
    Context::builder().option("NET_DEVICES", "lo").option("MM_ERROR_HANDLING", "y").build().expect("context")
}

fn pair(mode: ProgressMode, peer: Peer, max: usize) -> Pair {
    let (tx, rx) = std::sync::mpsc::channel();
    let peer = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        rt.block_on(async {
            let w = Worker::new(&context(), mode).expect("worker");
            let l = Listener::bind(&w, "127.0.0.1:0".parse().expect("address")).expect("listener");
            tx.send(l.local_addr()).expect("report address");
            let ep = l.accept().await.expect("accept");
            let mut buf = vec![0u8; max];
            // Until the client closes.
            while let Ok(n) = ep.recv(&mut buf[..]).await {
                let reply = match peer {
                    Peer::Echo => &buf[..n],
                    Peer::Sink if n == 1 => &buf[..1],
                    Peer::Sink => continue,
                };
                if ep.send(reply).await.is_err() {
                    break;
                }
            }
        })
    });
    let addr = rx.recv().expect("peer address");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
    let (client, worker) = rt.block_on(async {
        let w = Worker::new(&context(), mode).expect("worker");
        (Endpoint::connect(&w, addr).await.expect("connect"), w)
    });
    Pair { rt, client, _worker: worker, peer: Some(peer) }
}

impl Drop for Pair {
    fn drop(&mut self) {
        let _ = self.rt.block_on(self.client.close());
        if let Some(p) = self.peer.take() {
            let _ = p.join();
        }
    }
}

fn latency(c: &mut Criterion) {
    let mut g = c.benchmark_group("latency");
    for (name, mode) in MODES {
        let p = pair(mode, Peer::Echo, 1 << 20);
        for size in [8usize, 1024, 65_536, 1 << 20] {
            g.throughput(Throughput::Bytes(2 * size as u64));
            g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
                let (out, mut back) = (vec![1u8; size], vec![0u8; size]);
                b.iter_custom(|iters| {
                    p.rt.block_on(async {
                        let t0 = Instant::now();
                        for _ in 0..iters {
                            p.client.send(&out[..]).await.expect("send");
                            p.client.recv(&mut back[..]).await.expect("recv");
                        }
                        t0.elapsed() / 2 // one-way
                    })
                })
            });
        }
    }
    g.finish();
}

/// Sends `count` messages of `size`, `window` at a time, then waits for the peer's
/// acknowledgement that it received them all; returns the elapsed time.
async fn stream(p: &Pair, size: usize, count: usize, window: usize) -> Duration {
    let out = vec![1u8; size];
    let mut ack = [0u8; 1];
    let t0 = Instant::now();
    let mut sent = 0;
    while sent < count {
        let n = window.min(count - sent);
        let sends: Vec<_> = (0..n).map(|_| Box::pin(p.client.send(&out[..]))).collect();
        for s in sends {
            s.await.expect("send");
        }
        sent += n;
    }
    p.client.send(&[0u8][..]).await.expect("send");
    p.client.recv(&mut ack[..]).await.expect("ack");
    t0.elapsed()
}

fn bandwidth(c: &mut Criterion) {
    let mut g = c.benchmark_group("bandwidth");
    g.sample_size(10);
    for (name, mode) in MODES {
        let p = pair(mode, Peer::Sink, 64 << 20);
        for size in [1usize << 20, 64 << 20] {
            g.throughput(Throughput::Bytes(8 * size as u64));
            g.bench_with_input(BenchmarkId::new(name, size), &size, |b, &size| {
                b.iter_custom(|iters| p.rt.block_on(async { stream(&p, size, 8 * iters as usize, 8).await }))
            });
        }
    }
    g.finish();
}

fn message_rate(c: &mut Criterion) {
    let mut g = c.benchmark_group("message_rate");
    for (name, mode) in MODES {
        let p = pair(mode, Peer::Sink, 8);
        g.throughput(Throughput::Elements(256));
        g.bench_function(BenchmarkId::new(name, 8), |b| {
            b.iter_custom(|iters| p.rt.block_on(async { stream(&p, 8, 256 * iters as usize, 256).await }))
        });
    }
    g.finish();
}

/// One call into UCX through ucx-core: an idle worker's `ucp_worker_progress`, where UCX
/// does almost nothing, so the call's own cost shows.
fn ffi_call(c: &mut Criterion) {
    let mut g = c.benchmark_group("ffi_call");
    let ctx = context();
    let worker = ucx_async::core::Worker::new(&ctx).expect("worker");
    g.bench_function("idle_progress", |b| b.iter(|| worker.progress()));
    g.finish();
}

criterion_group!(benches, latency, bandwidth, message_rate, ffi_call);
criterion_main!(benches);

//! Two processes exchanging tag messages over 127.0.0.1 with ucx-core (busy-polling, no async
//! runtime), printing the one-way latency and bandwidth it measured for each message size.
//!
//! Run: `cargo run --release -p ucx-core --example core_pingpong` (it starts its own server
//! process). `--server` runs only the server and prints its port; `--client PORT` only the
//! client; `--iters N` sets the iterations per size.
#[path = "common/round_trips.rs"]
mod round_trips;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use round_trips::{iters_for, WARMUP};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ucx_core::{
    ConnRequest, Context, Endpoint, EndpointParams, Listener, Result, Status, Submitted, Worker, FULL_MASK,
};

const SIZES: &[usize] = &[8, 64, 1024, 8192, 65_536, 1 << 20];
const PING: u64 = 1;
const PONG: u64 = 2;

fn context() -> Result<Context> {
    Context::builder()
        // Loopback only: keep UCX's network transports on `lo`.
        .option("NET_DEVICES", "lo")
        // Shared-memory transports support peer-failure handling only when asked; without
        // this, endpoints with error handling (our default) fall back to TCP on one host. For
        // trusted peers only: one killed mid-send jams the shared queue (docs/reliability.md).
        .option("MM_ERROR_HANDLING", "y")
        .build()
}

/// Set when the peer's endpoint fails, so neither side spins forever on a dead peer.
static PEER_FAILED: AtomicBool = AtomicBool::new(false);

fn endpoint_params() -> EndpointParams {
    EndpointParams::default().on_error(|_| PEER_FAILED.store(true, Ordering::Relaxed))
}

fn check_peer() -> Result<()> {
    if PEER_FAILED.load(Ordering::Relaxed) {
        return Err(ucx_core::Error::with_detail("core_pingpong", Status::ConnectionReset, "the peer went away"));
    }
    Ok(())
}

/// Busy-progresses until the operation is done (or the peer fails).
fn finish(worker: &Worker, s: Submitted<'_>) -> Result<usize> {
    match s {
        Submitted::Done(c) => Ok(c.length),
        Submitted::InFlight(r) => {
            while !r.is_complete() {
                worker.progress();
                check_peer()?;
            }
            r.wait().map(|c| c.length)
        }
    }
}

fn server(iters: usize) -> Result<()> {
    let ctx = context()?;
    let worker = Worker::new(&ctx)?;
    let pending: Arc<Mutex<Option<ConnRequest>>> = Arc::default();
    let p = pending.clone();
    let listener = Listener::bind(&worker, "127.0.0.1:0".parse().expect("literal address"), move |r| {
        *p.lock().unwrap_or_else(|e| e.into_inner()) = Some(r)
    })?;
    println!("PORT {}", listener.local_addr().port());
    // A client that never comes (its parent was killed) must not leave us spinning.
    let deadline = Instant::now() + Duration::from_secs(30);
    let req = loop {
        worker.progress();
        if let Some(r) = pending.lock().unwrap_or_else(|e| e.into_inner()).take() {
            break r;
        }
        if Instant::now() > deadline {
            return Err(ucx_core::Error::with_detail("core_pingpong", Status::TimedOut, "no client within 30 s"));
        }
    };
    let ep = Endpoint::accept(&worker, req, endpoint_params())?;
    let mut buf = vec![0u8; *SIZES.last().unwrap_or(&8)];
    for &size in SIZES {
        for _ in 0..iters_for(size, iters) + WARMUP {
            finish(&worker, worker.tag_recv(&mut buf[..size], PING, FULL_MASK)?)?;
            finish(&worker, ep.tag_send(&buf[..size], PONG)?)?;
        }
    }
    Ok(())
}

fn client(port: u16, iters: usize) -> Result<()> {
    let ctx = context()?;
    let worker = Worker::new(&ctx)?;
    let ep = Endpoint::connect(&worker, ([127, 0, 0, 1], port).into(), endpoint_params())?;
    let mut out = vec![7u8; *SIZES.last().unwrap_or(&8)];
    let mut back = vec![0u8; out.len()];
    println!("ucx-core tag ping-pong over 127.0.0.1, two processes, busy polling");
    let (major, minor, release) = ucx_core::version::runtime()?;
    println!(
        "UCX {major}.{minor}.{release}, transports: {}",
        ctx.config().get("TLS").map(String::as_str).unwrap_or("?")
    );
    round_trips::print_header();
    for &size in SIZES {
        let n = iters_for(size, iters);
        let mut rtts = Vec::with_capacity(n);
        for i in 0..n + WARMUP {
            out[0] = i as u8;
            let t0 = Instant::now();
            let recv = worker.tag_recv(&mut back[..size], PONG, FULL_MASK)?;
            finish(&worker, ep.tag_send(&out[..size], PING)?)?;
            let got = finish(&worker, recv)?;
            let rtt = t0.elapsed();
            assert_eq!(got, size, "echo length");
            assert_eq!(back[0], out[0], "echo content");
            if i >= WARMUP {
                rtts.push(rtt);
            }
        }
        round_trips::print_row(size, rtts);
    }
    Ok(())
}

const USAGE: &str = "\
Tag ping-pong between two processes over 127.0.0.1 with ucx-core (busy-polling, no async
runtime); prints one-way latency and bandwidth per message size.

usage: core_pingpong [--iters N] [--server | --client PORT]
  --iters N   round trips per size (default 10000; fewer for large sizes)
  --server    only the server: prints its port and serves one client
  --client P  only the client, against a server on 127.0.0.1:P
With neither, it starts its own server process.";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let iters = args
        .iter()
        .position(|a| a == "--iters")
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let result = if args.iter().any(|a| a == "--server") {
        server(iters)
    } else if let Some(i) = args.iter().position(|a| a == "--client") {
        match args.get(i + 1).and_then(|p| p.parse().ok()) {
            Some(port) => client(port, iters),
            None => {
                eprintln!("usage: core_pingpong --client PORT");
                std::process::exit(2);
            }
        }
    } else {
        run_both(iters)
    };
    if let Err(e) = result {
        eprintln!("core_pingpong: {e}");
        std::process::exit(1);
    }
}

/// Starts the server as a child process and runs the client against it.
fn run_both(iters: usize) -> Result<()> {
    let server_args = ["--server".to_string(), "--iters".to_string(), iters.to_string()];
    server_process::run_with_server("core_pingpong", &server_args, |port| client(port, iters))
}

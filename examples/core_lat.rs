//! The floor under ucx-async's latency: an 8-byte tag ping-pong with ucx-core alone (no async
//! runtime, no endpoint state), connected as `ucx_perftest` connects (worker addresses swapped
//! over a TCP socket, no peer-error handling), busy-polling. Between this and perftest is what
//! UCX usage and ucx-core's requests cost; between this and `bench -t tag_lat --mode polling
//! --no-error-handling --worker-address` is what ucx-async's layer costs.
//! `scripts/bench_vs_perftest.sh` prints it as its own row.
//!
//! `cargo run --release -p ucx-core --example core_lat -- [--iters N] [--single]`
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use ucx_core::{Context, Endpoint, EndpointParams, Submitted, ThreadMode, Worker, WorkerAddress};

const USAGE: &str = "\
Tag ping-pong of 8 bytes with ucx-core only, worker addresses swapped over TCP as ucx_perftest
does, no error handling, busy polling; prints the median one-way latency.

usage: core_lat [--iters N] [--single]
  --iters N   round trips (default 200000)
  --single    workers in UCS_THREAD_MODE_SINGLE, as perftest's (default MULTI, as ucx-async's)
It starts its own peer process (the same binary with --server).";

const WARMUP: usize = 1000;
const TAG: u64 = 0x1a7;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let single = args.iter().any(|a| a == "--single");
    let iters = match args.iter().position(|a| a == "--iters") {
        Some(i) => match args.get(i + 1).and_then(|v| v.parse().ok()) {
            Some(n) => n,
            None => {
                eprintln!("core_lat: --iters needs a number");
                std::process::exit(2);
            }
        },
        None => 200_000,
    };
    let result = if args.get(1).map(String::as_str) == Some("--server") {
        serve(single, iters)
    } else {
        let mut server_args = vec!["--server".to_string(), "--iters".into(), iters.to_string()];
        if single {
            server_args.push("--single".into());
        }
        server_process::run_with_server("core_lat", &server_args, |port| {
            ping_pong(TcpStream::connect(("127.0.0.1", port))?, false, single, iters)
        })
    };
    if let Err(e) = result {
        eprintln!("core_lat: {e}");
        std::process::exit(1);
    }
}

/// The peer: binds a kernel-chosen port, says it on stdout (`PORT n`), answers one client.
fn serve(single: bool, iters: usize) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("PORT {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let (sock, _) = listener.accept()?;
    ping_pong(sock, true, single, iters)
}

fn ping_pong(mut sock: TcpStream, server: bool, single: bool, iters: usize) -> Result<()> {
    let ctx = Context::builder().option("NET_DEVICES", "lo").build()?;
    let mode = if single { ThreadMode::Single } else { ThreadMode::Multi };
    // SAFETY: the worker is used from this thread only (SINGLE's rule; MULTI has none).
    let worker = unsafe { Worker::with_thread_mode(&ctx, mode)? };
    let ours = worker.address()?;
    sock.write_all(&(ours.as_bytes().len() as u32).to_le_bytes())?;
    sock.write_all(ours.as_bytes())?;
    let mut len = [0u8; 4];
    sock.read_exact(&mut len)?;
    let mut theirs = vec![0u8; u32::from_le_bytes(len) as usize];
    sock.read_exact(&mut theirs)?;
    let peer = WorkerAddress::from_bytes(&theirs).map_err(|e| format!("the peer's worker address: {e}"))?;
    let ep = Endpoint::connect_to_worker(&worker, &peer, EndpointParams::default().error_handling(false))?;

    let wait = |s: Submitted<'_>| -> ucx_core::Result<()> {
        if let Submitted::InFlight(r) = s {
            while !r.is_complete() {
                worker.progress();
            }
            r.wait()?;
        }
        Ok(())
    };
    let out = [1u8; 8];
    let mut back = [0u8; 8];
    let mut rtts = Vec::with_capacity(if server { 0 } else { iters });
    // One clock read per round trip, as perftest takes one timestamp per iteration.
    let mut t0 = Instant::now();
    for i in 0..iters + WARMUP {
        if server {
            wait(worker.tag_recv(&mut back, TAG, u64::MAX)?)?;
            wait(ep.tag_send(&out, TAG)?)?;
        } else {
            wait(ep.tag_send(&out, TAG)?)?;
            wait(worker.tag_recv(&mut back, TAG, u64::MAX)?)?;
            let now = Instant::now();
            if i >= WARMUP {
                rtts.push(now - t0);
            }
            t0 = now;
        }
    }
    // Both sides done before either tears down: a byte each way on the socket.
    sock.write_all(b"x")?;
    sock.read_exact(&mut len[..1])?;
    if !server {
        rtts.sort();
        let half = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
        println!(
            "RESULT test=tag_lat layer=ucx-core thread_mode={} size=8 iters={iters} median_us={:.3} p99_us={:.3}",
            if single { "single" } else { "multi" },
            half(rtts[rtts.len() / 2]),
            half(rtts[rtts.len() * 99 / 100]),
        );
    }
    Ok(())
}

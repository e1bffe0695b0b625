//! Echo between two processes over 127.0.0.1 with ucx-async: the server receives each message
//! and sends it back; the client times the round trips and prints latency and bandwidth.
//!
//! Run: `cargo run --release -p ucx-async --example echo` (starts its own server process).
//! Options: `--mode event|polling|adaptive` (default event), `--iters N`, `--server` (only the
//! server; prints `PORT n`), `--client PORT` (only the client).
#[path = "common/accept_or_exit.rs"]
mod accept_or_exit;
#[path = "common/progress_mode.rs"]
mod progress_mode;
#[path = "common/round_trips.rs"]
mod round_trips;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use accept_or_exit::accept_or_exit;
use round_trips::{iters_for, WARMUP};
use std::time::Instant;

use ucx_async::core::Context;
use ucx_async::Result;
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

const SIZES: &[usize] = &[8, 1024, 65_536, 1 << 20];

/// The library's defaults (peer-failure handling: small messages over UCX's TCP, those of
/// 64 KiB and more by the same-host single-copy path), on loopback only.
fn context() -> Result<Context> {
    Ok(Context::builder().option("NET_DEVICES", "lo").build()?)
}

async fn server(mode: ProgressMode, iters: usize) -> Result<()> {
    let ctx = context()?;
    let worker = Worker::new(&ctx, mode)?;
    let listener = Listener::bind(&worker, "127.0.0.1:0".parse().expect("literal address"))?;
    println!("PORT {}", listener.local_addr().port());
    let ep = accept_or_exit(&listener).await?;
    let mut buf = vec![0u8; *SIZES.last().unwrap_or(&8)];
    for &size in SIZES {
        for _ in 0..iters_for(size, iters) + WARMUP {
            let n = ep.recv(&mut buf[..size]).await?;
            ep.send(&buf[..n]).await?;
        }
    }
    // The client closes first; wait for that (a receive fails once it has).
    let _ = ep.recv(&mut buf[..1]).await;
    Ok(())
}

async fn client(port: u16, mode: ProgressMode, iters: usize) -> Result<()> {
    let ctx = context()?;
    let worker = Worker::new(&ctx, mode)?;
    let ep = Endpoint::connect(&worker, ([127, 0, 0, 1], port).into()).await?;
    let out = vec![7u8; *SIZES.last().unwrap_or(&8)];
    let mut back = vec![0u8; out.len()];
    println!("ucx-async echo over 127.0.0.1, two processes, {mode:?} mode");
    round_trips::print_header();
    for &size in SIZES {
        let n = iters_for(size, iters);
        let mut rtts = Vec::with_capacity(n);
        for i in 0..n + WARMUP {
            let t0 = Instant::now();
            ep.send(&out[..size]).await?;
            let got = ep.recv(&mut back[..size]).await?;
            let rtt = t0.elapsed();
            assert_eq!(got, size, "echo length");
            if i >= WARMUP {
                rtts.push(rtt);
            }
        }
        assert_eq!(back[..size], out[..size], "echo content");
        round_trips::print_row(size, rtts);
    }
    ep.close().await
}

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map(String::as_str)
}

const USAGE: &str = "\
Echo between two processes over 127.0.0.1 with ucx-async; prints one-way latency and
bandwidth per message size.

usage: echo [--mode event|polling|adaptive] [--iters N] [--server | --client PORT]
  --mode      how the reactor drives progress (default event)
  --iters N   round trips per size (default 10000; fewer for large sizes)
  --server    only the server: prints `PORT n` and serves one client
  --client P  only the client, against a server on 127.0.0.1:P
With neither, it starts its own server process.";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let iters = arg(&args, "--iters").and_then(|v| v.parse().ok()).unwrap_or(10_000);
    let mode = progress_mode::progress_mode("echo", arg(&args, "--mode").unwrap_or("event"));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let result = if args.iter().any(|a| a == "--server") {
        rt.block_on(server(mode, iters))
    } else if let Some(port) = arg(&args, "--client") {
        match port.parse() {
            Ok(p) => rt.block_on(client(p, mode, iters)),
            Err(_) => {
                eprintln!("echo: --client needs a port number, got {port:?}");
                std::process::exit(2);
            }
        }
    } else {
        run_both(&rt, &args, mode, iters)
    };
    if let Err(e) = result {
        eprintln!("echo: {e}");
        std::process::exit(1);
    }
}

/// Starts the server as a child process and runs the client against it.
fn run_both(rt: &tokio::runtime::Runtime, args: &[String], mode: ProgressMode, iters: usize) -> Result<()> {
    let mode_arg = arg(args, "--mode").unwrap_or("event").to_string();
    let server_args = ["--server".into(), "--mode".into(), mode_arg, "--iters".into(), iters.to_string()];
    server_process::run_with_server("echo", &server_args, |port| rt.block_on(client(port, mode, iters)))
}

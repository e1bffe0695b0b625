//! Tag ping-pong of device memory between two processes with ucx-async, to set beside
//! `ucx_perftest -t tag_lat -m cuda` and ucp's CuPy benchmark: where those differ,
//! this says whether the Rust core or the Python layer above it pays. Both sides hold
//! `cust::DeviceBuffer`s; the memory type is passed to UCX. Endpoints have no peer-failure
//! handling, as `ucx_perftest`'s. `UCX_*` variables apply as usual (run it under the same ones
//! as the tool it is compared with).
//!
//! Prints one `bench_cuda:` line per size (median one-way latency = half the median round trip,
//! and size / that), then a summary line. Without a CUDA device it says so and exits with
//! status 2; if either side fails, the other is stopped and it exits with status 1.
//!
//! Run: `cargo run --release -p ucx-async --features cuda --example bench_cuda -- --mode polling`
#[path = "common/accept_or_exit.rs"]
mod accept_or_exit;
#[path = "common/oob.rs"]
mod oob;
#[path = "common/progress_mode.rs"]
mod progress_mode;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use std::time::{Duration, Instant};

use accept_or_exit::accept_or_exit;
use cust::memory::DeviceBuffer;
use ucx_async::core::Context;
use ucx_async::{ConnectOptions, Endpoint, Flavour, Listener, Worker};

type BoxError = Box<dyn std::error::Error>;

const USAGE: &str = "\
Tag ping-pong of device memory between two processes (ucx-async, cust buffers), to compare
with ucx_perftest -t tag_lat -m cuda. Needs a CUDA GPU (exits 2 without one).

usage: bench_cuda [--sizes B,B,...] [-n ITERS | --full] [--mode event|polling|adaptive]
                  [--worker-address] [--server | --client PORT]
  --sizes   message sizes in bytes (default 8,1048576,67108864)
  -n        timed round trips per size (default: 200 up to 64 KiB, 100 up to 4 MiB, else 20,
            a quick check); a tenth as many untimed first
  --full    as the harness's perftest rows: 5000, 1000 and 100
  --mode    how the reactor drives progress: event (default), polling, adaptive[=US]
  --worker-address  connect by worker address, as ucx_perftest does (default: a listener)
  --server / --client  one side only (the server prints its port)
With neither, it starts its own server process.";

#[derive(Clone)]
struct Opts {
    sizes: Vec<usize>,
    iters: Option<usize>,
    /// Round trips per size as the GPU harness runs ucx_perftest, instead of a quick check.
    full: bool,
    mode: String,
    /// Connect by worker address (as ucx_perftest) instead of through a listener.
    worker_address: bool,
}

impl Opts {
    fn iters(&self, size: usize) -> usize {
        let (small, medium, large) = if self.full { (5000, 1000, 100) } else { (200, 100, 20) };
        self.iters.unwrap_or(match size {
            0..=65_536 => small,
            65_537..=4_194_304 => medium,
            _ => large,
        })
    }

    /// The same options, for the server process.
    fn args(&self) -> Vec<String> {
        let sizes = self.sizes.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
        let mut a = vec!["--sizes".to_string(), sizes, "--mode".into(), self.mode.clone()];
        if let Some(n) = self.iters {
            a.extend(["-n".to_string(), n.to_string()]);
        }
        if self.full {
            a.push("--full".into());
        }
        if self.worker_address {
            a.push("--worker-address".into());
        }
        a
    }
}

fn fail(msg: String) -> ! {
    eprintln!("bench_cuda: {msg}");
    std::process::exit(2)
}

fn parse(args: &[String]) -> Opts {
    let get = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let sizes = match get("--sizes") {
        None => vec![8, 1 << 20, 64 << 20],
        Some(s) => s
            .split(',')
            .map(|v| v.trim().parse::<usize>().ok().filter(|&n| n > 0))
            .collect::<Option<Vec<_>>>()
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| fail(format!("--sizes needs sizes in bytes (at least 1), comma-separated, got {s:?}"))),
    };
    let iters = get("-n").map(|v| {
        v.parse::<usize>().ok().filter(|&n| n > 0).unwrap_or_else(|| fail(format!("-n needs a count, got {v:?}")))
    });
    let mode = get("--mode").unwrap_or_else(|| "event".into());
    progress_mode::progress_mode("bench_cuda", &mode); // checks the name
    let flag = |f: &str| args.iter().any(|a| a == f);
    Opts { sizes, iters, full: flag("--full"), mode, worker_address: flag("--worker-address") }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let opts = parse(&args);
    let _cuda = match cust::quick_init() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bench_cuda: no CUDA device available ({e:?}); this benchmark needs a GPU");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let client_port = args.iter().position(|a| a == "--client").and_then(|i| args.get(i + 1));
    let result = if args.iter().any(|a| a == "--server") {
        rt.block_on(server(opts))
    } else if let Some(port) = client_port {
        match port.parse() {
            Ok(port) => rt.block_on(client(opts, port)),
            Err(_) => Err(format!("--client needs a port, got {port:?}").into()),
        }
    } else {
        let mut server_args = vec!["--server".to_string()];
        server_args.extend(opts.args());
        server_process::run_with_server("bench_cuda", &server_args, |port| rt.block_on(client(opts, port)))
    };
    if let Err(e) = result {
        eprintln!("bench_cuda: {e}");
        std::process::exit(1);
    }
}

fn context() -> Result<Context, BoxError> {
    Ok(Context::builder().option("NET_DEVICES", "lo").build()?)
}

fn options() -> ConnectOptions {
    ConnectOptions { error_handling: false, ..Default::default() }
}

async fn server(o: Opts) -> Result<(), BoxError> {
    let worker = Worker::new(&context()?, progress_mode::progress_mode("bench_cuda", &o.mode))?;
    let ep = if o.worker_address {
        oob::server(&worker, options()).await?
    } else {
        let any = "127.0.0.1:0".parse()?;
        let listener = Listener::bind_with(&worker, any, Flavour::UcxPy, options())?;
        println!("PORT {}", listener.local_addr().port());
        accept_or_exit(&listener).await?
    };
    for &size in &o.sizes {
        let mut buf = DeviceBuffer::from_slice(&vec![0u8; size])?;
        let n = o.iters(size);
        for _ in 0..n + n / 10 {
            ep.recv(&mut buf).await?;
            ep.send(&buf).await?;
        }
    }
    // Wait for the client's goodbye (or its close), so the last reply is not cut off.
    let _ = ep.recv(&mut [0u8; 1][..]).await;
    Ok(())
}

async fn client(o: Opts, port: u16) -> Result<(), BoxError> {
    let worker = Worker::new(&context()?, progress_mode::progress_mode("bench_cuda", &o.mode))?;
    let ep = if o.worker_address {
        oob::client(&worker, port, options()).await?
    } else {
        Endpoint::connect_with(&worker, ([127, 0, 0, 1], port).into(), options()).await?
    };
    let mut summary = Vec::new();
    for &size in &o.sizes {
        let out = DeviceBuffer::from_slice(&vec![1u8; size])?;
        let mut back = DeviceBuffer::from_slice(&vec![0u8; size])?;
        let n = o.iters(size);
        let mut rtts = Vec::with_capacity(n);
        for i in 0..n + n / 10 {
            let t0 = Instant::now();
            ep.send(&out).await?;
            let got = ep.recv(&mut back).await?;
            if got != size {
                return Err(format!("received {got} bytes, expected {size}").into());
            }
            if i >= n / 10 {
                rtts.push(t0.elapsed());
            }
        }
        rtts.sort();
        let one_way = |d: Duration| d.as_secs_f64() / 2.0;
        let median = one_way(rtts[rtts.len() / 2]);
        println!(
            "bench_cuda: size={size} mode={} connect={} iters={n} median_us={:.1} p99_us={:.1} GiBps={:.2}",
            o.mode,
            if o.worker_address { "address" } else { "listener" },
            median * 1e6,
            one_way(rtts[rtts.len() * 99 / 100]) * 1e6,
            size as f64 / median / (1u64 << 30) as f64
        );
        summary.push(format!("{size} B {:.1} µs", median * 1e6));
    }
    // Which transports UCX chose (ucp_ep_print_info's lane lines).
    for line in ep.core().info().lines().filter(|l| l.contains("lane[")) {
        println!("# {}", line.trim());
    }
    ep.send(&[0u8; 0][..]).await?; // goodbye
    ep.close().await?;
    println!("bench_cuda: one-way median ({} mode): {}", o.mode, summary.join(", "));
    Ok(())
}

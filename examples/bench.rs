//! A benchmark CLI whose workloads match `ucx_perftest`'s, between two processes over
//! 127.0.0.1 with ucx-async, so the two run side by side (`scripts/bench_vs_perftest.sh`).
//!
//! - `tag_lat`: ping-pong of `-s` bytes, `-n` times; one-way latency = half the round trip
//!   (median, average, 99th percentile).
//! - `tag_bw`: the client streams `-n` messages of `-s` bytes with up to `-w` sends
//!   outstanding; the server receives them and acknowledges the last; bandwidth = bytes / time.
//! - `stream_lat`, `stream_bw`: the same over the stream API; `ucp_am_lat`, `ucp_am_bw`: over
//!   active messages (UCX-Py's way: `Endpoint::am_send`, received with `am_recv`).
//!
//! `cargo run --release -p ucx-async --example bench -- -t tag_lat -s 8 -n 100000 --mode polling`
//! (`--no-error-handling`: endpoints without peer-failure handling, like `ucx_perftest`'s;
//! `--worker-address`: connect by worker address, as `ucx_perftest` does).
//!
//! `--sweep [--max-size BYTES] [--plot FILE.svg]`: tag latency and bandwidth from 8 B up to
//! 64 MiB (by factors of 8), ours and `ucx_perftest`'s in one run, as a table and a plot.
#[path = "common/accept_or_exit.rs"]
mod accept_or_exit;
#[path = "common/oob.rs"]
mod oob;
#[path = "common/plot.rs"]
mod plot;
#[path = "common/progress_mode.rs"]
mod progress_mode;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/sweep.rs"]
mod sweep;
#[path = "common/usage.rs"]
mod usage;

use accept_or_exit::accept_or_exit;
use std::time::{Duration, Instant};

use ucx_async::core::Context;
use ucx_async::Result;
use ucx_async::{ConnectOptions, Endpoint, Flavour, Listener, Worker};

#[derive(Clone)]
struct Opts {
    test: String,
    size: usize,
    iters: usize,
    window: usize,
    mode: String,
    /// Peer-failure handling on the endpoints (off: as `ucx_perftest`, and no shared-memory
    /// error-handling cost).
    error_handling: bool,
    /// Connect as `ucx_perftest` does (see [`oob`]) instead of through a listener.
    worker_address: bool,
}

fn parse() -> (Opts, Option<&'static str>, Option<u16>) {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let get = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let num = |k: &str, d: usize| match get(k) {
        None => d,
        Some(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("bench: {k} needs a number, got {v:?}");
            std::process::exit(2)
        }),
    };
    let opts = Opts {
        test: get("-t").unwrap_or_else(|| "tag_lat".into()),
        size: num("-s", 8),
        iters: num("-n", 100_000),
        window: num("-w", 32).max(1),
        mode: get("--mode").unwrap_or_else(|| "event".into()),
        error_handling: !args.iter().any(|a| a == "--no-error-handling"),
        worker_address: args.iter().any(|a| a == "--worker-address"),
    };
    if Api::of(&opts.test).is_none() {
        eprintln!("bench: -t must be one of {}, got {:?}", TESTS.join(", "), opts.test);
        std::process::exit(2);
    }
    if opts.size == 0 && opts.test.starts_with("stream") {
        eprintln!("bench: stream tests need -s of at least 1 byte");
        std::process::exit(2);
    }
    let role = if args.iter().any(|a| a == "--server") { Some("server") } else { None };
    let port = get("--client").map(|p| {
        p.parse().unwrap_or_else(|_| {
            eprintln!("bench: --client needs a port");
            std::process::exit(2)
        })
    });
    (opts, role, port)
}

fn context() -> Result<Context> {
    // Loopback only; shared memory with peer-failure handling, for speed between two processes
    // that trust each other (a peer killed mid-send jams the shared queue: docs/reliability.md).
    Ok(Context::builder().option("NET_DEVICES", "lo").option("MM_ERROR_HANDLING", "y").build()?)
}

const WARMUP: usize = 1000;

/// The workloads, named as `ucx_perftest` names them.
const TESTS: [&str; 6] = ["tag_lat", "tag_bw", "stream_lat", "stream_bw", "ucp_am_lat", "ucp_am_bw"];

/// Which UCP API a workload's messages go through.
#[derive(Clone, Copy)]
enum Api {
    Tag,
    Stream,
    Am,
}

impl Api {
    fn of(test: &str) -> Option<Api> {
        match test {
            "tag_lat" | "tag_bw" => Some(Api::Tag),
            "stream_lat" | "stream_bw" => Some(Api::Stream),
            "ucp_am_lat" | "ucp_am_bw" => Some(Api::Am),
            _ => None,
        }
    }

    async fn send(self, ep: &Endpoint, buf: &[u8]) -> Result<()> {
        match self {
            Api::Tag => ep.send(buf).await,
            Api::Stream => ep.stream_send(buf).await,
            Api::Am => ep.am_send(buf).await,
        }
    }

    /// One message into `buf` (an active message lands in a buffer of the worker's
    /// allocator instead, sized by the message).
    async fn recv(self, ep: &Endpoint, buf: &mut [u8]) -> Result<()> {
        match self {
            Api::Tag => ep.recv(buf).await.map(drop),
            Api::Stream => ep.stream_recv(buf).await,
            Api::Am => ep.am_recv().await.map(drop),
        }
    }
}

async fn server(o: Opts) -> Result<()> {
    let ctx = context()?;
    let worker = Worker::new(&ctx, progress_mode::progress_mode("bench", &o.mode))?;
    let options = ConnectOptions { error_handling: o.error_handling, ..Default::default() };
    let ep = if o.worker_address {
        oob::server(&worker, options).await?
    } else {
        let any = "127.0.0.1:0".parse().expect("literal address");
        let listener = Listener::bind_with(&worker, any, Flavour::UcxPy, options)?;
        println!("PORT {}", listener.local_addr().port());
        accept_or_exit(&listener).await?
    };
    // Tells a supervisor (tests/peer_kill.rs) that the transfer is about to start.
    println!("CONNECTED");
    let mut buf = vec![0u8; o.size];
    let api = Api::of(&o.test).expect("checked by parse");
    if o.test.ends_with("_lat") {
        for _ in 0..o.iters + WARMUP {
            api.recv(&ep, &mut buf[..]).await?;
            api.send(&ep, &buf[..]).await?;
        }
    } else {
        for _ in 0..o.iters + WARMUP.min(o.iters) {
            api.recv(&ep, &mut buf[..]).await?;
        }
        api.send(&ep, &[1u8][..]).await?;
    }
    let _ = ep.recv(&mut buf[..]).await; // the client's goodbye (or its close)
    Ok(())
}

async fn client(o: Opts, port: u16) -> Result<()> {
    let ctx = context()?;
    let worker = Worker::new(&ctx, progress_mode::progress_mode("bench", &o.mode))?;
    let options = ConnectOptions { error_handling: o.error_handling, ..Default::default() };
    let ep = if o.worker_address {
        oob::client(&worker, port, options).await?
    } else {
        Endpoint::connect_with(&worker, ([127, 0, 0, 1], port).into(), options).await?
    };
    println!("CONNECTED");
    let out = vec![1u8; o.size];
    let mut back = vec![0u8; o.size];
    let api = Api::of(&o.test).expect("checked by parse");
    match o.test.ends_with("_lat") {
        true => {
            let mut rtts = Vec::with_capacity(o.iters);
            // One clock read per round trip, as ucx_perftest takes one timestamp per
            // iteration: a read costs about 19 ns here, 5 % of a round trip.
            let mut t0 = Instant::now();
            for i in 0..o.iters + WARMUP {
                api.send(&ep, &out[..]).await?;
                api.recv(&ep, &mut back[..]).await?;
                let now = Instant::now();
                if i >= WARMUP {
                    rtts.push(now - t0);
                }
                t0 = now;
            }
            rtts.sort();
            let half = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
            let avg = rtts.iter().sum::<Duration>().as_secs_f64() * 1e6 / 2.0 / rtts.len() as f64;
            println!(
                "RESULT test={} mode={} size={} iters={} median_us={:.3} avg_us={:.3} p99_us={:.3}",
                o.test,
                o.mode,
                o.size,
                o.iters,
                half(rtts[rtts.len() / 2]),
                avg,
                half(rtts[rtts.len() * 99 / 100])
            );
        }
        false => {
            let warm = WARMUP.min(o.iters);
            let mut ack = [0u8; 1];
            // One shared buffer for every send, as ucx_perftest: no copy per message.
            let shared = std::rc::Rc::new(out.clone());
            let stream = |count: usize| {
                let ep = ep.clone();
                let shared = shared.clone();
                let window = o.window;
                async move {
                    // Up to `window` sends in flight, as ucx_perftest's tag_bw.
                    let mut inflight = std::collections::VecDeque::new();
                    for _ in 0..count {
                        if inflight.len() == window {
                            let f: tokio::task::JoinHandle<Result<()>> = inflight.pop_front().expect("non-empty");
                            f.await.expect("send task")?;
                        }
                        let ep = ep.clone();
                        let buf = shared.clone();
                        inflight.push_back(tokio::task::spawn_local(async move { api.send(&ep, &buf[..]).await }));
                    }
                    for f in inflight {
                        f.await.expect("send task")?;
                    }
                    Ok::<(), ucx_async::core::Error>(())
                }
            };
            let local = tokio::task::LocalSet::new();
            local.run_until(stream(warm)).await?;
            let t0 = Instant::now();
            local.run_until(stream(o.iters)).await?;
            api.recv(&ep, &mut ack[..]).await?;
            let secs = t0.elapsed().as_secs_f64();
            println!(
                "RESULT test={} mode={} size={} iters={} window={} MiBps={:.1}",
                o.test,
                o.mode,
                o.size,
                o.iters,
                o.window,
                (o.size * o.iters) as f64 / secs / (1024.0 * 1024.0)
            );
        }
    }
    ep.send(&[0u8; 0][..]).await?; // goodbye: a worker-address peer would not notice a close
    ep.close().await
}

const USAGE: &str = "\
A benchmark whose workloads match ucx_perftest's, between two processes over 127.0.0.1.

usage: bench [-t TEST] [-s BYTES] [-n ITERS] [-w WINDOW] [--mode event|polling|adaptive]
             [--no-error-handling] [--worker-address] [--server | --client PORT]
  -t   tag_lat (default), tag_bw, stream_lat, stream_bw, ucp_am_lat or ucp_am_bw
  -s   message size in bytes (default 8)
  -n   iterations (default 100000)
  -w   sends in flight for the _bw tests (default 32)
  --mode               how the reactor drives progress (default event)
  --no-error-handling  endpoints without peer-failure handling, like ucx_perftest's
  --worker-address     connect by worker address, as ucx_perftest does
  --server / --client  one side only (the server prints its port)
  --sweep              tag_lat and tag_bw from 8 B to --max-size (default 64 MiB) by factors
                       of 8, ours and ucx_perftest's (UCX_PERFTEST, or the one beside the UCX
                       this build linked) in one run: a table, and with --plot FILE.svg a plot;
                       -n caps each point's iterations
With neither, it starts its own server process.";

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.iter().any(|a| a == "--sweep") {
        return sweep_main(&args);
    }
    let (opts, role, port) = parse();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    let result = match (role, port) {
        (Some(_), _) => rt.block_on(server(opts)),
        (None, Some(p)) => rt.block_on(client(opts, p)),
        (None, None) => both(&rt, opts),
    };
    if let Err(e) = result {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

/// `--sweep`: every point runs this executable again (its own client and server processes).
fn sweep_main(args: &[String]) {
    let get = |k: &str| args.iter().position(|a| a == k).and_then(|i| args.get(i + 1)).cloned();
    let max = match get("--max-size").map(|v| v.parse::<usize>()) {
        None => 64 << 20,
        Some(Ok(v)) if v >= 8 => v,
        Some(_) => {
            eprintln!("bench: --max-size needs a number of bytes, at least 8");
            std::process::exit(2)
        }
    };
    let mode = get("--mode").unwrap_or_else(|| "event".into());
    let mut ours = vec!["--mode".to_string(), mode.clone()];
    for flag in ["--no-error-handling", "--worker-address"] {
        if args.iter().any(|a| a == flag) {
            ours.push(flag.into());
        }
    }
    let cap = match get("-n").map(|v| v.parse::<usize>()) {
        None => usize::MAX,
        Some(Ok(v)) if v > 0 => v,
        Some(_) => {
            eprintln!("bench: -n needs a number of iterations, at least 1");
            std::process::exit(2)
        }
    };
    let rows = sweep::run(max, cap, &ours);
    print!("{}", sweep::table(&rows));
    if let Some(path) = get("--plot") {
        let title = format!("tag API over 127.0.0.1: ucx-async ({mode} mode{}) and ucx_perftest", ours[2..].join(" "));
        match std::fs::write(&path, sweep::svg(&rows, &title)) {
            Ok(()) => println!("# plot written to {path}"),
            Err(e) => {
                eprintln!("bench: cannot write {path}: {e}");
                std::process::exit(1)
            }
        }
    }
    if rows.iter().any(|r| r.lat.0.is_none() || r.bw.0.is_none()) {
        eprintln!("bench: some of our points failed (see above)");
        std::process::exit(1);
    }
}

fn both(rt: &tokio::runtime::Runtime, o: Opts) -> Result<()> {
    let mut server_args: Vec<String> =
        ["--server", "-t", &o.test, "-s", &o.size.to_string(), "-n", &o.iters.to_string(), "--mode", &o.mode]
            .map(String::from)
            .into();
    if !o.error_handling {
        server_args.push("--no-error-handling".into());
    }
    if o.worker_address {
        server_args.push("--worker-address".into());
    }
    server_process::run_with_server("bench", &server_args, |port| rt.block_on(client(o, port)))
}

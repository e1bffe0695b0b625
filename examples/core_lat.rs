//! The floor under ucx-async's latency: an 8-byte tag ping-pong with ucx-core alone (no async
//! runtime, no endpoint state), connected as `ucx_perftest` connects (worker addresses swapped
//! over a TCP socket, no peer-error handling), busy-polling. Between this and perftest is what
//! UCX usage and ucx-core's requests cost; between this and `bench -t tag_lat --mode polling
//! --no-error-handling --worker-address` is what ucx-async's layer costs.
//! `scripts/bench_vs_perftest.sh` prints it as its own row.
//!
//! With `--raw`, the ping-pong is `ucx_core::floor`'s instead: UCX's calls as perftest makes
//! them, none of ucx-core's objects. Between that and perftest is what UCX costs as ucx-core
//! sets it up; between that and the plain run, what ucx-core's requests cost.
//!
//! `--raw-am perftest|ucxpy` does the same with 8-byte active messages, sent as perftest's
//! `ucp_am_lat` sends them or as UCX-Py's protocol does (its header and the reply flag), which
//! tells the protocol's cost apart from ucx-async's active-message layer.
//!
//! `cargo run --release -p ucx-core --example core_lat -- [--iters N] [--single] [--raw | --raw-am STYLE]`
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use ucx_core::floor::{self, AmStyle};
use ucx_core::{Context, Endpoint, EndpointParams, ThreadMode, Worker, WorkerAddress};

const USAGE: &str = "\
Tag ping-pong of 8 bytes with ucx-core only, worker addresses swapped over TCP as ucx_perftest
does, no error handling, busy polling; prints the median one-way latency.

usage: core_lat [--iters N] [--single] [--raw | --raw-am perftest|ucxpy]
  --iters N       round trips (default 200000)
  --single        workers in UCS_THREAD_MODE_SINGLE, as perftest's (default MULTI, as ucx-async's)
  --raw           UCX's calls as perftest makes them, without ucx-core's requests (ucx_core::floor)
  --am            8-byte active messages through ucx-core, sent as UCX-Py's protocol sends them
  --raw-am STYLE  the same as --raw with active messages: as perftest's ucp_am_lat (no header), or as
                  UCX-Py's protocol (its 4-byte header and UCP_AM_SEND_FLAG_REPLY)
It starts its own peer process (the same binary with --server).";

const WARMUP: usize = 1000;
const TAG: u64 = 0x1a7;
const AM_ID: u16 = 7;

type Result<T> = std::result::Result<T, Box<dyn std::error::Error>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let single = args.iter().any(|a| a == "--single");
    let value = |flag: &str| args.iter().position(|a| a == flag).map(|i| args.get(i + 1).map(String::as_str));
    let layer = match (args.iter().any(|a| a == "--raw"), value("--raw-am")) {
        (false, None) if args.iter().any(|a| a == "--am") => Layer::CoreAm,
        (false, None) => Layer::Requests,
        (true, None) => Layer::RawTag,
        (false, Some(Some("perftest"))) => Layer::RawAm(AmStyle::Perftest),
        (false, Some(Some("ucxpy"))) => Layer::RawAm(AmStyle::UcxPy),
        _ => bad("--raw-am takes perftest or ucxpy, and not with --raw"),
    };
    let iters = match value("--iters") {
        Some(v) => v.and_then(|v| v.parse().ok()).unwrap_or_else(|| bad("--iters needs a number")),
        None => 200_000,
    };
    let result = if args.get(1).map(String::as_str) == Some("--server") {
        serve(single, layer, iters)
    } else {
        // The peer takes the same options.
        let server_args: Vec<String> =
            std::iter::once("--server".to_string()).chain(args[1..].iter().cloned()).collect();
        server_process::run_with_server("core_lat", &server_args, |port| {
            ping_pong(TcpStream::connect(("127.0.0.1", port))?, false, single, layer, iters)
        })
    };
    if let Err(e) = result {
        eprintln!("core_lat: {e}");
        std::process::exit(1);
    }
}

fn bad(why: &str) -> ! {
    eprintln!("core_lat: {why}");
    std::process::exit(2);
}

/// What the ping-pong goes through.
#[derive(Clone, Copy)]
enum Layer {
    /// ucx-core's operations and requests.
    Requests,
    /// ucx-core's active messages (`Worker::set_am_handler`, `Endpoint::am_send`), sent as
    /// UCX-Py's protocol sends them; the handler takes the data and counts.
    CoreAm,
    /// `ucx_core::floor::tag_pingpong`.
    RawTag,
    /// `ucx_core::floor::am_pingpong`.
    RawAm(AmStyle),
}

impl Layer {
    fn name(self) -> &'static str {
        match self {
            Layer::Requests | Layer::CoreAm => "ucx-core",
            Layer::RawTag => "raw",
            Layer::RawAm(AmStyle::Perftest) => "raw-am-perftest",
            Layer::RawAm(AmStyle::UcxPy) => "raw-am-ucxpy",
        }
    }
}

/// The peer: binds a kernel-chosen port, says it on stdout (`PORT n`), answers one client.
fn serve(single: bool, layer: Layer, iters: usize) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    println!("PORT {}", listener.local_addr()?.port());
    std::io::stdout().flush()?;
    let (sock, _) = listener.accept()?;
    ping_pong(sock, true, single, layer, iters)
}

fn ping_pong(mut sock: TcpStream, server: bool, single: bool, layer: Layer, iters: usize) -> Result<()> {
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

    let n = iters + WARMUP;
    let all = match layer {
        Layer::Requests => requests(&worker, &ep, server, n)?,
        Layer::CoreAm => core_am(&worker, &ep, server, n)?,
        Layer::RawTag => floor::tag_pingpong(&worker, &ep, !server, n, TAG)?,
        Layer::RawAm(style) => floor::am_pingpong(&worker, &ep, !server, n, AM_ID, style)?,
    };
    // The client's round trips after the warm-up (the server records none).
    let mut rtts = all.get(WARMUP..).map(<[Duration]>::to_vec).unwrap_or_default();
    // Both sides done before either tears down: a byte each way on the socket.
    sock.write_all(b"x")?;
    sock.read_exact(&mut len[..1])?;
    if !server {
        rtts.sort();
        let half = |d: Duration| d.as_secs_f64() * 1e6 / 2.0;
        println!(
            "RESULT test={} layer={} thread_mode={} size=8 iters={iters} median_us={:.3} p99_us={:.3}",
            if matches!(layer, Layer::RawAm(_) | Layer::CoreAm) { "am_lat" } else { "tag_lat" },
            layer.name(),
            if single { "single" } else { "multi" },
            half(rtts[rtts.len() / 2]),
            half(rtts[rtts.len() * 99 / 100]),
        );
    }
    Ok(())
}

/// The ping-pong through ucx-core's operations and requests.
fn requests(worker: &Worker, ep: &Endpoint, server: bool, n: usize) -> ucx_core::Result<Vec<Duration>> {
    let out = [1u8; 8];
    let mut back = [0u8; 8];
    let send = || ep.tag_send(&out, TAG)?.wait().map(drop);
    let recv = || worker.tag_recv(&mut back, TAG, u64::MAX)?.wait().map(drop);
    floor::rounds(!server, n, send, recv)
}

/// The ping-pong in active messages through ucx-core: the handler takes each message's data
/// (as ucx-async's router hands it on) and counts it.
fn core_am(worker: &Worker, ep: &Endpoint, server: bool, n: usize) -> ucx_core::Result<Vec<Duration>> {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let arrived = std::sync::Arc::new(AtomicUsize::new(0));
    let count = arrived.clone();
    worker.set_am_handler(AM_ID, move |mut msg| {
        drop(msg.take_copied());
        count.fetch_add(1, Ordering::Release);
    })?;
    let header = ucx_core::wire::am_header::encode(ucx_core::MemoryType::Host.raw() as i32);
    let options = ucx_core::AmSendOptions { reply: true, ..Default::default() };
    let out = [1u8; 8];
    let send = || ep.am_send(AM_ID, &header, &out, options)?.wait().map(drop);
    let mut expected = 0;
    let recv = || {
        expected += 1;
        while arrived.load(Ordering::Acquire) < expected {
            worker.progress();
        }
        Ok(())
    };
    floor::rounds(!server, n, send, recv)
}

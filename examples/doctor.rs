//! The UCX part of `python -m ucp.doctor`, from Rust: which UCX this process opens (path,
//! version, a second UCX mapped), the transports per memory type, the protocol and transport a
//! tag send between two workers of this host selects per message size with peer error handling
//! on and off, huge pages, the ptrace scope and the TCP congestion control, and a self-test:
//! 1 MiB messages between two workers of this process over 127.0.0.1 for half a second, beside
//! a copy of the same size.
//! docs/doctor.md says what each section means.
//!
//! Run: `cargo run --release -p ucx-async --example doctor` (`--no-selftest` skips the
//! self-test). Exits 1 when something is broken: UCX cannot be opened or make a context, two
//! UCX are mapped, or the self-test fails.
#[path = "common/usage.rs"]
mod usage;

use std::time::{Duration, Instant};

use ucx_async::core::doctor::{self, ProtocolTable, SIZES, TAG_SEND_HOST};
use ucx_async::core::{library, version, Context};
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

const USAGE: &str = "usage: doctor [--no-selftest]

Prints which UCX this process opens, its transports per memory type, the protocol per message
size of a tag send between two workers of this host (peer error handling on and off), huge
pages, the ptrace scope, the TCP congestion control, and a 1 MiB self-test between two workers
over 127.0.0.1.";

/// The self-test's message size and how long it sends.
const SELFTEST_SIZE: usize = 1 << 20;
const SELFTEST_TIME: Duration = Duration::from_millis(500);

fn size(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

fn heading(title: &str) {
    println!("\n== {title} ==");
}

/// The UCX section; `Err` when UCX cannot be opened.
fn ucx(problems: &mut Vec<String>) -> Result<(), String> {
    heading("UCX");
    let loaded = library::load().map_err(|e| e.to_string())?;
    let (major, minor, release) = version::runtime().map_err(|e| e.to_string())?;
    println!(
        "  version      {major}.{minor}.{release} (this build's bindings: UCX {}.{} API)",
        version::HEADERS.0,
        version::HEADERS.1
    );
    println!("  opened       {}  (found: {})", loaded.path(), loaded.found_by());
    let libraries = doctor::mapped_ucx_libraries();
    for lib in &libraries {
        let paths = if lib.paths.is_empty() { "(not mapped)".to_string() } else { lib.paths.join(", ") };
        println!("  {:<12} {paths}", lib.name);
    }
    let second = doctor::second_ucx(&libraries);
    println!("  second UCX   {}", if second { "YES" } else { "no" });
    if second {
        problems.push("ucx: a second UCX library is mapped in this process".into());
    }
    Ok(())
}

fn transports(ctx: &Context) -> Result<(), String> {
    heading("Transports by memory type");
    let by_type = doctor::transports_by_memory_type(ctx).map_err(|e| e.to_string())?;
    for mt in ["host", "cuda"] {
        if !by_type.iter().any(|(t, _)| *t == mt) {
            println!("  {mt:<12} (none: UCX reaches no {mt} memory here)");
        }
    }
    for (mt, resources) in &by_type {
        println!("  {mt:<12} {}", resources.join(" "));
    }
    Ok(())
}

fn cell(table: &ProtocolTable, size: u64) -> String {
    table.row_for(size).map_or("(no row)".into(), |r| format!("{} [{}]", r.protocol, r.transport))
}

fn protocols(ctx: &Context) -> Result<(), String> {
    heading("Protocols per message size");
    let on = doctor::probe_tag_send_protocols(ctx, true).map_err(|e| e.to_string())?;
    let off = doctor::probe_tag_send_protocols(ctx, false).map_err(|e| e.to_string())?;
    let on_title = "peer error handling on";
    let width = SIZES.iter().map(|&s| cell(&on, s).len()).chain([on_title.len()]).max().unwrap_or(0);
    println!("  {TAG_SEND_HOST}, two workers of this host:");
    println!("  {:<8}  {on_title:<width$}  error handling off", "size");
    for s in SIZES {
        println!("  {:<8}  {:<width$}  {}", size(s), cell(&on, s), cell(&off, s));
    }
    Ok(())
}

fn system() {
    heading("System");
    let (enabled, shmem) = doctor::transparent_huge_pages();
    let show = |s: Option<String>| s.unwrap_or_else(|| "(absent)".into());
    println!("  huge pages   enabled={} shmem_enabled={}", show(enabled), show(shmem));
    match doctor::ptrace_scope() {
        None => println!("  ptrace scope absent (not enforced: CMA works)"),
        Some(scope) => println!("  ptrace scope {scope}"),
    }
    println!("  TCP congestion control {}", show(doctor::tcp_congestion_control()));
}

/// Bytes per second of copying `len` bytes from one buffer into another here.
fn memcpy_rate(len: usize) -> f64 {
    let (src, mut dst) = (vec![1u8; len], vec![0u8; len]);
    dst.copy_from_slice(&src);
    let (start, mut copies) = (Instant::now(), 0u32);
    while start.elapsed() < Duration::from_millis(100) {
        dst.copy_from_slice(std::hint::black_box(&src));
        copies += 1;
    }
    f64::from(copies) * len as f64 / start.elapsed().as_secs_f64()
}

/// Sends `SELFTEST_SIZE`-byte messages from one worker to another over 127.0.0.1 for
/// `SELFTEST_TIME` (the last says so in its first byte); prints the rate and what UCX chose.
async fn selftest(ctx: &Context) -> ucx_async::Result<()> {
    heading("Self-test");
    let server = Worker::new(ctx, ProgressMode::Polling)?;
    let client = Worker::new(ctx, ProgressMode::Polling)?;
    let listener = Listener::bind(&server, ([127, 0, 0, 1], 0).into())?;
    let (accepted, connected) = tokio::join!(listener.accept(), Endpoint::connect(&client, listener.local_addr()));
    let (receiver, sender) = (accepted?, connected?);
    let start = Instant::now();
    let send = async {
        let mut buf = vec![1u8; SELFTEST_SIZE];
        let mut messages = 0u64;
        while start.elapsed() < SELFTEST_TIME {
            sender.send(&buf[..]).await?;
            messages += 1;
        }
        buf[0] = 0;
        sender.send(&buf[..]).await?;
        Ok::<u64, ucx_async::Error>(messages + 1)
    };
    let receive = async {
        let mut buf = vec![0u8; SELFTEST_SIZE];
        loop {
            receiver.recv(&mut buf[..]).await?;
            if buf[0] == 0 {
                return Ok::<Instant, ucx_async::Error>(Instant::now());
            }
        }
    };
    let (messages, end) = tokio::try_join!(send, receive)?;
    let rate = messages as f64 * SELFTEST_SIZE as f64 / end.duration_since(start).as_secs_f64();
    println!(
        "  {} messages between two workers over 127.0.0.1 for {:.2} s: {:.0} MB/s (a copy here: {:.0} MB/s)",
        size(SELFTEST_SIZE as u64),
        end.duration_since(start).as_secs_f64(),
        rate / 1e6,
        memcpy_rate(SELFTEST_SIZE) / 1e6
    );
    let info = sender.core().info();
    let row = doctor::protocol_tables(&info)
        .into_iter()
        .find(|t| t.operation == TAG_SEND_HOST)
        .map_or("(no table)".into(), |t| cell(&t, SELFTEST_SIZE as u64));
    println!("  transports {}; {} went as {row}", doctor::lane_transports(&info).join(" "), size(SELFTEST_SIZE as u64));
    sender.close().await
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let run_selftest = !args.iter().any(|a| a == "--no-selftest");
    println!("ucx-async doctor");
    let mut problems = Vec::new();
    if let Err(e) = ucx(&mut problems) {
        println!("  error: {e}");
        eprintln!("doctor: UCX cannot be opened: {e}");
        std::process::exit(1);
    }
    let ctx = match Context::new() {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            problems.push(format!("context: {e}"));
            None
        }
    };
    if let Some(ctx) = &ctx {
        for (name, section) in
            [("transports", transports as fn(&Context) -> Result<(), String>), ("protocols", protocols)]
        {
            if let Err(e) = section(ctx) {
                println!("  error: {e}");
                problems.push(format!("{name}: {e}"));
            }
        }
    }
    system();
    match (&ctx, run_selftest) {
        (_, false) => println!("\n== Self-test ==\n  (skipped)"),
        (None, true) => println!("\n== Self-test ==\n  (no context)"),
        (Some(ctx), true) => {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
            if let Err(e) = rt.block_on(selftest(ctx)) {
                println!("  error: {e}");
                problems.push(format!("selftest: {e}"));
            }
        }
    }
    if !problems.is_empty() {
        heading("PROBLEMS");
        for p in &problems {
            println!("  - {p}");
        }
        std::process::exit(1);
    }
}

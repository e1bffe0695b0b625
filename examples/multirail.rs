//! Multi-rail throughput against a peer process: the seed's (ucx_multirail) modes over a
//! sweep of rails × stages × split ratio × message size, as a table and an SVG plot.
//!
//! Run: `cargo run --release -p ucx-async --example multirail` (starts the peer itself).
//! Each rail is its own UCX context and worker; `--devices a,b,...` gives rail i the
//! `UCX_NET_DEVICES` value of entry i (default `lo` for every rail), `--devices auto` a NIC
//! per rail from the topology. `--serve --listen` and
//! `--connect` run the two sides apart, e.g. in two network namespaces joined by one link per
//! rail (`scripts/bench_multirail_netns.sh`).
#[path = "common/launch.rs"]
mod launch;
#[path = "common/plot.rs"]
mod plot;
#[path = "common/server_process.rs"]
mod server_process;
#[path = "common/usage.rs"]
mod usage;

use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use ucx_async::core::Context;
use ucx_async::{Endpoint, Listener, ProgressMode, RailGroup, Result, Split, Worker};

const USAGE: &str = "usage: multirail [--modes SINGLE,MR,SPLIT,TEST,PROFILE] [--rails 1,2,4] [--stages 1,2,4]
                 [--ratios 0.5,0.75] [--sizes 1048576,8388608,67108864] [--iters N]
                 [--devices lo,lo,...|auto] [--plot FILE.svg]
                 [--serve [--listen IP,IP,...] | --connect IP:PORT,IP:PORT,...]

Throughput of one peer process to another over 127.0.0.1, each rail its own UCX context:
  SINGLE  the whole message on rail 0's endpoint (the single-endpoint path)
  MR      a whole message on every rail at once (aggregate of independent sends)
  SPLIT   one message split over the rails by --ratios (the share on the peer rails) in
          --stages chunks per rail (RailGroup)
  TEST    SPLIT, with every byte checked by the receiver (prints OK or FAIL per point)
  PROFILE SPLIT, timing each chunk (RailGroup::send_profiled): a PROFILE line per rail with
          its share, when its last chunk finished (mean over messages) and its MB/s; the
          rail that finishes last is the one to give less (--ratios)
Prints one RESULT line per point (MB/s = 10^6 bytes per second of message data) and, with
--plot, an SVG of MB/s against size. --iters messages per point (default 20; 4 above 16 MiB).
Without --serve or --connect it starts the peer itself on 127.0.0.1. --serve: be the peer,
listening for rail i on entry i of --listen (default 127.0.0.1), printing `PORT p0,p1,...`;
--connect: dial rail i at entry i, instead of starting a peer. Both sides need the same sweep
options. --devices auto: a NIC per rail from the topology, nearest the GPU of this process's
local rank, else its CPUs (plus `lo` for a rail that meets its peer at a loopback address).";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Single,
    Mr,
    Split,
    Test,
    Profile,
}

/// One point of the sweep; both processes walk the same list.
#[derive(Clone, Debug)]
struct Point {
    mode: Mode,
    rails: usize,
    stages: usize,
    ratio: f64,
    size: usize,
}

struct Options {
    points: Vec<Point>,
    rail_counts: Vec<usize>,
    devices: Vec<String>,
    iters: usize,
    plot: Option<String>,
    /// The peer's listening address for each rail (`--listen`).
    listen: Vec<IpAddr>,
    /// Where to dial each rail instead of starting a peer (`--connect`).
    connect: Option<Vec<SocketAddr>>,
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    usage::exit_if_help(&args, USAGE);
    let opts = match options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("multirail: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    if args.iter().any(|a| a == "--serve") {
        return match rt.block_on(serve(&opts)) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("multirail server: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let r = match &opts.connect {
        Some(peers) => rt.block_on(client(&opts, peers)),
        None => {
            let mut server_args = args[1..].to_vec();
            server_args.push("--serve".into());
            server_process::run_with_server_ports("multirail", &server_args, |ports| {
                let peers: Vec<SocketAddr> = ports.iter().map(|p| SocketAddr::from(([127, 0, 0, 1], *p))).collect();
                rt.block_on(client(&opts, &peers))
            })
        }
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("multirail: {e}");
            ExitCode::FAILURE
        }
    }
}

fn options(args: &[String]) -> std::result::Result<Options, String> {
    let list = |name: &str, default: &str| -> Vec<String> {
        let v = args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)).map_or(default, String::as_str);
        v.split(',').map(str::to_string).collect()
    };
    let numbers = |name: &str, default: &str| -> std::result::Result<Vec<f64>, String> {
        list(name, default)
            .iter()
            .map(|v| v.parse::<f64>().map_err(|_| format!("{name}: {v:?} is not a number")))
            .collect()
    };
    let modes = list("--modes", "SINGLE,MR,SPLIT")
        .iter()
        .map(|m| match m.as_str() {
            "SINGLE" => Ok(Mode::Single),
            "MR" => Ok(Mode::Mr),
            "SPLIT" => Ok(Mode::Split),
            "TEST" => Ok(Mode::Test),
            "PROFILE" => Ok(Mode::Profile),
            other => Err(format!("--modes: unknown mode {other:?} (SINGLE, MR, SPLIT, TEST, PROFILE)")),
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let rail_counts: Vec<usize> = numbers("--rails", "1,2,4")?.into_iter().map(|r| r as usize).collect();
    let stages: Vec<usize> = numbers("--stages", "1,2,4")?.into_iter().map(|s| s as usize).collect();
    let ratios = numbers("--ratios", "0.5,0.75")?;
    let sizes: Vec<usize> = numbers("--sizes", "1048576,8388608,67108864")?.into_iter().map(|s| s as usize).collect();
    let max_rails = rail_counts.iter().copied().max().unwrap_or(1);
    if rail_counts.contains(&0) {
        return Err("--rails: counts start at 1".into());
    }
    let mut devices = list("--devices", "lo");
    let mut points = Vec::new();
    for &mode in &modes {
        for &rails in &rail_counts {
            let (stage_list, ratio_list): (Vec<usize>, Vec<f64>) = match mode {
                Mode::Single => (vec![1], vec![0.0]),
                Mode::Mr => (vec![1], vec![0.0]),
                _ if rails == 1 => (stages.clone(), vec![0.0]),
                _ => (stages.clone(), ratios.clone()),
            };
            if mode == Mode::Single && rails != rail_counts[0] {
                continue; // one rail only: measured once
            }
            for &s in &stage_list {
                for &ratio in &ratio_list {
                    Split::ratio(rails, ratio).and_then(|sp| sp.stages(s)).map_err(|e| e.to_string())?;
                    for &size in &sizes {
                        points.push(Point {
                            mode,
                            rails: if mode == Mode::Single { 1 } else { rails },
                            stages: s,
                            ratio,
                            size,
                        });
                    }
                }
            }
        }
    }
    let iters = launch::number_option(args, "--iters", USAGE).unwrap_or(20);
    let plot = args.iter().position(|a| a == "--plot").and_then(|i| args.get(i + 1)).cloned();
    let mut listen = list("--listen", "127.0.0.1")
        .iter()
        .map(|a| a.parse::<IpAddr>().map_err(|_| format!("--listen: {a:?} is not an IP address")))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    if listen.len() == 1 {
        listen = vec![listen[0]; max_rails];
    }
    if listen.len() < max_rails {
        return Err(format!("--listen: {} entries for {max_rails} rails", listen.len()));
    }
    let connect = match args.iter().any(|a| a == "--connect") {
        false => None,
        true => {
            let peers = list("--connect", "")
                .iter()
                .map(|a| a.parse::<SocketAddr>().map_err(|_| format!("--connect: {a:?} is not an IP:PORT")))
                .collect::<std::result::Result<Vec<_>, _>>()?;
            if peers.len() < max_rails {
                return Err(format!("--connect: {} entries for {max_rails} rails", peers.len()));
            }
            Some(peers)
        }
    };
    if devices == ["auto"] {
        // Each rail meets its peer at its --connect or --listen address.
        let at: Vec<IpAddr> = match &connect {
            Some(peers) => peers.iter().map(SocketAddr::ip).collect(),
            None => listen.clone(),
        };
        devices = auto_devices(max_rails, &at)?;
    } else if devices.len() == 1 {
        devices = vec![devices[0].clone(); max_rails];
    }
    if devices.len() < max_rails {
        return Err(format!("--devices: {} entries for {max_rails} rails", devices.len()));
    }
    Ok(Options { points, rail_counts, devices, iters, plot, listen, connect })
}

/// `--devices auto`: each rail's devices from the topology (ucx-topology's
/// `auto_rail_devices`: a NIC per rail, nearest the GPU of this process's local rank, else its
/// CPUs; Python's `devices="auto"` too), plus `lo` for a rail that meets its peer at a
/// loopback address, which only `lo` reaches.
fn auto_devices(rails: usize, at: &[IpAddr]) -> std::result::Result<Vec<String>, String> {
    let local = ucx_async::Launch::local_rank().map_err(|e| format!("--devices auto: {e}"))?;
    let chosen = ucx_topology::Topology::system()
        .and_then(|t| t.auto_rail_devices(local as u32, rails))
        .map_err(|e| format!("--devices auto: no devices chosen: {e}"))?;
    Ok(chosen
        .iter()
        .zip(at)
        .map(|(d, ip)| {
            let mut d = d.to_string();
            if ip.is_loopback() && !d.split(',').any(|x| x == "lo") {
                d.push_str(",lo");
            }
            d
        })
        .collect())
}

fn iters_for(opts: &Options, size: usize) -> usize {
    if size > 16 << 20 {
        opts.iters.div_ceil(5).max(2)
    } else {
        opts.iters
    }
}

fn rail_workers(devices: &[String]) -> Result<Vec<Worker>> {
    devices
        .iter()
        .map(|d| {
            let ctx = Context::builder().option("NET_DEVICES", d.as_str()).build()?;
            Worker::new(&ctx, ProgressMode::Polling)
        })
        .collect()
}

fn pattern(len: usize, seed: usize) -> Vec<u8> {
    (0..len).map(|i| (i.wrapping_mul(131) ^ seed ^ (i >> 10)) as u8).collect()
}

/// The peer: listeners for the most rails, then a group per rail count, receiving each
/// point's messages and acknowledging each point with one byte (1: every byte checked). The
/// client says goodbye and aborts its end of a group; this side then aborts its own. (Closing
/// both ends at once, each with `close()`, left this side's close waiting in one run, and
/// failed the other's with "Endpoint timeout" in another.)
async fn serve(opts: &Options) -> Result<()> {
    let max = opts.rail_counts.iter().copied().max().unwrap_or(1);
    let workers = rail_workers(&opts.devices[..max])?;
    let listeners = workers
        .iter()
        .zip(&opts.listen)
        .map(|(w, ip)| Listener::bind(w, SocketAddr::new(*ip, 0)))
        .collect::<Result<Vec<_>>>()?;
    let ports: Vec<String> = listeners.iter().map(|l| l.local_addr().port().to_string()).collect();
    println!("PORT {}", ports.join(","));
    for &rails in &opts.rail_counts {
        let group = RailGroup::accept(&listeners[..rails]).await?;
        let mut buf = vec![0u8; opts.points.iter().map(|p| p.size).max().unwrap_or(0)];
        for p in
            opts.points.iter().filter(|p| p.rails == rails || (p.mode == Mode::Single && rails == opts.rail_counts[0]))
        {
            let mut ok = true;
            for i in 0..=iters_for(opts, p.size) {
                match p.mode {
                    Mode::Single => {
                        group.rails()[0].recv(&mut buf[..p.size]).await?;
                    }
                    Mode::Mr => {
                        let mut parts: Vec<&mut [u8]> = Vec::new();
                        let mut rest = &mut buf[..];
                        for _ in 0..rails {
                            let (a, b) = std::mem::take(&mut rest).split_at_mut(p.size / rails);
                            parts.push(a);
                            rest = b;
                        }
                        let recvs = group.rails().iter().zip(parts).map(|(ep, part)| ep.recv(part));
                        futures_util::future::try_join_all(recvs).await?;
                    }
                    Mode::Split | Mode::Test | Mode::Profile => {
                        let n = group.recv(&mut buf).await?;
                        if p.mode == Mode::Test {
                            ok &= n == p.size && buf[..n] == pattern(p.size, i)[..];
                        }
                    }
                }
            }
            ack(&group.rails()[0], ok).await?;
        }
        // The client's goodbye (or its abort, which may overtake it): everything is through.
        let mut bye = [0u8];
        let _ = group.rails()[0].recv(&mut bye[..]).await;
        group.abort();
    }
    Ok(())
}

async fn ack(ep: &Endpoint, ok: bool) -> Result<()> {
    ep.send(&[u8::from(ok)][..]).await
}

async fn client(opts: &Options, peers: &[SocketAddr]) -> Result<()> {
    let max = opts.rail_counts.iter().copied().max().unwrap_or(1);
    let workers = rail_workers(&opts.devices[..max])?;
    println!("# mode rails stages ratio size MB/s (devices {})", opts.devices[..max].join(","));
    let mut results = Vec::new();
    for &rails in &opts.rail_counts {
        let dial: Vec<(&Worker, SocketAddr)> = workers.iter().zip(peers.iter().copied()).take(rails).collect();
        let group = RailGroup::connect(&dial).await?;
        let data = pattern(opts.points.iter().map(|p| p.size).max().unwrap_or(0), 0);
        for p in
            opts.points.iter().filter(|p| p.rails == rails || (p.mode == Mode::Single && rails == opts.rail_counts[0]))
        {
            let split = Split::ratio(p.rails, p.ratio)?.stages(p.stages)?;
            let mut start = Instant::now();
            let iters = iters_for(opts, p.size);
            let mut profile = RailProfile::new(p.rails);
            for i in 0..=iters {
                if i == 1 {
                    start = Instant::now(); // iteration 0 warms up (registration, connections)
                }
                match p.mode {
                    Mode::Profile => {
                        let times = group.send_profiled(&data[..p.size], &split).await?;
                        if i > 0 {
                            profile.add(&times);
                        }
                    }
                    Mode::Single => group.rails()[0].send(&data[..p.size]).await?,
                    Mode::Mr => {
                        let part = p.size / rails;
                        let sends =
                            group.rails().iter().enumerate().map(|(r, ep)| ep.send(&data[r * part..(r + 1) * part]));
                        futures_util::future::try_join_all(sends).await?;
                    }
                    Mode::Split => group.send(&data[..p.size], &split).await?,
                    Mode::Test => group.send(&pattern(p.size, i), &split).await?,
                }
            }
            let mut ok = [0u8];
            group.rails()[0].recv(&mut ok[..]).await?;
            let secs = start.elapsed().max(Duration::from_nanos(1)).as_secs_f64();
            let bytes = if p.mode == Mode::Mr { p.size / rails * rails } else { p.size };
            let mbs = (bytes * iters) as f64 / secs / 1e6;
            let check = match p.mode {
                Mode::Test if ok[0] == 1 => " OK",
                Mode::Test => " FAIL",
                _ => "",
            };
            println!("RESULT {:?} {} {} {} {} {:.0}{check}", p.mode, p.rails, p.stages, p.ratio, p.size, mbs);
            if p.mode == Mode::Profile {
                profile.print(p, iters);
            }
            if check == " FAIL" {
                return Err(ucx_async::Error::Protocol {
                    op: "multirail TEST",
                    detail: format!("bytes differ at {p:?}"),
                });
            }
            results.push((p.clone(), mbs));
        }
        // Every point was acknowledged, so nothing is in flight: both ends let go at once.
        group.rails()[0].send(&[0u8][..]).await?;
        group.abort();
    }
    if let Some(path) = &opts.plot {
        match std::fs::write(path, svg(&results)) {
            Ok(()) => println!("# plot written to {path}"),
            Err(e) => eprintln!("multirail: cannot write {path}: {e}"),
        }
    }
    Ok(())
}

/// PROFILE's sums, per rail: bytes sent, and the time its last chunk of each message finished.
struct RailProfile {
    bytes: Vec<u64>,
    last: Vec<Duration>,
}

impl RailProfile {
    fn new(rails: usize) -> RailProfile {
        RailProfile { bytes: vec![0; rails], last: vec![Duration::ZERO; rails] }
    }

    fn add(&mut self, chunks: &[ucx_async::multirail::ChunkTime]) {
        let mut last = vec![Duration::ZERO; self.last.len()];
        for c in chunks {
            self.bytes[c.rail] += c.bytes;
            last[c.rail] = last[c.rail].max(c.finished);
        }
        for (sum, l) in self.last.iter_mut().zip(last) {
            *sum += l;
        }
    }

    /// One line per rail: share of the bytes, mean time to its last chunk, its MB/s over that
    /// time; then which rail finished last and by how much.
    fn print(&self, p: &Point, messages: usize) {
        let total: u64 = self.bytes.iter().sum::<u64>().max(1);
        let n = messages.max(1) as u32;
        let mean: Vec<Duration> = self.last.iter().map(|d| *d / n).collect();
        for (rail, (bytes, done)) in self.bytes.iter().zip(&mean).enumerate() {
            let per_message = *bytes as f64 / f64::from(n);
            println!(
                "PROFILE {} {} {} {} rail={rail} share={:.1}% last_chunk_ms={:.3} MB/s={:.0}",
                p.rails,
                p.stages,
                p.ratio,
                p.size,
                100.0 * *bytes as f64 / total as f64,
                done.as_secs_f64() * 1e3,
                per_message / done.as_secs_f64().max(1e-9) / 1e6
            );
        }
        let (slow, fast) =
            (mean.iter().enumerate().max_by_key(|(_, d)| **d), mean.iter().filter(|d| !d.is_zero()).min());
        if let (Some((rail, slowest)), Some(fastest)) = (slow, fast) {
            println!(
                "PROFILE {} {} {} {} slowest=rail{rail} spread={:.2}x",
                p.rails,
                p.stages,
                p.ratio,
                p.size,
                slowest.as_secs_f64() / fastest.as_secs_f64().max(1e-9)
            );
        }
    }
}

/// MB/s against message size (log scale), one line per mode, rail count, stages and ratio.
fn svg(results: &[(Point, f64)]) -> String {
    let mut series: Vec<plot::Series> = Vec::new();
    for (p, mbps) in results {
        let name = label(p);
        match series.iter_mut().find(|s| s.name == name) {
            Some(s) => s.points.push((p.size, Some(*mbps))),
            None => series.push(plot::Series { name, points: vec![(p.size, Some(*mbps))] }),
        }
    }
    let chart = plot::Chart { y_label: "MB/s".into(), log_y: false, series };
    plot::svg("multi-rail: one message split over rails, against one endpoint", &[chart])
}

fn label(p: &Point) -> String {
    match p.mode {
        Mode::Single => "SINGLE".into(),
        Mode::Mr => format!("MR {} rails", p.rails),
        _ => format!("{:?} {} rails, {} stages, ratio {}", p.mode, p.rails, p.stages, p.ratio),
    }
}

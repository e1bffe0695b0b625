//! `bench --sweep`: tag latency and bandwidth from 8 B up to a size limit, for ucx-async (this
//! executable, run once per point with its own server process) and for `ucx_perftest` (from
//! the UCX this build found, or `UCX_PERFTEST`) on the same sizes in the same run; a table on
//! stdout and, with `--plot`, an SVG of both against size.
use std::process::{Command, Stdio};

use crate::plot;
use std::time::{Duration, Instant};

/// One size's figures: one-way median latency (µs) and bandwidth (MiB/s), ours and perftest's.
pub struct Row {
    pub size: usize,
    pub lat: (Option<f64>, Option<f64>),
    pub bw: (Option<f64>, Option<f64>),
}

/// 8 B, 64 B, ... by factors of 8 up to `max`.
pub fn sizes(max: usize) -> Vec<usize> {
    std::iter::successors(Some(8usize), |s| s.checked_mul(8)).take_while(|s| *s <= max).collect()
}

/// Round trips for a latency point: about 64 MiB moved each way, 100 to 20 000.
fn lat_iters(size: usize) -> usize {
    ((64 << 20) / size).clamp(100, 20_000)
}

/// Messages for a bandwidth point: about 1 GiB, 100 to 200 000.
fn bw_iters(size: usize) -> usize {
    ((1 << 30) / size).clamp(100, 200_000)
}

/// `ucx_perftest`: `UCX_PERFTEST`, else the `bin/` beside the UCX library this build linked.
fn perftest() -> Option<(std::path::PathBuf, String)> {
    let lib = ucx_async::core::version::BUILD_LIBDIR;
    let bin = std::env::var_os("UCX_PERFTEST")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| std::path::Path::new(lib).join("../bin/ucx_perftest"));
    bin.exists().then(|| (bin, lib.to_string()))
}

/// Runs the sweep; `ours_args` are the flags every point of ours gets (mode, error handling);
/// `cap` caps the iterations of every point.
pub fn run(max: usize, cap: usize, ours_args: &[String]) -> Vec<Row> {
    let exe = std::env::current_exe().expect("own path");
    let pt = perftest();
    if pt.is_none() {
        eprintln!("bench: no ucx_perftest found (set UCX_PERFTEST); sweeping ucx-async only");
    }
    let mut rows = Vec::new();
    for size in sizes(max) {
        let started = Instant::now();
        let ours = |test: &str, n: usize, key: &str| {
            let mut cmd = Command::new(&exe);
            cmd.args(["-t", test, "-s", &size.to_string(), "-n", &n.to_string()]).args(ours_args);
            field(&output(cmd), key)
        };
        let theirs = |test: &str, n: usize, column: usize| {
            let (bin, lib) = pt.as_ref()?;
            perftest_point(bin, lib, free_port()?, test, size, n, column)
        };
        let (nl, nb) = (lat_iters(size).min(cap), bw_iters(size).min(cap));
        let row = Row {
            size,
            lat: (ours("tag_lat", nl, "median_us"), theirs("tag_lat", nl, 2)),
            bw: (ours("tag_bw", nb, "MiBps"), theirs("tag_bw", nb, 6)),
        };
        // Progress for a run that takes minutes.
        eprintln!("bench: sweep {size} B done in {:.1} s", started.elapsed().as_secs_f64());
        rows.push(row);
    }
    rows
}

/// What `cmd` printed, or empty if it could not run or failed (the point is then missing).
fn output(mut cmd: Command) -> String {
    match cmd.stderr(Stdio::inherit()).output() {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).into_owned(),
        Ok(o) => {
            eprintln!("bench: {cmd:?} failed: {}", o.status);
            String::new()
        }
        Err(e) => {
            eprintln!("bench: cannot run {cmd:?}: {e}");
            String::new()
        }
    }
}

/// `key=value` from a `RESULT` line.
fn field(out: &str, key: &str) -> Option<f64> {
    let line = out.lines().find(|l| l.starts_with("RESULT "))?;
    line.split_whitespace().find_map(|kv| kv.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
}

/// A port nothing listens on now, from the kernel. (A port derived from the process id
/// collided in CI with another test's server: the client then measured the wrong peer, or
/// nothing.)
fn free_port() -> Option<u16> {
    Some(std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port())
}

/// One `ucx_perftest` point over `lo`: column `column` (0-based, after "Final:") of the
/// client's last line. The client is retried while the server is not listening yet.
fn perftest_point(
    bin: &std::path::Path,
    lib: &str,
    port: u16,
    test: &str,
    size: usize,
    n: usize,
    column: usize,
) -> Option<f64> {
    let env = |c: &mut Command| {
        c.env("LD_LIBRARY_PATH", lib).env("UCX_NET_DEVICES", "lo");
    };
    let mut server = Command::new(bin);
    env(&mut server);
    let mut server = server.args(["-p", &port.to_string()]).stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let result = loop {
        let mut client = Command::new(bin);
        env(&mut client);
        client.args(["127.0.0.1", "-p", &port.to_string(), "-t", test, "-s", &size.to_string(), "-n", &n.to_string()]);
        let out = client.stderr(Stdio::null()).output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout);
        let value =
            text.lines().find(|l| l.starts_with("Final:")).and_then(|l| l.split_whitespace().nth(column)?.parse().ok());
        if value.is_some() || Instant::now() > deadline {
            break value;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = server.kill();
    let _ = server.wait();
    result
}

/// The table: one line per size.
pub fn table(rows: &[Row]) -> String {
    let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.3}"));
    let ratio = |(a, b): (Option<f64>, Option<f64>)| match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}x", a / b),
        _ => "-".into(),
    };
    let mut out = format!(
        "{:>10} {:>14} {:>14} {:>7} {:>14} {:>14} {:>7}\n",
        "size (B)", "lat ours (us)", "lat perftest", "ratio", "bw ours (MiB/s)", "bw perftest", "ratio"
    );
    for r in rows {
        out += &format!(
            "{:>10} {:>14} {:>14} {:>7} {:>14} {:>14} {:>7}\n",
            r.size,
            f(r.lat.0),
            f(r.lat.1),
            ratio(r.lat),
            f(r.bw.0),
            f(r.bw.1),
            ratio(r.bw)
        );
    }
    out
}

/// Two charts, latency and bandwidth (both log scale: they span orders of magnitude),
/// against size, ours and perftest's.
pub fn svg(rows: &[Row], title: &str) -> String {
    let line = |name: &str, pick: &dyn Fn(&Row) -> Option<f64>| plot::Series {
        name: name.into(),
        points: rows.iter().map(|r| (r.size, pick(r))).collect(),
    };
    let charts = [
        plot::Chart {
            y_label: "one-way latency, median (µs, log scale)".into(),
            log_y: true,
            series: vec![line("ucx-async", &|r| r.lat.0), line("ucx_perftest", &|r| r.lat.1)],
        },
        plot::Chart {
            y_label: "bandwidth (MiB/s, log scale)".into(),
            log_y: true,
            series: vec![line("ucx-async", &|r| r.bw.0), line("ucx_perftest", &|r| r.bw.1)],
        },
    ];
    plot::svg(title, &charts)
}

//! `bench --sweep`: tag latency and bandwidth from 8 B up to a size limit, for ucx-async (this
//! executable, run once per point with its own server process) and for `ucx_perftest` (from
//! the UCX this build found, or `UCX_PERFTEST`) on the same sizes in the same run; a table on
//! stdout and, with `--plot`, an SVG of both against size.
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A line on a chart: its name and a value (or a missing point) per size.
type Series<'a> = (&'a str, Vec<(usize, Option<f64>)>);

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
    let mut port = 20_000 + (std::process::id() % 20_000) as u16;
    let mut rows = Vec::new();
    for size in sizes(max) {
        let started = Instant::now();
        let ours = |test: &str, n: usize, key: &str| {
            let mut cmd = Command::new(&exe);
            cmd.args(["-t", test, "-s", &size.to_string(), "-n", &n.to_string()]).args(ours_args);
            field(&output(cmd), key)
        };
        let mut theirs = |test: &str, n: usize, column: usize| {
            let (bin, lib) = pt.as_ref()?;
            port += 1;
            perftest_point(bin, lib, port, test, size, n, column)
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
/// against size (log scale), ours and perftest's.
pub fn svg(rows: &[Row], title: &str) -> String {
    let (w, h) = (900.0, 380.0);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"20\" text-anchor=\"middle\" font-size=\"14\">{title}</text>\n",
        2.0 * h + 30.0,
        w / 2.0
    );
    let lat: [Series; 2] = [
        ("ucx-async", rows.iter().map(|r| (r.size, r.lat.0)).collect()),
        ("ucx_perftest", rows.iter().map(|r| (r.size, r.lat.1)).collect()),
    ];
    let bw: [Series; 2] = [
        ("ucx-async", rows.iter().map(|r| (r.size, r.bw.0)).collect()),
        ("ucx_perftest", rows.iter().map(|r| (r.size, r.bw.1)).collect()),
    ];
    out += &chart(&lat, "one-way latency, median (µs, log scale)", true, 30.0, (w, h));
    out += &chart(&bw, "bandwidth (MiB/s, log scale)", true, h + 30.0, (w, h));
    out + "</svg>\n"
}

/// One chart at vertical offset `top`: x is log2(size); y linear or log10.
fn chart(series: &[Series], y_label: &str, log_y: bool, top: f64, (w, h): (f64, f64)) -> String {
    let m = 80.0;
    let points: Vec<(f64, f64)> = series
        .iter()
        .flat_map(|(_, s)| s.iter().filter_map(|(x, y)| y.filter(|v| *v > 0.0).map(|y| ((*x as f64).log2(), y))))
        .collect();
    if points.is_empty() {
        return String::new();
    }
    let ty = |v: f64| if log_y { v.log10() } else { v };
    let (xmin, xmax) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(p.0), b.max(p.0)));
    let (ymin, ymax) = points.iter().fold((f64::MAX, f64::MIN), |(a, b), p| (a.min(ty(p.1)), b.max(ty(p.1))));
    let (ymin, ymax) = if log_y { (ymin.floor(), ymax.ceil().max(ymin.floor() + 1.0)) } else { (0.0, ymax * 1.1) };
    let x = |v: f64| m + (v - xmin) / (xmax - xmin).max(1.0) * (w - 2.0 * m);
    let y = |v: f64| top + h - m + 20.0 - (ty(v) - ymin) / (ymax - ymin).max(1e-9) * (h - m - 20.0);
    let bottom = top + h - m + 20.0;
    let mut out = format!(
        "<line x1=\"{m}\" y1=\"{bottom}\" x2=\"{}\" y2=\"{bottom}\" stroke=\"black\"/>\
         <line x1=\"{m}\" y1=\"{}\" x2=\"{m}\" y2=\"{bottom}\" stroke=\"black\"/>\n\
         <text x=\"12\" y=\"{cy}\" transform=\"rotate(-90 12 {cy})\" text-anchor=\"middle\">{y_label}</text>\n\
         <text x=\"{}\" y=\"{}\" text-anchor=\"middle\">message size (bytes, log scale)</text>\n",
        w - m,
        top + 20.0,
        w / 2.0,
        bottom + 32.0,
        cy = top + h / 2.0,
    );
    // y ticks: decades on a log axis, quarters on a linear one.
    let ticks: Vec<f64> = if log_y {
        (ymin as i32..=ymax as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        (0..=4).map(|i| ymax * f64::from(i) / 4.0).collect()
    };
    for v in ticks {
        let yv = if log_y { y(v) } else { bottom - v / ymax * (h - m - 20.0) };
        out += &format!("<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n", m - 5.0, yv + 4.0, short(v));
    }
    if let Some((_, s)) = series.first() {
        for (size, _) in s {
            out += &format!(
                "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                x((*size as f64).log2()),
                bottom + 15.0,
                short(*size as f64)
            );
        }
    }
    for (k, (name, s)) in series.iter().enumerate() {
        let colour = ["#1f77b4", "#d62728"][k % 2];
        let pts: Vec<String> = s
            .iter()
            .filter_map(|(sz, v)| v.filter(|v| *v > 0.0).map(|v| format!("{:.1},{:.1}", x((*sz as f64).log2()), y(v))))
            .collect();
        out +=
            &format!("<polyline points=\"{}\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\"/>\n", pts.join(" "));
        out += &format!(
            "<text x=\"{}\" y=\"{}\" fill=\"{colour}\">{name}</text>\n",
            m + 10.0,
            top + 36.0 + 14.0 * k as f64
        );
    }
    out
}

/// 1536 -> "1.5K", 8388608 -> "8M", 0.25 -> "0.25".
fn short(v: f64) -> String {
    let (v, unit) = match v {
        v if v >= 1048576.0 => (v / 1048576.0, "M"),
        v if v >= 1024.0 && v.fract() == 0.0 && (v / 1024.0).fract() == 0.0 => (v / 1024.0, "K"),
        v => (v, ""),
    };
    if v.fract() == 0.0 || v >= 100.0 {
        format!("{v:.0}{unit}")
    } else {
        format!("{v:.2}{unit}")
    }
}

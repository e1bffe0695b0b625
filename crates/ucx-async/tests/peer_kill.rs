//! A peer killed mid-transfer never hangs the survivor: for every workload of the `bench`
//! example and every progress mode, one side is SIGKILLed while data flows and the other must
//! exit with a failure within [`DEADLINE`]. This is the reactor's starvation bug (event mode
//! spun between progress and arm without yielding, so the futures that would see the error
//! never ran), and the guarantee that a failure never hangs the Rust examples.
//!
//! Rounds per case: `UCXA_TEST_KILL_ROUNDS` (default 1; the long form is 100, see
//! `scripts/reliability.sh`). Needs the examples built (`cargo test` builds them).
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the survivor may take to notice and exit.
const DEADLINE: Duration = Duration::from_secs(10);

const WORKLOADS: [&str; 6] = ["tag_lat", "tag_bw", "stream_lat", "stream_bw", "ucp_am_lat", "ucp_am_bw"];
const MODES: [&str; 3] = ["event", "polling", "adaptive"];

fn bench_exe() -> PathBuf {
    // target/<profile>/deps/peer_kill-<hash> -> target/<profile>/examples/bench
    let exe = std::env::current_exe().expect("own path");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target/<profile>");
    let bench = dir.join("examples").join("bench");
    assert!(bench.exists(), "{} is missing: run `cargo test -p ucx-async` (it builds the examples)", bench.display());
    bench
}

fn args(workload: &str, mode: &str) -> Vec<String> {
    // Enough iterations that the transfer is still running when the kill comes.
    let size = if workload.ends_with("_bw") { "65536" } else { "8" };
    ["-t", workload, "--mode", mode, "-s", size, "-n", "100000000"].iter().map(|s| s.to_string()).collect()
}

/// A bench process and the lines it prints (read on a thread, so its pipe never fills).
struct Side {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Side {
    fn spawn(workload: &str, mode: &str, role: &[String]) -> Side {
        let mut child = Command::new(bench_exe())
            .args(args(workload, mode))
            .args(role)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start bench");
        let out = child.stdout.take().expect("piped stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Side { child, lines }
    }

    /// The first line starting with `prefix` (the rest of it), within [`DEADLINE`].
    fn expect_line(&self, prefix: &str) -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    if let Some(rest) = l.strip_prefix(prefix) {
                        return rest.trim().to_string();
                    }
                }
                Err(e) => panic!("bench printed no {prefix:?} line: {e}"),
            }
        }
    }
}

/// Waits for `child` to exit within [`DEADLINE`]; kills it and fails the test otherwise.
fn expect_exit(child: &mut Child, what: &str) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{what} still running {DEADLINE:?} after its peer was killed");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// One round: start both sides, let data flow, kill `victim`, and check the survivor exits
/// with a failure.
fn round(workload: &str, mode: &str, kill_server: bool) {
    let mut server = Side::spawn(workload, mode, &["--server".into()]);
    let port = server.expect_line("PORT ");
    let mut client = Side::spawn(workload, mode, &["--client".into(), port]);
    server.expect_line("CONNECTED");
    client.expect_line("CONNECTED");
    // Kill while the main loop runs, past the warm-up.
    std::thread::sleep(Duration::from_millis(100));
    let (victim, survivor, name) = if kill_server {
        (&mut server.child, &mut client.child, "client")
    } else {
        (&mut client.child, &mut server.child, "server")
    };
    if let Ok(Some(status)) = survivor.try_wait() {
        panic!("{workload}/{mode}: the {name} exited before the kill: {status}");
    }
    victim.kill().expect("kill");
    victim.wait().expect("reap");
    let status = expect_exit(survivor, &format!("{workload}/{mode}: the {name}"));
    assert!(!status.success(), "{workload}/{mode}: the {name} reported success after its peer was killed");
}

fn rounds() -> usize {
    std::env::var("UCXA_TEST_KILL_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1)
}

#[test]
fn survivor_exits_when_the_server_is_killed() {
    for _ in 0..rounds() {
        for workload in WORKLOADS {
            for mode in MODES {
                round(workload, mode, true);
            }
        }
    }
}

#[test]
fn survivor_exits_when_the_client_is_killed() {
    for _ in 0..rounds() {
        for workload in WORKLOADS {
            for mode in MODES {
                round(workload, mode, false);
            }
        }
    }
}

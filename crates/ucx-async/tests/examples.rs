//! The example binaries as a user runs them: each answers `--help` (and `-h`) with its usage and
//! exit status 0, at once (no UCX context, no server process, no benchmark run), and `bench`
//! runs a short benchmark start to end with its own server process, as
//! `scripts/bench_vs_perftest.sh` runs it (and `multirail` its TEST mode, with its own peer;
//! `alltoall --bare --window` a short sweep of the three kinds of call; `doctor` its report).
//! Needs the examples built (`cargo test` builds them). `echo_cuda` is built only with the
//! `cuda` feature.
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn example(name: &str) -> Option<PathBuf> {
    // target/<profile>/deps/examples-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("own path");
    let path = exe.parent()?.parent()?.join("examples").join(name);
    path.exists().then_some(path)
}

fn assert_answers_help(name: &str) {
    let path = example(name).unwrap_or_else(|| panic!("example {name} is missing: run `cargo test -p ucx-async`"));
    for flag in ["--help", "-h"] {
        let start = Instant::now();
        let out = Command::new(&path).arg(flag).output().expect("run the example");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{name} {flag}: {:?}\n{stdout}", out.status);
        assert!(stdout.contains(&format!("usage: {name}")), "{name} {flag} printed:\n{stdout}");
        assert!(start.elapsed() < Duration::from_secs(5), "{name} {flag} ran something: {:?}", start.elapsed());
    }
}

#[test]
fn echo_answers_help() {
    assert_answers_help("echo");
}

#[test]
fn bench_answers_help() {
    assert_answers_help("bench");
}

#[test]
fn hash_join_answers_help() {
    assert_answers_help("hash_join");
}

#[test]
fn alltoall_answers_help() {
    assert_answers_help("alltoall");
}

#[test]
fn multirail_answers_help() {
    assert_answers_help("multirail");
}

#[test]
fn doctor_answers_help() {
    assert_answers_help("doctor");
}

/// `doctor` against this machine's UCX: every section, the UCX it opened is mapped once, a
/// protocol row per size in both error-handling columns, and a self-test that moved data.
#[test]
fn doctor_reports_every_section_and_a_self_test_that_moved_data() {
    let stdout = run_example("doctor", &[]);
    for heading in ["== UCX ==", "== Transports by memory type ==", "== Protocols per message size ==", "== System =="]
    {
        assert!(stdout.contains(heading), "{heading} missing:\n{stdout}");
    }
    assert!(!stdout.contains("PROBLEMS") && !stdout.contains("error:"), "{stdout}");
    assert!(stdout.contains("second UCX   no"), "{stdout}");
    let section = |name: &str| stdout.split(&format!("== {name} ==")).nth(1).unwrap_or_default().to_string();
    let protocols = section("Protocols per message size");
    for size in ["8 B ", "64 KiB ", "1 MiB ", "16 MiB "] {
        let row = protocols.lines().find(|l| l.trim_start().starts_with(size)).unwrap_or_default();
        assert_eq!(row.matches(" [").count(), 2, "a protocol [transport] per column for {size}:\n{stdout}");
    }
    // "... for 0.50 s: 1039 MB/s (a copy here: 29064 MB/s)"
    let selftest = section("Self-test");
    let rate = selftest.split(" s: ").nth(1).and_then(|r| r.split(" MB/s").next()).and_then(|r| r.parse::<f64>().ok());
    assert!(rate.is_some_and(|r| r > 0.0), "no positive rate:\n{stdout}");
    assert!(selftest.contains("went as "), "{stdout}");
}

/// The multi-rail CLI's TEST mode against the peer process it starts: every point's bytes
/// checked by the receiver (a point that differs prints FAIL and fails the run); and its
/// PROFILE mode's per-rail lines.
#[test]
fn multirail_test_mode_checks_every_byte_with_its_own_peer() {
    let args = [
        "--modes",
        "TEST,SPLIT,PROFILE",
        "--rails",
        "1,3",
        "--stages",
        "1,2",
        "--sizes",
        "0,1,65537,3000000",
        "--iters",
        "2",
    ];
    let stdout = run_example("multirail", &args);
    let tests: Vec<&str> = stdout.lines().filter(|l| l.starts_with("RESULT Test ")).collect();
    // Rails 1: 2 stages x 1 ratio; rails 3: 2 stages x 2 ratios; 4 sizes each.
    assert_eq!(tests.len(), (2 + 4) * 4, "{stdout}");
    assert!(tests.iter().all(|l| l.ends_with(" OK")), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("RESULT Split 3 2 0.75 3000000 ")), "{stdout}");
    // PROFILE: a line per rail with its share, then which rail finished last.
    let profile: Vec<&str> = stdout.lines().filter(|l| l.starts_with("PROFILE 3 2 0.75 3000000 ")).collect();
    assert_eq!(profile.len(), 4, "{stdout}");
    assert!(profile[0].contains("rail=0 share=25.0% ") && profile[1].contains("rail=1 share=37.5% "), "{stdout}");
    assert!(profile[3].contains("slowest=rail"), "{stdout}");
}

/// `--devices auto`: each rail's devices come from this machine's topology (a NIC each, from
/// the CPUs here), plus `lo`, since the rails meet at 127.0.0.1; both sides move every byte.
#[test]
fn multirail_chooses_its_rails_devices_from_the_topology() {
    let args = ["--devices", "auto", "--modes", "TEST", "--rails", "2", "--stages", "2", "--ratios", "0.5"];
    let stdout = run_example("multirail", &[&args[..], &["--sizes", "65537", "--iters", "2"]].concat());
    let header = stdout.lines().find(|l| l.starts_with("# mode rails")).unwrap_or_default();
    let chosen = header.split("(devices ").nth(1).unwrap_or_default().trim_end_matches(')');
    let topo = ucx_topology::Topology::system().and_then(|t| t.auto_rail_devices(0, 2)).expect("a topology");
    let with_lo = |d: String| if d.split(',').any(|x| x == "lo") { d } else { d + ",lo" };
    let want: Vec<String> = topo.iter().map(|d| with_lo(d.to_string())).collect();
    assert_eq!(chosen, want.join(","), "{stdout}");
    assert!(stdout.lines().any(|l| l.starts_with("RESULT Test 2 2 0.5 65537 ") && l.ends_with(" OK")), "{stdout}");
}

/// TEST mode across two network namespaces joined by one veth link per rail
/// (`scripts/bench_multirail_netns.sh`): the peer listens on each rail's own address, each
/// rail's context uses only its link, and every byte is checked. Needs root and `ip`; skipped
/// (saying so) where either is missing.
#[test]
fn multirail_test_mode_over_separate_links_in_two_namespaces() {
    let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.trim_ascii() == b"0");
    let ip = Command::new("ip").arg("-V").output().is_ok_and(|o| o.status.success());
    if !root || !ip {
        eprintln!("skipped: needs root and iproute2 (root {root}, ip {ip})");
        return;
    }
    let exe = example("multirail").expect("example multirail is missing: run `cargo test -p ucx-async`");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench_multirail_netns.sh");
    let plot = std::env::temp_dir().join(format!("multirail-netns-{}.svg", std::process::id()));
    let out = Command::new("bash")
        .arg(&script)
        .envs([("RAILS", "2"), ("RATE", "none"), ("MODES", "TEST"), ("SIZES", "0,1,65537,3000000")])
        .envs([("STAGES", "1,2"), ("ITERS", "2"), ("PERFTEST", "0")])
        .env("MULTIRAIL", &exe)
        .env("PLOT", &plot)
        .output()
        .expect("run bench_multirail_netns.sh");
    let _ = std::fs::remove_file(&plot);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}\n{stdout}\n{stderr}", out.status);
    assert!(stdout.contains("devices ra0,ra1"), "{stdout}");
    let tests: Vec<&str> = stdout.lines().filter(|l| l.starts_with("RESULT Test ")).collect();
    // Rails 1: 2 stages; rails 2: 2 stages x 1 ratio; 4 sizes each.
    assert_eq!(tests.len(), (2 + 2) * 4, "{stdout}");
    assert!(tests.iter().all(|l| l.ends_with(" OK")), "{stdout}");
}

#[test]
fn hash_join_on_three_ranks_matches_the_single_process_join() {
    let stdout = run_example("hash_join", &["--ranks", "3", "--rows", "20000"]);
    assert!(stdout.contains("RESULT pairs=") && stdout.contains("matches the single-process join"), "{stdout}");
}

#[test]
fn hash_join_net_devices_auto_leaves_a_set_ucx_net_devices_and_refuses_other_values() {
    // UCX_NET_DEVICES=lo is set, so the ranks stay on loopback and say so; the rule itself
    // (`Topology::auto_net_devices`) is tested on the DGX XML in ucx-topology.
    let path = example("hash_join").expect("example hash_join: run `cargo test -p ucx-async`");
    let run = |value: &str| {
        Command::new(&path)
            .args(["--ranks", "2", "--rows", "2000", "--net-devices", value])
            .env_remove("RANK")
            .env("UCX_NET_DEVICES", "lo")
            .output()
            .expect("run hash_join")
    };
    let out = run("auto");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("matches the single-process join"), "{stdout}\n{stderr}");
    assert_eq!(stderr.matches("UCX_NET_DEVICES=lo is set, so --net-devices auto leaves it").count(), 2, "{stderr}");
    let out = run("eth9");
    assert!(!out.status.success(), "{:?}", out.status);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--net-devices takes `auto`"));
}

#[cfg(feature = "cuda")]
#[test]
fn echo_cuda_answers_help() {
    assert_answers_help("echo_cuda");
}

#[cfg(feature = "cuda")]
#[test]
fn bench_cuda_answers_help() {
    assert_answers_help("bench_cuda");
}

/// Runs example `name` with `args` to its end (it starts its own server or ranks) and returns
/// its stdout; fails if it runs longer than 60 s (a hang) or exits unsuccessfully.
fn run_example(name: &str, args: &[&str]) -> String {
    let path = example(name).unwrap_or_else(|| panic!("example {name} is missing: run `cargo test -p ucx-async`"));
    let mut child = Command::new(path)
        .args(args)
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poll the example").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("the example's output");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{name} {args:?}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// `bench` with `args`: its RESULT line.
fn bench_result(args: &[&str]) -> String {
    let stdout = run_example("bench", args);
    stdout.lines().find(|l| l.starts_with("RESULT ")).unwrap_or_else(|| panic!("no RESULT line:\n{stdout}")).to_string()
}

#[test]
fn bench_runs_with_its_own_server() {
    // The server prints `CONNECTED` after its port; the supervisor once stopped reading after
    // the port, the server's print then failed and the client hung.
    for extra in [&[][..], &["--no-error-handling", "--worker-address"][..]] {
        let mut args = vec!["-t", "tag_lat", "-s", "8", "-n", "200", "--mode", "polling"];
        args.extend_from_slice(extra);
        let line = bench_result(&args);
        assert!(line.contains("test=tag_lat") && line.contains("median_us="), "{line}");
    }
}

/// The server's `PORT` line shares its stdout with UCX's own log, which C stdio flushes in
/// blocks, mid-line: with `UCX_LOG_LEVEL=debug` (or `UCX_PROTO_INFO=y` on a GPU machine) the
/// port once followed a partial log line, went unrecognised, and the run failed after 30 s.
#[test]
fn bench_finds_its_servers_port_among_ucx_log_lines() {
    let path = example("bench").expect("example bench is missing: run `cargo test -p ucx-async`");
    let log = std::env::temp_dir().join(format!("ucxa-bench-debug-{}.log", std::process::id()));
    let file = std::fs::File::create(&log).expect("create the log file");
    // stdout to a file, not a pipe: debug logging would fill a pipe no one reads yet.
    let mut child = Command::new(path)
        .args(["-t", "tag_lat", "-s", "8", "-n", "100", "--mode", "polling"])
        .env("UCX_LOG_LEVEL", "debug")
        .stdout(file)
        .stderr(Stdio::null())
        .spawn()
        .expect("run bench");
    let status = exit_by(&mut child, Instant::now() + Duration::from_secs(60), "bench with UCX's debug log ran 60 s");
    let out = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    assert!(status.success(), "bench failed ({status:?}); its output ends:\n{}", tail(&out));
    assert!(out.lines().any(|l| l.starts_with("RESULT ")), "no RESULT line; the output ends:\n{}", tail(&out));
}

fn tail(s: &str) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

#[test]
fn bench_sweeps_ours_and_perftest_into_a_table_and_a_plot() {
    let plot = std::env::temp_dir().join(format!("ucx-async-sweep-{}.svg", std::process::id()));
    let stdout = run_example("bench", &["--sweep", "--max-size", "64", "-n", "300", "--plot", plot.to_str().unwrap()]);
    let rows: Vec<&str> = stdout.lines().filter(|l| l.trim_start().starts_with(|c: char| c.is_ascii_digit())).collect();
    assert_eq!(rows.len(), 2, "8 B and 64 B:\n{stdout}");
    // Every figure of ours is there; perftest's too (the UCX this build found ships it).
    assert!(rows.iter().all(|r| !r.split_whitespace().any(|f| f == "-")), "{stdout}");
    let svg = std::fs::read_to_string(&plot).expect("the plot");
    let _ = std::fs::remove_file(&plot);
    assert!(svg.starts_with("<svg") && svg.matches("<polyline").count() == 4, "{svg}");
}

#[test]
fn alltoall_plots_what_the_comparison_script_collected() {
    let dir = std::env::temp_dir().join(format!("ucx-async-a2a-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (data, svg) = (dir.join("lines"), dir.join("a2a.svg"));
    std::fs::write(&data, "1024 0.1 ours TCP, 2 ranks\n4096 0.4 ours TCP, 2 ranks\n1024 2 MPI shm, 2 ranks\n").unwrap();
    let args = ["--plot-from", data.to_str().unwrap(), "--plot", svg.to_str().unwrap()];
    run_example("alltoall", &args);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert_eq!(text.matches("<polyline").count(), 2, "{text}");
    assert!(text.contains("MPI shm, 2 ranks"), "{text}");
    // A line that is not `SIZE GBPS NAME` is named, and nothing is written.
    std::fs::write(&data, "1024 fast ours\n").unwrap();
    let out = Command::new(example("alltoall").unwrap()).args(args).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains(":1: expected `SIZE GBPS NAME`"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn alltoall_bare_and_window_time_their_exchanges_beside_the_communicator() {
    // Two ranks it starts itself; the debug build checks every call's parts, bare ones too, and
    // every build each window call's parts.
    let sizes = ["--ranks", "2", "--min-size", "1024", "--max-size", "65536", "--iters", "4"];
    let stdout = run_example("alltoall", &[&sizes[..], &["--bare", "--window"]].concat());
    let window_only = run_example("alltoall", &[&sizes[..], &["--window-only"]].concat());
    for size in [1024, 4096, 16384, 65536] {
        for (out, name, count) in [
            (&stdout, "ucx-async", 1),
            (&stdout, "bare", 1),
            (&stdout, "window", 1),
            (&window_only, "window", 1),
            (&window_only, "ucx-async", 0),
        ] {
            let line = format!("RESULT impl={name} mode=Event ranks=2 size={size} median_us=");
            assert_eq!(out.matches(&line).count(), count, "{line}\n{out}");
        }
    }
}

/// Three `alltoall` ranks as separate processes; rank 2 is SIGKILLed once rank 0 has printed
/// its first result. Ranks 0 and 1 must end with an error naming the failure within 30 s.
#[test]
fn alltoall_ranks_fail_not_hang_when_one_is_killed() {
    ranks_fail_not_hang_when_one_is_killed(&["--max-size", "67108864"]);
}

/// The same through shared-memory windows: rank 2 dies while the others write into its
/// window, which they still map.
#[test]
fn alltoall_window_ranks_fail_not_hang_when_one_is_killed() {
    ranks_fail_not_hang_when_one_is_killed(&["--max-size", "1048576", "--window-only"]);
}

fn ranks_fail_not_hang_when_one_is_killed(args: &[&str]) {
    use std::io::{BufRead, BufReader};
    let path = example("alltoall").expect("example alltoall is missing: run `cargo test -p ucx-async`");
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut ranks: Vec<_> = (0..3)
        .map(|r| {
            Command::new(&path)
                .args(args)
                .args(["--iters", "1000"])
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", "3")
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .env("UCX_NET_DEVICES", "lo")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("run an alltoall rank")
        })
        .collect();
    let first = BufReader::new(ranks[0].stdout.take().unwrap()).lines().map_while(|l| l.ok()).next();
    assert!(first.as_deref().is_some_and(|l| l.starts_with("RESULT ")), "rank 0 printed {first:?}");
    ranks[2].kill().unwrap();
    let _ = ranks[2].wait();
    let deadline = Instant::now() + Duration::from_secs(30);
    for (r, child) in ranks.iter_mut().enumerate().take(2) {
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                assert!(!status.success(), "rank {r} carried on as if rank 2 were there");
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("rank {r} still runs 30 s after rank 2 was killed");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let mut err = String::new();
        std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
        assert!(err.contains(&format!("alltoall rank {r}:")), "rank {r} said: {err}");
    }
}

/// The pids of `pid`'s children (Linux: /proc/PID/task/PID/children).
fn children_of(pid: u32) -> Vec<u32> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    list.split_whitespace().filter_map(|p| p.parse().ok()).collect()
}

/// `child`'s exit status, once it has exited; fails with `why` if it still runs at `deadline`.
fn exit_by(child: &mut std::process::Child, deadline: Instant, why: &str) -> std::process::ExitStatus {
    loop {
        if let Some(status) = child.try_wait().expect("poll the child") {
            return status;
        }
        assert!(Instant::now() < deadline, "{why}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn alive(pid: u32) -> bool {
    // A zombie has exited; only its parent's wait is missing.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

/// `alltoall --ranks 3` with `UCXA_ERROR_HANDLING=none`, started by the example's own
/// launcher. Without error handling a rank cannot see a peer die, so the launcher must end the
/// job: killing one rank makes it kill the others and exit non-zero; killing the launcher
/// takes the ranks with it.
#[test]
fn alltoall_launcher_ends_a_job_without_error_handling_when_a_rank_or_itself_dies() {
    use std::io::{BufRead, BufReader};
    let path = example("alltoall").expect("example alltoall is missing: run `cargo test -p ucx-async`");
    for kill_launcher in [false, true] {
        let mut launcher = Command::new(&path)
            .args(["--ranks", "3", "--max-size", "67108864", "--iters", "1000"])
            .env_remove("RANK")
            .env("UCXA_ERROR_HANDLING", "none")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run alltoall");
        let first = BufReader::new(launcher.stdout.take().unwrap()).lines().map_while(|l| l.ok()).next();
        assert!(first.as_deref().is_some_and(|l| l.starts_with("RESULT ")), "rank 0 printed {first:?}");
        let ranks = children_of(launcher.id());
        assert_eq!(ranks.len(), 3, "{ranks:?}");
        if kill_launcher {
            launcher.kill().unwrap();
        } else {
            // SAFETY: kill(2) on a pid this test's child started; it is not reaped yet.
            assert_eq!(unsafe { libc::kill(ranks[2] as i32, libc::SIGKILL) }, 0);
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = exit_by(&mut launcher, deadline, "the launcher still runs 10 s after a rank was killed");
        assert!(!status.success());
        while ranks.iter().any(|&p| alive(p)) {
            assert!(Instant::now() < deadline, "ranks {ranks:?} outlive the job (kill_launcher: {kill_launcher})");
            std::thread::sleep(Duration::from_millis(20));
        }
        if !kill_launcher {
            let mut err = String::new();
            std::io::Read::read_to_string(launcher.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(err.contains("stopping the other ranks"), "{err}");
        }
    }
}

/// `bench` with its own server and endpoints without peer-failure handling, connected as
/// `ucx_perftest` connects (worker addresses): neither side can see the other die through UCX,
/// so the processes themselves must. Killing the server ends the client with a failure;
/// killing the client takes the server with it. (Run as two separate processes, the client
/// still waits 8 s after its server's SIGKILL.)
#[test]
fn bench_without_error_handling_never_outlives_its_other_process() {
    use std::io::{BufRead, BufReader};
    let path = example("bench").expect("example bench is missing: run `cargo test -p ucx-async`");
    for kill_server in [true, false] {
        let mut client = Command::new(&path)
            .args(["-t", "tag_lat", "-s", "8", "-n", "100000000", "--mode", "polling"])
            .args(["--no-error-handling", "--worker-address"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run bench");
        let connected = BufReader::new(client.stdout.take().unwrap()).lines().map_while(|l| l.ok()).next();
        assert_eq!(connected.as_deref(), Some("CONNECTED"), "bench printed {connected:?}");
        let servers = children_of(client.id());
        assert_eq!(servers.len(), 1, "{servers:?}");
        std::thread::sleep(Duration::from_millis(100)); // round trips under way
        if kill_server {
            // SAFETY: kill(2) on a pid this test's child started; it is not reaped yet.
            assert_eq!(unsafe { libc::kill(servers[0] as i32, libc::SIGKILL) }, 0);
        } else {
            client.kill().unwrap();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = exit_by(&mut client, deadline, "the client still runs 10 s after its server was killed");
        assert!(!status.success());
        while alive(servers[0]) {
            assert!(Instant::now() < deadline, "the server outlives its client (kill_server: {kill_server})");
            std::thread::sleep(Duration::from_millis(20));
        }
        if kill_server {
            let mut err = String::new();
            std::io::Read::read_to_string(client.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(err.contains("the server process failed"), "{err}");
        }
    }
}

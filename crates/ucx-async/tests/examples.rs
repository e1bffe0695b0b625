//! The example binaries as a user runs them: each answers `--help` (and `-h`) with its usage and
//! exit status 0, at once (no UCX context, no server process, no benchmark run), and `bench`
//! runs a short benchmark start to end with its own server process, as
//! `scripts/bench_vs_perftest.sh` runs it. Needs the examples built (`cargo test` builds
//! them). `echo_cuda` is built only with the `cuda` feature.
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
fn hash_join_on_three_ranks_matches_the_single_process_join() {
    let path = example("hash_join").expect("example hash_join is missing: run `cargo test -p ucx-async`");
    let mut child = Command::new(path)
        .args(["--ranks", "3", "--rows", "20000"])
        .env_remove("RANK")
        .stdout(Stdio::piped())
        .spawn()
        .expect("run hash_join");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poll hash_join").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("hash_join did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("hash_join output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}\n{stdout}", out.status);
    assert!(stdout.contains("RESULT pairs=") && stdout.contains("matches the single-process join"), "{stdout}");
}

#[cfg(feature = "cuda")]
#[test]
fn echo_cuda_answers_help() {
    assert_answers_help("echo_cuda");
}

/// Runs `bench` with `args` (it starts its own server process) and returns its RESULT line;
/// fails if it runs longer than 60 s (a hang).
fn bench_result(args: &[&str]) -> String {
    let path = example("bench").expect("example bench is missing: run `cargo test -p ucx-async`");
    let mut child =
        Command::new(path).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("run bench");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("poll bench").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("bench {args:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("bench output");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench {args:?}: {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
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

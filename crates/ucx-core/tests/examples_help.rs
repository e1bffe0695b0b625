//! ucx-core's examples answer `--help` with their usage and exit status 0 without running the
//! benchmark, and `core_lat` runs (a short ping-pong with its own peer process). Needs the
//! examples built (`cargo test` builds them).
use std::path::PathBuf;
use std::process::Command;

fn example(name: &str) -> PathBuf {
    // target/<profile>/deps/examples_help-<hash> -> target/<profile>/examples/<name>
    let exe = std::env::current_exe().expect("own path");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("examples").join(name);
    assert!(path.exists(), "{} is missing: run `cargo test -p ucx-core`", path.display());
    path
}

#[test]
fn examples_answer_help() {
    for name in ["core_pingpong", "core_lat"] {
        let out = Command::new(example(name)).arg("--help").output().expect("run the example");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains(&format!("usage: {name}")),
            "{name}: {:?}\n{stdout}",
            out.status
        );
    }
}

#[test]
fn core_lat_measures_with_its_own_peer() {
    let out = Command::new(example("core_lat")).args(["--iters", "2000"]).output().expect("run core_lat");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let median: f64 = stdout
        .split_whitespace()
        .find_map(|f| f.strip_prefix("median_us="))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no median in {stdout}"));
    assert!(median > 0.0, "{stdout}");
}

//! The `core_pingpong` example answers `--help` with its usage and exit status 0 without running
//! the benchmark. Needs the examples built (`cargo test` builds them).
use std::process::Command;

#[test]
fn core_pingpong_answers_help() {
    // target/<profile>/deps/examples_help-<hash> -> target/<profile>/examples/core_pingpong
    let exe = std::env::current_exe().expect("own path");
    let path = exe.parent().and_then(|d| d.parent()).expect("target/<profile>").join("examples/core_pingpong");
    assert!(path.exists(), "{} is missing: run `cargo test -p ucx-core`", path.display());
    let out = Command::new(&path).arg("--help").output().expect("run core_pingpong");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success() && stdout.contains("usage: core_pingpong"), "{:?}\n{stdout}", out.status);
}

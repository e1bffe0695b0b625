//! Every example binary of this crate answers `--help` (and `-h`) with its usage and exit status
//! 0, at once: no UCX context, no server process, no benchmark run. Needs the examples built
//! (`cargo test` builds them). `echo_cuda` is built only with the `cuda` feature.
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

fn example(name: &str) -> Option<PathBuf> {
    // target/<profile>/deps/examples_help-<hash> -> target/<profile>/examples/<name>
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

#[cfg(feature = "cuda")]
#[test]
fn echo_cuda_answers_help() {
    assert_answers_help("echo_cuda");
}

//! UCX opened at run time (`library`): where it is found, and the error when the place asked
//! for holds nothing. Each case that needs its own environment runs this test binary again as
//! a child (the search happens once per process).
use std::path::Path;
use std::process::Command;

use ucx_core::{library, version, Context, Status};

/// Set in a child: which case it runs.
const CASE: &str = "UCXRS_LIBRARY_TEST_CASE";

/// Runs test `name` of this binary in a child with `env` added; returns its combined output.
fn child(name: &str, env: &[(&str, &str)]) -> String {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]).env(CASE, name);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("running the test binary again");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "child {name} failed:\n{text}");
    assert!(text.contains("1 passed"), "child {name} did not run its test:\n{text}");
    text
}

/// True in the child that runs `name`; the parent's run of the same test does nothing itself.
fn is_child(name: &str) -> bool {
    std::env::var(CASE).as_deref() == Ok(name)
}

/// The prefix whose `lib/` holds the UCX this process loaded.
fn loaded_prefix() -> String {
    let path = library::load().unwrap().path().to_string();
    let lib = Path::new(&path).parent().expect("a directory");
    lib.parent().expect("a prefix").display().to_string()
}

/// A child's half of the tests that check where UCX was found: says so on stdout (the parent
/// reads it), then proves the library usable.
fn report_where_found() {
    let loaded = library::load().unwrap();
    println!("found by: {} ({})", loaded.found_by(), loaded.path());
    Context::builder().build().unwrap();
}

#[test]
fn found_and_usable() {
    let loaded = library::load().unwrap();
    assert!(loaded.path().contains("libucp.so"), "{}", loaded.path());
    assert!(!loaded.found_by().is_empty());
    assert!(version::runtime().unwrap() >= (version::MIN_SUPPORTED.0, version::MIN_SUPPORTED.1, 0));
    Context::builder().build().unwrap();
}

#[test]
fn ucx_dir_at_run_time_is_used() {
    const NAME: &str = "ucx_dir_at_run_time_is_used";
    if is_child(NAME) {
        return report_where_found();
    }
    let prefix = loaded_prefix();
    let out = child(NAME, &[("UCX_DIR", &prefix)]);
    assert!(out.contains(&format!("found by: UCX_DIR={prefix} ")), "{out}");
}

#[test]
fn ucx_dir_without_ucx_is_an_error_naming_it() {
    const NAME: &str = "ucx_dir_without_ucx_is_an_error_naming_it";
    if is_child(NAME) {
        let e = Context::builder().build().unwrap_err();
        assert_eq!(e.status(), Status::NoDevice, "{e}");
        let text = e.to_string();
        assert!(text.contains("UCX_DIR=/nonexistent/ucx is set but holds no usable UCX library"), "{text}");
        assert!(text.contains("/nonexistent/ucx/lib/libucp.so.0"), "{text}");
        assert!(text.contains("/nonexistent/ucx/lib64/libucp.so.0"), "{text}");
        // Every way in gives the same error, and nothing panics.
        assert_eq!(ucx_core::Config::from_env().err().map(|e| e.to_string()), Some(text.clone()));
        assert_eq!(version::runtime().unwrap_err().to_string(), text);
        assert!(!library::is_loaded());
        println!("child saw: {text}");
        return;
    }
    let out = child(NAME, &[("UCX_DIR", "/nonexistent/ucx")]);
    assert!(out.contains("child saw: ucx_core::library::load: No such device"), "{out}");
}

#[test]
fn a_libucp_already_loaded_is_reused() {
    const NAME: &str = "a_libucp_already_loaded_is_reused";
    if is_child(NAME) {
        return report_where_found();
    }
    // As the Python extension has it: libucp mapped before ucx-core looks (here by LD_PRELOAD),
    // with UCX_DIR pointing elsewhere to show that the loaded copy comes first.
    let path = library::load().unwrap().path().to_string();
    let out = child(NAME, &[("LD_PRELOAD", &path), ("UCX_DIR", "/nonexistent/ucx")]);
    assert!(out.contains("found by: already loaded in this process"), "{out}");
}

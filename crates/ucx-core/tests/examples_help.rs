//! ucx-core's examples answer `--help` with their usage and exit status 0 without running the
//! benchmark, and `core_lat` runs each of its rungs (tag and active messages, through ucx-core or
//! as raw UCX calls: a short ping-pong with its own peer process). Needs the examples built (`cargo test` builds them).
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
    let rungs: [(&[&str], &str, &str); 6] = [
        (&[], "tag_lat", "ucx-core"),
        (&["--raw"], "tag_lat", "raw"),
        (&["--raw", "--single"], "tag_lat", "raw"),
        (&["--am"], "am_lat", "ucx-core"),
        (&["--raw-am", "perftest"], "am_lat", "raw-am-perftest"),
        (&["--raw-am", "ucxpy"], "am_lat", "raw-am-ucxpy"),
    ];
    for (rung, test, layer) in rungs {
        let out =
            Command::new(example("core_lat")).args(["--iters", "2000"]).args(rung).output().expect("run core_lat");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{rung:?}: {:?}\n{stdout}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
        let field = |name: &str| stdout.split_whitespace().find_map(|f| f.strip_prefix(name)).map(str::to_owned);
        assert_eq!(field("test=").as_deref(), Some(test), "{stdout}");
        assert_eq!(field("layer=").as_deref(), Some(layer), "{stdout}");
        let median: f64 =
            field("median_us=").and_then(|v| v.parse().ok()).unwrap_or_else(|| panic!("no median in {stdout}"));
        assert!(median > 0.0, "{stdout}");
    }
}

#[test]
fn core_lat_refuses_an_unknown_active_message_style_by_name() {
    let out = Command::new(example("core_lat")).args(["--raw-am", "bogus"]).output().expect("run core_lat");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--raw-am takes perftest or ucxpy"));
}

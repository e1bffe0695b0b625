//! Shared by the multi-rank examples: start N copies of this executable as ranks 0..N on
//! 127.0.0.1, with the variables torchrun sets, and read numeric options.
use std::process::{Command, ExitCode};

// An example may include both this file and its sibling that also includes it.
#[allow(clippy::duplicate_mod)]
#[path = "die_with_parent.rs"]
mod die_with_parent;
use die_with_parent::die_with_parent;

/// The value of `--name N`, if given; exits with the usage if it is not a number.
pub fn number_option(args: &[String], name: &str, usage: &str) -> Option<usize> {
    let i = args.iter().position(|a| a == name)?;
    match args.get(i + 1).map(|v| v.parse()) {
        Some(Ok(v)) => Some(v),
        _ => {
            eprintln!("{name} needs a number\n\n{usage}");
            std::process::exit(2);
        }
    }
}

/// Writes `line` to stderr in one write, so the lines of ranks sharing a pipe do not interleave
/// (`eprintln!` writes a formatted line in pieces: a CI run read "rank rank 10: ...").
fn say(line: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// The context a rank's worker runs on. `--net-devices auto`: `UCX_NET_DEVICES` from the
/// devices nearest the GPU of this rank's local rank, else nearest its CPUs
/// (`Topology::auto_net_devices`, the rule Python's `net_devices="auto"` uses), unless
/// `UCX_NET_DEVICES` is set (the user's choice wins). Says what it chose on stderr.
#[allow(dead_code)] // multirail builds its own contexts per rail
pub fn rank_context(args: &[String], usage: &str) -> ucx_async::Result<ucx_async::core::Context> {
    let mut builder = ucx_async::core::Context::builder();
    let Some(i) = args.iter().position(|a| a == "--net-devices") else { return Ok(builder.build()?) };
    if args.get(i + 1).map(String::as_str) != Some("auto") {
        eprintln!("--net-devices takes `auto`\n\n{usage}");
        std::process::exit(2);
    }
    let rank = std::env::var("RANK").unwrap_or_default();
    if let Ok(set) = std::env::var("UCX_NET_DEVICES") {
        say(&format!("rank {rank}: UCX_NET_DEVICES={set} is set, so --net-devices auto leaves it"));
        return Ok(builder.build()?);
    }
    let local = ucx_async::Launch::local_rank()?;
    match ucx_topology::Topology::system().and_then(|t| t.auto_net_devices(local as u32)) {
        Ok(devices) => {
            say(&format!("rank {rank}: UCX_NET_DEVICES={devices} (auto, local rank {local})"));
            builder = builder.option("NET_DEVICES", devices.to_string());
        }
        Err(e) => say(&format!("rank {rank}: --net-devices auto chose nothing ({e}); UCX picks its own")),
    }
    Ok(builder.build()?)
}

/// Runs `ranks` copies of this program with `RANK`, `LOCAL_RANK`, `WORLD_SIZE`,
/// `MASTER_ADDR=127.0.0.1`, a rendezvous file (`UCXA_RENDEZVOUS_FILE`, in the temporary
/// directory) and `UCX_NET_DEVICES=lo` (unless set or `--net-devices` given), and waits for
/// them all. Rank 0 listens on a port the system picks and writes it to the file, so no port
/// is picked here and then lost to another process before rank 0 binds it. As mpirun and
/// torchrun do, a rank that fails ends the job (the others are killed), and the ranks die with
/// this process: with `UCXA_ERROR_HANDLING=none` a rank cannot tell that a peer died, so
/// nothing else would stop it waiting.
#[allow(dead_code)] // multirail reads options only
pub fn run_ranks(name: &str, ranks: usize, args: &[String]) -> ExitCode {
    let rendezvous = std::env::temp_dir().join(format!("{name}-{}.addr", std::process::id()));
    let _ = std::fs::remove_file(&rendezvous); // a file a dead launcher of this pid left
    let exe = std::env::current_exe().expect("own path");
    let mut children = Vec::new();
    for r in 0..ranks {
        let mut cmd = Command::new(&exe);
        if std::env::var_os("UCX_NET_DEVICES").is_none() && !args.iter().any(|a| a == "--net-devices") {
            cmd.env("UCX_NET_DEVICES", "lo"); // the ranks meet on 127.0.0.1
        }
        cmd.args(&args[1..])
            .env("RANK", r.to_string())
            .env("LOCAL_RANK", r.to_string())
            .env("WORLD_SIZE", ranks.to_string())
            .env("MASTER_ADDR", "127.0.0.1")
            .env_remove("MASTER_PORT")
            .env(ucx_async::collective::RENDEZVOUS_FILE, &rendezvous);
        die_with_parent(&mut cmd);
        match cmd.spawn() {
            Ok(c) => children.push((r, c)),
            Err(e) => {
                eprintln!("{name}: rank {r} could not run: {e}");
                return ExitCode::FAILURE; // the ranks started so far die with this process
            }
        }
    }
    let mut ok = true;
    while !children.is_empty() {
        let mut failed = false;
        children.retain_mut(|(r, c)| match c.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                if !status.success() {
                    eprintln!("{name}: rank {r} ended with {status}");
                    failed = true;
                }
                false
            }
            Err(e) => {
                eprintln!("{name}: rank {r} could not be waited for: {e}");
                failed = true;
                false
            }
        });
        if failed && ok && !children.is_empty() {
            eprintln!("{name}: stopping the other ranks");
            for (_, c) in &mut children {
                let _ = c.kill();
            }
        }
        ok &= !failed;
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // Rank 0 removes it once every rank has joined; not if the job failed before that.
    let _ = std::fs::remove_file(&rendezvous);
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

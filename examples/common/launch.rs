//! Shared by the multi-rank examples: start N copies of this executable as ranks 0..N on
//! 127.0.0.1, with the variables torchrun sets, and read numeric options.
use std::process::{Command, ExitCode};

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

/// Runs `ranks` copies of this program with `RANK`, `WORLD_SIZE`, `MASTER_ADDR=127.0.0.1` and
/// a free `MASTER_PORT` (and `UCX_NET_DEVICES=lo` unless set), and waits for them all.
#[allow(dead_code)] // multirail reads options only
pub fn run_ranks(name: &str, ranks: usize, args: &[String]) -> ExitCode {
    // A free port for rank 0's listener (released here, bound again by rank 0 at once).
    let port = match std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()) {
        Ok(a) => a.port(),
        Err(e) => {
            eprintln!("{name}: no free port on 127.0.0.1: {e}");
            return ExitCode::FAILURE;
        }
    };
    let exe = std::env::current_exe().expect("own path");
    let children: Vec<_> = (0..ranks)
        .map(|r| {
            let mut cmd = Command::new(&exe);
            if std::env::var_os("UCX_NET_DEVICES").is_none() {
                cmd.env("UCX_NET_DEVICES", "lo"); // the ranks meet on 127.0.0.1
            }
            cmd.args(&args[1..])
                .env("RANK", r.to_string())
                .env("WORLD_SIZE", ranks.to_string())
                .env("MASTER_ADDR", "127.0.0.1")
                .env("MASTER_PORT", port.to_string())
                .spawn()
        })
        .collect();
    let mut ok = true;
    for (r, child) in children.into_iter().enumerate() {
        match child.and_then(|mut c| c.wait()) {
            Ok(status) if status.success() => {}
            Ok(status) => {
                eprintln!("{name}: rank {r} ended with {status}");
                ok = false;
            }
            Err(e) => {
                eprintln!("{name}: rank {r} could not run: {e}");
                ok = false;
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

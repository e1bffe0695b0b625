//! Shared by the two-process examples: run this same executable again as the server, learn
//! the port(s) it listens on, run the client, and reap the server.
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

/// Starts `current_exe() server_args...`, waits for its `PORT n` line, runs `client(n)`, then
/// waits for the server to exit (killing it if the client failed). Exits the process with a
/// message if the server cannot be started or reports no port. `name` prefixes messages.
#[allow(dead_code)] // not every example that includes this module uses both entry points
pub fn run_with_server<E>(
    name: &str,
    server_args: &[String],
    client: impl FnOnce(u16) -> Result<(), E>,
) -> Result<(), E> {
    run_with_server_ports(name, server_args, |ports| client(ports[0]))
}

/// [`run_with_server`] for a server that listens on several ports: its `PORT a,b,...` line.
pub fn run_with_server_ports<E>(
    name: &str,
    server_args: &[String],
    client: impl FnOnce(&[u16]) -> Result<(), E>,
) -> Result<(), E> {
    let exe = std::env::current_exe().expect("own path");
    let mut child = match Command::new(exe).args(server_args).stdout(Stdio::piped()).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: cannot start the server process: {e}");
            std::process::exit(1);
        }
    };
    let port = child.stdout.take().and_then(|out| {
        let mut lines = BufReader::new(out).lines().map_while(|l| l.ok());
        let ports = |p: &str| p.trim().split(',').map(|p| p.parse::<u16>().ok()).collect::<Option<Vec<u16>>>();
        let port = lines.by_ref().find_map(|l| l.strip_prefix("PORT ").and_then(ports).filter(|p| !p.is_empty()));
        // Keep reading what the server prints after its port (e.g. bench's `CONNECTED`): a
        // closed pipe would fail its next print and end it mid-run.
        std::thread::spawn(move || lines.for_each(drop));
        port
    });
    let Some(port) = port else {
        let _ = child.kill();
        eprintln!("{name}: the server process did not report a port");
        std::process::exit(1);
    };
    let r = client(&port);
    if r.is_err() {
        let _ = child.kill();
    }
    match child.wait() {
        Ok(status) if r.is_ok() && !status.success() => {
            eprintln!("{name}: server process failed: {status}");
            std::process::exit(1);
        }
        _ => r,
    }
}

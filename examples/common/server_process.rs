//! Shared by the two-process examples: run this same executable again as the server, learn
//! the port(s) it listens on, run the client, and reap the server. Neither side outlives a
//! failure of the other, even on endpoints without peer-failure handling (which would wait
//! for ever on a dead peer, as `ucx_perftest`'s do): the server dies with the client process
//! (`PR_SET_PDEATHSIG`), and a server that fails or is killed ends the client at once.
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// An example may include both this file and its sibling that also includes it.
#[allow(clippy::duplicate_mod)]
#[path = "die_with_parent.rs"]
mod die_with_parent;
use die_with_parent::die_with_parent;

/// Starts `current_exe() server_args...`, waits for its `PORT n` line, runs `client(n)`, then
/// waits for the server to exit (killing it if the client failed). Exits the process with a
/// message if the server cannot be started, reports no port, or fails while the client runs.
/// `name` prefixes messages.
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
    let mut cmd = Command::new(exe);
    cmd.args(server_args).stdout(Stdio::piped());
    let mut child = match die_with_parent(&mut cmd).spawn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{name}: cannot start the server process: {e}");
            std::process::exit(1);
        }
    };
    let port = child.stdout.take().and_then(|out| {
        let mut lines = BufReader::new(out).lines().map_while(|l| l.ok());
        let ports = |p: &str| p.trim().split(',').map(|p| p.parse::<u16>().ok()).collect::<Option<Vec<u16>>>();
        // The line may start with the tail of UCX's own output (UCX_PROTO_INFO's tables go to
        // the same pipe through C stdio's block buffer, flushed mid-line): match `PORT ` anywhere.
        let port = lines.by_ref().find_map(|l| {
            let at = l.rfind("PORT ")?;
            ports(&l[at + "PORT ".len()..]).filter(|p| !p.is_empty())
        });
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
    let child = Arc::new(Mutex::new(child));
    let client_done = Arc::new(AtomicBool::new(false));
    let watchdog = watch_server(name, child.clone(), client_done.clone());
    let r = client(&port);
    client_done.store(true, Ordering::Release);
    let _ = watchdog.join();
    let mut child = child.lock().unwrap_or_else(|p| p.into_inner());
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

/// Ends this process if the server exits unsuccessfully while the client still runs: without
/// peer-failure handling the client would wait for the dead server's reply for ever.
fn watch_server(name: &str, child: Arc<Mutex<Child>>, client_done: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    let name = name.to_string();
    std::thread::spawn(move || {
        while !client_done.load(Ordering::Acquire) {
            let status = child.lock().unwrap_or_else(|p| p.into_inner()).try_wait();
            match status {
                Ok(Some(status)) if !status.success() => {
                    eprintln!("{name}: the server process failed ({status}) while the client ran");
                    std::process::exit(1);
                }
                Ok(Some(_)) | Err(_) => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    })
}

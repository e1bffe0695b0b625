//! ucx-async across network namespaces made for each test (named `ucxnf-<pid>-<n>`, deleted
//! afterwards; skipped without root, `ip` or `nft`): a connect whose transport connection
//! attempts are dropped does not block the runtime, IPv6 works over a unique-local address
//! between two namespaces, and when a router between two hosts stops passing packets both
//! sides of an idle or busy pair fail with `Error::PeerFailed` within `UCXA_PEER_TIMEOUT`.
//! Each side runs as this test binary itself, re-executed inside a namespace
//! (`UCXA_NETNS_ROLE`).
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use ucx_async::core::Context;
use ucx_async::{ConnectOptions, Endpoint, Error, Listener, ProgressMode, Worker};

static COUNT: AtomicUsize = AtomicUsize::new(0);

/// A network namespace with its loopback up, deleted on drop.
struct Netns(String);

impl Netns {
    fn new() -> Option<Netns> {
        let name = format!("ucxnf-{}-r{}", std::process::id(), COUNT.fetch_add(1, Ordering::Relaxed));
        ip(&["netns", "add", &name]).ok()?;
        let ns = Netns(name);
        ip(&["-n", &ns.0, "link", "set", "lo", "up"]).ok()?;
        Some(ns)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, String> {
        run(Command::new("ip").args(["netns", "exec", &self.0, program]).args(args))
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.0]);
    }
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn ip(args: &[&str]) -> Result<String, String> {
    run(Command::new("ip").args(args))
}

/// Why namespaces with nftables cannot be made here, or None.
fn unavailable() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("needs root (network namespaces)".into());
    }
    let Some(ns) = Netns::new() else { return Some("cannot make a network namespace".into()) };
    ns.run("nft", &["list", "tables"]).err().map(|e| format!("needs nft: {e}"))
}

/// Where this run is a role started inside a namespace, plays it and returns from the test;
/// where namespaces cannot be made here, says so and returns. The rest of the test is the
/// parent's.
macro_rules! parent_only {
    () => {
        if dispatch_role() {
            return;
        }
        if let Some(why) = unavailable() {
            eprintln!("skipped: {why}");
            return;
        }
    };
}

/// This test binary, re-run inside `ns` as `role` with `env`.
fn spawn_role(ns: &Netns, test: &str, role: &str, env: &[(&str, &str)]) -> Child {
    spawn_under(ns, &[], test, role, env)
}

/// This test binary, re-run inside `ns` under `wrapper` (a command and its arguments that run
/// the rest, or nothing) as `role` with `env`.
fn spawn_under(ns: &Netns, wrapper: &[&str], test: &str, role: &str, env: &[(&str, &str)]) -> Child {
    let exe = std::env::current_exe().expect("the test binary");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &ns.0])
        .args(wrapper)
        .arg(exe)
        .args([test, "--exact", "--nocapture", "--test-threads", "1"])
        .env("UCXA_NETNS_ROLE", role)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn a role")
}

/// Waits until `eth1` runs in each of `namespaces`: UCX uses an interface only once it runs
/// (carrier on both ends), and until then found the address "unreachable".
fn wait_until_up(namespaces: &[&Netns]) {
    for ns in namespaces {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !ip(&["-n", &ns.0, "link", "show", "eth1"]).unwrap().contains("state UP") {
            assert!(Instant::now() < deadline, "eth1 never came up in {}", ns.0);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// What follows `key` in the first line of `child`'s output that has it (`KEY value`).
fn line(child: &mut Child, key: &str) -> String {
    let out = child.stdout.as_mut().expect("piped stdout");
    let mut reader = BufReader::new(out);
    let mut l = String::new();
    loop {
        l.clear();
        assert!(reader.read_line(&mut l).expect("read") > 0, "the role ended before printing {key}");
        // The test harness prints "test <name> ... " before the role's first line.
        if let Some((_, v)) = l.split_once(key) {
            return v.trim().to_string();
        }
    }
}

fn role_env() -> Option<String> {
    std::env::var("UCXA_NETNS_ROLE").ok()
}

/// Runs `role` on a current-thread runtime (a blocked call stops everything) with a worker on
/// a context made from the environment (the parent's `UCX_*`).
fn play<F: std::future::Future<Output = ()>>(role: impl FnOnce(Worker) -> F) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let ctx = Context::new().unwrap();
    rt.block_on(async { role(Worker::new(&ctx, ProgressMode::Event).unwrap()).await });
}

/// The server role: listens on `UCXA_NETNS_BIND`, prints `PORT p`, echoes 8 bytes per client
/// and runs until its stdin closes.
fn server_role() {
    play(|w| async move {
        let bind: SocketAddr = std::env::var("UCXA_NETNS_BIND").unwrap().parse().unwrap();
        let listener = Listener::bind(&w, bind).unwrap();
        println!("PORT {}", listener.local_addr().port());
        let stdin_closed = tokio::task::spawn_blocking(|| {
            let _ = std::io::stdin().read_to_end(&mut Vec::new());
        });
        let serve = async {
            loop {
                let Ok(ep) = listener.accept().await else { continue };
                tokio::spawn(async move {
                    let mut buf = [0u8; 8];
                    if ep.recv(&mut buf[..]).await.is_ok() {
                        let _ = ep.send(&buf[..]).await;
                    }
                    let _ = ep.close().await;
                });
            }
        };
        tokio::select! { _ = stdin_closed => {}, _ = serve => {} }
    });
}

/// The client role: connects to `UCXA_NETNS_CONNECT` up to twice while a task wakes every
/// 10 ms, and prints `RESULT <first attempt's seconds> <first outcome>|<last outcome>
/// <longest gap, seconds>`.
fn client_role() {
    play(|w| async move {
        let to: SocketAddr = std::env::var("UCXA_NETNS_CONNECT").unwrap().parse().unwrap();
        let max_gap = std::sync::Arc::new(std::sync::Mutex::new(0f64));
        let g = max_gap.clone();
        let beat = tokio::spawn(async move {
            let mut last = Instant::now();
            loop {
                tokio::time::sleep(Duration::from_millis(10)).await;
                let gap = last.elapsed().as_secs_f64() - 0.01;
                let mut m = g.lock().unwrap();
                *m = m.max(gap);
                last = Instant::now();
            }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        println!("CONNECTING");
        let options = ConnectOptions { timeout: Duration::from_secs(5), ..ConnectOptions::default() };
        let mut outcomes = Vec::new();
        let mut first_secs = 0.0;
        for attempt in 0..2 {
            let t0 = Instant::now();
            let outcome = match Endpoint::connect_with(&w, to, options).await {
                Ok(ep) => {
                    let mut back = [0u8; 8];
                    ep.send(&b"12345678"[..]).await.unwrap();
                    ep.recv(&mut back[..]).await.unwrap();
                    assert_eq!(&back, b"12345678");
                    let _ = ep.close().await;
                    "connected".to_string()
                }
                Err(Error::HandshakeTimeout { .. }) => "HandshakeTimeout".to_string(),
                Err(Error::Refused { .. }) => "Refused".to_string(),
                Err(Error::Ucx(e)) => format!("Ucx:{:?}", e.status()),
                Err(e) => format!("other:{:?}", e.status()),
            };
            if attempt == 0 {
                first_secs = t0.elapsed().as_secs_f64();
            }
            let done = outcome == "connected";
            outcomes.push(outcome);
            if done {
                break;
            }
        }
        beat.abort();
        let gap = *max_gap.lock().unwrap();
        println!("RESULT {first_secs:.3} {} {gap:.3}", outcomes.join("|"));
    });
}

fn dispatch_role() -> bool {
    match role_env().as_deref() {
        Some("server") => server_role(),
        Some("client") => client_role(),
        Some(role @ ("partition-server" | "partition-client")) => partition_role(role == "partition-server"),
        _ => return false,
    }
    true
}

/// The size of a busy pair's echoes.
const ECHO: usize = 1 << 20;

/// The wall clock in seconds, comparable between processes on one host.
fn wall() -> f64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// A partition test's side: the server listens on `UCXA_NETNS_BIND` (prints `PORT p`) and
/// serves one client, the client connects to `UCXA_NETNS_CONNECT`. `UCXA_NETNS_MODE` `idle`:
/// one 8-byte echo, then each side waits in a receive no message will meet; `echo`: the client
/// sends 1 MiB messages filled with their sequence number, the server sends each back, the
/// client checks every byte. Prints `READY` once its traffic runs, then `FAILED <error>
/// <wall clock>` when an operation fails, and `ECHOES <n> <corrupt>` once its stdin closes.
fn partition_role(server: bool) {
    play(|w| async move {
        let mode = std::env::var("UCXA_NETNS_MODE").unwrap_or_default();
        let ep = if server {
            let bind: SocketAddr = std::env::var("UCXA_NETNS_BIND").unwrap().parse().unwrap();
            let listener = Listener::bind(&w, bind).unwrap();
            println!("PORT {}", listener.local_addr().port());
            listener.accept().await.unwrap()
        } else {
            let to: SocketAddr = std::env::var("UCXA_NETNS_CONNECT").unwrap().parse().unwrap();
            Endpoint::connect(&w, to).await.unwrap()
        };
        let (mut echoes, mut corrupt) = (0u64, 0u64);
        let traffic = async {
            if mode == "idle" {
                let mut buf = [0u8; 8];
                if server {
                    ep.recv(&mut buf[..]).await?;
                    ep.send(&buf[..]).await?;
                } else {
                    ep.send(&b"12345678"[..]).await?;
                    ep.recv(&mut buf[..]).await?;
                }
                println!("READY");
                ep.recv(&mut buf[..]).await?;
            } else {
                let mut buf = vec![0u8; ECHO];
                if server {
                    println!("READY");
                }
                for i in 0u64.. {
                    if server {
                        ep.recv(&mut buf[..]).await?;
                        ep.send(&buf[..]).await?;
                    } else {
                        let sent: Vec<u8> = i.to_le_bytes().iter().copied().cycle().take(ECHO).collect();
                        ep.send(&sent[..]).await?;
                        ep.recv(&mut buf[..]).await?;
                        corrupt += u64::from(buf != sent);
                        if i == 2 {
                            println!("READY");
                        }
                    }
                    echoes += 1;
                }
            }
            Ok::<(), Error>(())
        };
        match traffic.await {
            Err(Error::PeerFailed { .. }) => println!("FAILED PeerFailed {:.3}", wall()),
            Err(e) => println!("FAILED {e:?} {:.3}", wall()),
            Ok(()) => println!("FAILED nothing {:.3}", wall()),
        }
        let _ = tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await;
        println!("ECHOES {echoes} {corrupt}");
    });
}

struct Outcome {
    first_secs: f64,
    outcomes: String,
    max_gap: f64,
}

fn parse(result: &str) -> Outcome {
    let f: Vec<&str> = result.split_whitespace().collect();
    Outcome { first_secs: f[0].parse().unwrap(), outcomes: f[1].to_string(), max_gap: f[2].parse().unwrap() }
}

/// The client and server in one namespace, with SYNs to UCX's tcp ports (the client's range
/// lower, so the client makes the transport's connection) dropped from the client's first
/// attempt until `drop` later.
fn connect_while_syns_are_dropped(test: &str, conn_nb: Option<&str>, drop: Duration) -> Outcome {
    let ns = Netns::new().expect("namespace");
    let rules = "table inet ucxnf {\n  chain input {\n    type filter hook input priority 0; policy accept;\n    \
                 tcp dport 20000-21999 tcp flags syn drop\n  }\n}\n";
    let mut nft =
        Command::new("ip").args(["netns", "exec", &ns.0, "nft", "-f", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(nft.stdin.as_mut().unwrap(), rules.as_bytes()).unwrap();
    drop_stdin(&mut nft);
    assert!(nft.wait().unwrap().success(), "nft rules");
    let mut env = vec![("UCX_NET_DEVICES", "lo")];
    if let Some(v) = conn_nb {
        env.push(("UCX_TCP_CONN_NB", v));
    }
    let mut server_env = env.clone();
    server_env.extend([("UCX_TCP_PORT_RANGE", "21000-21999"), ("UCXA_NETNS_BIND", "127.0.0.1:13337")]);
    let mut server = spawn_role(&ns, test, "server", &server_env);
    assert_eq!(line(&mut server, "PORT "), "13337");
    let mut client_env = env;
    client_env.extend([("UCX_TCP_PORT_RANGE", "20000-20999"), ("UCXA_NETNS_CONNECT", "127.0.0.1:13337")]);
    let mut client = spawn_role(&ns, test, "client", &client_env);
    line(&mut client, "CONNECTING");
    std::thread::sleep(drop);
    ns.run("nft", &["delete", "table", "inet", "ucxnf"]).expect("lift the drop");
    let result = line(&mut client, "RESULT ");
    let _ = client.wait();
    drop_stdin(&mut server);
    let _ = server.wait();
    parse(&result)
}

fn drop_stdin(child: &mut Child) {
    drop(child.stdin.take());
}

#[test]
fn dropped_connection_attempts_do_not_block_the_runtime() {
    parent_only!();
    let test = "dropped_connection_attempts_do_not_block_the_runtime";
    // ucx-core's default (TCP_CONN_NB=y): the handshake's 5 s limit fires on time, the runtime
    // never stalls, and the retry connects once the drop is over.
    let o = connect_while_syns_are_dropped(test, None, Duration::from_secs(6));
    assert!(o.outcomes.starts_with("HandshakeTimeout|connected"), "{}", o.outcomes);
    assert!((4.9..5.6).contains(&o.first_secs), "{}", o.first_secs);
    assert!(o.max_gap < 1.0, "the runtime stalled {} s", o.max_gap);
    // The control, UCX's own default: the same measurement sees the connect block.
    let o = connect_while_syns_are_dropped(test, Some("n"), Duration::from_secs(6));
    assert!(o.max_gap > 5.0, "blocking connects: the runtime stalled only {} s", o.max_gap);
}

#[test]
fn ipv6_over_a_unique_local_address_between_namespaces() {
    parent_only!();
    let test = "ipv6_over_a_unique_local_address_between_namespaces";
    let (a, b) = (Netns::new().unwrap(), Netns::new().unwrap());
    ip(&["-n", &a.0, "link", "add", "eth1", "type", "veth", "peer", "name", "eth1", "netns", &b.0]).unwrap();
    for (ns, v6, v4) in [(&a, "fd00:4e46::1/64", "10.201.0.1/24"), (&b, "fd00:4e46::2/64", "10.201.0.2/24")] {
        ip(&["-n", &ns.0, "addr", "add", v6, "dev", "eth1", "nodad"]).unwrap();
        ip(&["-n", &ns.0, "addr", "add", v4, "dev", "eth1"]).unwrap();
        ip(&["-n", &ns.0, "link", "set", "eth1", "up"]).unwrap();
    }
    wait_until_up(&[&a, &b]);
    let v6 = [("UCX_TCP_AF_PRIO", "inet6,inet")];
    let mut server = spawn_role(&a, test, "server", &[v6[0], ("UCXA_NETNS_BIND", "[fd00:4e46::1]:0")]);
    let port = line(&mut server, "PORT ");
    let to = format!("[fd00:4e46::1]:{port}");
    let mut client = spawn_role(&b, test, "client", &[v6[0], ("UCXA_NETNS_CONNECT", &to)]);
    let o = parse(&line(&mut client, "RESULT "));
    let _ = client.wait();
    assert_eq!(o.outcomes, "connected", "over {to}");
    // A client whose tcp transport uses IPv4 there (UCX's default, eth1 having both) is
    // refused by name rather than corrupting its heap.
    let mut client = spawn_role(&b, test, "client", &[("UCXA_NETNS_CONNECT", &to)]);
    let o = parse(&line(&mut client, "RESULT "));
    let _ = client.wait();
    assert_eq!(o.outcomes, "Ucx:Unsupported|Ucx:Unsupported", "refused, not aborted");
    drop_stdin(&mut server);
    assert!(server.wait().unwrap().success(), "the server lived through it");
}

/// A role's output lines, read on a thread of their own so that a wait can end.
struct Lines(std::sync::mpsc::Receiver<String>);

impl Lines {
    fn of(child: &mut Child) -> Lines {
        let out = child.stdout.take().expect("piped stdout");
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(|l| l.ok()) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Lines(rx)
    }

    /// What follows `key` in the next line that has it, within `timeout`; `None` if none came.
    fn next(&self, key: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let l = self.0.recv_timeout(left).ok()?;
            if let Some((_, v)) = l.split_once(key) {
                return Some(v.trim().to_string());
            }
        }
    }
}

/// Two hosts (namespaces with `eth1` at 10.202.1.2 and 10.202.2.2) joined through a router
/// namespace that forwards between them; returns (host a, router, host b).
fn routed_pair() -> (Netns, Netns, Netns) {
    let (a, router, b) = (Netns::new().unwrap(), Netns::new().unwrap(), Netns::new().unwrap());
    for (ns, link, subnet) in [(&a, "ra", "10.202.1"), (&b, "rb", "10.202.2")] {
        ip(&["-n", &router.0, "link", "add", link, "type", "veth", "peer", "name", "eth1", "netns", &ns.0]).unwrap();
        ip(&["-n", &router.0, "addr", "add", &format!("{subnet}.1/24"), "dev", link]).unwrap();
        ip(&["-n", &ns.0, "addr", "add", &format!("{subnet}.2/24"), "dev", "eth1"]).unwrap();
        ip(&["-n", &router.0, "link", "set", link, "up"]).unwrap();
        ip(&["-n", &ns.0, "link", "set", "eth1", "up"]).unwrap();
        ip(&["-n", &ns.0, "route", "add", "default", "via", &format!("{subnet}.1")]).unwrap();
    }
    router.run("sysctl", &["-q", "-w", "net.ipv4.ip_forward=1"]).unwrap();
    wait_until_up(&[&a, &b]);
    (a, router, b)
}

/// The router drops everything it would forward (nothing between the hosts gets through, and
/// nobody is told), or (`false`) forwards again.
fn partition(router: &Netns, on: bool) {
    if !on {
        router.run("nft", &["delete", "table", "inet", "ucxnf_partition"]).expect("heal");
        return;
    }
    let rules = "table inet ucxnf_partition {\n  chain forward {\n    type filter hook forward priority 0; policy drop;\n  }\n}\n";
    let mut nft =
        Command::new("ip").args(["netns", "exec", &router.0, "nft", "-f", "-"]).stdin(Stdio::piped()).spawn().unwrap();
    std::io::Write::write_all(nft.stdin.as_mut().unwrap(), rules.as_bytes()).unwrap();
    drop_stdin(&mut nft);
    assert!(nft.wait().unwrap().success(), "nft rules");
}

/// This test binary as partition role `role` in `ns`, in pid and IPC namespaces of its own
/// (the two sides then look like separate hosts to the same-host single-copy path; where
/// `unshare` is missing, that path is turned off instead).
fn spawn_host_role(ns: &Netns, test: &str, role: &str, env: &[(&str, &str)]) -> Child {
    let mut env = env.to_vec();
    env.push(("UCX_NET_DEVICES", "eth1"));
    if Command::new("unshare").arg("--help").output().is_ok() {
        spawn_under(ns, &["unshare", "--pid", "--ipc", "--fork", "--kill-child", "--mount-proc"], test, role, &env)
    } else {
        env.push(("UCXA_SINGLE_COPY", "0"));
        spawn_under(ns, &[], test, role, &env)
    }
}

/// `UCXA_PEER_TIMEOUT` in the partition tests: short, to keep them quick (the default's value
/// is ucx-core's `tests/config.rs`).
const PEER_TIMEOUT: f64 = 6.0;

/// A side's failure: what it printed for its error, and the seconds from the drop to it.
type Failure = Option<(String, f64)>;

/// A server and a client on the two hosts of a routed pair, in `mode` (`idle` or `echo`); once
/// both run, the router drops everything. Returns the client's and the server's failure,
/// `None` where none came within the timeout and 4 s, and the client's echoes and corrupt
/// ones.
fn partitioned(test: &str, mode: &str) -> ([Failure; 2], (u64, u64)) {
    let (a, router, b) = routed_pair();
    let timeout = format!("{PEER_TIMEOUT}");
    let common = [("UCXA_PEER_TIMEOUT", timeout.as_str()), ("UCXA_NETNS_MODE", mode)];
    let mut server = Reaped(spawn_host_role(
        &a,
        test,
        "partition-server",
        &[common[0], common[1], ("UCXA_NETNS_BIND", "10.202.1.2:0")],
    ));
    let server_out = Lines::of(&mut server.0);
    let port = server_out.next("PORT ", Duration::from_secs(30)).expect("the server's port");
    let to = format!("10.202.1.2:{port}");
    let mut client =
        Reaped(spawn_host_role(&b, test, "partition-client", &[common[0], common[1], ("UCXA_NETNS_CONNECT", &to)]));
    let client_out = Lines::of(&mut client.0);
    assert!(client_out.next("READY", Duration::from_secs(30)).is_some(), "the client runs");
    assert!(server_out.next("READY", Duration::from_secs(30)).is_some(), "the server runs");
    std::thread::sleep(Duration::from_millis(500));
    let dropped = wall();
    partition(&router, true);
    let deadline = Instant::now() + Duration::from_secs_f64(PEER_TIMEOUT + 4.0);
    let failed = [&client_out, &server_out].map(|out| {
        let l = out.next("FAILED ", deadline.saturating_duration_since(Instant::now()))?;
        let (what, at) = l.rsplit_once(' ')?;
        Some((what.to_string(), at.parse::<f64>().ok()? - dropped))
    });
    partition(&router, false);
    drop_stdin(&mut client.0);
    drop_stdin(&mut server.0);
    let echoes = client_out.next("ECHOES ", Duration::from_secs(15)).unwrap_or_default();
    let mut n = echoes.split_whitespace().map(|v| v.parse::<u64>().unwrap_or(u64::MAX));
    (failed, (n.next().unwrap_or(0), n.next().unwrap_or(u64::MAX)))
}

/// A role killed (if still running) and waited for when dropped, also when a test fails.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn both_sides_fail_within_the_peer_timeout(test: &str, mode: &str) {
    let (failed, (echoes, corrupt)) = partitioned(test, mode);
    for (side, f) in ["client", "server"].iter().zip(&failed) {
        let Some((what, secs)) = f else { panic!("{side}: no failure {} s after the partition", PEER_TIMEOUT + 4.0) };
        assert_eq!(what, "PeerFailed", "{side}");
        assert!(*secs < PEER_TIMEOUT, "{side} failed after {secs:.2} s");
        eprintln!("{side} failed {secs:.2} s after the partition");
    }
    assert_eq!(corrupt, 0);
    if mode == "echo" {
        assert!(echoes >= 3, "{echoes} echoes");
    }
}

#[test]
fn both_sides_of_an_idle_partitioned_pair_fail_within_the_peer_timeout() {
    parent_only!();
    // UCX 1.22's own settings: the side that accepted the tcp transport's connection never
    // failed (no keepalive on its socket).
    both_sides_fail_within_the_peer_timeout(
        "both_sides_of_an_idle_partitioned_pair_fail_within_the_peer_timeout",
        "idle",
    );
}

#[test]
fn both_sides_of_a_busy_partitioned_pair_fail_within_the_peer_timeout() {
    parent_only!();
    // UCX 1.22's own settings: data in flight waited for the kernel's retransmissions.
    both_sides_fail_within_the_peer_timeout(
        "both_sides_of_a_busy_partitioned_pair_fail_within_the_peer_timeout",
        "echo",
    );
}

//! Connecting the way `ucx_perftest` does: the two sides swap worker addresses over a plain
//! TCP socket and create endpoints to each other, with fixed tags and no handshake. UCX then
//! never wires up through its TCP transport, which a listener's connection keeps active
//! (and progressed, a system call per round) for as long as the endpoint lives.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use ucx_async::core::WorkerAddress;
use ucx_async::Result;
use ucx_async::{ConnectOptions, Endpoint, Tags, Worker};

fn tags(server: bool) -> Tags {
    let (a, b) = if server { (1, 2) } else { (2, 1) };
    Tags { msg_send: a, msg_recv: b, ctrl_send: None, ctrl_recv: None }
}

fn fail(what: &str, e: std::io::Error) -> ! {
    eprintln!("connecting by worker address: {what}: {e}");
    std::process::exit(1)
}

/// Sends our address and reads the peer's (each prefixed by its length as a u32).
fn swap(mut s: TcpStream, ours: &WorkerAddress) -> WorkerAddress {
    let bytes = ours.as_bytes();
    let mut msg = (bytes.len() as u32).to_le_bytes().to_vec();
    msg.extend_from_slice(bytes);
    s.write_all(&msg).unwrap_or_else(|e| fail("sending the worker address", e));
    let mut len = [0u8; 4];
    s.read_exact(&mut len).unwrap_or_else(|e| fail("reading the worker address", e));
    let mut theirs = vec![0u8; u32::from_le_bytes(len) as usize];
    s.read_exact(&mut theirs).unwrap_or_else(|e| fail("reading the worker address", e));
    WorkerAddress::from_bytes(&theirs).unwrap_or_else(|e| {
        eprintln!("connecting by worker address: the peer's address: {e}");
        std::process::exit(1)
    })
}

pub async fn server(worker: &Worker, options: ConnectOptions) -> Result<Endpoint> {
    let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap_or_else(|e| fail("bind", e));
    println!("PORT {}", tcp.local_addr().unwrap_or_else(|e| fail("local address", e)).port());
    let Ok(accepted) = tokio::time::timeout(Duration::from_secs(30), tcp.accept()).await else {
        eprintln!("connecting by worker address: no client connected within 30 s");
        std::process::exit(1)
    };
    let s = accepted.unwrap_or_else(|e| fail("accept", e)).0.into_std().unwrap_or_else(|e| fail("socket", e));
    s.set_nonblocking(false).unwrap_or_else(|e| fail("socket", e));
    let peer = swap(s, &worker.core().address()?);
    Endpoint::connect_to_worker_with(worker, &peer, Some(tags(true)), options)
}

pub async fn client(worker: &Worker, port: u16, options: ConnectOptions) -> Result<Endpoint> {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap_or_else(|e| fail("connect", e));
    let peer = swap(s, &worker.core().address()?);
    Endpoint::connect_to_worker_with(worker, &peer, Some(tags(false)), options)
}

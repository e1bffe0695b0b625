//! The listener's guard against UCX 1.22's connection-manager spin: after a few connections
//! send garbage to the listener's port and close, UCX's async thread stops spinning within a
//! few seconds, and clients are still served. (Its own test binary: the CPU time read is the
//! process's UCX async thread.)
use std::io::Write;
use std::time::{Duration, Instant};

use ucx_async::core::Context;
use ucx_async::{Endpoint, Listener, ProgressMode, Worker};

/// CPU seconds used so far by this process's threads named `async` (UCX's).
fn async_cpu() -> f64 {
    let mut ticks = 0u64;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let Ok(stat) = std::fs::read_to_string(task.unwrap().path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != "async" {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        ticks += fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    }
    ticks as f64 / 100.0
}

/// The async thread's share of a core over `span`, yielding to the runtime meanwhile.
async fn busy(span: Duration) -> f64 {
    let (c0, t0) = (async_cpu(), Instant::now());
    tokio::time::sleep(span).await;
    (async_cpu() - c0) / t0.elapsed().as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_port_stops_spinning_and_clients_are_served() {
    let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
    let server = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let listener = Listener::bind(&server, "127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr();
    for _ in 0..3 {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(&[0xab; 4096]).unwrap();
    }
    let spinning = busy(Duration::from_millis(700)).await;
    // The guard checks once a second and lets go on its second busy sighting (about 3 s
    // after the listener was made).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = busy(Duration::from_millis(1500)).await;
    let client = Worker::new(&ctx, ProgressMode::Event).unwrap();
    let (accepted, connected) = tokio::join!(listener.accept(), Endpoint::connect(&client, addr));
    let (ep, cl) = (accepted.unwrap(), connected.unwrap());
    let (sent, got) = tokio::join!(cl.send(&b"hello"[..]), async {
        let mut b = [0u8; 5];
        ep.recv(&mut b[..]).await.map(|_| b)
    });
    sent.unwrap();
    assert_eq!(&got.unwrap(), b"hello");
    assert!(spinning > 0.25, "UCX did not spin after the garbage ({spinning:.2} of a core): fixed upstream?");
    assert!(after < 0.25, "UCX's async thread still used {after:.2} of a core 3 s after the garbage");
}

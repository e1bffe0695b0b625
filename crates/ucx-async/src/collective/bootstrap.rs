//! How N ranks find each other: every rank connects to rank 0's listener and sends its hello
//! (its rank, the world size, its worker address); rank 0 answers each with the table of all
//! ranks' worker addresses, each framed as UCX-Py's `send_obj` frames an object (so a Python
//! rank can speak it with `Endpoint.send_obj`/`recv_obj`). The bytes are ucx-core's
//! (`wire::bootstrap`, `wire::obj_len`); this is the flow. The listener and the endpoints it
//! makes live on a worker of their own ([`boot_worker`]), not on the ranks' worker.
use crate::core::wire::bootstrap::{decode_answer, encode_refusal, encode_table, Answer, Hello};
use crate::core::wire::obj_len;
use crate::core::WorkerAddress;
use crate::{Endpoint, Error, Listener, Result, Worker};

/// The longest hello rank 0 accepts: a worker address is a few hundred bytes to a few KiB.
pub(crate) const MAX_HELLO: usize = 64 << 10;

fn protocol(detail: String) -> Error {
    Error::Protocol { op: "Communicator::bootstrap", detail }
}

/// The table, and the endpoints it came over: closed by the caller once every rank is known to
/// have its table (closing earlier could cancel a rank's receive of it).
pub(crate) type Joined = (Vec<WorkerAddress>, Vec<Endpoint>);

/// Sends `bytes` as UCX-Py's `send_obj` does: its length (8 bytes), then the bytes, on the
/// endpoint's tag (UCX delivers one endpoint's messages on one tag in order).
async fn send_obj(ep: &Endpoint, bytes: &[u8]) -> Result<()> {
    ep.send(&obj_len::encode(bytes.len() as u64)[..]).await?;
    ep.send(bytes).await
}

/// Receives what `send_obj` sent, refusing a length above `max` before allocating.
async fn recv_obj(ep: &Endpoint, what: &str, max: usize) -> Result<Vec<u8>> {
    let mut len = [0u8; obj_len::LEN];
    ep.recv(&mut len[..]).await?;
    let n = obj_len::decode(&len).map_err(|e| protocol(e.to_string()))?;
    let n = usize::try_from(n).ok().filter(|&n| n <= max);
    let Some(n) = n else {
        return Err(protocol(format!("a {what} of {} bytes is over the {max}-byte limit", u64::from_le_bytes(len))));
    };
    let mut bytes = vec![0u8; n];
    let got = ep.recv(&mut bytes[..]).await?;
    bytes.truncate(got);
    Ok(bytes)
}

/// A worker of its own for the bootstrap's listener and endpoints, on `worker`'s context, to
/// be dropped once the ranks are connected. Endpoints made through a listener start on TCP
/// lanes, and on a worker that ever had one UCX kept polling TCP (an `epoll_wait` system call
/// in every progress call) after the endpoint was gone: about 12 calls per 1 KiB alltoallv
/// round (barrier, alltoallv, allgather) on each of ranks 1 to 3 of 4 (`perf stat -e
/// syscalls:sys_enter_epoll_wait`), about none with this worker.
pub(crate) fn boot_worker(worker: &Worker) -> Result<Worker> {
    Worker::new(worker.core().context(), worker.mode())
}

/// Rank 0: accepts the other `size - 1` ranks on `listener` (on [`boot_worker`], or the
/// caller's), then sends each the table, with `worker`'s address as rank 0's. Every rank must
/// use rank 0's `error_handling` (see `wire::bootstrap::ERROR_HANDLING_VAR`).
pub(crate) async fn serve(worker: &Worker, listener: &Listener, size: usize, error_handling: bool) -> Result<Joined> {
    let mut table = vec![Vec::new(); size];
    table[0] = worker.core().address()?.as_bytes().to_vec();
    let mut joined: Vec<Endpoint> = Vec::with_capacity(size.saturating_sub(1));
    while joined.len() + 1 < size {
        let ep = listener.accept().await?;
        let hello = recv_obj(&ep, "hello", MAX_HELLO).await?;
        let admitted = Hello::decode(&hello).map_err(|e| e.to_string()).and_then(|hello| {
            hello.admit(size as u32, error_handling)?;
            match table[hello.rank as usize].is_empty() {
                true => Ok(hello),
                false => Err(format!("rank {} joined twice", hello.rank)),
            }
        });
        let hello = match admitted {
            Ok(hello) => hello,
            Err(why) => {
                // Every rank that came is told, so none waits for a table that will not come.
                joined.push(ep);
                let no = encode_refusal(&why);
                for ep in &joined {
                    let _ = send_obj(ep, &no).await;
                }
                return Err(protocol(why));
            }
        };
        table[hello.rank as usize] = hello.address;
        joined.push(ep);
    }
    let bytes = encode_table(&table);
    for ep in &joined {
        send_obj(ep, &bytes).await?;
    }
    Ok((parse(table)?, joined))
}

/// Ranks 1 and up: introduce `worker` to rank 0 at `root`, connecting from `boot` (see
/// [`boot_worker`]), and receive the table.
pub(crate) async fn join(
    worker: &Worker,
    boot: &Worker,
    rank: usize,
    size: usize,
    root: std::net::SocketAddr,
    error_handling: bool,
) -> Result<Joined> {
    let ep = Endpoint::connect(boot, root).await?;
    let address = worker.core().address()?.as_bytes().to_vec();
    send_obj(&ep, &Hello { rank: rank as u32, size: size as u32, error_handling, address }.encode()).await?;
    let bytes = recv_obj(&ep, "address table", 16 + size * (4 + MAX_HELLO)).await?;
    let table = match decode_answer(&bytes).map_err(|e| protocol(e.to_string()))? {
        Answer::Table(table) => table,
        Answer::Refused(why) => return Err(protocol(format!("rank 0 refused this rank: {why}"))),
    };
    if table.len() != size {
        return Err(protocol(format!("the address table has {} ranks, this rank expects {size}", table.len())));
    }
    Ok((parse(table)?, vec![ep]))
}

fn parse(table: Vec<Vec<u8>>) -> Result<Vec<WorkerAddress>> {
    table
        .iter()
        .enumerate()
        .map(|(r, a)| WorkerAddress::from_bytes(a).map_err(|e| protocol(format!("rank {r}'s worker address: {e}"))))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::Context;
    use crate::ProgressMode;

    /// The bootstrap's endpoints (both sides) are the boot worker's, never a rank's own: a
    /// listener's endpoint on the rank's worker would leave UCX polling TCP there for good.
    /// The table still names the ranks' own workers.
    #[tokio::test(flavor = "current_thread")]
    async fn the_bootstrap_talks_on_the_boot_workers_and_hands_out_the_ranks_workers() {
        let ctx = Context::builder().option("NET_DEVICES", "lo").build().unwrap();
        let ranks: Vec<Worker> = (0..2).map(|_| Worker::new(&ctx, ProgressMode::Event).unwrap()).collect();
        let boots: Vec<Worker> = ranks.iter().map(|w| boot_worker(w).unwrap()).collect();
        let listener = Listener::bind(&boots[0], "127.0.0.1:0".parse().unwrap()).unwrap();
        let root = listener.local_addr();
        let (served, joined) =
            tokio::join!(serve(&ranks[0], &listener, 2, false), join(&ranks[1], &boots[1], 1, 2, root, false));
        let ((table, eps0), (table1, eps1)) = (served.unwrap(), joined.unwrap());
        let address = |w: &Worker| w.core().address().unwrap().as_bytes().to_vec();
        let names = |t: &[WorkerAddress]| t.iter().map(|a| a.as_bytes().to_vec()).collect::<Vec<_>>();
        assert_eq!(names(&table), [address(&ranks[0]), address(&ranks[1])]);
        assert_eq!(names(&table1), names(&table));
        for (eps, boot) in [(&eps0, &boots[0]), (&eps1, &boots[1])] {
            assert_eq!(eps.len(), 1);
            assert_eq!(address(eps[0].worker()), address(boot), "a bootstrap endpoint off the boot worker");
        }
        for ep in eps0.iter().chain(&eps1) {
            ep.abort();
        }
    }
}

//! How N ranks find each other: every rank connects to rank 0's listener and sends its hello
//! (its rank, the world size, its worker address); rank 0 answers each with the table of all
//! ranks' worker addresses. The bytes are ucx-core's (`wire::bootstrap`); this is the flow.
use super::tag::{self, BOOTSTRAP_SEQ};
use crate::core::wire::bootstrap::{decode_table, encode_table, Hello};
use crate::core::{WorkerAddress, FULL_MASK};
use crate::{Endpoint, Error, Listener, Result, Worker};

/// The longest hello rank 0 accepts: a worker address is a few hundred bytes to a few KiB.
pub(crate) const MAX_HELLO: usize = 64 << 10;

fn protocol(detail: String) -> Error {
    Error::Protocol { op: "Communicator::bootstrap", detail }
}

/// The table, and the endpoints it came over: closed by the caller once every rank is known to
/// have its table (closing earlier could cancel a rank's receive of it).
pub(crate) type Joined = (Vec<WorkerAddress>, Vec<Endpoint>);

/// Rank 0: accepts the other `size - 1` ranks on `listener`, then sends each the table.
pub(crate) async fn serve(worker: &Worker, listener: &Listener, size: usize) -> Result<Joined> {
    let mut table = vec![Vec::new(); size];
    table[0] = worker.core().address()?.as_bytes().to_vec();
    let mut joined: Vec<Endpoint> = Vec::with_capacity(size.saturating_sub(1));
    let mut buf = vec![0u8; MAX_HELLO];
    while joined.len() + 1 < size {
        let ep = listener.accept().await?;
        let n = ep.recv(&mut buf[..]).await?;
        let hello = Hello::decode(&buf[..n]).map_err(|e| protocol(e.to_string()))?;
        let rank = hello.rank as usize;
        if hello.size as usize != size {
            return Err(protocol(format!(
                "rank {rank} was started with world size {}, rank 0 with {size}",
                hello.size
            )));
        }
        if rank == 0 || rank >= size || !table[rank].is_empty() {
            return Err(protocol(format!("rank {rank} joined twice or is out of range 1..{size}")));
        }
        table[rank] = hello.address;
        joined.push(ep);
    }
    let bytes = encode_table(&table);
    let (len_tag, table_tag) =
        (tag::own(BOOTSTRAP_SEQ, 0, 0, "bootstrap")?, tag::own(BOOTSTRAP_SEQ, 0, 1, "bootstrap")?);
    for ep in &joined {
        ep.send_tag(&(bytes.len() as u64).to_le_bytes()[..], len_tag).await?;
        ep.send_tag(&bytes[..], table_tag).await?;
    }
    Ok((parse(table)?, joined))
}

/// Ranks 1 and up: introduce this worker to rank 0 at `root` and receive the table.
pub(crate) async fn join(worker: &Worker, rank: usize, size: usize, root: std::net::SocketAddr) -> Result<Joined> {
    let ep = Endpoint::connect(worker, root).await?;
    let address = worker.core().address()?.as_bytes().to_vec();
    let hello = Hello { rank: rank as u32, size: size as u32, address }.encode();
    ep.send(&hello[..]).await?;
    let (len_tag, table_tag) =
        (tag::own(BOOTSTRAP_SEQ, 0, 0, "bootstrap")?, tag::own(BOOTSTRAP_SEQ, 0, 1, "bootstrap")?);
    let mut len = [0u8; 8];
    ep.recv_tag(&mut len[..], len_tag, FULL_MASK).await?;
    let len = u64::from_le_bytes(len) as usize;
    let limit = 16 + size * (4 + MAX_HELLO);
    if len > limit {
        return Err(protocol(format!("rank 0 announced a {len}-byte table; {size} ranks need at most {limit}")));
    }
    let mut bytes = vec![0u8; len];
    let got = ep.recv_tag(&mut bytes[..], table_tag, FULL_MASK).await?;
    let table = decode_table(&bytes[..got]).map_err(|e| protocol(e.to_string()))?;
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

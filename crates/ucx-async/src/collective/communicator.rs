//! `Communicator`: N ranks, each with an endpoint to every rank (itself included, through
//! UCX's loopback), point-to-point messages by rank and the collectives built on them.
//!
//! Collectives are numbered in the order a rank calls them, and the number is in every
//! message's tag (see `tag`), so every rank must call the same collectives in the same order
//! and await each before starting the next, as with MPI.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;

use super::bootstrap;
use super::launch::Launch;
use super::tag::{self, invalid, MAX_RANKS};
use crate::core::{RecvBuffer, SendBuffer, FULL_MASK};
use crate::{Endpoint, Error, Listener, Result, Worker};

/// How long a rank keeps trying to reach rank 0, which may start later.
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(60);

/// One rank's view of an N-rank job; see the module doc.
pub struct Communicator {
    rank: usize,
    peers: Vec<Endpoint>,
    seq: AtomicU32,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator").field("rank", &self.rank).field("size", &self.peers.len()).finish()
    }
}

impl Communicator {
    /// Joins the job the launcher's environment describes ([`Launch::from_env`]).
    pub async fn from_env(worker: &Worker) -> Result<Communicator> {
        let l = Launch::from_env()?;
        Communicator::bootstrap(worker, l.rank, l.size, l.root).await
    }

    /// Joins a job of `size` ranks as `rank`; rank 0 listens on `root`, the others connect
    /// to it (retrying for up to [`BOOTSTRAP_TIMEOUT`] while it is not up yet).
    pub async fn bootstrap(worker: &Worker, rank: usize, size: usize, root: SocketAddr) -> Result<Communicator> {
        check_world(rank, size)?;
        if rank == 0 {
            let listener = Listener::bind(worker, root)?;
            return Communicator::serve(worker, &listener, size).await;
        }
        let deadline = Instant::now() + BOOTSTRAP_TIMEOUT;
        let joined = loop {
            match bootstrap::join(worker, rank, size, root).await {
                Ok(j) => break j,
                Err(e @ Error::Protocol { .. }) => return Err(e),
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => return Err(e),
            }
        };
        Communicator::connect(worker, rank, joined).await
    }

    /// Rank 0 of a job of `size` ranks, on a listener the caller bound (for a port chosen by
    /// the system: bind to port 0 and hand [`Listener::local_addr`] to the other ranks).
    pub async fn serve(worker: &Worker, listener: &Listener, size: usize) -> Result<Communicator> {
        check_world(0, size)?;
        let joined = bootstrap::serve(worker, listener, size).await?;
        Communicator::connect(worker, 0, joined).await
    }

    /// Connects to every rank's worker, waits until every rank has, then lets the bootstrap
    /// endpoints go.
    async fn connect(worker: &Worker, rank: usize, (table, bootstrap): bootstrap::Joined) -> Result<Communicator> {
        let peers = table.iter().map(|a| Endpoint::connect_to_worker(worker, a, None)).collect::<Result<Vec<_>>>()?;
        let comm = Communicator { rank, peers, seq: AtomicU32::new(0) };
        comm.barrier().await?;
        // Aborted, not closed: both sides let go at once, and a close's control message
        // would reach an endpoint already gone and wait in UCX's queue, unmatched, forever.
        for ep in bootstrap {
            ep.abort();
        }
        Ok(comm)
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// How many ranks the job has.
    pub fn size(&self) -> usize {
        self.peers.len()
    }

    fn peer(&self, rank: usize, op: &'static str) -> Result<&Endpoint> {
        self.peers
            .get(rank)
            .ok_or_else(|| invalid(op, format!("rank {rank} is not below the world size {}", self.size())))
    }

    fn next_seq(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `buf` to rank `dest` with `tag` (below 2^31; larger tags are the communicator's).
    pub async fn send<B: SendBuffer + ?Sized>(&self, dest: usize, buf: &B, tag: u32) -> Result<()> {
        let t = tag::user(tag, self.rank, "Communicator::send")?;
        self.peer(dest, "Communicator::send")?.send_tag(buf, t).await
    }

    /// Receives into `buf` the message rank `src` sent with `tag`; returns its length. Fails
    /// if rank `src` fails or its endpoint closes first.
    pub async fn recv<B: RecvBuffer + ?Sized>(&self, src: usize, buf: &mut B, tag: u32) -> Result<usize> {
        let t = tag::user(tag, src, "Communicator::recv")?;
        self.peer(src, "Communicator::recv")?.recv_tag(buf, t, FULL_MASK).await
    }

    /// Batch `batch` of operation `seq`: sends each `(rank, bytes)` of `sends` and receives
    /// into each `(rank, buffer)` of `recvs`, all at once. A message whose length is not its
    /// buffer's is a protocol error.
    async fn exchange<'b>(
        &self,
        op: &'static str,
        seq: u32,
        batch: usize,
        sends: impl Iterator<Item = (usize, &'b [u8])>,
        recvs: impl Iterator<Item = (usize, &'b mut [u8])>,
    ) -> Result<()> {
        let mine = tag::own(seq, self.rank, batch, op)?;
        let sends = sends.map(|(r, bytes)| self.peers[r].send_tag(bytes, mine));
        let recvs = recvs.map(|(r, buf)| async move {
            let want = buf.len();
            let n = self.peers[r].recv_tag(buf, tag::own(seq, r, batch, op)?, FULL_MASK).await?;
            expect_len(op, r, n, want)
        });
        tokio::try_join!(try_join_all(sends), try_join_all(recvs))?;
        Ok(())
    }

    /// Returns once every rank has called `barrier`.
    pub async fn barrier(&self) -> Result<()> {
        let seq = self.next_seq();
        // Every rank tells every rank (N^2 empty messages: fine for the world sizes a host or
        // a rack has; a dissemination barrier is the step up).
        let all = 0..self.size();
        let recvs = all.clone().map(|r| (r, &mut [][..]));
        self.exchange("Communicator::barrier", seq, 0, all.map(|r| (r, &[][..])), recvs).await
    }

    /// Gathers every rank's `mine` (the same length on every rank) into `out`, rank by rank:
    /// `out` holds `size() * mine.len()` bytes.
    pub async fn allgather(&self, mine: &[u8], out: &mut [u8]) -> Result<()> {
        let op = "Communicator::allgather";
        if out.len() != mine.len() * self.size() {
            return Err(invalid(
                op,
                format!(
                    "out holds {} bytes, {} ranks x {} need {}",
                    out.len(),
                    self.size(),
                    mine.len(),
                    mine.len() * self.size()
                ),
            ));
        }
        let seq = self.next_seq();
        if mine.is_empty() {
            return Ok(());
        }
        let sends = (0..self.size()).map(|r| (r, mine));
        self.exchange(op, seq, 0, sends, out.chunks_mut(mine.len()).enumerate()).await
    }

    /// All-to-all with a part of any size (zero included) for each rank: `parts[r]` goes to
    /// rank `r`, and the result's element `r` is what rank `r` sent this rank. The sizes are
    /// exchanged first, so each part is received straight into a buffer of its size.
    pub async fn alltoallv(&self, parts: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.alltoallv_into(parts, &mut out).await?;
        Ok(out)
    }

    /// [`Communicator::alltoallv`] into `out`, whose buffers are resized to what each rank
    /// sends and reused: called again with the same `out`, it allocates nothing once the
    /// buffers have grown to their sizes (and UCX finds them already registered).
    pub async fn alltoallv_into(&self, parts: &[&[u8]], out: &mut Vec<Vec<u8>>) -> Result<()> {
        let op = "Communicator::alltoallv";
        if parts.len() != self.size() {
            return Err(invalid(op, format!("{} parts for {} ranks", parts.len(), self.size())));
        }
        let seq = self.next_seq();
        let me = self.rank;
        let others = || (0..self.size()).filter(move |&r| r != me);
        // Phase 1 (batch 0): the sizes. This rank's own part never leaves the process.
        let sizes: Vec<[u8; 8]> = parts.iter().map(|p| (p.len() as u64).to_le_bytes()).collect();
        let mut incoming = vec![[0u8; 8]; self.size()];
        incoming[me] = sizes[me];
        let size_sends = others().map(|r| (r, &sizes[r][..]));
        let size_recvs = incoming.iter_mut().enumerate().filter(|(r, _)| *r != me).map(|(r, s)| (r, &mut s[..]));
        self.exchange(op, seq, 0, size_sends, size_recvs).await?;
        // Phase 2 (batch 1): the parts, zero-size ones not sent at all.
        out.resize_with(self.size(), Vec::new);
        for (r, (s, buf)) in incoming.iter().zip(out.iter_mut()).enumerate() {
            let n = u64::from_le_bytes(*s);
            let n = usize::try_from(n).ok().filter(|&n| buf.try_reserve(n.saturating_sub(buf.len())).is_ok());
            let Some(n) = n else {
                return Err(Error::Protocol {
                    op,
                    detail: format!(
                        "rank {r} announced a part of {} bytes, which cannot be allocated",
                        u64::from_le_bytes(*s)
                    ),
                });
            };
            buf.clear();
            buf.resize(n, 0);
        }
        out[me].copy_from_slice(parts[me]);
        let sends = others().filter(|&r| !parts[r].is_empty()).map(|r| (r, parts[r]));
        let recvs = out.iter_mut().enumerate().filter(|(r, b)| *r != me && !b.is_empty()).map(|(r, b)| (r, &mut b[..]));
        self.exchange(op, seq, 1, sends, recvs).await
    }

    /// Closes the endpoints to every rank (after a final barrier, so no rank closes while
    /// another still sends to it).
    pub async fn close(self) -> Result<()> {
        self.barrier().await?;
        for ep in &self.peers {
            ep.abort();
        }
        Ok(())
    }
}

fn check_world(rank: usize, size: usize) -> Result<()> {
    let op = "Communicator::bootstrap";
    if size == 0 || size > MAX_RANKS {
        return Err(invalid(op, format!("a world has 1 to {MAX_RANKS} ranks, not {size}")));
    }
    if rank >= size {
        return Err(invalid(op, format!("rank {rank} is not below the world size {size}")));
    }
    Ok(())
}

fn expect_len(op: &'static str, rank: usize, got: usize, want: usize) -> Result<()> {
    if got == want {
        return Ok(());
    }
    Err(Error::Protocol { op, detail: format!("rank {rank} sent {got} bytes where {want} were announced") })
}

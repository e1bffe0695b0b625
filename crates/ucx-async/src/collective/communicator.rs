//! `Communicator`: N ranks, each with an endpoint to every rank (itself included, through
//! UCX's loopback), point-to-point messages by rank and the collectives built on them.
//!
//! Collectives are numbered in the order a rank calls them, and the number is in every
//! message's tag (see `tag`), so every rank must call the same collectives in the same order
//! and await each before starting the next, as with MPI.
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;

use super::bootstrap;
use super::launch::{Launch, Root};
use super::path::{self, Bounce, DataPath, PeerSlots};
use super::tag::{self, invalid, MAX_RANKS};
use crate::core::wire::alltoallv::{self as announce_wire, Announce};
use crate::core::wire::bootstrap::{rendezvous_parse, rendezvous_text};
use crate::core::wire::single_copy::{pair_tags, table_key};
use crate::core::{huge_pages, RecvBuffer, SendBuffer, FULL_MASK};
use crate::posting::join_posted;
use crate::{ConnectOptions, Endpoint, Error, Listener, Result, Tags, Worker};

/// How long a rank keeps trying to reach rank 0, which may start later.
pub const BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(60);

/// One rank's view of an N-rank job; see the module doc.
pub struct Communicator {
    rank: usize,
    peers: Vec<Endpoint>,
    seq: AtomicU32,
    path: DataPath,
    bounce: Bounce,
    /// Per peer: the transports of its endpoint's lanes (for [`DataPath::Auto`]), read from
    /// UCX once the lanes exist.
    transports: OnceLock<Vec<Vec<String>>>,
    /// The bounce buffers, by peer; held for the length of one `alltoallv`.
    pool: tokio::sync::Mutex<Vec<PeerSlots>>,
    /// `alltoallv`'s announcement buffers, taken for the length of a call and put back.
    scratch: std::sync::Mutex<Scratch>,
}

/// The buffers of `alltoallv`'s first phase, kept so that calls allocate nothing once grown.
#[derive(Default)]
struct Scratch {
    /// The announcement message to each rank.
    sent: Vec<Vec<u8>>,
    /// Room for each rank's announcement message, rank by rank.
    incoming: Vec<u8>,
}

impl std::fmt::Debug for Communicator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Communicator").field("rank", &self.rank).field("size", &self.peers.len()).finish()
    }
}

impl Communicator {
    /// Joins the job the launcher's environment describes ([`Launch::from_env`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the bootstrap: the endpoints made so far are
    /// dropped, which force-closes them, and the other ranks' bootstrap fails or times out.
    pub async fn from_env(worker: &Worker) -> Result<Communicator> {
        Communicator::join(worker, &Launch::from_env()?).await
    }

    /// Joins the job `launch` describes: its rank and size, how to reach rank 0, and whether
    /// the ranks' endpoints have peer error handling ([`Launch::error_handling`]; every rank
    /// must choose the same, and rank 0 refuses one that does not).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the bootstrap: the endpoints made so far are
    /// dropped, which force-closes them, and the other ranks' bootstrap fails or times out.
    pub async fn join(worker: &Worker, launch: &Launch) -> Result<Communicator> {
        let (rank, size, eh) = (launch.rank, launch.size, launch.error_handling);
        check_world(rank, size)?;
        match &launch.root {
            Root::Address(root) => Communicator::meet_at_address(worker, rank, size, *root, eh).await,
            Root::File { path, bind } => Communicator::meet_at_file(worker, rank, size, path, *bind, eh).await,
        }
    }

    /// Joins a job of `size` ranks as `rank`, meeting at the rendezvous file `path` (on a file
    /// system every rank sees; a new path per job): rank 0 listens at `bind` (port 0: any free
    /// port), writes the address it got there (`wire::bootstrap::rendezvous_text`, written
    /// whole by a rename) and removes it once every rank has joined; the others wait for the
    /// file for up to [`BOOTSTRAP_TIMEOUT`], reading it again while its address does not
    /// answer (a file left by an earlier job). The ranks' endpoints have peer error handling.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the bootstrap: the endpoints made so far are
    /// dropped, which force-closes them, and the other ranks' bootstrap fails or times out. A
    /// rendezvous file rank 0 has written is left behind; the next job uses a new path anyway.
    pub async fn bootstrap_file(
        worker: &Worker,
        rank: usize,
        size: usize,
        path: &Path,
        bind: SocketAddr,
    ) -> Result<Communicator> {
        let root = Root::File { path: path.to_path_buf(), bind };
        Communicator::join(worker, &Launch { rank, size, root, error_handling: true }).await
    }

    async fn meet_at_file(
        worker: &Worker,
        rank: usize,
        size: usize,
        path: &Path,
        bind: SocketAddr,
        eh: bool,
    ) -> Result<Communicator> {
        const OP: &str = "Communicator::bootstrap_file";
        let io =
            |what: &str, e: std::io::Error| invalid(OP, format!("{what} the rendezvous file {}: {e}", path.display()));
        let boot = bootstrap::boot_worker(worker)?;
        if rank == 0 {
            let listener = Listener::bind(&boot, bind)?;
            let text = rendezvous_text(listener.local_addr());
            let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
            std::fs::write(&tmp, text).map_err(|e| io("cannot write", e))?;
            std::fs::rename(&tmp, path).map_err(|e| io("cannot move into place", e))?;
            let joined = bootstrap::serve(worker, &listener, size, eh).await;
            // Every rank has read it (or the bootstrap failed): a later job must not find it.
            let _ = std::fs::remove_file(path);
            return Communicator::connect(worker, 0, joined?, eh).await;
        }
        let deadline = Instant::now() + BOOTSTRAP_TIMEOUT;
        let joined = loop {
            let root = match std::fs::read_to_string(path) {
                Ok(text) => Some(
                    rendezvous_parse(&text)
                        .map_err(|e| invalid(OP, format!("the rendezvous file {} is not ours: {e}", path.display()))),
                ),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
                Err(e) => return Err(io("cannot read", e)),
            };
            let tried = match root {
                Some(root) => match bootstrap::join(worker, &boot, rank, size, root?, eh).await {
                    Ok(j) => break j,
                    Err(e @ Error::Protocol { .. }) => return Err(e),
                    Err(e) => Some(e),
                },
                None => None,
            };
            if Instant::now() >= deadline {
                return Err(tried.unwrap_or_else(|| {
                    invalid(
                        OP,
                        format!("the rendezvous file {} did not appear within {BOOTSTRAP_TIMEOUT:?}", path.display()),
                    )
                }));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        Communicator::connect(worker, rank, joined, eh).await
    }

    /// Joins a job of `size` ranks as `rank`; rank 0 listens on `root`, the others connect
    /// to it (retrying for up to [`BOOTSTRAP_TIMEOUT`] while it is not up yet). The ranks'
    /// endpoints have peer error handling.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the bootstrap: the endpoints made so far are
    /// dropped, which force-closes them, and the other ranks' bootstrap fails or times out.
    pub async fn bootstrap(worker: &Worker, rank: usize, size: usize, root: SocketAddr) -> Result<Communicator> {
        Communicator::join(worker, &Launch { rank, size, root: Root::Address(root), error_handling: true }).await
    }

    async fn meet_at_address(
        worker: &Worker,
        rank: usize,
        size: usize,
        root: SocketAddr,
        eh: bool,
    ) -> Result<Communicator> {
        let boot = bootstrap::boot_worker(worker)?;
        if rank == 0 {
            let listener = Listener::bind(&boot, root)?;
            let joined = bootstrap::serve(worker, &listener, size, eh).await?;
            return Communicator::connect(worker, 0, joined, eh).await;
        }
        let deadline = Instant::now() + BOOTSTRAP_TIMEOUT;
        let joined = loop {
            match bootstrap::join(worker, &boot, rank, size, root, eh).await {
                Ok(j) => break j,
                Err(e @ Error::Protocol { .. }) => return Err(e),
                Err(_) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(100)).await,
                Err(e) => return Err(e),
            }
        };
        Communicator::connect(worker, rank, joined, eh).await
    }

    /// Rank 0 of a job of `size` ranks, on a listener the caller bound (for a port chosen by
    /// the system: bind to port 0 and hand [`Listener::local_addr`] to the other ranks). The
    /// ranks' endpoints have peer error handling.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves abandons the bootstrap: the endpoints made so far are
    /// dropped, which force-closes them, and the other ranks' bootstrap fails or times out.
    pub async fn serve(worker: &Worker, listener: &Listener, size: usize) -> Result<Communicator> {
        check_world(0, size)?;
        let joined = bootstrap::serve(worker, listener, size, true).await?;
        Communicator::connect(worker, 0, joined, true).await
    }

    /// Connects to every rank's worker (with peer error handling if `eh`), waits until every
    /// rank has, then lets the bootstrap endpoints go.
    async fn connect(
        worker: &Worker,
        rank: usize,
        (table, bootstrap): bootstrap::Joined,
        eh: bool,
    ) -> Result<Communicator> {
        let options = ConnectOptions { error_handling: eh, ..ConnectOptions::default() };
        // With peer error handling UCX serves ranks on one host with TCP, so each pair of
        // ranks also starts the same-host single-copy path (see `crate::single_copy`); without
        // it, or with UCX_MM_ERROR_HANDLING=y, UCX's own shared memory (and CMA) do as well
        // (`ucx_core::single_copy::offered`).
        let addresses: Vec<&[u8]> = table.iter().map(|a| a.as_bytes()).collect();
        let key = table_key(&addresses);
        let peers = table
            .iter()
            .enumerate()
            .map(|(r, a)| match r != rank && ucx_core::single_copy::offered(worker.core().context(), eh) {
                true => {
                    let (msg_recv, msg_send) = pair_tags(key, rank, r);
                    let tags = Tags { msg_send, msg_recv, ctrl_send: None, ctrl_recv: None };
                    Endpoint::connect_to_rank(worker, a, tags, options)
                }
                false => Endpoint::connect_to_worker_with(worker, a, None, options),
            })
            .collect::<Result<Vec<_>>>()?;
        let comm = Communicator {
            rank,
            peers,
            seq: AtomicU32::new(0),
            path: DataPath::default(),
            bounce: Bounce::default(),
            transports: OnceLock::new(),
            pool: tokio::sync::Mutex::default(),
            scratch: std::sync::Mutex::default(),
        };
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

    /// Chooses how `alltoallv` parts travel (default [`DataPath::Auto`]). Every rank may
    /// choose for itself: a part's receiver follows its sender.
    pub fn set_data_path(&mut self, path: DataPath) {
        self.path = path;
    }

    /// Sets the bounce-buffer pool's shape (default [`Bounce::default`]); the pool is made on
    /// the first `alltoallv` that uses it.
    pub fn set_bounce(&mut self, bounce: Bounce) -> Result<()> {
        bounce.check("Communicator::set_bounce")?;
        self.bounce = bounce;
        Ok(())
    }

    /// How this rank sends `len` bytes to rank `r`: the batch size, or 0 for one message.
    fn batch_for(&self, r: usize, len: usize) -> u32 {
        let buffered = match self.path {
            DataPath::Direct => false,
            DataPath::Buffered => true,
            DataPath::Auto => {
                let transports =
                    self.transports.get_or_init(|| self.peers.iter().map(|p| p.core().transports()).collect());
                announce_wire::auto_buffered(&transports[r], len as u64)
            }
        };
        // `set_bounce` checked that the batch size fits.
        if buffered && len > 0 {
            u32::try_from(self.bounce.batch).unwrap_or(u32::MAX)
        } else {
            0
        }
    }

    /// The endpoint to rank `rank` (to see its transports, or for operations this type does
    /// not wrap, on tags of your own).
    pub fn endpoint(&self, rank: usize) -> Result<&Endpoint> {
        self.peer(rank, "Communicator::endpoint")
    }

    fn peer(&self, rank: usize, op: &'static str) -> Result<&Endpoint> {
        self.peers
            .get(rank)
            .ok_or_else(|| invalid(op, format!("rank {rank} is not below the world size {}", self.size())))
    }

    pub(super) fn next_seq(&self) -> u32 {
        self.seq.fetch_add(1, Ordering::Relaxed)
    }

    /// Sends `buf` to rank `dest` with `tag` (below 2^31; larger tags are the communicator's).
    ///
    /// # Cancel safety
    ///
    /// As for [`Endpoint::send_tag`](crate::Endpoint::send_tag): dropping the future cancels the
    /// send and may block for up to 50 ms, then force-close the endpoint to rank `dest`.
    pub async fn send<B: SendBuffer + ?Sized>(&self, dest: usize, buf: &B, tag: u32) -> Result<()> {
        let t = tag::user(tag, self.rank, "Communicator::send")?;
        self.peer(dest, "Communicator::send")?.send_tag(buf, t).await
    }

    /// Receives into `buf` the message rank `src` sent with `tag`; returns its length. Fails
    /// if rank `src` fails or its endpoint closes first.
    ///
    /// # Cancel safety
    ///
    /// As for [`Endpoint::recv_tag`](crate::Endpoint::recv_tag): an unmatched receive is withdrawn
    /// at once; a matched one blocks the drop until its message has landed in `buf`.
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
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway drops the operations it posted, each as a
    /// dropped [`Endpoint::send`](crate::Endpoint::send) or
    /// [`Endpoint::recv`](crate::Endpoint::recv) does (this may block for up to 50 ms, or until a
    /// matched message has landed, and may force-close an endpoint to a rank). This rank has then
    /// left a collective the other ranks go on with, so the communicator is out of step with them:
    /// do not use it for further collectives; drop it.
    pub async fn barrier(&self) -> Result<()> {
        let seq = self.next_seq();
        // Every rank tells every other rank (N^2 empty messages: fine for the world sizes a
        // host or a rack has; a dissemination barrier is the step up). A message to itself
        // would tell a rank nothing.
        let me = self.rank;
        let others = (0..self.size()).filter(move |&r| r != me);
        let recvs = others.clone().map(|r| (r, &mut [][..]));
        self.exchange("Communicator::barrier", seq, 0, others.map(|r| (r, &[][..])), recvs).await
    }

    /// Gathers every rank's `mine` (the same length on every rank) into `out`, rank by rank:
    /// `out` holds `size() * mine.len()` bytes.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway drops the operations it posted, each as a
    /// dropped [`Endpoint::send`](crate::Endpoint::send) or
    /// [`Endpoint::recv`](crate::Endpoint::recv) does (this may block for up to 50 ms, or until a
    /// matched message has landed, and may force-close an endpoint to a rank). This rank has then
    /// left a collective the other ranks go on with, so the communicator is out of step with them:
    /// do not use it for further collectives; drop it.
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
        // This rank's own part is copied, not sent to itself.
        let me = self.rank;
        out[me * mine.len()..(me + 1) * mine.len()].copy_from_slice(mine);
        let sends = (0..self.size()).filter(|&r| r != me).map(|r| (r, mine));
        let recvs = out.chunks_mut(mine.len()).enumerate().filter(|&(r, _)| r != me);
        self.exchange(op, seq, 0, sends, recvs).await
    }

    /// All-to-all with a part of any size (zero included) for each rank: `parts[r]` goes to
    /// rank `r`, and the result's element `r` is what rank `r` sent this rank. The sizes are
    /// exchanged first, so each part is received straight into a buffer of its size.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway drops the operations it posted, each as a
    /// dropped [`Endpoint::send`](crate::Endpoint::send) or
    /// [`Endpoint::recv`](crate::Endpoint::recv) does (this may block for up to 50 ms, or until a
    /// matched message has landed, and may force-close an endpoint to a rank). This rank has then
    /// left a collective the other ranks go on with, so the communicator is out of step with them:
    /// do not use it for further collectives; drop it.
    pub async fn alltoallv(&self, parts: &[&[u8]]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::new();
        self.alltoallv_into(parts, &mut out).await?;
        Ok(out)
    }

    /// [`Communicator::alltoallv`] into `out`, whose buffers are resized to what each rank
    /// sends and reused: called again with the same `out`, it allocates nothing once the
    /// buffers have grown to their sizes (and UCX finds them already registered).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway drops the operations it posted, each as a
    /// dropped [`Endpoint::send`](crate::Endpoint::send) or
    /// [`Endpoint::recv`](crate::Endpoint::recv) does (this may block for up to 50 ms, or until a
    /// matched message has landed, and may force-close an endpoint to a rank). This rank has then
    /// left a collective the other ranks go on with, so the communicator is out of step with them:
    /// do not use it for further collectives; drop it.
    pub async fn alltoallv_into(&self, parts: &[&[u8]], out: &mut Vec<Vec<u8>>) -> Result<()> {
        let op = "Communicator::alltoallv";
        if parts.len() != self.size() {
            return Err(invalid(op, format!("{} parts for {} ranks", parts.len(), self.size())));
        }
        let me = self.rank;
        // How each part travels, decided (and its batches checked against the tag layout)
        // before anything is sent, so a refused part leaves no peer waiting for half a call.
        let mut mine = Vec::with_capacity(self.size());
        for (r, p) in parts.iter().enumerate() {
            let batch = if r == me { 0 } else { self.batch_for(r, p.len()) };
            mine.push(Announce::new(p.len() as u64, batch).map_err(|e| {
                invalid(op, format!("the part for rank {r} ({} bytes in batches of {batch}): {e}", p.len()))
            })?);
        }
        let seq = self.next_seq();
        let size = self.size();
        let inline_max = announce_wire::inline_max(size);
        // Each peer's announcement (batch 0: its part's size and path, and the part itself if
        // small) and then its part (batches 1 and up) go peer by peer, without waiting for
        // the other peers: a part is posted as soon as this rank can, and received as soon as
        // its announcement is in, so no peer's lateness holds up the rest (MPI's alltoallv
        // has no such round either: its receivers know the sizes). The message buffers are
        // the communicator's, reused.
        let mut scratch = std::mem::take(&mut *self.scratch.lock().unwrap_or_else(|e| e.into_inner()));
        scratch.sent.resize_with(size, Vec::new);
        for (r, a) in mine.iter().enumerate() {
            if r != me {
                a.encode_message(parts[r], inline_max, &mut scratch.sent[r]);
            }
        }
        let room = announce_wire::LEN + inline_max;
        scratch.incoming.resize(room * size, 0);
        out.resize_with(size, Vec::new);
        // The bounce buffers, by peer: a peer may send in batches whatever this rank chose.
        let mut pool = self.pool.lock().await;
        pool.resize_with(size, PeerSlots::default);
        let bounce = self.bounce;
        let Scratch { sent, incoming } = &mut scratch;
        let mut transfers = Vec::with_capacity(size);
        // This rank's own part last: it is copied once every message is out, while the peers
        // already read.
        let mut peers: Vec<_> =
            out.iter_mut().zip(pool.iter_mut()).zip(incoming.chunks_mut(room)).enumerate().collect();
        let own = peers.remove(me);
        peers.push(own);
        for (r, ((buf, slots), message)) in peers {
            let (ep, to, part, announcement) = (&self.peers[r], mine[r], parts[r], &sent[r][..]);
            let PeerSlots { send: send_slots, recv: recv_slots } = slots;
            transfers.push(async move {
                if r == me {
                    // Never leaves the process. Large parts land on huge pages where the kernel
                    // allows (see `huge_pages`), received ones too.
                    buf.clear();
                    huge_pages::reserve_exact(buf, part.len()).map_err(|_| Error::Protocol {
                        op,
                        detail: format!("this rank's own part of {} bytes cannot be allocated", part.len()),
                    })?;
                    buf.extend_from_slice(part);
                    return Ok(());
                }
                let send = async {
                    // Eager (fast completion): a rendezvous here would wait for the receiver
                    // to run, which costs most where ranks share cores.
                    ep.send_tag_fast(announcement, tag::own(seq, me, 0, op)?).await?;
                    if to.is_inline(inline_max) {
                        return Ok(());
                    }
                    let slots = if to.batch > 0 { path::ensure(send_slots, bounce) } else { &mut [] };
                    path::send_part(ep, part, to, |b| tag::own(seq, me, b, op), slots).await
                };
                let recv = async {
                    let got = ep.recv_tag(&mut message[..], tag::own(seq, r, 0, op)?, FULL_MASK).await?;
                    let (from, data) = Announce::decode_message(&message[..got], inline_max).map_err(|e| {
                        Error::Protocol { op, detail: format!("rank {r} sent a bad announcement: {e}") }
                    })?;
                    let n = usize::try_from(from.len).ok().filter(|&n| huge_pages::reserve_exact(buf, n).is_ok());
                    let Some(n) = n else {
                        // No room: the part's messages are still received and dropped, so the
                        // sender is not left waiting for receives that never come.
                        if !from.is_inline(inline_max) {
                            for k in 0..from.messages() {
                                path::drop_message(ep, tag::own(seq, r, Announce::tag_batch(k), op)?).await?;
                            }
                        }
                        return Err(Error::Protocol {
                            op,
                            detail: format!(
                                "rank {r} announced a part of {} bytes, which cannot be allocated",
                                from.len
                            ),
                        });
                    };
                    if from.is_inline(inline_max) {
                        buf.clear();
                        buf.extend_from_slice(data);
                        return Ok(());
                    }
                    // The receive overwrites every byte, so only growth is zeroed: a reused
                    // buffer costs no pass over its memory (1 MiB parts: a third of the call).
                    buf.truncate(n);
                    buf.resize(n, 0);
                    let slots = if from.batch > 0 { path::ensure(recv_slots, bounce) } else { &mut [] };
                    path::recv_part(ep, &mut buf[..], from, |b| tag::own(seq, r, b, op), slots, op, r).await
                };
                tokio::try_join!(send, recv).map(drop)
            });
        }
        // Every peer's first operations are in UCX before any spins (see `try_join_posted`).
        // All settle before the call returns, even when one peer's fail: a part already on its
        // way to a healthy peer could not be withdrawn (UCX cannot cancel a rendezvous send, so
        // dropping it would wait for a receive that peer may never post), and that peer's own
        // part still arrives whole. The first failure is returned.
        let failed = join_posted(transfers).await.into_iter().find_map(Result::err);
        drop(pool);
        if let Some(e) = failed {
            return Err(e);
        }
        *self.scratch.lock().unwrap_or_else(|e| e.into_inner()) = scratch;
        Ok(())
    }

    /// Closes the endpoints to every rank, after a final barrier (so no rank closes while
    /// another still sends to it) and a closing round (so none closes while its barrier
    /// message is still on its way to another). A rank that disconnects during the closing
    /// round has passed the barrier, so that counts as its part of the round.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops the communicator: its endpoints are force-closed at once, without
    /// the final barrier, so a rank still sending to this one may see its operation fail.
    pub async fn close(self) -> Result<()> {
        self.barrier().await?;
        self.closing_round().await?;
        for ep in &self.peers {
            ep.abort();
        }
        Ok(())
    }

    /// `close`'s second round: an empty message to and from every other rank, where a peer's
    /// disconnect stands for its message. UCX completes a send once it has taken the message,
    /// so a rank that force-closed right after the barrier could reset the connection under
    /// its last barrier message, and a slower rank's barrier then failed with that rank's
    /// disconnect (the collective tests, about 1 run in 25 under load). A peer sends its
    /// message here only after its barrier, so having it means the peer has this rank's
    /// barrier message; a peer that is gone has passed the barrier and needs nothing more.
    async fn closing_round(&self) -> Result<()> {
        let op = "Communicator::close";
        let (seq, me) = (self.next_seq(), self.rank);
        let mine = tag::own(seq, me, 0, op)?;
        let gone_is_done = |r: Result<()>| match r {
            Err(e) if e.is_disconnect() => Ok(()),
            r => r,
        };
        let (nothing, others) = (&[0u8; 0][..], (0..self.size()).filter(|&r| r != me));
        let sends = others.clone().map(|r| async move { gone_is_done(self.peers[r].send_tag(nothing, mine).await) });
        let recvs = others.map(|r| async move {
            let from = tag::own(seq, r, 0, op)?;
            gone_is_done(self.peers[r].recv_tag(&mut [0u8; 0][..], from, FULL_MASK).await.map(drop))
        });
        tokio::try_join!(try_join_all(sends), try_join_all(recvs))?;
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

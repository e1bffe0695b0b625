//! [`RailGroup`]: one logical connection made of several endpoints (rails), each usually on
//! its own worker and UCX context (its own devices); a message is split over them and
//! reassembled in place on the receiving side.
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::posting::join_posted;
use crate::try_join_posted;
use futures_util::future::try_join_all;
use futures_util::TryFutureExt;
use ucx_core::wire::multirail::{part_tag, Header, Hello, HELLO_LEN};
use ucx_core::{MemoryType, RecvBuffer, RecvChunks, SendBuffer, SendChunks};

use super::Split;
use crate::handshake::random_tag;
use crate::{Endpoint, Error, Listener, Result, Worker, DEFAULT_CONNECT_TIMEOUT};

const FULL_MASK: u64 = u64::MAX;

/// When one chunk of a [`RailGroup::send_profiled`] message finished sending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkTime {
    /// The rail it went on.
    pub rail: usize,
    /// Its part number on its rail: its stage, from 1 (the header is part 0 of rail 0).
    pub part: u16,
    /// Its length in bytes.
    pub bytes: u64,
    /// How long after the call its send finished: when UCX let go of the buffer, which over
    /// TCP can be as soon as the socket took the bytes, before they crossed the link.
    pub finished: Duration,
}

/// Several endpoints to one peer used as one: [`RailGroup::send`] splits a message over the
/// rails (by a [`Split`]: shares and pipeline stages), [`RailGroup::recv`] receives each
/// chunk straight into its place in the caller's buffer.
///
/// Buffers are host bytes (`[u8]`, `Vec<u8>`) or, with feature `cuda`, `cust` device buffers:
/// any [`SendChunks`] / [`RecvChunks`]. The two sides' memory types may differ.
///
/// Messages are matched in order: the n-th `recv` gets the peer's n-th `send`. A failure on
/// any rail, or a send or receive dropped before it finished, aborts every rail: a message
/// cut short would otherwise leave its other chunks to be taken for the next one. Every
/// pending and later operation then fails (`Error::Rail` names the rail that failed first).
/// A send fails as soon as one rail does; a receive waits until each of its chunks has
/// finished or failed (a chunk UCX is writing into the caller's buffer cannot be abandoned),
/// which the sender's abort brings about promptly. Dropping a receive midway likewise waits
/// for the chunks UCX has started writing, as a dropped `Endpoint::recv` does.
pub struct RailGroup {
    rails: Vec<Endpoint>,
    /// Per rail, the tags its parts are sent on and received on (the endpoint's own).
    tags: Vec<(u64, u64)>,
    sent: AtomicU64,
    received: AtomicU64,
    broken: AtomicBool,
}

impl RailGroup {
    /// Connects rail `i` from `rails[i].0` (a worker, usually with its own context and
    /// devices) to the listener at `rails[i].1`, all rails at once, and introduces each rail
    /// to the accepting side ([`RailGroup::accept`]).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves drops the rails connected so far (each endpoint is
    /// force-closed), so the peer's group fails to form.
    pub async fn connect(rails: &[(&Worker, SocketAddr)]) -> Result<RailGroup> {
        let n = rail_count(rails.len())?;
        let group = random_tag();
        let endpoints = try_join_all(rails.iter().enumerate().map(|(i, (worker, addr))| {
            async move {
                let ep = Endpoint::connect(worker, *addr).await?;
                ep.send(&Hello { group, rail: i as u16, rails: n }.encode()[..]).await?;
                Ok(ep)
            }
            .map_err(move |e| rail_error(i, e))
        }))
        .await?;
        RailGroup::from_endpoints(endpoints)
    }

    /// Accepts one group: a connection on each listener (rail `i` on `listeners[i]`, all at
    /// once), each introducing itself as rail `i` of the same group. A connection that does
    /// not is refused with [`Error::Protocol`]. For one client at a time; a server that many
    /// clients connect to at once uses [`super::RailListener`].
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it resolves drops the rails connected so far (each endpoint is
    /// force-closed), so the peer's group fails to form.
    pub async fn accept(listeners: &[Listener]) -> Result<RailGroup> {
        let n = rail_count(listeners.len())?;
        let accepted = try_join_all(listeners.iter().enumerate().map(|(i, listener)| async move {
            let ep = listener.accept().await.map_err(|e| rail_error(i, e))?;
            introduced(i, n, ep).await
        }))
        .await?;
        let group = accepted[0].1;
        if let Some(i) = accepted.iter().position(|(_, g)| *g != group) {
            for (ep, _) in &accepted {
                ep.abort();
            }
            return Err(protocol(format!(
                "rail {i} belongs to group {:#x}, rail 0 to group {group:#x}",
                accepted[i].1
            )));
        }
        RailGroup::from_endpoints(accepted.into_iter().map(|(ep, _)| ep).collect())
    }

    /// A group over endpoints that are already connected, in the same rail order on both
    /// sides (each with its own tags: made by a listener or `Endpoint::connect`).
    pub fn from_endpoints(rails: Vec<Endpoint>) -> Result<RailGroup> {
        rail_count(rails.len())?;
        let tags = rails
            .iter()
            .enumerate()
            .map(|(i, ep)| {
                ep.tags().map(|t| (t.msg_send, t.msg_recv)).ok_or_else(|| Error::InvalidArgument {
                    op: "RailGroup::from_endpoints",
                    detail: format!("rail {i} was made from a worker address and has no tags of its own"),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(RailGroup {
            rails,
            tags,
            sent: AtomicU64::new(0),
            received: AtomicU64::new(0),
            broken: AtomicBool::new(false),
        })
    }

    /// The rails, in order.
    pub fn rails(&self) -> &[Endpoint] {
        &self.rails
    }

    /// Sends `buf` split by `split` (which must have as many rails as the group): a header
    /// on rail 0 announcing the chunks, and every chunk at once, each on its rail.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, by design: dropping the future before it finishes aborts the group (every
    /// rail), so that a message cut short is never taken for the next one; every pending and later
    /// operation on the group then fails with `Error::Rail`.
    pub async fn send<B: SendChunks + ?Sized>(&self, buf: &B, split: &Split) -> Result<()> {
        self.send_timed(buf, split, None).await.map(drop)
    }

    /// [`RailGroup::send`], returning when each chunk's send finished (the seed's PROFILE
    /// mode): a rail whose chunks finish last is the one to give a smaller share. Two clock
    /// reads per chunk more than `send`.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, by design: dropping the future before it finishes aborts the group (every
    /// rail), so that a message cut short is never taken for the next one; every pending and later
    /// operation on the group then fails with `Error::Rail`.
    pub async fn send_profiled<B: SendChunks + ?Sized>(&self, buf: &B, split: &Split) -> Result<Vec<ChunkTime>> {
        self.send_timed(buf, split, Some(Instant::now())).await
    }

    async fn send_timed<B: SendChunks + ?Sized>(
        &self,
        buf: &B,
        split: &Split,
        start: Option<Instant>,
    ) -> Result<Vec<ChunkTime>> {
        const OP: &str = "RailGroup::send";
        self.check(OP, split.rails())?;
        let message = self.sent.fetch_add(1, Ordering::Relaxed);
        let total = buf.byte_len() as u64;
        let header = Header { total, stages: split.stage_count() as u16, shares: split.shares(total) };
        let layout = header.layout();
        let header = header.encode();
        let guard = AbortOnDrop(self);
        let mut parts = Vec::with_capacity(1 + layout.len());
        parts.push(self.send_timed_part(0, Part::Header(&header), message, 0, None));
        for c in layout.into_iter().filter(|c| c.len > 0) {
            let chunk = buf.chunk(c.offset as usize, c.len as usize);
            parts.push(self.send_timed_part(c.rail, Part::Chunk(chunk), message, c.part, start));
        }
        // Every chunk is in UCX before any send spins (see `try_join_posted`).
        let done = try_join_posted(parts).await.map(|times| times.into_iter().flatten().collect());
        guard.settle(done)
    }

    /// Receives the next message into the start of `buf`, each chunk straight into its place.
    /// Returns its length. A message longer than `buf` is refused and the group aborted.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe, by design: dropping the future before it finishes aborts the group (every
    /// rail), so that a message cut short is never taken for the next one; every pending and later
    /// operation on the group then fails with `Error::Rail`. A receive dropped midway first waits
    /// for the chunks UCX has started writing into `buf`, as a dropped
    /// [`Endpoint::recv`](crate::Endpoint::recv) does.
    pub async fn recv<B: RecvChunks + ?Sized>(&self, buf: &mut B) -> Result<usize> {
        const OP: &str = "RailGroup::recv";
        self.check(OP, self.rails.len())?;
        let message = self.received.fetch_add(1, Ordering::Relaxed);
        let guard = AbortOnDrop(self);
        let header = match self.recv_header(message, buf.byte_len()).await {
            Ok(h) => h,
            Err(e) => return guard.settle(Err(e)),
        };
        let layout = header.layout();
        let mut parts = Vec::with_capacity(layout.len());
        // The chunks lie back to back (their lengths sum to the total, checked to fit), so the
        // buffer is cut into them in order.
        let lens: Vec<usize> = layout.iter().map(|c| c.len as usize).collect();
        for (c, chunk) in layout.iter().zip(buf.cut_mut(&lens)) {
            if c.len > 0 {
                parts.push(self.recv_part(c.rail, chunk, message, c.part));
            }
        }
        // Every chunk settles before the group is aborted on a failure: a receive dropped
        // while UCX is writing into it waits for that write (the borrowed buffer), and a
        // healthy rail's chunk finishes, or fails once the sender aborts its rails.
        let done = join_posted(parts).await.into_iter().collect::<Result<Vec<()>>>().map(|_| header.total as usize);
        guard.settle(done)
    }

    /// Closes every rail (each tells its peer, as `Endpoint::close` does).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future midway cancels the rails' closes as a dropped
    /// [`Endpoint::close`](crate::Endpoint::close) does; dropping the group then force-closes every
    /// rail.
    pub async fn close(&self) -> Result<()> {
        self.broken.store(true, Ordering::Release);
        let mut first = Ok(());
        for (i, ep) in self.rails.iter().enumerate() {
            if let Err(e) = ep.close().await {
                first = first.and(Err(rail_error(i, e)));
            }
        }
        first
    }

    /// Aborts every rail at once.
    pub fn abort(&self) {
        self.broken.store(true, Ordering::Release);
        for ep in &self.rails {
            ep.abort();
        }
    }

    fn check(&self, op: &'static str, split_rails: usize) -> Result<()> {
        if self.broken.load(Ordering::Acquire) {
            return Err(Error::Closed { op });
        }
        if split_rails != self.rails.len() {
            return Err(Error::InvalidArgument {
                op,
                detail: format!("the split has {split_rails} rails, the group {}", self.rails.len()),
            });
        }
        Ok(())
    }

    /// Sends `bytes` as part `part` of message `message` on rail `rail`, and says when it
    /// finished if `start` is given.
    async fn send_timed_part<C: SendBuffer>(
        &self,
        rail: usize,
        bytes: Part<'_, C>,
        message: u64,
        part: u16,
        start: Option<Instant>,
    ) -> Result<Option<ChunkTime>> {
        let tag = part_tag(self.tags[rail].0, message, part);
        self.rails[rail].send_tag(&bytes, tag).await.map_err(|e| rail_error(rail, e))?;
        Ok(start.map(|t| ChunkTime { rail, part, bytes: bytes.byte_len() as u64, finished: t.elapsed() }))
    }

    async fn recv_part<C: RecvBuffer>(&self, rail: usize, mut chunk: C, message: u64, part: u16) -> Result<()> {
        let tag = part_tag(self.tags[rail].1, message, part);
        let got = self.rails[rail].recv_tag(&mut chunk, tag, FULL_MASK).await.map_err(|e| rail_error(rail, e))?;
        if got != chunk.byte_len() {
            return Err(protocol(format!(
                "rail {rail}: a chunk of {got} bytes where the header announced {}",
                chunk.byte_len()
            )));
        }
        Ok(())
    }

    async fn recv_header(&self, message: u64, room: usize) -> Result<Header> {
        let mut bytes = vec![0u8; Header::len_for(self.rails.len() as u16)];
        let tag = part_tag(self.tags[0].1, message, 0);
        let got = self.rails[0].recv_tag(&mut bytes[..], tag, FULL_MASK).await.map_err(|e| rail_error(0, e))?;
        let header = Header::decode(&bytes[..got]).map_err(|e| protocol(e.to_string()))?;
        if header.shares.len() != self.rails.len() {
            return Err(protocol(format!(
                "a message split over {} rails, the group has {}",
                header.shares.len(),
                self.rails.len()
            )));
        }
        if header.total > room as u64 {
            return Err(Error::InvalidArgument {
                op: "RailGroup::recv",
                detail: format!("a message of {} bytes does not fit the {room}-byte buffer", header.total),
            });
        }
        Ok(header)
    }
}

/// What one send of a message carries: its header (host bytes) or a chunk of the caller's
/// buffer, so that both go into one list of sends.
enum Part<'a, C> {
    Header(&'a [u8]),
    Chunk(C),
}

// SAFETY: delegates to the header's slice or the chunk, each a SendBuffer borrowed for `'a`.
unsafe impl<C: SendBuffer> SendBuffer for Part<'_, C> {
    fn as_ptr(&self) -> *const u8 {
        match self {
            Part::Header(h) => h.as_ptr(),
            Part::Chunk(c) => c.as_ptr(),
        }
    }
    fn byte_len(&self) -> usize {
        match self {
            Part::Header(h) => h.len(),
            Part::Chunk(c) => c.byte_len(),
        }
    }
    fn memory_type(&self) -> MemoryType {
        match self {
            Part::Header(_) => MemoryType::Host,
            Part::Chunk(c) => c.memory_type(),
        }
    }
}

/// Aborts the group unless the operation settles: dropped midway (or failed), its message's
/// other chunks would be read as the next message's.
struct AbortOnDrop<'a>(&'a RailGroup);

impl AbortOnDrop<'_> {
    fn settle<T>(self, r: Result<T>) -> Result<T> {
        if r.is_ok() {
            std::mem::forget(self);
        }
        r
    }
}

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Reads the hello of an endpoint accepted as rail `rail` of `rails` and checks it names that
/// rail; returns the endpoint and its group. An endpoint that does not is aborted.
pub(super) async fn introduced(rail: usize, rails: u16, ep: Endpoint) -> Result<(Endpoint, u64)> {
    let mut hello = [0u8; HELLO_LEN];
    match tokio::time::timeout(DEFAULT_CONNECT_TIMEOUT, ep.recv(&mut hello[..])).await {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(rail_error(rail, e)),
        Err(_) => {
            ep.abort();
            return Err(protocol(format!("rail {rail}: no hello within {DEFAULT_CONNECT_TIMEOUT:?}")));
        }
    }
    let checked = Hello::decode(&hello).map_err(|e| protocol(format!("rail {rail}: {e}"))).and_then(|hello| {
        if usize::from(hello.rail) != rail || hello.rails != rails {
            return Err(protocol(format!(
                "rail {rail}: the connection says it is rail {} of {}, expected rail {rail} of {rails}",
                hello.rail, hello.rails
            )));
        }
        Ok(hello.group)
    });
    match checked {
        Ok(group) => Ok((ep, group)),
        Err(e) => {
            ep.abort();
            Err(e)
        }
    }
}

pub(super) fn rail_count(n: usize) -> Result<u16> {
    let max = ucx_core::wire::multirail::MAX_RAILS;
    u16::try_from(n)
        .ok()
        .filter(|n| (1..=max).contains(n))
        .ok_or_else(|| Error::InvalidArgument { op: "RailGroup", detail: format!("{n} rails: a group has 1 to {max}") })
}

fn rail_error(rail: usize, error: Error) -> Error {
    match error {
        Error::Rail { .. } => error,
        error => Error::Rail { rail, error: Box::new(error) },
    }
}

fn protocol(detail: String) -> Error {
    Error::Protocol { op: "RailGroup", detail }
}

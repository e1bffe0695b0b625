//! How an `alltoallv` part travels: straight from and into the caller's buffers (one message
//! per part), or through a pool of bounce buffers allocated once (batches, pipelined: the
//! copy of batch k+1 overlaps the transfer of batch k, and receives are posted ahead). The
//! second is the buffer communicator of UCX-Py's multi-GPU join talk: on an RDMA network it
//! avoids registering every new user buffer with the NIC. Over shared memory or TCP there is
//! nothing to register and the copies only cost, so [`DataPath::Auto`] picks the bounce path
//! only for peers reached over InfiniBand-class transports. The bytes of the announcement
//! that tells the receiver which path a part takes live in ucx-core's `wire::alltoallv`.
use crate::core::wire::alltoallv::{Announce, DEFAULT_BATCH, DEFAULT_DEPTH};
use crate::core::{Status, FULL_MASK};
use crate::window::Window;
use crate::{try_join_posted, Endpoint, Error, Result};

pub use crate::core::wire::alltoallv::AUTO_MIN_PART;

/// Which path `alltoallv` parts take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DataPath {
    /// Per part: [`DataPath::Buffered`] for parts of at least [`AUTO_MIN_PART`] bytes to a
    /// peer whose endpoint runs over an RDMA network transport (`rc`, `dc`, `ud`); otherwise
    /// [`DataPath::Direct`] (ucx-core's `wire::alltoallv::auto_buffered`, the rule the Python
    /// communicator shares).
    #[default]
    Auto,
    /// One message per part, from and into the caller's buffers (zero-copy rendezvous for
    /// large parts).
    Direct,
    /// Batches through the bounce-buffer pool ([`Bounce`]).
    Buffered,
}

/// The bounce-buffer pool's shape: `depth` buffers of `batch` bytes per peer, for sending and
/// as many for receiving, allocated once (on first use) and reused by every `alltoallv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounce {
    /// Bytes per batch (at most `u32::MAX`, the announcement's field).
    pub batch: usize,
    /// Batches in flight per peer and direction (at least 1).
    pub depth: usize,
}

impl Default for Bounce {
    /// 1 MiB batches, 4 in flight per peer and direction (`wire::alltoallv::DEFAULT_BATCH`,
    /// `DEFAULT_DEPTH`, shared with the Python communicator).
    fn default() -> Self {
        Bounce { batch: DEFAULT_BATCH as usize, depth: DEFAULT_DEPTH }
    }
}

impl Bounce {
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.batch == 0 || u32::try_from(self.batch).is_err() || self.depth == 0 {
            return Err(Error::InvalidArgument {
                op,
                detail: format!(
                    "a bounce pool needs 1 to {} bytes per batch and a depth of at least 1, not {} bytes x {}",
                    u32::MAX,
                    self.batch,
                    self.depth
                ),
            });
        }
        Ok(())
    }
}

/// One peer's bounce buffers, allocated on first use.
#[derive(Default)]
pub(crate) struct PeerSlots {
    pub(crate) send: Vec<Vec<u8>>,
    pub(crate) recv: Vec<Vec<u8>>,
}

/// `depth` buffers of `batch` bytes in `slots` (made once, then reused as they are).
pub(crate) fn ensure(slots: &mut Vec<Vec<u8>>, bounce: Bounce) -> &mut [Vec<u8>] {
    if slots.len() != bounce.depth || slots.first().is_some_and(|s| s.len() != bounce.batch) {
        *slots = (0..bounce.depth).map(|_| vec![0u8; bounce.batch]).collect();
    }
    slots
}

/// Receives the message on `tag` from `ep` only to drop it, for a part this rank has no room
/// for: into one byte, so UCX cuts it short and its sender still completes (rendezvous
/// included; a same-host single-copy sender too, answered as too large, as for any receive too
/// small). Only a failure of the endpoint is an error.
pub(crate) async fn drop_message(ep: &Endpoint, tag: u64) -> Result<()> {
    match ep.recv_tag(&mut [0u8; 1][..], tag, FULL_MASK).await {
        Err(e) if e.status() != Status::MessageTruncated => Err(e),
        _ => Ok(()),
    }
}

/// Sends `part` to `ep` as `announce` says: one message, or its batches copied through
/// `slots` (at least one buffer of `announce.batch` bytes), at most `slots.len()` in flight.
pub(crate) async fn send_part<'a>(
    ep: &'a Endpoint,
    part: &[u8],
    announce: Announce,
    tag_of: impl Fn(usize) -> Result<u64>,
    slots: &'a mut [Vec<u8>],
) -> Result<()> {
    if announce.batch == 0 {
        return ep.send_tag(part, tag_of(Announce::tag_batch(0))?).await;
    }
    let send =
        |slot: &'a mut Vec<u8>, n: usize, tag: u64| async move { ep.send_tag(&slot[..n], tag).await.map(|()| slot) };
    let mut free: Vec<&mut Vec<u8>> = slots.iter_mut().collect();
    let mut inflight = Window::new(free.len());
    for k in 0..announce.messages() {
        let slot = match free.pop() {
            Some(s) => s,
            // All buffers are in flight: wait for the oldest send to hand its buffer back.
            None => inflight.next().await.expect("a send is in flight")?,
        };
        let r = announce.range(k);
        let n = (r.end - r.start) as usize;
        slot[..n].copy_from_slice(&part[r.start as usize..r.end as usize]);
        let tag = tag_of(Announce::tag_batch(k))?;
        inflight.push(send(slot, n, tag)).await;
    }
    while let Some(done) = inflight.next().await {
        done?;
    }
    Ok(())
}

/// Receives into `out` (the part's length) what a peer sends as `announce` says: one message
/// in place, or its batches into `slots` (posted ahead, up to `slots.len()`) and copied out
/// in order. Batches larger than this rank's buffers are received in place instead.
pub(crate) async fn recv_part<'a>(
    ep: &'a Endpoint,
    out: &mut [u8],
    announce: Announce,
    tag_of: impl Fn(usize) -> Result<u64>,
    slots: &'a mut [Vec<u8>],
    op: &'static str,
    rank: usize,
) -> Result<()> {
    let want = |k: u64| {
        let r = announce.range(k);
        (r.start as usize, (r.end - r.start) as usize)
    };
    let check = |k: u64, got: usize| {
        let (_, n) = want(k);
        if got == n {
            return Ok(());
        }
        Err(Error::Protocol {
            op,
            detail: format!("rank {rank} sent {got} bytes in batch {k} where {n} were announced"),
        })
    };
    let fits = slots.first().is_some_and(|s| s.len() >= announce.batch as usize);
    if announce.batch == 0 && announce.messages() == 1 {
        // The direct path's one message: no join, nothing to allocate.
        let tag = tag_of(Announce::tag_batch(0))?;
        return check(0, ep.recv_tag(out, tag, FULL_MASK).await?);
    }
    if announce.batch == 0 || !fits {
        // In place: each message straight into its range of `out`, all posted at once.
        let mut rest = &mut out[..];
        let mut recvs = Vec::new();
        for k in 0..announce.messages() {
            let (chunk, tail) = std::mem::take(&mut rest).split_at_mut(want(k).1);
            rest = tail;
            let tag = tag_of(Announce::tag_batch(k))?;
            recvs.push(async move { check(k, ep.recv_tag(chunk, tag, FULL_MASK).await?) });
        }
        return try_join_posted(recvs).await.map(drop);
    }
    let recv = |k: u64, slot: &'a mut Vec<u8>, n: usize, tag: u64| async move {
        let got = ep.recv_tag(&mut slot[..n], tag, FULL_MASK).await?;
        Ok::<_, Error>((k, got, slot))
    };
    let mut free: Vec<&mut Vec<u8>> = slots.iter_mut().collect();
    let mut inflight = Window::new(free.len());
    let messages = announce.messages();
    let mut posted = 0u64;
    let mut copied = 0u64;
    while copied < messages {
        // Post ahead while buffers are free.
        while posted < messages {
            let Some(slot) = free.pop() else { break };
            let (_, n) = want(posted);
            let tag = tag_of(Announce::tag_batch(posted))?;
            inflight.push(recv(posted, slot, n, tag)).await;
            posted += 1;
        }
        let (k, got, slot) = inflight.next().await.expect("a receive is posted")?;
        check(k, got)?;
        let (start, n) = want(k);
        out[start..start + n].copy_from_slice(&slot[..n]);
        free.push(slot);
        copied += 1;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_is_made_once_and_remade_for_another_shape() {
        let mut slots = Vec::new();
        let b = Bounce { batch: 16, depth: 3 };
        let p = ensure(&mut slots, b).as_ptr();
        assert_eq!(ensure(&mut slots, b).as_ptr(), p, "reused as it is");
        assert_eq!(ensure(&mut slots, Bounce { batch: 32, depth: 3 })[0].len(), 32);
        assert!(Bounce { batch: 0, depth: 1 }.check("t").is_err());
        assert!(Bounce { batch: 1, depth: 0 }.check("t").is_err());
        assert!(Bounce::default().check("t").is_ok());
    }
}

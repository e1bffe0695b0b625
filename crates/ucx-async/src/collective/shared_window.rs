//! `SharedWindow`: an all-to-all through shared memory, each part copied once, straight into the
//! receiver's memory, and read there.
//!
//! Each rank's window is memory UCX allocated (System V or POSIX shared memory), which every
//! other rank on the host maps through its remote key (`RemoteKey::local_ptr`, UCX's
//! `ucp_rkey_ptr`). A sender copies its part into its slot of the receiver's window, then
//! sends the receiver a 9-byte note (`wire::shared_window`); the receiver reads the part where it
//! landed. One copy in user space, and no rendezvous or system call per part, where
//! [`Communicator::alltoallv`] has the receiver read each large part with CMA
//! (`process_vm_readv`) after a rendezvous handshake, and copies it once more when peer error
//! handling keeps UCX's shared memory off and the part goes over TCP. The mapping needs no
//! transport lane, so it works with error handling too; only the notes travel as messages.
//!
//! A part larger than the receiver's slot, or for a rank whose window cannot be mapped (one on
//! another host), travels as one tagged message instead, into a buffer the window keeps: any
//! sizes work, and the slot only decides which parts take the fast path.
//!
//! Each window has two halves of one slot per sender, and call k writes half k % 2. That makes
//! them safe to reuse without another message: a rank starts call k + 2 only after every
//! peer's note of call k + 1, and a peer sends that note only once it has started call k + 1,
//! that is once its caller is done reading the parts of call k (they borrow the window, which
//! the next call takes mutably).
use std::sync::atomic::{fence, Ordering};

use super::tag::{self, invalid};
use super::Communicator;
use crate::core::wire::shared_window::{Entry, Note, ENTRY_HEAD, NOTE_LEN};
use crate::core::{huge_pages, HugeSharedMapping, MemoryHandle, RemoteKey, Status, FULL_MASK};
use crate::posting::join_posted;
use crate::{Error, Result};

const OP: &str = "SharedWindow::alltoallv";

/// One rank's window as this process reaches it.
struct Mapped {
    /// Where the window starts in this process.
    base: Base,
    /// The most bytes a sender's part may have in it.
    slot: usize,
    /// Keeps a peer's window mapped (`None` for this rank's own).
    _key: Option<RemoteKey>,
    /// The window attached again on huge pages, where `base` points (see `Mapped::new`).
    huge: Option<HugeSharedMapping>,
}

impl Mapped {
    /// The window of `len` bytes UCX maps at `base`, reached through a second attachment on
    /// huge pages where one can be made: copies of 4 MiB and more into 4 KiB pages cost a fifth
    /// more (docs/performance.md).
    fn new(base: *mut u8, len: usize, slot: usize, key: Option<RemoteKey>) -> Mapped {
        let huge = HugeSharedMapping::of(base, len);
        let base = Base(huge.as_ref().map_or(base, HugeSharedMapping::ptr));
        Mapped { base, slot, _key: key, huge }
    }
}

/// A window's address in this process.
#[derive(Clone, Copy)]
struct Base(*mut u8);

// SAFETY: the address is of shared memory that stays mapped while the window (which holds the
// keys and its own memory) lives; which thread writes through it changes nothing, and who
// writes where and when is the module's rule, not a thread's.
unsafe impl Send for Base {}
// SAFETY: as above.
unsafe impl Sync for Base {}

/// Where a rank's part of the last call is.
#[derive(Clone, Copy, Default)]
enum Landed {
    /// Nowhere: no call yet, or the last one failed for this sender.
    #[default]
    Nowhere,
    /// In this rank's window, in the last call's half, at the sender's slot.
    InWindow(usize),
    /// In the sender's message buffer.
    InMessage,
}

/// An all-to-all through shared-memory windows (see the module doc), opened by
/// [`Communicator::shared_window`]. Every rank calls [`SharedWindow::alltoallv`] together, as the
/// communicator's collectives; the parts of the last call stay readable ([`SharedWindow::part`])
/// until the next.
pub struct SharedWindow<'c> {
    comm: &'c Communicator,
    /// This rank's window, `2 × world × slot` bytes (`windows` holds its address).
    _memory: MemoryHandle<'static>,
    /// Each rank's window (this rank's own too), or `None` where it cannot be mapped.
    windows: Vec<Option<Mapped>>,
    calls: u64,
    landed: Vec<Landed>,
    /// Each sender's part when it came as a message, reused from call to call.
    messages: Vec<Vec<u8>>,
}

impl std::fmt::Debug for SharedWindow<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mapped = self.windows.iter().filter(|w| w.is_some()).count();
        f.debug_struct("SharedWindow").field("rank", &self.comm.rank()).field("mapped", &mapped).finish()
    }
}

impl Communicator {
    /// Opens this rank's window, with room for a part of up to `slot` bytes from each rank
    /// (twice: `2 × world size × slot` bytes of shared memory), and maps every other rank's.
    /// Collective: every rank calls it, in the same order as the other collectives; the slots
    /// may differ between ranks. A peer whose window cannot be mapped (on another host) is sent
    /// its parts as messages.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway frees this rank's window memory and leaves the
    /// other ranks inside the collective that opens the window: the communicator is out of step
    /// with them (see [`Communicator::alltoallv`]); drop it.
    pub async fn shared_window(&self, slot: usize) -> Result<SharedWindow<'_>> {
        const OPEN: &str = "Communicator::shared_window";
        let (me, size) = (self.rank(), self.size());
        let bytes = slot.checked_mul(2 * size).filter(|&b| b <= isize::MAX as usize);
        let bytes = bytes.ok_or_else(|| invalid(OPEN, format!("a slot of {slot} bytes for {size} ranks")))?;
        let context = self.endpoint(me)?.worker().core().context().clone();
        let mine = MemoryHandle::allocate(&context, bytes.max(1))?;
        // Where the system allows huge pages for shared memory (else see `Mapped::new`).
        huge_pages::advise_allocated(&mine);
        // On huge pages before any peer maps it, so that theirs are too (which touches it).
        let own = Mapped::new(mine.address() as *mut u8, mine.len(), slot, None);
        if own.huge.is_none() {
            // First touches now, not in the first call.
            // SAFETY: UCX allocated `mine.len()` bytes for this handle, and no peer can write
            // them before the key is sent below.
            unsafe { std::ptr::write_bytes(mine.address() as *mut u8, 0, mine.len()) };
        }
        let mut own = Some(own);
        let key = mine.pack_rkey()?;
        // Keys differ in length: first the longest, then every entry padded to it.
        let mut lens = vec![0u8; 8 * size];
        self.allgather(&(key.len() as u64).to_le_bytes(), &mut lens).await?;
        let longest = lens.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().unwrap_or_default())).max();
        let room = longest.and_then(|n| usize::try_from(n).ok()).and_then(|n| n.checked_add(ENTRY_HEAD));
        let room = room.filter(|&r| r <= 1 << 20).ok_or_else(|| Error::Protocol {
            op: OPEN,
            detail: format!("a rank announced a key of {longest:?} bytes"),
        })?;
        let mut entry = Vec::with_capacity(room);
        Entry { address: mine.address(), slot: slot as u64, key: &key }.encode_into(room, &mut entry);
        let mut all = vec![0u8; room * size];
        self.allgather(&entry, &mut all).await?;
        let mut windows = Vec::with_capacity(size);
        // A peer's bad entry fails this rank's call, after the barrier below, so that no rank
        // is left waiting in it.
        let mut failure = None;
        for (r, bytes) in all.chunks_exact(room).enumerate() {
            if r == me {
                windows.push(own.take());
                continue;
            }
            let bad = |what: String| Error::Protocol { op: OPEN, detail: format!("rank {r} announced {what}") };
            let mapped = Entry::decode(bytes).map_err(|e| bad(format!("a bad window entry: {e}"))).and_then(|e| {
                let key = self.endpoint(r)?.unpack_rkey(e.key)?;
                let slot = usize::try_from(e.slot).ok();
                let (Some(slot), Some(len)) = (slot, slot.and_then(|s| s.checked_mul(2 * size))) else {
                    return Err(bad(format!("a slot of {} bytes", e.slot)));
                };
                match key.local_ptr(e.address, len) {
                    Ok(base) => Ok(Some(Mapped::new(base, len, slot, Some(key)))),
                    // Not shared with this process (another host): messages instead.
                    Err(e) if e.status() == Status::Unreachable => Ok(None),
                    Err(e) if e.status() == Status::InvalidParam => {
                        Err(bad(format!("a window of {len} bytes that its key does not map ({e})")))
                    }
                    Err(e) => Err(e.into()),
                }
            });
            match mapped {
                Ok(w) => windows.push(w),
                Err(e) => {
                    windows.push(None);
                    failure.get_or_insert(e);
                }
            }
        }
        // No rank returns (and may drop its window, whose memory goes once no process maps
        // it) before every rank has mapped every other's.
        self.barrier().await?;
        if let Some(e) = failure {
            return Err(e);
        }
        Ok(SharedWindow {
            comm: self,
            _memory: mine,
            windows,
            calls: 0,
            landed: vec![Landed::default(); size],
            messages: vec![Vec::new(); size],
        })
    }
}

impl SharedWindow<'_> {
    /// One all-to-all: `parts[r]` goes to rank `r`; afterwards [`SharedWindow::part`]`(r)` is what
    /// rank `r` sent this rank. Each part of at most the receiver's slot is copied into its
    /// window, larger ones travel as messages. Every peer's transfer settles before an error
    /// is returned, as in [`Communicator::alltoallv`].
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe. Dropping the future midway drops the operations it posted, each as a
    /// dropped [`Endpoint::send`](crate::Endpoint::send) or
    /// [`Endpoint::recv`](crate::Endpoint::recv) does (this may block for up to 50 ms, or until a
    /// matched message has landed, and may force-close an endpoint to a rank). This rank has then
    /// left a collective the other ranks go on with, so the communicator is out of step with them:
    /// do not use it for further collectives; drop it.
    pub async fn alltoallv(&mut self, parts: &[&[u8]]) -> Result<()> {
        let (comm, me, size) = (self.comm, self.comm.rank(), self.comm.size());
        if parts.len() != size {
            return Err(invalid(OP, format!("{} parts for {size} ranks", parts.len())));
        }
        let half = (self.calls % 2) as usize * size;
        self.calls += 1;
        self.landed.fill(Landed::Nowhere);
        let seq = comm.next_seq();
        // Which parts go into their receiver's window, and into it they go, peers from the
        // next rank on (so that the ranks do not all write into one window at once), this
        // rank's own last.
        let in_window: Vec<bool> =
            (0..size).map(|r| self.windows[r].as_ref().is_some_and(|w| parts[r].len() <= w.slot)).collect();
        for r in (1..=size).map(|k| (me + k) % size) {
            if let (true, Some(w)) = (in_window[r], &self.windows[r]) {
                // SAFETY: `w.base` maps rank r's window of 2 × size × w.slot bytes, kept mapped
                // by its key (or this rank's own memory); slot `me` of this call's half is this
                // rank's alone to write during this call (the module's rule); the part fits.
                unsafe {
                    let at = w.base.0.add((half + me) * w.slot);
                    std::ptr::copy_nonoverlapping(parts[r].as_ptr(), at, parts[r].len());
                }
            }
        }
        // The copies are visible before any note that tells of them.
        fence(Ordering::Release);
        let notes: Vec<[u8; NOTE_LEN]> =
            (0..size).map(|r| Note { len: parts[r].len() as u64, in_window: in_window[r] }.encode()).collect();
        let own_slot = self.windows[me].as_ref().map_or(0, |w| w.slot);
        let transfers = self.messages.iter_mut().enumerate().filter(|(r, _)| *r != me).map(|(r, buf)| {
            let (note, part, to_window) = (&notes[r], parts[r], in_window[r]);
            async move {
                let ep = comm.endpoint(r)?;
                let send = async {
                    ep.send_tag_fast(&note[..], tag::own(seq, me, 0, OP)?).await?;
                    if to_window {
                        return Ok(());
                    }
                    ep.send_tag(part, tag::own(seq, me, 1, OP)?).await
                };
                let recv = async {
                    let mut heard = [0u8; NOTE_LEN];
                    let got = ep.recv_tag(&mut heard[..], tag::own(seq, r, 0, OP)?, FULL_MASK).await?;
                    let bad = |detail: String| Error::Protocol { op: OP, detail: format!("rank {r} {detail}") };
                    let note = Note::decode(&heard[..got]).map_err(|e| bad(format!("sent a bad note: {e}")))?;
                    let len = usize::try_from(note.len).ok();
                    if note.in_window {
                        return match len.filter(|&n| n <= own_slot) {
                            Some(n) => Ok(Landed::InWindow(n)),
                            None => Err(bad(format!("wrote {} bytes into a slot of {own_slot}", note.len))),
                        };
                    }
                    let t = tag::own(seq, r, 1, OP)?;
                    let Some(n) = len.filter(|&n| huge_pages::reserve_exact(buf, n).is_ok()) else {
                        // Received and dropped, so that the sender is not left waiting.
                        super::path::drop_message(ep, t).await?;
                        return Err(bad(format!("sent a part of {} bytes, which cannot be allocated", note.len)));
                    };
                    // Only growth is zeroed: the receive overwrites every byte.
                    buf.truncate(n);
                    buf.resize(n, 0);
                    let got = ep.recv_tag(&mut buf[..], t, FULL_MASK).await?;
                    if got != n {
                        return Err(bad(format!("noted {n} bytes and sent {got}")));
                    }
                    Ok(Landed::InMessage)
                };
                let ((), landed) = tokio::try_join!(send, recv)?;
                Ok::<_, Error>((r, landed))
            }
        });
        let mut failed = None;
        for outcome in join_posted(transfers).await {
            match outcome {
                Ok((r, landed)) => self.landed[r] = landed,
                Err(e) => {
                    failed.get_or_insert(e);
                }
            }
        }
        // What the notes told of is read after them.
        fence(Ordering::Acquire);
        // This rank's own part, when it is over its own slot: copied last, after every note
        // is out, so that a failure here leaves no peer waiting.
        self.landed[me] = if in_window[me] {
            Landed::InWindow(parts[me].len())
        } else {
            let own = &mut self.messages[me];
            own.clear();
            match huge_pages::reserve_exact(own, parts[me].len()) {
                Ok(()) => {
                    own.extend_from_slice(parts[me]);
                    Landed::InMessage
                }
                Err(_) => {
                    failed.get_or_insert(Error::Protocol {
                        op: OP,
                        detail: format!("this rank's own part of {} bytes cannot be allocated", parts[me].len()),
                    });
                    Landed::Nowhere
                }
            }
        };
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// What rank `from` sent this rank in the last [`SharedWindow::alltoallv`] (empty before the
    /// first, or for a rank beyond the world).
    pub fn part(&self, from: usize) -> &[u8] {
        match (self.landed.get(from), &self.windows[self.comm.rank()]) {
            (Some(Landed::InWindow(n)), Some(w)) => {
                let half = ((self.calls + 1) % 2) as usize * self.landed.len();
                // SAFETY: slot `from` of the last call's half of this rank's own window, inside
                // its 2 × size × slot bytes (the note's length was checked against the slot); no
                // peer writes it until this rank's next call (the module's rule), which needs
                // `&mut self` while this borrow lives.
                unsafe { std::slice::from_raw_parts(w.base.0.add((half + from) * w.slot), *n) }
            }
            (Some(Landed::InMessage), _) => &self.messages[from],
            _ => &[],
        }
    }

    /// The parts of the last call, by sender.
    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        (0..self.landed.len()).map(|r| self.part(r))
    }

    /// How many ranks' windows this rank reaches through shared memory (itself included).
    pub fn mapped(&self) -> usize {
        self.windows.iter().filter(|w| w.is_some()).count()
    }

    /// How many of those this rank reaches through a second attachment of the window on huge
    /// pages ([`crate::core::HugeSharedMapping`]; windows under 2 MiB, or outside System V
    /// shared memory, have none).
    pub fn on_huge_pages(&self) -> usize {
        self.windows.iter().flatten().filter(|w| w.huge.is_some()).count()
    }
}

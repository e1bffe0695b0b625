//! Huge-page staging for same-host single-copy sends: a message whose memory sits on 4 KiB
//! pages is copied into a buffer on 2 MiB pages before its descriptor goes, and the peer
//! reads that buffer instead.
//!
//! Why: the peer's `process_vm_readv` pins the sender's pages one by one, and pinning a 4 KiB
//! page costs several times what copying it does; a 2 MiB page is pinned at once.
//! On this project's test machine (2026-12-03, the 2-core VM, Linux 6.18; a C program that
//! reads its own memory, best of 50) a read of 1 MiB took 92 us from 4 KiB pages and 26 us
//! from huge pages, 16 MiB 2.99 ms against 0.68 ms, while a `memcpy` of 1 MiB takes 20-25 us
//! and of 16 MiB 0.6-0.9 ms: copying first and letting the peer read the copy is 1.9-2.4 times
//! faster. Memory that already sits on huge pages (NumPy's arrays of 4 MiB and more, buffers
//! from [`crate::huge_pages::zeroed`]) is read where it is.
//!
//! The contract:
//! - [`stage`] copies a message into a buffer of the process's pool, or says no: huge pages
//!   are off (`/sys/kernel/mm/transparent_hugepage/enabled` is `never`, or the kernel gave a
//!   fresh buffer 4 KiB pages less than [`REFUSED_PAUSE`] ago), at least two
//!   thirds of the message sit on huge pages already (where the kernel cannot tell, Linux
//!   before 6.7: the message is 4 MiB or more, NumPy's threshold for huge pages), or the
//!   pool's limit would be passed.
//! - The pool holds at most [`limit`] bytes (`UCXA_SINGLE_COPY_STAGING`, default
//!   [`DEFAULT_LIMIT`]), in blocks of whole 2 MiB pages, in use or idle; idle blocks are
//!   kept for the next message (their pages are not faulted again) and freed only to make
//!   room for a larger one. An idle block larger than a message needs is taken only when
//!   the limit has no room for a new one of its size. A message larger than the limit is
//!   read where it is.
//! - A message of [`SLOT_MAX`] bytes or less takes a slot of a 2 MiB block shared with
//!   messages of its size class (a power of two from [`SLOT_MIN`]: sixteen 128 KiB messages
//!   share one block), a larger one whole blocks of its own. A block whose slots are all
//!   free is idle again, for any size.
//! - A [`Staged`] copy goes back to the pool when dropped; the single-copy guard that holds
//!   it is cleared first, so a peer still reading it discards what it read. A slot reused
//!   at once by another message changes nothing for that peer: it reads only its own range,
//!   and checks the guard after.
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::huge_pages::{self, HUGE_PAGE as HUGE};

/// The pool's limit when `UCXA_SINGLE_COPY_STAGING` is not set: room for four 16 MiB
/// messages in flight. `scripts/sweep_staging.py` chose it (2026-12-03, the 2-core VM): a
/// stream of 16 MiB sends from a `Vec`, 4 in flight, ran 1.13-1.33 times as fast as without
/// staging with 64 MiB, and gained nothing with 16 MiB; the figures, and what the limit costs
/// in memory and where there are more processes than cores, are in docs/performance.md.
pub const DEFAULT_LIMIT: usize = 64 << 20;

/// The smallest slot of a shared block: a smaller message takes one of this size.
pub const SLOT_MIN: usize = 64 << 10;

/// The largest message that takes a slot of a shared block rather than blocks of its own.
pub const SLOT_MAX: usize = 1 << 20;

/// The most bytes of staging buffers this process holds: `UCXA_SINGLE_COPY_STAGING` (bytes;
/// `0` turns staging off) or [`DEFAULT_LIMIT`]. An unparsable value is reported once on
/// stderr and ignored.
pub fn limit() -> usize {
    static LIMIT: OnceLock<usize> = OnceLock::new();
    *LIMIT.get_or_init(|| super::bytes_setting("UCXA_SINGLE_COPY_STAGING", DEFAULT_LIMIT))
}

/// How long staging pauses after a fresh block came back on 4 KiB pages (the kernel had no
/// huge page free, or refuses them to this process): a copy onto small pages would only add
/// time. Then it tries again, at the cost of one fresh block's allocation and page faults, so
/// that a moment without free huge pages (memory pressure, compaction behind) does not end
/// staging for the life of the process.
pub const REFUSED_PAUSE: Duration = Duration::from_secs(1);

/// When a fresh block last came back on 4 KiB pages, in milliseconds from [`since`]'s start;
/// 0: never.
static REFUSED_AT_MS: AtomicU64 = AtomicU64::new(0);

/// Fresh blocks that came back on 4 KiB pages, since the process started.
static REFUSALS: AtomicU64 = AtomicU64::new(0);

/// How many fresh staging blocks the kernel gave 4 KiB pages instead of huge ones in this
/// process (each pauses staging for [`REFUSED_PAUSE`]): a diagnostic, and what a test checks
/// before it expects a message to be staged.
pub fn refused_blocks() -> u64 {
    REFUSALS.load(Ordering::Relaxed)
}

/// Milliseconds since this module first asked, plus one (so that 0 stays "never").
fn since() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Whether a fresh block came back on 4 KiB pages less than [`REFUSED_PAUSE`] ago.
fn refused_lately() -> bool {
    let at = REFUSED_AT_MS.load(Ordering::Relaxed);
    at != 0 && since().saturating_sub(at) < REFUSED_PAUSE.as_millis() as u64
}

/// Whether the kernel offers huge pages to memory that asks for them.
fn huge_pages_on() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| matches!(crate::doctor::transparent_huge_pages().0.as_deref(), Some("always" | "madvise")))
        && !refused_lately()
}

/// A buffer of whole 2 MiB pages, aligned to them and advised onto huge pages.
struct Block {
    ptr: *mut u8,
    cap: usize,
}

// SAFETY: a Block owns its allocation alone; nothing else points into it while it is idle,
// and a staged one is only read (by the peer, through the kernel).
unsafe impl Send for Block {}

impl Block {
    /// A fresh block of `cap` bytes (whole 2 MiB pages, at least one), its pages faulted in
    /// (on huge pages where the kernel has them free). Mapped anonymously, not taken from the
    /// allocator: memory the allocator hands out again may already sit on 4 KiB pages (after a
    /// program freed large buffers, glibc serves even 2 MiB-aligned requests from its heap),
    /// and advice does not move pages already there.
    fn new(cap: usize) -> Option<Block> {
        let ptr = huge_pages::map_aligned(cap, libc::PROT_READ | libc::PROT_WRITE, 0)?;
        // Not yet touched: advised before its first fault.
        huge_pages::advise(ptr, cap);
        for page in (0..cap).step_by(HUGE) {
            // SAFETY: inside the mapping; one write faults each 2 MiB page in now (zeroed, as
            // an anonymous page is) rather than during a send's copy.
            unsafe { ptr.add(page).write_volatile(0) };
        }
        Some(Block { ptr, cap })
    }
}

impl Drop for Block {
    fn drop(&mut self) {
        // SAFETY: `ptr..ptr + cap` is the mapping `Block::new` kept; nothing points into it
        // once the block goes.
        unsafe { libc::munmap(self.ptr.cast(), self.cap) };
    }
}

/// A 2 MiB block cut into slots of one size, and which of them are in use (bit `i`: the
/// slot at `i * slot`).
struct Slab {
    block: Block,
    slot: usize,
    used: u32,
}

impl Slab {
    fn slots(&self) -> u32 {
        (HUGE / self.slot) as u32
    }
}

/// The process's pool: idle blocks, blocks cut into slots, and the bytes of all blocks (idle,
/// in slots or staged whole).
struct Pool {
    idle: Vec<Block>,
    slabs: Vec<Slab>,
    held: usize,
}

/// The process's pool, locked (a panic elsewhere while it was held leaves it usable: every
/// change to it is whole before the lock goes).
fn lock_pool() -> std::sync::MutexGuard<'static, Pool> {
    static POOL: Mutex<Pool> = Mutex::new(Pool { idle: Vec::new(), slabs: Vec::new(), held: 0 });
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// Where a staged copy lives.
enum Room {
    /// Blocks of its own.
    Whole(Block),
    /// Slot `index` of the slab whose block starts at `base`.
    Slot { base: *mut u8, at: *mut u8, index: u32 },
}

/// A message's copy on huge pages, returned to the pool when dropped.
pub struct Staged {
    room: Option<Room>,
    len: usize,
}

// SAFETY: a Staged owns its room alone (a whole block, or a slot no other Staged holds until
// this one returns it, under the pool's lock); the pointers are only read through.
unsafe impl Send for Staged {}

impl std::fmt::Debug for Staged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Staged").field("len", &self.len).finish_non_exhaustive()
    }
}

impl Staged {
    /// Where the copy starts.
    pub fn as_ptr(&self) -> *const u8 {
        match &self.room {
            Some(Room::Whole(b)) => b.ptr,
            Some(Room::Slot { at, .. }) => *at,
            None => std::ptr::null(),
        }
    }

    /// The copy's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the copy is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        match self.room.take() {
            Some(Room::Whole(b)) => lock_pool().idle.push(b),
            Some(Room::Slot { base, index, .. }) => {
                let mut p = lock_pool();
                if let Some(i) = p.slabs.iter().position(|s| s.block.ptr == base) {
                    p.slabs[i].used &= !(1 << index);
                    if p.slabs[i].used == 0 {
                        let slab = p.slabs.swap_remove(i);
                        p.idle.push(slab.block);
                    }
                }
            }
            None => {}
        }
    }
}

/// Whether a message of `len` bytes at `addr` is worth staging (see the module doc): more
/// than a third of it sits on 4 KiB pages. With the figures above per MiB, a read in place
/// costs 92 us per small-paged MiB and 26 per huge one, a staged message 22 + 26 per MiB:
/// staging wins once the small-paged share passes 1/3. (A NumPy array of 4 MiB or more is on
/// huge pages but for the ends its allocation does not align to 2 MiB.)
fn worth_staging(addr: *const u8, len: usize) -> bool {
    len <= limit()
        && huge_pages_on()
        && match huge_pages::bytes_on_huge_pages(addr, len) {
            Some(huge) => 3 * (len - huge.min(len)) > len,
            None => len < huge_pages::HUGE_MIN,
        }
}

/// A block of at least `len` bytes from the pool: an idle one of just that size, else a new
/// one if the limit has room without freeing anything, else the smallest idle one larger,
/// else a new one after freeing idle blocks to make room; `None` when the blocks in use fill
/// the limit, or a new block did not get huge pages. (A larger idle block is taken only when
/// nothing else is left: a 2 MiB block cut into slots may stay in use for long.)
fn take(len: usize) -> Option<Block> {
    let cap = len.max(1).next_multiple_of(HUGE);
    if cap > limit() {
        return None;
    }
    let mut p = lock_pool();
    let fits = p.idle.iter().enumerate().filter(|(_, b)| b.cap >= len).min_by_key(|(_, b)| b.cap).map(|(i, _)| i);
    if let Some(i) = fits.filter(|&i| p.idle[i].cap == cap || p.held + cap > limit()) {
        return Some(p.idle.swap_remove(i));
    }
    while p.held + cap > limit() {
        let b = p.idle.pop()?;
        p.held -= b.cap;
    }
    p.held += cap;
    drop(p);
    let block = Block::new(cap).filter(|b| {
        let on_huge = huge_pages::bytes_on_huge_pages(b.ptr, b.cap).is_none_or(|huge| huge == b.cap);
        if !on_huge {
            // The kernel had no huge page free, or refuses them to this process: a copy would
            // only add time, for now (REFUSED_PAUSE).
            REFUSED_AT_MS.store(since(), Ordering::Relaxed);
            REFUSALS.fetch_add(1, Ordering::Relaxed);
        }
        on_huge
    });
    if block.is_none() {
        lock_pool().held -= cap;
    }
    block
}

/// A free slot of `slot` bytes: one of a slab of that size, or of a new slab cut from a block
/// of the pool (see [`take`]).
fn take_slot(slot: usize) -> Option<Room> {
    let claim = |s: &mut Slab| {
        let index = (!s.used).trailing_zeros();
        s.used |= 1 << index;
        // SAFETY: `index < s.slots()`, so the slot lies inside the block's first 2 MiB.
        let at = unsafe { s.block.ptr.add(index as usize * s.slot) };
        Room::Slot { base: s.block.ptr, at, index }
    };
    {
        let mut p = lock_pool();
        if let Some(s) = p.slabs.iter_mut().find(|s| s.slot == slot && s.used.count_ones() < s.slots()) {
            return Some(claim(s));
        }
    }
    let mut slab = Slab { block: take(HUGE)?, slot, used: 0 };
    let room = claim(&mut slab);
    lock_pool().slabs.push(slab);
    Some(room)
}

/// A copy of `data` on huge pages for a single-copy send to read, or `None` where the message
/// is read where it is (see the module doc).
pub fn stage(data: &[u8]) -> Option<Staged> {
    if !worth_staging(data.as_ptr(), data.len()) {
        return None;
    }
    let room = if data.len() <= SLOT_MAX {
        take_slot(data.len().max(SLOT_MIN).next_power_of_two())?
    } else {
        Room::Whole(take(data.len())?)
    };
    let staged = Staged { room: Some(room), len: data.len() };
    // SAFETY: the room has at least `data.len()` bytes (a slot of the next power of two, or a
    // block of whole pages) and is this Staged's alone; `data` is a live slice, and the two
    // cannot overlap (the room is the pool's allocation).
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), staged.as_ptr().cast_mut(), data.len()) };
    Some(staged)
}

/// Bytes the pool holds now, staged and idle (for diagnostics and tests).
pub fn held() -> usize {
    lock_pool().held
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `stage`'s copy, or an end to the test where the kernel refused a fresh block huge pages
    /// meanwhile (memory pressure: staging pauses, as it should, and nothing more can be said).
    macro_rules! staged {
        ($data:expr, $what:expr) => {
            match stage($data) {
                Some(s) => s,
                None if refused_lately() => return,
                None => panic!("{} not staged", $what),
            }
        };
    }

    /// One test, as the pool is the process's: tests side by side would take each other's
    /// blocks.
    #[test]
    fn staging_copies_small_pages_shares_blocks_by_size_and_keeps_large_blocks_whole() {
        let on_huge = |b: &[u8]| huge_pages::bytes_on_huge_pages(b.as_ptr(), b.len());
        if !huge_pages_on() || on_huge(&[0u8; 8]).is_none() {
            return; // no huge pages, or a kernel that cannot say where memory sits
        }
        let small = vec![7u8; 1 << 20];
        assert_eq!(on_huge(&small), Some(0));
        let staged = staged!(&small, "a 1 MiB Vec on 4 KiB pages is staged");
        assert_eq!(staged.len(), small.len());
        // SAFETY: the staged copy holds `len` bytes while `staged` lives.
        let copy = unsafe { std::slice::from_raw_parts(staged.as_ptr(), staged.len()) };
        assert_eq!(copy, &small[..]);
        assert_eq!(on_huge(copy), Some(copy.len()));
        let first = staged.as_ptr();
        drop(staged);
        let again = staged!(&small, "staged again");
        assert_eq!(again.as_ptr(), first, "the idle block is taken again");
        drop(again);

        // A Vec of 8 MiB advised onto huge pages, as NumPy's arrays: 4 KiB pages at its ends.
        let huge = huge_pages::zeroed(8 << 20);
        let on = on_huge(&huge).unwrap();
        assert!(on >= 6 << 20 && on < huge.len(), "{on} of {} bytes on huge pages", huge.len());
        assert!(stage(&huge).is_none(), "memory mostly on huge pages is read where it is");
        let over = vec![1u8; limit() + 1];
        assert!(stage(&over).is_none(), "a message over the limit is read where it is");
        assert!(held() <= limit());

        // Messages up to 1 MiB share blocks by size class: sixteen of 100 KiB (128 KiB
        // slots) fill one 2 MiB block, each copy whole and apart from the others.
        let messages: Vec<Vec<u8>> = (0..17u8).map(|i| vec![i; 100 << 10]).collect();
        let mut staged = Vec::new();
        for m in &messages {
            staged.push(staged!(m, "a 100 KiB message"));
        }
        let block_of = |s: &Staged| s.as_ptr() as usize & !(HUGE - 1);
        assert!(staged[..16].iter().all(|s| block_of(s) == block_of(&staged[0])), "one block");
        assert_ne!(block_of(&staged[16]), block_of(&staged[0]), "the seventeenth takes another");
        let mut starts: Vec<usize> = staged[..16].iter().map(|s| s.as_ptr() as usize).collect();
        starts.sort_unstable();
        assert!(starts.windows(2).all(|w| w[1] - w[0] == 128 << 10), "slots 128 KiB apart: {starts:x?}");
        for (m, s) in messages.iter().zip(&staged) {
            // SAFETY: the staged copy holds `len` bytes while `s` lives.
            assert_eq!(unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) }, &m[..]);
        }
        drop(staged);
        // The freed block serves any size again: two 1 MiB messages share it.
        let a = staged!(&small, "staged");
        let b = staged!(&small, "staged");
        assert_eq!(block_of(&a), block_of(&b));
        assert!(held() <= limit());
        drop((a, b));
        let whole = staged!(&vec![3u8; HUGE], "a 2 MiB message staged whole");
        assert_eq!(whole.as_ptr() as usize % HUGE, 0);
        drop(whole);

        // An idle 6 MiB block is not cut into slots while the limit has room for a new
        // 2 MiB one: it stays whole for the next large message. First every idle 2 MiB block
        // is taken (until one is new: the pool grows).
        let two = vec![6u8; HUGE];
        let mut holding = Vec::new();
        loop {
            let before = held();
            holding.push(staged!(&two, "staged"));
            if held() > before {
                break;
            }
        }
        let big = staged!(&vec![4u8; 5 << 20], "a 5 MiB message staged whole");
        let big_at = big.as_ptr();
        drop(big);
        let slotted = staged!(&messages[0], "staged");
        assert_ne!(block_of(&slotted), big_at as usize, "a slot cut from the idle 6 MiB block");
        let again = staged!(&vec![5u8; 5 << 20], "staged");
        assert_eq!(again.as_ptr(), big_at, "the idle 6 MiB block serves the next 5 MiB message");
        drop((slotted, again, holding));
        assert!(held() <= limit());
    }
}

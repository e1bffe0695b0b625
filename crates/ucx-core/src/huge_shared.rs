//! Shared memory that this process already maps (UCX's System V segment behind a remote key or
//! an allocation) attached a second time, at a 2 MiB boundary, with its memory on huge pages.
//!
//! Why: plain copies into a peer's shared memory miss the TLB once per 4 KiB page, which costs
//! parts of 4 MiB and more about a fifth against copies between huge pages (CMA's, or a
//! window's where the system allows huge shared memory; docs/performance.md). The kernel puts
//! shared memory on huge pages when asked to collapse it (`MADV_COLLAPSE`, Linux 6.1 on,
//! whatever `/sys/kernel/mm/transparent_hugepage/shmem_enabled` says unless it is `deny`), but
//! only through a mapping whose address is 2 MiB-aligned, and maps the huge pages only into
//! such mappings. UCX attaches segments wherever the kernel puts them, often not aligned; this
//! attaches the same segment again where it is, and collapses it there.
//!
//! Best effort throughout: memory that is not a System V segment (UCX's POSIX shared memory,
//! say), a segment under 2 MiB, an older kernel or no free huge page gives `None` or leaves
//! the memory on 4 KiB pages; the caller then uses UCX's mapping as it is.

use crate::huge_pages::{self, HUGE_PAGE as HUGE};
use crate::proc_maps;

/// A System V segment attached at a 2 MiB-aligned address (`shmat`), detached on drop. The
/// segment stays alive while attached, whoever else lets go of it.
pub struct HugeSharedMapping {
    /// Where the segment starts in this attachment.
    base: *mut u8,
    /// Where the range asked for starts in it.
    ptr: *mut u8,
}

// SAFETY: the type only holds the attachment's addresses; detaching may happen on any thread.
unsafe impl Send for HugeSharedMapping {}
// SAFETY: as above; nothing is read or written through `&self`.
unsafe impl Sync for HugeSharedMapping {}

impl HugeSharedMapping {
    /// Attaches the System V segment that holds the `len` bytes at `ptr` (which this process
    /// maps already) again at a 2 MiB-aligned address, and collapses it onto huge pages; the
    /// range then also appears at [`HugeSharedMapping::ptr`]. Every whole 2 MiB page of it is
    /// populated on the way (a collapse needs the pages present), so fresh memory need not be
    /// touched first. `None` where that memory is not one whole System V segment mapped here
    /// of at least 2 MiB, or the attach fails.
    pub fn of(ptr: *const u8, len: usize) -> Option<HugeSharedMapping> {
        let segment = sysv_segment_holding(ptr as usize, len)?;
        let size = segment.hi - segment.lo;
        // `shmat` maps the whole segment: the reservation below must hold all of it, so the
        // mapping seen must be all of it too.
        if size < HUGE || segment_size(segment.shmid)? != size {
            return None;
        }
        let base = attach_aligned(segment.shmid, size)?;
        let offset = ptr as usize - segment.lo;
        huge_pages::collapse(base, size);
        Some(HugeSharedMapping { base, ptr: base.wrapping_add(offset) })
    }

    /// Where the range given to [`HugeSharedMapping::of`] starts in this attachment.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// How many bytes of this attachment the kernel maps with huge pages now
    /// (`ShmemPmdMapped` in /proc/self/smaps; pages not touched yet here are not counted);
    /// `None` where /proc cannot tell. For diagnostics and tests.
    pub fn huge_bytes(&self) -> Option<usize> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let start = format!("{:x}-", self.base as usize);
        let block = smaps.lines().skip_while(|l| !l.starts_with(&start)).skip(1);
        // A mapping's block ends with its VmFlags line.
        let line = block.take_while(|l| !l.starts_with("VmFlags:")).find(|l| l.starts_with("ShmemPmdMapped:"))?;
        let kb: usize = line.split_whitespace().nth(1)?.parse().ok()?;
        kb.checked_mul(1024)
    }
}

impl Drop for HugeSharedMapping {
    fn drop(&mut self) {
        // SAFETY: `base` is this attachment's address, returned by `shmat` and not detached
        // before; the memory is no longer reached through it (its owner is being dropped).
        unsafe { libc::shmdt(self.base.cast()) };
    }
}

/// A System V segment's mapping in this process (`/proc/self/maps`).
struct Segment {
    lo: usize,
    hi: usize,
    shmid: libc::c_int,
}

/// The System V segment mapped here, whole (from offset 0), that holds `[start, start + len)`.
fn sysv_segment_holding(start: usize, len: usize) -> Option<Segment> {
    proc_maps::shared_mapping_holding(start, len, |m| {
        // A System V segment's path is "/SYSV<key>" (with " (deleted)" once removed, as UCX
        // removes them at once) and its inode is its id.
        let sysv = m.from_start && m.path.starts_with("/SYSV");
        sysv.then(|| Some(Segment { lo: m.lo, hi: m.hi, shmid: m.inode.parse().ok()? })).flatten()
    })
}

/// Segment `shmid`'s size in whole pages (`IPC_STAT`), as `shmat` maps it.
fn segment_size(shmid: libc::c_int) -> Option<usize> {
    let mut stat = std::mem::MaybeUninit::<libc::shmid_ds>::zeroed();
    // SAFETY: IPC_STAT writes one `shmid_ds` into the buffer given, which has room for it.
    if unsafe { libc::shmctl(shmid, libc::IPC_STAT, stat.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: the call succeeded, so it filled the struct (zeroed before, in any case).
    let bytes = unsafe { stat.assume_init() }.shm_segsz;
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).ok()?;
    bytes.checked_next_multiple_of(page.max(1))
}

/// Attaches segment `shmid` (of `size` bytes) at a 2 MiB-aligned address, read-write.
fn attach_aligned(shmid: libc::c_int, size: usize) -> Option<*mut u8> {
    // An inaccessible reservation at the boundary, which the segment then replaces.
    let reserved = huge_pages::map_aligned(size, libc::PROT_NONE, libc::MAP_NORESERVE)?;
    let aligned = reserved as usize;
    // SAFETY: the segment replaces the reservation above (SHM_REMAP), which nothing else
    // uses; the segment is alive (this process maps it already), so the id names it.
    let at = unsafe { libc::shmat(shmid, aligned as *const libc::c_void, libc::SHM_REMAP) };
    let attached = at as usize == aligned;
    if !attached {
        // SAFETY: an attachment elsewhere (not asked for) and the reservation are this
        // function's and unused.
        unsafe {
            if at != usize::MAX as *mut libc::c_void {
                libc::shmdt(at);
            }
            libc::munmap(reserved.cast(), size);
        }
    }
    attached.then_some(aligned as *mut u8)
}

//! Large host buffers backed by transparent huge pages where the kernel offers them on request
//! (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`, the usual default), as NumPy
//! does for its arrays of 4 MiB and more.
//!
//! Why: shared-memory transfers between processes (CMA's `process_vm_readv`, which UCX uses
//! for rendezvous between local endpoints without error handling) pin the peer's pages in
//! batches. With 2 MiB pages that costs far less than with 4 KiB ones: two ranks exchanging
//! 16 MiB parts went from 6.5–7.7 to 8.7–9.3 GB/s on this project's test machine.
//!
//! The advice must come before the pages are first touched, so these functions give it to a
//! fresh allocation and only then write (zero) it. Where the kernel refuses (huge pages off),
//! the buffer is an ordinary one.
use std::collections::TryReserveError;
use std::sync::OnceLock;

/// Buffers of at least this many bytes are advised (NumPy's threshold).
pub const HUGE_MIN: usize = 4 << 20;

/// The size of a transparent huge page (x86-64's and, with 4 KiB base pages, aarch64's).
pub const HUGE_PAGE: usize = 2 << 20;

/// A zeroed buffer of `len` bytes, advised as above when `len >= HUGE_MIN`.
///
/// The allocator may hand back memory it used before, already on 4 KiB pages, where advice
/// comes too late (glibc does so for blocks under 32 MiB once larger ones were freed): such a
/// buffer is then moved onto huge pages (`MADV_COLLAPSE`; best effort, Linux 6.1 and later),
/// which costs about a copy of it. Where the kernel cannot say which pages are huge
/// ([`bytes_on_huge_pages`]) the buffer is left as the advice made it.
pub fn zeroed(len: usize) -> Vec<u8> {
    let mut v = Vec::new();
    reserve_exact(&mut v, len).unwrap_or_else(|_| std::alloc::handle_alloc_error(layout(len)));
    v.resize(len, 0);
    if len >= HUGE_MIN && bytes_on_huge_pages(v.as_ptr(), len).is_some_and(|on| on < len / 2) {
        collapse(v.as_ptr(), len);
    }
    v
}

/// Makes room in `buf` for `len` bytes in all (as `Vec::try_reserve_exact`); a new allocation
/// of at least `HUGE_MIN` bytes is advised before anything touches its new part.
pub fn reserve_exact(buf: &mut Vec<u8>, len: usize) -> Result<(), TryReserveError> {
    let old = buf.capacity();
    buf.try_reserve_exact(len.saturating_sub(buf.len()))?;
    if buf.capacity() != old && buf.capacity() >= HUGE_MIN {
        let filled = buf.len();
        let spare = buf.spare_capacity_mut();
        advise(spare.as_mut_ptr().cast(), spare.len());
        debug_assert_eq!(buf.len(), filled);
    }
    Ok(())
}

/// Advises huge pages for the memory `handle` registers (a window of shared memory UCX
/// allocated, say), before it is first touched. Shared memory gets them only where the
/// administrator allows it (`/sys/kernel/mm/transparent_hugepage/shmem_enabled` = `advise` or
/// `always`; the usual default is `never`, and then this changes nothing; what does is
/// [`crate::HugeSharedMapping`]).
pub fn advise_allocated(handle: &crate::MemoryHandle<'_>) {
    advise(handle.address() as *mut u8, handle.len());
}

fn layout(len: usize) -> std::alloc::Layout {
    std::alloc::Layout::array::<u8>(len).unwrap_or(std::alloc::Layout::new::<u8>())
}

/// A private anonymous mapping of `size` bytes starting at a 2 MiB boundary, with protection
/// `prot` and `extra_flags` added to `MAP_PRIVATE | MAP_ANONYMOUS`; `None` where the kernel
/// refused. Made as `size` + 2 MiB and trimmed at both ends. The caller owns it and unmaps it
/// (`munmap(ptr, size)`).
pub(crate) fn map_aligned(size: usize, prot: libc::c_int, extra_flags: libc::c_int) -> Option<*mut u8> {
    let span = size.checked_add(HUGE_PAGE)?;
    // SAFETY: a fresh private mapping placed by the kernel: it overlaps nothing this process
    // uses.
    let raw = unsafe {
        libc::mmap(std::ptr::null_mut(), span, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | extra_flags, -1, 0)
    };
    if raw == libc::MAP_FAILED {
        return None;
    }
    let lo = raw as usize;
    let aligned = lo.next_multiple_of(HUGE_PAGE);
    // SAFETY: the head (before the boundary) and the tail (after `size` bytes from it) lie
    // inside the mapping just made, which nothing else uses.
    unsafe {
        if aligned > lo {
            libc::munmap(raw, aligned - lo);
        }
        if lo + span > aligned + size {
            libc::munmap((aligned + size) as *mut libc::c_void, lo + span - (aligned + size));
        }
    }
    Some(aligned as *mut u8)
}

/// Advises `MADV_HUGEPAGE` for the whole pages inside `len` bytes at `start`.
pub(crate) fn advise(start: *mut u8, len: usize) {
    const PAGE: usize = 4096;
    let (begin, end) = ((start as usize).next_multiple_of(PAGE), (start as usize).saturating_add(len) & !(PAGE - 1));
    if end <= begin {
        return;
    }
    // SAFETY: the range lies inside an allocation the caller owns (a Vec's spare capacity,
    // rounded inward to whole pages); MADV_HUGEPAGE changes only how the kernel backs it,
    // never its contents or mapping. A refusal (huge pages off) leaves it as it was.
    unsafe {
        libc::madvise(begin as *mut libc::c_void, end - begin, libc::MADV_HUGEPAGE);
    }
}

/// Moves the memory of the whole 2 MiB pages inside `len` bytes at `start` onto huge pages
/// (`MADV_COLLAPSE`, Linux 6.1 and later), which the kernel does for shared memory too unless
/// `/sys/kernel/mm/transparent_hugepage/shmem_enabled` is `deny`.
///
/// Shared memory's huge pages belong to the shared object, so a collapse through one process's
/// mapping serves every process that maps the object at a 2 MiB-aligned address; a mapping
/// that is not so aligned cannot be collapsed. Best effort: an older kernel or no free huge
/// page leaves the memory on 4 KiB pages, as it was.
pub(crate) fn collapse(start: *const u8, len: usize) {
    // Linux's values (uapi mman-common.h); the libc crate names them for glibc targets only.
    const MADV_POPULATE_READ: libc::c_int = 22;
    const MADV_COLLAPSE: libc::c_int = 25;
    let (begin, end) =
        ((start as usize).next_multiple_of(HUGE_PAGE), (start as usize).saturating_add(len) & !(HUGE_PAGE - 1));
    if end <= begin {
        return;
    }
    // SAFETY: populating (the kernel collapses only pages that exist) reads, as a load would,
    // and a collapse moves a mapping's contents onto a huge page without changing them, the
    // mapping's address or its protection: neither can break what any code holds. The kernel
    // refuses ranges that are not mapped, and a refusal leaves memory as it was.
    unsafe {
        libc::madvise(begin as *mut libc::c_void, end - begin, MADV_POPULATE_READ);
        libc::madvise(begin as *mut libc::c_void, end - begin, MADV_COLLAPSE);
    }
}

/// Whether this kernel has transparent huge pages at all (built in; they may still be set to
/// `never`). Without them the advice is refused and buffers are ordinary ones.
pub fn available() -> bool {
    std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists()
}

/// How many of the `len` bytes at `addr` (memory this process has mapped) sit on huge pages
/// now, as the kernel's page tables say (`PAGEMAP_SCAN` on /proc/self/pagemap, Linux 6.7 and
/// later: about 1.6 us for 1 MiB on 4 KiB pages, 14 us for 16 MiB, on this project's test
/// machine). `None` where the kernel cannot tell. Memory split into more than eight runs of
/// huge pages is counted by its first eight.
pub fn bytes_on_huge_pages(addr: *const u8, len: usize) -> Option<usize> {
    use std::os::fd::AsRawFd;
    // Linux's uapi fs.h (6.7): `struct pm_scan_arg`, `struct page_region`, the request and the
    // category; the libc crate does not name them yet.
    #[repr(C)]
    #[derive(Default)]
    struct ScanArg {
        size: u64,
        flags: u64,
        start: u64,
        end: u64,
        walk_end: u64,
        vec: u64,
        vec_len: u64,
        max_pages: u64,
        category_inverted: u64,
        category_mask: u64,
        category_anyof_mask: u64,
        return_mask: u64,
    }
    #[repr(C)]
    #[derive(Clone, Copy, Default)]
    struct Region {
        start: u64,
        end: u64,
        categories: u64,
    }
    const PAGEMAP_SCAN: libc::c_ulong = 0xC060_6610; // _IOWR('f', 16, struct pm_scan_arg)
    const PAGE_IS_HUGE: u64 = 1 << 6;
    const PAGE: usize = 4096;
    static PAGEMAP: OnceLock<Option<std::fs::File>> = OnceLock::new();
    let pagemap = PAGEMAP.get_or_init(|| std::fs::File::open("/proc/self/pagemap").ok()).as_ref()?;
    let (first, last) = (addr as usize, (addr as usize).checked_add(len)?);
    let (begin, end) = (first & !(PAGE - 1), last.next_multiple_of(PAGE));
    if len == 0 {
        return Some(0);
    }
    // Huge ranges come back merged where they touch, so memory on huge pages between 4 KiB
    // ones at its ends (a 2 MiB-aligned middle) is one region; a few more leave room for gaps.
    let mut found = [Region::default(); 8];
    let mut arg = ScanArg {
        size: std::mem::size_of::<ScanArg>() as u64,
        start: begin as u64,
        end: end as u64,
        vec: found.as_mut_ptr() as u64,
        vec_len: found.len() as u64,
        category_mask: PAGE_IS_HUGE,
        return_mask: PAGE_IS_HUGE,
        ..Default::default()
    };
    // SAFETY: PAGEMAP_SCAN reads `arg` (its own size given in `size`) and writes at most
    // `vec_len` regions into `found`, which outlives the call; it only reads page tables.
    let n = unsafe { libc::ioctl(pagemap.as_raw_fd(), PAGEMAP_SCAN, &mut arg as *mut ScanArg) };
    if n < 0 {
        return None;
    }
    let inside = |r: &Region| (r.end.min(last as u64)).saturating_sub(r.start.max(first as u64)) as usize;
    Some(found.iter().take(n as usize).map(inside).sum())
}

/// Whether the memory at `addr` was advised onto huge pages (`hg` in its mapping's `VmFlags`
/// in /proc/self/smaps, shown whether or not the kernel has huge pages on); `None` where
/// /proc cannot tell. For diagnostics and tests.
pub fn is_advised(addr: *const u8) -> Option<bool> {
    let addr = addr as usize;
    let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
    let mut inside = false;
    for line in smaps.lines() {
        let range = line.split_once(' ').map(|(r, _)| r).filter(|r| !r.ends_with(':'));
        if let Some((lo, hi)) = range.and_then(|r| r.split_once('-')) {
            let bounds = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16));
            inside = matches!(bounds, (Ok(lo), Ok(hi)) if (lo..hi).contains(&addr));
        } else if inside && line.starts_with("VmFlags:") {
            return Some(line.split_whitespace().any(|f| f == "hg"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_buffers_are_advised_and_small_ones_are_not() {
        let big = zeroed(HUGE_MIN + 12345);
        assert!(big.len() == HUGE_MIN + 12345 && big.iter().all(|&b| b == 0));
        let Some(advised) = is_advised(big[HUGE_MIN / 2..].as_ptr()).filter(|_| available()) else {
            return; // no /proc, or no huge pages in this kernel: nothing to look at
        };
        assert!(advised);
        let mut grown = vec![7u8; 10];
        reserve_exact(&mut grown, 3 * HUGE_MIN).unwrap();
        assert_eq!(grown, [7u8; 10], "what was there stays");
        assert_eq!(is_advised(grown.as_ptr().wrapping_add(HUGE_MIN)), Some(true));
        let small = zeroed(1 << 20);
        assert_eq!(is_advised(small[1 << 19..].as_ptr()), Some(false));
    }
}

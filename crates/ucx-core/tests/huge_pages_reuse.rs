//! `huge_pages::zeroed` gives huge pages even where the allocator hands back memory it had
//! used before, already backed by 4 KiB pages (there the advice comes too late). In a test
//! binary of its own: the allocator is told to serve 8 MiB from its heap, as glibc does by
//! itself once larger blocks have been freed (its threshold for fresh mappings grows with
//! them, up to 32 MiB).
use ucx_core::huge_pages;

#[test]
fn a_zeroed_buffer_on_reused_heap_memory_is_on_huge_pages() {
    let (enabled, _) = ucx_core::doctor::transparent_huge_pages();
    if !matches!(enabled.as_deref(), Some("madvise" | "always")) {
        eprintln!("skipped: transparent huge pages are {enabled:?}");
        return;
    }
    // SAFETY: mallopt only changes glibc's thresholds; nothing else in this process allocates
    // concurrently in a way that depends on them.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 64 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, 256 << 20);
    }
    let n = 8 << 20;
    let used = vec![1u8; n]; // touched without advice: 4 KiB pages
    let after = vec![1u8; 4096]; // so that freeing `used` cannot shrink the heap and drop its pages
    let Some(before) = huge_pages::bytes_on_huge_pages(used.as_ptr(), n) else {
        eprintln!("skipped: this kernel cannot say which pages are huge (PAGEMAP_SCAN, Linux 6.7)");
        return;
    };
    let (addr, small) = (used.as_ptr() as usize, before < n / 2);
    drop(used);
    let buf = huge_pages::zeroed(n);
    assert!(buf.iter().all(|&b| b == 0));
    let on = huge_pages::bytes_on_huge_pages(buf.as_ptr(), n).unwrap_or(0);
    eprintln!(
        "reused: {}, the used block had {before} bytes on huge pages, the zeroed buffer {on}",
        buf.as_ptr() as usize == addr
    );
    if buf.as_ptr() as usize != addr || !small {
        eprintln!("skipped: the allocator did not hand back 4 KiB-paged memory");
        return;
    }
    assert!(on >= n - 2 * huge_pages::HUGE_PAGE, "{on} of {n} bytes on huge pages");
    drop(after);
}

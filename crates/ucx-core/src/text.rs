//! Captures what UCX's `*_print_*` functions write to a `FILE*` as a Rust `String`.
use crate::sys;

/// Runs `print` with a memory-backed `FILE*` and returns what it wrote.
pub(crate) fn capture(print: impl FnOnce(*mut sys::FILE)) -> String {
    let mut buf: *mut libc::c_char = std::ptr::null_mut();
    let mut len: libc::size_t = 0;
    // SAFETY: open_memstream stores a malloc'd buffer pointer and size into our two locals,
    // which outlive the stream; it returns NULL on failure, which we check.
    let file = unsafe { libc::open_memstream(&mut buf, &mut len) };
    if file.is_null() {
        return String::new();
    }
    print(file.cast());
    // SAFETY: `file` is the open stream from above; fclose flushes it and updates buf/len.
    unsafe { libc::fclose(file) };
    if buf.is_null() {
        return String::new();
    }
    // SAFETY: after fclose, buf points at `len` initialised bytes allocated with malloc.
    let bytes = unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len) };
    let out = String::from_utf8_lossy(bytes).into_owned();
    // SAFETY: buf was allocated by open_memstream with malloc and is no longer used.
    unsafe { libc::free(buf.cast()) };
    out
}

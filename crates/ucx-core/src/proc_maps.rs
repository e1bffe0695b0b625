//! This process's memory mappings as `/proc/self/maps` lists them: which shared mapping holds a
//! range of addresses, for the checks on memory a peer shares (`RemoteKey::local_ptr`'s bounds,
//! `HugeSharedMapping`'s segment), which UCX does not make; and which files are mapped, for
//! `doctor`'s look for a second UCX.

/// A shared mapping (permissions with `s`) of this process.
pub(crate) struct SharedMapping<'a> {
    /// Its first address.
    pub(crate) lo: usize,
    /// The address past its end.
    pub(crate) hi: usize,
    /// Whether it maps its object from offset 0.
    pub(crate) from_start: bool,
    /// Its object's inode number (a System V segment's id), as /proc prints it.
    pub(crate) inode: &'a str,
    /// Its object's path ("/SYSV<key>" for a System V segment), empty if none.
    pub(crate) path: &'a str,
}

/// The shared mapping that holds all of `[start, start + len)`, passed to `found`; `None`
/// where none does, or /proc cannot tell.
pub(crate) fn shared_mapping_holding<T>(
    start: usize,
    len: usize,
    found: impl FnOnce(SharedMapping<'_>) -> Option<T>,
) -> Option<T> {
    let end = start.checked_add(len)?;
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let mapping = maps.lines().find_map(|line| {
        // range perms offset dev inode path
        let mut fields = line.split_whitespace();
        let (range, perms, offset, _dev, inode) =
            (fields.next()?, fields.next()?, fields.next()?, fields.next()?, fields.next()?);
        let (lo, hi) = range.split_once('-')?;
        let (lo, hi) = (usize::from_str_radix(lo, 16).ok()?, usize::from_str_radix(hi, 16).ok()?);
        let inside = lo <= start && start < hi && end <= hi;
        let from_start = offset.bytes().all(|b| b == b'0');
        let path = fields.next().unwrap_or("");
        (inside && perms.as_bytes().get(3) == Some(&b's')).then_some(SharedMapping { lo, hi, from_start, inode, path })
    })?;
    found(mapping)
}

/// The files this process maps (the path field of `/proc/self/maps`, absolute paths only),
/// each once, in address order; empty where /proc cannot be read.
pub(crate) fn mapped_files() -> Vec<String> {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else { return Vec::new() };
    let mut files: Vec<String> = Vec::new();
    for line in maps.lines() {
        // range perms offset dev inode path: the path is what follows the fifth field.
        let Some(path) = line.splitn(6, char::is_whitespace).nth(5).map(str::trim) else { continue };
        if path.starts_with('/') && !files.iter().any(|f| f == path) {
            files.push(path.to_string());
        }
    }
    files
}

//! UCX's packed worker address (`ucp_worker_get_address`), checked before UCX parses it.
//!
//! UCX takes a worker address without a length and trusts it: an unknown version in the first
//! byte aborts the process (`address.c`, an always-on assertion), a truncated address is read
//! past its end, and a memory-domain index of 64 or more overflows a stack array during wireup.
//! [`validate`] walks the bytes exactly as UCX 1.18–1.22's `ucp_address_unpack` does, with a
//! bound on every read, and accepts only what `ucp_worker_get_address` can produce (v1 and v2
//! formats, no endpoint addresses). Layout, per UCX's `src/ucp/wireup/address.c`:
//!
//! ```text
//! header    v1: 1 byte (version 0 in the low nibble, flags in the high one)
//!           v2: 2 bytes (version 1 | release << 4, then a flags byte)
//! uuid      8 bytes (always in v1; in v2 when the uuid flag is set)
//! client id 8 bytes (flag), worker name: length byte + bytes (debug-info flag)
//! 0xff      no devices, end
//! device*   md byte (0x80: no interfaces; low 7 bits: md index, v2 extends 0x7f)
//!           length byte (0x80 last, 0x40 paths byte follows, 0x20 sys-device byte follows;
//!           low 5 bits: length, v2 extends 0x1f), optional bytes, device address
//!   iface*  name checksum (2), attributes (v1: 16 bytes, v2: 8), length byte (0x80 last,
//!           0x40 endpoint addresses follow; low 6 bits, v2 extends 0x3f), iface address
//! ```
//! v1 ends with a pseudo-device (`0x80 | release`, `0x80`) that carries the release; v2's last
//! device has the last flag. UCX's packer writes exactly that many bytes, so trailing bytes are
//! refused too.
use std::fmt;

/// Why bytes are not a worker address UCX could safely parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AddressError {
    /// No bytes at all.
    Empty,
    /// The address ends inside the field named.
    Truncated {
        /// The field being read.
        field: &'static str,
        /// Its offset in the address.
        at: usize,
    },
    /// The first byte's low nibble is not a known format version (0 = v1, 1 = v2).
    UnknownVersion(u8),
    /// A field holds a value `ucp_worker_get_address` never writes.
    Invalid {
        /// The field.
        field: &'static str,
        /// Its offset in the address.
        at: usize,
    },
    /// More devices or interfaces than UCX allows.
    TooMany(&'static str),
    /// A transport's device or interface address is shorter than this UCX's own for that
    /// transport (its code would read past it, or dereference nothing for length 0).
    ShortForTransport {
        /// The transport's name checksum, as in the address.
        checksum: u16,
        /// `"device address"` or `"interface address"`.
        field: &'static str,
    },
    /// Bytes follow the end of the address.
    Trailing {
        /// Where the address ended.
        end: usize,
        /// How many bytes were given.
        len: usize,
    },
}

impl fmt::Display for AddressError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Empty => write!(f, "a UCX worker address cannot be empty"),
            Self::Truncated { field, at } => write!(f, "the worker address ends inside its {field} (at byte {at})"),
            Self::UnknownVersion(v) => write!(f, "unknown worker address format version {v} (UCX writes 0 or 1)"),
            Self::Invalid { field, at } => write!(f, "the worker address has an invalid {field} at byte {at}"),
            Self::TooMany(what) => write!(f, "the worker address has too many {what}"),
            Self::ShortForTransport { checksum, field } => {
                write!(f, "the worker address has a {field} too short for its transport (checksum {checksum:#06x})")
            }
            Self::Trailing { end, len } => {
                write!(f, "the worker address ends at byte {end} but {len} bytes were given")
            }
        }
    }
}

impl std::error::Error for AddressError {}

// Limits and flags from UCX's address.c / ucp_types.h.
const MAX_MDS: usize = 64;
const MAX_DEVICES: usize = 64;
const MAX_ENTRIES: usize = 128;
const HEADER_FLAGS: u8 = 0x0f; // debug info 1, uuid 2, client id 4, AM only 8
const FLAG_DEBUG_INFO: u8 = 0x01;
const FLAG_UUID: u8 = 0x02;
const FLAG_CLIENT_ID: u8 = 0x04;
const EMPTY_LIST: u8 = 0xff;
const FLAG_LAST: u8 = 0x80;
const MD_EMPTY: u8 = 0x80;
const DEV_NUM_PATHS: u8 = 0x40;
const DEV_SYS_DEVICE: u8 = 0x20;
const IFACE_HAS_EP: u8 = 0x40;

/// A bounded reader over the address.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn u8(&mut self, field: &'static str) -> Result<u8, AddressError> {
        let v = *self.bytes.get(self.at).ok_or(AddressError::Truncated { field, at: self.at })?;
        self.at += 1;
        Ok(v)
    }

    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], AddressError> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or(AddressError::Truncated { field, at: self.at })?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    /// A value in the low bits of `b` under `mask`; in v2, all-ones means the next byte holds it.
    fn extended(&mut self, b: u8, mask: u8, v2: bool, field: &'static str) -> Result<u8, AddressError> {
        match b & mask {
            v if v2 && v == mask => self.u8(field),
            v => Ok(v),
        }
    }
}

/// One transport entry of an address: which transport, and the lengths of its addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Entry {
    /// The transport's name checksum (UCX's `tl_name_csum`).
    pub checksum: u16,
    /// Length of the device address the entry belongs to.
    pub device_len: usize,
    /// Length of the interface address.
    pub iface_len: usize,
}

/// Checks that `bytes` is a whole worker address as UCX packs it; see the module doc.
pub fn validate(bytes: &[u8]) -> Result<(), AddressError> {
    entries(bytes).map(drop)
}

/// Checks that a remote address (already [`validate`]d) suits the local UCX, whose own address
/// is `local`: every transport both know has device and interface addresses at least as long
/// as the local ones (a transport's code reads its fixed-size structures from them unchecked).
pub fn check_against(remote: &[u8], local: &[u8]) -> Result<(), AddressError> {
    let local = entries(local)?;
    for r in entries(remote)? {
        let mut known = local.iter().filter(|l| l.checksum == r.checksum).peekable();
        if known.peek().is_none() {
            continue; // a transport UCX will not use
        }
        let (dev, iface) = known.fold((usize::MAX, usize::MAX), |(d, i), l| (d.min(l.device_len), i.min(l.iface_len)));
        if r.device_len < dev {
            return Err(AddressError::ShortForTransport { checksum: r.checksum, field: "device address" });
        }
        if r.iface_len < iface {
            return Err(AddressError::ShortForTransport { checksum: r.checksum, field: "interface address" });
        }
    }
    Ok(())
}

/// Walks the address (see the module doc) and lists its transport entries.
pub fn entries(bytes: &[u8]) -> Result<Vec<Entry>, AddressError> {
    let mut out = Vec::new();
    if bytes.is_empty() {
        return Err(AddressError::Empty);
    }
    let mut r = Reader { bytes, at: 0 };
    let first = r.u8("header")?;
    let (v2, flags) = match first & 0x0f {
        0 => (false, first >> 4),
        1 => (true, r.u8("header")?),
        v => return Err(AddressError::UnknownVersion(v)),
    };
    if flags & !HEADER_FLAGS != 0 {
        return Err(AddressError::Invalid { field: "header flags", at: r.at - 1 });
    }
    if !v2 || flags & FLAG_UUID != 0 {
        r.take(8, "worker uuid")?;
    }
    if flags & FLAG_CLIENT_ID != 0 {
        r.take(8, "client id")?;
    }
    if flags & FLAG_DEBUG_INFO != 0 {
        let n = r.u8("worker name length")?;
        r.take(usize::from(n), "worker name")?;
    }
    if r.u8("device list")? != EMPTY_LIST {
        r.at -= 1;
        devices(&mut r, v2, &mut out)?;
    }
    if r.at != bytes.len() {
        return Err(AddressError::Trailing { end: r.at, len: bytes.len() });
    }
    Ok(out)
}

/// The device records, up to and including the last one.
fn devices(r: &mut Reader<'_>, v2: bool, out: &mut Vec<Entry>) -> Result<(), AddressError> {
    let mut devices = 0usize;
    loop {
        let md_at = r.at;
        let md_byte = r.u8("memory domain")?;
        let empty = md_byte & MD_EMPTY != 0;
        let md = r.extended(md_byte, 0x7f, v2, "memory domain")?;
        let len_byte = r.u8("device length")?;
        let last = len_byte & FLAG_LAST != 0;
        let len = r.extended(len_byte, 0x1f, v2, "device length")?;
        if len_byte & DEV_NUM_PATHS != 0 && r.u8("path count")? == 0 {
            return Err(AddressError::Invalid { field: "path count", at: r.at - 1 });
        }
        if len_byte & DEV_SYS_DEVICE != 0 {
            r.u8("system device")?;
        }
        r.take(usize::from(len), "device address")?;
        if empty {
            // Only v1's closing pseudo-device has no interfaces.
            if v2 || !last || len != 0 || len_byte & (DEV_NUM_PATHS | DEV_SYS_DEVICE) != 0 {
                return Err(AddressError::Invalid { field: "empty device", at: md_at });
            }
            return Ok(());
        }
        if usize::from(md) >= MAX_MDS {
            return Err(AddressError::Invalid { field: "memory domain index", at: md_at });
        }
        devices += 1;
        if devices > MAX_DEVICES {
            return Err(AddressError::TooMany("devices"));
        }
        interfaces(r, v2, usize::from(len), out)?;
        if last {
            // v1 addresses close with the pseudo-device instead.
            return if v2 { Ok(()) } else { Err(AddressError::Invalid { field: "last-device flag", at: md_at + 1 }) };
        }
    }
}

/// One device's interface entries, up to the last one.
fn interfaces(r: &mut Reader<'_>, v2: bool, device_len: usize, out: &mut Vec<Entry>) -> Result<(), AddressError> {
    loop {
        if out.len() >= MAX_ENTRIES {
            return Err(AddressError::TooMany("transport entries"));
        }
        let csum = r.take(2, "transport name checksum")?;
        let checksum = u16::from_le_bytes([csum[0], csum[1]]);
        let attr_at = r.at;
        let attrs = r.take(if v2 { 8 } else { 16 }, "interface attributes")?;
        if !bandwidth_ok(attrs, v2) {
            return Err(AddressError::Invalid { field: "interface bandwidth", at: attr_at });
        }
        let len_byte = r.u8("interface length")?;
        let len = r.extended(len_byte, 0x3f, v2, "interface length")?;
        r.take(usize::from(len), "interface address")?;
        out.push(Entry { checksum, device_len, iface_len: usize::from(len) });
        // `ucp_worker_get_address` never packs endpoint addresses.
        if len_byte & IFACE_HAS_EP != 0 {
            return Err(AddressError::Invalid { field: "endpoint-address flag", at: r.at - usize::from(len) - 1 });
        }
        if len_byte & FLAG_LAST != 0 {
            return Ok(());
        }
    }
}

/// Whether the packed bandwidth is a positive finite number (UCX divides by it).
fn bandwidth_ok(attrs: &[u8], v2: bool) -> bool {
    if v2 {
        // An 8-bit float: exponent 0 is zero, 15 is infinity or NaN.
        (1..=14).contains(&(attrs[1] & 0x0f))
    } else {
        let bw = f32::from_le_bytes([attrs[4], attrs[5], attrs[6], attrs[7]]);
        bw.is_finite() && bw > 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A v1 address with one device and one interface, as UCX packs it.
    fn v1() -> Vec<u8> {
        let mut a = vec![0x20]; // v1, uuid flag
        a.extend_from_slice(&[7; 8]); // uuid
        a.extend_from_slice(&[0x01, 0x04]); // md 1; device length 4 (not last: v1 closes below)
        a.extend_from_slice(&[10, 0, 0, 1]); // device address
        a.extend_from_slice(&[0xab, 0xcd]); // name checksum
        let mut attrs = [0u8; 16];
        attrs[4..8].copy_from_slice(&1e9f32.to_le_bytes());
        a.extend_from_slice(&attrs);
        a.extend_from_slice(&[0x82, 0x12, 0x34]); // last iface, length 2, address
        a.extend_from_slice(&[0x86, 0x80]); // release pseudo-device
        a
    }

    #[test]
    fn accepts_a_packed_v1_address() {
        assert_eq!(validate(&v1()), Ok(()));
    }

    #[test]
    fn refuses_what_would_abort_or_overread_ucx() {
        assert_eq!(validate(&[]), Err(AddressError::Empty));
        assert_eq!(validate(&[0x22]), Err(AddressError::UnknownVersion(2)));
        let a = v1();
        for n in 1..a.len() {
            assert!(matches!(validate(&a[..n]), Err(AddressError::Truncated { .. })), "{n}");
        }
        let mut long = a.clone();
        long.push(0);
        assert_eq!(validate(&long), Err(AddressError::Trailing { end: a.len(), len: a.len() + 1 }));
        let mut md = a.clone();
        md[9] = 0x40; // md index 64
        assert!(matches!(validate(&md), Err(AddressError::Invalid { field: "memory domain index", .. })));
        let mut bw = a.clone();
        bw[21..25].copy_from_slice(&0f32.to_le_bytes());
        assert!(matches!(validate(&bw), Err(AddressError::Invalid { field: "interface bandwidth", .. })));
    }

    #[test]
    fn empty_device_list() {
        let mut a = vec![0x20];
        a.extend_from_slice(&[0; 8]);
        a.push(EMPTY_LIST);
        assert_eq!(validate(&a), Ok(()));
    }
}

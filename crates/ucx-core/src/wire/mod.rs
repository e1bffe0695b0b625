//! Byte-exact wire formats spoken by UCX-Py (0.45) and UCXX (0.52) peers.
//!
//! Everything here is a pure encode/decode function over byte slices: no I/O,
//! no FFI, no `unsafe`. Keeping the formats apart from the transport lets them
//! be tested against vectors produced by the Python reference code, and lets
//! the endpoint code stay ignorant of byte layouts.
//!
//! All multi-byte fields are little-endian: the Python side packs them with
//! native `struct`/`array` codes (`"Q"`, C `int`) and every platform UCX-Py
//! ships for is little-endian, so "native" means LE on the wire in practice.
//!
//! | message | bytes | fields | module |
//! |---|---|---|---|
//! | UCX-Py peer info (stream) | 24 | `msg_tag: u64`, `ctrl_tag: u64`, `checksum: u64 = hash64bits(msg_tag, ctrl_tag)` | [`handshake`] |
//! | UCXX peer info (stream) | 16 | `msg_tag: u64`, `checksum: u64 = hash64bits(msg_tag)` | [`handshake`] |
//! | UCX-Py control message (tag) | 16 | `opcode: u64` (1 = shutdown), `close_after_n_recv: u64` | [`ctrl`] |
//! | UCX-Py active-message header | 4 | `mem_type: i32` (`ucs_memory_type_t`) | [`am_header`] |
//! | UCX-Py `send_obj` length prefix | 8 | `nbytes: u64` | [`obj_len`] |
//! | UCXX multi-frame header (`send_multi`, the Dask comm) | 1209 | `next: bool`, `n: u64`, 100 × `cuda: i32`, 100 × `size: u64` | [`multi_frame`] |
//! | UCX worker address (checked, not decoded) | varies | see the module | [`worker_address`] |
//! | our communicator's hello and address table | varies | see the module | [`bootstrap`] |
//! | our communicator's tags (user tag, source rank, batch) | 8 (a tag) | see the module | [`collective_tag`] |
//! | our `alltoallv`'s announcement of a part | 12 | `len: u64`, `batch: u32` (0: one message) | [`alltoallv`] |
//! | our multi-rail hello and message header, and part tags | 18; varies | see the module | [`multirail`] |
//! | our shared-memory window's entry, and a part's note | 20 + key; 9 | `address: u64`, `slot: u64`, key; `len: u64`, `where: u8` | [`shared_window`] |
//! | our same-host single-copy path: the handshake's mark, hello, verdict, descriptor, answer | 8 (a tag); 48; 1; 64; 16 | see the module | [`single_copy`] |
//!
//! Tags are derived with [`hash64bits`], the Python helper
//! `int(sha1(repr(args).encode()).hexdigest()[:16], 16)`, which is reproduced
//! here bit for bit (including Python's tuple `repr`), and user tags with
//! [`user_tag`] over CPython's integer `hash()` ([`py_int_hash`]).
#![warn(missing_docs)]

use std::fmt;

use sha1::{Digest, Sha1};

pub mod alltoallv;
pub mod am_header;
pub mod bootstrap;
pub mod collective_tag;
pub mod ctrl;
pub mod handshake;
pub mod multi_frame;
pub mod multirail;
pub mod obj_len;
pub mod shared_window;
pub mod single_copy;
pub mod worker_address;

pub use ctrl::CtrlMsg;
pub use handshake::{detect, Flavour, PeerInfo, UcxxPeerInfo, DETECT_LEN};

/// Why a received wire message could not be decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WireError {
    /// The buffer does not have the exact size the format requires; the
    /// formats are fixed-size, so any other length means a protocol mismatch.
    BadLength {
        /// Which message was being decoded (e.g. `"UCX-Py peer info"`).
        what: &'static str,
        /// The size the format requires, in bytes.
        expected: usize,
        /// The size that was received, in bytes.
        got: usize,
    },
    /// A handshake's checksum field does not match the checksum recomputed
    /// from its other fields.
    ChecksumInvalid {
        /// The checksum the receiver computed from the received fields.
        expected: u64,
        /// The checksum field as received.
        got: u64,
    },
    /// A variable-length message that does not parse.
    Malformed {
        /// Which message was being decoded.
        what: &'static str,
        /// What was wrong with it.
        why: &'static str,
    },
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::BadLength { what, expected, got } => write!(f, "{what}: expected {expected} bytes, got {got}"),
            // Same text as UCX-Py/UCXX (`f"Checksum invalid! {hex(e)} != {hex(g)}"`)
            // so logs from mixed deployments read alike; `{:#x}` matches
            // Python's `hex()` (lowercase, `0x` prefix, no padding).
            Self::ChecksumInvalid { expected, got } => {
                write!(f, "Checksum invalid! {expected:#x} != {got:#x}")
            }
            Self::Malformed { what, why } => write!(f, "{what}: {why}"),
        }
    }
}

impl std::error::Error for WireError {}

/// Checks that `bytes` is exactly `N` long and returns it as an array.
fn exact<const N: usize>(what: &'static str, bytes: &[u8]) -> Result<[u8; N], WireError> {
    bytes.try_into().map_err(|_| WireError::BadLength { what, expected: N, got: bytes.len() })
}

/// Reads the little-endian `u64` at `bytes[at..at + 8]` of a fixed-size buffer.
fn le_u64<const N: usize>(bytes: &[u8; N], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// Feeds the decimal form of `v` (as Python's `repr(int)` writes it) to `h`.
///
/// Written by hand rather than through `fmt` so hashing never allocates and
/// has no error path.
fn update_decimal(h: &mut Sha1, v: i128) {
    if v < 0 {
        h.update(b"-");
    }
    let mut n = v.unsigned_abs();
    // 2^127 has 39 decimal digits.
    let mut buf = [0u8; 39];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    h.update(&buf[i..]);
}

/// SHA-1 of Python's `repr()` of a tuple of ints, first 8 bytes big-endian.
///
/// `i128` holds every `u64` and `i64`, so one routine serves all callers.
fn hash_int_tuple<I>(values: I) -> u64
where
    I: ExactSizeIterator<Item = i128>,
{
    let len = values.len();
    let mut h = Sha1::new();
    h.update(b"(");
    for (i, v) in values.enumerate() {
        if i > 0 {
            h.update(b", ");
        }
        update_decimal(&mut h, v);
    }
    // Python writes `(a,)` for a one-tuple so it is not read as a parenthesised
    // expression; the hash must include that comma.
    if len == 1 {
        h.update(b",");
    }
    h.update(b")");
    let digest = h.finalize();
    let mut top = [0u8; 8];
    top.copy_from_slice(&digest[..8]);
    // `hexdigest()[:16]` parsed as hex is the first 8 digest bytes, big-endian.
    u64::from_be_bytes(top)
}

/// UCX-Py/UCXX `hash64bits(*values)` for non-negative integers:
/// `int(sha1(repr(values).encode()).hexdigest()[:16], 16)`.
///
/// The Python helper accepts any objects; only tuples of ints that fit in a
/// `u64` are covered here (strings, bytes and larger ints are out of scope).
pub fn hash64bits(values: &[u64]) -> u64 {
    hash_int_tuple(values.iter().map(|&v| i128::from(v)))
}

/// The UCX tag UCX-Py/UCXX use for a user tag:
/// `hash64bits(base, hash(tag))`, where `base` is the endpoint's
/// `msg_send`/`msg_recv` tag and `py_hash` is Python's `hash()` of the user's
/// tag (for int tags, [`py_int_hash`]); `py_hash` may be negative. The Python
/// package's `Endpoint.send(tag=...)`/`recv(tag=...)` compute their tags with it.
pub fn user_tag(base: u64, py_hash: i64) -> u64 {
    hash_int_tuple([i128::from(base), i128::from(py_hash)].into_iter())
}

/// CPython's `hash()` of an int (64-bit builds), for Rust code that computes the
/// [`user_tag`] of a UCX-Py peer's int tag (Python passes its own `hash()`): `|v| mod (2^61 - 1)` with the
/// sign of `v`, except that `-1` becomes `-2` (CPython reserves `-1` as its
/// C-level error return).
pub fn py_int_hash(v: i64) -> i64 {
    // sys.hash_info.modulus on 64-bit CPython: the Mersenne prime 2^61 - 1.
    const MODULUS: u64 = (1 << 61) - 1;
    // `unsigned_abs` so that i64::MIN does not overflow.
    let reduced = v.unsigned_abs() % MODULUS;
    // reduced < 2^61, so the cast is lossless.
    let magnitude = reduced as i64;
    let h = if v < 0 { -magnitude } else { magnitude };
    if h == -1 {
        -2
    } else {
        h
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected hashes were printed by the reference formula:
    // python3 -c 'import hashlib;h=lambda *a:hex(int(hashlib.sha1(repr(a).encode()).hexdigest()[:16],16));print(h(0,0),h(2**64-1,1),h(12345),h(0),h(),h(1,2,3),h(-5),h(-2**63,2**63-1),h(0x0123456789abcdef,0xfedcba9876543210))'
    #[test]
    fn hash64bits_matches_python() {
        assert_eq!(hash64bits(&[0, 0]), 0x52fa_afd1_0264_8a33);
        assert_eq!(hash64bits(&[u64::MAX, 1]), 0x6624_cb21_0b54_31c5);
        assert_eq!(hash64bits(&[12345]), 0x4d12_85c5_3c62_9f1b);
        assert_eq!(hash64bits(&[0]), 0x22dd_0956_b162_7f9f);
        assert_eq!(hash64bits(&[]), 0xf906_5fa7_3897_50e1);
        assert_eq!(hash64bits(&[1, 2, 3]), 0xb829_04fe_e14f_67d0);
        assert_eq!(hash64bits(&[0x0123_4567_89ab_cdef, 0xfedc_ba98_7654_3210]), 0xa2b2_20f5_da2f_1831);
    }

    // Negative values are written as Python's repr writes them:
    // python3 -c 'import hashlib;h=lambda *a:hex(int(hashlib.sha1(repr(a).encode()).hexdigest()[:16],16));print(h(7,-5), h(2**64-1, -2**63))'
    #[test]
    fn negative_hashes_match_python() {
        assert_eq!(user_tag(7, -5), 0x5e40_8a74_581c_2155);
        assert_eq!(user_tag(u64::MAX, i64::MIN), 0x7489_5be0_610a_0f6c);
    }

    #[test]
    fn decimal_matches_std_formatting() {
        for v in [0, 1, 9, 10, -1, -10, i128::from(u64::MAX), i128::from(i64::MIN), i128::MAX, i128::MIN] {
            let mut ours = Sha1::new();
            update_decimal(&mut ours, v);
            let theirs = Sha1::digest(v.to_string().as_bytes());
            assert_eq!(ours.finalize(), theirs, "{v}");
        }
    }

    // python3 -c 'import hashlib;h=lambda *a:hex(int(hashlib.sha1(repr(a).encode()).hexdigest()[:16],16));print(hash(-1),h(0x0123456789abcdef,hash(-1)),h(0xdeadbeef,hash(7)))'
    #[test]
    fn user_tag_matches_python() {
        assert_eq!(py_int_hash(-1), -2);
        assert_eq!(user_tag(0x0123_4567_89ab_cdef, -2), 0x7419_f5ef_36e9_4b1d);
        assert_eq!(user_tag(0xdead_beef, py_int_hash(7)), 0xc163_f6ed_208c_4ba0);
        assert_eq!(user_tag(0, 0), hash64bits(&[0, 0]));
    }

    // python3 -c 'print([hash(v) for v in (0,5,-1,-2,2**61-2,2**61-1,2**61,-(2**61),-(2**61-1),-(2**61-2),2**62,-(2**62)-1,2**63-1,-(2**63))])'
    #[test]
    fn py_int_hash_matches_cpython() {
        let cases: [(i64, i64); 14] = [
            (0, 0),
            (5, 5),
            (-1, -2),
            (-2, -2),
            (2_305_843_009_213_693_950, 2_305_843_009_213_693_950),
            (2_305_843_009_213_693_951, 0),
            (2_305_843_009_213_693_952, 1),
            (-2_305_843_009_213_693_952, -2),
            (-2_305_843_009_213_693_951, 0),
            (-2_305_843_009_213_693_950, -2_305_843_009_213_693_950),
            (4_611_686_018_427_387_904, 2),
            (-4_611_686_018_427_387_905, -3),
            (i64::MAX, 3),
            (i64::MIN, -4),
        ];
        for (v, want) in cases {
            assert_eq!(py_int_hash(v), want, "hash({v})");
        }
    }

    #[test]
    fn error_display_names_the_problem() {
        let e = WireError::BadLength { what: "control message", expected: 16, got: 3 };
        assert_eq!(e.to_string(), "control message: expected 16 bytes, got 3");
        // Python: hex(0) == '0x0', hex(0xabc) == '0xabc' (no padding).
        let e = WireError::ChecksumInvalid { expected: 0, got: 0xABC };
        assert_eq!(e.to_string(), "Checksum invalid! 0x0 != 0xabc");
    }
}

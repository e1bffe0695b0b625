//! The announcement in the first phase of our communicator's `alltoallv`: how many bytes a
//! rank sends another, and how (one message, or batches of a fixed size from a bounce-buffer
//! pool). The receiver follows the sender's choice, so ranks configured differently still
//! understand each other.
//!
//! ```text
//! bytes 0..8   length of the part: u64 LE
//! bytes 8..12  batch size: u32 LE; 0 = the part is one message (batch 1 of the tag),
//!              else message k (k = 0, 1, ...) holds bytes k*batch .. min((k+1)*batch, length),
//!              sent as batch 1 + k of the tag (batch 0 of the tag is this announcement)
//! ```
//!
//! A small part sent as one message travels inside its announcement, after those 12 bytes: a
//! part of at most [`inline_max`]`(world size)` bytes with batch size 0 ([`Announce::is_inline`]).
//! The receiver posts that much room for every announcement, and such a part then needs no
//! second message (one round of messages instead of two: a 1 KiB alltoallv on 2 ranks takes
//! about half the time). An empty part is always inline, and so sends nothing after its
//! announcement.
//!
//! A part whose batches do not fit the tag layout's batch field is refused by [`Announce::new`]
//! (the sender) and by [`Announce::decode`] (the receiver), never aliased.
//!
//! An `alltoallv` of device parts (ucx-async's `alltoallv_device_into`, Python's
//! `Communicator.alltoallv_device`) is two operations: first a host `alltoallv` whose part
//! for each rank is the device part's length ([`device_len_encode`], 8 bytes), then, on the
//! next operation number, each non-empty device part as one message with batch
//! [`DEVICE_PART_BATCH`] of the tag, straight from device memory to device memory. Device
//! parts never go inside an announcement or through the bounce pool, which are host memory.
use std::ops::Range;

use super::collective_tag::MAX_BATCHES;
use super::{exact, WireError};

/// Size of the announcement in bytes.
pub const LEN: usize = 12;

/// The largest part that travels inside its announcement (see the module doc), for worlds of
/// up to [`INLINE_ROOM`] / `INLINE_MAX` ranks. Announcements are sent for fast completion,
/// which UCX sends eagerly at this size over shared memory and TCP, so an inline part costs
/// one copy and no rendezvous handshake (Open MPI's shared memory sends the first 32 KiB of
/// every message with its header for the same reason).
pub const INLINE_MAX: usize = 32 << 10;

/// The most room one rank posts for inline parts in one `alltoallv`, over all its peers:
/// larger worlds get a smaller [`inline_max`], so the receive buffers stay bounded.
pub const INLINE_ROOM: usize = 1 << 20;

/// The largest inline part in a world of `world` ranks: [`INLINE_MAX`], or less, so that
/// `world` announcements fit in [`INLINE_ROOM`] bytes.
pub fn inline_max(world: usize) -> usize {
    (INLINE_ROOM / world.max(1)).min(INLINE_MAX)
}

/// The smallest part the automatic choice sends through the bounce pool: below it UCX sends
/// eagerly through its own pre-registered buffers anyway. A starting point, not measured on
/// InfiniBand (this project's machines have none).
pub const AUTO_MIN_PART: u64 = 64 * 1024;

/// The pool's default batch size (bytes) and depth (batches in flight per peer and direction).
pub const DEFAULT_BATCH: u32 = 1 << 20;
/// See [`DEFAULT_BATCH`].
pub const DEFAULT_DEPTH: usize = 4;

/// The automatic choice, shared by the Rust and Python communicators: a part goes through the
/// bounce pool when it has at least [`AUTO_MIN_PART`] bytes and the peer's endpoint runs over
/// an RDMA network transport (`rc*`, `dc*`, `ud*`), where registering each new user buffer
/// with the NIC costs; over shared memory, TCP or CUDA IPC the copies would only cost.
pub fn auto_buffered<S: AsRef<str>>(transports: &[S], len: u64) -> bool {
    len >= AUTO_MIN_PART && transports.iter().any(|t| ["rc", "dc", "ud"].iter().any(|p| t.as_ref().starts_with(p)))
}

const WHAT: &str = "alltoallv announcement";

/// The tag's batch number of a device part's one message (see the module doc).
pub const DEVICE_PART_BATCH: usize = 1;

/// Bytes of a device part's length in the first operation (see the module doc).
pub const DEVICE_LEN: usize = 8;

/// A device part's length as the first operation's part carries it (u64 LE).
pub fn device_len_encode(len: u64) -> [u8; DEVICE_LEN] {
    len.to_le_bytes()
}

/// Decodes a device part's length a peer sent in the first operation.
pub fn device_len_decode(bytes: &[u8]) -> Result<u64, WireError> {
    Ok(u64::from_le_bytes(exact("alltoallv device part length", bytes)?))
}

/// How a part travels: its length and the batch size (0: one message).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Announce {
    /// The part's length in bytes.
    pub len: u64,
    /// Bytes per batch, or 0 when the part is sent as one message.
    pub batch: u32,
}

impl Announce {
    /// An announcement of `len` bytes in batches of `batch` (0: one message). Fails if the
    /// batches would not fit the tag layout.
    pub fn new(len: u64, batch: u32) -> Result<Announce, WireError> {
        let a = Announce { len, batch };
        a.check()?;
        Ok(a)
    }

    fn check(&self) -> Result<(), WireError> {
        // Batch 0 of the tag is the announcement itself.
        if self.messages() >= MAX_BATCHES as u64 {
            return Err(WireError::Malformed { what: WHAT, why: "more batches than the tag layout can number" });
        }
        Ok(())
    }

    /// How many messages carry the part: 0 for an empty part.
    pub fn messages(&self) -> u64 {
        match (self.len, self.batch) {
            (0, _) => 0,
            (_, 0) => 1,
            (len, b) => len.div_ceil(u64::from(b)),
        }
    }

    /// The bytes of the part message `k` carries (`k` below [`Announce::messages`]).
    pub fn range(&self, k: u64) -> Range<u64> {
        if self.batch == 0 {
            return 0..self.len;
        }
        let b = u64::from(self.batch);
        let start = (k * b).min(self.len);
        start..(start + b).min(self.len)
    }

    /// The tag's batch number of message `k`.
    pub fn tag_batch(k: u64) -> usize {
        (k + 1) as usize
    }

    /// Whether the part travels inside the announcement in a world whose [`inline_max`] is
    /// `inline_max`: sent as one message and no longer than that.
    pub fn is_inline(&self, inline_max: usize) -> bool {
        self.batch == 0 && self.len <= inline_max as u64
    }

    /// The announcement message for `part` (whose length this announces): the 12 bytes, then
    /// the part itself if it is inline.
    pub fn encode_message(&self, part: &[u8], inline_max: usize, out: &mut Vec<u8>) {
        debug_assert_eq!(part.len() as u64, self.len, "the announcement describes this part");
        out.clear();
        out.extend_from_slice(&self.encode());
        if self.is_inline(inline_max) {
            out.extend_from_slice(part);
        }
    }

    /// Decodes an announcement message a peer sent (`message`: the bytes received) in a
    /// world whose [`inline_max`] is `inline_max`: the announcement, and its inline part
    /// (empty if the part is not inline). The message must hold exactly what the
    /// announcement says.
    pub fn decode_message(message: &[u8], inline_max: usize) -> Result<(Announce, &[u8]), WireError> {
        let (head, rest) = message.split_at(LEN.min(message.len()));
        let a = Announce::decode(head).map_err(|e| match e {
            WireError::BadLength { what, expected, .. } => WireError::BadLength { what, expected, got: message.len() },
            e => e,
        })?;
        let inline = if a.is_inline(inline_max) { a.len as usize } else { 0 };
        if rest.len() != inline {
            return Err(WireError::BadLength { what: WHAT, expected: LEN + inline, got: message.len() });
        }
        Ok((a, rest))
    }

    /// The announcement's bytes.
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(&self.len.to_le_bytes());
        out[8..].copy_from_slice(&self.batch.to_le_bytes());
        out
    }

    /// Decodes an announcement a peer sent.
    pub fn decode(bytes: &[u8]) -> Result<Announce, WireError> {
        let b: [u8; LEN] = exact(WHAT, bytes)?;
        let len = u64::from_le_bytes(b[..8].try_into().expect("8 bytes"));
        let batch = u32::from_le_bytes(b[8..].try_into().expect("4 bytes"));
        let a = Announce { len, batch };
        a.check()?;
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vectors() {
        // python3 -c 'import struct; print(struct.pack("<QI", 70000, 4096).hex())'
        let a = Announce::new(70_000, 4096).unwrap();
        assert_eq!(hex(&a.encode()), "701101000000000000100000");
        assert_eq!(Announce::decode(&a.encode()), Ok(a));
    }

    #[test]
    fn device_lengths_are_8_bytes_le_and_nothing_else() {
        assert_eq!(hex(&device_len_encode(70_000)), "7011010000000000");
        assert_eq!(device_len_decode(&device_len_encode(u64::MAX)), Ok(u64::MAX));
        assert_eq!(
            device_len_decode(&[1, 2, 3]),
            Err(WireError::BadLength { what: "alltoallv device part length", expected: 8, got: 3 })
        );
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn small_one_message_parts_travel_inside_their_announcement() {
        let max = inline_max(2);
        assert_eq!(max, INLINE_MAX);
        assert_eq!(inline_max(1024), INLINE_ROOM / 1024, "large worlds post less room per peer");
        assert_eq!(inline_max(0), INLINE_MAX);
        let mut msg = Vec::new();
        for (len, batch, inline) in
            [(0usize, 0u32, true), (5, 0, true), (max, 0, true), (max + 1, 0, false), (5, 4096, false)]
        {
            let part: Vec<u8> = (0..len).map(|i| i as u8).collect();
            let a = Announce::new(len as u64, batch).unwrap();
            assert_eq!(a.is_inline(max), inline, "{len} bytes, batch {batch}");
            a.encode_message(&part, max, &mut msg);
            assert_eq!(msg.len(), LEN + if inline { len } else { 0 });
            let (b, data) = Announce::decode_message(&msg, max).unwrap();
            assert_eq!(b, a);
            assert_eq!(data, if inline { &part[..] } else { &[][..] });
        }
        // The message must hold exactly what its announcement says.
        let a = Announce::new(5, 0).unwrap();
        let mut msg = a.encode().to_vec();
        let short = Announce::decode_message(&msg, max).unwrap_err();
        assert_eq!(short, WireError::BadLength { what: WHAT, expected: LEN + 5, got: LEN });
        msg.extend_from_slice(&[0; 6]);
        assert!(Announce::decode_message(&msg, max).is_err(), "a byte more than announced");
        let big = Announce::new(max as u64 + 1, 0).unwrap();
        let mut msg = big.encode().to_vec();
        msg.push(0);
        assert!(Announce::decode_message(&msg, max).is_err(), "data after a part that is not inline");
        assert!(Announce::decode_message(&[1, 2, 3], max).is_err(), "shorter than the header");
    }

    #[test]
    fn batches_cover_the_part_exactly_once() {
        for (len, batch) in [(0u64, 0u32), (0, 7), (1, 0), (10, 3), (12, 3), (5, 100), (65_535 * 2, 2)] {
            let a = Announce::new(len, batch).unwrap();
            let mut next = 0;
            for k in 0..a.messages() {
                let r = a.range(k);
                assert_eq!(r.start, next, "{len} in batches of {batch}: message {k}");
                assert!(!r.is_empty(), "no empty message");
                next = r.end;
            }
            assert_eq!(next, len);
        }
        assert_eq!(Announce::tag_batch(0), 1, "tag batch 0 is the announcement");
    }

    #[test]
    fn only_large_parts_over_rdma_networks_go_through_the_pool() {
        let big = AUTO_MIN_PART;
        assert!(auto_buffered(&["rc_mlx5", "cma"], big));
        assert!(auto_buffered(&["dc_mlx5"], big));
        assert!(auto_buffered(&["ud_verbs"], big));
        assert!(!auto_buffered(&["rc_mlx5"], big - 1));
        assert!(!auto_buffered(&["tcp"], big));
        assert!(!auto_buffered(&["posix", "cma", "sysv"], big));
        assert!(!auto_buffered(&["cuda_ipc", "cuda_copy"], big));
    }

    #[test]
    fn too_many_batches_are_refused_on_both_sides() {
        // Tag batches 1..=65535 are free for the messages.
        assert!(Announce::new(65_535, 1).is_ok());
        let e = Announce::new(65_536, 1).unwrap_err();
        assert!(e.to_string().contains("more batches"), "{e}");
        let raw = Announce { len: 1 << 40, batch: 1 }.encode();
        assert!(Announce::decode(&raw).is_err());
        assert!(Announce::decode(&raw[..11]).is_err());
    }
}

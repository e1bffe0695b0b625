//! Our communicator's shared-memory windows (ucx-async's `SharedWindow`): what a rank tells the
//! others when it opens its window, and the note that tells a receiver where a part is.
//!
//! ```text
//! entry (allgathered when the window opens, each padded to the longest):
//! bytes 0..8    the window's address in its owner's process: u64 LE
//! bytes 8..16   slot: u64 LE, the most bytes one sender's part may have in the window
//! bytes 16..20  key length k: u32 LE
//! bytes 20..    the window's packed remote key (k bytes), then padding
//!
//! note (one per peer and call, tag batch 0):
//! bytes 0..8    length of the part: u64 LE
//! byte  8       0: the part is in the receiver's window; 1: it follows as one message
//!               (tag batch 1), because it exceeds the slot or the sender cannot map the
//!               receiver's window (another host)
//! ```
//!
//! The window has two halves of one slot per sender; the `k`-th call (from 0) writes half
//! `k % 2`, sender `s` at slot `s` of it.
use super::{exact, le_u64, WireError};

/// Bytes of an entry before its key.
pub const ENTRY_HEAD: usize = 20;

/// Bytes of a note.
pub const NOTE_LEN: usize = 9;

const ENTRY: &str = "window entry";
const NOTE: &str = "window note";

/// A rank's window as the others need to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry<'a> {
    /// The window's address in its owner's process (what the key maps).
    pub address: u64,
    /// The most bytes a sender's part may have in the window.
    pub slot: u64,
    /// The window's packed remote key.
    pub key: &'a [u8],
}

impl Entry<'_> {
    /// Appends the entry to `out`, padded with zeros to `room` bytes (at least its own size).
    pub fn encode_into(&self, room: usize, out: &mut Vec<u8>) {
        let start = out.len();
        out.extend_from_slice(&self.address.to_le_bytes());
        out.extend_from_slice(&self.slot.to_le_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_le_bytes());
        out.extend_from_slice(self.key);
        out.resize(start + room.max(ENTRY_HEAD + self.key.len()), 0);
    }

    /// The entry at the start of `bytes` (padding after its key ignored).
    pub fn decode(bytes: &[u8]) -> Result<Entry<'_>, WireError> {
        let head: [u8; ENTRY_HEAD] = exact(ENTRY, bytes.get(..ENTRY_HEAD).unwrap_or(bytes))?;
        let key_len = u32::from_le_bytes(head[16..20].try_into().expect("4 bytes")) as usize;
        let key = bytes
            .get(ENTRY_HEAD..ENTRY_HEAD + key_len)
            .ok_or(WireError::Malformed { what: ENTRY, why: "the key is longer than the entry" })?;
        Ok(Entry { address: le_u64(&head, 0), slot: le_u64(&head, 8), key })
    }
}

/// Where a part is: the receiver learns it from the part's note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Note {
    /// The part's length in bytes.
    pub len: u64,
    /// Whether it is in the receiver's window (else it follows as one message).
    pub in_window: bool,
}

impl Note {
    /// The note's bytes.
    pub fn encode(&self) -> [u8; NOTE_LEN] {
        let mut b = [0u8; NOTE_LEN];
        b[..8].copy_from_slice(&self.len.to_le_bytes());
        b[8] = u8::from(!self.in_window);
        b
    }

    /// A received note; a where-byte other than 0 or 1 is refused.
    pub fn decode(bytes: &[u8]) -> Result<Note, WireError> {
        let b: [u8; NOTE_LEN] = exact(NOTE, bytes)?;
        let len = le_u64(&b, 0);
        match b[8] {
            0 => Ok(Note { len, in_window: true }),
            1 => Ok(Note { len, in_window: false }),
            _ => Err(WireError::Malformed { what: NOTE, why: "where the part is must be 0 or 1" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_padded_and_refuse_a_key_beyond_them() {
        let mut out = vec![0xee];
        Entry { address: 0x1122, slot: 1 << 20, key: b"key" }.encode_into(40, &mut out);
        assert_eq!(out.len(), 41);
        assert_eq!(&out[1..9], &0x1122u64.to_le_bytes());
        assert_eq!(&out[17..21], &3u32.to_le_bytes());
        assert_eq!(Entry::decode(&out[1..]).unwrap(), Entry { address: 0x1122, slot: 1 << 20, key: b"key" });
        // Room smaller than the entry: never cut.
        let mut short = Vec::new();
        Entry { address: 1, slot: 2, key: b"longer key" }.encode_into(4, &mut short);
        assert_eq!(Entry::decode(&short).unwrap().key, b"longer key");
        short[16] = 200;
        assert!(matches!(Entry::decode(&short), Err(WireError::Malformed { .. })));
        assert!(matches!(Entry::decode(&short[..7]), Err(WireError::BadLength { .. })));
    }

    #[test]
    fn notes_round_trip_and_refuse_an_unknown_place() {
        for n in [Note { len: 0, in_window: true }, Note { len: u64::MAX, in_window: false }] {
            assert_eq!(Note::decode(&n.encode()).unwrap(), n);
        }
        assert_eq!(Note { len: 5, in_window: false }.encode(), [5, 0, 0, 0, 0, 0, 0, 0, 1]);
        let mut bad = Note { len: 5, in_window: true }.encode();
        bad[8] = 2;
        assert!(matches!(Note::decode(&bad), Err(WireError::Malformed { .. })));
        assert!(matches!(Note::decode(&bad[..8]), Err(WireError::BadLength { .. })));
    }
}

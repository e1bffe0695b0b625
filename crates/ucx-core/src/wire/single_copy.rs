//! The bytes of the same-host single-copy path (ours; stock UCX-Py and UCXX peers never see
//! any of them): how our side of a UCX-Py handshake says it speaks it, the hello both sides
//! then exchange, the descriptor a large message travels as, and the receiver's answer.
//!
//! - **The mark.** Our peer info's `ctrl_tag` is [`marked_ctrl_tag`] of its `msg_tag` (a hash
//!   of it, where UCX-Py draws a second random tag). Tags stay unique per endpoint; a stock
//!   peer's random `ctrl_tag` carries the mark with a chance of 2^-64, and even then it only
//!   receives a [`Hello`] it never reads.
//! - **A communicator's pairs** carry no handshake: each pair of ranks derives its link's
//!   data tags from the ranks' worker addresses ([`table_key`], [`pair_tags`]), and both
//!   start the hello exchange (only with peer error handling: without it UCX's own CMA serves
//!   one host).
//! - **The hello** (on [`hello_tag`] of the receiver's `msg_tag`): this process's boot id, pid
//!   namespace and pid, and where a 16-byte nonce sits in its memory. The receiver reads the
//!   nonce there with `process_vm_readv`; only if it finds it can it read the sender's memory
//!   (same host, same pid namespace, ptrace permission). It answers with a one-byte
//!   [`Verdict`] on the same tag: yes, send me descriptors.
//! - **The descriptor** ([`Descriptor`], [`Descriptor::LEN`] bytes on the message's own tag):
//!   where the message's bytes are in the sender, how many, the sender's pid, the sequence
//!   number of its answer, and a guard word (address and value) that the sender clears before
//!   it lets go of the buffer, so a receiver that read while the buffer was being freed finds
//!   out. A message of exactly [`Descriptor::LEN`] bytes is a descriptor only if its magic and
//!   checksum hold.
//! - **The answer** ([`Ack`] on [`ack_tag`] of the sender's `msg_tag` and the sequence
//!   number): whether the receiver took the bytes; the sender's send completes with it.
//!
//! | message | bytes | fields |
//! |---|---|---|
//! | hello | 48 | `version: u8`, 3 × pad, `pid: u32`, `pid_ns: u64`, `boot_id: [u8; 16]`, `probe: u64` (address of the nonce), `nonce: u64` |
//! | verdict | 1 | `1` yes, `0` no |
//! | descriptor | 64 | `magic: u64`, `seq: u64`, `addr: u64`, `len: u64`, `guard_addr: u64`, `guard: u64`, `pid: u32`, 4 × pad, `check: u64` |
//! | answer | 16 | `seq: u64`, `status: u64` (0 taken, 1 too large for the receive, 2 unreadable) |
use super::{exact, hash64bits, le_u64, WireError};

/// The version this module speaks (the hello's first byte).
pub const VERSION: u8 = 1;

const MARK: u64 = 0x7563_7861_2d31_6370; // "ucxa-1cp"
const HELLO: u64 = 0x6865_6c6c_6f2d_3163; // "hello-1c"
const ACK: u64 = 0x6163_6b2d_312d_6370; // "ack-1-cp"
const MAGIC: u64 = 0x7563_7861_2064_6573; // "ucxa des"
const PAIR: u64 = 0x7061_6972_2d31_6370; // "pair-1cp"

/// Our `ctrl_tag` for a UCX-Py handshake whose `msg_tag` is `msg_tag`: the mark that says we
/// speak the single-copy path.
pub fn marked_ctrl_tag(msg_tag: u64) -> u64 {
    hash64bits(&[msg_tag, MARK])
}

/// Whether a peer's UCX-Py peer info carries the mark.
pub fn is_marked(msg_tag: u64, ctrl_tag: u64) -> bool {
    ctrl_tag == marked_ctrl_tag(msg_tag)
}

/// The tag hellos and verdicts for the endpoint that receives on `msg_tag` arrive on.
pub fn hello_tag(msg_tag: u64) -> u64 {
    hash64bits(&[msg_tag, HELLO])
}

/// The base of the answers to the descriptors of the endpoint that receives on `msg_tag`;
/// the answer to descriptor `seq` travels on `ack_tag(msg_tag) ^ seq`.
pub fn ack_tag(msg_tag: u64) -> u64 {
    hash64bits(&[msg_tag, ACK])
}

/// A communicator's key for [`pair_tags`]: a hash of its ranks' worker addresses `table`.
/// Every rank holds the same table, so all derive the same key, and communicators of other
/// tables on the same worker get others. Computed once per communicator.
pub fn table_key(table: &[&[u8]]) -> u64 {
    let mut words = vec![PAIR, table.len() as u64];
    for address in table {
        words.push(address.len() as u64);
        words.extend(address.chunks(8).map(|c| {
            let mut w = [0u8; 8];
            w[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(w)
        }));
    }
    hash64bits(&words)
}

/// The data tags of the link between ranks `me` and `peer` of the communicator of
/// [`table_key`] `key` (its endpoints come from worker addresses: no handshake carries tags or
/// the mark): `(the tag me receives on, the tag it sends on)`; both ends derive the same pair.
pub fn pair_tags(key: u64, me: usize, peer: usize) -> (u64, u64) {
    let tag = |from: usize, to: usize| hash64bits(&[key, from as u64, to as u64, PAIR]);
    (tag(peer, me), tag(me, peer))
}

/// A process's offer to be read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The sender's pid (in its pid namespace).
    pub pid: u32,
    /// The inode of the sender's pid namespace (`/proc/self/ns/pid`).
    pub pid_ns: u64,
    /// The kernel's boot id (`/proc/sys/kernel/random/boot_id`), which tells hosts apart.
    pub boot_id: [u8; 16],
    /// Where the nonce is in the sender's memory.
    pub probe: u64,
    /// The nonce.
    pub nonce: u64,
}

impl Hello {
    /// Encoded size.
    pub const LEN: usize = 48;

    /// Encodes the hello.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0] = VERSION;
        out[4..8].copy_from_slice(&self.pid.to_le_bytes());
        out[8..16].copy_from_slice(&self.pid_ns.to_le_bytes());
        out[16..32].copy_from_slice(&self.boot_id);
        out[32..40].copy_from_slice(&self.probe.to_le_bytes());
        out[40..48].copy_from_slice(&self.nonce.to_le_bytes());
        out
    }

    /// Decodes a hello; one of another version is refused (the receiver then answers no).
    pub fn decode(bytes: &[u8]) -> Result<Hello, WireError> {
        let bytes = exact::<{ Self::LEN }>("single-copy hello", bytes)?;
        if bytes[0] != VERSION {
            return Err(WireError::Malformed { what: "single-copy hello", why: "another version" });
        }
        let mut boot_id = [0u8; 16];
        boot_id.copy_from_slice(&bytes[16..32]);
        Ok(Hello {
            pid: u32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
            pid_ns: le_u64(&bytes, 8),
            boot_id,
            probe: le_u64(&bytes, 32),
            nonce: le_u64(&bytes, 40),
        })
    }
}

/// A receiver's answer to a hello: whether the sender may send it descriptors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict(pub bool);

impl Verdict {
    /// Encoded size.
    pub const LEN: usize = 1;

    /// Encodes the verdict.
    pub fn encode(self) -> [u8; Self::LEN] {
        [u8::from(self.0)]
    }

    /// Decodes a verdict; anything but 1 is no.
    pub fn decode(bytes: &[u8]) -> Result<Verdict, WireError> {
        let bytes = exact::<{ Self::LEN }>("single-copy verdict", bytes)?;
        Ok(Verdict(bytes[0] == 1))
    }
}

/// Where a message's bytes are in the sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Descriptor {
    /// The sequence number of the answer the sender waits for.
    pub seq: u64,
    /// The address of the bytes in the sender.
    pub addr: u64,
    /// How many.
    pub len: u64,
    /// The sender's guard word for this message: its address in the sender, and the value it
    /// holds while the bytes may be read.
    pub guard_addr: u64,
    /// See `guard_addr`.
    pub guard: u64,
    /// The sender's pid.
    pub pid: u32,
}

impl Descriptor {
    /// Encoded size: also the length of the message a descriptor travels as.
    pub const LEN: usize = 64;

    fn check(&self) -> u64 {
        hash64bits(&[MAGIC, self.seq, self.addr, self.len, self.guard_addr, self.guard, u64::from(self.pid)])
    }

    /// Encodes the descriptor, magic and checksum included.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        out[8..16].copy_from_slice(&self.seq.to_le_bytes());
        out[16..24].copy_from_slice(&self.addr.to_le_bytes());
        out[24..32].copy_from_slice(&self.len.to_le_bytes());
        out[32..40].copy_from_slice(&self.guard_addr.to_le_bytes());
        out[40..48].copy_from_slice(&self.guard.to_le_bytes());
        out[48..52].copy_from_slice(&self.pid.to_le_bytes());
        out[56..64].copy_from_slice(&self.check().to_le_bytes());
        out
    }

    /// The descriptor in a received message of `bytes`, if it is one: exactly
    /// [`Self::LEN`] bytes whose magic and checksum hold. Anything else is an ordinary
    /// message.
    pub fn recognise(bytes: &[u8]) -> Option<Descriptor> {
        let bytes: &[u8; Self::LEN] = bytes.try_into().ok()?;
        if le_u64(bytes, 0) != MAGIC {
            return None;
        }
        let d = Descriptor {
            seq: le_u64(bytes, 8),
            addr: le_u64(bytes, 16),
            len: le_u64(bytes, 24),
            guard_addr: le_u64(bytes, 32),
            guard: le_u64(bytes, 40),
            pid: u32::from_le_bytes([bytes[48], bytes[49], bytes[50], bytes[51]]),
        };
        (le_u64(bytes, 56) == d.check()).then_some(d)
    }
}

/// What the receiver did with a descriptor's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckStatus {
    /// Read whole.
    Taken,
    /// The receive was too small: the receiver reported a truncation, as for any message.
    TooLarge,
    /// The receiver could not read them (or the guard had changed).
    Unreadable,
}

/// The receiver's answer to descriptor `seq`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// The descriptor's sequence number.
    pub seq: u64,
    /// What happened.
    pub status: AckStatus,
}

impl Ack {
    /// Encoded size.
    pub const LEN: usize = 16;

    /// Encodes the answer.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.seq.to_le_bytes());
        let status: u64 = match self.status {
            AckStatus::Taken => 0,
            AckStatus::TooLarge => 1,
            AckStatus::Unreadable => 2,
        };
        out[8..16].copy_from_slice(&status.to_le_bytes());
        out
    }

    /// Decodes an answer.
    pub fn decode(bytes: &[u8]) -> Result<Ack, WireError> {
        let bytes = exact::<{ Self::LEN }>("single-copy answer", bytes)?;
        let status = match le_u64(&bytes, 8) {
            0 => AckStatus::Taken,
            1 => AckStatus::TooLarge,
            2 => AckStatus::Unreadable,
            _ => return Err(WireError::Malformed { what: "single-copy answer", why: "an unknown status" }),
        };
        Ok(Ack { seq: le_u64(&bytes, 0), status })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_of_ranks_derives_mirrored_tags_unique_to_its_table() {
        let table: [&[u8]; 3] = [b"rank zero address", b"rank one", b"rank two, the longest address"];
        let key = table_key(&table);
        let (recv01, send01) = pair_tags(key, 0, 1);
        let (recv10, send10) = pair_tags(key, 1, 0);
        assert_eq!((recv01, send01), (send10, recv10), "each end receives on what the other sends on");
        assert_ne!(recv01, send01);
        assert_ne!(pair_tags(key, 0, 2), (recv01, send01));
        let other: [&[u8]; 3] = [b"rank zero address", b"rank one", b"rank two, another address"];
        assert_ne!(pair_tags(table_key(&other), 0, 1), (recv01, send01), "another communicator's table");
        assert_ne!(pair_tags(table_key(&table[..2]), 0, 1), (recv01, send01), "a table of other length");
    }

    #[test]
    fn the_mark_is_recognised_and_a_random_ctrl_tag_is_not() {
        let msg = 0x1234_5678_9abc_def0;
        assert!(is_marked(msg, marked_ctrl_tag(msg)));
        assert!(!is_marked(msg, msg ^ 1));
        // Not UCXX's checksum either (`wire::detect` must still read us as UCX-Py).
        assert_ne!(marked_ctrl_tag(msg), hash64bits(&[msg]));
    }

    #[test]
    fn hello_round_trips_and_refuses_other_versions() {
        let h = Hello { pid: 4242, pid_ns: 0xeffff, boot_id: [7; 16], probe: 0x7fff_0000_1000, nonce: 99 };
        let bytes = h.encode();
        assert_eq!(Hello::decode(&bytes).unwrap(), h);
        let mut other = bytes;
        other[0] = 2;
        assert!(Hello::decode(&other).is_err());
        assert!(Hello::decode(&bytes[..47]).is_err());
    }

    #[test]
    fn descriptors_are_recognised_only_whole_and_checked() {
        let d = Descriptor { seq: 3, addr: 0x7f00_0000_0000, len: 1 << 20, guard_addr: 0x5555_0000, guard: 77, pid: 9 };
        let bytes = d.encode();
        assert_eq!(Descriptor::recognise(&bytes), Some(d));
        for at in 0..Descriptor::LEN {
            let mut bad = bytes;
            bad[at] ^= 1;
            if (52..56).contains(&at) {
                continue; // padding
            }
            assert_eq!(Descriptor::recognise(&bad), None, "a flipped byte {at} passed");
        }
        assert_eq!(Descriptor::recognise(&bytes[..63]), None);
        assert_eq!(Descriptor::recognise(&[0u8; 64]), None);
    }

    #[test]
    fn answers_and_verdicts_round_trip() {
        for status in [AckStatus::Taken, AckStatus::TooLarge, AckStatus::Unreadable] {
            let a = Ack { seq: 5, status };
            assert_eq!(Ack::decode(&a.encode()).unwrap(), a);
        }
        let mut bad = Ack { seq: 1, status: AckStatus::Taken }.encode();
        bad[8] = 9;
        assert!(Ack::decode(&bad).is_err());
        assert_eq!(Verdict::decode(&Verdict(true).encode()).unwrap(), Verdict(true));
        assert_eq!(Verdict::decode(&[0]).unwrap(), Verdict(false));
    }
}

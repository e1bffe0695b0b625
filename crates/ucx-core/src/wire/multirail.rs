//! Multi-rail messages (ucx-async `multirail`): the hello that tells the accepting side which
//! group and rail a new endpoint belongs to, the header that announces how one message is
//! split over the rails, and the tags its parts travel on. Ours alone (no UCX-Py or UCXX
//! counterpart), so a magic and a version lead each message.
//!
//! | message | fields (little-endian) |
//! |---|---|
//! | hello | `b"UCXR"`, `version: u16 = 1`, `group: u64`, `rail: u16`, `rails: u16` (18 bytes) |
//! | header | `b"UCXR"`, `version: u16 = 1`, `rails: u16`, `stages: u16`, `total: u64`, then each rail's share `u64` (`18 + 8 × rails` bytes) |
//!
//! A header's size depends only on the group's rail count, so a receiver (UCX-Py's `recv`
//! included, which takes exact sizes) knows it. Each rail's share is cut into `stages` chunks
//! by [`stage_lengths`]; the chunks lie in the buffer back to back, rail 0's stages first
//! ([`Header::layout`] lists them, for both sides).
//! Part 0 of a message is its header (on rail 0); part `s + 1` is stage `s` (on each rail).
//! [`part_tag`] derives each part's tag from the rail endpoint's own tag. [`shares`] is how a
//! sender cuts a message by weights (and [`ratio_weights`] the seed's ratio into weights), here
//! so that every language cuts it the same way.

use super::WireError;

const MAGIC: &[u8; 4] = b"UCXR";
const VERSION: u16 = 1;
const HEAD: usize = 6;

/// The most rails a group may have.
pub const MAX_RAILS: u16 = 64;
/// The most pipeline stages per rail.
pub const MAX_STAGES: u16 = 256;
/// A hello's size in bytes.
pub const HELLO_LEN: usize = HEAD + 12;

/// A rail's introduction to the accepting side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hello {
    /// The group's random id, the same on each of its rails.
    pub group: u64,
    /// Which rail this endpoint is, from 0.
    pub rail: u16,
    /// How many rails the group has.
    pub rails: u16,
}

impl Hello {
    /// The message's bytes.
    pub fn encode(&self) -> [u8; HELLO_LEN] {
        let mut out = [0u8; HELLO_LEN];
        out[..4].copy_from_slice(MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[6..14].copy_from_slice(&self.group.to_le_bytes());
        out[14..16].copy_from_slice(&self.rail.to_le_bytes());
        out[16..18].copy_from_slice(&self.rails.to_le_bytes());
        out
    }

    /// Decodes a hello; `rail < rails <= MAX_RAILS` is checked.
    pub fn decode(bytes: &[u8]) -> Result<Hello, WireError> {
        const WHAT: &str = "multi-rail hello";
        if bytes.len() != HELLO_LEN {
            return Err(WireError::BadLength { what: WHAT, expected: HELLO_LEN, got: bytes.len() });
        }
        let body = check_head(WHAT, bytes)?;
        let hello = Hello { group: u64_at(body, 0), rail: u16_at(body, 8), rails: u16_at(body, 10) };
        if hello.rails == 0 || hello.rails > MAX_RAILS || hello.rail >= hello.rails {
            return Err(WireError::Malformed { what: WHAT, why: "rail index or rail count out of range" });
        }
        Ok(hello)
    }
}

/// How one message is split: its size, each rail's share and the chunks per rail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The message's size in bytes (the sum of the shares).
    pub total: u64,
    /// Chunks per rail.
    pub stages: u16,
    /// Each rail's share in bytes, rail 0 first (as many as the group has rails).
    pub shares: Vec<u64>,
}

impl Header {
    /// The size of a header for `rails` rails.
    pub fn len_for(rails: u16) -> usize {
        HEAD + 12 + 8 * usize::from(rails)
    }

    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(Header::len_for(self.shares.len() as u16));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&VERSION.to_le_bytes());
        out.extend_from_slice(&(self.shares.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.stages.to_le_bytes());
        out.extend_from_slice(&self.total.to_le_bytes());
        for c in &self.shares {
            out.extend_from_slice(&c.to_le_bytes());
        }
        out
    }

    /// Decodes a header. Checked: the counts are in range, the length matches them, and the
    /// shares add up to `total` without overflow.
    pub fn decode(bytes: &[u8]) -> Result<Header, WireError> {
        const WHAT: &str = "multi-rail header";
        let body = check_head(WHAT, bytes)?;
        if body.len() < 12 {
            return Err(WireError::Malformed { what: WHAT, why: "cut short" });
        }
        let (rails, stages, total) = (u16_at(body, 0), u16_at(body, 2), u64_at(body, 4));
        if rails == 0 || rails > MAX_RAILS || stages == 0 || stages > MAX_STAGES {
            return Err(WireError::Malformed { what: WHAT, why: "rail or stage count out of range" });
        }
        let expected = Header::len_for(rails);
        if bytes.len() != expected {
            return Err(WireError::BadLength { what: WHAT, expected, got: bytes.len() });
        }
        let shares: Vec<u64> = body[12..].chunks_exact(8).map(|c| u64_at(c, 0)).collect();
        let sum = shares.iter().try_fold(0u64, |acc, &c| acc.checked_add(c));
        if sum != Some(total) {
            return Err(WireError::Malformed { what: WHAT, why: "shares do not add up to the total" });
        }
        Ok(Header { total, stages, shares })
    }

    /// Every chunk: its rail, its part (stage + 1, as [`part_tag`] takes it) and where it lies
    /// in the message, rail by rail and stage by stage, back to back. Both sides of every
    /// language walk this one layout.
    pub fn layout(&self) -> Vec<Chunk> {
        let mut offset = 0;
        let mut out = Vec::with_capacity(self.shares.len() * usize::from(self.stages));
        for (rail, &share) in self.shares.iter().enumerate() {
            for (stage, len) in stage_lengths(share, self.stages).enumerate() {
                out.push(Chunk { rail, part: stage as u16 + 1, offset, len });
                offset += len;
            }
        }
        out
    }
}

/// One chunk of a message (see [`Header::layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    /// The rail that carries it.
    pub rail: usize,
    /// Its part number: stage + 1 (part 0 is the header).
    pub part: u16,
    /// Where it starts in the message.
    pub offset: u64,
    /// Its length (0: nothing is sent for it).
    pub len: u64,
}

/// A rail's share cut into `stages` chunks: equal, the first `share % stages` one byte longer.
pub fn stage_lengths(share: u64, stages: u16) -> impl Iterator<Item = u64> {
    let k = u64::from(stages.max(1));
    (0..k).map(move |i| share / k + u64::from(i < share % k))
}

/// The seed's split ratio as weights: `ratio` of the bytes over the peer rails (rails 1 and
/// up), shared equally, and the rest over rail 0. `None` unless `ratio` is in [0, 1] (and 0
/// with one rail).
pub fn ratio_weights(rails: usize, ratio: f64) -> Option<Vec<f64>> {
    if !(0.0..=1.0).contains(&ratio) || (rails == 1 && ratio != 0.0) {
        return None;
    }
    let mut w = vec![1.0 - ratio];
    w.extend(std::iter::repeat_n(ratio / (rails.max(2) - 1) as f64, rails.saturating_sub(1)));
    Some(w)
}

/// `total` bytes cut by `weights` (finite, non-negative, not all zero: the caller checks):
/// each rail's floor share, and what rounding leaves over to the heaviest rail (the first
/// of equals). The shares add up to `total`.
pub fn shares(weights: &[f64], total: u64) -> Vec<u64> {
    let sum: f64 = weights.iter().sum();
    let mut out: Vec<u64> = weights.iter().map(|w| ((total as f64) * (w / sum)).floor() as u64).collect();
    let assigned: u64 = out.iter().sum();
    let heaviest = (0..weights.len()).fold(0, |best, i| if weights[i] > weights[best] { i } else { best });
    if let Some(h) = out.get_mut(heaviest) {
        // Float rounding can land a few bytes either side of `total`; the heaviest rail's
        // floor share exceeds that error whenever it is positive.
        *h = (*h + total).saturating_sub(assigned);
    }
    out
}

/// The tag of part `part` (0: the header, `s + 1`: stage `s`) of message `message` on a rail
/// whose endpoint sends on `base` (the endpoint's own message tag, unique per endpoint). A
/// bijective mix keeps the parts of different messages apart and away from `base` itself.
pub fn part_tag(base: u64, message: u64, part: u16) -> u64 {
    base ^ splitmix64(message.wrapping_mul(u64::from(MAX_STAGES) + 2).wrapping_add(u64::from(part) + 1))
}

fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn check_head<'a>(what: &'static str, bytes: &'a [u8]) -> Result<&'a [u8], WireError> {
    if bytes.len() < HEAD || &bytes[..4] != MAGIC {
        return Err(WireError::Malformed { what, why: "no UCXR magic" });
    }
    if bytes[4..6] != VERSION.to_le_bytes() {
        return Err(WireError::Malformed { what, why: "unknown version" });
    }
    Ok(&bytes[HEAD..])
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut v = [0u8; 8];
    v.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_vector_and_checks() {
        let h = Hello { group: 0x0102_0304_0506_0708, rail: 1, rails: 2 };
        let bytes = h.encode();
        assert_eq!(&bytes[..], b"UCXR\x01\x00\x08\x07\x06\x05\x04\x03\x02\x01\x01\x00\x02\x00");
        assert_eq!(Hello::decode(&bytes), Ok(h));
        assert!(Hello::decode(&Hello { group: 1, rail: 2, rails: 2 }.encode()).is_err());
        assert!(Hello::decode(&Hello { group: 1, rail: 0, rails: MAX_RAILS + 1 }.encode()).is_err());
        assert!(Hello::decode(&bytes[..17]).is_err());
    }

    #[test]
    fn header_round_trip_and_checks() {
        let h = Header { total: 10, stages: 2, shares: vec![5, 5] };
        let bytes = h.encode();
        assert_eq!(bytes.len(), Header::len_for(2));
        assert_eq!(&bytes[..10], b"UCXR\x01\x00\x02\x00\x02\x00");
        assert_eq!(Header::decode(&bytes), Ok(h.clone()));
        let chunk = |rail, part, offset, len| Chunk { rail, part, offset, len };
        assert_eq!(h.layout(), vec![chunk(0, 1, 0, 3), chunk(0, 2, 3, 2), chunk(1, 1, 5, 3), chunk(1, 2, 8, 2)]);
        let lie = Header { total: 11, ..h.clone() }.encode();
        assert!(Header::decode(&lie).is_err(), "shares that do not add up");
        let overflow = Header { total: 1, stages: 2, shares: vec![u64::MAX, 2] }.encode();
        assert!(Header::decode(&overflow).is_err());
        assert!(Header::decode(&bytes[..bytes.len() - 1]).is_err());
        let none = Header { total: 0, stages: 1, shares: vec![] }.encode();
        assert!(Header::decode(&none).is_err());
        let no_stages = Header { total: 0, stages: 0, shares: vec![0] }.encode();
        assert!(Header::decode(&no_stages).is_err());
    }

    #[test]
    fn shares_add_up_and_follow_the_weights() {
        for total in [0u64, 1, 7, 1000, (256 << 20) + 13] {
            for w in
                [&[1.0][..], &[1.0, 1.0, 1.0], &[0.25, 0.25, 0.25, 0.25], &[0.5, 0.5], &[0.0, 1.0], &[1.0, 2.0, 3.0]]
            {
                let s = shares(w, total);
                assert_eq!(s.iter().sum::<u64>(), total, "{w:?} {total}");
                assert_eq!(s.len(), w.len());
            }
        }
        assert_eq!(shares(&[0.25, 0.25, 0.25, 0.25], 4000), vec![1000; 4]);
        assert_eq!(shares(&[1.0, 0.0], 10), vec![10, 0]);
        assert_eq!(stage_lengths(10, 3).collect::<Vec<_>>(), vec![4, 3, 3]);
        assert_eq!(ratio_weights(4, 0.75), Some(vec![0.25, 0.25, 0.25, 0.25]));
        assert_eq!(ratio_weights(1, 0.0), Some(vec![1.0]));
        assert_eq!(ratio_weights(1, 0.5), None);
        assert_eq!(ratio_weights(2, 1.5), None);
    }

    #[test]
    fn part_tags_differ_by_message_and_part() {
        let base = 0xdead_beef_0000_0001;
        let mut seen = std::collections::HashSet::new();
        for m in 0..100 {
            for p in 0..=MAX_STAGES {
                assert!(seen.insert(part_tag(base, m, p)));
            }
        }
        assert!(!seen.contains(&base));
    }
}

//! Peer-info handshakes exchanged over the UCP stream API right after an
//! endpoint is created, and detection of which flavour a listener speaks.
//!
//! The listener sends its peer info first and then receives the client's, so
//! a client can read the listener's bytes before committing to a format.

use super::{exact, hash64bits, le_u64, WireError};

/// Which peer-info format a peer speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Flavour {
    /// UCX-Py: 24 bytes, `msg_tag`, `ctrl_tag`, checksum ([`PeerInfo`]).
    UcxPy,
    /// UCXX: 16 bytes, `msg_tag`, checksum ([`UcxxPeerInfo`]).
    Ucxx,
}

impl Flavour {
    /// Size in bytes of this flavour's peer-info message.
    pub const fn handshake_len(self) -> usize {
        match self {
            Self::UcxPy => PeerInfo::LEN,
            Self::Ucxx => UcxxPeerInfo::LEN,
        }
    }
}

/// How many bytes of the listener's peer info [`detect`] needs: the shorter
/// (UCXX) handshake, which is also a prefix of the UCX-Py one.
pub const DETECT_LEN: usize = UcxxPeerInfo::LEN;

/// Guesses the listener's flavour from the first [`DETECT_LEN`] bytes it sent.
///
/// Returns [`Flavour::Ucxx`] iff bytes `8..16` are `hash64bits(msg_tag)` of
/// bytes `0..8` (i.e. a valid UCXX handshake); otherwise [`Flavour::UcxPy`],
/// and the caller must read `PeerInfo::LEN - DETECT_LEN` more bytes and
/// decode them as a [`PeerInfo`] (whose own checksum then validates them).
///
/// A UCX-Py handshake is misread as UCXX only if its `ctrl_tag` happens to
/// equal `hash64bits(msg_tag)`. UCX-Py draws both tags from SHA-1 over a
/// random seed, so that chance is about 2^-64 per connection.
pub fn detect(first16: &[u8; DETECT_LEN]) -> Flavour {
    if le_u64(first16, 8) == hash64bits(&[le_u64(first16, 0)]) {
        Flavour::Ucxx
    } else {
        Flavour::UcxPy
    }
}

/// UCX-Py's peer info: the tags the sender receives on, so the other side
/// can address it. Wire form (`struct "QQQ"`, LE): `msg_tag`, `ctrl_tag`,
/// `hash64bits(msg_tag, ctrl_tag)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerInfo {
    /// Tag the sender receives data messages on.
    pub msg_tag: u64,
    /// Tag the sender receives control messages ([`super::CtrlMsg`]) on.
    pub ctrl_tag: u64,
}

impl PeerInfo {
    /// Size of the encoded message in bytes.
    pub const LEN: usize = 24;

    /// The checksum field for these tags: `hash64bits(msg_tag, ctrl_tag)`.
    pub fn checksum(&self) -> u64 {
        hash64bits(&[self.msg_tag, self.ctrl_tag])
    }

    /// Encodes the message, checksum included.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.msg_tag.to_le_bytes());
        out[8..16].copy_from_slice(&self.ctrl_tag.to_le_bytes());
        out[16..24].copy_from_slice(&self.checksum().to_le_bytes());
        out
    }

    /// Decodes a received message; it must be exactly [`Self::LEN`] bytes
    /// and carry a matching checksum.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let bytes: [u8; Self::LEN] = exact("UCX-Py peer info", bytes)?;
        let info = Self { msg_tag: le_u64(&bytes, 0), ctrl_tag: le_u64(&bytes, 8) };
        let (expected, got) = (info.checksum(), le_u64(&bytes, 16));
        if expected != got {
            return Err(WireError::ChecksumInvalid { expected, got });
        }
        Ok(info)
    }
}

/// UCXX's peer info: UCXX has no control-message tag, so only `msg_tag` is
/// sent. Wire form (`struct "QQ"`, LE): `msg_tag`, `hash64bits(msg_tag)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UcxxPeerInfo {
    /// Tag the sender receives data messages on.
    pub msg_tag: u64,
}

impl UcxxPeerInfo {
    /// Size of the encoded message in bytes.
    pub const LEN: usize = 16;

    /// The checksum field for this tag: `hash64bits(msg_tag)`, a one-tuple.
    pub fn checksum(&self) -> u64 {
        hash64bits(&[self.msg_tag])
    }

    /// Encodes the message, checksum included.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.msg_tag.to_le_bytes());
        out[8..16].copy_from_slice(&self.checksum().to_le_bytes());
        out
    }

    /// Decodes a received message; it must be exactly [`Self::LEN`] bytes
    /// and carry a matching checksum.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let bytes: [u8; Self::LEN] = exact("UCXX peer info", bytes)?;
        let info = Self { msg_tag: le_u64(&bytes, 0) };
        let (expected, got) = (info.checksum(), le_u64(&bytes, 8));
        if expected != got {
            return Err(WireError::ChecksumInvalid { expected, got });
        }
        Ok(info)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSG: u64 = 0x0123_4567_89ab_cdef;
    const CTRL: u64 = 0xfedc_ba98_7654_3210;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
    }

    // python3 -c 'import hashlib,struct;h=lambda *a:int(hashlib.sha1(repr(a).encode()).hexdigest()[:16],16);m,c=0x0123456789abcdef,0xfedcba9876543210;print(repr((m,c)),hex(h(m,c)),struct.pack("<QQQ",m,c,h(m,c)).hex())'
    // -> (81985529216486895, 18364758544493064720) 0xa2b220f5da2f1831
    //    efcdab89674523011032547698badcfe31182fdaf520b2a2
    const UCXPY_VECTOR: &str = "efcdab89674523011032547698badcfe31182fdaf520b2a2";

    // python3 -c 'import hashlib,struct;h=lambda *a:int(hashlib.sha1(repr(a).encode()).hexdigest()[:16],16);m=0x0123456789abcdef;print(hex(h(m)),struct.pack("<QQ",m,h(m)).hex())'
    // -> 0x973a4d2a13b2c00d efcdab89674523010dc0b2132a4d3a97
    const UCXX_VECTOR: &str = "efcdab89674523010dc0b2132a4d3a97";

    #[test]
    fn ucxpy_vector() {
        let info = PeerInfo { msg_tag: MSG, ctrl_tag: CTRL };
        assert_eq!(info.checksum(), 0xa2b2_20f5_da2f_1831);
        assert_eq!(info.encode().to_vec(), unhex(UCXPY_VECTOR));
        assert_eq!(PeerInfo::decode(&unhex(UCXPY_VECTOR)), Ok(info));
    }

    #[test]
    fn ucxx_vector() {
        let info = UcxxPeerInfo { msg_tag: MSG };
        assert_eq!(info.checksum(), 0x973a_4d2a_13b2_c00d);
        assert_eq!(info.encode().to_vec(), unhex(UCXX_VECTOR));
        assert_eq!(UcxxPeerInfo::decode(&unhex(UCXX_VECTOR)), Ok(info));
    }

    #[test]
    fn round_trips() {
        for (msg_tag, ctrl_tag) in [(0, 0), (u64::MAX, 1), (42, u64::MAX)] {
            let info = PeerInfo { msg_tag, ctrl_tag };
            assert_eq!(PeerInfo::decode(&info.encode()), Ok(info));
            let info = UcxxPeerInfo { msg_tag };
            assert_eq!(UcxxPeerInfo::decode(&info.encode()), Ok(info));
        }
    }

    #[test]
    fn wrong_length_is_rejected() {
        let long = unhex(UCXPY_VECTOR);
        let err = PeerInfo::decode(&long[..23]).unwrap_err();
        assert_eq!(err, WireError::BadLength { what: "UCX-Py peer info", expected: 24, got: 23 });
        assert_eq!(err.to_string(), "UCX-Py peer info: expected 24 bytes, got 23");

        let err = UcxxPeerInfo::decode(&long).unwrap_err();
        assert_eq!(err.to_string(), "UCXX peer info: expected 16 bytes, got 24");
    }

    #[test]
    fn bad_checksum_is_rejected_with_ucxpy_text() {
        let mut bytes = unhex(UCXPY_VECTOR);
        bytes[16..24].copy_from_slice(&0x1234u64.to_le_bytes());
        let err = PeerInfo::decode(&bytes).unwrap_err();
        assert_eq!(err, WireError::ChecksumInvalid { expected: 0xa2b2_20f5_da2f_1831, got: 0x1234 });
        assert_eq!(err.to_string(), "Checksum invalid! 0xa2b220f5da2f1831 != 0x1234");

        // A corrupted tag is caught the same way; the receiver's recomputed
        // checksum is reported as "expected".
        let mut bytes = unhex(UCXX_VECTOR);
        bytes[0] ^= 1;
        let err = UcxxPeerInfo::decode(&bytes).unwrap_err();
        assert_eq!(err, WireError::ChecksumInvalid { expected: hash64bits(&[MSG ^ 1]), got: 0x973a_4d2a_13b2_c00d });
    }

    #[test]
    fn detects_ucxx() {
        let first16: [u8; DETECT_LEN] = UcxxPeerInfo { msg_tag: MSG }.encode();
        assert_eq!(detect(&first16), Flavour::Ucxx);
        assert_eq!(Flavour::Ucxx.handshake_len(), 16);
    }

    #[test]
    fn detects_ucxpy_from_its_first_16_bytes() {
        let full = PeerInfo { msg_tag: MSG, ctrl_tag: CTRL }.encode();
        let mut first16 = [0u8; DETECT_LEN];
        first16.copy_from_slice(&full[..DETECT_LEN]);
        assert_eq!(detect(&first16), Flavour::UcxPy);
        assert_eq!(Flavour::UcxPy.handshake_len(), 24);

        // The remaining 8 bytes complete a valid UCX-Py handshake.
        let mut rest = first16.to_vec();
        rest.extend_from_slice(&full[DETECT_LEN..]);
        assert_eq!(PeerInfo::decode(&rest), Ok(PeerInfo { msg_tag: MSG, ctrl_tag: CTRL }));
    }

    #[test]
    fn detection_false_positive_is_exactly_the_documented_case() {
        // A UCX-Py peer whose ctrl_tag equals hash64bits(msg_tag) is
        // indistinguishable from UCXX by its first 16 bytes.
        let full = PeerInfo { msg_tag: MSG, ctrl_tag: hash64bits(&[MSG]) }.encode();
        let mut first16 = [0u8; DETECT_LEN];
        first16.copy_from_slice(&full[..DETECT_LEN]);
        assert_eq!(detect(&first16), Flavour::Ucxx);
    }
}

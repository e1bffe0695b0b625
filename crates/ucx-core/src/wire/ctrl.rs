//! UCX-Py control message, sent with tag-send on the peer's `ctrl_tag` to ask
//! it to close the endpoint after it has received a given number of messages
//! (so in-flight messages are not lost by an early close).

use super::{exact, le_u64, WireError};

/// A UCX-Py control message. Wire form (`struct "QQ"`, LE): `opcode`,
/// `close_after_n_recv`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CtrlMsg {
    /// What to do; [`CtrlMsg::OPCODE_SHUTDOWN`] is the only opcode UCX-Py
    /// defines.
    pub opcode: u64,
    /// For shutdown: how many messages the receiver should have received
    /// (counted from endpoint creation) before closing.
    pub close_after_n_recv: u64,
}

impl CtrlMsg {
    /// Size of the encoded message in bytes.
    pub const LEN: usize = 16;

    /// Opcode asking the peer to close after `close_after_n_recv` messages.
    pub const OPCODE_SHUTDOWN: u64 = 1;

    /// A shutdown request: the sender has sent `close_after_n_recv` messages.
    pub const fn shutdown(close_after_n_recv: u64) -> Self {
        Self { opcode: Self::OPCODE_SHUTDOWN, close_after_n_recv }
    }

    /// Whether this is a shutdown request. Any other opcode is unknown; the
    /// caller reports it as UCX-Py does ("Received unknown control opcode: N").
    pub const fn is_shutdown(&self) -> bool {
        self.opcode == Self::OPCODE_SHUTDOWN
    }

    /// Encodes the message.
    pub fn encode(&self) -> [u8; Self::LEN] {
        let mut out = [0u8; Self::LEN];
        out[0..8].copy_from_slice(&self.opcode.to_le_bytes());
        out[8..16].copy_from_slice(&self.close_after_n_recv.to_le_bytes());
        out
    }

    /// Decodes a received message, which must be exactly [`Self::LEN`] bytes.
    /// Unknown opcodes decode successfully: rejecting them is the caller's
    /// policy, not a framing error.
    pub fn decode(bytes: &[u8]) -> Result<Self, WireError> {
        let bytes: [u8; Self::LEN] = exact("control message", bytes)?;
        Ok(Self { opcode: le_u64(&bytes, 0), close_after_n_recv: le_u64(&bytes, 8) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // python3 -c 'import struct;print(struct.pack("<QQ",1,7).hex())'
    // -> 01000000000000000700000000000000
    #[test]
    fn shutdown_vector() {
        let msg = CtrlMsg::shutdown(7);
        assert!(msg.is_shutdown());
        let bytes = msg.encode();
        assert_eq!(bytes, [1, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(CtrlMsg::decode(&bytes), Ok(msg));
    }

    #[test]
    fn unknown_opcode_decodes() {
        let msg = CtrlMsg { opcode: 99, close_after_n_recv: u64::MAX };
        let decoded = CtrlMsg::decode(&msg.encode()).unwrap();
        assert_eq!(decoded, msg);
        assert!(!decoded.is_shutdown());
    }

    #[test]
    fn round_trips() {
        for (opcode, n) in [(0, 0), (1, 1), (u64::MAX, 0x0102_0304_0506_0708)] {
            let msg = CtrlMsg { opcode, close_after_n_recv: n };
            assert_eq!(CtrlMsg::decode(&msg.encode()), Ok(msg));
        }
    }

    #[test]
    fn wrong_length_is_rejected() {
        let err = CtrlMsg::decode(&[0; 17]).unwrap_err();
        assert_eq!(err, WireError::BadLength { what: "control message", expected: 16, got: 17 });
        assert_eq!(err.to_string(), "control message: expected 16 bytes, got 17");
        assert!(CtrlMsg::decode(&[]).is_err());
    }
}

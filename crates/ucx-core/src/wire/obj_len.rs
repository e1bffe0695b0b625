//! UCX-Py `send_obj`/`recv_obj` framing: the object's size is sent first as
//! an 8-byte `u64` (`array("Q")`, native = LE), so the receiver can allocate
//! the buffer before the payload arrives.

use super::{exact, WireError};

/// Size of the length prefix in bytes.
pub const LEN: usize = 8;

/// Encodes an object size as the length prefix (`u64`, LE).
pub fn encode(n: u64) -> [u8; LEN] {
    n.to_le_bytes()
}

/// Decodes the length prefix; it must be exactly [`LEN`] bytes.
pub fn decode(bytes: &[u8]) -> Result<u64, WireError> {
    exact("object length prefix", bytes).map(u64::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    // python3 -c 'import array;print(array.array("Q",[258]).tobytes().hex())'
    // -> 0201000000000000
    #[test]
    fn vector() {
        assert_eq!(encode(258), [2, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(decode(&[2, 1, 0, 0, 0, 0, 0, 0]), Ok(258));
    }

    #[test]
    fn round_trips() {
        for n in [0, 1, 1 << 32, u64::MAX] {
            assert_eq!(decode(&encode(n)), Ok(n));
        }
    }

    #[test]
    fn wrong_length_is_rejected() {
        let err = decode(&[0; 4]).unwrap_err();
        assert_eq!(err, WireError::BadLength { what: "object length prefix", expected: 8, got: 4 });
        assert_eq!(err.to_string(), "object length prefix: expected 8 bytes, got 4");
    }
}

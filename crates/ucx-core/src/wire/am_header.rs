//! UCX-Py active-message header: the sender's buffer memory type as a C
//! `int`, so the receiver knows which allocator to use for the payload.
//!
//! The value is a raw `ucs_memory_type_t` (`ucs/memory/memory_type.h`:
//! HOST = 0, CUDA = 1, CUDA_MANAGED = 2, ROCM = 3, ROCM_MANAGED = 4, RDMA = 5,
//! ZE_HOST = 6, ZE_DEVICE = 7, ZE_MANAGED = 8, GAUDI = 9, UNKNOWN = 10).
//! UCX-Py itself only sends HOST or CUDA. Mapping to a typed enum is left to
//! the memory-type module, so unknown values pass through unchanged.

use super::{exact, WireError};

/// The active-message handler id UCX-Py sends to and receives on.
pub const UCXPY_AM_ID: u16 = 0;

/// Size of the header in bytes (`sizeof(int)`).
pub const LEN: usize = 4;

/// Encodes a raw `ucs_memory_type_t` value as the header (`i32`, LE).
pub fn encode(mem_type_raw: i32) -> [u8; LEN] {
    mem_type_raw.to_le_bytes()
}

/// Decodes the header to a raw `ucs_memory_type_t` value. The header must be
/// exactly [`LEN`] bytes (UCX-Py reads it unchecked; a strict length catches
/// peers that use a different header layout, such as UCXX's).
pub fn decode(bytes: &[u8]) -> Result<i32, WireError> {
    exact("active-message header", bytes).map(i32::from_le_bytes)
}

/// The memory type (raw `ucs_memory_type_t`) UCX-Py's receiver puts a message's data in:
/// eager data always arrives in host memory (UCX has copied it already), rendezvous data goes
/// straight into memory of the type the header names. The header must decode either way: a
/// message without UCX-Py's header is not UCX-Py's. Both receivers (ucx-async's `am_recv`
/// and the Python bindings') decide with this.
pub fn receive_memory_type(header: &[u8], rendezvous: bool) -> Result<i32, WireError> {
    let sent_from = decode(header)?;
    Ok(if rendezvous { sent_from } else { HOST })
}

/// `UCS_MEMORY_TYPE_HOST`.
const HOST: i32 = 0;

#[cfg(test)]
mod tests {
    use super::*;

    // Values from libucx's ucs/memory/memory_type.h (enum ucs_memory_type).
    const CUDA: i32 = 1;
    const ZE_MANAGED: i32 = 8;

    // python3 -c 'import struct;print(struct.pack("<i",1).hex(),struct.pack("<i",-1).hex())'
    // -> 01000000 ffffffff
    #[test]
    fn vectors() {
        assert_eq!(encode(HOST), [0, 0, 0, 0]);
        assert_eq!(encode(CUDA), [1, 0, 0, 0]);
        assert_eq!(encode(-1), [0xff; 4]);
        assert_eq!(decode(&[1, 0, 0, 0]), Ok(CUDA));
    }

    #[test]
    fn eager_data_is_received_in_host_memory_rendezvous_data_in_the_senders_type() {
        assert_eq!(receive_memory_type(&encode(CUDA), false), Ok(HOST));
        assert_eq!(receive_memory_type(&encode(CUDA), true), Ok(CUDA));
        assert_eq!(receive_memory_type(&encode(HOST), true), Ok(HOST));
        assert!(receive_memory_type(&[1, 0], false).is_err(), "a bad header is refused even for eager data");
    }

    #[test]
    fn round_trips() {
        for v in [HOST, CUDA, ZE_MANAGED, 10, -1, i32::MIN, i32::MAX] {
            assert_eq!(decode(&encode(v)), Ok(v));
        }
    }

    #[test]
    fn wrong_length_is_rejected() {
        let err = decode(&[0; 8]).unwrap_err();
        assert_eq!(err, WireError::BadLength { what: "active-message header", expected: 4, got: 8 });
        assert_eq!(err.to_string(), "active-message header: expected 4 bytes, got 8");
        assert!(decode(&[]).is_err());
    }
}

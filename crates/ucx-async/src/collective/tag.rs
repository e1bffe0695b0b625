//! The communicator's tag layout, without I/O. UCX's receive has no source argument and does
//! not order messages that share a tag, so every message's tag names its source and its place:
//!
//! ```text
//! bits 63..32  user tag  (below 2^31 for the caller; 2^31 and up: the communicator's own
//!                         operations, numbered in the order every rank calls them)
//! bits 31..16  source rank  (so at most 65,536 ranks)
//! bits 15..0   batch        (a part of a message, or a phase of an operation)
//! ```
//!
//! A value that does not fit is an error, never a silently aliased tag.
use crate::{Error, Result};

/// The largest world size the layout can name.
pub const MAX_RANKS: usize = 1 << 16;
/// The largest user tag a caller may use; larger ones are the communicator's own.
pub const MAX_USER_TAG: u32 = (1 << 31) - 1;
/// The most batches (parts or phases) one message or operation can have.
pub const MAX_BATCHES: usize = 1 << 16;

const OWN: u32 = 1 << 31;

/// The tag of batch `batch` of a message from rank `source` under the 32-bit `user` field.
fn pack(user: u32, source: usize, batch: usize, op: &'static str) -> Result<u64> {
    if source >= MAX_RANKS {
        return Err(invalid(op, format!("rank {source} does not fit the tag layout (at most {MAX_RANKS} ranks)")));
    }
    if batch >= MAX_BATCHES {
        return Err(invalid(op, format!("batch {batch} does not fit the tag layout (at most {MAX_BATCHES} batches)")));
    }
    Ok(((user as u64) << 32) | ((source as u64) << 16) | batch as u64)
}

/// The tag of a caller's point-to-point message with tag `user` from rank `source`.
pub(crate) fn user(user: u32, source: usize, op: &'static str) -> Result<u64> {
    if user > MAX_USER_TAG {
        return Err(invalid(
            op,
            format!("tag {user:#x} is above {MAX_USER_TAG:#x}; larger tags are the communicator's own"),
        ));
    }
    pack(user, source, 0, op)
}

/// The tag of batch `batch` of the communicator's operation number `seq` from rank `source`.
pub(crate) fn own(seq: u32, source: usize, batch: usize, op: &'static str) -> Result<u64> {
    pack(OWN | (seq & !OWN), source, batch, op)
}

pub(crate) fn invalid(op: &'static str, detail: String) -> Error {
    Error::InvalidArgument { op, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_land_where_the_layout_says() {
        assert_eq!(user(0x1234, 3, "t").unwrap(), 0x0000_1234_0003_0000);
        assert_eq!(own(5, 65_535, 65_535, "t").unwrap(), 0x8000_0005_ffff_ffff);
        assert_eq!(own(!OWN, 0, 1, "t").unwrap(), 0xffff_ffff_0000_0001);
    }

    #[test]
    fn user_and_own_tags_never_meet() {
        let u = user(MAX_USER_TAG, 1, "t").unwrap();
        let o = own(0, 1, 0, "t").unwrap();
        assert!(u >> 63 == 0 && o >> 63 == 1);
        // Operation numbers wrap within the communicator's half.
        assert_eq!(own(OWN | 7, 0, 0, "t").unwrap(), own(7, 0, 0, "t").unwrap());
    }

    #[test]
    fn values_that_do_not_fit_are_errors_naming_them() {
        let e = user(1 << 31, 0, "Communicator::send").unwrap_err().to_string();
        assert!(e.contains("Communicator::send") && e.contains("0x80000000"), "{e}");
        let e = user(1, MAX_RANKS, "Communicator::send").unwrap_err().to_string();
        assert!(e.contains("rank 65536"), "{e}");
        let e = own(1, 0, MAX_BATCHES, "Communicator::alltoallv").unwrap_err().to_string();
        assert!(e.contains("batch 65536"), "{e}");
    }
}

//! The tag layout of our communicator (ucx-async `collective`, and the Python one through the
//! bindings). UCX's receive has no source argument and does not order messages from
//! different senders that share a tag, so every message's tag names its source and its
//! place:
//!
//! ```text
//! bits 63..32  user tag  (below 2^31 for the caller; 2^31 and up: the communicator's own
//!                         operations, numbered in the order every rank calls them)
//! bits 31..16  source rank  (so at most 65,536 ranks)
//! bits 15..0   batch        (a part of a message, or a phase of an operation)
//! ```
//!
//! A value that does not fit is an error, never a silently aliased tag.
use std::fmt;

/// The largest world size the layout can name.
pub const MAX_RANKS: usize = 1 << 16;
/// The largest user tag a caller may use; larger ones are the communicator's own.
pub const MAX_USER_TAG: u64 = (1 << 31) - 1;
/// The most batches (parts or phases) one message or operation can have.
pub const MAX_BATCHES: usize = 1 << 16;

const OWN: u32 = 1 << 31;

/// A value the layout cannot hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagError {
    /// A rank at or above [`MAX_RANKS`].
    Rank(usize),
    /// A batch at or above [`MAX_BATCHES`].
    Batch(usize),
    /// A user tag above [`MAX_USER_TAG`].
    UserTag(u64),
}

impl fmt::Display for TagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Rank(r) => write!(f, "rank {r} does not fit the tag layout (at most {MAX_RANKS} ranks)"),
            Self::Batch(b) => write!(f, "batch {b} does not fit the tag layout (at most {MAX_BATCHES} batches)"),
            Self::UserTag(t) => {
                write!(f, "tag {t:#x} is above {MAX_USER_TAG:#x}; larger tags are the communicator's own")
            }
        }
    }
}

impl std::error::Error for TagError {}

fn pack(user: u32, source: usize, batch: usize) -> Result<u64, TagError> {
    if source >= MAX_RANKS {
        return Err(TagError::Rank(source));
    }
    if batch >= MAX_BATCHES {
        return Err(TagError::Batch(batch));
    }
    Ok(((user as u64) << 32) | ((source as u64) << 16) | batch as u64)
}

/// The tag of a caller's point-to-point message with tag `user` from rank `source`.
pub fn user(user: u64, source: usize) -> Result<u64, TagError> {
    if user > MAX_USER_TAG {
        return Err(TagError::UserTag(user));
    }
    pack(user as u32, source, 0)
}

/// The tag of batch `batch` of the communicator's operation number `seq` (taken modulo 2^31)
/// from rank `source`.
pub fn own(seq: u32, source: usize, batch: usize) -> Result<u64, TagError> {
    pack(OWN | (seq & !OWN), source, batch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_land_where_the_layout_says() {
        assert_eq!(user(0x1234, 3), Ok(0x0000_1234_0003_0000));
        assert_eq!(own(5, 65_535, 65_535), Ok(0x8000_0005_ffff_ffff));
        assert_eq!(own(!OWN, 0, 1), Ok(0xffff_ffff_0000_0001));
    }

    #[test]
    fn user_and_own_tags_never_meet() {
        let u = user(MAX_USER_TAG, 1).unwrap();
        let o = own(0, 1, 0).unwrap();
        assert!(u >> 63 == 0 && o >> 63 == 1);
        // Operation numbers wrap within the communicator's half.
        assert_eq!(own(OWN | 7, 0, 0), own(7, 0, 0));
    }

    #[test]
    fn values_that_do_not_fit_are_errors_naming_them() {
        assert!(user(1 << 31, 0).unwrap_err().to_string().contains("0x80000000"));
        assert!(user(1, MAX_RANKS).unwrap_err().to_string().contains("rank 65536"));
        assert!(own(1, 0, MAX_BATCHES).unwrap_err().to_string().contains("batch 65536"));
    }
}

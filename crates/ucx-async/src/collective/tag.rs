//! The communicator's tags: ucx-core's layout (`wire::collective_tag`, shared with the Python
//! communicator), with its errors naming the operation.
use crate::core::wire::collective_tag;
use crate::{Error, Result};

pub use collective_tag::{MAX_BATCHES, MAX_RANKS, MAX_USER_TAG};

/// The tag of a caller's point-to-point message with tag `user` from rank `source`.
pub(crate) fn user(user: u32, source: usize, op: &'static str) -> Result<u64> {
    collective_tag::user(user.into(), source).map_err(|e| invalid(op, e.to_string()))
}

/// The tag of batch `batch` of the communicator's operation number `seq` from rank `source`.
pub(crate) fn own(seq: u32, source: usize, batch: usize, op: &'static str) -> Result<u64> {
    collective_tag::own(seq, source, batch).map_err(|e| invalid(op, e.to_string()))
}

pub(crate) fn invalid(op: &'static str, detail: String) -> Error {
    Error::InvalidArgument { op, detail }
}

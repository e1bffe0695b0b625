//! A worker's address: the opaque bytes UCX produces (`ucp_worker_get_address`), which a peer
//! uses to connect without a listener. Bytes from elsewhere become an address only through
//! [`WorkerAddress::from_bytes`], which checks them first (`wire::worker_address`): UCX parses
//! an address without a length and trusts it, so corrupt bytes would abort the process or make
//! UCX read past their end.
use crate::wire::worker_address::{self, AddressError};

/// Zero bytes kept after the address: UCX's transports read fixed-size structures from the
/// device and interface addresses without checking their lengths, so an address that is valid
/// but shorter than a transport expects is over-read into this padding instead of past the
/// allocation.
const PADDING: usize = 256;

/// An opaque UCP worker address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WorkerAddress {
    /// The address followed by [`PADDING`] zero bytes.
    padded: Box<[u8]>,
    len: usize,
}

impl WorkerAddress {
    /// Wraps bytes obtained from [`WorkerAddress::as_bytes`], possibly in another process,
    /// after checking that they are a whole address in a format UCX writes. Bytes that are
    /// not (truncated, corrupt, another version) are refused with the reason.
    pub fn from_bytes(bytes: &[u8]) -> Result<WorkerAddress, AddressError> {
        worker_address::validate(bytes)?;
        Ok(WorkerAddress::padded(bytes))
    }

    pub(crate) fn from_ucx(bytes: &[u8]) -> WorkerAddress {
        WorkerAddress::padded(bytes)
    }

    fn padded(bytes: &[u8]) -> WorkerAddress {
        let mut padded = Vec::with_capacity(bytes.len() + PADDING);
        padded.extend_from_slice(bytes);
        padded.resize(bytes.len() + PADDING, 0);
        WorkerAddress { padded: padded.into(), len: bytes.len() }
    }

    /// The address bytes, to send to a peer.
    pub fn as_bytes(&self) -> &[u8] {
        &self.padded[..self.len]
    }

    /// The address for UCX: the bytes, followed by the padding.
    pub(crate) fn as_ucx_ptr(&self) -> *const u8 {
        self.padded.as_ptr()
    }
}

impl From<AddressError> for crate::Error {
    fn from(e: AddressError) -> crate::Error {
        crate::Error::with_detail("WorkerAddress::from_bytes", crate::Status::InvalidAddr, e.to_string())
    }
}

impl std::fmt::Debug for WorkerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerAddress({} bytes)", self.len)
    }
}

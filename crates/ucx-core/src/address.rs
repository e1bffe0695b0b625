//! A worker's address: the opaque bytes UCX produces (`ucp_worker_get_address`), which a peer
//! uses to connect without a listener. It round-trips through any byte buffer, but turning
//! bytes back into an address is `unsafe`: UCX takes the address without a length and trusts
//! it, so a truncated or corrupt one makes UCX read past its end (seen under valgrind).

/// An opaque UCP worker address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WorkerAddress(Box<[u8]>);

impl WorkerAddress {
    /// Wraps bytes previously obtained from [`WorkerAddress::as_bytes`], possibly in another
    /// process.
    ///
    /// # Safety
    /// `bytes` must be a whole worker address produced by UCX (`ucp_worker_get_address`, i.e.
    /// [`crate::Worker::address`]) of a compatible UCX version, unmodified. UCX parses it
    /// without a length when an endpoint is created and does not validate it: a truncated or
    /// corrupt address makes it read out of bounds. Bytes from an untrusted peer need an
    /// authenticated channel first.
    pub unsafe fn from_bytes(bytes: impl Into<Box<[u8]>>) -> WorkerAddress {
        WorkerAddress(bytes.into())
    }

    pub(crate) fn from_ucx(bytes: Vec<u8>) -> WorkerAddress {
        WorkerAddress(bytes.into())
    }

    /// The address bytes, to send to a peer.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for WorkerAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WorkerAddress({} bytes)", self.0.len())
    }
}

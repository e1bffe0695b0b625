//! A worker's address: the opaque bytes UCX produces (`ucp_worker_get_address`), which a peer
//! uses to connect without a listener. It round-trips through any byte buffer.

/// An opaque UCP worker address.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct WorkerAddress(Box<[u8]>);

impl WorkerAddress {
    /// Wraps bytes previously obtained from [`WorkerAddress::as_bytes`] (possibly from another
    /// process). UCX validates them when an endpoint is created.
    pub fn from_bytes(bytes: impl Into<Box<[u8]>>) -> WorkerAddress {
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

//! What a failed connect says, naming the listener's address: no listener answered
//! ([`Error::Refused`]), or UCX cannot reach the address (`Status::Unreachable`, with the reason
//! where this side's transports are it). Everything else passes through.
use std::net::{Ipv4Addr, SocketAddr};

use ucx_core::Status;

use crate::error::Error;
use crate::worker::Worker;

/// The address an [`Error::Refused`] carries until [`named`] puts the listener's in: the
/// handshake, which makes it, does not know where it connected.
const NOT_YET_NAMED: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);

/// The error of the client's first handshake receive, which waits for the listener's first
/// bytes: a connection that fails before they arrive had no listener answering (UCX says
/// "reset" or "not connected" for a refused connection, "rejected" where the listener turned
/// it away). Other errors pass through.
pub(crate) fn unanswered(e: Error) -> Error {
    match e.status() {
        status @ (Status::ConnectionReset | Status::NotConnected | Status::Rejected)
            if matches!(e, Error::Ucx(_) | Error::PeerFailed { .. }) =>
        {
            Error::Refused { addr: NOT_YET_NAMED, status }
        }
        _ => e,
    }
}

/// A connect's error, naming `addr`: a refusal gets the address, and an unreachable
/// destination the address and, where this side's transports are the cause (see
/// `ucx_core::Context::unreachable_listener_hint`), why: UCX itself says only "Destination is
/// unreachable".
pub(crate) fn named(worker: &Worker, addr: SocketAddr, e: Error) -> Error {
    match e {
        Error::Refused { addr: NOT_YET_NAMED, status } => Error::Refused { addr, status },
        e if e.status() == Status::Unreachable => {
            let detail = match worker.core().context().unreachable_listener_hint() {
                Some(hint) => format!("{addr}: {hint}"),
                None => format!("{addr} ({e})"),
            };
            Error::Ucx(ucx_core::Error::with_detail("Endpoint::connect", Status::Unreachable, detail))
        }
        e => e,
    }
}

//! ucx-async's error: each variant names a cause a caller may act on differently (this side
//! closed the endpoint, the peer closed it, the peer failed, the handshake timed out, the peer
//! broke the protocol, one rail of a group failed, no listener answered a connect), and
//! everything else UCX reports passes through as [`Error::Ucx`].
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use ucx_core::{MemoryType, Status};

/// What went wrong with an ucx-async operation.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// This side closed the endpoint ([`crate::Endpoint::close`] or a drop) before or while
    /// the operation ran.
    Closed {
        /// The operation, e.g. `"Endpoint::recv"`.
        op: &'static str,
    },
    /// The peer closed the endpoint (UCX-Py's close protocol): everything it sent before has
    /// been received, and nothing more will come.
    ClosedByPeer {
        /// The operation.
        op: &'static str,
    },
    /// The peer failed: its process ended, the connection was reset, or keepalive timed out.
    PeerFailed {
        /// The operation.
        op: &'static str,
        /// How UCX reported it (`ConnectionReset`, `EndpointTimeout`, ...).
        status: Status,
    },
    /// No listener answered a connect to `addr`: nothing listens there, or its listener turned
    /// the connection away. UCX reports both as a connection reset or not connected
    /// (`status`), before the listener's first handshake bytes arrive. Not a peer failure:
    /// there never was a peer. (An address UCX cannot reach is an [`Error::Ucx`] with
    /// `Status::Unreachable` that names the address.)
    Refused {
        /// The listener's address, as given to [`crate::Endpoint::connect`].
        addr: SocketAddr,
        /// How UCX reported it.
        status: Status,
    },
    /// The connection handshake did not finish in time.
    HandshakeTimeout {
        /// Which step was waiting.
        step: &'static str,
        /// The limit that passed.
        after: Duration,
    },
    /// The peer sent bytes that break the protocol (a handshake or control message that does
    /// not decode).
    Protocol {
        /// Where.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// The endpoint was made from a worker address without tags, so the operation that uses
    /// the endpoint's own tags has none.
    NoTags {
        /// The operation.
        op: &'static str,
    },
    /// An active message arrived in memory of a type no allocator is registered for.
    NoAllocator {
        /// The message's memory type.
        memory_type: MemoryType,
    },
    /// This side closed the endpoint because its peer left more unreceived than the worker's
    /// cap allows ([`crate::Worker::set_max_unclaimed_bytes`]).
    Unreceived {
        /// The operation.
        op: &'static str,
        /// What was counted, against which cap.
        overflow: ucx_core::Overflow,
    },
    /// This side closed the endpoint because a receive on it was dropped unfinished after UCX
    /// had matched a message to it: that message is lost to the caller, and a later receive
    /// would otherwise silently get the message after it.
    LostMessage {
        /// The operation.
        op: &'static str,
    },
    /// The listener was closed.
    ListenerClosed,
    /// The caller passed something the operation cannot take (a rank out of range, a tag or
    /// world size the tag layout cannot hold, buffers of the wrong size).
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// One rail of a [`crate::multirail::RailGroup`] failed (the group is aborted).
    Rail {
        /// Which rail, from 0.
        rail: usize,
        /// What failed on it.
        error: Box<Error>,
    },
    /// An error UCX (or ucx-core) reported.
    Ucx(ucx_core::Error),
}

/// `Result` with ucx-async's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The nearest UCX status, for callers that only look at statuses: `Canceled` for a close
    /// by either side and a closed listener, `TimedOut` for the handshake, `InvalidParam` for
    /// protocol errors and missing tags, `Unsupported` for a missing allocator.
    pub fn status(&self) -> Status {
        match self {
            Error::Closed { .. } | Error::ClosedByPeer { .. } | Error::LostMessage { .. } | Error::ListenerClosed => {
                Status::Canceled
            }
            Error::PeerFailed { status, .. } | Error::Refused { status, .. } => *status,
            Error::Unreceived { .. } => Status::ExceedsLimit,
            Error::HandshakeTimeout { .. } => Status::TimedOut,
            Error::Protocol { .. } | Error::NoTags { .. } | Error::InvalidArgument { .. } => Status::InvalidParam,
            Error::NoAllocator { .. } => Status::Unsupported,
            Error::Rail { error, .. } => error.status(),
            Error::Ucx(e) => e.status(),
        }
    }

    /// Whether the endpoint is gone (closed by either side, or its peer failed): retrying on
    /// it is pointless.
    pub fn is_disconnect(&self) -> bool {
        match self {
            Error::Rail { error, .. } => error.is_disconnect(),
            e => matches!(
                e,
                Error::Closed { .. }
                    | Error::ClosedByPeer { .. }
                    | Error::PeerFailed { .. }
                    | Error::Unreceived { .. }
                    | Error::LostMessage { .. }
            ),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Closed { op } => write!(f, "{op}: the endpoint was closed"),
            Error::ClosedByPeer { op } => write!(f, "{op}: the peer closed the endpoint"),
            Error::PeerFailed { op, status } => write!(f, "{op}: {status} (the peer failed)"),
            Error::Refused { addr, status } => write!(
                f,
                "connecting to {addr}: refused: nothing listens there, or its listener turned the connection away \
                 ({status})"
            ),
            Error::Unreceived { op, overflow } => write!(f, "{op}: the endpoint was closed because {overflow}"),
            Error::LostMessage { op } => write!(
                f,
                "{op}: the endpoint was closed because a receive on it was dropped after UCX had matched a message \
                 to it, rather than lose that message silently"
            ),
            Error::HandshakeTimeout { step, after } => write!(f, "handshake: {step} took longer than {after:?}"),
            Error::Protocol { op, detail } => write!(f, "{op}: protocol violation: {detail}"),
            Error::NoTags { op } => {
                write!(f, "{op}: endpoint has no tags (worker address): use send_tag/recv_tag")
            }
            Error::NoAllocator { memory_type } => {
                write!(f, "Endpoint::am_recv: no allocator registered for {memory_type:?} memory")
            }
            Error::ListenerClosed => write!(f, "Listener::accept: the listener is closed"),
            Error::InvalidArgument { op, detail } => write!(f, "{op}: {detail}"),
            Error::Rail { rail, error } => write!(f, "rail {rail}: {error}"),
            Error::Ucx(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Ucx(e) => Some(e),
            Error::Rail { error, .. } => Some(error.as_ref()),
            _ => None,
        }
    }
}

impl From<ucx_core::Error> for Error {
    fn from(e: ucx_core::Error) -> Error {
        Error::Ucx(e)
    }
}

/// For code that keeps `ucx_core::Result`: the cause becomes the nearest status, with the
/// message as its detail.
impl From<Error> for ucx_core::Error {
    fn from(e: Error) -> ucx_core::Error {
        match e {
            Error::Ucx(e) => e,
            other => ucx_core::Error::with_detail("ucx-async", other.status(), other.to_string()),
        }
    }
}

//! UCX failures as Python exceptions. The classes are UCX-Py's hierarchy, defined in pure
//! Python in `ucp._libs.exceptions` (so users can catch, subclass and pickle them); this module
//! picks the class and writes the message UCX-Py wrote.
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use ucx_core::Status;

static MODULE: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

/// The exception classes: UCX-Py's, and ours for the two ways an endpoint ends.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    /// The peer failed (`UCXPeerFailure`).
    PeerFailure,
    /// This side closed the endpoint (`UCXEndpointClosed`).
    EndpointClosed,
    Error,
    ConfigError,
    Canceled,
    MsgTruncated,
    NotConnected,
    Unreachable,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::PeerFailure => "UCXPeerFailure",
            Kind::EndpointClosed => "UCXEndpointClosed",
            Kind::Error => "UCXError",
            Kind::ConfigError => "UCXConfigError",
            Kind::Canceled => "UCXCanceled",
            Kind::MsgTruncated => "UCXMsgTruncated",
            Kind::NotConnected => "UCXNotConnected",
            Kind::Unreachable => "UCXUnreachable",
        }
    }
}

/// How an endpoint ended, for the operations that end fails: each cause has its class.
#[derive(Clone, Copy, Debug)]
pub(crate) enum End {
    /// UCX reported the peer failed with this status.
    PeerFailed(Status),
    /// This side closed or aborted the endpoint.
    Closed,
}

impl End {
    /// What happened, for messages: "the peer failed (...)" or "the endpoint was closed".
    pub(crate) fn why(self) -> String {
        match self {
            End::PeerFailed(status) => format!("the peer failed ({status})"),
            End::Closed => "the endpoint was closed".to_string(),
        }
    }

    /// The exception for an operation this end failed: `UCXPeerFailure` or
    /// `UCXEndpointClosed`, with `msg`.
    pub(crate) fn error(self, py: Python<'_>, msg: impl Into<String>) -> PyErr {
        let kind = match self {
            End::PeerFailed(_) => Kind::PeerFailure,
            End::Closed => Kind::EndpointClosed,
        };
        new(py, kind, msg)
    }
}

/// An exception of `kind` with `msg`.
pub(crate) fn new(py: Python<'_>, kind: Kind, msg: impl Into<String>) -> PyErr {
    let msg = msg.into();
    let class = MODULE
        .get_or_try_init(py, || py.import("ucp._libs.exceptions").map(Bound::unbind))
        .and_then(|m| m.bind(py).getattr(kind.class_name()));
    match class {
        Ok(class) => match class.call1((msg,)) {
            Ok(e) => PyErr::from_value(e),
            Err(e) => e,
        },
        Err(e) => e,
    }
}

/// How a finished operation failed, as UCX-Py reported it: `"<{name}>: {status text}"`, with
/// cancellation as `UCXCanceled`, the statuses of a failed peer as `UCXPeerFailure` (a reset,
/// UCX's keepalive timeout, and a transport's timeout: a TCP connection whose bytes went
/// unacknowledged past its user timeout fails the operations on it with "Operation timed
/// out" before UCX reports the endpoint failed) and, for stream receives, the connection
/// statuses named.
pub(crate) fn from_status(py: Python<'_>, name: &str, status: Status, stream_recv: bool) -> PyErr {
    match status {
        Status::Canceled => new(py, Kind::Canceled, format!("<{name}>: ")),
        Status::ConnectionReset | Status::EndpointTimeout | Status::TimedOut => {
            new(py, Kind::PeerFailure, format!("<{name}>: {status}"))
        }
        Status::NotConnected if stream_recv => new(py, Kind::NotConnected, format!("<{name}>: {status}")),
        Status::Unreachable if stream_recv => new(py, Kind::Unreachable, format!("<{name}>: {status}")),
        _ => new(py, Kind::Error, format!("<{name}>: {status}")),
    }
}

/// A failed UCX call (not an operation's completion): `UCXError("{op}: {status}[: detail]")`.
pub(crate) fn from_core(py: Python<'_>, e: &ucx_core::Error) -> PyErr {
    new(py, Kind::Error, e.to_string())
}

/// `ValueError` with `e`'s text: a value from Python (or a peer's bytes) that a wire rule of
/// ucx-core refuses.
pub(crate) fn value_error(e: impl std::fmt::Display) -> PyErr {
    pyo3::exceptions::PyValueError::new_err(e.to_string())
}

//! UCX failures as Python exceptions. The classes are UCX-Py's hierarchy, defined in pure
//! Python in `ucp._libs.exceptions` (so users can catch, subclass and pickle them); this module
//! picks the class and writes the message UCX-Py wrote.
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use ucx_core::Status;

static MODULE: GILOnceCell<Py<PyModule>> = GILOnceCell::new();

/// The exception classes UCX-Py raised.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Kind {
    Error,
    ConfigError,
    CloseError,
    Canceled,
    ConnectionReset,
    MsgTruncated,
    NotConnected,
    Unreachable,
}

impl Kind {
    fn class_name(self) -> &'static str {
        match self {
            Kind::Error => "UCXError",
            Kind::ConfigError => "UCXConfigError",
            Kind::CloseError => "UCXCloseError",
            Kind::Canceled => "UCXCanceled",
            Kind::ConnectionReset => "UCXConnectionReset",
            Kind::MsgTruncated => "UCXMsgTruncated",
            Kind::NotConnected => "UCXNotConnected",
            Kind::Unreachable => "UCXUnreachable",
        }
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
/// cancellation as `UCXCanceled` and, for stream receives, the connection statuses named.
pub(crate) fn from_status(py: Python<'_>, name: &str, status: Status, stream_recv: bool) -> PyErr {
    match status {
        Status::Canceled => new(py, Kind::Canceled, format!("<{name}>: ")),
        Status::NotConnected if stream_recv => new(py, Kind::NotConnected, format!("<{name}>: {status}")),
        Status::Unreachable if stream_recv => new(py, Kind::Unreachable, format!("<{name}>: {status}")),
        _ => new(py, Kind::Error, format!("<{name}>: {status}")),
    }
}

/// A failed UCX call (not an operation's completion): `UCXError("{op}: {status}[: detail]")`.
pub(crate) fn from_core(py: Python<'_>, e: &ucx_core::Error) -> PyErr {
    new(py, Kind::Error, e.to_string())
}

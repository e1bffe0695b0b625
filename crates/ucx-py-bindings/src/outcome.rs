//! What a finished operation gives Python: a value or an exception (`Outcome`), the
//! operation's name in error messages (`Name`), and the check of a received length against
//! the one expected.
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};
use ucx_core::Completion;

use crate::errors::{self, Kind};

/// The outcome a target receives: a value or an exception.
pub(crate) type Outcome = Result<Py<PyAny>, PyErr>;

/// An operation's name for error messages, formatted only when one is raised.
pub(crate) enum Name {
    Given(String),
    Op { what: &'static str, ep: usize, tag: Option<u64>, nbytes: usize },
}

impl Name {
    /// The caller's `given` name, else one made from the operation (`ep`: the `ucp_ep_h`, 0
    /// for a worker-wide operation).
    pub(crate) fn or_op(given: Option<String>, what: &'static str, ep: usize, tag: Option<u64>, nbytes: usize) -> Name {
        given.map(Name::Given).unwrap_or(Name::Op { what, ep, tag, nbytes })
    }

    pub(crate) fn render(&self) -> String {
        match self {
            Name::Given(s) => s.clone(),
            Name::Op { what, ep, tag: Some(tag), nbytes } => {
                format!("[{what}] ep: {ep:#x}, tag: {tag:#x}, nbytes: {nbytes}")
            }
            Name::Op { what, ep, tag: None, nbytes } => format!("[{what}] ep: {ep:#x}, nbytes: {nbytes}"),
        }
    }
}

/// How a finished operation's success is checked and reported.
pub(crate) struct Expect {
    /// Receives: the exact length expected (UCX-Py refuses shorter messages too).
    pub(crate) len: Option<usize>,
    /// The operation's name in error messages (`"<{name}>: ..."`).
    pub(crate) name: Name,
    /// Stream receives report connection statuses by name.
    pub(crate) stream_recv: bool,
    /// What success resolves to (default `True`).
    pub(crate) value: Option<Py<PyAny>>,
    /// Receives: `len` is the room, a shorter message is fine, and success resolves to the
    /// length received.
    pub(crate) up_to: bool,
    /// The caller's cancel does not stop it: a single-copy send, whose message the peer may be
    /// reading, goes on to its answer, as a send UCX cannot withdraw goes on to completion.
    pub(crate) survives_cancel: bool,
}

impl Expect {
    /// An operation named `name` that succeeds with `True`, filling exactly `len` bytes if
    /// given.
    pub(crate) fn new(name: Name, len: Option<usize>) -> Expect {
        Expect { len, name, stream_recv: false, value: None, up_to: false, survives_cancel: false }
    }

    /// The outcome of a finished operation: its value, or the exception for its failure or
    /// for a length other than the one expected.
    pub(crate) fn outcome(&self, py: Python<'_>, r: ucx_core::Result<Completion>) -> Outcome {
        match r {
            Ok(c) => match self.len {
                Some(_) if self.up_to => Ok(PyInt::new(py, c.length).into_any().unbind()),
                Some(n) if c.length != n => Err(errors::new(
                    py,
                    Kind::MsgTruncated,
                    format!("<{}>: length mismatch: {} (got) != {} (expected)", self.name.render(), c.length, n),
                )),
                _ => Ok(self.value.as_ref().map(|v| v.clone_ref(py)).unwrap_or_else(|| py_true(py))),
            },
            Err(e) => Err(errors::from_status(py, &self.name.render(), e.status(), self.stream_recv)),
        }
    }
}

/// Python's `True`, what most operations resolve to (as in UCX-Py).
fn py_true(py: Python<'_>) -> Py<PyAny> {
    PyBool::new(py, true).to_owned().into_any().unbind()
}

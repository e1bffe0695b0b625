//! `Request`: what a transfer given a callback returns while UCX works on it (UCX-Py's
//! `UCXRequest`): whether it is still in flight, and a way to cancel it.
use std::sync::Weak;

use pyo3::prelude::*;

use crate::engine::Engine;

#[pyclass(frozen, module = "ucp._ucx_async")]
pub(crate) struct Request {
    pub(crate) id: u64,
    pub(crate) engine: Weak<Engine>,
}

#[pymethods]
impl Request {
    /// The operation's id in the engine (stable while it is in flight).
    #[getter]
    fn id(&self) -> u64 {
        self.id
    }

    /// Whether the operation has finished (its callback has run or is about to).
    fn done(&self) -> bool {
        self.engine.upgrade().is_none_or(|e| !e.is_inflight(self.id))
    }

    /// Asks UCX to cancel the operation; its callback then gets `UCXCanceled` (or success,
    /// if it finished first).
    fn cancel(&self) {
        if let Some(e) = self.engine.upgrade() {
            e.cancel_op(self.id);
        }
    }

    fn __repr__(&self) -> String {
        format!("<Request {} {}>", self.id, if self.done() { "finished" } else { "pending" })
    }
}

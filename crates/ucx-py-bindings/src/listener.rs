//! `Listener` and `ConnRequest`: accepting client-server connections. The UCX callback only
//! queues the request; the Python callback runs from the next drain, with the GIL.
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};

use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use ucx_core::ConnRequest;

use crate::engine::Engine;
use crate::errors;
use crate::sync::lock;

#[pyclass(frozen, weakref, module = "ucp._ucx_async")]
pub(crate) struct Listener {
    inner: Mutex<Option<ucx_core::Listener>>,
    addr: SocketAddr,
    /// Connections on the port that make UCX's connection manager spin (`ucx_core::stuck_connections`).
    stuck: Mutex<ucx_core::StuckConnections>,
}

impl Listener {
    pub(crate) fn bind(
        py: Python<'_>,
        engine: &Arc<Engine>,
        callback: Py<PyAny>,
        port: u16,
        ip: Option<&str>,
    ) -> PyResult<Listener> {
        let ip: IpAddr = match ip {
            None => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            Some(s) => s.parse().map_err(|_| PyValueError::new_err(format!("not an IP address: {s:?}")))?,
        };
        let callback = Arc::new(callback);
        let events = engine.events();
        let listener = ucx_core::Listener::bind(&engine.worker, SocketAddr::new(ip, port), move |req| {
            let callback = callback.clone();
            events.push(Box::new(move |_, py| {
                let request = ConnRequestPy::wrap(req);
                if let Err(e) = Py::new(py, request).and_then(|r| callback.bind(py).call1((r,))) {
                    e.write_unraisable(py, None);
                }
            }));
        })
        .map_err(|e| errors::from_core(py, &e))?;
        let addr = listener.local_addr();
        let stuck = Mutex::new(ucx_core::StuckConnections::new(addr.port()));
        Ok(Listener { inner: Mutex::new(Some(listener)), addr, stuck })
    }
}

#[pymethods]
impl Listener {
    /// Lets go of connections to this port that have made UCX 1.22's connection manager spin
    /// since the last call (garbage, then close; see `ucx_core::stuck_connections`). Call it
    /// about once a second; returns how many.
    fn release_stuck_connections(&self, py: Python<'_>) -> PyResult<usize> {
        let stuck = &self.stuck;
        py.allow_threads(|| lock(stuck).check())
            .map_err(|e| PyRuntimeError::new_err(format!("checking the listener's connections: {e}")))
    }

    /// The bound port.
    #[getter]
    fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The bound address (`0.0.0.0` when listening on every IPv4 address).
    #[getter]
    fn ip(&self) -> String {
        self.addr.ip().to_string()
    }

    /// Stops listening (`ucp_listener_destroy`); endpoints already accepted stay open.
    fn close(&self) {
        lock(&self.inner).take();
    }

    /// Whether `close()` was called.
    fn closed(&self) -> bool {
        lock(&self.inner).is_none()
    }
}

/// A connection request, to be accepted with `Worker.accept` (or rejected by dropping it).
#[pyclass(frozen, module = "ucp._ucx_async", name = "ConnRequest")]
pub(crate) struct ConnRequestPy {
    inner: Mutex<Option<ConnRequest>>,
    client: Option<SocketAddr>,
}

impl ConnRequestPy {
    fn wrap(req: ConnRequest) -> ConnRequestPy {
        let client = req.client_addr();
        ConnRequestPy { inner: Mutex::new(Some(req)), client }
    }

    pub(crate) fn take(&self, _py: Python<'_>) -> PyResult<ConnRequest> {
        lock(&self.inner).take().ok_or_else(|| PyRuntimeError::new_err("this connection request was already used"))
    }
}

#[pymethods]
impl ConnRequestPy {
    /// The client's `(host, port)`, when UCX reports it.
    #[getter]
    fn client_addr(&self) -> Option<(String, u16)> {
        self.client.map(|a| (a.ip().to_string(), a.port()))
    }

    /// Rejects the connection.
    fn reject(&self, py: Python<'_>) -> PyResult<()> {
        match lock(&self.inner).take() {
            Some(r) => r.reject().map_err(|e| errors::from_core(py, &e)),
            None => Ok(()),
        }
    }
}

//! The async [`Listener`]: accepts connections and runs the server side of the handshake.
use std::net::SocketAddr;

use tokio::sync::{mpsc, Mutex};
use ucx_core::wire::Flavour;
use ucx_core::{ConnRequest, Error, Result, Status};

use crate::endpoint::{ConnectOptions, Endpoint};
use crate::worker::Worker;

/// Listens on a socket address; [`Listener::accept`] yields handshaken endpoints.
pub struct Listener {
    core: ucx_core::Listener,
    worker: Worker,
    incoming: Mutex<mpsc::UnboundedReceiver<ConnRequest>>,
    flavour: Flavour,
    options: ConnectOptions,
}

impl Listener {
    /// Listens on `addr` (port 0: ephemeral) speaking UCX-Py's handshake.
    pub fn bind(worker: &Worker, addr: SocketAddr) -> Result<Listener> {
        Self::bind_with(worker, addr, Flavour::UcxPy, ConnectOptions::default())
    }

    /// Listens speaking the given handshake flavour (UCXX's lets UCXX clients connect).
    pub fn bind_with(worker: &Worker, addr: SocketAddr, flavour: Flavour, options: ConnectOptions) -> Result<Listener> {
        let (tx, rx) = mpsc::unbounded_channel();
        let signals = worker.inner.signals.clone();
        let core = ucx_core::Listener::bind(worker.core(), addr, move |req| {
            // Runs inside progress: hand the request to accept() and never block here. A
            // request nobody will accept (listener gone) is rejected when dropped.
            let _ = tx.send(req);
            signals.wake();
        })?;
        Ok(Listener { core, worker: worker.clone(), incoming: Mutex::new(rx), flavour, options })
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.core.local_addr()
    }

    /// Waits for the next connection and completes its handshake. A client that fails the
    /// handshake yields an error for that connection only; call `accept` again for the next.
    pub async fn accept(&self) -> Result<Endpoint> {
        let req = self.incoming.lock().await.recv().await;
        let Some(req) = req else {
            return Err(Error::with_detail("Listener::accept", Status::Canceled, "the listener is closed"));
        };
        #[cfg(feature = "tracing")]
        tracing::debug!(client = ?req.client_addr(), "ucx-async: accepting");
        Endpoint::accept(&self.worker, req, self.flavour, self.options).await
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("addr", &self.local_addr()).field("flavour", &self.flavour).finish()
    }
}

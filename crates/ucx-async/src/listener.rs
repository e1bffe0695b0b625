//! The async [`Listener`]: accepts connections and runs the server side of the handshake,
//! one connection at a time ([`Listener::accept`]) or concurrently as a stream
//! ([`Listener::incoming`]), and guards its port against UCX's connection-manager spin.
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::Stream;
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinSet;
use ucx_core::wire::Flavour;
use ucx_core::{ConnRequest, Status};

use crate::error::{Error, Result};

use crate::endpoint::{ConnectOptions, Endpoint};
use crate::worker::Worker;

/// Listens on a socket address; [`Listener::accept`] yields handshaken endpoints. While it
/// lives, a task lets go of connections that make UCX 1.22's connection manager spin
/// ([`ucx_core::StuckConnections`], once a second).
pub struct Listener {
    core: ucx_core::Listener,
    worker: Worker,
    requests: Mutex<mpsc::UnboundedReceiver<ConnRequest>>,
    flavour: Flavour,
    options: ConnectOptions,
    /// Once a second, lets go of connections that make UCX's connection manager spin
    /// (`ucx_core::stuck_connections`).
    guard: tokio::task::JoinHandle<()>,
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.guard.abort();
    }
}

/// How often a listener's guard looks for connections that make UCX spin.
const GUARD_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Runs a listener's guard on `port` until aborted.
async fn guard(port: u16) {
    let mut stuck = ucx_core::StuckConnections::new(port);
    loop {
        tokio::time::sleep(GUARD_INTERVAL).await;
        match stuck.check() {
            #[cfg(feature = "tracing")]
            Ok(n) if n > 0 => {
                tracing::warn!(port, n, "ucx-async: let go of connections that made UCX's connection manager spin")
            }
            Ok(_) => {}
            Err(_e) => {
                #[cfg(feature = "tracing")]
                tracing::warn!(port, error = %_e, "ucx-async: the listener's guard stopped");
                return;
            }
        }
    }
}

impl Listener {
    /// Listens on `addr` (port 0: ephemeral) speaking UCX-Py's handshake.
    ///
    /// What else listens: UCX's tcp transport has a port of its own on every network device
    /// the worker's context uses, open to anyone who reaches it. To expose only `addr`'s
    /// interface, make the context with `option("NET_DEVICES", "<that interface>")`. For an
    /// IPv6 `addr`, make it with `option("TCP_AF_PRIO", "inet6,inet")` (otherwise the bind is
    /// refused: see `ucx_core::Listener::bind`).
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
        let guard = tokio::spawn(guard(core.local_addr().port()));
        Ok(Listener { core, worker: worker.clone(), requests: Mutex::new(rx), flavour, options, guard })
    }

    /// The bound address and port.
    pub fn local_addr(&self) -> SocketAddr {
        self.core.local_addr()
    }

    /// Waits for the next connection and completes its handshake. A client that fails the
    /// handshake yields an error for that connection only; call `accept` again for the next.
    /// While one handshake runs, later clients wait; [`Listener::incoming`] runs them side by side.
    ///
    /// # Cancel safety
    ///
    /// Dropped while it waits for a connection, the future loses nothing: requests that arrive stay
    /// queued for the next `accept` or [`Listener::incoming`](crate::Listener::incoming). Dropped
    /// during the handshake, it abandons that connection as a dropped
    /// [`Endpoint::connect`](crate::Endpoint::connect) does (that client sees its connection fail).
    pub async fn accept(&self) -> Result<Endpoint> {
        let req = self.requests.lock().await.recv().await;
        let Some(req) = req else {
            return Err(Error::ListenerClosed);
        };
        Endpoint::accept(&self.worker, req, self.flavour, self.options).await
    }

    /// The incoming connections as a [`Stream`] of handshaken endpoints. Handshakes run
    /// concurrently (a slow or silent client delays nobody else) and endpoints are yielded in
    /// the order their handshakes finish; a failed handshake is an `Err` item and the stream
    /// goes on. Dropping the stream abandons the handshakes still running (those clients see
    /// their connection fail); later requests wait for the next `accept` or `incoming`.
    pub fn incoming(&mut self) -> Incoming<'_> {
        Incoming {
            requests: self.requests.get_mut(),
            worker: &self.worker,
            flavour: self.flavour,
            options: self.options,
            handshakes: JoinSet::new(),
        }
    }
}

/// The stream returned by [`Listener::incoming`].
pub struct Incoming<'a> {
    requests: &'a mut mpsc::UnboundedReceiver<ConnRequest>,
    worker: &'a Worker,
    flavour: Flavour,
    options: ConnectOptions,
    handshakes: JoinSet<Result<Endpoint>>,
}

impl Incoming<'_> {
    /// The next handshaken endpoint (the stream's next item, without a `StreamExt` import).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses no endpoint. Handshakes run inside the stream, and
    /// one that finishes is yielded by the next call; dropping the stream itself abandons the
    /// handshakes still running.
    pub async fn next(&mut self) -> Option<Result<Endpoint>> {
        std::future::poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await
    }
}

impl Stream for Incoming<'_> {
    type Item = Result<Endpoint>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        // Start a handshake for every request that has arrived, then report a finished one.
        let mut closed = false;
        loop {
            match this.requests.poll_recv(cx) {
                Poll::Ready(Some(req)) => {
                    let (worker, flavour, options) = (this.worker.clone(), this.flavour, this.options);
                    this.handshakes.spawn(async move { Endpoint::accept(&worker, req, flavour, options).await });
                }
                Poll::Ready(None) => {
                    closed = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        match this.handshakes.poll_join_next(cx) {
            Poll::Ready(Some(Ok(result))) => Poll::Ready(Some(result)),
            Poll::Ready(Some(Err(join))) => Poll::Ready(Some(Err(Error::Ucx(ucx_core::Error::with_detail(
                "Listener::incoming",
                Status::Canceled,
                format!("the handshake task ended abnormally: {join}"),
            ))))),
            Poll::Ready(None) if closed => Poll::Ready(None),
            _ => Poll::Pending,
        }
    }
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("addr", &self.local_addr()).field("flavour", &self.flavour).finish()
    }
}

impl std::fmt::Debug for Incoming<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incoming").field("handshakes", &self.handshakes.len()).finish()
    }
}

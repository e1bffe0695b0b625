//! Listening for client-server connections on a socket address (`ucp_listener_h`), and the
//! connection requests it hands to the application to accept or reject.
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, Weak};

use crate::error::{check, Error, Result, Status};
use crate::live::{self, Kind};
use crate::sockaddr::{self, CSockAddr};
use crate::sys;
use crate::worker::Worker;

type ConnHandler = Box<dyn FnMut(ConnRequest) + Send>;

/// A listener bound to an IPv4 or IPv6 address. Each incoming connection is passed to the
/// handler, during [`Worker::progress`], as a [`ConnRequest`] to accept
/// ([`crate::Endpoint::accept`]) or reject.
///
/// Dropping the listener stops listening once no [`ConnRequest`] of it is pending; endpoints it
/// accepted are unaffected.
pub struct Listener {
    inner: Arc<ListenerInner>,
}

struct ListenerInner {
    /// Null only if creation failed (then nothing is registered with UCX).
    handle: sys::ucp_listener_h,
    worker: Worker,
    /// The conn handler's argument; freed after ucp_listener_destroy.
    trampoline: *mut Trampoline,
    addr: SocketAddr,
}

/// What the C callback reaches through its argument: the handler and its listener.
struct Trampoline {
    listener: Weak<ListenerInner>,
    handler: Mutex<ConnHandler>,
}

// SAFETY: the listener is used only through the MULTI-thread-mode worker; the handler is Send
// and called under its Mutex.
unsafe impl Send for ListenerInner {}
// SAFETY: as above.
unsafe impl Sync for ListenerInner {}

impl Drop for ListenerInner {
    fn drop(&mut self) {
        if !self.handle.is_null() {
            // SAFETY: the listener is live; after destroy UCX no longer calls the conn handler.
            unsafe { sys::ucp_listener_destroy(self.handle) };
            live::destroyed(Kind::Listener);
        }
        // SAFETY: from Box::into_raw in bind; UCX can no longer reach it.
        drop(unsafe { Box::from_raw(self.trampoline) });
    }
}

unsafe extern "C" fn on_conn_request(conn_request: sys::ucp_conn_request_h, arg: *mut c_void) {
    // SAFETY: arg is the Trampoline registered in bind, alive until the listener is destroyed.
    let t = unsafe { &*arg.cast::<Trampoline>() };
    // Only fails while bind is still returning; the request then stays unanswered.
    let Some(listener) = t.listener.upgrade() else { return };
    let client = client_addr(conn_request);
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut handler = t.handler.lock().unwrap_or_else(|p| p.into_inner());
        // A request the handler drops (or unwinds past) is rejected by ConnRequest::drop.
        handler(ConnRequest { handle: conn_request, listener, client });
    }));
    if run.is_err() {
        eprintln!("ucx-core: a listener's connection handler panicked; its request was rejected");
    }
}

fn client_addr(conn_request: sys::ucp_conn_request_h) -> Option<SocketAddr> {
    // SAFETY: plain C struct; zero is a valid initial value.
    let mut attr: sys::ucp_conn_request_attr_t = unsafe { std::mem::zeroed() };
    attr.field_mask = sys::UCP_CONN_REQUEST_ATTR_FIELD_CLIENT_ADDR as u64;
    // SAFETY: the request is live (we are inside its callback).
    let status = unsafe { sys::ucp_conn_request_query(conn_request, &mut attr) };
    if status != sys::UCS_OK {
        return None;
    }
    sockaddr::from_storage(&attr.client_address)
}

impl Listener {
    /// Listens on `addr` (port 0: an ephemeral port; see [`Listener::local_addr`]) and calls
    /// `handler` for each incoming connection, from inside [`Worker::progress`]. An address of
    /// the family (IPv4, IPv6) that UCX's tcp transport does not use on its device is refused
    /// with [`Status::Unsupported`] (a context made with `TCP_AF_PRIO=inet6,inet` listens on
    /// IPv6; see [`crate::Endpoint::connect`]).
    pub fn bind(
        worker: &Worker,
        addr: SocketAddr,
        handler: impl FnMut(ConnRequest) + Send + 'static,
    ) -> Result<Listener> {
        crate::tcp_family::check_bind(worker.context(), addr, "Listener::bind")?;
        let c_addr = CSockAddr::new(addr);
        let mut status = sys::UCS_OK;
        let inner = Arc::new_cyclic(|weak| {
            let trampoline =
                Box::into_raw(Box::new(Trampoline { listener: weak.clone(), handler: Mutex::new(Box::new(handler)) }));
            // SAFETY: plain C struct; zero means "field not set".
            let mut params: sys::ucp_listener_params_t = unsafe { std::mem::zeroed() };
            params.field_mask =
                (sys::UCP_LISTENER_PARAM_FIELD_SOCK_ADDR | sys::UCP_LISTENER_PARAM_FIELD_CONN_HANDLER) as u64;
            params.sockaddr = c_addr.as_ucs();
            params.conn_handler =
                sys::ucp_listener_conn_handler_t { cb: Some(on_conn_request), arg: trampoline.cast() };
            let mut handle = std::ptr::null_mut();
            // SAFETY: the worker is live; params and the sockaddr it points to outlive the call;
            // the trampoline outlives the listener (freed in ListenerInner::drop).
            status = unsafe { sys::ucp_listener_create(worker.handle(), &params, &mut handle) };
            let mut bound = addr;
            if status == sys::UCS_OK {
                bound = query_addr(handle).unwrap_or(addr);
            } else {
                handle = std::ptr::null_mut();
            }
            ListenerInner { handle, worker: worker.clone(), trampoline, addr: bound }
        });
        if status != sys::UCS_OK {
            let s = Status::from_raw(status).unwrap_or(Status::IoError);
            return Err(Error::with_detail("ucp_listener_create", s, format!("listening on {addr}")));
        }
        live::created(Kind::Listener);
        Ok(Listener { inner })
    }

    /// The address and port actually bound (the ephemeral port if 0 was asked for).
    pub fn local_addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The worker the listener runs on.
    pub fn worker(&self) -> &Worker {
        &self.inner.worker
    }
}

fn query_addr(handle: sys::ucp_listener_h) -> Option<SocketAddr> {
    // SAFETY: plain C struct; zero is a valid initial value.
    let mut attr: sys::ucp_listener_attr_t = unsafe { std::mem::zeroed() };
    attr.field_mask = sys::UCP_LISTENER_ATTR_FIELD_SOCKADDR as u64;
    // SAFETY: the listener is live.
    check("ucp_listener_query", unsafe { sys::ucp_listener_query(handle, &mut attr) }).ok()?;
    sockaddr::from_storage(&attr.sockaddr)
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener").field("addr", &self.inner.addr).finish()
    }
}

/// An incoming connection. Accept it with [`crate::Endpoint::accept`] or [`ConnRequest::reject`];
/// dropping it rejects it.
pub struct ConnRequest {
    handle: sys::ucp_conn_request_h,
    listener: Arc<ListenerInner>,
    client: Option<SocketAddr>,
}

// SAFETY: a conn request is an opaque handle used through the MULTI-mode worker.
unsafe impl Send for ConnRequest {}

impl ConnRequest {
    /// The client's address, as UCX reports it.
    pub fn client_addr(&self) -> Option<SocketAddr> {
        self.client
    }

    /// The worker of the listener that received it.
    pub fn worker(&self) -> &Worker {
        &self.listener.worker
    }

    /// Refuses the connection; the client's endpoint fails with [`Status::Rejected`] (or a
    /// connection error, depending on the transport).
    pub fn reject(self) -> Result<()> {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: read out once; `this` is not used or dropped again.
        let listener = unsafe { std::ptr::read(&this.listener) };
        // SAFETY: the listener is live (we hold it) and the request is unconsumed.
        check("ucp_listener_reject", unsafe { sys::ucp_listener_reject(listener.handle, this.handle) })
    }

    /// Gives up the raw handle for `ucp_ep_create`; the listener stays alive as long as the
    /// returned guard.
    pub(crate) fn into_raw(self) -> (sys::ucp_conn_request_h, ListenerGuard) {
        let this = std::mem::ManuallyDrop::new(self);
        // SAFETY: read out once; `this` is not used or dropped again.
        let listener = unsafe { std::ptr::read(&this.listener) };
        (this.handle, ListenerGuard(listener))
    }
}

/// Keeps a listener alive while its connection request is being turned into an endpoint.
pub(crate) struct ListenerGuard(#[allow(dead_code)] Arc<ListenerInner>);

impl Drop for ConnRequest {
    fn drop(&mut self) {
        // SAFETY: the listener is live (we hold it) and the request was neither accepted nor
        // rejected.
        unsafe { sys::ucp_listener_reject(self.listener.handle, self.handle) };
    }
}

impl std::fmt::Debug for ConnRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnRequest").field("client", &self.client).finish()
    }
}

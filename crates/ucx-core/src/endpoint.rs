//! Endpoints (`ucp_ep_h`): a connection to one peer worker, made from a socket address, a
//! worker address or an accepted connection request; its peer-failure reporting; and its
//! closing. Operations on an endpoint live in the `tag`, `stream`, `am` and `rma` modules.
use std::ffi::c_void;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI8, AtomicPtr, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::address::WorkerAddress;
use crate::error::{Error, Result, Status};
use crate::listener::ConnRequest;
use crate::live::{self, Kind};
use crate::request::{self, Callback, Completion, Submitted};
use crate::sockaddr::{self, CSockAddr};
use crate::worker::Worker;
use crate::{sys, text};

type ErrorHandler = Box<dyn FnMut(Status) + Send>;

/// How an endpoint is created: peer-failure handling and a callback for it.
pub struct EndpointParams {
    error_handling: bool,
    on_error: Option<ErrorHandler>,
}

impl Default for EndpointParams {
    fn default() -> Self {
        EndpointParams { error_handling: true, on_error: None }
    }
}

impl EndpointParams {
    /// Whether UCX reports a failed peer (`UCP_ERR_HANDLING_MODE_PEER`, the default) or assumes
    /// peers never fail (`UCP_ERR_HANDLING_MODE_NONE`; both sides must agree).
    pub fn error_handling(mut self, on: bool) -> Self {
        self.error_handling = on;
        self
    }

    /// Called once, during progress, with the status when UCX declares the peer failed
    /// (connection reset, endpoint timeout...). Needs error handling on.
    pub fn on_error(mut self, f: impl FnMut(Status) + Send + 'static) -> Self {
        self.on_error = Some(Box::new(f));
        self
    }
}

/// How [`Endpoint::close`] ends the connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CloseMode {
    /// Complete outstanding operations and tell the peer (`UCP_EP_CLOSE_MODE_FLUSH`).
    Flush,
    /// Cancel outstanding operations and release resources at once
    /// (`UCP_EP_CLOSE_FLAG_FORCE`); the peer learns of it through its error handling. UCX
    /// refuses it for an endpoint without error handling (and would keep the endpoint), so
    /// such an endpoint is closed with a flush instead.
    Force,
}

/// A UCP endpoint. Cheap to clone; the last clone closes it (forcefully if error handling is
/// on, with a flush otherwise) and progresses until UCX has let it go.
#[derive(Clone)]
pub struct Endpoint {
    inner: Arc<EndpointInner>,
}

struct EndpointInner {
    /// Null once closed.
    handle: AtomicPtr<sys::ucp_ep>,
    worker: Worker,
    error_handling: bool,
    /// The error callback's argument; must outlive the UCX endpoint.
    errors: Box<ErrorState>,
}

struct ErrorState {
    status: AtomicI8,
    handler: Mutex<Option<ErrorHandler>>,
}

// SAFETY: endpoints are used through the MULTI-thread-mode worker; the handle is atomic and the
// error state is atomics plus a Mutex.
unsafe impl Send for EndpointInner {}
// SAFETY: as above.
unsafe impl Sync for EndpointInner {}

unsafe extern "C" fn on_ep_error(arg: *mut c_void, _ep: sys::ucp_ep_h, status: sys::ucs_status_t) {
    // SAFETY: arg is the endpoint's ErrorState, alive until the endpoint is closed.
    let state = unsafe { &*arg.cast::<ErrorState>() };
    state.status.store(status, Ordering::Release);
    let Some(s) = Status::from_raw(status) else { return };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let handler = state.handler.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut h) = handler {
            h(s);
        }
    }));
    if run.is_err() {
        eprintln!("ucx-core: an endpoint error handler panicked");
    }
}

impl Endpoint {
    /// Connects to a listener at `addr` (client side of client-server).
    ///
    /// A connection of the family (IPv4, IPv6) that UCX's tcp transport does not use on the
    /// device it leaves through is refused with [`Status::Unsupported`] before UCX sees it
    /// (UCX 1.22 would corrupt the heap): a context made with the option
    /// `TCP_AF_PRIO=inet6,inet` carries IPv6 (see `tcp_family`).
    pub fn connect(worker: &Worker, addr: SocketAddr, params: EndpointParams) -> Result<Endpoint> {
        crate::tcp_family::check_peer(worker.context(), addr, "Endpoint::connect", "the listener's address")?;
        let c_addr = CSockAddr::new(addr);
        Self::create(worker, params, "ucp_ep_create (connect)", Some(addr), |p| {
            p.field_mask |= (sys::UCP_EP_PARAM_FIELD_SOCK_ADDR | sys::UCP_EP_PARAM_FIELD_FLAGS) as u64;
            p.sockaddr = c_addr.as_ucs();
            p.flags = sys::UCP_EP_PARAMS_FLAGS_CLIENT_SERVER;
        })
    }

    /// Connects to the worker whose address is `address` (no listener involved). An address
    /// whose transport entries are shorter than this UCX's own for the same transports is
    /// refused (`InvalidAddr`): UCX's transports would read past them.
    pub fn connect_to_worker(worker: &Worker, address: &WorkerAddress, params: EndpointParams) -> Result<Endpoint> {
        crate::wire::worker_address::check_against(address.as_bytes(), worker.address()?.as_bytes())?;
        Self::create(worker, params, "ucp_ep_create (worker address)", None, |p| {
            p.field_mask |= sys::UCP_EP_PARAM_FIELD_REMOTE_ADDRESS as u64;
            p.address = address.as_ucx_ptr().cast();
        })
    }

    /// Accepts an incoming connection (server side of client-server). A client whose address
    /// family UCX's tcp transport does not use on the device the connection came through is
    /// refused as [`Endpoint::connect`] refuses it, and the request rejected.
    pub fn accept(worker: &Worker, request: ConnRequest, params: EndpointParams) -> Result<Endpoint> {
        let peer = request.client_addr();
        if let Some(client) = peer {
            crate::tcp_family::check_peer(worker.context(), client, "Endpoint::accept", "the client's address")?;
        }
        let (raw, _listener) = request.into_raw();
        Self::create(worker, params, "ucp_ep_create (accept)", peer, |p| {
            p.field_mask |= sys::UCP_EP_PARAM_FIELD_CONN_REQUEST as u64;
            p.conn_request = raw;
        })
    }

    fn create(
        worker: &Worker,
        params: EndpointParams,
        op: &'static str,
        peer: Option<SocketAddr>,
        fill: impl FnOnce(&mut sys::ucp_ep_params_t),
    ) -> Result<Endpoint> {
        let errors = Box::new(ErrorState { status: AtomicI8::new(sys::UCS_OK), handler: Mutex::new(params.on_error) });
        // SAFETY: plain C struct; zero means "field not set".
        let mut p: sys::ucp_ep_params_t = unsafe { std::mem::zeroed() };
        p.field_mask = sys::UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE as u64;
        p.err_mode = if params.error_handling {
            p.field_mask |= sys::UCP_EP_PARAM_FIELD_ERR_HANDLER as u64;
            p.err_handler = sys::ucp_err_handler_t {
                cb: Some(on_ep_error),
                arg: (&*errors as *const ErrorState).cast_mut().cast(),
            };
            sys::UCP_ERR_HANDLING_MODE_PEER
        } else {
            sys::UCP_ERR_HANDLING_MODE_NONE
        };
        fill(&mut p);
        let mut handle = std::ptr::null_mut();
        // SAFETY: the worker is live; every pointer in `p` (sockaddr, address bytes, error state)
        // outlives the call, and the error state outlives the endpoint (freed after close).
        let status = unsafe { sys::ucp_ep_create(worker.handle(), &p, &mut handle) };
        if let Some(s) = Status::from_raw(status) {
            return Err(match peer {
                Some(a) => Error::with_detail(op, s, format!("peer {a}")),
                None => Error::new(op, s),
            });
        }
        live::created(Kind::Endpoint);
        Ok(Endpoint {
            inner: Arc::new(EndpointInner {
                handle: AtomicPtr::new(handle),
                worker: worker.clone(),
                error_handling: params.error_handling,
                errors,
            }),
        })
    }

    /// The worker the endpoint belongs to.
    pub fn worker(&self) -> &Worker {
        &self.inner.worker
    }

    /// An opaque identity of the UCX endpoint (its handle), stable until it is closed. Active
    /// messages report the sender's reply endpoint with the same value.
    pub fn id(&self) -> usize {
        self.inner.handle.load(Ordering::Acquire) as usize
    }

    /// The raw handle, or a "closed" error.
    pub(crate) fn handle(&self, op: &'static str) -> Result<sys::ucp_ep_h> {
        let h = self.inner.handle.load(Ordering::Acquire);
        if h.is_null() {
            return Err(Error::with_detail(op, Status::NotConnected, "the endpoint is closed"));
        }
        Ok(h)
    }

    /// `Ok` while the peer is healthy; the failure UCX reported otherwise (e.g.
    /// [`Status::ConnectionReset`], [`Status::EndpointTimeout`]).
    pub fn status(&self) -> Result<()> {
        match Status::from_raw(self.inner.errors.status.load(Ordering::Acquire)) {
            None => Ok(()),
            Some(s) => Err(Error::new("endpoint error", s)),
        }
    }

    /// Whether [`Endpoint::close`] has been called (or the endpoint was dropped).
    pub fn is_closed(&self) -> bool {
        self.inner.handle.load(Ordering::Acquire).is_null()
    }

    /// Whether peer-failure handling is on.
    pub fn error_handling(&self) -> bool {
        self.inner.error_handling
    }

    /// The local and remote socket addresses of a client-server endpoint (`ucp_ep_query`).
    pub fn socket_addrs(&self) -> Result<(Option<SocketAddr>, Option<SocketAddr>)> {
        let h = self.handle("ucp_ep_query")?;
        // SAFETY: plain C struct; zero is a valid initial value.
        let mut attr: sys::ucp_ep_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = (sys::UCP_EP_ATTR_FIELD_LOCAL_SOCKADDR | sys::UCP_EP_ATTR_FIELD_REMOTE_SOCKADDR) as u64;
        // SAFETY: the endpoint is live.
        crate::error::check("ucp_ep_query", unsafe { sys::ucp_ep_query(h, &mut attr) })?;
        Ok((sockaddr::from_storage(&attr.local_sockaddr), sockaddr::from_storage(&attr.remote_sockaddr)))
    }

    /// The transports the endpoint's data lanes use (e.g. `["tcp"]`, `["posix", "cma"]`,
    /// `["rc_mlx5"]`), from [`Endpoint::info`], in lane order without repeats. Empty for a
    /// closed or failed endpoint, or one whose lanes are not wired up yet.
    pub fn transports(&self) -> Vec<String> {
        lane_transports(&self.info())
    }

    /// UCX's description of the endpoint: its transports and lanes (`ucp_ep_print_info`); for a
    /// failed endpoint only the failure, since UCX 1.22 reads past its table of transports
    /// printing the lanes it put in place of a failed endpoint's (a crash after a refused
    /// connect).
    pub fn info(&self) -> String {
        let Ok(h) = self.handle("ucp_ep_print_info") else { return String::from("(closed endpoint)") };
        if let Err(e) = self.status() {
            return format!("(failed endpoint: {})", e.status());
        }
        text::capture(|file| {
            // SAFETY: the endpoint is live and, as far as its error callback has said, has not
            // failed (see above); file is an open stream.
            unsafe { sys::ucp_ep_print_info(h, file) }
        })
    }

    /// Completes every operation issued on this endpoint so far, remotely (`ucp_ep_flush_nbx`).
    pub fn flush(&self) -> Result<Submitted<'_>> {
        let h = self.handle("ucp_ep_flush_nbx")?;
        let params = request::params(Callback::Send, None);
        // SAFETY: the endpoint is live; no buffer is involved; the request borrows self.
        unsafe {
            let ret = sys::ucp_ep_flush_nbx(h, &params);
            Submitted::from_status_ptr("ucp_ep_flush_nbx", ret, &self.inner.worker, Completion::default())
                .map(|s| s.on_endpoint(self))
        }
    }

    /// Closes the endpoint (`ucp_ep_close_nbx`). After this, operations on it fail with
    /// [`Status::NotConnected`]; with [`CloseMode::Force`], UCX completes its outstanding
    /// sends as canceled. Receives are worker-wide in UCX and are not touched: their owners
    /// cancel them. The returned request borrows the endpoint, which must outlive the close.
    pub fn close(&self, mode: CloseMode) -> Result<Submitted<'_>> {
        let h = self.inner.handle.swap(std::ptr::null_mut(), Ordering::AcqRel);
        if h.is_null() {
            return Ok(Submitted::Done(Completion::default()));
        }
        live::destroyed(Kind::Endpoint);
        // SAFETY: h was live and is now ours alone; the error state outlives the close request
        // because the request borrows self.
        unsafe { close_raw(h, mode, self.inner.error_handling, &self.inner.worker) }
    }
}

/// How long [`Endpoint::force_close_now`] progresses the worker for the close. A forced close
/// finishes within a few progress rounds; the limit is for the flush an endpoint without
/// error handling gets instead, which a peer that stopped progressing could hold up for good.
const FORCE_CLOSE_LIMIT: Duration = Duration::from_millis(100);

impl Endpoint {
    /// Force-closes the endpoint (with a flush, without error handling: see
    /// [`CloseMode::Force`]) and progresses until UCX has released it or a short limit passed.
    /// Later operations fail as on a closed endpoint; a dropped operation UCX cannot cancel
    /// uses this too.
    pub fn force_close_now(&self) {
        // A failed close still releases the endpoint; nothing more can be done here.
        let _ = self.close_within(CloseMode::Force, FORCE_CLOSE_LIMIT);
    }

    /// Closes the endpoint with `mode` and progresses the worker until UCX has finished or
    /// `limit` has passed. UCX cannot hurry a close already under way, so one still running
    /// then finishes in the background, holding the endpoint (whose error state UCX may call
    /// until then). `Err`: the close failed at once; then `Some` result if it finished in
    /// time, `None` if it was left to finish.
    pub fn close_within(&self, mode: CloseMode, limit: Duration) -> Result<Option<Result<Completion>>> {
        let req = match self.close(mode)? {
            Submitted::Done(c) => return Ok(Some(Ok(c))),
            Submitted::InFlight(req) => req,
        };
        let deadline = Instant::now() + limit;
        while !req.is_complete() && Instant::now() < deadline {
            self.inner.worker.progress();
        }
        if req.is_complete() {
            return Ok(Some(req.wait()));
        }
        // SAFETY: the close request borrows the endpoint (UCX may call its error handler
        // until the close ends); the keepalive owns a handle to it.
        unsafe { req.detach_unchecked(Box::new(self.clone()), false) };
        Ok(None)
    }
}

/// Starts closing `h`, made with `error_handling` or not.
///
/// # Safety
/// `h` must be a live endpoint of `worker`, closed exactly once.
unsafe fn close_raw<'a>(
    h: sys::ucp_ep_h,
    mode: CloseMode,
    error_handling: bool,
    worker: &Worker,
) -> Result<Submitted<'a>> {
    let mut params = request::params(Callback::Send, None);
    // UCX fails a forced close of an endpoint without error handling with "Invalid
    // parameter" and does not release it; a flush is then the only clean way out.
    if mode == CloseMode::Force && error_handling {
        params.op_attr_mask |= sys::UCP_OP_ATTR_FIELD_FLAGS;
        params.flags = sys::UCP_EP_CLOSE_FLAG_FORCE;
    }
    // SAFETY: guaranteed by the caller.
    unsafe {
        let ret = sys::ucp_ep_close_nbx(h, &params);
        Submitted::from_status_ptr("ucp_ep_close_nbx", ret, worker, Completion::default())
    }
}

impl Drop for EndpointInner {
    fn drop(&mut self) {
        let h = *self.handle.get_mut();
        if h.is_null() {
            return;
        }
        live::destroyed(Kind::Endpoint);
        // SAFETY: h is live and ours; we wait for the close to finish before the error state
        // (which UCX may call until then) is freed with self.
        if let Ok(submitted) = unsafe { close_raw(h, CloseMode::Force, self.error_handling, &self.worker) } {
            // A failed close still releases the endpoint; nothing more can be done here.
            let _ = submitted.wait();
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("handle", &self.inner.handle.load(Ordering::Relaxed)).finish()
    }
}

/// The transports named by the lanes of `ucp_ep_print_info` text: a data lane reads
/// `lane[1]:  1:tcp/lo.0 md[1] ...` (resource index, then transport/device); a connection
/// manager lane (`lane[0]: cm tcp`) moves no data and is skipped.
pub(crate) fn lane_transports(info: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for line in info.lines() {
        let Some(rest) = line.trim_start_matches(['#', ' ']).strip_prefix("lane[") else { continue };
        let Some((_, lane)) = rest.split_once("]:") else { continue };
        let Some(resource) = lane.split_whitespace().next() else { continue };
        let Some((_, tl_dev)) = resource.split_once(':') else { continue };
        let tl = tl_dev.split('/').next().unwrap_or_default();
        if !tl.is_empty() && !out.iter().any(|t| t == tl) {
            out.push(tl.to_string());
        }
    }
    out
}

#[cfg(test)]
mod lane_tests {
    use super::lane_transports;

    #[test]
    fn data_lanes_name_their_transports_and_cm_lanes_are_skipped() {
        // From a tcp endpoint over lo (UCX 1.22), and a shaped InfiniBand one.
        let tcp = "#                 lane[0]: cm tcp\n#                 lane[1]:  1:tcp/lo.0 md[1]                -> md[1]/tcp/sysdev[255] seg 4294967295 rma_bw#0 am wireup\n";
        assert_eq!(lane_transports(tcp), vec!["tcp"]);
        let ib = "#   lane[0]:  3:rc_mlx5/mlx5_0:1.0 md[2] -> md[2]/ib am am_bw#0\n#   lane[1]:  8:cma/memory.0 md[5] rma_bw#1\n#   lane[2]:  3:rc_mlx5/mlx5_0:1.0 md[2] rma_bw#0\n";
        assert_eq!(lane_transports(ib), vec!["rc_mlx5", "cma"]);
        assert!(lane_transports("(closed endpoint)").is_empty());
    }
}

//! `Worker`: a UCX worker as Python drives it — progress (GIL released), the wakeup fd and
//! arming for the blocking-mode driver, worker-wide tag receives and probes, flush, fence,
//! active-message allocators, and creating endpoints and listeners.
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use ucx_core::{Armed, Features, MemoryType, Owned, Status, WorkerAddress, FULL_MASK};

use crate::am::AmQueues;
use crate::context::Context;
use crate::endpoint::{Endpoint, TagRecv};
use crate::engine::Engine;
use crate::errors;
use crate::listener::{ConnRequestPy, Listener};
use crate::outcome::{Expect, Name};
use crate::submit::{self, SpinUs, Submission};

#[pyclass(frozen, weakref, module = "ucp._ucx_async")]
pub(crate) struct Worker {
    pub(crate) engine: Arc<Engine>,
    /// Where active messages to UCX-Py's handler wait for their endpoint's `am_recv`.
    am: Arc<AmQueues>,
}

#[pymethods]
impl Worker {
    /// A worker of `context` (`UCS_THREAD_MODE_MULTI`), with UCX-Py's active-message handler
    /// when the context has the AM feature.
    #[new]
    fn new(py: Python<'_>, context: &Context) -> PyResult<Worker> {
        let worker = ucx_core::Worker::new(&context.inner).map_err(|e| errors::from_core(py, &e))?;
        let engine = Engine::new(worker, context.cuda_support());
        let am = Arc::new(AmQueues::default());
        if context.inner.features().contains(Features::AM) {
            am.install(&engine).map_err(|e| errors::from_core(py, &e))?;
        }
        Ok(Worker { engine, am })
    }

    /// The `ucp_worker_h`, as an int.
    #[getter]
    fn handle(&self) -> usize {
        self.engine.worker.id()
    }

    /// Progresses until UCX has nothing more to do (or one bounded batch of rounds, while a
    /// peer keeps sending), then resolves what finished. Returns whether anything finished or
    /// arrived.
    fn progress(&self, py: Python<'_>) -> bool {
        let delivered = self.engine.progress(py);
        // Whoever progressed outside the driver may have consumed a wake-up the driver was
        // sleeping on: let it re-arm.
        self.engine.needs_progress(py);
        delivered
    }

    /// Progresses (GIL released) until an operation finishes or something arrives, or
    /// `spin_us` microseconds pass, then delivers it. For a caller waiting on several
    /// operations it expects within microseconds (a collective's messages over shared memory),
    /// which then finish without a pass through the event loop. Returns whether anything was
    /// delivered.
    fn spin(&self, py: Python<'_>, spin_us: u64) -> bool {
        let engine = &self.engine;
        py.allow_threads(|| engine.spin_until(spin_us, || engine.has_news()));
        let delivered = engine.drain(py);
        // As after `progress`: the spin may have consumed a wake-up the driver sleeps on, or
        // left the worker unarmed, so the driver gets a pass (deduplicated).
        engine.needs_progress(py);
        delivered
    }

    /// One pass of the blocking-mode driver: progress and deliver; if nothing arrived while
    /// operations are in flight, keep progressing (GIL released) for up to `spin_us`
    /// microseconds, since waking from the fd costs tens of microseconds (or more) on a
    /// virtual machine.
    ///
    /// Returns true if anything was delivered or UCX would not arm: the worker is then left
    /// unarmed and the driver must call again soon, after the loop's ready tasks (it is busy).
    /// Returns false once the worker is armed: the wakeup fd becomes readable when there is
    /// more to do.
    ///
    /// While armed, UCX may leave transports unpolled until their event is handled by `arm`
    /// (measured: spinning on progress alone then waited out the whole budget for each
    /// message), so the spin also watches the fd and lets `arm` handle what it signals.
    #[pyo3(signature = (spin_us = 0))]
    fn progress_and_arm(&self, py: Python<'_>, spin_us: u64) -> PyResult<bool> {
        let engine = &self.engine;
        // Busy (the batch hit its bound): UCX may hold work it will not signal on the fd, so
        // the driver comes back soon instead of arming.
        let (delivered, idle) = engine.progress_pass(py);
        if delivered || !idle {
            return Ok(true);
        }
        if spin_us > 0 && engine.inflight() > 0 {
            py.allow_threads(|| engine.spin_until(spin_us, || engine.has_news()));
            // Armed or not, the pass goes on to progress and arm below.
            let (delivered, idle) = engine.progress_pass(py);
            if delivered || !idle {
                return Ok(true);
            }
        }
        match engine.worker.arm().map_err(|e| errors::from_core(py, &e))? {
            Armed::Armed => Ok(false),
            // Not armed: progress once more, then let the event loop run before the next pass
            // (the driver schedules it). Looping here until UCX stops answering busy starved
            // the loop: after a peer died mid-message UCX answered busy round after round, and
            // the tasks that would see the failure and close the endpoint never ran.
            Armed::Busy => {
                engine.progress(py);
                Ok(true)
            }
        }
    }

    /// `ucp_worker_arm`: true if armed, false if there are events to progress first.
    fn arm(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.engine.worker.arm().map_err(|e| errors::from_core(py, &e))? == Armed::Armed)
    }

    /// The wakeup file descriptor (`ucp_worker_get_efd`).
    fn efd(&self, py: Python<'_>) -> PyResult<i32> {
        self.engine.worker.wakeup_fd().map_err(|e| errors::from_core(py, &e))
    }

    /// Wakes a thread sleeping on the wakeup fd (`ucp_worker_signal`).
    fn signal(&self, py: Python<'_>) -> PyResult<()> {
        self.engine.worker.signal().map_err(|e| errors::from_core(py, &e))
    }

    /// Sets (or clears, with None) the callable the engine calls when an operation is waiting
    /// for progress the event loop would not otherwise give it.
    fn set_progress_hook(&self, hook: Option<Py<PyAny>>) {
        self.engine.set_progress_hook(hook);
    }

    /// The worker's address (`ucp_worker_get_address`), as bytes.
    fn address<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        let addr = self.engine.worker.address().map_err(|e| errors::from_core(py, &e))?;
        Ok(PyBytes::new(py, addr.as_bytes()))
    }

    /// `ucp_worker_print_info`.
    fn info(&self) -> String {
        self.engine.worker.info()
    }

    /// `ucp_worker_fence`.
    fn fence(&self, py: Python<'_>) -> PyResult<()> {
        self.engine.worker.fence().map_err(|e| errors::from_core(py, &e))
    }

    /// Flushes every endpoint of the worker (`ucp_worker_flush_nbx`). Returns None if done at
    /// once, else a future (or None and `on_done(value, exc)` later).
    #[pyo3(signature = (on_done = None))]
    fn flush(&self, py: Python<'_>, on_done: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Py<PyAny>>> {
        let worker = self.engine.worker.clone();
        let submitted = Owned::submit(Box::new(()), false, move |_| worker.flush());
        let op = Submission { submitted, expect: Expect::new(Name::Given("flush".into()), None), owner: None };
        submit::track(&self.engine, py, op, on_done)
    }

    /// Whether a message with exactly `tag` has arrived and waits unclaimed.
    fn tag_probe(&self, tag: u64) -> bool {
        self.engine.unclaimed.probe(&self.engine.worker, tag, FULL_MASK)
    }

    /// Caps what a peer may leave unreceived on one endpoint: the bytes of the messages
    /// waiting on its own tags (`msg_recv`, `ctrl_recv`), beyond the next message of each,
    /// and separately its unread stream bytes. Progress
    /// counts them every 10 ms; an endpoint over the cap is closed with a logged warning, and
    /// its later operations raise `UCXEndpointClosed` saying why. `None` lifts the cap (and
    /// stops counting).
    #[pyo3(signature = (limit))]
    fn set_max_unclaimed_bytes(&self, limit: Option<usize>) {
        self.engine.unclaimed.set_limit(limit);
    }

    /// The cap `set_max_unclaimed_bytes` set (`None`: no cap).
    #[getter]
    fn max_unclaimed_bytes(&self) -> Option<usize> {
        self.engine.unclaimed.limit()
    }

    /// How many messages the worker holds for receives still to come, and their bytes.
    fn unclaimed(&self) -> (usize, usize) {
        self.engine.unclaimed.held()
    }

    /// Receives and drops the messages with exactly `tag` that arrived and wait unclaimed (a
    /// closed endpoint's, which nobody can receive any more): without this they stay in UCX's
    /// unexpected queue for the worker's life. Each is given up to 100 ms; one not done by
    /// then (a rendezvous whose sender is gone) is left to UCX. Returns how many.
    fn purge_unexpected(&self, py: Python<'_>, tag: u64) -> usize {
        let dropped = self.engine.unclaimed.purge(&self.engine.worker, tag);
        self.engine.discard(py, dropped)
    }

    /// Receives a message with `tag` (under `mask`) into `buffer`, which it must fill exactly.
    /// Registered on endpoint `ep` if given, so closing or losing `ep` cancels it.
    #[pyo3(signature = (buffer, tag, mask = FULL_MASK, on_done = None, ep = None, name = None))]
    fn tag_recv(
        &self,
        buffer: &Bound<'_, PyAny>,
        tag: u64,
        mask: u64,
        on_done: Option<&Bound<'_, PyAny>>,
        ep: Option<&Endpoint>,
        name: Option<String>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let recv = TagRecv { tag, up_to: false, mask, ep: ep.map(|e| &e.shared), name, spin_us: SpinUs::Fixed(0) };
        recv.post(&self.engine, buffer, on_done)
    }

    /// Registers the callable that allocates received active messages of a memory type
    /// (0 host, 1 CUDA); it gets the size in bytes.
    fn register_am_allocator(&self, allocator: Py<PyAny>, memory_type: i32) -> PyResult<()> {
        let slot = match memory_type {
            0 => 0,
            1 => 1,
            _ => return Err(PyValueError::new_err(format!("memory type {memory_type} has no allocator slot"))),
        };
        self.am.set_allocator(slot == 1, allocator);
        Ok(())
    }

    /// How many operations were canceled because their endpoint failed, since the last call
    /// (UCX-Py's `cancel_inflight_messages`; the cancelling itself happens during progress).
    fn cancel_inflight_messages(&self) -> u64 {
        self.engine.take_canceled_on_error()
    }

    /// How many operations are in flight.
    fn inflight(&self) -> usize {
        self.engine.inflight()
    }

    /// Cancels everything in flight and waits (briefly) for UCX to let go of it.
    fn cancel_all(&self, py: Python<'_>) {
        self.engine.cancel_all(py);
    }

    /// Connects to a listener at `ip`:`port` (client-server endpoint).
    #[pyo3(signature = (ip, port, error_handling = true))]
    fn connect(&self, py: Python<'_>, ip: &str, port: u16, error_handling: bool) -> PyResult<Endpoint> {
        let ip: IpAddr = ip.parse().map_err(|_| PyValueError::new_err(format!("not an IP address: {ip:?}")))?;
        let addr = SocketAddr::new(ip, port);
        Endpoint::create(py, &self.engine, &self.am, error_handling, |params| {
            ucx_core::Endpoint::connect(&self.engine.worker, addr, params)
        })
    }

    /// Why a connection to a listener found its peer unreachable, where this worker's
    /// context is the cause (no transport that carries one), else None: for the error.
    fn unreachable_listener_hint(&self) -> Option<String> {
        self.engine.worker.context().unreachable_listener_hint()
    }

    /// Connects to the worker whose address is `address` (bytes from `Worker.address()`).
    #[pyo3(signature = (address, error_handling = true))]
    fn connect_to_worker(&self, py: Python<'_>, address: &[u8], error_handling: bool) -> PyResult<Endpoint> {
        let address = WorkerAddress::from_bytes(address)
            .map_err(|e| PyValueError::new_err(format!("not a UCX worker address: {e}")))?;
        Endpoint::create(py, &self.engine, &self.am, error_handling, |params| {
            ucx_core::Endpoint::connect_to_worker(&self.engine.worker, &address, params).map_err(|e| {
                // Over shared memory a worker that is gone shows as its segment failing to
                // attach; what that means for the caller is UCX-Py's "Destination is
                // unreachable" (which TCP reports for the same case).
                if e.status() == Status::ShmemSegment {
                    ucx_core::Error::with_detail(
                        e.op(),
                        Status::Unreachable,
                        "the worker's shared memory is gone: it was closed or its process ended",
                    )
                } else {
                    e
                }
            })
        })
    }

    /// Accepts a connection request passed to a listener's callback.
    #[pyo3(signature = (request, error_handling = true))]
    fn accept(&self, py: Python<'_>, request: &ConnRequestPy, error_handling: bool) -> PyResult<Endpoint> {
        let req = request.take(py)?;
        Endpoint::create(py, &self.engine, &self.am, error_handling, |params| {
            ucx_core::Endpoint::accept(&self.engine.worker, req, params)
        })
    }

    /// Listens on `ip`:`port` (port 0: any free port; ip default: every IPv4 address) and
    /// calls `callback(conn_request)` from progress for each connection.
    #[pyo3(signature = (callback, port = 0, ip = None))]
    fn listen(&self, py: Python<'_>, callback: Py<PyAny>, port: u16, ip: Option<&str>) -> PyResult<Listener> {
        Listener::bind(py, &self.engine, callback, port, ip)
    }
}

/// The spin budget, in microseconds, of a wait of `spin_us` on operations that move `nbytes`
/// (of device memory if `device`): [`ucx_core::spin_budget`], grown by about the time the
/// bytes take over shared memory, or by the device allowance, unless this thread's core is
/// shared. For `Worker.spin` callers that wait on a call's large parts (the collectives).
#[pyfunction]
#[pyo3(signature = (spin_us, nbytes, device = false))]
pub(crate) fn spin_budget_us(spin_us: u64, nbytes: usize, device: bool) -> u64 {
    let memory = if device { MemoryType::Cuda } else { MemoryType::Host };
    submit::spin_budget_for(spin_us, nbytes, memory)
}

//! The async [`Worker`]: a ucx-core worker plus the reactor task that progresses it.
use std::sync::Arc;

use tokio::task::JoinHandle;
use ucx_core::{Context, Features, MemoryType};

use crate::error::Result;

use crate::am::{AmAllocator, AmRouter};
use crate::reactor::{self, ProgressMode, Signals};
use ucx_core::wire::am_header::UCXPY_AM_ID;

/// A UCX worker driven by a reactor task on the current tokio runtime. Cheap to clone;
/// endpoints, listeners and pending operations keep it alive, and the reactor stops when the
/// last handle goes.
#[derive(Clone)]
pub struct Worker {
    pub(crate) inner: Arc<WorkerInner>,
}

pub(crate) struct WorkerInner {
    pub(crate) core: ucx_core::Worker,
    pub(crate) signals: Arc<Signals>,
    pub(crate) am: Arc<AmRouter>,
    reactor: JoinHandle<std::io::Result<()>>,
    mode: ProgressMode,
}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        self.reactor.abort();
        // Queued messages hold the worker; let them go so it can be destroyed.
        self.am.clear();
    }
}

impl Worker {
    /// Creates a worker on `context` and spawns its reactor on the current tokio runtime.
    /// Event and adaptive modes need the context's WAKEUP feature (on by default).
    ///
    /// # Panics
    /// Outside a tokio runtime (as `tokio::spawn` does).
    pub fn new(context: &Context, mode: ProgressMode) -> Result<Worker> {
        let core = ucx_core::Worker::new(context)?;
        if mode != ProgressMode::Polling {
            // Fail here, with UCX's reason, rather than inside the reactor task.
            core.wakeup_fd()?;
        }
        let signals = Arc::new(Signals::new(&core, mode));
        let am = Arc::new(AmRouter::default());
        if context.features().contains(Features::AM) {
            let router = am.clone();
            core.set_am_handler(UCXPY_AM_ID, move |msg| router.deliver(msg))?;
        }
        let reactor = tokio::spawn(reactor::run(core.clone(), signals.clone(), mode));
        Ok(Worker { inner: Arc::new(WorkerInner { core, signals, am, reactor, mode }) })
    }

    /// Registers how active messages of `memory_type` are allocated when they arrive by
    /// rendezvous (UCX-Py's `register_am_allocator`). Host memory defaults to a `Vec<u8>`;
    /// eager messages always arrive in host memory.
    pub fn register_am_allocator(&self, memory_type: MemoryType, allocator: AmAllocator) {
        self.inner.am.set_allocator(memory_type, allocator);
    }

    /// The underlying ucx-core worker (for operations this crate does not wrap).
    pub fn core(&self) -> &ucx_core::Worker {
        &self.inner.core
    }

    /// The progress mode the reactor runs in.
    pub fn mode(&self) -> ProgressMode {
        self.inner.mode
    }

    /// Whether the reactor task is still running (it stops only on a UCX error).
    pub fn is_running(&self) -> bool {
        !self.inner.reactor.is_finished()
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("mode", &self.inner.mode).finish()
    }
}

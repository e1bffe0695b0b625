//! The async [`Worker`]: a ucx-core worker plus the reactor task that progresses it.
use std::sync::Arc;

use tokio::task::JoinHandle;
use ucx_core::unclaimed::{Hold, Scope, DEFAULT_LIMIT};
use ucx_core::{Context, Features, MemoryType, Overflow};

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

/// An endpoint as the worker's sweep sees it: taken down when its peer leaves more unreceived
/// on its tags than the cap allows.
pub(crate) trait Swept: Send + Sync {
    fn over_limit(&self, overflow: Overflow);
    /// Takes the stream bytes that arrived unasked into its backlog; returns how many it holds.
    fn fill_stream_backlog(&self) -> usize;
}

/// What a peer leaves unreceived on its endpoint's own tags, and the cap on it. Only the
/// watched tags are swept: receives made straight on [`Worker::core`] on other tags must not
/// find their messages gone.
pub(crate) type Unclaimed = Hold<dyn Swept>;

pub(crate) struct WorkerInner {
    pub(crate) core: ucx_core::Worker,
    pub(crate) signals: Arc<Signals>,
    pub(crate) am: Arc<AmRouter>,
    pub(crate) unclaimed: Arc<Unclaimed>,
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
        let unclaimed = Arc::new(Unclaimed::new(Some(DEFAULT_LIMIT), Scope::Watched));
        let reactor = tokio::spawn(reactor::run(core.clone(), signals.clone(), mode, unclaimed.clone()));
        Ok(Worker { inner: Arc::new(WorkerInner { core, signals, am, unclaimed, reactor, mode }) })
    }

    /// Caps what a peer may leave unreceived on one endpoint: the bytes of the messages
    /// waiting on the endpoint's own tags, beyond the next message of each (a large
    /// rendezvous sent before its receive never counts), and separately its unread stream
    /// bytes. The reactor counts them every
    /// 10 ms; an endpoint over the cap is closed, and its operations fail with
    /// [`Error::Unreceived`](crate::Error::Unreceived). Default 1 GiB
    /// ([`ucx_core::unclaimed::DEFAULT_LIMIT`]); `None` lifts the cap and stops counting.
    pub fn set_max_unclaimed_bytes(&self, limit: Option<usize>) {
        self.inner.unclaimed.set_limit(limit);
    }

    /// The cap [`Worker::set_max_unclaimed_bytes`] set.
    pub fn max_unclaimed_bytes(&self) -> Option<usize> {
        self.inner.unclaimed.limit()
    }

    /// Whether a message whose tag matches `tag` under `mask` has arrived and waits to be
    /// received: held by the worker (see [`Worker::set_max_unclaimed_bytes`]) or in UCX's
    /// queue. (`Worker::core`'s `tag_probe` sees only the latter.)
    pub fn tag_probe(&self, tag: u64, mask: u64) -> bool {
        self.inner.unclaimed.probe(&self.inner.core, tag, mask)
    }

    /// How many messages the worker holds for receives still to come, and their bytes.
    pub fn unclaimed(&self) -> (usize, usize) {
        self.inner.unclaimed.held()
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

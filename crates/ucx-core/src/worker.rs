//! The UCP worker (`ucp_worker_h`): where communication progresses. Progress, the wakeup fd
//! and its arm/signal protocol, the worker's address, flush and fence, and its info text.
//! Operations that belong to a worker rather than an endpoint live in their own modules
//! (`tag` for receives and probes, `am` for handlers).
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::address::WorkerAddress;
use crate::buffer::MemoryType;
use crate::context::{Context, Features};
use crate::error::{check, Error, Result, Status};
use crate::live::{self, Kind};
use crate::request::{self, Callback, Completion, Submitted};
use crate::{sys, text};

/// The most rounds [`Worker::progress_batch`] runs. While a peer keeps sending, every round
/// finds work, so "progress until a round finds nothing" may never end, and the event loop
/// that called it (its timers, its other endpoints) starves; a receiver that had fallen behind
/// a streaming peer stalled its loop for over a minute. 64 rounds is far past what an idle
/// worker or a single message needs.
pub const PROGRESS_BATCH: u32 = 64;

/// Progress rounds between two clock reads in [`Worker::spin_until`].
pub const SPIN_CLOCK_ROUNDS: u32 = 8;

/// Progress rounds between two checks of the wakeup fd (a `poll` system call) in
/// [`Worker::spin_until`].
pub const SPIN_WAKEUP_ROUNDS: u32 = 16;

/// Progress rounds between two `sched_yield`s in [`Worker::spin_until`] (about 1.5–3 µs of
/// spinning): with more busy processes than cores (4 ranks on 2 here), a spin that never
/// yields keeps the peer it waits for off the CPU until the scheduler preempts it. Measured
/// (docs/spin.md): a 4-rank 1 KiB alltoallv 376 -> 118–220 µs in event mode, 8 ms -> 92–94 µs in
/// polling mode; where nothing else is runnable the call returns at once.
pub const SPIN_YIELD_ROUNDS: u32 = 64;

/// The yield period of a thread whose last yield let another thread run (it took at least
/// [`CONTENDED_YIELD`]): the core is shared, so the thread yields every few rounds, and
/// doubles the period back to [`SPIN_YIELD_ROUNDS`] with each yield that returns at once. The
/// period is kept per thread across spins. Two processes on two cores never see a long yield,
/// so their latency is untouched (tag_lat 8 B 0.23 µs either way); 4 ranks on 2 cores wait
/// far less for the rank they need (docs/spin.md).
pub const SPIN_YIELD_ROUNDS_CONTENDED: u32 = 4;

/// A `sched_yield` that took at least this long ran another thread (one that returns at once
/// takes well under a microsecond here).
pub const CONTENDED_YIELD: Duration = Duration::from_micros(2);

/// The rate [`spin_budget`] assumes for the bytes a wait moves (8 GB/s, shared memory).
pub const SPIN_BYTES_PER_US: usize = 8_000;

/// The most [`spin_budget`] adds for the bytes a wait on host memory moves (8 MB's worth):
/// transfers of 2–8 MiB finish in the spin (at 200 µs a 4 MiB round trip slept and took 15 %
/// longer); 4 ranks on 2 cores are unchanged by it, and lost with 5 ms (docs/spin.md).
pub const MAX_SIZE_SPIN: Duration = Duration::from_micros(1000);

/// What [`spin_budget`] adds for any wait on device memory, unless `UCXA_DEVICE_SPIN_US` says
/// otherwise (read once). A small device transfer's time is the CUDA driver's fixed costs
/// (IPC mapping, stream work, event queries), not its bytes: on an H200 VM a `cuda_ipc`
/// rendezvous took 210–350 µs one way from 8 B to 1 MiB. Sleeping on the wakeup fd meanwhile
/// costs the wake-up (for a copy's end, a host callback the driver runs on its own thread),
/// which UCX's tools never pay: they poll. The measurements: docs/spin.md.
pub const DEVICE_SPIN: Duration = Duration::from_micros(500);

/// The rate [`spin_budget`] assumes for the bytes a wait on device memory moves (100 GB/s,
/// between NVLink and a copy within one GPU): 64 MiB add 671 µs.
pub const DEVICE_BYTES_PER_US: usize = 100_000;

/// The most [`spin_budget`] adds for a wait on device memory, fixed costs and bytes together.
pub const MAX_DEVICE_SPIN: Duration = Duration::from_millis(2);

/// [`DEVICE_SPIN`], or `UCXA_DEVICE_SPIN_US` where set to a number of microseconds.
pub fn device_spin() -> Duration {
    static SPIN: std::sync::OnceLock<Duration> = std::sync::OnceLock::new();
    *SPIN.get_or_init(|| {
        std::env::var("UCXA_DEVICE_SPIN_US")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map_or(DEVICE_SPIN, Duration::from_micros)
    })
}

/// The budget of a [`Worker::spin_until`] that waits `base` for operations moving `bytes` of
/// `memory`: `base` plus about the time those bytes take over shared memory (at most
/// [`MAX_SIZE_SPIN`]) for host memory; for device memory, plus [`device_spin`] and the bytes'
/// time at [`DEVICE_BYTES_PER_US`] (at most [`MAX_DEVICE_SPIN`]). A large
/// transfer then finishes in the spin instead of after a trip through the wakeup fd and the
/// scheduler (UCX copies it inside the spin's progress calls, which a flat budget counts as
/// waiting). Nothing is added where the calling thread's yields show its core shared (more
/// busy processes than cores): the peers that copy the bytes need that core. The one home of
/// this rule: ucx-async's inline spin and ucp's (sends, receives, collectives) use it
/// (measurements: docs/spin.md).
pub fn spin_budget(base: Duration, bytes: usize, memory: MemoryType) -> Duration {
    if spin_yield_period() < SPIN_YIELD_ROUNDS {
        return base;
    }
    spin_budget_even_if_shared(base, bytes, memory)
}

/// [`spin_budget`] without its shared-core rule: `base` grown with the bytes whether or not the
/// calling thread's core is shared. For a wait whose alternative to spinning costs more than
/// the core it holds (a spin on a shared core yields it every few rounds): the Python
/// collectives', which otherwise finish through a pass of the event loop (docs/spin.md).
pub fn spin_budget_even_if_shared(base: Duration, bytes: usize, memory: MemoryType) -> Duration {
    if memory.is_device() {
        let bytes = Duration::from_micros((bytes / DEVICE_BYTES_PER_US) as u64);
        return base + (device_spin() + bytes).min(MAX_DEVICE_SPIN);
    }
    base + Duration::from_micros((bytes / SPIN_BYTES_PER_US) as u64).min(MAX_SIZE_SPIN)
}

/// How a [`Worker::spin_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spin {
    /// Whether `done()` held (false: the budget ran out).
    pub done: bool,
    /// Whether the spin left the worker unarmed (an `arm` it made answered busy): a caller that
    /// sleeps on the wakeup fd must progress and arm again before it sleeps.
    pub disarmed: bool,
}

/// What one [`Worker::progress_batch`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    /// Events handled.
    pub events: u32,
    /// Whether the last round found nothing to do (false: the batch ended at its bound).
    pub idle: bool,
}

/// A UCP worker. Cheap to clone; endpoints, listeners and requests keep theirs alive, and it
/// keeps its [`Context`] alive.
///
/// Created with `UCS_THREAD_MODE_MULTI` by [`Worker::new`], so every method may be called from
/// any thread, and `Worker` is `Send + Sync` (weaker modes: the unsafe
/// [`Worker::with_thread_mode`]); completion callbacks and handlers run on whichever thread
/// calls [`Worker::progress`].
#[derive(Clone)]
pub struct Worker {
    inner: Arc<WorkerInner>,
}

pub(crate) struct WorkerInner {
    handle: sys::ucp_worker_h,
    context: Context,
    /// Active-message handlers by id. Replaced handlers are kept until the worker is destroyed,
    /// since another thread may still be running one inside progress.
    pub(crate) am_handlers: Mutex<Vec<(u16, Box<crate::am::HandlerCell>)>>,
    /// Whether anyone has armed the worker (`arm`, `wait`). Until then no transport signals
    /// the wakeup fd and [`Worker::spin_until`] skips its check; after it, a shared-memory peer
    /// signals every message through a socket while this side is armed, so a spin that armed
    /// with nobody sleeping would put a system call on each side of every message.
    armed_ever: AtomicBool,
}

// SAFETY: the worker is created with UCS_THREAD_MODE_MULTI, which makes UCP serialise access
// internally, or by the unsafe with_thread_mode, whose caller promises one thread at a time;
// the handler table is behind a Mutex.
unsafe impl Send for WorkerInner {}
// SAFETY: as above.
unsafe impl Sync for WorkerInner {}

impl Drop for WorkerInner {
    fn drop(&mut self) {
        // SAFETY: endpoints, listeners and requests hold Worker clones, so none is left; AM
        // handler cells are freed after UCX can no longer call them.
        unsafe { sys::ucp_worker_destroy(self.handle) };
        live::destroyed(Kind::Worker);
    }
}

/// How a worker may be used from threads (`ucs_thread_mode_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ThreadMode {
    /// One thread only (`UCS_THREAD_MODE_SINGLE`).
    Single,
    /// Any thread, one at a time (`UCS_THREAD_MODE_SERIALIZED`).
    Serialized,
    /// Any thread, concurrently (`UCS_THREAD_MODE_MULTI`); UCX locks internally.
    Multi,
}

impl ThreadMode {
    fn raw(self) -> sys::ucs_thread_mode_t {
        match self {
            ThreadMode::Single => sys::UCS_THREAD_MODE_SINGLE,
            ThreadMode::Serialized => sys::UCS_THREAD_MODE_SERIALIZED,
            ThreadMode::Multi => sys::UCS_THREAD_MODE_MULTI,
        }
    }
}

/// The result of [`Worker::arm`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Armed {
    /// The wakeup fd will become readable on the next event: safe to sleep on it.
    Armed,
    /// Events are pending (`UCS_ERR_BUSY`): progress again before sleeping.
    Busy,
}

impl Worker {
    /// Creates a worker on `context` (thread mode MULTI).
    pub fn new(context: &Context) -> Result<Worker> {
        // SAFETY: MULTI lets any thread use the worker concurrently.
        unsafe { Self::with_thread_mode(context, ThreadMode::Multi) }
    }

    /// Creates a worker with a weaker thread mode, which saves UCX's internal locking.
    ///
    /// # Safety
    /// With [`ThreadMode::Single`] or [`ThreadMode::Serialized`], the caller guarantees that the
    /// worker and everything created from it (endpoints, listeners, requests, messages) are
    /// used by one thread at a time (for `Single`: always the same thread), although the types
    /// are `Send + Sync`. A reactor that owns the worker on its own thread can promise that.
    pub unsafe fn with_thread_mode(context: &Context, mode: ThreadMode) -> Result<Worker> {
        // SAFETY: plain C parameter struct; zero means "field not set".
        let mut params: sys::ucp_worker_params_t = unsafe { std::mem::zeroed() };
        params.field_mask = sys::UCP_WORKER_PARAM_FIELD_THREAD_MODE as u64;
        params.thread_mode = mode.raw();
        let mut handle = std::ptr::null_mut();
        // SAFETY: context is live (we keep a clone); UCX writes the worker handle.
        check("ucp_worker_create", unsafe { sys::ucp_worker_create(context.handle(), &params, &mut handle) })?;
        live::created(Kind::Worker);
        Ok(Worker {
            inner: Arc::new(WorkerInner {
                handle,
                context: context.clone(),
                am_handlers: Mutex::new(Vec::new()),
                armed_ever: AtomicBool::new(false),
            }),
        })
    }

    /// The thread mode UCX actually gave the worker (`ucp_worker_query`); UCX may grant a
    /// stronger one than asked for.
    pub fn thread_mode(&self) -> Result<ThreadMode> {
        // SAFETY: plain C struct; zero is a valid initial value.
        let mut attr: sys::ucp_worker_attr_t = unsafe { std::mem::zeroed() };
        attr.field_mask = sys::UCP_WORKER_ATTR_FIELD_THREAD_MODE as u64;
        // SAFETY: the worker is live; UCX fills the requested field.
        check("ucp_worker_query", unsafe { sys::ucp_worker_query(self.inner.handle, &mut attr) })?;
        Ok(match attr.thread_mode {
            sys::UCS_THREAD_MODE_SINGLE => ThreadMode::Single,
            sys::UCS_THREAD_MODE_SERIALIZED => ThreadMode::Serialized,
            _ => ThreadMode::Multi,
        })
    }

    /// The context this worker belongs to.
    pub fn context(&self) -> &Context {
        &self.inner.context
    }

    /// An opaque identity of the UCX worker (its handle, as UCX-Py's `get_ucp_worker` gave).
    pub fn id(&self) -> usize {
        self.handle() as usize
    }

    pub(crate) fn handle(&self) -> sys::ucp_worker_h {
        self.inner.handle
    }

    pub(crate) fn inner(&self) -> &WorkerInner {
        &self.inner
    }

    pub(crate) fn downgrade(&self) -> std::sync::Weak<WorkerInner> {
        Arc::downgrade(&self.inner)
    }

    pub(crate) fn from_inner(inner: Arc<WorkerInner>) -> Worker {
        Worker { inner }
    }

    /// Whether two handles refer to the same worker.
    pub fn same_as(&self, other: &Worker) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Runs one round of progress (`ucp_worker_progress`); returns how many events it handled
    /// (0: nothing to do). Completion callbacks, AM handlers and connection handlers run here.
    pub fn progress(&self) -> u32 {
        // SAFETY: the worker is live; MULTI thread mode allows any thread.
        unsafe { sys::ucp_worker_progress(self.inner.handle) }
    }

    /// Progresses until a round handles nothing or [`PROGRESS_BATCH`] rounds have run. When
    /// the batch ends busy ([`Batch::idle`] false), UCX may hold work that nothing will signal
    /// on the wakeup fd: the caller must progress again (after yielding to its event loop),
    /// not arm and sleep.
    pub fn progress_batch(&self) -> Batch {
        let mut events = 0;
        for _ in 0..PROGRESS_BATCH {
            let n = self.progress();
            if n == 0 {
                return Batch { events, idle: true };
            }
            events += n;
        }
        Batch { events, idle: false }
    }

    /// Progresses on the calling thread until `done()` holds or `budget` has passed, for a
    /// caller that expects its operation to finish within microseconds (a trip through a
    /// scheduler or a wake-up from the fd costs more). Returns at once if `done()` holds.
    ///
    /// The one spin loop of the project: the tokio reactor's inline spin and the Python
    /// engine's both run it.
    /// - `done()` is checked after every round.
    /// - The clock is read every [`SPIN_CLOCK_ROUNDS`] rounds (a read costs about as much as a
    ///   round that finds nothing), and not at all when `done()` holds within the first ones.
    /// - Every [`SPIN_YIELD_ROUNDS`] rounds the thread yields its core to any other runnable
    ///   thread (a system call; only waits longer than that many rounds pay it), every
    ///   [`SPIN_YIELD_ROUNDS_CONTENDED`] once a yield has shown the core is shared.
    /// - Every [`SPIN_WAKEUP_ROUNDS`] rounds, if the worker was ever armed (a sleeping
    ///   reactor, not a polling one) and the wakeup fd is readable, [`Worker::arm`]
    ///   hands what it signals to the transports: once a worker is armed, UCX polls some
    ///   transports only after that (measured: a spin on progress alone waited out its whole
    ///   budget for each message).
    pub fn spin_until(&self, budget: Duration, mut done: impl FnMut() -> bool) -> Spin {
        let mut spin = Spin { done: done(), disarmed: false };
        let mut start = None;
        let mut round = 0u32;
        let mut yield_every = SPIN_YIELD_EVERY.with(std::cell::Cell::get);
        while !spin.done {
            self.progress();
            spin.done = done();
            round = round.wrapping_add(1);
            if spin.done {
                break;
            }
            if round % SPIN_WAKEUP_ROUNDS == 0
                && self.inner.armed_ever.load(Ordering::Relaxed)
                && self.wakeup_pending().unwrap_or(false)
            {
                // Busy: events are pending and the worker stays unarmed; the caller hears so.
                spin.disarmed = self.arm().map_or(true, |a| a == Armed::Busy);
            }
            if round % yield_every == 0 {
                // The peer we wait for may need this core (more busy processes than cores).
                yield_every = yield_core(yield_every);
            }
            if round % SPIN_CLOCK_ROUNDS == 0 {
                let now = Instant::now();
                if now.duration_since(*start.get_or_insert(now)) >= budget {
                    break;
                }
            }
        }
        spin
    }

    /// The worker's wakeup file descriptor (`ucp_worker_get_efd`): readable after
    /// [`Worker::arm`] returned [`Armed::Armed`] and an event arrived. Needs
    /// [`Features::WAKEUP`]. The fd belongs to the worker; do not close it.
    pub fn wakeup_fd(&self) -> Result<RawFd> {
        self.require(Features::WAKEUP, "ucp_worker_get_efd")?;
        let mut fd = -1;
        // SAFETY: the worker is live; UCX writes the fd.
        check("ucp_worker_get_efd", unsafe { sys::ucp_worker_get_efd(self.inner.handle, &mut fd) })?;
        Ok(fd)
    }

    /// Whether the wakeup fd is readable now (a zero-timeout `poll`): after [`Worker::arm`],
    /// UCX has events that only another `arm` (answering [`Armed::Busy`]) hands to the
    /// transports. Lets a thread that spins on progress notice them without sleeping.
    pub fn wakeup_pending(&self) -> Result<bool> {
        let fd = self.wakeup_fd()?;
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: pfd is a valid pollfd array of length 1 for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, 0) };
        if n < 0 {
            return Err(Error::with_detail("poll", Status::IoError, std::io::Error::last_os_error().to_string()));
        }
        Ok(n > 0 && pfd.revents & libc::POLLIN != 0)
    }

    /// Arms the wakeup fd (`ucp_worker_arm`). [`Armed::Busy`] means events are pending and the
    /// caller must progress again instead of sleeping. The fd is level-insensitive: after a
    /// wake-up, drain progress fully, then arm again.
    pub fn arm(&self) -> Result<Armed> {
        self.inner.armed_ever.store(true, Ordering::Relaxed);
        // SAFETY: the worker is live.
        let status = unsafe { sys::ucp_worker_arm(self.inner.handle) };
        match Status::from_raw(status) {
            None => Ok(Armed::Armed),
            Some(Status::Busy) => Ok(Armed::Busy),
            Some(s) => Err(Error::new("ucp_worker_arm", s)),
        }
    }

    /// Wakes a thread sleeping on the wakeup fd (`ucp_worker_signal`); callable from any thread.
    pub fn signal(&self) -> Result<()> {
        // SAFETY: the worker is live; ucp_worker_signal is thread-safe by contract.
        check("ucp_worker_signal", unsafe { sys::ucp_worker_signal(self.inner.handle) })
    }

    /// Blocks the calling thread until an event arrives (`ucp_worker_wait`). Needs WAKEUP.
    pub fn wait(&self) -> Result<()> {
        self.require(Features::WAKEUP, "ucp_worker_wait")?;
        self.inner.armed_ever.store(true, Ordering::Relaxed);
        // SAFETY: the worker is live.
        check("ucp_worker_wait", unsafe { sys::ucp_worker_wait(self.inner.handle) })
    }

    /// The worker's address, which a peer passes to [`crate::Endpoint::connect_to_worker`].
    pub fn address(&self) -> Result<WorkerAddress> {
        let mut addr = std::ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the worker is live; UCX allocates the address and writes pointer and length.
        check("ucp_worker_get_address", unsafe {
            sys::ucp_worker_get_address(self.inner.handle, &mut addr, &mut len)
        })?;
        // SAFETY: UCX returned `len` readable bytes at `addr`.
        let address = WorkerAddress::from_ucx(unsafe { std::slice::from_raw_parts(addr.cast::<u8>(), len) });
        // SAFETY: the address came from ucp_worker_get_address on this worker; released once.
        unsafe { sys::ucp_worker_release_address(self.inner.handle, addr) };
        Ok(address)
    }

    /// Orders operations: those issued before the fence complete remotely before those after
    /// (`ucp_worker_fence`).
    pub fn fence(&self) -> Result<()> {
        // SAFETY: the worker is live.
        check("ucp_worker_fence", unsafe { sys::ucp_worker_fence(self.inner.handle) })
    }

    /// Flushes every outstanding operation of every endpoint (`ucp_worker_flush_nbx`).
    pub fn flush(&self) -> Result<Submitted<'static>> {
        let params = request::params(Callback::Send, None);
        // SAFETY: the worker is live and params is valid for the call; no buffer is involved.
        unsafe {
            let ret = sys::ucp_worker_flush_nbx(self.inner.handle, &params);
            Submitted::from_status_ptr("ucp_worker_flush_nbx", ret, self, Completion::default())
        }
    }

    /// UCX's description of the worker (`ucp_worker_print_info`).
    pub fn info(&self) -> String {
        text::capture(|file| {
            // SAFETY: the worker is live and file is an open stream.
            unsafe { sys::ucp_worker_print_info(self.inner.handle, file) }
        })
    }

    pub(crate) fn require(&self, feature: Features, op: &'static str) -> Result<()> {
        if self.inner.context.features().contains(feature) {
            Ok(())
        } else {
            Err(Error::with_detail(op, Status::Unsupported, format!("the context lacks {feature:?}")))
        }
    }
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker").field("handle", &self.inner.handle).finish()
    }
}

thread_local! {
    /// This thread's yield period in [`Worker::spin_until`]; see [`SPIN_YIELD_ROUNDS_CONTENDED`].
    static SPIN_YIELD_EVERY: std::cell::Cell<u32> = const { std::cell::Cell::new(SPIN_YIELD_ROUNDS) };
}

/// The calling thread's current yield period in [`Worker::spin_until`], in rounds: between
/// [`SPIN_YIELD_ROUNDS_CONTENDED`] and [`SPIN_YIELD_ROUNDS`]. For diagnostics and tests.
pub fn spin_yield_period() -> u32 {
    SPIN_YIELD_EVERY.with(std::cell::Cell::get)
}

/// Gives the core away now and then while a thread polls UCX with nothing to do, on the
/// same rule as [`Worker::spin_until`] (every [`SPIN_YIELD_ROUNDS`] idle rounds, every
/// [`SPIN_YIELD_ROUNDS_CONTENDED`] once a yield has shown the core shared): a busy-polling
/// loop must not keep the process it waits for off a shared core for a whole time slice.
#[derive(Debug, Default)]
pub struct IdleYield {
    idle_rounds: u32,
    yields: u64,
}

impl IdleYield {
    /// Counts one polling round (`idle`: it found nothing to do) and yields the core when the
    /// idle rounds since the last yield or event reach this thread's yield period.
    pub fn round(&mut self, idle: bool) {
        if !idle {
            self.idle_rounds = 0;
            return;
        }
        self.idle_rounds += 1;
        let every = SPIN_YIELD_EVERY.with(std::cell::Cell::get);
        if self.idle_rounds >= every {
            self.idle_rounds = 0;
            self.yields += 1;
            yield_core(every);
        }
    }

    /// How many times it has yielded the core.
    pub fn yields(&self) -> u64 {
        self.yields
    }
}

/// Yields the core and returns the next yield period: the short one if another thread ran
/// meanwhile (the yield took long), else one closer to the long one.
fn yield_core(every: u32) -> u32 {
    let t = Instant::now();
    std::thread::yield_now();
    let took = t.elapsed();
    let next = if took >= CONTENDED_YIELD {
        SPIN_YIELD_ROUNDS_CONTENDED
    } else {
        // Nobody else wanted the core: back towards the long period, a doubling at a time.
        every.saturating_mul(2).min(SPIN_YIELD_ROUNDS)
    };
    SPIN_YIELD_EVERY.with(|c| c.set(next));
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_rounds_yield_once_per_period_and_events_start_the_count_again() {
        SPIN_YIELD_EVERY.with(|c| c.set(SPIN_YIELD_ROUNDS));
        let mut idle = IdleYield::default();
        let rounds = |idle: &mut IdleYield, n: u32| (0..n).for_each(|_| idle.round(true));
        rounds(&mut idle, SPIN_YIELD_ROUNDS - 1);
        idle.round(false); // UCX did something: no yield is owed
        rounds(&mut idle, SPIN_YIELD_ROUNDS - 1);
        assert_eq!(idle.yields(), 0);
        idle.round(true);
        assert_eq!(idle.yields(), 1, "the period's worth of idle rounds in a row");
    }

    #[test]
    fn a_spin_budget_grows_with_the_bytes_unless_the_core_is_shared() {
        let base = Duration::from_micros(20);
        SPIN_YIELD_EVERY.with(|c| c.set(SPIN_YIELD_ROUNDS));
        let host = MemoryType::Host;
        assert_eq!(spin_budget(base, 0, host), base);
        assert_eq!(spin_budget(base, SPIN_BYTES_PER_US - 1, host), base, "less than a microsecond's worth");
        // 1 MiB at 8 GB/s: 131 µs more.
        assert_eq!(spin_budget(base, 1 << 20, host), base + Duration::from_micros(131));
        assert_eq!(spin_budget(base, 1 << 30, host), base + MAX_SIZE_SPIN, "capped");
        assert_eq!(spin_budget(Duration::ZERO, 1 << 20, host), Duration::from_micros(131));
        assert_eq!(spin_budget(base, 1 << 20, MemoryType::Unknown), base + Duration::from_micros(131), "as host");
        // Device memory: the driver's fixed costs, then the bytes at 100 GB/s.
        for memory in [MemoryType::Cuda, MemoryType::CudaManaged] {
            assert_eq!(spin_budget(base, 0, memory), base + device_spin());
            assert_eq!(spin_budget(base, 1 << 20, memory), base + device_spin() + Duration::from_micros(10));
            assert_eq!(spin_budget(base, 64 << 20, memory), base + device_spin() + Duration::from_micros(671));
            assert_eq!(spin_budget(base, 1 << 30, memory), base + MAX_DEVICE_SPIN, "capped");
        }
        // A thread whose last yield ran another process: the peers need the core.
        SPIN_YIELD_EVERY.with(|c| c.set(SPIN_YIELD_ROUNDS_CONTENDED));
        assert_eq!(spin_budget(base, 1 << 20, host), base);
        assert_eq!(spin_budget(base, 1 << 20, MemoryType::Cuda), base);
        SPIN_YIELD_EVERY.with(|c| c.set(SPIN_YIELD_ROUNDS / 2));
        assert_eq!(spin_budget(base, 1 << 20, host), base, "still on its way back to the long period");
        // Unless the caller asks for the bytes' time regardless.
        assert_eq!(spin_budget_even_if_shared(base, 1 << 20, host), base + Duration::from_micros(131));
        assert_eq!(spin_budget_even_if_shared(base, 1 << 30, host), base + MAX_SIZE_SPIN, "capped");
        SPIN_YIELD_EVERY.with(|c| c.set(SPIN_YIELD_ROUNDS));
        assert_eq!(spin_budget_even_if_shared(base, 1 << 20, host), spin_budget(base, 1 << 20, host));
    }
}

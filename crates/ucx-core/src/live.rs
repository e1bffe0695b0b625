//! Counts of live UCX objects, for tests that prove nothing leaks or outlives its owner.
//!
//! Each wrapper bumps its counter when UCX creates the object and drops it when UCX destroys
//! it. In-flight requests count too, so this runs per operation: each thread keeps its own
//! counters (a plain load and store, where a shared atomic add cost about 5 ns of an 8-byte
//! round trip), and a reader sums every thread's under the registry's lock. An object made on
//! one thread and destroyed on another leaves +1 and -1 that sum to zero.
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Mutex};

/// The kinds of UCX object that ucx-core creates and destroys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `ucp_context_h`.
    Context,
    /// `ucp_worker_h`.
    Worker,
    /// `ucp_listener_h`.
    Listener,
    /// `ucp_ep_h`.
    Endpoint,
    /// `ucp_mem_h`.
    Memory,
    /// `ucp_rkey_h`.
    RemoteKey,
    /// An in-flight request (`ucs_status_ptr_t`) not yet released.
    Request,
    /// An active-message data descriptor held past its callback.
    AmData,
}

const KINDS: usize = 8;

type Counts = [AtomicIsize; KINDS];

/// Every live thread's counters, and what threads that have exited left behind.
struct Registry {
    threads: Vec<Arc<Counts>>,
    exited: [isize; KINDS],
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry { threads: Vec::new(), exited: [0; KINDS] });

fn registry() -> std::sync::MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|p| p.into_inner())
}

/// This thread's counters; only this thread writes them.
struct Local(Arc<Counts>);

impl Local {
    fn register() -> Local {
        let counts: Arc<Counts> = Arc::new([const { AtomicIsize::new(0) }; KINDS]);
        registry().threads.push(counts.clone());
        Local(counts)
    }
}

impl Drop for Local {
    fn drop(&mut self) {
        let mut r = registry();
        for (kept, c) in r.exited.iter_mut().zip(self.0.iter()) {
            *kept += c.load(Ordering::Relaxed);
        }
        r.threads.retain(|t| !Arc::ptr_eq(t, &self.0));
    }
}

thread_local! {
    static LOCAL: Local = Local::register();
}

fn add(kind: Kind, delta: isize) {
    let done = LOCAL.try_with(|l| {
        let c = &l.0[kind as usize];
        // Only this thread writes it: no read-modify-write needed.
        c.store(c.load(Ordering::Relaxed) + delta, Ordering::Relaxed);
    });
    if done.is_err() {
        // This thread's counters are already gone (a drop during thread exit).
        registry().exited[kind as usize] += delta;
    }
}

pub(crate) fn created(kind: Kind) {
    add(kind, 1);
}

pub(crate) fn destroyed(kind: Kind) {
    add(kind, -1);
}

/// How many objects of `kind` exist now, process-wide.
pub fn count(kind: Kind) -> isize {
    let r = registry();
    r.exited[kind as usize] + r.threads.iter().map(|t| t[kind as usize].load(Ordering::Relaxed)).sum::<isize>()
}

/// All counts, in the order of [`Kind`]; all zero once every UCX object has been dropped.
pub fn snapshot() -> [(Kind, isize); KINDS] {
    use Kind::*;
    [Context, Worker, Listener, Endpoint, Memory, RemoteKey, Request, AmData].map(|k| (k, count(k)))
}

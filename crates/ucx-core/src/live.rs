//! Counts of live UCX objects, for tests that prove nothing leaks or outlives its owner.
//!
//! Each wrapper bumps its counter when UCX creates the object and drops it when UCX destroys
//! it. The counters are process-wide relaxed atomics touched only on creation and destruction,
//! never per operation.
use std::sync::atomic::{AtomicIsize, Ordering};

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
static COUNTS: [AtomicIsize; KINDS] = [const { AtomicIsize::new(0) }; KINDS];

pub(crate) fn created(kind: Kind) {
    COUNTS[kind as usize].fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn destroyed(kind: Kind) {
    COUNTS[kind as usize].fetch_sub(1, Ordering::Relaxed);
}

/// How many objects of `kind` exist now, process-wide.
pub fn count(kind: Kind) -> isize {
    COUNTS[kind as usize].load(Ordering::Relaxed)
}

/// All counts, in the order of [`Kind`]; all zero once every UCX object has been dropped.
pub fn snapshot() -> [(Kind, isize); KINDS] {
    use Kind::*;
    [Context, Worker, Listener, Endpoint, Memory, RemoteKey, Request, AmData].map(|k| (k, count(k)))
}

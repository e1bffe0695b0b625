//! The worker's hold on messages that arrived before anyone received them
//! ([`ucx_core::Unclaimed`]): the tags each endpoint receives on are watched for it, a sweep
//! after progress (at most every [`SWEEP_INTERVAL`]) takes waiting messages out of UCX's
//! queue and names the endpoints whose peer left more than the cap unreceived (the engine
//! closes them). Every tag receive on the worker goes through [`Hold::recv_owned`], which
//! looks here first. Owners are any type (the engine's `dyn OpOwner`), so this module needs
//! nothing of the engine's.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use ucx_core::{Overflow, Owned, ProbedMessage, RecvBuffer, Unclaimed};

use crate::sync::lock;

/// How often progress sweeps: what arrives between two sweeps is not counted yet.
const SWEEP_INTERVAL: Duration = Duration::from_millis(10);

/// The default cap on what a peer may leave unreceived on one endpoint (beyond the next
/// message of each of its tags).
pub(crate) const DEFAULT_LIMIT: usize = 1 << 30;

/// How long dropping one held message may progress the worker (a rendezvous whose sender is
/// gone is never done; it is left to UCX).
const DISCARD_LIMIT: Duration = Duration::from_millis(100);

struct State<O: ?Sized> {
    held: Unclaimed,
    /// The endpoints whose tags are watched, by key.
    owners: HashMap<u64, Weak<O>>,
    next_sweep: Instant,
}

/// See the module's docs.
pub(crate) struct Hold<O: ?Sized>(Mutex<State<O>>);

impl<O: ?Sized> Hold<O> {
    pub(crate) fn new() -> Hold<O> {
        Hold(Mutex::new(State {
            held: Unclaimed::new(Some(DEFAULT_LIMIT)),
            owners: HashMap::new(),
            next_sweep: Instant::now(),
        }))
    }

    /// Sets the cap (`None`: no cap; then no tag is watched and nothing is swept).
    pub(crate) fn set_limit(&self, limit: Option<usize>) {
        let mut state = lock(&self.0);
        state.held.set_limit(limit);
        if limit.is_none() {
            let keys: Vec<u64> = state.owners.drain().map(|(k, _)| k).collect();
            for key in keys {
                // What was held stays held, to be received in order.
                state.held.unwatch(key);
            }
        }
    }

    /// The cap.
    pub(crate) fn limit(&self) -> Option<usize> {
        lock(&self.0).held.limit()
    }

    /// Watches `tag` for endpoint `key` (nothing while there is no cap). `owner` is called
    /// only when the tag is new to it: every receive calls this.
    pub(crate) fn watch(&self, tag: u64, key: u64, owner: impl FnOnce() -> Weak<O>) {
        let mut state = lock(&self.0);
        if state.held.limit().is_some() && state.held.owner_of(tag) != Some(key) {
            state.held.watch(tag, key);
            state.owners.insert(key, owner());
        }
    }

    /// Receives the next message matching `tag`/`mask` into `buf`: one held here if any, else
    /// posted to UCX. Under the hold's lock, so that no sweep comes between the look and the
    /// post.
    pub(crate) fn recv_owned<B: RecvBuffer + Send + 'static>(
        &self,
        worker: &ucx_core::Worker,
        buf: B,
        tag: u64,
        mask: u64,
    ) -> ucx_core::Result<Owned<B>> {
        let mut state = lock(&self.0);
        match state.held.take(tag, mask) {
            Some(msg) => msg.recv_owned(buf),
            None => worker.tag_recv_owned(buf, tag, mask),
        }
    }

    /// Whether a message with exactly `tag` waits, here or in UCX.
    pub(crate) fn probe(&self, worker: &ucx_core::Worker, tag: u64) -> bool {
        lock(&self.0).held.holds(tag) || worker.tag_probe(tag, ucx_core::FULL_MASK).is_some()
    }

    /// Sweeps if one is due; returns the endpoints over the cap, which the caller closes.
    pub(crate) fn sweep_if_due(&self, worker: &ucx_core::Worker) -> Vec<(Arc<O>, Overflow)> {
        let mut state = lock(&self.0);
        let now = Instant::now();
        if !state.held.is_watching() || now < state.next_sweep {
            return Vec::new();
        }
        state.next_sweep = now + SWEEP_INTERVAL;
        let over = state.held.sweep(worker);
        over.into_iter().filter_map(|o| state.owners.get(&o.owner).and_then(Weak::upgrade).map(|w| (w, o))).collect()
    }

    /// Stops watching endpoint `key`'s tags and drops what is held on them (nobody can
    /// receive it any more). Returns how many messages were dropped.
    pub(crate) fn release(&self, py: Python<'_>, key: u64) -> usize {
        let dropped = {
            let mut state = lock(&self.0);
            state.owners.remove(&key);
            state.held.release(key)
        };
        discard(py, dropped)
    }

    /// Drops what is held on `tag` (a closed endpoint's). Returns how many messages.
    pub(crate) fn purge(&self, py: Python<'_>, tag: u64) -> usize {
        let dropped = lock(&self.0).held.take_all(tag);
        discard(py, dropped)
    }

    /// Drops everything held (the worker is going).
    pub(crate) fn clear(&self, py: Python<'_>) {
        let dropped = {
            let mut state = lock(&self.0);
            state.owners.clear();
            state.held.drain()
        };
        discard(py, dropped);
    }

    /// How many messages are held, and their bytes.
    pub(crate) fn held(&self) -> (usize, usize) {
        lock(&self.0).held.held()
    }
}

/// Receives and drops `messages`, progressing (GIL released) up to [`DISCARD_LIMIT`] each.
fn discard(py: Python<'_>, messages: Vec<ProbedMessage>) -> usize {
    let n = messages.len();
    py.allow_threads(|| {
        messages.into_iter().for_each(|m| {
            m.discard_within(DISCARD_LIMIT);
        })
    });
    n
}

//! Messages that arrived before anyone received them, held on our side so that what a peer
//! leaves unreceived can be counted and capped.
//!
//! UCX keeps such messages in the worker's unexpected queue, with no bound and no count, and
//! its tag messages carry no sender: the only way to tell whose they are is the tag. So
//! [`Unclaimed`] watches tags on behalf of an owner (an endpoint, by key). A
//! [`sweep`](Unclaimed::sweep) takes the waiting messages out of UCX's queue
//! (`ucp_tag_probe_nb` with removal: no data moves; what UCX holds for a message stays where
//! it is) and keeps them in arrival order. Every receive on the worker must ask
//! [`Unclaimed::take`] first and post to UCX only if nothing here matches, which keeps the
//! order a peer sent in: what is held here arrived before anything still in UCX's queue.
//!
//! # What counts
//! UCX's API does not say whether a waiting message is eager (its bytes sit in our memory)
//! or a rendezvous (a few bytes until it is received). So every held message counts its full
//! length, except the oldest of each tag: the message the owner's next receive takes. One
//! large rendezvous message sent before its receive was posted, the normal case, so never
//! counts, and what a peer can pile up is at most [`Unclaimed::limit`] bytes plus one message
//! per watched tag. An owner over the limit is reported by [`sweep`](Unclaimed::sweep) as an
//! [`Overflow`]; what to do with it (close the endpoint, say why) is the caller's.
//!
//! Messages on tags nobody watches are held too (a sweep cannot skip them and keep the
//! order), but count against no one: UCX gives no sender for them. ([`Unclaimed::sweep_watched`]
//! leaves them in UCX, for callers that also receive without asking here.)
//!
//! [`Hold`] is the form a worker's receivers and its progress loop share: behind a lock, with
//! the owners' handles, sweeping at most every [`SWEEP_INTERVAL`].
use std::collections::{HashMap, VecDeque};

use crate::buffer::RecvBuffer;
use crate::error::Result;
use crate::owned::Owned;
use crate::request::Submitted;
use crate::tag::{ProbedMessage, FULL_MASK};
use crate::worker::Worker;

/// The most messages one [`Unclaimed::sweep`] takes, so that a peer that never stops sending
/// cannot keep a sweep going; the next sweep takes the rest.
pub const SWEEP_LIMIT: usize = 1 << 16;

/// Held messages of one tag, oldest first, with the arrival number of each.
#[derive(Default)]
struct TagQueue {
    messages: VecDeque<(u64, ProbedMessage)>,
    /// The sum of their lengths.
    bytes: usize,
}

impl TagQueue {
    /// What the queue counts against its owner: everything but the oldest message.
    fn counted(&self) -> usize {
        self.bytes - self.messages.front().map_or(0, |(_, m)| m.info().length)
    }
}

/// Adds `msg` to its tag's queue in `held`, with the next arrival number.
fn hold(held: &mut HashMap<u64, TagQueue>, arrivals: &mut u64, msg: ProbedMessage) {
    let queue = held.entry(msg.info().sender_tag).or_default();
    queue.bytes += msg.info().length;
    queue.messages.push_back((*arrivals, msg));
    *arrivals += 1;
}

/// An owner whose held messages are over the limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overflow {
    /// The owner, as given to [`Unclaimed::watch`].
    pub owner: u64,
    /// The bytes counted against it (see the module's docs).
    pub counted: usize,
    /// How many messages are held for it.
    pub messages: usize,
    /// The limit it is over.
    pub limit: usize,
    /// Whether it is the owner's unread stream bytes (`counted`; `messages` is 0) rather
    /// than tag messages.
    pub stream: bool,
}

impl std::fmt::Display for Overflow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.stream {
            return write!(
                f,
                "the peer left {} stream bytes unread, over the limit of {} bytes",
                self.counted, self.limit
            );
        }
        write!(
            f,
            "the peer left {} messages unreceived, counting {} bytes beyond the next one of each tag, over the \
             limit of {} bytes",
            self.messages, self.counted, self.limit
        )
    }
}

/// Watched tags and the messages held for them; see the module's docs.
pub struct Unclaimed {
    /// Watched tag → its owner.
    watched: HashMap<u64, u64>,
    held: HashMap<u64, TagQueue>,
    /// The next arrival number.
    arrivals: u64,
    limit: Option<usize>,
}

impl Unclaimed {
    /// Nothing watched, nothing held; owners may leave at most `limit` counted bytes (`None`:
    /// no cap, messages are still held and handed out in order).
    pub fn new(limit: Option<usize>) -> Unclaimed {
        Unclaimed { watched: HashMap::new(), held: HashMap::new(), arrivals: 0, limit }
    }

    /// The cap on counted bytes per owner.
    pub fn limit(&self) -> Option<usize> {
        self.limit
    }

    /// Changes the cap; the next sweep applies it.
    pub fn set_limit(&mut self, limit: Option<usize>) {
        self.limit = limit;
    }

    /// Watches `tag` for `owner` (a tag watched for another owner moves to this one).
    pub fn watch(&mut self, tag: u64, owner: u64) {
        self.watched.insert(tag, owner);
    }

    /// The owner `tag` is watched for.
    pub fn owner_of(&self, tag: u64) -> Option<u64> {
        self.watched.get(&tag).copied()
    }

    /// Whether any tag is watched (a sweep has nothing to do otherwise).
    pub fn is_watching(&self) -> bool {
        !self.watched.is_empty()
    }

    /// Stops watching `owner`'s tags. Messages already held stay, for a later receive or
    /// [`Unclaimed::take_all`].
    pub fn unwatch(&mut self, owner: u64) {
        self.watched.retain(|_, o| *o != owner);
        let watched = &self.watched;
        self.held.retain(|tag, q| !q.messages.is_empty() || watched.contains_key(tag));
    }

    /// Stops watching `owner`'s tags and takes every message held on them (to be discarded:
    /// the owner is gone).
    pub fn release(&mut self, owner: u64) -> Vec<ProbedMessage> {
        let tags: Vec<u64> = self.watched.iter().filter(|(_, o)| **o == owner).map(|(t, _)| *t).collect();
        self.unwatch(owner);
        tags.into_iter().flat_map(|tag| self.take_all(tag)).collect()
    }

    /// Takes the messages waiting in `worker`'s unexpected queue (at most [`SWEEP_LIMIT`]),
    /// oldest first, then returns the owners over the limit. Nothing is taken while no tag is
    /// watched.
    pub fn sweep(&mut self, worker: &Worker) -> Vec<Overflow> {
        if self.watched.is_empty() {
            return Vec::new();
        }
        // Every tag, not only the watched ones: UCX's probe under a zero mask hands them out
        // in arrival order, which a masked receive across tags must keep.
        for _ in 0..SWEEP_LIMIT {
            let Some(msg) = worker.tag_probe_take(0, 0) else { break };
            hold(&mut self.held, &mut self.arrivals, msg);
        }
        self.overflows()
    }

    /// [`Unclaimed::sweep`] for callers that also receive on the worker without asking here
    /// first: only the watched tags' messages are taken (each tag's in order; across tags in
    /// sweep order, so a masked receive spanning several watched tags may see them out of
    /// arrival order).
    pub fn sweep_watched(&mut self, worker: &Worker) -> Vec<Overflow> {
        let mut taken = 0;
        for &tag in self.watched.keys() {
            while taken < SWEEP_LIMIT {
                let Some(msg) = worker.tag_probe_take(tag, FULL_MASK) else { break };
                hold(&mut self.held, &mut self.arrivals, msg);
                taken += 1;
            }
        }
        self.overflows()
    }

    /// The owners whose counted bytes are over the limit. Allocates nothing unless some
    /// message counts: a sweep runs beside receives that must not allocate.
    fn overflows(&self) -> Vec<Overflow> {
        let Some(limit) = self.limit else { return Vec::new() };
        if self.held.values().all(|q| q.counted() == 0) {
            return Vec::new();
        }
        let mut per_owner: HashMap<u64, (usize, usize)> = HashMap::new();
        for (tag, queue) in &self.held {
            if let Some(&owner) = self.watched.get(tag) {
                let entry = per_owner.entry(owner).or_default();
                entry.0 += queue.counted();
                entry.1 += queue.messages.len();
            }
        }
        let mut over: Vec<Overflow> = per_owner
            .into_iter()
            .filter(|(_, (counted, _))| *counted > limit)
            .map(|(owner, (counted, messages))| Overflow { owner, counted, messages, limit, stream: false })
            .collect();
        over.sort_by_key(|o| o.owner);
        over
    }

    /// The oldest held message whose tag matches `tag` under `mask`, taken out for a
    /// receive ([`ProbedMessage::recv_into`]).
    pub fn take(&mut self, tag: u64, mask: u64) -> Option<ProbedMessage> {
        let key = if mask == FULL_MASK {
            self.holds(tag).then_some(tag)
        } else {
            // Oldest first across tags, as UCX would match a masked receive.
            self.held
                .iter()
                .filter(|(t, _)| *t & mask == tag & mask)
                .filter_map(|(t, q)| q.messages.front().map(|(n, _)| (*n, *t)))
                .min()
                .map(|(_, t)| t)
        }?;
        let queue = self.held.get_mut(&key)?;
        let (_, msg) = queue.messages.pop_front()?;
        queue.bytes -= msg.info().length;
        // A watched tag keeps its empty queue, so holding and taking its messages allocates
        // nothing once it has; another tag's goes (there may be a new one per message).
        if queue.messages.is_empty() && !self.watched.contains_key(&key) {
            self.held.remove(&key);
        }
        Some(msg)
    }

    /// Whether a message with exactly `tag` is held.
    pub fn holds(&self, tag: u64) -> bool {
        self.held.get(&tag).is_some_and(|q| !q.messages.is_empty())
    }

    /// Whether a message whose tag matches `tag` under `mask` is held.
    pub fn holds_matching(&self, tag: u64, mask: u64) -> bool {
        self.held.iter().any(|(t, q)| t & mask == tag & mask && !q.messages.is_empty())
    }

    /// Takes every held message of `tag` (to be discarded: nobody can receive them any more).
    pub fn take_all(&mut self, tag: u64) -> Vec<ProbedMessage> {
        self.held.remove(&tag).map(|q| q.messages.into_iter().map(|(_, m)| m).collect()).unwrap_or_default()
    }

    /// Takes every held message (the worker is going away).
    pub fn drain(&mut self) -> Vec<ProbedMessage> {
        self.watched.clear();
        self.held.drain().flat_map(|(_, q)| q.messages.into_iter().map(|(_, m)| m)).collect()
    }

    /// How many messages are held, and the sum of their lengths.
    pub fn held(&self) -> (usize, usize) {
        self.held.values().fold((0, 0), |(n, b), q| (n + q.messages.len(), b + q.bytes))
    }
}

impl std::fmt::Debug for Unclaimed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (messages, bytes) = self.held();
        f.debug_struct("Unclaimed")
            .field("watched", &self.watched.len())
            .field("messages", &messages)
            .field("bytes", &bytes)
            .field("limit", &self.limit)
            .finish()
    }
}

/// The default cap on what a peer may leave unreceived on one endpoint (ucx-async's and the
/// Python package's): 1 GiB.
pub const DEFAULT_LIMIT: usize = 1 << 30;

/// The most messages one [`Hold::purge`] takes from UCX's queue.
pub const PURGE_LIMIT: usize = 1 << 20;

/// How often a [`Hold`] sweeps at most: what arrives between two sweeps is not counted yet.
pub const SWEEP_INTERVAL: std::time::Duration = std::time::Duration::from_millis(10);

/// Which messages a [`Hold`]'s sweeps take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// Every waiting message ([`Unclaimed::sweep`]): for callers whose every tag receive asks
    /// the hold first (the Python bindings).
    All,
    /// Only the watched tags' ([`Unclaimed::sweep_watched`]): for callers that also receive
    /// on the worker directly (ucx-async, whose `Worker::core` is public).
    Watched,
}

struct HoldState<O: ?Sized> {
    held: Unclaimed,
    /// The owners whose tags are watched, by key.
    owners: HashMap<u64, std::sync::Weak<O>>,
    /// Empty between sweeps; a sweep's list of upgraded owners, kept for its capacity.
    upgraded: Vec<(u64, std::sync::Arc<O>)>,
    next_sweep: std::time::Instant,
}

/// [`Unclaimed`] shared by the receivers and the progress loop of one worker: behind a lock,
/// with a handle on each owner (of any type: what closes an endpoint is the caller's) and
/// sweeps at most every [`SWEEP_INTERVAL`].
pub struct Hold<O: ?Sized> {
    state: std::sync::Mutex<HoldState<O>>,
    scope: Scope,
}

impl<O: ?Sized> Hold<O> {
    /// Nothing held, a cap of `limit` (`None`: nothing is watched or swept).
    pub fn new(limit: Option<usize>, scope: Scope) -> Hold<O> {
        let state = HoldState {
            held: Unclaimed::new(limit),
            owners: HashMap::new(),
            upgraded: Vec::new(),
            next_sweep: std::time::Instant::now(),
        };
        Hold { state: std::sync::Mutex::new(state), scope }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HoldState<O>> {
        // The state stays consistent between statements: a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The cap.
    pub fn limit(&self) -> Option<usize> {
        self.lock().held.limit()
    }

    /// Sets the cap. `None` stops watching (what is held stays, to be received in order).
    pub fn set_limit(&self, limit: Option<usize>) {
        let mut state = self.lock();
        state.held.set_limit(limit);
        if limit.is_none() {
            let keys: Vec<u64> = state.owners.drain().map(|(k, _)| k).collect();
            for key in keys {
                state.held.unwatch(key);
            }
        }
    }

    /// Watches `tag` for owner `key` (nothing while there is no cap); `owner` is asked for
    /// only when the tag is new to the key.
    pub fn watch(&self, tag: u64, key: u64, owner: impl FnOnce() -> std::sync::Weak<O>) {
        let mut state = self.lock();
        if state.held.limit().is_some() && state.held.owner_of(tag) != Some(key) {
            state.held.watch(tag, key);
            state.owners.insert(key, owner());
        }
    }

    /// Receives the next message matching `tag`/`mask` into `buf`: one held here if any, else
    /// posted to UCX. Under the lock, so that no sweep comes between the look and the post.
    pub fn recv_owned<B: RecvBuffer + Send + 'static>(
        &self,
        worker: &Worker,
        buf: B,
        tag: u64,
        mask: u64,
    ) -> Result<Owned<B>> {
        Owned::submit(Box::new(buf), true, |b| self.recv(worker, b, tag, mask))
    }

    /// [`Hold::recv_owned`] into a borrowed buffer.
    pub fn recv<'a, B: RecvBuffer + ?Sized>(
        &self,
        worker: &Worker,
        buf: &'a mut B,
        tag: u64,
        mask: u64,
    ) -> Result<Submitted<'a>> {
        let mut state = self.lock();
        match state.held.take(tag, mask) {
            Some(msg) => msg.recv_into(buf),
            None => worker.tag_recv(buf, tag, mask),
        }
    }

    /// Whether a message matching `tag`/`mask` waits, here or in UCX.
    pub fn probe(&self, worker: &Worker, tag: u64, mask: u64) -> bool {
        let state = self.lock();
        let held = if mask == FULL_MASK { state.held.holds(tag) } else { state.held.holds_matching(tag, mask) };
        held || worker.tag_probe(tag, mask).is_some()
    }

    /// Sweeps if one is due; returns the owners over the cap, for the caller to close.
    /// `stream_bytes` fills an owner's [`crate::StreamBacklog`] and says how many bytes it
    /// holds, which the same cap bounds (it runs outside the lock).
    pub fn sweep_if_due(
        &self,
        worker: &Worker,
        mut stream_bytes: impl FnMut(&O) -> usize,
    ) -> Vec<(std::sync::Arc<O>, Overflow)> {
        // The owners are upgraded under the lock but checked and let go after it: the handle
        // upgraded here may be an owner's last (its other holder dropped it meanwhile, on
        // another thread), and an owner's drop calls `release`, which takes the lock. Dropping
        // it under the lock deadlocked the progress loop (seen with a client dropped while its
        // worker swept). The list of upgraded owners keeps its capacity in the state between
        // sweeps, so a sweep allocates nothing once it has seen as many owners.
        let (mut over, mut owners, limit) = {
            let mut state = self.lock();
            if !state.held.is_watching() {
                return Vec::new();
            }
            let now = std::time::Instant::now();
            if now < state.next_sweep {
                return Vec::new();
            }
            state.next_sweep = now + SWEEP_INTERVAL;
            let over = match self.scope {
                Scope::All => state.held.sweep(worker),
                Scope::Watched => state.held.sweep_watched(worker),
            };
            let over: Vec<_> = over
                .into_iter()
                .filter_map(|o| state.owners.get(&o.owner).and_then(std::sync::Weak::upgrade).map(|w| (w, o)))
                .collect();
            let Some(limit) = state.held.limit() else { return over };
            let mut owners = std::mem::take(&mut state.upgraded);
            owners.extend(state.owners.iter().filter_map(|(&key, owner)| Some((key, owner.upgrade()?))));
            (over, owners, limit)
        };
        for (key, owner) in owners.drain(..) {
            let counted = stream_bytes(&owner);
            if counted > limit && !over.iter().any(|(_, o)| o.owner == key) {
                over.push((owner, Overflow { owner: key, counted, messages: 0, limit, stream: true }));
            }
        }
        self.lock().upgraded = owners;
        over
    }

    /// Stops watching owner `key`'s tags and takes what is held on them (to be discarded).
    pub fn release(&self, key: u64) -> Vec<ProbedMessage> {
        let mut state = self.lock();
        state.owners.remove(&key);
        state.held.release(key)
    }

    /// Takes what is held on `tag` and what UCX still queues on it (at most [`PURGE_LIMIT`]
    /// of those), to be discarded: the tag's endpoint is closed, and UCX would keep its
    /// messages for the worker's life. Under the lock, so no sweep moves some in between.
    pub fn purge(&self, worker: &Worker, tag: u64) -> Vec<ProbedMessage> {
        let mut state = self.lock();
        let mut dropped = state.held.take_all(tag);
        // Bounded: a peer that keeps sending must not keep us here.
        for _ in 0..PURGE_LIMIT {
            let Some(msg) = worker.tag_probe_take(tag, FULL_MASK) else { break };
            dropped.push(msg);
        }
        dropped
    }

    /// Takes everything held and stops watching (the worker is going).
    pub fn drain(&self) -> Vec<ProbedMessage> {
        let mut state = self.lock();
        state.owners.clear();
        state.held.drain()
    }

    /// How many messages are held, and their bytes.
    pub fn held(&self) -> (usize, usize) {
        self.lock().held.held()
    }
}

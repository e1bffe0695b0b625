//! Active messages the UCX-Py way: `am_send` puts the buffer's memory type in a 4-byte header
//! (handler id 0, reply flag), and `am_recv` takes the next message its peer sent, allocating
//! the destination with the allocator registered for the header's memory type; without one,
//! host data arrives in a `Vec<u8>` (the handler's copy of a short message, or a new `Vec`
//! that UCX fills, never zeroed first).
//!
//! One handler per worker routes arriving messages to per-endpoint queues by the reply
//! endpoint UCX reports, so each endpoint sees only its peer's messages, in order.
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use ucx_core::{AmMessage, MemoryType, RecvBuffer, SendBuffer};

/// Memory an active message is received into (host memory, or device memory from a CUDA
/// allocator); `into_any` and `downcast` recover the allocator's type (`Vec<u8>` for host).
pub trait AmBuffer: RecvBuffer + Send + 'static {
    /// The buffer as `Any`, to recover its concrete type.
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send>;
}

impl<T: RecvBuffer + Send + 'static> AmBuffer for T {
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any + Send> {
        self
    }
}

/// `len` bytes of a `Vec`'s spare capacity as the destination of one receive, not zeroed:
/// UCX writes them all before the receive completes, and only then does the caller extend the
/// `Vec` over them. Private to the crate: sending from one would send whatever the allocator
/// left there.
pub(crate) struct SpareCapacity<'a> {
    vec: &'a mut Vec<u8>,
    len: usize,
}

impl<'a> SpareCapacity<'a> {
    pub(crate) fn new(vec: &'a mut Vec<u8>, len: usize) -> SpareCapacity<'a> {
        vec.reserve(len);
        SpareCapacity { vec, len }
    }
}

// SAFETY: `len` bytes past the Vec's length are allocated (reserved in `new`) and stay so
// while the Vec is borrowed; they are host memory.
unsafe impl SendBuffer for SpareCapacity<'_> {
    fn as_ptr(&self) -> *const u8 {
        // SAFETY: the Vec's length is within its allocation.
        unsafe { self.vec.as_ptr().add(self.vec.len()) }
    }
    fn byte_len(&self) -> usize {
        self.len
    }
    fn memory_type(&self) -> MemoryType {
        MemoryType::Host
    }
}

// SAFETY: as above; the bytes are writable (the Vec is borrowed mutably).
unsafe impl RecvBuffer for SpareCapacity<'_> {
    fn as_mut_ptr(&mut self) -> *mut u8 {
        self.vec.spare_capacity_mut().as_mut_ptr().cast()
    }
}

/// Makes a buffer of the given size for an arriving active message.
pub type AmAllocator = Arc<dyn Fn(usize) -> Box<dyn AmBuffer> + Send + Sync>;

#[derive(Default)]
struct Queue {
    messages: VecDeque<AmMessage>,
    waker: Option<Waker>,
}

/// Hashes an endpoint key (a UCX endpoint's address) with one multiplication: the map is
/// looked up for every message, and SipHash cost more than the rest of the lookup.
#[derive(Default)]
struct EpKeyHasher(u64);

impl Hasher for EpKeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }

    fn write_usize(&mut self, key: usize) {
        // Fibonacci hashing: spreads the aligned low bits of an address over the whole word.
        self.0 = (key as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// Arrived messages by receiving endpoint, and the allocators by memory type.
#[derive(Default)]
pub(crate) struct AmRouter {
    queues: Mutex<HashMap<usize, Queue, BuildHasherDefault<EpKeyHasher>>>,
    /// Messages in all queues: lets `try_take`, which `am_recv`'s spin calls every progress
    /// round, skip the lock while nothing is queued.
    queued: AtomicUsize,
    allocators: Mutex<HashMap<MemoryType, AmAllocator>>,
    /// Whether any allocator was registered: without one, host messages skip that lock.
    any_allocator: AtomicBool,
}

impl AmRouter {
    /// The handler body: runs inside progress.
    pub(crate) fn deliver(&self, msg: AmMessage) {
        // UCX-Py's rule: a message without a reply endpoint has no sender to queue it under,
        // and nobody could ever receive it.
        let Some(key) = msg.reply_ep() else { return };
        let waker = {
            let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            let queue = q.entry(key).or_default();
            queue.messages.push_back(msg);
            self.queued.fetch_add(1, Ordering::Release);
            queue.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// The next message for endpoint `ep`, or registers `waker` for it.
    pub(crate) fn take(&self, ep: usize, waker: &Waker) -> Option<AmMessage> {
        let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let queue = q.entry(ep).or_default();
        let msg = queue.messages.pop_front();
        match msg {
            Some(_) => {
                self.queued.fetch_sub(1, Ordering::Relaxed);
            }
            None => queue.waker = Some(waker.clone()),
        }
        msg
    }

    /// Whether any message is queued, for any endpoint: the spin's cheap check before
    /// [`AmRouter::try_take`].
    #[inline]
    pub(crate) fn any_queued(&self) -> bool {
        self.queued.load(Ordering::Acquire) != 0
    }

    /// The next message for endpoint `ep`, if one is queued (registers nothing).
    pub(crate) fn try_take(&self, ep: usize) -> Option<AmMessage> {
        if !self.any_queued() {
            return None;
        }
        let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        let msg = q.get_mut(&ep)?.messages.pop_front();
        if msg.is_some() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
        }
        msg
    }

    /// Drops every queued message (the worker is going away).
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.queues.lock().unwrap_or_else(|p| p.into_inner()));
        self.queued.store(0, Ordering::Relaxed);
        drop(all);
    }

    /// Drops whatever is queued for a closed endpoint (releasing UCX's data).
    pub(crate) fn forget(&self, ep: usize) {
        let gone = {
            let mut q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
            let gone = q.remove(&ep);
            if let Some(queue) = &gone {
                self.queued.fetch_sub(queue.messages.len(), Ordering::Relaxed);
            }
            gone
        };
        drop(gone);
    }

    pub(crate) fn set_allocator(&self, memory_type: MemoryType, allocator: AmAllocator) {
        self.allocators.lock().unwrap_or_else(|p| p.into_inner()).insert(memory_type, allocator);
        self.any_allocator.store(true, Ordering::Release);
    }

    /// The allocator registered for `memory_type`, if any (without the lock when none is).
    pub(crate) fn allocator(&self, memory_type: MemoryType) -> Option<AmAllocator> {
        if !self.any_allocator.load(Ordering::Acquire) {
            return None;
        }
        self.allocators.lock().unwrap_or_else(|p| p.into_inner()).get(&memory_type).cloned()
    }
}

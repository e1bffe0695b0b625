//! Active messages the UCX-Py way: `am_send` puts the buffer's memory type in a 4-byte header
//! (handler id 0, reply flag), and `am_recv` takes the next message its peer sent, allocating
//! the destination with the allocator registered for the header's memory type.
//!
//! One handler per worker routes arriving messages to per-endpoint queues by the reply
//! endpoint UCX reports, so each endpoint sees only its peer's messages, in order.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::task::Waker;

use ucx_core::{AmMessage, MemoryType, RecvBuffer};

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

/// Makes a buffer of the given size for an arriving active message.
pub type AmAllocator = Arc<dyn Fn(usize) -> Box<dyn AmBuffer> + Send + Sync>;

#[derive(Default)]
struct Queue {
    messages: VecDeque<AmMessage>,
    waker: Option<Waker>,
}

/// Arrived messages by receiving endpoint, and the allocators by memory type.
#[derive(Default)]
pub(crate) struct AmRouter {
    queues: Mutex<HashMap<usize, Queue>>,
    allocators: Mutex<HashMap<MemoryType, AmAllocator>>,
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
        if msg.is_none() {
            queue.waker = Some(waker.clone());
        }
        msg
    }

    /// Whether a message for endpoint `ep` is queued.
    pub(crate) fn has_message(&self, ep: usize) -> bool {
        let q = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        q.get(&ep).is_some_and(|queue| !queue.messages.is_empty())
    }

    /// Drops every queued message (the worker is going away).
    pub(crate) fn clear(&self) {
        let all = std::mem::take(&mut *self.queues.lock().unwrap_or_else(|p| p.into_inner()));
        drop(all);
    }

    /// Drops whatever is queued for a closed endpoint (releasing UCX's data).
    pub(crate) fn forget(&self, ep: usize) {
        let gone = self.queues.lock().unwrap_or_else(|p| p.into_inner()).remove(&ep);
        drop(gone);
    }

    pub(crate) fn set_allocator(&self, memory_type: MemoryType, allocator: AmAllocator) {
        self.allocators.lock().unwrap_or_else(|p| p.into_inner()).insert(memory_type, allocator);
    }

    /// A buffer for `len` bytes of `memory_type`: the registered allocator, or a host `Vec`
    /// for host memory when none is registered.
    pub(crate) fn allocate(&self, memory_type: MemoryType, len: usize) -> Option<Box<dyn AmBuffer>> {
        let alloc = self.allocators.lock().unwrap_or_else(|p| p.into_inner()).get(&memory_type).cloned();
        match (alloc, memory_type) {
            (Some(a), _) => Some(a(len)),
            (None, MemoryType::Host) => Some(Box::new(vec![0u8; len])),
            (None, _) => None,
        }
    }
}

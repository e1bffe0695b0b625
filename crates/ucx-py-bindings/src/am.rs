//! Active-message receiving as UCX-Py did it: messages to handler 0 carry a 4-byte memory
//! type, are received into an object from the allocator registered for that memory type
//! (host default `bytearray`), and are queued per sender endpoint until an `am_recv` on that
//! endpoint takes them, first in first out. One [`AmQueues`] per worker holds this state.
//!
//! First in first out holds across threads too: a message handed to a receive whose loop runs
//! in another thread is "in transit" until that loop takes it or, the receive having been
//! cancelled meanwhile, puts it back at the head. While one is in transit, later messages are
//! queued behind it and new receives wait, so neither can overtake it.
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};

use pyo3::prelude::*;
use pyo3::types::PyByteArray;
use ucx_core::{wire, AmMessage, MemoryType, Owned};

use crate::buffer::PyBuf;
use crate::engine::{Engine, Sink};
use crate::errors::{self, End, Kind};
use crate::outcome::{Expect, Name, Outcome};
use crate::sync::lock;
use crate::target::{Target, Undelivered};

/// A worker's arrived active messages, by the sender's endpoint handle, the receives waiting
/// for them, and the allocators that make the objects they are received into.
#[derive(Default)]
pub(crate) struct AmQueues(Mutex<State>);

#[derive(Default)]
struct State {
    /// Allocators by memory type: `[host, cuda]`; host defaults to `bytearray`.
    allocators: [Option<Py<PyAny>>; 2],
    queued: HashMap<usize, VecDeque<Outcome>>,
    waiting: HashMap<usize, VecDeque<Target>>,
    /// Messages handed to a receive of another thread's loop and not yet taken or put back.
    in_transit: HashMap<usize, usize>,
}

impl State {
    fn in_transit(&self, handle: usize) -> bool {
        self.in_transit.get(&handle).is_some_and(|&n| n > 0)
    }
}

/// One message in transit to a receive on another loop; dropped once that loop has taken it
/// or put it back, which serves the receives that waited behind it.
struct Transit {
    queues: Arc<AmQueues>,
    engine: Weak<Engine>,
    handle: usize,
}

impl Transit {
    fn new(queues: &Arc<AmQueues>, engine: &Engine, handle: usize) -> Transit {
        *lock(&queues.0).in_transit.entry(handle).or_default() += 1;
        Transit { queues: queues.clone(), engine: engine.weak(), handle }
    }
}

impl Drop for Transit {
    fn drop(&mut self) {
        let arrived = {
            let mut state = lock(&self.queues.0);
            match state.in_transit.get_mut(&self.handle) {
                Some(n) if *n > 1 => {
                    *n -= 1;
                    false
                }
                Some(_) => {
                    state.in_transit.remove(&self.handle);
                    true
                }
                None => false, // the endpoint was forgotten meanwhile
            }
        };
        if let (true, Some(engine)) = (arrived, self.engine.upgrade()) {
            // Dropped where the hand-over ran or was given up, with the GIL held already.
            Python::with_gil(|py| self.queues.serve_waiting(&engine, py, self.handle));
        }
    }
}

enum Arrival {
    Newest,
    Oldest,
}

impl AmQueues {
    /// Installs UCX-Py's handler (id 0) on `engine`'s worker: each message is received and
    /// routed from the next drain.
    pub(crate) fn install(self: &Arc<Self>, engine: &Engine) -> ucx_core::Result<()> {
        let (queues, events) = (self.clone(), engine.events());
        engine.worker.set_am_handler(wire::am_header::UCXPY_AM_ID, move |msg| {
            let queues = queues.clone();
            events.push(Box::new(move |engine, py| queues.deliver(engine, py, msg)));
        })
    }

    /// Registers the allocator for a memory type (0 host, 1 CUDA).
    pub(crate) fn set_allocator(&self, cuda: bool, allocator: Py<PyAny>) {
        lock(&self.0).allocators[usize::from(cuda)] = Some(allocator);
    }

    /// Receives an arrived message into a freshly allocated object and routes it to its
    /// endpoint.
    fn deliver(self: &Arc<Self>, engine: &Engine, py: Python<'_>, msg: AmMessage) {
        let Some(handle) = msg.reply_ep() else {
            // UCX-Py's handler requires a reply endpoint to know whose message it is.
            return;
        };
        let memory_type = wire::am_header::receive_memory_type(msg.header(), msg.is_rendezvous())
            .map(|m| MemoryType::from_raw(m as u32));
        let cuda = matches!(memory_type, Ok(MemoryType::Cuda));
        let obj = match (memory_type, self.allocate(py, cuda, msg.data_len())) {
            (Err(e), _) => Err(errors::new(py, Kind::Error, format!("<am_recv>: bad active-message header: {e}"))),
            (_, Err(e)) => Err(e),
            (Ok(_), Ok(obj)) => Ok(obj),
        };
        let obj = match obj {
            Ok(obj) => obj,
            Err(e) => return self.route(engine, py, handle, Err(e)),
        };
        let buf = match PyBuf::writable(obj.bind(py)) {
            Ok(b) => b,
            Err(e) => return self.route(engine, py, handle, Err(e)),
        };
        let len = msg.data_len();
        match Owned::submit(Box::new(buf), true, |b| msg.recv_into(b)) {
            Err(e) => self.route(engine, py, handle, Err(errors::from_core(py, &e))),
            Ok(owned) => {
                let expect = Expect { value: Some(obj), ..Expect::new(Name::Given("am_recv".into()), Some(len)) };
                let queues = self.clone();
                let sink = Sink::Route(Box::new(move |engine, py, outcome| queues.route(engine, py, handle, outcome)));
                engine.track_with(py, owned, sink, expect, None);
            }
        }
    }

    fn allocate(&self, py: Python<'_>, cuda: bool, len: usize) -> PyResult<Py<PyAny>> {
        let allocator = lock(&self.0).allocators[usize::from(cuda)].as_ref().map(|a| a.clone_ref(py));
        match (allocator, cuda) {
            (Some(a), _) => a.bind(py).call1((len,)).map(Bound::unbind),
            (None, false) => Ok(PyByteArray::new_with(py, len, |_| Ok(()))?.into_any().unbind()),
            (None, true) => {
                Err(errors::new(py, Kind::Error, "<am_recv>: no CUDA allocator registered (register_am_allocator)"))
            }
        }
    }

    /// Gives a received object (or its failure) to the oldest waiting receive of endpoint
    /// `handle` that is still awaited, or queues it: a receive whose future was cancelled (a
    /// task cancel, a `wait_for` timeout) must not take the message with it.
    fn route(self: &Arc<Self>, engine: &Engine, py: Python<'_>, handle: usize, outcome: Outcome) {
        self.route_to(engine, py, handle, outcome, Arrival::Newest);
    }

    /// Puts back a message whose receiver was cancelled after it had been handed over: it goes
    /// to the next waiting receive, or to the head of the queue (it is older than what is
    /// queued).
    pub(crate) fn requeue(self: &Arc<Self>, engine: &Engine, py: Python<'_>, handle: usize, obj: Py<PyAny>) {
        self.route_to(engine, py, handle, Ok(obj), Arrival::Oldest);
    }

    fn route_to(self: &Arc<Self>, engine: &Engine, py: Python<'_>, handle: usize, outcome: Outcome, arrival: Arrival) {
        {
            let mut state = lock(&self.0);
            // Behind a message in transit, or others queued: keep the order.
            if state.in_transit(handle) || state.queued.get(&handle).is_some_and(|q| !q.is_empty()) {
                let queue = state.queued.entry(handle).or_default();
                match arrival {
                    Arrival::Newest => queue.push_back(outcome),
                    Arrival::Oldest => queue.push_front(outcome),
                }
                return;
            }
        }
        if let Some(outcome) = self.hand_to_waiting(engine, py, handle, outcome) {
            lock(&self.0).queued.entry(handle).or_default().push_front(outcome);
        }
    }

    /// Gives `outcome` to the oldest receive of `handle` still awaited; gives it back if there
    /// is none.
    fn hand_to_waiting(
        self: &Arc<Self>,
        engine: &Engine,
        py: Python<'_>,
        handle: usize,
        outcome: Outcome,
    ) -> Option<Outcome> {
        loop {
            let waiter = lock(&self.0).waiting.get_mut(&handle).and_then(|w| w.pop_front());
            match waiter {
                Some(t) if t.is_abandoned(py) => continue,
                Some(t) => {
                    // A waiter on another loop may be cancelled before its loop takes the
                    // message: until then it is in transit, and put back if so.
                    let undelivered = || {
                        let transit = Transit::new(self, engine, handle);
                        let (queues, engine) = (self.clone(), engine.weak());
                        Some(Box::new(move |py: Python<'_>, obj| {
                            if let Some(engine) = engine.upgrade() {
                                queues.requeue(&engine, py, handle, obj);
                            }
                            drop(transit);
                        }) as Undelivered)
                    };
                    t.resolve_or(py, outcome, undelivered);
                    return None;
                }
                None => return Some(outcome),
            }
        }
    }

    /// Serves receives of `handle` that waited while a message was in transit, from the head
    /// of its queue.
    fn serve_waiting(self: &Arc<Self>, engine: &Engine, py: Python<'_>, handle: usize) {
        loop {
            let head = {
                let mut state = lock(&self.0);
                if state.in_transit(handle) || state.waiting.get(&handle).is_none_or(|w| w.is_empty()) {
                    return;
                }
                match state.queued.get_mut(&handle).and_then(|q| q.pop_front()) {
                    Some(head) => head,
                    None => return,
                }
            };
            if let Some(head) = self.hand_to_waiting(engine, py, handle, head) {
                lock(&self.0).queued.entry(handle).or_default().push_front(head);
                return;
            }
        }
    }

    /// `am_recv` on endpoint `handle`: the oldest queued message at once, or a wait for the
    /// next.
    pub(crate) fn recv(
        &self,
        engine: &Engine,
        py: Python<'_>,
        handle: usize,
        on_done: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let queued = {
            let mut state = lock(&self.0);
            // Behind a message in transit, a receive waits for its turn (`serve_waiting`).
            if state.in_transit(handle) {
                None
            } else {
                state.queued.get_mut(&handle).and_then(|q| q.pop_front())
            }
        };
        if let Some(outcome) = queued {
            return match on_done {
                Some(cb) => {
                    Target::Callback(cb.clone().unbind()).resolve(py, outcome);
                    Ok(None)
                }
                None => Target::ready(py, outcome).map(Some),
            };
        }
        let (target, ret) = Target::new(py, on_done)?;
        lock(&self.0).waiting.entry(handle).or_default().push_back(target);
        engine.needs_progress(py);
        Ok(ret)
    }

    /// Whether a message from endpoint `handle` is waiting to be received.
    pub(crate) fn probe(&self, handle: usize) -> bool {
        lock(&self.0).queued.get(&handle).is_some_and(|q| !q.is_empty())
    }

    /// Fails every receive waiting on endpoint `handle` with `end`'s exception (UCX-Py's
    /// message); returns how many.
    pub(crate) fn fail_waiting(&self, py: Python<'_>, handle: usize, end: End) -> usize {
        let waiting = lock(&self.0).waiting.remove(&handle).unwrap_or_default();
        let n = waiting.len();
        for t in waiting {
            let msg = format!("While waiting for am_recv the endpoint was closed: {}", end.why());
            t.resolve(py, Err(end.error(py, msg)));
        }
        n
    }

    /// Forgets messages queued for a closed endpoint (a new endpoint may reuse the handle).
    pub(crate) fn forget(&self, handle: usize) {
        let dropped = {
            let mut state = lock(&self.0);
            state.in_transit.remove(&handle);
            state.queued.remove(&handle)
        };
        // Dropped outside the lock: freeing Python objects can run other code (a `Transit`
        // dropped with them takes this lock).
        drop(dropped);
    }
}

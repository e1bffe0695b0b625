//! [`RailListener`]: accepts rail groups from any number of clients at once, assembling each
//! group from the rails that name it (their hellos), in whatever order they arrive.
use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;

use futures_util::future::BoxFuture;
use futures_util::stream::{FuturesUnordered, StreamExt};

use super::group::{introduced, rail_count};
use super::RailGroup;
use crate::{Endpoint, Error, Listener, Result, Worker};

/// Groups whose every rail has not arrived yet, at most: a client that connects some rails
/// and never the others (or makes up group ids) cannot grow this without bound; the oldest
/// incomplete group is dropped first.
pub const MAX_INCOMPLETE_GROUPS: usize = 64;

enum Event {
    Accepted(usize, Result<Endpoint>),
    Introduced(usize, Result<(Endpoint, u64)>),
}

/// A listener per rail, each usually on its own worker (its own devices). [`accept`] returns
/// the next group all of whose rails have connected; many clients may connect at once.
/// A connection on the wrong listener, or with a bad hello, is dropped (that client's
/// `RailGroup::connect` then fails); the listener goes on.
///
/// [`accept`]: RailListener::accept
pub struct RailListener {
    listeners: Vec<Arc<Listener>>,
    events: FuturesUnordered<BoxFuture<'static, Event>>,
    incomplete: HashMap<u64, Vec<Option<Endpoint>>>,
    arrival_order: VecDeque<u64>,
}

impl RailListener {
    /// Binds rail `i`'s listener on `workers[i]` at `addr` (port 0: a free port each).
    pub fn bind(workers: &[&Worker], addr: SocketAddr) -> Result<RailListener> {
        rail_count(workers.len())?;
        let listeners = workers.iter().map(|w| Listener::bind(w, addr).map(Arc::new)).collect::<Result<Vec<_>>>()?;
        let events = FuturesUnordered::new();
        for (i, l) in listeners.iter().enumerate() {
            events.push(accept_on(i, l.clone()));
        }
        Ok(RailListener { listeners, events, incomplete: HashMap::new(), arrival_order: VecDeque::new() })
    }

    /// Each rail's listening address, rail 0 first (what clients pass to `RailGroup::connect`).
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.listeners.iter().map(|l| l.local_addr()).collect()
    }

    /// The next complete group. Fails only when a listener is closed.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses no rail. Connections that arrived stay with the
    /// listener, and the next `accept` assembles their groups.
    pub async fn accept(&mut self) -> Result<RailGroup> {
        let rails = self.listeners.len();
        loop {
            match self.events.next().await {
                None => return Err(Error::ListenerClosed),
                Some(Event::Accepted(_, Err(Error::ListenerClosed))) => return Err(Error::ListenerClosed),
                Some(Event::Accepted(i, accepted)) => {
                    self.events.push(accept_on(i, self.listeners[i].clone()));
                    if let Ok(ep) = accepted {
                        self.events
                            .push(Box::pin(async move { Event::Introduced(i, introduced(i, rails as u16, ep).await) }));
                    }
                }
                // A bad hello: that connection is gone (its client's connect fails), not us.
                Some(Event::Introduced(_, Err(_e))) => {
                    #[cfg(feature = "tracing")]
                    tracing::warn!(error = %_e, "ucx-async: RailListener refused a connection");
                }
                Some(Event::Introduced(i, Ok((ep, group)))) => {
                    if let Some(done) = self.arrived(i, ep, group) {
                        return RailGroup::from_endpoints(done);
                    }
                }
            }
        }
    }

    /// Files rail `i` of `group`; returns the group's rails once all have arrived.
    fn arrived(&mut self, i: usize, ep: Endpoint, group: u64) -> Option<Vec<Endpoint>> {
        let rails = self.listeners.len();
        if !self.incomplete.contains_key(&group) {
            if self.incomplete.len() >= MAX_INCOMPLETE_GROUPS {
                if let Some(oldest) = self.arrival_order.pop_front() {
                    for ep in self.incomplete.remove(&oldest).into_iter().flatten().flatten() {
                        ep.abort();
                    }
                }
            }
            self.incomplete.insert(group, vec![None; rails]);
            self.arrival_order.push_back(group);
        }
        let slots = self.incomplete.get_mut(&group)?;
        // A second connection for the same rail of a group: the newer one wins.
        if let Some(old) = slots[i].replace(ep) {
            old.abort();
        }
        if slots.iter().all(Option::is_some) {
            self.arrival_order.retain(|g| *g != group);
            return self.incomplete.remove(&group).map(|s| s.into_iter().flatten().collect());
        }
        None
    }
}

fn accept_on(i: usize, listener: Arc<Listener>) -> BoxFuture<'static, Event> {
    Box::pin(async move { Event::Accepted(i, listener.accept().await) })
}

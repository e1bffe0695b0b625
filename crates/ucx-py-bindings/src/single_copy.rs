//! A Python endpoint's side of the same-host single-copy path (its rules in
//! `ucx_core::single_copy::Link`, its bytes in `ucx_core::wire::single_copy`; ucx-async's
//! endpoint drives the same link in Rust). All native: no Python runs for it.
//!
//! - [`start`]: after a UCX-Py handshake whose peer carried the mark, posts the two receives
//!   of the peer's hello and verdict (the hello's completion answers it with our verdict), and
//!   sends our hello. They belong to the endpoint: closing it cancels them.
//! - [`send`]: a host message of at least the threshold to a peer that can read this process
//!   goes as a descriptor; what Python awaits is the receive of the peer's answer, which owns
//!   the message's buffer export and its guard (dropped in that order: the guard first).
//! - [`read_through`]: every tag receive on an endpoint with a link finishes through the link
//!   (`ucx_core::Owned::then`): a descriptor that arrives is read from the sender's memory into
//!   the receive's buffer before the length is checked and Python sees the result.
use std::sync::Arc;

use pyo3::prelude::*;
use ucx_core::single_copy::{Guard, Link, Receive};
use ucx_core::wire::single_copy::{Ack, Descriptor, Hello, Verdict};
use ucx_core::{MemoryType, Owned, SendBuffer, FULL_MASK};

use crate::buffer::{PyBuf, PyBufMut};
use crate::engine::{Engine, OpOwner, Sink};
use crate::outcome::{Expect, Name};

/// Starts the hello exchange of `link` on `ep`, its operations owned by `owner`.
pub(crate) fn start(
    engine: &Arc<Engine>,
    py: Python<'_>,
    owner: Arc<dyn OpOwner>,
    ep: &ucx_core::Endpoint,
    link: &Arc<Link>,
) -> PyResult<()> {
    let (mine, theirs) = link.hello_tags();
    // Our hello goes first: our verdict (sent when the peer's hello is received, which may
    // be at once) must follow it on the wire, as the peer receives them in that order.
    drop(ep.tag_send_owned(link.hello(), theirs).map_err(|e| crate::errors::from_core(py, &e))?);
    // The peer's hello, then its verdict: two messages on one tag, matched in the order the
    // receives are posted.
    let (l, reply) = (link.clone(), ep.clone());
    let hello = Owned::submit(Box::new([0u8; Hello::LEN]), true, |b| {
        engine.unclaimed.recv(&engine.worker, &mut b[..], mine, FULL_MASK)
    })
    .map(|o| {
        o.then(move |bytes, c| {
            // Our verdict on it goes on its own; a peer that has gone never reads it.
            let _ = reply.tag_send_owned(l.take_hello(&bytes[..c.length.min(Hello::LEN)]).encode(), theirs);
            Ok(c)
        })
    });
    let l = link.clone();
    let verdict = Owned::submit(Box::new([0u8; Verdict::LEN]), true, |b| {
        engine.unclaimed.recv(&engine.worker, &mut b[..], mine, FULL_MASK)
    })
    .map(|o| {
        o.then(move |bytes, c| {
            l.take_verdict(&bytes[..c.length.min(Verdict::LEN)]);
            Ok(c)
        })
    });
    let expect = |what: &str| Expect::new(Name::Given(what.into()), None);
    let route = || Sink::Route(Box::new(|_, _, _| {}));
    let hello = hello.map_err(|e| crate::errors::from_core(py, &e))?;
    engine.track_with(py, hello, route(), expect("single-copy hello"), Some(owner.clone()));
    let verdict = verdict.map_err(|e| crate::errors::from_core(py, &e))?;
    engine.track_with(py, verdict, route(), expect("single-copy verdict"), Some(owner));
    Ok(())
}

/// What a single-copy send keeps until the peer's answer: the answer's room, then the guard,
/// then the message's buffer (fields drop in this order: the guard is cleared before the
/// buffer export is released).
pub(crate) struct Answer {
    bytes: [u8; Ack::LEN],
    desc: Descriptor,
    guard: Option<Guard>,
    _data: PyBuf,
}

/// Sends `data` on `tag` as a descriptor if `link` says so: the receive of the peer's answer,
/// which completes the send (its outcome checked by `link`). `Err(data)`: send it the ordinary
/// way (the link is off this way, the memory or size does not qualify, or no guard is free).
pub(crate) fn send(
    engine: &Engine,
    ep: &ucx_core::Endpoint,
    link: &Arc<Link>,
    data: PyBuf,
    tag: u64,
) -> Result<ucx_core::Result<Owned<Answer>>, PyBuf> {
    if !link.sends(data.byte_len(), data.memory_type()) {
        return Err(data);
    }
    // SAFETY: `data` is host memory (`Link::sends` said so) whose export it holds.
    let Some((desc, guard, answer_tag)) = (unsafe { link.describe(data.as_ptr(), data.byte_len()) }) else {
        return Err(data);
    };
    let answer = Answer { bytes: [0u8; Ack::LEN], desc, guard: Some(guard), _data: data };
    let posted = Owned::submit(Box::new(answer), true, |a| {
        engine.unclaimed.recv(&engine.worker, &mut a.bytes[..], answer_tag, FULL_MASK)
    });
    let l = link.clone();
    let posted = posted.map(|o| {
        o.then(move |a, c| {
            let r = l.answered(&a.desc, &a.bytes);
            drop(a.guard.take());
            r.map(|()| c)
        })
    });
    // The descriptor goes once its answer's receive is posted.
    Ok(posted.and_then(|o| {
        ep.tag_send_owned_fast(desc.encode(), tag).map(|sent| {
            drop(sent);
            o
        })
    }))
}

/// A receive's operation on an endpoint with `link`, finished through it (see the module doc):
/// a descriptor that arrives is read through (`Link::finish`; a buffer smaller than one
/// received into a descriptor's room, so its sender is answered).
pub(crate) fn read_through(
    op: Owned<Receive<PyBufMut>>,
    (link, ep): (Arc<Link>, ucx_core::Endpoint),
) -> Owned<Receive<PyBufMut>> {
    op.then(move |r, c| {
        if r.memory_type() != MemoryType::Host {
            // A descriptor cannot be read into device memory. A receive of exactly its size
            // that got 64 bytes fails anyway (UCX-Py's length check): say what it likely was.
            if link.receives() && c.length == Descriptor::LEN && r.byte_len() > Descriptor::LEN {
                return Err(ucx_core::Error::with_detail(
                    "recv",
                    ucx_core::Status::MessageTruncated,
                    "64 bytes arrived in device memory: likely a host message the peer sent by \
                     same-host single copy, which only host memory can receive (set \
                     UCXA_SINGLE_COPY=0 on either side to send it UCX's way)",
                ));
            }
            return Ok(c);
        }
        // SAFETY: the receive into `r` has finished (this runs on its completion), and the
        // operation holds `r` across this call.
        unsafe { link.finish(&ep, c, r) }.map_err(|e| e.into_error("recv"))
    })
}

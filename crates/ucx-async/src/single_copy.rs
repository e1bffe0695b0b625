//! An endpoint's side of the same-host single-copy path (its rules in
//! `ucx_core::single_copy::Link`, its bytes in `ucx_core::wire::single_copy`): after a UCX-Py
//! handshake whose peer carried the mark, both sides trade hellos and verdicts in a task of
//! their own; then a host message of at least `ucx_core::single_copy::threshold()` bytes to a
//! peer that can read this process goes as a descriptor and its send completes with the
//! peer's answer, and a received descriptor from a peer this process can read is read into
//! the receive's buffer.
//!
//! Until the verdicts are in, and with any peer that did not carry the mark (UCX-Py, UCXX,
//! an endpoint made from a worker address), messages go the ordinary way. What fails here
//! fails as the endpoint's operations do: its peer's failure or close ends the waits through
//! the endpoint's state.
use std::sync::{Arc, Mutex};

use tokio::task::JoinHandle;
use ucx_core::single_copy::{Counts, Link, ReadError};
use ucx_core::wire::single_copy::{Ack, Hello, Verdict};
use ucx_core::{Owned, SendBuffer, FULL_MASK};

use crate::error::{Error, Result};
use crate::handshake::Tags;
use crate::liveness::{EpState, Watched};
use crate::op::{Completes, CompletesOwned, Load};
use crate::worker::Worker;

/// One endpoint's single-copy link and the task that negotiates it.
pub(crate) struct SingleCopy {
    pub(crate) link: Link,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl SingleCopy {
    /// The link of an endpoint with `tags` whose peer carried the mark, with the hello
    /// exchange started on `core` (stopped by [`SingleCopy::stop`]).
    pub(crate) fn start(worker: &Worker, core: &ucx_core::Endpoint, state: &Arc<EpState>, tags: Tags) -> Arc<Self> {
        let me = Arc::new(SingleCopy { link: Link::new(tags.msg_recv, tags.msg_send), task: Mutex::default() });
        let (w, c, s, m) = (worker.clone(), core.clone(), state.clone(), me.clone());
        let task = tokio::spawn(async move {
            // A failure here only leaves the path off; the endpoint reports its own.
            let _ = m.negotiate(&w, &c, &s).await;
        });
        *me.task.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
        me
    }

    /// Stops the hello exchange (the endpoint is going away).
    pub(crate) fn stop(&self) {
        if let Some(t) = self.task.lock().unwrap_or_else(|p| p.into_inner()).take() {
            t.abort();
        }
    }

    pub(crate) fn counts(&self) -> Counts {
        self.link.counts()
    }

    async fn negotiate(&self, worker: &Worker, core: &ucx_core::Endpoint, state: &EpState) -> Result<()> {
        let signals = &worker.inner.signals;
        let (mine, theirs) = self.link.hello_tags();
        let mut hello = [0u8; Hello::LEN];
        let r = worker.inner.unclaimed.recv(worker.core(), &mut hello[..], mine, FULL_MASK)?;
        let hello_in = Watched::new(Completes::new(r, signals), state, None);
        Completes::new(core.tag_send(&self.link.hello()[..], theirs)?, signals).await?;
        let got = hello_in.await?.length.min(Hello::LEN);
        let verdict = self.link.take_hello(&hello[..got]).encode();
        Completes::new(core.tag_send(&verdict[..], theirs)?, signals).await?;
        let mut verdict = [0u8; Verdict::LEN];
        let r = worker.inner.unclaimed.recv(worker.core(), &mut verdict[..], mine, FULL_MASK)?;
        let got = Watched::new(Completes::new(r, signals), state, None).await?.length.min(Verdict::LEN);
        self.link.take_verdict(&verdict[..got]);
        Ok(())
    }

    /// Sends `buf` on `tag` as a descriptor and waits for the peer's answer. `None`: no guard
    /// was free, send it the ordinary way.
    pub(crate) async fn send<B: SendBuffer + ?Sized>(
        &self,
        worker: &Worker,
        core: &ucx_core::Endpoint,
        state: &EpState,
        buf: &B,
        tag: u64,
    ) -> Option<Result<()>> {
        // `guard` drops with this future, after the answer or without it: before `buf` can go.
        // SAFETY: `buf` is host memory (the caller asked `Link::sends`), borrowed for the call.
        let (desc, guard, answer_tag) = unsafe { self.link.describe(buf.as_ptr(), buf.byte_len()) }?;
        let signals = &worker.inner.signals;
        let sent = async {
            // Owned, and not cancelled if this send is dropped: an answer that comes later is
            // still taken, instead of waiting in UCX's queue for the worker's life.
            let answer =
                Owned::submit(Box::new([0u8; Ack::LEN]), false, |b| worker.core().tag_recv(b, answer_tag, FULL_MASK))?;
            // The answer comes once the peer has read the bytes: the wait spins as long as a
            // transfer of them would, instead of sleeping through the read.
            let load = Load::new(buf.byte_len(), buf.memory_type());
            let mut answered = Watched::new(CompletesOwned::new(answer, signals, load), state, None);
            Completes::new(core.tag_send_fast(&desc.encode()[..], tag)?, signals).await?;
            (&mut answered).await?;
            let answer = answered.fut.op.take().and_then(Owned::into_buffer).unwrap_or([0; Ack::LEN]);
            Ok::<_, Error>(self.link.answered(&desc, &answer)?)
        };
        let r = sent.await;
        drop(guard);
        Some(r)
    }
}

/// What an owned single-copy send hands to the receive of its answer: the answer's room,
/// then the guard, then the message's buffer. Dropping the send's future leaves all three with
/// that receive (not cancelled) until the answer comes, so a dropped owned send still delivers
/// its message, as an owned send over UCX's own protocols does; the guard is cleared before the
/// buffer goes, whenever that is.
pub(crate) struct OwnedSend<B> {
    answer: [u8; Ack::LEN],
    desc: ucx_core::wire::single_copy::Descriptor,
    guard: Option<ucx_core::single_copy::Guard>,
    data: Option<B>,
}

impl SingleCopy {
    /// [`SingleCopy::send`] of a buffer the operation owns, returned once answered. `Err(buf)`:
    /// no guard was free, send it the ordinary way.
    pub(crate) async fn send_owned<B: SendBuffer + Send + 'static>(
        &self,
        worker: &Worker,
        core: &ucx_core::Endpoint,
        state: &EpState,
        buf: B,
        tag: u64,
    ) -> std::result::Result<Result<B>, B> {
        // SAFETY: `buf` is host memory (the caller asked `Link::sends`), owned here.
        let Some((desc, guard, answer_tag)) = (unsafe { self.link.describe(buf.as_ptr(), buf.byte_len()) }) else {
            return Err(buf);
        };
        let load = Load::new(buf.byte_len(), buf.memory_type());
        let send = OwnedSend { answer: [0u8; Ack::LEN], desc, guard: Some(guard), data: Some(buf) };
        let signals = &worker.inner.signals;
        let sent = async {
            let answer = Owned::submit(Box::new(send), false, |s| {
                worker.core().tag_recv(&mut s.answer[..], answer_tag, FULL_MASK)
            })?;
            // As in `send`: the wait for the answer spins as long as the peer's read.
            let mut answered = Watched::new(CompletesOwned::new(answer, signals, load), state, None);
            Completes::new(core.tag_send_fast(&desc.encode()[..], tag)?, signals).await?;
            (&mut answered).await?;
            let mut send = answered.fut.op.take().and_then(Owned::into_buffer).ok_or_else(|| Error::Protocol {
                op: "Endpoint::send_owned",
                detail: "a single-copy answer went missing".into(),
            })?;
            drop(send.guard.take());
            self.link.answered(&send.desc, &send.answer)?;
            send.data.take().ok_or_else(|| Error::Protocol { op: "Endpoint::send_owned", detail: "no buffer".into() })
        };
        Ok(sent.await)
    }
}

/// A failed single-copy read as the receive's error: the endpoint's own if it went down
/// meanwhile (the sender died mid-read), else the read's.
pub(crate) fn read_error(state: &EpState, op: &'static str, e: ReadError) -> Error {
    match state.check(op) {
        Err(down) => down,
        Ok(()) => Error::Ucx(e.into_error(op)),
    }
}

//! The connection handshake of UCX-Py (24-byte peer info with a control tag) and of UCXX
//! (16 bytes, no control tag), over the endpoint's stream API, with a timeout. The listener
//! sends first; a connecting client reads 16 bytes and tells the flavours apart
//! (`ucx_core::wire::detect`), so it can reach either kind of server. Our UCX-Py peer info
//! carries the single-copy mark in its `ctrl_tag` (`ucx_core::wire::single_copy`), and each
//! side reports whether the peer's did.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use ucx_core::wire::single_copy::{is_marked, marked_ctrl_tag};
use ucx_core::wire::{self, Flavour, PeerInfo, UcxxPeerInfo};
use ucx_core::CloseMode;

use crate::error::{Error, Result};

use crate::op::Completes;
use crate::reactor::Signals;

/// The tags an endpoint's messages travel on (UCX-Py's `ep._tags`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tags {
    /// Where our data messages go (the peer's receive tag).
    pub msg_send: u64,
    /// Where the peer's data messages arrive.
    pub msg_recv: u64,
    /// Where our control messages go; `None` with UCXX peers (no control channel).
    pub ctrl_send: Option<u64>,
    /// Where the peer's control messages arrive.
    pub ctrl_recv: Option<u64>,
}

/// A fresh random tag (not cryptographic; 64 bits keep endpoints apart, as in UCX-Py).
pub(crate) fn random_tag() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
}

/// Our UCX-Py `ctrl_tag`: marked for the single-copy path where the endpoint `offers` it
/// (`ucx_core::single_copy::offered`), else random, as UCX-Py's.
fn our_ctrl_tag(msg_tag: u64, offers: bool) -> u64 {
    if offers {
        marked_ctrl_tag(msg_tag)
    } else {
        random_tag()
    }
}

/// Runs `fut` with a timeout; on timeout the endpoint is force-closed first, because UCX cannot
/// cancel a pending stream receive any other way, and only then is the operation dropped.
async fn bounded(
    ep: &ucx_core::Endpoint,
    signals: &Signals,
    timeout: Duration,
    what: &'static str,
    fut: Completes<'_, '_>,
) -> Result<()> {
    tokio::pin!(fut);
    match tokio::time::timeout(timeout, &mut fut).await {
        Ok(r) => r.map(drop).map_err(Error::from),
        Err(_) => {
            if let Ok(close) = ep.close(CloseMode::Force) {
                let _ = Completes::new(close, signals).await;
            }
            let _ = fut.await;
            Err(Error::HandshakeTimeout { step: what, after: timeout })
        }
    }
}

/// The handshake's two primitives on one endpoint, each bounded by the timeout.
struct Stream<'a> {
    ep: &'a ucx_core::Endpoint,
    signals: &'a Signals,
    timeout: Duration,
}

impl Stream<'_> {
    async fn send(&self, bytes: &[u8]) -> Result<()> {
        let op = Completes::new(self.ep.stream_send(bytes)?, self.signals);
        bounded(self.ep, self.signals, self.timeout, "sending the peer info", op).await
    }

    async fn recv(&self, buf: &mut [u8]) -> Result<()> {
        let op = Completes::new(self.ep.stream_recv(buf)?, self.signals);
        bounded(self.ep, self.signals, self.timeout, "receiving the peer info", op).await
    }
}

/// Our tags against a UCX-Py peer's info.
fn ucxpy_tags(msg_tag: u64, ctrl_tag: u64, peer: PeerInfo) -> Tags {
    Tags { msg_send: peer.msg_tag, msg_recv: msg_tag, ctrl_send: Some(peer.ctrl_tag), ctrl_recv: Some(ctrl_tag) }
}

/// Our tags against a UCXX peer's info (no control channel).
fn ucxx_tags(msg_tag: u64, peer: UcxxPeerInfo) -> Tags {
    Tags { msg_send: peer.msg_tag, msg_recv: msg_tag, ctrl_send: None, ctrl_recv: None }
}

/// The listener's side: send our info first, then read the client's. Also says whether both
/// sides offer the single-copy path: this endpoint (`ucx_core::single_copy::offered_on`, the
/// mark in our `ctrl_tag`) and the client (the mark in its).
pub(crate) async fn server(
    ep: &ucx_core::Endpoint,
    signals: &Signals,
    flavour: Flavour,
    timeout: Duration,
) -> Result<(Tags, bool)> {
    let stream = Stream { ep, signals, timeout };
    let msg_tag = random_tag();
    match flavour {
        Flavour::UcxPy => {
            let offers = ucx_core::single_copy::offered_on(ep);
            let ctrl_tag = our_ctrl_tag(msg_tag, offers);
            stream.send(&PeerInfo { msg_tag, ctrl_tag }.encode()).await?;
            let mut inb = [0u8; PeerInfo::LEN];
            stream.recv(&mut inb).await?;
            let peer = PeerInfo::decode(&inb).map_err(wire_error)?;
            Ok((ucxpy_tags(msg_tag, ctrl_tag, peer), offers && is_marked(peer.msg_tag, peer.ctrl_tag)))
        }
        Flavour::Ucxx => {
            stream.send(&UcxxPeerInfo { msg_tag }.encode()).await?;
            let mut inb = [0u8; UcxxPeerInfo::LEN];
            stream.recv(&mut inb).await?;
            Ok((ucxx_tags(msg_tag, UcxxPeerInfo::decode(&inb).map_err(wire_error)?), false))
        }
    }
}

/// The client's side: read the listener's info, detect its flavour, answer in kind. Also
/// says whether both sides offer the single-copy path (as [`server`]).
pub(crate) async fn client(
    ep: &ucx_core::Endpoint,
    signals: &Signals,
    timeout: Duration,
) -> Result<(Flavour, Tags, bool)> {
    let stream = Stream { ep, signals, timeout };
    let mut inb = [0u8; PeerInfo::LEN];
    // Nothing from the listener yet: failing here, the connect had no listener answering.
    stream.recv(&mut inb[..wire::DETECT_LEN]).await.map_err(crate::connect_error::unanswered)?;
    let first: &[u8; wire::DETECT_LEN] = inb[..wire::DETECT_LEN].try_into().expect("slice of DETECT_LEN bytes");
    let flavour = wire::detect(first);
    let msg_tag = random_tag();
    let (tags, marked) = match flavour {
        Flavour::Ucxx => {
            let peer = UcxxPeerInfo::decode(first).map_err(wire_error)?;
            stream.send(&UcxxPeerInfo { msg_tag }.encode()).await?;
            (ucxx_tags(msg_tag, peer), false)
        }
        Flavour::UcxPy => {
            stream.recv(&mut inb[wire::DETECT_LEN..]).await?;
            let peer = PeerInfo::decode(&inb).map_err(wire_error)?;
            let offers = ucx_core::single_copy::offered_on(ep);
            let ctrl_tag = our_ctrl_tag(msg_tag, offers);
            stream.send(&PeerInfo { msg_tag, ctrl_tag }.encode()).await?;
            (ucxpy_tags(msg_tag, ctrl_tag, peer), offers && is_marked(peer.msg_tag, peer.ctrl_tag))
        }
    };
    Ok((flavour, tags, marked))
}

fn wire_error(e: wire::WireError) -> Error {
    Error::Protocol { op: "handshake", detail: e.to_string() }
}

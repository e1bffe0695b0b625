//! The connection handshake of UCX-Py (24-byte peer info with a control tag) and of UCXX
//! (16 bytes, no control tag), over the endpoint's stream API, with a timeout. The listener
//! sends first; a connecting client reads 16 bytes and tells the flavours apart
//! (`ucx_core::wire::detect`), so it can reach either kind of server.
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

use ucx_core::wire::{self, Flavour, PeerInfo, UcxxPeerInfo};
use ucx_core::{CloseMode, Error, Result, Status};

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
fn random_tag() -> u64 {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.finish()
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
        Ok(r) => r.map(|_| ()),
        Err(_) => {
            if let Ok(close) = ep.close(CloseMode::Force) {
                let _ = Completes::new(close, signals).await;
            }
            let _ = fut.await;
            Err(Error::with_detail("handshake", Status::TimedOut, format!("{what} took longer than {timeout:?}")))
        }
    }
}

/// The listener's side: send our info first, then read the client's.
pub(crate) async fn server(
    ep: &ucx_core::Endpoint,
    signals: &Signals,
    flavour: Flavour,
    timeout: Duration,
) -> Result<Tags> {
    let msg_tag = random_tag();
    match flavour {
        Flavour::UcxPy => {
            let ctrl_tag = random_tag();
            let out = PeerInfo { msg_tag, ctrl_tag }.encode();
            bounded(ep, signals, timeout, "sending the peer info", Completes::new(ep.stream_send(&out)?, signals))
                .await?;
            let mut inb = [0u8; PeerInfo::LEN];
            bounded(
                ep,
                signals,
                timeout,
                "receiving the peer info",
                Completes::new(ep.stream_recv(&mut inb)?, signals),
            )
            .await?;
            let peer = PeerInfo::decode(&inb).map_err(wire_error)?;
            Ok(Tags {
                msg_send: peer.msg_tag,
                msg_recv: msg_tag,
                ctrl_send: Some(peer.ctrl_tag),
                ctrl_recv: Some(ctrl_tag),
            })
        }
        Flavour::Ucxx => {
            let out = UcxxPeerInfo { msg_tag }.encode();
            bounded(ep, signals, timeout, "sending the peer info", Completes::new(ep.stream_send(&out)?, signals))
                .await?;
            let mut inb = [0u8; UcxxPeerInfo::LEN];
            bounded(
                ep,
                signals,
                timeout,
                "receiving the peer info",
                Completes::new(ep.stream_recv(&mut inb)?, signals),
            )
            .await?;
            let peer = UcxxPeerInfo::decode(&inb).map_err(wire_error)?;
            Ok(Tags { msg_send: peer.msg_tag, msg_recv: msg_tag, ctrl_send: None, ctrl_recv: None })
        }
    }
}

/// The client's side: read the listener's info, detect its flavour, answer in kind.
pub(crate) async fn client(ep: &ucx_core::Endpoint, signals: &Signals, timeout: Duration) -> Result<(Flavour, Tags)> {
    let mut first = [0u8; wire::DETECT_LEN];
    bounded(ep, signals, timeout, "receiving the peer info", Completes::new(ep.stream_recv(&mut first)?, signals))
        .await?;
    let flavour = wire::detect(&first);
    let msg_tag = random_tag();
    match flavour {
        Flavour::Ucxx => {
            let peer = UcxxPeerInfo::decode(&first).map_err(wire_error)?;
            let out = UcxxPeerInfo { msg_tag }.encode();
            bounded(ep, signals, timeout, "sending the peer info", Completes::new(ep.stream_send(&out)?, signals))
                .await?;
            Ok((flavour, Tags { msg_send: peer.msg_tag, msg_recv: msg_tag, ctrl_send: None, ctrl_recv: None }))
        }
        Flavour::UcxPy => {
            let mut rest = [0u8; PeerInfo::LEN - wire::DETECT_LEN];
            bounded(
                ep,
                signals,
                timeout,
                "receiving the peer info",
                Completes::new(ep.stream_recv(&mut rest)?, signals),
            )
            .await?;
            let mut all = [0u8; PeerInfo::LEN];
            all[..wire::DETECT_LEN].copy_from_slice(&first);
            all[wire::DETECT_LEN..].copy_from_slice(&rest);
            let peer = PeerInfo::decode(&all).map_err(wire_error)?;
            let ctrl_tag = random_tag();
            let out = PeerInfo { msg_tag, ctrl_tag }.encode();
            bounded(ep, signals, timeout, "sending the peer info", Completes::new(ep.stream_send(&out)?, signals))
                .await?;
            Ok((
                flavour,
                Tags {
                    msg_send: peer.msg_tag,
                    msg_recv: msg_tag,
                    ctrl_send: Some(peer.ctrl_tag),
                    ctrl_recv: Some(ctrl_tag),
                },
            ))
        }
    }
}

fn wire_error(e: wire::WireError) -> Error {
    Error::with_detail("handshake", Status::InvalidParam, e.to_string())
}

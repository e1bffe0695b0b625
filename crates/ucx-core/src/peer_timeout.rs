//! How long a peer whose network stopped passing packets may go unnoticed: the one setting
//! (`UCXA_PEER_TIMEOUT`, seconds; [`DEFAULT`] where unset) and the UCX settings it becomes.
//! Every context ucx-core makes applies them (through [`crate::library_defaults`]), each only
//! where neither the environment nor the builder's options chose it; `import ucp` sets them in
//! its environment the same way.
//!
//! Contract: with peer error handling over UCX's tcp transport, when every packet between two
//! processes is dropped, both sides' endpoints fail (UCX's error callback, so every pending
//! and later operation fails as the peer's failure) within the timeout, whether data was in
//! flight or the pair was idle; a silence shorter than a quarter of it heals unnoticed (TCP's
//! retransmissions back off exponentially, so the last one before the user timeout, which
//! carries the stream on, comes after half of that timeout).
//!
//! Why these settings (UCX 1.22, `src/uct/tcp`): UCX's tcp transport turns on TCP keepalive
//! (`UCX_TCP_KEEPIDLE`, `KEEPINTVL`, `KEEPCNT`) only on the sockets it connects
//! (`uct_tcp_ep_create_socket_and_connect`), never on those it accepts
//! (`uct_tcp_cm_handle_incoming_conn`), yet announces keepalive as built in
//! (`UCT_IFACE_FLAG_EP_KEEPALIVE`), so UCP adds none of its own: the accepting side of an idle
//! connection never learns that its peer is gone. With `TCP_KEEPIDLE=inf` the transport
//! announces none, and UCP's keepalive (`KEEPALIVE_INTERVAL`, every endpoint each round with
//! `KEEPALIVE_NUM_EPS=inf`) sends a few bytes on every connection from both sides;
//! `TCP_USER_TIMEOUT` (applied by UCX to connected and accepted sockets alike) then fails a
//! connection whose bytes, keepalive or data, go unacknowledged that long, and UCX reports it
//! as the endpoint's failure. The interval is an eighth of the timeout and the user timeout
//! half of it: UCP sent its keepalive up to two intervals apart (its timer is checked only every
//! few progress calls), and the kernel fails the connection at the retransmission after the
//! user timeout, so detection took at most two intervals plus the user timeout plus under a
//! second (docs/configuration.md has the measurements).
use std::time::Duration;

/// The timeout where `UCXA_PEER_TIMEOUT` is unset: 30 s, as distributed's own TCP comm
/// (`distributed.comm.timeouts.tcp`). Measured with it: both sides
/// of an idle pair failed 21.9–22.1 s after a partition began, of a busy pair (1 MiB echoes in
/// flight) 15.2–18.1 s, and a 3 s or 7 s silence healed (docs/configuration.md).
pub const DEFAULT: Duration = Duration::from_secs(30);

/// The environment variable that sets the timeout.
pub const VARIABLE: &str = "UCXA_PEER_TIMEOUT";

/// The timeout `value` asks for: seconds (`30`, `7.5`), or `None` for `0`, `off`, `none` or
/// `inf` (UCX's own settings stay: no keepalive on accepted connections). An error says why
/// a value is refused.
pub fn parse(value: &str) -> Result<Option<Duration>, String> {
    let v = value.trim();
    if matches!(v.to_ascii_lowercase().as_str(), "0" | "off" | "none" | "inf") {
        return Ok(None);
    }
    match v.parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 && secs <= 86_400.0 => Ok(Some(Duration::from_secs_f64(secs))),
        _ => Err(format!("{VARIABLE}={value:?} is not a number of seconds (0 < s <= 86400), 0 or off")),
    }
}

/// The timeout this process uses: `UCXA_PEER_TIMEOUT` if set, else [`DEFAULT`]; `None` where
/// it is off. A value [`parse`] refuses is reported on stderr and the default used.
pub fn from_env() -> Option<Duration> {
    match std::env::var(VARIABLE) {
        Err(_) => Some(DEFAULT),
        Ok(v) => parse(&v).unwrap_or_else(|why| {
            eprintln!("ucx-core: {why}; using {} s", DEFAULT.as_secs());
            Some(DEFAULT)
        }),
    }
}

/// The UCX settings (names without `UCX_`) that make a peer's silence fail its endpoints
/// within `timeout`: UCP's keepalive on every endpoint every eighth of it, in place of the tcp
/// transport's (which covers connected sockets only), and TCP's user timeout at half of it.
pub fn ucx_settings(timeout: Duration) -> [(&'static str, String); 4] {
    let ms = |d: Duration| format!("{}ms", d.as_millis().max(1));
    [
        ("TCP_KEEPIDLE", "inf".to_string()),
        ("KEEPALIVE_INTERVAL", ms(timeout / 8)),
        ("KEEPALIVE_NUM_EPS", "inf".to_string()),
        ("TCP_USER_TIMEOUT", ms(timeout / 2)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values() {
        assert_eq!(parse("30"), Ok(Some(Duration::from_secs(30))));
        assert_eq!(parse(" 7.5 "), Ok(Some(Duration::from_millis(7500))));
        for off in ["0", "off", "OFF", "none", "inf"] {
            assert_eq!(parse(off), Ok(None), "{off}");
        }
        for bad in ["", "-1", "nan", "ten", "1e9", "30s"] {
            assert!(parse(bad).unwrap_err().contains(VARIABLE), "{bad}");
        }
    }

    #[test]
    fn settings_for_a_timeout() {
        let s = ucx_settings(Duration::from_secs(6));
        assert_eq!(s[1], ("KEEPALIVE_INTERVAL", "750ms".to_string()));
        assert_eq!(s[3], ("TCP_USER_TIMEOUT", "3000ms".to_string()));
        assert_eq!(s[0], ("TCP_KEEPIDLE", "inf".to_string()));
        assert_eq!(s[2], ("KEEPALIVE_NUM_EPS", "inf".to_string()));
    }
}

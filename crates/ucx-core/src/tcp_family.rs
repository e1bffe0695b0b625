//! Which address family (IPv4 or IPv6) UCX's tcp transport uses on a network device, and the
//! check that a client-server connection is of that family before UCX sees it.
//!
//! UCX's tcp transport opens one interface per device, with one address: the first family of
//! `UCX_TCP_AF_PRIO` (default `inet,inet6`) for which the device has an address that is up
//! (IPv4 link-local `169.254/16` and IPv6 link-local `fe80::/10` skipped). A connection made
//! through a listener (UCX's connection manager) hands the tcp transport the peer's address
//! of the listener's connection, and UCX 1.22 copies it into an endpoint sized for the
//! interface's own address: an IPv6 address (28 bytes) into room for IPv4's 16 overruns the
//! heap (glibc then aborts: "malloc assertion failure in sysmalloc", "corrupted size vs.
//! prev_size"), on the client when it connects and on the server when it accepts. An IPv4
//! connection over an IPv6 interface corrupts nothing but never connects (the peer's
//! interface listens on its IPv6 address only). So a context's tcp transport carries
//! connections of one family per device, and `Listener::bind`, `Endpoint::connect` and
//! `Endpoint::accept` refuse the other family with [`Status::Unsupported`] before UCX sees
//! it; a context made with `TCP_AF_PRIO=inet6,inet` carries IPv6.
//!
//! The device is the one UCX picks: the interface that owns the local address of the
//! connection, which is the address the kernel's route to the peer starts from (asked with an
//! unconnected UDP socket: no packet is sent).
use std::ffi::CStr;
use std::net::{IpAddr, SocketAddr, UdpSocket};

use crate::context::{transport_resources, Context};
use crate::error::{Error, Result, Status};

/// UCX's default for `TCP_AF_PRIO`.
const DEFAULT_AF_PRIO: &str = "inet,inet6";

/// An address family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Family {
    V4,
    V6,
}

impl Family {
    fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// The `TCP_AF_PRIO` value that puts this family first.
    fn af_prio(self) -> &'static str {
        match self {
            Family::V4 => "inet,inet6",
            Family::V6 => "inet6,inet",
        }
    }
}

/// The families of `TCP_AF_PRIO` in order (UCX reads at most two; unknown names make UCX fail
/// the context, so they never reach here).
fn af_prio(context: &Context) -> Vec<Family> {
    let value = context.setting("TCP_AF_PRIO").unwrap_or(DEFAULT_AF_PRIO);
    value
        .split(',')
        .filter_map(|f| match f.trim().to_ascii_lowercase().as_str() {
            "inet" => Some(Family::V4),
            "inet6" => Some(Family::V6),
            _ => None,
        })
        .take(2)
        .collect()
}

/// One address of a network interface, as `getifaddrs` lists it.
struct IfAddr {
    device: String,
    ip: IpAddr,
    up: bool,
}

/// Every address of every interface (`getifaddrs`). Empty if the call fails: the check then
/// finds no device and lets UCX decide.
fn interface_addresses() -> Vec<IfAddr> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes the head of a list that we free with freeifaddrs below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut node = head;
    while !node.is_null() {
        // SAFETY: node is an element of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*node };
        node = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a socket address whose family field is readable.
        let family = libc::c_int::from(unsafe { (*ifa.ifa_addr).sa_family });
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: the family says ifa_addr holds a sockaddr_in.
                let sin = unsafe { *ifa.ifa_addr.cast::<libc::sockaddr_in>() };
                IpAddr::from(sin.sin_addr.s_addr.to_ne_bytes())
            }
            libc::AF_INET6 => {
                // SAFETY: the family says ifa_addr holds a sockaddr_in6.
                let sin6 = unsafe { *ifa.ifa_addr.cast::<libc::sockaddr_in6>() };
                IpAddr::from(sin6.sin6_addr.s6_addr)
            }
            _ => continue,
        };
        // SAFETY: ifa_name is a NUL-terminated string alive until freeifaddrs.
        let device = unsafe { CStr::from_ptr(ifa.ifa_name) }.to_string_lossy().into_owned();
        let flags = ifa.ifa_flags as libc::c_int;
        out.push(IfAddr { device, ip, up: flags & libc::IFF_UP != 0 && flags & libc::IFF_RUNNING != 0 });
    }
    // SAFETY: head came from getifaddrs and nothing refers to the list any more.
    unsafe { libc::freeifaddrs(head) };
    out
}

/// Whether UCX's tcp transport would take `a` as an address of its device (`ucs_netif_get_addr`).
fn usable_by_ucx(a: &IfAddr) -> bool {
    a.up && match a.ip {
        IpAddr::V4(v4) => !v4.is_link_local(),
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 != 0xfe80,
    }
}

/// The family of the address UCX's tcp interface on `device` uses, by `prio`; `None` where the
/// device has no address UCX takes (no tcp interface there).
fn device_family(addrs: &[IfAddr], device: &str, prio: &[Family]) -> Option<Family> {
    prio.iter()
        .copied()
        .find(|f| addrs.iter().any(|a| a.device == device && Family::of(a.ip) == *f && usable_by_ucx(a)))
}

/// The local address a connection to `peer` starts from (the kernel's route), if there is one.
fn local_ip_towards(peer: SocketAddr) -> Option<IpAddr> {
    let any: SocketAddr = match peer {
        SocketAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        SocketAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let mut to = peer;
    if to.port() == 0 {
        to.set_port(9); // connect() on a UDP socket refuses port 0; no packet is sent either way
    }
    let socket = UdpSocket::bind(any).ok()?;
    socket.connect(to).ok()?;
    Some(socket.local_addr().ok()?.ip())
}

/// What the checks below found wrong: the device and the family its tcp interface uses.
struct Mismatch {
    device: String,
    uses: Family,
}

/// Whether a connection of `family` whose local end is `local` would meet a tcp interface of
/// the other family in `context` (on the device that owns `local`).
fn mismatch(context: &Context, family: Family, local: IpAddr) -> Option<Mismatch> {
    let addrs = interface_addresses();
    let device = addrs.iter().find(|a| a.ip == local)?.device.clone();
    let uses = device_family(&addrs, &device, &af_prio(context))?;
    if uses == family {
        return None;
    }
    // Only a device the context's tcp transport uses has an interface to mismatch.
    let info = context.info();
    let tcp_here = transport_resources(&info).iter().any(|r| r.strip_prefix("tcp/") == Some(device.as_str()));
    tcp_here.then_some(Mismatch { device, uses })
}

fn refuse(op: &'static str, what: String, family: Family, m: Mismatch) -> Error {
    Error::with_detail(
        op,
        Status::Unsupported,
        format!(
            "{what} is {}, but this context's tcp transport uses {} on {} (UCX_TCP_AF_PRIO); UCX 1.22 \
             would corrupt the heap or fail the connection. Use a context made with TCP_AF_PRIO={} for {} \
             connections (ucx-core: ContextBuilder::option(\"TCP_AF_PRIO\", \"{}\"))",
            family.name(),
            m.uses.name(),
            m.device,
            family.af_prio(),
            family.name(),
            family.af_prio(),
        ),
    )
}

/// Refuses a connection to or from `peer` whose family UCX's tcp interface on the device the
/// connection leaves through does not use. `op` names the caller for the error.
pub(crate) fn check_peer(context: &Context, peer: SocketAddr, op: &'static str, what: &str) -> Result<()> {
    let family = Family::of(peer.ip());
    let Some(local) = local_ip_towards(peer) else { return Ok(()) };
    match mismatch(context, family, local) {
        None => Ok(()),
        Some(m) => Err(refuse(op, format!("{what} {peer}"), family, m)),
    }
}

/// Refuses a listener on `addr` (an address of this host; a wildcard is checked per
/// connection instead) whose family UCX's tcp interface on its device does not use.
pub(crate) fn check_bind(context: &Context, addr: SocketAddr, op: &'static str) -> Result<()> {
    if addr.ip().is_unspecified() {
        return Ok(());
    }
    let family = Family::of(addr.ip());
    match mismatch(context, family, addr.ip()) {
        None => Ok(()),
        Some(m) => Err(refuse(op, format!("the listener's address {addr}"), family, m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(device: &str, ip: &str, up: bool) -> IfAddr {
        IfAddr { device: device.into(), ip: ip.parse().unwrap(), up }
    }

    #[test]
    fn a_device_uses_the_first_family_it_has_an_address_of() {
        let addrs = [
            addr("lo", "127.0.0.1", true),
            addr("lo", "::1", true),
            addr("v6only", "fe80::1", true),
            addr("v6only", "fd00::1", true),
            addr("v4ll", "169.254.1.1", true),
            addr("v4ll", "fd00::2", true),
            addr("down", "10.0.0.1", false),
            addr("onlyll", "fe80::2", true),
        ];
        let (v4, v6) = ([Family::V4, Family::V6], [Family::V6, Family::V4]);
        assert_eq!(device_family(&addrs, "lo", &v4), Some(Family::V4));
        assert_eq!(device_family(&addrs, "lo", &v6), Some(Family::V6));
        assert_eq!(device_family(&addrs, "lo", &[Family::V6]), Some(Family::V6));
        assert_eq!(device_family(&addrs, "v6only", &v4), Some(Family::V6));
        assert_eq!(device_family(&addrs, "v4ll", &v4), Some(Family::V6), "169.254/16 is skipped");
        assert_eq!(device_family(&addrs, "down", &v4), None);
        assert_eq!(device_family(&addrs, "onlyll", &v6), None, "fe80::/10 is skipped");
        assert_eq!(device_family(&addrs, "v6only", &[Family::V4]), None);
    }

    #[test]
    fn the_route_to_loopback_starts_at_loopback() {
        assert_eq!(local_ip_towards("127.0.0.1:1".parse().unwrap()), Some("127.0.0.1".parse().unwrap()));
        if let Some(ip) = local_ip_towards("[::1]:1".parse().unwrap()) {
            assert_eq!(ip, "::1".parse::<IpAddr>().unwrap()); // None where IPv6 is off
        }
    }
}

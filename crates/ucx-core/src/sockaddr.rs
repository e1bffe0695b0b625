//! Conversions between `std::net::SocketAddr` and the C `sockaddr` structures UCX takes.
use std::mem;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};

/// A C socket address with storage for IPv4 or IPv6, built from a `SocketAddr`.
pub(crate) struct CSockAddr {
    storage: libc::sockaddr_storage,
    len: libc::socklen_t,
}

impl CSockAddr {
    pub(crate) fn new(addr: SocketAddr) -> CSockAddr {
        // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
        let mut storage: libc::sockaddr_storage = unsafe { mem::zeroed() };
        let len = match addr {
            SocketAddr::V4(a) => {
                let sin = libc::sockaddr_in {
                    sin_family: libc::AF_INET as libc::sa_family_t,
                    sin_port: a.port().to_be(),
                    sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(a.ip().octets()) },
                    sin_zero: [0; 8],
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin) };
                mem::size_of::<libc::sockaddr_in>()
            }
            SocketAddr::V6(a) => {
                let sin6 = libc::sockaddr_in6 {
                    sin6_family: libc::AF_INET6 as libc::sa_family_t,
                    sin6_port: a.port().to_be(),
                    sin6_flowinfo: a.flowinfo(),
                    sin6_addr: libc::in6_addr { s6_addr: a.ip().octets() },
                    sin6_scope_id: a.scope_id(),
                };
                // SAFETY: sockaddr_storage is larger than and suitably aligned for sockaddr_in6.
                unsafe { std::ptr::write((&mut storage as *mut libc::sockaddr_storage).cast(), sin6) };
                mem::size_of::<libc::sockaddr_in6>()
            }
        };
        CSockAddr { storage, len: len as libc::socklen_t }
    }

    pub(crate) fn as_ucs(&self) -> crate::sys::ucs_sock_addr_t {
        crate::sys::ucs_sock_addr_t { addr: (&self.storage as *const libc::sockaddr_storage).cast(), addrlen: self.len }
    }
}

/// Reads a `sockaddr_storage` that UCX filled in (bindgen's copy of the type).
pub(crate) fn from_storage(storage: &crate::sys::sockaddr_storage) -> Option<SocketAddr> {
    let ptr = (storage as *const crate::sys::sockaddr_storage).cast::<libc::sockaddr_storage>();
    // SAFETY: bindgen's sockaddr_storage has the C layout of libc's (same header); reading the
    // family field of an initialised storage is valid.
    let family = unsafe { (*ptr).ss_family } as libc::c_int;
    match family {
        libc::AF_INET => {
            // SAFETY: the family says the storage holds a sockaddr_in.
            let sin = unsafe { &*ptr.cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes());
            Some(SocketAddr::V4(SocketAddrV4::new(ip, u16::from_be(sin.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says the storage holds a sockaddr_in6.
            let sin6 = unsafe { &*ptr.cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(sin6.sin6_addr.s6_addr);
            Some(SocketAddr::V6(SocketAddrV6::new(
                ip,
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_v4_and_v6() {
        for s in ["127.0.0.1:13337", "[::1]:4000", "0.0.0.0:0"] {
            let a: SocketAddr = s.parse().unwrap();
            let c = CSockAddr::new(a);
            // SAFETY: test-only reinterpretation of identical C layouts.
            let st: &crate::sys::sockaddr_storage = unsafe { &*(&c.storage as *const _ as *const _) };
            assert_eq!(from_storage(st), Some(a));
        }
    }
}

//! The communicator's bootstrap (ucx-async `collective`): each rank's hello to rank 0 and
//! rank 0's table of every rank's worker address. Ours alone (UCX-Py and UCXX have no
//! communicator), so a magic and a version lead each message.
//!
//! | message | fields (little-endian) |
//! |---|---|
//! | hello | `b"UCXC"`, `version: u16 = 1`, `rank: u32`, `size: u32`, worker address (the rest) |
//! | table | `b"UCXC"`, `version: u16 = 1`, `count: u32`, then per rank `len: u32` and `len` bytes |
//!
//! Rank 0's address can also reach the others through a rendezvous file (a path they all
//! see): one line of text, `ucxa-rendezvous 1 <ip>:<port>` (IPv6 in brackets), written by
//! rank 0 once its listener is up ([`rendezvous_text`], [`rendezvous_parse`]).

use std::net::SocketAddr;

use super::WireError;

const MAGIC: &[u8; 4] = b"UCXC";
const VERSION: u16 = 1;

/// A rank's introduction to rank 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's rank.
    pub rank: u32,
    /// The world size the sender was started with.
    pub size: u32,
    /// The sender's worker address (not checked here).
    pub address: Vec<u8>,
}

impl Hello {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = head(14 + self.address.len());
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.address);
        out
    }

    /// Decodes a hello.
    pub fn decode(bytes: &[u8]) -> Result<Hello, WireError> {
        let mut r = Reader(check_head("communicator hello", bytes)?);
        let (rank, size) = (r.u32("communicator hello")?, r.u32("communicator hello")?);
        Ok(Hello { rank, size, address: r.0.to_vec() })
    }
}

/// The table of every rank's worker address, by rank.
pub fn encode_table(addresses: &[Vec<u8>]) -> Vec<u8> {
    let mut out = head(10 + addresses.iter().map(|a| 4 + a.len()).sum::<usize>());
    out.extend_from_slice(&(addresses.len() as u32).to_le_bytes());
    for a in addresses {
        out.extend_from_slice(&(a.len() as u32).to_le_bytes());
        out.extend_from_slice(a);
    }
    out
}

/// Decodes a table; the caller checks the count against its world size.
pub fn decode_table(bytes: &[u8]) -> Result<Vec<Vec<u8>>, WireError> {
    const WHAT: &str = "communicator address table";
    let mut r = Reader(check_head(WHAT, bytes)?);
    let count = r.u32(WHAT)? as usize;
    // Each entry takes at least its 4-byte length: a count beyond that is a lie, refused
    // before anything is allocated for it.
    if count > r.0.len() / 4 {
        return Err(WireError::Malformed { what: WHAT, why: "more entries than bytes" });
    }
    let mut table = Vec::with_capacity(count);
    for _ in 0..count {
        let n = r.u32(WHAT)? as usize;
        table.push(r.take(WHAT, n)?.to_vec());
    }
    if !r.0.is_empty() {
        return Err(WireError::Malformed { what: WHAT, why: "bytes after the last entry" });
    }
    Ok(table)
}

fn head(capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out
}

fn check_head<'a>(what: &'static str, bytes: &'a [u8]) -> Result<&'a [u8], WireError> {
    if bytes.len() < 6 || &bytes[..4] != MAGIC {
        return Err(WireError::Malformed { what, why: "no UCXC magic" });
    }
    if bytes[4..6] != VERSION.to_le_bytes() {
        return Err(WireError::Malformed { what, why: "unknown version" });
    }
    Ok(&bytes[6..])
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, what: &'static str, n: usize) -> Result<&'a [u8], WireError> {
        if self.0.len() < n {
            return Err(WireError::Malformed { what, why: "cut short" });
        }
        let (head, tail) = self.0.split_at(n);
        self.0 = tail;
        Ok(head)
    }

    fn u32(&mut self, what: &'static str) -> Result<u32, WireError> {
        let b = self.take(what, 4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

const RENDEZVOUS: &str = "ucxa-rendezvous 1 ";

/// The rendezvous file's text for rank 0's listener at `addr`.
pub fn rendezvous_text(addr: SocketAddr) -> String {
    format!("{RENDEZVOUS}{addr}\n")
}

/// Rank 0's address from a rendezvous file's text.
pub fn rendezvous_parse(text: &str) -> Result<SocketAddr, WireError> {
    let what = "rendezvous file";
    let rest =
        text.strip_prefix(RENDEZVOUS).ok_or(WireError::Malformed { what, why: "not `ucxa-rendezvous 1 ...`" })?;
    let addr = rest
        .strip_suffix('\n')
        .ok_or(WireError::Malformed { what, why: "no newline at the end (written only in part?)" })?;
    let addr: SocketAddr =
        addr.parse().map_err(|_| WireError::Malformed { what, why: "the address is not ip:port" })?;
    if addr.ip().is_unspecified() || addr.port() == 0 {
        return Err(WireError::Malformed { what, why: "the address names no host or no port" });
    }
    Ok(addr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendezvous_text_round_trips_and_refuses_what_is_not_an_address() {
        for a in ["127.0.0.1:29500", "[::1]:40000"] {
            let addr: SocketAddr = a.parse().unwrap();
            let text = rendezvous_text(addr);
            assert_eq!(text, format!("ucxa-rendezvous 1 {a}\n"));
            assert_eq!(rendezvous_parse(&text), Ok(addr));
        }
        for bad in [
            "",
            "ucxa-rendezvous 1 127.0.0.1:29500",
            "ucxa-rendezvous 2 127.0.0.1:1\n",
            "ucxa-rendezvous 1 host:1\n",
            "ucxa-rendezvous 1 0.0.0.0:29500\n",
            "ucxa-rendezvous 1 127.0.0.1:0\n",
        ] {
            assert!(rendezvous_parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn vectors_and_round_trips() {
        let h = Hello { rank: 3, size: 4, address: vec![0xaa] };
        assert_eq!(h.encode(), b"UCXC\x01\x00\x03\x00\x00\x00\x04\x00\x00\x00\xaa");
        assert_eq!(Hello::decode(&h.encode()), Ok(h));
        let t = vec![vec![9; 5], vec![], vec![7; 300]];
        assert_eq!(decode_table(&encode_table(&t)), Ok(t));
        assert_eq!(encode_table(&[vec![1]]), b"UCXC\x01\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01");
    }

    #[test]
    fn broken_messages_are_refused_with_a_reason() {
        let why = |r: Result<Vec<Vec<u8>>, WireError>| r.unwrap_err().to_string();
        assert!(Hello::decode(b"nope").unwrap_err().to_string().contains("magic"));
        assert!(why(decode_table(b"UCXC\x02\x00")).contains("unknown version"));
        let t = encode_table(&[vec![1; 10], vec![2; 10]]);
        assert!(why(decode_table(&t[..t.len() - 1])).contains("cut short"));
        let mut long = t.clone();
        long.push(0);
        assert!(why(decode_table(&long)).contains("after the last entry"));
        assert!(why(decode_table(b"UCXC\x01\x00\xff\xff\xff\xff")).contains("more entries than bytes"));
    }
}

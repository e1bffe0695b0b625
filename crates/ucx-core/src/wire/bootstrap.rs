//! The communicator's bootstrap (ucx-async `collective`): each rank's hello to rank 0 and
//! rank 0's table of every rank's worker address. Ours alone (UCX-Py and UCXX have no
//! communicator), so a magic and a version lead each message.
//!
//! | message | fields (little-endian) |
//! |---|---|
//! | hello | `b"UCXC"`, `version: u16 = 2`, `rank: u32`, `size: u32`, `flags: u32`, worker address (the rest) |
//! | table | `b"UCXC"`, `version: u16 = 2`, `count: u32`, then per rank `len: u32` and `len` bytes |
//! | refusal | `b"UCXC"`, `version: u16 = 2`, `0xFFFF_FFFF`, then why, in UTF-8 (the rest) |
//!
//! Rank 0 answers each hello with the table, or, when a hello does not fit its job, every rank
//! that joined with a refusal ([`encode_refusal`]), so that none waits for a table that will
//! not come.
//!
//! The hello's flag bit 0 says the rank's endpoints have no peer error handling
//! ([`ERROR_HANDLING_VAR`]); every rank of a job must agree ([`Hello::admit`]). Version 1 had
//! no flags.
//!
//! Rank 0's address can also reach the others through a rendezvous file (a path they all
//! see): one line of text, `ucxa-rendezvous 1 <ip>:<port>` (IPv6 in brackets), written by
//! rank 0 once its listener is up ([`rendezvous_text`], [`rendezvous_parse`]).

use std::net::SocketAddr;

use super::WireError;

const MAGIC: &[u8; 4] = b"UCXC";
const VERSION: u16 = 2;
/// The hello's flag: this rank's endpoints have no peer error handling.
const FLAG_NO_ERROR_HANDLING: u32 = 1;

/// The variable that chooses the ranks' error handling: `peer` (the default: a rank that dies
/// fails the others' operations) or `none` (as MPI: UCX may then use transports that cannot
/// detect a peer's death, such as CMA's single-copy shared memory, and a rank's death ends the
/// job through its launcher).
pub const ERROR_HANDLING_VAR: &str = "UCXA_ERROR_HANDLING";

/// Whether ranks use peer error handling, from [`ERROR_HANDLING_VAR`]'s value (unset or empty:
/// `peer`).
pub fn error_handling_parse(value: Option<&str>) -> Result<bool, WireError> {
    match value.map(str::trim) {
        None | Some("") | Some("peer") => Ok(true),
        Some("none") => Ok(false),
        Some(_) => Err(WireError::Malformed { what: "UCXA_ERROR_HANDLING", why: "expected `peer` or `none`" }),
    }
}

/// A rank's introduction to rank 0.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// The sender's rank.
    pub rank: u32,
    /// The world size the sender was started with.
    pub size: u32,
    /// Whether the sender's endpoints have peer error handling.
    pub error_handling: bool,
    /// The sender's worker address (not checked here).
    pub address: Vec<u8>,
}

impl Hello {
    /// The message's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = head(18 + self.address.len());
        let flags = if self.error_handling { 0 } else { FLAG_NO_ERROR_HANDLING };
        out.extend_from_slice(&self.rank.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&flags.to_le_bytes());
        out.extend_from_slice(&self.address);
        out
    }

    /// Decodes a hello.
    pub fn decode(bytes: &[u8]) -> Result<Hello, WireError> {
        const WHAT: &str = "communicator hello";
        let mut r = Reader(check_head(WHAT, bytes)?);
        let (rank, size, flags) = (r.u32(WHAT)?, r.u32(WHAT)?, r.u32(WHAT)?);
        if flags & !FLAG_NO_ERROR_HANDLING != 0 {
            return Err(WireError::Malformed { what: WHAT, why: "unknown flags" });
        }
        Ok(Hello { rank, size, error_handling: flags & FLAG_NO_ERROR_HANDLING == 0, address: r.0.to_vec() })
    }

    /// Rank 0's check of a hello against its own job (world `size`, `error_handling`): `Err`
    /// says what does not match. Whether the rank joined twice is rank 0's to track.
    pub fn admit(&self, size: u32, error_handling: bool) -> Result<(), String> {
        let rank = self.rank;
        if self.size != size {
            return Err(format!("rank {rank} was started with world size {}, rank 0 with {size}", self.size));
        }
        if rank == 0 || rank >= size {
            return Err(format!("rank {rank} is out of range 1..{size}"));
        }
        if self.error_handling != error_handling {
            let name = |on: bool| if on { "peer" } else { "none" };
            return Err(format!(
                "rank {rank} was started with {ERROR_HANDLING_VAR}={}, rank 0 with {}: every rank must use the same",
                name(self.error_handling),
                name(error_handling)
            ));
        }
        Ok(())
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

/// The count that marks a refusal instead of a table.
const REFUSED: u32 = u32::MAX;

/// Rank 0's answer to a hello.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Every rank's worker address, by rank; the caller checks the count against its world size.
    Table(Vec<Vec<u8>>),
    /// Rank 0 refused the job: why (as [`Hello::admit`] said).
    Refused(String),
}

/// A refusal that says `why`.
pub fn encode_refusal(why: &str) -> Vec<u8> {
    let mut out = head(10 + why.len());
    out.extend_from_slice(&REFUSED.to_le_bytes());
    out.extend_from_slice(why.as_bytes());
    out
}

/// Decodes rank 0's answer: a table or a refusal.
pub fn decode_answer(bytes: &[u8]) -> Result<Answer, WireError> {
    const WHAT: &str = "communicator address table";
    let mut r = Reader(check_head(WHAT, bytes)?);
    let count = r.u32(WHAT)?;
    if count == REFUSED {
        return Ok(Answer::Refused(String::from_utf8_lossy(r.0).into_owned()));
    }
    let count = count as usize;
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
    Ok(Answer::Table(table))
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
        let h = Hello { rank: 3, size: 4, error_handling: true, address: vec![0xaa] };
        assert_eq!(h.encode(), b"UCXC\x02\x00\x03\x00\x00\x00\x04\x00\x00\x00\x00\x00\x00\x00\xaa");
        assert_eq!(Hello::decode(&h.encode()), Ok(h.clone()));
        let off = Hello { error_handling: false, ..h };
        assert_eq!(off.encode()[14..18], [1, 0, 0, 0]);
        assert_eq!(Hello::decode(&off.encode()), Ok(off));
        let t = vec![vec![9; 5], vec![], vec![7; 300]];
        assert_eq!(decode_answer(&encode_table(&t)), Ok(Answer::Table(t)));
        let no = encode_refusal("rank 1 was started with world size 3");
        assert_eq!(no[..10], *b"UCXC\x02\x00\xff\xff\xff\xff");
        assert_eq!(decode_answer(&no), Ok(Answer::Refused("rank 1 was started with world size 3".into())));
        assert_eq!(encode_table(&[vec![1]]), b"UCXC\x02\x00\x01\x00\x00\x00\x01\x00\x00\x00\x01");
    }

    #[test]
    fn rank_0_admits_only_hellos_of_its_own_job() {
        let h = |rank, size, error_handling| Hello { rank, size, error_handling, address: vec![] };
        assert_eq!(h(1, 2, true).admit(2, true), Ok(()));
        assert_eq!(h(3, 4, false).admit(4, false), Ok(()));
        assert!(h(1, 3, true).admit(2, true).unwrap_err().contains("world size 3, rank 0 with 2"));
        assert!(h(0, 2, true).admit(2, true).unwrap_err().contains("out of range"));
        assert!(h(2, 2, true).admit(2, true).unwrap_err().contains("out of range"));
        let e = h(1, 2, false).admit(2, true).unwrap_err();
        assert!(e.contains("UCXA_ERROR_HANDLING=none, rank 0 with peer"), "{e}");
    }

    #[test]
    fn error_handling_is_peer_unless_set_to_none() {
        for v in [None, Some(""), Some("peer"), Some(" peer\n")] {
            assert_eq!(error_handling_parse(v), Ok(true), "{v:?}");
        }
        assert_eq!(error_handling_parse(Some("none")), Ok(false));
        let e = error_handling_parse(Some("off")).unwrap_err().to_string();
        assert!(e.contains("UCXA_ERROR_HANDLING") && e.contains("`peer` or `none`"), "{e}");
    }

    #[test]
    fn broken_messages_are_refused_with_a_reason() {
        let why = |r: Result<Answer, WireError>| r.unwrap_err().to_string();
        assert!(Hello::decode(b"nope").unwrap_err().to_string().contains("magic"));
        assert!(why(decode_answer(b"UCXC\x01\x00")).contains("unknown version"));
        let mut flagged = Hello { rank: 1, size: 2, error_handling: true, address: vec![] }.encode();
        flagged[14] = 2;
        assert!(Hello::decode(&flagged).unwrap_err().to_string().contains("unknown flags"));
        let t = encode_table(&[vec![1; 10], vec![2; 10]]);
        assert!(why(decode_answer(&t[..t.len() - 1])).contains("cut short"));
        let mut long = t.clone();
        long.push(0);
        assert!(why(decode_answer(&long)).contains("after the last entry"));
        assert!(why(decode_answer(b"UCXC\x02\x00\xfe\xff\xff\xff")).contains("more entries than bytes"));
    }
}

//! Rank, world size and the root's address from what launchers already set, without I/O:
//! torchrun (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), Open MPI
//! (`OMPI_COMM_WORLD_RANK`/`_SIZE`), PMI launchers such as MPICH and Slurm (`PMI_RANK`/`_SIZE`).
//! The root's address comes from `MASTER_ADDR`/`MASTER_PORT`, or, where
//! `UCXA_RENDEZVOUS_FILE` names a file all ranks can see, from that file: rank 0 listens on any
//! free port (of `MASTER_ADDR`'s host if set, else 127.0.0.1) and writes its address there,
//! which suits MPI launchers (they set no address). `UCXA_ERROR_HANDLING` chooses the ranks'
//! error handling ([`Launch::error_handling`]).
use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use super::tag::{invalid, MAX_RANKS};
use crate::core::wire::bootstrap::{error_handling_parse, ERROR_HANDLING_VAR};
use crate::Result;

/// Where this process stands in a launched job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, below `size`.
    pub rank: usize,
    /// How many ranks the job has.
    pub size: usize,
    /// How the ranks reach rank 0 for the bootstrap.
    pub root: Root,
    /// Whether the ranks' endpoints have UCX's peer error handling (`UCXA_ERROR_HANDLING`:
    /// `peer`, the default, or `none`). With it, a rank that dies fails the others' operations
    /// within UCX's keepalive window. Without it, as with MPI, a rank's death can leave the
    /// others waiting, so the launcher must end the job (`python -m ucp.launch`, the examples'
    /// launcher and `mpirun` do); in exchange UCX may use transports that cannot detect a
    /// peer's death: shared memory with CMA's single copy instead of TCP (or, with
    /// `UCX_MM_ERROR_HANDLING=y`, shared memory that copies twice).
    pub error_handling: bool,
}

/// How the ranks of a launched job find rank 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Root {
    /// Rank 0 listens at this address and the others dial it (`MASTER_ADDR`/`MASTER_PORT`).
    Address(SocketAddr),
    /// Rank 0 listens at `bind` (port 0: any free one) and writes the address it got to
    /// `path`; the others read it there (`UCXA_RENDEZVOUS_FILE`).
    File {
        /// The rendezvous file, on a file system every rank sees; use a new path per job.
        path: PathBuf,
        /// Where rank 0 listens.
        bind: SocketAddr,
    },
}

const OP: &str = "Launch::from_env";

/// The variable naming a rendezvous file (see [`Root::File`]).
pub const RENDEZVOUS_FILE: &str = "UCXA_RENDEZVOUS_FILE";

impl Launch {
    /// Reads the process environment (see the module doc).
    pub fn from_env() -> Result<Launch> {
        Launch::from_vars(|name| std::env::var(name).ok())
    }

    /// Reads the variables through `var` (the environment, or a table in tests).
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Launch> {
        let pairs =
            [("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")];
        let Some((rank_var, size_var)) = pairs.into_iter().find(|(r, s)| var(r).is_some() && var(s).is_some()) else {
            return Err(invalid(OP, "no launcher variables: set RANK and WORLD_SIZE (as torchrun does)".into()));
        };
        let number = |name: &str| -> Result<usize> {
            let text = var(name).unwrap_or_default();
            text.trim().parse().map_err(|_| invalid(OP, format!("{name}={text:?} is not a number")))
        };
        let (rank, size) = (number(rank_var)?, number(size_var)?);
        let value = var(ERROR_HANDLING_VAR);
        let error_handling = error_handling_parse(value.as_deref())
            .map_err(|e| invalid(OP, format!("{ERROR_HANDLING_VAR}={:?}: {e}", value.unwrap_or_default())))?;
        if size == 0 || size > MAX_RANKS {
            return Err(invalid(OP, format!("{size_var}={size}: a world has 1 to {MAX_RANKS} ranks")));
        }
        if rank >= size {
            return Err(invalid(OP, format!("{rank_var}={rank} is not below {size_var}={size}")));
        }
        let resolve = |host: &str, port: u16| {
            (host, port)
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| invalid(OP, format!("MASTER_ADDR={host:?} does not resolve")))
        };
        if let Some(path) = var(RENDEZVOUS_FILE).filter(|p| !p.is_empty()) {
            let bind = match var("MASTER_ADDR") {
                Some(host) => resolve(&host, 0)?,
                None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            };
            return Ok(Launch { rank, size, root: Root::File { path: path.into(), bind }, error_handling });
        }
        let host = var("MASTER_ADDR").ok_or_else(|| {
            invalid(OP, format!("MASTER_ADDR is not set (rank 0's host), nor {RENDEZVOUS_FILE} (a file to meet at)"))
        })?;
        let port = number("MASTER_PORT").ok().filter(|p| (1..=65_535).contains(p));
        let Some(port) = port else {
            return Err(invalid(OP, format!("MASTER_PORT={:?} is not a port number", var("MASTER_PORT"))));
        };
        Ok(Launch { rank, size, root: Root::Address(resolve(&host, port as u16)?), error_handling })
    }

    /// This process's rank among the ranks on its host (each rank on a host driving its own
    /// GPU): `LOCAL_RANK` (torchrun, `python -m ucp.launch`, the examples' launcher),
    /// `OMPI_COMM_WORLD_LOCAL_RANK` (Open MPI), `MPI_LOCALRANKID` (MPICH), else 0. The
    /// variables Python's `ucp.collective.local_rank` reads.
    pub fn local_rank() -> Result<usize> {
        Launch::local_rank_from(|name| std::env::var(name).ok())
    }

    /// [`Launch::local_rank`] through `var` (the environment, or a table in tests).
    pub fn local_rank_from(var: impl Fn(&str) -> Option<String>) -> Result<usize> {
        for name in ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"] {
            if let Some(text) = var(name) {
                return text
                    .trim()
                    .parse()
                    .map_err(|_| invalid("Launch::local_rank", format!("{name}={text:?} is not a number")));
            }
        }
        Ok(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(vars: &[(&str, &str)]) -> Result<Launch> {
        Launch::from_vars(|n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string()))
    }

    const ROOT: [(&str, &str); 2] = [("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", "29500")];

    #[test]
    fn torchrun_mpi_and_pmi_variables() {
        let root: SocketAddr = "127.0.0.1:29500".parse().unwrap();
        for (r, s) in
            [("RANK", "WORLD_SIZE"), ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"), ("PMI_RANK", "PMI_SIZE")]
        {
            let l = launch(&[(r, "2"), (s, "4"), ROOT[0], ROOT[1]]).unwrap();
            assert_eq!(l, Launch { rank: 2, size: 4, root: Root::Address(root), error_handling: true }, "{r}");
        }
    }

    #[test]
    fn error_handling_is_on_unless_ucxa_error_handling_says_none() {
        let with = |v| launch(&[("RANK", "0"), ("WORLD_SIZE", "2"), ROOT[0], ROOT[1], (ERROR_HANDLING_VAR, v)]);
        assert!(with("peer").unwrap().error_handling);
        assert!(!with("none").unwrap().error_handling);
        let e = with("off").unwrap_err().to_string();
        assert!(e.contains("UCXA_ERROR_HANDLING=\"off\"") && e.contains("`peer` or `none`"), "{e}");
    }

    #[test]
    fn a_rendezvous_file_needs_no_port_and_wins_over_the_address() {
        let file = (RENDEZVOUS_FILE, "/shared/job7.addr");
        let l = launch(&[("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "3"), file]).unwrap();
        let any_port = "127.0.0.1:0".parse().unwrap();
        assert_eq!(l.root, Root::File { path: "/shared/job7.addr".into(), bind: any_port });
        // With torchrun's variables too, the file is used; MASTER_ADDR says where rank 0 listens.
        let l = launch(&[("RANK", "0"), ("WORLD_SIZE", "2"), ("MASTER_ADDR", "::1"), ROOT[1], file]).unwrap();
        assert_eq!(l.root, Root::File { path: "/shared/job7.addr".into(), bind: "[::1]:0".parse().unwrap() });
        let e = launch(&[("RANK", "0"), ("WORLD_SIZE", "2")]).unwrap_err().to_string();
        assert!(e.contains("MASTER_ADDR") && e.contains(RENDEZVOUS_FILE), "{e}");
    }

    #[test]
    fn local_rank_from_each_launcher_else_zero() {
        let local = |vars: &[(&str, &str)]| {
            Launch::local_rank_from(|n| vars.iter().find(|(k, _)| *k == n).map(|(_, v)| v.to_string()))
        };
        assert_eq!(local(&[]).unwrap(), 0);
        for name in ["LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"] {
            assert_eq!(local(&[(name, "3")]).unwrap(), 3, "{name}");
        }
        assert_eq!(local(&[("LOCAL_RANK", "1"), ("MPI_LOCALRANKID", "2")]).unwrap(), 1, "torchrun's first");
        assert!(local(&[("LOCAL_RANK", "one")]).unwrap_err().to_string().contains("LOCAL_RANK=\"one\""));
    }

    #[test]
    fn bad_values_are_named() {
        let err = |vars: &[(&str, &str)]| launch(vars).unwrap_err().to_string();
        assert!(err(&[ROOT[0], ROOT[1]]).contains("no launcher variables"));
        assert!(err(&[("RANK", "x"), ("WORLD_SIZE", "2"), ROOT[0], ROOT[1]]).contains("RANK=\"x\""));
        assert!(err(&[("RANK", "2"), ("WORLD_SIZE", "2"), ROOT[0], ROOT[1]]).contains("not below WORLD_SIZE=2"));
        assert!(err(&[("RANK", "0"), ("WORLD_SIZE", "70000"), ROOT[0], ROOT[1]]).contains("1 to 65536"));
        assert!(err(&[("RANK", "0"), ("WORLD_SIZE", "2"), ROOT[1]]).contains("MASTER_ADDR"));
        assert!(err(&[("RANK", "0"), ("WORLD_SIZE", "2"), ROOT[0], ("MASTER_PORT", "0")]).contains("MASTER_PORT"));
    }
}

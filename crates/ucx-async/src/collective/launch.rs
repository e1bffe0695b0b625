//! Rank, world size and the root's address from what launchers already set, without I/O:
//! torchrun (`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`), Open MPI
//! (`OMPI_COMM_WORLD_RANK`/`_SIZE`), PMI launchers such as MPICH and Slurm (`PMI_RANK`/`_SIZE`).
//! The root's address comes from `MASTER_ADDR`/`MASTER_PORT` in every case (MPI launchers set
//! no address; export those two alongside).
use std::net::{SocketAddr, ToSocketAddrs};

use super::tag::{invalid, MAX_RANKS};
use crate::Result;

/// Where this process stands in a launched job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Launch {
    /// This process's rank, below `size`.
    pub rank: usize,
    /// How many ranks the job has.
    pub size: usize,
    /// Rank 0's listener address, which every rank reaches for the bootstrap.
    pub root: SocketAddr,
}

const OP: &str = "Launch::from_env";

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
        if size == 0 || size > MAX_RANKS {
            return Err(invalid(OP, format!("{size_var}={size}: a world has 1 to {MAX_RANKS} ranks")));
        }
        if rank >= size {
            return Err(invalid(OP, format!("{rank_var}={rank} is not below {size_var}={size}")));
        }
        let host = var("MASTER_ADDR").ok_or_else(|| invalid(OP, "MASTER_ADDR is not set (rank 0's host)".into()))?;
        let port = number("MASTER_PORT").ok().filter(|p| (1..=65_535).contains(p));
        let Some(port) = port else {
            return Err(invalid(OP, format!("MASTER_PORT={:?} is not a port number", var("MASTER_PORT"))));
        };
        let root = (host.as_str(), port as u16)
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .ok_or_else(|| invalid(OP, format!("MASTER_ADDR={host:?} does not resolve")))?;
        Ok(Launch { rank, size, root })
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
            assert_eq!(l, Launch { rank: 2, size: 4, root }, "{r}");
        }
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

//! Sets of CPUs (logical processor numbers, as the kernel numbers them): Linux's list format
//! (`0-3,8`) as sysfs, `taskset -c` and hwloc's list printer write it.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;

use crate::Error;

/// The largest CPU number accepted; a guard against "0-4294967295" taking all memory.
const MAX_CPU: u32 = 1 << 20;

/// A set of CPU numbers.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct CpuSet(BTreeSet<u32>);

impl CpuSet {
    pub fn new() -> Self {
        CpuSet::default()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn contains(&self, cpu: u32) -> bool {
        self.0.contains(&cpu)
    }

    pub fn iter(&self) -> impl Iterator<Item = u32> + '_ {
        self.0.iter().copied()
    }

    pub fn is_subset(&self, other: &CpuSet) -> bool {
        self.0.is_subset(&other.0)
    }

    pub fn intersects(&self, other: &CpuSet) -> bool {
        !self.0.is_disjoint(&other.0)
    }

    /// The CPUs this process may run on (`Cpus_allowed_list` in `/proc/self/status`, which is
    /// what `sched_getaffinity` reports): a rank pinned by its launcher gets its own set.
    pub fn current_affinity() -> Result<CpuSet, Error> {
        let path = "/proc/self/status";
        let status = std::fs::read_to_string(path).map_err(|source| Error::Sysfs { path: path.into(), source })?;
        let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).ok_or_else(|| Error::Sysfs {
            path: path.into(),
            source: std::io::Error::other("no Cpus_allowed_list line"),
        })?;
        line.trim().parse()
    }
}

impl FromIterator<u32> for CpuSet {
    fn from_iter<I: IntoIterator<Item = u32>>(iter: I) -> Self {
        CpuSet(iter.into_iter().collect())
    }
}

impl FromStr for CpuSet {
    type Err = Error;

    /// Linux's list format: comma-separated numbers and inclusive ranges; an empty string is
    /// the empty set (sysfs writes that for a device with no CPU affinity).
    fn from_str(input: &str) -> Result<Self, Error> {
        let bad = |reason| Error::BadCpuList { input: input.to_owned(), reason };
        let mut set = BTreeSet::new();
        for part in input.trim().split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (lo, hi) = match part.split_once('-') {
                Some((lo, hi)) => (lo, hi),
                None => (part, part),
            };
            let num = |s: &str| s.trim().parse::<u32>().map_err(|_| bad("not a CPU number"));
            let (lo, hi) = (num(lo)?, num(hi)?);
            if lo > hi {
                return Err(bad("a range ends before it starts"));
            }
            if hi > MAX_CPU {
                return Err(bad("CPU number too large"));
            }
            set.extend(lo..=hi);
        }
        Ok(CpuSet(set))
    }
}

impl fmt::Display for CpuSet {
    /// The list format, ranges merged (`0-3,8`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut it = self.0.iter().copied().peekable();
        while let Some(lo) = it.next() {
            let mut hi = lo;
            while it.peek() == Some(&(hi + 1)) {
                hi += 1;
                it.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if lo == hi {
                write!(f, "{lo}")?;
            } else {
                write!(f, "{lo}-{hi}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_format_round_trips() {
        let set: CpuSet = "0-3, 8,10-11".parse().unwrap();
        assert_eq!(set.iter().collect::<Vec<_>>(), [0, 1, 2, 3, 8, 10, 11]);
        assert_eq!(set.to_string(), "0-3,8,10-11");
        assert!("".parse::<CpuSet>().unwrap().is_empty());
        assert!("\n".parse::<CpuSet>().unwrap().is_empty());
    }

    #[test]
    fn rejects_bad_lists_naming_them() {
        for s in ["a", "3-1", "1-", "0-99999999", "1,,x"] {
            let err = s.parse::<CpuSet>().unwrap_err();
            assert!(matches!(err, Error::BadCpuList { .. }), "{s}: {err}");
            assert!(err.to_string().contains(&format!("{s:?}")), "{err}");
        }
    }

    #[test]
    fn subset_and_intersection() {
        let a: CpuSet = "0-3".parse().unwrap();
        let b: CpuSet = "2-5".parse().unwrap();
        let c: CpuSet = "1".parse().unwrap();
        assert!(c.is_subset(&a) && !b.is_subset(&a));
        assert!(a.intersects(&b) && !c.intersects(&b));
    }

    #[test]
    fn this_process_has_an_affinity() {
        assert!(!CpuSet::current_affinity().unwrap().is_empty());
    }
}

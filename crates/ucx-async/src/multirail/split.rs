//! How a message is cut over the rails: a share per rail (even, by a ratio, or by weights)
//! and a number of pipeline stages per rail. Pure arithmetic, no I/O.
use ucx_core::wire::multirail::{self, MAX_RAILS, MAX_STAGES};

use crate::{Error, Result};

/// A message's split: each rail's share of the bytes, and how many chunks (stages) each
/// rail's share is cut into. The chunks of all rails and stages are in flight at once.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    weights: Vec<f64>,
    stages: u16,
}

impl Split {
    /// Equal shares over `rails` rails, one stage.
    pub fn even(rails: usize) -> Result<Split> {
        Split::weights(vec![1.0; rails])
    }

    /// The seed's split ratio: `ratio` of the bytes over the peer rails (rails 1..), shared
    /// equally, and the rest over rail 0. With one rail the ratio must be 0.
    pub fn ratio(rails: usize, ratio: f64) -> Result<Split> {
        let w = multirail::ratio_weights(rails, ratio)
            .ok_or_else(|| invalid(format!("split ratio {ratio} is not in [0, 1] (and 0 with one rail)")))?;
        Split::weights(w)
    }

    /// Shares proportional to `weights`, one per rail (non-negative, not all zero).
    pub fn weights(weights: Vec<f64>) -> Result<Split> {
        if weights.is_empty() || weights.len() > usize::from(MAX_RAILS) {
            return Err(invalid(format!("{} rails: a group has 1 to {MAX_RAILS}", weights.len())));
        }
        if weights.iter().any(|w| !w.is_finite() || *w < 0.0) || weights.iter().all(|w| *w == 0.0) {
            return Err(invalid(format!("rail weights {weights:?}: each finite and >= 0, not all 0")));
        }
        Ok(Split { weights, stages: 1 })
    }

    /// Cuts each rail's share into `stages` chunks (1 to `MAX_STAGES`).
    pub fn stages(mut self, stages: usize) -> Result<Split> {
        self.stages = u16::try_from(stages)
            .ok()
            .filter(|s| (1..=MAX_STAGES).contains(s))
            .ok_or_else(|| invalid(format!("{stages} stages: 1 to {MAX_STAGES} per rail")))?;
        Ok(self)
    }

    /// The number of rails.
    pub fn rails(&self) -> usize {
        self.weights.len()
    }

    /// Chunks per rail.
    pub fn stage_count(&self) -> usize {
        usize::from(self.stages)
    }

    /// Each rail's share of a message of `total` bytes (they add up to `total`; rounding
    /// leftovers go to the rail with the largest weight). `wire::multirail::shares` does the
    /// arithmetic, so every language cuts a message the same way.
    pub fn shares(&self, total: u64) -> Vec<u64> {
        multirail::shares(&self.weights, total)
    }
}

fn invalid(detail: String) -> Error {
    Error::InvalidArgument { op: "multirail::Split", detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every chunk's length, as a sender lays a message of `total` bytes out with `s`.
    fn chunks(s: &Split, total: u64) -> Vec<u64> {
        let header = multirail::Header { total, stages: s.stages, shares: s.shares(total) };
        header.layout().iter().map(|c| c.len).collect()
    }

    #[test]
    fn chunks_add_up_and_follow_the_weights() {
        for total in [0u64, 1, 7, 1000, 1 << 20, (256 << 20) + 13] {
            let splits =
                [Split::even(1), Split::even(3), Split::ratio(2, 0.5), Split::ratio(4, 0.75), Split::ratio(4, 1.0)];
            for split in splits.map(Result::unwrap) {
                for stages in [1, 2, 7] {
                    let s = split.clone().stages(stages).unwrap();
                    let c = chunks(&s, total);
                    assert_eq!(c.len(), s.rails() * stages);
                    assert_eq!(c.iter().sum::<u64>(), total, "{s:?} {total}");
                }
            }
        }
        // 4 rails at 75 %: rail 0 a quarter, the others a quarter each.
        assert_eq!(chunks(&Split::ratio(4, 0.75).unwrap(), 4000), vec![1000, 1000, 1000, 1000]);
        // 2 rails at 0 %: everything on rail 0; at 100 %: everything on rail 1.
        assert_eq!(chunks(&Split::ratio(2, 0.0).unwrap(), 10), vec![10, 0]);
        assert_eq!(chunks(&Split::ratio(2, 1.0).unwrap(), 10), vec![0, 10]);
        assert_eq!(chunks(&Split::even(1).unwrap().stages(3).unwrap(), 10), vec![4, 3, 3]);
    }

    #[test]
    fn bad_splits_are_refused_with_the_reason() {
        assert!(Split::even(0).unwrap_err().to_string().contains("0 rails"));
        assert!(Split::even(65).is_err());
        assert!(Split::ratio(2, 1.5).unwrap_err().to_string().contains("ratio 1.5"));
        assert!(Split::ratio(1, 0.5).is_err());
        assert!(Split::weights(vec![0.0, 0.0]).is_err());
        assert!(Split::weights(vec![1.0, f64::NAN]).is_err());
        assert!(Split::even(2).unwrap().stages(0).is_err());
        assert!(Split::even(2).unwrap().stages(257).unwrap_err().to_string().contains("257 stages"));
    }
}

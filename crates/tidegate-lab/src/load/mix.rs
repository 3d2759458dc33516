//! Who sends each request: its tier, drawn from a mix, and its caller key.
//!
//! The tier travels in the `tidegate-priority` header and the caller key in a header of the
//! user's choice, so that a tidegate proxy in front of the origin sees the priorities and
//! cohorts a real deployment would. The report then counts every outcome per tier, which is
//! how one sees the most important tier protected first.

use std::fmt;
use std::str::FromStr;

use tidegate_core::Priority;
use tidegate_core::rng::Rng;

/// A tier mix that cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum MixError {
    #[error("invalid tier share {0:?}: expected TIER:PERCENT, e.g. \"1:50\"")]
    Entry(String),
    #[error("tier {0} is out of range 0..=5")]
    Tier(u32),
    #[error("tier {0} appears twice")]
    Duplicate(u8),
    #[error("invalid weight {weight} for tier {tier}: expected a finite, non-negative number")]
    Weight { tier: u8, weight: f64 },
    #[error("the tier shares add up to {0}%, not 100%")]
    Total(f64),
    #[error("no tier has a positive share")]
    Empty,
}

/// The tiers requests are sent at, with their weights. Empty: no priority header is sent.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TierMix {
    /// Tiers in the order given, with the cumulative share up to and including each.
    tiers: Vec<(u8, f64)>,
}

impl TierMix {
    /// No priority header: the server applies its default priority.
    pub fn none() -> TierMix {
        TierMix::default()
    }

    /// Tiers with weights (any scale; a scenario's `{ tier, weight }` pairs map onto this).
    pub fn new(shares: &[(u8, f64)]) -> Result<TierMix, MixError> {
        let mut tiers = Vec::with_capacity(shares.len());
        let mut total = 0.0;
        for (i, &(tier, weight)) in shares.iter().enumerate() {
            Priority::new(tier.into(), 0).map_err(|_| MixError::Tier(tier.into()))?;
            if shares[..i].iter().any(|&(t, _)| t == tier) {
                return Err(MixError::Duplicate(tier));
            }
            if !weight.is_finite() || weight < 0.0 {
                return Err(MixError::Weight { tier, weight });
            }
            total += weight;
            tiers.push((tier, total));
        }
        if total <= 0.0 {
            return Err(MixError::Empty);
        }
        for entry in &mut tiers {
            entry.1 /= total;
        }
        Ok(TierMix { tiers })
    }

    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }

    /// The tiers, in the order given; a request's slot indexes this list.
    pub fn tiers(&self) -> Vec<u8> {
        self.tiers.iter().map(|&(tier, _)| tier).collect()
    }

    /// The share of each tier, in the order of [`TierMix::tiers`].
    pub fn shares(&self) -> Vec<f64> {
        let mut below = 0.0;
        self.tiers
            .iter()
            .map(|&(_, cumulative)| {
                let share = cumulative - below;
                below = cumulative;
                share
            })
            .collect()
    }

    /// A request's slot in [`TierMix::tiers`] (0 when the mix is empty).
    pub(crate) fn draw(&self, rng: &mut Rng) -> usize {
        if self.tiers.len() <= 1 {
            return 0;
        }
        let u = rng.next_f64();
        self.tiers
            .iter()
            .position(|&(_, cumulative)| u < cumulative)
            .unwrap_or(self.tiers.len() - 1)
    }
}

/// `TIER:PERCENT,...` whose percentages add up to 100, e.g. `"1:50,5:50"`; a lone `"TIER"`
/// sends everything at that tier.
impl FromStr for TierMix {
    type Err = MixError;
    fn from_str(text: &str) -> Result<TierMix, MixError> {
        let tier = |s: &str| -> Result<u8, MixError> {
            let n: u32 = s
                .trim()
                .parse()
                .map_err(|_| MixError::Entry(s.trim().to_owned()))?;
            u8::try_from(n)
                .ok()
                .filter(|&t| Priority::new(t.into(), 0).is_ok())
                .ok_or(MixError::Tier(n))
        };
        if !text.contains(':') {
            return TierMix::new(&[(tier(text)?, 100.0)]);
        }
        let mut shares = Vec::new();
        for entry in text.split(',') {
            let (t, percent) = entry
                .split_once(':')
                .ok_or_else(|| MixError::Entry(entry.trim().to_owned()))?;
            let percent: f64 = percent
                .trim()
                .parse()
                .map_err(|_| MixError::Entry(entry.trim().to_owned()))?;
            shares.push((tier(t)?, percent));
        }
        let total: f64 = shares.iter().map(|&(_, p)| p).sum();
        let mix = TierMix::new(&shares)?;
        if (total - 100.0).abs() > 1e-6 {
            return Err(MixError::Total(total));
        }
        Ok(mix)
    }
}

/// The `TIER:PERCENT` form [`TierMix::from_str`] reads; empty for no mix.
impl fmt::Display for TierMix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (tier, share)) in self.tiers().into_iter().zip(self.shares()).enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{tier}:{}", (share * 1e6).round() / 1e4)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_follow_the_shares() {
        let mix: TierMix = "1:20,5:80".parse().unwrap();
        assert_eq!(mix.tiers(), vec![1, 5]);
        let mut rng = Rng::seed(3);
        let tier1 = (0..100_000).filter(|_| mix.draw(&mut rng) == 0).count();
        assert!((19_500..20_500).contains(&tier1), "{tier1}");
        assert_eq!(mix.to_string(), "1:20,5:80");
    }

    #[test]
    fn a_lone_tier_takes_everything() {
        let mix: TierMix = "2".parse().unwrap();
        assert_eq!(mix.tiers(), vec![2]);
        assert_eq!(mix.draw(&mut Rng::seed(1)), 0);
        assert!(TierMix::none().is_empty());
    }

    #[test]
    fn bad_mixes_name_the_culprit() {
        let cases = [
            ("1:50,5:40", "add up to 90%"),
            ("1:50,9:50", "tier 9 is out of range"),
            ("1:50,1:50", "tier 1 appears twice"),
            ("1:half,5:50", "\"1:half\""),
            ("1:50;5:50", "\"1:50;5:50\""),
            ("1:-50,5:150", "invalid weight -50"),
            ("x", "\"x\""),
            ("1:0", "no tier has a positive share"),
        ];
        for (text, expected) in cases {
            let err = text.parse::<TierMix>().unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}

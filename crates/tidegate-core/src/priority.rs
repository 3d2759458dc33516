//! Priorities: a tier for how important a request is, and a cohort for which users to shed
//! first within a tier.
//!
//! As in Uber's Cinnamon (after WeChat's DAGOR): 6 tiers (0 most important) times 128 cohorts
//! (0 most important) make 768 ranks. 768 is small enough for a bucket per rank, so the queue
//! and the shedding cut-off work on exact priorities in constant time.
//!
//! Cohorts come from a stable hash of a caller key (a user id, an API key) and an epoch that
//! rotates slowly. Every instance computes the same cohort for the same key at the same time
//! without talking to the others, so when several instances each shed 5% of a tier they shed
//! the *same* 5% of users, and each of those users loses everything rather than everyone
//! losing a bit. The rotation moves users between cohorts so that nobody is always first.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::rng::splitmix64;
use crate::time::{Nanos, Time};

/// Number of tiers: 0 (most important) to 5.
pub const TIERS: u8 = 6;
/// Number of cohorts per tier: 0 (most important) to 127.
pub const COHORTS: u8 = 128;
/// Number of distinct priorities, `TIERS * COHORTS`.
pub const RANKS: usize = TIERS as usize * COHORTS as usize;

/// The importance of a request. Lower is more important; compare with [`Priority::rank`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "PriorityParts", into = "PriorityParts")]
pub struct Priority {
    tier: u8,
    cohort: u8,
}

/// A tier or cohort outside its range.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PriorityError {
    #[error("tier {0} is out of range 0..=5")]
    Tier(u32),
    #[error("cohort {0} is out of range 0..=127")]
    Cohort(u32),
}

impl Priority {
    /// The most important priority: tier 0, cohort 0.
    pub const HIGHEST: Priority = Priority { tier: 0, cohort: 0 };
    /// The least important priority: tier 5, cohort 127.
    pub const LOWEST: Priority = Priority {
        tier: TIERS - 1,
        cohort: COHORTS - 1,
    };

    pub fn new(tier: u32, cohort: u32) -> Result<Priority, PriorityError> {
        if tier >= u32::from(TIERS) {
            return Err(PriorityError::Tier(tier));
        }
        if cohort >= u32::from(COHORTS) {
            return Err(PriorityError::Cohort(cohort));
        }
        Ok(Priority {
            tier: tier as u8,
            cohort: cohort as u8,
        })
    }

    pub const fn tier(self) -> u8 {
        self.tier
    }

    pub const fn cohort(self) -> u8 {
        self.cohort
    }

    /// `tier * 128 + cohort`: 0 is the most important of the 768 ranks, 767 the least.
    pub const fn rank(self) -> u16 {
        self.tier as u16 * COHORTS as u16 + self.cohort as u16
    }

    /// The priority of a rank; `None` past 767.
    pub const fn from_rank(rank: u16) -> Option<Priority> {
        if rank as usize >= RANKS {
            return None;
        }
        Some(Priority {
            tier: (rank / COHORTS as u16) as u8,
            cohort: (rank % COHORTS as u16) as u8,
        })
    }

    /// The same tier with another cohort, for a caller key's cohort (see [`CohortMap`]).
    pub fn with_cohort(self, cohort: u8) -> Priority {
        Priority {
            tier: self.tier,
            cohort: cohort.min(COHORTS - 1),
        }
    }
}

/// Tier 3, cohort 0: below the tiers a deployment marks as important (0-2), above the ones it
/// marks as sheddable (4-5), so that unmarked traffic is neither protected nor sacrificed.
impl Default for Priority {
    fn default() -> Priority {
        Priority { tier: 3, cohort: 0 }
    }
}

/// `tier/cohort`, e.g. `1/17`; the same form [`str::parse`] accepts.
impl fmt::Display for Priority {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.tier, self.cohort)
    }
}

/// Why a priority string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParsePriorityError {
    #[error("invalid priority {0:?}: expected TIER or TIER/COHORT, e.g. \"1\" or \"1/17\"")]
    Syntax(String),
    #[error(transparent)]
    Range(#[from] PriorityError),
}

impl std::str::FromStr for Priority {
    type Err = ParsePriorityError;

    /// Accepts `"T"` (cohort 0) or `"T/C"`, as sent in a priority header.
    fn from_str(s: &str) -> Result<Priority, ParsePriorityError> {
        let syntax = || ParsePriorityError::Syntax(s.to_owned());
        let (tier, cohort) = s.trim().split_once('/').unwrap_or((s.trim(), "0"));
        let tier = tier.trim().parse().map_err(|_| syntax())?;
        let cohort = cohort.trim().parse().map_err(|_| syntax())?;
        Ok(Priority::new(tier, cohort)?)
    }
}

/// What a `tidegate-priority` request header says: the request's priority and, from an edge
/// that holds the chain's hint (`docs/feedback.md`), the cut-off hint it admitted the
/// request under.
///
/// The header is a comma-separated list. Its first member is the priority, `T` or `T/C`
/// (what [`Priority`]'s `parse` accepts); the others are `key=value` pairs, of which one is
/// known: `under=R`, R a rank from 0 to 767, the least important rank of the hint the edge
/// admitted the chain under (767 when it held none). The field may come as several field
/// lines, read in order as one list: a sender puts `under=R` on a line of its own after the
/// priority's, so that a reader that takes only the first line (tidegate before the
/// extension) still reads the priority:
///
/// ```text
/// tidegate-priority: 1/17
/// tidegate-priority: under=400
/// ```
///
/// A malformed priority makes the whole header invalid, as before. A malformed member after
/// it (no `=`, an `under` that is not a rank) is ignored and counted ([`PriorityHeader::ignored`]);
/// an unknown key is ignored, so that later versions can add some. Of several `under`, the
/// most important holds: it spares the fewest calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PriorityHeader {
    pub priority: Priority,
    /// The hint the edge admitted the request's chain under, if it said one.
    pub under: Option<u16>,
    /// Malformed members after the priority, ignored.
    pub ignored: u32,
}

impl PriorityHeader {
    /// Parses the header from its field lines, in order; `None` for no field line at all.
    pub fn parse<'a>(
        lines: impl IntoIterator<Item = &'a [u8]>,
    ) -> Option<Result<PriorityHeader, ParsePriorityError>> {
        let mut members = lines
            .into_iter()
            .flat_map(|line| line.split(|&b| b == b','))
            .map(|member| std::str::from_utf8(member).map(str::trim));
        let first = members.next()?;
        let priority = match first {
            Ok(first) => first.parse::<Priority>(),
            Err(_) => Err(ParsePriorityError::Syntax("(not UTF-8)".to_owned())),
        };
        let mut header = match priority {
            Ok(priority) => PriorityHeader {
                priority,
                under: None,
                ignored: 0,
            },
            Err(error) => return Some(Err(error)),
        };
        for member in members {
            let Ok(member) = member else {
                header.ignored += 1;
                continue;
            };
            if member.is_empty() {
                continue; // a list may have empty members (RFC 9110, 5.6.1)
            }
            let Some((key, value)) = member.split_once('=') else {
                header.ignored += 1;
                continue;
            };
            if key.trim() != "under" {
                continue;
            }
            match value.trim().parse::<u16>() {
                Ok(rank) if usize::from(rank) < RANKS => {
                    header.under = Some(header.under.map_or(rank, |held| held.min(rank)));
                }
                _ => header.ignored += 1,
            }
        }
        Some(Ok(header))
    }

    /// The field line that carries `under` (`under=R`), sent after the priority's.
    pub fn under_line(under: u16) -> String {
        format!("under={under}")
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PriorityParts {
    tier: u32,
    #[serde(default)]
    cohort: u32,
}

impl TryFrom<PriorityParts> for Priority {
    type Error = PriorityError;
    fn try_from(p: PriorityParts) -> Result<Priority, PriorityError> {
        Priority::new(p.tier, p.cohort)
    }
}

impl From<Priority> for PriorityParts {
    fn from(p: Priority) -> PriorityParts {
        PriorityParts {
            tier: p.tier.into(),
            cohort: p.cohort.into(),
        }
    }
}

/// Maps caller keys to cohorts, the same way on every instance.
///
/// `cohort = hash(key, epoch) mod 128` where the epoch advances every `rotation`. Each key's
/// epoch boundary is offset by a hash of the key, so that at any moment only a sliver of the
/// keys changes cohort instead of all of them at once, which would make the shed set jump.
/// The wall-clock time passed in must be the same on every instance (Unix time, say): the
/// mapping is then shared to within the instances' clock skew, which is negligible against a
/// rotation of minutes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CohortMap {
    /// How long a key keeps its cohort. Default 10 minutes.
    pub rotation: Nanos,
    /// Mixed into every hash. Instances that must agree share it; a different salt gives an
    /// unrelated assignment. Default 0.
    pub salt: u64,
}

impl Default for CohortMap {
    fn default() -> CohortMap {
        CohortMap {
            rotation: Nanos::from_secs(600),
            salt: 0,
        }
    }
}

impl CohortMap {
    /// The cohort (0..=127) of `key` at wall-clock time `wall` (nanoseconds since the Unix
    /// epoch, or any origin all instances share).
    pub fn cohort(&self, key: &[u8], wall: Time) -> u8 {
        self.cohort_until(key, wall).0
    }

    /// The cohort of `key` at `wall`, as [`CohortMap::cohort`], and the time until which the
    /// key keeps it: from `wall` up to (excluding) that time, `cohort` gives the same answer.
    /// For a caller that maps the same keys again and again (the simulator) and can keep
    /// each answer until then instead of hashing on every request.
    pub fn cohort_until(&self, key: &[u8], wall: Time) -> (u8, Time) {
        let key_hash = stable_hash(key, self.salt);
        let rotation = self.rotation.as_nanos().max(1);
        let offset = key_hash % rotation;
        let (shifted, wrapped) = wall.as_nanos().overflowing_add(offset);
        let epoch = shifted / rotation;
        let cohort = (splitmix64(key_hash ^ splitmix64(epoch)) % u64::from(COHORTS)) as u8;
        // The epoch changes where the shifted time reaches the next multiple of the rotation,
        // or, if the shift has not wrapped yet, where it wraps. In u128, where none of this
        // overflows; past u64::MAX, the answer holds to the end of time.
        let wrap = 1u128 << 64;
        let next_epoch = (u128::from(epoch) + 1) * u128::from(rotation);
        let until = if wrapped {
            next_epoch + wrap - u128::from(offset)
        } else {
            (next_epoch - u128::from(offset)).min(wrap - u128::from(offset))
        };
        let until = u64::try_from(until).unwrap_or(u64::MAX);
        (cohort, Time::from_nanos(until))
    }
}

/// A 64-bit hash that is the same on every machine, build and run (std's `Hasher`s are not
/// guaranteed to be): FNV-1a over the bytes, finished with SplitMix64 for avalanche.
pub fn stable_hash(bytes: &[u8], salt: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ salt;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    splitmix64(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_cover_768_in_order() {
        assert_eq!(Priority::HIGHEST.rank(), 0);
        assert_eq!(Priority::LOWEST.rank(), 767);
        for rank in 0..RANKS as u16 {
            let p = Priority::from_rank(rank).expect("in range");
            assert_eq!(p.rank(), rank);
        }
        assert_eq!(Priority::from_rank(768), None);
        let t1_last = Priority::new(1, 127).expect("valid");
        let t2_first = Priority::new(2, 0).expect("valid");
        assert!(
            t1_last.rank() < t2_first.rank(),
            "every tier-1 outranks every tier-2"
        );
    }

    #[test]
    fn rejects_out_of_range() {
        assert_eq!(Priority::new(6, 0), Err(PriorityError::Tier(6)));
        assert_eq!(Priority::new(0, 128), Err(PriorityError::Cohort(128)));
    }

    #[test]
    fn parses_header_forms() {
        assert_eq!("1".parse(), Ok(Priority::new(1, 0).expect("valid")));
        assert_eq!(" 5/127 ".parse(), Ok(Priority::LOWEST));
        assert!(matches!(
            "9".parse::<Priority>(),
            Err(ParsePriorityError::Range(_))
        ));
        assert!(matches!(
            "high".parse::<Priority>(),
            Err(ParsePriorityError::Syntax(_))
        ));
        assert!(matches!(
            "1/".parse::<Priority>(),
            Err(ParsePriorityError::Syntax(_))
        ));
        assert_eq!(Priority::LOWEST.to_string().parse(), Ok(Priority::LOWEST));
    }

    #[test]
    fn the_header_carries_the_hint_the_chain_was_admitted_under() {
        let parse = |lines: &[&str]| {
            PriorityHeader::parse(lines.iter().map(|l| l.as_bytes()))
                .expect("a field line")
                .expect("a priority")
        };
        let p1_17 = Priority::new(1, 17).expect("valid");
        // The old form: no hint.
        assert_eq!(
            parse(&["1/17"]),
            PriorityHeader {
                priority: p1_17,
                under: None,
                ignored: 0
            }
        );
        // On a line of its own, or joined into one list by an intermediary.
        for lines in [
            &["1/17", "under=400"][..],
            &["1/17, under=400"],
            &[" 1/17 ,under = 400 "],
        ] {
            assert_eq!(parse(lines).under, Some(400), "{lines:?}");
            assert_eq!(parse(lines).priority, p1_17);
        }
        assert_eq!(
            parse(&["5/127", &PriorityHeader::under_line(767)]).under,
            Some(767)
        );
        // Unknown keys and empty members are ignored, not counted; of two hints the deeper.
        let later = parse(&["1/17", "under=500, next=version,, under=300"]);
        assert_eq!((later.under, later.ignored), (Some(300), 0));
        // Malformed members are ignored and counted; the priority stands.
        for bad in [
            "under=768",
            "under=-1",
            "under=high",
            "under=",
            "under",
            "4/2",
        ] {
            let header = parse(&["1/17", bad]);
            assert_eq!(
                (header.priority, header.under, header.ignored),
                (p1_17, None, 1),
                "{bad}"
            );
        }
        let header = PriorityHeader::parse([&b"2"[..], b"under=\xff"]).expect("line");
        assert_eq!(header.map(|h| (h.under, h.ignored)), Ok((None, 1)));
        // A malformed priority is the whole header's error, as before; no line is no header.
        for bad in [
            &["under=400", "1/17"][..],
            &["9/0, under=3"],
            &["\u{1F600}"],
        ] {
            assert!(
                PriorityHeader::parse(bad.iter().map(|l| l.as_bytes())).is_some_and(|h| h.is_err()),
                "{bad:?}"
            );
        }
        assert_eq!(PriorityHeader::parse(std::iter::empty()), None);
    }

    #[test]
    fn deserializes_from_a_table_and_checks_range() {
        let p: Priority = toml::from_str("tier = 1\ncohort = 4").expect("valid");
        assert_eq!(p, Priority::new(1, 4).expect("valid"));
        assert!(toml::from_str::<Priority>("tier = 7").is_err());
    }

    #[test]
    fn cohort_is_stable_within_an_epoch_and_equal_across_instances() {
        let map = CohortMap::default();
        let other_instance = CohortMap::default();
        let now = Time::from_nanos(1_763_700_000 * 1_000_000_000);
        for user in 0..1000u32 {
            let key = format!("user-{user}");
            let c = map.cohort(key.as_bytes(), now);
            assert_eq!(c, other_instance.cohort(key.as_bytes(), now));
            assert!(c < COHORTS);
        }
        // Within one rotation, at most the keys whose boundary falls inside the gap move.
        let later = now + Nanos::from_secs(6); // 1% of a 10-minute rotation
        let moved = (0..10_000u32)
            .filter(|u| {
                let key = format!("user-{u}");
                map.cohort(key.as_bytes(), now) != map.cohort(key.as_bytes(), later)
            })
            .count();
        assert!(
            moved < 250,
            "{moved} of 10000 keys moved in 1% of a rotation"
        );
    }

    #[test]
    fn cohort_until_gives_the_span_of_the_cohort() {
        let map = CohortMap {
            rotation: Nanos::from_secs(600),
            salt: 7,
        };
        let rotation = map.rotation.as_nanos();
        let mut changes = 0;
        for user in 0u64..200 {
            let key = user.to_le_bytes();
            let wall = Time::from_nanos(user * 7_919_000_000);
            let (cohort, until) = map.cohort_until(&key, wall);
            assert_eq!(cohort, map.cohort(&key, wall));
            assert!(until > wall && until.as_nanos() - wall.as_nanos() <= rotation);
            let last = Time::from_nanos(until.as_nanos() - 1);
            assert_eq!(map.cohort(&key, last), cohort, "user {user}");
            // From `until` on, the next epoch, a whole rotation long.
            let (next, next_until) = map.cohort_until(&key, until);
            assert_eq!(next_until.as_nanos() - until.as_nanos(), rotation);
            changes += usize::from(next != cohort);
        }
        assert!(
            changes > 150,
            "the next epoch draws a new cohort: {changes}"
        );
        // Near the end of time: the shift wraps, and the answer still holds until `until`.
        for wall in [u64::MAX - 1, u64::MAX - rotation / 2, u64::MAX / 2] {
            for user in 0u64..50 {
                let key = user.to_le_bytes();
                let (cohort, until) = map.cohort_until(&key, Time::from_nanos(wall));
                assert!(until.as_nanos() > wall || until == Time::MAX);
                let last = Time::from_nanos(until.as_nanos() - 1);
                assert_eq!(map.cohort(&key, last), cohort, "wall {wall} user {user}");
            }
        }
    }

    #[test]
    fn cohorts_are_uniform() {
        // Chi-square goodness of fit over 128 cohorts, 128,000 keys; 127 degrees of freedom,
        // critical value at p = 0.001 is 181.99.
        let map = CohortMap::default();
        let now = Time::from_nanos(42);
        let mut counts = [0u32; COHORTS as usize];
        for user in 0..128_000u32 {
            counts[map.cohort(&user.to_le_bytes(), now) as usize] += 1;
        }
        let expected = 1000.0;
        let chi2: f64 = counts
            .iter()
            .map(|&c| (f64::from(c) - expected).powi(2) / expected)
            .sum();
        assert!(chi2 < 181.99, "chi-square {chi2}");
    }

    #[test]
    fn nobody_is_always_first() {
        // Over many rotations, a key visits cohorts spread across the whole range.
        let map = CohortMap {
            rotation: Nanos::from_secs(60),
            salt: 0,
        };
        for user in 0..50u32 {
            let key = format!("user-{user}");
            let cohorts: Vec<u8> = (0..200u64)
                .map(|e| map.cohort(key.as_bytes(), Time::from_nanos(e * 60_000_000_000)))
                .collect();
            let worst = cohorts.iter().filter(|&&c| c >= 120).count();
            assert!(
                worst < 40,
                "{key} in the last 8 cohorts {worst} times of 200"
            );
            assert!(cohorts.iter().any(|&c| c < 64) && cohorts.iter().any(|&c| c >= 64));
        }
    }

    #[test]
    fn salt_changes_the_assignment() {
        let a = CohortMap {
            salt: 1,
            ..CohortMap::default()
        };
        let b = CohortMap {
            salt: 2,
            ..CohortMap::default()
        };
        let same = (0..1000u32)
            .filter(|u| {
                a.cohort(&u.to_le_bytes(), Time::ZERO) == b.cohort(&u.to_le_bytes(), Time::ZERO)
            })
            .count();
        assert!(same < 30, "{same}");
    }
}

//! How deep a shedding gate is cutting, told to its callers in a response header, so that
//! they stop sending what it would refuse.
//!
//! WeChat's DAGOR piggybacks a service's admission level on its responses; each caller keeps
//! the level of each service it calls and drops, before sending, the requests that service
//! would turn away. A request that a later hop would refuse then dies at the first hop
//! instead, before any upstream work is spent on it. tidegate carries the idea in a header:
//!
//! ```text
//! tidegate-cutoff: rank=400, ttl=500ms
//! ```
//!
//! meaning "for the next 500 ms I refuse every request ranked below 400 in importance" (ranks
//! 401 to 767, [`crate::priority`]: tier 3 cohort 17 onwards). The rank is the gate's
//! [`crate::regulator::RegulatorState::cutoff_rank`], the least important rank it still (at
//! least partly) admits. Keys are separated by commas, white space is ignored, `ttl` takes a
//! duration with a unit, unknown keys are ignored. `docs/feedback.md` is the specification.

use std::fmt;
use std::str::FromStr;

use crate::priority::{Priority, RANKS};
use crate::regulator::RegulatorState;
use crate::time::{Nanos, Time};

/// The header's name (HTTP header names are case-insensitive).
pub const HEADER: &str = "tidegate-cutoff";

/// A cut-off as carried in the header: relative to when it is received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutoffHeader {
    /// The least important rank (0-767) the sender still admits.
    pub rank: u16,
    /// How long the cut-off holds from its receipt.
    pub ttl: Nanos,
}

impl CutoffHeader {
    /// What a gate in `state` says on its responses, holding for `ttl`; `None` when it cuts
    /// nothing by rank. The regulator's cut-off rank is the least important it admits at
    /// least in part; the header names the one before it, the least important admitted in
    /// full, so that callers also hold back the rank the gate sheds a share of: a caller that
    /// sent it would see that share admitted at its own hop and refused here, its work
    /// wasted.
    pub fn of(state: &RegulatorState, ttl: Nanos) -> Option<CutoffHeader> {
        state.cutoff_rank.map(|rank| CutoffHeader {
            rank: rank.saturating_sub(1),
            ttl,
        })
    }

    /// The hint in force from `now`, received now.
    pub fn at(self, now: Time) -> CutoffHint {
        CutoffHint {
            rank: self.rank,
            expires: now + self.ttl,
        }
    }
}

impl fmt::Display for CutoffHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rank={}, ttl={}", self.rank, self.ttl)
    }
}

/// Why a cut-off header did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseCutoffError {
    #[error("cutoff header has no `{0}=`")]
    Missing(&'static str),
    #[error("cutoff header has an invalid `{key}`: {value:?}")]
    Invalid { key: &'static str, value: String },
    #[error("cutoff header is malformed near {0:?}: expected key=value pairs separated by commas")]
    Syntax(String),
}

impl FromStr for CutoffHeader {
    type Err = ParseCutoffError;

    fn from_str(s: &str) -> Result<CutoffHeader, ParseCutoffError> {
        let mut rank = None;
        let mut ttl = None;
        for pair in crate::lease::pairs(s) {
            let (key, value) = pair.map_err(|pair| ParseCutoffError::Syntax(pair.to_owned()))?;
            let invalid = |key| ParseCutoffError::Invalid {
                key,
                value: value.to_owned(),
            };
            match key {
                "rank" => {
                    let parsed: u16 = value.parse().map_err(|_| invalid("rank"))?;
                    if usize::from(parsed) >= RANKS {
                        return Err(invalid("rank"));
                    }
                    rank = Some(parsed);
                }
                "ttl" => ttl = Some(value.parse().map_err(|_| invalid("ttl"))?),
                _ => {}
            }
        }
        Ok(CutoffHeader {
            rank: rank.ok_or(ParseCutoffError::Missing("rank"))?,
            ttl: ttl.ok_or(ParseCutoffError::Missing("ttl"))?,
        })
    }
}

/// A callee's cut-off as its caller holds it: refuse ranks past `rank` until `expires`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CutoffHint {
    pub rank: u16,
    pub expires: Time,
}

impl CutoffHint {
    /// Whether a request of `priority` sent at `now` would be refused by the callee.
    pub fn refuses(&self, now: Time, priority: Priority) -> bool {
        now < self.expires && priority.rank() > self.rank
    }
}

/// What a caller knows of one callee's cut-off: the deepest hint in force, and how many
/// malformed headers it ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Feedback {
    hint: Option<CutoffHint>,
    invalid: u64,
}

impl Feedback {
    /// Takes in the header value of a response received at `now`, if it had one. A valid
    /// header is taken as [`Feedback::take`] says; a malformed one is ignored (the hint held stays) and
    /// counted; no header changes nothing, since a gate that stops cutting stops sending it
    /// and the hint lapses on its own.
    pub fn receive(&mut self, now: Time, value: Option<&[u8]>) {
        let Some(value) = value else { return };
        match std::str::from_utf8(value)
            .ok()
            .and_then(|v| v.parse::<CutoffHeader>().ok())
        {
            Some(header) => self.take(now, header),
            None => self.invalid += 1,
        }
    }

    /// Takes in a parsed header received at `now` (the simulator hands headers over as
    /// values): it replaces the hint held, unless that one is deeper and still in force. A
    /// callee is several instances, each its own gate and its own cut-off; taking the latest
    /// flipped the hint between theirs, and what a caller admitted under the looser one was
    /// then dropped under the deeper one, its work wasted (`docs/feedback.md`). The deepest
    /// holds until it expires, so a caller loosens at most a `ttl` after the callee does.
    pub fn take(&mut self, now: Time, header: CutoffHeader) {
        let new = header.at(now);
        self.hint = match self.hint(now) {
            Some(held) if held.rank < new.rank => Some(held),
            _ => Some(new),
        };
    }

    /// Whether to drop a request of `priority` at `now` rather than send it.
    pub fn refuses(&self, now: Time, priority: Priority) -> bool {
        self.hint.is_some_and(|hint| hint.refuses(now, priority))
    }

    /// The hint in force at `now`, if any.
    pub fn hint(&self, now: Time) -> Option<CutoffHint> {
        self.hint.filter(|hint| now < hint.expires)
    }

    /// Malformed headers ignored so far.
    pub fn invalid(&self) -> u64 {
        self.invalid
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn priority(tier: u32, cohort: u32) -> Priority {
        Priority::new(tier, cohort).expect("valid")
    }

    #[test]
    fn round_trips() {
        let header = CutoffHeader {
            rank: 400,
            ttl: Nanos::from_millis(500),
        };
        assert_eq!(header.to_string(), "rank=400, ttl=500ms");
        assert_eq!(header.to_string().parse(), Ok(header));
    }

    #[test]
    fn tolerates_spacing_order_and_unknown_keys() {
        let header: CutoffHeader = " ttl = 1.5s ,rank=0, tier=later, ".parse().expect("valid");
        assert_eq!(
            header,
            CutoffHeader {
                rank: 0,
                ttl: Nanos::from_millis(1_500)
            }
        );
        assert_eq!(
            "rank=767,ttl=0s".parse::<CutoffHeader>().map(|h| h.rank),
            Ok(767)
        );
    }

    #[test]
    fn names_what_is_wrong() {
        use ParseCutoffError::*;
        assert_eq!("ttl=1s".parse::<CutoffHeader>(), Err(Missing("rank")));
        assert_eq!("rank=3".parse::<CutoffHeader>(), Err(Missing("ttl")));
        assert_eq!("".parse::<CutoffHeader>(), Err(Missing("rank")));
        for (bad, key) in [
            ("rank=768, ttl=1s", "rank"),
            ("rank=-1, ttl=1s", "rank"),
            ("rank=3/0, ttl=1s", "rank"),
            ("rank=99999999999, ttl=1s", "rank"),
            ("rank=1, ttl=soon", "ttl"),
            ("rank=1, ttl=5", "ttl"),
            ("rank=1, ttl=-1s", "ttl"),
        ] {
            assert!(
                matches!(bad.parse::<CutoffHeader>(), Err(Invalid { key: k, .. }) if k == key),
                "{bad}"
            );
        }
        assert!(matches!("rank".parse::<CutoffHeader>(), Err(Syntax(_))));
    }

    #[test]
    fn a_hint_refuses_less_important_ranks_until_it_expires() {
        let now = Time::from_nanos(1_000);
        let hint = CutoffHeader {
            rank: priority(3, 16).rank(),
            ttl: Nanos::from_millis(100),
        }
        .at(now);
        assert!(hint.refuses(now, priority(3, 17)));
        assert!(hint.refuses(now, Priority::LOWEST));
        assert!(!hint.refuses(now, priority(3, 16)), "the cut rank is sent");
        assert!(!hint.refuses(now, priority(0, 127)));
        let expiry = now + Nanos::from_millis(100);
        assert!(!hint.refuses(expiry, Priority::LOWEST));
    }

    #[test]
    fn feedback_ignores_and_counts_bad_values_and_keeps_its_hint() {
        let mut feedback = Feedback::default();
        let t0 = Time::from_nanos(0);
        feedback.receive(t0, Some(b"rank=128, ttl=1s"));
        assert!(feedback.refuses(t0, priority(1, 1)));
        for bad in [&b"rank=900, ttl=1s"[..], b"garbage", b"rank=1, ttl=\xff"] {
            feedback.receive(t0, Some(bad));
        }
        assert_eq!(feedback.invalid(), 3);
        assert_eq!(feedback.hint(t0).map(|h| h.rank), Some(128));
        // No header: nothing changes; the hint lapses at its time.
        feedback.receive(t0, None);
        assert!(feedback.refuses(Time::from_nanos(999_999_999), priority(1, 1)));
        assert!(!feedback.refuses(Time::from_nanos(1_000_000_000), priority(1, 1)));
        assert_eq!(feedback.hint(Time::from_nanos(1_000_000_000)), None);
        // Once it has lapsed, a later header replaces the hint, looser or tighter.
        let t1 = Time::from_nanos(1_000_000_000);
        feedback.receive(t1, Some(b"rank=767, ttl=1s"));
        assert!(!feedback.refuses(t1, Priority::LOWEST));
    }

    #[test]
    fn the_deepest_hint_holds_until_it_expires() {
        let mut feedback = Feedback::default();
        let t0 = Time::from_nanos(0);
        let at = |ms| t0 + Nanos::from_millis(ms);
        // Two instances of the callee cut at ranks 300 and 400, their answers interleaved.
        feedback.receive(t0, Some(b"rank=300, ttl=250ms"));
        feedback.receive(at(10), Some(b"rank=400, ttl=250ms"));
        assert_eq!(feedback.hint(at(10)).map(|h| h.rank), Some(300));
        // A deeper one replaces it at once; the same one renews it.
        feedback.receive(at(20), Some(b"rank=200, ttl=250ms"));
        feedback.receive(at(30), Some(b"rank=200, ttl=250ms"));
        assert_eq!(
            feedback.hint(at(30)),
            Some(CutoffHint {
                rank: 200,
                expires: at(280)
            })
        );
        // A looser one is taken once the deeper has lapsed.
        feedback.receive(at(279), Some(b"rank=400, ttl=250ms"));
        assert_eq!(feedback.hint(at(279)).map(|h| h.rank), Some(200));
        feedback.receive(at(280), Some(b"rank=400, ttl=250ms"));
        assert_eq!(feedback.hint(at(280)).map(|h| h.rank), Some(400));
    }

    #[test]
    fn a_gate_says_its_cutoff_only_while_cutting() {
        let ttl = Nanos::from_millis(250);
        let idle = RegulatorState::default();
        assert_eq!(CutoffHeader::of(&idle, ttl), None);
        let cutting = RegulatorState {
            cutoff_rank: Some(300),
            ..RegulatorState::default()
        };
        // Rank 300 is cut in part: callers hold it back too.
        assert_eq!(
            CutoffHeader::of(&cutting, ttl),
            Some(CutoffHeader { rank: 299, ttl })
        );
    }
}

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

use crate::gate::Gate;
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
        CutoffHeader::of_rank(state.cutoff_rank, ttl)
    }

    /// What `gate` says on its responses at `now`: as [`CutoffHeader::of`] its regulator's
    /// state, and with [`crate::gate::QueueConfig::hold_back_starving`], also holding back
    /// the ranks its queue starves ([`Gate::told_cutoff`]).
    pub fn told(gate: &Gate, now: Time, ttl: Nanos) -> Option<CutoffHeader> {
        CutoffHeader::of_rank(gate.told_cutoff(now), ttl)
    }

    /// The header of a cut-off rank (the least important rank admitted at least in part):
    /// the rank before it, holding for `ttl`; `None` for none.
    pub fn of_rank(cutoff_rank: Option<u16>, ttl: Nanos) -> Option<CutoffHeader> {
        cutoff_rank.map(|rank| CutoffHeader {
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

/// Whether the hint a chain was admitted under (`under`, none for a request that says none)
/// spares a call of the chain ranked `priority` from the cut-off hints since: it admits it.
pub fn spares(priority: Priority, under: Option<u16>) -> bool {
    under.is_some_and(|under| priority.rank() <= under)
}

/// What a caller knows of one callee's cut-off: the deepest hint in force, the line it sends
/// up to (which reopens at a bounded rate, if asked), and how many malformed headers it
/// ignored.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Feedback {
    hint: Option<CutoffHint>,
    invalid: u64,
    reopening: Option<Reopening>,
}

/// The line of a caller that reopens slowly ([`Feedback::reopening`]): the least important
/// rank it sends, as of `at`, and the ranks a second it rises by toward a looser hint.
#[derive(Clone, Copy, Debug, PartialEq)]
struct Reopening {
    per_second: f64,
    at: Time,
    rank: f64,
}

/// The least important rank, the line of a caller that holds no hint.
const LEAST_IMPORTANT: f64 = (RANKS - 1) as f64;

impl Feedback {
    /// A caller whose line, when the hint loosens or lapses, rises toward it by at most
    /// `per_second` ranks a second, and follows a deeper one at once. A callee's cut-off
    /// relaxes as its queue empties; callers that sent the whole band again at once sent a
    /// surge that deepened it again, past chains they had just admitted (`docs/feedback.md`,
    /// 60 ranks a second in the simulator's fleets). A rate that is not a positive number
    /// reopens at once, as [`Feedback::default`] does.
    pub fn reopening(per_second: f64) -> Feedback {
        Feedback {
            reopening: (per_second > 0.0).then_some(Reopening {
                per_second,
                at: Time::ZERO,
                rank: LEAST_IMPORTANT,
            }),
            ..Feedback::default()
        }
    }

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

    /// The least important rank the caller sends at `now`, `None` for every rank: the rank
    /// of the hint in force or, reopening, the line moved to `now` toward it.
    pub fn line(&mut self, now: Time) -> Option<u16> {
        let hint = self.hint(now).map(|hint| hint.rank);
        let Some(line) = self.reopening.as_mut() else {
            return hint;
        };
        let target = hint.map_or(LEAST_IMPORTANT, f64::from);
        let risen = line.rank + line.per_second * (now - line.at).as_secs_f64();
        line.rank = target.min(risen);
        line.at = now;
        // Whole ranks, at most the least important: the cast cannot overflow.
        let rank = line.rank.floor() as u16;
        (usize::from(rank) < RANKS - 1).then_some(rank)
    }

    /// Whether to drop a request of `priority` at `now` rather than send it: `Some(line)`,
    /// the line it is past ([`Feedback::line`]), or `None` to send it.
    pub fn refuses(&mut self, now: Time, priority: Priority) -> Option<u16> {
        self.line(now).filter(|&line| priority.rank() > line)
    }

    /// As [`Feedback::refuses`], for a call made while serving a request whose chain the
    /// edge admitted under the hint `under` (`under=` in `tidegate-priority`,
    /// [`crate::priority::PriorityHeader`]): a call that hint admits is sent whatever the
    /// hints since. A hint stops new chains; a started chain's calls are left to the
    /// callee's own gate, which is looser than the deepest header its callers hold, rather
    /// than dropped after the hops before spent their work on them (`docs/feedback.md`).
    pub fn refuses_in_chain(
        &mut self,
        now: Time,
        priority: Priority,
        under: Option<u16>,
    ) -> Option<u16> {
        let refused = self.refuses(now, priority);
        refused.filter(|_| !spares(priority, under))
    }

    /// What an edge that admits a request at `now` says it admitted it under (`under=`):
    /// its line, the least important rank when it holds none.
    pub fn under(&mut self, now: Time) -> u16 {
        self.line(now).unwrap_or(RANKS as u16 - 1)
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
        assert!(feedback.refuses(t0, priority(1, 1)).is_some());
        for bad in [&b"rank=900, ttl=1s"[..], b"garbage", b"rank=1, ttl=\xff"] {
            feedback.receive(t0, Some(bad));
        }
        assert_eq!(feedback.invalid(), 3);
        assert_eq!(feedback.hint(t0).map(|h| h.rank), Some(128));
        // No header: nothing changes; the hint lapses at its time.
        feedback.receive(t0, None);
        assert!(
            feedback
                .refuses(Time::from_nanos(999_999_999), priority(1, 1))
                .is_some()
        );
        assert_eq!(
            feedback.refuses(Time::from_nanos(1_000_000_000), priority(1, 1)),
            None
        );
        assert_eq!(feedback.hint(Time::from_nanos(1_000_000_000)), None);
        // Once it has lapsed, a later header replaces the hint, looser or tighter.
        let t1 = Time::from_nanos(1_000_000_000);
        feedback.receive(t1, Some(b"rank=767, ttl=1s"));
        assert_eq!(feedback.refuses(t1, Priority::LOWEST), None);
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

    #[test]
    fn a_reopening_line_rises_at_its_rate_and_deepens_at_once() {
        let at = |ms| Time::ZERO + Nanos::from_millis(ms);
        let header = |rank, ttl_ms| CutoffHeader {
            rank,
            ttl: Nanos::from_millis(ttl_ms),
        };
        // As the default: the hint at once.
        let mut at_once = Feedback::default();
        at_once.take(at(0), header(300, 250));
        assert_eq!(at_once.line(at(0)), Some(300));
        assert_eq!(at_once.line(at(250)), None, "lapsed: every rank at once");

        let mut line = Feedback::reopening(60.0);
        assert_eq!(line.line(at(0)), None, "no hint: every rank");
        line.take(at(10), header(300, 250));
        assert_eq!(line.line(at(10)), Some(300), "deeper: at once");
        // Looser while the deeper holds: the deeper one.
        line.take(at(100), header(400, 250));
        assert_eq!(line.line(at(259)), Some(300));
        // It lapses at 260 ms; from its last reading the line rises 60 ranks a second.
        assert_eq!(line.line(at(760)), Some(330));
        assert_eq!(
            line.refuses(at(760), Priority::from_rank(331).expect("rank")),
            Some(330)
        );
        assert_eq!(
            line.refuses(at(760), Priority::from_rank(330).expect("rank")),
            None
        );
        assert_eq!(line.line(at(7_760)), Some(750));
        assert_eq!(line.line(at(8_100)), None, "risen to every rank");
        // Deeper again: at once; a looser one is reached at the rate.
        line.take(at(9_200), header(200, 250));
        assert_eq!(line.line(at(9_200)), Some(200));
        assert_eq!(line.line(at(9_449)), Some(200));
        line.take(at(9_460), header(260, 10_000));
        assert_eq!(line.line(at(9_960)), Some(230));
        assert_eq!(line.line(at(15_000)), Some(260));
        // A rate that is not positive reopens at once.
        assert_eq!(Feedback::reopening(0.0), Feedback::default());
        assert_eq!(Feedback::reopening(f64::NAN), Feedback::default());
    }

    #[test]
    fn a_chain_admitted_under_a_hint_is_not_dropped_on_a_deeper_one() {
        let t0 = Time::from_nanos(0);
        let mut feedback = Feedback::default();
        // The edge held no hint: it admits under every rank.
        assert_eq!(feedback.under(t0), 767);
        feedback.receive(t0, Some(b"rank=300, ttl=250ms"));
        assert_eq!(feedback.under(t0), 300);
        let p350 = Priority::from_rank(350).expect("rank");
        // A new chain, or one admitted under a hint that did not admit it: dropped.
        assert_eq!(feedback.refuses_in_chain(t0, p350, None), Some(300));
        assert_eq!(feedback.refuses_in_chain(t0, p350, Some(349)), Some(300));
        // Admitted under a hint that admits it: sent.
        assert_eq!(feedback.refuses_in_chain(t0, p350, Some(350)), None);
        assert_eq!(feedback.refuses_in_chain(t0, p350, Some(767)), None);
        // A call the hint in force admits is sent anyway.
        let p200 = Priority::from_rank(200).expect("rank");
        assert_eq!(feedback.refuses_in_chain(t0, p200, Some(100)), None);
    }
}

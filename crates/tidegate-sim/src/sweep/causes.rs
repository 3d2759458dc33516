//! Why `tidegate default` still misses: each case it misses sorted into the first group whose
//! rule matches the case's axes and a target it missed, with the cause traced on a few cases
//! of that group.
//!
//! A group is a place to look, not a proof: its cause was traced on a few of its cases (the
//! limit, the queue and PIE's probability second by second), and the rule only says which
//! cases look alike. The order matters (the first match wins): the narrow groups of small
//! knees come before the load shapes that also hold them. What was tried for each group, and
//! with what figures, is in `docs/experiments/README.md` ("Why the default still misses").

use serde::Serialize;

use super::case::{Case, Dist, LoadShape};
use super::targets::Target;

/// A group of the default's misses, by what was traced to cause them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    TwoTiersAtSmallKnees,
    SmallKneesVaryingWork,
    SmallKneesSteadyWork,
    ShedAtHalfLoad,
    CapacityHalves,
    Contention,
    HeavyTailsAtLargeKnees,
    Bursts,
    SettlingAt1ms,
    SettlingAt20ms,
    Untraced,
}

impl Cause {
    /// In the order their rules are tried.
    pub const ALL: [Cause; 11] = [
        Cause::TwoTiersAtSmallKnees,
        Cause::SmallKneesVaryingWork,
        Cause::SmallKneesSteadyWork,
        Cause::ShedAtHalfLoad,
        Cause::CapacityHalves,
        Cause::Contention,
        Cause::HeavyTailsAtLargeKnees,
        Cause::Bursts,
        Cause::SettlingAt1ms,
        Cause::SettlingAt20ms,
        Cause::Untraced,
    ];

    /// The group of a case missed on `missed`: the first whose rule matches one of them.
    pub fn of(case: &Case, missed: &[Target]) -> Cause {
        Cause::ALL
            .into_iter()
            .find(|cause| missed.iter().any(|&t| cause.holds(case, t)))
            .unwrap_or(Cause::Untraced)
    }

    fn holds(self, case: &Case, missed: Target) -> bool {
        let small = case.knee <= 3;
        match self {
            Cause::TwoTiersAtSmallKnees => case.tiers && small && missed == Target::Tiers,
            Cause::SmallKneesVaryingWork => small && varies(case.dist),
            Cause::SmallKneesSteadyWork => small,
            Cause::ShedAtHalfLoad => case.load == LoadShape::Half && missed == Target::Shed,
            Cause::CapacityHalves => case.load == LoadShape::CapacityHalves,
            Cause::Contention => case.contention,
            Cause::HeavyTailsAtLargeKnees => case.knee >= 100 && heavy(case.dist),
            Cause::Bursts => case.load == LoadShape::Bursts,
            Cause::SettlingAt1ms => case.work_ms == 1 && missed == Target::Settle,
            Cause::SettlingAt20ms => case.work_ms == 20 && missed == Target::Settle,
            Cause::Untraced => true,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Cause::TwoTiersAtSmallKnees => {
                "two tiers at knees of 1-3: tier 1 waits past its timeout"
            }
            Cause::SmallKneesVaryingWork => "knees of 1-3, work that varies",
            Cause::SmallKneesSteadyWork => "knees of 1-3, constant or uniform work",
            Cause::ShedAtHalfLoad => "shed at 0.5x during slow start",
            Cause::CapacityHalves => "a capacity that halves and recovers",
            Cause::Contention => "contention beyond the knee",
            Cause::HeavyTailsAtLargeKnees => "heavy tails at knees of 100-500",
            Cause::Bursts => "on/off bursts",
            Cause::SettlingAt1ms => "settling with 1 ms of work",
            Cause::SettlingAt20ms => "settling with 20 ms of work",
            Cause::Untraced => "other",
        }
    }

    /// The cause, as traced.
    pub fn why(self) -> &'static str {
        match self {
            Cause::TwoTiersAtSmallKnees => {
                "Tier 1 alone is three quarters of one worker: its requests queue behind each \
                 other in the service, each a whole work time, and are lost to the gate's queue \
                 timeout and to answers after the client's. In first-come order a queue of one \
                 worker at 0.75 passes 10 work times with probability e^-2.5 (8%); the oracle \
                 loses more of tier 1."
            }
            Cause::SmallKneesVaryingWork => {
                "One request is a third to all of the knee: the probes and trials of one \
                 request move the limit out of the settling band, and the arrivals that wait \
                 while freed slots would idle wait behind a limit that stands one past the knee \
                 (served past the timeout)."
            }
            Cause::SmallKneesSteadyWork => {
                "The limit holds one past the knee (one request in service, one in its queue) \
                 and probes one request less every few minutes; the descent from the first \
                 limit, 20, takes longer than 50 work times."
            }
            Cause::ShedAtHalfLoad => {
                "At knees of 100 and 500 the first limit, 20, is far below the demand during \
                 slow start's first windows: the gate is overloaded at its own limit before the \
                 limit has grown (docs/experiments/cold-start.md)."
            }
            Cause::CapacityHalves => {
                "After the recovery the limit grows back from the halved level by a few \
                 requests a window; during the halving, a level fenced for its drops, or a \
                 baseline anchored on the halved service's queue, holds it."
            }
            Cause::Contention => {
                "The latency rule's tolerance, about a fifth at limits of 30-40, lets the limit \
                 sit 5-10 requests past a knee of 30, where each request beyond the knee slows \
                 the rest; a run holds one covariance check."
            }
            Cause::HeavyTailsAtLargeKnees => {
                "A window's mean leaves out the long requests still running in freshly filled \
                 slots: windows read short, and the baseline sinks under the service's mean."
            }
            Cause::Bursts => {
                "At half load the limit grows to about twice what is in use, past the knee, so \
                 each burst starts with a queue in the service."
            }
            Cause::SettlingAt1ms => {
                "No Autotune window closes within 50 work times of an onset: a window lasts 100 \
                 answers' rtt, 100 work times at 1 ms, so only a limit that does not move meets \
                 the target."
            }
            Cause::SettlingAt20ms => {
                "A window lasts 500 ms, 25 work times at 20 ms, and the one after each move is \
                 not judged: the smoothed shrink from slow start's overshoot takes two judged \
                 windows, past 50 work times."
            }
            Cause::Untraced => {
                "Not traced case by case: bimodal and Pareto 1.5 work at knees of 10-30, whose \
                 windows need many answers to measure their mean, 2 s of work at a knee of 30, \
                 and the rest."
            }
        }
    }
}

/// Every distribution but constant and uniform work.
fn varies(dist: Dist) -> bool {
    !matches!(dist, Dist::Constant | Dist::Uniform)
}

/// Slow answers rare and long: a window's mean depends on the few it holds.
fn heavy(dist: Dist) -> bool {
    matches!(
        dist,
        Dist::Bimodal90 | Dist::Bimodal99 | Dist::Pareto15 | Dist::Pareto25 | Dist::Lognormal10
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(dist: Dist, knee: u32, work_ms: u64, load: LoadShape) -> Case {
        Case {
            dist,
            knee,
            contention: false,
            bounded_queue: false,
            work_ms,
            load,
            timeout: 10,
            tiers: false,
            seed: 1,
        }
    }

    #[test]
    fn a_missed_case_goes_to_the_first_group_whose_rule_matches_a_target_it_missed() {
        let knee1 = case(Dist::Exponential, 1, 100, LoadShape::Step3);
        let tiers = Case {
            tiers: true,
            ..knee1.clone()
        };
        // The tier group asks for the tier target; with it missed beside another, it wins.
        assert_eq!(
            Cause::of(&tiers, &[Target::Settle, Target::Tiers]),
            Cause::TwoTiersAtSmallKnees
        );
        assert_eq!(
            Cause::of(&tiers, &[Target::Settle]),
            Cause::SmallKneesVaryingWork
        );
        let constant = case(Dist::Constant, 3, 100, LoadShape::Step3);
        assert_eq!(
            Cause::of(&constant, &[Target::Goodput]),
            Cause::SmallKneesSteadyWork
        );
        // Contention comes before the load shapes that also hold it.
        let bursts = case(Dist::Constant, 30, 100, LoadShape::Bursts);
        assert_eq!(Cause::of(&bursts, &[Target::Goodput]), Cause::Bursts);
        let contended = Case {
            contention: true,
            ..bursts
        };
        assert_eq!(Cause::of(&contended, &[Target::Goodput]), Cause::Contention);
        // A group of one target leaves the case's other misses to the groups after it.
        let fast = case(Dist::Exponential, 30, 20, LoadShape::Step3);
        assert_eq!(Cause::of(&fast, &[Target::Settle]), Cause::SettlingAt20ms);
        assert_eq!(Cause::of(&fast, &[Target::Goodput]), Cause::Untraced);
        let half = case(Dist::Exponential, 500, 100, LoadShape::Half);
        assert_eq!(Cause::of(&half, &[Target::Shed]), Cause::ShedAtHalfLoad);
        let tail = case(Dist::Bimodal90, 500, 100, LoadShape::Step3);
        assert_eq!(
            Cause::of(&tail, &[Target::Goodput]),
            Cause::HeavyTailsAtLargeKnees
        );
    }
}

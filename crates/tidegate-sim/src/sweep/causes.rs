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
    ConstantWorkInWaves,
    SlowFewHoldTheWorkers,
    SettlingAt1ms,
    SettlingAt20ms,
    SettlingAt2s,
    SettlingAtKnee10,
    TailPastTheOracles,
    Untraced,
}

impl Cause {
    /// In the order their rules are tried.
    pub const ALL: [Cause; 16] = [
        Cause::TwoTiersAtSmallKnees,
        Cause::SmallKneesVaryingWork,
        Cause::SmallKneesSteadyWork,
        Cause::ShedAtHalfLoad,
        Cause::CapacityHalves,
        Cause::Contention,
        Cause::HeavyTailsAtLargeKnees,
        Cause::Bursts,
        Cause::ConstantWorkInWaves,
        Cause::SlowFewHoldTheWorkers,
        Cause::SettlingAt1ms,
        Cause::SettlingAt20ms,
        Cause::SettlingAt2s,
        Cause::SettlingAtKnee10,
        Cause::TailPastTheOracles,
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
            Cause::ConstantWorkInWaves => {
                case.dist == Dist::Constant
                    && case.timeout <= 3
                    && matches!(
                        missed,
                        Target::Goodput | Target::P99Oracle | Target::P99Timeout
                    )
            }
            Cause::SlowFewHoldTheWorkers => {
                (10..=30).contains(&case.knee)
                    && matches!(
                        case.dist,
                        Dist::Bimodal90 | Dist::Bimodal99 | Dist::Pareto15
                    )
            }
            Cause::SettlingAt1ms => {
                case.work_ms == 1 && matches!(missed, Target::Settle | Target::P99Oracle)
            }
            Cause::SettlingAt20ms => case.work_ms == 20 && missed == Target::Settle,
            Cause::SettlingAt2s => case.work_ms == 2000 && missed == Target::Settle,
            Cause::SettlingAtKnee10 => case.knee == 10 && missed == Target::Settle,
            Cause::TailPastTheOracles => missed == Target::P99Oracle,
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
            Cause::ConstantWorkInWaves => "constant work with a timeout of 2-3 work times",
            Cause::SlowFewHoldTheWorkers => "a slow few holding the workers, at knees of 10-30",
            Cause::SettlingAt1ms => "settling and the tail with 1 ms of work",
            Cause::SettlingAt20ms => "settling with 20 ms of work",
            Cause::SettlingAt2s => "settling with 2 s of work",
            Cause::SettlingAtKnee10 => "settling at a knee of 10",
            Cause::TailPastTheOracles => "a tail past the oracle's",
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
            Cause::ConstantWorkInWaves => {
                "Constant work frees the slots in waves a work time apart, and the wait bound \
                 (a fastest answer, here the work time) lets a wave's worth of arrivals wait for \
                 the next: with the service's own queue at a limit past the knee, answers pass \
                 a timeout of 2-3 work times. PIE, reading its dequeue rate per 15 ms, sees the \
                 waves as a rate that swings by half and does not hold the queue at its target."
            }
            Cause::SlowFewHoldTheWorkers => {
                "Where a few slow requests are most of the work (bimodal 90/10: the slow tenth \
                 is 92% of it; bimodal 99/1: the slow hundredth half; Pareto 1.5), how many \
                 workers they hold at a moment is a count of chance: at knees of 10-30 the \
                 capacity left for the rest swings by a quarter to all of it over tens of work \
                 times, and the limit and PIE follow the swings rather than settle (bimodal 99/1 \
                 at a knee of 10 stepped to 3x: answers per two work times between 4 and 40, \
                 PIE's probability between 0.1 and 0.9, the limit between 8 and 16)."
            }
            Cause::SettlingAt1ms => {
                "No Autotune window closes within 50 work times of an onset: a window lasts 100 \
                 answers' rtt, 100 work times at 1 ms, so only a limit that does not move meets \
                 the target; and the limit slow start left stands through the judged window \
                 with the service's own queue behind it (uniform work at a knee of 30 stepped to \
                 3x: 80 in flight, 40-70 more waiting in the gate, p99 3 times the oracle's)."
            }
            Cause::SettlingAt20ms => {
                "A window lasts 500 ms, 25 work times at 20 ms, and the one after each move is \
                 not judged: the smoothed shrink from slow start's overshoot takes two judged \
                 windows, past 50 work times."
            }
            Cause::SettlingAt2s => {
                "A window lasts at most 8 s, 4 work times, and at knees of 10-30 holds a few \
                 dozen to a hundred answers, a ninth or less of what the tolerance asks to \
                 measure their mean: the latency rule moves the limit on their noise, and the \
                 baseline is re-anchored on it, so the limit wanders by a third either way of \
                 the knee."
            }
            Cause::SettlingAtKnee10 => {
                "A probe lowers the limit to three quarters for a window, past the settling \
                 band of a fifth, and at limits of 11-16 probes come every few tens of work \
                 times (exponential work with a bounded queue stepped to 3x, seed 15: 13 to 10 \
                 about every 45). And two shrinks from slow start's overshoot, judged futile on \
                 the drain of its queue, re-anchor the baseline on that queue, and the limit \
                 then sits near twice the knee (lognormal 1.0 stepped to 3x, seed 16: 48, 31, \
                 18.5, the baseline at 200 ms for 100 ms of work, the limit 18-25)."
            }
            Cause::TailPastTheOracles => {
                "The oracle answers at the knee, mostly without a queue; the default's limit \
                 stands in the latency rule's hold band, up to a fifth past a knee of 30 (the \
                 service's own queue), and a request may wait up to a fastest answer in the \
                 gate. Where the service's own tail is close to its mean (constant, uniform and \
                 the fast mode of bimodal work), either is more than the quarter of it the \
                 target allows."
            }
            Cause::Untraced => "Not traced case by case.",
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
        let held = case(Dist::Bimodal99, 10, 100, LoadShape::Step3);
        assert_eq!(
            Cause::of(&held, &[Target::Goodput]),
            Cause::SlowFewHoldTheWorkers
        );
        let ten = case(Dist::Exponential, 10, 100, LoadShape::Step3);
        assert_eq!(Cause::of(&ten, &[Target::Settle]), Cause::SettlingAtKnee10);
        let tail = case(Dist::Uniform, 500, 100, LoadShape::Step3);
        assert_eq!(
            Cause::of(&tail, &[Target::P99Oracle]),
            Cause::TailPastTheOracles
        );
        let slow = case(Dist::Exponential, 30, 2000, LoadShape::Step3);
        assert_eq!(Cause::of(&slow, &[Target::Settle]), Cause::SettlingAt2s);
        let waves = Case {
            timeout: 2,
            ..case(Dist::Constant, 30, 100, LoadShape::Step10)
        };
        assert_eq!(
            Cause::of(&waves, &[Target::P99Timeout]),
            Cause::ConstantWorkInWaves
        );
        let half = case(Dist::Exponential, 500, 100, LoadShape::Half);
        assert_eq!(Cause::of(&half, &[Target::Shed]), Cause::ShedAtHalfLoad);
        let tail = case(Dist::Bimodal90, 500, 100, LoadShape::Step3);
        assert_eq!(
            Cause::of(&tail, &[Target::Goodput]),
            Cause::HeavyTailsAtLargeKnees
        );
    }
}

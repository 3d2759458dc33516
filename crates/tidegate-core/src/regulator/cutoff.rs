//! Turning "reject a fraction r of the traffic" into "reject the least important r of it".
//!
//! A controller (PIE, PID) decides *how much* to shed; this decides *whom*. It keeps a running
//! histogram of the ranks of recent arrivals (one counter per rank, 768 of them, decayed with a
//! half-life so that it follows the current mix) and, when the controller updates its ratio,
//! finds the rank `c` such that the arrivals ranked below `c` (less important: higher rank)
//! make up the ratio, with a fraction of rank `c` itself to make up the rest. That fraction is
//! rejected deterministically (an error-diffusing counter, not a coin), so the rejected share
//! is exact even when all traffic has one priority, and is not noisier than it must be.
//!
//! The result is Cinnamon's order: tier 5 before tier 4 before ... tier 0, and within a tier
//! cohort 127 before cohort 126 ... before cohort 0. Because cohorts come from a shared hash of
//! the caller, every instance that cuts at the same rank sheds the same users.
//!
//! Recording an arrival and deciding about one are O(1); an update decays and walks the
//! counters of the ranks that have had arrivals (all 768 at worst).
//!
//! When the gate's callers hold back what it cuts (they honour its `tidegate-cutoff` header,
//! `crate::feedback`), the ranks it cuts stop arriving, and a histogram of arrivals alone
//! forgets them: the next cut, a share of what still arrives, is drawn deeper into what the
//! callers send, each header deeper than the last (the ratchet, `docs/feedback.md`).
//! [`PriorityCutoff::with_held_ranks`] keeps the line a level over the traffic as it would be
//! without the callers' hold-back, as DAGOR's admission level is: a rank counts, from the
//! update at which the cut first takes it in full, at least what it counted then, until its
//! own arrivals are back to that. The share to cut is then a share of all the traffic, the
//! line stays where it is while the share does, and moves back up, letting the callers send
//! again, as the share falls.

use std::ops::ControlFlow;

use crate::priority::{COHORTS, RANKS};
use crate::time::{Nanos, Time};

/// The half-life the regulators give their histograms: one second of traffic is enough to
/// know the mix, and short enough to follow a change of mix within a few seconds.
pub(crate) const HISTORY_HALF_LIFE: Nanos = Nanos::from_secs(1);

/// `x` clamped to `[0, 1]`, with NaN (from a degenerate configuration) as 0.
pub(crate) fn unit(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

/// Where the line is drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Cut {
    /// Nothing is rejected.
    Nothing,
    /// Everything is rejected.
    Everything,
    /// No history yet: this fraction of every rank.
    Uniform(f64),
    /// Every rank above `rank` is rejected, and `fraction` of `rank` itself.
    Rank { rank: u16, fraction: f64 },
}

impl Cut {
    /// Where the cut lies among the ranks (see [`PriorityCutoff::line`]).
    fn position(self) -> Option<f64> {
        match self {
            Cut::Nothing => Some(RANKS as f64),
            Cut::Everything => Some(0.0),
            Cut::Uniform(_) => None,
            Cut::Rank { rank, fraction } => Some(f64::from(rank) + 1.0 - fraction),
        }
    }

    /// The cut that lies at `line`, the inverse of [`Cut::position`].
    fn at(line: f64) -> Cut {
        if line.is_nan() || line >= RANKS as f64 {
            Cut::Nothing
        } else if line <= 0.0 {
            Cut::Everything
        } else {
            let rank = line.floor();
            Cut::Rank {
                // In `[0, RANKS)`, so it fits.
                rank: rank as u16,
                fraction: (1.0 - (line - rank)).clamp(0.0, 1.0),
            }
        }
    }
}

const SEEN_WORDS: usize = RANKS.div_ceil(64);

/// The positions of the set bits of a word, lowest first (or highest first, from the back).
struct SetBits(u64);

impl Iterator for SetBits {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        let bit = (self.0 != 0).then(|| self.0.trailing_zeros() as usize)?;
        self.0 &= self.0 - 1;
        Some(bit)
    }
}

impl DoubleEndedIterator for SetBits {
    fn next_back(&mut self) -> Option<usize> {
        let bit = (self.0 != 0).then(|| 63 - self.0.leading_zeros() as usize)?;
        self.0 &= !(1 << bit);
        Some(bit)
    }
}

/// A priority cut-off on the running histogram of arrival ranks. See the module docs.
#[derive(Clone, Debug)]
pub struct PriorityCutoff {
    counts: Box<[f64; RANKS]>,
    /// Bit `r` is set once rank `r` has had an arrival: the ranks whose count may be above
    /// zero. An update only visits these (all the ranks of mixed traffic, a handful of the
    /// 768 for most services), adding and comparing in the same order as over all of them,
    /// so the result is the same to the bit.
    seen: [u64; SEEN_WORDS],
    half_life: Nanos,
    last_update: Option<Time>,
    /// The time between the last two updates and the decay factor over it.
    decay: (Nanos, f64),
    ratio: f64,
    /// The cut in force: the one the last update drew, or a line drawn at since
    /// ([`PriorityCutoff::draw_at`]).
    cut: Cut,
    /// The cut the last update drew on this histogram.
    drawn: Cut,
    /// Largest share per second by which the line of [`PriorityCutoff::excludes`] may move
    /// back toward the less important ranks (infinite: it follows the ratio).
    fall_rate: f64,
    /// The ratio behind that line: the current one, or a recent higher one still falling.
    held: f64,
    held_cut: Cut,
    /// Error-diffusion accumulator for the partial rank: a rejection each time it reaches 1.
    carry: f64,
    /// With [`PriorityCutoff::with_held_ranks`]: per rank, what it counted when the cut took
    /// it in full (0: none), and the lowest rank the cut takes in full (`RANKS`: none).
    floors: Option<(Box<[f64; RANKS]>, usize)>,
}

impl PriorityCutoff {
    /// A cut-off whose histogram forgets half of its weight every `half_life` (at least 1 ns).
    pub fn new(half_life: Nanos) -> PriorityCutoff {
        PriorityCutoff {
            counts: Box::new([0.0; RANKS]),
            seen: [0; SEEN_WORDS],
            half_life: half_life.max(Nanos::from_nanos(1)),
            last_update: None,
            decay: (Nanos::ZERO, 1.0),
            ratio: 0.0,
            cut: Cut::Nothing,
            drawn: Cut::Nothing,
            fall_rate: f64::INFINITY,
            held: 0.0,
            held_cut: Cut::Nothing,
            carry: 0.0,
            floors: None,
        }
    }

    /// The gate's callers hold back the ranks it cuts (the `tidegate-cutoff` header): count
    /// each such rank at least as it counted when the cut first took it in full, until its
    /// own arrivals are back to that (see the module docs). Without callers that do, the
    /// held ranks keep arriving and their floors go as soon as they are met.
    pub fn with_held_ranks(mut self) -> PriorityCutoff {
        self.floors = Some((Box::new([0.0; RANKS]), RANKS));
        self
    }

    /// The count the cut is drawn over: the arrivals', or a held rank's floor.
    fn count(&self, rank: usize) -> f64 {
        match &self.floors {
            Some((floors, _)) => self.counts[rank].max(floors[rank]),
            None => self.counts[rank],
        }
    }

    /// Whole tiers excluded by [`PriorityCutoff::excludes`] follow a rising ratio at once but
    /// a falling one by at most `per_second` of the traffic per second (Cinnamon's "fast to
    /// rise, slow to fall"): a controller's ratio jitters around its mean, and where the
    /// mean is just past a tier boundary each dip would let the less important tier in
    /// again. Within a tier the line follows the ratio both ways (holding it there would
    /// shed more cohorts than the ratio asks: 40% instead of 33% in PIE's test of 1,500/s
    /// into 1,000), and so does the draw of [`PriorityCutoff::should_reject`].
    pub fn with_fall_rate(mut self, per_second: f64) -> PriorityCutoff {
        self.fall_rate = if per_second.is_nan() {
            f64::INFINITY
        } else {
            per_second.max(0.0)
        };
        self
    }

    /// Counts an arrival of this rank (every arrival, whether or not it is then rejected: the
    /// ratio is a share of all arrivals). Ranks past 767 count as 767.
    pub fn record(&mut self, rank: u16) {
        let rank = usize::from(rank).min(RANKS - 1);
        self.counts[rank] += 1.0;
        self.seen[rank / 64] |= 1 << (rank % 64);
    }

    /// The sum of the counts, added in rank order (the ranks never seen count zero, and
    /// adding a zero changes no sum of counts, so this is the sum over all 768).
    fn total(&self) -> f64 {
        let mut total = 0.0;
        if self.floors.is_some() {
            for (word, &bits) in self.seen.iter().enumerate() {
                SetBits(bits).for_each(|bit| total += self.count(word * 64 + bit));
            }
            return total;
        }
        for (block, &bits) in self.counts.chunks_exact(64).zip(&self.seen) {
            if bits == u64::MAX {
                // All seen (traffic over every cohort of a tier): a plain loop is cheaper.
                block.iter().for_each(|count| total += count);
            } else {
                SetBits(bits).for_each(|bit| total += block[bit]);
            }
        }
        total
    }

    /// Decays the histogram to `now` and moves the cut-off so that `ratio` (clamped to
    /// `[0, 1]`) of the recent arrivals, the least important first, would be rejected.
    pub fn update(&mut self, now: Time, ratio: f64) {
        let mut elapsed = 0.0;
        if let Some(last) = self.last_update {
            let since = now - last;
            elapsed = since.as_secs_f64();
            // A regulator updates at a fixed interval: the factor of the last one is usually
            // the factor again, without the `powf`.
            if since != self.decay.0 {
                self.decay = (since, 0.5f64.powf(elapsed / self.half_life.as_secs_f64()));
            }
            let factor = self.decay.1;
            // The factor is finite, so the counts of the ranks never seen stay zero: only the
            // blocks of 64 ranks with one seen need decaying. All of a block at once, which
            // the compiler vectorizes, is faster than picking out its seen ranks when most
            // are, as in traffic spread over tiers and cohorts; a block with one (traffic of
            // one priority, or of one cohort per tier) decays only that one.
            for (block, &bits) in self.counts.chunks_exact_mut(64).zip(&self.seen) {
                if bits & bits.wrapping_sub(1) == 0 {
                    // One rank seen in the block, or none (counting the bits costs a dozen
                    // instructions on the baseline x86-64 target, which has no `popcnt`).
                    if bits != 0 {
                        block[bits.trailing_zeros() as usize] *= factor;
                    }
                } else {
                    block.iter_mut().for_each(|c| *c *= factor);
                }
            }
        }
        self.last_update = Some(now);
        self.ratio = unit(ratio);
        let fallen = if self.fall_rate.is_infinite() {
            0.0
        } else {
            self.held - self.fall_rate * elapsed
        };
        self.held = self.ratio.max(fallen);
        // One sum of the counts and one walk down the ranks serve both lines: the held one,
        // when higher, is further down the same walk.
        let total = if self.ratio > 0.0 && self.ratio < 1.0 || self.held > 0.0 && self.held < 1.0 {
            self.total()
        } else {
            0.0
        };
        (self.cut, self.held_cut) = self.find_cuts(total, self.ratio, self.held);
        self.drawn = self.cut;
        self.hold_ranks();
    }

    /// With [`PriorityCutoff::with_held_ranks`]: gives the ranks the cut newly takes in full
    /// their floor, and drops the floors their arrivals have met. The callers hold back the
    /// rank the line is drawn through too (the header names the one before it).
    fn hold_ranks(&mut self) {
        let from = self.cutoff_rank().map_or(RANKS, usize::from);
        let Some((floors, held_from)) = self.floors.as_mut() else {
            return;
        };
        // A floor goes once its rank's arrivals are back to it (or never left: callers that
        // do not hold back), before the newly held ranks get theirs.
        for (floor, &count) in floors.iter_mut().zip(self.counts.iter()) {
            if count >= *floor {
                *floor = 0.0;
            }
        }
        for rank in from..*held_from {
            floors[rank] = floors[rank].max(self.counts[rank]);
        }
        *held_from = from;
    }

    /// The cuts for `ratio` and for `held` (not below it), of counts summing to `total`.
    fn find_cuts(&self, total: f64, ratio: f64, held: f64) -> (Cut, Cut) {
        let bound = |ratio: f64| {
            if ratio <= 0.0 {
                Some(Cut::Nothing)
            } else if ratio >= 1.0 {
                Some(Cut::Everything)
            } else if total <= f64::MIN_POSITIVE {
                Some(Cut::Uniform(self.ratio))
            } else {
                None
            }
        };
        let (mut cut, mut held_cut) = (bound(ratio), bound(held));
        let mut lowest_seen = None;
        if cut.is_none() || held_cut.is_none() {
            let held_target = held * total;
            // The walk looks for one target at a time: the ratio's, then the held line's (not
            // below it), at the same rank again and further down, as two walks would.
            let mut target = if cut.is_none() {
                ratio * total
            } else {
                held_target
            };
            let mut above = 0.0;
            let mut visit = |rank: usize| {
                let count = self.count(rank);
                if count <= 0.0 {
                    return ControlFlow::Continue(());
                }
                // `rank < RANKS = 768`, so it fits.
                let rank = rank as u16;
                let reached = above + count;
                while reached >= target {
                    let line = Cut::Rank {
                        rank,
                        fraction: ((target - above) / count).clamp(0.0, 1.0),
                    };
                    if cut.is_none() {
                        cut = Some(line);
                    } else {
                        held_cut = Some(line);
                    }
                    if held_cut.is_some() {
                        return ControlFlow::Break(());
                    }
                    target = held_target;
                }
                above = reached;
                lowest_seen = Some(rank);
                ControlFlow::Continue(())
            };
            for (word, &bits) in self.seen.iter().enumerate().rev() {
                let first = word * 64;
                let walked = if bits == u64::MAX {
                    (first..first + 64).rev().try_for_each(&mut visit)
                } else {
                    SetBits(bits).rev().try_for_each(|bit| visit(first + bit))
                };
                if walked.is_break() {
                    break;
                }
            }
        }
        // Rounding kept the sum just short of a target: cut everything seen.
        let everything_seen = |ratio: f64| {
            lowest_seen.map_or(Cut::Uniform(ratio), |rank| Cut::Rank {
                rank,
                fraction: 1.0,
            })
        };
        (
            cut.unwrap_or_else(|| everything_seen(ratio)),
            held_cut.unwrap_or_else(|| everything_seen(held)),
        )
    }

    /// Whether to reject an arrival of this rank under the current cut-off.
    pub fn should_reject(&mut self, rank: u16) -> bool {
        match self.cut {
            Cut::Nothing => false,
            Cut::Everything => true,
            Cut::Uniform(fraction) => self.draw(fraction),
            Cut::Rank {
                rank: cut,
                fraction,
            } => rank > cut || (rank == cut && self.draw(fraction)),
        }
    }

    /// Whether this rank lies wholly beyond the cut-off: less important than the rank the
    /// line is drawn through, or in a tier less important than the held line's (see
    /// [`PriorityCutoff::with_fall_rate`]). Such a rank is being shed in full, so a
    /// regulator that admits some arrivals without consulting the cut-off (PIE's
    /// safeguards) still turns it away; the rank at the line, shed only in part, is not
    /// excluded. Nothing is excluded when nothing or everything is cut, or before any
    /// history.
    pub fn excludes(&self, rank: u16) -> bool {
        let tier = |r: u16| r / u16::from(COHORTS);
        let beyond_line = matches!(self.cut, Cut::Rank { rank: cut, .. } if rank > cut);
        let beyond_held_tier =
            matches!(self.held_cut, Cut::Rank { rank: cut, .. } if tier(rank) > tier(cut));
        beyond_line || beyond_held_tier
    }

    fn draw(&mut self, fraction: f64) -> bool {
        self.carry += fraction;
        if self.carry >= 1.0 {
            self.carry -= 1.0;
            true
        } else {
            false
        }
    }

    /// The ratio of the last update.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    /// Whether the line of [`PriorityCutoff::excludes`] may still exclude a rank: the ratio,
    /// or a recent higher one still falling, is above zero.
    pub fn holding(&self) -> bool {
        self.held > 0.0
    }

    /// Where the line the last update drew lies, as a position among the ranks: rank `r`
    /// spans `[r, r + 1)`, and the line at `x` rejects what lies above `x`, so a cut through
    /// rank `r` that rejects `fraction` of it lies at `r + 1 - fraction`, a cut of everything
    /// at 0 and a cut of nothing at [`RANKS`]. `None` before any history. Gates whose lines
    /// lie at the same position shed the same cohorts whatever the mix of their traffic; the
    /// same ratio over two gates' histograms does not (a tier's share counted on a few
    /// hundred arrivals is a few points off either way, a dozen cohorts).
    pub fn line(&self) -> Option<f64> {
        self.drawn.position()
    }

    /// Puts the line in force at `line`, a position as [`PriorityCutoff::line`] gives it,
    /// until the next update: the peers' mean line, drawn where theirs are (see
    /// `PieConfig::line_at_peers`). The line this gate's own update drew stays what
    /// [`PriorityCutoff::line`] says. The line the tiers are held at
    /// ([`PriorityCutoff::with_fall_rate`]) is this one too: held at this gate's own ratio,
    /// it would exclude the tiers past its own line, not past the peers'.
    pub fn draw_at(&mut self, line: f64) {
        self.cut = Cut::at(line);
        self.held_cut = self.cut;
    }

    /// Whether the line in force rejects anything (a line drawn at the peers' may, while
    /// this gate's own ratio is zero).
    pub fn cutting(&self) -> bool {
        self.cut != Cut::Nothing
    }

    /// The least important rank still (at least partly) admitted; ranks above it are all
    /// rejected. `None` when nothing is cut off by rank (no shedding, or no history yet).
    pub fn cutoff_rank(&self) -> Option<u16> {
        let rank = |cut: Cut| match cut {
            Cut::Nothing | Cut::Uniform(_) => None,
            Cut::Everything => Some(0),
            Cut::Rank { rank, .. } => Some(rank),
        };
        rank(self.cut)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::priority::Priority;
    use crate::rng::Rng;

    fn rank(tier: u32, cohort: u32) -> u16 {
        Priority::new(tier, cohort).expect("valid").rank()
    }

    /// Records `n` arrivals drawn by `draw`, updates with `ratio`, then offers `n` more from
    /// the same mix and returns the rejected share and the rejections per rank.
    fn shed(ratio: f64, n: usize, mut draw: impl FnMut() -> u16) -> (f64, Vec<u32>) {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(3600));
        for _ in 0..n {
            cutoff.record(draw());
        }
        cutoff.update(Time::ZERO, ratio);
        let mut rejected = vec![0u32; RANKS];
        for _ in 0..n {
            let r = draw();
            cutoff.record(r);
            if cutoff.should_reject(r) {
                rejected[usize::from(r)] += 1;
            }
        }
        let share = rejected.iter().sum::<u32>() as f64 / n as f64;
        (share, rejected)
    }

    #[test]
    fn a_line_drawn_at_its_own_position_cuts_as_the_update_did() {
        // A cut through a rank, nothing, everything: drawn again at the position `line`
        // gives, the same ranks and the same share of the rank it cuts through.
        let mut rng = Rng::seed(9);
        let mut draw = || {
            rank(
                2 + rng.range_inclusive(0, 3) as u32,
                rng.range_inclusive(0, 127) as u32,
            )
        };
        let arrivals: Vec<u16> = (0..20_000).map(|_| draw()).collect();
        for ratio in [0.0, 0.37, 0.5, 1.0] {
            let mut drawn = PriorityCutoff::new(Nanos::from_secs(3600));
            arrivals.iter().for_each(|&r| drawn.record(r));
            drawn.update(Time::ZERO, ratio);
            let mut redrawn = drawn.clone();
            let line = drawn.line().expect("a history");
            redrawn.draw_at(line);
            assert_eq!(redrawn.cutoff_rank(), drawn.cutoff_rank(), "ratio {ratio}");
            let at = redrawn.cut.position().expect("a line");
            assert!((at - line).abs() < 1e-9, "ratio {ratio}: {at} for {line}");
            // The own line is still the update's.
            assert_eq!(redrawn.line(), Some(line));
        }
    }

    #[test]
    fn gates_at_the_same_position_cut_the_same_ranks_whatever_their_mix() {
        // Two gates see different counts of the same tiers (a few hundred arrivals each:
        // tier 2's share 20% at one, 26% at the other). At the same ratio their lines lie
        // apart by several cohorts of tier 2; drawn at the mean of their positions, both
        // turn away exactly the ranks past it.
        let mut rng = Rng::seed(3);
        let mut gates = [0.20, 0.26].map(|tier_2| {
            let mut cutoff = PriorityCutoff::new(Nanos::from_secs(3600));
            for _ in 0..600 {
                let tier = if rng.chance(tier_2) {
                    2
                } else {
                    3 + rng.range_inclusive(0, 2) as u32
                };
                cutoff.record(rank(tier, rng.range_inclusive(0, 127) as u32));
            }
            cutoff.update(Time::ZERO, 0.65);
            cutoff
        });
        let lines = gates.each_ref().map(|g| g.line().expect("a history"));
        assert!((lines[0] - lines[1]).abs() > 8.0, "{lines:?}");
        let mean = (lines[0] + lines[1]) / 2.0;
        gates.iter_mut().for_each(|g| g.draw_at(mean));
        assert_eq!(gates[0].cutoff_rank(), gates[1].cutoff_rank());
        let through = gates[0].cutoff_rank().expect("a cut");
        for r in [through - 1, through + 1, rank(5, 0)] {
            assert_eq!(
                gates[0].should_reject(r),
                gates[1].should_reject(r),
                "rank {r}"
            );
        }
        // Past the ends: nothing, everything.
        gates[0].draw_at(RANKS as f64);
        assert!(!gates[0].cutting() && !gates[0].should_reject(rank(5, 127)));
        gates[0].draw_at(0.0);
        assert!(gates[0].should_reject(rank(0, 0)));
    }

    #[test]
    fn single_priority_traffic_gets_the_exact_share() {
        for ratio in [0.0, 0.013, 0.25, 0.5, 0.9, 1.0] {
            let (share, rejected) = shed(ratio, 10_000, || rank(3, 0));
            assert!(
                (share - ratio).abs() <= 1e-4,
                "ratio {ratio}: rejected {share}"
            );
            assert_eq!(
                rejected.iter().filter(|&&r| r > 0).count(),
                usize::from(ratio > 0.0)
            );
        }
    }

    #[test]
    fn mixed_traffic_gets_the_share_and_loses_its_least_important_first() {
        // Cinnamon's experiment: half tier 1, half tier 5, cohorts uniform.
        let mut rng = Rng::seed(5);
        let mut draw = || {
            let tier = if rng.chance(0.5) { 1 } else { 5 };
            rank(tier, rng.range_inclusive(0, 127) as u32)
        };
        let (share, rejected) = shed(0.3, 100_000, &mut draw);
        assert!((share - 0.3).abs() < 0.01, "{share}");
        let tier_rejections =
            |tier: usize| rejected[tier * 128..(tier + 1) * 128].iter().sum::<u32>();
        assert_eq!(
            tier_rejections(1),
            0,
            "tier 1 is untouched while tier 5 has room to give"
        );
        // 30% of all is 60% of tier 5: its cohorts ~51..127, the high cohorts first.
        let tier5 = &rejected[5 * 128..6 * 128];
        assert!(
            tier5[127] > 0 && tier5[60] > 0 && tier5[40] == 0 && tier5[0] == 0,
            "{tier5:?}"
        );
        let first_cut = tier5.iter().position(|&r| r > 0).expect("some rejected");
        assert!(
            tier5[first_cut + 1..].iter().all(|&r| r > 0),
            "contiguous from the top"
        );

        // Past tier 5, tier 1 goes too, again from its high cohorts.
        let (share, rejected) = shed(0.75, 100_000, &mut draw);
        assert!((share - 0.75).abs() < 0.01, "{share}");
        assert!(rejected[5 * 128..].iter().all(|&r| r > 0), "all of tier 5");
        let tier1 = &rejected[128..256];
        assert!(tier1[127] > 0 && tier1[0] == 0, "{tier1:?}");
    }

    #[test]
    fn empty_ranks_above_the_cut_are_rejected_below_are_not() {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(1));
        for _ in 0..100 {
            cutoff.record(rank(2, 0));
            cutoff.record(rank(4, 0));
        }
        cutoff.update(Time::ZERO, 0.5);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(4, 0)));
        assert!(
            cutoff.should_reject(rank(5, 0)),
            "unseen and less important"
        );
        assert!(cutoff.should_reject(rank(4, 1)));
        assert!(
            !cutoff.should_reject(rank(3, 127)),
            "unseen but more important"
        );
        assert!(!cutoff.should_reject(rank(2, 0)));
    }

    #[test]
    fn only_ranks_wholly_beyond_the_line_are_excluded() {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(1));
        assert!(!cutoff.excludes(rank(5, 127)), "no history, nothing cut");
        for _ in 0..100 {
            cutoff.record(rank(1, 0));
            cutoff.record(rank(5, 0));
        }
        cutoff.update(Time::ZERO, 0.25);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(5, 0)));
        assert!(
            !cutoff.excludes(rank(5, 0)),
            "the rank at the line is shed in part"
        );
        assert!(cutoff.excludes(rank(5, 1)));
        assert!(!cutoff.excludes(rank(1, 0)));
        cutoff.update(Time::ZERO, 0.75);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(1, 0)));
        assert!(
            cutoff.excludes(rank(5, 0)),
            "all of tier 5 is beyond the line now"
        );
        cutoff.update(Time::ZERO, 1.0);
        assert!(
            !cutoff.excludes(rank(5, 0)),
            "everything is cut by the draw, not excluded"
        );
        cutoff.update(Time::ZERO, 0.0);
        assert!(!cutoff.excludes(rank(5, 127)));
    }

    #[test]
    fn a_held_line_rises_at_once_and_falls_slowly_for_exclusion_only() {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(3600)).with_fall_rate(0.1);
        for _ in 0..100 {
            cutoff.record(rank(1, 0));
            cutoff.record(rank(5, 0));
        }
        let at = |ms| Time::ZERO + Nanos::from_millis(ms);
        cutoff.update(at(0), 0.6);
        assert!(cutoff.excludes(rank(5, 0)));
        // The ratio dips into tier 5: the draw follows it at once, the exclusion does not.
        cutoff.update(at(100), 0.45);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(5, 0)));
        assert!(cutoff.excludes(rank(5, 0)), "held at 0.59");
        // 0.1 a second: the held line is at 0.5 a second after the peak, then follows the
        // ratio once it is the higher.
        cutoff.update(at(900), 0.45);
        assert!(cutoff.excludes(rank(5, 0)), "held at 0.51");
        cutoff.update(at(1_100), 0.45);
        assert!(!cutoff.excludes(rank(5, 0)), "held at 0.49");
        assert!(cutoff.holding());
        cutoff.update(at(6_000), 0.0);
        assert!(!cutoff.holding());
        // Only whole tiers are held: within the held line's tier, cohorts come back with
        // the ratio at once.
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(3600)).with_fall_rate(0.1);
        for _ in 0..100 {
            cutoff.record(rank(1, 0));
            cutoff.record(rank(1, 64));
            cutoff.record(rank(5, 0));
        }
        cutoff.update(at(0), 0.6);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(1, 64)));
        assert!(cutoff.excludes(rank(1, 100)));
        cutoff.update(at(100), 0.3);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(5, 0)));
        assert!(cutoff.excludes(rank(5, 0)), "tier 5 is held out");
        assert!(
            !cutoff.excludes(rank(1, 100)),
            "tier 1's cohorts follow the ratio"
        );
        // Without a fall rate the line follows the ratio both ways.
        let mut plain = PriorityCutoff::new(Nanos::from_secs(3600));
        for _ in 0..100 {
            plain.record(rank(1, 0));
            plain.record(rank(5, 0));
        }
        plain.update(at(0), 0.6);
        plain.update(at(100), 0.45);
        assert!(!plain.excludes(rank(5, 0)));
    }

    #[test]
    fn no_history_sheds_uniformly_and_extremes_are_absolute() {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(1));
        cutoff.update(Time::ZERO, 0.25);
        assert_eq!(cutoff.cutoff_rank(), None);
        let rejected = (0..1000)
            .filter(|i| cutoff.should_reject((i % 768) as u16))
            .count();
        assert_eq!(rejected, 250);
        cutoff.update(Time::ZERO, 1.5);
        assert_eq!(cutoff.ratio(), 1.0);
        assert!(
            cutoff.should_reject(0),
            "ratio 1 rejects even the most important"
        );
        cutoff.update(Time::ZERO, f64::NAN);
        assert!(!cutoff.should_reject(767), "NaN is no shedding");
    }

    /// The cut for `ratio` as the plain walk over all 768 ranks finds it, for the test below.
    fn cut_over_all_ranks(cutoff: &PriorityCutoff, ratio: f64) -> Cut {
        if ratio <= 0.0 {
            return Cut::Nothing;
        }
        if ratio >= 1.0 {
            return Cut::Everything;
        }
        let total: f64 = cutoff.counts.iter().sum();
        if total <= f64::MIN_POSITIVE {
            return Cut::Uniform(ratio);
        }
        let target = ratio * total;
        let mut above = 0.0;
        for (rank, &count) in cutoff.counts.iter().enumerate().rev() {
            if count > 0.0 && above + count >= target {
                let fraction = ((target - above) / count).clamp(0.0, 1.0);
                return Cut::Rank {
                    rank: rank as u16,
                    fraction,
                };
            }
            above += count;
        }
        let lowest = cutoff.counts.iter().position(|&c| c > 0.0);
        lowest.map_or(Cut::Uniform(ratio), |rank| Cut::Rank {
            rank: rank as u16,
            fraction: 1.0,
        })
    }

    /// Decaying and visiting only the ranks seen gives the counts of decaying all 768 and the
    /// cuts (the ratio's and the held line's) of a walk over all 768 for each, to the bit, for
    /// sparse and dense mixes, decays and ratios.
    #[test]
    fn the_seen_ranks_give_the_cut_of_all_ranks() {
        let mut rng = Rng::seed(3);
        for mix in [1, 2, 12, 300, 700, RANKS] {
            let mut cutoff = PriorityCutoff::new(Nanos::from_millis(700)).with_fall_rate(0.5);
            // 768: every rank, so that whole blocks of 64 are seen (the plain loops).
            let ranks: Vec<u16> = if mix == RANKS {
                (0..RANKS as u16).collect()
            } else {
                (0..mix)
                    .map(|_| rng.range_inclusive(0, RANKS as i64 - 1) as u16)
                    .collect()
            };
            // The histogram as decaying all 768 counters keeps it.
            let mut all_ranks = [0.0f64; RANKS];
            let mut now = Time::ZERO;
            let mut last = None;
            let mut partial = 0;
            let mut held = 0;
            for _ in 0..300 {
                for _ in 0..rng.range_inclusive(0, 40) {
                    let rank = ranks[rng.range_inclusive(0, mix as i64 - 1) as usize];
                    cutoff.record(rank);
                    all_ranks[usize::from(rank)] += 1.0;
                }
                // Half at a regulator's fixed interval (the decay factor of the last update
                // again), half at random.
                let step = if rng.next_f64() < 0.5 {
                    15
                } else {
                    rng.range_inclusive(0, 400) as u64
                };
                now += Nanos::from_millis(step);
                if let Some(last) = last {
                    let elapsed = (now - last).as_secs_f64();
                    let factor = 0.5f64.powf(elapsed / Nanos::from_millis(700).as_secs_f64());
                    all_ranks.iter_mut().for_each(|c| *c *= factor);
                }
                last = Some(now);
                cutoff.update(now, rng.next_f64() * 1.2 - 0.1);
                let bits = |counts: &[f64]| counts.iter().map(|c| c.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&cutoff.counts[..]), bits(&all_ranks), "mix {mix}");
                let bits_of = |cut: Cut| match cut {
                    Cut::Rank { rank, fraction } => Some((rank, fraction.to_bits())),
                    _ => None,
                };
                let expected = cut_over_all_ranks(&cutoff, cutoff.ratio);
                assert_eq!(cutoff.cut, expected, "mix {mix}");
                assert_eq!(bits_of(cutoff.cut), bits_of(expected), "mix {mix}");
                partial +=
                    usize::from(matches!(cutoff.cut, Cut::Rank { fraction, .. } if fraction < 1.0));
                if cutoff.held > cutoff.ratio {
                    held += 1;
                    let expected = cut_over_all_ranks(&cutoff, cutoff.held);
                    // With no history the held line is the ratio's uniform draw.
                    if !matches!(expected, Cut::Uniform(_)) {
                        assert_eq!(cutoff.held_cut, expected, "mix {mix}");
                        assert_eq!(bits_of(cutoff.held_cut), bits_of(expected), "mix {mix}");
                    }
                } else {
                    assert_eq!(cutoff.held_cut, cutoff.cut, "mix {mix}");
                }
            }
            assert!(partial > 100, "mix {mix}: the fractions were compared");
            assert!(held > 20, "mix {mix}: {held} held lines were compared");
        }
    }

    #[test]
    fn set_bits_both_ways() {
        let word = 1 | 1 << 5 | 1 << 63;
        assert_eq!(SetBits(word).collect::<Vec<_>>(), [0, 5, 63]);
        assert_eq!(SetBits(word).rev().collect::<Vec<_>>(), [63, 5, 0]);
        assert_eq!(SetBits(0).next(), None);
    }

    #[test]
    fn history_decays_so_the_cut_follows_a_change_of_mix() {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(1));
        for _ in 0..1000 {
            cutoff.record(rank(5, 0));
        }
        cutoff.update(Time::ZERO, 0.5);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(5, 0)));
        // Ten half-lives later the old tier-5 traffic weighs ~1 arrival; now all is tier 0.
        let later = Time::ZERO + Nanos::from_secs(10);
        cutoff.update(later, 0.5);
        for _ in 0..1000 {
            cutoff.record(rank(0, 0));
        }
        cutoff.update(later, 0.5);
        assert_eq!(cutoff.cutoff_rank(), Some(rank(0, 0)));
    }

    /// Five seconds of 1,000 arrivals a second over tiers 1-5 into a gate cutting `ratio` of
    /// its arrivals (a controller settled at its share), its cut updated every 15 ms (after
    /// five seconds of the same traffic uncut, the first time); with `callers_hold_back`,
    /// the callers drop before sending every rank from the cut-off rank on (what its header
    /// tells them). Returns the share of the offered ranks at or past the final cut-off: what
    /// the callers and the gate together refuse.
    fn refused_share(cutoff: &mut PriorityCutoff, ratio: f64, callers_hold_back: bool) -> f64 {
        let mut rng = Rng::seed(21);
        let mut draw = || {
            rank(
                1 + rng.range_inclusive(0, 4) as u32,
                rng.range_inclusive(0, 127) as u32,
            )
        };
        let warm = cutoff.last_update.is_none();
        let mut now = cutoff.last_update.unwrap_or(Time::ZERO);
        for step in 0..(10_000 / 15) {
            let ratio = if warm && step < 5_000 / 15 {
                0.0
            } else {
                ratio
            };
            for _ in 0..15 {
                let r = draw();
                let held = callers_hold_back && cutoff.cutoff_rank().is_some_and(|c| r >= c);
                if !held {
                    cutoff.record(r);
                }
            }
            now += Nanos::from_millis(15);
            cutoff.update(now, ratio);
        }
        let cut = cutoff.cutoff_rank().expect("cutting");
        (0..100_000).filter(|_| draw() >= cut).count() as f64 / 100_000.0
    }

    #[test]
    fn with_held_ranks_the_line_is_a_level_not_a_ratchet() {
        // Callers that hold back what the gate cuts: over arrivals alone, each cut is a share
        // of what still comes, deeper than the last: in five seconds, most of it is refused.
        let ratchet = refused_share(&mut PriorityCutoff::new(Nanos::from_secs(1)), 0.3, true);
        assert!(ratchet > 0.7, "{ratchet}");
        // Counting the held ranks as they were, the line stays at 30% of the traffic.
        let mut level = PriorityCutoff::new(Nanos::from_secs(1)).with_held_ranks();
        let share = refused_share(&mut level, 0.3, true);
        assert!((share - 0.3).abs() < 0.03, "{share}");
    }

    #[test]
    fn with_held_ranks_callers_that_hold_back_nothing_get_the_same_line() {
        let plain = refused_share(&mut PriorityCutoff::new(Nanos::from_secs(1)), 0.3, false);
        let mut level = PriorityCutoff::new(Nanos::from_secs(1)).with_held_ranks();
        let held = refused_share(&mut level, 0.3, false);
        assert!((plain - 0.3).abs() < 0.03, "{plain}");
        assert!((held - plain).abs() < 0.01, "{held} against {plain}");
    }

    #[test]
    fn with_held_ranks_the_level_moves_back_up_as_the_ratio_falls() {
        let mut cutoff = PriorityCutoff::new(Nanos::from_secs(1)).with_held_ranks();
        refused_share(&mut cutoff, 0.5, true);
        let deep = cutoff.cutoff_rank().expect("cutting");
        // The controller's share falls to 20%: the callers, told the higher line, send the
        // ranks between again, and the line settles at 20% of the traffic.
        let share = refused_share(&mut cutoff, 0.2, true);
        assert!(cutoff.cutoff_rank().expect("cutting") > deep);
        assert!((share - 0.2).abs() < 0.03, "{share}");
    }
}

//! Cinnamon's arbitration: the elasticity of throughput to inflight over a ring of windows
//! says whether the latency rule's baseline can be trusted (a reset where concurrency buys
//! nothing, a re-anchoring where it buys throughput in proportion), and each reset is judged
//! by what it cost.

use super::trial::{JUDGED_STEP, Span, TRIAL_EVIDENCE, one_request_is_judged};
use super::{Autotune, Move};

/// Windows per covariance check (about 5 s at the default 500 ms window).
pub(super) const RING: usize = 10;

/// A closed window, as the covariance check reads it.
#[derive(Clone, Copy, Debug)]
pub(super) struct RingWindow {
    /// `ln` of its mean inflight.
    pub(super) ln_inflight: f64,
    /// `ln` of its throughput.
    pub(super) ln_throughput: f64,
    pub(super) moved: Move,
    /// Whether its largest inflight reached the limit.
    pub(super) bound: bool,
    /// Its successes: the noise of its throughput.
    pub(super) successes: u32,
}

impl RingWindow {
    pub(super) const EMPTY: RingWindow = RingWindow {
        ln_inflight: 0.0,
        ln_throughput: 0.0,
        moved: Move::Hold,
        bound: false,
        successes: 0,
    };
}

/// A reset of the covariance check, until a whole span at the limit it set judges it by the
/// throughput it cost (see [`Autotune::judge_reset`]).
#[derive(Clone, Copy, Debug)]
pub(super) struct ResetCheck {
    /// The limit before it.
    pub(super) from: f64,
    /// The ring's windows where the limit bound and latency saw no queue, before it.
    pub(super) before: Span,
    /// The measured windows since, each bound.
    pub(super) after: Span,
}

impl Autotune {
    /// Elasticity of throughput to inflight over the ring, if inflight varied enough to tell.
    pub(super) fn elasticity(&self) -> Option<f64> {
        let points = &self.ring[..self.filled];
        let n = points.len() as f64;
        let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.ln_inflight), hi.max(p.ln_inflight))
        });
        if points.len() < 3 || hi - lo < 1.15f64.ln() {
            return None;
        }
        let mq = points.iter().map(|p| p.ln_inflight).sum::<f64>() / n;
        let mx = points.iter().map(|p| p.ln_throughput).sum::<f64>() / n;
        let cov = points
            .iter()
            .map(|p| (p.ln_inflight - mq) * (p.ln_throughput - mx))
            .sum::<f64>();
        let var = points
            .iter()
            .map(|p| (p.ln_inflight - mq) * (p.ln_inflight - mq))
            .sum::<f64>();
        Some(cov / var)
    }

    /// The covariance arbitration, once the ring is full.
    pub(super) fn arbitrate(&mut self) {
        let moves = |m: Move| self.ring.iter().filter(|p| p.moved == m).count();
        let (grew, shrank) = (moves(Move::Grow), moves(Move::Shrink));
        let elasticity = self.elasticity();
        // Concurrency is read as paying only where the limit bound: while demand ramps up
        // under it, throughput follows inflight because the demand grew, not because
        // concurrency pays (Kanaloa's ramp read that way sent the limit to 42 for a knee of
        // 20 once the overload came).
        let limit_bound = self.ring.iter().filter(|p| p.bound).count() * 2 > RING;
        if let Some(e) = elasticity {
            if e > self.config.high_elasticity && limit_bound {
                self.elastic = true;
            } else if e < self.config.low_elasticity {
                self.elastic = false;
            }
        }
        match elasticity {
            Some(e) if grew * 2 > RING && e < self.config.low_elasticity => {
                // No deeper than the ring's evidence (see `best_served_at`): where it
                // bracketed the knee, concurrency above the least that served its best buys
                // nothing, and below it served less. Halving took exponential work at a
                // knee of 30 with contention (a step to 1.5x, seed 2) from 34.5 to 18, on a
                // ring whose best throughput came at 26-32 in flight and whose low
                // elasticity was slow start's windows (15 and 20 in flight before the step,
                // an overshoot to 55): growth after a reset is `log10(limit)` a window, and
                // the limit stayed at 18-20 for the rest of the run (75% of the capacity
                // served; reset to 25.6, 88%). Where nothing brackets the knee (from far
                // above it, every window on the plateau), the reset halves: stopped at the
                // ring's least window, a descent from 200 took resets from 148 to 75 and 93
                // to 78, and probes alone the rest (still 78 after 21 s).
                let deepest = self.limit * self.config.reset_factor.clamp(0.0, 1.0);
                self.reset = Some(ResetCheck {
                    from: self.limit,
                    before: self.ring_bound,
                    after: Span::default(),
                });
                self.limit = self
                    .best_served_at()
                    .map_or(deepest, |level| level.clamp(deepest, self.limit));
                self.forget_served();
                self.base = None;
                self.srtt = None;
                self.shrunk = None;
                self.settling = true;
                self.idle_probes = 0;
            }
            // Only where the limit bound as well: constant work at a knee of 10 stepped to
            // 3x from half its capacity (the sweep's seed 7) closed a ring of eight windows
            // at half load, their throughput following the demand, and two shrinks after
            // the step; read as concurrency paying, it re-anchored the baseline on the
            // smoothed rtt, half an unloaded window and half a queued one (145 ms for 100 ms
            // of work), and the limit held 19 for the 10 workers to the end of the run,
            // probing 14 every 25 s. Without the re-anchoring it settles at 13.
            Some(e) if shrank > grew && e > self.config.high_elasticity && limit_bound => {
                self.anchor();
                self.idle_probes = 0;
            }
            Some(_) => {}
            // A clear baseline (see `Baseline`) has nothing for a probe to find: at the
            // knee, each probe cost the service a second at 3/4 of its limit, 10% of its
            // throughput in that second, and moved the limit out of its band. Probes of one
            // request at small limits are trials of the limit itself, and go on.
            None if self.base.is_some_and(|b| b.clear)
                && !one_request_is_judged(self.limit.round()) => {}
            // Nor has a small limit that a probe already showed to be the knee, while its
            // rtt stays at the baseline (see `Autotune::at_the_knee`).
            None if self.at_the_knee() => {}
            None => {
                // Too steady to tell: dip for one window, as BBR's ProbeRTT does, so that the
                // baseline sees a lighter load and the next check has a spread to judge.
                // Probes that found nothing come at doubling intervals (up to 16 rings): at
                // the knee each costs a window at 3/4 of the limit and one not measured,
                // a fifth of the time in the capacity demo (probes every 10 windows of 3 s).
                self.steady_rings += 1;
                if self.steady_rings >= 1 << self.idle_probes {
                    self.steady_rings = 0;
                    self.start_probe();
                }
            }
        }
        self.filled = 0;
        self.ring_bound = Span::default();
    }

    /// The least mean inflight of a window of the ring whose throughput is within two
    /// standard errors (a Poisson count's, `1 / sqrt(n)` in the log, of each) of the
    /// ring's best, if a window at less concurrency where the limit bound served less (so
    /// beyond that noise): the ring saw where more concurrency stopped paying. Without such
    /// a window, the knee may be anywhere below the ring's windows.
    pub(super) fn best_served_at(&self) -> Option<f64> {
        let mut windows = self.ring[..self.filled].iter().filter(|w| w.successes > 0);
        let best = windows
            .clone()
            .max_by(|a, b| a.ln_throughput.total_cmp(&b.ln_throughput))?;
        let level = windows
            .clone()
            .filter(|w| {
                let noise = (1.0 / f64::from(w.successes) + 1.0 / f64::from(best.successes)).sqrt();
                w.ln_throughput >= best.ln_throughput - 2.0 * noise
            })
            .map(|w| w.ln_inflight)
            .min_by(f64::total_cmp)?;
        windows
            .any(|w| w.bound && w.ln_inflight < level)
            .then(|| level.exp())
    }

    /// Whether the limit in force is a small one that a probe of one request below showed
    /// to be the knee (throughput fell with it in proportion), and the smoothed rtt is still
    /// within two of its standard errors of the baseline: no queue for the next probe to
    /// find. At a small limit a probe is a trial of one request (see
    /// [`Autotune::start_probe`]); in front of a service held at its knee of 3 it cost a
    /// span at 2, a third of the throughput, and the gate's queue its wait, every 16 rings,
    /// with nothing to find. A knee that moves shows: one request past it, one answer in
    /// eight waits a whole service time at 8 for 7 workers (the rtt 12% over the baseline
    /// of a service whose work varies by 2%), and RSocket's servers answer 84% slower at 2
    /// than at 1. Not a limit no probe has judged: a baseline measured under load is at
    /// its rtt too, and only probes walk such a limit down to its knee.
    pub(super) fn at_the_knee(&self) -> bool {
        let in_force = self.limit.round();
        let at_baseline = match (self.srtt, self.base) {
            (Some(srtt), Some(base)) => srtt <= base.value + 2.0 * self.srtt_var.sqrt(),
            _ => false,
        };
        one_request_is_judged(in_force) && self.knee == Some(in_force) && at_baseline
    }

    /// Starts a trial of the limit `to`, judged against the span at the limit in force.
    /// Judges a reset once a whole span at its limit is measured, each window bound. Where
    /// the ring's windows straddled the knee without bracketing it (see `best_served_at`),
    /// halving can go far below it: the check's low elasticity came from windows past the
    /// knee, not from a baseline measured under load. If throughput then fell with inflight
    /// (an elasticity above `high_elasticity`, beyond [`TRIAL_EVIDENCE`] standard errors of
    /// its noise), the reset went below the knee, and the limit goes to where throughput
    /// scaled back up reaches what the ring served: `limit x before / after`, at most the
    /// limit before the reset. Below the knee throughput follows inflight, so that is the
    /// knee. From far above it (a descent from 200 to a knee of 20), throughput holds and the
    /// reset stands.
    pub(super) fn judge_reset(&mut self, reset: &ResetCheck) {
        let (before, after) = (&reset.before, &reset.after);
        let inflight = (before.inflight() / after.inflight().max(f64::MIN_POSITIVE)).ln();
        let gain = (before.throughput() / after.throughput().max(f64::MIN_POSITIVE)).ln();
        let ((rtt_before, var_before), (rtt_after, var_after)) = (before.rtt(), after.rtt());
        let queue_left = rtt_before - rtt_after;
        if before.whole()
            && inflight >= (1.0 + JUDGED_STEP).ln()
            && gain > self.config.high_elasticity * inflight
            && gain > TRIAL_EVIDENCE * Span::gain_noise(before, after)
            && queue_left * queue_left > 4.0 * (var_before + var_after)
            && queue_left > 0.0
        {
            self.limit = (self.limit * gain.exp()).min(reset.from);
            self.settling = true;
        }
    }
}

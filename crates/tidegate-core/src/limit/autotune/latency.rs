//! The latency rule: Vegas's comparison of the smoothed rtt with a baseline, inside
//! Cinnamon's tolerance, which shrinks the limit to what the tolerance allows and grows it
//! where latency leaves room; the drop backoff; how the baseline is anchored; and how a shrink
//! is judged by the window after it.

use super::baseline::Baseline;
use super::covariance::RING;
use super::trial::JUDGED_STEP;
use super::window::{WINDOW_PRECISION, WindowRtt};
use super::{Autotune, Move};

/// A latency shrink, as the window after it will judge it.
#[derive(Clone, Copy, Debug)]
pub(super) struct Shrink {
    /// The smoothed rtt that asked for it.
    pub(super) rtt: f64,
    /// The rtt to expect after it if the excess over the baseline was a queue, shrinking
    /// in proportion to the limit.
    pub(super) expected_rtt: f64,
    /// The variance of `rtt` as an estimate of the mean, in seconds squared.
    pub(super) variance: f64,
}

impl Autotune {
    /// Sets the baseline to the current smoothed rtt, if there is one.
    pub(super) fn anchor(&mut self) {
        // What the service kept up with before says nothing of an rtt measured now.
        self.light = None;
        self.forget_served();
        self.doubting = 0;
        self.base_in_doubt = false;
        // Seeded by a censored window only, the smoothed rtt is the short answers' mean: the
        // next window that is not censored anchors instead (see `latency_rule`). A trial
        // judged elastic re-anchored a cache in front of a slow store (90% of answers at
        // 0.18 s, 10% at 18 s) on a window of ten fast answers, every later window read as a
        // queue ten times the baseline, and the limit walked from 9 to 1.
        self.base = match self.srtt {
            Some(_) if self.srtt_censored => None,
            Some(srtt) => Some(Baseline::anchored(srtt, self.srtt_var)),
            None => self.base,
        };
    }

    /// Anchors the baseline on the smoothed rtt `srtt` or on `window`'s own mean, whichever
    /// is larger.
    pub(super) fn anchor_at_least(&mut self, window: &WindowRtt, srtt: f64) {
        if window.mean > srtt {
            self.srtt = Some(window.mean);
            self.srtt_var = window.variance_of_mean;
        }
        self.anchor();
    }

    /// The latency rule, on one closed window (`unbound`: its demand never filled the
    /// limit); returns what it did.
    pub(super) fn latency_rule(
        &mut self,
        rtt: Option<WindowRtt>,
        censored: bool,
        unbound: bool,
    ) -> Move {
        // The successes' latency is learnt even in a window with drops.
        if let Some(window) = rtt {
            let w = self.config.smoothing.clamp(f64::MIN_POSITIVE, 1.0);
            let (srtt, var) = match self.srtt {
                Some(s) if !self.fresh => (
                    s + w * (window.mean - s),
                    (1.0 - w) * (1.0 - w) * self.srtt_var + w * w * window.variance_of_mean,
                ),
                _ => {
                    self.srtt_censored = censored;
                    (window.mean, window.variance_of_mean)
                }
            };
            self.srtt_censored &= censored;
            self.srtt = Some(srtt);
            self.srtt_var = var;
            // A censored window (see `LITTLE_EXCESS`, `FIRST_WINDOW_RTTS`) seeds the
            // smoothing but neither anchors nor moves the baseline. (Not seeding the
            // smoothing either, an unbiased baseline, moved Kanaloa's limit from 25 to 30
            // with the file's seed, p99 264 ms against the 250 of its target: the tolerance
            // at 20 is wide enough there.)
            let tol = self.tolerance();
            let short_after_doubling = self.short_after_doubling(srtt);
            match &mut self.base {
                Some(base) if !censored && !short_after_doubling => {
                    base.observe(srtt, var, tol * base.value / WINDOW_PRECISION);
                }
                Some(_) => {}
                None if !censored => {
                    // Seeded by a censored first window, `srtt` is still half that
                    // window's short answers: the first baseline is the larger of it and
                    // this window's own mean (after a first window of a cached service's
                    // fast answers, anchored well under the mean, every window after read
                    // as a queue).
                    self.anchor_at_least(&window, srtt);
                }
                None => {}
            }
            if let Some(shrink) = self.shrunk.take() {
                self.check_shrink(&shrink, srtt);
            }
        }
        let drop_fraction = f64::from(self.window.drops) / f64::from(self.window.samples.max(1));
        if self.drops_call_for_backoff(drop_fraction) {
            // DCTCP's proportional decrease, `1 - f/2`, where it is deeper than `backoff`:
            // a window of nothing but drops halves the limit. At the mild 0.9, a service
            // that answered nothing in time (the capacity demo after its work doubled, 10-s
            // windows at 1 answer a second) took a minute to come down from 20 to 9. And at
            // least one request less: 0.9 of 8.4 is 7.6, still 8 in force.
            let factor = self
                .config
                .backoff
                .clamp(0.0, 1.0)
                .min(1.0 - drop_fraction / 2.0);
            // A retry of the limit that drew drops drew them again: wait twice as long
            // before the next one. The capacity demo's 8 (one request queued in a pool of 7
            // workers, callers with 0.5 s of slack) drew drops at every retry; at a retry
            // every 10 windows of 3 s, a sixth of the time was spent at 8 or backing off.
            self.fence(self.limit.round(), 0);
            self.limit = (self.limit * factor).min(self.limit.round() - 1.0);
            self.settling = true;
            self.shrunk = None;
            return Move::Shrink;
        }
        let base = self.base.map(|b| b.value);
        let (Some(srtt), Some(base), Some(window)) = (self.srtt, base, rtt) else {
            return Move::Hold;
        };
        let ratio = srtt / base - 1.0;
        let tol = self.tolerance();
        if ratio > tol && self.base_in_doubt && unbound && !censored {
            // The slow answers of a service whose baseline was anchored on its fast ones:
            // an unfilled limit queues nothing (see `weigh_baseline`).
            self.anchor_at_least(&window, srtt);
            return Move::Hold;
        }
        if ratio > tol {
            let before = self.limit;
            self.limit = (self.limit * (1.0 + tol) / (1.0 + ratio)).max(self.limit * 0.5);
            self.settling = true;
            self.shrunk = Some(Shrink {
                rtt: srtt,
                expected_rtt: base + (srtt - base) * self.limit / before,
                variance: self.srtt_var,
            });
            if self.slower_than_served(window, base, tol) {
                self.served_left = true;
            }
            Move::Shrink
        } else if ratio < tol / 2.0 && f64::from(self.window.inflight_max) * 2.0 >= self.limit {
            // A limit that drew drops is tried again only after `RING` windows that asked to
            // grow, as a probe: latency alone may not see why it was too high (a pool of 7
            // workers at 2 s holding 8 queues one request, a few percent of the mean rtt,
            // yet enough to push some callers past their timeout). Growing back at once
            // kept the limit at 8 half of the time.
            self.clean += 1;
            if self
                .drop_level
                .is_some_and(|level| self.limit.round() >= level)
            {
                // The level held for a window: growing further is a retry of it. It must
                // hold for `RING` windows to shorten the next wait (one window of 10
                // samples without drops is weak evidence: 8 in the capacity demo draws
                // one drop in ten requests).
                self.drop_level = None;
                self.retried = true;
            }
            if self.retried {
                // Not past a retried level until it has held for `RING` windows: one
                // window of 10 samples without drops is weak evidence (8 in the capacity
                // demo draws one drop in ten requests, and growing on at once reached 10).
                self.held += 1;
                if self.held < RING as u32 {
                    return Move::Hold;
                }
                self.held = 0;
                self.retried = false;
                self.retries = self.retries.saturating_sub(1);
            }
            // FAST TCP's update, `limit x base / rtt + alpha`, read at the growth's end: far
            // below the knee (the rtt at its baseline) a limit grows in proportion to the
            // headroom the tolerance leaves, up to just under a trial's step, so that a knee
            // of 500 is found in seconds rather than in 200 windows of `log10(limit)`. Only
            // where the last covariance check saw concurrency buy throughput in proportion:
            // a baseline measured under load (started far above the knee) shows headroom
            // that is not there, and growing by it undid each reset of the descent.
            let headroom = if self.elastic {
                (self.limit * (tol / 2.0 - ratio)).min(JUDGED_STEP * self.limit.round() - 1.0)
            } else {
                0.0
            };
            // Slow start (TCP's, BBR's startup): from the first window until the first that
            // does not grow, the limit doubles, so that a knee of 500 is found in five windows
            // rather than two hundred. Only while demand exceeds the limit (it was reached): a
            // limit that doubled on half its use overshot RSocket's servers from their first
            // window. A doubling past the knee is shrunk back by the latency it adds.
            let slow_start =
                self.slow_start && f64::from(self.window.inflight_max) >= self.limit.round();
            if slow_start && self.doubled_by_round {
                // Slow start's rounds doubled the limit within the window (see `rounds`),
                // and the window, judged, leaves them to go on.
                return Move::Grow;
            }
            let grown = if slow_start {
                self.limit * 2.0
            } else {
                self.limit + self.limit.log10().max(1.0).max(headroom)
            };
            let wait = (RING as u32) << self.retries;
            // Straight back to a level the service held before it got slower, once it is
            // fast again (see `regain`); not past a level that drew drops before its wait.
            let regained = self.regain(slow_start, srtt, base).filter(|&level| {
                self.drop_level
                    .is_none_or(|dropped| level < dropped || self.clean >= wait)
            });
            if regained.is_some() {
                // One jump per slowdown: the trial judges it, and the windows after it
                // measure what the service holds now.
                self.forget_served();
            }
            let grown = regained.unwrap_or(grown);
            if self
                .drop_level
                .is_some_and(|level| grown.round() >= level && self.clean < wait)
            {
                return Move::Hold;
            }
            let large = grown.round() - self.limit.round() >= JUDGED_STEP * self.limit.round();
            if large && self.probe.is_none() && !slow_start {
                // A large step is a trial: judged by the throughput it buys over a whole
                // span at each limit (see `judge_trial`), one at a time. A regain's span
                // before may be one window (see `regain`).
                if self.trial.is_some() || !(self.span.whole() || regained.is_some()) {
                    return Move::Hold;
                }
                self.start_trial(grown.round());
                self.settling = true;
            }
            if self.drop_level.is_some_and(|level| grown.round() >= level) {
                self.retried = true;
            }
            self.limit = grown;
            Move::Grow
        } else {
            Move::Hold
        }
    }

    /// Whether `srtt`, read in slow start, falls under the baseline by more than the
    /// tolerance: then it does not lower the baseline. Slow start's windows follow its
    /// doublings, and the slots a doubling filled give back their short requests first and
    /// their long ones windows later, so a window's answers read short by as much as the
    /// work's tail is long; a service does not get faster by a tolerance while its load
    /// doubles. A cache in front of a slow store (90% of answers at 9 ms, 10% at 0.9 s) at
    /// a knee of 500 read 55 ms at 80 in flight for its 100 ms mean, not by enough for
    /// Little's law to censor the window (`LITTLE_EXCESS`); anchored there, the window at
    /// 160 read as a queue, slow start ended, and the limit walked down to 69 for the 500
    /// workers. A window within the tolerance still lowers it: a first anchoring above the
    /// mean by its noise (exponential work at a knee of 500, 8% over) is what the later,
    /// more precise windows correct, and kept, it let the doublings overshoot the knee.
    fn short_after_doubling(&self, srtt: f64) -> bool {
        self.slow_start
            && self
                .base
                .is_some_and(|base| srtt * (1.0 + self.tolerance()) < base.value)
    }

    /// Whether the window's drops, `fraction` of its samples, exceed the tolerated share,
    /// by more than one drop: one drop in a window of 10-19 samples reads as 5-10%, but
    /// says nothing of a rate. A service whose slowest answer in a hundred outlasts the
    /// caller's timeout drew one such drop every few windows once its windows were small,
    /// and each backoff made them smaller: a cache in front of a slow store (bimodal 99/1,
    /// 10 workers, a step to 3x) walked down to 1 and served 67% of its capacity (83% with
    /// two drops; 2 s of work at 30 workers, 36% -> 98%).
    pub(super) fn drops_call_for_backoff(&self, fraction: f64) -> bool {
        fraction > self.config.drop_tolerance && self.window.drops >= 2
    }

    /// Judges a latency shrink by the first measured window after it. A shrink is futile if
    /// the rtt fell by less than half of what a queue shrinking with the limit would have
    /// given back: less concurrency bought no latency, so the excess over the baseline is
    /// not a queue; the service got slower, not busier, and the baseline is stale. Two
    /// futile shrinks in a row re-anchor it to the current rtt, as the covariance check
    /// does, but within two shrinks rather than ten windows, which at a few answers a
    /// second is minutes (the capacity demo after its work doubled walked from 20 down to 2
    /// on a 1 s baseline while every request took 2 s). Shrinks whose expected gain is under
    /// 5% of the rtt are within noise and are not judged. (Requiring the throughput to fall
    /// with the limit as well, as the covariance check does, let the noise of 10-sample
    /// windows veto the re-anchoring for two minutes in one seed of that demo.) Only a fall
    /// beyond two standard errors of the two smoothed rtts' difference shows a queue that
    /// drained, and starts the count again; a fall within them tells nothing either way.
    /// Reset by any fall, the count flapped on the windows of a heavy tail: a cache in front
    /// of a slow store (90% of answers at 9 ms, 10% at 0.9 s) whose baseline slow start had
    /// anchored at 75 ms read its own 100 ms mean as a queue, and seven shrinks, futile and
    /// not by turns, walked the limit from 288 to 75 for 500 workers.
    pub(super) fn check_shrink(&mut self, shrink: &Shrink, rtt: f64) {
        let gain = shrink.rtt - shrink.expected_rtt;
        if gain < 0.05 * shrink.rtt {
            return;
        }
        let halfway = shrink.rtt - gain / 2.0;
        if rtt > halfway {
            self.futile += 1;
        } else if rtt < halfway - 2.0 * (self.srtt_var + shrink.variance).sqrt() {
            self.futile = 0;
        }
        if self.futile >= 2 {
            self.futile = 0;
            self.anchor();
        }
    }
}

//! Regaining a level: the concurrency the service held at its baseline before it got
//! slower, grown back to in one trial once it is fast again, rather than by `log10(limit)`
//! a window.

use super::Autotune;
use super::baseline::Light;
use super::covariance::RING;
use super::trial::{JUDGED_SPAN, JUDGED_STEP, one_request_is_judged};
use super::window::{CLEAR_EXCESS, WindowRtt};

impl Autotune {
    /// Forgets the concurrency the service held: a backoff for drops, a failed trial, a
    /// reset or a re-anchored baseline says it (or the baseline it was measured against) no
    /// longer holds; a regain starts its own measurement.
    pub(super) fn forget_served(&mut self) {
        self.served = None;
        self.served_left = false;
        self.slower_at = None;
    }

    /// Whether a window that asked for a latency shrink shows the service slower at the
    /// concurrency it held (`served`), not only asked for more: its mean rtt exceeds, by
    /// [`CLEAR_EXCESS`] of its standard errors, what the tolerance allows even if every
    /// request past `served` queued, `base x (1 + tol) x inflight / served` by Little's
    /// law. A demand that grew past the knee of an unchanged service stays under that: the
    /// rtt grows at most in proportion to the concurrency above a level held at the
    /// baseline. When half the workers left, the rtt at twice the concurrency held tripled
    /// (30 workers, 100 ms of exponential work: 0.34 s at 51 in flight, 23 held at 0.1 s).
    pub(super) fn slower_than_served(&self, window: WindowRtt, base: f64, tol: f64) -> bool {
        let Some(served) = self.served.filter(|&served| served > 0.0) else {
            return false;
        };
        let inflight = self.window.mean_inflight();
        let excess = window.mean - base * (1.0 + tol) * (inflight / served).max(1.0);
        excess > 0.0 && excess * excess > CLEAR_EXCESS * CLEAR_EXCESS * window.variance_of_mean
    }

    /// Follows the concurrency the service holds (see `regain`), after a measured window
    /// closed at the limit `in_force`, with the tolerance `tol` there and a mean inflight
    /// `inflight`; `held` if the latency rule neither shrank on it nor judged a trial.
    pub(super) fn watch_served(
        &mut self,
        rtt: Option<WindowRtt>,
        held: bool,
        in_force: f64,
        tol: f64,
        inflight: f64,
    ) {
        let (Some(srtt), Some(base)) = (self.srtt, self.base) else {
            return;
        };
        // One drop in a window says nothing of a rate (see `drops_call_for_backoff`): a
        // window of a thousand answers of exponential work with a 10x timeout holds one
        // about every twentieth time, and refusing it left the level a service held before
        // it got slower unknown, so that nothing was regained once it was fast again.
        if self.window.drops > 1 {
            return;
        }
        if self.served_left && srtt > base.value + 2.0 * self.srtt_var.sqrt() {
            self.slower_at = Some(self.slower_at.map_or(in_force, |l| l.min(in_force)));
        }
        // By Little's law a window's answers measure the rtt at its mean inflight, not at
        // its peak: the peak of a Poisson demand at half a knee of 10 reached 16 in flight
        // with the window's mean at the baseline, and a jump back to 16 queued.
        let demand_set = f64::from(self.window.inflight_max) < in_force;
        if held && demand_set && rtt.is_some_and(|rtt| rtt.mean <= base.value * (1.0 + tol)) {
            let level = inflight.min(in_force);
            self.served = Some(self.served.map_or(level, |served| served.max(level)));
        }
    }

    /// The level to grow straight back to, as a trial, if the limit left it for a service
    /// that got slower and is fast again. The service held `served` in flight, set by the
    /// demand, at the baseline; a latency shrink then found it slower there (see
    /// `slower_than_served`: fewer workers, slower work), and neither drops nor a failed
    /// trial since said the level itself was too high. Now, at a limit in force at which
    /// the slower service queued (`slower_at`), the gate is saturated (demand exceeds the
    /// limit) and the smoothed rtt is at the baseline (not re-anchored since: that forgets
    /// `served`), within two of its standard errors, and below the growth threshold (half
    /// the tolerance) by as much: the queue is gone, and the service is faster than it was
    /// at this concurrency. Growing by `log10(limit)` per window measured to the tolerance's
    /// precision (16 x limit answers for exponential work) or by FAST's headroom, capped
    /// under a trial's step, took 50-100 work times back to the workers that had returned
    /// (500 workers, halved, then back: from 263 at the recovery to 290 a hundred work
    /// times later). The jump is a trial, judged as any other large growth (see
    /// `judge_trial`); one that buys no throughput is undone and remembered as a level
    /// that failed. Its span before may be a single window of at least a second, measured
    /// to the precision the latency rule asks (each growth restarts the span, so a limit
    /// growing window after window never has a whole one). Not at limits of 10 or less,
    /// where every step of one request is a trial already; not during slow start.
    ///
    /// Without `slower_at`, a jump followed the first window after a shrink, at the
    /// slower service's knee, where the rtt is at the baseline too: the knee of 100 halved
    /// jumped from 54 back to 145 while the capacity was still halved.
    pub(super) fn regain(&self, slow_start: bool, srtt: f64, base: f64) -> Option<f64> {
        let served = self
            .served
            .filter(|_| self.served_left)?
            .min(self.max)
            .round();
        let in_force = self.limit.round();
        let saturated = f64::from(self.window.inflight_max) >= in_force;
        let error = 2.0 * self.srtt_var.sqrt();
        let at_baseline =
            srtt <= base + error && srtt + error <= base * (1.0 + self.tolerance() / 2.0);
        (!slow_start
            && !one_request_is_judged(in_force)
            && saturated
            && at_baseline
            && served - in_force >= JUDGED_STEP * in_force
            && self.slower_at.is_some_and(|queued| in_force >= queued)
            && self.probe.is_none()
            && self.trial.is_none()
            && self.span.windows >= 1
            && self.span.seconds >= JUDGED_SPAN.as_secs_f64())
        .then_some(served)
    }

    /// Follows the demand-set windows (see [`Light`]) with a measured window that served at
    /// `rate`, and clears the baseline when the service kept up with a growing demand.
    pub(super) fn watch_demand(&mut self, rate: f64, bound: bool) {
        let probe_factor = self.config.probe_factor;
        if let Some(light) = self.light
            && light.outgrown(self.window.successes, rate, probe_factor)
            && let Some(base) = &mut self.base
        {
            base.clear = true;
        }
        self.light = self
            .light
            .map(|light| Light {
                age: light.age + 1,
                ..light
            })
            .filter(|light| light.age <= RING as u32);
        if !bound && self.light.is_none_or(|light| rate < light.rate) {
            self.light = Some(Light {
                successes: self.window.successes,
                rate,
                age: 0,
            });
        }
    }
}

//! Trials: a step of the limit too large for the latency rule to judge (a growth of a tenth
//! or more, a probe of one request at small limits) is judged by the throughput it bought
//! over whole spans on each side (Little's law), and a level that failed is retried only
//! after a wait that doubles with each failure.

use super::Autotune;
use crate::time::Nanos;

/// A step of at least this fraction of the limit in force is a trial, judged by the
/// throughput it changed (see [`Autotune::judge_trial`]); smaller steps are within the
/// noise of a window.
pub(super) const JUDGED_STEP: f64 = 0.1;

/// Standard errors by which a trial's throughput must fall short of following inflight to
/// be futile (see [`Autotune::judge_trial`]): judged on the point estimate, an exponential
/// service's noise at a few dozen answers a second failed trials below its knee and walked
/// the limit down to half of it.
pub(super) const TRIAL_EVIDENCE: f64 = 3.0;

/// Least length of each side of a trial: a whole period of a service that
/// counts its requests per second (leases, rate limits), which 500 ms windows would see
/// alternately in its fast and its slow half.
pub(super) const JUDGED_SPAN: Nanos = Nanos::from_secs(1);

/// Most doublings of the wait before a limit that drew drops is tried again, and of the
/// rings between probes that found nothing: at most 16 times the first wait.
pub(super) const MAX_DOUBLINGS: u32 = 4;

/// Doublings of the wait before a level that failed a trial past doubt, or one of 2, is
/// tried again the first time: `RING << 3`, 80 windows (see [`Autotune::remember_level`]).
pub(super) const FIRST_RETRY_DOUBLINGS: u32 = 3;

/// Throughput and inflight over consecutive measured windows at one limit in force.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Span {
    pub(super) windows: u32,
    pub(super) seconds: f64,
    pub(super) successes: u32,
    pub(super) samples: u32,
    pub(super) inflight_sum: u64,
    /// Sum of the successes' rtts, in seconds.
    pub(super) rtt: f64,
    /// Sum of their squares, in seconds squared.
    pub(super) rtt_sq: f64,
}

impl Span {
    pub(super) fn add(&mut self, other: &Span) {
        self.windows += other.windows;
        self.seconds += other.seconds;
        self.successes += other.successes;
        self.samples += other.samples;
        self.inflight_sum += other.inflight_sum;
        self.rtt += other.rtt;
        self.rtt_sq += other.rtt_sq;
    }

    /// Long enough to judge by: two windows and [`JUDGED_SPAN`].
    pub(super) fn whole(&self) -> bool {
        self.windows >= 2 && self.seconds >= JUDGED_SPAN.as_secs_f64()
    }

    pub(super) fn throughput(&self) -> f64 {
        f64::from(self.successes) / self.seconds.max(f64::MIN_POSITIVE)
    }

    pub(super) fn inflight(&self) -> f64 {
        self.inflight_sum as f64 / f64::from(self.samples.max(1))
    }

    /// The mean rtt of its successes and the variance of that mean, in seconds.
    pub(super) fn rtt(&self) -> (f64, f64) {
        let n = f64::from(self.successes.max(1));
        let mean = self.rtt / n;
        (mean, (self.rtt_sq / n - mean * mean).max(0.0) / n)
    }

    /// Standard error of `ln(throughput of b / throughput of a)`, the gain of a trial. The
    /// answers of a service kept busy are a renewal process: over `n` of them the count's
    /// variance is about `n x cv^2`, `cv` the coefficient of variation of their times (here
    /// of both spans' rtts together). So a Poisson-like exponential service (`cv` 1) needs
    /// hundreds of answers on each side to tell a step of one request in seven from noise,
    /// and a service of constant work (`cv` near 0) tells it from a few dozen.
    pub(super) fn gain_noise(a: &Span, b: &Span) -> f64 {
        let n = f64::from(a.successes + b.successes);
        if n < 2.0 {
            return f64::INFINITY;
        }
        let mean = (a.rtt + b.rtt) / n;
        let variance = ((a.rtt_sq + b.rtt_sq) / n - mean * mean).max(0.0);
        let cv2 = variance / (mean * mean).max(f64::MIN_POSITIVE);
        let counts = 1.0 / f64::from(a.successes.max(1)) + 1.0 / f64::from(b.successes.max(1));
        (cv2 * counts).sqrt()
    }
}

/// A large step of the limit (a growth, or a probe at a small limit), until a whole span
/// at the new limit judges it against a whole span at the old one.
#[derive(Clone, Copy, Debug)]
pub(super) struct Trial {
    /// The limit before it.
    pub(super) from: f64,
    /// The limit in force during it.
    pub(super) to: f64,
    /// The span at `from`, just before it.
    pub(super) before: Span,
    /// The measured windows at `to` so far.
    pub(super) after: Span,
}

/// Whether at the limit `in_force` a step of one request is a trial: it is at least
/// [`JUDGED_STEP`] of the limit (a limit of 10 or less).
pub(super) fn one_request_is_judged(in_force: f64) -> bool {
    1.0 >= JUDGED_STEP * in_force
}

impl Autotune {
    /// Judges a trial once a whole span at its limit is measured; returns whether it ended
    /// at the lower of its two limits. By Little's law, more requests in flight at the
    /// same throughput are a queue: if the mean inflight at the higher limit exceeds the
    /// lower's by more than half of [`JUDGED_STEP`] and throughput rose with an elasticity
    /// under `low_elasticity`, by [`TRIAL_EVIDENCE`] standard errors less than inflight
    /// would have given, the higher limit buys latency, not service. A growth is then
    /// undone and a probe kept, and the higher level is remembered as one that drew drops
    /// is (retried after 80 windows, then 160; see `remember_level`). The latency rule
    /// cannot see this at small limits, where its tolerance is widest: from 1 to 2 on
    /// RSocket's service (latency by requests per second) the rtt rises by 84% for 8% more
    /// throughput, within the 106% tolerated at 2; from 7 to 8 on the capacity demo's
    /// 7 workers by 14% for nothing, within 53%. A growth that the load did not fill is
    /// kept, a probe that it did not tell from the limit before is not.
    pub(super) fn judge_trial(&mut self, trial: &Trial) -> bool {
        let grew = trial.to > trial.from;
        let (lower, higher) = if grew {
            (&trial.before, &trial.after)
        } else {
            (&trial.after, &trial.before)
        };
        let inflight = higher.inflight() / lower.inflight().max(f64::MIN_POSITIVE);
        let gain = (higher.throughput() / lower.throughput()).ln();
        let elasticity = gain / inflight.ln();
        let told = inflight >= 1.0 + JUDGED_STEP / 2.0 && !elasticity.is_nan();
        // Futile only if throughput fell short of following inflight by more than its noise.
        let noise = Span::gain_noise(lower, higher);
        let futile = told
            && elasticity < self.config.low_elasticity
            && gain < inflight.ln() - TRIAL_EVIDENCE * noise;
        // Past doubt: the gain above `high_elasticity` of the step by as many standard
        // errors as a futile trial must fall short of proportion.
        let elastic_past_noise =
            told && gain > self.config.high_elasticity * inflight.ln() + TRIAL_EVIDENCE * noise;
        if elastic_past_noise {
            // The step bought throughput in proportion: below the knee, where whatever rtt
            // the latency rule reads as a queue is the service's own (it got slower, not
            // busier). Re-anchor, as the covariance check would with a spread to see: at
            // these limits a probe of one request is under its 15%, and the baseline from
            // before the service slowed held the limit at half its knee for minutes. Only
            // past the noise of the counts: a step of one request at 5 is 18% more in
            // flight, within the noise of 60 answers of exponential work (13% either way),
            // and at a knee of 3 every third growth from 5 read elastic by chance, each
            // re-anchoring on the service's own queue: the limit crept to 9-10 over 200 s.
            self.anchor();
        }
        if !grew {
            // A probe that cost throughput in proportion was at the knee.
            if told && elasticity > self.config.high_elasticity {
                self.knee = Some(trial.from.round());
            }
            // As probes for the baseline: one that found nothing spaces the next out.
            self.descending = futile;
            self.idle_probes = if futile {
                0
            } else {
                (self.idle_probes + 1).min(MAX_DOUBLINGS)
            };
        }
        if !futile {
            if !grew {
                self.limit = trial.from;
                self.settling = true;
            }
            return false;
        }
        // Past doubt: the elasticity under `low_elasticity` by as many standard errors
        // as a futile trial must fall short of proportion.
        let beyond_noise =
            gain < self.config.low_elasticity * inflight.ln() - TRIAL_EVIDENCE * noise;
        self.remember_level(trial.from.max(trial.to).round(), beyond_noise);
        if grew {
            self.limit = trial.from;
            self.settling = true;
            self.shrunk = None;
        }
        true
    }

    /// A level that failed a trial is tried again as one that drew drops is: after
    /// `RING << retries` windows asking to grow (see [`Autotune::fence`]). Where one
    /// request is a large step of the level below it (10 or less), a retry is dear, and the
    /// first wait is 80 windows (`RING << 3`) if the verdict is past doubt (`beyond_noise`:
    /// the trial bought less than `low_elasticity` of its step by three standard errors, or
    /// latency sent it back) or the level is 2, where a retry doubles the concurrency. On
    /// RSocket's service a retry of 2 holds a server at twice its concurrency for a whole
    /// span, past the curve's knee (p99 90-180 ms in those seconds against 19 ms), and its
    /// verdicts there are within the noise of its answers; in the capacity demo, 8 for 7
    /// workers costs the queued callers their timeout, past doubt. Waiting 20 windows, those
    /// retries were a third of RSocket's steady seconds above 19 ms and most of what the
    /// capacity demo lost in its steady state. A verdict that the noise of a few dozen answers
    /// could have made is retried after `RING` windows, and one that fails again waits 80: 10
    /// workers of exponential work, halved, failed 7 -> 8 on 41 answers against 55 (the gain
    /// -0.26 in the log, its noise 0.18), and a wait of 80 windows held 7 for 35 s after the
    /// workers came back. Above 10, a failed trial is a growth of a tenth that latency sent
    /// back: retrying it costs a window of a small queue, and waiting 80 windows held a
    /// Pareto service at 18 of its 30 workers for 40 s after its capacity came back.
    pub(super) fn remember_level(&mut self, level: f64, beyond_noise: bool) {
        let first = if one_request_is_judged(level - 1.0) && (beyond_noise || level <= 2.0) {
            FIRST_RETRY_DOUBLINGS
        } else {
            0
        };
        self.fence(level, first);
    }

    /// Fences `level`, which drew drops or failed a trial: it is tried again only after
    /// `RING << retries` windows asking to grow, and the level the service held is
    /// forgotten. The retries counted are at least `first`: one more than before if this
    /// failure was a retry of the fence; as many as before if `level` is no lower than the
    /// last level fenced (what failed there fails above it as well); afresh otherwise, since
    /// a lower level that fails is news of the service, not a retry. A cache in front of a
    /// store (bimodal 99/1, 3 workers, a step to 3x) backed off for its slow hundredth's
    /// drops at 6, then at 5, and each of those fences waited the 80 windows a failed trial
    /// at 8 had set: the limit held under the knee for most of the run.
    pub(super) fn fence(&mut self, level: f64, first: u32) {
        let kept = if std::mem::take(&mut self.retried) {
            self.retries + 1
        } else if self.fenced.is_some_and(|fenced| level >= fenced) {
            self.retries
        } else {
            0
        };
        self.retries = kept.clamp(first, MAX_DOUBLINGS);
        self.fenced = Some(level);
        self.drop_level = Some(level);
        self.clean = 0;
        self.held = 0;
        self.forget_served();
    }

    pub(super) fn start_trial(&mut self, to: f64) {
        self.trial = Some(Trial {
            from: self.limit,
            to,
            before: self.span,
            after: Span::default(),
        });
    }

    /// Starts a probe. Where one request is a large step (a limit of 10 or less), the probe
    /// is one request less, for a whole span, and a trial: kept if the request it took
    /// away bought no throughput (RSocket's service at 2 per server, the capacity demo at
    /// 8 for 7 workers, where latency is within the tolerance), else undone. Elsewhere it
    /// is one window at `probe_factor`, for the baseline only.
    pub(super) fn start_probe(&mut self) {
        let in_force = self.limit.round();
        if one_request_is_judged(in_force) {
            if in_force - 1.0 < self.min || self.trial.is_some() || !self.span.whole() {
                return;
            }
            self.start_trial(in_force - 1.0);
            self.limit = in_force - 1.0;
        } else {
            self.probe = Some(self.limit);
            self.probe_base = self.base.map(|b| b.value);
            self.limit *= self.config.probe_factor.clamp(0.0, 1.0);
        }
        self.settling = true;
    }
}

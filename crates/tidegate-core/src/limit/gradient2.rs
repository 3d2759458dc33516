//! Gradient2: shrink the limit in proportion to how much the current latency exceeds the
//! long-term latency.
//!
//! Vegas ([`super::Vegas`]) compares every answer with the fastest one ever seen, which is
//! fragile when latency is bursty and when the fastest answer was a lucky one (a cache hit,
//! an empty body). Gradient2 compares each answer with a long exponential average instead,
//! and tolerates a ratio (1.5 by default) before it reacts: it is built to notice a *change*
//! in latency (the service just got slower: shed now) rather than to hold an absolute queue.

use serde::{Deserialize, Serialize};

use super::{Limit, Outcome, Sample};
use crate::time::Nanos;

/// Configuration of [`Gradient2`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Gradient2Config {
    /// Limit before the first sample, in requests. Default 20.
    pub initial_limit: u32,
    /// Lowest limit, in requests (at least 1). Default 20, as in concurrency-limits: the
    /// floor that keeps the gradient's downward bias from collapsing the limit.
    pub min_limit: u32,
    /// Highest limit, in requests. Default 200.
    pub max_limit: u32,
    /// Weight of a new estimate against the current limit, in `(0, 1]`. Default 0.2.
    pub smoothing: f64,
    /// How much slower than the long-term average an answer may be before the limit shrinks,
    /// as a ratio (at least 1). Default 1.5.
    pub rtt_tolerance: f64,
    /// Length of the long-term average, in samples (its weight is `2 / (window + 1)`).
    /// Default 600.
    pub long_window: u32,
    /// Requests of headroom added to every new estimate, so that the limit can grow while
    /// latency is flat. Default 4, as in concurrency-limits' Gradient2 (its older
    /// `GradientLimit` used `sqrt(limit)`, which is 4-5 around 20).
    pub queue_size: u32,
    /// A successful answer this slow or slower counts as a drop. Default 5 s.
    pub timeout: Nanos,
}

impl Default for Gradient2Config {
    fn default() -> Gradient2Config {
        Gradient2Config {
            initial_limit: 20,
            min_limit: 20,
            max_limit: 200,
            smoothing: 0.2,
            rtt_tolerance: 1.5,
            long_window: 600,
            queue_size: 4,
            timeout: Nanos::from_secs(5),
        }
    }
}

/// Samples averaged plainly before the long average becomes exponential, so that the first
/// answer does not weigh like 300.
const WARMUP: u32 = 10;

/// The gradient applied on a drop: the largest cut the rule ever makes.
const DROP_GRADIENT: f64 = 0.5;

/// Gradient-based limit: `limit = limit * clamp(tolerance * long_rtt / rtt, 0.5, 1) +
/// queue_size`, smoothed.
///
/// Source: Netflix concurrency-limits `Gradient2Limit` (initial 20, min 20, max 200,
/// smoothing 0.2, rtt tolerance 1.5, long window 600, queue size 4). Per sample:
///
/// - `long_rtt`: exponential average of rtt over ~600 samples; `rtt`: this sample;
/// - if `long_rtt / rtt > 2` (latency fell back after a long overload, and the long average
///   still remembers it), `long_rtt *= 0.95`: the long average would otherwise take
///   thousands of samples to forget the overload, and meanwhile the gradient would stay at
///   1 and let the limit grow far past what the recovered service needs;
/// - fewer than half the limit in flight: no change (app-limited);
/// - `gradient = clamp(tolerance * long_rtt / rtt, 0.5, 1)`: 1 while the answer is within
///   the tolerance, down to 0.5 so that one outlier cannot halve the limit;
/// - `limit = (1 - smoothing) * limit + smoothing * (limit * gradient + queue_size)`.
///
/// Where tidegate departs from concurrency-limits, and why:
///
/// - **A drop is not a latency measurement, and it is a signal.** concurrency-limits
///   ignores whether a request dropped and averages its rtt like any other (issue #176): a
///   refusal in 0 ms drags the long average down and reads as a fast answer, so the limit
///   grows while the service refuses. Here a drop leaves both averages alone and applies the
///   smallest gradient, 0.5 (smoothed: x0.9), as AIMD would.
/// - **A timeout is a drop**: see `timeout`.
///
/// Known weakness, kept: the long average is the baseline, and under sustained load it is a
/// loaded latency. On a service whose latency rises smoothly past its optimum, Gradient2
/// rides a sawtooth at about twice the optimum rather than at it (Kanaloa's service: mean
/// ~45 for an optimum of 20, long average ~190 ms for 100 ms unloaded). The drift correction
/// above only helps when latency falls back. Vegas' drained probe would fix the level, at the
/// price of turning Gradient2 into Vegas; use Vegas where the level matters.
#[derive(Clone, Debug)]
pub struct Gradient2 {
    estimate: f64,
    min_limit: u32,
    max_limit: u32,
    smoothing: f64,
    tolerance: f64,
    long_weight: f64,
    queue_size: f64,
    timeout: Nanos,
    /// Long-term average rtt, in seconds, and the samples it has seen (up to `WARMUP`).
    long_rtt: f64,
    long_samples: u32,
}

impl Gradient2 {
    pub fn new(config: &Gradient2Config) -> Gradient2 {
        let min_limit = config.min_limit.max(1);
        let max_limit = config.max_limit.max(min_limit);
        let smoothing = if config.smoothing > 0.0 {
            config.smoothing.min(1.0)
        } else {
            0.2
        };
        Gradient2 {
            estimate: f64::from(config.initial_limit.clamp(min_limit, max_limit)),
            min_limit,
            max_limit,
            smoothing,
            tolerance: config.rtt_tolerance.max(1.0),
            long_weight: 2.0 / (f64::from(config.long_window.max(1)) + 1.0),
            queue_size: f64::from(config.queue_size),
            timeout: config.timeout,
            long_rtt: 0.0,
            long_samples: 0,
        }
    }

    /// The long-term average round-trip time, once there is one.
    pub fn long_rtt(&self) -> Option<Nanos> {
        (self.long_samples > 0).then(|| Nanos::from_secs_f64(self.long_rtt))
    }

    fn set(&mut self, target: f64) {
        let smoothed = (1.0 - self.smoothing) * self.estimate + self.smoothing * target;
        self.estimate = smoothed.clamp(f64::from(self.min_limit), f64::from(self.max_limit));
    }

    fn add_to_long(&mut self, rtt: f64) {
        if self.long_samples < WARMUP {
            self.long_samples += 1;
            self.long_rtt += (rtt - self.long_rtt) / f64::from(self.long_samples);
        } else {
            self.long_rtt += (rtt - self.long_rtt) * self.long_weight;
        }
    }
}

impl Limit for Gradient2 {
    fn limit(&self) -> u32 {
        (self.estimate as u32).clamp(self.min_limit, self.max_limit)
    }

    fn on_sample(&mut self, sample: &Sample) {
        let dropped = match sample.outcome {
            Outcome::Ignored => return,
            Outcome::Dropped => true,
            Outcome::Success => sample.rtt >= self.timeout,
        };
        if dropped {
            self.set(self.estimate * DROP_GRADIENT);
            return;
        }
        if sample.rtt.is_zero() {
            return; // a zero rtt is a clock artefact, not a measurement
        }
        let rtt = sample.rtt.as_secs_f64();
        self.add_to_long(rtt);
        if self.long_rtt / rtt > 2.0 {
            self.long_rtt *= 0.95;
        }
        if f64::from(sample.inflight) * 2.0 < self.estimate {
            return;
        }
        let gradient = (self.tolerance * self.long_rtt / rtt).clamp(0.5, 1.0);
        self.set(self.estimate * gradient + self.queue_size);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::testkit::{Load, Service, run};
    use crate::time::Time;

    fn secs(s: u64) -> Nanos {
        Nanos::from_secs(s)
    }

    fn at(ms: u64, rtt_ms: u64, inflight: u32, outcome: Outcome) -> Sample {
        let now = Time::ZERO + Nanos::from_millis(ms);
        Sample {
            now,
            rtt: Nanos::from_millis(rtt_ms),
            inflight,
            outcome,
        }
    }

    fn low_floor(initial_limit: u32) -> Gradient2 {
        Gradient2::new(&Gradient2Config {
            initial_limit,
            min_limit: 1,
            ..Gradient2Config::default()
        })
    }

    #[test]
    fn rules_grow_by_the_smoothed_queue_and_cut_by_the_gradient() {
        let mut g = Gradient2::new(&Gradient2Config {
            initial_limit: 50,
            min_limit: 1,
            ..Gradient2Config::default()
        });
        // Within tolerance: gradient 1, limit 50 + 0.2 x 4.
        g.on_sample(&at(1000, 100, 50, Outcome::Success));
        assert!((g.estimate - 50.8).abs() < 1e-9, "{}", g.estimate);
        // App-limited (fewer than half in flight): the average learns, the limit holds.
        g.on_sample(&at(1100, 100, 20, Outcome::Success));
        assert!((g.estimate - 50.8).abs() < 1e-9);
        // Past the warm-up, an outlier 10x the average: gradient 0.15, clamped at 0.5.
        for i in 0..10 {
            g.on_sample(&at(1100 + i, 100, 1, Outcome::Success));
        }
        g.on_sample(&at(1200, 1000, 50, Outcome::Success));
        let expected = 0.8 * 50.8 + 0.2 * (0.5 * 50.8 + 4.0);
        assert!((g.estimate - expected).abs() < 1e-9, "{}", g.estimate);
        // Ignored changes nothing, neither the limit nor the average.
        let (limit, long) = (g.estimate, g.long_rtt());
        g.on_sample(&at(1300, 1, 50, Outcome::Ignored));
        g.on_sample(&at(1400, 100_000, 50, Outcome::Ignored));
        assert_eq!((g.estimate, g.long_rtt()), (limit, long));
    }

    #[test]
    fn respects_min_and_max() {
        let config = Gradient2Config {
            initial_limit: 1000,
            max_limit: 30,
            ..Gradient2Config::default()
        };
        let mut g = Gradient2::new(&config);
        assert_eq!(g.limit(), 30);
        for i in 0..100 {
            g.on_sample(&at(1000 + i, 100, 30, Outcome::Success));
        }
        assert_eq!(g.limit(), 30);
        for i in 0..100 {
            g.on_sample(&at(2000 + i, 100, 30, Outcome::Dropped));
        }
        assert_eq!(g.limit(), 20, "the default floor");
        let mut one = Gradient2::new(&Gradient2Config {
            initial_limit: 0,
            min_limit: 0,
            ..config
        });
        one.on_sample(&at(1000, 100, 1, Outcome::Dropped));
        assert_eq!(one.limit(), 1);
    }

    #[test]
    fn zero_latency_drops_are_not_latency_measurements() {
        // concurrency-limits averages a refusal's ~0 ms like any answer (issue #176): the
        // long average falls and the refusals read as fast answers. Here a drop leaves the
        // average alone and cuts the limit by the smallest gradient, smoothed: x0.9.
        let mut g = low_floor(50);
        g.on_sample(&at(1000, 100, 50, Outcome::Success));
        let long = g.long_rtt();
        for i in 0..4 {
            g.on_sample(&at(1001 + i, 0, 50, Outcome::Dropped));
        }
        g.on_sample(&at(1010, 0, 50, Outcome::Success));
        assert_eq!(g.long_rtt(), long);
        assert_eq!(long, Some(Nanos::from_millis(100)));
        assert_eq!(g.limit(), 33, "50.8 x 0.9^4 = 33.3");
    }

    #[test]
    fn drift_correction_pulls_the_long_average_down_after_an_overload() {
        // 2000 answers at 1 s teach the long average 1 s; latency falls back to 100 ms. By
        // the exponential average alone the long average would need ~650 samples to fall
        // under 200 ms; with the x0.95 pull while it is over twice the current rtt, ~40.
        let mut g = low_floor(20);
        for i in 0..2000 {
            g.on_sample(&at(i, 1000, 1, Outcome::Success));
        }
        for i in 0..40 {
            g.on_sample(&at(3000 + i, 100, 1, Outcome::Success));
        }
        let long = g.long_rtt().map_or(f64::MAX, Nanos::as_millis_f64);
        assert!(long < 200.0, "{long}");
    }

    #[test]
    fn settles_at_twice_the_optimum_on_kanaloa() {
        // Honest band, a known weakness pinned: Gradient2 reacts to *changes* of latency, not
        // to its level. Its long average follows the loaded latency (~190 ms here, against
        // 100 ms unloaded), the tolerance of 1.5 allows 1.5x that, and the limit rides a
        // sawtooth between the floor (20) and ~90, averaging ~45: twice the optimum, with
        // ~20% less goodput than the optimum's 200 rps. It neither collapses nor runs away.
        let mut g = Gradient2::new(&Gradient2Config::default());
        let trace = run(&mut g, &Service::kanaloa(), Load::Saturating, secs(90));
        let mean = trace.mean_limit(secs(10), secs(90));
        assert!((35.0..60.0).contains(&mean), "{mean}");
        assert!(trace.max_limit() < 120, "{}", trace.max_limit());
        let settled = trace.settled_within(Nanos::ZERO, 55.0, 0.7);
        assert!(settled.is_some_and(|t| t < secs(5)), "{settled:?}");
        let goodput = trace.goodput(secs(10), secs(90));
        assert!(goodput > 150.0, "{goodput}");
    }

    #[test]
    fn long_average_drifts_up_under_sustained_load() {
        // Weakness, pinned (concurrency-limits PR #88, #134): under sustained load the long
        // average is a loaded latency. The drift correction only acts when latency *falls*
        // below half of it, so it does not help here: ~1.9x the unloaded 100 ms.
        let mut g = Gradient2::new(&Gradient2Config::default());
        run(&mut g, &Service::kanaloa(), Load::Saturating, secs(90));
        let long = g.long_rtt().map_or(0.0, Nanos::as_millis_f64);
        assert!((150.0..250.0).contains(&long), "{long}");
    }

    #[test]
    fn follows_capacity_down_and_back_up() {
        // With the floor lowered. Halved, the sawtooth's mean falls by about a third
        // (~43 -> ~31), well above the halved optimum of 10, for the reason above.
        let service = Service::halving(secs(30), secs(60));
        let trace = run(&mut low_floor(20), &service, Load::Saturating, secs(90));
        let before = trace.mean_limit(secs(10), secs(30));
        let halved = trace.mean_limit(secs(35), secs(60));
        let after = trace.mean_limit(secs(65), secs(90));
        assert!(
            halved < 0.8 * before && halved < 0.8 * after,
            "{before} {halved} {after}"
        );
        assert!(halved > 15.0 && after > 35.0, "{halved} {after}");
    }

    #[test]
    fn stable_timeout_is_a_drop_when_the_timeout_is_known() {
        // rtt pinned at a 150 ms client timeout, recorded as success. Told the timeout,
        // Gradient2 cuts on each pinned answer and stays near 20-50 (mean ~28), even from 200.
        let service = Service::stable_timeout(Nanos::from_millis(150));
        let told = Gradient2Config {
            initial_limit: 200,
            timeout: Nanos::from_millis(150),
            ..Gradient2Config::default()
        };
        let trace = run(
            &mut Gradient2::new(&told),
            &service,
            Load::Saturating,
            secs(90),
        );
        let mean = trace.mean_limit(secs(10), secs(90));
        assert!((20.0..35.0).contains(&mean), "{mean}");
        assert!(trace.max_limit() == 200 && trace.limit_at(secs(5)) < 60);
        // Weakness, pinned: told nothing, a pinned rtt is a perfectly stable latency, the
        // gradient is 1 and the limit climbs to its ceiling and stays there.
        let blind = Gradient2Config::default();
        let trace = run(
            &mut Gradient2::new(&blind),
            &service,
            Load::Saturating,
            secs(30),
        );
        assert_eq!(trace.limit_at(secs(29)), 200);
    }

    #[test]
    fn low_rps_neither_runs_away_nor_collapses() {
        // 5 rps keeps ~0.5 in flight: app-limited, the limit never moves.
        let trace = run(
            &mut low_floor(20),
            &Service::kanaloa(),
            Load::Poisson { rps: 5.0 },
            secs(300),
        );
        assert_eq!((trace.min_limit(), trace.max_limit()), (20, 20));
        // 150 rps, under capacity: bursts move it, within bounds, and nothing is turned away.
        let trace = run(
            &mut low_floor(20),
            &Service::kanaloa(),
            Load::Poisson { rps: 150.0 },
            secs(60),
        );
        assert!(
            trace.min_limit() >= 10 && trace.max_limit() < 80,
            "{} {}",
            trace.min_limit(),
            trace.max_limit()
        );
        let goodput = trace.goodput(secs(5), secs(60));
        assert!(goodput > 140.0, "{goodput}");
    }

    #[test]
    fn cold_start_from_one_grows_within_seconds() {
        // +0.8 per in-use answer: from 1 to 20 in about a second.
        let trace = run(
            &mut low_floor(1),
            &Service::kanaloa(),
            Load::Saturating,
            secs(30),
        );
        assert!(trace.limit_at(secs(2)) >= 20, "{}", trace.limit_at(secs(2)));
        let mean = trace.mean_limit(secs(5), secs(30));
        assert!((30.0..60.0).contains(&mean), "{mean}");
    }

    #[test]
    fn approach_from_above_converges_without_collapsing() {
        // From 200 (rtt 1.6 s), the first answers set the long average high, then the
        // gradient (>= 0.5, smoothed: at most -10% per answer) brings it down within a few
        // seconds; it dips (to ~8) but does not reach 1.
        let trace = run(
            &mut low_floor(200),
            &Service::kanaloa(),
            Load::Saturating,
            secs(60),
        );
        assert!(trace.limit_at(secs(5)) < 100, "{}", trace.limit_at(secs(5)));
        assert!(trace.min_limit() >= 4, "{}", trace.min_limit());
        let mean = trace.mean_limit(secs(10), secs(60));
        assert!((30.0..60.0).contains(&mean), "{mean}");
    }
}

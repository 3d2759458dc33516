//! Hill climbing on measured performance: Kanaloa's autothrottle.
//!
//! Latency-based limits (Vegas, Gradient2, Autotune) infer overload from a latency model: "rtt
//! above its no-load value means a queue". That model breaks when the no-load latency is
//! unknown or drifts. Hill climbing needs no model: it *measures* what each pool size actually
//! delivers (throughput, and latency as a tie-breaker), remembers it per size, and walks
//! towards the best nearby size, exploring a little to keep its memory fresh. It is slow (one
//! step per resize interval) but robust to anything that only shifts latencies, and it finds
//! the knee of services whose throughput *falls* past their optimum (contention), where
//! latency-only limits tend to sit too high.

use serde::{Deserialize, Serialize};

use super::{Limit, Outcome, Sample};
use crate::rng::Rng;
use crate::time::{Nanos, Time};

/// Largest number of pool sizes tracked: `max - min + 1` is clamped to this, so that a
/// careless `max` cannot allocate gigabytes. 4096 entries are 64 KiB.
const MAX_SIZES: u32 = 4096;

/// Configuration of [`HillClimb`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HillClimbConfig {
    /// Pool size (limit) before any measurement, in requests. Default 30 (Kanaloa's
    /// `startingPoolSize`).
    pub initial: u32,
    /// Smallest pool size, in requests (at least 1). Default 1 (Kanaloa's `minPoolSize`).
    pub min: u32,
    /// Largest pool size, in requests. Default 400 (Kanaloa's `maxPoolSize`); at most
    /// `min + 4095`, since a score is kept for every size.
    pub max: u32,
    /// Time measured between two resizing decisions (explore or optimize), after the round trip
    /// that lets a resize settle. Default 1 s (Kanaloa's `resizeInterval`).
    pub resize_interval: Nanos,
    /// A measurement window closes only once it holds at least this many samples (and at least
    /// `limit` of them), even if the resize interval has passed, so that slow or quiet services
    /// are not judged on a handful of requests. Default 10.
    pub min_window_samples: u32,
    /// Probability, at each decision, of exploring a random nearby size instead of moving to
    /// the best known one. Default 0.3 (tidegate DESIGN.md; Kanaloa shipped 0.4).
    pub exploration_ratio: f64,
    /// Largest change of an exploration step, in requests: a step is uniform in
    /// `1..=max_explore_step`. Default 5 (Kanaloa's `maxExploreStepSize`).
    pub max_explore_step: u32,
    /// Probability that an exploration step goes down rather than up. Default 0.5. Kanaloa's
    /// `chanceOfScalingDownWhenFull` was 0.3 (a full pool might need more workers), but under
    /// overload the pool is always full, and that bias is a standing push upwards: from 200
    /// on the synthetic service it had not come halfway down after 20 minutes.
    pub explore_down_chance: f64,
    /// Optimization looks at sizes within `max(optimization_min_range, range_ratio x
    /// current)` of the current size, on each side. Default 0.4 (DESIGN.md; Kanaloa 0.3).
    pub range_ratio: f64,
    /// Lower bound of that half-range, in requests. Default 6 (Kanaloa's
    /// `optimizationMinRange`).
    pub optimization_min_range: u32,
    /// Weight of latency against throughput when comparing two sizes, in `[0, 1]`.
    /// Default 0.2 (Kanaloa's `weightOfLatency`).
    pub latency_weight: f64,
    /// Weight of the newest window in a size's moving averages, in `(0, 1]`. Default 0.2
    /// (Kanaloa's `weightOfLatestMetric`).
    pub weight_of_latest: f64,
    /// When a window's throughput at the current size departs from that size's remembered
    /// throughput by more than this fraction, the service has changed: every remembered score
    /// is forgotten and learning starts afresh. Default 0.3 (tidegate's addition; window noise
    /// on a saturated pool is a few percent, a capacity change is tens of percent).
    pub forget_threshold: f64,
    /// Client timeout, if known: a `Success` whose rtt is at or beyond it is counted as a
    /// failure (a timeout that looks like a success). Default none.
    pub timeout: Option<Nanos>,
    /// Seed of the exploration draws. Default 0.
    pub seed: u64,
}

impl Default for HillClimbConfig {
    fn default() -> HillClimbConfig {
        HillClimbConfig {
            initial: 30,
            min: 1,
            max: 400,
            resize_interval: Nanos::from_secs(1),
            min_window_samples: 10,
            exploration_ratio: 0.3,
            max_explore_step: 5,
            explore_down_chance: 0.5,
            range_ratio: 0.4,
            optimization_min_range: 6,
            latency_weight: 0.2,
            weight_of_latest: 0.2,
            forget_threshold: 0.3,
            timeout: None,
            seed: 0,
        }
    }
}

/// What one pool size has delivered: moving averages over the windows measured at that size.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
struct Score {
    /// Windows measured at this size; 0 means no data.
    windows: u32,
    /// Successful completions per second.
    throughput: f64,
    /// Mean rtt of successes, in seconds; 0 until a window had a success.
    latency: f64,
}

/// Kanaloa's autothrottle (github.com/iheartradio/kanaloa, `Autothrottler`, itself derived
/// from Akka's `DefaultOptimalSizeExploringResizer`), as a [`Limit`].
///
/// The limit is the pool size. Samples are grouped into measurement windows of one resize
/// interval (default 1 s, and at least `min_window_samples` = 10 samples). A window counts
/// only if the pool was *fully utilized* during it: at least half of its samples were admitted
/// with `inflight >= limit`. An under-utilized pool says nothing about capacity (there is no
/// overload to learn from), so such windows are dropped and the limit does not move: this is
/// what keeps hill climbing from running away or collapsing at low load.
///
/// At the end of a utilized window, the window's throughput (successes per second: drops and
/// timeouts are not throughput) and mean success rtt are folded into the current size's
/// moving averages (weight 0.2 for the newest). Then one of two moves, as in Kanaloa:
/// - **explore** (probability 0.3, or while fewer than two sizes nearby have data): move by a
///   uniform step in `1..=5`, up or down with equal probability;
/// - **optimize**: among sizes with data within `max(6, 0.4 x current)` of the current one,
///   take the one with the best improvement over the current size,
///   `0.8 x (throughput gain) + 0.2 x (latency gain)`, both relative, and move *half way*
///   towards it (rounded away from zero). No data nearby: stay.
///
/// Additions, each for a failure seen on the synthetic service (see the tests):
/// - after a resize, one round trip (the last window's mean rtt) is not measured, and a window
///   spans at least `limit` samples: those completions still belong to the previous size;
/// - when the current size measures more than 30% away from its memory, the service has
///   changed (capacity halved, deploy): all scores are forgotten, else stale scores hold the
///   walk where the old optimum was;
/// - a full window without a single success steps down by 5: all sizes there score zero, so
///   there is no gradient (e.g. every request timing out).
///
/// Departures from Kanaloa, each for a stated reason: Kanaloa counted failures as work done
/// (so fast failures looked like throughput) and could never step down by one (it rounded
/// `-0.5` up to `0`); it compared the nearest *logged* sizes rather than a distance; its
/// exploration went down only 30% of the time (a full pool might want more workers; under
/// overload the pool is always full and that bias kept it from coming down from 200). Its
/// 72-hour under-utilization downsizing is left out: tidegate's limit only matters when the
/// pool is full. A `timeout`, when known, turns pinned "successes" into failures.
///
/// Defaults are Kanaloa's (`reference.conf`: start 30, range 1..=400, resize every 1 s, step
/// 5, latency weight 0.2, newest-window weight 0.2, minimum range 6), except the exploration
/// ratio 0.3 and range ratio 0.4 from tidegate's DESIGN.md and the unbiased direction.
#[derive(Clone, Debug)]
pub struct HillClimb {
    config: HillClimbConfig,
    min: u32,
    max: u32,
    limit: u32,
    /// One score per size in `min..=max`.
    scores: Vec<Score>,
    rng: Rng,
    /// False until the first sample opens the first window.
    started: bool,
    /// Completions before this belong to the previous size and are not measured.
    measure_from: Time,
    /// When the current window may close.
    next_action: Time,
    /// Mean success rtt of the last measured window: how long a resize takes to settle.
    last_rtt: Nanos,
    samples: u32,
    busy: u32,
    successes: u32,
    success_rtt: Nanos,
}

impl HillClimb {
    pub fn new(config: &HillClimbConfig) -> HillClimb {
        let min = config.min.max(1);
        let max = config.max.clamp(min, min.saturating_add(MAX_SIZES - 1));
        HillClimb {
            config: config.clone(),
            min,
            max,
            limit: config.initial.clamp(min, max),
            scores: vec![Score::default(); (max - min + 1) as usize],
            rng: Rng::seed(config.seed),
            started: false,
            measure_from: Time::ZERO,
            next_action: Time::ZERO,
            last_rtt: Nanos::ZERO,
            samples: 0,
            busy: 0,
            successes: 0,
            success_rtt: Nanos::ZERO,
        }
    }

    fn score(&self, size: u32) -> Score {
        self.scores[(size - self.min) as usize]
    }

    /// Folds a window's measurements into the score of the current size; forgets every score
    /// first if the measurement says the service is no longer the one they describe.
    fn record(&mut self, throughput: f64, latency: Option<f64>) {
        let w = self.config.weight_of_latest.clamp(f64::MIN_POSITIVE, 1.0);
        let known = self.score(self.limit);
        let departure =
            (throughput - known.throughput).abs() / known.throughput.max(f64::MIN_POSITIVE);
        if known.windows > 0 && departure > self.config.forget_threshold {
            self.scores.fill(Score::default());
        }
        let entry = &mut self.scores[(self.limit - self.min) as usize];
        if entry.windows == 0 {
            entry.throughput = throughput;
        } else {
            entry.throughput += w * (throughput - entry.throughput);
        }
        if let Some(latency) = latency {
            if entry.latency == 0.0 {
                entry.latency = latency;
            } else {
                entry.latency += w * (latency - entry.latency);
            }
        }
        entry.windows = entry.windows.saturating_add(1);
    }

    /// The sizes optimization compares against the current one.
    fn neighbourhood(&self) -> (u32, u32) {
        let ratio = (f64::from(self.limit) * self.config.range_ratio.max(0.0)) as u32;
        let half = ratio.max(self.config.optimization_min_range).max(1);
        (
            self.limit.saturating_sub(half).max(self.min),
            self.limit.saturating_add(half).min(self.max),
        )
    }

    /// How much better `that` is than `current`, as Kanaloa weighs it: relative throughput
    /// gain and relative latency gain.
    fn improvement(&self, current: Score, that: Score) -> f64 {
        let w = self.config.latency_weight.clamp(0.0, 1.0);
        let throughput =
            (that.throughput - current.throughput) / current.throughput.max(f64::MIN_POSITIVE);
        let latency = if current.latency > 0.0 && that.latency > 0.0 {
            (current.latency - that.latency) / current.latency
        } else {
            0.0
        };
        w * latency + (1.0 - w) * throughput
    }

    /// The size an optimization step moves to.
    fn optimize(&self) -> u32 {
        let (low, high) = self.neighbourhood();
        let logged = |size: &u32| self.score(*size).windows > 0;
        // The current size's score, or (never measured) that of the nearest size with data.
        let reference = (low..=high)
            .filter(logged)
            .min_by_key(|size| size.abs_diff(self.limit));
        let Some(reference) = reference else {
            return self.limit;
        };
        let current = self.score(reference);
        let mut best = (reference, 0.0);
        for size in (low..=high).filter(logged) {
            let gain = self.improvement(current, self.score(size));
            if gain > best.1 {
                best = (size, gain);
            }
        }
        // Half way, rounded away from zero so that a neighbour one step away is reached.
        let distance = best.0.abs_diff(self.limit);
        let step = distance.div_ceil(2);
        if best.0 >= self.limit {
            self.limit + step
        } else {
            self.limit - step
        }
    }

    /// The size an exploration step moves to.
    fn explore(&mut self) -> u32 {
        let step = self
            .rng
            .range_inclusive(1, i64::from(self.config.max_explore_step.max(1)));
        let step = u32::try_from(step).unwrap_or(1);
        if self.rng.chance(self.config.explore_down_chance) {
            self.limit.saturating_sub(step).max(self.min)
        } else {
            self.limit.saturating_add(step).min(self.max)
        }
    }

    /// Explore or optimize, as Kanaloa does at each resize interval when the pool is full.
    fn decide(&mut self) -> u32 {
        if self.successes == 0 {
            // A full pool and not one success: every size here scores zero, so there is no
            // gradient to follow; stepping down is the only move that can find one.
            return self
                .limit
                .saturating_sub(self.config.max_explore_step.max(1))
                .max(self.min);
        }
        let (low, high) = self.neighbourhood();
        let known = (low..=high)
            .filter(|&size| self.score(size).windows > 0)
            .take(2)
            .count();
        let explore = self.rng.chance(self.config.exploration_ratio);
        if explore || known < 2 {
            self.explore()
        } else {
            self.optimize()
        }
    }

    /// Starts a new measurement window at `now`: skips the next `settle`, then measures for at
    /// least one resize interval.
    fn open_window(&mut self, now: Time, settle: Nanos) {
        self.measure_from = now + settle;
        self.next_action =
            self.measure_from + self.config.resize_interval.max(Nanos::from_nanos(1));
        self.samples = 0;
        self.busy = 0;
        self.successes = 0;
        self.success_rtt = Nanos::ZERO;
    }
}

impl Limit for HillClimb {
    fn limit(&self) -> u32 {
        self.limit
    }

    fn on_sample(&mut self, sample: &Sample) {
        if sample.outcome == Outcome::Ignored {
            return;
        }
        let now = sample.now;
        if !self.started {
            self.started = true;
            self.open_window(now, Nanos::ZERO);
        }
        if now < self.measure_from {
            return; // still the previous size's requests completing
        }
        self.samples += 1;
        if sample.inflight >= self.limit {
            self.busy += 1;
        }
        if sample.in_time(self.config.timeout) {
            self.successes += 1;
            self.success_rtt += sample.rtt;
        }
        // A window also spans at least one turnover of the pool (`limit` samples), so that a
        // slow service is judged on whole round trips, not on a burst of them.
        let enough = self.samples >= self.config.min_window_samples.max(self.limit);
        if now < self.next_action || !enough {
            return;
        }
        let elapsed = now.saturating_since(self.measure_from);
        if elapsed.is_zero() || self.busy * 2 < self.samples {
            // Not fully utilized: nothing to learn about capacity, so no resize either.
            self.open_window(now, Nanos::ZERO);
            return;
        }
        let latency = (self.successes > 0)
            .then(|| self.success_rtt.as_secs_f64() / f64::from(self.successes));
        self.record(f64::from(self.successes) / elapsed.as_secs_f64(), latency);
        if let Some(latency) = latency {
            self.last_rtt = Nanos::from_secs_f64(latency);
        }
        let next = self.decide().clamp(self.min, self.max);
        let settle = if next == self.limit {
            Nanos::ZERO
        } else {
            self.last_rtt
        };
        self.limit = next;
        self.open_window(now, settle);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::testkit::{Load, Service, run};

    fn secs(s: u64) -> Nanos {
        Nanos::from_secs(s)
    }

    fn config(initial: u32) -> HillClimbConfig {
        HillClimbConfig {
            initial,
            ..HillClimbConfig::default()
        }
    }

    /// Feeds `HillClimb` `n + 1` samples, all admitted at the limit, evenly over `span` from
    /// `start` (both ends included), each with `rtt` and `outcome`; returns the last time.
    fn window(
        hc: &mut HillClimb,
        start: Time,
        span: Nanos,
        n: u32,
        rtt: Nanos,
        outcome: Outcome,
    ) -> Time {
        let mut now = start;
        for i in 0..=n {
            now = start + Nanos::from_nanos(span.as_nanos() * u64::from(i) / u64::from(n));
            hc.on_sample(&Sample {
                now,
                rtt,
                inflight: hc.limit(),
                outcome,
            });
        }
        now
    }

    #[test]
    fn kanaloa_walk_from_its_cap_of_60_down_to_the_optimum_of_20() {
        // Kanaloa's experiment: the pool sits at its cap of 60 when overload starts, and the
        // autothrottle walks it down to the service's 20 "gradually" (minutes). Here: within
        // two minutes, then it stays around 20 with exploration excursions of a few requests.
        let mut hc = HillClimb::new(&HillClimbConfig {
            initial: 60,
            max: 60,
            ..HillClimbConfig::default()
        });
        let trace = run(&mut hc, &Service::kanaloa(), Load::Saturating, secs(600));
        let mean = trace.mean_limit(secs(200), secs(600));
        assert!((18.0..24.0).contains(&mean), "{mean}");
        let settled = trace
            .settled_within(Nanos::ZERO, 20.0, 0.5)
            .expect("stays within 10..=30");
        assert!(settled < secs(200), "{settled:?}");
        assert!(trace.limit_at(secs(30)) > 40, "a walk, not a jump");
        // Settled near 20, goodput is close to the service's best of 200 per second.
        let goodput = trace.goodput(secs(200), secs(600));
        assert!(goodput > 180.0, "{goodput}");
    }

    #[test]
    fn halving_capacity_brings_the_limit_down_and_recovery_brings_it_back() {
        // The optimum goes 20 -> 10 at 200 s and back at 400 s. The measured throughput of the
        // current size departs from its memory by far more than 30%: the table is forgotten
        // and the walk restarts from fresh data, so it comes down within about a minute.
        let mut hc = HillClimb::new(&config(30));
        let trace = run(
            &mut hc,
            &Service::halving(secs(200), secs(400)),
            Load::Saturating,
            secs(600),
        );
        let before = trace.mean_limit(secs(100), secs(200));
        let halved = trace.mean_limit(secs(300), secs(400));
        let after = trace.mean_limit(secs(500), secs(600));
        assert!((17.0..25.0).contains(&before), "{before}");
        assert!((8.0..15.0).contains(&halved), "{halved}");
        assert!((17.0..25.0).contains(&after), "{after}");
        assert!(
            trace.limit_at(secs(440)) > 15,
            "recovers within 40 s: {}",
            trace.limit_at(secs(440))
        );
    }

    #[test]
    fn cold_start_on_a_warming_service_settles_once_it_is_warm() {
        // After a deploy the service is 4x slower (400 ms) and warms up to 100 ms over 30 s.
        // Scores measured while cold are forgotten as soon as a size is re-measured warm.
        let mut warm = Service::kanaloa();
        warm.base = Nanos::from_millis(400);
        let warm = warm.with_base_ramp(Nanos::ZERO, secs(30), 0.25);
        let mut hc = HillClimb::new(&HillClimbConfig::default());
        let trace = run(&mut hc, &warm, Load::Saturating, secs(300));
        let mean = trace.mean_limit(secs(100), secs(300));
        assert!((17.0..25.0).contains(&mean), "{mean}");
        assert!(trace.max_limit() <= 45, "{}", trace.max_limit());
    }

    #[test]
    fn approach_from_above_is_slow_but_does_not_collapse() {
        // From 200 on a service whose optimum is 20 the landscape is nearly flat (throughput
        // falls as limit^-0.2 there), so each step gains about 1%: hill climbing gets down,
        // but it takes about a quarter of an hour. It never undershoots towards 1.
        let mut hc = HillClimb::new(&config(200));
        let trace = run(&mut hc, &Service::kanaloa(), Load::Saturating, secs(1200));
        assert!(
            trace.limit_at(secs(300)) > 100,
            "slow: {}",
            trace.limit_at(secs(300))
        );
        let end = trace.mean_limit(secs(1100), secs(1200));
        assert!((15.0..26.0).contains(&end), "{end}");
        assert!(trace.min_limit() >= 8, "{}", trace.min_limit());
    }

    #[test]
    fn a_stable_timeout_needs_the_timeout_to_be_known() {
        // The client gives up at 300 ms and the give-up looks like a success. Past 50 in
        // flight every request "succeeds" in exactly 300 ms, so throughput = limit / 0.3 s
        // grows with the limit: to a hill climber bigger looks better.
        let service = Service::stable_timeout(Nanos::from_millis(300));
        // Weakness, pinned: not told the timeout and started above 50, it climbs away.
        let mut hc = HillClimb::new(&config(60));
        let blind = run(&mut hc, &service, Load::Saturating, secs(600));
        assert!(
            blind.limit_at(secs(600)) > 100,
            "{}",
            blind.limit_at(secs(600))
        );
        // Started at the optimum, the pinned region is out of reach: it stays near 20.
        let mut hc = HillClimb::new(&config(20));
        let local = run(&mut hc, &service, Load::Saturating, secs(600));
        assert!(local.mean_limit(secs(100), secs(600)) < 25.0);
        assert!(local.max_limit() < 40, "{}", local.max_limit());
        // Told the timeout, pinned successes are failures, zero-success windows step down,
        // and it finds 20 from above.
        let told = HillClimbConfig {
            timeout: Some(Nanos::from_millis(300)),
            ..config(60)
        };
        let mut hc = HillClimb::new(&told);
        let trace = run(&mut hc, &service, Load::Saturating, secs(600));
        let mean = trace.mean_limit(secs(200), secs(600));
        assert!((17.0..25.0).contains(&mean), "{mean}");
        assert!(trace.max_limit() <= 62, "{}", trace.max_limit());
    }

    /// Passes every sample on, and after each one a `Dropped` sample with a 1 us rtt: an
    /// upstream that refuses as many requests as it serves, instantly.
    #[derive(Debug)]
    struct FastDrops<L>(L);

    impl<L: Limit> Limit for FastDrops<L> {
        fn limit(&self) -> u32 {
            self.0.limit()
        }
        fn on_sample(&mut self, sample: &Sample) {
            self.0.on_sample(sample);
            let drop = Sample {
                rtt: Nanos::from_micros(1),
                outcome: Outcome::Dropped,
                ..*sample
            };
            self.0.on_sample(&drop);
        }
    }

    #[test]
    fn fast_drops_are_neither_throughput_nor_latency() {
        // Kanaloa counted failed work as work done, so instant refusals looked like extra
        // throughput at whatever size produced them. Here only successes are throughput and
        // only successes' rtt is latency: a drop is a sample for utilization, nothing else.
        // The walk is the same, step for step, as without the drops.
        let mut plain = HillClimb::new(&config(30));
        let without = run(&mut plain, &Service::kanaloa(), Load::Saturating, secs(300));
        let mut dropping = FastDrops(HillClimb::new(&config(30)));
        let with = run(
            &mut dropping,
            &Service::kanaloa(),
            Load::Saturating,
            secs(300),
        );
        assert_eq!(with.limits, without.limits);
        // And a pool where everything fails steps down by 5 at each decision rather than
        // wandering, down to the floor.
        let mut hc = HillClimb::new(&config(30));
        let mut now = Time::ZERO;
        let mut seen = vec![hc.limit()];
        for _ in 0..2_000 {
            now += Nanos::from_millis(10);
            hc.on_sample(&Sample {
                now,
                rtt: Nanos::from_micros(1),
                inflight: hc.limit(),
                outcome: Outcome::Dropped,
            });
            if seen.last() != Some(&hc.limit()) {
                seen.push(hc.limit());
            }
        }
        assert_eq!(seen, [30, 25, 20, 15, 10, 5, 1]);
    }

    #[test]
    fn low_load_never_moves_the_limit() {
        // At 5, 20 or 150 rps the service (200 rps at 20 in flight) is never the bottleneck:
        // the pool is never full, windows are not measured, and nothing moves. No runaway
        // and no collapse, however few samples a window holds.
        for rps in [5.0, 20.0, 150.0] {
            let mut hc = HillClimb::new(&config(30));
            let trace = run(
                &mut hc,
                &Service::kanaloa(),
                Load::Poisson { rps },
                secs(300),
            );
            assert_eq!(
                (trace.min_limit(), trace.max_limit()),
                (30, 30),
                "{rps} rps"
            );
            assert!(
                trace.completions.len() as f64 > 250.0 * rps,
                "{rps} rps were served"
            );
        }
    }

    #[test]
    fn a_slowly_drifting_base_latency_does_not_move_the_optimum() {
        // The service's base latency triples over three minutes under load: every size gets
        // slower alike, the optimum stays at 20. Scores are relative, so the walk holds.
        let service = Service::kanaloa().with_base_ramp(secs(60), secs(240), 3.0);
        let mut hc = HillClimb::new(&config(30));
        let trace = run(&mut hc, &service, Load::Saturating, secs(600));
        let mean = trace.mean_limit(secs(300), secs(600));
        assert!((17.0..26.0).contains(&mean), "{mean}");
    }

    #[test]
    fn scores_are_kept_per_size_and_optimize_moves_half_way_to_the_best() {
        let mut hc = HillClimb::new(&HillClimbConfig {
            exploration_ratio: 0.0,
            ..config(30)
        });
        // One window: 50 successes in 1 s at 300 ms. Too little data nearby, so the decision
        // explores, by 1..=5.
        let now = window(
            &mut hc,
            Time::ZERO,
            secs(1),
            49,
            Nanos::from_millis(300),
            Outcome::Success,
        );
        let first = hc.score(30);
        assert_eq!(first.windows, 1);
        assert!((first.throughput - 50.0).abs() < 1e-9, "{first:?}");
        assert!((first.latency - 0.3).abs() < 1e-9);
        assert_ne!(hc.limit(), 30);
        assert!(hc.limit().abs_diff(30) <= 5);
        assert_eq!(
            hc.measure_from,
            now + Nanos::from_millis(300),
            "one round trip to settle"
        );
        // A second window at 30, with 60 per second, is folded in with weight 0.2: 52.
        hc.limit = 30;
        hc.open_window(now, Nanos::ZERO);
        window(
            &mut hc,
            now,
            secs(1),
            59,
            Nanos::from_millis(300),
            Outcome::Success,
        );
        assert_eq!(hc.score(30).windows, 2);
        assert!(
            (hc.score(30).throughput - 52.0).abs() < 1e-9,
            "{:?}",
            hc.score(30)
        );
        // Sizes 20 and 30 known, 20 much better: optimize goes half way, to 25.
        let score = |throughput, latency| Score {
            windows: 1,
            throughput,
            latency,
        };
        hc.scores.fill(Score::default());
        hc.scores[19] = score(200.0, 0.1);
        hc.scores[29] = score(60.0, 0.3);
        hc.limit = 30;
        assert_eq!(hc.optimize(), 25);
        // One step away is reached, not rounded to zero (Kanaloa's ceil(-0.5) = 0).
        hc.scores[28] = score(100.0, 0.25);
        hc.limit = 30;
        assert_eq!(hc.neighbourhood(), (18, 42));
        hc.scores[19] = Score::default();
        assert_eq!(hc.optimize(), 29);
        // Equal scores: stay. Nothing known nearby: stay.
        hc.scores[28] = hc.scores[29];
        assert_eq!(hc.optimize(), 30);
        hc.scores.fill(Score::default());
        hc.scores[99] = score(500.0, 0.1);
        assert_eq!(hc.optimize(), 30, "size 100 is out of range of 30");
        // Latency weighs 0.2: 10% less throughput is not bought back by 30% less latency...
        hc.scores.fill(Score::default());
        hc.scores[29] = score(100.0, 0.3);
        hc.scores[31] = score(90.0, 0.21);
        assert_eq!(hc.optimize(), 30);
        // ...but 50% less latency is.
        hc.scores[31] = score(90.0, 0.15);
        assert_eq!(hc.optimize(), 31);
    }

    #[test]
    fn explores_at_the_configured_ratio_within_the_step() {
        let mut hc = HillClimb::new(&HillClimbConfig {
            seed: 7,
            ..config(30)
        });
        hc.scores[29] = Score {
            windows: 1,
            throughput: 100.0,
            latency: 0.1,
        };
        hc.scores[30] = Score {
            windows: 1,
            throughput: 100.0,
            latency: 0.1,
        };
        hc.successes = 1;
        let (mut explored, mut down) = (0, 0);
        for _ in 0..10_000 {
            let next = hc.decide();
            if next != 30 {
                explored += 1;
                assert!(next.abs_diff(30) <= 5, "{next}");
                down += u32::from(next < 30);
            }
        }
        assert!((2_800..3_200).contains(&explored), "{explored}");
        assert!((1_300..1_700).contains(&down), "{down}");
    }

    #[test]
    fn bounds_hold_and_the_table_is_capped() {
        let hc = HillClimb::new(&HillClimbConfig {
            initial: 0,
            min: 0,
            ..HillClimbConfig::default()
        });
        assert_eq!(hc.limit(), 1);
        let hc = HillClimb::new(&HillClimbConfig {
            max: u32::MAX,
            ..HillClimbConfig::default()
        });
        assert_eq!((hc.max, hc.scores.len()), (4096, 4096));
        let hc = HillClimb::new(&HillClimbConfig {
            initial: 90,
            min: 50,
            max: 10,
            ..HillClimbConfig::default()
        });
        assert_eq!((hc.limit(), hc.min, hc.max), (50, 50, 50));
        let narrow = HillClimbConfig {
            initial: 20,
            min: 15,
            max: 25,
            ..HillClimbConfig::default()
        };
        let mut hc = HillClimb::new(&narrow);
        let trace = run(
            &mut hc,
            &Service::halving(secs(100), secs(200)),
            Load::Saturating,
            secs(300),
        );
        assert!(trace.min_limit() >= 15 && trace.max_limit() <= 25);
        assert!(
            trace.min_limit() == 15,
            "the halving pushed it to its floor"
        );
    }

    #[test]
    fn ignored_samples_change_nothing() {
        let mut hc = HillClimb::new(&config(30));
        let mut now = window(
            &mut hc,
            Time::ZERO,
            secs(2),
            100,
            Nanos::from_millis(100),
            Outcome::Success,
        );
        let before = format!("{hc:?}");
        for _ in 0..1000 {
            now += Nanos::from_millis(10);
            hc.on_sample(&Sample {
                now,
                rtt: Nanos::from_micros(1),
                inflight: 500,
                outcome: Outcome::Ignored,
            });
        }
        assert_eq!(format!("{hc:?}"), before);
    }

    #[test]
    fn the_seed_decides_the_walk() {
        let walk = |seed| {
            let mut hc = HillClimb::new(&HillClimbConfig { seed, ..config(30) });
            run(&mut hc, &Service::kanaloa(), Load::Saturating, secs(120)).limits
        };
        assert_eq!(walk(1), walk(1));
        assert_ne!(walk(1), walk(2));
    }

    #[test]
    fn config_round_trips_and_rejects_unknown_keys() {
        let config = HillClimbConfig {
            timeout: Some(Nanos::from_millis(300)),
            ..HillClimbConfig::default()
        };
        let text = toml::to_string(&config).expect("serializes");
        assert!(text.contains("resize_interval = \"1s\""), "{text}");
        assert_eq!(
            toml::from_str::<HillClimbConfig>(&text).expect("parses"),
            config
        );
        assert_eq!(
            toml::from_str::<HillClimbConfig>("").expect("defaults"),
            HillClimbConfig::default()
        );
        assert!(toml::from_str::<HillClimbConfig>("exploration = 0.3").is_err());
    }
}

//! Client models: when requests go out, what they look like, and how long their callers wait.
//!
//! Open loop ([`Arrivals::Constant`], [`Arrivals::Poisson`]): requests go out on a schedule
//! of rates, whatever happens to the earlier ones, as Gatling and the seed documents' load
//! generators do; the rate steps from phase to phase or ramps within one. An optional
//! connection cap bounds the requests outstanding at once: an arrival that finds every
//! connection busy is not sent (Gatling's 900 connections in Kanaloa's runs, the demo client's
//! 10 workers, whose Go ticker drops the ticks its busy workers miss). Closed loop
//! ([`Arrivals::Closed`]): `workers` callers each send a request, wait for its outcome, think,
//! and send the next.
//!
//! Every request has a tier drawn from the mix and, with caller keys, a cohort from a key
//! drawn uniformly among `keys` (through the core's [`CohortMap`], as a deployment would
//! compute it). The caller waits `timeout` for each attempt, then gives up; a failed attempt
//! may be retried after a backoff.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use tidegate_core::priority::CohortMap;
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Priority, Time};

use crate::{ConfigError, NonNegative};

/// How requests are sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Evenly spaced at the rate.
    Constant,
    /// Exponential gaps with the rate as mean rate.
    #[default]
    Poisson,
    /// `workers` callers in a loop; no rate.
    Closed,
    /// At the listed `times`, from the start of the run (a recorded arrival process).
    Trace,
}

/// `[load]`: the clients of a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadConfig {
    #[serde(default)]
    pub arrivals: Arrivals,
    /// Requests per second, for the whole run (open loop, without `phases`).
    pub rate: Option<NonNegative>,
    /// Several load points: the scenario runs once at each constant rate (a sweep).
    #[serde(default)]
    pub rates: Vec<NonNegative>,
    /// Rates over time, in order; the last phase lasts to the end of the run.
    #[serde(default)]
    pub phases: Vec<Phase>,
    /// Callers of a closed loop.
    pub workers: Option<NonZeroU32>,
    /// The arrival times of `arrivals = "trace"`, from the start of the run, increasing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub times: Vec<Nanos>,
    /// A closed-loop caller's pause between an outcome and its next request. Default 0s.
    #[serde(default)]
    pub think: Nanos,
    /// How long a caller waits for each attempt before giving up.
    pub timeout: Nanos,
    /// Most requests outstanding at once (open loop); arrivals beyond are not sent.
    pub connections: Option<NonZeroU32>,
    /// The tier mix. Default all tier 3 (tidegate's default priority).
    #[serde(default = "default_tiers")]
    pub tiers: Vec<TierShare>,
    /// Distinct caller keys, each mapped to a cohort; 0 for none (cohort 0). Default 0.
    #[serde(default)]
    pub keys: u32,
    /// How keys map to cohorts.
    #[serde(default)]
    pub cohorts: CohortMap,
    #[serde(default)]
    pub retries: RetryConfig,
}

fn default_tiers() -> Vec<TierShare> {
    vec![TierShare {
        tier: Priority::default().tier(),
        weight: NonNegative::new(1.0).unwrap_or_default(),
    }]
}

/// A stretch of the run at a rate, or ramping from `rate` to `to`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Phase {
    pub duration: Nanos,
    pub rate: NonNegative,
    /// Rate at the end of the phase, reached linearly.
    pub to: Option<NonNegative>,
}

/// A share of the traffic at one tier: `{ tier = 1, weight = 0.5 }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierShare {
    pub tier: u8,
    pub weight: NonNegative,
}

/// Whether and how a failed attempt is tried again.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryConfig {
    /// Attempts after the first. Default 0.
    pub max: u32,
    /// Pause before a retry. Default 0s.
    pub backoff: Nanos,
    /// Retry attempts that were turned away (shed, expired, refused). Default true when
    /// `max` > 0.
    pub on_rejection: Option<bool>,
    /// Retry attempts that timed out. Default false.
    pub on_timeout: bool,
}

impl RetryConfig {
    pub fn on_rejection(&self) -> bool {
        self.on_rejection.unwrap_or(true)
    }
}

impl LoadConfig {
    /// Clients that send at recorded `times` from the start (increasing), each waiting
    /// `timeout`, every request at the default tier.
    pub fn trace(times: Vec<Nanos>, timeout: Nanos) -> LoadConfig {
        LoadConfig {
            arrivals: Arrivals::Trace,
            rate: None,
            rates: Vec::new(),
            phases: Vec::new(),
            workers: None,
            times,
            think: Nanos::ZERO,
            timeout,
            connections: None,
            tiers: default_tiers(),
            keys: 0,
            cohorts: CohortMap::default(),
            retries: RetryConfig::default(),
        }
    }

    /// Checks what the parser cannot: relations between keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.timeout.is_zero() {
            return Err(ConfigError::new("load.timeout", "must be longer than zero"));
        }
        let open = [
            (self.rate.is_some(), "rate"),
            (!self.rates.is_empty(), "rates"),
            (!self.phases.is_empty(), "phases"),
        ];
        let given: Vec<&str> = open.iter().filter(|(g, _)| *g).map(|(_, k)| *k).collect();
        match self.arrivals {
            Arrivals::Closed => {
                if self.workers.is_none() {
                    return Err(ConfigError::new(
                        "load.workers",
                        "a closed loop needs its number of workers",
                    ));
                }
                if let Some(key) = given.first() {
                    return Err(ConfigError::new(
                        format!("load.{key}"),
                        "a closed loop has no rate (its workers pace themselves)",
                    ));
                }
                if self.connections.is_some() {
                    return Err(ConfigError::new(
                        "load.connections",
                        "a closed loop is capped by its workers",
                    ));
                }
            }
            Arrivals::Trace => {
                if let Some(key) = given.first() {
                    return Err(ConfigError::new(
                        format!("load.{key}"),
                        "a trace has no rate (its times are the arrivals)",
                    ));
                }
                if self.times.is_empty() {
                    return Err(ConfigError::new(
                        "load.times",
                        "a trace needs at least one arrival time",
                    ));
                }
                if let Some(i) = self.times.windows(2).position(|w| w[1] < w[0]) {
                    return Err(ConfigError::new(
                        format!("load.times[{}]", i + 1),
                        "arrival times must not decrease",
                    ));
                }
            }
            Arrivals::Constant | Arrivals::Poisson => {
                if given.len() != 1 {
                    return Err(ConfigError::new(
                        "load.rate",
                        "give exactly one of `rate`, `rates` (a sweep) or `phases`",
                    ));
                }
                if self.workers.is_some() {
                    return Err(ConfigError::new(
                        "load.workers",
                        "workers are for `arrivals = \"closed\"`",
                    ));
                }
            }
        }
        if self.arrivals != Arrivals::Trace && !self.times.is_empty() {
            return Err(ConfigError::new(
                "load.times",
                "arrival times are for `arrivals = \"trace\"`",
            ));
        }
        if self.tiers.is_empty() || self.tiers.iter().all(|t| t.weight.get() == 0.0) {
            return Err(ConfigError::new(
                "load.tiers",
                "needs at least one tier with a positive weight",
            ));
        }
        if let Some(i) = self
            .tiers
            .iter()
            .position(|t| Priority::new(t.tier.into(), 0).is_err())
        {
            return Err(ConfigError::new(
                format!("load.tiers[{i}].tier"),
                "a tier is 0 (most important) to 5",
            ));
        }
        if self.retries.max > 100 {
            return Err(ConfigError::new("load.retries.max", "at most 100"));
        }
        Ok(())
    }

    /// The load points of a sweep: one run per point (`None`: the configured schedule).
    pub fn points(&self) -> Vec<Option<f64>> {
        if self.rates.is_empty() {
            vec![None]
        } else {
            self.rates.iter().map(|r| Some(r.get())).collect()
        }
    }

    /// The rate schedule, with a sweep point's rate replacing the configured one.
    pub fn schedule(&self, point: Option<f64>) -> RateSchedule {
        if let Some(rate) = point.or(self.rate.map(NonNegative::get)) {
            return RateSchedule {
                segments: vec![Segment::new(0, u64::MAX, rate, rate)],
            };
        }
        let mut segments = Vec::with_capacity(self.phases.len() + 1);
        let mut start = 0u64;
        for phase in &self.phases {
            let end = start.saturating_add(phase.duration.as_nanos());
            let from = phase.rate.get();
            segments.push(Segment::new(
                start,
                end,
                from,
                phase.to.map_or(from, NonNegative::get),
            ));
            start = end;
        }
        // The last phase lasts to the end of the run, at its final rate.
        if let Some(last) = segments.last() {
            let rate = last.to;
            segments.push(Segment::new(start, u64::MAX, rate, rate));
        }
        RateSchedule { segments }
    }

    /// The arrival times of an open loop (`None` for a closed one), with a sweep point's
    /// rate replacing the configured one.
    pub fn open_loop(&self, point: Option<f64>) -> Option<OpenLoop> {
        match self.arrivals {
            Arrivals::Closed => None,
            Arrivals::Trace => Some(OpenLoop::trace(&self.times)),
            Arrivals::Constant | Arrivals::Poisson => {
                Some(OpenLoop::new(self.schedule(point), self.arrivals))
            }
        }
    }

    /// The rate a report names a run by: the sweep point, else the last phase's final rate,
    /// else a trace's mean rate.
    pub fn nominal_rate(&self, point: Option<f64>) -> f64 {
        if self.arrivals == Arrivals::Trace {
            let span = self.times.last().map_or(0.0, |t| t.as_secs_f64());
            return if span > 0.0 {
                self.times.len() as f64 / span
            } else {
                0.0
            };
        }
        point
            .or(self.rate.map(NonNegative::get))
            .or(self.phases.last().map(|p| p.to.unwrap_or(p.rate).get()))
            .unwrap_or(0.0)
    }
}

#[derive(Clone, Debug, PartialEq)]
struct Segment {
    start: u64,
    end: u64,
    from: f64,
    to: f64,
    /// The length in seconds and the slope of the rate per second, of a segment that ends;
    /// computed once here rather than on every arrival (two divisions in the chain of each
    /// gap), with the same operations, so to the same bits.
    span: f64,
    slope: f64,
}

impl Segment {
    fn new(start: u64, end: u64, from: f64, to: f64) -> Segment {
        let (span, slope) = if end == u64::MAX {
            (f64::INFINITY, 0.0)
        } else {
            let span = (end - start) as f64 / 1e9;
            (span, (to - from) / span)
        };
        Segment {
            start,
            end,
            from,
            to,
            span,
            slope,
        }
    }
}

/// Requests per second over time.
#[derive(Clone, Debug, PartialEq)]
pub struct RateSchedule {
    segments: Vec<Segment>,
}

impl RateSchedule {
    /// The rate at `t`.
    pub fn rate_at(&self, t: Time) -> f64 {
        let t = t.as_nanos();
        match self.segments.iter().find(|s| t < s.end) {
            Some(s) if s.from == s.to => s.from,
            Some(s) => {
                let span = (s.end - s.start) as f64;
                s.from + (s.to - s.from) * ((t - s.start) as f64 / span)
            }
            None => 0.0,
        }
    }

    /// The time after `t` by which `mass` requests are due: the integral of the rate from
    /// `t` reaches `mass`. `None` if it never does.
    fn advance(&self, t: Time, mut mass: f64) -> Option<Time> {
        let t = t.as_nanos();
        for s in self.segments.iter().filter(|s| t < s.end) {
            let from_ns = t.max(s.start);
            // Within the segment, in seconds from its start: rate(x) = from + slope * x.
            let x0 = (from_ns - s.start) as f64 / 1e9;
            let slope = s.slope;
            let (rate0, remaining) = if s.end == u64::MAX {
                (s.from, f64::INFINITY)
            } else {
                let rate0 = s.from + slope * x0;
                let x1 = s.span;
                (
                    rate0,
                    rate0 * (x1 - x0) + slope / 2.0 * (x1 - x0) * (x1 - x0),
                )
            };
            if mass <= remaining {
                // Solve rate0 * d + slope / 2 * d^2 = mass for the step d >= 0.
                let d = if slope.abs() < 1e-12 {
                    if rate0 <= 0.0 {
                        return None;
                    }
                    mass / rate0
                } else {
                    (-rate0 + (rate0 * rate0 + 2.0 * slope * mass).max(0.0).sqrt()) / slope
                };
                let step = Nanos::from_secs_f64(d).max(Nanos::from_nanos(1));
                return Some(Time::from_nanos(from_ns) + step);
            }
            mass -= remaining;
        }
        None
    }
}

/// Open-loop arrival times.
#[derive(Clone, Debug)]
pub struct OpenLoop {
    gaps: Gaps,
}

#[derive(Clone, Debug)]
enum Gaps {
    Rate {
        schedule: RateSchedule,
        poisson: bool,
    },
    /// Strictly increasing, all after the start.
    Trace(Vec<Time>),
}

impl OpenLoop {
    pub fn new(schedule: RateSchedule, arrivals: Arrivals) -> OpenLoop {
        OpenLoop {
            gaps: Gaps::Rate {
                schedule,
                poisson: arrivals == Arrivals::Poisson,
            },
        }
    }

    /// Arrivals at recorded times from the start. Arrivals at the same nanosecond (a log
    /// with millisecond timestamps has many) are spaced one nanosecond apart, and one at the
    /// start itself goes one nanosecond after it, so that each time is the next after the
    /// one before: none is lost, none moves by more than their number of nanoseconds.
    pub fn trace(times: &[Nanos]) -> OpenLoop {
        let mut last = Time::ZERO;
        let times = times
            .iter()
            .map(|&t| {
                last = (Time::ZERO + t).max(last + Nanos::from_nanos(1));
                last
            })
            .collect();
        OpenLoop {
            gaps: Gaps::Trace(times),
        }
    }

    /// The next arrival after one at `t` (or after the start, for the first); `None` when
    /// the rate stays zero from `t` on, or the trace has ended.
    ///
    /// The gap is exact for rates that step and ramp: the next arrival is when the integral
    /// of the rate from `t` reaches one (constant) or an Exp(1) draw (Poisson: a
    /// non-homogeneous Poisson process by time change). A trace draws nothing.
    pub fn next_after(&self, t: Time, rng: &mut Rng) -> Option<Time> {
        match &self.gaps {
            Gaps::Rate { schedule, poisson } => {
                let mass = if *poisson {
                    -(1.0 - rng.next_f64()).ln()
                } else {
                    1.0
                };
                schedule.advance(t, mass)
            }
            Gaps::Trace(times) => times.get(times.partition_point(|&a| a <= t)).copied(),
        }
    }
}

/// Draws each request's priority: its tier from the mix, its cohort from its caller key.
#[derive(Clone, Debug)]
pub struct Mix {
    /// Cumulative weights, normalized, with their tiers.
    cumulative: Vec<(f64, u8)>,
    keys: u32,
    cohorts: CohortMap,
    /// Each key's last cohort and until when it holds ([`CohortMap::cohort_until`]): a key
    /// keeps its cohort for minutes, so most draws find it here instead of hashing. Packed
    /// in 8 bytes so that the table stays in cache: the time in nanoseconds rounded down to
    /// a multiple of 128 (a key is hashed again up to 127 ns early, which changes nothing),
    /// the cohort (0..=127) in the low 7 bits. Empty (every draw hashes) past
    /// [`Mix::CACHED_KEYS`] keys.
    cached: Vec<u64>,
}

impl Mix {
    /// The most keys whose cohorts are kept (8 bytes each).
    pub const CACHED_KEYS: u32 = 1 << 20;

    pub fn new(config: &LoadConfig) -> Mix {
        let total: f64 = config.tiers.iter().map(|t| t.weight.get()).sum();
        let mut acc = 0.0;
        let cumulative = config
            .tiers
            .iter()
            .map(|t| {
                acc += t.weight.get() / total;
                (acc, t.tier)
            })
            .collect();
        let cached = if config.keys <= Mix::CACHED_KEYS {
            // Holds until time 0: the first draw of each key hashes it.
            vec![0; config.keys as usize]
        } else {
            Vec::new()
        };
        Mix {
            cumulative,
            keys: config.keys,
            cohorts: config.cohorts,
            cached,
        }
    }

    /// The tier of the draw `u` in `[0, 1)`: the first whose cumulative weight is above `u`
    /// (the last if rounding left them all at or below it). The weights are not negative, so
    /// the cumulative ones never decrease and those at or below `u` come first: counting
    /// them finds the same tier without a loop exit that depends on `u`, which the processor
    /// would mispredict on most draws of a mix of tiers.
    fn tier_at(&self, u: f64) -> u8 {
        let below = self.cumulative.iter().filter(|(c, _)| *c <= u).count();
        self.cumulative
            .get(below)
            .or(self.cumulative.last())
            .map_or(Priority::default().tier(), |&(_, tier)| tier)
    }

    /// A request's priority at `now` (the run's time stands in for the shared wall clock).
    pub fn draw(&mut self, rng: &mut Rng, now: Time) -> Priority {
        let tier = self.tier_at(rng.next_f64());
        let cohort = if self.keys == 0 {
            0
        } else {
            let key = rng.range_inclusive(0, i64::from(self.keys) - 1) as u64;
            const COHORT_BITS: u64 = 0x7f;
            match self.cached.get_mut(key as usize) {
                Some(entry) if now.as_nanos() < *entry & !COHORT_BITS => {
                    (*entry & COHORT_BITS) as u8
                }
                Some(entry) => {
                    let (cohort, until) = self.cohorts.cohort_until(&key.to_le_bytes(), now);
                    *entry = until.as_nanos() & !COHORT_BITS | u64::from(cohort);
                    cohort
                }
                None => self.cohorts.cohort(&key.to_le_bytes(), now),
            }
        };
        Priority::new(tier.into(), cohort.into()).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(doc: &str) -> LoadConfig {
        toml::from_str(doc).unwrap()
    }

    fn secs(s: f64) -> Time {
        Time::ZERO + Nanos::from_secs_f64(s)
    }

    #[test]
    fn phases_step_and_ramp() {
        let l = load(
            "timeout = \"1s\"\n[[phases]]\nduration = \"10s\"\nrate = 100\n[[phases]]\nduration = \"10s\"\nrate = 100\nto = 200\n[[phases]]\nduration = \"5s\"\nrate = 50\n",
        );
        l.validate().unwrap();
        let s = l.schedule(None);
        assert_eq!(s.rate_at(secs(5.0)), 100.0);
        assert_eq!(s.rate_at(secs(15.0)), 150.0);
        assert_eq!(s.rate_at(secs(20.0)), 50.0);
        assert_eq!(s.rate_at(secs(1000.0)), 50.0, "the last phase lasts");
        assert_eq!(l.nominal_rate(None), 50.0);
    }

    #[test]
    fn a_final_ramp_holds_its_end_rate() {
        let l = load("timeout = \"1s\"\n[[phases]]\nduration = \"10s\"\nrate = 0\nto = 100\n");
        let s = l.schedule(None);
        assert_eq!(s.rate_at(secs(5.0)), 50.0);
        assert_eq!(s.rate_at(secs(50.0)), 100.0);
        let open = OpenLoop::new(s, Arrivals::Constant);
        let first = open.next_after(Time::ZERO, &mut Rng::seed(1)).unwrap();
        assert!(first > Time::ZERO && first < secs(10.0), "{first:?}");
    }

    #[test]
    fn a_trace_sends_each_time_once_even_at_the_same_nanosecond() {
        let l = load(
            "arrivals = \"trace\"\ntimeout = \"1s\"\ntimes = [\"0s\", \"2ms\", \"2ms\", \"5ms\"]\n",
        );
        l.validate().unwrap();
        let open = l.open_loop(None).unwrap();
        let mut rng = Rng::seed(1);
        let mut t = Time::ZERO;
        let mut sent = Vec::new();
        while let Some(next) = open.next_after(t, &mut rng) {
            sent.push(next.as_nanos());
            t = next;
        }
        assert_eq!(sent, [1, 2_000_000, 2_000_001, 5_000_000]);
        assert_eq!(l.nominal_rate(None), 800.0);
    }

    #[test]
    fn a_trace_is_checked() {
        let err = load("arrivals = \"trace\"\ntimeout = \"1s\"\ntimes = [\"3ms\", \"2ms\"]\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "load.times[1]");
        let err = load("arrivals = \"trace\"\ntimeout = \"1s\"\nrate = 5\ntimes = [\"3ms\"]\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "load.rate");
        let err = load("timeout = \"1s\"\nrate = 5\ntimes = [\"3ms\"]\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "load.times");
    }

    #[test]
    fn poisson_arrivals_have_the_rate() {
        let l = load("timeout = \"1s\"\nrate = 250\n");
        let open = OpenLoop::new(l.schedule(None), Arrivals::Poisson);
        let mut rng = Rng::seed(9);
        let (mut t, mut n) = (Time::ZERO, 0);
        while let Some(next) = open.next_after(t, &mut rng) {
            if next > secs(100.0) {
                break;
            }
            t = next;
            n += 1;
        }
        assert!((24_500..25_500).contains(&n), "{n}");
    }

    /// Counting the cumulative weights at or below the draw finds the tier the first above it
    /// does, zero weights, draws equal to a cumulative weight and past the last included.
    #[test]
    fn the_tier_of_a_draw_is_the_first_cumulative_weight_above_it() {
        let mut rng = Rng::seed(11);
        for weights in [
            "{ tier = 1, weight = 1 }",
            "{ tier = 0, weight = 1 }, { tier = 5, weight = 3 }",
            "{ tier = 0, weight = 0.1 }, { tier = 2, weight = 0 }, { tier = 3, weight = 0.7 }, \
             { tier = 4, weight = 0 }, { tier = 5, weight = 2.2 }",
        ] {
            let mix = Mix::new(&load(&format!(
                "timeout = \"1s\"\nrate = 1\ntiers = [{weights}]\n"
            )));
            let first_above = |u: f64| {
                mix.cumulative
                    .iter()
                    .find(|(c, _)| u < *c)
                    .or(mix.cumulative.last())
                    .map(|&(_, tier)| tier)
            };
            let edges = mix
                .cumulative
                .iter()
                .flat_map(|&(c, _)| [c, c.next_down(), c.next_up()]);
            let draws: Vec<f64> = edges
                .chain([0.0, 1.0, 2.0])
                .chain((0..10_000).map(|_| rng.next_f64()))
                .collect();
            for u in draws {
                assert_eq!(Some(mix.tier_at(u)), first_above(u), "{weights}: draw {u}");
            }
        }
    }

    #[test]
    fn the_mix_draws_tiers_by_weight_and_cohorts_by_key() {
        let l = load(
            "timeout = \"1s\"\nrate = 1\nkeys = 1000\ntiers = [{ tier = 1, weight = 1 }, { tier = 5, weight = 3 }]\n",
        );
        let mut mix = Mix::new(&l);
        let mut rng = Rng::seed(4);
        let draws: Vec<Priority> = (0..40_000)
            .map(|_| mix.draw(&mut rng, Time::ZERO))
            .collect();
        let tier1 = draws.iter().filter(|p| p.tier() == 1).count();
        assert!((9_500..10_500).contains(&tier1), "{tier1}");
        assert!(draws.iter().all(|p| p.tier() == 1 || p.tier() == 5));
        let cohorts: std::collections::HashSet<u8> = draws.iter().map(|p| p.cohort()).collect();
        assert!(cohorts.len() > 100, "keys spread over the cohorts");
    }

    #[test]
    fn cached_cohorts_are_the_cohort_maps_own() {
        // 50 keys over 20 rotations of 1 s: every key changes cohort many times.
        let l = load("timeout = \"1s\"\nrate = 1\nkeys = 50\ncohorts = { rotation = \"1s\" }\n");
        let mut mix = Mix::new(&l);
        let mut rng = Rng::seed(8);
        for i in 0..20_000u64 {
            let now = Time::from_nanos(i * 997_000);
            let mut replay = rng.clone();
            let drawn = mix.draw(&mut rng, now);
            replay.next_f64(); // the tier
            let key = replay.range_inclusive(0, 49) as u64;
            assert_eq!(
                drawn.cohort(),
                l.cohorts.cohort(&key.to_le_bytes(), now),
                "draw {i}"
            );
        }
    }

    #[test]
    fn validation_names_the_key() {
        let err = load("timeout = \"1s\"\n").validate().unwrap_err();
        assert_eq!(err.key, "load.rate");
        let err = load("timeout = \"1s\"\nrate = 5\nrates = [1, 2]\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "load.rate");
        let err = load("timeout = \"1s\"\narrivals = \"closed\"\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "load.workers");
        let err = load("timeout = \"1s\"\nrate = 1\ntiers = [{ tier = 6, weight = 1 }]\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "load.tiers[0].tier");
        let err =
            toml::from_str::<LoadConfig>("timeout = \"1s\"\nrate = 1\nrte = 2\n").unwrap_err();
        assert!(err.to_string().contains("line 3") && err.to_string().contains("rte"));
    }
}

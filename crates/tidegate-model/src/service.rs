//! Service models: what happens to a request once it reaches the service.
//!
//! A service instance is told that a request arrives ([`Instance::arrive`]) and answers at
//! once: it started the request and will complete it at a given time, it queued it
//! internally, or it refused it (its internal queue is full). When the driver reaches a
//! completion time it calls [`Instance::finish`], which frees the worker and may start the
//! next internally queued request. The service never learns that a client gave up: work it
//! accepted runs to the end, which is how an unprotected service drowns in work nobody waits
//! for any more.
//!
//! The time a request takes is fixed when it starts: its own draw of the spread (drawn by the
//! driver when the request is created, so that request n takes the same relative time in
//! every arm of a comparison), times the service's work time then, times the contention then.
//! Changing the work time or the number of workers on a schedule ([`Change`]) affects the
//! requests started afterwards.

use std::collections::VecDeque;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Time};

use crate::{ConfigError, NonNegative};

/// Which model serves the requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServiceKind {
    /// A worker pool with an internal FIFO ([`Pool`]).
    #[default]
    Pool,
    /// A latency curve ([`Curve`]).
    Curve,
}

/// How the work time of each request is spread around its nominal value.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Spread {
    /// Exactly the nominal value.
    Constant,
    /// Uniform in `[1 - jitter, 1 + jitter]` times the nominal value.
    #[default]
    Uniform,
    /// Exponential with the nominal value as its mean.
    Exponential,
    /// Lognormal with mean 1 and `sigma` (the standard deviation of the logarithm): a long
    /// right tail, as most measured service times have.
    Lognormal,
    /// Two values, scaled to mean 1: a share `fast_share` of the requests takes the fast
    /// time, the others `slow_ratio` times as long (a cache in front of a slow store).
    Bimodal,
    /// Pareto with shape `alpha` (above 1, so that the mean is finite), scaled to mean 1: a
    /// heavy tail, whose variance is infinite for `alpha` up to 2.
    Pareto,
}

/// How the requests are spread over several instances, by whatever sits in front of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Balance {
    /// In turn (independent load generators, a round-robin balancer).
    #[default]
    RoundRobin,
    /// To the instance with the most room: the highest availability (remaining / allowed, as
    /// RSocket's least-loaded balancer), or the fewest requests in the service without a gate.
    LeastLoaded,
}

/// The service of a scenario: `[service]` and its `[service.pool]` or `[service.curve]` table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServiceConfig {
    pub kind: ServiceKind,
    /// Identical instances, each with its own workers (and its own gate). Default 1.
    pub instances: Option<NonZeroU32>,
    pub balance: Balance,
    /// How each request's work time is spread. Default uniform.
    pub spread: Spread,
    /// Half-width of the uniform spread, as a fraction of the nominal time, below 1.
    /// Default 0.2 (80% to 120%).
    pub jitter: Option<NonNegative>,
    /// Standard deviation of the logarithm of the lognormal spread. Default 1.
    pub sigma: Option<NonNegative>,
    /// Share of the fast requests of the bimodal spread, between 0 and 1. Default 0.9.
    pub fast_share: Option<NonNegative>,
    /// How many times longer a slow request of the bimodal spread takes, at least 1.
    /// Default 100 (1 ms and 100 ms).
    pub slow_ratio: Option<NonNegative>,
    /// Shape of the Pareto spread, above 1. Default 2.5.
    pub alpha: Option<NonNegative>,
    pub pool: PoolConfig,
    pub curve: CurveConfig,
    /// Capacity changes, in time order (pool only).
    pub changes: Vec<Change>,
}

/// A worker pool: `workers` requests are worked on at once, the others wait in an internal
/// FIFO of at most `queue` entries (refused beyond it); every request in the service beyond
/// `optimal` makes work started now `contention` times its work time slower.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PoolConfig {
    /// Default 1.
    pub workers: NonZeroU32,
    /// Nominal time a worker spends on a request. Default 100ms.
    pub work: Nanos,
    /// Internal queue size; requests that find it full are refused. Default unbounded.
    pub queue: Option<u32>,
    /// Requests the service holds (working and waiting) without contention. Default the
    /// number of workers.
    pub optimal: Option<u32>,
    /// Relative slowdown of new work per request held beyond `optimal`: work time is
    /// `work x (1 + contention x excess)`. Default 0.
    pub contention: NonNegative,
}

impl Default for PoolConfig {
    fn default() -> PoolConfig {
        PoolConfig {
            workers: NonZeroU32::MIN,
            work: Nanos::from_millis(100),
            queue: None,
            optimal: None,
            contention: NonNegative::default(),
        }
    }
}

/// What the latency curve is a function of.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurveBy {
    /// Requests in the service, this one included.
    #[default]
    Concurrency,
    /// Requests that arrived in the current window, this one included (the RSocket demo's
    /// "concurrent requests in given time window"); windows start at multiples of `window`.
    Window,
}

/// A service whose latency is a piecewise-linear function of its load, with no limit on
/// parallelism: each request takes `curve(x)` where `x` is the concurrency or the count in
/// the window. Below the first point the latency is the first point's, beyond the last the
/// last one's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CurveConfig {
    pub by: CurveBy,
    /// Length of a counting window (with `by = "window"`). Default 1s.
    pub window: Nanos,
    /// `[[x, latency], ...]` with `x` strictly increasing, e.g. `[[10, "2ms"], [50, "5ms"]]`.
    pub points: Vec<(u32, Nanos)>,
}

impl Default for CurveConfig {
    fn default() -> CurveConfig {
        CurveConfig {
            by: CurveBy::default(),
            window: Nanos::from_secs(1),
            points: Vec::new(),
        }
    }
}

/// A change of a pool's capacity at a time of the run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Change {
    pub at: Nanos,
    pub workers: Option<NonZeroU32>,
    pub work: Option<Nanos>,
}

impl ServiceConfig {
    pub fn instances(&self) -> u32 {
        self.instances.map_or(1, NonZeroU32::get)
    }

    fn jitter(&self) -> f64 {
        self.jitter.map_or(0.2, NonNegative::get)
    }

    fn sigma(&self) -> f64 {
        self.sigma.map_or(1.0, NonNegative::get)
    }

    fn fast_share(&self) -> f64 {
        self.fast_share.map_or(0.9, NonNegative::get)
    }

    fn slow_ratio(&self) -> f64 {
        self.slow_ratio.map_or(100.0, NonNegative::get)
    }

    fn alpha(&self) -> f64 {
        self.alpha.map_or(2.5, NonNegative::get)
    }

    /// Checks what the parser cannot: relations between keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.jitter() >= 1.0 {
            return Err(ConfigError::new(
                "service.jitter",
                "must be below 1 (a work time cannot be negative)",
            ));
        }
        if !(self.sigma() > 0.0 && self.sigma() <= 4.0) {
            return Err(ConfigError::new(
                "service.sigma",
                "must be above 0 and at most 4 (beyond, the mean is a matter of a few draws)",
            ));
        }
        if !(self.fast_share() > 0.0 && self.fast_share() < 1.0) {
            return Err(ConfigError::new(
                "service.fast_share",
                "must be between 0 and 1 (both values occur)",
            ));
        }
        if self.slow_ratio() < 1.0 {
            return Err(ConfigError::new(
                "service.slow_ratio",
                "must be at least 1 (the slow requests are the slow ones)",
            ));
        }
        if self.alpha() <= 1.0 {
            return Err(ConfigError::new(
                "service.alpha",
                "must be above 1 (at 1 or below, the mean work time is infinite)",
            ));
        }
        if self.instances() > 255 {
            return Err(ConfigError::new("service.instances", "at most 255"));
        }
        match self.kind {
            ServiceKind::Pool => {
                if self.pool.work.is_zero() {
                    return Err(ConfigError::new(
                        "service.pool.work",
                        "must be longer than zero",
                    ));
                }
            }
            ServiceKind::Curve => {
                let points = &self.curve.points;
                if points.is_empty() {
                    return Err(ConfigError::new(
                        "service.curve.points",
                        "a curve needs at least one [x, latency] point",
                    ));
                }
                if points.windows(2).any(|w| w[0].0 >= w[1].0) {
                    return Err(ConfigError::new(
                        "service.curve.points",
                        "the x of the points must be strictly increasing",
                    ));
                }
                if self.curve.window.is_zero() {
                    return Err(ConfigError::new(
                        "service.curve.window",
                        "must be longer than zero",
                    ));
                }
                if !self.changes.is_empty() {
                    return Err(ConfigError::new(
                        "service.changes",
                        "capacity changes apply to a pool only",
                    ));
                }
            }
        }
        for (i, change) in self.changes.iter().enumerate() {
            if change.workers.is_none() && change.work.is_none() {
                return Err(ConfigError::new(
                    format!("service.changes[{i}]"),
                    "changes nothing: give `workers` or `work`",
                ));
            }
            if change.work.is_some_and(Nanos::is_zero) {
                return Err(ConfigError::new(
                    format!("service.changes[{i}].work"),
                    "must be longer than zero",
                ));
            }
            if i > 0 && change.at < self.changes[i - 1].at {
                return Err(ConfigError::new(
                    format!("service.changes[{i}].at"),
                    "changes must be in time order",
                ));
            }
        }
        Ok(())
    }

    /// One request's relative work time, a draw of the spread (mean 1).
    pub fn draw_factor(&self, rng: &mut Rng) -> f64 {
        match self.spread {
            Spread::Constant => 1.0,
            Spread::Uniform => {
                let jitter = self.jitter();
                1.0 - jitter + 2.0 * jitter * rng.next_f64()
            }
            Spread::Exponential => -(1.0 - rng.next_f64()).ln(),
            Spread::Lognormal => {
                // Box-Muller: one standard normal from two uniforms (the first kept off 0).
                let sigma = self.sigma();
                let radius = (-2.0 * (1.0 - rng.next_f64()).ln()).sqrt();
                let normal = radius * (std::f64::consts::TAU * rng.next_f64()).cos();
                (sigma * normal - sigma * sigma / 2.0).exp()
            }
            Spread::Bimodal => {
                let (share, ratio) = (self.fast_share(), self.slow_ratio());
                let fast = 1.0 / (share + (1.0 - share) * ratio);
                if rng.next_f64() < share {
                    fast
                } else {
                    fast * ratio
                }
            }
            Spread::Pareto => {
                // Inverse CDF: x_m U^(-1/alpha), with x_m = (alpha - 1) / alpha for mean 1.
                let alpha = self.alpha();
                (alpha - 1.0) / alpha * (1.0 - rng.next_f64()).powf(-1.0 / alpha)
            }
        }
    }

    /// A fresh instance of the service.
    pub fn instance(&self) -> Instance {
        match self.kind {
            ServiceKind::Pool => Instance::Pool(Pool::new(&self.pool)),
            ServiceKind::Curve => Instance::Curve(Curve::new(&self.curve)),
        }
    }

    /// The requests per second the service can complete at best, from its nominal figures
    /// (a pool's `workers / work`, over all instances), for reports; `None` for a curve.
    pub fn nominal_capacity(&self) -> Option<f64> {
        match self.kind {
            ServiceKind::Pool => Some(
                f64::from(self.pool.workers.get()) / self.pool.work.as_secs_f64()
                    * f64::from(self.instances()),
            ),
            ServiceKind::Curve => None,
        }
    }
}

/// What an instance did with an arriving request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admission {
    /// Started now; completes at this time.
    Started(Time),
    /// Waits in the service's internal queue.
    Queued,
    /// Turned away (internal queue full).
    Refused,
}

/// A request taken from the internal queue: `token` (the driver's) completes at `done`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Started {
    pub token: u64,
    pub done: Time,
}

/// One instance of a service.
#[derive(Clone, Debug)]
pub enum Instance {
    Pool(Pool),
    Curve(Curve),
}

impl Instance {
    /// A request arrives; `factor` is its draw of the spread ([`ServiceConfig::draw_factor`]).
    pub fn arrive(&mut self, now: Time, token: u64, factor: f64) -> Admission {
        match self {
            Instance::Pool(pool) => pool.arrive(now, token, factor),
            Instance::Curve(curve) => curve.arrive(now, factor),
        }
    }

    /// A request completed (at a time an [`Admission::Started`] or [`Started`] gave); returns
    /// the internally queued request that takes its place, if any.
    pub fn finish(&mut self, now: Time) -> Option<Started> {
        match self {
            Instance::Pool(pool) => pool.finish(now),
            Instance::Curve(curve) => {
                curve.in_service -= 1;
                None
            }
        }
    }

    /// Applies a capacity change; then call [`Instance::start_waiting`] until it returns
    /// `None`, in case more workers can start now.
    pub fn apply(&mut self, change: &Change) {
        if let Instance::Pool(pool) = self {
            if let Some(workers) = change.workers {
                pool.workers = workers.get();
            }
            if let Some(work) = change.work {
                pool.work_secs = work.as_secs_f64();
            }
        }
    }

    /// Starts an internally queued request if a worker is free.
    pub fn start_waiting(&mut self, now: Time) -> Option<Started> {
        match self {
            Instance::Pool(pool) if pool.busy < pool.workers => pool.start_next(now),
            _ => None,
        }
    }

    /// The time a request of work factor `factor` takes at the service's current speed with
    /// no contention and no wait: its own work. `None` for a curve, whose latency is a
    /// function of the load alone.
    pub fn own_work(&self, factor: f64) -> Option<Nanos> {
        match self {
            Instance::Pool(pool) => Some(Nanos::from_secs_f64(pool.work_secs * factor)),
            Instance::Curve(_) => None,
        }
    }

    /// Requests in the service, working or waiting.
    pub fn in_service(&self) -> u32 {
        match self {
            Instance::Pool(pool) => pool.busy + pool.waiting.len() as u32,
            Instance::Curve(curve) => curve.in_service,
        }
    }
}

/// The worker pool of [`PoolConfig`].
#[derive(Clone, Debug)]
pub struct Pool {
    workers: u32,
    /// The work time in seconds, as [`Nanos::mul_f64`] would convert it on every start: the
    /// division is done once (every request's completion time waits on it).
    work_secs: f64,
    queue: Option<usize>,
    optimal: u32,
    contention: f64,
    busy: u32,
    waiting: VecDeque<(u64, f64)>,
}

impl Pool {
    pub fn new(config: &PoolConfig) -> Pool {
        Pool {
            workers: config.workers.get(),
            work_secs: config.work.as_secs_f64(),
            queue: config.queue.map(|q| q as usize),
            optimal: config.optimal.unwrap_or(config.workers.get()),
            contention: config.contention.get(),
            busy: 0,
            waiting: VecDeque::new(),
        }
    }

    fn arrive(&mut self, now: Time, token: u64, factor: f64) -> Admission {
        if self.busy < self.workers {
            self.busy += 1;
            return Admission::Started(now + self.work_time(factor));
        }
        if self.queue.is_some_and(|cap| self.waiting.len() >= cap) {
            return Admission::Refused;
        }
        self.waiting.push_back((token, factor));
        Admission::Queued
    }

    fn finish(&mut self, now: Time) -> Option<Started> {
        self.busy -= 1;
        if self.busy < self.workers {
            self.start_next(now)
        } else {
            None
        }
    }

    fn start_next(&mut self, now: Time) -> Option<Started> {
        let (token, factor) = self.waiting.pop_front()?;
        self.busy += 1;
        Some(Started {
            token,
            done: now + self.work_time(factor),
        })
    }

    /// Work time of a request starting now, the request itself counted among the busy.
    fn work_time(&self, factor: f64) -> Nanos {
        let held = self.busy + self.waiting.len() as u32;
        let excess = held.saturating_sub(self.optimal);
        let slowdown = 1.0 + self.contention * f64::from(excess);
        // `Nanos::mul_f64`, with the work time's conversion done once.
        Nanos::from_secs_f64(self.work_secs * (factor * slowdown))
    }
}

/// The latency curve of [`CurveConfig`].
#[derive(Clone, Debug)]
pub struct Curve {
    by: CurveBy,
    window: u64,
    /// `(x, latency in ns)`.
    points: Vec<(f64, f64)>,
    in_service: u32,
    window_index: u64,
    window_count: u32,
}

impl Curve {
    pub fn new(config: &CurveConfig) -> Curve {
        Curve {
            by: config.by,
            window: config.window.as_nanos().max(1),
            points: config
                .points
                .iter()
                .map(|&(x, latency)| (f64::from(x), latency.as_nanos() as f64))
                .collect(),
            in_service: 0,
            window_index: 0,
            window_count: 0,
        }
    }

    fn arrive(&mut self, now: Time, factor: f64) -> Admission {
        self.in_service += 1;
        let x = match self.by {
            CurveBy::Concurrency => self.in_service,
            CurveBy::Window => {
                let index = now.as_nanos() / self.window;
                if index != self.window_index {
                    self.window_index = index;
                    self.window_count = 0;
                }
                self.window_count += 1;
                self.window_count
            }
        };
        let latency = self.latency(f64::from(x)) * factor;
        Admission::Started(now + Nanos::from_nanos(latency.round() as u64))
    }

    /// The curve at `x`: flat before the first point and after the last, linear between.
    pub fn latency(&self, x: f64) -> f64 {
        let Some(&(first_x, first)) = self.points.first() else {
            return 0.0;
        };
        if x <= first_x {
            return first;
        }
        for pair in self.points.windows(2) {
            let ((x0, y0), (x1, y1)) = (pair[0], pair[1]);
            if x <= x1 {
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0);
            }
        }
        self.points.last().map_or(first, |&(_, y)| y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(workers: u32, queue: Option<u32>, contention: f64) -> Pool {
        Pool::new(&PoolConfig {
            workers: NonZeroU32::new(workers).unwrap(),
            work: Nanos::from_millis(100),
            queue,
            optimal: None,
            contention: NonNegative::new(contention).unwrap(),
        })
    }

    fn at(ms: u64) -> Time {
        Time::ZERO + Nanos::from_millis(ms)
    }

    #[test]
    fn pool_works_queues_then_refuses() {
        let mut p = pool(2, Some(1), 0.0);
        assert_eq!(p.arrive(at(0), 1, 1.0), Admission::Started(at(100)));
        assert_eq!(p.arrive(at(0), 2, 1.5), Admission::Started(at(150)));
        assert_eq!(p.arrive(at(10), 3, 1.0), Admission::Queued);
        assert_eq!(p.arrive(at(10), 4, 1.0), Admission::Refused);
        // The first worker frees up and takes the queued request.
        assert_eq!(
            p.finish(at(100)),
            Some(Started {
                token: 3,
                done: at(200)
            })
        );
        assert_eq!(p.finish(at(150)), None);
    }

    #[test]
    fn contention_slows_work_started_beyond_the_optimum() {
        let mut p = pool(1, None, 0.5);
        assert_eq!(p.arrive(at(0), 1, 1.0), Admission::Started(at(100)));
        assert_eq!(p.arrive(at(0), 2, 1.0), Admission::Queued);
        assert_eq!(p.arrive(at(0), 3, 1.0), Admission::Queued);
        // Request 2 starts with itself and request 3 held: one beyond the optimum of 1.
        assert_eq!(
            p.finish(at(100)),
            Some(Started {
                token: 2,
                done: at(250)
            })
        );
    }

    #[test]
    fn fewer_workers_finish_what_they_hold_and_more_start_the_queue() {
        let mut inst = Instance::Pool(pool(2, None, 0.0));
        assert!(matches!(inst.arrive(at(0), 1, 1.0), Admission::Started(_)));
        assert!(matches!(inst.arrive(at(0), 2, 1.0), Admission::Started(_)));
        assert_eq!(inst.arrive(at(0), 3, 1.0), Admission::Queued);
        assert_eq!(inst.arrive(at(0), 4, 1.0), Admission::Queued);
        inst.apply(&Change {
            at: Nanos::ZERO,
            workers: NonZeroU32::new(1),
            work: Some(Nanos::from_millis(200)),
        });
        // Two busy, one worker: the first completion starts nothing.
        assert_eq!(inst.finish(at(100)), None);
        assert_eq!(
            inst.finish(at(100)),
            Some(Started {
                token: 3,
                done: at(300)
            })
        );
        inst.apply(&Change {
            at: Nanos::ZERO,
            workers: NonZeroU32::new(3),
            work: None,
        });
        assert_eq!(
            inst.start_waiting(at(120)),
            Some(Started {
                token: 4,
                done: at(320)
            })
        );
        assert_eq!(inst.start_waiting(at(120)), None);
        assert_eq!(inst.in_service(), 2);
    }

    fn rsocket_curve(by: CurveBy) -> Curve {
        Curve::new(&CurveConfig {
            by,
            window: Nanos::from_secs(1),
            points: vec![
                (10, Nanos::from_millis(2)),
                (50, Nanos::from_millis(5)),
                (120, Nanos::from_millis(20)),
            ],
        })
    }

    #[test]
    fn curve_interpolates_and_is_flat_outside_its_points() {
        let c = rsocket_curve(CurveBy::Concurrency);
        assert_eq!(c.latency(1.0), 2e6);
        assert_eq!(c.latency(30.0), 3.5e6);
        assert_eq!(c.latency(85.0), 12.5e6);
        assert_eq!(c.latency(1000.0), 20e6);
    }

    #[test]
    fn curve_by_window_counts_arrivals_and_restarts_each_window() {
        let mut c = rsocket_curve(CurveBy::Window);
        let mut last = Admission::Refused;
        for i in 0..50 {
            last = c.arrive(at(i), 1.0);
        }
        assert_eq!(last, Admission::Started(at(49 + 5)));
        // A new window: the count starts again, whatever is still in the service.
        assert_eq!(c.arrive(at(1000), 1.0), Admission::Started(at(1002)));
        assert_eq!(c.in_service, 51);
    }

    #[test]
    fn curve_by_concurrency_counts_requests_in_the_service() {
        let mut inst = Instance::Curve(rsocket_curve(CurveBy::Concurrency));
        for _ in 0..49 {
            let _ = inst.arrive(at(0), 1, 1.0);
        }
        assert_eq!(inst.arrive(at(0), 1, 1.0), Admission::Started(at(5)));
        assert_eq!(inst.finish(at(2)), None);
        assert_eq!(inst.in_service(), 49);
    }

    #[test]
    fn spreads_have_mean_one() {
        let mut rng = Rng::seed(3);
        for spread in [Spread::Constant, Spread::Uniform, Spread::Exponential] {
            let config = ServiceConfig {
                spread,
                ..ServiceConfig::default()
            };
            let mean = (0..100_000)
                .map(|_| config.draw_factor(&mut rng))
                .sum::<f64>()
                / 100_000.0;
            assert!((mean - 1.0).abs() < 0.01, "{spread:?}: {mean}");
        }
    }

    fn draws(config: &ServiceConfig, n: usize) -> Vec<f64> {
        let mut rng = Rng::seed(11);
        let mut v: Vec<f64> = (0..n).map(|_| config.draw_factor(&mut rng)).collect();
        v.sort_by(f64::total_cmp);
        v
    }

    fn mean(v: &[f64]) -> f64 {
        v.iter().sum::<f64>() / v.len() as f64
    }

    fn spread(doc: &str) -> ServiceConfig {
        let config: ServiceConfig = toml::from_str(doc).unwrap();
        config.validate().unwrap();
        config
    }

    #[test]
    fn lognormal_has_mean_one_and_its_median() {
        for sigma in [0.5, 1.0] {
            let v = draws(
                &spread(&format!("spread = \"lognormal\"\nsigma = {sigma}\n")),
                400_000,
            );
            assert!((mean(&v) - 1.0).abs() < 0.01, "sigma {sigma}: {}", mean(&v));
            // The median of a lognormal is exp(-sigma^2 / 2) when its mean is 1.
            let median = v[v.len() / 2];
            let expected = (-sigma * sigma / 2.0f64).exp();
            assert!(
                (median / expected - 1.0).abs() < 0.01,
                "{median} vs {expected}"
            );
        }
    }

    #[test]
    fn bimodal_takes_two_values_in_its_shares() {
        let config = spread("spread = \"bimodal\"\nfast_share = 0.9\nslow_ratio = 100\n");
        let v = draws(&config, 200_000);
        assert!((mean(&v) - 1.0).abs() < 0.02, "{}", mean(&v));
        let fast = 1.0 / (0.9 + 0.1 * 100.0);
        let (fast_draws, slow_draws): (Vec<f64>, Vec<f64>) = v.iter().partition(|&&x| x < 1.0);
        assert!(fast_draws.iter().all(|x| (x / fast - 1.0).abs() < 1e-9));
        assert!(slow_draws.iter().all(|x| (x / fast - 100.0).abs() < 1e-6));
        assert!((fast_draws.len() as f64 / v.len() as f64 - 0.9).abs() < 0.005);
        // 99% / 1%: the default ratio, still mean 1.
        let v = draws(
            &spread("spread = \"bimodal\"\nfast_share = 0.99\n"),
            400_000,
        );
        assert!((mean(&v) - 1.0).abs() < 0.03, "{}", mean(&v));
    }

    #[test]
    fn pareto_has_mean_one_and_its_tail() {
        for (alpha, tolerance) in [(2.5, 0.01), (1.5, 0.05)] {
            let v = draws(
                &spread(&format!("spread = \"pareto\"\nalpha = {alpha}\n")),
                1_000_000,
            );
            assert!(
                (mean(&v) - 1.0).abs() < tolerance,
                "alpha {alpha}: {}",
                mean(&v)
            );
            // P(X > x) = (x_m / x)^alpha: the 99th percentile is x_m 100^(1/alpha).
            let x_m = (alpha - 1.0) / alpha;
            let expected = x_m * 100f64.powf(1.0 / alpha);
            let p99 = v[v.len() * 99 / 100];
            assert!((p99 / expected - 1.0).abs() < 0.02, "{p99} vs {expected}");
            assert!(v[0] >= x_m);
        }
    }

    #[test]
    fn the_files_spread_keys_still_parse_and_draw_as_before() {
        let config = spread("spread = \"uniform\"\njitter = 0.2\n");
        let v = draws(&config, 10_000);
        assert!(v[0] >= 0.8 && v[v.len() - 1] <= 1.2);
        let mut rng = Rng::seed(5);
        let mut again = Rng::seed(5);
        assert_eq!(config.draw_factor(&mut rng), 0.8 + 0.4 * again.next_f64());
    }

    #[test]
    fn validation_names_the_key() {
        let parse = |doc: &str| toml::from_str::<ServiceConfig>(doc).unwrap();
        let err = parse("kind = \"curve\"\n[curve]\npoints = [[10, \"2ms\"], [5, \"3ms\"]]\n")
            .validate()
            .unwrap_err();
        assert_eq!(err.key, "service.curve.points");
        let err = parse("[[changes]]\nat = \"1s\"\n").validate().unwrap_err();
        assert_eq!(err.key, "service.changes[0]");
        let err = parse("jitter = 1.5\n").validate().unwrap_err();
        assert_eq!(err.key, "service.jitter");
        for (doc, key) in [
            ("sigma = 0\n", "service.sigma"),
            ("fast_share = 1\n", "service.fast_share"),
            ("slow_ratio = 0.5\n", "service.slow_ratio"),
            ("alpha = 1\n", "service.alpha"),
        ] {
            assert_eq!(parse(doc).validate().unwrap_err().key, key, "{doc}");
        }
        let err = toml::from_str::<ServiceConfig>("[pool]\nworkers = 0\n").unwrap_err();
        assert!(err.to_string().contains("line 2"), "{err}");
        let err = toml::from_str::<ServiceConfig>("[pool]\ncontention = -1\n").unwrap_err();
        assert!(err.to_string().contains("contention"), "{err}");
    }
}

//! A synthetic service and a tiny event loop in virtual time, to pin down how each limit
//! behaves: where it settles, how fast, and what it does when capacity changes.
//!
//! The service is the one of Kanaloa's experiments: up to `optimal` requests in parallel at
//! `base` latency each; beyond that, every request slows down as `(inflight / optimal) ^
//! contention`, so throughput is flat (contention 1) or falls (contention > 1) past the
//! optimum. A request's round-trip time is fixed when it starts, from the in-flight count at
//! that moment including itself.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::{Limit, Outcome, Sample};
use crate::rng::Rng;
use crate::time::{Nanos, Time};

/// The synthetic service, with an optional schedule of capacity changes.
#[derive(Clone, Debug)]
pub(crate) struct Service {
    /// Latency at or below the optimal concurrency.
    pub(crate) base: Nanos,
    /// Requests served in parallel at full speed.
    pub(crate) optimal: u32,
    /// Exponent of the slow-down past the optimum.
    pub(crate) contention: f64,
    /// Client timeout: a request slower than this is reported as `Dropped` with rtt `timeout`
    /// (or as `Success` with rtt `timeout` when `timeouts_look_like_success`).
    pub(crate) timeout: Option<Nanos>,
    pub(crate) timeouts_look_like_success: bool,
    /// `(from, optimal)`: from that time on, the optimal concurrency is this.
    pub(crate) schedule: Vec<(Time, u32)>,
    /// Random jitter: each rtt is multiplied by a uniform factor in `1 ± jitter`.
    pub(crate) jitter: f64,
    /// `(from, base)`: from that time on, the latency at or below the optimum is this.
    pub(crate) base_schedule: Vec<(Time, Nanos)>,
    /// `(share, factor)`: that share of the requests takes `factor` times the base, the
    /// others less, so that the mean stays the base (a cache in front of a store).
    pub(crate) tail: Option<(f64, f64)>,
}

impl Service {
    /// Kanaloa's mock service: 20 in parallel at 100 ms (200 rps), slower beyond.
    pub(crate) fn kanaloa() -> Service {
        Service {
            base: Nanos::from_millis(100),
            optimal: 20,
            contention: 1.2,
            timeout: None,
            timeouts_look_like_success: false,
            schedule: Vec::new(),
            jitter: 0.05,
            base_schedule: Vec::new(),
            tail: None,
        }
    }

    /// The same service whose base latency moves linearly, in 1 s steps, from `base` at `from`
    /// to `base x factor` at `to`, and stays there: a slow drift, or a warm-up when `factor < 1`.
    pub(crate) fn with_base_ramp(mut self, from: Nanos, to: Nanos, factor: f64) -> Service {
        let steps = (to - from).as_nanos() / 1_000_000_000;
        self.base_schedule = (0..=steps)
            .map(|i| {
                let progress = if steps == 0 {
                    1.0
                } else {
                    i as f64 / steps as f64
                };
                let at = Time::ZERO + from + Nanos::from_secs(i);
                (at, self.base.mul_f64(1.0 + (factor - 1.0) * progress))
            })
            .collect();
        self
    }

    pub(crate) fn base_at(&self, now: Time) -> Nanos {
        self.base_schedule
            .iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .map_or(self.base, |&(_, base)| base)
    }

    /// The same service behind a client that gives up at `timeout` and reports the give-up
    /// as a success with rtt `timeout`: the "stable timeout" that fools latency-based limits.
    pub(crate) fn stable_timeout(timeout: Nanos) -> Service {
        Service {
            timeout: Some(timeout),
            timeouts_look_like_success: true,
            ..Service::kanaloa()
        }
    }

    /// The same service whose capacity halves from `at` until `until`, then recovers.
    pub(crate) fn halving(at: Nanos, until: Nanos) -> Service {
        let mut s = Service::kanaloa();
        s.schedule = vec![(Time::ZERO + at, 10), (Time::ZERO + until, 20)];
        s
    }

    pub(crate) fn optimal_at(&self, now: Time) -> u32 {
        self.schedule
            .iter()
            .rev()
            .find(|(from, _)| *from <= now)
            .map_or(self.optimal, |&(_, optimal)| optimal)
    }

    /// Round-trip time of a request that starts at `now` with `inflight` in flight.
    pub(crate) fn rtt(&self, now: Time, inflight: u32, rng: &mut Rng) -> Nanos {
        let optimal = f64::from(self.optimal_at(now).max(1));
        let slowdown = (f64::from(inflight) / optimal)
            .max(1.0)
            .powf(self.contention);
        let jitter = 1.0 + self.jitter * (2.0 * rng.next_f64() - 1.0);
        let mode = self.tail.map_or(1.0, |(share, factor)| {
            if rng.next_f64() < share {
                factor
            } else {
                (1.0 - share * factor) / (1.0 - share)
            }
        });
        self.base_at(now).mul_f64(slowdown * jitter * mode)
    }
}

/// How requests arrive.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Load {
    /// Always as many in flight as the limit allows: the overload case.
    Saturating,
    /// Poisson arrivals at this rate; an arrival over the limit is turned away.
    Poisson { rps: f64 },
    /// Poisson arrivals at `rps` until `until`, then saturating: an overload after a light
    /// start, as a service meets one.
    Step { rps: f64, until: Nanos },
}

/// What the limit did over a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trace {
    /// The limit after each sample.
    pub(crate) limits: Vec<(Time, u32)>,
    /// Completed requests: (finish time, rtt, outcome).
    pub(crate) completions: Vec<(Time, Nanos, Outcome)>,
}

impl Trace {
    pub(crate) fn min_limit(&self) -> u32 {
        self.limits.iter().map(|&(_, l)| l).min().unwrap_or(0)
    }
    pub(crate) fn max_limit(&self) -> u32 {
        self.limits.iter().map(|&(_, l)| l).max().unwrap_or(0)
    }
    /// The limit in force at `t` (the last one set at or before `t`).
    pub(crate) fn limit_at(&self, t: Nanos) -> u32 {
        let t = Time::ZERO + t;
        self.limits
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map_or(0, |&(_, l)| l)
    }
    /// Time-weighted mean of the limit over `[from, to)`.
    pub(crate) fn mean_limit(&self, from: Nanos, to: Nanos) -> f64 {
        let (from, to) = (Time::ZERO + from, Time::ZERO + to);
        let mut area = 0.0;
        let mut current = f64::from(self.limit_at(from - Time::ZERO));
        let mut at = from;
        for &(t, l) in self.limits.iter().filter(|(t, _)| *t > from && *t < to) {
            area += current * (t - at).as_secs_f64();
            current = f64::from(l);
            at = t;
        }
        area += current * (to - at).as_secs_f64();
        area / (to - from).as_secs_f64()
    }
    /// Successful completions per second over `[from, to)`.
    pub(crate) fn goodput(&self, from: Nanos, to: Nanos) -> f64 {
        let (from, to) = (Time::ZERO + from, Time::ZERO + to);
        let ok = self
            .completions
            .iter()
            .filter(|(t, _, o)| *t >= from && *t < to && *o == Outcome::Success)
            .count();
        ok as f64 / (to - from).as_secs_f64()
    }
    /// Mean rtt of completions over `[from, to)`.
    pub(crate) fn mean_rtt(&self, from: Nanos, to: Nanos) -> Nanos {
        let (from, to) = (Time::ZERO + from, Time::ZERO + to);
        let window: Vec<Nanos> = self
            .completions
            .iter()
            .filter(|(t, ..)| *t >= from && *t < to)
            .map(|&(_, r, _)| r)
            .collect();
        let total: u64 = window.iter().map(|r| r.as_nanos()).sum();
        Nanos::from_nanos(total / window.len().max(1) as u64)
    }
    /// First time at or after `from` from which the limit stays within `band` (a fraction)
    /// of `target` until the end of the run.
    pub(crate) fn settled_within(&self, from: Nanos, target: f64, band: f64) -> Option<Nanos> {
        let from = Time::ZERO + from;
        let inside = |l: u32| (f64::from(l) - target).abs() <= band * target;
        let mut settled: Option<Time> = None;
        for &(t, l) in self.limits.iter().filter(|(t, _)| *t >= from) {
            match (inside(l), settled) {
                (true, None) => settled = Some(t),
                (false, Some(_)) => settled = None,
                _ => {}
            }
        }
        settled.map(|t| t - Time::ZERO)
    }
}

/// A request in the service: (finish, sequence, inflight at start, reported rtt, timed out).
type Pending = (Time, u64, u32, Nanos, bool);

/// Drives `limit` against `service` under `load` for `duration` of virtual time.
pub(crate) fn run(limit: &mut dyn Limit, service: &Service, load: Load, duration: Nanos) -> Trace {
    let mut rng = Rng::seed(0x7469_6465);
    let end = Time::ZERO + duration;
    let mut trace = Trace::default();
    let mut pending: BinaryHeap<Reverse<Pending>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut inflight = 0u32;
    let mut next_arrival = Time::ZERO;

    let start = |now: Time,
                 inflight: &mut u32,
                 pending: &mut BinaryHeap<_>,
                 seq: &mut u64,
                 rng: &mut Rng| {
        *inflight += 1;
        let rtt = service.rtt(now, *inflight, rng);
        // The client gives up at its timeout and the permit comes back then.
        let (rtt, timed_out) = match service.timeout {
            Some(timeout) if rtt > timeout => (timeout, true),
            _ => (rtt, false),
        };
        *seq += 1;
        pending.push(Reverse((now + rtt, *seq, *inflight, rtt, timed_out)));
    };

    let mut now = Time::ZERO;
    trace.limits.push((now, limit.limit()));
    loop {
        // Poisson arrivals at this rate (until this time), or saturating.
        let poisson = match load {
            Load::Saturating => None,
            Load::Poisson { rps } => Some((rps, Time::MAX)),
            Load::Step { rps, until } => {
                Some((rps, Time::ZERO + until)).filter(|_| now < Time::ZERO + until)
            }
        };
        if poisson.is_none() {
            while inflight < limit.limit() {
                start(now, &mut inflight, &mut pending, &mut seq, &mut rng);
            }
        }
        let next_completion = pending.peek().map_or(Time::MAX, |Reverse((t, ..))| *t);
        let arrival = poisson.map_or(Time::MAX, |(_, until)| next_arrival.min(until));
        now = next_completion.min(arrival);
        if now >= end {
            break;
        }
        if now == arrival {
            if let Some((rps, until)) = poisson
                && now < until
            {
                if inflight < limit.limit() {
                    start(now, &mut inflight, &mut pending, &mut seq, &mut rng);
                }
                let gap = -(1.0 - rng.next_f64()).ln() / rps;
                next_arrival = now + Nanos::from_secs_f64(gap);
            }
            continue;
        }
        let Some(Reverse((finish, _, inflight_at_start, rtt, timed_out))) = pending.pop() else {
            break;
        };
        inflight -= 1;
        let outcome = if timed_out && !service.timeouts_look_like_success {
            Outcome::Dropped
        } else {
            Outcome::Success
        };
        limit.on_sample(&Sample {
            now: finish,
            rtt,
            inflight: inflight_at_start,
            outcome,
        });
        trace.completions.push((finish, rtt, outcome));
        trace.limits.push((finish, limit.limit()));
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::{Fixed, FixedConfig};

    fn fixed(limit: u32) -> Fixed {
        Fixed::new(&FixedConfig { limit })
    }

    #[test]
    fn service_peaks_at_its_optimal_concurrency() {
        let secs = Nanos::from_secs;
        let at_optimum = run(
            &mut fixed(20),
            &Service::kanaloa(),
            Load::Saturating,
            secs(20),
        );
        let beyond = run(
            &mut fixed(60),
            &Service::kanaloa(),
            Load::Saturating,
            secs(20),
        );
        let below = run(
            &mut fixed(10),
            &Service::kanaloa(),
            Load::Saturating,
            secs(20),
        );
        let g20 = at_optimum.goodput(secs(5), secs(20));
        assert!((190.0..210.0).contains(&g20), "{g20}");
        assert!(
            beyond.goodput(secs(5), secs(20)) < 0.85 * g20,
            "contention costs throughput"
        );
        assert!(below.goodput(secs(5), secs(20)) < 0.55 * g20);
        let rtt = beyond.mean_rtt(secs(5), secs(20)).as_millis_f64();
        assert!(
            (330.0..420.0).contains(&rtt),
            "60 in flight: (60/20)^1.2 x 100 ms, got {rtt}"
        );
    }

    #[test]
    fn halving_halves_the_optimum_then_recovers() {
        let secs = Nanos::from_secs;
        let service = Service::halving(secs(10), secs(20));
        let trace = run(&mut fixed(20), &service, Load::Saturating, secs(30));
        assert!(trace.mean_rtt(secs(12), secs(20)) > Nanos::from_millis(200));
        assert!(trace.mean_rtt(secs(22), secs(30)) < Nanos::from_millis(110));
    }

    #[test]
    fn base_ramp_moves_the_latency_linearly() {
        let secs = Nanos::from_secs;
        let service = Service::kanaloa().with_base_ramp(secs(10), secs(20), 2.0);
        assert_eq!(service.base_at(Time::ZERO), Nanos::from_millis(100));
        let at = |s| service.base_at(Time::ZERO + secs(s));
        assert_eq!(at(15), Nanos::from_millis(150));
        assert_eq!(at(60), Nanos::from_millis(200));
        let trace = run(&mut fixed(20), &service, Load::Saturating, secs(40));
        assert!(trace.mean_rtt(secs(25), secs(40)) > Nanos::from_millis(190));
    }

    #[test]
    fn poisson_load_turns_away_over_the_limit_and_times_out() {
        let secs = Nanos::from_secs;
        let mut service = Service::kanaloa();
        service.timeout = Some(Nanos::from_millis(150));
        let trace = run(
            &mut fixed(30),
            &service,
            Load::Poisson { rps: 100.0 },
            secs(30),
        );
        let g = trace.goodput(secs(0), secs(30));
        assert!((90.0..110.0).contains(&g), "light load is all served: {g}");
        let trace = run(
            &mut fixed(30),
            &service,
            Load::Poisson { rps: 1000.0 },
            secs(10),
        );
        assert!(
            trace
                .completions
                .iter()
                .any(|&(_, rtt, o)| o == Outcome::Dropped && rtt == Nanos::from_millis(150))
        );
        assert_eq!(trace.limit_at(secs(5)), 30);
        assert!((trace.mean_limit(secs(1), secs(9)) - 30.0).abs() < 1e-9);
        assert_eq!(trace.settled_within(secs(0), 30.0, 0.01), Some(Nanos::ZERO));
    }
}

//! The producer-dispatcher-consumer model of ScyllaDB's "Exploring Phantom Jams in your Data
//! Flow" (Pavel Emelyanov), and of the tool it uses (`pdc-model/simulate.cc` in
//! github.com/xemul/queue-dispatch).
//!
//! A **producer** generates messages at rate `P` into the dispatcher's FIFO queue. A
//! **dispatcher** wakes up once per `period` (2 kHz, 500 us, by default) and moves messages
//! from its queue into the consumer, but never lets the consumer hold more than
//! `limit = floor(multiplier * period * C)` messages (150 at the defaults: 1.5 times the
//! `C / D` messages the consumer handles between two ideal wake-ups). A **consumer** processes
//! the messages it holds, one after the other, at rate `C`. Each component spaces its events
//! by one of the [`ProcessKind`]s. A message's latency runs from its production to the end of
//! its processing.
//!
//! Why a dispatcher with jitter is the interesting case: while the dispatcher oversleeps, the
//! consumer runs dry after `limit` messages, and that lost capacity never comes back. With a
//! Poisson dispatcher, the consumer gets through `C * E[min(G, multiplier * period)]`
//! messages per gap `G ~ Exp(period)`, so the system can carry at most
//! `C * (1 - exp(-multiplier))` messages per second (155,000/s at the defaults): it depends on
//! the multiplier, not on the period, which is the article's conclusion.
//!
//! # How it runs
//!
//! Event-driven, in whole nanoseconds of virtual time ([`Nanos`]). Between two dispatcher
//! wake-ups the producer only appends to the queue and the consumer only drains what it holds,
//! so [`PdcConfig::run`] jumps from wake-up to wake-up and, for each interval, runs the
//! consumer's completions and the producer's productions in two tight loops: the cost is a few
//! nanoseconds per message and per wake-up, and nothing per unit of virtual time.
//!
//! Memory is constant, whatever the duration and however long the queue grows: both queues
//! are FIFO, so the messages they hold are always a contiguous run of the production
//! sequence, and a queue is just a pair of counters. The production times of the first
//! [`STORED_TIMES`] waiting messages are kept in a ring; past that, the times are regenerated
//! when the messages complete, by a copy of the producer's process taken at the first message
//! not stored (a "replay" cursor), until the consumer catches up with the producer. Storing is
//! the fast path (a Poisson gap costs about 3 ns to draw, a ring slot under 1 ns); replaying
//! keeps the memory bounded when the queue grows without bound. Latencies go into a
//! fixed-size [`Histogram`].
//!
//! Order of simultaneous events, as in the tool's loop: the consumer completes, then the
//! producer produces, then the dispatcher dispatches. `max_queued` is the longest the
//! dispatcher's queue was at any instant once that instant's events were all handled (as the
//! tool samples it after each step of its loop).
//!
//! Departures from the tool: the tool steps virtual time by 1 us and stamps every event with
//! its step; here events happen at their exact nanosecond. The tool estimates quantiles with
//! P-square; here they come from the histogram (within 0.05%), and the mean and maximum are
//! exact. Randomness comes from a seed, not from `std::random_device`.

pub mod process;
pub mod sweep;

use std::collections::VecDeque;
use std::fmt;

use tidegate_core::Nanos;
use tidegate_core::rng::{Rng, splitmix64};

use crate::histogram::Histogram;
use process::Process;
pub use process::{ParseProcessError, ProcessKind};

/// The article's tool's defaults: Seastar's 500 us dispatch period and 1.5 over-dispatch.
pub const DEFAULT_PERIOD: Nanos = Nanos::from_micros(500);
pub const DEFAULT_MULTIPLIER: f64 = 1.5;

/// How many waiting messages' production times are stored (8 bytes each) before the rest are
/// replayed; 65,536 covers every bounded queue of the article's experiments.
pub const STORED_TIMES: usize = 1 << 16;

/// One run of the model.
#[derive(Clone, Debug, PartialEq)]
pub struct PdcConfig {
    /// How much virtual time to simulate; events at exactly `duration` still happen.
    pub duration: Nanos,
    pub producer: ProcessKind,
    /// Messages per second.
    pub producer_rate: u64,
    pub dispatcher: ProcessKind,
    pub consumer: ProcessKind,
    /// Messages per second.
    pub consumer_rate: u64,
    /// The dispatcher's nominal time between wake-ups.
    pub period: Nanos,
    /// How many times the ideal `C * period` messages the consumer may hold.
    pub multiplier: f64,
    pub seed: u64,
}

impl PdcConfig {
    /// The article's defaults for everything but the six positional arguments.
    pub fn new(
        duration: Nanos,
        (producer, producer_rate): (ProcessKind, u64),
        dispatcher: ProcessKind,
        (consumer, consumer_rate): (ProcessKind, u64),
    ) -> PdcConfig {
        PdcConfig {
            duration,
            producer,
            producer_rate,
            dispatcher,
            consumer,
            consumer_rate,
            period: DEFAULT_PERIOD,
            multiplier: DEFAULT_MULTIPLIER,
            seed: 1,
        }
    }

    /// How many messages the consumer may hold: `floor(multiplier * period * C)`.
    pub fn limit(&self) -> Result<u64, ConfigError> {
        if self.producer_rate == 0 {
            return Err(ConfigError::ZeroRate("producer"));
        }
        if self.consumer_rate == 0 {
            return Err(ConfigError::ZeroRate("consumer"));
        }
        if self.period.is_zero() {
            return Err(ConfigError::ZeroPeriod);
        }
        if !(self.multiplier.is_finite() && self.multiplier > 0.0) {
            return Err(ConfigError::BadMultiplier(self.multiplier));
        }
        let ideal = self.period.as_secs_f64() * self.consumer_rate as f64;
        // The epsilon keeps 1.5 * 500 us * 200,000/s at 150 despite rounding.
        let limit = (ideal * self.multiplier + 1e-9).floor();
        if limit < 1.0 {
            return Err(ConfigError::ZeroLimit {
                multiplier: self.multiplier,
                period: self.period,
                consumer_rate: self.consumer_rate,
            });
        }
        Ok(limit as u64)
    }

    /// The processes of the producer, the dispatcher and the consumer, each on its own
    /// random stream derived from the seed.
    pub fn processes(&self) -> [Process; 3] {
        let stream = |n: u64| Rng::seed(splitmix64(self.seed).wrapping_add(n));
        let per_sec = |rate: u64| (1_000_000_000, rate);
        let m = self.multiplier;
        [
            Process::new(self.producer, per_sec(self.producer_rate), m, stream(1)),
            Process::new(self.dispatcher, (self.period.as_nanos(), 1), m, stream(2)),
            Process::new(self.consumer, per_sec(self.consumer_rate), m, stream(3)),
        ]
    }

    /// Runs the model; see the module documentation.
    pub fn run(&self) -> Result<PdcReport, ConfigError> {
        self.run_storing(STORED_TIMES)
    }

    /// Runs the model storing at most `stored_times` production times; the report is the
    /// same whatever `stored_times` is, only the speed differs.
    fn run_storing(&self, stored_times: usize) -> Result<PdcReport, ConfigError> {
        let limit = self.limit()?;
        let [mut producer, mut dispatcher, mut consumer] = self.processes();
        // Production times of the oldest messages not yet consumed, oldest first; then
        // `replayed` messages whose times `replay` regenerates from `replay_at` on.
        let mut stored: VecDeque<u64> = VecDeque::with_capacity(stored_times);
        let mut replay = producer.clone();
        let (mut replayed, mut replay_at) = (0u64, 0u64);

        let end = self.duration.as_nanos();
        let mut latencies = Histogram::new();
        // Counters: the dispatcher's queue holds `produced - dispatched` messages, the
        // consumer `dispatched - consumed`.
        let (mut produced, mut dispatched, mut consumed) = (0u64, 0u64, 0u64);
        let (mut max_queued, mut max_held) = (0u64, 0u64);
        // Next event of each component. All three start at time zero, as in the tool.
        let mut next_production = 0u64;
        let mut next_wakeup = 0u64;
        let mut next_completion = 0u64; // meaningful while the consumer holds messages
        let mut wakeups = 0u64;

        loop {
            let wakes = next_wakeup <= end;
            let horizon = if wakes { next_wakeup } else { end };

            // The consumer, first at any instant, up to and including the horizon.
            while dispatched > consumed && next_completion <= horizon {
                let produced_at = match stored.pop_front() {
                    Some(at) => at,
                    None => {
                        let at = replay_at;
                        replay_at += replay.next_gap();
                        replayed -= 1;
                        at
                    }
                };
                latencies.record(next_completion - produced_at);
                consumed += 1;
                next_completion += consumer.next_gap();
            }
            // The producer: before the horizon, the queue settles at its longest since the
            // last wake-up; then the productions at the horizon itself.
            let mut produce = |at: u64| {
                if replayed == 0 && stored.len() < stored_times {
                    stored.push_back(at);
                } else {
                    if replayed == 0 {
                        replay = producer.clone();
                        replay_at = at;
                    }
                    replayed += 1;
                }
                at + producer.next_gap()
            };
            while next_production < horizon {
                next_production = produce(next_production);
                produced += 1;
            }
            max_queued = max_queued.max(produced - dispatched);
            while next_production == horizon {
                next_production = produce(next_production);
                produced += 1;
            }
            if !wakes {
                max_queued = max_queued.max(produced - dispatched);
                break;
            }

            // The dispatcher: top the consumer up to `limit`.
            wakeups += 1;
            let held = dispatched - consumed;
            let moved = (produced - dispatched).min(limit.saturating_sub(held));
            if moved > 0 {
                if held == 0 {
                    next_completion = next_wakeup + consumer.next_gap();
                }
                dispatched += moved;
                max_held = max_held.max(held + moved);
            }
            max_queued = max_queued.max(produced - dispatched);
            next_wakeup += dispatcher.next_gap();
        }

        Ok(PdcReport {
            config: self.clone(),
            limit,
            produced,
            dispatched,
            consumed,
            wakeups,
            max_queued,
            max_held,
            queued_at_end: produced - dispatched,
            latency: LatencySummary::of(&latencies),
        })
    }
}

/// Why a configuration cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("the {0} rate must be at least 1 message per second")]
    ZeroRate(&'static str),
    #[error("the dispatch period must be longer than zero")]
    ZeroPeriod,
    #[error("the multiplier must be a positive number, not {0}")]
    BadMultiplier(f64),
    #[error(
        "the dispatcher may never hand the consumer a message: multiplier {multiplier} x period {period} x consumer rate {consumer_rate}/s is less than 1"
    )]
    ZeroLimit {
        multiplier: f64,
        period: Nanos,
        consumer_rate: u64,
    },
}

/// Mean, 95th and 99th percentiles and maximum of the latencies, production to consumption.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LatencySummary {
    /// Zero when no message was consumed.
    pub count: u64,
    pub mean: Nanos,
    pub p95: Nanos,
    pub p99: Nanos,
    pub max: Nanos,
}

impl LatencySummary {
    fn of(h: &Histogram) -> LatencySummary {
        let ns = |v: Option<u64>| Nanos::from_nanos(v.unwrap_or(0));
        LatencySummary {
            count: h.count(),
            mean: ns(h.mean()),
            p95: ns(h.quantile(0.95)),
            p99: ns(h.quantile(0.99)),
            max: ns(h.max()),
        }
    }
}

/// What a run did.
#[derive(Clone, Debug, PartialEq)]
pub struct PdcReport {
    pub config: PdcConfig,
    /// The most messages the consumer may hold.
    pub limit: u64,
    pub produced: u64,
    pub dispatched: u64,
    pub consumed: u64,
    pub wakeups: u64,
    /// The longest the dispatcher's queue was.
    pub max_queued: u64,
    /// The most messages the consumer held at once.
    pub max_held: u64,
    pub queued_at_end: u64,
    pub latency: LatencySummary,
}

impl PdcReport {
    /// Messages consumed per second of virtual time: the effective dispatch rate when the
    /// producer outpaces what the dispatcher can deliver.
    pub fn consumed_per_sec(&self) -> f64 {
        let secs = self.config.duration.as_secs_f64();
        if secs > 0.0 {
            self.consumed as f64 / secs
        } else {
            0.0
        }
    }
}

/// Seconds with six decimals (microseconds), the unit of the article's tool's output.
pub(crate) fn secs(n: Nanos) -> String {
    format!("{:.6}", n.as_secs_f64())
}

/// The tool's output line: `PROD_RATE CONS_RATE  mean S  p95 S  p99 S  max S  max_queued N`,
/// latencies in seconds (`-` when no message was consumed).
impl fmt::Display for PdcReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = &self.latency;
        let s = |n: Nanos| {
            if l.count == 0 {
                "-".to_owned()
            } else {
                secs(n)
            }
        };
        write!(
            f,
            "{} {}  mean {}  p95 {}  p99 {}  max {}  max_queued {}",
            self.config.producer_rate,
            self.config.consumer_rate,
            s(l.mean),
            s(l.p95),
            s(l.p99),
            s(l.max),
            self.max_queued
        )
    }
}

#[cfg(test)]
mod tests;

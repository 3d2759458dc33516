//! Kanaloa's positive-oversaturation experiment in virtual time, without and with tidegate.
//!
//! The service is Kanaloa's mock: 20 workers at ~100 ms each (200 requests per second at best)
//! behind an internal FIFO queue, with contention: every request inside the service beyond
//! the 20 it serves well slows the work down a little. Clients arrive open-loop (Poisson) at
//! 150 rps for 10 s, then 250 rps for 80 s, and give up after 2 s; the service does not know,
//! and finishes their work anyway.
//!
//! Each arm puts a different [`Gate`] in front of the service, or none (`off`). The example is
//! also a walk-through of driving the sans-IO gate: arrivals call `arrive`, completions
//! `complete`, the loop calls `tick` at `next_tick`, and `poll_event` delivers what a
//! completion or a tick decided for queued requests.
//!
//! `cargo run --release -p tidegate-core --example overload`

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, VecDeque};

use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_core::gate::{Arrival, Event, Gate, Permit};
use tidegate_core::limit::Outcome;
use tidegate_core::queue::Ticket;
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Priority, Time};

const WORKERS: usize = 20;
const WORK: Nanos = Nanos::from_millis(100);
/// Extra work per request waiting inside the service, as a fraction of `WORK`.
const CONTENTION: f64 = 0.005;
const CLIENT_TIMEOUT: Nanos = Nanos::from_secs(2);
const WARM_UP: Nanos = Nanos::from_secs(10);
pub(crate) const DURATION: Nanos = Nanos::from_secs(90);
/// Steady-state figures are taken over the last 40 seconds.
pub(crate) const STEADY_FROM: Nanos = Nanos::from_secs(50);

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Arrival,
    /// A worker finished the request with this id.
    WorkDone(u64),
    GateTick,
}

/// Kanaloa's service: a worker pool with an unbounded internal queue.
#[derive(Default)]
struct Service {
    busy: usize,
    waiting: VecDeque<u64>,
}

impl Service {
    /// Accepts request `id` at `now`; returns when its work ends if a worker took it.
    fn accept(&mut self, now: Time, id: u64, rng: &mut Rng) -> Option<Time> {
        if self.busy < WORKERS {
            self.busy += 1;
            Some(now + self.work_time(rng))
        } else {
            self.waiting.push_back(id);
            None
        }
    }

    /// A worker finished; returns the next request it takes and when that one ends.
    fn finish(&mut self, now: Time, rng: &mut Rng) -> Option<(u64, Time)> {
        self.busy -= 1;
        let next = self.waiting.pop_front()?;
        self.busy += 1;
        Some((next, now + self.work_time(rng)))
    }

    fn work_time(&self, rng: &mut Rng) -> Nanos {
        let contention = 1.0 + CONTENTION * self.waiting.len() as f64;
        let jitter = 0.8 + 0.4 * rng.next_f64();
        WORK.mul_f64(contention * jitter)
    }
}

struct Request {
    arrived: Time,
    permit: Option<Permit>,
}

#[derive(Default)]
pub(crate) struct Report {
    /// Requests offered during the steady state.
    pub(crate) offered: u64,
    /// Latencies of the steady state's successful responses, sorted.
    pub(crate) ok_latencies_ms: Vec<f64>,
    pub(crate) rejected: u64,
    pub(crate) timed_out: u64,
    /// The gate's limit after each event of the steady state.
    pub(crate) limit_samples: Vec<u32>,
}

impl Report {
    /// The `p` quantile of successful latencies, in whole milliseconds; `-` with none.
    pub(crate) fn percentile(&self, p: f64) -> String {
        if self.ok_latencies_ms.is_empty() {
            return "-".to_owned();
        }
        let rank = ((self.ok_latencies_ms.len() - 1) as f64 * p).round() as usize;
        format!("{:.0}", self.ok_latencies_ms[rank])
    }
}

fn rate_at(t: Nanos) -> f64 {
    if t < WARM_UP { 150.0 } else { 250.0 }
}

/// Runs one arm; `gate` is `None` for the unprotected service.
pub(crate) fn run(mut gate: Option<Gate>) -> Report {
    let mut rng = Rng::seed(2016);
    let mut events: BinaryHeap<Reverse<(Time, u64, Kind)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut push = |events: &mut BinaryHeap<_>, at: Time, kind: Kind| {
        seq += 1;
        events.push(Reverse((at, seq, kind)));
    };
    let mut service = Service::default();
    let mut requests: HashMap<u64, Request> = HashMap::new();
    let mut queued: HashMap<Ticket, u64> = HashMap::new();
    let mut report = Report::default();
    let mut next_id = 0u64;
    let end = Time::ZERO + DURATION;
    let steady = Time::ZERO + STEADY_FROM;
    let mut scheduled_tick = Time::MAX;
    push(&mut events, Time::ZERO, Kind::Arrival);

    let finish_client = |report: &mut Report, arrived: Time, now: Time| {
        if arrived < steady {
            return;
        }
        let latency = now - arrived;
        if latency <= CLIENT_TIMEOUT {
            report.ok_latencies_ms.push(latency.as_millis_f64());
        } else {
            report.timed_out += 1;
        }
    };

    while let Some(Reverse((now, _, kind))) = events.pop() {
        if now >= end {
            break;
        }
        // Requests the gate admitted go to the service.
        let mut admitted: Vec<(u64, Permit)> = Vec::new();
        match kind {
            Kind::Arrival => {
                let id = next_id;
                next_id += 1;
                let gap = -(1.0 - rng.next_f64()).ln() / rate_at(now - Time::ZERO);
                push(&mut events, now + Nanos::from_secs_f64(gap), Kind::Arrival);
                if now >= steady {
                    report.offered += 1;
                }
                requests.insert(
                    id,
                    Request {
                        arrived: now,
                        permit: None,
                    },
                );
                match gate.as_mut().map(|g| g.arrive(now, Priority::default())) {
                    None => {
                        if let Some(done) = service.accept(now, id, &mut rng) {
                            push(&mut events, done, Kind::WorkDone(id));
                        }
                    }
                    Some(Arrival::Admitted(permit)) => admitted.push((id, permit)),
                    Some(Arrival::Queued(ticket)) => {
                        queued.insert(ticket, id);
                    }
                    Some(Arrival::Rejected(_)) => {
                        requests.remove(&id);
                        if now >= steady {
                            report.rejected += 1;
                        }
                    }
                }
            }
            Kind::WorkDone(id) => {
                if let Some((next, done)) = service.finish(now, &mut rng) {
                    push(&mut events, done, Kind::WorkDone(next));
                }
                if let Some(request) = requests.remove(&id) {
                    finish_client(&mut report, request.arrived, now);
                    if let (Some(gate), Some(permit)) = (gate.as_mut(), request.permit) {
                        // A response after the client gave up is a timeout: an overload signal.
                        let outcome = if now - request.arrived <= CLIENT_TIMEOUT {
                            Outcome::Success
                        } else {
                            Outcome::Dropped
                        };
                        gate.complete(now, permit, outcome);
                    }
                }
            }
            Kind::GateTick => {
                scheduled_tick = Time::MAX;
                if let Some(gate) = gate.as_mut() {
                    gate.tick(now);
                }
            }
        }
        if let Some(gate) = gate.as_mut() {
            while let Some(event) = gate.poll_event() {
                match event {
                    Event::Admitted { ticket, permit, .. } => {
                        if let Some(id) = queued.remove(&ticket) {
                            admitted.push((id, permit));
                        }
                    }
                    Event::Expired { ticket } | Event::Rejected { ticket, .. } => {
                        if let Some(request) =
                            queued.remove(&ticket).and_then(|id| requests.remove(&id))
                            && request.arrived >= steady
                        {
                            report.rejected += 1;
                        }
                    }
                }
            }
            for (id, permit) in admitted {
                if let Some(request) = requests.get_mut(&id) {
                    request.permit = Some(permit);
                }
                if let Some(done) = service.accept(now, id, &mut rng) {
                    push(&mut events, done, Kind::WorkDone(id));
                }
            }
            let next = gate.next_tick();
            if next < scheduled_tick {
                scheduled_tick = next.max(now);
                push(&mut events, scheduled_tick, Kind::GateTick);
            }
            if now >= steady {
                report.limit_samples.push(gate.limit());
            }
        }
    }
    // Whoever is still waiting at the end has waited at least as long as the run allowed.
    for request in requests
        .values()
        .filter(|r| r.arrived >= steady && end - r.arrived > CLIENT_TIMEOUT)
    {
        finish_client(&mut report, request.arrived, end);
    }
    report.ok_latencies_ms.sort_by(f64::total_cmp);
    report
}

/// The protections compared: each limit with the regulator it is usually paired with, and the
/// documents' own pairings (Kanaloa: hill climbing and PIE; QALM: a fixed limit and CoDel;
/// Cinnamon: its auto-tuner and PID).
pub(crate) fn protections() -> Vec<(&'static str, GateConfig)> {
    let gate = |limit: LimitConfig, regulator: RegulatorAlgorithm| GateConfig {
        limit,
        regulator: RegulatorConfig::of(regulator),
        ..GateConfig::default()
    };
    let mut fixed60 = LimitConfig::of(LimitAlgorithm::Fixed);
    fixed60.fixed.limit = 60;
    let mut fixed20 = LimitConfig::of(LimitAlgorithm::Fixed);
    fixed20.fixed.limit = 20;
    let mut hill_climb = LimitConfig::of(LimitAlgorithm::HillClimb);
    hill_climb.hill_climb.initial = 60;
    vec![
        ("fixed 60", gate(fixed60, RegulatorAlgorithm::Off)),
        ("fixed 20 + codel", gate(fixed20, RegulatorAlgorithm::Codel)),
        (
            "aimd",
            gate(
                LimitConfig::of(LimitAlgorithm::Aimd),
                RegulatorAlgorithm::Off,
            ),
        ),
        (
            "vegas + pie",
            gate(
                LimitConfig::of(LimitAlgorithm::Vegas),
                RegulatorAlgorithm::Pie,
            ),
        ),
        (
            "gradient2 + pie",
            gate(
                LimitConfig::of(LimitAlgorithm::Gradient2),
                RegulatorAlgorithm::Pie,
            ),
        ),
        ("hillclimb + pie", gate(hill_climb, RegulatorAlgorithm::Pie)),
        (
            "autotune + pid",
            gate(
                LimitConfig::of(LimitAlgorithm::Autotune),
                RegulatorAlgorithm::Pid,
            ),
        ),
        ("tidegate default", GateConfig::default()),
    ]
}

fn main() {
    println!(
        "Kanaloa's service (20 workers x 100 ms, ~200 rps) offered 250 rps; client timeout 2 s."
    );
    println!(
        "Steady state: the last {} s of {} s.\n",
        (DURATION - STEADY_FROM).as_secs_f64(),
        DURATION.as_secs_f64()
    );
    println!(
        "{:<22} {:>8} {:>9} {:>7} {:>9} {:>8} {:>8} {:>6}",
        "arm", "offered", "goodput", "shed", "timeouts", "p50 ms", "p99 ms", "limit"
    );
    let mut arms: Vec<(String, Option<Gate>)> = vec![("off".to_owned(), None)];
    for (name, config) in protections() {
        arms.push((name.to_owned(), Some(config.build())));
    }
    let seconds = (DURATION - STEADY_FROM).as_secs_f64();
    for (name, gate) in arms {
        let report = run(gate);
        let per_s = |n: u64| n as f64 / seconds;
        let limit = if report.limit_samples.is_empty() {
            "-".to_owned()
        } else {
            let mean = report
                .limit_samples
                .iter()
                .map(|&l| f64::from(l))
                .sum::<f64>()
                / report.limit_samples.len() as f64;
            format!("{mean:.0}")
        };
        println!(
            "{:<22} {:>6.0}/s {:>7.0}/s {:>6.0}% {:>8.0}% {:>8} {:>8} {:>6}",
            name,
            per_s(report.offered),
            per_s(report.ok_latencies_ms.len() as u64),
            100.0 * report.rejected as f64 / report.offered.max(1) as f64,
            100.0 * report.timed_out as f64 / report.offered.max(1) as f64,
            report.percentile(0.5),
            report.percentile(0.99),
            limit,
        );
    }
}

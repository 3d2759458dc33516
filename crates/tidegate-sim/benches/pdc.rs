//! The event-driven engine against stepping virtual time by 1 us, as the article's tool does.
//!
//! `cargo bench -p tidegate-sim --bench pdc -- [SECONDS [RATE]]` runs `poisson RATE uniform
//! uniform 200000` (RATE 200000 by default) for SECONDS of virtual time (default 20) with both
//! engines, prints both result lines, the wall-clock times and their ratio. Under `cargo test --bench pdc` it runs 2 s as a
//! smoke test and checks that both engines agree where they must (all uniform).
//!
//! The stepping engine below exists only for this comparison. It is a straightforward
//! translation of the tool's main loop (`pdc-model/simulate.cc`): every microsecond, tick the
//! consumer, the producer and the dispatcher, in that order, and sample the queue length; the
//! dispatcher's queue and the consumer's messages are FIFO queues of production times (the
//! tool's `std::list<request>`). It shares the processes and the histogram with the
//! event-driven engine, so the difference measured is the stepping, not the bookkeeping.

#![allow(clippy::expect_used, reason = "benchmark on constant inputs")]

use std::collections::VecDeque;
use std::hint::black_box;
use std::time::Instant;

use tidegate_core::Nanos;
use tidegate_sim::histogram::Histogram;
use tidegate_sim::pdc::{PdcConfig, ProcessKind};

/// `(mean, p95, p99, max)` in nanoseconds and `max_queued`.
type Summary = ([u64; 4], u64);

fn stepping(config: &PdcConfig) -> Summary {
    const STEP: u64 = 1_000;
    let limit = config.limit().expect("valid configuration") as usize;
    let [mut producer, mut dispatcher, mut consumer] = config.processes();
    let mut latencies = Histogram::new();
    let mut queue: VecDeque<u64> = VecDeque::new();
    let mut executing: VecDeque<u64> = VecDeque::new();
    let (mut next_production, mut next_wakeup, mut next_completion) = (0u64, 0u64, 0u64);
    let mut max_queued = 0;
    let mut now = 0u64;
    while now <= config.duration.as_nanos() {
        // consumer.tick(now)
        while !executing.is_empty() && now >= next_completion {
            let produced_at = executing.pop_front().unwrap_or(now);
            latencies.record(now - produced_at);
            next_completion += consumer.next_gap();
        }
        // producer.tick(now)
        while now >= next_production {
            next_production += producer.next_gap();
            queue.push_back(now);
        }
        // dispatcher.tick(now)
        if now >= next_wakeup {
            next_wakeup += dispatcher.next_gap();
            while executing.len() < limit {
                let Some(message) = queue.pop_front() else {
                    break;
                };
                if executing.is_empty() {
                    next_completion = now + consumer.next_gap();
                }
                executing.push_back(message);
            }
        }
        max_queued = max_queued.max(queue.len() as u64);
        now += STEP;
    }
    let get = |v: Option<u64>| v.unwrap_or(0);
    (
        [
            get(latencies.mean()),
            get(latencies.quantile(0.95)),
            get(latencies.quantile(0.99)),
            get(latencies.max()),
        ],
        max_queued,
    )
}

fn line(([mean, p95, p99, max], max_queued): Summary) -> String {
    let s = |n: u64| format!("{:.6}", n as f64 / 1e9);
    format!(
        "mean {}  p95 {}  p99 {}  max {}  max_queued {max_queued}",
        s(mean),
        s(p95),
        s(p99),
        s(max)
    )
}

fn config(secs: u64, producer: ProcessKind, rate: u64) -> PdcConfig {
    PdcConfig::new(
        Nanos::from_secs(secs),
        (producer, rate),
        ProcessKind::Uniform,
        (ProcessKind::Uniform, 200_000),
    )
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if !args.iter().any(|a| a == "--bench") {
        // Smoke test: on a short run both engines give the ideal 0.5 ms when all is uniform.
        let c = config(2, ProcessKind::Uniform, 200_000);
        let event = c.run().expect("valid configuration");
        let step = stepping(&c);
        assert_eq!(step.0[3], 500_000, "stepping: {}", line(step));
        assert_eq!(event.latency.max, Nanos::from_micros(500), "{event}");
        assert_eq!(event.latency.p99, Nanos::from_micros(500), "{event}");
        assert_eq!(event.max_queued, step.1);
        println!("pdc bench smoke: both engines agree ({event})");
        return;
    }
    let mut numbers = args.iter().filter_map(|a| a.parse::<u64>().ok());
    let secs = numbers.next().unwrap_or(20);
    let rate = numbers.next().unwrap_or(200_000).max(1);
    let c = config(secs, ProcessKind::Poisson, rate);
    println!("poisson {rate} uniform uniform 200000, {secs} s of virtual time, seed 1");

    let start = Instant::now();
    let event = black_box(c.run().expect("valid configuration"));
    let event_time = start.elapsed();
    println!(
        "event-driven   {:>8.3} s   {}",
        event_time.as_secs_f64(),
        event
    );

    let start = Instant::now();
    let step = black_box(stepping(&c));
    let step_time = start.elapsed();
    println!(
        "1-us stepping  {:>8.3} s   {rate} 200000  {}",
        step_time.as_secs_f64(),
        line(step)
    );
    println!(
        "ratio (stepping / event-driven): {:.1}x",
        step_time.as_secs_f64() / event_time.as_secs_f64()
    );
}

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Time};
use tidegate_model::service::{Admission, PoolConfig};

use super::*;

/// A log of the model's pool of `workers` workers (work uniform within +-20% of `work_s`)
/// with a queue of `queue` (refused with 503 beyond it; `None`: unbounded), under Poisson
/// arrivals at `rates` (requests per second, each for `phase_s` seconds).
fn service_log(
    workers: u32,
    work_s: f64,
    queue: Option<u32>,
    rates: &[f64],
    phase_s: f64,
) -> Vec<Entry> {
    contended_log(workers, work_s, 0.0, queue, rates, phase_s)
}

/// [`service_log`] with work started while the service holds more than `workers` requests
/// slowed by `contention` per request beyond: the model's own pool, driven by its arrivals
/// and completions.
fn contended_log(
    workers: u32,
    work_s: f64,
    contention: f64,
    queue: Option<u32>,
    rates: &[f64],
    phase_s: f64,
) -> Vec<Entry> {
    let config = ServiceConfig {
        spread: Spread::Uniform,
        pool: PoolConfig {
            workers: std::num::NonZeroU32::new(workers).unwrap(),
            work: Nanos::from_secs_f64(work_s),
            queue,
            optimal: None,
            contention: NonNegative::new(contention).unwrap(),
        },
        ..ServiceConfig::default()
    };
    let mut pool = config.instance();
    let mut rng = Rng::seed(7);
    let base = 1.7e9;
    let secs = |t: Time| t.as_nanos() as f64 / 1e9;
    // Completions due, and each request's arrival time by its token.
    let mut due: BinaryHeap<Reverse<(Time, u64)>> = BinaryHeap::new();
    let mut arrived: Vec<Time> = Vec::new();
    let mut entries = Vec::new();
    let finish = |entries: &mut Vec<Entry>, at: Time, token: u64, arrived: &[Time]| {
        let start = arrived[token as usize];
        let latency = secs(at) - secs(start);
        entries.push(Entry {
            line: 0,
            start: base + secs(start),
            duration: latency,
            upstream: Some(latency),
            status: 200,
        });
    };
    let mut t = 0.0;
    for (k, &rate) in rates.iter().enumerate() {
        let phase_end = (k + 1) as f64 * phase_s;
        loop {
            t += -(1.0 - rng.next_f64()).ln() / rate;
            if t >= phase_end {
                t = phase_end;
                break;
            }
            let now = Time::ZERO + Nanos::from_secs_f64(t);
            while let Some(&Reverse((at, token))) = due.peek().filter(|d| d.0.0 <= now) {
                due.pop();
                finish(&mut entries, at, token, &arrived);
                if let Some(next) = pool.finish(at) {
                    due.push(Reverse((next.done, next.token)));
                }
            }
            let token = arrived.len() as u64;
            arrived.push(now);
            match pool.arrive(now, token, config.draw_factor(&mut rng)) {
                Admission::Started(done) => due.push(Reverse((done, token))),
                Admission::Queued => {}
                Admission::Refused => entries.push(Entry {
                    line: 0,
                    start: base + t,
                    duration: 0.001,
                    upstream: Some(0.001),
                    status: 503,
                }),
            }
        }
    }
    while let Some(Reverse((at, token))) = due.pop() {
        finish(&mut entries, at, token, &arrived);
        if let Some(next) = pool.finish(at) {
            due.push(Reverse((next.done, next.token)));
        }
    }
    entries
}

#[test]
fn a_pool_with_a_knee_at_ten_fits_ten_workers_and_its_work_time() {
    // Capacity 100 rps: a third, then 1.3x for a while (the queue grows), then a third.
    let log = service_log(10, 0.1, None, &[33.0, 130.0, 33.0], 20.0);
    let fit = fit(&log).unwrap();
    assert!(fit.knee_seen, "{fit:#?}");
    assert!((9..=11).contains(&fit.knee), "knee {}", fit.knee);
    assert!((fit.work_ms - 100.0).abs() < 5.0, "work {}", fit.work_ms);
    assert!(fit.contention < 0.01, "contention {}", fit.contention);
    assert_eq!(fit.queue, None);
    assert_eq!(fit.service.spread, Spread::Uniform);
    let jitter = fit.service.jitter.map(NonNegative::get).unwrap_or(0.0);
    assert!((0.1..0.3).contains(&jitter), "jitter {jitter}");
    assert_eq!((fit.served, fit.refused), (log.len(), 0));
}

#[test]
fn a_knee_at_three_and_at_forty() {
    for (workers, work) in [(3u32, 0.02), (40, 0.05)] {
        let capacity = f64::from(workers) / work;
        let log = service_log(workers, work, None, &[0.4 * capacity, 1.3 * capacity], 15.0);
        let knee = fit(&log).unwrap().knee as usize;
        let tolerance = (workers as usize / 10).max(1);
        assert!(
            knee.abs_diff(workers as usize) <= tolerance,
            "{workers} workers: knee {knee}"
        );
    }
}

#[test]
fn contention_beyond_the_knee_is_fitted_from_the_slope() {
    // 10 workers, 5% slower work per request held beyond them, a queue of 10: at 1.5x the
    // service holds 20, works at 1.5x its time, and serves 10 / 150 ms = 66.7 rps.
    let log = contended_log(10, 0.1, 0.05, Some(10), &[40.0, 150.0, 40.0], 20.0);
    let fit = fit(&log).unwrap();
    assert!((9..=11).contains(&fit.knee), "knee {}", fit.knee);
    // Queueing alone would answer at 20 in 200 ms; the log shows about 280.
    assert!(fit.contention > 0.01, "contention {}", fit.contention);
    // The throughput while holding 20, which is what the replay's overloads depend on
    // (workers and contention trade off against each other in a log that holds 20 at most).
    let workers = f64::from(fit.knee);
    let throughput = workers / (fit.work_ms / 1e3 * (1.0 + fit.contention * (20.0 - workers)));
    assert!(
        (throughput - 66.7).abs() < 6.7,
        "{throughput:.1} rps at 20 held: {fit:#?}"
    );
}

#[test]
fn a_log_that_never_queues_shows_no_knee() {
    let log = service_log(50, 0.05, None, &[100.0], 30.0);
    let fit = fit(&log).unwrap();
    assert!(!fit.knee_seen, "{fit:#?}");
    assert_eq!(fit.knee, fit.max_concurrency);
}

#[test]
fn refusals_give_the_queue() {
    let log = service_log(10, 0.1, Some(6), &[50.0, 200.0], 20.0);
    let fit = fit(&log).unwrap();
    assert!(fit.refused > 100, "{}", fit.refused);
    assert!((9..=11).contains(&fit.knee), "knee {}", fit.knee);
    let queue = fit.queue.unwrap_or(u32::MAX);
    assert!((5..=7).contains(&queue), "queue {queue}");
}

#[test]
fn nothing_served_is_an_error() {
    let mut log = service_log(2, 0.1, None, &[5.0], 10.0);
    for e in &mut log {
        e.status = 503;
    }
    assert_eq!(fit(&log), Err(FitError::NothingServed));
}

#[test]
fn concurrency_counts_the_stays_under_way_ends_first() {
    let stay = |from: f64, to: f64| Stay {
        from,
        to,
        status: 200,
    };
    let stays = [
        stay(0.0, 1.0),
        stay(0.5, 2.0),
        stay(1.0, 3.0),
        stay(1.5, 1.6),
    ];
    assert_eq!(concurrency(&stays), [1, 2, 2, 3]);
}

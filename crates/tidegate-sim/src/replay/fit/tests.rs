use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tidegate_core::rng::Rng;

use super::*;

/// A log of a FIFO service of `workers` workers (work uniform within +-20% of `work_s`)
/// with a queue of `queue` (refused with 503 beyond it; `None`: unbounded), under Poisson
/// arrivals at `rates` (requests per second, each for `phase_s` seconds).
fn service_log(
    workers: usize,
    work_s: f64,
    queue: Option<usize>,
    rates: &[f64],
    phase_s: f64,
) -> Vec<Entry> {
    let mut rng = Rng::seed(7);
    let ns = |s: f64| (s * 1e9).round() as u64;
    // Ends of the requests in the service (working or waiting), and the workers' next free
    // times.
    let mut held: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
    let mut free: BinaryHeap<Reverse<u64>> = (0..workers).map(|_| Reverse(0)).collect();
    let mut entries = Vec::new();
    let mut t = 0.0;
    for (k, &rate) in rates.iter().enumerate() {
        let phase_end = (k + 1) as f64 * phase_s;
        loop {
            t += -(1.0 - rng.next_f64()).ln() / rate;
            if t >= phase_end {
                t = phase_end;
                break;
            }
            let now = ns(t);
            while held.peek().is_some_and(|&Reverse(end)| end <= now) {
                held.pop();
            }
            let base = 1.7e9;
            if queue.is_some_and(|q| held.len() >= workers + q) {
                entries.push(Entry {
                    line: entries.len() + 1,
                    start: base + t,
                    duration: 0.001,
                    upstream: Some(0.001),
                    status: 503,
                });
                continue;
            }
            let Reverse(worker_free) = free.pop().unwrap();
            let begin = worker_free.max(now);
            let end = begin + ns(work_s * (0.8 + 0.4 * rng.next_f64()));
            free.push(Reverse(end));
            held.push(Reverse(end));
            let latency = (end - now) as f64 / 1e9;
            entries.push(Entry {
                line: entries.len() + 1,
                start: base + t,
                duration: latency,
                upstream: Some(latency),
                status: 200,
            });
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
    for (workers, work) in [(3, 0.02), (40, 0.05)] {
        let capacity = workers as f64 / work;
        let log = service_log(workers, work, None, &[0.4 * capacity, 1.3 * capacity], 15.0);
        let knee = fit(&log).unwrap().knee as usize;
        let tolerance = (workers / 10).max(1);
        assert!(
            knee.abs_diff(workers) <= tolerance,
            "{workers} workers: knee {knee}"
        );
    }
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

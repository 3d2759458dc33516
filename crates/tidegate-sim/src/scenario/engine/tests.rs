use super::*;

fn scenario(doc: &str) -> Scenario {
    Scenario::parse(doc, "test").unwrap()
}

const POOL: &str = r#"
duration = "20s"
warmup = "10s"
[service]
spread = "constant"
[service.pool]
workers = 2
work = "100ms"
queue = 5
[load]
arrivals = "constant"
rate = 10
timeout = "1s"
[[arms]]
name = "off"
kind = "off"
[[arms]]
name = "tidegate default"
"#;

#[test]
fn under_capacity_everything_is_served_in_the_work_time() {
    let s = scenario(POOL);
    for arm in &s.arms {
        let run = run_arm(&s, arm, None);
        let f = &run.steady.figures;
        assert_eq!(f.offered_rps, 10.0, "{}", arm.name);
        assert_eq!(f.goodput_rps, 10.0, "{}", arm.name);
        assert_eq!(f.p99_ms, Some(100.0), "{}", arm.name);
        assert_eq!(run.series.len(), 20);
    }
}

#[test]
fn an_overloaded_pool_refuses_past_its_queue_and_times_out_the_rest() {
    // 40 rps into 20 rps of capacity: the internal queue of 5 stays full.
    let s = scenario(&POOL.replace("rate = 10", "rate = 40"));
    let run = run_arm(&s, &s.arms[0], None);
    let f = &run.steady.figures;
    assert!((f.goodput_rps - 20.0).abs() < 0.5, "{f:?}");
    assert!((f.refused_ratio - 0.5).abs() < 0.02, "{f:?}");
    // Five queued ahead at 20 rps: 250 ms of waiting plus 100 ms of work.
    assert!(
        f.p50_ms.is_some_and(|p| (300.0..=360.0).contains(&p)),
        "{f:?}"
    );
}

/// [`POOL`] with work of 2 s against its 1 s timeout, at 1 rps.
fn slow_pool() -> String {
    POOL.replace("work = \"100ms\"", "work = \"2s\"")
        .replace("rate = 10", "rate = 1")
}

#[test]
fn abandoned_work_continues_and_the_gate_learns_it_as_a_drop() {
    // Every caller gives up, the service works on.
    let s = scenario(&slow_pool());
    let off = run_arm(&s, &s.arms[0], None);
    assert_eq!(off.steady.figures.goodput_rps, 0.0);
    assert_eq!(off.steady.figures.timeout_ratio, 1.0);
    assert!(
        off.series.iter().all(|s| s.inflight <= 2 + 5),
        "the service holds the abandoned work"
    );
    let gated = run_arm(&s, &s.arms[1], None);
    assert_eq!(gated.steady.figures.goodput_rps, 0.0);
    assert!(gated.whole.figures.timeout_ratio + gated.whole.figures.shed_ratio > 0.99);
}

#[test]
fn a_timeout_is_avoidable_only_if_the_requests_own_work_was_within_it() {
    // Late whatever the protection does.
    let s = scenario(&slow_pool());
    let f = run_arm(&s, &s.arms[0], None).steady.figures;
    assert_eq!((f.timeout_ratio, f.avoidable_timeout_ratio), (1.0, 0.0));
    // Work of 600 ms (3.3 rps of capacity) at 10 rps, unprotected: the internal queue of 5
    // holds 1.5 s, so what times out is late for its wait, its own work within the timeout.
    let queued = POOL.replace("work = \"100ms\"", "work = \"600ms\"");
    let s = scenario(&queued);
    let f = run_arm(&s, &s.arms[0], None).steady.figures;
    assert!(f.timeout_ratio > 0.1, "{f:?}");
    assert_eq!(f.avoidable_timeout_ratio, f.timeout_ratio, "{f:?}");
}

/// Runs the gate arm of `doc` and returns its gate's counters.
fn gate_counters(doc: &str) -> (ArmRun, tidegate_core::gate::TierCounters) {
    let s = scenario(doc);
    let mut run = Run::new(&s, &s.arms[0], None);
    run.run();
    let Front::Gates(gates) = &run.front else {
        panic!("a gate arm")
    };
    let counters = gates[0].counters().total();
    (run.finish(), counters)
}

#[test]
fn a_late_answer_is_a_drop_only_if_the_service_alone_was_too_slow() {
    // One worker, a gate that holds one in flight and queues the rest for up to 1 s, and
    // callers who wait 1 s: a request that queued 500 ms behind another then took 600 ms
    // is late for its caller, through no fault of the service.
    let doc = |work: &str| {
        format!(
            r#"
duration = "20s"
warmup = "10s"
[service]
spread = "constant"
[service.pool]
workers = 1
work = "{work}"
[load]
arrivals = "constant"
rate = 2
timeout = "1s"
[[arms]]
name = "fixed 1"
limit = {{ algorithm = "fixed", fixed = {{ limit = 1 }} }}
regulator = {{ algorithm = "off" }}
queue = {{ timeout = "1s" }}
"#
        )
    };
    let (run, counters) = gate_counters(&doc("600ms"));
    // Late answers come (the gate's patience, learnt from them, then turns away before they
    // are sent some of those that would be late: expired, not timed out).
    assert!(run.whole.figures.timeout_ratio > 0.1, "{:?}", run.whole);
    assert!(counters.completed_ok > 0);
    assert_eq!(
        counters.completed_dropped, 0,
        "600 ms of work is no overload signal: {counters:?}"
    );
    // 1.2 s of work is past the caller's timeout on its own: the service is too slow.
    let (run, counters) = gate_counters(&doc("1200ms"));
    assert_eq!(run.whole.figures.goodput_rps, 0.0);
    assert!(counters.completed_dropped > 0, "{counters:?}");
    assert_eq!(counters.completed_ok, 0, "{counters:?}");
}

#[test]
fn every_request_ends_in_exactly_one_outcome() {
    let doc = POOL.replace("rate = 10", "rate = 60").replace(
        "[[arms]]\nname = \"off\"",
        "[load.retries]\nmax = 2\nbackoff = \"50ms\"\non_timeout = true\n[[arms]]\nname = \"off\"",
    );
    let s = scenario(&doc);
    for arm in &s.arms {
        let run = run_arm(&s, arm, None);
        let f = &run.whole.figures;
        let sum = f.goodput_rps / f.offered_rps
            + f.shed_ratio
            + f.expired_ratio
            + f.refused_ratio
            + f.timeout_ratio
            + f.unsent_ratio;
        assert!((sum - 1.0).abs() < 1e-3, "{}: {f:?}", arm.name);
        let per_second: u64 = run.series.iter().map(|s| s.offered).sum();
        assert_eq!(per_second as f64, f.offered_rps * 20.0, "{}", arm.name);
        assert!(per_second >= 1199, "{}", arm.name);
    }
}

#[test]
fn a_connection_cap_leaves_arrivals_unsent() {
    let doc = POOL
        .replace("work = \"100ms\"", "work = \"2s\"")
        .replace("timeout = \"1s\"", "timeout = \"10s\"\nconnections = 4");
    let s = scenario(&doc);
    let run = run_arm(&s, &s.arms[0], None);
    let f = &run.steady.figures;
    // Two workers at 2 s each serve 1 request per second, so the four connections stay
    // busy (two working, two waiting 2 s) and 9 arrivals per second of 10 find none free.
    assert!((f.unsent_ratio - 0.9).abs() < 0.02, "{f:?}");
    assert!((f.goodput_rps - 1.0).abs() < 0.05, "{f:?}");
    assert!(f.p50_ms.is_some_and(|p| (p - 4000.0).abs() < 5.0), "{f:?}");
}

#[test]
fn a_closed_loop_keeps_its_workers_busy() {
    let doc = POOL.replace(
        "arrivals = \"constant\"\nrate = 10",
        "arrivals = \"closed\"\nworkers = 2\nthink = \"100ms\"",
    );
    let s = scenario(&doc);
    let run = run_arm(&s, &s.arms[0], None);
    // Each worker: 100 ms of work, 100 ms of thinking.
    assert!(
        (run.steady.figures.goodput_rps - 10.0).abs() < 0.2,
        "{:?}",
        run.steady
    );
}

#[test]
fn static_leases_grant_per_window_on_each_instance() {
    let doc = r#"
duration = "10s"
warmup = "2s"
[service]
kind = "curve"
instances = 3
balance = "least_loaded"
[service.curve]
by = "window"
points = [[10, "2ms"], [50, "5ms"], [120, "20ms"]]
[load]
arrivals = "constant"
rate = 1000
timeout = "5s"
[[arms]]
name = "lease 100"
kind = "static_lease"
lease = { allowed = 100 }
"#;
    let s = scenario(doc);
    let run = run_arm(&s, &s.arms[0], None);
    assert_eq!(run.steady.figures.goodput_rps, 300.0);
    assert_eq!(run.steady.limit, Some(300.0));
    assert!(run.steady.figures.p99_ms.is_some_and(|p| p <= 20.0));
}

#[test]
fn capacity_changes_apply_on_schedule() {
    let doc = POOL.replace(
        "[load]",
        "[[service.changes]]\nat = \"10s\"\nwork = \"50ms\"\n[load]",
    );
    let s = scenario(&doc);
    let run = run_arm(&s, &s.arms[0], None);
    // Within the histogram's 0.05%.
    let close = |x: Option<f64>, y: f64| x.is_some_and(|x| (x - y).abs() <= y * 5e-4);
    assert!(close(run.whole.figures.p99_ms, 100.0), "{:?}", run.whole);
    assert!(close(run.steady.figures.p99_ms, 50.0), "{:?}", run.steady);
}

/// A series whose `i`-th entry (from 1) holds the `i`-th limit of `limits`.
fn limit_series(limits: &[u32]) -> Vec<Second> {
    limits
        .iter()
        .enumerate()
        .map(|(i, &l)| Second {
            second: i as u32 + 1,
            limit: Some(l),
            ..Second::default()
        })
        .collect()
}

#[test]
fn settling_is_measured_from_the_overload_start() {
    let series = limit_series(&[50, 40, 30, 30, 22, 19, 21, 20, 15, 20, 20, 20]);
    // From second 5 on, the median of five is within 20% of 20; the lone 15 is a probe.
    assert_eq!(settle_time(&series, 1.0, 1.0, 20.0), Some(4.0));
    assert_eq!(settle_time(&series, 1.0, 1.0, 100.0), None);
    // The same series in steps of 10 ms: the same entries, in hundredths of the time.
    let settled = settle_time(&series, 0.01, 0.01, 20.0);
    assert!(
        settled.is_some_and(|s| (s - 0.04).abs() < 1e-12),
        "{settled:?}"
    );
}

#[test]
fn a_small_limit_one_request_from_its_mean_is_settled() {
    // Held at 2 with a probe of 1 now and then (a mean of 1.7): 20% of it is a third of a
    // request, which neither 1 nor 2 is within; one request is the smallest move a limit
    // makes.
    let held = limit_series(&[9, 6, 4, 2, 2, 1, 2, 2, 1, 1, 2, 2, 1, 2, 2]);
    assert_eq!(settle_time(&held, 1.0, 1.0, 1.7), Some(3.0));
    // Wandering 1 to 4 around 2.5 is not settled until it stops.
    let wandering = limit_series(&[1, 4, 4, 4, 1, 1, 1, 4, 4, 4, 2, 2, 2, 3, 2]);
    assert_eq!(settle_time(&wandering, 1.0, 1.0, 2.5), Some(10.0));
}

/// The median and the 99th percentile of a second are the samples of rank `ceil(q * n)` in
/// sorted order, equal values and tiny seconds included.
#[test]
fn a_seconds_quantiles_are_those_of_the_sorted_latencies() {
    let mut rng = Rng::seed(11);
    for n in (1..40).chain([99, 100, 101, 250, 1_000]) {
        let mut values: Vec<u64> = (0..n)
            .map(|_| {
                rng.range_inclusive(0, 50) as u64 * 1_000_000 + rng.range_inclusive(0, 3) as u64
            })
            .collect();
        let mut sorted = values.clone();
        sorted.sort_unstable();
        let ms = |q: f64| {
            let v = sorted[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
            Some((v as f64 / 1e3).round() / 1e3)
        };
        assert_eq!(median_and_p99_ms(&mut values), (ms(0.5), ms(0.99)), "n {n}");
    }
    assert_eq!(median_and_p99_ms(&mut []), (None, None));
}

#[test]
fn a_request_displaced_from_the_queue_is_refused_at_once() {
    // Two workers of 100 ms, a fixed limit of 2 and a queue of 3 that waits at most
    // 300 ms, under 60 rps in two tiers: tier 1's arrivals displace queued tier-2 requests.
    // Nobody can wait for the client's 1 s (300 ms in the queue, 100 ms of work): a
    // displaced request is refused when it is displaced, not left to its caller's timeout.
    let doc = POOL
        .replace("rate = 10", "rate = 60\ntiers = [{ tier = 1, weight = 1 }, { tier = 2, weight = 1 }]")
        .replace(
            "[[arms]]\nname = \"tidegate default\"",
            "[[arms]]\nname = \"fixed\"\nlimit = { algorithm = \"fixed\", fixed = { limit = 2 } }\n\
             regulator = { algorithm = \"off\" }\nqueue = { capacity = 3, timeout = \"300ms\", wait_bound = inf }",
        );
    let s = scenario(&doc);
    let run = run_arm(&s, &s.arms[1], None);
    let f = &run.whole.figures;
    assert!(f.shed_ratio > 0.3, "{f:?}");
    assert_eq!(f.timeout_ratio, 0.0, "{f:?}");
}

//! The article's findings, reproduced: each test fails if the model stops showing one.

use super::sweep::{Axis, Jitter, Sweep};
use super::*;

const C: u64 = 200_000;

fn run(secs: u64, p: ProcessKind, rate: u64, d: ProcessKind, c: ProcessKind) -> PdcReport {
    PdcConfig::new(Nanos::from_secs(secs), (p, rate), d, (c, C))
        .run()
        .expect("valid configuration")
}

use ProcessKind::{Poisson, Uniform};

#[test]
fn all_uniform_at_200k_holds_every_message_half_a_millisecond() {
    // The article's first result: mean, p95, p99 and max all 0.5 ms.
    let r = run(2, Uniform, C, Uniform, Uniform);
    let half_ms = Nanos::from_micros(500);
    assert_eq!(r.latency.p95, half_ms, "{r}");
    assert_eq!(r.latency.p99, half_ms, "{r}");
    assert_eq!(r.latency.max, half_ms, "{r}");
    // Only the very first message, dispatched as it is produced at t = 0, is faster.
    assert!(half_ms.as_nanos() - r.latency.mean.as_nanos() < 10, "{r}");
    // 100 messages arrive per period; the tool samples the queue after each instant's
    // dispatch, so it never sees the 100th.
    assert_eq!(r.max_queued, 99);
    assert_eq!(r.limit, 150);
    assert_eq!(
        r.to_string(),
        "200000 200000  mean 0.000500  p95 0.000500  p99 0.000500  max 0.000500  max_queued 99"
    );
    // Everything produced was consumed, but for the messages of the last period.
    assert!(r.produced - r.consumed <= 200, "{r:?}");
}

/// Producer or consumer jitter: the system keeps up at every rate below the consumer's, and
/// the delay grows as the producer's rate approaches it.
fn keeps_up_with_growing_delay(producer: ProcessKind, consumer: ProcessKind) {
    let mut last_mean = Nanos::ZERO;
    for rate in [100_000, 150_000, 180_000, 190_000, 199_000] {
        let r = run(10, producer, rate, Uniform, consumer);
        assert!(
            r.consumed as f64 >= 0.999 * r.produced as f64,
            "{rate}: {r:?}"
        );
        // The queue stays within a tenth of a second of production.
        assert!(r.max_queued < rate / 10, "{rate}: {r}");
        assert!(r.latency.max < Nanos::from_millis(100), "{rate}: {r}");
        assert!(r.latency.mean > last_mean, "{rate}: {r}");
        last_mean = r.latency.mean;
    }
    // Near the peak, jitter costs: the ideal was 0.5 ms.
    assert!(last_mean > Nanos::from_micros(800), "{last_mean:?}");
}

#[test]
fn producer_jitter_keeps_up_to_the_peak_with_delay_growing_near_it() {
    keeps_up_with_growing_delay(Poisson, Uniform);
}

#[test]
fn consumer_jitter_keeps_up_to_the_peak_with_delay_growing_near_it() {
    keeps_up_with_growing_delay(Uniform, Poisson);
}

#[test]
fn dispatcher_jitter_loses_the_flow_at_160k_but_not_at_140k() {
    // 160k: the dispatcher delivers about 155k/s, the queue grows by ~5k every second.
    let short = run(10, Uniform, 160_000, Poisson, Uniform);
    let long = run(20, Uniform, 160_000, Poisson, Uniform);
    assert!(short.max_queued > 20_000, "{short}");
    assert!(
        long.max_queued as f64 > 1.7 * short.max_queued as f64,
        "{short}\n{long}"
    );
    assert!(long.queued_at_end > 50_000, "{long:?}");
    let rate = long.consumed_per_sec();
    assert!((150_000.0..158_000.0).contains(&rate), "{rate}");
    assert!(long.latency.max > Nanos::from_millis(500), "{long}");

    // 140k: bounded, and no longer run makes it worse.
    let short = run(10, Uniform, 140_000, Poisson, Uniform);
    let long = run(40, Uniform, 140_000, Poisson, Uniform);
    for r in [&short, &long] {
        assert!(r.max_queued < 5_000, "{r}");
        assert!(r.latency.max < Nanos::from_millis(50), "{r}");
        assert!(r.consumed as f64 >= 0.999 * r.produced as f64, "{r:?}");
    }
    assert!(
        (long.max_queued as f64) < 1.5 * short.max_queued as f64,
        "{short}\n{long}"
    );
}

#[test]
fn dispatcher_jitter_hurts_far_more_than_producer_or_consumer_jitter() {
    // Picture 4: at 150k, the same jitter costs ~10x more latency in the dispatcher.
    let p = run(10, Poisson, 150_000, Uniform, Uniform);
    let c = run(10, Uniform, 150_000, Uniform, Poisson);
    let d = run(10, Uniform, 150_000, Poisson, Uniform);
    assert!(d.latency.max > p.latency.max.saturating_mul(5), "{p}\n{d}");
    assert!(d.latency.max > c.latency.max.saturating_mul(5), "{c}\n{d}");
}

/// What a Poisson dispatcher delivers when the producer outpaces it, per second.
fn effective_rate(period: Nanos, multiplier: f64) -> f64 {
    let mut config = PdcConfig::new(
        Nanos::from_secs(10),
        (Uniform, 2 * C),
        Poisson,
        (Uniform, C),
    );
    config.period = period;
    config.multiplier = multiplier;
    config
        .run()
        .expect("valid configuration")
        .consumed_per_sec()
}

#[test]
fn the_effective_dispatch_rate_depends_on_the_multiplier_not_the_period() {
    let periods = [250, 500, 2_000].map(Nanos::from_micros);
    let mut previous = 0.0;
    for m in [1.0, 1.5, 3.0] {
        let rates = periods.map(|p| effective_rate(p, m));
        // C * E[min(G, m * period)] / period for G ~ Exp(period): C * (1 - exp(-m)).
        let expected = C as f64 * (1.0 - (-m).exp());
        for r in rates {
            assert!(
                (r / expected - 1.0).abs() < 0.02,
                "m {m}: {rates:?} vs {expected}"
            );
        }
        let spread = rates.iter().cloned().fold(f64::MIN, f64::max)
            - rates.iter().cloned().fold(f64::MAX, f64::min);
        assert!(spread < 0.02 * C as f64, "m {m}: {rates:?}");
        assert!(rates[0] > previous + 0.05 * C as f64, "m {m}: {rates:?}");
        previous = rates[0];
    }
}

#[test]
fn a_seed_replays_byte_for_byte_and_another_seed_differs() {
    let mut config = PdcConfig::new(
        Nanos::from_secs(2),
        (Poisson, 180_000),
        Poisson,
        (ProcessKind::ExpDelay, C),
    );
    config.seed = 42;
    let a = config.run().expect("valid");
    let b = config.run().expect("valid");
    assert_eq!(a, b);
    assert_eq!(a.to_string(), b.to_string());
    config.seed = 43;
    let c = config.run().expect("valid");
    assert_ne!(a.to_string(), c.to_string());
    // Uniform everywhere draws nothing: the seed does not matter.
    let uniform = |seed| {
        let mut c = PdcConfig::new(Nanos::from_secs(1), (Uniform, C), Uniform, (Uniform, C));
        c.seed = seed;
        c.run().expect("valid").to_string()
    };
    assert_eq!(uniform(1), uniform(2));
}

#[test]
fn delay_processes_run_at_about_half_their_nominal_rate() {
    // As the tool defines them: expdelay's mean gap is 2 L, capdelay's (1 + 2m) L / 2.
    let e = run(2, ProcessKind::ExpDelay, 100_000, Uniform, Uniform);
    let c = run(2, ProcessKind::CapDelay, 100_000, Uniform, Uniform);
    for r in [e, c] {
        let per_sec = r.produced as f64 / 2.0;
        assert!((per_sec / 50_000.0 - 1.0).abs() < 0.02, "{per_sec}");
    }
}

#[test]
fn a_configuration_that_can_never_dispatch_is_refused() {
    let mut c = PdcConfig::new(
        Nanos::from_secs(1),
        (Uniform, 10),
        Uniform,
        (Uniform, 1_000_000),
    );
    assert_eq!(c.limit(), Ok(750));
    c.consumer_rate = 1_000;
    assert!(matches!(c.run(), Err(ConfigError::ZeroLimit { .. })));
    c.consumer_rate = 1_000_000;
    c.multiplier = 0.001;
    assert!(matches!(c.run(), Err(ConfigError::ZeroLimit { .. })));
    c.multiplier = f64::NAN;
    assert!(matches!(c.run(), Err(ConfigError::BadMultiplier(_))));
    c.multiplier = 1.5;
    c.producer_rate = 0;
    assert_eq!(c.run(), Err(ConfigError::ZeroRate("producer")));
}

#[test]
fn memory_does_not_grow_with_the_queue() {
    // Two million messages waiting at the end: the report is the only trace of them, and
    // their latencies are still exact (the first and last waited as long as arithmetic says).
    let r = run(10, Uniform, 400_000, Uniform, Uniform);
    assert!(r.queued_at_end > 1_900_000, "{r:?}");
    assert!(
        (199_900.0..=200_000.0).contains(&r.consumed_per_sec()),
        "{r:?}"
    );
    // Message k is produced at k * 2.5 us and consumed at about k * 5 us + 0.5 ms.
    let last = r.consumed - 1;
    let expected = (last * 5_000 + 500_000) - last * 2_500;
    assert!(r.latency.max.as_nanos().abs_diff(expected) <= 5_000, "{r}");
}

#[test]
fn sweep_values_parse_as_lists_and_ranges_and_errors_say_what_is_wrong() {
    let a: Axis = "rate=20000..100000:40000,150000".parse().expect("valid");
    assert_eq!(a, Axis::Rate(vec![20_000, 60_000, 100_000, 150_000]));
    let m: Axis = "multiplier=0.5..1:0.1".parse().expect("valid");
    assert_eq!(m, Axis::Multiplier(vec![0.5, 0.6, 0.7, 0.8, 0.9, 1.0]));
    let p: Axis = "period=250us,500us,2ms".parse().expect("valid");
    assert_eq!(
        p,
        Axis::Period([250, 500, 2_000].map(Nanos::from_micros).to_vec())
    );
    let j: Axis = "jitter=producer,dispatcher".parse().expect("valid");
    assert_eq!(j, Axis::Jitter(vec![Jitter::Producer, Jitter::Dispatcher]));
    for (bad, says) in [
        ("rate", "KEY=VALUES"),
        ("speed=1", "unknown sweep key \"speed\""),
        ("rate=0", "at least 1"),
        ("rate=fast", "\"fast\" is not a whole number"),
        ("rate=10..5:1", "FROM is larger than TO"),
        ("rate=1..5", "FROM..TO:STEP"),
        ("rate=1..5:0", "\"1..5:0\" for rate: must be at least 1"),
        ("multiplier=-1", "not a positive number"),
        ("period=5 parsecs", "invalid duration"),
        ("jitter=everything", "expected none, producer"),
    ] {
        let err = bad.parse::<Axis>().expect_err(bad).to_string();
        assert!(err.contains(says), "{bad}: {err}");
    }
}

#[test]
fn a_sweep_is_a_grid_in_order_and_the_same_for_any_number_of_threads() {
    let base = PdcConfig::new(Nanos::from_millis(200), (Poisson, 1), Uniform, (Uniform, C));
    let sweep = Sweep::new(
        base.clone(),
        vec![
            "jitter=producer,dispatcher".parse().expect("valid"),
            "rate=100000,150000".parse().expect("valid"),
        ],
    )
    .expect("distinct keys");
    let points = sweep.points();
    let summary: Vec<_> = points
        .iter()
        .map(|p| (p.producer, p.dispatcher, p.consumer, p.producer_rate))
        .collect();
    assert_eq!(
        summary,
        [
            (Poisson, Uniform, Uniform, 100_000),
            (Poisson, Uniform, Uniform, 150_000),
            (Uniform, Poisson, Uniform, 100_000),
            (Uniform, Poisson, Uniform, 150_000),
        ]
    );
    let one = sweep.run(1).expect("runs");
    let three = sweep.run(3).expect("runs");
    assert_eq!(sweep.table(&one), sweep.table(&three));
    assert_eq!(sweep::csv(&one), sweep::csv(&three));
    let table = sweep.table(&one);
    assert_eq!(table.lines().count(), 2 + 4, "{table}");
    assert!(
        table
            .lines()
            .nth(4)
            .is_some_and(|l| l.starts_with("dispatcher")),
        "{table}"
    );

    let twice = Sweep::new(
        base,
        vec![
            "rate=1".parse().expect("valid"),
            "rate=2".parse().expect("valid"),
        ],
    );
    assert!(twice.is_err());
}

#[test]
fn stored_and_replayed_production_times_give_the_same_report() {
    // Jittered producer and dispatcher, so that replaying must reproduce random gaps, and a
    // queue that outgrows small rings (and, at 170k/s, grows without bound): storing none,
    // a few or the default number of production times changes only the speed.
    for rate in [150_000, 170_000] {
        let config = PdcConfig {
            seed: 7,
            ..PdcConfig::new(
                Nanos::from_secs(2),
                (Poisson, rate),
                Poisson,
                (Uniform, 200_000),
            )
        };
        let default = config.run().unwrap();
        assert!(default.max_queued > 100, "{default}");
        for stored_times in [0, 1, 3, 100] {
            assert_eq!(
                config.run_storing(stored_times).unwrap(),
                default,
                "{stored_times}"
            );
        }
    }
}

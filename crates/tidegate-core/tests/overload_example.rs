//! The README's first command runs `examples/overload.rs`; this test runs the same code and
//! checks that what it shows stays true: unprotected, the service collapses; behind the
//! default gate, it serves close to its capacity, fast.

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../examples/overload.rs"]
mod overload;

use tidegate_core::config::GateConfig;

fn seconds() -> f64 {
    (overload::DURATION - overload::STEADY_FROM).as_secs_f64()
}

#[test]
fn unprotected_service_collapses() {
    let report = overload::run(None);
    let goodput = report.ok_latencies_ms.len() as f64 / seconds();
    assert!(goodput < 20.0, "goodput {goodput}/s of ~200/s capacity");
    assert!(report.timed_out as f64 > 0.8 * report.offered as f64);
}

#[test]
fn default_gate_keeps_goodput_near_capacity_and_latency_low() {
    let report = overload::run(Some(GateConfig::default().build()));
    let goodput = report.ok_latencies_ms.len() as f64 / seconds();
    assert!(goodput >= 185.0, "goodput {goodput}/s, capacity ~200/s");
    assert_eq!(report.timed_out, 0);
    let p99: f64 = report.percentile(0.99).parse().expect("some successes");
    assert!(p99 < 300.0, "p99 {p99} ms");
    let mean_limit = report
        .limit_samples
        .iter()
        .map(|&l| f64::from(l))
        .sum::<f64>()
        / report.limit_samples.len() as f64;
    assert!(
        (18.0..=30.0).contains(&mean_limit),
        "limit {mean_limit}, optimum 20"
    );
}

#[test]
fn every_protection_runs() {
    for (name, config) in overload::protections() {
        let report = overload::run(Some(config.build()));
        assert!(report.offered > 9_000, "{name}: {} offered", report.offered);
    }
}

//! Every scenario file of `scenarios/` runs, shortened, with all its arms, and shows the shape
//! its document reports where the shortened run is long enough to show it; the same file and
//! seed give byte-identical output. The full-length figures come from
//! `tidegate sim run scenarios/NAME.toml`; each file's comment has its document's figures.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

use std::path::{Path, PathBuf};

use tidegate_core::Nanos;
use tidegate_sim::scenario::Scenario;
use tidegate_sim::scenario::engine::run_all;
use tidegate_sim::scenario::report::{ArmRun, Figures, Report};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

fn load(name: &str) -> Scenario {
    Scenario::load(&scenarios_dir().join(format!("{name}.toml"))).expect("a seed scenario")
}

fn run(name: &str, seconds: u64) -> Report {
    run_all(&load(name).shortened(Nanos::from_secs(seconds)), 2)
}

fn arm<'r>(report: &'r Report, name: &str, load: f64) -> &'r ArmRun {
    report
        .arms
        .iter()
        .find(|a| a.name == name && a.load_rps == load)
        .unwrap_or_else(|| panic!("{}: no arm {name:?} at {load}", report.scenario))
}

fn steady<'r>(report: &'r Report, name: &str, load: f64) -> &'r Figures {
    &arm(report, name, load).steady.figures
}

/// Every offered request has exactly one outcome.
fn assert_reconciles(report: &Report) {
    for a in &report.arms {
        let f = &a.whole.figures;
        assert!(
            f.offered_rps > 0.0,
            "{} {}: nothing offered",
            report.scenario,
            a.name
        );
        let sum = f.goodput_rps / f.offered_rps
            + f.shed_ratio
            + f.expired_ratio
            + f.refused_ratio
            + f.timeout_ratio
            + f.unsent_ratio;
        assert!(
            (sum - 1.0).abs() < 2e-3,
            "{} {}: {f:?}",
            report.scenario,
            a.name
        );
        assert!(!a.series.is_empty());
    }
}

#[test]
fn every_scenario_file_runs_with_all_its_arms() {
    let mut names: Vec<String> = std::fs::read_dir(scenarios_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "capacity-adaptive",
            "capacity-baseline",
            "capacity-fixed",
            "capacity-slow",
            "cinnamon-tiers",
            "kanaloa-negative",
            "kanaloa-positive",
            "rsocket-leases",
        ],
        "a scenario per row of SEED-FIGURES.md"
    );
    for name in &names {
        let mut scenario = load(name).shortened(Nanos::from_secs(10));
        // The sweep's ends only: the shape in between is for the full run.
        if scenario.load.rates.len() > 2 {
            let rates = &scenario.load.rates;
            scenario.load.rates = vec![rates[0], rates[rates.len() - 1]];
        }
        let report = run_all(&scenario, 2);
        assert_eq!(
            report.arms.len(),
            scenario.arms.len() * scenario.load.points().len()
        );
        for a in &scenario.arms {
            assert!(report.arms.iter().any(|r| r.name == a.name));
        }
        assert!(
            scenario.arms.iter().any(|a| a.name == "off")
                && scenario.arms.iter().any(|a| a.name == "tidegate default"),
            "{name}: every scenario compares `off` and `tidegate default`"
        );
        assert_reconciles(&report);
    }
}

#[test]
fn kanaloa_positive_drowns_unprotected_and_default_holds_its_latency() {
    let report = run("kanaloa-positive", 60);
    let off = steady(&report, "off", 250.0);
    assert!(
        off.p50_ms.unwrap() > 5_000.0,
        "latency climbs to seconds: {off:?}"
    );
    let default = steady(&report, "tidegate default", 250.0);
    assert!(default.p99_ms.unwrap() <= 250.0, "{default:?}");
    assert!(default.goodput_rps >= 0.95 * 200.0, "{default:?}");
    // Within 20% of its settled value within 50 unloaded service times (10 s).
    let settle = arm(&report, "tidegate default", 250.0).settle_s;
    assert!(settle.is_some_and(|s| s <= 10.0), "{settle:?}");
}

/// The target at full length with the file's seed: p99 <= 250 ms, >= 95% of capacity, the
/// limit settled within 10 s (50 service times). Two ways this broke while the robustness
/// work went on: reading the demand ramp's throughput as concurrency paying (growth by the
/// headroom then took the limit to 42), and no baseline from the first window at all (the
/// limit settled at 30); each p99 258-278 ms, settled after 27-40 s.
#[test]
fn kanaloa_positive_default_meets_its_target_at_full_length() {
    let mut scenario = load("kanaloa-positive");
    scenario
        .keep_arms(&["tidegate default".to_owned()])
        .unwrap();
    let report = run_all(&scenario, 1);
    let default = steady(&report, "tidegate default", 250.0);
    assert!(default.p99_ms.unwrap() <= 250.0, "{default:?}");
    assert!(default.goodput_rps >= 0.95 * 200.0, "{default:?}");
    let settle = arm(&report, "tidegate default", 250.0).settle_s;
    assert!(settle.is_some_and(|s| s <= 10.0), "{settle:?}");
}

#[test]
fn kanaloa_negative_drowns_unprotected_when_capacity_drops() {
    let report = run("kanaloa-negative", 60);
    let off = steady(&report, "off", 180.0);
    assert!(off.p99_ms.unwrap() > 5_000.0, "{off:?}");
    let default = steady(&report, "tidegate default", 180.0);
    assert!(default.p99_ms.unwrap() < 1_000.0, "{default:?}");
}

/// After the work slows by 46%, the limit must come back to the 20-odd requests the slower
/// service still serves in parallel. On these seeds a baseline that only the windows' majority
/// could re-anchor left the limit at 8-11 for the three minutes of the slowdown (115 ok/s).
#[test]
fn kanaloa_negative_default_re_anchors_on_every_seed() {
    for seed in [3, 5] {
        let mut scenario = load("kanaloa-negative");
        scenario.seed = seed;
        scenario
            .keep_arms(&["tidegate default".to_owned()])
            .unwrap();
        let report = run_all(&scenario, 1);
        let default = steady(&report, "tidegate default", 180.0);
        assert!(default.goodput_rps >= 155.0, "seed {seed}: {default:?}");
    }
}

/// The textbook service a new user tries first: 30 workers, exponential work with a 100 ms
/// mean, an unbounded internal queue, Poisson arrivals, a 1 s client timeout (capacity 300
/// rps). Under a third of capacity nothing may be shed; at 3x it serves what it can.
#[test]
fn the_textbook_exponential_service_is_neither_starved_nor_drowned() {
    let text = r#"
        seed = 7
        duration = "120s"
        warmup = "60s"
        [service]
        kind = "pool"
        spread = "exponential"
        [service.pool]
        workers = 30
        work = "100ms"
        [load]
        arrivals = "poisson"
        timeout = "1s"
        rates = [90, 900]
        [[arms]]
        name = "tidegate default"
    "#;
    let report = run_all(&Scenario::parse(text, "textbook").unwrap(), 2);
    assert_reconciles(&report);
    let light = steady(&report, "tidegate default", 90.0);
    assert_eq!(light.shed_ratio, 0.0, "{light:?}");
    assert!(light.goodput_rps >= 0.99 * light.offered_rps, "{light:?}");
    let heavy = steady(&report, "tidegate default", 900.0);
    assert!(heavy.goodput_rps >= 0.97 * 300.0, "{heavy:?}");
}

#[test]
fn capacity_demo_shapes() {
    let baseline = run("capacity-baseline", 60);
    let off = steady(&baseline, "off", 5.0);
    assert_eq!(off.goodput_rps, 5.0, "{off:?}");
    assert!(off.p99_ms.unwrap() <= 1_050.0, "{off:?}");

    let slow = run("capacity-slow", 60);
    let off = steady(&slow, "off", 5.0);
    assert_eq!(
        off.goodput_rps, 0.0,
        "2 s of work, no proxy: all time out: {off:?}"
    );
    let fixed = steady(&slow, "fixed 5 (demo)", 5.0);
    assert!(
        (2.0..=2.6).contains(&fixed.goodput_rps),
        "the demo's fixed quota gets 2.3 ok/s: {fixed:?}"
    );
}

#[test]
fn cinnamon_no_shedder_dies_above_capacity_and_tiers_are_protected() {
    let mut scenario = load("cinnamon-tiers").shortened(Nanos::from_secs(20));
    scenario
        .load
        .rates
        .retain(|r| [200.0, 3000.0].contains(&r.get()));
    scenario.arms.retain(|a| {
        ["off", "tidegate default", "cinnamon (autotune+pid)"].contains(&a.name.as_str())
    });
    let report = run_all(&scenario, 2);
    for a in report.arms.iter().filter(|a| a.load_rps == 200.0) {
        assert_eq!(
            a.steady.figures.goodput_rps, a.steady.figures.offered_rps,
            "{}",
            a.name
        );
    }
    assert_eq!(steady(&report, "off", 3000.0).goodput_rps, 0.0);
    for name in ["tidegate default", "cinnamon (autotune+pid)"] {
        let run = &arm(&report, name, 3000.0).steady;
        let (tier1, tier5) = (&run.tiers["1"], &run.tiers["5"]);
        assert!(run.figures.goodput_rps > 600.0, "{name}: {run:?}");
        assert!(
            tier1.goodput_rps > 5.0 * tier5.goodput_rps,
            "{name}: {run:?}"
        );
    }
}

/// The targets of `tidegate default` at 3,000 and 4,000 rps (2.3x and 3x the capacity of
/// 1,300): goodput at least 95% of the capacity, tier 5 shed in full while tier 1 loses
/// anything, tier-1 P50 within 1.2x the unloaded P50. 90 s instead of 300: the limit takes
/// about 20 s to grow from 20 to its settled ~85 per instance.
#[test]
fn cinnamon_default_protects_tier_one_first_above_capacity() {
    let mut scenario = load("cinnamon-tiers").shortened(Nanos::from_secs(90));
    scenario
        .load
        .rates
        .retain(|r| [200.0, 3000.0, 4000.0].contains(&r.get()));
    scenario.arms.retain(|a| a.name == "tidegate default");
    let report = run_all(&scenario, 2);
    let unloaded = arm(&report, "tidegate default", 200.0).steady.tiers["1"]
        .p50_ms
        .unwrap();
    for load in [3000.0, 4000.0] {
        let run = &arm(&report, "tidegate default", load).steady;
        let (tier1, tier5) = (&run.tiers["1"], &run.tiers["5"]);
        assert!(run.figures.goodput_rps >= 0.95 * 1300.0, "{load}: {run:?}");
        assert!(
            tier1.shed_ratio + tier1.expired_ratio > 0.0,
            "{load}: more tier 1 than capacity"
        );
        assert_eq!(tier5.goodput_rps, 0.0, "{load}: {run:?}");
        assert!(
            tier1.p50_ms.unwrap() <= 1.2 * unloaded,
            "{load}: {} vs {unloaded}",
            tier1.p50_ms.unwrap()
        );
    }
}

/// The capacity demo's bad release (1 s -> 2 s of work) with the capacity learnt, not known:
/// the default beats the demo's adaptive quota (2.4-2.7 ok/s) and its AIMD arm here, and
/// meets the target of 3.3 ok/s at p99 under 2.5 s at full length with the file's seed and
/// with seed 5, which gave 3.26 while a level that failed its trial was retried after 20
/// windows (3.34-3.40 over seeds 1-5; see docs/algorithms.md, "The default, and why"). Full length:
/// shortened, the 2-s work does not shrink and the re-learning after the change, one
/// judged request at a time below 10, takes most of the steady state (2.9 ok/s at 150 s).
#[test]
fn capacity_adaptive_default_beats_the_demos_adaptive_quota() {
    let report = run_all(&load("capacity-adaptive"), 2);
    let default = steady(&report, "tidegate default", 5.0);
    let demo = steady(&report, "aimd (demo)", 5.0);
    assert!(default.goodput_rps >= 3.3, "{default:?}");
    assert!(
        default.goodput_rps > demo.goodput_rps,
        "{default:?} vs {demo:?}"
    );
    assert!(default.p99_ms.unwrap() < 2_500.0, "{default:?}");
    let mut scenario = load("capacity-adaptive");
    scenario.arms.retain(|a| a.name == "tidegate default");
    scenario.seed = 5;
    let report = run_all(&scenario, 1);
    let default = steady(&report, "tidegate default", 5.0);
    assert!(default.goodput_rps >= 3.3, "seed 5: {default:?}");
    assert!(default.p99_ms.unwrap() < 2_500.0, "seed 5: {default:?}");
}

/// 2 s of work from the start: the target of 3.3 ok/s at p99 under 2.5 s holds at full
/// length with the file's seed and with seed 4, which gave 3.12 before growths and probes
/// at small limits were judged by the throughput they bought (3.38-3.43 over seeds 1-5).
#[test]
fn capacity_slow_default_meets_the_target_on_the_seed_that_missed() {
    for seed in [None, Some(4)] {
        let mut scenario = load("capacity-slow");
        scenario.arms.retain(|a| a.name == "tidegate default");
        if let Some(seed) = seed {
            scenario.seed = seed;
        }
        let report = run_all(&scenario, 2);
        let default = steady(&report, "tidegate default", 5.0);
        assert!(default.goodput_rps >= 3.3, "seed {seed:?}: {default:?}");
        assert!(
            default.p99_ms.unwrap() < 2_500.0,
            "seed {seed:?}: {default:?}"
        );
    }
}

#[test]
fn rsocket_static_leases_trade_acceptance_for_latency() {
    let report = run("rsocket-leases", 30);
    let unbounded = steady(&report, "lease 9999", 1000.0);
    assert!(unbounded.p99_ms.unwrap() > 4_000.0, "{unbounded:?}");
    let lease100 = steady(&report, "lease 100", 1000.0);
    assert_eq!(lease100.goodput_rps, 300.0);
    assert!(lease100.p99_ms.unwrap() <= 20.0, "{lease100:?}");
    let lease30 = steady(&report, "lease 30", 1000.0);
    assert_eq!(lease30.goodput_rps, 90.0);
    assert!(lease30.p99_ms.unwrap() <= 4.0, "{lease30:?}");
}

/// RSocket's servers answer in 2-20 ms by their requests per second: the default beats the
/// lease of 100 (300 accepted at p99 19 ms) with no capacity given, by a limit of about 1
/// per server and no queueing that the service's own latency does not cover (339 ok/s at
/// p99 18.9 ms; retrying 2 per server after 20 windows rather than 80, 342 at 19.1; before
/// the wait bound, 354 at 515 ms). Under the published 19 ms, not only under the target's
/// 20: a real request pays about half a millisecond more (docs/lab.md).
#[test]
fn rsocket_default_beats_the_lease_of_100_at_its_latency() {
    let mut scenario = load("rsocket-leases");
    scenario.arms.retain(|a| a.name == "tidegate default");
    let report = run_all(&scenario, 1);
    let default = steady(&report, "tidegate default", 1000.0);
    assert!(default.goodput_rps > 300.0, "{default:?}");
    assert!(default.p99_ms.unwrap() < 19.0, "{default:?}");
}

fn rendered(report: &Report) -> String {
    format!(
        "{}\n{}\n{}",
        serde_json::to_string(report).unwrap(),
        report.table(),
        report.csv()
    )
}

#[test]
fn the_same_file_and_seed_give_byte_identical_output() {
    let scenario = load("kanaloa-positive").shortened(Nanos::from_secs(20));
    let one_thread = rendered(&run_all(&scenario, 1));
    let three_threads = rendered(&run_all(&scenario, 3));
    assert_eq!(one_thread, three_threads);
    let mut other = scenario.clone();
    other.seed += 1;
    assert_ne!(one_thread, rendered(&run_all(&other, 2)));
}

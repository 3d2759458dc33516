//! The replay's fit against a real log: `tests/fixtures/nginx-access.log` is nginx's access
//! log (log_format tidegate) of `tidegate origin` (20 workers, 100 ms of work, a queue of 20)
//! driven by `tidegate load` at three rates, and `nginx-access.runs.csv` what the clients
//! really got at each; both written by `docs/experiments/replay-fixture.sh`. The model fitted
//! on the log alone must predict each run's goodput within 10%.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

use std::path::{Path, PathBuf};

use tidegate_core::Nanos;
use tidegate_model::client::LoadConfig;
use tidegate_sim::replay::{self, Fit, LogFormat, ReplayConfig};
use tidegate_sim::scenario::Scenario;
use tidegate_sim::scenario::engine::run_all;

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn log() -> replay::Log {
    let text = std::fs::read(fixture("nginx-access.log")).unwrap();
    replay::parse_log(LogFormat::Nginx, text.as_slice()).unwrap()
}

/// A real run of the fixture script: its clients, and the goodput they got.
#[derive(Debug)]
struct RealRun {
    offered: f64,
    duration_s: f64,
    timeout_s: f64,
    goodput_rps: f64,
}

fn real_runs() -> Vec<RealRun> {
    let text = std::fs::read_to_string(fixture("nginx-access.runs.csv")).unwrap();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("rate_rps,duration_s,timeout_s,offered,ok,goodput_rps")
    );
    lines
        .map(|line| {
            let f: Vec<f64> = line.split(',').map(|v| v.parse().unwrap()).collect();
            RealRun {
                duration_s: f[1],
                timeout_s: f[2],
                offered: f[3],
                goodput_rps: f[5],
            }
        })
        .collect()
}

/// The fitted service's goodput, with no protection, under Poisson clients at the real run's
/// rate (as sent), for its duration, with its timeout.
fn predicted_goodput(fit: &Fit, run: &RealRun) -> f64 {
    let load: LoadConfig = toml::from_str(&format!(
        "rate = {}\ntimeout = \"{}ms\"\n",
        run.offered / run.duration_s,
        run.timeout_s * 1e3
    ))
    .unwrap();
    load.validate().unwrap();
    let arms = replay::run::arms(fit.knee).unwrap();
    let scenario = Scenario {
        name: "fixture".to_owned(),
        seed: 1,
        duration: Nanos::from_secs_f64(run.duration_s),
        warmup: Nanos::ZERO,
        overload_at: None,
        service: fit.service.clone(),
        load,
        arms: arms.into_iter().filter(|a| a.name == "off").collect(),
    };
    scenario.validate().unwrap();
    run_all(&scenario, 1).arms[0].whole.figures.goodput_rps
}

#[test]
fn the_fit_finds_the_origin_it_was_recorded_on() {
    let log = log();
    assert_eq!(log.bad_count, 0);
    let fit = replay::fit(&log.entries).unwrap();
    assert!(fit.knee_seen);
    assert!((18..=22).contains(&fit.knee), "{fit:#?}");
    assert!((90.0..110.0).contains(&fit.work_ms), "{fit:#?}");
    assert!(
        fit.queue.is_some_and(|q| (16..=24).contains(&q)),
        "{fit:#?}"
    );
}

#[test]
fn the_fitted_model_predicts_the_real_goodput_within_ten_percent() {
    let fit = replay::fit(&log().entries).unwrap();
    let runs = real_runs();
    assert_eq!(runs.len(), 3);
    for run in &runs {
        let predicted = predicted_goodput(&fit, run);
        let error = (predicted - run.goodput_rps).abs() / run.goodput_rps;
        assert!(
            error <= 0.10,
            "{run:?}: predicted {predicted:.1} rps, {:.1}% off",
            error * 100.0
        );
    }
}

#[test]
fn replaying_the_log_as_recorded_serves_what_the_origin_served() {
    let log = log();
    let fit = replay::fit(&log.entries).unwrap();
    let config = ReplayConfig {
        multiples: vec![1.0],
        timeout: Some(Nanos::from_secs(1)),
        seed: 1,
        arms: vec!["off".to_owned()],
        jobs: 1,
    };
    let runs = replay::replay(&log.entries, &fit, &config).unwrap();
    let whole = &runs[0].report.arms[0].whole.figures;
    let served = whole.goodput_rps * runs[0].duration_s;
    let error = (served - fit.served as f64).abs() / fit.served as f64;
    assert!(
        error <= 0.10,
        "{served:.0} served in the replay, {} in the log",
        fit.served
    );
}

//! The log's arrivals, scaled, through every arm against the fitted service.
//!
//! A load multiple `m` divides every arrival's offset from the log's first request by `m`:
//! the same requests in the same order, `m` times as dense, over `1/m` of the log's span
//! (bursts get `m` times shorter too). Compressing, rather than overlaying shifted copies of
//! the log, keeps each arrival a request of the log and its pattern of gaps, whatever `m`
//! (2.5x as well as 2x).

use serde::{Deserialize, Serialize};
use tidegate_core::Nanos;
use tidegate_model::client::LoadConfig;

use super::fit::Fit;
use super::parse::Entry;
use crate::scenario::engine::run_all;
use crate::scenario::report::Report;
use crate::scenario::{ArmConfig, Scenario, SelectionError};

/// What to replay, and how.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplayConfig {
    /// Load multiples: 1.0 is the log as recorded.
    pub multiples: Vec<f64>,
    /// How long each client waits; `None`: [`default_timeout`].
    pub timeout: Option<Nanos>,
    /// Seed of the work-time draws.
    pub seed: u64,
    /// Only the arms of these names; none: all of [`arms`].
    pub arms: Vec<String>,
    /// Threads for the runs.
    pub jobs: usize,
}

/// One load multiple: every arm's run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LoadRun {
    pub multiple: f64,
    /// The replay's span: the log's, divided by the multiple.
    pub duration_s: f64,
    pub requests: usize,
    pub report: Report,
}

/// Why a replay could not run.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("--load {0}: a load multiple must be a positive number, e.g. 1x, 2.5x")]
    Multiple(f64),
    #[error("the arms of the replay do not parse (a bug): {0}")]
    Arms(#[from] toml::de::Error),
    #[error("--{0}")]
    Selection(#[from] SelectionError),
    #[error("the replay's scenario is invalid: {0}")]
    Scenario(#[from] tidegate_model::ConfigError),
}

/// Without `--timeout`: ten times the log's median request, at least a millisecond: clients
/// patient enough never to give up on a healthy service, impatient enough to leave a
/// collapsed one.
pub fn default_timeout(fit: &Fit) -> Nanos {
    Nanos::from_secs_f64((fit.median_duration_ms * 10.0 / 1e3).max(1e-3))
}

/// The arms compared: no protection, a fixed limit at the fitted knee (what an operator who
/// read the fit would set), the scenario files' adaptive arms, and `tidegate default`.
pub fn arms(knee: u32) -> Result<Vec<ArmConfig>, ReplayError> {
    #[derive(Deserialize)]
    struct Arms {
        arms: Vec<ArmConfig>,
    }
    let doc = format!(
        r#"
[[arms]]
name = "off"
kind = "off"

[[arms]]
name = "fixed {knee}"
limit = {{ algorithm = "fixed", fixed = {{ limit = {knee} }} }}
regulator = {{ algorithm = "off" }}
queue = {{ capacity = 0 }}

[[arms]]
name = "aimd"
limit = {{ algorithm = "aimd" }}
regulator = {{ algorithm = "off" }}
queue = {{ capacity = 0 }}

[[arms]]
name = "vegas + pie"
limit = {{ algorithm = "vegas" }}

[[arms]]
name = "gradient2 + pie"
limit = {{ algorithm = "gradient2" }}

[[arms]]
name = "hillclimb + pie"
limit = {{ algorithm = "hill_climb" }}

[[arms]]
name = "bdp + pie"
limit = {{ algorithm = "bdp" }}

[[arms]]
name = "autotune + pid"
regulator = {{ algorithm = "pid" }}

[[arms]]
name = "tidegate default"
"#
    );
    Ok(toml::from_str::<Arms>(&doc)?.arms)
}

/// The arrivals of the log (its requests' starts, in order), from its first, divided by
/// `multiple`.
pub fn arrival_times(entries: &[Entry], multiple: f64) -> Vec<Nanos> {
    let mut starts: Vec<f64> = entries.iter().map(|e| e.start).collect();
    starts.sort_by(f64::total_cmp);
    let first = starts.first().copied().unwrap_or(0.0);
    starts
        .iter()
        .map(|&s| Nanos::from_secs_f64((s - first) / multiple))
        .collect()
}

/// The scenario of one load multiple: the fitted service, the scaled arrivals, the arms.
pub fn scenario(
    fit: &Fit,
    times: Vec<Nanos>,
    timeout: Nanos,
    seed: u64,
    arms: Vec<ArmConfig>,
    name: String,
) -> Result<Scenario, ReplayError> {
    // Clients send until just after the last arrival; the run goes on until every request
    // has an outcome.
    let duration = times.last().copied().unwrap_or(Nanos::ZERO) + Nanos::from_millis(1);
    let scenario = Scenario {
        name,
        seed,
        duration,
        warmup: Nanos::ZERO,
        overload_at: None,
        service: fit.service.clone(),
        load: LoadConfig::trace(times, timeout),
        arms,
        series_step: None,
    };
    scenario.validate()?;
    Ok(scenario)
}

/// Replays the log at each multiple through every arm.
pub fn replay(
    entries: &[Entry],
    fit: &Fit,
    config: &ReplayConfig,
) -> Result<Vec<LoadRun>, ReplayError> {
    let timeout = config.timeout.unwrap_or_else(|| default_timeout(fit));
    let mut runs = Vec::with_capacity(config.multiples.len());
    for &multiple in &config.multiples {
        if !(multiple.is_finite() && multiple > 0.0) {
            return Err(ReplayError::Multiple(multiple));
        }
        let times = arrival_times(entries, multiple);
        let requests = times.len();
        let mut scenario = scenario(
            fit,
            times,
            timeout,
            config.seed,
            arms(fit.knee)?,
            format!("replay {multiple}x"),
        )?;
        scenario.keep_arms(&config.arms)?;
        runs.push(LoadRun {
            multiple,
            duration_s: scenario.duration.as_secs_f64(),
            requests,
            report: run_all(&scenario, config.jobs),
        });
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replay::fit::fit;

    fn entry(start: f64, duration: f64) -> Entry {
        Entry {
            line: 0,
            start,
            duration,
            upstream: Some(duration),
            status: 200,
        }
    }

    /// A request every 10 ms for 10 s, each 50 ms long: 5 in flight, far from any knee.
    fn steady_log() -> Vec<Entry> {
        (0..1000)
            .map(|i| entry(1.7e9 + f64::from(i) * 0.01, 0.05))
            .collect()
    }

    #[test]
    fn a_multiple_divides_the_gaps_from_the_first_arrival_in_order() {
        let entries = [
            entry(10.0, 0.1),
            entry(10.5, 0.1),
            entry(11.0, 0.1),
            entry(10.2, 0.1),
        ];
        let ms: Vec<u64> = arrival_times(&entries, 2.0)
            .iter()
            .map(|t| t.as_nanos() / 1_000_000)
            .collect();
        assert_eq!(ms, [0, 100, 250, 500]);
    }

    #[test]
    fn the_default_timeout_is_ten_median_requests() {
        let fit = fit(&steady_log()).unwrap();
        assert_eq!(default_timeout(&fit), Nanos::from_millis(500));
    }

    #[test]
    fn every_arm_serves_the_log_as_recorded_and_a_multiple_compresses_it() {
        let entries = steady_log();
        let fit = fit(&entries).unwrap();
        let config = ReplayConfig {
            multiples: vec![1.0, 2.0],
            timeout: None,
            seed: 1,
            arms: Vec::new(),
            jobs: 2,
        };
        let runs = replay(&entries, &fit, &config).unwrap();
        assert_eq!(runs.len(), 2);
        assert!(
            (runs[1].duration_s - 5.0).abs() < 0.01,
            "{}",
            runs[1].duration_s
        );
        for run in &runs {
            assert_eq!(run.report.arms.len(), 9);
            for arm in &run.report.arms {
                let f = &arm.whole.figures;
                let offered = 100.0 * run.multiple;
                assert!((f.offered_rps - offered).abs() < 1.0, "{}: {f:?}", arm.name);
                // At 2x, the log's highest concurrency (the fitted pool, as the log shows no
                // knee) is not enough: only the log as recorded must be served in full.
                if run.multiple == 1.0 {
                    assert!(f.goodput_rps >= 0.99 * f.offered_rps, "{}: {f:?}", arm.name);
                }
            }
        }
    }

    #[test]
    fn a_multiple_must_be_positive() {
        let entries = steady_log();
        let fit = fit(&entries).unwrap();
        let config = ReplayConfig {
            multiples: vec![0.0],
            timeout: None,
            seed: 1,
            arms: Vec::new(),
            jobs: 1,
        };
        assert!(matches!(
            replay(&entries, &fit, &config),
            Err(ReplayError::Multiple(_))
        ));
    }
}

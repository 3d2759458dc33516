//! Replay of a user's own traffic: `tidegate sim replay ACCESS_LOG`, the check to run before
//! trusting the default on a service.
//!
//! - [`parse`]: the access log's lines (nginx `combined` with the request's timings, Envoy's
//!   default format), bad lines counted and reported by number;
//! - [`mod@fit`]: a worker pool fitted to the log's latency by concurrency;
//! - [`run`]: the log's arrivals, scaled by load multiples, through every arm against the
//!   fitted service, on the scenario engine;
//! - [`Replay`]: all of it, as a report (text or JSON).
//!
//! docs/replay.md explains the formats, the fit and the output.

mod clock;
pub mod fit;
pub mod parse;
pub mod run;
mod text;

use serde::Serialize;

pub use fit::{Fit, FitError, fit};
pub use parse::{Entry, Log, LogError, LogFormat, parse_log};
pub use run::{LoadRun, ReplayConfig, ReplayError, replay};

/// A line of the log that did not parse, for the report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BadLine {
    pub line: usize,
    pub error: String,
}

/// What was read of the log.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LogSummary {
    /// Non-blank lines.
    pub lines: usize,
    pub requests: usize,
    /// The first few lines that did not parse.
    pub bad_lines: Vec<BadLine>,
    /// All lines that did not parse.
    pub bad_count: usize,
}

impl From<&Log> for LogSummary {
    fn from(log: &Log) -> LogSummary {
        LogSummary {
            lines: log.lines,
            requests: log.entries.len(),
            bad_lines: log
                .bad
                .iter()
                .map(|b| BadLine {
                    line: b.line,
                    error: b.error.to_string(),
                })
                .collect(),
            bad_count: log.bad_count,
        }
    }
}

/// The `--json` document of a replay.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Replay {
    pub log: LogSummary,
    pub fit: Fit,
    /// The clients' timeout used.
    pub timeout_ms: f64,
    /// Whether it is the default (ten times the log's median request).
    pub timeout_default: bool,
    pub loads: Vec<LoadRun>,
}

impl Replay {
    /// Fits the log and replays it.
    pub fn new(log: &Log, config: &ReplayConfig) -> Result<Replay, ReplayRunError> {
        let fit = fit(&log.entries)?;
        let timeout = config.timeout.unwrap_or_else(|| run::default_timeout(&fit));
        let loads = replay(&log.entries, &fit, config)?;
        Ok(Replay {
            log: LogSummary::from(log),
            fit,
            timeout_ms: timeout.as_secs_f64() * 1e3,
            timeout_default: config.timeout.is_none(),
            loads,
        })
    }
}

/// Why a parsed log could not be replayed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayRunError {
    #[error(transparent)]
    Fit(#[from] FitError),
    #[error(transparent)]
    Replay(#[from] ReplayError),
}

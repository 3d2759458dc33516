//! Scenario files: one overload experiment, its service, its load and the protections
//! (arms) to compare on it, as a TOML document (`scenarios/*.toml`).
//!
//! ```toml
//! seed = 2016
//! duration = "120s"
//! warmup = "60s"          # steady-state figures are taken after this
//! overload_at = "30s"     # optional: when the overload starts, for the settling time
//!
//! [service]               # tidegate_model::service::ServiceConfig
//! kind = "pool"
//! [service.pool]
//! workers = 20
//! work = "100ms"
//!
//! [load]                  # tidegate_model::client::LoadConfig
//! rate = 250
//! timeout = "2s"
//!
//! [[arms]]
//! name = "off"
//! kind = "off"            # no gate
//! [[arms]]
//! name = "aimd"
//! limit = { algorithm = "aimd" }
//! [[arms]]
//! name = "tidegate default"   # a gate with every table left out is GateConfig::default()
//! ```
//!
//! A gate arm reuses the core's configuration types (`limit`, `regulator`, `queue`, each a
//! [`tidegate_core::config`] table); `kind = "static_lease"` with `lease = { allowed, ttl }`
//! is an RSocket responder's static lease on each instance, with no gate. Every table rejects
//! unknown keys, and parse errors name the key and its line; checks across keys name the key.

mod charts;
pub mod engine;
mod page;
pub mod report;

pub use charts::NamedChart;
pub use page::header_comment;

use std::path::Path;

use serde::{Deserialize, Serialize};
use tidegate_core::config::{GateConfig, LimitConfig, RegulatorConfig};
use tidegate_core::gate::QueueConfig;
use tidegate_core::{Nanos, Time};
use tidegate_model::client::LoadConfig;
use tidegate_model::lease::StaticLeaseConfig;
use tidegate_model::service::ServiceConfig;
use tidegate_model::{ConfigError, NonNegative};

/// A whole scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    /// Defaults to the file's stem.
    #[serde(default)]
    pub name: String,
    /// Seed of every random stream; `--seed` overrides it. Default 1.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Time during which clients send requests; the run then continues until every request
    /// has an outcome.
    pub duration: Nanos,
    /// Steady-state figures count the requests sent from `warmup` to `duration`.
    pub warmup: Nanos,
    /// When the overload starts, if it does: the report gives how long the limit took to
    /// settle after it.
    pub overload_at: Option<Nanos>,
    pub service: ServiceConfig,
    pub load: LoadConfig,
    pub arms: Vec<ArmConfig>,
    /// The span of each entry of the per-second series (and so the resolution of the
    /// settling time): a second unless set in code, by the generated cases of the robustness
    /// sweep, whose runs last a few hundred work times of 1 ms to 2 s.
    #[serde(skip)]
    pub series_step: Option<Nanos>,
}

fn default_seed() -> u64 {
    1
}

/// What an arm puts between the clients and the service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArmKind {
    /// A tidegate gate on each instance.
    #[default]
    Gate,
    /// Nothing: the clients hit the service directly.
    Off,
    /// An RSocket responder's static lease on each instance (`lease`).
    StaticLease,
}

/// One protection compared in a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmConfig {
    pub name: String,
    #[serde(default)]
    pub kind: ArmKind,
    pub limit: Option<LimitConfig>,
    pub regulator: Option<RegulatorConfig>,
    pub queue: Option<QueueConfig>,
    pub lease: Option<StaticLeaseConfig>,
}

impl ArmConfig {
    /// The gate of a gate arm: the tables given, defaults for the others.
    pub fn gate_config(&self) -> GateConfig {
        GateConfig {
            limit: self.limit.clone().unwrap_or_default(),
            regulator: self.regulator.clone().unwrap_or_default(),
            queue: self.queue.clone().unwrap_or_default(),
        }
    }
}

/// Why a scenario could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Parse {
        path: String,
        source: Box<toml::de::Error>,
    },
    #[error("{path}: {source}")]
    Invalid { path: String, source: ConfigError },
}

/// A selection names an arm or a load point the scenario does not have.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectionError {
    #[error("arm {name:?}: {scenario} has no such arm (its arms: {arms})")]
    UnknownArm {
        name: String,
        scenario: String,
        /// The scenario's arms, comma-separated.
        arms: String,
    },
    #[error("load {rate}: {scenario} has no such load point (its points: {points:?})")]
    UnknownLoad {
        rate: f64,
        scenario: String,
        points: Vec<f64>,
    },
}

/// A scenario document (a scenario file, a fleet scenario file): it is named after its file
/// when it names itself not, and checked for what the parser cannot see.
pub(crate) trait Document: serde::de::DeserializeOwned {
    fn name_mut(&mut self) -> &mut String;
    fn check(&self) -> Result<(), ConfigError>;
}

/// Reads, parses and checks the document at `path`; errors name the path.
pub(crate) fn load_document<T: Document>(path: &Path) -> Result<T, ScenarioError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
        path: shown.clone(),
        source,
    })?;
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    parse_document(&text, &stem, &shown)
}

/// Parses and checks a document; `name` is used when it has none, `shown` in errors.
fn parse_document<T: Document>(text: &str, name: &str, shown: &str) -> Result<T, ScenarioError> {
    let mut document: T = toml::from_str(text).map_err(|source| ScenarioError::Parse {
        path: shown.to_owned(),
        source: Box::new(source),
    })?;
    if document.name_mut().is_empty() {
        *document.name_mut() = name.to_owned();
    }
    document.check().map_err(|source| ScenarioError::Invalid {
        path: shown.to_owned(),
        source,
    })?;
    Ok(document)
}

impl Document for Scenario {
    fn name_mut(&mut self) -> &mut String {
        &mut self.name
    }

    fn check(&self) -> Result<(), ConfigError> {
        self.validate()
    }
}

impl Scenario {
    /// Reads and checks a scenario file.
    pub fn load(path: &Path) -> Result<Scenario, ScenarioError> {
        load_document(path)
    }

    /// Parses and checks a scenario document; `name` is used when the document has none.
    pub fn parse(text: &str, name: &str) -> Result<Scenario, ScenarioError> {
        parse_document(text, name, name)
    }

    /// Checks what the parser cannot: relations between keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.duration.is_zero() {
            return Err(ConfigError::new("duration", "must be longer than zero"));
        }
        if self.warmup >= self.duration {
            return Err(ConfigError::new(
                "warmup",
                format!(
                    "must be shorter than the duration ({}) to leave a steady state",
                    self.duration
                ),
            ));
        }
        if self.overload_at.is_some_and(|at| at >= self.duration) {
            return Err(ConfigError::new(
                "overload_at",
                "must be within the duration",
            ));
        }
        self.service.validate()?;
        self.load.validate()?;
        if self.arms.is_empty() {
            return Err(ConfigError::new(
                "arms",
                "a scenario needs at least one arm",
            ));
        }
        for (i, arm) in self.arms.iter().enumerate() {
            let key = |k: &str| format!("arms[{i}] ({}).{k}", arm.name);
            if self.arms[..i].iter().any(|a| a.name == arm.name) {
                return Err(ConfigError::new(key("name"), "two arms have this name"));
            }
            let gate_tables = [
                (arm.limit.is_some(), "limit"),
                (arm.regulator.is_some(), "regulator"),
                (arm.queue.is_some(), "queue"),
            ];
            if arm.kind != ArmKind::Gate
                && let Some((_, table)) = gate_tables.iter().find(|(given, _)| *given)
            {
                return Err(ConfigError::new(
                    key(table),
                    "only a gate arm (kind = \"gate\") has a gate to configure",
                ));
            }
            match (arm.kind, &arm.lease) {
                (ArmKind::StaticLease, None) => {
                    return Err(ConfigError::new(
                        key("lease"),
                        "a static lease arm needs `lease = { allowed = N, ttl = \"1s\" }`",
                    ));
                }
                (ArmKind::Gate | ArmKind::Off, Some(_)) => {
                    return Err(ConfigError::new(
                        key("lease"),
                        "only a static lease arm (kind = \"static_lease\") has a lease",
                    ));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// The same scenario compressed in time to last `duration`: the warm-up, the overload
    /// start, the load phases and the capacity changes scale with it; the service's and the
    /// clients' own times (work, timeouts) do not. For tests and quick looks.
    pub fn shortened(&self, duration: Nanos) -> Scenario {
        let factor = duration.as_secs_f64() / self.duration.as_secs_f64();
        let scale = |d: Nanos| d.mul_f64(factor);
        let mut s = self.clone();
        s.duration = duration;
        s.warmup = scale(s.warmup);
        s.overload_at = s.overload_at.map(scale);
        for phase in &mut s.load.phases {
            phase.duration = scale(phase.duration);
        }
        for change in &mut s.service.changes {
            change.at = scale(change.at);
        }
        s
    }

    /// Keeps only the arms called `names`, in the file's order; none named keeps them all.
    pub fn keep_arms(&mut self, names: &[String]) -> Result<(), SelectionError> {
        if names.is_empty() {
            return Ok(());
        }
        if let Some(unknown) = names
            .iter()
            .find(|name| !self.arms.iter().any(|a| &a.name == *name))
        {
            let arms: Vec<&str> = self.arms.iter().map(|a| a.name.as_str()).collect();
            return Err(SelectionError::UnknownArm {
                name: unknown.clone(),
                scenario: self.name.clone(),
                arms: arms.join(", "),
            });
        }
        self.arms.retain(|a| names.contains(&a.name));
        Ok(())
    }

    /// Keeps only the load points `rates` of a sweep, in the order given; none given keeps
    /// them all.
    pub fn keep_loads(&mut self, rates: &[f64]) -> Result<(), SelectionError> {
        if rates.is_empty() {
            return Ok(());
        }
        let points: Vec<f64> = self.load.rates.iter().map(|r| r.get()).collect();
        if let Some(&missing) = rates.iter().find(|l| !points.contains(l)) {
            return Err(SelectionError::UnknownLoad {
                rate: missing,
                scenario: self.name.clone(),
                points,
            });
        }
        self.load.rates = rates.iter().filter_map(|&l| NonNegative::new(l)).collect();
        Ok(())
    }

    pub(crate) fn series_step(&self) -> Nanos {
        self.series_step
            .filter(|step| !step.is_zero())
            .unwrap_or(Nanos::from_secs(1))
    }

    pub(crate) fn end(&self) -> Time {
        Time::ZERO + self.duration
    }
}

#[cfg(test)]
mod tests;

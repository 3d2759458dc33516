//! Fleet scenarios: a call chain of hops, each several proxies (each with its own gate) in
//! front of several instances, clients that retry, and the features of issue 15 switched on
//! and off per arm, as a TOML document (`scenarios/fleet/*.toml`).
//!
//! ```toml
//! seed = 15
//! duration = "60s"
//! measure_from = "25s"     # the overload figures count requests sent from here on
//!
//! [load]
//! rate = 3000              # original requests a second, Poisson
//! timeout = "1s"           # each attempt's
//! users = 5000             # caller keys, each with a fixed tier
//! tiers = [{ tier = 1, weight = 0.2 }, { tier = 4, weight = 0.8 }]
//!
//! [[hops]]                 # tidegate_model::fleet::HopConfig
//! proxies = 3
//! instances = 3
//! workers = 8
//! work = "2ms"
//! calls = 2                # calls to the next hop per request
//! [[hops]]
//! proxies = 3
//! instances = 3
//! work = "1ms"
//! slowdown = { at = "20s", factor = 2 }
//!
//! [[arms]]
//! name = "tidegate"        # every feature on: the defaults
//! retry = { mode = "retry_after", budget = true }
//! [[arms]]
//! name = "no feedback"
//! feedback = false
//! ```
//!
//! An arm's gate is `GateConfig` from the `limit`, `regulator` and `queue` tables (defaults
//! for those left out), or none with `gate = false`. The features: `shared_salt` (every edge
//! proxy maps caller keys to cohorts with the same salt), `priority_travels` (hops after the
//! first rank a request by the priority the first computed; otherwise by the default
//! priority), `feedback` (the `tidegate-cutoff` header: callers drop what the callee refuses),
//! `peers` (the `tidegate-peer` header: a hop's proxies hold their limits toward each other's,
//! the edge's their drop ratios too), `hint_holds_for_chain` (the hint the edge admitted a
//! chain under holds for every call of the chain, not the later ones),
//! `hint_reopens` (off by default: the edge's hint loosens by at most so many ranks a
//! second), `hint_starving` (off by default: a gate's header also holds back the ranks
//! waiting in its queue that long),
//! `client_throttle` (the clients' adaptive throttle) and `retry` (the clients' retries).

mod engine;
mod metrics;
mod page;
#[cfg(test)]
mod tests;

pub use engine::run;
pub use metrics::{ArmResult, ByRefusal, Refusal, Second};
pub use page::{charts, markdown, table};

use std::path::Path;

use serde::{Deserialize, Serialize};
use tidegate_core::Nanos;
use tidegate_core::config::{GateConfig, LimitConfig, RegulatorConfig};
use tidegate_core::gate::QueueConfig;
use tidegate_core::outbound::ThrottleConfig;
use tidegate_model::client::TierShare;
use tidegate_model::fleet::{ClientRetry, HopConfig, validate_hops};
use tidegate_model::{ConfigError, NonNegative};

use crate::scenario::{Document, ScenarioError, load_document};

pub(crate) use tidegate_core::fast_hash::FastMap;

/// A whole fleet scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetScenario {
    /// Defaults to the file's stem.
    #[serde(default)]
    pub name: String,
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Time during which clients send requests; the run continues until all have ended.
    pub duration: Nanos,
    /// The overload figures count the requests sent from here to `duration`.
    pub measure_from: Nanos,
    /// The salt of the caller-key hash that the edge proxies share. Default 0.
    #[serde(default)]
    pub salt: u64,
    pub load: FleetLoad,
    pub hops: Vec<HopConfig>,
    pub arms: Vec<FleetArm>,
}

fn default_seed() -> u64 {
    1
}

/// The clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetLoad {
    /// Original requests a second (Poisson arrivals), retries not included.
    pub rate: NonNegative,
    /// How long a client waits for each attempt.
    pub timeout: Nanos,
    /// Distinct caller keys; each has a fixed tier, drawn from `tiers` by its hash.
    pub users: u32,
    pub tiers: Vec<TierShare>,
}

fn yes() -> bool {
    true
}

/// One combination of features compared in a scenario.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FleetArm {
    pub name: String,
    /// A gate on every proxy. Default true.
    #[serde(default = "yes")]
    pub gate: bool,
    pub limit: Option<LimitConfig>,
    pub regulator: Option<RegulatorConfig>,
    pub queue: Option<QueueConfig>,
    /// Every edge proxy hashes caller keys with the scenario's salt; otherwise each its own.
    #[serde(default = "yes")]
    pub shared_salt: bool,
    /// Later hops rank a request by the priority the edge computed (`tidegate-priority`);
    /// otherwise by the default priority.
    #[serde(default = "yes")]
    pub priority_travels: bool,
    /// Gates say their cut-off on responses, callers drop what it refuses. Default true.
    #[serde(default = "yes")]
    pub feedback: bool,
    /// The proxies of each hop tell each other their limits, and the edge proxies their
    /// drop ratios, through the instances they share (`tidegate-peer`, `docs/peers.md`).
    /// Default true.
    #[serde(default = "yes")]
    pub peers: bool,
    /// With `feedback`: the edge proxy stamps each request it admits with the hint it
    /// admitted it under (`under=` in `tidegate-priority`; 767 when it held none), the stamp
    /// travels with the priority, and no later caller or proxy drops a call of that chain on
    /// a hint that the stamp admits (`Feedback::refuses_in_chain`): the hints hold back new
    /// chains, and the callee's own gate decides about the started ones. The proxy's
    /// `feedback.hold_for_chain`. Default true, as the proxy's: it spares the work of the
    /// chains whose last hop sheds and costs those whose edge sheds for itself nothing
    /// measurable (docs/feedback.md, "What the three rules cost").
    #[serde(default = "yes")]
    pub hint_holds_for_chain: bool,
    /// With `feedback`: when an edge proxy's hint for the hops behind loosens (a deeper one
    /// lapsed, or a looser one came), the rank it admits up to rises toward it by at most
    /// this many ranks a second (`Feedback::reopening`; 0: at once). The callees' cut-offs
    /// relax as their queues empty; edge proxies that sent the whole band again at once sent
    /// a surge that deepened them again, past chains just admitted. The proxy's
    /// `feedback.reopen_rate`. Default none (the hint at once).
    #[serde(default)]
    pub hint_reopens: Option<NonNegative>,
    /// With `feedback`: a cutting gate's header also holds back every rank from the most
    /// important one with a call waiting in its queue this long (`Gate::told_cutoff_with`).
    /// A priority queue that never empties starves its least important admitted rank, whose
    /// calls expire at the queue's timeout after the header said they were admitted. The
    /// proxy's `queue.hold_back_starving`, which waits half the queue's timeout. Default
    /// none.
    #[serde(default)]
    pub hint_starving: Option<Nanos>,
    /// The clients throttle adaptively (Google SRE, K = 2). Default false.
    #[serde(default)]
    pub client_throttle: bool,
    #[serde(default)]
    pub retry: ClientRetry,
}

impl FleetArm {
    /// The gate of every proxy, if the arm has gates.
    pub fn gate_config(&self) -> Option<GateConfig> {
        self.gate.then(|| GateConfig {
            limit: self.limit.clone().unwrap_or_default(),
            regulator: self.regulator.clone().unwrap_or_default(),
            queue: self.queue.clone().unwrap_or_default(),
        })
    }

    pub(crate) fn throttle(&self) -> Option<ThrottleConfig> {
        self.client_throttle.then(ThrottleConfig::default)
    }
}

impl Document for FleetScenario {
    fn name_mut(&mut self) -> &mut String {
        &mut self.name
    }

    fn check(&self) -> Result<(), ConfigError> {
        self.validate()
    }
}

impl FleetScenario {
    /// Reads and checks a fleet scenario file.
    pub fn load(path: &Path) -> Result<FleetScenario, ScenarioError> {
        load_document(path)
    }

    /// Checks what the parser cannot: relations between keys.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.duration.is_zero() {
            return Err(ConfigError::new("duration", "must be longer than zero"));
        }
        if self.measure_from >= self.duration {
            return Err(ConfigError::new(
                "measure_from",
                "must be before the end of `duration`",
            ));
        }
        if self.load.timeout.is_zero() {
            return Err(ConfigError::new("load.timeout", "must be longer than zero"));
        }
        if self.load.users == 0 {
            return Err(ConfigError::new("load.users", "needs at least one user"));
        }
        if self.load.tiers.iter().all(|t| t.weight.get() == 0.0) {
            return Err(ConfigError::new(
                "load.tiers",
                "needs at least one tier with a positive weight",
            ));
        }
        if let Some(i) = self.load.tiers.iter().position(|t| t.tier > 5) {
            return Err(ConfigError::new(
                format!("load.tiers[{i}].tier"),
                "a tier is 0 (most important) to 5",
            ));
        }
        validate_hops(&self.hops)?;
        if self.arms.is_empty() {
            return Err(ConfigError::new("arms", "needs at least one arm"));
        }
        if let Some(i) = self
            .arms
            .iter()
            .position(|a| a.retry.max_attempts == 0 || a.retry.max_attempts > 10)
        {
            return Err(ConfigError::new(
                format!("arms[{i}].retry.max_attempts"),
                "1 to 10",
            ));
        }
        Ok(())
    }

    /// The same scenario squeezed into `duration`: the measurement start and the hops'
    /// slowdowns scale with it; work times and timeouts do not.
    pub fn shortened(mut self, duration: Nanos) -> FleetScenario {
        let scale = duration.as_secs_f64() / self.duration.as_secs_f64();
        self.duration = duration;
        self.measure_from = self.measure_from.mul_f64(scale);
        for hop in &mut self.hops {
            if let Some(slowdown) = hop.slowdown.as_mut() {
                slowdown.at = slowdown.at.mul_f64(scale);
            }
        }
        self
    }

    /// What the chain can complete a second at the end of the run: the least, over the
    /// hops, of a hop's capacity divided by the calls each original request makes to it.
    pub fn bottleneck(&self) -> f64 {
        let mut fanout = 1.0;
        let mut least = f64::INFINITY;
        for hop in &self.hops {
            let capacity = hop.capacity(hop.factor_at(self.duration));
            least = least.min(capacity / fanout);
            fanout *= f64::from(hop.calls);
        }
        least
    }
}

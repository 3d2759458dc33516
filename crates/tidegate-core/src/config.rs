//! Configuration of a gate: which limit and which regulator, the settings of each, and the
//! queue.
//!
//! Each algorithm has its own table, and a selector names the one in use:
//!
//! ```toml
//! [limit]
//! algorithm = "gradient2"
//! [limit.gradient2]
//! tolerance = 2.0
//!
//! [regulator]
//! algorithm = "pid"
//!
//! [queue]
//! timeout = "300ms"
//! ```
//!
//! Every key has a default, so an empty document is a complete configuration, and every table
//! rejects unknown keys, so a typo is an error instead of a silently ignored setting. (A tagged
//! enum would be terser, but serde buffers tagged content and the parser's line numbers are
//! lost; plain structs keep them, so errors name the key and its line.) The tables of the
//! algorithms not selected are kept, so that switching algorithm is a one-word change.

use serde::{Deserialize, Serialize};

use crate::gate::{Gate, QueueConfig};
use crate::limit::{
    Aimd, AimdConfig, Autotune, AutotuneConfig, Bdp, BdpConfig, Fixed, FixedConfig, Gradient2,
    Gradient2Config, HillClimb, HillClimbConfig, Limit, Vegas, VegasConfig,
};
use crate::regulator::{Codel, CodelConfig, Off, Pid, PidConfig, Pie, PieConfig, Regulator};

/// The limit algorithms.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LimitAlgorithm {
    Fixed,
    Aimd,
    Vegas,
    Gradient2,
    HillClimb,
    #[default]
    Autotune,
    Bdp,
}

/// Which limit, and the settings of each.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitConfig {
    pub algorithm: LimitAlgorithm,
    pub fixed: FixedConfig,
    pub aimd: AimdConfig,
    pub vegas: VegasConfig,
    pub gradient2: Gradient2Config,
    pub hill_climb: HillClimbConfig,
    pub autotune: AutotuneConfig,
    pub bdp: BdpConfig,
}

impl LimitAlgorithm {
    /// Every limit algorithm, for code that must cover them all.
    pub const ALL: [LimitAlgorithm; 7] = [
        LimitAlgorithm::Fixed,
        LimitAlgorithm::Aimd,
        LimitAlgorithm::Vegas,
        LimitAlgorithm::Gradient2,
        LimitAlgorithm::HillClimb,
        LimitAlgorithm::Autotune,
        LimitAlgorithm::Bdp,
    ];
}

impl LimitConfig {
    /// A configuration selecting `algorithm` with its defaults.
    pub fn of(algorithm: LimitAlgorithm) -> LimitConfig {
        LimitConfig {
            algorithm,
            ..LimitConfig::default()
        }
    }

    pub fn build(&self) -> Box<dyn Limit> {
        match self.algorithm {
            LimitAlgorithm::Fixed => Box::new(Fixed::new(&self.fixed)),
            LimitAlgorithm::Aimd => Box::new(Aimd::new(&self.aimd)),
            LimitAlgorithm::Vegas => Box::new(Vegas::new(&self.vegas)),
            LimitAlgorithm::Gradient2 => Box::new(Gradient2::new(&self.gradient2)),
            LimitAlgorithm::HillClimb => Box::new(HillClimb::new(&self.hill_climb)),
            LimitAlgorithm::Autotune => Box::new(Autotune::new(&self.autotune)),
            LimitAlgorithm::Bdp => Box::new(Bdp::new(&self.bdp)),
        }
    }
}

/// The regulators.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RegulatorAlgorithm {
    Off,
    #[default]
    Pie,
    Codel,
    Pid,
}

/// Which regulator, and the settings of each.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegulatorConfig {
    pub algorithm: RegulatorAlgorithm,
    pub pie: PieConfig,
    pub codel: CodelConfig,
    pub pid: PidConfig,
}

impl RegulatorAlgorithm {
    /// Every regulator, for code that must cover them all.
    pub const ALL: [RegulatorAlgorithm; 4] = [
        RegulatorAlgorithm::Off,
        RegulatorAlgorithm::Pie,
        RegulatorAlgorithm::Codel,
        RegulatorAlgorithm::Pid,
    ];
}

impl RegulatorConfig {
    /// A configuration selecting `algorithm` with its defaults.
    pub fn of(algorithm: RegulatorAlgorithm) -> RegulatorConfig {
        RegulatorConfig {
            algorithm,
            ..RegulatorConfig::default()
        }
    }

    pub fn build(&self) -> Box<dyn Regulator> {
        match self.algorithm {
            RegulatorAlgorithm::Off => Box::new(Off),
            RegulatorAlgorithm::Pie => Box::new(Pie::new(&self.pie)),
            RegulatorAlgorithm::Codel => Box::new(Codel::new(&self.codel)),
            RegulatorAlgorithm::Pid => Box::new(Pid::new(&self.pid)),
        }
    }
}

/// Everything a [`Gate`] needs. `GateConfig::default()` is tidegate's default protection:
/// the [`Autotune`] limit and [`Pie`] shedding by priority, with a 500 ms queue timeout and a
/// queue wait bounded by the fastest recent answer.
///
/// Why, on the simulator's scenarios of every seed experiment (`docs/algorithms.md`, "The
/// default, and why", has the table and the commands): on Kanaloa's service at 125% it keeps
/// 99% of the capacity as goodput at p99 209 ms, settled 7 s after the overload starts; in
/// Cinnamon's experiment at 2.3x and 3x it keeps 98.5% while serving no tier 5 and keeping
/// tier 1's P50 within 1.17x of unloaded; in the capacity demo it reaches 3.34-3.44 ok/s of
/// an ideal 3.5; in front of RSocket's 2-20 ms servers it accepts 339 a second at p99 18.9
/// ms, more than a lease of 100 at its latency, because the queue's wait is bounded by the
/// service's own latency ([`QueueConfig::wait_bound`]). No other pairing not told the
/// capacity does as well across them: PID costs Kanaloa's p99 (537 ms), CoDel expires
/// tier 1 with tier 5, HillClimb takes minutes to settle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct GateConfig {
    pub limit: LimitConfig,
    pub regulator: RegulatorConfig,
    pub queue: QueueConfig,
}

impl GateConfig {
    pub fn build(&self) -> Gate {
        Gate::new(
            self.limit.build(),
            self.regulator.build(),
            self.queue.clone(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_document_is_the_default() {
        let config: GateConfig = toml::from_str("").expect("valid");
        assert_eq!(config, GateConfig::default());
    }

    #[test]
    fn selects_and_tunes_an_algorithm() {
        let config: GateConfig = toml::from_str(
            "[limit]\nalgorithm = \"aimd\"\n[limit.aimd]\nbackoff_ratio = 0.5\n[regulator]\nalgorithm = \"pie\"\n[queue]\ntimeout = \"300ms\"\ncapacity = 10\n",
        )
        .expect("valid");
        assert_eq!(config.limit.algorithm, LimitAlgorithm::Aimd);
        assert_eq!(config.limit.aimd.backoff_ratio, 0.5);
        assert_eq!(config.regulator.algorithm, RegulatorAlgorithm::Pie);
        assert_eq!(config.queue.timeout, crate::Nanos::from_millis(300));
        let gate = config.build();
        assert_eq!(gate.queued(), 0);
    }

    fn error(doc: &str) -> String {
        toml::from_str::<GateConfig>(doc)
            .expect_err("invalid")
            .to_string()
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = error("[limit]\nalgorithm = \"aimd\"\n\n[limit.aimd]\nbackoff_rati = 0.5\n");
        assert!(
            err.contains("line 5") && err.contains("backoff_rati"),
            "{err}"
        );
        assert!(
            err.contains("backoff"),
            "the message lists the valid keys: {err}"
        );
    }

    #[test]
    fn unknown_algorithm_lists_the_choices() {
        let err = error("[regulator]\nalgorithm = \"red\"\n");
        assert!(
            err.contains("line 2") && err.contains("pie") && err.contains("codel"),
            "{err}"
        );
    }

    #[test]
    fn bad_duration_is_named_with_its_line() {
        let err = error("[queue]\ncapacity = 3\ntimeout = \"soon\"\n");
        assert!(err.contains("line 3") && err.contains("soon"), "{err}");
    }

    #[test]
    fn every_combination_builds_a_working_gate() {
        use crate::limit::Outcome;
        use crate::{Nanos, Priority, Time};
        for limit in LimitAlgorithm::ALL {
            for regulator in RegulatorAlgorithm::ALL {
                let config = GateConfig {
                    limit: LimitConfig::of(limit),
                    regulator: RegulatorConfig::of(regulator),
                    queue: QueueConfig::default(),
                };
                let mut gate = config.build();
                assert!(gate.limit() >= 1);
                let now = Time::ZERO + Nanos::from_millis(1);
                match gate.arrive(now, Priority::default()) {
                    crate::gate::Arrival::Admitted(permit) => {
                        gate.complete(now + Nanos::from_millis(5), permit, Outcome::Success)
                    }
                    other => {
                        panic!("{limit:?}/{regulator:?}: first request not admitted: {other:?}")
                    }
                }
                gate.tick(now + Nanos::from_secs(1));
                assert_eq!(gate.counters().total().completed_ok, 1);
            }
        }
    }

    #[test]
    fn serializes_to_toml_that_parses_back() {
        let text = toml::to_string(&GateConfig::default()).expect("serializes");
        let back: GateConfig = toml::from_str(&text).expect("parses");
        assert_eq!(back, GateConfig::default());
    }
}

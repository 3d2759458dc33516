//! A limit that never moves: the demo's "fixed in-flight quota", QALM's configured maximum.

use serde::{Deserialize, Serialize};

use super::{Limit, Sample};

/// Configuration of [`Fixed`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FixedConfig {
    /// Requests allowed in flight, at least 1 (a file saying 0 is refused). Default 20.
    #[serde(deserialize_with = "at_least_one")]
    pub limit: u32,
}

/// A limit of 0 would admit nothing; read from a file it is an error (with the key and line,
/// which the parser adds) rather than silently run as 1.
fn at_least_one<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<u32, D::Error> {
    match u32::deserialize(deserializer)? {
        0 => Err(serde::de::Error::custom(
            "a fixed limit of 0 would admit nothing: give at least 1",
        )),
        limit => Ok(limit),
    }
}

impl Default for FixedConfig {
    fn default() -> FixedConfig {
        FixedConfig { limit: 20 }
    }
}

/// A constant limit. Right only while the service's capacity is what it was measured to be;
/// the baseline every adaptive limit is compared against.
#[derive(Clone, Debug)]
pub struct Fixed {
    limit: u32,
}

impl Fixed {
    pub fn new(config: &FixedConfig) -> Fixed {
        Fixed {
            limit: config.limit.max(1),
        }
    }
}

impl Limit for Fixed {
    fn limit(&self) -> u32 {
        self.limit
    }

    fn on_sample(&mut self, _: &Sample) {}

    fn is_fixed(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::testkit::{Load, Service, run};
    use crate::time::Nanos;

    #[test]
    fn never_moves_and_never_goes_below_one() {
        let mut fixed = Fixed::new(&FixedConfig { limit: 0 });
        assert_eq!(fixed.limit(), 1);
        let mut fixed60 = Fixed::new(&FixedConfig { limit: 60 });
        let trace = run(
            &mut fixed60,
            &Service::kanaloa(),
            Load::Saturating,
            Nanos::from_secs(30),
        );
        assert_eq!(trace.min_limit(), 60);
        assert_eq!(trace.max_limit(), 60);
        let trace = run(
            &mut fixed,
            &Service::kanaloa(),
            Load::Saturating,
            Nanos::from_secs(1),
        );
        assert_eq!(trace.max_limit(), 1);
    }

    #[test]
    fn a_configured_limit_of_zero_is_refused_with_its_line() {
        let err = toml::from_str::<FixedConfig>("\nlimit = 0\n")
            .expect_err("0 is refused")
            .to_string();
        assert!(
            err.contains("line 2") && err.contains("at least 1"),
            "{err}"
        );
        let config: FixedConfig = toml::from_str("limit = 3").expect("valid");
        assert_eq!(config.limit, 3);
    }
}

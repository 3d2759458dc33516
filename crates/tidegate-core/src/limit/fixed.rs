//! A limit that never moves: the demo's "fixed in-flight quota", QALM's configured maximum.

use serde::{Deserialize, Serialize};

use super::{Limit, Sample};

/// Configuration of [`Fixed`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FixedConfig {
    /// Requests allowed in flight. Default 20.
    pub limit: u32,
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
}

//! The lease a service grants its callers, as an HTTP response header.
//!
//! RSocket's request leases let a responder tell its requesters how much they may send; a
//! proxy that balances by lease availability sends each request where there is room (see
//! `seeds/rsocket-request-leases.md`). tidegate carries the idea over HTTP: a service (through
//! `tidegate-tower`'s lease layer, or by hand) adds to its responses
//!
//! ```text
//! tidegate-lease: allowed=40, ttl=1s
//! ```
//!
//! meaning "keep at most 40 requests in flight to me for the next second". A proxy honouring
//! it caps that upstream's limit at `allowed` until the lease expires ([`crate::gate::Lease`]);
//! `allowed=0` asks for nothing to be sent. Keys are separated by commas, values follow `=`,
//! white space around either is ignored, `ttl` takes a duration with a unit (`ms`, `s`, ...)
//! and unknown keys are ignored so that later versions can add some. `docs/lease.md` is the
//! specification.

use std::fmt;
use std::str::FromStr;

use crate::gate::Lease;
use crate::time::{Nanos, Time};

/// The header's name (HTTP header names are case-insensitive).
pub const HEADER: &str = "tidegate-lease";

/// A lease as carried in the header: relative to when it is received.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseHeader {
    /// Requests the caller may keep in flight.
    pub allowed: u32,
    /// How long the grant holds from its receipt.
    pub ttl: Nanos,
}

impl LeaseHeader {
    /// The lease in force from `now`, received now.
    pub fn at(self, now: Time) -> Lease {
        Lease {
            allowed: self.allowed,
            expires: now + self.ttl,
        }
    }
}

impl fmt::Display for LeaseHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "allowed={}, ttl={}", self.allowed, self.ttl)
    }
}

/// Why a lease header did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseLeaseError {
    #[error("lease header has no `{0}=`")]
    Missing(&'static str),
    #[error("lease header has an invalid `{key}`: {value:?}")]
    Invalid { key: &'static str, value: String },
    #[error("lease header is malformed near {0:?}: expected key=value pairs separated by commas")]
    Syntax(String),
}

/// The `key=value` pairs of a tidegate header (`tidegate-lease`, `tidegate-cutoff`): split at
/// commas, white space around keys and values trimmed, empty pairs skipped; a pair without
/// `=` is the `Err`.
pub(crate) fn pairs(s: &str) -> impl Iterator<Item = Result<(&str, &str), &str>> {
    s.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|pair| {
            pair.split_once('=')
                .map(|(key, value)| (key.trim(), value.trim()))
                .ok_or(pair)
        })
}

impl FromStr for LeaseHeader {
    type Err = ParseLeaseError;

    fn from_str(s: &str) -> Result<LeaseHeader, ParseLeaseError> {
        let mut allowed = None;
        let mut ttl = None;
        for pair in pairs(s) {
            let (key, value) = pair.map_err(|pair| ParseLeaseError::Syntax(pair.to_owned()))?;
            match key {
                "allowed" => {
                    let parsed = value.parse().map_err(|_| ParseLeaseError::Invalid {
                        key: "allowed",
                        value: value.to_owned(),
                    })?;
                    allowed = Some(parsed);
                }
                "ttl" => {
                    let parsed = value.parse().map_err(|_| ParseLeaseError::Invalid {
                        key: "ttl",
                        value: value.to_owned(),
                    })?;
                    ttl = Some(parsed);
                }
                _ => {}
            }
        }
        Ok(LeaseHeader {
            allowed: allowed.ok_or(ParseLeaseError::Missing("allowed"))?,
            ttl: ttl.ok_or(ParseLeaseError::Missing("ttl"))?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let lease = LeaseHeader {
            allowed: 40,
            ttl: Nanos::from_secs(1),
        };
        assert_eq!(lease.to_string(), "allowed=40, ttl=1s");
        assert_eq!(lease.to_string().parse(), Ok(lease));
    }

    #[test]
    fn tolerates_spacing_order_and_unknown_keys() {
        let lease: LeaseHeader = " ttl = 250ms ,allowed=0, future=yes "
            .parse()
            .expect("valid");
        assert_eq!(
            lease,
            LeaseHeader {
                allowed: 0,
                ttl: Nanos::from_millis(250)
            }
        );
    }

    #[test]
    fn names_what_is_wrong() {
        assert_eq!(
            "ttl=1s".parse::<LeaseHeader>(),
            Err(ParseLeaseError::Missing("allowed"))
        );
        assert_eq!(
            "allowed=3".parse::<LeaseHeader>(),
            Err(ParseLeaseError::Missing("ttl"))
        );
        assert!(matches!(
            "allowed=-1, ttl=1s".parse::<LeaseHeader>(),
            Err(ParseLeaseError::Invalid { key: "allowed", .. })
        ));
        assert!(matches!(
            "allowed=1, ttl=soon".parse::<LeaseHeader>(),
            Err(ParseLeaseError::Invalid { key: "ttl", .. })
        ));
        assert!(matches!(
            "allowed".parse::<LeaseHeader>(),
            Err(ParseLeaseError::Syntax(_))
        ));
    }

    #[test]
    fn becomes_a_gate_lease_from_its_receipt() {
        let lease = LeaseHeader {
            allowed: 5,
            ttl: Nanos::from_millis(100),
        };
        let now = Time::from_nanos(1_000);
        assert_eq!(
            lease.at(now),
            Lease {
                allowed: 5,
                expires: now + Nanos::from_millis(100)
            }
        );
    }
}

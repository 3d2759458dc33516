//! An RSocket responder's static lease: `allowed` requests per `ttl`, renewed every `ttl`.
//!
//! In the RSocket demo (`seeds/rsocket-request-leases.md`) each server's `StaticLeaseSender`
//! grants a constant number of requests every second; requests beyond it are rejected by the
//! responder before they reach the handler (`lease_exhausted`), and the proxy sends each
//! request to the server with the highest availability, remaining / allowed. This is a budget
//! of *requests per window*, not a cap on requests in flight (which is what tidegate's own
//! lease header, [`tidegate_core::gate::Lease`], means), so it is modelled here as the
//! responder-side policy it is.

use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};
use tidegate_core::{Nanos, Time};

/// `{ allowed = 100, ttl = "1s" }`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StaticLeaseConfig {
    /// Requests granted per lease.
    pub allowed: NonZeroU32,
    /// How long a lease holds before the next one replaces it. Default 1s.
    #[serde(default = "one_second")]
    pub ttl: Nanos,
}

fn one_second() -> Nanos {
    Nanos::from_secs(1)
}

/// A responder's lease state; leases start at multiples of `ttl`.
#[derive(Clone, Debug)]
pub struct StaticLease {
    allowed: u32,
    ttl: u64,
    window: u64,
    remaining: u32,
}

impl StaticLease {
    pub fn new(config: &StaticLeaseConfig) -> StaticLease {
        StaticLease {
            allowed: config.allowed.get(),
            ttl: config.ttl.as_nanos().max(1),
            window: 0,
            remaining: config.allowed.get(),
        }
    }

    fn renew(&mut self, now: Time) {
        let window = now.as_nanos() / self.ttl;
        if window != self.window {
            self.window = window;
            self.remaining = self.allowed;
        }
    }

    /// Takes one request from the lease in force; false if it is exhausted.
    pub fn try_take(&mut self, now: Time) -> bool {
        self.renew(now);
        if self.remaining == 0 {
            return false;
        }
        self.remaining -= 1;
        true
    }

    /// Remaining / allowed, in `[0, 1]`.
    pub fn availability(&mut self, now: Time) -> f64 {
        self.renew(now);
        f64::from(self.remaining) / f64::from(self.allowed)
    }

    /// Requests granted per lease.
    pub fn allowed(&self) -> u32 {
        self.allowed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_allowed_per_window_then_renews() {
        let mut lease = StaticLease::new(&StaticLeaseConfig {
            allowed: NonZeroU32::new(2).unwrap(),
            ttl: Nanos::from_secs(1),
        });
        let t = |ms| Time::ZERO + Nanos::from_millis(ms);
        assert!(lease.try_take(t(0)));
        assert_eq!(lease.availability(t(1)), 0.5);
        assert!(lease.try_take(t(500)));
        assert!(!lease.try_take(t(999)));
        assert_eq!(lease.availability(t(999)), 0.0);
        assert!(lease.try_take(t(1000)));
        assert_eq!(lease.availability(t(2500)), 1.0);
    }
}

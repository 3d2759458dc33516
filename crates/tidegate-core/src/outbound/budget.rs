//! A retry budget: retries at most a fraction of the requests, plus a small floor.
//!
//! Retrying on failure turns each request into up to N attempts exactly when the service is
//! failing for want of capacity, multiplying the overload (a "retry storm"). A budget keeps
//! the retries of a client, over a sliding window, to at most `ratio` of its original
//! requests (10% by default) plus `min_per_second` times the window, a floor that lets a
//! client that sends little still retry the odd failure. With the budget, attempts per
//! request stay at most about `1 + ratio` however the service fails. This is Finagle's
//! `RetryBudget` (20%, 10 a second, over 10 s) and the SRE book's per-client budget (10%).

use serde::{Deserialize, Serialize};

use super::window::WindowCounts;
use crate::time::{Nanos, Time};

const REQUESTS: usize = 0;
const RETRIES: usize = 1;

/// The budget's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryBudgetConfig {
    /// Retries allowed per original request. Default 0.1.
    pub ratio: f64,
    /// Retries allowed whatever the requests, per second of the window. Default 1.
    pub min_per_second: f64,
    /// How far back requests and retries are counted. Default 10 s.
    pub window: Nanos,
}

impl Default for RetryBudgetConfig {
    fn default() -> RetryBudgetConfig {
        RetryBudgetConfig {
            ratio: 0.1,
            min_per_second: 1.0,
            window: Nanos::from_secs(10),
        }
    }
}

/// A client's retry budget (see the module docs).
#[derive(Clone, Debug)]
pub struct RetryBudget {
    ratio: f64,
    floor: f64,
    counts: WindowCounts,
}

impl RetryBudget {
    pub fn new(config: &RetryBudgetConfig) -> RetryBudget {
        let non_negative = |x: f64| if x.is_nan() { 0.0 } else { x.max(0.0) };
        RetryBudget {
            ratio: non_negative(config.ratio),
            floor: non_negative(config.min_per_second) * config.window.as_secs_f64(),
            counts: WindowCounts::new(config.window),
        }
    }

    /// An original request (not a retry) was made at `now`: it earns the budget `ratio`.
    pub fn request(&mut self, now: Time) {
        self.counts.add(now, REQUESTS, 1);
    }

    /// Whether a retry at `now` is within budget; if it is, it is spent.
    pub fn try_retry(&mut self, now: Time) -> bool {
        let [requests, retries] = self.counts.sums(now);
        let allowed = self.ratio * requests as f64 + self.floor;
        if (retries as f64) < allowed.floor() {
            self.counts.add(now, RETRIES, 1);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_are_a_tenth_of_requests_plus_the_floor() {
        let mut budget = RetryBudget::new(&RetryBudgetConfig {
            min_per_second: 0.5,
            ..RetryBudgetConfig::default()
        });
        let now = Time::from_nanos(1);
        // The floor alone: 0.5/s over 10 s.
        let granted = (0..100).filter(|_| budget.try_retry(now)).count();
        assert_eq!(granted, 5);
        for _ in 0..1_000 {
            budget.request(now);
        }
        // 10% of 1,000, plus the floor, less the 5 spent.
        let granted = (0..1_000).filter(|_| budget.try_retry(now)).count();
        assert_eq!(granted, 100);
    }

    #[test]
    fn the_budget_refills_as_the_window_slides() {
        let mut budget = RetryBudget::new(&RetryBudgetConfig {
            min_per_second: 0.0,
            ..RetryBudgetConfig::default()
        });
        let mut now = Time::ZERO;
        let mut granted = 0u32;
        // Every request fails and is retried if allowed: over 60 s at 100/s, a tenth.
        for _ in 0..6_000 {
            now += Nanos::from_millis(10);
            budget.request(now);
            granted += u32::from(budget.try_retry(now));
        }
        assert!((590..=600).contains(&granted), "{granted}");
    }

    #[test]
    fn a_nonsense_ratio_allows_only_the_floor() {
        let mut budget = RetryBudget::new(&RetryBudgetConfig {
            ratio: f64::NAN,
            min_per_second: 0.1,
            window: Nanos::from_secs(10),
        });
        let now = Time::from_nanos(5);
        for _ in 0..100 {
            budget.request(now);
        }
        assert_eq!((0..10).filter(|_| budget.try_retry(now)).count(), 1);
    }
}

//! Clients that retry: what a refused or failed request does next, in the load generator.
//!
//! Retries are how an overload multiplies itself (each refusal comes back as another attempt),
//! so a load that means to show it must retry as real clients do. The decisions are
//! `tidegate_core::outbound`'s, the same code as `tidegate-tower`'s `RetryLayer` and the
//! simulator's fleet clients: [`RetryPolicy`] for how many attempts and how long to wait
//! between them (with the refusal's `Retry-After`), [`RetryBudget`] for whether a retry is
//! affordable. One load is one client: all its requests share one budget.
//!
//! A request's timeout covers all its attempts, as a caller's deadline does: a retry whose wait
//! would end past it is not made (its caller has given up), and costs no budget.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tidegate_core::outbound::{RetryBudget, RetryBudgetConfig, RetryPolicy};
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Time};

/// How the load's requests are retried.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadRetry {
    pub policy: RetryPolicy,
    /// The retry budget; `None` retries whenever the policy allows.
    pub budget: Option<RetryBudgetConfig>,
}

impl LoadRetry {
    /// Up to `attempts` attempts, at once, whatever the service asks, without a budget: the
    /// retry storm.
    pub fn naive(attempts: u32) -> LoadRetry {
        LoadRetry {
            policy: RetryPolicy::naive(attempts),
            budget: None,
        }
    }

    /// Up to `attempts` attempts with the library's defaults: exponential backoff with
    /// jitter, `Retry-After` honoured, and retries at most 10% of requests plus 1 a second.
    pub fn budgeted(attempts: u32) -> LoadRetry {
        LoadRetry {
            policy: RetryPolicy {
                max_attempts: attempts,
                ..RetryPolicy::default()
            },
            budget: Some(RetryBudgetConfig::default()),
        }
    }
}

#[derive(Debug)]
struct State {
    budget: Option<RetryBudget>,
    rng: Rng,
}

/// A load's retry decisions, shared by its requests.
#[derive(Debug)]
pub(crate) struct Retrier {
    policy: RetryPolicy,
    state: Mutex<State>,
    start: Instant,
}

impl Retrier {
    pub(crate) fn new(retry: &LoadRetry, seed: u64, start: Instant) -> Retrier {
        Retrier {
            policy: retry.policy,
            state: Mutex::new(State {
                budget: retry.budget.as_ref().map(RetryBudget::new),
                rng: Rng::seed(seed),
            }),
            start,
        }
    }

    fn now(&self, at: Instant) -> Time {
        let since = at.saturating_duration_since(self.start);
        Time::ZERO + Nanos::from_nanos(u64::try_from(since.as_nanos()).unwrap_or(u64::MAX))
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A request (not a retry) is sent at `now`: it earns the budget its share.
    pub(crate) fn request(&self, now: Instant) {
        let at = self.now(now);
        if let Some(budget) = self.state().budget.as_mut() {
            budget.request(at);
        }
    }

    /// After `attempts` attempts, the last refused (with its `Retry-After`, if any) or failed
    /// at `now`: how long to wait before the next, or `None` to give up, because the policy
    /// says so, the wait would end past `deadline`, or the budget is spent.
    pub(crate) fn next_wait(
        &self,
        attempts: u32,
        retry_after: Option<Nanos>,
        now: Instant,
        deadline: Instant,
    ) -> Option<Duration> {
        let at = self.now(now);
        let mut state = self.state();
        let state = &mut *state;
        let wait: Duration = self
            .policy
            .next_wait(attempts, retry_after, &mut state.rng)?
            .into();
        if now + wait >= deadline {
            return None;
        }
        let affordable = state.budget.as_mut().is_none_or(|b| b.try_retry(at));
        affordable.then_some(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naive_retries_until_the_attempts_run_out() {
        let start = Instant::now();
        let retrier = Retrier::new(&LoadRetry::naive(3), 1, start);
        let deadline = start + Duration::from_secs(1);
        retrier.request(start);
        let asked = Some(Nanos::from_secs(30));
        assert_eq!(
            retrier.next_wait(1, asked, start, deadline),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retrier.next_wait(2, asked, start, deadline),
            Some(Duration::ZERO)
        );
        assert_eq!(retrier.next_wait(3, asked, start, deadline), None);
    }

    #[test]
    fn budgeted_retries_honour_retry_after_and_the_deadline() {
        let start = Instant::now();
        let retrier = Retrier::new(&LoadRetry::budgeted(3), 1, start);
        let deadline = start + Duration::from_secs(1);
        retrier.request(start);
        // A refusal asking for 1 s cannot be retried within a 1 s deadline.
        assert_eq!(
            retrier.next_wait(1, Some(Nanos::from_secs(1)), start, deadline),
            None
        );
        let later = start + Duration::from_secs(2);
        let wait = retrier.next_wait(1, None, start, later);
        assert!(
            wait.is_some_and(|w| w <= Duration::from_millis(25)),
            "{wait:?}"
        );
    }

    #[test]
    fn the_budget_caps_retries_at_a_tenth_of_requests_plus_the_floor() {
        let start = Instant::now();
        let retrier = Retrier::new(&LoadRetry::budgeted(3), 1, start);
        let deadline = start + Duration::from_secs(60);
        for _ in 0..1_000 {
            retrier.request(start);
        }
        let granted = (0..1_000)
            .filter(|_| retrier.next_wait(1, None, start, deadline).is_some())
            .count();
        // 10% of 1,000 plus 1 a second over the 10 s window.
        assert_eq!(granted, 110);
    }
}

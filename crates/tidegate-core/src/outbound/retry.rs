//! When to try a failed request again, and how long to wait first.
//!
//! A policy allows up to `max_attempts` attempts (the first and its retries). Between two,
//! it waits an exponential backoff with full jitter (AWS's "Exponential Backoff and Jitter":
//! a uniform draw in `[0, min(max, base * 2^retry)]`), so that clients refused together do
//! not come back together. A refusal that says how long to wait (`Retry-After`) is honoured
//! if the policy says so: the wait is then at least that long, and a refusal asking for longer
//! than `max_retry_after` is not retried at all (the caller would have given up by then).
//! Whether a retry is *affordable* is the [`super::RetryBudget`]'s call, asked separately.

use serde::{Deserialize, Serialize};

use crate::rng::Rng;
use crate::time::Nanos;

/// Exponential backoff with full jitter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Backoff {
    /// The bound of the first retry's wait. Default 25 ms.
    pub base: Nanos,
    /// The largest bound. Default 1 s.
    pub max: Nanos,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            base: Nanos::from_millis(25),
            max: Nanos::from_secs(1),
        }
    }
}

impl Backoff {
    /// The wait before retry number `retry` (1 for the first retry).
    pub fn wait(&self, retry: u32, rng: &mut Rng) -> Nanos {
        let doublings = retry.saturating_sub(1).min(62);
        let bound = self.base.saturating_mul(1 << doublings).min(self.max);
        Nanos::from_nanos((rng.next_f64() * bound.as_nanos() as f64) as u64)
    }
}

/// How a client retries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Attempts in all, the first included: 1 never retries. Default 3.
    pub max_attempts: u32,
    /// The wait between attempts; `None` retries at once. Default: [`Backoff::default`].
    pub backoff: Option<Backoff>,
    /// Wait at least as long as a refusal's `Retry-After` asks. Default true.
    pub honour_retry_after: bool,
    /// A refusal asking for a longer wait than this is not retried. Default 1 s.
    pub max_retry_after: Nanos,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            backoff: Some(Backoff::default()),
            honour_retry_after: true,
            max_retry_after: Nanos::from_secs(1),
        }
    }
}

/// A `Retry-After` value in whole seconds (`"3"`); its HTTP-date form, which gates do not
/// send, and anything else that is not a whole number of seconds give `None`: the retry then
/// waits its backoff alone.
pub fn parse_retry_after(value: &[u8]) -> Option<Nanos> {
    let seconds: u64 = std::str::from_utf8(value).ok()?.trim().parse().ok()?;
    Some(Nanos::from_secs(seconds))
}

impl RetryPolicy {
    /// Naive retries: up to `max_attempts`, at once, whatever the service asks.
    pub fn naive(max_attempts: u32) -> RetryPolicy {
        RetryPolicy {
            max_attempts,
            backoff: None,
            honour_retry_after: false,
            max_retry_after: Nanos::MAX,
        }
    }

    /// After `attempts` attempts, the last of which failed (with the service's `Retry-After`,
    /// if it gave one): how long to wait before the next, or `None` for no more.
    pub fn next_wait(
        &self,
        attempts: u32,
        retry_after: Option<Nanos>,
        rng: &mut Rng,
    ) -> Option<Nanos> {
        if attempts >= self.max_attempts {
            return None;
        }
        let backoff = self.backoff.map_or(Nanos::ZERO, |b| b.wait(attempts, rng));
        match retry_after {
            Some(asked) if self.honour_retry_after => {
                (asked <= self.max_retry_after).then(|| backoff.max(asked))
            }
            _ => Some(backoff),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_its_bound_up_to_the_max() {
        let backoff = Backoff {
            base: Nanos::from_millis(10),
            max: Nanos::from_millis(50),
        };
        let mut rng = Rng::seed(9);
        for (retry, bound) in [(1, 10), (2, 20), (3, 40), (4, 50), (40, 50), (u32::MAX, 50)] {
            let waits: Vec<Nanos> = (0..2_000).map(|_| backoff.wait(retry, &mut rng)).collect();
            let most = waits.iter().max().copied().unwrap_or_default();
            assert!(most <= Nanos::from_millis(bound), "retry {retry}: {most}");
            assert!(most > Nanos::from_millis(bound).mul_f64(0.95), "{most}");
        }
    }

    #[test]
    fn stops_after_max_attempts() {
        let policy = RetryPolicy::naive(3);
        let mut rng = Rng::seed(1);
        assert_eq!(policy.next_wait(1, None, &mut rng), Some(Nanos::ZERO));
        assert_eq!(policy.next_wait(2, None, &mut rng), Some(Nanos::ZERO));
        assert_eq!(policy.next_wait(3, None, &mut rng), None);
        // Naive retries ignore Retry-After.
        assert_eq!(
            policy.next_wait(1, Some(Nanos::from_secs(30)), &mut rng),
            Some(Nanos::ZERO)
        );
    }

    #[test]
    fn retry_after_is_whole_seconds() {
        assert_eq!(parse_retry_after(b" 3 "), Some(Nanos::from_secs(3)));
        assert_eq!(parse_retry_after(b"0"), Some(Nanos::ZERO));
        for bad in [
            &b"Wed, 21 Oct 2015 07:28:00 GMT"[..],
            b"-1",
            b"1.5",
            b"",
            b"\xff",
        ] {
            assert_eq!(parse_retry_after(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn honours_retry_after_within_its_bound() {
        let policy = RetryPolicy::default();
        let mut rng = Rng::seed(1);
        let asked = Nanos::from_millis(500);
        assert_eq!(policy.next_wait(1, Some(asked), &mut rng), Some(asked));
        // Longer than the caller would wait: give up.
        assert_eq!(
            policy.next_wait(1, Some(Nanos::from_secs(2)), &mut rng),
            None
        );
        // No Retry-After: the backoff alone, under its first bound.
        let wait = policy.next_wait(1, None, &mut rng);
        assert!(
            wait.is_some_and(|w| w <= Nanos::from_millis(25)),
            "{wait:?}"
        );
    }
}

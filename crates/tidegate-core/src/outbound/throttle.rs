//! Google SRE's client-side adaptive throttling.
//!
//! Each client keeps, over a sliding window, the requests it wanted to send (`requests`,
//! counting those it then rejected itself) and the requests its backend accepted (`accepts`:
//! answered with anything but an overload refusal). While the backend accepts everything,
//! `requests == accepts` and the client sends everything. Once the backend refuses more than
//! `1 - 1/K` of what reaches it, the client rejects new requests locally with probability
//!
//! ```text
//! max(0, (requests - K * accepts) / (requests + 1))
//! ```
//!
//! so that what it sends settles near `K` times what the backend accepts: a refusal that costs
//! the backend little still costs it something, and one that never leaves the client costs it
//! nothing. `K = 2` (the book's choice) lets twice the accepted rate through, enough for the
//! client to notice at once when capacity comes back; a smaller K throttles harder and reacts
//! more slowly to recovery. The window is the book's two minutes by default in spirit; here
//! 10 s, so that a client follows a capacity change within seconds.

use serde::{Deserialize, Serialize};

use super::window::WindowCounts;
use crate::rng::Rng;
use crate::time::{Nanos, Time};

const REQUESTS: usize = 0;
const ACCEPTS: usize = 1;

/// The throttle's settings.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ThrottleConfig {
    /// The multiplier K: the client sends up to K times what its backend accepts. At least 1
    /// makes sense; below 1 the client would refuse requests the backend would take. Default 2.
    pub k: f64,
    /// How far back requests and accepts are counted. Default 10 s.
    pub window: Nanos,
}

impl Default for ThrottleConfig {
    fn default() -> ThrottleConfig {
        ThrottleConfig {
            k: 2.0,
            window: Nanos::from_secs(10),
        }
    }
}

/// A client's adaptive throttle (see the module docs).
#[derive(Clone, Debug)]
pub struct AdaptiveThrottle {
    k: f64,
    counts: WindowCounts,
}

impl AdaptiveThrottle {
    pub fn new(config: &ThrottleConfig) -> AdaptiveThrottle {
        AdaptiveThrottle {
            k: if config.k.is_nan() { 2.0 } else { config.k },
            counts: WindowCounts::new(config.window),
        }
    }

    /// The probability with which a request at `now` is rejected locally.
    pub fn reject_probability(&mut self, now: Time) -> f64 {
        let [requests, accepts] = self.counts.sums(now);
        reject_probability(requests, accepts, self.k)
    }

    /// Whether to send a request the client wants to make at `now`; `false` means reject it
    /// locally, as if the backend had refused it. Either way it counts as a request.
    pub fn admit(&mut self, now: Time, rng: &mut Rng) -> bool {
        let p = self.reject_probability(now);
        self.counts.add(now, REQUESTS, 1);
        !rng.chance(p)
    }

    /// The backend accepted a request sent at or before `now` (answered it with anything but
    /// an overload refusal).
    pub fn accepted(&mut self, now: Time) {
        self.counts.add(now, ACCEPTS, 1);
    }
}

/// `max(0, (requests - k * accepts) / (requests + 1))`, in `[0, 1)`.
pub(crate) fn reject_probability(requests: u64, accepts: u64, k: f64) -> f64 {
    let requests = requests as f64;
    ((requests - k * accepts as f64) / (requests + 1.0)).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_formula_of_the_sre_book() {
        assert_eq!(reject_probability(0, 0, 2.0), 0.0);
        assert_eq!(reject_probability(100, 100, 2.0), 0.0);
        // Half accepted: K = 2 sends all of it still.
        assert_eq!(reject_probability(100, 50, 2.0), 0.0);
        // A quarter accepted: (100 - 50) / 101.
        assert!((reject_probability(100, 25, 2.0) - 50.0 / 101.0).abs() < 1e-12);
        // Nothing accepted: nearly all, never quite all, so that recovery is seen.
        assert!((reject_probability(1_000, 0, 2.0) - 1_000.0 / 1_001.0).abs() < 1e-12);
        // K = 1.1 throttles as soon as a tenth is refused.
        assert!(reject_probability(100, 85, 1.1) > 0.0);
        assert_eq!(reject_probability(100, 85, 2.0), 0.0);
    }

    /// A backend that accepts 100 a second of a client that wants 1,000: the client's sent
    /// rate settles near K times 100, and everything goes again once capacity comes back.
    #[test]
    fn sends_about_k_times_the_accepted_rate_and_recovers() {
        let mut throttle = AdaptiveThrottle::new(&ThrottleConfig::default());
        let mut rng = Rng::seed(3);
        let tick = Nanos::from_millis(1);
        let mut now = Time::ZERO;
        let mut sent_in_last_10s = 0u32;
        // The backend takes 100 a second: a token every 10 ms, up to a burst of 10 saved
        // (with less, tokens go unused while the client's sends are sparse, and it accepts
        // less than 100 a second).
        let mut tokens = 0.0;
        for ms in 0..30_000u64 {
            now += tick;
            tokens = f64::min(tokens + 0.1, 10.0);
            let sent = throttle.admit(now, &mut rng);
            if sent && tokens >= 1.0 {
                tokens -= 1.0;
                throttle.accepted(now);
            }
            if ms >= 20_000 {
                sent_in_last_10s += u32::from(sent);
            }
        }
        // 10 s at 1,000/s wanted, 100/s accepted: about K * 1,000 = 2,000 sent.
        assert!(
            (1_700..2_400).contains(&sent_in_last_10s),
            "{sent_in_last_10s}"
        );
        // Capacity comes back: every request sent is accepted. The throttle still holds some
        // back while the window remembers the refusals; within two windows all go out again.
        let during = throttle.reject_probability(now);
        assert!(during > 0.7, "{during}");
        for _ in 0..20_000u64 {
            now += tick;
            if throttle.admit(now, &mut rng) {
                throttle.accepted(now);
            }
        }
        assert_eq!(throttle.reject_probability(now), 0.0);
    }
}

//! An upstream's cut-off (`tidegate-cutoff`, `docs/feedback.md`): the proxy drops, before
//! its gate and before sending, the requests the upstream said it refuses for now, and says
//! its own gate's cut-off on the requests it sheds.
//!
//! What the upstream said is `tidegate_core::feedback::Feedback`, the code the outbound layer
//! and the simulator run: the deepest hint until it lapses, the line that reopens at
//! `feedback.reopen_rate`, a chain's call spared by the hint it was admitted under. It is
//! taken in under a lock, on the responses that carry the header. Read on every request, the
//! hint in force is also kept in one atomic word, the rank in the low 16 bits and the expiry,
//! in microseconds on the proxy's clock, in the 48 above (nine years of uptime), so that a
//! request takes no lock unless the line reopens (which moves as it is read).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use http::HeaderValue;
use tidegate_core::feedback::{self, CutoffHint, Feedback};
use tidegate_core::{Priority, Time};

/// The header's name.
pub(crate) static HEADER: http::HeaderName =
    http::HeaderName::from_static(tidegate_core::feedback::HEADER);

/// What an upstream said it refuses, until it lapses.
#[derive(Debug, Default)]
pub(crate) struct UpstreamCutoff {
    feedback: Mutex<Feedback>,
    /// `feedback.reopen_rate` is set: every request reads the line under the lock.
    reopens: bool,
    /// The hint `feedback` holds, as of the last header taken in (0: none).
    packed: AtomicU64,
}

impl UpstreamCutoff {
    /// An upstream's cut-off whose line reopens at `reopen_rate` ranks a second (0: at once).
    pub(crate) fn new(reopen_rate: f64) -> UpstreamCutoff {
        let feedback = Feedback::reopening(reopen_rate);
        UpstreamCutoff {
            reopens: feedback != Feedback::default(),
            feedback: Mutex::new(feedback),
            packed: AtomicU64::new(0),
        }
    }

    /// A panic while the lock was held (nothing under it panics) leaves a hint that is still
    /// a hint.
    fn feedback(&self) -> MutexGuard<'_, Feedback> {
        self.feedback.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The hint held, as of the last header, from the atomic word.
    fn hint(&self) -> CutoffHint {
        let packed = self.packed.load(Ordering::Relaxed);
        CutoffHint {
            rank: (packed & 0xffff) as u16,
            expires: Time::from_nanos((packed >> 16).saturating_mul(1_000)),
        }
    }

    /// The line a request of `priority` sent at `now` (nanoseconds on the proxy's clock) is
    /// past, if the upstream refuses it: `None` to send it. `under`: the hint the edge
    /// admitted the request's chain under, which spares the ranks it admits.
    pub(crate) fn refuses(&self, now: u64, priority: Priority, under: Option<u16>) -> Option<u16> {
        let now = Time::from_nanos(now);
        if self.reopens {
            return self.feedback().refuses_in_chain(now, priority, under);
        }
        let hint = self.hint();
        (hint.refuses(now, priority) && !feedback::spares(priority, under)).then_some(hint.rank)
    }

    /// The hint the proxy admits a request under at `now` (`under=`, with
    /// `feedback.hold_for_chain`): its line, the least important rank when it holds none.
    pub(crate) fn under(&self, now: u64) -> u16 {
        let now = Time::from_nanos(now);
        if self.reopens {
            return self.feedback().under(now);
        }
        let hint = self.hint();
        if now < hint.expires {
            hint.rank
        } else {
            Priority::LOWEST.rank()
        }
    }

    /// Takes in the header of a response received at `now`; `false` if it did not parse
    /// (then the cut-off held stays, and the caller counts it).
    pub(crate) fn receive(&self, now: u64, value: &HeaderValue) -> bool {
        let now = Time::from_nanos(now);
        let mut feedback = self.feedback();
        let invalid = feedback.invalid();
        feedback.receive(now, Some(value.as_bytes()));
        let packed = feedback.hint(now).map_or(0, |hint| {
            let expires_us = hint.expires.as_nanos() / 1_000;
            (expires_us.min(u64::MAX >> 16) << 16) | u64::from(hint.rank)
        });
        self.packed.store(packed, Ordering::Relaxed);
        feedback.invalid() == invalid
    }
}

/// How long a cut-off the proxy says on its refusals holds.
pub(crate) const TTL: tidegate_core::Nanos = tidegate_core::Nanos::from_millis(250);

#[cfg(test)]
mod tests {
    use super::*;

    fn p(tier: u32, cohort: u32) -> Priority {
        Priority::new(tier, cohort).expect("valid")
    }

    #[test]
    fn holds_the_deepest_valid_cutoff_until_it_expires() {
        let cutoff = UpstreamCutoff::default();
        assert_eq!(cutoff.refuses(0, Priority::LOWEST, None), None);
        let now = 5_000_000_000;
        assert!(cutoff.receive(now, &HeaderValue::from_static("rank=127, ttl=1s")));
        assert_eq!(cutoff.refuses(now, p(1, 0), None), Some(127));
        assert_eq!(cutoff.refuses(now, p(0, 127), None), None);
        assert!(!cutoff.receive(now, &HeaderValue::from_static("rank=9000, ttl=1s")));
        // A looser one from another instance does not replace it while it holds.
        assert!(cutoff.receive(now, &HeaderValue::from_static("rank=400, ttl=1s")));
        assert_eq!(cutoff.refuses(now + 999_999_000, p(1, 0), None), Some(127));
        // A call of a chain admitted under a hint that admits it is sent.
        assert_eq!(cutoff.refuses(now, p(1, 0), Some(128)), None);
        assert_eq!(cutoff.refuses(now + 1_000_000_000, p(1, 0), None), None);
    }

    #[test]
    fn reopens_at_its_rate() {
        let cutoff = UpstreamCutoff::new(60.0);
        let now = 5_000_000_000;
        assert!(cutoff.receive(now, &HeaderValue::from_static("rank=127, ttl=250ms")));
        assert_eq!(cutoff.under(now), 127);
        // Lapsed at 250 ms; 750 ms after its last reading, 45 ranks more.
        let later = now + 750_000_000;
        assert_eq!(cutoff.refuses(later, p(1, 45), None), Some(172));
        assert_eq!(cutoff.refuses(later, p(1, 44), None), None);
    }
}

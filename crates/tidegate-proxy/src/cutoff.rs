//! An upstream's cut-off (`tidegate-cutoff`, `docs/feedback.md`): the proxy drops, before
//! its gate and before sending, the requests the upstream said it refuses for now, and says
//! its own gate's cut-off on the requests it sheds.
//!
//! Read on every request, so held in one atomic word rather than behind a lock: the rank in
//! the low 16 bits and the expiry, in microseconds on the proxy's clock, in the 48 above
//! (nine years of uptime).

use std::sync::atomic::{AtomicU64, Ordering};

use http::HeaderValue;
use tidegate_core::Priority;
use tidegate_core::feedback::CutoffHeader;

/// The header's name.
pub(crate) static HEADER: http::HeaderName =
    http::HeaderName::from_static(tidegate_core::feedback::HEADER);

/// The latest cut-off an upstream said, until it expires.
#[derive(Debug, Default)]
pub(crate) struct UpstreamCutoff {
    packed: AtomicU64,
}

impl UpstreamCutoff {
    /// The rank past which the upstream refuses, if it said one that holds at `now`
    /// (nanoseconds on the proxy's clock) and `priority` is past it.
    pub(crate) fn refuses(&self, now: u64, priority: Priority) -> Option<u16> {
        let packed = self.packed.load(Ordering::Relaxed);
        let (rank, expires_us) = ((packed & 0xffff) as u16, packed >> 16);
        (now / 1_000 < expires_us && priority.rank() > rank).then_some(rank)
    }

    /// Takes in the header of a response received at `now`; `false` if it did not parse
    /// (then the cut-off held stays, and the caller counts it).
    pub(crate) fn receive(&self, now: u64, value: &HeaderValue) -> bool {
        let Some(header) = value
            .to_str()
            .ok()
            .and_then(|v| v.parse::<CutoffHeader>().ok())
        else {
            return false;
        };
        let expires_us = now.saturating_add(header.ttl.as_nanos()) / 1_000;
        let packed = (expires_us.min(u64::MAX >> 16) << 16) | u64::from(header.rank);
        self.packed.store(packed, Ordering::Relaxed);
        true
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
    fn holds_the_last_valid_cutoff_until_it_expires() {
        let cutoff = UpstreamCutoff::default();
        assert_eq!(cutoff.refuses(0, Priority::LOWEST), None);
        let now = 5_000_000_000;
        assert!(cutoff.receive(now, &HeaderValue::from_static("rank=127, ttl=1s")));
        assert_eq!(cutoff.refuses(now, p(1, 0)), Some(127));
        assert_eq!(cutoff.refuses(now, p(0, 127)), None);
        assert!(!cutoff.receive(now, &HeaderValue::from_static("rank=9000, ttl=1s")));
        assert_eq!(cutoff.refuses(now + 999_999_000, p(1, 0)), Some(127));
        assert_eq!(cutoff.refuses(now + 1_000_000_000, p(1, 0)), None);
    }
}

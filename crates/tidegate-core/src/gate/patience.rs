//! How long callers wait for an answer, learnt from the ones that gave up.
//!
//! A request whose caller will have left before the service can answer it costs the service
//! a slot and answers nobody: under overload with callers who time out at twice the work
//! time, half the answers of a queue that let requests wait a whole work time came after
//! their callers had gone. The gate does not know a caller's timeout, but it sees callers
//! leave: a queued request cancelled, or the driver telling it that the caller of a request
//! in the service went away ([`crate::gate::Gate::caller_left`]). Where a good share of the
//! requests end that way, the time their callers waited is what callers wait, and a queued
//! request that has waited so long that the service's mean answer would come after it is
//! not worth its slot.
//!
//! Only a share of the requests tells it: one caller with a short timeout among many
//! patient ones (a health check) says nothing of the rest, and bounding everyone's wait by
//! it would turn them away for nothing.

use crate::time::{Nanos, Time};

/// The period over which the callers who left are counted against the requests that
/// completed.
const PERIOD: Nanos = Nanos::from_secs(1);

/// The share of the requests completed in a period (at least the callers who left, as a
/// queued request whose caller left never completes) that the callers who left are, from
/// which on their wait
/// is taken as what callers wait: the share of drops Autotune tolerates before it backs off
/// (a twentieth of the work thrown away is overload, not chance).
const LEFT_SHARE: f64 = 0.05;

/// How long a learnt patience holds after the last period that showed it: once the gate
/// stops sending doomed requests, callers stop leaving, and the patience must outlast the
/// quiet it makes by more than a moment (ten periods).
const MEMORY: Nanos = Nanos::from_secs(10);

/// The callers who left in the current period, and what they waited.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Patience {
    /// When the current period began, and how many requests had completed by then.
    start: Option<(Time, u64)>,
    left: u32,
    waited: f64,
    /// The mean wait of the callers who left, in seconds, and when a period last showed it.
    learnt: Option<(Time, f64)>,
}

impl Patience {
    /// A caller left at `now` after waiting `waited` since its request arrived; `completed`
    /// is how many requests the gate had seen complete by then.
    pub(super) fn left(&mut self, now: Time, waited: Nanos, completed: u64) {
        self.roll(now, completed);
        self.left += 1;
        self.waited += waited.as_secs_f64();
    }

    /// Closes the current period if it is over.
    fn roll(&mut self, now: Time, completed: u64) {
        let Some((start, completed_before)) = self.start else {
            self.start = Some((now, completed));
            return;
        };
        if now.saturating_since(start) < PERIOD {
            return;
        }
        let total = completed
            .saturating_sub(completed_before)
            .max(u64::from(self.left));
        if self.left >= 2 && f64::from(self.left) >= LEFT_SHARE * total as f64 {
            self.learnt = Some((now, self.waited / f64::from(self.left)));
        }
        self.start = Some((now, completed));
        self.left = 0;
        self.waited = 0.0;
    }

    /// What callers wait, in seconds, if a recent period showed it.
    pub(super) fn learnt(&self, now: Time) -> Option<f64> {
        self.learnt
            .filter(|&(at, _)| now.saturating_since(at) < MEMORY)
            .map(|(_, patience)| patience)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Time {
        Time::ZERO + Nanos::from_millis(ms)
    }

    #[test]
    fn callers_who_leave_often_set_the_patience_for_a_while() {
        let mut patience = Patience::default();
        // A tenth of 1,000 requests a second leave after 200 ms.
        for i in 0..=200u64 {
            patience.left(at(i * 10), Nanos::from_millis(200), i * 10);
        }
        let learnt = patience.learnt(at(2_000)).expect("a period showed it");
        assert!((learnt - 0.2).abs() < 1e-9, "{learnt}");
        assert!(patience.learnt(at(11_900)).is_some());
        assert_eq!(patience.learnt(at(12_100)), None);
    }

    #[test]
    fn a_few_impatient_callers_among_many_say_nothing() {
        let mut patience = Patience::default();
        // 1 in 100 leaves after 50 ms: a health check, not the callers.
        for i in 0..=300u64 {
            patience.left(at(i * 10), Nanos::from_millis(50), i * 100);
        }
        assert_eq!(patience.learnt(at(3_000)), None);
    }
}

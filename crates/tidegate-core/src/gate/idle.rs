//! How long a slot that frees waits for its next request: the service a gate loses by
//! turning arrivals away rather than queueing them.
//!
//! The wait bound ([`crate::gate::QueueConfig::wait_bound`]) turns away an arrival that
//! finds the slots full and would wait longer than the service's fastest answer. Without a
//! queue, a slot that frees then waits for the next arrival: in front of one worker of
//! exponential work offered three times what it serves, a third of a mean answer, a quarter
//! of the worker's time. The gate measures that wait as it happens, from a request's end
//! that leaves a slot free with nobody queued to the next arrival, so that what a queue
//! would save is known whether or not the gate queues (a queue that fills the freed slots
//! stops the measure, and keeps the last one, rather than reading its own effect as a
//! service that no longer idles).

use crate::time::Time;

/// The weight of each new wait in the mean: about the last 16 freed slots.
const WEIGHT: f64 = 1.0 / 16.0;

/// The mean wait of a freed slot for its next request.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct SlotIdle {
    /// When the slot waiting longest was freed, until the next arrival.
    freed: Option<Time>,
    /// The mean wait, in seconds.
    mean: Option<f64>,
}

impl SlotIdle {
    /// A request's end left a slot free at `now`, with nobody queued for it.
    pub(super) fn freed(&mut self, now: Time) {
        self.freed.get_or_insert(now);
    }

    /// A request arrived at `now`: the slot freed longest ago waited until now.
    pub(super) fn arrived(&mut self, now: Time) {
        if let Some(freed) = self.freed.take() {
            let wait = now.saturating_since(freed).as_secs_f64();
            self.mean = Some(self.mean.map_or(wait, |mean| mean + WEIGHT * (wait - mean)));
        }
    }

    /// Arrivals will take free slots unseen (lent to a lock-free front end): the slot freed
    /// last is not waiting for the next arrival the gate sees.
    pub(super) fn unseen(&mut self) {
        self.freed = None;
    }

    /// The mean wait of a freed slot, in seconds; `None` before one was measured.
    pub(super) fn mean(&self) -> Option<f64> {
        self.mean
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Nanos;

    fn t(ms: u64) -> Time {
        Time::ZERO + Nanos::from_millis(ms)
    }

    #[test]
    fn a_freed_slot_waits_until_the_next_arrival() {
        let mut idle = SlotIdle::default();
        idle.arrived(t(0));
        assert_eq!(idle.mean(), None, "no slot was freed");
        idle.freed(t(10));
        idle.freed(t(15));
        idle.arrived(t(40));
        assert_eq!(idle.mean(), Some(0.030), "from the first slot freed");
        idle.arrived(t(50));
        assert_eq!(idle.mean(), Some(0.030), "no slot was waiting");
        idle.freed(t(60));
        idle.arrived(t(60));
        assert!((idle.mean().unwrap() - 0.030 * 15.0 / 16.0).abs() < 1e-12);
    }

    #[test]
    fn slots_lent_away_wait_for_no_arrival_the_gate_sees() {
        let mut idle = SlotIdle::default();
        idle.freed(t(0));
        idle.unseen();
        idle.arrived(t(5_000));
        assert_eq!(idle.mean(), None);
    }
}

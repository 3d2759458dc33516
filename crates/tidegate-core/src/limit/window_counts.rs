//! What a measurement window of a limit counted: its answers, and the requests in flight as
//! each started. `Autotune` and `Bdp` close their windows by rules of their own, on the same
//! counts.

use super::Sample;
use crate::time::{Nanos, Time};

#[derive(Clone, Copy, Debug, Default)]
pub(super) struct WindowCounts {
    /// When the window opened.
    pub(super) start: Time,
    /// Answers: successes and drops.
    pub(super) samples: u32,
    pub(super) successes: u32,
    pub(super) drops: u32,
    /// The requests in flight as each answered request started, summed, and the most.
    pub(super) inflight_sum: u64,
    pub(super) inflight_max: u32,
}

impl WindowCounts {
    pub(super) fn open(start: Time) -> WindowCounts {
        WindowCounts {
            start,
            ..WindowCounts::default()
        }
    }

    /// Counts an answer (not an ignored sample); whether it was a success, in time for
    /// `timeout` (a success past it is a timeout that looks like one: a drop).
    pub(super) fn count(&mut self, sample: &Sample, timeout: Option<Nanos>) -> bool {
        self.samples += 1;
        self.inflight_sum += u64::from(sample.inflight);
        self.inflight_max = self.inflight_max.max(sample.inflight);
        let in_time = sample.in_time(timeout);
        if in_time {
            self.successes += 1;
        } else {
            self.drops += 1;
        }
        in_time
    }

    /// The mean requests in flight as the window's answers started.
    pub(super) fn mean_inflight(&self) -> f64 {
        self.inflight_sum as f64 / f64::from(self.samples.max(1))
    }
}

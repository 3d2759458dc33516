//! Two counters over a sliding window, kept in slices so that old counts fall out as time
//! moves on, at a fixed memory cost and O(1) per update (amortized over the slices passed).

use crate::time::{Nanos, Time};

/// Slices per window: the window slides a tenth of its length at a time.
const SLICES: usize = 10;

/// Two event counts (`a` and `b`) over the last `window` of time.
#[derive(Clone, Debug)]
pub(crate) struct WindowCounts {
    slice: u64,
    /// The number (time / slice) of the slice being filled.
    head: u64,
    slots: [[u64; 2]; SLICES],
    sums: [u64; 2],
}

impl WindowCounts {
    /// A window of `window` (at least `SLICES` nanoseconds).
    pub(crate) fn new(window: Nanos) -> WindowCounts {
        WindowCounts {
            slice: (window.as_nanos() / SLICES as u64).max(1),
            head: 0,
            slots: [[0; 2]; SLICES],
            sums: [0; 2],
        }
    }

    /// Forgets the slices that have left the window by `now`. A time earlier than the newest
    /// slice (an out-of-order reading from another thread) counts in the newest slice.
    fn advance(&mut self, now: Time) {
        let slice = now.as_nanos() / self.slice;
        if slice <= self.head {
            return;
        }
        let passed = (slice - self.head).min(SLICES as u64);
        for step in 1..=passed {
            let slot = &mut self.slots[((self.head + step) % SLICES as u64) as usize];
            self.sums[0] -= slot[0];
            self.sums[1] -= slot[1];
            *slot = [0; 2];
        }
        self.head = slice;
    }

    /// Counts `n` events of kind `which` (0 for `a`, 1 for `b`) at `now`.
    pub(crate) fn add(&mut self, now: Time, which: usize, n: u64) {
        self.advance(now);
        let slot = &mut self.slots[(self.head % SLICES as u64) as usize];
        slot[which] = slot[which].saturating_add(n);
        self.sums[which] = self.sums[which].saturating_add(n);
    }

    /// The counts `[a, b]` of the window ending at `now`.
    pub(crate) fn sums(&mut self, now: Time) -> [u64; 2] {
        self.advance(now);
        self.sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(millis: u64) -> Time {
        Time::from_nanos(millis * 1_000_000)
    }

    #[test]
    fn counts_fall_out_after_a_window() {
        let mut w = WindowCounts::new(Nanos::from_secs(1));
        w.add(at(0), 0, 5);
        w.add(at(450), 1, 2);
        w.add(at(950), 0, 1);
        assert_eq!(w.sums(at(999)), [6, 2]);
        // The slice of t = 0 (0-100 ms) leaves at 1 s, the one of 450 ms at 1.4 s.
        assert_eq!(w.sums(at(1_000)), [1, 2]);
        assert_eq!(w.sums(at(1_400)), [1, 0]);
        assert_eq!(w.sums(at(1_900)), [0, 0]);
    }

    #[test]
    fn a_long_silence_empties_it_and_late_readings_count_now() {
        let mut w = WindowCounts::new(Nanos::from_secs(10));
        w.add(at(5_000), 0, 3);
        assert_eq!(w.sums(at(60_000)), [0, 0]);
        w.add(at(59_000), 1, 1);
        assert_eq!(w.sums(at(60_000)), [0, 1]);
    }
}

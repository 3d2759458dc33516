//! The engine's pending events: a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990) over
//! nanosecond times, first in first out among events due at the same nanosecond.
//!
//! Why not `std::collections::BinaryHeap`: popping it was 29% of a run's time (a sift through
//! ~9 levels of hard-to-predict comparisons per event). The engine only ever schedules at or
//! after the time of the event it is handling, and a radix heap exploits exactly that: an event
//! goes into the bucket of the highest bit in which its time differs from the last popped time,
//! a push is an append, and a pop takes from bucket 0 (due now) or, when that is empty, moves the
//! first non-empty bucket's events down to lower buckets, each event moving down a few times in
//! its life, through plain sequential memory.
//!
//! **Ties.** The engine's outcome depends on the order of events due at the same nanosecond
//! (a regulator's tick and the end of a second both fall on round times), and that order was
//! defined as push order. Every bucket holds its events in push order: a push appends the
//! newest event; a bucket is only refilled while it is empty, from a single bucket whose
//! events are in push order, keeping their order. So the events of bucket 0, all due at the
//! same time, leave in push order, as the `(time, sequence)` heap ordered them.

use tidegate_core::Time;

/// Buckets 1..=64: bucket `b` holds events whose time first differs from the last popped
/// time at bit `b - 1`; bucket 0 (the `due` list) holds those due at the last popped time.
const BUCKETS: usize = 64;

/// Pending events of type `T`, popped in time order, in push order within a nanosecond.
/// Events may not be scheduled before the time of the last one popped.
#[derive(Debug)]
pub(super) struct Timeline<T> {
    /// The time of the last pop; every pending event is at or after it.
    last: u64,
    /// Events due at `last`, in push order; `due[next_due..]` are still pending.
    due: Vec<(u64, T)>,
    next_due: usize,
    buckets: [Vec<(u64, T)>; BUCKETS],
    /// Bit `b - 1` is set when bucket `b` is non-empty.
    occupied: u64,
}

impl<T: Copy> Timeline<T> {
    pub(super) fn new() -> Timeline<T> {
        Timeline {
            last: 0,
            due: Vec::new(),
            next_due: 0,
            buckets: std::array::from_fn(|_| Vec::new()),
            occupied: 0,
        }
    }

    /// Schedules `event` at `at`, after every event already scheduled at the same time.
    pub(super) fn push(&mut self, at: Time, event: T) {
        let at = at.as_nanos();
        debug_assert!(
            at >= self.last,
            "scheduled in the past: {at} < {}",
            self.last
        );
        // Clamped rather than trusted, so that a mistake shows up as a late event, not as a
        // broken order.
        let at = at.max(self.last);
        self.place(at, event);
    }

    /// The earliest event (the first pushed among the earliest), with its time.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<(Time, T)> {
        if self.next_due == self.due.len() {
            self.due.clear();
            self.next_due = 0;
            if self.occupied == 0 {
                return None;
            }
            let index = self.occupied.trailing_zeros() as usize;
            let bucket = &mut self.buckets[index];
            if bucket.len() == 1 {
                // The common case: the next event is alone in its bucket; it is due now.
                self.occupied &= !(1 << index);
                let (at, event) = bucket.pop()?;
                self.last = at;
                return Some((Time::from_nanos(at), event));
            }
            self.refill(index);
        }
        let &(at, event) = self.due.get(self.next_due)?;
        self.next_due += 1;
        Some((Time::from_nanos(at), event))
    }

    fn place(&mut self, at: u64, event: T) {
        let differ = at ^ self.last;
        if differ == 0 {
            self.due.push((at, event));
        } else {
            let b = (64 - differ.leading_zeros()) as usize; // 1..=64
            self.buckets[b - 1].push((at, event));
            self.occupied |= 1 << (b - 1);
        }
    }

    /// Moves the events of bucket `index`, the first non-empty one, to the buckets below it,
    /// relative to their earliest time, which becomes the last popped time.
    fn refill(&mut self, index: usize) {
        self.occupied &= !(1 << index);
        let mut moving = std::mem::take(&mut self.buckets[index]);
        self.last = moving.iter().map(|&(at, _)| at).min().unwrap_or(self.last);
        for (at, event) in moving.drain(..) {
            self.place(at, event);
        }
        // Keep the allocation for the bucket's next events.
        self.buckets[index] = moving;
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;

    use tidegate_core::rng::Rng;

    use super::*;

    /// Random schedules against the `(time, sequence)` binary heap the timeline replaced:
    /// the same events in the same order, ties included (times are drawn from a few values
    /// so that many events share a nanosecond).
    #[test]
    fn pops_in_the_order_of_a_time_and_sequence_heap() {
        let mut rng = Rng::seed(11);
        for round in 0..200 {
            let mut timeline = Timeline::new();
            let mut heap = BinaryHeap::new();
            let mut seq = 0u64;
            let mut now = 0u64;
            let spread = [1, 2, 16, 1 << 20, 1 << 40][round % 5];
            for _ in 0..2_000 {
                // Push a few (sometimes none), then pop one.
                for _ in 0..rng.range_inclusive(0, 3) {
                    let at = now + rng.range_inclusive(0, spread) as u64;
                    seq += 1;
                    timeline.push(Time::from_nanos(at), seq);
                    heap.push(Reverse((at, seq)));
                }
                let expected = heap
                    .pop()
                    .map(|Reverse((at, seq))| (Time::from_nanos(at), seq));
                let got = timeline.pop();
                assert_eq!(got, expected, "round {round}");
                if let Some((at, _)) = got {
                    now = at.as_nanos();
                }
            }
            while let Some(Reverse((at, seq))) = heap.pop() {
                assert_eq!(timeline.pop(), Some((Time::from_nanos(at), seq)));
            }
            assert_eq!(timeline.pop(), None);
        }
    }

    #[test]
    fn the_far_future_and_time_zero_work() {
        let mut timeline = Timeline::new();
        timeline.push(Time::MAX, 'z');
        timeline.push(Time::ZERO, 'a');
        timeline.push(Time::ZERO, 'b');
        assert_eq!(timeline.pop(), Some((Time::ZERO, 'a')));
        timeline.push(Time::ZERO, 'c');
        assert_eq!(timeline.pop(), Some((Time::ZERO, 'b')));
        assert_eq!(timeline.pop(), Some((Time::ZERO, 'c')));
        assert_eq!(timeline.pop(), Some((Time::MAX, 'z')));
        assert_eq!(timeline.pop(), None);
    }
}

//! The engine's pending events: a radix heap (Ahuja, Mehlhorn, Orlin and Tarjan, 1990) over
//! nanosecond times, ordered by `(time, sequence)`: the sequence is the order in which the
//! engine scheduled its events, so that events due at the same nanosecond happen in the order
//! they were scheduled.
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
//! (a regulator's tick and the end of a second both fall on round times). Events are pushed in
//! sequence order, and every bucket holds its events in push order: a push appends the newest
//! event; a bucket is only refilled while it is empty, from a single bucket whose events are in
//! push order, keeping their order. So the events of bucket 0, all due at the same time, leave
//! in sequence order, as a `(time, sequence)` heap orders them, without comparing sequences.

use tidegate_core::Time;

/// Buckets 1..=64: bucket `b` holds events whose time first differs from the last popped
/// time at bit `b - 1`; bucket 0 (the `due` list) holds those due at the last popped time.
const BUCKETS: usize = 64;

/// An event: its time in nanoseconds, its sequence number, and itself.
type Entry<T> = (u64, u64, T);

/// Pending events of type `T`, popped in `(time, sequence)` order. Events must be pushed in
/// increasing sequence order, and not before the time of the last one popped.
#[derive(Debug)]
pub(super) struct Timeline<T> {
    /// The time of the last pop; every pending event is at or after it.
    last: u64,
    /// Events due at `last`, in sequence order; `due[next_due..]` are still pending.
    due: Vec<Entry<T>>,
    next_due: usize,
    buckets: [Vec<Entry<T>>; BUCKETS],
    /// Bit `b - 1` is set when bucket `b` is non-empty.
    occupied: u64,
    /// The earliest event of the first non-empty bucket, `(bucket, time, sequence)`, once
    /// [`Timeline::peek`] has looked for it. Peeking must not move events to the due list:
    /// that would make their time the last popped one while the engine may still schedule
    /// events before it.
    first: Option<(usize, u64, u64)>,
}

impl<T: Copy> Timeline<T> {
    pub(super) fn new() -> Timeline<T> {
        Timeline {
            last: 0,
            due: Vec::new(),
            next_due: 0,
            buckets: std::array::from_fn(|_| Vec::new()),
            occupied: 0,
            first: None,
        }
    }

    /// Schedules `event` at `at`; `seq` is above that of every event pushed before.
    pub(super) fn push(&mut self, at: Time, seq: u64, event: T) {
        let at = at.as_nanos();
        debug_assert!(
            at >= self.last,
            "scheduled in the past: {at} < {}",
            self.last
        );
        // Clamped rather than trusted, so that a mistake shows up as a late event, not as a
        // broken order.
        let at = at.max(self.last);
        if let Some(bucket) = self.place((at, seq, event)) {
            self.first = match self.first {
                // An earlier event in the bucket peeked at (a later sequence loses ties).
                Some((first, first_at, _)) if bucket == first && at < first_at => {
                    Some((bucket, at, seq))
                }
                // A bucket below it, empty until now.
                Some((first, ..)) if bucket < first => Some((bucket, at, seq)),
                unchanged => unchanged,
            };
        }
    }

    /// The time and sequence number of the earliest event.
    #[inline]
    pub(super) fn peek(&mut self) -> Option<(Time, u64)> {
        if let Some(&(at, seq, _)) = self.due.get(self.next_due) {
            return Some((Time::from_nanos(at), seq));
        }
        if self.occupied == 0 {
            return None;
        }
        let bucket = self.occupied.trailing_zeros() as usize;
        let (at, seq) = match self.first {
            Some((first, at, seq)) if first == bucket => (at, seq),
            _ => {
                // The first of the earliest: the bucket is in sequence order.
                let (at, seq, _) = *self.buckets[bucket]
                    .iter()
                    .reduce(|a, b| if b.0 < a.0 { b } else { a })?;
                self.first = Some((bucket, at, seq));
                (at, seq)
            }
        };
        Some((Time::from_nanos(at), seq))
    }

    /// Removes the earliest event, with its time.
    #[inline]
    pub(super) fn pop(&mut self) -> Option<(Time, T)> {
        if self.next_due == self.due.len() {
            self.advance();
        }
        let &(at, _, event) = self.due.get(self.next_due)?;
        self.next_due += 1;
        Some((Time::from_nanos(at), event))
    }

    /// Fills the exhausted due list with the earliest pending events, if any.
    fn advance(&mut self) {
        self.due.clear();
        self.next_due = 0;
        self.first = None;
        if self.occupied == 0 {
            return;
        }
        let index = self.occupied.trailing_zeros() as usize;
        if self.buckets[index].len() == 1 {
            // The common case: the next event is alone in its bucket; it is due now.
            self.occupied &= !(1 << index);
            if let Some(entry) = self.buckets[index].pop() {
                self.last = entry.0;
                self.due.push(entry);
            }
        } else {
            self.refill(index);
        }
    }

    /// Puts an event in the due list or in its bucket; returns the bucket's index.
    fn place(&mut self, entry: Entry<T>) -> Option<usize> {
        let differ = entry.0 ^ self.last;
        if differ == 0 {
            self.due.push(entry);
            None
        } else {
            let index = (63 - differ.leading_zeros()) as usize; // bucket `index + 1`
            self.buckets[index].push(entry);
            self.occupied |= 1 << index;
            Some(index)
        }
    }

    /// Moves the events of bucket `index`, the first non-empty one, to the buckets below it,
    /// relative to their earliest time, which becomes the last popped time.
    fn refill(&mut self, index: usize) {
        self.occupied &= !(1 << index);
        let mut moving = std::mem::take(&mut self.buckets[index]);
        self.last = moving
            .iter()
            .map(|&(at, _, _)| at)
            .min()
            .unwrap_or(self.last);
        for &entry in &moving {
            self.place(entry);
        }
        // Keep the allocation for the bucket's next events.
        moving.clear();
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
    /// so that many events share a nanosecond), and pushes before an event peeked at.
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
                // Peek (sometimes), push a few (sometimes none) possibly before the peeked
                // event, then pop one.
                if rng.chance(0.5) {
                    let earliest = heap
                        .peek()
                        .map(|&Reverse((at, seq))| (Time::from_nanos(at), seq));
                    assert_eq!(timeline.peek(), earliest, "round {round}");
                }
                for _ in 0..rng.range_inclusive(0, 3) {
                    let at = now + rng.range_inclusive(0, spread) as u64;
                    seq += 1;
                    timeline.push(Time::from_nanos(at), seq, seq);
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
        timeline.push(Time::MAX, 1, 'z');
        timeline.push(Time::ZERO, 2, 'a');
        timeline.push(Time::ZERO, 3, 'b');
        assert_eq!(timeline.peek(), Some((Time::ZERO, 2)));
        assert_eq!(timeline.pop(), Some((Time::ZERO, 'a')));
        timeline.push(Time::ZERO, 4, 'c');
        assert_eq!(timeline.pop(), Some((Time::ZERO, 'b')));
        assert_eq!(timeline.pop(), Some((Time::ZERO, 'c')));
        assert_eq!(timeline.peek(), Some((Time::MAX, 1)));
        assert_eq!(timeline.pop(), Some((Time::MAX, 'z')));
        assert_eq!(timeline.peek(), None);
        assert_eq!(timeline.pop(), None);
    }
}

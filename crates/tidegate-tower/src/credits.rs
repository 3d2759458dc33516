//! The lent slots of a shared gate and the in-flight count they were lent at, in one atomic
//! word.
//!
//! A request that takes a lent slot reports how many requests were in flight with it: the
//! core's count at the last settle, less the slots still untaken. Kept in two atomics, that
//! is a compare-and-swap on one and a load of the other per request; in one 64-bit word (the
//! untaken slots in the low half, the settled count in the high half) the compare-and-swap
//! that takes the slot reads both.

use std::sync::atomic::{AtomicU64, Ordering};

/// The low half of the word: slots lent and not yet taken.
const SLOTS: u64 = u32::MAX as u64;

#[derive(Debug, Default)]
pub(crate) struct Credits {
    word: AtomicU64,
}

impl Credits {
    /// Takes a slot if there is one; returns the requests in flight counting the taker.
    #[inline]
    pub(crate) fn take(&self) -> Option<u32> {
        let before = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                (word & SLOTS != 0).then(|| word - 1)
            })
            .ok()?;
        Some(settled(before).saturating_sub(slots(before)) + 1)
    }

    /// A request that held a slot ended: the slot can be taken again.
    #[inline]
    pub(crate) fn give_back(&self) {
        // The slots never exceed the gate's limit (a u32), so the low half cannot carry.
        self.word.fetch_add(1, Ordering::AcqRel);
    }

    /// Slots lent and not taken.
    pub(crate) fn available(&self) -> u32 {
        slots(self.word.load(Ordering::Acquire))
    }

    /// Takes every untaken slot back; returns how many there were.
    pub(crate) fn reclaim(&self) -> u32 {
        let before = self.word.fetch_and(!SLOTS, Ordering::AcqRel);
        slots(before)
    }

    /// After a settle: `lent` more slots are lent, and the core counts `inflight` requests
    /// in flight, lent slots included.
    pub(crate) fn settle(&self, lent: u32, inflight: u32) {
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some(u64::from(inflight) << 32 | u64::from(slots(word) + lent))
            });
    }
}

fn slots(word: u64) -> u32 {
    (word & SLOTS) as u32
}

fn settled(word: u64) -> u32 {
    (word >> 32) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_slot_reports_the_settled_count_less_the_untaken_slots() {
        let credits = Credits::default();
        assert_eq!(credits.take(), None);
        // Three requests in flight through the core, five slots lent: eight in all.
        credits.settle(5, 8);
        assert_eq!(credits.available(), 5);
        assert_eq!(credits.take(), Some(4));
        assert_eq!(credits.take(), Some(5));
        credits.give_back();
        assert_eq!(credits.take(), Some(5));
        assert_eq!(credits.available(), 3);
        assert_eq!(credits.reclaim(), 3);
        assert_eq!(credits.take(), None);
        // The settled count survives a reclaim and is replaced by the next settle.
        credits.give_back();
        assert_eq!(credits.take(), Some(8));
        credits.settle(2, 4);
        assert_eq!(credits.take(), Some(3));
        assert_eq!(credits.take(), Some(4));
        assert_eq!(credits.take(), None);
    }
}

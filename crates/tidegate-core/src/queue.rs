//! The gate's waiting room: one FIFO per priority rank, 768 of them, with a bitmap of the
//! non-empty ones.
//!
//! Finding the most important waiting entry is a scan of 12 words for the first set bit, so
//! push, pop and cancel are O(1) whatever the queue length. Entries live in a slab and each
//! rank's FIFO is a doubly linked list through it, so that a caller that goes away can remove
//! its entry from the middle without a search. Each entry has a deadline, and the expired ones
//! are found without scanning: when the entries share one timeout, as they do unless a caller
//! brings its own, deadlines come in increasing order and wait in a FIFO (a push and a pop at
//! its ends); a deadline that would break that order waits in a min-heap instead, and the
//! earliest is the lesser of the two fronts. Both keep the entries that left early until they
//! reach the front (lazy deletion, compacted when mostly stale).
//!
//! Within a rank, entries leave in arrival order (FIFO) or, under sustained overload, newest
//! first (adaptive LIFO, as Facebook's servers do): when the queue has stood for a while, the
//! oldest entries are the ones most likely to be past their caller's patience, and serving the
//! newest gives the freshest requests a real chance instead of serving everyone too late.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use crate::priority::{Priority, RANKS};
use crate::time::{Nanos, Time};

const NONE: u32 = u32::MAX;
const WORDS: usize = RANKS.div_ceil(64);
const _: () = assert!(WORDS <= 16, "a bit per word of ranks in `nonempty_words`");

/// A handle on a queued entry. Stale handles (the entry already left) are recognised, never
/// confused with a newer entry in the same slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Ticket {
    index: u32,
    generation: u32,
}

impl Ticket {
    /// A number unique among the tickets alive at the same time, for a caller's maps.
    pub fn id(self) -> u64 {
        u64::from(self.generation) << 32 | u64::from(self.index)
    }

    /// The queue slot the entry occupies: below the most entries the queue ever held at once,
    /// and reused once the entry leaves, so that a caller can keep a table indexed by it
    /// instead of a map (telling a reused slot's tickets apart by the whole ticket).
    pub fn slot(self) -> usize {
        self.index as usize
    }
}

/// What the queue holds about one waiting request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub priority: Priority,
    pub enqueued: Time,
    pub deadline: Time,
}

#[derive(Clone, Debug)]
struct Slot {
    generation: u32,
    /// `None` while the slot is free.
    entry: Option<Entry>,
    prev: u32,
    /// Next in the rank's list while occupied; next free slot while free.
    next: u32,
}

/// Which end of a rank's FIFO to serve from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    /// Oldest first.
    Fifo,
    /// Newest first.
    Lifo,
}

/// A priority queue over the 768 ranks with per-entry deadlines.
#[derive(Clone, Debug)]
pub struct PriorityQueue {
    slots: Vec<Slot>,
    free_head: u32,
    heads: Box<[u32; RANKS]>,
    tails: Box<[u32; RANKS]>,
    nonempty: [u64; WORDS],
    /// Bit `w` is set while word `w` of `nonempty` is not zero: the first and last ranks are
    /// found from it without a scan over the words (every pop looks for one).
    nonempty_words: u16,
    deadlines: Deadlines,
    len: usize,
}

/// A deadline in the queue: when, and the slot and generation of the entry it belongs to
/// (ties between equal deadlines go to the lower slot).
type DeadlineKey = (Time, u32, u32);

/// The deadlines of the waiting entries (and of some that left, skipped when they reach the
/// front), earliest first. Each key is in one of two places: `in_order` holds keys in
/// increasing order, so that the common case of one timeout for all is a push at the back and
/// a pop at the front; a key less than the last one there goes to `out_of_order`, a min-heap.
/// The earliest key is the lesser of the two fronts, so keys come out in the same order as
/// from one heap of them all.
#[derive(Clone, Debug, Default)]
struct Deadlines {
    in_order: VecDeque<DeadlineKey>,
    out_of_order: BinaryHeap<Reverse<DeadlineKey>>,
}

impl Deadlines {
    fn len(&self) -> usize {
        self.in_order.len() + self.out_of_order.len()
    }

    fn push(&mut self, key: DeadlineKey) {
        match self.in_order.back() {
            Some(&last) if key < last => self.out_of_order.push(Reverse(key)),
            _ => self.in_order.push_back(key),
        }
    }

    fn peek(&self) -> Option<DeadlineKey> {
        let heap = self.out_of_order.peek().map(|&Reverse(key)| key);
        match (self.in_order.front().copied(), heap) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Removes the key [`Deadlines::peek`] returned.
    fn pop(&mut self) {
        let heap = self.out_of_order.peek().map(|&Reverse(key)| key);
        match (self.in_order.front(), heap) {
            (Some(&a), Some(b)) if b < a => {
                self.out_of_order.pop();
            }
            (Some(_), _) => {
                self.in_order.pop_front();
            }
            (None, _) => {
                self.out_of_order.pop();
            }
        }
    }

    fn retain(&mut self, mut keep: impl FnMut(&DeadlineKey) -> bool) {
        self.in_order.retain(&mut keep);
        self.out_of_order.retain(|Reverse(key)| keep(key));
    }
}

impl Default for PriorityQueue {
    fn default() -> PriorityQueue {
        PriorityQueue::new()
    }
}

impl PriorityQueue {
    pub fn new() -> PriorityQueue {
        PriorityQueue {
            slots: Vec::new(),
            free_head: NONE,
            heads: Box::new([NONE; RANKS]),
            tails: Box::new([NONE; RANKS]),
            nonempty: [0; WORDS],
            nonempty_words: 0,
            deadlines: Deadlines::default(),
            len: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds an entry at the back of its rank's FIFO.
    pub fn push(&mut self, entry: Entry) -> Ticket {
        let index = match self.free_head {
            NONE => {
                self.slots.push(Slot {
                    generation: 0,
                    entry: None,
                    prev: NONE,
                    next: NONE,
                });
                (self.slots.len() - 1) as u32
            }
            free => {
                self.free_head = self.slots[free as usize].next;
                free
            }
        };
        let rank = entry.priority.rank() as usize;
        let tail = self.tails[rank];
        let slot = &mut self.slots[index as usize];
        slot.entry = Some(entry);
        slot.prev = tail;
        slot.next = NONE;
        let generation = slot.generation;
        match tail {
            NONE => {
                self.heads[rank] = index;
                self.nonempty[rank / 64] |= 1 << (rank % 64);
                self.nonempty_words |= 1 << (rank / 64);
            }
            tail => self.slots[tail as usize].next = index,
        }
        self.tails[rank] = index;
        self.len += 1;
        if entry.deadline < Time::MAX {
            self.deadlines.push((entry.deadline, index, generation));
            self.compact_deadlines();
        }
        Ticket { index, generation }
    }

    /// Removes and returns the most important entry (lowest rank), from the front of its FIFO
    /// or, with [`Order::Lifo`], from the back.
    pub fn pop(&mut self, order: Order) -> Option<(Ticket, Entry)> {
        let rank = self.first_rank()?;
        let index = match order {
            Order::Fifo => self.heads[rank],
            Order::Lifo => self.tails[rank],
        };
        self.take(index)
    }

    /// Removes and returns the least important entry, newest first: the one to give up when
    /// the queue is full and something more important arrives.
    pub fn pop_least_important(&mut self) -> Option<(Ticket, Entry)> {
        let rank = self.last_rank()?;
        self.take(self.tails[rank])
    }

    /// The most important rank waiting, if any.
    pub fn most_important(&self) -> Option<Priority> {
        self.first_rank()
            .and_then(|r| Priority::from_rank(r as u16))
    }

    /// The least important rank waiting, if any.
    pub fn least_important(&self) -> Option<Priority> {
        self.last_rank().and_then(|r| Priority::from_rank(r as u16))
    }

    /// Removes the entry of `ticket`, if it is still queued.
    pub fn remove(&mut self, ticket: Ticket) -> Option<Entry> {
        let slot = self.slots.get(ticket.index as usize)?;
        if slot.generation != ticket.generation || slot.entry.is_none() {
            return None;
        }
        self.take(ticket.index).map(|(_, entry)| entry)
    }

    /// The entry of `ticket`, if it is still queued.
    pub fn get(&self, ticket: Ticket) -> Option<&Entry> {
        let slot = self.slots.get(ticket.index as usize)?;
        if slot.generation != ticket.generation {
            return None;
        }
        slot.entry.as_ref()
    }

    /// Whether `ticket`'s entry is still queued.
    pub fn contains(&self, ticket: Ticket) -> bool {
        self.slots
            .get(ticket.index as usize)
            .is_some_and(|s| s.generation == ticket.generation && s.entry.is_some())
    }

    /// Removes and returns one entry whose deadline is at or before `now`, earliest first.
    pub fn pop_expired(&mut self, now: Time) -> Option<(Ticket, Entry)> {
        while let Some((deadline, index, generation)) = self.deadlines.peek() {
            if deadline > now {
                return None;
            }
            self.deadlines.pop();
            if self.contains(Ticket { index, generation }) {
                return self.take(index);
            }
        }
        None
    }

    /// The earliest deadline among the waiting entries.
    pub fn earliest_deadline(&mut self) -> Option<Time> {
        while let Some((deadline, index, generation)) = self.deadlines.peek() {
            if self.contains(Ticket { index, generation }) {
                return Some(deadline);
            }
            self.deadlines.pop();
        }
        None
    }

    /// How long the oldest waiting entry has waited. Each rank's head is its oldest entry, so
    /// this looks at one entry per non-empty rank.
    pub fn oldest_wait(&self, now: Time) -> Nanos {
        now - self
            .heads()
            .map(|(_, head)| head.enqueued)
            .fold(now, Time::min)
    }

    /// The most important rank with an entry waiting since `since` or before, if any: a
    /// rank the queue is starving. Each rank's head is its oldest entry, so this looks at
    /// one entry per non-empty rank, most important first, and stops at the first that has
    /// waited that long; it runs where a gate tells its cut-off, not on admission.
    pub fn most_important_since(&self, since: Time) -> Option<Priority> {
        let (rank, _) = self.heads().find(|(_, head)| head.enqueued <= since)?;
        Priority::from_rank(rank as u16)
    }

    /// The head (oldest entry) of each non-empty rank, with its rank, most important first.
    fn heads(&self) -> impl Iterator<Item = (usize, &Entry)> {
        let mut words = self.nonempty_words;
        let mut word_index = 0;
        let mut bits = 0u64;
        std::iter::from_fn(move || {
            while bits == 0 {
                if words == 0 {
                    return None;
                }
                word_index = words.trailing_zeros() as usize;
                words &= words - 1;
                bits = self.nonempty[word_index];
            }
            let rank = word_index * 64 + bits.trailing_zeros() as usize;
            bits &= bits - 1;
            Some(rank)
        })
        .filter_map(|rank| {
            let head = self.slots[self.heads[rank] as usize].entry.as_ref()?;
            Some((rank, head))
        })
    }

    fn first_rank(&self) -> Option<usize> {
        let words = self.nonempty_words;
        (words != 0).then(|| {
            let i = words.trailing_zeros() as usize;
            i * 64 + self.nonempty[i].trailing_zeros() as usize
        })
    }

    fn last_rank(&self) -> Option<usize> {
        let words = self.nonempty_words;
        (words != 0).then(|| {
            let i = 15 - words.leading_zeros() as usize;
            i * 64 + 63 - self.nonempty[i].leading_zeros() as usize
        })
    }

    /// Unlinks the occupied slot `index` and frees it.
    fn take(&mut self, index: u32) -> Option<(Ticket, Entry)> {
        let slot = &mut self.slots[index as usize];
        let entry = slot.entry.take()?;
        let (prev, next) = (slot.prev, slot.next);
        let ticket = Ticket {
            index,
            generation: slot.generation,
        };
        slot.generation = slot.generation.wrapping_add(1);
        slot.next = self.free_head;
        slot.prev = NONE;
        self.free_head = index;

        let rank = entry.priority.rank() as usize;
        match prev {
            NONE => self.heads[rank] = next,
            prev => self.slots[prev as usize].next = next,
        }
        match next {
            NONE => self.tails[rank] = prev,
            next => self.slots[next as usize].prev = prev,
        }
        if self.heads[rank] == NONE {
            self.nonempty[rank / 64] &= !(1 << (rank % 64));
            if self.nonempty[rank / 64] == 0 {
                self.nonempty_words &= !(1 << (rank / 64));
            }
        }
        self.len -= 1;
        Some((ticket, entry))
    }

    /// Entries that leave by `pop` or `remove` leave their deadline behind; they are skipped
    /// when they reach the front. Dropping them when stale keys outnumber live ones keeps the
    /// deadlines within twice the queue length (plus slack), whether or not deadlines
    /// are ever polled.
    fn compact_deadlines(&mut self) {
        if self.deadlines.len() <= 2 * self.len + 64 {
            return;
        }
        let slots = &self.slots;
        self.deadlines.retain(|(_, index, generation)| {
            let slot = &slots[*index as usize];
            slot.generation == *generation && slot.entry.is_some()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tier: u32, cohort: u32, enqueued: u64, deadline: u64) -> Entry {
        Entry {
            priority: Priority::new(tier, cohort).expect("valid"),
            enqueued: Time::from_nanos(enqueued),
            deadline: Time::from_nanos(deadline),
        }
    }

    #[test]
    fn pops_most_important_first_fifo_within_a_rank() {
        let mut q = PriorityQueue::new();
        let a = q.push(entry(3, 0, 1, 100));
        let b = q.push(entry(1, 5, 2, 100));
        let c = q.push(entry(1, 5, 3, 100));
        let d = q.push(entry(5, 127, 4, 100));
        let e = q.push(entry(0, 127, 5, 100));
        let order: Vec<Ticket> =
            std::iter::from_fn(|| q.pop(Order::Fifo).map(|(t, _)| t)).collect();
        assert_eq!(order, vec![e, b, c, a, d]);
        assert!(q.is_empty());
    }

    #[test]
    fn lifo_serves_newest_first_within_a_rank_but_still_by_rank() {
        let mut q = PriorityQueue::new();
        let a = q.push(entry(1, 0, 1, 100));
        let b = q.push(entry(1, 0, 2, 100));
        let c = q.push(entry(2, 0, 3, 100));
        assert_eq!(q.pop(Order::Lifo).map(|(t, _)| t), Some(b));
        assert_eq!(q.pop(Order::Lifo).map(|(t, _)| t), Some(a));
        assert_eq!(q.pop(Order::Lifo).map(|(t, _)| t), Some(c));
    }

    #[test]
    fn remove_from_the_middle_and_stale_tickets() {
        let mut q = PriorityQueue::new();
        let a = q.push(entry(2, 2, 1, 100));
        let b = q.push(entry(2, 2, 2, 100));
        let c = q.push(entry(2, 2, 3, 100));
        assert_eq!(q.remove(b).map(|e| e.enqueued), Some(Time::from_nanos(2)));
        assert_eq!(q.remove(b), None, "a ticket is good once");
        let d = q.push(entry(2, 2, 4, 100)); // reuses b's slot
        assert_ne!(b, d);
        assert!(!q.contains(b) && q.contains(d));
        assert_eq!(q.get(b), None);
        assert_eq!(q.get(d).map(|e| e.enqueued), Some(Time::from_nanos(4)));
        let order: Vec<Ticket> =
            std::iter::from_fn(|| q.pop(Order::Fifo).map(|(t, _)| t)).collect();
        assert_eq!(order, vec![a, c, d]);
    }

    #[test]
    fn least_important_is_the_newest_of_the_lowest_rank() {
        let mut q = PriorityQueue::new();
        q.push(entry(0, 0, 1, 100));
        let low_old = q.push(entry(4, 9, 2, 100));
        let low_new = q.push(entry(4, 9, 3, 100));
        assert_eq!(q.least_important(), Priority::new(4, 9).ok());
        assert_eq!(q.pop_least_important().map(|(t, _)| t), Some(low_new));
        assert_eq!(q.pop_least_important().map(|(t, _)| t), Some(low_old));
        assert_eq!(q.most_important(), Some(Priority::HIGHEST));
    }

    #[test]
    fn expiry_in_deadline_order_skips_departed_entries() {
        let mut q = PriorityQueue::new();
        let late = q.push(entry(0, 0, 0, 50));
        let gone = q.push(entry(5, 0, 0, 10));
        let early = q.push(entry(3, 0, 0, 20));
        q.remove(gone);
        assert_eq!(q.earliest_deadline(), Some(Time::from_nanos(20)));
        assert_eq!(q.pop_expired(Time::from_nanos(19)), None);
        assert_eq!(
            q.pop_expired(Time::from_nanos(60)).map(|(t, _)| t),
            Some(early)
        );
        assert_eq!(
            q.pop_expired(Time::from_nanos(60)).map(|(t, _)| t),
            Some(late)
        );
        assert_eq!(q.pop_expired(Time::from_nanos(60)), None);
        assert_eq!(q.earliest_deadline(), None);
    }

    /// Deadlines mostly in order (one timeout), some earlier (a caller's own), ties, and
    /// entries leaving early: what expires, and in what order, is what one heap of all the
    /// deadlines gives (the earliest live entry, the lower slot first on a tie).
    #[test]
    fn expiry_order_with_deadlines_in_and_out_of_order() {
        let mut rng = crate::rng::Rng::seed(11);
        let mut q = PriorityQueue::new();
        let mut waiting: Vec<(Ticket, Time)> = Vec::new();
        let mut now = 0u64;
        let (mut expired, mut out_of_order) = (0, 0);
        for _ in 0..20_000 {
            now += rng.range_inclusive(0, 3) as u64;
            match rng.range_inclusive(0, 9) {
                0..=4 => {
                    let own_timeout = rng.chance(0.1);
                    out_of_order += usize::from(own_timeout);
                    let timeout = if own_timeout {
                        rng.range_inclusive(0, 60) as u64
                    } else {
                        50
                    };
                    let rank = rng.range_inclusive(0, 3) as u32;
                    let ticket = q.push(entry(rank, 0, now, now + timeout));
                    waiting.push((ticket, Time::from_nanos(now + timeout)));
                }
                5 => {
                    if let Some((ticket, _)) = q.pop(Order::Fifo) {
                        waiting.retain(|(t, _)| *t != ticket);
                    }
                }
                6 if !waiting.is_empty() => {
                    let i = rng.range_inclusive(0, waiting.len() as i64 - 1) as usize;
                    let (ticket, _) = waiting.swap_remove(i);
                    assert!(q.remove(ticket).is_some());
                }
                _ => {
                    let now = Time::from_nanos(now);
                    let earliest = waiting.iter().map(|&(t, d)| (d, t.slot())).min();
                    assert_eq!(q.earliest_deadline(), earliest.map(|(d, _)| d));
                    loop {
                        let due = earliest_due(&waiting, now);
                        let got = q.pop_expired(now).map(|(t, _)| t);
                        assert_eq!(got, due);
                        let Some(ticket) = got else { break };
                        waiting.retain(|(t, _)| *t != ticket);
                        expired += 1;
                    }
                }
            }
        }
        assert!(
            expired > 1_000 && out_of_order > 500,
            "{expired} {out_of_order}"
        );
    }

    fn earliest_due(waiting: &[(Ticket, Time)], now: Time) -> Option<Ticket> {
        let (ticket, deadline) = waiting
            .iter()
            .copied()
            .min_by_key(|&(t, d)| (d, t.slot()))?;
        (deadline <= now).then_some(ticket)
    }

    /// The most and least important ranks waiting, and the oldest wait, follow a model through
    /// random pushes over all 768 ranks, pops from both ends and removals.
    #[test]
    fn first_and_last_ranks_follow_a_model_over_all_ranks() {
        let mut rng = crate::rng::Rng::seed(5);
        let mut q = PriorityQueue::new();
        let mut waiting: Vec<(Ticket, u16, u64)> = Vec::new();
        for step in 0..20_000u64 {
            match rng.range_inclusive(0, 5) {
                0..=2 => {
                    // Mostly a few ranks in a few words, sometimes any rank.
                    let (tier, cohort) = if rng.chance(0.2) {
                        (rng.range_inclusive(0, 5), rng.range_inclusive(0, 127))
                    } else {
                        (
                            2 * rng.range_inclusive(0, 2),
                            64 * rng.range_inclusive(0, 1),
                        )
                    };
                    let e = entry(tier as u32, cohort as u32, step, step + 1_000);
                    let rank = e.priority.rank();
                    waiting.push((q.push(e), rank, step));
                }
                3 => {
                    if let Some((ticket, _)) = q.pop(Order::Fifo) {
                        waiting.retain(|(t, ..)| *t != ticket);
                    }
                }
                4 => {
                    if let Some((ticket, _)) = q.pop_least_important() {
                        waiting.retain(|(t, ..)| *t != ticket);
                    }
                }
                _ if !waiting.is_empty() => {
                    let i = rng.range_inclusive(0, waiting.len() as i64 - 1) as usize;
                    let (ticket, ..) = waiting.swap_remove(i);
                    assert!(q.remove(ticket).is_some());
                }
                _ => {}
            }
            let ranks = || waiting.iter().map(|&(_, r, _)| r);
            let rank_of = |p: Option<Priority>| p.map(|p| p.rank());
            assert_eq!(rank_of(q.most_important()), ranks().min(), "step {step}");
            assert_eq!(rank_of(q.least_important()), ranks().max(), "step {step}");
            let oldest = waiting.iter().map(|&(.., at)| at).min().unwrap_or(step + 1);
            let now = Time::from_nanos(step + 1);
            assert_eq!(q.oldest_wait(now), now - Time::from_nanos(oldest));
        }
    }

    #[test]
    fn oldest_wait_looks_across_ranks() {
        let mut q = PriorityQueue::new();
        assert_eq!(q.oldest_wait(Time::from_nanos(9)), Nanos::ZERO);
        q.push(entry(0, 0, 7, 100));
        q.push(entry(5, 127, 3, 100));
        q.push(entry(2, 64, 5, 100));
        assert_eq!(q.oldest_wait(Time::from_nanos(10)), Nanos::from_nanos(7));
    }

    #[test]
    fn most_important_since_finds_the_first_rank_whose_oldest_waited_that_long() {
        let mut q = PriorityQueue::new();
        q.push(entry(1, 0, 200, 1_000));
        q.push(entry(2, 3, 100, 1_000));
        q.push(entry(2, 3, 150, 1_000));
        q.push(entry(4, 0, 50, 1_000));
        let rank = |q: &PriorityQueue, since| q.most_important_since(Time::from_nanos(since));
        assert_eq!(rank(&q, 49), None, "nobody waits since 49");
        assert_eq!(rank(&q, 50), Priority::new(4, 0).ok());
        assert_eq!(
            rank(&q, 100),
            Priority::new(2, 3).ok(),
            "its head waits since 100"
        );
        assert_eq!(rank(&q, 200), Priority::new(1, 0).ok());
        // Newest first within a rank still leaves the oldest at the head.
        q.pop(Order::Lifo);
        q.pop(Order::Lifo);
        assert_eq!(rank(&q, 100), Priority::new(2, 3).ok());
        q.pop(Order::Lifo);
        assert_eq!(rank(&q, 100), Priority::new(4, 0).ok());
        q.pop(Order::Lifo);
        assert_eq!(rank(&q, u64::MAX), None, "empty");
    }

    #[test]
    fn deadline_heap_stays_bounded_without_polling() {
        let mut q = PriorityQueue::new();
        for i in 0..100_000 {
            q.push(entry(1, 1, i, i + 1_000));
            q.pop(Order::Fifo);
        }
        assert!(
            q.deadlines.len() <= 2 * q.len() + 65,
            "{}",
            q.deadlines.len()
        );
        assert!(q.slots.len() == 1, "slots are reused");
    }

    #[test]
    fn every_rank_works_including_word_boundaries() {
        let mut q = PriorityQueue::new();
        for rank in (0..RANKS as u16).rev() {
            let p = Priority::from_rank(rank).expect("valid");
            q.push(Entry {
                priority: p,
                enqueued: Time::ZERO,
                deadline: Time::MAX,
            });
        }
        for rank in 0..RANKS as u16 {
            assert_eq!(
                q.pop(Order::Fifo).map(|(_, e)| e.priority.rank()),
                Some(rank)
            );
        }
        assert_eq!(q.pop(Order::Fifo), None);
    }
}

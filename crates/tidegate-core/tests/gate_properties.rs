//! Property tests of the gate's accounting over random sequences of operations.
//!
//! A model tracks the callers' side (who holds a permit, who waits with which deadline); after
//! every operation the gate must agree with it and keep its invariants:
//! - it admits only into a free slot: after a call that admitted anything, in flight <= limit;
//! - after a call, the queue is empty or the service is full (nobody waits for a free slot);
//! - no entry whose deadline has passed survives a tick, or is admitted;
//! - every arrival is accounted for: `arrived == ended + in flight + queued`, per tier;
//! - every queued ticket gets exactly one event, or is cancelled, never both;
//! - slots lent to a lock-free front end never exceed the limit, are counted in flight from
//!   the moment they are lent, and count as arrivals when they come back.

use std::collections::HashMap;

use proptest::prelude::*;
use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_core::gate::{Arrival, Event, Gate, Lease, LentPermit, Permit, QueueConfig};
use tidegate_core::limit::{Limit, Outcome, Sample};
use tidegate_core::queue::Ticket;
use tidegate_core::regulator::{QueueStats, Regulator, RegulatorState, Verdict};
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Priority, Time};

/// A limit that jumps between 1 and 6 on every sample, to exercise shrinking below in-flight.
#[derive(Debug)]
struct Jumpy(Rng, u32);

impl Limit for Jumpy {
    fn limit(&self) -> u32 {
        self.1
    }
    fn on_sample(&mut self, _: &Sample) {
        self.1 = 1 + (self.0.next_u64() % 6) as u32;
    }
}

/// Rejects a tenth of arrivals and of dequeues at random.
#[derive(Debug)]
struct Coin(Rng, Time);

impl Regulator for Coin {
    fn on_arrival(&mut self, _: Time, _: Priority, _: usize) -> Verdict {
        if self.0.chance(0.1) {
            Verdict::Reject
        } else {
            Verdict::Admit
        }
    }
    fn on_dequeue(&mut self, _: Time, _: Nanos, _: Priority, _: usize) -> Verdict {
        if self.0.chance(0.1) {
            Verdict::Reject
        } else {
            Verdict::Admit
        }
    }
    fn tick(&mut self, now: Time, _: &QueueStats) {
        self.1 = now + Nanos::from_millis(7);
    }
    fn next_tick(&self) -> Time {
        self.1
    }
    fn state(&self) -> RegulatorState {
        RegulatorState::default()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Arrive {
        tier: u32,
        cohort: u32,
        timeout_ms: u64,
    },
    Complete {
        which: usize,
        outcome: u8,
    },
    CancelPermit {
        which: usize,
    },
    Cancel {
        which: usize,
    },
    Advance {
        ms: u64,
    },
    /// Time passes without a tick, as when a driver's timer fires late.
    Wait {
        ms: u64,
    },
    Lease {
        allowed: u32,
        ttl_ms: u64,
    },
    /// The lock-free front end asks for the free slots.
    Lend,
    /// An arrival takes a lent slot, if the front end holds one.
    FastArrive {
        tier: u32,
    },
    CompleteLent {
        which: usize,
        outcome: u8,
    },
    CancelLent {
        which: usize,
    },
    /// A lent request ends and the front end keeps its slot (`None`: cancelled).
    RecordLent {
        which: usize,
        outcome: Option<u8>,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0..6u32, 0..128u32, 1..200u64).prop_map(|(tier, cohort, timeout_ms)| Op::Arrive { tier, cohort, timeout_ms }),
        3 => (any::<usize>(), 0..3u8).prop_map(|(which, outcome)| Op::Complete { which, outcome }),
        1 => any::<usize>().prop_map(|which| Op::CancelPermit { which }),
        1 => any::<usize>().prop_map(|which| Op::Cancel { which }),
        2 => (0..60u64).prop_map(|ms| Op::Advance { ms }),
        1 => (0..60u64).prop_map(|ms| Op::Wait { ms }),
        1 => (0..5u32, 0..100u64).prop_map(|(allowed, ttl_ms)| Op::Lease { allowed, ttl_ms }),
        1 => Just(Op::Lend),
        2 => (0..6u32).prop_map(|tier| Op::FastArrive { tier }),
        2 => (any::<usize>(), 0..3u8).prop_map(|(which, outcome)| Op::CompleteLent { which, outcome }),
        1 => any::<usize>().prop_map(|which| Op::CancelLent { which }),
        2 => (any::<usize>(), prop::option::of(0..3u8)).prop_map(|(which, outcome)| Op::RecordLent { which, outcome }),
    ]
}

#[derive(Default)]
struct Model {
    permits: Vec<Permit>,
    /// Lent slots the front end holds, unused.
    credits: u32,
    /// Lent slots in use.
    lent: Vec<LentPermit>,
    /// Queued tickets: deadline and tier.
    waiting: HashMap<Ticket, (Time, u8)>,
}

impl Model {
    /// Delivers the gate's events; returns whether anything was admitted.
    fn drain(&mut self, gate: &mut Gate, now: Time) -> Result<bool, TestCaseError> {
        let mut admitted = false;
        while let Some(event) = gate.poll_event() {
            let ticket = match &event {
                Event::Admitted { ticket, .. }
                | Event::Expired { ticket }
                | Event::Rejected { ticket, .. } => *ticket,
            };
            let Some((deadline, _)) = self.waiting.remove(&ticket) else {
                return Err(TestCaseError::fail(format!(
                    "event for a ticket not waiting: {event:?}"
                )));
            };
            if let Event::Admitted { permit, .. } = event {
                prop_assert!(deadline > now, "admitted after its deadline");
                self.permits.push(permit);
                admitted = true;
            }
        }
        Ok(admitted)
    }

    fn check(&self, gate: &Gate, admitted: bool) -> Result<(), TestCaseError> {
        let lent = self.lent.len() + self.credits as usize;
        prop_assert_eq!(gate.inflight() as usize, self.permits.len() + lent);
        prop_assert_eq!(gate.lent() as usize, lent);
        prop_assert_eq!(gate.queued(), self.waiting.len());
        if admitted {
            prop_assert!(
                gate.inflight() <= gate.limit(),
                "{} in flight over limit {}",
                gate.inflight(),
                gate.limit()
            );
        }
        prop_assert!(
            gate.queued() == 0 || gate.inflight() >= gate.limit(),
            "waiting while a slot is free"
        );
        for (tier, counters) in gate.counters().tiers.iter().enumerate() {
            let inflight = self
                .permits
                .iter()
                .filter(|p| p.priority().tier() as usize == tier)
                .count() as u64;
            let queued = self
                .waiting
                .values()
                .filter(|(_, t)| *t as usize == tier)
                .count() as u64;
            prop_assert_eq!(
                counters.arrived,
                counters.ended() + inflight + queued,
                "tier {}: {:?}",
                tier,
                counters
            );
            prop_assert_eq!(counters.inflight(), inflight);
        }
        Ok(())
    }
}

/// The gates under test: a synthetic limit that jumps around and a regulator that rejects at
/// random (to reach every path quickly), then every real limit with every real regulator.
fn gate(choice: usize, seed: u64, queue: QueueConfig) -> Gate {
    match choice.checked_sub(1) {
        None => Gate::new(
            Box::new(Jumpy(Rng::seed(seed), 3)),
            Box::new(Coin(Rng::seed(!seed), Time::ZERO)),
            queue,
        ),
        Some(i) => GateConfig {
            limit: LimitConfig::of(LimitAlgorithm::ALL[i % LimitAlgorithm::ALL.len()]),
            regulator: RegulatorConfig::of(RegulatorAlgorithm::ALL[i / LimitAlgorithm::ALL.len()]),
            queue,
        }
        .build(),
    }
}

const CHOICES: usize = 1 + LimitAlgorithm::ALL.len() * RegulatorAlgorithm::ALL.len();

proptest! {
    #![proptest_config(ProptestConfig { cases: 1024, ..ProptestConfig::default() })]

    #[test]
    fn gate_accounting_holds(
        choice in prop_oneof![3 => Just(0usize), 1 => 1..CHOICES],
        seed in any::<u64>(),
        capacity in 0..8usize,
        lifo in any::<bool>(),
        bound in any::<bool>(),
        ops in prop::collection::vec(op(), 1..300),
    ) {
        let queue = QueueConfig {
            capacity,
            timeout: Nanos::from_millis(80),
            lifo_after: lifo.then_some(Nanos::from_millis(20)),
            wait_bound: if bound { 2.0 } else { f64::INFINITY },
            hold_back_starving: false,
        };
        let mut gate = gate(choice, seed, queue);
        let mut model = Model::default();
        let mut now = Time::ZERO;
        for op in ops {
            match op {
                Op::Arrive { tier, cohort, timeout_ms } => {
                    // The front end's protocol: unused lent slots go back before `arrive`.
                    gate.reclaim(now, std::mem::take(&mut model.credits));
                    let priority = Priority::new(tier, cohort).expect("in range");
                    match gate.arrive_with_timeout(now, priority, Nanos::from_millis(timeout_ms)) {
                        Arrival::Admitted(permit) => {
                            model.permits.push(permit);
                            prop_assert!(gate.inflight() <= gate.limit());
                        }
                        Arrival::Queued(ticket) => {
                            model.waiting.insert(ticket, (now + Nanos::from_millis(timeout_ms), tier as u8));
                        }
                        Arrival::Rejected(_) => {}
                    }
                }
                Op::Complete { which, outcome } if !model.permits.is_empty() => {
                    let permit = model.permits.swap_remove(which % model.permits.len());
                    let outcome = [Outcome::Success, Outcome::Dropped, Outcome::Ignored][outcome as usize];
                    gate.complete(now, permit, outcome);
                }
                Op::CancelPermit { which } if !model.permits.is_empty() => {
                    let permit = model.permits.swap_remove(which % model.permits.len());
                    gate.cancel_permit(now, permit);
                }
                Op::Cancel { which } if !model.waiting.is_empty() => {
                    let mut tickets: Vec<Ticket> = model.waiting.keys().copied().collect();
                    tickets.sort_by_key(|t| t.id());
                    let ticket = tickets[which % tickets.len()];
                    prop_assert!(gate.cancel(now, ticket));
                    model.waiting.remove(&ticket);
                }
                Op::Advance { ms } => {
                    now += Nanos::from_millis(ms);
                    gate.tick(now);
                }
                Op::Wait { ms } => now += Nanos::from_millis(ms),
                Op::Lease { allowed, ttl_ms } => {
                    gate.set_lease(now, Lease { allowed, expires: now + Nanos::from_millis(ttl_ms) });
                }
                Op::Lend => {
                    let lent = gate.lend(now);
                    if lent > 0 {
                        prop_assert_eq!(gate.queued(), 0);
                        prop_assert!(gate.inflight() <= gate.limit(), "lent over the limit");
                    }
                    model.credits += lent;
                }
                Op::FastArrive { tier } if model.credits > 0 => {
                    model.credits -= 1;
                    let priority = Priority::new(tier, 0).expect("in range");
                    let inflight = (model.permits.len() + model.lent.len() + 1) as u32;
                    model.lent.push(LentPermit::new(priority, now, inflight));
                }
                Op::CompleteLent { which, outcome } if !model.lent.is_empty() => {
                    let permit = model.lent.swap_remove(which % model.lent.len());
                    let outcome = [Outcome::Success, Outcome::Dropped, Outcome::Ignored][outcome as usize];
                    gate.complete_lent(now, permit, outcome);
                }
                Op::CancelLent { which } if !model.lent.is_empty() => {
                    let permit = model.lent.swap_remove(which % model.lent.len());
                    gate.cancel_lent(now, permit);
                }
                Op::RecordLent { which, outcome } if !model.lent.is_empty() => {
                    let permit = model.lent.swap_remove(which % model.lent.len());
                    let outcome = outcome.map(|o| [Outcome::Success, Outcome::Dropped, Outcome::Ignored][o as usize]);
                    gate.record_lent(now, permit, outcome);
                    model.credits += 1;
                }
                Op::Complete { .. }
                | Op::CancelPermit { .. }
                | Op::Cancel { .. }
                | Op::FastArrive { .. }
                | Op::CompleteLent { .. }
                | Op::CancelLent { .. }
                | Op::RecordLent { .. } => {}
            }
            let admitted = model.drain(&mut gate, now)?;
            model.check(&gate, admitted)?;
            if matches!(op, Op::Advance { .. }) {
                for (deadline, _) in model.waiting.values() {
                    prop_assert!(*deadline > now, "an entry past its deadline survived a tick");
                }
            }
        }
    }
}

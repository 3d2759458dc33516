//! The gate: a limit, a regulator and the priority queue composed into one state machine.
//!
//! Every request that arrives ends in exactly one counted outcome: completed (ok, dropped or
//! ignored), rejected (by the regulator, because the queue was full, or for want of a lease),
//! expired (waited past its deadline) or cancelled (the caller went away, queued or in flight).
//! At any instant `arrived == outcomes + in flight + queued`, per tier and in total, so that
//! anyone can reconcile the counters.
//!
//! A thread-safe front end can admit without taking a lock while nothing is queued: the gate
//! *lends* it its free slots ([`Gate::lend`]), the front end hands them out with an atomic
//! decrement, and each comes back through [`Gate::complete_lent`] or [`Gate::cancel_lent`],
//! which count the request then, or stays with the front end for the next request while
//! [`Gate::record_lent`] counts the one that used it. Lent slots are in flight from the moment they are lent, so
//! the limit holds; the reconciliation reads `arrived == ended + (in flight - lent) + queued`.
//!
//! Like quinn-proto's connection, the gate does no I/O and reads no clock. Calls return what
//! they decide at once ([`Arrival`]); what happens to *other* requests as a consequence (a slot
//! freed by a completion admits the next queued request, a tick expires a few) is queued as
//! [`Event`]s that the driver drains with [`Gate::poll_event`] and delivers to the waiting
//! callers. The driver also calls [`Gate::tick`] at [`Gate::next_tick`].

use std::collections::VecDeque;

use crate::limit::{Limit, Outcome, Sample};
use crate::peers::{PeerConfig, PeerMean, PeerStamp};
use crate::priority::{Priority, TIERS};
use crate::queue::{Entry, Order, PriorityQueue, Ticket};
use crate::regulator::{PeersHeard, QueueStats, Regulator, RegulatorState, Verdict};
use crate::time::{Nanos, Time};

mod demand;
mod idle;
mod latency;
mod patience;

use demand::Demand;
use idle::SlotIdle;
use latency::{OwnDelay, ServiceLatency};
use patience::Patience;

/// How the gate's queue behaves.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Most requests waiting at once; past it, an arrival displaces the least important
    /// waiting request if it is more important, and is rejected otherwise. Default 1000.
    pub capacity: usize,
    /// Longest a request waits before it expires. A third of the client's timeout is a good
    /// value when the timeout is known (Cinnamon uses 33%). Default 500ms.
    pub timeout: Nanos,
    /// Serve the newest request of a rank first once the queue has not been empty for this
    /// long (Facebook's adaptive LIFO); `None` for always oldest first. Default `None`.
    pub lifo_after: Option<Nanos>,
    /// An arrival that finds the service full is queued only if its expected wait (the
    /// entries ahead of it and itself, at the slots the service frees a second: the limit
    /// over its mean latency) is at most this many times the fastest answer the service gave
    /// recently; otherwise it is turned away as by a full queue. A queue is worth its wait
    /// only next to what the service costs anyway: behind a service answering in 100 ms or
    /// more at tens in flight, its fastest answer is a dozen entries or more, as many as
    /// PIE lets stand; in front of one answering in 2-20 ms at one in flight (RSocket's),
    /// any wait for a slot is the rest of a service time, up to 19 ms, and doubles the
    /// tail. One fastest answer, not two: a request that waited two service times in front
    /// of a service of a few workers took three in all, past the tail an operator's fixed
    /// queue of one work time gives (see `docs/algorithms.md`, "The default, and why"). A
    /// wait under [`WAIT_BOUND_FLOOR`] (1 ms) is always allowed, and so are the first
    /// [`IDLE_WAITERS`] where the slots, once freed, would idle for want of a request (see
    /// there). Below capacity (no more
    /// arriving than gets into the service, see `gate/demand.rs`), a wait is measured
    /// against the service's mean answer instead: a queue of chance peaks drains again, and
    /// bounding it by the fastest answer shed them (the Poisson peaks over the limit at
    /// half the capacity of 30 workers with exponential work, whose fastest answers are
    /// near zero); no bound at all let the queue of an overload not yet seen (a ramp through
    /// the capacity of a single worker) keep the slots full, Autotune's limit fell to the
    /// knee, and the bound, once the overload was seen, left the worker idle between
    /// answers. The bound applies to the least important tier arriving (see
    /// [`TIER_RECENT`]); a more important tier waits as the queue's capacity, its timeout
    /// and the regulator allow, so that a full service sheds the least important tier
    /// first: bounding every tier, a service whose
    /// fastest answers are near zero (exponential work) had no queue at all, and turned
    /// its tiers away alike (a quarter of the traffic at tier 1, offered 3x its capacity:
    /// tier 1 lost two thirds of its requests while tier 2 took three quarters of the
    /// capacity). `inf` for no bound. Default 1.
    pub wait_bound: f64,
    /// The cut-off the gate tells its callers (`tidegate-cutoff`, [`Gate::told_cutoff`])
    /// also holds back every rank from the most important one with a request waiting at
    /// least half `timeout`. A priority queue that never empties starves its least important
    /// admitted ranks: their requests expire after the header said they were admitted, and
    /// every hop before spent its work on them (`docs/feedback.md`). Default false.
    pub hold_back_starving: bool,
}

/// The least wait [`QueueConfig::wait_bound`] allows, whatever the service's latency: a wait
/// under a millisecond is never worth turning a request away. It is the scale of the
/// scheduler's and the network's own jitter, and of a proxy's own queueing in front of a fast
/// upstream: without it, the gate of `bench/proxy.sh` (an origin answering in tens of
/// microseconds, wrk with 50 connections, the proxy the bottleneck) turned away 57% of the
/// requests while the origin had capacity to spare.
pub const WAIT_BOUND_FLOOR: Nanos = Nanos::from_millis(1);

/// How many arrivals that find the service full wait whatever [`QueueConfig::wait_bound`]
/// says, while a slot that frees waits for its next request longer than
/// [`IDLE_PAST_FASTEST`] fastest answers, [`WAIT_BOUND_FLOOR`] and [`IDLE_SHARE`] of its
/// time (`gate/idle.rs`).
///
/// The bound turns away a wait longer than the fastest answer; in front of a few workers
/// whose fastest answer is far under their mean (exponential work's is near zero), it turns
/// away every arrival that finds them full, and a worker that frees then idles until the
/// next one: one worker offered three times what it serves idles a quarter of its time,
/// and Autotune's limit stood in with the service's own queue, which its latency rule
/// reads as a queue and takes back. Queued, the arrivals keep the worker busy. How many
/// it takes depends on the overload, which the gate does not know: an M/M/1 queue with
/// room for two waiting idles 2.5% of its time at three times its load, under the 3% a
/// 97% goodput leaves, but 12% at one and a half times; for four, 0.3% and 4.8%. Four,
/// not more: the rule holds only while freed slots do idle, so a heavier overload, which
/// fills them, queues no deeper; but at a knee of 1 the limit still stands one or two
/// past it, and six waiting behind them took the answers of a 3x or 10x overload past a
/// timeout of 10 work times on half the seeds (`docs/algorithms.md`, "Freed slots that
/// idle"). Each waits the rest of a few service times. The gate sees slots, not
/// workers: a slot freed while the limit stands past the knee idles while the service's
/// own queue keeps its worker busy, and the waiters then only add their wait (under the
/// floor, a slot's wait is the scale of the scheduler's jitter, and 1 ms of work at a knee
/// of 1, the limit still coming down from its start, is that case).
pub const IDLE_WAITERS: usize = 4;

/// How many fastest answers a freed slot must wait for its next request before
/// [`IDLE_WAITERS`] arrivals wait whatever the bound: more than the bound's own unit, so
/// that a service whose freed slots are taken within about a fastest answer keeps the
/// tail the bound gives it. RSocket's servers (`scenarios/rsocket-leases.toml`, 2 ms at
/// their fastest, one request each) are sent each arrival by a balancer that picks the
/// freest, and wait for their next request about a fastest answer, a little more or less;
/// queueing there takes a tail judged at 20 ms past it (`docs/algorithms.md`).
pub const IDLE_PAST_FASTEST: f64 = 2.0;

/// The least share of a slot's time, idle between its requests, for which
/// [`IDLE_WAITERS`] arrivals wait whatever the bound: a pool of tens of workers offered
/// more than it serves idles a percent or so (the next arrival comes a few milliseconds
/// after a slot frees, against 100 ms of work), within what the goodput it keeps allows,
/// and a queue there only adds waits.
pub const IDLE_SHARE: f64 = 0.02;

/// An arrival of a tier less important than this one within this time makes the tier
/// exempt from [`QueueConfig::wait_bound`]: the bound sheds the least important tier in
/// the traffic, as the regulators' cut-offs shed the least important ranks first. A
/// second is the half-life of the regulators' histograms of ranks.
pub const TIER_RECENT: Nanos = Nanos::from_secs(1);

impl Default for QueueConfig {
    fn default() -> QueueConfig {
        QueueConfig {
            capacity: 1000,
            timeout: Nanos::from_millis(500),
            lifo_after: None,
            wait_bound: 1.0,
            hold_back_starving: false,
        }
    }
}

/// Why a request was turned away.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The regulator judged the queue too slow (PIE, CoDel, PID).
    Regulator,
    /// The queue was full of requests at least as important: full in entries, or in the
    /// wait its queueing would cost next to the service's own latency
    /// ([`QueueConfig::wait_bound`]).
    QueueFull,
    /// The service granted no lease: it asked for nothing to be sent.
    NoLease,
}

impl RejectReason {
    /// A short name for headers and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            RejectReason::Regulator => "regulator",
            RejectReason::QueueFull => "queue_full",
            RejectReason::NoLease => "no_lease",
        }
    }
}

/// The right to be in the service: hand it back to [`Gate::complete`] or
/// [`Gate::cancel_permit`] exactly once. It is deliberately neither `Clone` nor `Copy`.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a permit holds a slot until it is handed back to the gate"]
pub struct Permit {
    admitted: Time,
    inflight: u32,
    priority: Priority,
    /// The service's own time, if the driver measured it ([`Permit::measured`]).
    service: Option<Nanos>,
}

impl Permit {
    pub fn priority(&self) -> Priority {
        self.priority
    }
    /// When the request entered the service.
    pub fn admitted(&self) -> Time {
        self.admitted
    }

    /// The service itself took `service` with this request: what the limit learns from
    /// when the request completes, in place of the time from admission to completion
    /// (and never more than it).
    ///
    /// For a driver whose own delays sit inside that time: a proxy starved of CPU reads
    /// the upstream's answer, and writes it on, late by its own backlog. Such a driver
    /// measures the upstream's part alone (the proxy: from writing the request to the
    /// answer's arrival in the kernel) and says so here. The slot is held until completion
    /// all the same, and the two together tell the gate whether the driver or the service
    /// is the bottleneck: while it is the driver, the limit does not bind (see
    /// `Gate::has_room`).
    pub fn measured(&mut self, service: Nanos) {
        self.service = Some(service);
    }
}

/// What the gate decided about an arrival.
#[derive(Debug, PartialEq, Eq)]
#[must_use]
pub enum Arrival {
    /// Go ahead now.
    Admitted(Permit),
    /// Wait: an [`Event`] for this ticket will say what became of it.
    Queued(Ticket),
    Rejected(RejectReason),
}

/// What became of a queued request.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    /// It may go ahead now, after waiting `waited`.
    Admitted {
        ticket: Ticket,
        permit: Permit,
        waited: Nanos,
    },
    /// It waited past its deadline.
    Expired { ticket: Ticket },
    /// It was turned away after all: dropped at dequeue by the regulator, or displaced from a
    /// full queue by a more important request.
    Rejected {
        ticket: Ticket,
        reason: RejectReason,
    },
}

/// A slot lent to a lock-free front end and used by a request: what the gate needs to know
/// about it when it comes back (see [`Gate::lend`]).
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a lent permit holds a slot until it is handed back to the gate"]
pub struct LentPermit {
    admitted: Time,
    inflight: u32,
    priority: Priority,
    service: Option<Nanos>,
}

impl LentPermit {
    /// A request of `priority` took a lent slot at `admitted`, with `inflight` requests in
    /// flight counting itself (the front end's own count).
    pub fn new(priority: Priority, admitted: Time, inflight: u32) -> LentPermit {
        LentPermit {
            admitted,
            inflight,
            priority,
            service: None,
        }
    }

    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// As [`Permit::measured`].
    pub fn measured(&mut self, service: Nanos) {
        self.service = Some(service);
    }

    /// The ordinary permit this lent one becomes once the gate has it back.
    fn into_permit(self) -> Permit {
        Permit {
            admitted: self.admitted,
            inflight: self.inflight,
            priority: self.priority,
            service: self.service,
        }
    }
}

/// A cap on the limit granted by the service itself (see `docs/lease.md`): at most `allowed`
/// in flight until `expires`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lease {
    pub allowed: u32,
    pub expires: Time,
}

/// Outcome counts for one tier. Every arrival ends in exactly one of them, so `arrived` is
/// [`TierCounters::ended`] plus the requests still queued or in flight.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TierCounters {
    pub arrived: u64,
    /// Entered the service (at once or from the queue).
    pub admitted: u64,
    pub completed_ok: u64,
    pub completed_dropped: u64,
    pub completed_ignored: u64,
    pub rejected_regulator: u64,
    pub rejected_queue_full: u64,
    pub rejected_no_lease: u64,
    pub expired: u64,
    pub cancelled_queued: u64,
    pub cancelled_inflight: u64,
}

impl TierCounters {
    /// Requests that have ended, in any way.
    pub fn ended(&self) -> u64 {
        self.completed_ok
            + self.completed_dropped
            + self.completed_ignored
            + self.rejected()
            + self.expired
            + self.cancelled_queued
            + self.cancelled_inflight
    }

    pub fn rejected(&self) -> u64 {
        self.rejected_regulator + self.rejected_queue_full + self.rejected_no_lease
    }

    /// Admitted and not yet ended.
    pub fn inflight(&self) -> u64 {
        self.admitted
            - self.completed_ok
            - self.completed_dropped
            - self.completed_ignored
            - self.cancelled_inflight
    }

    fn add(&mut self, o: &TierCounters) {
        self.arrived += o.arrived;
        self.admitted += o.admitted;
        self.completed_ok += o.completed_ok;
        self.completed_dropped += o.completed_dropped;
        self.completed_ignored += o.completed_ignored;
        self.rejected_regulator += o.rejected_regulator;
        self.rejected_queue_full += o.rejected_queue_full;
        self.rejected_no_lease += o.rejected_no_lease;
        self.expired += o.expired;
        self.cancelled_queued += o.cancelled_queued;
        self.cancelled_inflight += o.cancelled_inflight;
    }
}

/// Outcome counts, per tier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub tiers: [TierCounters; TIERS as usize],
}

impl Counters {
    pub fn total(&self) -> TierCounters {
        let mut total = TierCounters::default();
        for tier in &self.tiers {
            total.add(tier);
        }
        total
    }

    fn tier(&mut self, priority: Priority) -> &mut TierCounters {
        &mut self.tiers[priority.tier() as usize]
    }
}

/// A point-in-time view of a gate, for status pages and metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Snapshot {
    /// Requests in the service, lent slots included.
    pub inflight: u32,
    /// Slots lent to a lock-free front end and not yet returned, used or not.
    pub lent: u32,
    /// The limit in force (the algorithm's, capped by a lease).
    pub limit: u32,
    pub queued: usize,
    pub oldest_wait: Nanos,
    pub lease: Option<Lease>,
    pub regulator: RegulatorState,
    pub counters: Counters,
    /// How long callers wait, as learnt from the ones that left (`None` while too few
    /// leave to tell): what a queued request may wait, with the service's mean answer,
    /// before it is not sent ([`Gate::caller_left`]).
    pub callers_wait: Option<Nanos>,
}

/// The peers' mean limit as a gate heard it (`crate::peers`).
#[derive(Clone, Copy, Debug)]
struct HeardPeers {
    limit: f64,
    weight: f64,
    expires: Time,
}

/// The composition of a [`Limit`], a [`Regulator`] and a [`PriorityQueue`].
#[derive(Debug)]
pub struct Gate {
    limit: Box<dyn Limit>,
    /// [`Limit::is_fixed`], asked once.
    fixed: bool,
    regulator: Box<dyn Regulator>,
    queue: PriorityQueue,
    config: QueueConfig,
    /// `limit.limit()`, held toward the peers' mean and capped by the lease, refreshed
    /// whenever one of them changes.
    effective_limit: u32,
    lease: Option<Lease>,
    /// The peers' mean limit as last heard, the share of the way to it the limit in force
    /// goes, and until when ([`Gate::hear_peers`]).
    peers: Option<HeardPeers>,
    /// In the service, lent slots included.
    inflight: u32,
    /// Lent out and not yet returned.
    lent: u32,
    last_empty: Time,
    counters: Counters,
    stats: QueueStats,
    events: VecDeque<Event>,
    /// The service's answers, for [`QueueConfig::wait_bound`].
    latency: ServiceLatency,
    /// The driver's own share of the slots' time, where it measures the service's part.
    own_delay: OwnDelay,
    /// The last arrival of each tier, for [`QueueConfig::wait_bound`].
    tier_seen: [Option<Time>; TIERS as usize],
    /// How long callers wait, from the ones that left.
    patience: Patience,
    /// Whether more arrives than gets in, for [`QueueConfig::wait_bound`].
    demand: Demand,
    /// How long a freed slot waits for its next request, for [`IDLE_WAITERS`].
    idle: SlotIdle,
}

impl Gate {
    pub fn new(limit: Box<dyn Limit>, regulator: Box<dyn Regulator>, config: QueueConfig) -> Gate {
        let effective_limit = limit.limit().max(1);
        Gate {
            fixed: limit.is_fixed(),
            limit,
            regulator,
            queue: PriorityQueue::new(),
            config,
            effective_limit,
            lease: None,
            peers: None,
            inflight: 0,
            lent: 0,
            last_empty: Time::ZERO,
            counters: Counters::default(),
            stats: QueueStats::default(),
            events: VecDeque::new(),
            latency: ServiceLatency::default(),
            own_delay: OwnDelay::default(),
            tier_seen: [None; TIERS as usize],
            patience: Patience::default(),
            demand: Demand::default(),
            idle: SlotIdle::default(),
        }
    }

    /// A request arrives. Decides at once: admitted, queued, or rejected.
    pub fn arrive(&mut self, now: Time, priority: Priority) -> Arrival {
        self.arrive_with_timeout(now, priority, self.config.timeout)
    }

    /// As [`Gate::arrive`], waiting at most `timeout` (for a request whose own deadline is
    /// sooner than the gate's queue timeout).
    pub fn arrive_with_timeout(
        &mut self,
        now: Time,
        priority: Priority,
        timeout: Nanos,
    ) -> Arrival {
        self.counters.tier(priority).arrived += 1;
        self.demand.arrived();
        self.idle.arrived(now);
        self.tier_seen[usize::from(priority.tier())] = Some(now);
        self.end_lapsed_lease(now);
        self.end_lapsed_peers(now);
        if self.lease.is_some_and(|lease| lease.allowed == 0) {
            return self.reject(priority, RejectReason::NoLease);
        }
        if self.regulator.on_arrival(now, priority, self.queue.len()) == Verdict::Reject {
            return self.reject(priority, RejectReason::Regulator);
        }
        // After every call the queue is empty or there is no room, so room means nobody is
        // waiting for it.
        if self.has_room(now) {
            self.stats.accepted += 1;
            return Arrival::Admitted(self.admit(now, priority));
        }
        let full = self.queue.len() >= self.config.capacity;
        if full || (self.wait_too_long() && !self.slots_would_idle()) {
            let displaces = self
                .queue
                .least_important()
                .is_some_and(|worst| worst.rank() > priority.rank());
            if !displaces {
                // Full in time only: a tier more important than the least important one
                // arriving waits anyway (see `QueueConfig::wait_bound`).
                if full || !self.outranks_recent(now, priority.tier()) {
                    return self.reject(priority, RejectReason::QueueFull);
                }
            } else if let Some((ticket, entry)) = self.queue.pop_least_important() {
                self.counters.tier(entry.priority).rejected_queue_full += 1;
                self.events.push_back(Event::Rejected {
                    ticket,
                    reason: RejectReason::QueueFull,
                });
            }
        }
        if self.queue.is_empty() {
            self.last_empty = now;
        }
        self.stats.accepted += 1;
        self.stats.enqueued += 1;
        let deadline = now + timeout;
        Arrival::Queued(self.queue.push(Entry {
            priority,
            enqueued: now,
            deadline,
        }))
    }

    /// A request admitted by `permit` finished. Feeds the limit and admits waiting requests
    /// into the freed slot (see [`Gate::poll_event`]).
    pub fn complete(&mut self, now: Time, permit: Permit, outcome: Outcome) {
        self.inflight -= 1;
        self.stats.completed += 1;
        self.learn(now, &permit, outcome);
        self.fill(now);
        self.note_freed(now);
    }

    /// Counts a finished request's outcome and feeds the limit with it.
    fn learn(&mut self, now: Time, permit: &Permit, outcome: Outcome) {
        let tier = self.counters.tier(permit.priority);
        match outcome {
            Outcome::Success => tier.completed_ok += 1,
            Outcome::Dropped => tier.completed_dropped += 1,
            Outcome::Ignored => tier.completed_ignored += 1,
        }
        let held = now - permit.admitted;
        let rtt = permit.service.map_or(held, |service| service.min(held));
        if outcome == Outcome::Success {
            // What a slot is held for, the driver's delays included: what queueing for one
            // costs.
            self.latency.record(now, held);
            if permit.service.is_some() {
                self.own_delay.record(now, held, rtt);
            }
        }
        self.limit.on_sample(&Sample {
            now,
            rtt,
            inflight: permit.inflight,
            outcome,
        });
        self.refresh_limit();
    }

    /// Lends every free slot to a lock-free front end, if arrivals may be admitted without
    /// asking anything: nothing is queued, no lease forbids it, and the regulator is
    /// [transparent](Regulator::transparent). Returns how many slots were lent (possibly 0).
    ///
    /// The front end hands them to arrivals without calling [`Gate::arrive`], returns each
    /// used one through [`Gate::complete_lent`] or [`Gate::cancel_lent`], and gives the unused
    /// ones back with [`Gate::reclaim`] before it next calls `arrive` (otherwise the gate
    /// would see the service as fuller than it is).
    pub fn lend(&mut self, now: Time) -> u32 {
        self.end_lapsed_lease(now);
        self.end_lapsed_peers(now);
        if !self.may_lend() {
            return 0;
        }
        let free = self.effective_limit.saturating_sub(self.inflight);
        if free > 0 {
            self.idle.unseen();
        }
        self.inflight += free;
        self.lent += free;
        free
    }

    /// Whether arrivals may be admitted without asking the gate: nothing is queued, the
    /// regulator is transparent, and no lease of zero is in force. Slots lent earlier must
    /// be reclaimed once this turns false.
    pub fn may_lend(&self) -> bool {
        self.queue.is_empty()
            && self.regulator.transparent()
            && self.lease.is_none_or(|lease| lease.allowed > 0)
    }

    /// The front end gives back `unused` lent slots that no request took.
    pub fn reclaim(&mut self, now: Time, unused: u32) {
        let unused = unused.min(self.lent);
        self.inflight -= unused;
        self.lent -= unused;
        self.fill(now);
    }

    /// A request that took a lent slot finished: it is counted as arrived, admitted and
    /// completed now, and feeds the limit like any other.
    pub fn complete_lent(&mut self, now: Time, permit: LentPermit, outcome: Outcome) {
        let permit = self.take_back(permit);
        self.complete(now, permit, outcome);
    }

    /// The caller of a request that took a lent slot went away.
    pub fn cancel_lent(&mut self, now: Time, permit: LentPermit) {
        let permit = self.take_back(permit);
        self.cancel_permit(now, permit);
    }

    /// A lent slot comes back with the request that used it, counted now; from here on it is
    /// an ordinary permit.
    fn take_back(&mut self, permit: LentPermit) -> Permit {
        self.lent = self.lent.saturating_sub(1);
        self.count_lent(permit.priority);
        permit.into_permit()
    }

    /// A request that took a lent slot finished, and the front end already put its slot back
    /// among the ones it holds (the slot stays lent): the request is counted and, with an
    /// outcome, feeds the limit; `None` counts it as cancelled. Nothing moves in or out of
    /// the service. `now` is when it finished, at or before the time of the gate's latest call.
    pub fn record_lent(&mut self, now: Time, permit: LentPermit, outcome: Option<Outcome>) {
        self.count_lent(permit.priority);
        self.stats.completed += 1;
        match outcome {
            Some(outcome) => self.learn(now, &permit.into_permit(), outcome),
            None => self.counters.tier(permit.priority).cancelled_inflight += 1,
        }
    }

    fn count_lent(&mut self, priority: Priority) {
        let tier = self.counters.tier(priority);
        tier.arrived += 1;
        tier.admitted += 1;
        self.stats.accepted += 1;
    }

    /// When the queued request of `ticket` expires, if it is still queued.
    pub fn deadline(&self, ticket: Ticket) -> Option<Time> {
        self.queue.get(ticket).map(|entry| entry.deadline)
    }

    /// Slots lent and not yet returned.
    pub fn lent(&self) -> u32 {
        self.lent
    }

    /// The caller of an admitted request went away. Its slot is freed; the limit learns
    /// nothing from it.
    pub fn cancel_permit(&mut self, now: Time, permit: Permit) {
        self.inflight -= 1;
        self.stats.completed += 1;
        self.counters.tier(permit.priority).cancelled_inflight += 1;
        self.fill(now);
        self.note_freed(now);
    }

    /// The caller of a request in the service went away after waiting `waited` since the
    /// request arrived at the gate; the service still holds it, and its permit comes back
    /// as usual. Nothing is counted: the gate learns how long callers wait (a queued
    /// request that has waited so long that the service's mean answer would come after its
    /// caller left is then not sent, see `patience.rs`).
    pub fn caller_left(&mut self, now: Time, waited: Nanos) {
        self.patience.left(now, waited, self.stats.completed);
    }

    /// The caller of a queued request went away. Returns false if the ticket is no longer
    /// queued (its event is then waiting in [`Gate::poll_event`], or was delivered).
    pub fn cancel(&mut self, now: Time, ticket: Ticket) -> bool {
        match self.queue.remove(ticket) {
            Some(entry) => {
                self.counters.tier(entry.priority).cancelled_queued += 1;
                self.caller_left(now, now - entry.enqueued);
                self.note_if_empty(now);
                true
            }
            None => false,
        }
    }

    /// Periodic work: expires overdue entries, updates the regulator, ends a lapsed lease,
    /// and admits what the new state allows. Call at [`Gate::next_tick`] (calling more often
    /// is harmless).
    pub fn tick(&mut self, now: Time) {
        while let Some((ticket, entry)) = self.queue.pop_expired(now) {
            self.counters.tier(entry.priority).expired += 1;
            self.events.push_back(Event::Expired { ticket });
        }
        self.note_if_empty(now);
        self.end_lapsed_lease(now);
        self.end_lapsed_peers(now);
        if now >= self.regulator.next_tick() {
            let stats = self.queue_stats(now);
            self.regulator.tick(now, &stats);
        }
        self.fill(now);
    }

    /// When [`Gate::tick`] next has work to do: the earliest of the next queue deadline, the
    /// regulator's next update and the lease's expiry. [`Time::MAX`] when there is none.
    pub fn next_tick(&mut self) -> Time {
        let deadline = self.queue.earliest_deadline().unwrap_or(Time::MAX);
        let lease = self.lease.map_or(Time::MAX, |l| l.expires);
        deadline.min(lease).min(self.regulator.next_tick())
    }

    /// The next consequence for a queued request, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// The service granted a lease: at most `allowed` in flight until `expires`. A later lease
    /// replaces an earlier one; when it lapses the limit is the algorithm's again.
    pub fn set_lease(&mut self, now: Time, lease: Lease) {
        self.lease = (now < lease.expires).then_some(lease);
        self.refresh_limit();
        self.fill(now);
    }

    pub fn inflight(&self) -> u32 {
        self.inflight
    }

    /// The limit in force: the algorithm's, capped by a lease.
    pub fn limit(&self) -> u32 {
        self.effective_limit
    }

    pub fn queued(&self) -> usize {
        self.queue.len()
    }

    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The regulator's state alone: what a response's `tidegate-cutoff` header says, read
    /// on every response, where a whole [`Gate::snapshot`] would copy every counter.
    pub fn regulator_state(&self) -> RegulatorState {
        self.regulator.state()
    }

    /// The cut-off rank the gate tells its callers at `now` (`tidegate-cutoff`, before
    /// [`crate::feedback::CutoffHeader::told`] takes one off): the regulator's, and with
    /// [`QueueConfig::hold_back_starving`], no less important than the most important rank
    /// waiting half the queue's timeout. `None` while the regulator cuts nothing.
    pub fn told_cutoff(&self, now: Time) -> Option<u16> {
        let half = Nanos::from_nanos(self.config.timeout.as_nanos() / 2);
        let starving = self.config.hold_back_starving.then_some(half);
        self.told_cutoff_with(now, starving)
    }

    /// As [`Gate::told_cutoff`], holding back the ranks waiting at least `starving` (none:
    /// not the queue's).
    pub fn told_cutoff_with(&self, now: Time, starving: Option<Nanos>) -> Option<u16> {
        let cut = self.regulator.state().cutoff_rank?;
        let waiting = starving
            .and_then(|wait| now.as_nanos().checked_sub(wait.as_nanos()))
            .and_then(|since| self.queue.most_important_since(Time::from_nanos(since)));
        Some(waiting.map_or(cut, |priority| cut.min(priority.rank())))
    }

    pub fn snapshot(&self, now: Time) -> Snapshot {
        Snapshot {
            inflight: self.inflight,
            lent: self.lent,
            limit: self.effective_limit,
            queued: self.queue.len(),
            oldest_wait: self.queue.oldest_wait(now),
            lease: self.lease,
            regulator: self.regulator.state(),
            counters: self.counters,
            callers_wait: self.patience.learnt(now).map(Nanos::from_secs_f64),
        }
    }

    fn admit(&mut self, now: Time, priority: Priority) -> Permit {
        self.inflight += 1;
        self.demand.admitted();
        self.counters.tier(priority).admitted += 1;
        Permit {
            admitted: now,
            inflight: self.inflight,
            priority,
            service: None,
        }
    }

    fn reject(&mut self, priority: Priority, reason: RejectReason) -> Arrival {
        let tier = self.counters.tier(priority);
        match reason {
            RejectReason::Regulator => tier.rejected_regulator += 1,
            RejectReason::QueueFull => tier.rejected_queue_full += 1,
            RejectReason::NoLease => tier.rejected_no_lease += 1,
        }
        Arrival::Rejected(reason)
    }

    /// Moves waiting requests into free slots, most important first. Entries past their
    /// deadline expire here rather than being admitted to a caller who has given up.
    fn fill(&mut self, now: Time) {
        while self.has_room(now) {
            let order = match self.config.lifo_after {
                Some(after) if now - self.last_empty >= after => Order::Lifo,
                _ => Order::Fifo,
            };
            let Some((ticket, entry)) = self.queue.pop(order) else {
                break;
            };
            self.stats.dequeued += 1;
            let waited = now - entry.enqueued;
            let left = self.queue.len();
            let expired = entry.deadline <= now || self.doomed(now, waited);
            let tier = self.counters.tier(entry.priority);
            if expired {
                tier.expired += 1;
                self.events.push_back(Event::Expired { ticket });
            } else if self.regulator.on_dequeue(now, waited, entry.priority, left)
                == Verdict::Reject
            {
                tier.rejected_regulator += 1;
                self.events.push_back(Event::Rejected {
                    ticket,
                    reason: RejectReason::Regulator,
                });
            } else {
                let permit = self.admit(now, entry.priority);
                self.events.push_back(Event::Admitted {
                    ticket,
                    permit,
                    waited,
                });
            }
        }
        self.note_if_empty(now);
    }

    /// Whether an arrival that finds the service full would wait longer than the queue is
    /// worth, next to the service's own latency (see [`QueueConfig::wait_bound`]).
    fn wait_too_long(&self) -> bool {
        let bound = self.config.wait_bound;
        if bound.is_infinite() {
            return false;
        }
        match (
            self.latency
                .expected_wait(self.queue.len(), self.effective_limit),
            self.worth_waiting_for(),
        ) {
            (Some(wait), Some(reference)) => {
                wait > (bound * reference).max(WAIT_BOUND_FLOOR.as_secs_f64())
            }
            _ => false,
        }
    }

    /// Whether the slots, freed, would wait for their next request long enough that an
    /// arrival the wait bound turns away is queued anyway (see [`IDLE_WAITERS`]).
    fn slots_would_idle(&self) -> bool {
        if self.queue.len() >= IDLE_WAITERS {
            return false;
        }
        let (Some(idle), Some(mean), Some(fastest)) = (
            self.idle.mean(),
            self.latency.mean(),
            self.latency.fastest(),
        ) else {
            return false;
        };
        idle > (IDLE_PAST_FASTEST * fastest.as_secs_f64()).max(WAIT_BOUND_FLOOR.as_secs_f64())
            && idle > IDLE_SHARE * (idle + mean)
    }

    /// A request's end may have left a slot free with nobody queued for it.
    fn note_freed(&mut self, now: Time) {
        if self.queue.is_empty() && self.inflight < self.effective_limit {
            self.idle.freed(now);
        }
    }

    /// The answer, in seconds, a wait for a slot is measured against (see
    /// [`QueueConfig::wait_bound`]): the fastest while more arrives than gets in, the mean
    /// below capacity, where a queue drains again (see `gate/demand.rs`).
    fn worth_waiting_for(&self) -> Option<f64> {
        if self.demand.overloaded() {
            self.latency.fastest().map(|fastest| fastest.as_secs_f64())
        } else {
            self.latency.mean()
        }
    }

    /// Whether a queued request that has waited `waited` would be answered, in what the
    /// service answers in now (`ServiceLatency::expected_answer`), only after its caller
    /// left (see `patience.rs`).
    fn doomed(&self, now: Time, waited: Nanos) -> bool {
        match (self.patience.learnt(now), self.latency.expected_answer()) {
            (Some(patience), Some(answer)) => waited.as_secs_f64() + answer > patience,
            _ => false,
        }
    }

    /// Whether a tier less important than `tier` arrived within [`TIER_RECENT`].
    fn outranks_recent(&self, now: Time, tier: u8) -> bool {
        self.tier_seen
            .get(usize::from(tier) + 1..)
            .unwrap_or_default()
            .iter()
            .flatten()
            .any(|&seen| now.saturating_since(seen) < TIER_RECENT)
    }

    fn note_if_empty(&mut self, now: Time) {
        if self.queue.is_empty() {
            self.last_empty = now;
        }
    }

    /// What this gate says of itself on the requests its proxy forwards
    /// (`crate::peers`): the limit its algorithm learnt, not the one in force, its
    /// regulator's drop ratio, and where its own priority line lies. `id` is the proxy's.
    pub fn peer_stamp(&self, id: u64) -> PeerStamp {
        let state = self.regulator.state();
        PeerStamp {
            id,
            limit: self.limit.limit().max(1),
            ratio: state.reject_ratio.clamp(0.0, 1.0),
            line: state.line,
        }
    }

    /// The instances behind this gate's proxy said the means of its peers' stamps
    /// (`crate::peers`): until `config.ttl` from now, the limit in force is the learnt one
    /// plus `config.limit_weight` of the way to the mean (a fixed limit stays the
    /// operator's), and the regulator pulls its drop ratio toward the mean by
    /// `config.ratio_weight` at each of its updates. The limit keeps learning from this
    /// gate's own answers alone.
    pub fn hear_peers(&mut self, now: Time, mean: &PeerMean, config: &PeerConfig) {
        self.peers = Some(HeardPeers {
            limit: mean.limit,
            weight: config.limit_weight.clamp(0.0, 1.0),
            expires: now + config.ttl,
        });
        self.regulator.hear_peers(Some(PeersHeard {
            ratio: mean.ratio,
            weight: config.ratio_weight.clamp(0.0, 1.0),
            line: mean.line,
        }));
        self.refresh_limit();
        self.fill(now);
    }

    /// Forgets the peers' means once they are older than their `ttl`.
    fn end_lapsed_peers(&mut self, now: Time) {
        if self.peers.is_some_and(|peers| now >= peers.expires) {
            self.peers = None;
            self.regulator.hear_peers(None);
            self.refresh_limit();
            self.fill(now);
        }
    }

    fn refresh_limit(&mut self) {
        let learnt = self.limit.limit().max(1);
        let limit = match self.peers {
            Some(peers) if !self.fixed => {
                let own = f64::from(learnt);
                (own + peers.weight * (peers.limit - own)).round().max(1.0) as u32
            }
            _ => learnt,
        };
        self.effective_limit = match self.lease {
            Some(lease) => limit.min(lease.allowed),
            None => limit,
        };
    }

    /// Whether a request may go in now: a slot is free, or the driver's own delays hold the
    /// slots more than the service does, by over half a millisecond ([`OwnDelay`]). Then the
    /// driver, not the service, is the bottleneck, and a learnt limit does not bind: it would
    /// only turn away, at the driver's cost, requests the driver has already read and the
    /// service has room for. (A proxy bounds what it reads by its connections;
    /// docs/performance.md, "The proxy-bound overload".) A lease binds always: it is the
    /// service's own word; and so does a fixed limit ([`Limit::is_fixed`]): it is the
    /// operator's. A driver that measures nothing is never in this case.
    fn has_room(&self, now: Time) -> bool {
        self.inflight < self.effective_limit
            || (self.lease.is_none() && !self.fixed && self.own_delay.dominates(now))
    }

    /// Ends a lease whose time is up; the limit is the algorithm's again, and whoever waits
    /// for the room it makes is admitted.
    fn end_lapsed_lease(&mut self, now: Time) {
        if self.lease.is_some_and(|lease| now >= lease.expires) {
            self.lease = None;
            self.refresh_limit();
            self.fill(now);
        }
    }

    fn queue_stats(&self, now: Time) -> QueueStats {
        QueueStats {
            len: self.queue.len(),
            oldest_wait: self.queue.oldest_wait(now),
            last_empty: if self.queue.is_empty() {
                now
            } else {
                self.last_empty
            },
            inflight: self.inflight,
            limit: self.effective_limit,
            ..self.stats
        }
    }
}

#[cfg(test)]
mod tests;

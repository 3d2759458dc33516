//! The fleet engine: one arm of a fleet scenario, run in virtual time.
//!
//! Events in a binary heap by time (ties in the order they were scheduled); requests, their
//! attempts and the calls of their chains live in slabs and refer to each other by index. The
//! gates are tidegate-core's, the clients' throttle, budget and retry policy are
//! `tidegate_core::outbound`'s, and the cut-off hints are `tidegate_core::feedback`'s: the code
//! the proxy and the tower layers run.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use tidegate_core::feedback::{CutoffHeader, Feedback};
use tidegate_core::gate::{Arrival, Event as GateEvent, Gate, Permit};
use tidegate_core::limit::Outcome;
use tidegate_core::outbound::{
    AdaptiveThrottle, Backoff, RetryBudget, RetryBudgetConfig, RetryPolicy,
};
use tidegate_core::peers::{PeerBoard, PeerConfig, fleet_line};
use tidegate_core::priority::{CohortMap, stable_hash};
use tidegate_core::queue::Ticket;
use tidegate_core::rng::{Rng, splitmix64};
use tidegate_core::{Nanos, Priority, Time};
use tidegate_model::fleet::{Balancer, CallMode, HopConfig, RetryMode, Upstreams};

use super::metrics::{AgreementSecond, AgreementTracker, ArmResult, Refusal, Second};
use super::{FastMap, FleetArm, FleetScenario};

/// How long a gate's cut-off holds on its callers (`tidegate_tower::feedback::DEFAULT_TTL`).
const CUTOFF_TTL: Nanos = Nanos::from_millis(250);
/// What a gate's refusal asks in `Retry-After` (the proxy's default).
const RETRY_AFTER: Nanos = Nanos::from_secs(1);

type Id = u32;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// The next original request.
    Arrival,
    /// An attempt of a request goes out.
    Send(Id),
    /// An attempt's client stops waiting.
    Timeout(Id),
    /// A call reaches its hop's proxy.
    AtProxy(Id),
    /// A call's own work is done.
    WorkDone(Id),
    /// A gate's tick: hop, proxy.
    Tick(u16, u32),
}

/// A slab: items by index, and the indices free for reuse.
#[derive(Debug)]
struct Slab<T> {
    items: Vec<T>,
    free: Vec<Id>,
}

impl<T> Slab<T> {
    fn new() -> Slab<T> {
        Slab {
            items: Vec::new(),
            free: Vec::new(),
        }
    }
    fn insert(&mut self, item: T) -> Id {
        match self.free.pop() {
            Some(id) => {
                self.items[id as usize] = item;
                id
            }
            None => {
                self.items.push(item);
                (self.items.len() - 1) as Id
            }
        }
    }
    fn remove(&mut self, id: Id) {
        self.free.push(id);
    }
}

impl<T> std::ops::Index<Id> for Slab<T> {
    type Output = T;
    fn index(&self, id: Id) -> &T {
        &self.items[id as usize]
    }
}

impl<T> std::ops::IndexMut<Id> for Slab<T> {
    fn index_mut(&mut self, id: Id) -> &mut T {
        &mut self.items[id as usize]
    }
}

#[derive(Debug)]
struct Request {
    user: u32,
    tier: u8,
    attempts: u32,
    measured: bool,
}

#[derive(Debug)]
struct Attempt {
    request: Id,
    responded: bool,
    timed_out: bool,
}

/// Where a chain failed first, and why.
#[derive(Clone, Copy, Debug)]
struct Failure {
    hop: u16,
    why: Refusal,
}

#[derive(Clone, Copy, Debug)]
enum Parent {
    Attempt(Id),
    Call(Id),
}

#[derive(Debug)]
struct Call {
    hop: u16,
    parent: Parent,
    /// The priority the caller sent (`tidegate-priority`), if it travels.
    carried: Option<Priority>,
    /// The priority this hop ranks it by.
    priority: Priority,
    user: u32,
    tier: u8,
    proxy: u32,
    instance: u32,
    permit: Option<Permit>,
    /// The hop's proxy admitted it into an instance.
    admitted: bool,
    /// When the first hop admitted the chain, counted for wasted work.
    measured_edge: bool,
    /// With the arm's `hint_holds_for_chain`, once the edge proxy has admitted the chain:
    /// the hint it admitted it under (`under=` in `tidegate-priority`: 767 when it held
    /// none), carried with the priority.
    under: Option<u16>,
    issued: u32,
    pending: u32,
    /// The first of its calls to the next hop that failed.
    failure: Option<Failure>,
}

#[derive(Debug)]
struct Proxy {
    gate: Option<Gate>,
    tickets: FastMap<Ticket, Id>,
    tick_at: Time,
    /// The cut-off of the next hop as this proxy's instances report it.
    feedback: Feedback,
    cohorts: CohortMap,
    /// Calls at the proxy or beyond, for least-loaded balancing.
    outstanding: u32,
    /// Which of the hop's instances it sends an admitted call to.
    upstreams: Upstreams,
    /// The line each instance last said its peers draw, and when (see `fleet_line`).
    lines: Vec<Option<(f64, Time)>>,
}

#[derive(Debug, Default)]
struct Instance {
    busy: u32,
    queue: VecDeque<Id>,
    /// The next hop's cut-off, from its proxies' responses (the outbound layer's hint).
    feedback: Feedback,
    /// The stamps of the hop's proxies on the calls they sent it (`tidegate-peer`).
    peers: PeerBoard,
}

#[derive(Debug)]
struct Hop {
    config: HopConfig,
    /// How the hop's gates take in their peers' means, with the arm's `peers`.
    peers: Option<PeerConfig>,
    proxies: Vec<Proxy>,
    instances: Vec<Instance>,
    to_proxy: Balancer,
}

/// Draws a user's tier from the mix by a hash of the user: the same user, the same tier.
#[derive(Debug)]
struct TierMix(Vec<(f64, u8)>);

impl TierMix {
    fn new(scenario: &FleetScenario) -> TierMix {
        let total: f64 = scenario.load.tiers.iter().map(|t| t.weight.get()).sum();
        let mut acc = 0.0;
        TierMix(
            scenario
                .load
                .tiers
                .iter()
                .map(|t| {
                    acc += t.weight.get() / total;
                    (acc, t.tier)
                })
                .collect(),
        )
    }

    fn tier(&self, user: u32) -> u8 {
        let u = (stable_hash(&user.to_le_bytes(), 0x7469_6572) >> 11) as f64 / (1u64 << 53) as f64;
        self.0
            .iter()
            .find(|(acc, _)| u < *acc)
            .or(self.0.last())
            .map_or(3, |&(_, tier)| tier)
    }
}

struct Engine<'a> {
    scenario: &'a FleetScenario,
    arm: &'a FleetArm,
    rng: Rng,
    now: Time,
    seq: u64,
    /// Events in the heap other than ticks.
    pending: u64,
    heap: BinaryHeap<Reverse<(Time, u64, Event)>>,
    hops: Vec<Hop>,
    mix: TierMix,
    requests: Slab<Request>,
    attempts: Slab<Attempt>,
    calls: Slab<Call>,
    policy: Option<RetryPolicy>,
    budget: Option<RetryBudget>,
    throttle: Option<AdaptiveThrottle>,
    agreement: AgreementTracker,
    /// The same decisions by the cohort (the priority rank: tier and cohort) rather than the
    /// user, issue 15's unit.
    cohort_agreement: AgreementTracker,
    result: ArmResult,
}

/// Runs one arm of `scenario` with `seed`.
pub fn run(scenario: &FleetScenario, arm: &FleetArm, seed: u64) -> ArmResult {
    let mut engine = Engine::new(scenario, arm, seed);
    engine.schedule(Time::ZERO, Event::Arrival);
    // Gates tick for as long as they are asked to (PIE every 15 ms, forever): the run ends
    // when nothing but ticks is left.
    while engine.pending > 0
        && let Some(Reverse((at, _, event))) = engine.heap.pop()
    {
        engine.now = at;
        engine.result.events += 1;
        if !matches!(event, Event::Tick(..)) {
            engine.pending -= 1;
        }
        engine.handle(event);
    }
    engine.into_result()
}

impl<'a> Engine<'a> {
    fn new(scenario: &'a FleetScenario, arm: &'a FleetArm, seed: u64) -> Engine<'a> {
        let gate = arm.gate_config();
        let hops = scenario
            .hops
            .iter()
            .enumerate()
            .map(|(h, config)| Hop {
                config: config.clone(),
                // At the edge, the limit in force is the peers' mean and the drop ratio is
                // pulled toward theirs (the defaults): the edge proxies draw the line, and a
                // line drawn alike needs their room alike. Behind it the limits are held
                // halfway, for the throughput, and the ratio is not shared: there the callers
                // hold back what a gate cuts, and a ratio shared by the callee's gates moves
                // all their lines at once, every caller's hint with them (an instant mean
                // among C's gates wasted 7-18% of the fixed edge's work, and the limits at
                // the mean 8.2% against 6.3%; docs/experiments/README.md).
                peers: arm.peers.then(|| {
                    if h == 0 {
                        PeerConfig::default()
                    } else {
                        PeerConfig {
                            limit_weight: 0.5,
                            ratio_weight: 0.0,
                            ..PeerConfig::default()
                        }
                    }
                }),
                proxies: (0..config.proxies.get())
                    .map(|p| Proxy {
                        gate: gate.as_ref().map(|g| {
                            let mut g = config.gate.as_ref().unwrap_or(g).clone();
                            // With feedback, every hop but the first has callers that hold
                            // back what its gates cut; the first's are the clients.
                            g.regulator.pie.callers_hold_back |= arm.feedback && h > 0;
                            g.build()
                        }),
                        tickets: FastMap::default(),
                        tick_at: Time::MAX,
                        // With the arm's `hint_reopens`, the edge's line for the hops behind
                        // reopens at its rate.
                        feedback: match arm.hint_reopens {
                            Some(rate) if h == 0 => Feedback::reopening(rate.get()),
                            _ => Feedback::default(),
                        },
                        cohorts: CohortMap {
                            salt: if arm.shared_salt {
                                scenario.salt
                            } else {
                                scenario.salt ^ splitmix64(u64::from(p) + 1 + ((h as u64) << 32))
                            },
                            ..CohortMap::default()
                        },
                        outstanding: 0,
                        upstreams: Upstreams::new(config.instances.get() as usize),
                        lines: vec![None; config.instances.get() as usize],
                    })
                    .collect(),
                instances: (0..config.instances.get())
                    .map(|_| Instance::default())
                    .collect(),
                to_proxy: Balancer::new(config.balance),
            })
            .collect();
        let retry = arm.retry;
        let policy = match retry.mode {
            RetryMode::None => None,
            RetryMode::Naive => Some(RetryPolicy::naive(retry.max_attempts)),
            RetryMode::Backoff | RetryMode::RetryAfter => Some(RetryPolicy {
                max_attempts: retry.max_attempts,
                backoff: Some(Backoff::default()),
                honour_retry_after: retry.mode == RetryMode::RetryAfter,
                max_retry_after: RETRY_AFTER,
            }),
        };
        let window = (scenario.duration - scenario.measure_from).as_secs_f64();
        Engine {
            scenario,
            arm,
            rng: Rng::seed(seed),
            now: Time::ZERO,
            seq: 0,
            pending: 0,
            heap: BinaryHeap::new(),
            hops,
            mix: TierMix::new(scenario),
            requests: Slab::new(),
            attempts: Slab::new(),
            calls: Slab::new(),
            policy,
            budget: retry
                .budget
                .then(|| RetryBudget::new(&RetryBudgetConfig::default())),
            throttle: arm.throttle().map(|config| AdaptiveThrottle::new(&config)),
            agreement: AgreementTracker::default(),
            cohort_agreement: AgreementTracker::default(),
            result: ArmResult {
                name: arm.name.clone(),
                shed: vec![0; scenario.hops.len()],
                wasted_by: vec![Default::default(); scenario.hops.len()],
                window_secs: window,
                bottleneck: scenario.bottleneck(),
                ..ArmResult::default()
            },
        }
    }

    fn schedule(&mut self, at: Time, event: Event) {
        if !matches!(event, Event::Tick(..)) {
            self.pending += 1;
        }
        self.seq += 1;
        self.heap.push(Reverse((at, self.seq, event)));
    }

    fn second(&mut self) -> &mut Second {
        let s = (self.now.as_nanos() / 1_000_000_000) as usize;
        if self.result.seconds.len() <= s {
            self.result.seconds.resize(s + 1, Second::default());
        }
        &mut self.result.seconds[s]
    }

    fn in_window(&self) -> bool {
        self.measured(self.now - Time::ZERO)
    }

    /// Whether `t` into the run is in the measured span.
    fn measured(&self, t: Nanos) -> bool {
        t >= self.scenario.measure_from && t < self.scenario.duration
    }

    fn handle(&mut self, event: Event) {
        match event {
            Event::Arrival => self.arrival(),
            Event::Send(request) => self.send(request),
            Event::Timeout(attempt) => self.timeout(attempt),
            Event::AtProxy(call) => self.at_proxy(call),
            Event::WorkDone(call) => self.work_done(call),
            Event::Tick(hop, proxy) => self.tick(hop, proxy),
        }
    }

    // The clients.

    fn arrival(&mut self) {
        let rate = self.scenario.load.rate.get();
        if rate <= 0.0 || self.now - Time::ZERO >= self.scenario.duration {
            return;
        }
        let gap = -(1.0 - self.rng.next_f64()).ln() / rate;
        self.schedule(self.now + Nanos::from_secs_f64(gap), Event::Arrival);
        let user = self
            .rng
            .range_inclusive(0, i64::from(self.scenario.load.users) - 1) as u32;
        let tier = self.mix.tier(user);
        let measured = self.in_window();
        let request = self.requests.insert(Request {
            user,
            tier,
            attempts: 0,
            measured,
        });
        if measured {
            self.result.requests += 1;
            let group = if tier <= 1 {
                &mut self.result.important
            } else {
                &mut self.result.other
            };
            group.0 += 1;
        }
        self.second().offered += 1;
        if let Some(budget) = self.budget.as_mut() {
            budget.request(self.now);
        }
        self.send(request);
    }

    fn send(&mut self, request: Id) {
        let now = self.now;
        self.requests[request].attempts += 1;
        if self.requests[request].measured {
            self.result.attempts += 1;
        }
        self.second().attempts += 1;
        if let Some(throttle) = self.throttle.as_mut()
            && !throttle.admit(now, &mut self.rng)
        {
            self.result.client_throttled += 1;
            self.requests.remove(request);
            return;
        }
        let attempt = self.attempts.insert(Attempt {
            request,
            responded: false,
            timed_out: false,
        });
        self.schedule(now + self.scenario.load.timeout, Event::Timeout(attempt));
        let (user, tier) = (self.requests[request].user, self.requests[request].tier);
        self.call(0, Parent::Attempt(attempt), None, user, tier);
    }

    fn timeout(&mut self, attempt: Id) {
        let a = &mut self.attempts[attempt];
        a.timed_out = true;
        if a.responded {
            self.attempts.remove(attempt);
            return;
        }
        let request = a.request;
        self.failed(request, None);
    }

    /// An attempt's answer reached its client.
    fn answered(&mut self, attempt: Id, ok: bool, refused: bool) {
        let a = &mut self.attempts[attempt];
        a.responded = true;
        if a.timed_out {
            self.attempts.remove(attempt);
            return;
        }
        let request = a.request;
        if ok {
            if let Some(throttle) = self.throttle.as_mut() {
                throttle.accepted(self.now);
            }
            let (measured, tier) = (self.requests[request].measured, self.requests[request].tier);
            if measured {
                self.result.ok += 1;
                let group = if tier <= 1 {
                    &mut self.result.important
                } else {
                    &mut self.result.other
                };
                group.1 += 1;
            }
            let second = self.second();
            second.ok += 1;
            if tier <= 1 {
                second.ok_important += 1;
            }
            self.requests.remove(request);
        } else {
            // A failure that is not a refusal (a chain failing deeper) counts as accepted by
            // the throttle: the first hop took it.
            if !refused && let Some(throttle) = self.throttle.as_mut() {
                throttle.accepted(self.now);
            }
            self.failed(request, refused.then_some(RETRY_AFTER));
        }
    }

    /// An attempt failed: retry or give up.
    fn failed(&mut self, request: Id, retry_after: Option<Nanos>) {
        let attempts = self.requests[request].attempts;
        let wait = self
            .policy
            .and_then(|policy| policy.next_wait(attempts, retry_after, &mut self.rng));
        let affordable = match (wait, self.budget.as_mut()) {
            (Some(_), Some(budget)) => budget.try_retry(self.now),
            (wait, None) => wait.is_some(),
            (None, Some(_)) => false,
        };
        match wait {
            Some(wait) if affordable => self.schedule(self.now + wait, Event::Send(request)),
            _ => self.requests.remove(request),
        }
    }

    // The chain.

    /// A call to `hop`, sent now: through the hop's balancer to one of its proxies.
    fn call(&mut self, hop: u16, parent: Parent, carried: Option<Priority>, user: u32, tier: u8) {
        let under = match parent {
            Parent::Call(parent) => self.calls[parent].under,
            Parent::Attempt(_) => None,
        };
        let h = &mut self.hops[usize::from(hop)];
        let proxies = &h.proxies;
        let proxy =
            h.to_proxy
                .pick(proxies.len(), |i| proxies[i].outstanding, &mut self.rng) as u32;
        h.proxies[proxy as usize].outstanding += 1;
        let network = h.config.network;
        let call = self.calls.insert(Call {
            hop,
            parent,
            carried,
            priority: Priority::default(),
            user,
            tier,
            proxy,
            instance: 0,
            permit: None,
            admitted: false,
            measured_edge: false,
            under,
            issued: 0,
            pending: 0,
            failure: None,
        });
        self.schedule(self.now + network, Event::AtProxy(call));
    }

    fn at_proxy(&mut self, call: Id) {
        let now = self.now;
        let c = &self.calls[call];
        let (hop, proxy, user) = (c.hop, c.proxy, c.user);
        let p = &mut self.hops[usize::from(hop)].proxies[proxy as usize];
        let priority = if hop == 0 {
            let cohort = p.cohorts.cohort(&user.to_le_bytes(), now);
            Priority::new(c.tier.into(), cohort.into()).unwrap_or_default()
        } else {
            c.carried.unwrap_or_default()
        };
        self.calls[call].priority = priority;
        // The edge admits up to its reopening line rather than the hint, when it reopens; no
        // proxy drops a call of a chain the edge admitted under a hint that admits it.
        let under = self.calls[call].under;
        if self.arm.feedback && p.feedback.refuses_in_chain(now, priority, under).is_some() {
            self.result.hint_cuts += 1;
            self.refuse(call, Refusal::Hint);
            return;
        }
        if hop == 0 && self.arm.feedback && self.arm.hint_holds_for_chain {
            // The line the edge admits it under, which the chain's calls carry.
            self.calls[call].under = Some(p.feedback.under(now));
        }
        match p.gate.as_mut().map(|gate| gate.arrive(now, priority)) {
            None => self.dispatch(call),
            Some(Arrival::Admitted(permit)) => {
                self.calls[call].permit = Some(permit);
                self.dispatch(call);
            }
            Some(Arrival::Queued(ticket)) => {
                p.tickets.insert(ticket, call);
            }
            Some(Arrival::Rejected(reason)) => self.refuse(call, Refusal::Rejected(reason)),
        }
        self.drain(hop, proxy);
    }

    /// Delivers what a gate decided about its queued calls, and keeps its tick scheduled.
    fn drain(&mut self, hop: u16, proxy: u32) {
        loop {
            let p = &mut self.hops[usize::from(hop)].proxies[proxy as usize];
            let Some(event) = p.gate.as_mut().and_then(Gate::poll_event) else {
                break;
            };
            match event {
                GateEvent::Admitted { ticket, permit, .. } => {
                    if let Some(call) = p.tickets.remove(&ticket) {
                        self.calls[call].permit = Some(permit);
                        self.dispatch(call);
                    }
                }
                GateEvent::Expired { ticket } => {
                    if let Some(call) = p.tickets.remove(&ticket) {
                        self.refuse(call, Refusal::Expired);
                    }
                }
                GateEvent::Rejected { ticket, reason } => {
                    if let Some(call) = p.tickets.remove(&ticket) {
                        self.refuse(call, Refusal::Rejected(reason));
                    }
                }
            }
        }
        let p = &mut self.hops[usize::from(hop)].proxies[proxy as usize];
        if let Some(gate) = p.gate.as_mut() {
            let next = gate.next_tick().max(self.now);
            if next < p.tick_at {
                p.tick_at = next;
                self.schedule(next, Event::Tick(hop, proxy));
            }
        }
    }

    fn tick(&mut self, hop: u16, proxy: u32) {
        let now = self.now;
        let p = &mut self.hops[usize::from(hop)].proxies[proxy as usize];
        if p.tick_at != now {
            return; // superseded by an earlier one
        }
        p.tick_at = Time::MAX;
        if let Some(gate) = p.gate.as_mut() {
            gate.tick(now);
        }
        self.drain(hop, proxy);
    }

    /// Records an edge proxy's decision about a user, for the agreement: admitted (`shed`
    /// is `None`) or shed, and why.
    fn edge_decision(&mut self, call: Id, shed: Option<Refusal>) {
        let c = &self.calls[call];
        if c.hop != 0 || !self.arm.gate {
            return;
        }
        let (user, proxy, rank) = (c.user, c.proxy, c.priority.rank());
        if let Some(closed) = self.agreement.record(self.now, user, proxy, shed) {
            self.close_second(closed);
        }
        let by_cohort = self
            .cohort_agreement
            .record(self.now, rank.into(), proxy, shed);
        if let Some(closed) = by_cohort {
            self.close_cohort_second(closed);
        }
    }

    fn close_cohort_second(&mut self, closed: AgreementSecond) {
        if self.measured(Nanos::from_secs(closed.second)) {
            self.result.cohort_agree.0 += closed.everywhere;
            self.result.cohort_agree.1 += closed.somewhere;
        }
    }

    fn close_second(&mut self, closed: AgreementSecond) {
        if self.measured(Nanos::from_secs(closed.second)) {
            self.result.agree.0 += closed.everywhere;
            self.result.agree.1 += closed.somewhere;
            for (sum, count) in self.result.disagreed_by.iter_mut().zip(closed.disagreed_by) {
                *sum += count;
            }
        }
        if let Some(s) = self.result.seconds.get_mut(closed.second as usize) {
            s.agreement =
                (closed.somewhere > 0).then(|| closed.everywhere as f64 / closed.somewhere as f64);
        }
    }

    /// The proxy sends an admitted call to one of the hop's instances.
    fn dispatch(&mut self, call: Id) {
        self.edge_decision(call, None);
        let measured = self.in_window();
        let c = &mut self.calls[call];
        c.admitted = true;
        if c.hop == 0 && measured {
            c.measured_edge = true;
            self.result.edge_admitted += 1;
        }
        let h = &mut self.hops[usize::from(c.hop)];
        let instance = h.proxies[c.proxy as usize].upstreams.pick();
        c.instance = instance as u32;
        if h.peers.is_some()
            && let Some(gate) = h.proxies[c.proxy as usize].gate.as_ref()
        {
            let stamp = gate.peer_stamp(u64::from(c.proxy));
            h.instances[instance].peers.record(self.now, stamp);
        }
        let i = &mut h.instances[instance];
        if i.busy < h.config.workers.get() {
            i.busy += 1;
            self.start(call);
        } else {
            i.queue.push_back(call);
        }
    }

    /// A worker starts on a call's own work.
    fn start(&mut self, call: Id) {
        let hop = &self.hops[usize::from(self.calls[call].hop)].config;
        let mean = hop.work.as_secs_f64() * hop.factor_at(self.now - Time::ZERO);
        let work = -(1.0 - self.rng.next_f64()).ln() * mean;
        self.schedule(self.now + Nanos::from_secs_f64(work), Event::WorkDone(call));
    }

    fn work_done(&mut self, call: Id) {
        let c = &self.calls[call];
        let hop = usize::from(c.hop);
        let i = &mut self.hops[hop].instances[c.instance as usize];
        let next = i.queue.pop_front();
        match next {
            Some(next) => self.start(next),
            None => i.busy -= 1,
        }
        let h = &self.hops[hop];
        match (h.config.calls, h.config.mode) {
            (0, _) => self.finish(call, None),
            (_, CallMode::Sequential) => self.issue(call),
            (k, CallMode::Parallel) => {
                for _ in 0..k {
                    self.issue(call);
                }
            }
        }
    }

    /// A call to the next hop, made by `parent` while serving it.
    fn issue(&mut self, parent: Id) {
        let now = self.now;
        let c = &mut self.calls[parent];
        c.issued += 1;
        c.pending += 1;
        let carried = self.arm.priority_travels.then_some(c.priority);
        let (hop, user, tier, instance) = (c.hop, c.user, c.tier, c.instance);
        let sent = carried.unwrap_or_default();
        let under = self.calls[parent].under;
        let i = &mut self.hops[usize::from(hop)].instances[instance as usize];
        if self.arm.feedback && i.feedback.refuses_in_chain(now, sent, under).is_some() {
            // The caller's outbound layer drops it: the next hop would refuse it.
            self.result.hint_cuts += 1;
            self.result.shed[usize::from(hop) + 1] += 1;
            let failure = Failure {
                hop: hop + 1,
                why: Refusal::Withheld,
            };
            self.child_done(parent, Some(failure), None);
            return;
        }
        self.call(hop + 1, Parent::Call(parent), carried, user, tier);
    }

    /// A call to the next hop came back to `parent`, answered or failed, with the callee's
    /// cut-off if it said one.
    fn child_done(&mut self, parent: Id, failure: Option<Failure>, cutoff: Option<CutoffHeader>) {
        let now = self.now;
        let c = &mut self.calls[parent];
        c.pending -= 1;
        c.failure = c.failure.or(failure);
        let (hop, instance, issued, pending, failure) =
            (c.hop, c.instance, c.issued, c.pending, c.failure);
        let failed = failure.is_some();
        let h = &mut self.hops[usize::from(hop)];
        if let Some(cutoff) = cutoff {
            h.instances[instance as usize].feedback.take(now, cutoff);
        }
        let more = h.config.mode == CallMode::Sequential && !failed && issued < h.config.calls;
        if more {
            self.issue(parent);
        } else if pending == 0 {
            self.finish(parent, failure);
        }
    }

    /// The instance answers a call it served: ok, or failed where its chain did.
    fn finish(&mut self, call: Id, failure: Option<Failure>) {
        let ok = failure.is_none();
        let now = self.now;
        let c = &self.calls[call];
        let (hop, proxy, instance) = (usize::from(c.hop), c.proxy as usize, c.instance as usize);
        self.hops[hop].proxies[proxy].upstreams.done(instance);
        // The response carries the means of the proxies' stamps the instance holds.
        let h = &mut self.hops[hop];
        if let Some(config) = h.peers.as_ref()
            && let Some(mut mean) = h.instances[instance].peers.mean(now)
        {
            let p = &mut h.proxies[proxy];
            if let Some(line) = mean.line {
                p.lines[instance] = Some((line, now));
                mean.line = fleet_line(p.lines.iter().flatten().copied(), now, config.ttl);
            }
            if let Some(gate) = p.gate.as_mut() {
                gate.hear_peers(now, &mean, config);
            }
        }
        let i = &self.hops[hop].instances[instance];
        // The instance's response carries the cut-off its outbound layer holds for the next
        // hop, which its proxy takes in.
        let hint = i.feedback.hint(now);
        if self.arm.feedback
            && let Some(hint) = hint
        {
            self.hops[hop].proxies[proxy].feedback.take(
                now,
                CutoffHeader {
                    rank: hint.rank,
                    ttl: hint.expires - now,
                },
            );
        }
        if let Some(permit) = self.calls[call].permit.take() {
            let outcome = if ok {
                Outcome::Success
            } else {
                Outcome::Dropped
            };
            if let Some(gate) = self.hops[hop].proxies[proxy].gate.as_mut() {
                gate.complete(now, permit, outcome);
            }
        }
        if self.calls[call].measured_edge
            && let Some(failure) = failure
        {
            self.result.wasted += 1;
            self.result.wasted_by[usize::from(failure.hop)][failure.why.index()] += 1;
            self.second().wasted += 1;
        }
        self.respond(call, failure, false);
        self.drain(hop as u16, proxy as u32);
    }

    /// The proxy turns a call away (its gate, or a hint it holds).
    fn refuse(&mut self, call: Id, why: Refusal) {
        self.edge_decision(call, Some(why));
        let hop = self.calls[call].hop;
        self.result.shed[usize::from(hop)] += 1;
        self.respond(call, Some(Failure { hop, why }), true);
    }

    /// The proxy's answer goes back to the caller, with the proxy's cut-off: the deeper of
    /// its gate's (with the arm's `hint_starving`, also holding back the ranks its queue
    /// starves) and the one its instances report for the hops behind it. `refused`: the
    /// proxy turned the call away itself.
    fn respond(&mut self, call: Id, failure: Option<Failure>, refused: bool) {
        let now = self.now;
        let c = &self.calls[call];
        let (hop, proxy, parent) = (usize::from(c.hop), c.proxy as usize, c.parent);
        let p = &mut self.hops[hop].proxies[proxy];
        p.outstanding -= 1;
        let cutoff = if self.arm.feedback {
            // A cutting gate also holds back the ranks its queue starves.
            let own = p.gate.as_ref().and_then(|gate| {
                let told = gate.told_cutoff_with(now, self.arm.hint_starving);
                CutoffHeader::of_rank(told, CUTOFF_TTL)
            });
            let behind = p.feedback.hint(now).map(|hint| CutoffHeader {
                rank: hint.rank,
                ttl: hint.expires - now,
            });
            match (own, behind) {
                (Some(a), Some(b)) => Some(if b.rank < a.rank { b } else { a }),
                (a, b) => a.or(b),
            }
        } else {
            None
        };
        self.calls.remove(call);
        match parent {
            Parent::Attempt(attempt) => self.answered(attempt, failure.is_none(), refused),
            Parent::Call(parent) => self.child_done(parent, failure, cutoff),
        }
    }

    fn into_result(mut self) -> ArmResult {
        let closed = self.agreement.close();
        self.close_second(closed);
        let closed = self.cohort_agreement.close();
        self.close_cohort_second(closed);
        self.result.reasons = self
            .hops
            .iter()
            .map(|hop| {
                hop.proxies
                    .iter()
                    .filter_map(|p| p.gate.as_ref())
                    .map(|gate| gate.counters().total())
                    .fold([0; 3], |[r, q, e], t| {
                        [
                            r + t.rejected_regulator,
                            q + t.rejected_queue_full,
                            e + t.expired,
                        ]
                    })
            })
            .collect();
        self.result
    }
}

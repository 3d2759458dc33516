//! The event-driven engine: clients, a protection per arm, and the service, in virtual
//! nanoseconds.
//!
//! One run is one arm at one load point, single-threaded: events in time order (in
//! scheduling order within a nanosecond) on a timeline (a radix heap, `timeline.rs`) and
//! beside it, the client and service models of `tidegate-model`, and, for a gate arm, one
//! unchanged `tidegate_core` [`Gate`] per service instance, driven exactly as a proxy drives
//! it (`arrive`, `complete`, `cancel`, `tick` at `next_tick`, `poll_event`). Runs of
//! different arms and load points are independent and may go on threads ([`run_all`]); the
//! output order is fixed, so the same file and seed give byte-identical output whatever the
//! threads.
//!
//! Randomness comes from separate seeded streams, one per source: arrivals, request mix
//! (tiers and keys), work-time spread and nothing else. Every request draws its arrival gap,
//! priority and work factor when it is created, in creation order, so that request n is the
//! same request in every arm: the arms differ only by what their protection did.
//!
//! **A caller who gives up.** While the request waits in the gate, the gate is told
//! ([`Gate::cancel`]) and the slot it would have taken goes to the next. While the service
//! works on it, the service does not know and finishes the work anyway (the collapse
//! mechanism of every seed document), and the gate keeps the permit until the service
//! answers. Why not hand the permit back when the caller leaves: the service is still busy
//! with that request, so a freed slot would let the gate push one more request into a
//! service that has freed nothing (with a 2.5 s timeout and 2 s of work, the gate would let
//! work pile up without bound, exactly as if there were no limit).
//!
//! What the limit learns from that late answer depends on whose fault it was. If the service
//! alone (admission to answer) took at least the caller's timeout, the caller would have
//! given up even without waiting in the gate: the service is overloaded, and the answer is
//! completed as [`Outcome::Dropped`]. Otherwise the caller's time was spent in the gate's own
//! queue, and the service answered at its usual speed: the answer is completed as
//! [`Outcome::Success`], a measurement of the service like any other. (Counting it as a drop
//! blamed the service for the gate's queueing: in the capacity demo, after the change to 2 s
//! of work, Autotune backed off from 20 to 2 on drops caused by a few hundred milliseconds
//! of waiting in the gate.) The caller's outcome is a time-out either way.
//!
//! **Client timeouts** are the same for every attempt, so deadlines fall in the order the
//! attempts started: they wait in a FIFO behind a single timer instead of one event each.

mod timeline;

use std::collections::VecDeque;

use tidegate_core::gate::{Arrival, Event, Gate, Permit};
use tidegate_core::limit::Outcome;
use tidegate_core::queue::Ticket;
use tidegate_core::rng::{Rng, splitmix64};
use tidegate_core::{Nanos, Priority, Time};
use tidegate_model::client::{Mix, OpenLoop};
use tidegate_model::lease::StaticLease;
use tidegate_model::service::{Admission, Balance, Instance};

use super::report::{ArmRun, Ending, Report, Second, Tally};
use super::{ArmConfig, ArmKind, Scenario};
use timeline::Timeline;

/// Identifiers of the random streams, mixed with the seed.
const ARRIVALS: u64 = 1;
const MIX: u64 = 2;
const WORK: u64 = 3;

fn stream(seed: u64, source: u64) -> Rng {
    Rng::seed(splitmix64(seed ^ splitmix64(source)))
}

/// Runs every arm at every load point, on up to `jobs` threads; the runs are listed load
/// point by load point, in the file's arm order.
pub fn run_all(scenario: &Scenario, jobs: usize) -> Report {
    let points = scenario.load.points();
    let work: Vec<(Option<f64>, &ArmConfig)> = points
        .iter()
        .flat_map(|&p| scenario.arms.iter().map(move |arm| (p, arm)))
        .collect();
    let arms = crate::parallel::map(&work, jobs, |&(point, arm)| run_arm(scenario, arm, point));
    Report {
        scenario: scenario.name.clone(),
        seed: scenario.seed,
        arms,
    }
}

/// Runs one arm at one load point (`None`: the load's own schedule).
pub fn run_arm(scenario: &Scenario, arm: &ArmConfig, point: Option<f64>) -> ArmRun {
    let mut run = Run::new(scenario, arm, point);
    run.run();
    run.finish()
}

/// An event on the timeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A closed-loop worker sends its next request.
    Worker(u32),
    /// A retry attempt (prepared in this slot) starts.
    Retry(u32),
    /// The service finished the attempt in this slot (its token for the service). The slot
    /// stays allocated while the service holds the attempt, so no generation is needed.
    Done(u32),
    /// A gate's `next_tick`.
    Tick(u8),
    /// A capacity change of the service.
    Change(u32),
}

/// When an event kept beside the timeline (see [`Run::run`]) is due, and its place in the
/// order of scheduling, as one number that orders as `(time, sequence)` does.
type Due = u128;

/// No event pending.
const NOT_PENDING: Due = u128::MAX;

fn due(at: Time, seq: u64) -> Due {
    u128::from(at.as_nanos()) << 64 | u128::from(seq)
}

fn due_time(due: Due) -> Time {
    Time::from_nanos((due >> 64) as u64)
}

/// One attempt of a request, in a slab slot.
#[derive(Debug)]
struct Attempt {
    generation: u32,
    /// When the request's first attempt was sent.
    first: Time,
    priority: Priority,
    /// The request's work factor (its draw of the service's spread).
    factor: f64,
    /// Sent during the steady state (by its first attempt).
    steady: bool,
    instance: u8,
    /// 0 for the first attempt.
    number: u32,
    /// The closed-loop worker that sent it.
    worker: Option<u32>,
    /// The caller waits for this attempt.
    waiting: bool,
    /// The service holds it.
    in_service: bool,
    ticket: Option<Ticket>,
    permit: Option<Permit>,
}

/// What stands in front of each instance.
#[derive(Debug)]
enum Front {
    Off,
    Gates(Vec<Gate>),
    Leases(Vec<StaticLease>),
}

#[derive(Debug)]
struct Run<'a> {
    scenario: &'a Scenario,
    arm: &'a ArmConfig,
    load_rps: f64,
    now: Time,
    end: Time,
    warmup: Time,
    timeline: Timeline<Kind>,
    /// Events scheduled so far, on the timeline or beside it: the sequence number of the
    /// next one orders it after them among the events due at the same nanosecond.
    scheduled: u64,
    /// The next open-loop arrival.
    arrival: Due,
    /// The time of the arrival after it, drawn one arrival ahead: a gap is a chain of a
    /// logarithm, a division and a rounding, and the loop needs the next arrival's time to
    /// choose every event; drawn ahead, the chain runs while the events before it are
    /// handled. The draws are the same, in the same order (the arrivals have their own
    /// stream), and the sequence number is taken when the arrival becomes the next one, as
    /// before. `None`: no arrival after the next one before the end.
    following: Option<Time>,
    /// The timer of the earliest client deadline, while one is armed.
    deadline_timer: Due,
    /// The next end of a second of the series, its number, the number of seconds, and the
    /// sequence number of the first: the ends of seconds are all scheduled at the start, one
    /// after the other.
    second_end: Due,
    next_second: u32,
    seconds: u32,
    first_second: u64,
    events: u64,
    instances: Vec<Instance>,
    front: Front,
    tick_at: Vec<Time>,
    /// Per instance, by the gate's queue slot ([`Ticket::slot`]): the attempt whose ticket
    /// holds the slot. An entry is current only while that attempt still holds that very
    /// ticket; later ones overwrite it.
    tickets: Vec<Vec<u32>>,
    attempts: Vec<Attempt>,
    free: Vec<u32>,
    deadlines: VecDeque<(Time, u32, u32)>,
    open: Option<OpenLoop>,
    mix: Mix,
    rng_arrivals: Rng,
    rng_mix: Rng,
    rng_work: Rng,
    round_robin: usize,
    /// Requests sent and not yet ended.
    outstanding: u64,
    /// The requests sent during the warm-up and after it; the whole run's are both, added up
    /// once at the end (rather than counting each request a second time, in a whole-run
    /// tally beside the steady state's).
    warmup_tally: Tally,
    steady: Tally,
    second: Second,
    second_latencies: Vec<u64>,
    series: Vec<Second>,
}

impl<'a> Run<'a> {
    fn new(scenario: &'a Scenario, arm: &'a ArmConfig, point: Option<f64>) -> Run<'a> {
        let n = scenario.service.instances() as usize;
        let front = match arm.kind {
            ArmKind::Off => Front::Off,
            ArmKind::Gate => {
                let config = arm.gate_config();
                Front::Gates((0..n).map(|_| config.build()).collect())
            }
            ArmKind::StaticLease => Front::Leases(
                arm.lease
                    .iter()
                    .cycle()
                    .take(n)
                    .map(StaticLease::new)
                    .collect(),
            ),
        };
        let load = &scenario.load;
        let open = load.open_loop(point);
        let mut run = Run {
            scenario,
            arm,
            load_rps: load.nominal_rate(point),
            now: Time::ZERO,
            end: scenario.end(),
            warmup: Time::ZERO + scenario.warmup,
            timeline: Timeline::new(),
            scheduled: 0,
            arrival: NOT_PENDING,
            following: None,
            deadline_timer: NOT_PENDING,
            second_end: NOT_PENDING,
            next_second: 1,
            seconds: (scenario.duration.as_nanos() / scenario.series_step().as_nanos())
                .try_into()
                .unwrap_or(u32::MAX),
            first_second: 0,
            events: 0,
            instances: (0..n).map(|_| scenario.service.instance()).collect(),
            front,
            tick_at: vec![Time::MAX; n],
            tickets: vec![Vec::new(); n],
            attempts: Vec::new(),
            free: Vec::new(),
            deadlines: VecDeque::new(),
            open,
            mix: Mix::new(load),
            rng_arrivals: stream(scenario.seed, ARRIVALS),
            rng_mix: stream(scenario.seed, MIX),
            rng_work: stream(scenario.seed, WORK),
            round_robin: 0,
            outstanding: 0,
            warmup_tally: Tally::default(),
            steady: Tally::default(),
            second: Second::default(),
            second_latencies: Vec::new(),
            series: Vec::new(),
        };
        run.schedule_start();
        run
    }

    /// The sequence number of an event being scheduled now.
    fn schedule(&mut self) -> u64 {
        self.scheduled += 1;
        self.scheduled
    }

    fn push(&mut self, at: Time, kind: Kind) {
        let seq = self.schedule();
        self.timeline.push(at, seq, kind);
    }

    fn schedule_start(&mut self) {
        if let Some(first) = self.draw_arrival(Time::ZERO) {
            self.arrival = due(first, self.schedule());
            self.following = self.draw_arrival(first);
        }
        if let Some(workers) = self.scenario.load.workers
            && self.open.is_none()
        {
            for w in 0..workers.get() {
                // A microsecond apart, so that the workers do not move in lockstep.
                self.push(
                    Time::ZERO + Nanos::from_micros(u64::from(w)),
                    Kind::Worker(w),
                );
            }
        }
        for (i, change) in self.scenario.service.changes.iter().enumerate() {
            let at = Time::ZERO + change.at;
            if at < self.end {
                self.push(at, Kind::Change(i as u32));
            }
        }
        self.first_second = self.scheduled + 1;
        self.scheduled += u64::from(self.seconds);
        self.second_end = self.second_due();
    }

    /// The open-loop arrival after one at `t`, if there is one before the end.
    fn draw_arrival(&mut self, t: Time) -> Option<Time> {
        let open = self.open.as_ref()?;
        open.next_after(t, &mut self.rng_arrivals)
            .filter(|&next| next < self.end)
    }

    /// The end of second `next_second`, if it is one of the series.
    fn second_due(&self) -> Due {
        let s = self.next_second;
        if s > self.seconds {
            return NOT_PENDING;
        }
        let s = u64::from(s);
        let end = Nanos::from_nanos(self.scenario.series_step().as_nanos().saturating_mul(s));
        due(Time::ZERO + end, self.first_second + s - 1)
    }

    /// Handles the events in `(time, sequence)` order until none is left, or the clients
    /// are done and nobody waits.
    ///
    /// Arrivals and client deadlines are two thirds of the events, and the ends of seconds
    /// are all scheduled at the start: each of the three has at most one event pending at a
    /// time, so it waits beside the timeline with its sequence number, and the next event is
    /// the earliest of four. The order is the one a single queue of all events would give.
    fn run(&mut self) {
        loop {
            let on_timeline = self
                .timeline
                .peek()
                .map_or(NOT_PENDING, |(at, seq)| due(at, seq));
            let next = on_timeline
                .min(self.arrival)
                .min(self.deadline_timer)
                .min(self.second_end);
            if next == NOT_PENDING {
                break;
            }
            let at = due_time(next);
            if at > self.end && self.outstanding == 0 {
                break;
            }
            self.now = at;
            self.events += 1;
            // Sequence numbers are unique: the one equal to `next` is the source.
            if next == self.arrival {
                self.arrival = NOT_PENDING;
                self.new_request(None);
                if let Some(next) = self.following {
                    self.arrival = due(next, self.schedule());
                    self.following = self.draw_arrival(next);
                }
                continue;
            }
            if next == self.deadline_timer {
                self.deadline_timer = NOT_PENDING;
                self.deadlines();
                continue;
            }
            if next == self.second_end {
                let s = self.next_second;
                self.next_second += 1;
                self.second_end = self.second_due();
                self.end_second(s);
                continue;
            }
            let Some((_, kind)) = self.timeline.pop() else {
                break;
            };
            match kind {
                Kind::Worker(w) => {
                    if at < self.end {
                        self.new_request(Some(w));
                    }
                }
                Kind::Retry(idx) => self.start(idx),
                Kind::Done(token) => self.done(token),
                Kind::Tick(i) => {
                    let i = usize::from(i);
                    if self.tick_at[i] == at {
                        self.tick_at[i] = Time::MAX;
                        if let Front::Gates(gates) = &mut self.front {
                            gates[i].tick(at);
                        }
                        self.drain(i);
                    }
                }
                Kind::Change(k) => self.change(k as usize),
            }
        }
    }

    /// A caller sends a new request.
    fn new_request(&mut self, worker: Option<u32>) {
        let now = self.now;
        // Every draw happens whatever becomes of the request, to keep the streams aligned.
        let priority = self.mix.draw(&mut self.rng_mix, now);
        let factor = self.scenario.service.draw_factor(&mut self.rng_work);
        let steady = now >= self.warmup;
        let tier = priority.tier();
        if steady {
            self.steady.offer(tier);
        } else {
            self.warmup_tally.offer(tier);
        }
        self.second.offered += 1;
        if let Some(cap) = self.scenario.load.connections
            && self.outstanding >= u64::from(cap.get())
        {
            self.count(tier, steady, Ending::Unsent);
            return;
        }
        self.outstanding += 1;
        let idx = self.alloc(Attempt {
            generation: 0,
            first: now,
            priority,
            factor,
            steady,
            instance: 0,
            number: 0,
            worker,
            waiting: false,
            in_service: false,
            ticket: None,
            permit: None,
        });
        self.start(idx);
    }

    fn alloc(&mut self, attempt: Attempt) -> u32 {
        match self.free.pop() {
            Some(idx) => {
                let slot = &mut self.attempts[idx as usize];
                let generation = slot.generation;
                *slot = Attempt {
                    generation,
                    ..attempt
                };
                idx
            }
            None => {
                self.attempts.push(attempt);
                (self.attempts.len() - 1) as u32
            }
        }
    }

    /// Frees the slot once nobody refers to it any more.
    fn release(&mut self, idx: u32) {
        let a = &mut self.attempts[idx as usize];
        if !a.waiting && !a.in_service && a.ticket.is_none() {
            a.generation = a.generation.wrapping_add(1);
            a.permit = None;
            self.free.push(idx);
        }
    }

    /// The attempt in `idx` goes out now.
    fn start(&mut self, idx: u32) {
        let now = self.now;
        let i = self.choose_instance();
        let deadline = now + self.scenario.load.timeout;
        let generation = {
            let a = &mut self.attempts[idx as usize];
            a.waiting = true;
            a.instance = i as u8;
            a.generation
        };
        self.deadlines.push_back((deadline, idx, generation));
        if self.deadline_timer == NOT_PENDING {
            self.deadline_timer = due(deadline, self.schedule());
        }
        let priority = self.attempts[idx as usize].priority;
        match &mut self.front {
            Front::Off => self.send(idx, None),
            Front::Leases(leases) => {
                if leases[i].try_take(now) {
                    self.send(idx, None);
                } else {
                    self.turned_away(idx, Ending::Shed);
                }
            }
            Front::Gates(gates) => {
                let arrival = gates[i].arrive(now, priority);
                // An arrival that displaced a less important queued request may take its
                // slot: the displaced one's refusal is delivered while the slot still names
                // it (recorded first, the refusal found the new request there, and the
                // displaced one waited for its caller's timeout).
                self.drain(i);
                match arrival {
                    Arrival::Admitted(permit) => self.send(idx, Some(permit)),
                    Arrival::Queued(ticket) => {
                        self.attempts[idx as usize].ticket = Some(ticket);
                        let table = &mut self.tickets[i];
                        if table.len() <= ticket.slot() {
                            table.resize(ticket.slot() + 1, u32::MAX);
                        }
                        table[ticket.slot()] = idx;
                    }
                    Arrival::Rejected(_) => self.turned_away(idx, Ending::Shed),
                }
                self.drain(i);
            }
        }
    }

    fn choose_instance(&mut self) -> usize {
        let n = self.instances.len();
        if n == 1 {
            return 0;
        }
        let mut next_in_turn = || {
            let i = self.round_robin;
            self.round_robin = (i + 1) % n;
            i
        };
        match self.scenario.service.balance {
            Balance::RoundRobin => next_in_turn(),
            Balance::LeastLoaded => {
                let now = self.now;
                let mut best = (f64::NEG_INFINITY, 0);
                for i in 0..n {
                    let score = match &mut self.front {
                        Front::Off => 1.0 / (1.0 + f64::from(self.instances[i].in_service())),
                        Front::Leases(leases) => leases[i].availability(now),
                        Front::Gates(gates) => {
                            let g = &gates[i];
                            let limit = f64::from(g.limit());
                            (limit - f64::from(g.inflight()) - g.queued() as f64) / limit
                        }
                    };
                    if score > best.0 {
                        best = (score, i);
                    }
                }
                if best.0 > 0.0 {
                    best.1
                } else {
                    // Nowhere has room: RSocket's balancer falls back to round robin.
                    let i = self.round_robin;
                    self.round_robin = (i + 1) % n;
                    i
                }
            }
        }
    }

    /// The attempt reaches the service.
    fn send(&mut self, idx: u32, permit: Option<Permit>) {
        let a = &mut self.attempts[idx as usize];
        let i = usize::from(a.instance);
        a.in_service = true;
        a.permit = permit;
        match self.instances[i].arrive(self.now, u64::from(idx), a.factor) {
            Admission::Started(done) => self.push(done, Kind::Done(idx)),
            Admission::Queued => {}
            Admission::Refused => {
                a.in_service = false;
                if let (Some(permit), Front::Gates(gates)) = (a.permit.take(), &mut self.front) {
                    // A refusal is an overload signal, like a 503 from the upstream.
                    gates[i].complete(self.now, permit, Outcome::Dropped);
                }
                self.turned_away(idx, Ending::Refused);
            }
        }
    }

    /// The attempt failed at once (shed, expired, refused): retried or ended.
    fn turned_away(&mut self, idx: u32, ending: Ending) {
        self.attempts[idx as usize].waiting = false;
        let retries = &self.scenario.load.retries;
        if retries.on_rejection() && self.attempts[idx as usize].number < retries.max {
            self.retry(idx);
        } else {
            self.end_request(idx, ending);
        }
        self.release(idx);
    }

    fn retry(&mut self, idx: u32) {
        let a = &self.attempts[idx as usize];
        let next = Attempt {
            generation: 0,
            first: a.first,
            priority: a.priority,
            factor: a.factor,
            steady: a.steady,
            instance: 0,
            number: a.number + 1,
            worker: a.worker,
            waiting: false,
            in_service: false,
            ticket: None,
            permit: None,
        };
        let at = self.now + self.scenario.load.retries.backoff;
        let slot = self.alloc(next);
        self.push(at, Kind::Retry(slot));
    }

    fn end_request(&mut self, idx: u32, ending: Ending) {
        let a = &self.attempts[idx as usize];
        let (tier, steady, worker) = (a.priority.tier(), a.steady, a.worker);
        self.outstanding -= 1;
        self.count(tier, steady, ending);
        if let Some(w) = worker {
            let at = self.now + self.scenario.load.think;
            if at < self.end {
                self.push(at, Kind::Worker(w));
            }
        }
    }

    fn count(&mut self, tier: u8, steady: bool, ending: Ending) {
        if steady {
            self.steady.end(tier, ending);
        } else {
            self.warmup_tally.end(tier, ending);
        }
        match ending {
            Ending::Ok(latency) => {
                self.second.ok += 1;
                self.second.ok_by_tier[usize::from(tier)] += 1;
                self.second_latencies.push(latency.as_nanos());
            }
            Ending::Shed | Ending::Refused | Ending::Unsent => self.second.shed += 1,
            Ending::Expired => self.second.expired += 1,
            Ending::TimedOut { .. } => self.second.timed_out += 1,
        }
    }

    /// The service finished a request.
    fn done(&mut self, idx: u32) {
        let now = self.now;
        let i = usize::from(self.attempts[idx as usize].instance);
        if let Some(next) = self.instances[i].finish(now) {
            self.push(next.done, Kind::Done(next.token as u32));
        }
        let a = &mut self.attempts[idx as usize];
        a.in_service = false;
        let permit = a.permit.take();
        let waiting = a.waiting;
        if let (Some(permit), Front::Gates(gates)) = (permit, &mut self.front) {
            // A late answer is an overload signal only if the service alone took longer than
            // the caller waits; otherwise the caller's time went in the gate's queue, and the
            // answer is a plain measurement of the service (see the module docs).
            let service_too_slow = now - permit.admitted() >= self.scenario.load.timeout;
            let outcome = if waiting || !service_too_slow {
                Outcome::Success
            } else {
                Outcome::Dropped
            };
            gates[i].complete(now, permit, outcome);
        }
        if waiting {
            let a = &mut self.attempts[idx as usize];
            a.waiting = false;
            let latency = now - a.first;
            self.end_request(idx, Ending::Ok(latency));
        }
        self.release(idx);
        self.drain(i);
    }

    /// Callers whose deadline passed give up.
    fn deadlines(&mut self) {
        let now = self.now;
        while let Some(&(at, idx, generation)) = self.deadlines.front() {
            if at > now {
                break;
            }
            self.deadlines.pop_front();
            let a = &mut self.attempts[idx as usize];
            if a.generation != generation || !a.waiting {
                continue;
            }
            a.waiting = false;
            let i = usize::from(a.instance);
            if let Front::Gates(gates) = &mut self.front {
                if let Some(ticket) = a.ticket
                    && gates[i].cancel(now, ticket)
                {
                    a.ticket = None;
                } else if a.permit.is_some() {
                    gates[i].caller_left(now, self.scenario.load.timeout);
                }
            }
            let retries = &self.scenario.load.retries;
            if retries.on_timeout && self.attempts[idx as usize].number < retries.max {
                self.retry(idx);
            } else {
                let a = &self.attempts[idx as usize];
                let unservable = self.instances[i]
                    .own_work(a.factor)
                    .is_some_and(|work| work >= self.scenario.load.timeout);
                self.end_request(idx, Ending::TimedOut { unservable });
            }
            self.release(idx);
            self.drain(i);
        }
        if let Some(&(at, _, _)) = self.deadlines.front() {
            self.deadline_timer = due(at, self.schedule());
        }
    }

    /// Delivers what the gate of instance `i` decided about queued requests, and keeps its
    /// tick scheduled.
    fn drain(&mut self, i: usize) {
        loop {
            let Front::Gates(gates) = &mut self.front else {
                return;
            };
            let Some(event) = gates[i].poll_event() else {
                break;
            };
            match event {
                Event::Admitted { ticket, permit, .. } => {
                    match waiter(&self.tickets[i], &self.attempts, ticket) {
                        Some(idx) => {
                            let a = &mut self.attempts[idx as usize];
                            a.ticket = None;
                            if a.waiting {
                                self.send(idx, Some(permit));
                            } else {
                                gates[i].cancel_permit(self.now, permit);
                                self.release(idx);
                            }
                        }
                        None => gates[i].cancel_permit(self.now, permit),
                    }
                }
                Event::Expired { ticket } | Event::Rejected { ticket, .. } => {
                    let ending = if matches!(event, Event::Expired { .. }) {
                        Ending::Expired
                    } else {
                        Ending::Shed
                    };
                    if let Some(idx) = waiter(&self.tickets[i], &self.attempts, ticket) {
                        let a = &mut self.attempts[idx as usize];
                        a.ticket = None;
                        if a.waiting {
                            self.turned_away(idx, ending);
                        } else {
                            self.release(idx);
                        }
                    }
                }
            }
        }
        if let Front::Gates(gates) = &mut self.front {
            let next = gates[i].next_tick();
            if next < self.tick_at[i] {
                let at = next.max(self.now);
                self.tick_at[i] = at;
                self.push(at, Kind::Tick(i as u8));
            }
        }
    }

    fn change(&mut self, k: usize) {
        let change = &self.scenario.service.changes[k];
        for i in 0..self.instances.len() {
            self.instances[i].apply(change);
            while let Some(started) = self.instances[i].start_waiting(self.now) {
                self.push(started.done, Kind::Done(started.token as u32));
            }
        }
    }

    fn end_second(&mut self, s: u32) {
        let mut second = std::mem::take(&mut self.second);
        second.second = s;
        let latencies = &mut self.second_latencies;
        (second.p50_ms, second.p99_ms) = median_and_p99_ms(latencies);
        latencies.clear();
        second.inflight = self.instances.iter().map(Instance::in_service).sum();
        match &self.front {
            Front::Off => {}
            Front::Gates(gates) => {
                second.limit = Some(gates.iter().map(Gate::limit).sum());
                second.queued = gates.iter().map(|g| g.queued() as u32).sum();
                let drop: f64 = gates
                    .iter()
                    .map(|g| g.snapshot(self.now).regulator.reject_ratio)
                    .sum();
                second.drop_p = Some(drop / gates.len() as f64);
            }
            Front::Leases(leases) => {
                second.limit = Some(leases.iter().map(StaticLease::allowed).sum());
            }
        }
        self.series.push(second);
    }

    fn finish(self) -> ArmRun {
        let total = self.scenario.duration.as_secs_f64();
        let steady_secs = (self.scenario.duration - self.scenario.warmup).as_secs_f64();
        let warmup_s = self.scenario.warmup.as_secs_f64();
        let step_s = self.scenario.series_step().as_secs_f64();
        let mean_limit = |from: f64| {
            let limits: Vec<f64> = self
                .series
                .iter()
                .filter(|s| f64::from(s.second) * step_s > from)
                .filter_map(|s| s.limit.map(f64::from))
                .collect();
            (!limits.is_empty()).then(|| limits.iter().sum::<f64>() / limits.len() as f64)
        };
        let mut whole = self.warmup_tally;
        whole.add(&self.steady);
        let whole = whole.summary(total, mean_limit(0.0));
        let steady = self.steady.summary(steady_secs, mean_limit(warmup_s));
        let settle_s = self
            .scenario
            .overload_at
            .zip(steady.limit)
            .and_then(|(at, settled)| settle_time(&self.series, step_s, at.as_secs_f64(), settled));
        ArmRun {
            name: self.arm.name.clone(),
            load_rps: self.load_rps,
            whole,
            steady,
            settle_s,
            series: self.series,
            events: self.events,
        }
    }
}

/// The attempt that holds `ticket`, from the table of its gate's queue slots, if one still
/// does.
fn waiter(table: &[u32], attempts: &[Attempt], ticket: Ticket) -> Option<u32> {
    let idx = *table.get(ticket.slot())?;
    let holder = attempts.get(idx as usize)?;
    (holder.ticket == Some(ticket)).then_some(idx)
}

/// Seconds from `from` until the limit stays within 20% of `settled`, or within one request
/// of it, for the rest of the run; `None` if it never does. The limit is read as the median
/// of the 5 per-second values around each second, so that a probe (Autotune lowers the limit
/// by a quarter for one window every few seconds, by design) or one exploration step does not
/// count as unsettled. A limit moves by whole requests: under 5, 20% of it is less than one,
/// and a limit held at 2 that probes 1 (or a mean of 1.5 between them) would never read as
/// settled, whatever it did. The entries of the series are `step_s` seconds each (a second
/// for a scenario file).
pub(crate) fn settle_time(series: &[Second], step_s: f64, from: f64, settled: f64) -> Option<f64> {
    let after: Vec<(u32, f64)> = series
        .iter()
        .filter(|s| f64::from(s.second) * step_s > from)
        .filter_map(|s| s.limit.map(|l| (s.second, f64::from(l))))
        .collect();
    let median = |k: usize| {
        let mut window: Vec<f64> = after[k.saturating_sub(2)..(k + 3).min(after.len())]
            .iter()
            .map(|&(_, l)| l)
            .collect();
        window.sort_by(f64::total_cmp);
        window[window.len() / 2]
    };
    let mut first = None;
    for k in (0..after.len()).rev() {
        if (median(k) - settled).abs() <= (0.2 * settled).max(1.0) {
            first = Some(f64::from(after[k].0) * step_s - from);
        } else {
            break;
        }
    }
    first
}

/// The index in sorted order of the `q`-quantile of `n` values: the sample of rank
/// `ceil(q * n)`.
fn quantile_index(n: usize, q: f64) -> usize {
    ((q * n as f64).ceil() as usize).clamp(1, n) - 1
}

/// The median and the 99th percentile of `values` (nanoseconds), in milliseconds rounded to
/// the microsecond; `None` when there are none. The 99th percentile's sample is at or past the
/// median's in sorted order, so it is selected among the values the median's selection left
/// after it (each sample, as a value, is the same whatever the order of equal values).
fn median_and_p99_ms(values: &mut [u64]) -> (Option<f64>, Option<f64>) {
    if values.is_empty() {
        return (None, None);
    }
    let ms = |v: u64| Some((v as f64 / 1e3).round() / 1e3);
    let (median, p99) = (
        quantile_index(values.len(), 0.5),
        quantile_index(values.len(), 0.99),
    );
    let (_, &mut at_median, after) = values.select_nth_unstable(median);
    let at_p99 = if p99 == median {
        at_median
    } else {
        *after.select_nth_unstable(p99 - median - 1).1
    };
    (ms(at_median), ms(at_p99))
}

#[cfg(test)]
mod tests;

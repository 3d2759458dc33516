//! The core's sans-IO gate, shared between tasks and threads.
//!
//! One `tidegate_core::gate::Gate` sits behind a mutex that is held for a few tens of
//! nanoseconds per call; the same code decides here as in the simulator. Two things keep the
//! mutex off the common path:
//!
//! - **Lent slots.** While nothing is queued and the regulator would admit anyone, the core
//!   lends its free slots ([`Gate::lend`]); they sit in an atomic counter, and
//!   [`SharedGate::acquire`] takes one with a compare-and-swap, without the lock. After every
//!   locked call the credits are re-synchronised with the core (unused ones reclaimed, free
//!   ones lent again), so they never exceed the limit in force and disappear as soon as a
//!   queue forms, when arrivals must be ordered by priority under the lock.
//! - **Returned slots.** While the gate still lends, a request that took a lent slot puts it
//!   back into the counter when it ends, and leaves what the core must learn from it (its
//!   latency, its outcome) in a bounded lock-free buffer. The next locked call, whoever makes
//!   it, first records the buffered requests in the core ([`Gate::record_lent`]), so every
//!   decision under the lock sees them. A drop (an overload signal the limit must act on
//!   before the next arrival), a full buffer, a due tick, a gate that stopped lending or one
//!   with more in flight than its limit (the limit backed off) sends the release through the
//!   lock instead. A release that races the gate closing can leave a credit the next locked
//!   call takes back; until then one arrival may pass a queue that formed a moment before.
//! - **No timer task.** Time-driven work (expiring queued requests, the regulator's periodic
//!   update) is done by whoever calls in after it fell due: every acquire and release checks
//!   an atomic "next tick" time, and a queued request sleeps until its own deadline, then
//!   ticks the gate itself. A gate with no traffic has nothing to do.
//!
//! Time comes from [`crate::ClockSource`]: the CPU's time-stamp counter in production, tokio's
//! clock when it is paused, so that tests run in virtual time.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Waker};

use crossbeam_queue::ArrayQueue;
use prometheus_client::metrics::histogram::Histogram;
use tidegate_core::config::GateConfig;
use tidegate_core::gate::{Arrival, Event, Gate, Lease, LentPermit, Snapshot};
use tidegate_core::limit::Outcome;
use tidegate_core::peers::{PeerConfig, PeerMean, PeerStamp};
use tidegate_core::queue::Ticket;
use tidegate_core::{Nanos, Priority, Time};
use tokio::time::{Instant, Sleep};

use crate::clock::{Clock, ClockSource};
use crate::credits::Credits;
use crate::error::{Shed, ShedReason};

/// A gate shared by every task of a service: clone it freely, each clone is the same gate.
#[derive(Clone)]
pub struct SharedGate {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    state: Mutex<State>,
    /// Slots lent by the core and not yet taken, with the core's in-flight count (lent
    /// slots included) after the last settle: what a request that takes one reports as in
    /// flight.
    credits: Credits,
    /// When the core next has time-driven work, in its nanoseconds.
    next_tick: AtomicU64,
    /// Whether the core lends, as of the last settle: released slots may go back to the
    /// credits.
    lending: AtomicBool,
    /// Requests that ended on a lent slot that went back to the credits, not yet recorded.
    returned: ArrayQueue<Returned>,
    /// The regulator's cut-off rank as of the last settle ([`NO_CUTOFF`] for none), so that a
    /// shed request carries it without a second trip through the lock.
    cutoff_rank: AtomicU32,
    /// [`QueueConfig::hold_back_starving`](tidegate_core::gate::QueueConfig): a shed request
    /// then carries the cut-off the gate tells ([`Gate::told_cutoff`]), read under the lock
    /// when it is shed; admissions and completions never look at the queue for it.
    hold_back_starving: bool,
    clock: Clock,
    retry_after: std::time::Duration,
    /// Time spent queued by requests admitted from the queue, in seconds.
    queue_wait: Histogram,
}

/// A request that ended on a lent slot, waiting to be recorded by the core.
struct Returned {
    permit: LentPermit,
    outcome: Option<Outcome>,
    at: Time,
}

/// [`Inner::cutoff_rank`] when the regulator cuts off no rank.
const NO_CUTOFF: u32 = u32::MAX;

/// How many ended requests may wait to be recorded before a release takes the lock itself.
const RETURNED_CAPACITY: usize = 256;

struct State {
    gate: Gate,
    waiters: HashMap<Ticket, Waiter>,
}

#[derive(Default)]
struct Waiter {
    waker: Option<Waker>,
    decided: Option<Decision>,
}

enum Decision {
    Admitted(tidegate_core::gate::Permit),
    Shed(ShedReason),
}

impl SharedGate {
    /// A gate with `config`; shed requests are told to retry after `retry_after`.
    pub fn new(config: &GateConfig, retry_after: std::time::Duration) -> SharedGate {
        SharedGate::with_clock(config, retry_after, ClockSource::Auto)
    }

    /// As [`SharedGate::new`], reading the time from `clock`.
    pub fn with_clock(
        config: &GateConfig,
        retry_after: std::time::Duration,
        clock: ClockSource,
    ) -> SharedGate {
        let buckets = prometheus_client::metrics::histogram::exponential_buckets(0.0005, 2.0, 14);
        SharedGate {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    gate: config.build(),
                    waiters: HashMap::new(),
                }),
                credits: Credits::default(),
                next_tick: AtomicU64::new(0),
                lending: AtomicBool::new(false),
                returned: ArrayQueue::new(RETURNED_CAPACITY),
                cutoff_rank: AtomicU32::new(NO_CUTOFF),
                hold_back_starving: config.queue.hold_back_starving,
                clock: Clock::new(clock),
                retry_after,
                queue_wait: Histogram::new(buckets),
            }),
        }
    }

    /// Waits for the right to send one request of `priority` to the service: at once if
    /// there is room, after queueing if not, or an error if it is shed. Dropping the future
    /// while it waits takes the request out of the queue.
    ///
    /// # Panics
    ///
    /// A request that queues waits on a tokio timer (its queue timeout): polled outside a
    /// tokio runtime with timers enabled, that future panics as `tokio::time::sleep` does.
    /// One admitted at once needs no runtime.
    pub fn acquire(&self, priority: Priority) -> Acquire {
        Acquire {
            gate: Some(self.inner.clone()),
            priority,
            state: AcquireState::Start,
        }
    }

    /// A point-in-time view of the gate. `inflight` counts requests, not lent slots.
    pub fn snapshot(&self) -> Snapshot {
        let now = self.inner.now();
        let state = self.inner.lock();
        let mut snapshot = state.gate.snapshot(now);
        let credits = self.inner.credits.available();
        snapshot.inflight = snapshot.inflight.saturating_sub(credits);
        snapshot.lent = snapshot.lent.saturating_sub(credits);
        snapshot
    }

    /// The cut-off rank the gate tells its callers now ([`Gate::told_cutoff`]): the
    /// regulator's, and with `hold_back_starving`, no less important than the most
    /// important rank waiting half the queue's timeout. `None` while it cuts nothing.
    pub fn told_cutoff(&self) -> Option<u16> {
        let now = self.inner.now();
        self.inner.lock().gate.told_cutoff(now)
    }

    /// The concurrency limit in force.
    pub fn limit(&self) -> u32 {
        self.inner.lock().gate.limit()
    }

    /// Applies a lease granted by the service behind the gate (see [`crate::lease`]): at most
    /// `allowed` in flight until `ttl` from now.
    pub fn set_lease(&self, allowed: u32, ttl: std::time::Duration) {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        state.gate.set_lease(
            now,
            Lease {
                allowed,
                expires: now + Nanos::from(ttl),
            },
        );
        self.inner.settle(&mut state, now);
    }

    /// What this gate says of itself on the requests its proxy forwards (`docs/peers.md`):
    /// its learnt limit and its regulator's drop ratio, under the proxy's `id`.
    pub fn peer_stamp(&self, id: u64) -> PeerStamp {
        self.inner.lock().gate.peer_stamp(id)
    }

    /// The instances behind the gate said the means of its peers' stamps (`docs/peers.md`):
    /// the limit in force and the regulator's drop ratio move toward them, as `config` says,
    /// until `config.ttl` from now.
    pub fn hear_peers(&self, mean: &PeerMean, config: &PeerConfig) {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        state.gate.hear_peers(now, mean, config);
        self.inner.settle(&mut state, now);
    }

    pub(crate) fn queue_wait(&self) -> &Histogram {
        &self.inner.queue_wait
    }
}

impl fmt::Debug for SharedGate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedGate")
            .field("snapshot", &self.snapshot())
            .finish()
    }
}

impl Inner {
    #[inline(always)]
    fn now(&self) -> Time {
        self.clock.now()
    }

    fn instant(&self, at: Time) -> Instant {
        self.clock.instant(at)
    }

    /// Locks the core and records the requests that ended on returned slots, so that what
    /// happens under the lock sees them.
    ///
    /// A poisoned lock means a panic while the gate was being updated by another thread; its
    /// state is still consistent (every update is a few field writes), so carry on.
    fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(Returned {
            permit,
            outcome,
            at,
        }) = self.returned.pop()
        {
            state.gate.record_lent(at, permit, outcome);
        }
        state
    }

    #[inline(always)]
    fn tick_due(&self, now: Time) -> bool {
        now.as_nanos() >= self.next_tick.load(Ordering::Relaxed)
    }

    /// After any change to the core: delivers its decisions to the waiting requests and
    /// re-synchronises the lent slots and the next tick time.
    fn settle(&self, state: &mut State, now: Time) {
        while let Some(event) = state.gate.poll_event() {
            let (ticket, decision) = match event {
                Event::Admitted {
                    ticket,
                    permit,
                    waited,
                } => {
                    self.queue_wait.observe(waited.as_secs_f64());
                    (ticket, Decision::Admitted(permit))
                }
                Event::Expired { ticket } => (ticket, Decision::Shed(ShedReason::Expired)),
                Event::Rejected { ticket, reason } => (ticket, Decision::Shed(reason.into())),
            };
            match state.waiters.get_mut(&ticket) {
                Some(waiter) => {
                    waiter.decided = Some(decision);
                    if let Some(waker) = waiter.waker.take() {
                        waker.wake();
                    }
                }
                // Every waiter leaves the map only after its ticket left the queue, so this
                // is unreachable; if it were not, the slot must not leak.
                None => {
                    if let Decision::Admitted(permit) = decision {
                        state.gate.cancel_permit(now, permit);
                    }
                }
            }
        }
        // Credits stay valid while the gate would still lend them: take them back only when a
        // queue formed, the regulator started to judge arrivals, or the limit fell below what
        // is lent. Otherwise only the newly freed slots are added.
        if self.credits.available() > 0
            && (!state.gate.may_lend() || state.gate.inflight() > state.gate.limit())
        {
            self.reclaim_credits(state, now);
        }
        let lent = state.gate.lend(now);
        self.credits.settle(lent, state.gate.inflight());
        // A slot that ends may go straight back to the credits only while the gate is within
        // its limit: after the limit fell below what is in flight (a backoff, a lease), ends
        // go through the lock so that the core sees the slots leave until it is within again.
        let within_limit = state.gate.inflight() <= state.gate.limit();
        self.lending
            .store(state.gate.may_lend() && within_limit, Ordering::Release);
        self.next_tick
            .store(state.gate.next_tick().as_nanos(), Ordering::Relaxed);
        let cutoff = state.gate.regulator_state().cutoff_rank;
        self.cutoff_rank
            .store(cutoff.map_or(NO_CUTOFF, u32::from), Ordering::Relaxed);
    }

    /// The cut-off rank a shed request carries: the regulator's as of the last settle, or
    /// with `hold_back_starving`, the one the gate tells now.
    fn shed_cutoff_rank(&self) -> Option<u16> {
        let cutoff = u16::try_from(self.cutoff_rank.load(Ordering::Relaxed)).ok();
        if self.hold_back_starving && cutoff.is_some() {
            let now = self.now();
            return self.lock().gate.told_cutoff(now);
        }
        cutoff
    }

    /// Gives the lent slots nobody took back to the core.
    fn reclaim_credits(&self, state: &mut State, now: Time) {
        let unused = self.credits.reclaim();
        if unused > 0 {
            state.gate.reclaim(now, unused);
        }
    }

    /// Ticks the core if its next tick fell due.
    fn tick_if_due(&self, state: &mut State, now: Time) {
        if self.tick_due(now) {
            state.gate.tick(now);
        }
    }

    fn release(&self, permit: Held, outcome: Option<Outcome>) {
        let now = self.now();
        let permit = match permit {
            // A drop is an overload signal: the limit must hear it before the next arrival
            // takes a slot lent under the old limit, so it goes through the lock.
            Held::Lent(permit)
                if outcome != Some(Outcome::Dropped)
                    && self.lending.load(Ordering::Acquire)
                    && !self.tick_due(now) =>
            {
                match self.returned.push(Returned {
                    permit,
                    outcome,
                    at: now,
                }) {
                    Ok(()) => {
                        self.credits.give_back();
                        return;
                    }
                    Err(full) => Held::Lent(full.permit),
                }
            }
            held => held,
        };
        let mut state = self.lock();
        match (permit, outcome) {
            (Held::Core(permit), Some(outcome)) => state.gate.complete(now, permit, outcome),
            (Held::Core(permit), None) => state.gate.cancel_permit(now, permit),
            (Held::Lent(permit), Some(outcome)) => state.gate.complete_lent(now, permit, outcome),
            (Held::Lent(permit), None) => state.gate.cancel_lent(now, permit),
        }
        self.tick_if_due(&mut state, now);
        self.settle(&mut state, now);
    }
}

/// The future returned by [`SharedGate::acquire`].
#[must_use = "futures do nothing unless polled"]
pub struct Acquire {
    /// Moves into the permit when the request is admitted: one reference count per request.
    gate: Option<Arc<Inner>>,
    priority: Priority,
    state: AcquireState,
}

enum AcquireState {
    Start,
    Queued {
        ticket: Ticket,
        deadline: Pin<Box<Sleep>>,
    },
    Done,
}

impl fmt::Debug for Acquire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = match self.state {
            _ if self.gate.is_none() => "done",
            AcquireState::Start => "start",
            AcquireState::Queued { .. } => "queued",
            AcquireState::Done => "done",
        };
        f.debug_struct("Acquire")
            .field("priority", &self.priority)
            .field("state", &state)
            .finish()
    }
}

impl Acquire {
    /// Ends the future with `result`, handing the gate reference to the permit.
    #[inline(always)]
    fn finish(&mut self, result: Result<Held, ShedReason>) -> Poll<Result<Permit, Shed>> {
        self.state = AcquireState::Done;
        let Some(gate) = self.gate.take() else {
            panic!("`Acquire` polled after completion")
        };
        Poll::Ready(match result {
            Ok(held) => Ok(Permit::new(gate, held)),
            Err(reason) => Err(Shed::new(reason, gate.retry_after, gate.shed_cutoff_rank())),
        })
    }

    /// [`Acquire::poll`] through the lock: an arrival with no lent slot to take (read at
    /// `now`), or a queued one.
    #[inline(never)]
    fn poll_locked(
        &mut self,
        now: Option<Time>,
        cx: &mut Context<'_>,
    ) -> Poll<Result<Permit, Shed>> {
        let this = self;
        let Some(gate) = this.gate.as_ref() else {
            panic!("`Acquire` polled after completion")
        };
        match &mut this.state {
            AcquireState::Start => {
                let now = now.unwrap_or_else(|| gate.now());
                let mut state = gate.lock();
                // The credits go back to the core before it decides: it must see the
                // service as it is.
                gate.reclaim_credits(&mut state, now);
                gate.tick_if_due(&mut state, now);
                let result = match state.gate.arrive(now, this.priority) {
                    Arrival::Admitted(permit) => Some(Ok(Held::Core(permit))),
                    Arrival::Rejected(reason) => Some(Err(reason.into())),
                    Arrival::Queued(ticket) => {
                        let waker = Some(cx.waker().clone());
                        state.waiters.insert(
                            ticket,
                            Waiter {
                                waker,
                                decided: None,
                            },
                        );
                        // Waking at its own deadline lets this request expire itself if no
                        // other call ticks the gate sooner.
                        let deadline = state.gate.deadline(ticket).unwrap_or(now);
                        let sleep = Box::pin(tokio::time::sleep_until(gate.instant(deadline)));
                        this.state = AcquireState::Queued {
                            ticket,
                            deadline: sleep,
                        };
                        None
                    }
                };
                gate.settle(&mut state, now);
                drop(state);
                match result {
                    Some(result) => this.finish(result),
                    // The queue may already have moved (settle delivers events).
                    None => this.poll_locked(None, cx),
                }
            }
            AcquireState::Queued { ticket, deadline } => {
                let ticket = *ticket;
                let timer_fired = deadline.as_mut().poll(cx).is_ready();
                let mut state = gate.lock();
                if timer_fired {
                    let now = gate.now();
                    state.gate.tick(now);
                    gate.settle(&mut state, now);
                }
                let decided = match state.waiters.get_mut(&ticket) {
                    // Unreachable: the waiter is removed only here and in drop.
                    None => Some(Decision::Shed(ShedReason::Cancelled)),
                    Some(waiter) => {
                        let decided = waiter.decided.take();
                        if decided.is_none() {
                            waiter.waker = Some(cx.waker().clone());
                        }
                        decided
                    }
                };
                match decided {
                    Some(decision) => {
                        state.waiters.remove(&ticket);
                        drop(state);
                        this.finish(match decision {
                            Decision::Admitted(permit) => Ok(Held::Core(permit)),
                            Decision::Shed(reason) => Err(reason),
                        })
                    }
                    None => {
                        if timer_fired {
                            // A tick at or past the deadline expires the entry, so it is still
                            // queued only if its deadline is later (it cannot move, but the
                            // timer may fire a little early): sleep until then.
                            let at = state.gate.deadline(ticket).unwrap_or_else(|| gate.now());
                            drop(state);
                            deadline.as_mut().reset(gate.instant(at));
                            if deadline.as_mut().poll(cx).is_ready() {
                                cx.waker().wake_by_ref();
                            }
                        }
                        Poll::Pending
                    }
                }
            }
            AcquireState::Done => panic!("`Acquire` polled after completion"),
        }
    }

    /// The caller went away while the request was queued: out of the queue, or its slot back
    /// if it was admitted meanwhile.
    #[inline(never)]
    fn leave_queue(&mut self) {
        let (AcquireState::Queued { ticket, .. }, Some(gate)) = (&self.state, &self.gate) else {
            return;
        };
        let now = gate.now();
        let mut state = gate.lock();
        match state.waiters.remove(ticket).and_then(|w| w.decided) {
            // Admitted while nobody was polling: the slot goes back.
            Some(Decision::Admitted(permit)) => state.gate.cancel_permit(now, permit),
            Some(Decision::Shed(_)) => {}
            None => {
                state.gate.cancel(now, *ticket);
            }
        }
        gate.settle(&mut state, now);
    }
}

impl Future for Acquire {
    type Output = Result<Permit, Shed>;

    /// The lent slot, the common case, inlined into the caller: the permit is built where
    /// the caller keeps it, and the future's state, still `Start`, has nothing to drop.
    /// Everything else (the lock, the queue) is `Acquire::poll_locked`, out of line.
    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let now = match (&this.state, &this.gate) {
            (AcquireState::Start, Some(gate)) => {
                let now = gate.now();
                if !gate.tick_due(now)
                    && let Some(inflight) = gate.credits.take()
                    && let Some(gate) = this.gate.take()
                {
                    // The state stays `Start`, with nothing to drop: the gate gone is what
                    // marks the future done.
                    let permit = LentPermit::new(this.priority, now, inflight);
                    return Poll::Ready(Ok(Permit::new(gate, Held::Lent(permit))));
                }
                Some(now)
            }
            _ => None,
        };
        this.poll_locked(now, cx)
    }
}

impl Drop for Acquire {
    #[inline(always)]
    fn drop(&mut self) {
        if let AcquireState::Queued { .. } = self.state {
            self.leave_queue();
        }
    }
}

enum Held {
    Core(tidegate_core::gate::Permit),
    Lent(LentPermit),
}

/// The right to have one request in the service. Report how it went with
/// [`Permit::success`], [`Permit::dropped`] or [`Permit::ignore`]; a permit dropped without
/// a word counts as cancelled (the caller went away) and frees its slot, teaching the limit
/// nothing.
#[must_use = "a permit holds a slot until it is released"]
pub struct Permit {
    gate: Arc<Inner>,
    held: Option<Held>,
}

impl Permit {
    fn new(gate: Arc<Inner>, held: Held) -> Permit {
        Permit {
            gate,
            held: Some(held),
        }
    }

    /// The request succeeded: its latency measures the service's health.
    pub fn success(self) {
        self.release(Some(Outcome::Success));
    }

    /// The service failed in a way that signals overload (refused, reset, timed out, an
    /// overload status): the limit backs off.
    pub fn dropped(self) {
        self.release(Some(Outcome::Dropped));
    }

    /// The outcome says nothing about the service's capacity (a client error, say).
    pub fn ignore(self) {
        self.release(Some(Outcome::Ignored));
    }

    /// The service itself took `service` with this request, measured more narrowly than
    /// from admission to release (a proxy's own delays left out): the sample the limit
    /// learns from when the permit is released (see `tidegate_core::gate::Permit::measured`).
    pub fn measured(&mut self, service: std::time::Duration) {
        let service = Nanos::from(service);
        match &mut self.held {
            Some(Held::Core(permit)) => permit.measured(service),
            Some(Held::Lent(permit)) => permit.measured(service),
            None => {}
        }
    }

    /// The caller went away while the service has the request, `waited` after the request
    /// reached the gate (its queueing included); the request goes on, and the permit is
    /// released as usual when it ends. The gate learns from it how long callers wait (see
    /// `tidegate_core::gate::Gate::caller_left`). For a driver whose work outlives its
    /// caller, as a proxy's exchange does; where the work is cancelled with its caller, drop
    /// the permit instead.
    pub fn caller_left(&self, waited: std::time::Duration) {
        let now = self.gate.now();
        self.gate.lock().gate.caller_left(now, Nanos::from(waited));
    }

    /// Releases with `outcome`, or as cancelled for `None`.
    pub fn release(mut self, outcome: Option<Outcome>) {
        if let Some(held) = self.held.take() {
            self.gate.release(held, outcome);
        }
    }

    pub fn priority(&self) -> Priority {
        match &self.held {
            Some(Held::Core(p)) => p.priority(),
            Some(Held::Lent(p)) => p.priority(),
            None => Priority::default(),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(held) = self.held.take() {
            self.gate.release(held, None);
        }
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.held {
            Some(Held::Core(_)) => "queued-or-locked",
            Some(Held::Lent(_)) => "lent",
            None => "released",
        };
        f.debug_struct("Permit")
            .field("priority", &self.priority())
            .field("kind", &kind)
            .finish()
    }
}

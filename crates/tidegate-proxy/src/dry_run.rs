//! Dry run (`mode = "dry-run"`, for the whole proxy or one upstream): the gate decides every
//! request as usual, and the proxy counts what it would have shed, by reason and tier, but
//! forwards everything. What an operator needs before trusting a load shedder in production:
//! how much it would turn away, whom, and why, on their own traffic.
//!
//! How a request goes through a dry-run gate ([`judge`]):
//!
//! - **Admitted at once**: it holds its permit as in enforcing mode, released with its outcome
//!   at its last byte, so the limit keeps learning from the requests it would have let in.
//! - **Shed at once** (regulator, queue full, no lease; or the upstream's cut-off): counted in
//!   [`WouldShed`] and forwarded *without* a slot.
//! - **Queued**: forwarded at once (a dry run must not add latency), while its ticket stays in
//!   the gate's queue, in a task of its own, until the gate decides: shed (expired, or evicted
//!   by a more important arrival) is counted; admitted takes its slot until the request ends
//!   (at once, as cancelled, if it already has).
//!
//! Why a would-shed request takes no slot: the gate's in-flight count and queue must be what
//! they would be if it enforced. Forced into a slot, a would-shed request would push the
//! in-flight count past the limit, every later arrival would queue or be shed behind it, and
//! the dry run would report far more than enforcing would shed. The upstream still serves
//! every request, so under overload it is slower than it would be behind an enforcing gate,
//! and the limit learns from that: under overload the dry run's "would shed" tends to be
//! above what enforcing would shed (docs/proxy.md, "Dry run").

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tidegate_core::Priority;
use tidegate_core::limit::Outcome;
use tidegate_tower::Permit;

use crate::upstream::{GateSlot, Upstream};
use crate::would_shed::Reason;

/// A dry-run request's hold on its gate: the permit when the gate admitted it, and what
/// becomes of one that comes later from the queue.
#[derive(Debug)]
pub(crate) struct Shadow {
    held: Arc<Mutex<Held>>,
}

#[derive(Debug)]
enum Held {
    /// Queued in the gate: the decision is still to come.
    Waiting,
    Permit(Permit),
    /// The request ended (or was shed): a late admission gives its slot straight back.
    Ended,
}

impl Shadow {
    fn held(held: Held) -> Shadow {
        Shadow {
            held: Arc::new(Mutex::new(held)),
        }
    }

    /// The request ended with `outcome` (`None`: cancelled), the upstream having taken
    /// `upstream_time` if it was measured: the permit, if it has one, is released with them.
    pub(crate) fn release(self, outcome: Option<Outcome>, upstream_time: Option<Duration>) {
        let held = std::mem::replace(&mut *lock(&self.held), Held::Ended);
        if let Held::Permit(mut permit) = held {
            if let Some(upstream_time) = upstream_time {
                permit.measured(upstream_time);
            }
            permit.release(outcome);
        }
    }
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    // The state is one enum written whole: a panic elsewhere cannot leave it half-updated.
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Judges a request of `priority` for `upstream`'s gate of `partition` as an enforcing proxy
/// would, at `now`: the upstream's cut-off first, then the gate. Returns at once, whatever the
/// gate decides (see the module docs); `None`: the request holds nothing in the gate.
pub(crate) fn judge(
    upstream: &Upstream,
    partition: usize,
    priority: Priority,
    under: Option<u16>,
    now: u64,
) -> Option<Shadow> {
    let slot = &upstream.gates[partition];
    if upstream.cutoff.refuses(now, priority, under).is_some() {
        slot.would_shed.count(priority.tier(), Reason::Cutoff);
        return None;
    }
    judge_gate(slot, priority)
}

fn judge_gate(slot: &GateSlot, priority: Priority) -> Option<Shadow> {
    let tier = priority.tier();
    let mut acquire = slot.gate.acquire(priority);
    // One poll decides at once whatever the gate decides at once; a queued request has
    // registered this no-op waker, replaced by the task's when it polls again.
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut acquire).poll(&mut cx) {
        Poll::Ready(Ok(permit)) => Some(Shadow::held(Held::Permit(permit))),
        Poll::Ready(Err(shed)) => {
            if let Some(reason) = Reason::of(shed.reason()) {
                slot.would_shed.count(tier, reason);
            }
            None
        }
        Poll::Pending => {
            let shadow = Shadow::held(Held::Waiting);
            let held = shadow.held.clone();
            let would_shed = slot.would_shed.clone();
            tokio::spawn(async move {
                match acquire.await {
                    Ok(permit) => {
                        let mut held = lock(&held);
                        if matches!(*held, Held::Waiting) {
                            *held = Held::Permit(permit);
                        }
                        // Otherwise the request already ended: the permit drops here, its
                        // slot freed as cancelled, teaching the limit nothing.
                    }
                    Err(shed) => {
                        *lock(&held) = Held::Ended;
                        if let Some(reason) = Reason::of(shed.reason()) {
                            would_shed.count(tier, reason);
                        }
                    }
                }
            });
            Some(shadow)
        }
    }
}

//! Regulators: who is turned away at the door, before queueing, by how long the gate's own
//! queue makes requests wait.
//!
//! A limit caps how much work is in the service; what the limit holds back waits in the gate's
//! queue. A regulator keeps that queue short: it watches the queue (on every arrival, on every
//! departure into the service, and on a periodic tick) and rejects arrivals early, or drops
//! entries that waited too long, so that what is admitted is served within its deadline.

mod codel;
mod cutoff;
mod off;
mod pid;
mod pie;
#[cfg(test)]
pub(crate) mod testkit;

use std::fmt;

pub use codel::{Codel, CodelConfig, CodelMode};
pub use cutoff::PriorityCutoff;
pub use off::Off;
pub use pid::{Pid, PidConfig};
pub use pie::{Pie, PieConfig, ShedBy};

use crate::priority::Priority;
use crate::time::{Nanos, Time};

/// Most update intervals one late tick makes up for (see [`updates_due`]): past 64 of them
/// the controller has long settled on what the tick measured, or decayed to nothing.
const MAX_CATCH_UP: u64 = 64;

/// How many updates of a control law run every `update` a tick at `now` stands for, the
/// last one having run at `last`: one when on time, more when late, at most
/// [`MAX_CATCH_UP`]. A regulator's control law is a clock's (PIE's every 15 ms, PID's every
/// 100 ms), but only the simulator ticks the gate on time: the proxy and the tower layer
/// tick it on their own traffic, at a few requests a second every few hundred
/// milliseconds. A late tick runs the updates it missed, on what it measures.
fn updates_due(last: Time, now: Time, update: Nanos) -> u64 {
    ((now - last).as_nanos() / update.as_nanos().max(1)).clamp(1, MAX_CATCH_UP)
}

/// A regulator's answer about one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    Admit,
    Reject,
}

/// The gate's queue as a regulator sees it on a tick.
///
/// Counters are cumulative since the gate was created, so that a regulator computes rates over
/// whatever interval it chooses by keeping its previous reading.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct QueueStats {
    /// Entries waiting now.
    pub len: usize,
    /// How long the oldest waiting entry has waited (zero when empty).
    pub oldest_wait: Nanos,
    /// The last time the queue was empty (`now` if it is empty now).
    pub last_empty: Time,
    /// Requests in the service now, and the limit on them.
    pub inflight: u32,
    pub limit: u32,
    /// Arrivals at the gate that the regulator let through (queued or admitted at once).
    pub accepted: u64,
    /// Entries that went into the queue.
    pub enqueued: u64,
    /// Entries that left the queue into the service.
    pub dequeued: u64,
    /// Requests that left the service (any outcome).
    pub completed: u64,
}

/// What a regulator reports about itself, for metrics and dashboards.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RegulatorState {
    /// Fraction of arrivals it is rejecting now, in `[0, 1]` (PIE's drop probability, or the
    /// ratio its line is drawn at with `PieConfig::line_at_shed_share`; PID's rejection ratio).
    pub reject_ratio: f64,
    /// The least important rank still admitted, when shedding by priority: ranks above it are
    /// rejected. `None` when nothing is cut off.
    pub cutoff_rank: Option<u16>,
    /// Whether a burst allowance is letting everything through.
    pub burst: bool,
    /// Whether the regulator believes the service is overloaded.
    pub overloaded: bool,
    /// Where the regulator's own priority line lies, as a position among the ranks
    /// ([`PriorityCutoff::line`]), drawn on its own traffic whatever line its peers have it
    /// draw: what it stamps for its peers (`crate::peers`). `None` when it does not shed by
    /// priority, or has not seen any traffic yet.
    pub line: Option<f64>,
}

/// What the gates in front of the same instances said through them (`crate::peers`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PeersHeard {
    /// Their mean drop ratio.
    pub ratio: f64,
    /// The share of the way to `ratio` to move at each update.
    pub weight: f64,
    /// The mean position of their priority lines, if they stamped any.
    pub line: Option<f64>,
}

/// A queue regulator. The gate calls it on every arrival and on every departure from the queue,
/// and ticks it at [`Regulator::next_tick`].
pub trait Regulator: Send + fmt::Debug {
    /// Whether to let an arrival in (to the queue or straight to the service). `queue_len` is
    /// the queue length before this arrival.
    fn on_arrival(&mut self, now: Time, priority: Priority, queue_len: usize) -> Verdict;

    /// Whether an entry that waited `sojourn` may go on into the service, or is dropped now
    /// (CoDel drops at dequeue). `queue_len` is the number of entries still waiting after this
    /// one left: CoDel never drops the last entry of a queue that is emptying, and learns from
    /// it that the queue has been empty. The default lets everything through.
    fn on_dequeue(
        &mut self,
        _now: Time,
        _sojourn: Nanos,
        _priority: Priority,
        _queue_len: usize,
    ) -> Verdict {
        Verdict::Admit
    }

    /// Periodic update. Called at or after [`Regulator::next_tick`].
    fn tick(&mut self, now: Time, queue: &QueueStats);

    /// When the regulator wants its next tick; [`Time::MAX`] for never.
    fn next_tick(&self) -> Time;

    fn state(&self) -> RegulatorState;

    /// Whether, in its current state, the regulator admits every arrival and would decide
    /// nothing differently later for not having seen arrivals that find the queue empty.
    ///
    /// While this holds and the queue is empty, the gate may lend its free slots to a
    /// lock-free front end ([`crate::gate::Gate::lend`]), whose arrivals then skip
    /// `on_arrival`. The default, `false`, is always safe.
    fn transparent(&self) -> bool {
        false
    }

    /// What the gates in front of the same instances said (`crate::peers`), or `None` once
    /// it lapsed. The default ignores it: only a regulator with a drop ratio to share takes
    /// it.
    fn hear_peers(&mut self, _peers: Option<PeersHeard>) {}
}

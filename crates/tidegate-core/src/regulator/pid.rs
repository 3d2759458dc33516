//! Cinnamon's rejector (Uber): a PID controller on the gate queue's inflow and outflow finds
//! the share of arrivals to reject, and a priority cut-off picks whom.
//!
//! CoDel decides *whether* to shed and then sheds in bursts, so under heavy overload it swings
//! between rejecting everything and rejecting nothing. Cinnamon separates the two questions:
//! overload is "the queue has not been empty for a while" (after Facebook), and the amount to
//! shed is a ratio that a controller moves by how much faster the queue fills than it empties,
//! relative to the arrivals, so it works the same at 10 and at 100 000 requests per second.
//! Once the queue has drained, the controller can no longer see how much spare capacity there
//! is, so it lowers the ratio only slowly: it probes rather than reopening the gates at once.

use serde::{Deserialize, Serialize};

use super::cutoff::{HISTORY_HALF_LIFE, PriorityCutoff};
use super::{QueueStats, Regulator, RegulatorState, Verdict};
use crate::priority::Priority;
use crate::time::{Nanos, Time};

/// Configuration of [`Pid`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PidConfig {
    /// The queue must have been non-empty this long for the controller to engage. Cinnamon
    /// uses about 10 s inside Uber's services; a proxy whose queue timeouts are around a
    /// second must react sooner. Default 1 s.
    pub overload_after: Nanos,
    /// Time between updates of the ratio. Default 100 ms.
    pub update: Nanos,
    /// Gain on the queue's growth over an update, `(enqueued - dequeued) / arrivals`: the
    /// share of arrivals admitted beyond what the service took. Default 0.6.
    pub kp: f64,
    /// Gain on the standing queue, `queue_len / arrivals` (the queue in update intervals'
    /// worth of arrivals), per update: what drains the queue once inflow matches outflow.
    /// Default 0.03.
    pub ki: f64,
    /// Gain on the change of the queue's growth since the last update. Default 0.1.
    pub kd: f64,
    /// Once the queue has drained, the ratio falls by at most this much per second; it never
    /// falls faster. Default 0.1 (from 50% to nothing in 5 s).
    pub fall_rate: f64,
}

impl Default for PidConfig {
    fn default() -> PidConfig {
        PidConfig {
            overload_after: Nanos::from_secs(1),
            update: Nanos::from_millis(100),
            kp: 0.6,
            ki: 0.04,
            kd: 0.1,
            fall_rate: 0.1,
        }
    }
}

/// Cinnamon's PID rejector. Defaults: engages after the queue stood for 1 s, updates every
/// 100 ms, gains 0.6 / 0.03 / 0.1, falls by at most 0.1 per second.
///
/// Every `update`, with `A` the arrivals, `m = (enqueued - dequeued) / A` the queue's growth
/// over the interval and `b = queue_len / A` the standing queue, both relative to the
/// arrivals:
///
/// ```text
/// step = kp * m + ki * b + kd * (m - m_previous)
/// ```
///
/// This is the incremental form of a PID on the queue length (set point zero): `m` is the
/// queue's derivative, so `kp * m` summed over updates is proportional to the queue, `ki * b`
/// summed is its integral. In steady overload the admitted share settles where inflow equals
/// outflow, `1 - capacity / arrivals`, and the standing-queue term keeps pushing until the
/// queue is gone.
///
/// Fast to rise, slow to fall: a step up is taken whole; a step down is at most
/// `fall_rate * elapsed`. If the queue was empty at some moment of the interval and the
/// controller does not ask for more, the ratio falls by exactly that much: an empty queue
/// says the service has room, not how much.
///
/// The controller engages when the queue has not been empty for `overload_after`, and
/// disengages once the ratio is back to zero and the overload is over. The ratio is applied
/// through a [`PriorityCutoff`], so tier 5 goes before tier 4, and the high cohorts of a tier
/// before its low ones.
#[derive(Debug)]
pub struct Pid {
    config: PidConfig,
    update: Nanos,
    ratio: f64,
    engaged: bool,
    overloaded: bool,
    last_growth: f64,
    arrivals: u64,
    last_arrivals: u64,
    last_enqueued: u64,
    last_dequeued: u64,
    last_tick: Option<Time>,
    cutoff: PriorityCutoff,
}

impl Pid {
    pub fn new(config: &PidConfig) -> Pid {
        Pid {
            config: config.clone(),
            update: config.update.max(Nanos::from_nanos(1)),
            ratio: 0.0,
            engaged: false,
            overloaded: false,
            last_growth: 0.0,
            arrivals: 0,
            last_arrivals: 0,
            last_enqueued: 0,
            last_dequeued: 0,
            last_tick: None,
            cutoff: PriorityCutoff::new(HISTORY_HALF_LIFE),
        }
    }

    /// The share of arrivals being rejected.
    pub fn ratio(&self) -> f64 {
        self.ratio
    }

    fn step(&mut self, now: Time, last: Time, queue: &QueueStats) -> f64 {
        let arrivals = self.arrivals - self.last_arrivals;
        if queue.last_empty >= last {
            // The queue drained: the service has room, but how much is unknown.
            self.last_growth = 0.0;
            return -self.config.fall_rate.max(0.0) * (now - last).as_secs_f64();
        }
        if arrivals == 0 {
            return 0.0;
        }
        let arrivals = arrivals as f64;
        let flow = queue.enqueued.saturating_sub(self.last_enqueued) as f64
            - queue.dequeued.saturating_sub(self.last_dequeued) as f64;
        let growth = flow / arrivals;
        let backlog = queue.len as f64 / arrivals;
        let step = self.config.kp * growth
            + self.config.ki * backlog
            + self.config.kd * (growth - self.last_growth);
        self.last_growth = growth;
        step
    }
}

impl Regulator for Pid {
    fn on_arrival(&mut self, _: Time, priority: Priority, _: usize) -> Verdict {
        self.arrivals += 1;
        self.cutoff.record(priority.rank());
        if self.ratio > 0.0 && self.cutoff.should_reject(priority.rank()) {
            Verdict::Reject
        } else {
            Verdict::Admit
        }
    }

    fn tick(&mut self, now: Time, queue: &QueueStats) {
        if let Some(last) = self.last_tick {
            self.overloaded = now - queue.last_empty >= self.config.overload_after;
            self.engaged |= self.overloaded;
            if self.engaged {
                let step = self.step(now, last, queue);
                // `max`/`min` also turn a NaN from a degenerate configuration into 0.
                self.ratio = (self.ratio + step).max(0.0).min(1.0);
                self.engaged = self.ratio > 0.0 || self.overloaded;
            }
            if !self.engaged {
                self.ratio = 0.0;
                self.last_growth = 0.0;
            }
        }
        self.last_tick = Some(now);
        self.last_arrivals = self.arrivals;
        self.last_enqueued = queue.enqueued;
        self.last_dequeued = queue.dequeued;
        self.cutoff.update(now, self.ratio);
    }

    fn next_tick(&self) -> Time {
        self.last_tick.map_or(Time::ZERO, |last| last + self.update)
    }

    fn state(&self) -> RegulatorState {
        RegulatorState {
            reject_ratio: self.ratio,
            cutoff_rank: self.cutoff.cutoff_rank(),
            burst: false,
            overloaded: self.overloaded,
        }
    }
}

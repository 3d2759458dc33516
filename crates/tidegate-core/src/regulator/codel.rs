//! CoDel, Controlled Delay (RFC 8289), as QALM and Facebook apply it to request queues: the
//! baseline tidegate's PID is measured against.
//!
//! CoDel watches how long entries waited (their sojourn) when they leave the queue. A queue
//! whose *every* entry waited more than `target` for a whole `interval` is a standing queue,
//! not a burst, and CoDel starts dropping at the head. Uber's QALM used it to detect overload
//! and then turned away lower-priority requests; Facebook's variant ("Fail at Scale") turns
//! the same signal into a short queue timeout.

use serde::{Deserialize, Serialize};

use super::{QueueStats, Regulator, RegulatorState, Verdict};
use crate::priority::{COHORTS, Priority, TIERS};
use crate::time::{Nanos, Time};

/// Which CoDel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CodelMode {
    /// RFC 8289: overloaded once every entry for an `interval` waited more than `target`; then
    /// the head is dropped at intervals shrinking as `interval / sqrt(count)`.
    Rfc,
    /// Facebook's adaptive queue timeout: overloaded when the queue has not been empty for an
    /// `interval`; then every entry that waited more than `target` is dropped, otherwise every
    /// entry that waited more than `interval`.
    Facebook,
}

/// Configuration of [`Codel`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CodelConfig {
    /// Acceptable standing delay. Default 5 ms.
    pub target: Nanos,
    /// How long the delay must stand before CoDel acts, and the base of its drop spacing.
    /// Default 100 ms.
    pub interval: Nanos,
    /// RFC 8289 (default) or Facebook's variant.
    pub mode: CodelMode,
    /// While overloaded, arrivals of this tier or any less important one are turned away at
    /// the door, as QALM does. 1 to 6; 6 turns nothing away at the door. Default 4 (tiers 4
    /// and 5, the ones a deployment marks as sheddable).
    pub shed_tier: u8,
}

impl Default for CodelConfig {
    fn default() -> CodelConfig {
        CodelConfig {
            target: Nanos::from_millis(5),
            interval: Nanos::from_millis(100),
            mode: CodelMode::Rfc,
            shed_tier: 4,
        }
    }
}

/// CoDel (RFC 8289) with QALM's shedding by priority. Defaults: target 5 ms, interval 100 ms,
/// RFC mode, tiers 4 and 5 turned away while overloaded.
///
/// RFC mode, at each dequeue (`on_dequeue`), exactly as RFC 8289's pseudocode with one entry
/// for one packet:
///
/// - an entry that waited less than `target`, or that leaves at most one entry behind (the
///   RFC's "less than a packet left"), clears the above-target timer; the first one above
///   `target` sets it to `now + interval`, and once `now` passes it the state is "ok to drop";
/// - entering the dropping state drops this entry and schedules the next drop at
///   `now + interval / sqrt(count)`, where `count` restarts at 1, or resumes from the previous
///   episode's drops if that ended less than 16 intervals ago;
/// - while dropping, each entry leaving at or after the scheduled time is dropped, `count`
///   grows and the next drop comes `interval / sqrt(count)` after the previous one: the drop
///   rate rises as the square root of the drops until the delay falls;
/// - the first entry that is not "ok to drop" ends the dropping state.
///
/// Facebook mode: overloaded while the queue has not been empty for `interval`; an entry is
/// dropped at dequeue if it waited more than `target` while overloaded, more than `interval`
/// otherwise.
///
/// In both modes, while overloaded (dropping, for the RFC) arrivals of tier `shed_tier` or
/// less important are rejected at arrival: QALM's "it would then reject any lower-priority
/// requests". Drops at dequeue take whatever leaves the queue, which in tidegate's priority
/// queue is the most important entry waiting: CoDel does not know about priorities, which is
/// one of the reasons it is the baseline and not the default.
#[derive(Debug)]
pub struct Codel {
    target: Nanos,
    interval: Nanos,
    mode: CodelMode,
    shed_tier: u8,
    /// RFC: when the above-target stretch will have lasted an interval.
    first_above: Option<Time>,
    dropping: bool,
    count: u32,
    last_count: u32,
    drop_next: Time,
    /// Facebook: the last time the queue was seen empty.
    last_empty: Time,
    overloaded: bool,
    /// Arrivals and rejections (at arrival or dequeue) since the last tick, for the ratio.
    arrivals: u64,
    rejections: u64,
    ratio: f64,
    last_tick: Option<Time>,
}

impl Codel {
    pub fn new(config: &CodelConfig) -> Codel {
        Codel {
            target: config.target,
            interval: config.interval.max(Nanos::from_nanos(1)),
            mode: config.mode,
            shed_tier: config.shed_tier.clamp(1, TIERS),
            first_above: None,
            dropping: false,
            count: 0,
            last_count: 0,
            drop_next: Time::ZERO,
            last_empty: Time::ZERO,
            overloaded: false,
            arrivals: 0,
            rejections: 0,
            ratio: 0.0,
            last_tick: None,
        }
    }

    /// Whether CoDel is in its dropping state (RFC) or sees a standing queue (Facebook).
    pub fn is_dropping(&self) -> bool {
        self.overloaded
    }

    /// Drops in the current (or last) dropping episode.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// `t + interval / sqrt(count)`.
    fn control_law(&self, t: Time, count: u32) -> Time {
        t + self.interval.mul_f64(1.0 / f64::from(count.max(1)).sqrt())
    }

    /// RFC 8289 `dodequeue`: whether the delay has stood above target for an interval.
    fn ok_to_drop(&mut self, now: Time, sojourn: Nanos, queue_len: usize) -> bool {
        if sojourn < self.target || queue_len <= 1 {
            self.first_above = None;
            return false;
        }
        match self.first_above {
            None => {
                self.first_above = Some(now + self.interval);
                false
            }
            Some(at) => now >= at,
        }
    }

    fn rfc_dequeue(&mut self, now: Time, sojourn: Nanos, queue_len: usize) -> bool {
        let ok = self.ok_to_drop(now, sojourn, queue_len);
        if self.dropping {
            if !ok {
                self.dropping = false;
                return false;
            }
            if now < self.drop_next {
                return false;
            }
            self.count += 1;
            self.drop_next = self.control_law(self.drop_next, self.count);
            return true;
        }
        if !ok {
            return false;
        }
        self.dropping = true;
        let delta = self.count.saturating_sub(self.last_count);
        let recent = now - self.drop_next < self.interval.saturating_mul(16);
        self.count = if delta > 1 && recent { delta } else { 1 };
        self.drop_next = self.control_law(now, self.count);
        self.last_count = self.count;
        true
    }

    fn facebook_dequeue(&mut self, now: Time, sojourn: Nanos, queue_len: usize) -> bool {
        self.overloaded = now - self.last_empty >= self.interval;
        let timeout = if self.overloaded { self.target } else { self.interval };
        if queue_len == 0 {
            self.last_empty = now;
        }
        sojourn > timeout
    }
}

impl Regulator for Codel {
    fn on_arrival(&mut self, now: Time, priority: Priority, queue_len: usize) -> Verdict {
        self.arrivals += 1;
        if self.mode == CodelMode::Facebook {
            if queue_len == 0 {
                self.last_empty = now;
            }
            self.overloaded = now - self.last_empty >= self.interval;
        }
        if self.overloaded && priority.tier() >= self.shed_tier {
            self.rejections += 1;
            return Verdict::Reject;
        }
        Verdict::Admit
    }

    fn on_dequeue(&mut self, now: Time, sojourn: Nanos, _: Priority, queue_len: usize) -> Verdict {
        let drop = match self.mode {
            CodelMode::Rfc => {
                let drop = self.rfc_dequeue(now, sojourn, queue_len);
                self.overloaded = self.dropping;
                drop
            }
            CodelMode::Facebook => self.facebook_dequeue(now, sojourn, queue_len),
        };
        if drop {
            self.rejections += 1;
            Verdict::Reject
        } else {
            Verdict::Admit
        }
    }

    /// Only for the reported state: the share shed since the last tick, and Facebook's
    /// standing-queue flag brought up to date when nothing arrives or leaves.
    fn tick(&mut self, now: Time, queue: &QueueStats) {
        self.last_tick = Some(now);
        self.ratio = self.rejections as f64 / self.arrivals.max(1) as f64;
        self.arrivals = 0;
        self.rejections = 0;
        if self.mode == CodelMode::Facebook {
            self.last_empty = self.last_empty.max(queue.last_empty);
            self.overloaded = now - self.last_empty >= self.interval;
        }
    }

    fn next_tick(&self) -> Time {
        self.last_tick.map_or(Time::ZERO, |last| last + self.interval)
    }

    fn state(&self) -> RegulatorState {
        let shedding = self.overloaded && self.shed_tier < TIERS;
        RegulatorState {
            reject_ratio: self.ratio.min(1.0),
            cutoff_rank: shedding.then(|| u16::from(self.shed_tier) * u16::from(COHORTS) - 1),
            burst: false,
            overloaded: self.overloaded,
        }
    }
}

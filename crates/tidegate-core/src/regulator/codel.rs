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
        let timeout = if self.overloaded {
            self.target
        } else {
            self.interval
        };
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
        self.last_tick
            .map_or(Time::ZERO, |last| last + self.interval)
    }

    fn state(&self) -> RegulatorState {
        let shedding = self.overloaded && self.shed_tier < TIERS;
        RegulatorState {
            reject_ratio: self.ratio.min(1.0),
            cutoff_rank: shedding.then(|| u16::from(self.shed_tier) * u16::from(COHORTS) - 1),
            burst: false,
            overloaded: self.overloaded,
            line: None,
        }
    }

    /// RFC mode: not dropping, arrivals are all admitted and their count only feeds the
    /// reported ratio. Facebook mode learns when the queue was last empty from arrivals, so
    /// it must see them all.
    fn transparent(&self) -> bool {
        self.mode == CodelMode::Rfc && !self.overloaded
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regulator::testkit::{Mix, Setup, run};

    fn ms(ms: u64) -> Time {
        Time::ZERO + Nanos::from_millis(ms)
    }

    /// Dequeues one entry per millisecond over `[from, to)` with the given sojourn and 10
    /// entries left behind; returns the times of the drops.
    fn dequeue_every_ms(codel: &mut Codel, from: u64, to: u64, sojourn: Nanos) -> Vec<u64> {
        (from..to)
            .filter(|&t| {
                codel.on_dequeue(ms(t), sojourn, Priority::default(), 10) == Verdict::Reject
            })
            .collect()
    }

    #[test]
    fn drops_only_after_a_whole_interval_above_target() {
        let mut codel = Codel::new(&CodelConfig::default());
        let above = Nanos::from_millis(6);
        assert!(dequeue_every_ms(&mut codel, 0, 60, above).is_empty());
        // One entry under target restarts the clock.
        assert_eq!(
            codel.on_dequeue(ms(60), Nanos::from_millis(4), Priority::default(), 10),
            Verdict::Admit
        );
        assert!(
            dequeue_every_ms(&mut codel, 61, 160, above).is_empty(),
            "61 + 100 ms not reached"
        );
        assert_eq!(dequeue_every_ms(&mut codel, 161, 162, above), [161]);
        assert!(codel.is_dropping());
    }

    #[test]
    fn drops_at_interval_over_the_square_root_of_the_count() {
        let mut codel = Codel::new(&CodelConfig::default());
        let drops = dequeue_every_ms(&mut codel, 0, 2_000, Nanos::from_millis(50));
        assert_eq!(
            drops[0], 100,
            "an interval after the first entry above target"
        );
        // Drop n+1 comes 100 / sqrt(n) ms after drop n, to the next dequeue (1 ms apart).
        for (n, pair) in drops.windows(2).enumerate() {
            let gap = (pair[1] - pair[0]) as f64;
            let law = 100.0 / ((n + 1) as f64).sqrt();
            assert!(
                (gap - law).abs() <= 1.0,
                "drop {}: gap {gap} ms, law {law:.1} ms",
                n + 2
            );
        }
        assert!(drops.len() > 30, "{}", drops.len());
        assert_eq!(codel.count() as usize, drops.len());
    }

    #[test]
    fn leaves_the_dropping_state_below_target_and_resumes_its_count_soon_after() {
        let mut codel = Codel::new(&CodelConfig::default());
        let above = Nanos::from_millis(50);
        let drops = dequeue_every_ms(&mut codel, 0, 1_000, above).len();
        assert_eq!(
            codel.on_dequeue(ms(1_000), Nanos::from_millis(1), Priority::default(), 10),
            Verdict::Admit
        );
        assert!(!codel.is_dropping());
        // Back above target an interval later: the drop rate resumes where it was rather than
        // from one drop per interval (RFC 8289's "delta" rule).
        let again = dequeue_every_ms(&mut codel, 1_001, 1_200, above);
        assert_eq!(again[0], 1_101);
        // The new episode starts at the previous episode's drops beyond its first.
        assert_eq!(codel.count() as usize, (drops - 1) + (again.len() - 1));
        assert!(
            again.len() > 5,
            "drops come {} ms apart, not 100",
            again[1] - again[0]
        );
    }

    #[test]
    fn never_drops_the_entry_that_empties_the_queue() {
        let mut codel = Codel::new(&CodelConfig::default());
        dequeue_every_ms(&mut codel, 0, 300, Nanos::from_millis(50));
        assert!(codel.is_dropping());
        let last = codel.on_dequeue(ms(300), Nanos::from_millis(50), Priority::default(), 1);
        assert_eq!(last, Verdict::Admit);
        assert!(!codel.is_dropping());
    }

    #[test]
    fn turns_away_low_tiers_at_the_door_while_dropping() {
        let mut codel = Codel::new(&CodelConfig::default());
        let tier = |t: u32| Priority::new(t, 64).expect("valid");
        assert_eq!(codel.on_arrival(ms(0), tier(5), 100), Verdict::Admit);
        dequeue_every_ms(&mut codel, 0, 200, Nanos::from_millis(50));
        assert_eq!(codel.on_arrival(ms(200), tier(5), 100), Verdict::Reject);
        assert_eq!(codel.on_arrival(ms(200), tier(4), 100), Verdict::Reject);
        assert_eq!(codel.on_arrival(ms(200), tier(3), 100), Verdict::Admit);
        assert_eq!(codel.state().cutoff_rank, Some(4 * 128 - 1));
        let mut never = Codel::new(&CodelConfig {
            shed_tier: 6,
            ..CodelConfig::default()
        });
        dequeue_every_ms(&mut never, 0, 200, Nanos::from_millis(50));
        assert!(never.is_dropping());
        assert_eq!(never.on_arrival(ms(200), tier(5), 100), Verdict::Admit);
    }

    #[test]
    fn facebook_mode_shortens_the_queue_timeout_while_the_queue_stands() {
        let config = CodelConfig {
            mode: CodelMode::Facebook,
            ..CodelConfig::default()
        };
        let mut codel = Codel::new(&config);
        let p = Priority::default();
        assert_eq!(codel.on_arrival(ms(0), p, 0), Verdict::Admit);
        // Not standing for an interval yet: the timeout is the interval.
        assert_eq!(
            codel.on_dequeue(ms(50), Nanos::from_millis(50), p, 5),
            Verdict::Admit
        );
        assert_eq!(
            codel.on_dequeue(ms(60), Nanos::from_millis(101), p, 5),
            Verdict::Reject
        );
        // Standing for 100 ms: the timeout is the target.
        assert_eq!(
            codel.on_dequeue(ms(100), Nanos::from_millis(6), p, 5),
            Verdict::Reject
        );
        assert_eq!(
            codel.on_dequeue(ms(101), Nanos::from_millis(4), p, 0),
            Verdict::Admit
        );
        // That dequeue emptied the queue: the interval starts again.
        assert_eq!(
            codel.on_dequeue(ms(150), Nanos::from_millis(6), p, 3),
            Verdict::Admit
        );
    }

    /// Cinnamon's complaint about QALM, reproduced: half tier 1, half tier 5 at twice the
    /// capacity, one FIFO (QALM's Go channel). Each dropping episode turns tier 5 away at the
    /// door until the queue is under target, which ends the episode and lets all of tier 5 back
    /// in, which builds the queue again: the shedding swings instead of settling.
    #[test]
    fn under_sustained_overload_the_shedding_swings_between_all_and_little() {
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (20_000, 2_000.0)])
            .with_mix(Mix::Tiers(vec![1, 5]))
            .fifo();
        let trace = run(&mut Codel::new(&CodelConfig::default()), &setup);
        let tier5: Vec<f64> = trace
            .between(3_000, 21_000)
            .iter()
            .map(|w| (w.rejected[5] + w.dropped[5]) as f64 / w.arrived[5].max(1) as f64)
            .collect();
        let all = tier5.iter().filter(|&&s| s > 0.95).count();
        let little = tier5.iter().filter(|&&s| s < 0.4).count();
        assert!(
            all > 100 && little >= 5,
            "{all} windows all shed, {little} windows < 40%"
        );
        let episodes = trace
            .ticks
            .windows(2)
            .filter(|p| p[1].1.overloaded && !p[0].1.overloaded)
            .count();
        assert!(episodes >= 8, "{episodes} dropping episodes in 20 s");
    }

    /// In tidegate's priority queue the most important entries are served first, so their
    /// short sojourns keep resetting CoDel's clock: a standing queue of tier 5 behind them
    /// goes unseen while tier 1 alone fits in the capacity.
    #[test]
    fn in_a_priority_queue_the_important_traffic_hides_the_standing_queue() {
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (5_000, 1_800.0)])
            .with_mix(Mix::Tiers(vec![1, 5]));
        let trace = run(&mut Codel::new(&CodelConfig::default()), &setup);
        assert!(trace.max_queue(5_000, 6_000) > 3_000, "tier 5 piles up");
        assert!(
            trace.shed_share(0, 6_000) < 0.01,
            "{}",
            trace.shed_share(0, 6_000)
        );
    }

    #[test]
    fn configuration_reads_the_mode() {
        let config: CodelConfig =
            toml::from_str("mode = \"facebook\"\ntarget = \"10ms\"").expect("valid");
        assert_eq!(
            (config.mode, config.target, config.interval),
            (
                CodelMode::Facebook,
                Nanos::from_millis(10),
                Nanos::from_millis(100)
            )
        );
        assert!(toml::from_str::<CodelConfig>("mode = \"fq\"").is_err());
    }
}

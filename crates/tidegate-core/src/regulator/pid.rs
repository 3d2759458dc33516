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

use super::cutoff::{HISTORY_HALF_LIFE, PriorityCutoff, unit};
use super::{QueueStats, Regulator, RegulatorState, Verdict, updates_due};
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
    /// Default 0.04.
    pub ki: f64,
    /// Gain on the change of the queue's growth since the last update. Default 0.1.
    pub kd: f64,
    /// Once the queue has drained, the ratio falls by this much per second (the controller is
    /// blind then: an empty queue does not say how much room there is). Default 0.1 (from 50%
    /// to nothing in 5 s).
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
/// 100 ms, gains 0.6 / 0.04 / 0.1, falls by 0.1 per second once the queue has drained.
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
/// Fast to rise, slow to fall: while the queue stands through a whole interval the controller
/// sees the mismatch and moves the ratio both ways (down, too, as it drains a backlog). Once
/// the queue has been empty at some moment of the interval, it no longer knows how much room
/// there is, and the ratio only falls, by `fall_rate * elapsed`: it probes for capacity rather
/// than reopening at once. (Clipping steps down while the queue stands, or taking steps up
/// during a drained interval, biases the ratio upwards on noise alone: 8 points of needless
/// rejection at 2x in tidegate's driver.)
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

    /// The steps of the `intervals` updates a tick stands for (one when on time): the first,
    /// and each of the others. A late tick's counts are shared evenly among the updates it
    /// makes up for, so that the ratio moves with time, not with how often the gate is
    /// ticked (see [`super::updates_due`]).
    fn steps(&mut self, now: Time, last: Time, queue: &QueueStats, intervals: u64) -> (f64, f64) {
        let arrivals = self.arrivals - self.last_arrivals;
        if queue.last_empty >= last {
            // The queue drained: the service has room, but how much is unknown.
            self.last_growth = 0.0;
            return (
                -self.config.fall_rate.max(0.0) * (now - last).as_secs_f64(),
                0.0,
            );
        }
        if arrivals == 0 {
            return (0.0, 0.0);
        }
        let arrivals = arrivals as f64;
        let flow = queue.enqueued.saturating_sub(self.last_enqueued) as f64
            - queue.dequeued.saturating_sub(self.last_dequeued) as f64;
        let growth = flow / arrivals;
        let backlog = queue.len as f64 / (arrivals / intervals as f64);
        let each = self.config.kp * growth + self.config.ki * backlog;
        let first = each + self.config.kd * (growth - self.last_growth);
        self.last_growth = growth;
        (first, each)
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
                let intervals = updates_due(last, now, self.update);
                let (first, each) = self.steps(now, last, queue, intervals);
                self.ratio = unit(self.ratio + first);
                for _ in 1..intervals {
                    self.ratio = unit(self.ratio + each);
                }
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
            line: self.cutoff.line(),
        }
    }

    /// Disengaged, the ratio is 0 and stays so until the queue has stood for
    /// `overload_after`, during which arrivals find a queue and are seen: the histogram and
    /// the arrival counts it works from are then fresh.
    fn transparent(&self) -> bool {
        !self.engaged && self.ratio <= 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regulator::testkit::{Mix, Setup, run};
    use crate::regulator::{Codel, CodelConfig};

    fn mean_and_spread(values: &[f64]) -> (f64, f64) {
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let variance = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / values.len() as f64;
        (mean, variance.sqrt())
    }

    #[test]
    fn settles_near_one_minus_capacity_over_arrivals_without_swinging() {
        for (rate, expected) in [(2_000.0, 0.5), (1_500.0, 1.0 / 3.0), (3_000.0, 2.0 / 3.0)] {
            let setup = Setup::thousand_rps(&[(1_000, 500.0), (20_000, rate)]);
            let trace = run(&mut Pid::new(&PidConfig::default()), &setup);
            let ratios = trace.ratios(8_000, 21_000);
            let (mean, spread) = mean_and_spread(&ratios);
            assert!(
                (mean - expected).abs() < 0.03,
                "{rate}/s: ratio {mean}, expected {expected}"
            );
            assert!(spread < 0.04, "{rate}/s: spread {spread}");
            let (low, high) = ratios
                .iter()
                .fold((1.0f64, 0.0f64), |(l, h), &r| (l.min(r), h.max(r)));
            assert!(
                low > expected - 0.12 && high < expected + 0.12,
                "{rate}/s: {low}..{high}"
            );
            let served: u64 = trace.between(8_000, 21_000).iter().map(|w| w.served).sum();
            assert!(
                served > 12_400,
                "{rate}/s: the service stays busy: {served} of 13000"
            );
            assert!(
                trace.max_queue(8_000, 21_000) < 150,
                "{rate}/s: queue {}",
                trace.max_queue(8_000, 21_000)
            );
        }
    }

    #[test]
    fn the_control_law_runs_on_the_clock_whatever_the_ticks() {
        // A standing queue of 20, as many in as out, 200 arrivals a second, for 1.6 s once
        // the overload is established, ticked every 100 ms as the simulator does and every
        // 800 ms as a proxy does on a few requests a second: the ratio must climb alike.
        // With one update per tick on the counts of the whole interval, the late one moved
        // 8 times less per tick and 8 times less often.
        fn drive(every_ms: u64) -> f64 {
            let mut pid = Pid::new(&PidConfig::default());
            let mut now = Time::ZERO + Nanos::from_secs(2);
            let per_tick = 200 * every_ms / 1000;
            let mut moved = 0;
            // The first tick only starts the clock.
            for _ in 0..=1600 / every_ms {
                let stats = QueueStats {
                    len: 20,
                    enqueued: moved,
                    dequeued: moved,
                    ..QueueStats::default()
                };
                pid.tick(now, &stats);
                for _ in 0..per_tick {
                    pid.on_arrival(now, Priority::default(), 20);
                }
                moved += per_tick;
                now += Nanos::from_millis(every_ms);
            }
            pid.ratio()
        }
        let (on_time, late) = (drive(100), drive(800));
        assert!(on_time > 0.05, "{on_time}");
        assert!((late / on_time - 1.0).abs() < 0.05, "{late} vs {on_time}");
    }

    #[test]
    fn works_on_ratios_whatever_the_volume() {
        // A hundredth of the traffic: one server of 10 ms, 200 per second, 20 per update.
        let mut setup = Setup::thousand_rps(&[(1_000, 50.0), (60_000, 200.0)]);
        setup.servers = 1;
        let trace = run(&mut Pid::new(&PidConfig::default()), &setup);
        let (mean, spread) = mean_and_spread(&trace.ratios(20_000, 61_000));
        assert!(
            (mean - 0.5).abs() < 0.05 && spread < 0.1,
            "ratio {mean} ± {spread}"
        );
    }

    #[test]
    fn cuts_tier_five_before_tier_one_and_high_cohorts_first() {
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (20_000, 1_500.0)])
            .with_mix(Mix::Tiers(vec![1, 5]));
        let trace = run(&mut Pid::new(&PidConfig::default()), &setup);
        let tier1 = trace.tier_shed_share(1, 8_000, 21_000);
        let tier5 = trace.tier_shed_share(5, 8_000, 21_000);
        assert!(tier1 < 0.01, "tier 1 {tier1}");
        assert!(
            (0.6..0.72).contains(&tier5),
            "two thirds of tier 5: {tier5}"
        );
        let share = |cohorts: std::ops::Range<u32>| {
            let rank = |c| usize::from(Priority::new(5, c).expect("valid").rank());
            let ranks = rank(cohorts.start)..rank(cohorts.end);
            trace.rejected_by_rank[ranks.clone()].iter().sum::<u64>() as f64
                / trace.arrived_by_rank[ranks].iter().sum::<u64>() as f64
        };
        let quarters = [share(0..32), share(32..64), share(64..96), share(96..127)];
        assert!(
            quarters.windows(2).all(|q| q[0] < q[1]),
            "worse cohorts lose more: {quarters:?}"
        );
        // Counted over the whole run, including the ~2 s before the controller engages.
        assert!(quarters[0] < 0.2 && quarters[3] > 0.9, "{quarters:?}");
        let cut = trace.state_at(15_000).cutoff_rank.expect("cutting");
        assert!((5 * 128 + 20..5 * 128 + 64).contains(&cut), "{cut}");
    }

    #[test]
    fn falls_slowly_after_the_overload_ends() {
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (10_000, 2_000.0), (10_000, 500.0)]);
        let trace = run(&mut Pid::new(&PidConfig::default()), &setup);
        let at_end = trace.state_at(11_000).reject_ratio;
        assert!(at_end > 0.4, "{at_end}");
        // 0.1 per second, no faster.
        for (t, expected) in [
            (12_000, at_end - 0.1),
            (13_000, at_end - 0.2),
            (14_000, at_end - 0.3),
        ] {
            let ratio = trace.state_at(t).reject_ratio;
            assert!(
                (ratio - expected).abs() < 0.03,
                "at {t} ms: {ratio}, expected {expected}"
            );
        }
        assert_eq!(trace.state_at(17_500).reject_ratio, 0.0);
        assert_eq!(trace.shed_share(17_500, 21_000), 0.0);
        assert!(!trace.state_at(20_000).overloaded);
    }

    #[test]
    fn rejects_nothing_when_the_queue_empties_within_the_overload_time() {
        // 80% load (queues form and empty all the time) and a 200 ms spike at 1.5x: 100
        // entries of queue, drained in half a second, so the queue stands for ~0.7 s < 1 s.
        let setup = Setup::thousand_rps(&[(10_000, 800.0), (200, 1_500.0), (10_000, 800.0)]);
        let trace = run(&mut Pid::new(&PidConfig::default()), &setup);
        assert!(trace.max_queue(10_000, 11_000) > 70, "the spike queued");
        assert_eq!(trace.shed_share(0, 20_200), 0.0);
        assert!(
            trace
                .ticks
                .iter()
                .all(|(_, s)| s.reject_ratio == 0.0 && s.cutoff_rank.is_none())
        );
    }

    /// The comparison Cinnamon makes: under the overload where QALM's CoDel swings (see
    /// `codel::tests::under_sustained_overload_the_shedding_swings_between_all_and_little`),
    /// the PID holds its ratio and tier 5 is shed steadily.
    #[test]
    fn steady_where_codel_swings() {
        let setup = Setup::thousand_rps(&[(1_000, 500.0), (20_000, 2_000.0)])
            .with_mix(Mix::Tiers(vec![1, 5]))
            .fifo();
        let tier5 = |trace: &crate::regulator::testkit::Trace| -> Vec<f64> {
            let windows = trace.between(8_000, 21_000);
            windows
                .iter()
                .map(|w| (w.rejected[5] + w.dropped[5]) as f64 / w.arrived[5].max(1) as f64)
                .collect()
        };
        let pid = tier5(&run(&mut Pid::new(&PidConfig::default()), &setup));
        let codel = tier5(&run(&mut Codel::new(&CodelConfig::default()), &setup));
        let low = |v: &[f64]| v.iter().copied().fold(1.0, f64::min);
        assert!(
            low(&pid) > 0.7,
            "PID's worst window still sheds {:.2} of tier 5",
            low(&pid)
        );
        assert!(
            low(&codel) < 0.4,
            "CoDel's worst window sheds {:.2} of tier 5",
            low(&codel)
        );
        let (_, pid_spread) = mean_and_spread(&pid);
        let (_, codel_spread) = mean_and_spread(&codel);
        assert!(
            pid_spread < codel_spread / 2.0,
            "spread: PID {pid_spread:.3}, CoDel {codel_spread:.3}"
        );
    }

    #[test]
    fn configuration_defaults_and_overrides() {
        let config: PidConfig =
            toml::from_str("overload_after = \"10s\"\nkp = 0.5").expect("valid");
        assert_eq!(config.overload_after, Nanos::from_secs(10));
        assert_eq!(config.kp, 0.5);
        assert_eq!(config.update, Nanos::from_millis(100));
        assert!(toml::from_str::<PidConfig>("gain = 1").is_err());
    }
}

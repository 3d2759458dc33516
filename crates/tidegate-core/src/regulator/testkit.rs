//! A queue in front of a service, in virtual time, driven the way the gate drives a regulator,
//! to pin down what each regulator does under load.
//!
//! Arrivals (Poisson or evenly spaced) come at a rate that changes by phases, with priorities
//! from a mix. The regulator sees each arrival first (`on_arrival` with the queue length); an
//! admitted arrival goes straight into the service if a server is free and nobody waits, and
//! into the queue otherwise. When a server frees up, the most important waiting entry (FIFO
//! within a rank) leaves the queue through `on_dequeue`; entries past the queue timeout
//! expire. The regulator is ticked at its `next_tick` with the queue's statistics. Service
//! takes a fixed time on one of `servers` servers, so capacity is `servers / service`.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, VecDeque};

use super::{QueueStats, Regulator, RegulatorState, Verdict};
use crate::priority::{Priority, RANKS, TIERS};
use crate::rng::Rng;
use crate::time::{Nanos, Time};

/// Which priorities arrive.
#[derive(Clone, Debug)]
pub(crate) enum Mix {
    /// All arrivals have this priority.
    Fixed(Priority),
    /// Each arrival picks one of these tiers at random (equally likely) and a uniform cohort.
    Tiers(Vec<u8>),
}

/// The service, the load and the queue.
#[derive(Clone, Debug)]
pub(crate) struct Setup {
    pub(crate) servers: u32,
    pub(crate) service: Nanos,
    pub(crate) queue_timeout: Option<Nanos>,
    /// `(duration, rate in requests per second)`, one after the other.
    pub(crate) phases: Vec<(Nanos, f64)>,
    pub(crate) mix: Mix,
    pub(crate) poisson: bool,
    /// One FIFO for all priorities (QALM's Go channel) instead of the most important first.
    pub(crate) fifo: bool,
    /// Width of the windows the trace is cut into.
    pub(crate) window: Nanos,
    pub(crate) seed: u64,
}

impl Setup {
    /// 10 servers at 10 ms: capacity 1000 requests per second. Poisson arrivals of tier 3,
    /// 100 ms windows, no queue timeout.
    pub(crate) fn thousand_rps(phases: &[(u64, f64)]) -> Setup {
        Setup {
            servers: 10,
            service: Nanos::from_millis(10),
            queue_timeout: None,
            phases: phases
                .iter()
                .map(|&(ms, rps)| (Nanos::from_millis(ms), rps))
                .collect(),
            mix: Mix::Fixed(Priority::default()),
            poisson: true,
            fifo: false,
            window: Nanos::from_millis(100),
            seed: 0x7469_6465,
        }
    }

    pub(crate) fn with_mix(mut self, mix: Mix) -> Setup {
        self.mix = mix;
        self
    }

    pub(crate) fn fifo(mut self) -> Setup {
        self.fifo = true;
        self
    }

    pub(crate) fn with_timeout(mut self, timeout: Nanos) -> Setup {
        self.queue_timeout = Some(timeout);
        self
    }

    fn duration(&self) -> Nanos {
        self.phases
            .iter()
            .map(|&(d, _)| d)
            .fold(Nanos::ZERO, |a, d| a + d)
    }

    fn rate_at(&self, t: Time) -> f64 {
        let mut end = Time::ZERO;
        for &(d, rate) in &self.phases {
            end += d;
            if t < end {
                return rate;
            }
        }
        0.0
    }

    fn priority(&self, rng: &mut Rng) -> Priority {
        match &self.mix {
            Mix::Fixed(p) => *p,
            Mix::Tiers(tiers) => {
                let tier = tiers[rng.range_inclusive(0, tiers.len() as i64 - 1) as usize];
                let cohort = rng.range_inclusive(0, 127) as u32;
                Priority::new(u32::from(tier), cohort).expect("valid mix")
            }
        }
    }
}

/// What happened in one window, by tier where it matters.
#[derive(Clone, Debug, Default)]
pub(crate) struct Window {
    pub(crate) arrived: [u64; TIERS as usize],
    /// Turned away by `on_arrival`.
    pub(crate) rejected: [u64; TIERS as usize],
    /// Dropped by `on_dequeue`.
    pub(crate) dropped: [u64; TIERS as usize],
    pub(crate) expired: u64,
    /// Started service.
    pub(crate) served: u64,
    pub(crate) max_queue: usize,
    /// Longest wait of an entry that went into the service.
    pub(crate) max_sojourn: Nanos,
}

impl Window {
    pub(crate) fn arrivals(&self) -> u64 {
        self.arrived.iter().sum()
    }
    /// Turned away at arrival or dropped at dequeue.
    pub(crate) fn shed(&self) -> u64 {
        self.rejected.iter().sum::<u64>() + self.dropped.iter().sum::<u64>()
    }
}

/// What the regulator did over a run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Trace {
    pub(crate) window: Nanos,
    pub(crate) windows: Vec<Window>,
    /// The regulator's state after each tick.
    pub(crate) ticks: Vec<(Time, RegulatorState)>,
    pub(crate) arrived_by_rank: Vec<u64>,
    /// Turned away at arrival, by rank.
    pub(crate) rejected_by_rank: Vec<u64>,
}

impl Trace {
    /// The windows that lie in `[from, to)` (milliseconds).
    pub(crate) fn between(&self, from_ms: u64, to_ms: u64) -> &[Window] {
        let w = self.window.as_nanos();
        let first = (Nanos::from_millis(from_ms).as_nanos() / w) as usize;
        let last = (Nanos::from_millis(to_ms).as_nanos() / w) as usize;
        &self.windows[first.min(self.windows.len())..last.min(self.windows.len())]
    }

    /// Share of the arrivals in `[from, to)` that were shed (at arrival or at dequeue).
    pub(crate) fn shed_share(&self, from_ms: u64, to_ms: u64) -> f64 {
        let windows = self.between(from_ms, to_ms);
        let shed: u64 = windows.iter().map(Window::shed).sum();
        let arrived: u64 = windows.iter().map(Window::arrivals).sum();
        shed as f64 / arrived.max(1) as f64
    }

    /// Share of the arrivals of `tier` in `[from, to)` that were shed.
    pub(crate) fn tier_shed_share(&self, tier: usize, from_ms: u64, to_ms: u64) -> f64 {
        let windows = self.between(from_ms, to_ms);
        let shed: u64 = windows
            .iter()
            .map(|w| w.rejected[tier] + w.dropped[tier])
            .sum();
        let arrived: u64 = windows.iter().map(|w| w.arrived[tier]).sum();
        shed as f64 / arrived.max(1) as f64
    }

    /// The reject ratios reported at the ticks in `[from, to)`.
    pub(crate) fn ratios(&self, from_ms: u64, to_ms: u64) -> Vec<f64> {
        let (from, to) = (
            Time::ZERO + Nanos::from_millis(from_ms),
            Time::ZERO + Nanos::from_millis(to_ms),
        );
        self.ticks
            .iter()
            .filter(|(t, _)| *t >= from && *t < to)
            .map(|(_, s)| s.reject_ratio)
            .collect()
    }

    /// The state reported by the last tick at or before `ms`.
    pub(crate) fn state_at(&self, ms: u64) -> RegulatorState {
        let t = Time::ZERO + Nanos::from_millis(ms);
        self.ticks
            .iter()
            .take_while(|(at, _)| *at <= t)
            .last()
            .map(|&(_, s)| s)
            .unwrap_or_default()
    }

    pub(crate) fn max_queue(&self, from_ms: u64, to_ms: u64) -> usize {
        self.between(from_ms, to_ms)
            .iter()
            .map(|w| w.max_queue)
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn max_sojourn(&self, from_ms: u64, to_ms: u64) -> Nanos {
        self.between(from_ms, to_ms)
            .iter()
            .map(|w| w.max_sojourn)
            .max()
            .unwrap_or(Nanos::ZERO)
    }
}

/// A queued entry: (rank or 0 for FIFO, sequence) orders the queue; then the rank itself.
type Key = (u16, u64, u16);

struct Queue {
    entries: BTreeMap<Key, Time>,
    /// Entries in enqueue order, for expiry and the oldest wait; removed ones are skipped.
    fifo: VecDeque<(Time, Key)>,
}

impl Queue {
    fn prune(&mut self) {
        while self
            .fifo
            .front()
            .is_some_and(|(_, key)| !self.entries.contains_key(key))
        {
            self.fifo.pop_front();
        }
    }

    fn oldest(&mut self) -> Option<(Time, Key)> {
        self.prune();
        self.fifo.front().copied()
    }
}

/// Drives `regulator` through `setup`.
pub(crate) fn run(regulator: &mut dyn Regulator, setup: &Setup) -> Trace {
    let mut rng = Rng::seed(setup.seed);
    let end = Time::ZERO + setup.duration();
    let windows = (setup.duration().as_nanos() / setup.window.as_nanos()) as usize + 1;
    let mut trace = Trace {
        window: setup.window,
        windows: vec![Window::default(); windows],
        ticks: Vec::new(),
        arrived_by_rank: vec![0; RANKS],
        rejected_by_rank: vec![0; RANKS],
    };
    let window_of = |t: Time| (t.as_nanos() / setup.window.as_nanos()) as usize;
    let mut queue = Queue {
        entries: BTreeMap::new(),
        fifo: VecDeque::new(),
    };
    let mut completions: BinaryHeap<Reverse<Time>> = BinaryHeap::new();
    let mut stats = QueueStats {
        limit: setup.servers,
        ..QueueStats::default()
    };
    let mut seq = 0u64;
    let mut next_arrival = Time::ZERO;

    let gap = |now: Time, rng: &mut Rng| {
        let rate = setup.rate_at(now);
        if rate <= 0.0 {
            return Nanos::from_millis(1); // idle: look again soon
        }
        let mean = 1.0 / rate;
        Nanos::from_secs_f64(if setup.poisson {
            -(1.0 - rng.next_f64()).ln() * mean
        } else {
            mean
        })
    };

    loop {
        let completion = completions.peek().map_or(Time::MAX, |Reverse(t)| *t);
        let tick = regulator.next_tick();
        let expiry = match (setup.queue_timeout, queue.oldest()) {
            (Some(timeout), Some((enqueued, _))) => enqueued + timeout,
            _ => Time::MAX,
        };
        let now = completion.min(tick).min(next_arrival).min(expiry);
        if now >= end {
            break;
        }
        let w = window_of(now);
        if now == expiry {
            if let Some((_, key)) = queue.oldest() {
                queue.entries.remove(&key);
                trace.windows[w].expired += 1;
                if queue.entries.is_empty() {
                    stats.last_empty = now;
                }
            }
        } else if now == tick {
            stats.len = queue.entries.len();
            stats.oldest_wait = queue.oldest().map_or(Nanos::ZERO, |(t, _)| now - t);
            if queue.entries.is_empty() {
                stats.last_empty = now;
            }
            regulator.tick(now, &stats);
            trace.ticks.push((now, regulator.state()));
        } else if now == completion {
            completions.pop();
            stats.inflight -= 1;
            stats.completed += 1;
            // A free server takes the most important waiting entry.
            while let Some((&key, &enqueued)) = queue.entries.iter().next() {
                queue.entries.remove(&key);
                let priority = Priority::from_rank(key.2).expect("valid rank");
                let sojourn = now - enqueued;
                let left = queue.entries.len();
                if left == 0 {
                    stats.last_empty = now;
                }
                if regulator.on_dequeue(now, sojourn, priority, left) == Verdict::Reject {
                    trace.windows[w].dropped[usize::from(priority.tier())] += 1;
                    continue;
                }
                stats.dequeued += 1;
                stats.inflight += 1;
                completions.push(Reverse(now + setup.service));
                trace.windows[w].served += 1;
                trace.windows[w].max_sojourn = trace.windows[w].max_sojourn.max(sojourn);
                break;
            }
        } else {
            let priority = setup.priority(&mut rng);
            let tier = usize::from(priority.tier());
            let rank = usize::from(priority.rank());
            trace.windows[w].arrived[tier] += 1;
            trace.arrived_by_rank[rank] += 1;
            if regulator.on_arrival(now, priority, queue.entries.len()) == Verdict::Reject {
                trace.windows[w].rejected[tier] += 1;
                trace.rejected_by_rank[rank] += 1;
            } else {
                stats.accepted += 1;
                if queue.entries.is_empty() && stats.inflight < setup.servers {
                    stats.inflight += 1;
                    completions.push(Reverse(now + setup.service));
                    trace.windows[w].served += 1;
                } else {
                    seq += 1;
                    let order = if setup.fifo { 0 } else { priority.rank() };
                    let key = (order, seq, priority.rank());
                    queue.entries.insert(key, now);
                    queue.fifo.push_back((now, key));
                    stats.enqueued += 1;
                }
            }
            next_arrival = now + gap(now, &mut rng);
        }
        let len = queue.entries.len();
        trace.windows[w].max_queue = trace.windows[w].max_queue.max(len);
    }
    trace
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::regulator::Off;

    #[test]
    fn below_capacity_nothing_waits_long_and_above_it_the_queue_grows() {
        let trace = run(&mut Off, &Setup::thousand_rps(&[(5_000, 800.0)]));
        let served: u64 = trace.between(1_000, 5_000).iter().map(|w| w.served).sum();
        assert!((3_000..3_400).contains(&served), "{served}");
        assert!(trace.max_queue(1_000, 5_000) < 100);

        let trace = run(&mut Off, &Setup::thousand_rps(&[(5_000, 2_000.0)]));
        let served: u64 = trace.between(1_000, 5_000).iter().map(|w| w.served).sum();
        assert!(
            (3_950..=4_000).contains(&served),
            "capacity is 1000/s: {served}"
        );
        assert!(
            trace.max_queue(4_000, 5_000) > 4_000,
            "a second of excess per second"
        );
        // The entry served at t arrived at t/2: at 2x, sojourn grows at half the clock.
        assert!(trace.max_sojourn(4_900, 5_000) > Nanos::from_millis(2_400));
    }

    #[test]
    fn queue_timeout_expires_the_oldest() {
        let setup = Setup::thousand_rps(&[(3_000, 2_000.0)]).with_timeout(Nanos::from_millis(200));
        let trace = run(&mut Off, &setup);
        assert!(trace.max_sojourn(0, 3_000) <= Nanos::from_millis(200));
        let expired: u64 = trace.between(1_000, 3_000).iter().map(|w| w.expired).sum();
        assert!(
            (1_800..2_200).contains(&expired),
            "half of 2000/s expires: {expired}"
        );
    }
}

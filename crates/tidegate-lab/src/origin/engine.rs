//! The origin's service, in model time: the model's instances, the completions they promised,
//! the capacity changes still to come, and the balancing between instances.
//!
//! This is the whole behaviour of the origin and it does no I/O and reads no clock, so that
//! it is tested with literal times and so that the origin cannot drift from the simulator:
//! both call the same [`Instance`] the same way. The driver thread ([`super::driver`]) feeds
//! it real time and turns its answers into HTTP responses.
//!
//! Completions are processed at the time the model promised, not at the (slightly later) time
//! a timer woke up: a worker that finished at `done` takes its next request at `done`, so
//! timer lateness delays responses by microseconds but never accumulates into lost capacity.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use tidegate_core::rng::{Rng, splitmix64};
use tidegate_core::{Nanos, Time};
use tidegate_model::lease::{StaticLease, StaticLeaseConfig};
use tidegate_model::service::{Admission, Balance, Change, Instance, ServiceConfig, ServiceKind};

/// The random stream of the work-time spread, as the simulator names its streams.
const WORK_STREAM: u64 = 3;

/// What became of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// The service worked on it; `held` is from its arrival to the end of its work.
    Served { instance: usize, held: Nanos },
    /// The service's internal queue was full.
    Refused { instance: usize },
    /// The instance's static lease was exhausted (a responder-side rejection).
    LeaseExhausted { instance: usize },
}

/// Counters of one instance, for `/metrics`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct InstanceStats {
    /// Requests being worked on.
    pub(crate) working: u32,
    /// Requests in the internal queue.
    pub(crate) queued: u32,
    pub(crate) arrived: u64,
    /// Work completed (whether or not its caller was still there).
    pub(crate) served: u64,
    pub(crate) refused: u64,
    pub(crate) lease_exhausted: u64,
    /// Workers now (a pool), after the capacity changes so far.
    pub(crate) workers: Option<u32>,
    /// Nominal work time now (a pool).
    pub(crate) work: Option<Nanos>,
}

#[derive(Debug)]
struct Pending<R> {
    instance: usize,
    arrived: Time,
    reply: R,
}

/// The service of an origin; `R` is how a request is answered (a channel in the origin,
/// a plain value in tests).
#[derive(Debug)]
pub(crate) struct Engine<R> {
    config: ServiceConfig,
    instances: Vec<Instance>,
    leases: Option<Vec<StaticLease>>,
    stats: Vec<InstanceStats>,
    rng: Rng,
    next_token: u64,
    pending: HashMap<u64, Pending<R>>,
    /// `(done, token)`, earliest first.
    completions: BinaryHeap<Reverse<(Time, u64)>>,
    /// Index of the next capacity change to apply.
    next_change: usize,
    round_robin: usize,
}

impl<R> Engine<R> {
    /// A fresh service (`config` validated), with a static lease on each instance if given.
    pub(crate) fn new(
        config: ServiceConfig,
        lease: Option<&StaticLeaseConfig>,
        seed: u64,
    ) -> Engine<R> {
        let n = config.instances() as usize;
        let instances = (0..n).map(|_| config.instance()).collect();
        let leases = lease.map(|l| (0..n).map(|_| StaticLease::new(l)).collect());
        let mut stats = vec![InstanceStats::default(); n];
        if let Some(workers) = pool_workers(&config) {
            for s in &mut stats {
                s.workers = Some(workers);
                s.work = Some(config.pool.work);
            }
        }
        Engine {
            instances,
            leases,
            stats,
            rng: Rng::seed(splitmix64(seed ^ splitmix64(WORK_STREAM))),
            next_token: 0,
            pending: HashMap::new(),
            completions: BinaryHeap::new(),
            next_change: 0,
            round_robin: 0,
            config,
        }
    }

    pub(crate) fn instances(&self) -> usize {
        self.instances.len()
    }

    /// When [`Engine::advance`] next has something to do.
    pub(crate) fn next_due(&self) -> Option<Time> {
        let completion = self.completions.peek().map(|Reverse((at, _))| *at);
        let change = self
            .config
            .changes
            .get(self.next_change)
            .map(|c| Time::ZERO + c.at);
        match (completion, change) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Processes the completions and capacity changes due by `now`, in time order; the
    /// requests whose work ended go to `answered`.
    pub(crate) fn advance(&mut self, now: Time, answered: &mut Vec<(R, Answer)>) {
        while let Some(due) = self.next_due().filter(|&due| due <= now) {
            let change_due = self
                .config
                .changes
                .get(self.next_change)
                .is_some_and(|c| Time::ZERO + c.at == due);
            if change_due {
                let change = self.config.changes[self.next_change].clone();
                self.next_change += 1;
                self.apply(due, &change);
                continue;
            }
            let Some(Reverse((done, token))) = self.completions.pop() else {
                break;
            };
            let Some(p) = self.pending.remove(&token) else {
                continue;
            };
            let i = p.instance;
            self.stats[i].working -= 1;
            self.stats[i].served += 1;
            if let Some(next) = self.instances[i].finish(done) {
                self.start_queued(i, next.token, next.done);
            }
            answered.push((
                p.reply,
                Answer::Served {
                    instance: i,
                    held: done - p.arrived,
                },
            ));
        }
    }

    fn apply(&mut self, at: Time, change: &Change) {
        for i in 0..self.instances.len() {
            self.instances[i].apply(change);
            if let Some(workers) = change.workers {
                self.stats[i].workers = Some(workers.get());
            }
            if let Some(work) = change.work {
                self.stats[i].work = Some(work);
            }
            while let Some(next) = self.instances[i].start_waiting(at) {
                self.start_queued(i, next.token, next.done);
            }
        }
    }

    /// A request of the internal queue starts.
    fn start_queued(&mut self, i: usize, token: u64, done: Time) {
        self.stats[i].queued -= 1;
        self.stats[i].working += 1;
        self.completions.push(Reverse((done, token)));
    }

    /// A request arrives at `now` (after [`Engine::advance`] to `now`), for `instance` or, with
    /// `None`, for whichever the service's balancing picks. Returns the reply at once if the
    /// request is turned away; otherwise its answer comes from a later `advance`.
    pub(crate) fn arrive(
        &mut self,
        now: Time,
        instance: Option<usize>,
        reply: R,
    ) -> Option<(R, Answer)> {
        let i = instance
            .filter(|&i| i < self.instances.len())
            .unwrap_or_else(|| self.choose(now));
        self.stats[i].arrived += 1;
        if let Some(leases) = &mut self.leases
            && !leases[i].try_take(now)
        {
            self.stats[i].lease_exhausted += 1;
            return Some((reply, Answer::LeaseExhausted { instance: i }));
        }
        let factor = self.config.draw_factor(&mut self.rng);
        let token = self.next_token;
        match self.instances[i].arrive(now, token, factor) {
            Admission::Refused => {
                self.stats[i].refused += 1;
                return Some((reply, Answer::Refused { instance: i }));
            }
            Admission::Started(done) => {
                self.stats[i].working += 1;
                self.completions.push(Reverse((done, token)));
            }
            Admission::Queued => self.stats[i].queued += 1,
        }
        self.next_token += 1;
        self.pending.insert(
            token,
            Pending {
                instance: i,
                arrived: now,
                reply,
            },
        );
        None
    }

    /// The instance a request without a target goes to: the scenario's balancing as it is
    /// without a gate (in turn, or the fewest requests in the service; with leases, the most
    /// lease availability, in turn once every lease is exhausted, as RSocket's balancer).
    fn choose(&mut self, now: Time) -> usize {
        let n = self.instances.len();
        let mut in_turn = || {
            let i = self.round_robin;
            self.round_robin = (i + 1) % n;
            i
        };
        if n == 1 || self.config.balance == Balance::RoundRobin {
            return in_turn();
        }
        let mut best = (f64::NEG_INFINITY, 0);
        for i in 0..n {
            let score = match &mut self.leases {
                Some(leases) => leases[i].availability(now),
                None => 1.0 / (1.0 + f64::from(self.instances[i].in_service())),
            };
            if score > best.0 {
                best = (score, i);
            }
        }
        if best.0 > 0.0 { best.1 } else { in_turn() }
    }

    pub(crate) fn stats(&self) -> &[InstanceStats] {
        &self.stats
    }
}

/// A pool's workers; `None` for a curve, which has no workers to report.
fn pool_workers(config: &ServiceConfig) -> Option<u32> {
    (config.kind == ServiceKind::Pool).then_some(config.pool.workers.get())
}

#[cfg(test)]
mod tests {
    use std::num::NonZeroU32;

    use tidegate_model::service::{CurveBy, CurveConfig, PoolConfig, Spread};

    use super::*;

    fn ms(ms: u64) -> Time {
        Time::ZERO + Nanos::from_millis(ms)
    }

    fn pool(workers: u32, work_ms: u64, queue: Option<u32>) -> ServiceConfig {
        ServiceConfig {
            spread: Spread::Constant,
            pool: PoolConfig {
                workers: NonZeroU32::new(workers).unwrap(),
                work: Nanos::from_millis(work_ms),
                queue,
                ..PoolConfig::default()
            },
            ..ServiceConfig::default()
        }
    }

    /// Advances to `now` and returns the replies answered, in order.
    fn advance(engine: &mut Engine<u32>, now: Time) -> Vec<(u32, Answer)> {
        let mut out = Vec::new();
        engine.advance(now, &mut out);
        out
    }

    #[test]
    fn a_pool_serves_in_waves_of_its_workers() {
        let mut e = Engine::new(pool(2, 100, None), None, 1);
        for r in 0..5 {
            assert_eq!(e.arrive(ms(0), None, r), None);
        }
        assert_eq!(e.stats()[0].working, 2);
        assert_eq!(e.stats()[0].queued, 3);
        assert_eq!(e.next_due(), Some(ms(100)));
        assert!(advance(&mut e, ms(99)).is_empty());
        // Both workers finish at 100 ms and take the next two at once.
        let served = advance(&mut e, ms(100));
        let held = Nanos::from_millis(100);
        assert_eq!(
            served,
            vec![
                (0, Answer::Served { instance: 0, held }),
                (1, Answer::Served { instance: 0, held })
            ]
        );
        // A late wake-up still finishes the work at the promised times: request 4 waited
        // 200 ms and worked 100 ms.
        let served = advance(&mut e, ms(350));
        assert_eq!(served.len(), 3);
        assert_eq!(
            served[2],
            (
                4,
                Answer::Served {
                    instance: 0,
                    held: Nanos::from_millis(300)
                }
            )
        );
        assert_eq!(e.stats()[0].served, 5);
        assert_eq!(e.next_due(), None);
    }

    #[test]
    fn a_full_internal_queue_refuses() {
        let mut e = Engine::new(pool(1, 100, Some(1)), None, 1);
        assert_eq!(e.arrive(ms(0), None, 0), None);
        assert_eq!(e.arrive(ms(0), None, 1), None);
        assert_eq!(
            e.arrive(ms(1), None, 2),
            Some((2, Answer::Refused { instance: 0 }))
        );
        assert_eq!(e.stats()[0].refused, 1);
        assert_eq!(e.stats()[0].arrived, 3);
    }

    #[test]
    fn capacity_changes_apply_at_their_time_in_order_with_completions() {
        let mut config = pool(1, 100, None);
        config.changes = vec![Change {
            at: Nanos::from_millis(150),
            workers: NonZeroU32::new(3),
            work: Some(Nanos::from_millis(200)),
        }];
        let mut e = Engine::new(config, None, 1);
        for r in 0..4 {
            assert_eq!(e.arrive(ms(0), None, r), None);
        }
        // 100 ms: request 0 done, request 1 starts at 100 ms work; 150 ms: two more workers
        // start requests 2 and 3 with the new work time.
        let served = advance(&mut e, ms(1000));
        let held: Vec<(u32, u64)> = served
            .iter()
            .map(|&(r, a)| match a {
                Answer::Served { held, .. } => (r, held.as_nanos() / 1_000_000),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(held, vec![(0, 100), (1, 200), (2, 350), (3, 350)]);
        assert_eq!(e.stats()[0].workers, Some(3));
        assert_eq!(e.stats()[0].work, Some(Nanos::from_millis(200)));
    }

    #[test]
    fn a_curve_by_concurrency_slows_with_the_requests_held() {
        let config = ServiceConfig {
            kind: ServiceKind::Curve,
            spread: Spread::Constant,
            curve: CurveConfig {
                by: CurveBy::Concurrency,
                points: vec![(1, Nanos::from_millis(2)), (3, Nanos::from_millis(20))],
                ..CurveConfig::default()
            },
            ..ServiceConfig::default()
        };
        let mut e = Engine::new(config, None, 1);
        for r in 0..3 {
            assert_eq!(e.arrive(ms(0), None, r), None);
        }
        let served = advance(&mut e, ms(100));
        let held: Vec<u64> = served
            .iter()
            .map(|(_, a)| match a {
                Answer::Served { held, .. } => held.as_nanos() / 1_000,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(held, vec![2_000, 11_000, 20_000]);
        assert_eq!(e.stats()[0].workers, None);
    }

    #[test]
    fn instances_in_turn_or_least_loaded_and_by_lease_availability() {
        let mut config = pool(1, 100, None);
        config.instances = NonZeroU32::new(3);
        let mut e = Engine::new(config.clone(), None, 1);
        for r in 0..4 {
            assert_eq!(e.arrive(ms(0), None, r), None);
        }
        assert_eq!(
            e.stats().iter().map(|s| s.arrived).collect::<Vec<_>>(),
            vec![2, 1, 1]
        );

        config.balance = Balance::LeastLoaded;
        let mut e = Engine::new(config.clone(), None, 1);
        e.arrive(ms(0), Some(0), 0);
        e.arrive(ms(0), Some(0), 1);
        e.arrive(ms(0), Some(1), 2);
        // Instance 2 is empty: it gets the next request.
        e.arrive(ms(0), None, 3);
        assert_eq!(e.stats()[2].arrived, 1);

        let lease = StaticLeaseConfig {
            allowed: NonZeroU32::new(1).unwrap(),
            ttl: Nanos::from_secs(1),
        };
        let mut e: Engine<u32> = Engine::new(config, Some(&lease), 1);
        for r in 0..3 {
            assert_eq!(e.arrive(ms(0), None, r), None);
        }
        assert_eq!(
            e.arrive(ms(0), None, 3),
            Some((3, Answer::LeaseExhausted { instance: 0 }))
        );
        // A new lease window grants again.
        assert_eq!(e.arrive(ms(1000), None, 4), None);
    }
}

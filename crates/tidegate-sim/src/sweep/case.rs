//! One case of the family: a service shape, a load shape and a client, and the scenario
//! that runs them.
//!
//! Times are in units of the case's mean work time `W`, so that a case with 1 ms of work and
//! one with 2 s of work run the same number of work times (and, at the same knee and load,
//! the same number of requests): the cost of a case is its knee times its load, not its
//! clock. The load shapes:
//!
//! | shape | rate (x capacity), W | judged |
//! |---|---|---|
//! | 0.5x | 0.5 for 250 | 50-250, not overloaded |
//! | step 1.5x / 3x / 10x | 0.5 for 50, then the step for 200 | 100-250, overload from 50 |
//! | ramp | 0.5 for 50, to 3 over 150, 3 for 50 | 130-250, overload from 80 (1x) |
//! | bursts | 0.5 for 50, then (3 for 25, 0.5 for 25) x 4 | 50-250, mixed |
//! | capacity halves | 0.8 for 300, half the workers from 100 to 200 | 150-200 overloaded, 250-300 not |
//!
//! Each judged window after an overload or a capacity change starts 50 work times later: the
//! issue's settling target is 50 service times, and the goodput is judged after it. Knees
//! under 30 run longer ([`Case::scale`]): every time of the table but the 50 work times of
//! settling and the bursts' 25 is stretched by 30 / knee. The capacity "halves" to half the
//! workers rounded down (a third for a knee of 3), and with a single worker, the work time
//! doubles instead.

use std::num::NonZeroU32;

use serde::Serialize;
use tidegate_core::Nanos;
use tidegate_model::NonNegative;
use tidegate_model::client::{Arrivals, LoadConfig, Phase, RetryConfig, TierShare};
use tidegate_model::service::{Change, PoolConfig, ServiceConfig, ServiceKind, Spread};

use crate::scenario::{ArmConfig, Scenario};

/// The work-time distribution of a case (each with mean 1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Dist {
    Constant,
    /// +-20%.
    Uniform,
    Exponential,
    Lognormal05,
    Lognormal10,
    /// 90% fast, 10% a hundred times slower (1 ms and 100 ms).
    Bimodal90,
    /// 99% fast, 1% a hundred times slower.
    Bimodal99,
    Pareto25,
    Pareto15,
}

impl Dist {
    pub const ALL: [Dist; 9] = [
        Dist::Constant,
        Dist::Uniform,
        Dist::Exponential,
        Dist::Lognormal05,
        Dist::Lognormal10,
        Dist::Bimodal90,
        Dist::Bimodal99,
        Dist::Pareto25,
        Dist::Pareto15,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Dist::Constant => "constant",
            Dist::Uniform => "uniform 20%",
            Dist::Exponential => "exponential",
            Dist::Lognormal05 => "lognormal 0.5",
            Dist::Lognormal10 => "lognormal 1.0",
            Dist::Bimodal90 => "bimodal 90/10",
            Dist::Bimodal99 => "bimodal 99/1",
            Dist::Pareto25 => "pareto 2.5",
            Dist::Pareto15 => "pareto 1.5",
        }
    }

    /// The service's spread keys for this distribution.
    fn configure(self, service: &mut ServiceConfig) {
        let value = |v: f64| NonNegative::new(v);
        let (spread, sigma, share, alpha) = match self {
            Dist::Constant => (Spread::Constant, None, None, None),
            Dist::Uniform => (Spread::Uniform, None, None, None),
            Dist::Exponential => (Spread::Exponential, None, None, None),
            Dist::Lognormal05 => (Spread::Lognormal, value(0.5), None, None),
            Dist::Lognormal10 => (Spread::Lognormal, value(1.0), None, None),
            Dist::Bimodal90 => (Spread::Bimodal, None, value(0.9), None),
            Dist::Bimodal99 => (Spread::Bimodal, None, value(0.99), None),
            Dist::Pareto25 => (Spread::Pareto, None, None, value(2.5)),
            Dist::Pareto15 => (Spread::Pareto, None, None, value(1.5)),
        };
        service.spread = spread;
        service.jitter = value(0.2);
        service.sigma = sigma;
        service.fast_share = share;
        service.slow_ratio = share.and(value(100.0));
        service.alpha = alpha;
    }

    /// The 99th percentile of one work time, in mean work times: the service's own p99, with
    /// no wait and no contention.
    pub fn p99(self) -> f64 {
        // The standard normal's 99th percentile.
        const Z99: f64 = 2.326_347_874;
        let lognormal = |sigma: f64| (sigma * Z99 - sigma * sigma / 2.0).exp();
        let bimodal = |share: f64| {
            let fast = 1.0 / (share + (1.0 - share) * 100.0);
            if share >= 0.99 { fast } else { fast * 100.0 }
        };
        let pareto = |alpha: f64| (alpha - 1.0) / alpha * 100f64.powf(1.0 / alpha);
        match self {
            Dist::Constant => 1.0,
            Dist::Uniform => 0.8 + 0.4 * 0.99,
            Dist::Exponential => 100f64.ln(),
            Dist::Lognormal05 => lognormal(0.5),
            Dist::Lognormal10 => lognormal(1.0),
            Dist::Bimodal90 => bimodal(0.9),
            Dist::Bimodal99 => bimodal(0.99),
            Dist::Pareto25 => pareto(2.5),
            Dist::Pareto15 => pareto(1.5),
        }
    }

    /// The shortest client timeout (in mean work times, from [`TIMEOUTS`]) this distribution
    /// is paired with: twice its own p99, so that the service alone times out less than 1% of
    /// the requests. Below that, no protection can serve 97% of the capacity (with 90% at
    /// 0.09 W and 10% at 9.2 W, a 2 W timeout loses every slow request and the 92% of the
    /// work they take), and the case would measure the timeout, not the protection.
    /// `slowdown` multiplies the work time (2 while the capacity is halved).
    pub fn shortest_timeout(self, slowdown: f64) -> u32 {
        let floor = 2.0 * self.p99() * slowdown;
        TIMEOUTS
            .iter()
            .copied()
            .find(|&t| f64::from(t) >= floor)
            .unwrap_or(TIMEOUTS[TIMEOUTS.len() - 1])
    }
}

/// The client timeouts of the family, in mean work times.
pub const TIMEOUTS: [u32; 5] = [2, 3, 5, 10, 20];
/// The knees of the family: workers of the pool.
pub const KNEES: [u32; 6] = [1, 3, 10, 30, 100, 500];
/// The mean work times of the family, in milliseconds.
pub const WORKS_MS: [u64; 4] = [1, 20, 100, 2000];

/// How the load goes over a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum LoadShape {
    Half,
    Step15,
    Step3,
    Step10,
    Ramp,
    Bursts,
    CapacityHalves,
}

impl LoadShape {
    pub const ALL: [LoadShape; 7] = [
        LoadShape::Half,
        LoadShape::Step15,
        LoadShape::Step3,
        LoadShape::Step10,
        LoadShape::Ramp,
        LoadShape::Bursts,
        LoadShape::CapacityHalves,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LoadShape::Half => "0.5x",
            LoadShape::Step15 => "step 1.5x",
            LoadShape::Step3 => "step 3x",
            LoadShape::Step10 => "step 10x",
            LoadShape::Ramp => "ramp 0.5-3x",
            LoadShape::Bursts => "bursts 3x/0.5x",
            LoadShape::CapacityHalves => "capacity halves",
        }
    }

    /// `(length, rate from, rate to)` in mean work times and multiples of the capacity, the
    /// run stretched `scale` times (see [`Case::scale`]); bursts keep their length and come
    /// more often.
    fn phases(self, scale: f64) -> Vec<(f64, f64, f64)> {
        let step = |x: f64| vec![(50.0 * scale, 0.5, 0.5), (200.0 * scale, x, x)];
        match self {
            LoadShape::Half => vec![(250.0 * scale, 0.5, 0.5)],
            LoadShape::Step15 => step(1.5),
            LoadShape::Step3 => step(3.0),
            LoadShape::Step10 => step(10.0),
            LoadShape::Ramp => vec![
                (50.0 * scale, 0.5, 0.5),
                (150.0 * scale, 0.5, 3.0),
                (50.0 * scale, 3.0, 3.0),
            ],
            LoadShape::Bursts => std::iter::once((50.0 * scale, 0.5, 0.5))
                .chain(
                    (0..(4.0 * scale).round() as u32)
                        .flat_map(|_| [(25.0, 3.0, 3.0), (25.0, 0.5, 0.5)]),
                )
                .collect(),
            LoadShape::CapacityHalves => vec![(300.0 * scale, 0.8, 0.8)],
        }
    }

    /// The run's length in mean work times.
    pub fn length(self, scale: f64) -> f64 {
        self.phases(scale).iter().map(|p| p.0).sum()
    }

    /// Requests sent per worker of the knee over the run (the area under the rate).
    pub fn requests_per_worker(self, scale: f64) -> f64 {
        self.phases(scale)
            .iter()
            .map(|&(len, from, to)| len * (from + to) / 2.0)
            .sum()
    }

    /// The offered rate at `t` mean work times, as a multiple of the capacity.
    fn rate_at(self, scale: f64, t: f64) -> f64 {
        let mut start = 0.0;
        let phases = self.phases(scale);
        for &(len, from, to) in &phases {
            if t < start + len {
                return from + (to - from) * (t - start) / len;
            }
            start += len;
        }
        phases.last().map_or(0.0, |p| p.2)
    }

    /// When the service's capacity halves and when it recovers, in mean work times.
    fn capacity_changes(self, scale: f64) -> Option<(f64, f64)> {
        (self == LoadShape::CapacityHalves).then_some((100.0 * scale, 200.0 * scale))
    }

    /// The spans over which the protection is judged: an overloaded one starts
    /// [`SETTLE_ALLOWANCE`] after its onset.
    /// `reduced` is the service's capacity while it is reduced, as a fraction of the nominal.
    pub fn windows(self, scale: f64, reduced: f64) -> Vec<Window> {
        let end = self.length(scale);
        let overload = |onset: f64| Window {
            from: onset + SETTLE_ALLOWANCE,
            to: end,
            capacity: 1.0,
            overloaded: true,
            onset: Some(onset),
        };
        let below = |from: f64, to: f64| Window {
            from,
            to,
            capacity: 1.0,
            overloaded: false,
            onset: None,
        };
        match self {
            LoadShape::Half => vec![below(50.0 * scale, end)],
            LoadShape::Step15 | LoadShape::Step3 | LoadShape::Step10 => {
                vec![overload(50.0 * scale)]
            }
            // The ramp crosses the capacity a fifth of the way up (0.5 + 2.5 x 0.2 = 1).
            LoadShape::Ramp => vec![overload(80.0 * scale)],
            LoadShape::Bursts => vec![Window {
                onset: None,
                ..overload(50.0 * scale - SETTLE_ALLOWANCE)
            }],
            LoadShape::CapacityHalves => {
                let (halves, recovers) = (100.0 * scale, 200.0 * scale);
                vec![
                    Window {
                        to: recovers,
                        capacity: reduced,
                        ..overload(halves)
                    },
                    below(recovers + SETTLE_ALLOWANCE, end),
                ]
            }
        }
    }
}

/// Mean work times between an overload's (or a capacity change's) onset and its judged
/// window: the settling target, 50 service times.
pub const SETTLE_ALLOWANCE: f64 = 50.0;

/// A span of a run over which the goodput is judged, in mean work times.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Window {
    pub from: f64,
    pub to: f64,
    /// The service's capacity during the window, as a fraction of its nominal capacity.
    pub capacity: f64,
    /// Judged against the capacity (97%) rather than the offered load (99%).
    pub overloaded: bool,
    /// When the overload or the capacity change that the window follows began: the limit's
    /// settling time is measured from it.
    pub onset: Option<f64>,
}

/// One case of the family.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Case {
    pub dist: Dist,
    /// Workers of the pool.
    pub knee: u32,
    /// Every request held beyond the knee slows new work by half a work time per knee's worth.
    pub contention: bool,
    /// An internal queue of `knee` entries that refuses beyond (else unbounded).
    pub bounded_queue: bool,
    pub work_ms: u64,
    pub load: LoadShape,
    /// The client's timeout, in mean work times.
    pub timeout: u32,
    /// A quarter of the traffic at tier 1, the rest at tier 2 (else all at tier 3).
    pub tiers: bool,
    pub seed: u64,
}

/// The important tier of a two-tier case, and the one to shed first.
pub const TIER_IMPORTANT: u8 = 1;
pub const TIER_SHEDDABLE: u8 = 2;

impl Case {
    /// A name that says every axis value, so that `--case SUBSTRING` can select by any.
    pub fn name(&self) -> String {
        let mut name = format!(
            "{} knee={} work={} {} timeout={}x",
            self.dist.name(),
            self.knee,
            work_label(self.work_ms),
            self.load.name(),
            self.timeout
        );
        if self.contention {
            name.push_str(" contention");
        }
        if self.bounded_queue {
            name.push_str(" queue=knee");
        }
        if self.tiers {
            name.push_str(" 2-tiers");
        }
        name.push_str(&format!(" seed={}", self.seed));
        name
    }

    pub fn work(&self) -> Nanos {
        Nanos::from_millis(self.work_ms)
    }

    /// A number of mean work times as a duration.
    pub fn works(&self, n: f64) -> Nanos {
        self.work().mul_f64(n)
    }

    /// Requests per second the service completes at best.
    pub fn capacity_rps(&self) -> f64 {
        f64::from(self.knee) / self.work().as_secs_f64()
    }

    pub fn timeout(&self) -> Nanos {
        self.works(f64::from(self.timeout))
    }

    /// How many times longer than the table of the module doc the case runs: a knee under
    /// 30 serves few requests per work time, and a goodput judged on a few hundred
    /// completions would measure the dice (a count of n completions varies by about its
    /// square root); stretched to 30 / knee, every case serves about as many requests as a
    /// knee of 30, at the same cost.
    pub fn scale(&self) -> f64 {
        (30.0 / f64::from(self.knee)).max(1.0)
    }

    pub fn windows(&self) -> Vec<Window> {
        self.load.windows(self.scale(), self.reduced_capacity())
    }

    /// Workers while the capacity is halved: half the knee, rounded down. A single worker
    /// cannot be halved: with a knee of 1, the work time doubles instead.
    fn reduced_workers(&self) -> u32 {
        (self.knee / 2).max(1)
    }

    /// The capacity while it is halved, as a fraction of the nominal one (a third for a
    /// knee of 3).
    pub fn reduced_capacity(&self) -> f64 {
        if self.knee == 1 {
            0.5
        } else {
            f64::from(self.reduced_workers()) / f64::from(self.knee)
        }
    }

    /// Whether the load offered at `t` mean work times is above what the service can serve
    /// then.
    pub fn overloaded_at(&self, t: f64) -> bool {
        let scale = self.scale();
        let capacity = match self.load.capacity_changes(scale) {
            Some((halves, recovers)) if t >= halves && t < recovers => self.reduced_capacity(),
            _ => 1.0,
        };
        self.load.rate_at(scale, t) > capacity
    }

    /// How many times longer the work takes while the capacity is halved.
    pub fn reduced_slowdown(&self) -> f64 {
        if self.load == LoadShape::CapacityHalves && self.knee == 1 {
            2.0
        } else {
            1.0
        }
    }

    /// Requests sent over one run of one arm, roughly: what a case costs.
    pub fn requests(&self) -> f64 {
        f64::from(self.knee) * self.load.requests_per_worker(self.scale())
    }

    /// The scenario that runs `arms` on this case.
    pub fn scenario(&self, arms: Vec<ArmConfig>) -> Scenario {
        let capacity = self.capacity_rps();
        let rate = |x: f64| NonNegative::new(x * capacity).unwrap_or_default();
        let mut service = ServiceConfig {
            kind: ServiceKind::Pool,
            pool: PoolConfig {
                workers: NonZeroU32::new(self.knee).unwrap_or(NonZeroU32::MIN),
                work: self.work(),
                queue: self.bounded_queue.then_some(self.knee),
                optimal: Some(self.knee),
                contention: NonNegative::new(if self.contention {
                    0.5 / f64::from(self.knee)
                } else {
                    0.0
                })
                .unwrap_or_default(),
            },
            ..ServiceConfig::default()
        };
        self.dist.configure(&mut service);
        if let Some((halves, recovers)) = self.load.capacity_changes(self.scale()) {
            let (workers, work) = if self.knee == 1 {
                (None, Some(self.works(2.0)))
            } else {
                (NonZeroU32::new(self.reduced_workers()), None)
            };
            service.changes = vec![
                Change {
                    at: self.works(halves),
                    workers,
                    work,
                },
                Change {
                    at: self.works(recovers),
                    workers: workers.and(NonZeroU32::new(self.knee)),
                    work: work.and(Some(self.work())),
                },
            ];
        }
        let tiers = if self.tiers {
            vec![
                TierShare {
                    tier: TIER_IMPORTANT,
                    weight: NonNegative::new(0.25).unwrap_or_default(),
                },
                TierShare {
                    tier: TIER_SHEDDABLE,
                    weight: NonNegative::new(0.75).unwrap_or_default(),
                },
            ]
        } else {
            vec![TierShare {
                tier: 3,
                weight: NonNegative::new(1.0).unwrap_or_default(),
            }]
        };
        let phases = self
            .load
            .phases(self.scale())
            .into_iter()
            .map(|(len, from, to)| Phase {
                duration: self.works(len),
                rate: rate(from),
                to: (to != from).then(|| rate(to)),
            })
            .collect();
        let first_judged = self.windows().first().map_or(0.0, |w| w.from);
        Scenario {
            name: self.name(),
            seed: self.seed,
            duration: self.works(self.load.length(self.scale())),
            warmup: self.works(first_judged),
            overload_at: None,
            service,
            load: LoadConfig {
                arrivals: Arrivals::Poisson,
                rate: None,
                rates: Vec::new(),
                times: Vec::new(),
                phases,
                workers: None,
                think: Nanos::ZERO,
                timeout: self.timeout(),
                connections: None,
                tiers,
                keys: 0,
                cohorts: Default::default(),
                retries: RetryConfig::default(),
            },
            arms,
            series_step: Some(self.works(SERIES_STEP)),
        }
    }
}

/// The span of an entry of a case's series, in mean work times: the resolution of the
/// judged windows and of the settling time.
pub const SERIES_STEP: f64 = 2.0;

/// `1ms`, `20ms`, `2s`.
pub fn work_label(ms: u64) -> String {
    if ms >= 1000 && ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

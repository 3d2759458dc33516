//! The generated family of cases.
//!
//! Not the full cross product of the axes (9 distributions x 6 knees x 4 contention and queue
//! variants x 4 work times x 7 loads x 5 timeouts x 2 tier mixes is over 60,000 shapes), but a
//! base case varied two axes at a time: every pair of values of the crossed axes below occurs,
//! and every value of every axis occurs with several partners. The base is the issue's
//! textbook service: exponential work of 100 ms on 30 workers, an unbounded internal queue, a
//! step to 3x and a client timeout of 10 work times (1 s).
//!
//! Crossed: distribution x load, distribution x knee, distribution x work, knee x load, knee x
//! work, knee x service queue (contention and bound), service queue x load, work x load,
//! timeout x load (on constant work, where every timeout is worth testing), and two tiers x
//! load and x knee. Each shape runs with every seed from 1 to `seeds`.
//!
//! Two rules keep each case sensible and the family fast:
//! - a distribution is paired with timeouts of at least twice its own p99 (of the doubled work
//!   time of a single worker whose capacity halves; [`Dist::shortest_timeout`]): below, the
//!   service alone times out more than 1% of the work;
//! - the capacity is at most [`MAX_CAPACITY_RPS`]: 500 workers at 1 ms (500,000 requests a
//!   second on one instance) is not a service one gate fronts, and knees of 100 and 500 at
//!   1 ms are left out. A case's cost is its knee times its load in work times (about 625
//!   requests per worker for a step to 3x), whatever its work time.
//!
//! The reduced family (`--quick`) keeps every value of the distribution, load, timeout,
//! service-queue and tier axes, on knees up to 10 and one seed: about 35 cases, seconds in a
//! debug build, for CI.

use std::collections::BTreeSet;

use super::case::{Case, Dist, KNEES, LoadShape, TIMEOUTS, WORKS_MS};

/// The most requests per second a case's service completes.
pub const MAX_CAPACITY_RPS: f64 = 50_000.0;

/// Which family to generate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    Full,
    Reduced,
}

/// The service-queue variants: contention beyond the knee, and a bounded internal queue.
const SERVICE_QUEUES: [(bool, bool); 4] =
    [(false, false), (true, false), (false, true), (true, true)];

/// The knees and mean work times a family crosses, and the base case's: the one every
/// other axis varies around. A user's own (`tidegate sim sweep --knee 200 --work 5ms`)
/// builds the family around their service, on values the default was never tuned on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Axes {
    /// In increasing order, without repeats.
    pub knees: Vec<u32>,
    /// In milliseconds, in increasing order, without repeats.
    pub works_ms: Vec<u64>,
    pub base_knee: u32,
    pub base_work_ms: u64,
}

impl Axes {
    /// The family's own: [`KNEES`] and [`WORKS_MS`] around the textbook service (30 workers,
    /// 100 ms); the reduced family's knees up to 10, around 10 workers.
    pub fn of(family: Family) -> Axes {
        match family {
            Family::Full => Axes {
                knees: KNEES.to_vec(),
                works_ms: WORKS_MS.to_vec(),
                base_knee: 30,
                base_work_ms: 100,
            },
            Family::Reduced => Axes {
                knees: KNEES.iter().copied().filter(|&k| k <= 10).collect(),
                works_ms: WORKS_MS.to_vec(),
                base_knee: 10,
                base_work_ms: 100,
            },
        }
    }

    /// These axes with the knees `knees` instead, the first of them the base case's (none
    /// given: unchanged). Zero is no knee and is left out.
    pub fn with_knees(self, knees: &[u32]) -> Axes {
        match base_and_axis(knees) {
            Some((base_knee, knees)) => Axes {
                knees,
                base_knee,
                ..self
            },
            None => self,
        }
    }

    /// These axes with the mean work times `works_ms` instead, the first of them the base
    /// case's (none given: unchanged). Zero is no work time and is left out.
    pub fn with_works_ms(self, works_ms: &[u64]) -> Axes {
        match base_and_axis(works_ms) {
            Some((base_work_ms, works_ms)) => Axes {
                works_ms,
                base_work_ms,
                ..self
            },
            None => self,
        }
    }
}

/// The first value of `values` above zero, and all of those in increasing order without
/// repeats; `None` if there is none.
fn base_and_axis<T: Copy + Ord + Default>(values: &[T]) -> Option<(T, Vec<T>)> {
    let positive = values.iter().copied().filter(|&v| v > T::default());
    let base = positive.clone().next()?;
    Some((
        base,
        positive.collect::<BTreeSet<T>>().into_iter().collect(),
    ))
}

/// The cases of `family` on its own axes ([`Axes::of`]), each shape with the seeds 1 to
/// `seeds`, in a fixed order.
pub fn family(family: Family, seeds: u64) -> Vec<Case> {
    family_on(family, &Axes::of(family), seeds)
}

/// The cases of `family` on `axes`, each shape with the seeds 1 to `seeds`, in a fixed
/// order; the shapes whose capacity passes [`MAX_CAPACITY_RPS`] are left out.
pub fn family_on(family: Family, axes: &Axes, seeds: u64) -> Vec<Case> {
    let base = base(axes.base_knee, axes.base_work_ms);
    let knees = &axes.knees;
    let mut shapes: Vec<Case> = Vec::new();
    let mut add = |case: Case| shapes.push(with_feasible_timeout(case));
    match family {
        Family::Full => {
            for dist in Dist::ALL {
                for load in LoadShape::ALL {
                    add(Case {
                        dist,
                        load,
                        ..base.clone()
                    });
                }
                for &knee in knees {
                    add(Case {
                        dist,
                        knee,
                        ..base.clone()
                    });
                }
                for &work_ms in &axes.works_ms {
                    add(Case {
                        dist,
                        work_ms,
                        ..base.clone()
                    });
                }
            }
            for &knee in knees {
                for load in LoadShape::ALL {
                    add(Case {
                        knee,
                        load,
                        ..base.clone()
                    });
                }
                for &work_ms in &axes.works_ms {
                    add(Case {
                        knee,
                        work_ms,
                        ..base.clone()
                    });
                }
                for (contention, bounded_queue) in SERVICE_QUEUES {
                    add(Case {
                        knee,
                        contention,
                        bounded_queue,
                        ..base.clone()
                    });
                }
                add(Case {
                    knee,
                    tiers: true,
                    ..base.clone()
                });
            }
            for load in LoadShape::ALL {
                for (contention, bounded_queue) in SERVICE_QUEUES {
                    add(Case {
                        load,
                        contention,
                        bounded_queue,
                        ..base.clone()
                    });
                }
                for &work_ms in &axes.works_ms {
                    add(Case {
                        load,
                        work_ms,
                        ..base.clone()
                    });
                }
                for timeout in TIMEOUTS {
                    add(Case {
                        load,
                        timeout,
                        dist: Dist::Constant,
                        ..base.clone()
                    });
                }
                add(Case {
                    load,
                    tiers: true,
                    ..base.clone()
                });
            }
        }
        Family::Reduced => {
            for dist in Dist::ALL {
                add(Case {
                    dist,
                    ..base.clone()
                });
            }
            for load in LoadShape::ALL {
                add(Case {
                    load,
                    ..base.clone()
                });
                add(Case {
                    load,
                    tiers: true,
                    ..base.clone()
                });
            }
            for &knee in knees {
                add(Case {
                    knee,
                    ..base.clone()
                });
            }
            for (contention, bounded_queue) in SERVICE_QUEUES {
                add(Case {
                    contention,
                    bounded_queue,
                    load: LoadShape::Step10,
                    ..base.clone()
                });
            }
            for timeout in TIMEOUTS {
                add(Case {
                    timeout,
                    dist: Dist::Constant,
                    ..base.clone()
                });
            }
            for &work_ms in &axes.works_ms {
                add(Case {
                    work_ms,
                    ..base.clone()
                });
            }
        }
    }
    let mut seen = BTreeSet::new();
    let shapes: Vec<Case> = shapes
        .into_iter()
        .filter(|c| c.capacity_rps() <= MAX_CAPACITY_RPS)
        .filter(|c| seen.insert(c.clone()))
        .collect();
    let seeds = match family {
        Family::Full => seeds.max(1),
        Family::Reduced => 1,
    };
    (1..=seeds)
        .flat_map(|seed| shapes.iter().map(move |c| Case { seed, ..c.clone() }))
        .collect()
}

fn base(knee: u32, work_ms: u64) -> Case {
    Case {
        dist: Dist::Exponential,
        knee,
        contention: false,
        bounded_queue: false,
        work_ms,
        load: LoadShape::Step3,
        timeout: 10,
        tiers: false,
        seed: 1,
    }
}

/// Raises the timeout to the distribution's shortest ([`Dist::shortest_timeout`]), of the
/// slower work while the capacity is halved, if it is ([`Case::reduced_slowdown`]).
fn with_feasible_timeout(case: Case) -> Case {
    Case {
        timeout: case
            .timeout
            .max(case.dist.shortest_timeout(case.reduced_slowdown())),
        ..case
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_full_family_has_300_distinct_cases_covering_every_axis() {
        let cases = family(Family::Full, 2);
        let distinct: BTreeSet<&Case> = cases.iter().collect();
        assert!(distinct.len() >= 300, "{} cases", distinct.len());
        assert_eq!(distinct.len(), cases.len());
        let names: BTreeSet<String> = cases.iter().map(Case::name).collect();
        assert_eq!(names.len(), cases.len(), "names tell the cases apart");
        // Every value of every axis, with several partners on another axis.
        let partners = |has: &dyn Fn(&Case) -> bool, other: &dyn Fn(&Case) -> String| {
            cases
                .iter()
                .filter(|c| has(c))
                .map(other)
                .collect::<BTreeSet<String>>()
                .len()
        };
        let load = |c: &Case| c.load.name().to_owned();
        let dist = |c: &Case| c.dist.name().to_owned();
        for d in Dist::ALL {
            assert!(partners(&|c| c.dist == d, &load) >= 7, "{d:?}");
        }
        for knee in KNEES {
            assert!(partners(&|c| c.knee == knee, &load) >= 3, "knee {knee}");
            assert!(partners(&|c| c.knee == knee, &dist) >= 9, "knee {knee}");
        }
        for work in WORKS_MS {
            assert!(partners(&|c| c.work_ms == work, &load) >= 7, "work {work}");
        }
        for shape in LoadShape::ALL {
            assert!(partners(&|c| c.load == shape, &dist) >= 9, "{shape:?}");
        }
        for timeout in TIMEOUTS {
            assert!(
                partners(&|c| c.timeout == timeout, &load) >= 7,
                "timeout {timeout}"
            );
        }
        for variant in SERVICE_QUEUES {
            let has = |c: &Case| (c.contention, c.bounded_queue) == variant;
            assert!(partners(&has, &load) >= 7, "{variant:?}");
            assert!(partners(&has, &|c| c.knee.to_string()) >= 6, "{variant:?}");
        }
        assert!(partners(&|c| c.tiers, &load) >= 7);
        assert!(cases.iter().map(|c| c.seed).collect::<BTreeSet<_>>().len() >= 2);
        assert!(cases.iter().all(|c| c.capacity_rps() <= MAX_CAPACITY_RPS));
    }

    #[test]
    fn every_case_is_a_valid_scenario_with_a_feasible_timeout() {
        for case in family(Family::Full, 1)
            .iter()
            .chain(&family(Family::Reduced, 1))
        {
            let arms = super::super::arms::oracle_grid(case);
            case.scenario(arms).validate().unwrap();
            assert!(
                f64::from(case.timeout) >= 2.0 * case.dist.p99(),
                "{}",
                case.name()
            );
        }
    }

    #[test]
    fn a_family_on_ones_own_axes_varies_around_its_first_values() {
        let own = Axes::of(Family::Full)
            .with_knees(&[200, 50])
            .with_works_ms(&[5, 300]);
        assert_eq!((own.knees.as_slice(), own.base_knee), (&[50, 200][..], 200));
        assert_eq!(
            (own.works_ms.as_slice(), own.base_work_ms),
            (&[5, 300][..], 5)
        );
        let cases = family_on(Family::Full, &own, 1);
        assert!(cases.len() >= 100, "{}", cases.len());
        assert!(cases.iter().all(|c| own.knees.contains(&c.knee)));
        assert!(cases.iter().all(|c| own.works_ms.contains(&c.work_ms)));
        // The distributions and loads vary around the first knee and work time.
        for dist in Dist::ALL {
            assert!(
                cases
                    .iter()
                    .any(|c| c.dist == dist && (c.knee, c.work_ms) == (200, 5)),
                "{dist:?}"
            );
        }
        // Nothing given, nothing changed; nothing under the capacity, no case.
        let axes = Axes::of(Family::Full).with_knees(&[]).with_works_ms(&[]);
        assert_eq!(family_on(Family::Full, &axes, 2), family(Family::Full, 2));
        let too_fast = Axes::of(Family::Full)
            .with_knees(&[5_000])
            .with_works_ms(&[1]);
        assert!(family_on(Family::Full, &too_fast, 1).is_empty());
    }

    #[test]
    fn the_reduced_family_keeps_every_value_of_its_axes() {
        let cases = family(Family::Reduced, 3);
        assert!((30..=45).contains(&cases.len()), "{}", cases.len());
        for d in Dist::ALL {
            assert!(cases.iter().any(|c| c.dist == d));
        }
        for shape in LoadShape::ALL {
            assert!(cases.iter().any(|c| c.load == shape && c.tiers));
        }
        for timeout in TIMEOUTS {
            assert!(cases.iter().any(|c| c.timeout == timeout));
        }
        assert!(cases.iter().all(|c| c.knee <= 10));
    }
}

//! The robustness sweep: every arm on a generated family of service shapes and loads, with
//! an oracle, judged by the targets.
//!
//! tidegate's default was tuned on the eight scenario files; a user's service has another
//! shape. The sweep runs every arm on a family of cases ([`family`]) crossing the work-time
//! distribution, the service's knee, contention and internal queue, the work time, the load
//! shape, the client's timeout and the tier mix, each case on identical random streams for
//! every arm (the scenario engine's separate seeded streams), and beside them the **oracle**:
//! the best fixed limit and queue timeout for that case, found in hindsight ([`arms`]). Each
//! arm's run is read into a few figures ([`mod@measure`]) and judged by the targets
//! ([`mod@targets`]); [`render`] writes the tables, heatmaps, JSON and page.
//!
//! A case is a [`crate::scenario::Scenario`] built in code and run by the scenario engine, so
//! the sweep measures exactly what `tidegate sim run` would on the same file.

pub mod arms;
pub mod case;
pub mod causes;
pub mod family;
pub mod measure;
pub mod render;
pub mod targets;

use std::collections::BTreeMap;

use serde::Serialize;

use crate::scenario::ArmConfig;
use crate::scenario::engine::run_arm;
use arms::{DEFAULT, ORACLE, ORACLE_GOODPUT_TIE};
use case::Case;
use causes::Cause;
use measure::{ArmResult, measure};
use targets::{Miss, targets};

/// Every arm's figures on one case, and what each missed.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CaseResult {
    pub name: String,
    pub case: Case,
    /// In the order of [`arms::ARMS`], the arms that ran.
    pub arms: Vec<ArmResult>,
    /// The oracle's point of its grid (`oracle 30 q=1W`), when it ran.
    pub oracle_point: Option<String>,
    /// By arm, the targets it missed (arms that missed none are left out).
    pub misses: BTreeMap<String, Vec<Miss>>,
    /// The group of `tidegate default`'s misses, when it ran and missed.
    pub cause: Option<Cause>,
}

impl CaseResult {
    pub fn arm(&self, name: &str) -> Option<&ArmResult> {
        self.arms.iter().find(|a| a.arm == name)
    }
}

/// Runs `arms` (names of [`arms::ARMS`]; unknown names are skipped) on every case, on up
/// to `jobs` threads: every arm of every case is one job, so that a long case spreads over
/// the threads. `progress` is told `(runs done, runs in all)` as each run ends, from the
/// thread that ran it.
pub fn run(
    cases: &[Case],
    arm_names: &[&str],
    jobs: usize,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Vec<CaseResult> {
    let with_oracle = arm_names.contains(&ORACLE);
    let configs: Vec<Vec<ArmConfig>> = cases
        .iter()
        .map(|case| {
            let mut configs: Vec<ArmConfig> = arm_names
                .iter()
                .filter_map(|name| arms::arm(name, case))
                .collect();
            if with_oracle {
                for point in arms::oracle_grid(case) {
                    if !configs.iter().any(|c| c.name == point.name) {
                        configs.push(point);
                    }
                }
            }
            configs
        })
        .collect();
    let scenarios: Vec<_> = cases
        .iter()
        .zip(&configs)
        .map(|(case, configs)| case.scenario(configs.clone()))
        .collect();
    let jobs_list: Vec<(usize, usize)> = scenarios
        .iter()
        .enumerate()
        .flat_map(|(c, s)| (0..s.arms.len()).map(move |a| (c, a)))
        .collect();
    let finished = std::sync::atomic::AtomicUsize::new(0);
    let mut results = crate::parallel::map(&jobs_list, jobs, |&(c, a)| {
        let scenario = &scenarios[c];
        let result = measure(&cases[c], &run_arm(scenario, &scenario.arms[a], None));
        let done = finished.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
        progress(done, jobs_list.len());
        result
    })
    .into_iter();
    cases
        .iter()
        .zip(&configs)
        .map(|(case, configs)| {
            let all: Vec<ArmResult> = results.by_ref().take(configs.len()).collect();
            assemble(case, arm_names, all)
        })
        .collect()
}

/// A case's result from its runs: the named arms in their order, the oracle picked from its
/// grid, and the misses of each.
fn assemble(case: &Case, arm_names: &[&str], all: Vec<ArmResult>) -> CaseResult {
    let oracle = pick_oracle(all.iter().filter(|r| in_grid(&r.arm)));
    let oracle_point = oracle.map(|o| o.arm.clone());
    let arms: Vec<ArmResult> = arms::ARMS
        .iter()
        .filter(|name| arm_names.contains(name))
        .filter_map(|&name| {
            if name == ORACLE {
                oracle.map(|o| ArmResult {
                    arm: ORACLE.to_owned(),
                    ..o.clone()
                })
            } else {
                all.iter().find(|r| r.arm == name).cloned()
            }
        })
        .collect();
    let oracle_result = arms.iter().find(|a| a.arm == ORACLE);
    let misses: BTreeMap<String, Vec<Miss>> = arms
        .iter()
        .map(|a| (a.arm.clone(), targets(case, a, oracle_result)))
        .filter(|(_, m)| !m.is_empty())
        .collect();
    let cause = misses.get(DEFAULT).map(|missed| {
        let missed: Vec<_> = missed.iter().map(|m| m.target).collect();
        Cause::of(case, &missed)
    });
    CaseResult {
        name: case.name(),
        case: case.clone(),
        arms,
        oracle_point,
        misses,
        cause,
    }
}

/// An arm of the oracle's grid ([`arms::oracle_grid`]).
fn in_grid(name: &str) -> bool {
    name == "fixed knee" || name.starts_with("oracle ")
}

/// The best of the grid: the best goodput within [`ORACLE_GOODPUT_TIE`], then the lowest p99.
pub fn pick_oracle<'a>(grid: impl Iterator<Item = &'a ArmResult> + Clone) -> Option<&'a ArmResult> {
    let best = grid
        .clone()
        .map(ArmResult::worst_goodput)
        .fold(f64::NEG_INFINITY, f64::max);
    grid.filter(|r| r.worst_goodput() >= best - ORACLE_GOODPUT_TIE)
        .min_by(|a, b| {
            let p99 = |r: &ArmResult| r.p99_ms.unwrap_or(f64::INFINITY);
            p99(a).total_cmp(&p99(b))
        })
}

#[cfg(test)]
mod tests;

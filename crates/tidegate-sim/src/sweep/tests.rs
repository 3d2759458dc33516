use super::arms::{DEFAULT, ORACLE, oracle_grid};
use super::case::{Case, Dist, LoadShape};
use super::family::{Family, family};
use super::targets::{Target, targets};
use super::*;

fn small(load: LoadShape) -> Case {
    Case {
        dist: Dist::Exponential,
        knee: 2,
        contention: false,
        bounded_queue: false,
        work_ms: 20,
        load,
        timeout: 10,
        tiers: false,
        seed: 1,
    }
}

fn grid_results(case: &Case) -> Vec<ArmResult> {
    let scenario = case.scenario(oracle_grid(case));
    scenario
        .arms
        .iter()
        .map(|arm| measure(case, &run_arm(&scenario, arm, None)))
        .collect()
}

#[test]
fn the_oracle_is_at_least_as_good_as_every_fixed_arm_it_searched() {
    for load in [LoadShape::Step3, LoadShape::Half] {
        let case = small(load);
        let grid = grid_results(&case);
        assert_eq!(grid.len(), 16);
        let oracle = pick_oracle(grid.iter()).unwrap();
        for r in &grid {
            assert!(
                oracle.worst_goodput() >= r.worst_goodput() - ORACLE_GOODPUT_TIE,
                "{} beats {}",
                r.arm,
                oracle.arm
            );
            if r.worst_goodput() >= oracle.worst_goodput() {
                assert!(oracle.p99_ms <= r.p99_ms, "{} {:?}", r.arm, r.p99_ms);
            }
        }
        // The grid differs: a limit of 1 on 2 workers serves half the capacity at 3x.
        if load == LoadShape::Step3 {
            let one = grid.iter().find(|r| r.arm == "oracle 1 q=none").unwrap();
            assert!(one.worst_goodput() < 0.6, "{one:?}");
            assert!(oracle.worst_goodput() > 0.9, "{oracle:?}");
        }
    }
}

#[test]
fn targets_flag_a_limit_of_one_and_pass_an_ideal_arm() {
    let case = small(LoadShape::Step3);
    let grid = grid_results(&case);
    let oracle = pick_oracle(grid.iter()).unwrap().clone();
    let one = grid.iter().find(|r| r.arm == "oracle 1 q=none").unwrap();
    let misses = targets(&case, one, Some(&oracle));
    assert!(
        misses.iter().any(|m| m.target == Target::Goodput),
        "{misses:?}"
    );
    let ideal = ArmResult {
        arm: "ideal".to_owned(),
        goodput: vec![1.0],
        shed: 0,
        p99_ms: oracle.p99_ms,
        late_share: 0.0,
        tier1_loss: Some(0.0),
        tier2_served: Some(0.5),
        settle_w: Some(10.0),
        unsettled: false,
    };
    assert_eq!(targets(&case, &ideal, Some(&oracle)), vec![]);
    // Each target, missed on its own.
    let half = small(LoadShape::Half);
    let cases = [
        (
            &half,
            ArmResult {
                shed: 3,
                ..ideal.clone()
            },
            Target::Shed,
        ),
        (
            &case,
            ArmResult {
                goodput: vec![0.96],
                ..ideal.clone()
            },
            Target::Goodput,
        ),
        (
            &half,
            ArmResult {
                goodput: vec![0.985],
                ..ideal.clone()
            },
            Target::Goodput,
        ),
        (
            &case,
            ArmResult {
                late_share: 0.02,
                ..ideal.clone()
            },
            Target::P99Timeout,
        ),
        (
            &case,
            ArmResult {
                tier1_loss: Some(0.01),
                ..ideal.clone()
            },
            Target::Tiers,
        ),
        (
            &case,
            ArmResult {
                settle_w: Some(51.0),
                ..ideal.clone()
            },
            Target::Settle,
        ),
        (
            &case,
            ArmResult {
                unsettled: true,
                ..ideal.clone()
            },
            Target::Settle,
        ),
    ];
    for (case, arm, target) in cases {
        let misses: Vec<Target> = targets(case, &arm, Some(&oracle))
            .iter()
            .map(|m| m.target)
            .collect();
        assert!(misses.contains(&target), "{target:?}: {misses:?}");
    }
    let p99 = oracle.p99_ms.unwrap();
    let slow = ArmResult {
        p99_ms: Some(p99 * 1.3),
        ..ideal
    };
    let misses = targets(&case, &slow, Some(&oracle));
    assert!(
        misses.iter().any(|m| m.target == Target::P99Oracle),
        "{misses:?}"
    );
}

#[test]
fn an_unprotected_service_below_capacity_serves_everything_and_the_run_names_its_arms() {
    let case = Case {
        tiers: true,
        ..small(LoadShape::Half)
    };
    let results = run(
        std::slice::from_ref(&case),
        &["off", DEFAULT, ORACLE],
        2,
        &|_, _| {},
    );
    let r = &results[0];
    assert_eq!(r.name, case.name());
    let names: Vec<&str> = r.arms.iter().map(|a| a.arm.as_str()).collect();
    assert_eq!(names, ["off", DEFAULT, ORACLE]);
    let off = r.arm("off").unwrap();
    assert!(off.worst_goodput() > 0.98, "{off:?}");
    assert_eq!(off.shed, 0);
    assert_eq!(off.tier1_loss, Some(0.0));
    assert!(
        r.oracle_point
            .as_deref()
            .is_some_and(|p| p.starts_with("oracle") || p == "fixed knee")
    );
}

#[test]
fn requests_late_on_their_own_work_are_no_protections_loss() {
    // A cache in front of a slow store: 1% of the answers take 100 times the fast ones (5 s
    // against a 1 s timeout), late at any limit.
    let case = Case {
        dist: Dist::Bimodal99,
        knee: 10,
        work_ms: 100,
        ..small(LoadShape::Step3)
    };
    let scenario = case.scenario(oracle_grid(&case));
    let arm = scenario
        .arms
        .iter()
        .find(|a| a.name == "fixed knee")
        .unwrap();
    let run = run_arm(&scenario, arm, None);
    let all = &run.steady.figures;
    let served = all.goodput_rps / all.offered_rps + all.timeout_ratio;
    assert!(all.timeout_ratio / served > targets::LATE_SHARE, "{all:?}");
    assert_eq!(all.avoidable_timeout_ratio, 0.0, "{all:?}");
    let result = measure(&case, &run);
    assert!(result.late_share <= targets::LATE_SHARE, "{result:?}");
}

#[test]
fn the_capacity_halving_is_judged_against_half_the_capacity_then_the_offered_load() {
    let case = Case {
        knee: 10,
        ..small(LoadShape::CapacityHalves)
    };
    let windows = case.windows();
    assert_eq!((windows[0].capacity, windows[0].overloaded), (0.5, true));
    assert_eq!((windows[1].capacity, windows[1].overloaded), (1.0, false));
    assert!(case.overloaded_at(windows[0].from) && !case.overloaded_at(windows[1].from));
    let results = run(std::slice::from_ref(&case), &["fixed knee"], 1, &|_, _| {});
    let fixed = results[0].arm("fixed knee").unwrap();
    // The fixed knee keeps the halved service busy, and serves the 0.8x once it recovers.
    assert!(
        fixed.goodput[0] > 0.9 && fixed.goodput[0] < 1.1,
        "{fixed:?}"
    );
    assert!(fixed.goodput[1] > 0.97, "{fixed:?}");
}

#[test]
fn one_worker_offered_half_again_what_it_serves_is_kept_busy() {
    // Exponential work at a knee of 1 stepped to 1.5x: the arrivals that find the worker busy
    // wait while freed slots idle (`Gate`'s `IDLE_WAITERS`). Room for two left it idle 12%
    // of its time (87.2-91.8% served on seeds 1-6); room for four, 4.8% (93.7-95.2%).
    for seed in 1..=6 {
        let case = Case {
            knee: 1,
            work_ms: 100,
            seed,
            ..small(LoadShape::Step15)
        };
        let results = run(std::slice::from_ref(&case), &[DEFAULT], 1, &|_, _| {});
        let default = results[0].arm(DEFAULT).unwrap();
        assert!(default.worst_goodput() > 0.925, "seed {seed}: {default:?}");
    }
}

#[test]
fn a_knee_of_three_is_not_crept_past_on_trials_that_read_elastic_by_chance() {
    // Exponential work at a knee of 3 stepped to 3x, the limit over the last third of each
    // run. A growth of one request from 5 is 18% more in flight, within the counting noise of
    // the few dozen answers a trial holds; judged elastic on its point estimate, it
    // re-anchored the baseline on the service's own queue, and the limit crept: a mean of
    // 6.6 over seeds 1-6 (5.5-7.8 a seed). Re-anchored only past the noise (see
    // `Autotune::judge_trial`), 3.9 (3.1-5.4).
    let mut means = Vec::new();
    for seed in 1..=6 {
        let case = Case {
            knee: 3,
            work_ms: 100,
            seed,
            ..small(LoadShape::Step3)
        };
        let scenario = case.scenario(vec![arms::arm(DEFAULT, &case).unwrap()]);
        let run = run_arm(&scenario, &scenario.arms[0], None);
        let limits: Vec<f64> = run
            .series
            .iter()
            .filter_map(|s| s.limit.map(f64::from))
            .collect();
        let last = &limits[limits.len() * 2 / 3..];
        means.push(last.iter().sum::<f64>() / last.len() as f64);
    }
    let mean = means.iter().sum::<f64>() / means.len() as f64;
    assert!(
        mean < 5.0,
        "the limit's means over the last third: {means:?}"
    );
}

/// No regression on the reduced family while the targets are not all met: the cases of each
/// target `tidegate default` misses, at most as many as when this was written (`tidegate sim
/// sweep --quick --arm "tidegate default" --arm oracle`). Lower a bound when a change meets
/// more; a change that misses more is a regression of the default, whatever it gains on the
/// seed scenarios. (About 30 s in a debug build.) Settling once traded against goodput:
/// judging trials at small limits beyond their noise (see `Autotune::judge_trial`) took
/// goodput misses from 17 to 13 and the mean worst-window goodput from 84% to 90%, and
/// settling misses from 26 to 30 (a limit of 8-10 moving by two requests leaves the 20%
/// band).
#[test]
fn the_default_misses_no_more_of_the_reduced_family_than_before() {
    let cases = family(Family::Reduced, 1);
    let results = run(&cases, &[DEFAULT, ORACLE], 2, &|_, _| {});
    let mut missed: std::collections::BTreeMap<Target, usize> = Default::default();
    for result in &results {
        let mut kinds: Vec<Target> = result
            .misses
            .get(DEFAULT)
            .map(|misses| misses.iter().map(|m| m.target).collect())
            .unwrap_or_default();
        kinds.sort();
        kinds.dedup();
        for kind in kinds {
            *missed.entry(kind).or_default() += 1;
        }
    }
    // Tier 1's protection costs the two-tier knee-10 cases some goodput (tier 1 waits for a
    // slot rather than being turned away, and some of it is served past the client's
    // timeout). Each bound is what the default missed when it was last lowered: Autotune's
    // windows measured to a precision (`Autotune::measured_enough`) took goodput 14 -> 8,
    // settling 23 -> 14 and tier-1 losses 1 -> 0; a coarse baseline refined by precise
    // windows of its level (`Baseline::observe` in Autotune) settling 14 -> 10; the wait
    // bound measured against the mean answer below capacity (`gate/demand.rs`) and
    // Autotune's reset no deeper than its ring's evidence, goodput 8 -> 5. The wait bound's
    // mean weighed by the time each answer covers (`gate/latency.rs`) traded: settling
    // 9 -> 7, goodput 5 -> 6 (bimodal 99/1 at a knee of 10 stepped to 3x, 104% -> 90%; over
    // 24 seeds that shape 94.4% -> 92.2%, within its seeds' noise, and the family's goodput
    // misses 2,183 -> 2,120 case-seeds). A queued request judged by what the service
    // answers in now (`ServiceLatency::expected_answer`) traded goodput 6 -> 7 (exponential
    // work at a knee of 1 stepped to 3x, seed 1, 98.1% -> 91.9%; over 24 seeds that shape
    // 92.0% -> 91.4%, within its seeds' noise, and the family's mean 97.06% -> 97.09%).
    // Two arrivals waiting while freed slots idle (`gate/idle.rs`) traded goodput 7 -> 6
    // and settling 7 -> 8 (exponential work at a knee of 3 stepped to 3x, settled after 976
    // W -> never: its limit moves between 4 and 5 for the 3 workers, and two wait in front
    // of the service's own queue, since a slot freed above the knee idles while its worker
    // does not; over
    // 24 seeds the family's settling misses 1,862 -> 1,820 case-seeds, goodput 1,971 ->
    // 1,756). Four waiting rather than two traded settling 8 -> 11 (exponential work at a
    // knee of 10 with a capacity that halves: never settled; the same stepped to 1.5x with
    // two tiers: never settled; lognormal 1.0 at a knee of 10: after 66 W), served past the
    // timeout 2 -> 3 (exponential work at a knee of 1 stepped to 3x, seed 1: 3.0%, the
    // limit standing at 2 for the one worker with four waiting) and p99 against the
    // oracle's 5 -> 6; over 24 seeds the family's case-seeds missing a target 2,924 ->
    // 2,907, goodput 1,756 -> 1,642, settling 1,820 -> 1,826, served past the timeout
    // 161 -> 192, no shape worse beyond its seeds' noise and 8 better. A trial's elastic
    // verdict re-anchoring the baseline only past the noise of its counts (`judge_trial`)
    // took settling 11 -> 10 and p99 against the oracle's 6 -> 5.
    let bounds = [
        (Target::Goodput, 6),
        (Target::Shed, 0),
        (Target::P99Oracle, 5),
        (Target::P99Timeout, 3),
        (Target::Tiers, 0),
        (Target::Settle, 10),
    ];
    let report = render::misses(&results, DEFAULT, usize::MAX);
    for (target, bound) in bounds {
        let n = missed.get(&target).copied().unwrap_or(0);
        assert!(
            n <= bound,
            "{}: {n} cases, at most {bound}\n{report}",
            target.name()
        );
    }
}

/// The issue's targets for `tidegate default` on the reduced family (about 30 s in a debug
/// build). Run it with
/// `cargo test -p tidegate-sim default_meets_the_targets_on_the_reduced_family -- --ignored`.
#[test]
#[ignore = "enabled by the algorithm fix (issue 13, part 2): the default misses today"]
fn default_meets_the_targets_on_the_reduced_family() {
    let cases = family(Family::Reduced, 1);
    let results = run(&cases, &[DEFAULT, ORACLE], 2, &|_, _| {});
    let report = render::misses(&results, DEFAULT, usize::MAX);
    assert!(
        results.iter().all(|r| !r.misses.contains_key(DEFAULT)),
        "{report}"
    );
}

#[test]
fn the_table_and_heatmaps_have_a_row_per_axis_value_and_a_column_per_arm() {
    let cases = [small(LoadShape::Half), small(LoadShape::Step3)];
    let results = run(&cases, &["off", "fixed knee"], 2, &|_, _| {});
    let table = render::table(&results);
    assert!(
        table.contains("0.5x (1)") && table.contains("step 3x (1)"),
        "{table}"
    );
    assert!(table.contains("exponential (2)"), "{table}");
    // off serves everything at 0.5x and nothing past the collapse at 3x.
    let half = table.lines().find(|l| l.starts_with("0.5x")).unwrap();
    let cells: Vec<&str> = half.split_whitespace().collect();
    assert_eq!(cells[cells.len() - 2], "100/100", "{half}");
    let step = table.lines().find(|l| l.starts_with("step 3x")).unwrap();
    let cells: Vec<&str> = step.split_whitespace().collect();
    assert_eq!(cells[cells.len() - 2], "0/0", "{step}");
    let svg = render::heatmap(&results, render::Heat::Goodput);
    assert!(svg.starts_with("<svg") && svg.ends_with("</svg>\n"));
    let rows: usize = render::AXES
        .iter()
        .map(|axis| {
            let values: std::collections::BTreeSet<_> = cases.iter().map(axis.1).collect();
            values.len()
        })
        .sum();
    assert_eq!(svg.matches("<rect x=").count(), rows * 2);
    let page = render::page(&results, "tidegate sim sweep --case x");
    assert!(page.contains("```sh\ntidegate sim sweep --case x\n```"));
    assert!(page.contains(render::GOODPUT_SVG) && page.contains(render::P99_SVG));
}

#[test]
fn a_miss_the_oracle_shares_is_marked_and_counted() {
    let case = small(LoadShape::Step3);
    let ran = |arm: &str, goodput: f64| ArmResult {
        arm: arm.to_owned(),
        goodput: vec![goodput],
        shed: 0,
        p99_ms: Some(100.0),
        late_share: 0.0,
        tier1_loss: None,
        tier2_served: None,
        settle_w: Some(10.0),
        unsettled: false,
    };
    // The same case twice: once the oracle (its grid of one point) meets the goodput target
    // the default misses, once it misses it as well.
    let result = |oracle_goodput: f64| {
        let runs = vec![ran(DEFAULT, 0.9), ran("oracle 2 q=none", oracle_goodput)];
        assemble(&case, &[DEFAULT, ORACLE], runs)
    };
    let report = render::misses(&[result(0.99), result(0.93)], DEFAULT, usize::MAX);
    assert!(report.contains("- goodput: 2 (1)"), "{report}");
    assert!(
        report.contains("In 1 of them the oracle misses every target"),
        "{report}"
    );
    assert_eq!(report.matches("(the oracle too)").count(), 1, "{report}");
    // Listed under the group of their cause, with why.
    let cause = causes::Cause::of(&case, &[Target::Goodput]);
    let heading = format!(
        "### {} (2 cases: goodput 2)\n\n{}\n",
        cause.name(),
        cause.why()
    );
    assert!(report.contains(&heading), "{report}");
}

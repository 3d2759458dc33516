//! `tidegate experiment` end to end: a short real run with its JSON and files, and the
//! errors that name the culprit.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::process::{Command, Output};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../scenarios/capacity-baseline.toml"
);

fn tidegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn a_short_run_prints_json_beside_the_simulator_and_writes_its_files() {
    let dir = std::env::temp_dir().join(format!("tidegate-experiment-{}", std::process::id()));
    let out = tidegate(&[
        "experiment",
        SCENARIO,
        "--duration",
        "6s",
        "--arms",
        "off",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["scenario"], "capacity-baseline");
    let run = &json["runs"][0];
    assert_eq!(run["arm"], "off");
    // A progress line every 5 s of a run.
    assert!(stderr.contains("off: 5s of 6s: sent "), "{stderr}");
    // 5 rps for 6 s at 1 s of work: every request served in about a second, on both sides.
    assert_eq!(run["real"]["whole"]["offered_rps"], 5.0);
    for side in [&run["real"]["whole"], &run["sim"]] {
        let offered = side["offered_rps"].as_f64().unwrap();
        assert!((4.5..=5.0).contains(&offered), "{side}");
        let p50 = side["p50_ms"].as_f64().unwrap();
        assert!((950.0..1200.0).contains(&p50), "{side}");
    }
    assert_eq!(run["agreement"]["agrees"], true, "{run}");
    for file in [
        "capacity-baseline-lab.md",
        "capacity-baseline-lab.csv",
        "capacity-baseline-lab-goodput.svg",
        "capacity-baseline-lab-latency.svg",
        "capacity-baseline-lab-limit.svg",
    ] {
        assert!(dir.join(file).is_file(), "{file}: {stderr}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_selections_name_the_culprit() {
    for (args, needle) in [
        (
            &["experiment", SCENARIO, "--arms", "of"][..],
            "arm \"of\": capacity-baseline has no such arm (its arms: off,",
        ),
        (
            &["experiment", SCENARIO, "--time-scale", "0.5"],
            "--time-scale 0.5",
        ),
        (
            &["experiment", SCENARIO, "--load", "7"],
            "load 7: capacity-baseline has no such load point",
        ),
        (&["experiment", "/nonexistent.toml"], "/nonexistent.toml"),
    ] {
        let out = tidegate(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}

#[test]
fn a_tiered_scenario_has_an_ok_column_per_tier_on_both_sides() {
    let dir =
        std::env::temp_dir().join(format!("tidegate-experiment-tiers-{}", std::process::id()));
    let file = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scenarios/cinnamon-tiers.toml"
    );
    let out = tidegate(&[
        "experiment",
        file,
        "--duration",
        "3s",
        "--load",
        "200",
        "--arm",
        "off",
        "--out",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.join("cinnamon-tiers-lab.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header[header.len() - 2..],
        ["ok_tier1", "ok_tier5"],
        "{csv}"
    );
    let mut sides = Vec::new();
    for line in lines {
        let row: Vec<&str> = line.split(',').collect();
        let count = |column: &str| {
            let i = header.iter().position(|h| *h == column).unwrap();
            row[i].parse::<u64>().unwrap()
        };
        assert_eq!(count("ok"), count("ok_tier1") + count("ok_tier5"), "{line}");
        sides.push(row[2].to_owned());
    }
    assert!(sides.contains(&"real".to_owned()) && sides.contains(&"sim".to_owned()));
    std::fs::remove_dir_all(&dir).unwrap();
}

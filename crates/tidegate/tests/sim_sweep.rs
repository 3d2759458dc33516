//! `tidegate sim sweep`: case and arm selection, the JSON document, the page, usage errors.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a binary that does not run is a failure"
)]

use std::process::{Command, Output};

/// `tidegate sim sweep --quick` with `args`: the reduced family, seconds in a debug build.
fn quick_sweep(args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_tidegate"));
    command.args(["sim", "sweep", "--quick"]).args(args);
    command.output().expect("the binary runs")
}

#[test]
fn a_selection_runs_only_its_cases_and_arms_and_writes_the_page() {
    let dir = std::env::temp_dir().join(format!("tidegate-sweep-{}", std::process::id()));
    let dir_arg = dir.to_string_lossy().into_owned();
    let args = [
        "--case", "knee=1 ", "--arm", "off", "--arm", "oracle", "--json", "--out", &dir_arg,
    ];
    let out = quick_sweep(&args);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let cases = doc.as_array().expect("an array of cases");
    assert_eq!(cases.len(), 1, "{doc}");
    let arms: Vec<&str> = cases[0]["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .filter_map(|a| a["arm"].as_str())
        .collect();
    assert_eq!(arms, ["off", "oracle"]);
    let page = std::fs::read_to_string(dir.join("robustness.md")).expect("the page");
    assert!(
        page.contains("tidegate sim sweep --quick --case 'knee=1 '"),
        "{page}"
    );
    for file in [
        "robustness.txt",
        "robustness.json",
        "robustness-goodput.svg",
        "robustness-p99.svg",
    ] {
        assert!(dir.join(file).exists(), "{file}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_arm_or_a_case_nothing_matches_is_an_error_that_says_so() {
    let out = quick_sweep(&["--arm", "nope"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--arm \"nope\"") && err.contains("tidegate default"),
        "{err}"
    );
    let out = quick_sweep(&["--case", "knee=7"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no case of the family matches"), "{err}");
}

#[test]
fn knees_and_work_times_of_ones_own_build_the_family_around_them() {
    // A knee of 7 at 50 ms, on no axis of the family's own: the reduced family around it.
    let out = quick_sweep(&[
        "--knee",
        "7",
        "--work",
        "50ms",
        "--case",
        "step 3x",
        "--arm",
        "tidegate default",
        "--json",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let names: Vec<&str> = doc
        .as_array()
        .expect("an array of cases")
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    assert!(!names.is_empty(), "{doc}");
    for name in &names {
        assert!(
            name.contains("knee=7 ") && name.contains("work=50ms "),
            "{name}"
        );
    }
    // Every distribution of the family, on that service.
    assert!(
        names.iter().any(|n| n.starts_with("pareto 1.5 ")),
        "{names:?}"
    );
}

#[test]
fn a_knee_or_work_time_out_of_range_is_an_error_that_says_so() {
    for (args, says) in [
        (&["--knee", "0"][..], "--knee"),
        (&["--work", "1500us"][..], "whole number of milliseconds"),
        (&["--work", "2min"][..], "at most 60s"),
        (
            &["--knee", "5000", "--work", "1ms"][..],
            "requests a second (knee / work)",
        ),
    ] {
        let out = quick_sweep(args);
        assert!(!out.status.success(), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
}

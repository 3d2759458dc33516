//! `tidegate sim replay`: the fixture the lab wrote through nginx, as a user would run it;
//! bad lines reported by number; a log of which nothing parses refused with a clear error.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{stderr, stdout, tidegate};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tidegate-sim/tests/fixtures/nginx-access.log")
}

/// A copy of the fixture's first `keep` lines with `bad` lines put in at the given numbers.
fn log_with_bad_lines(name: &str, keep: usize, bad: &[(usize, &str)]) -> PathBuf {
    let text = std::fs::read_to_string(fixture()).unwrap();
    let mut lines: Vec<&str> = text.lines().take(keep).collect();
    for &(number, line) in bad {
        lines.insert(number - 1, line);
    }
    let path =
        std::env::temp_dir().join(format!("tidegate-replay-{}-{name}.log", std::process::id()));
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

#[test]
fn prints_the_fit_and_every_arm_per_load_multiple() {
    let log = fixture().display().to_string();
    let out = tidegate(&["sim", "replay", &log, "--load", "1x,3x", "--jobs", "2"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("0 bad lines"), "{text}");
    assert!(text.contains("fit: a pool of"), "{text}");
    assert!(
        text.contains("\nload 1x:") && text.contains("\nload 3x:"),
        "{text}"
    );
    for arm in [
        "off",
        "aimd",
        "vegas + pie",
        "gradient2 + pie",
        "hillclimb + pie",
        "bdp + pie",
        "autotune + pid",
        "tidegate default",
    ] {
        assert_eq!(
            text.matches(&format!("\n  {arm} ")).count(),
            2,
            "{arm} at each multiple: {text}"
        );
    }
}

#[test]
fn json_has_the_fit_and_the_runs() {
    let log = fixture().display().to_string();
    let out = tidegate(&[
        "sim",
        "replay",
        &log,
        "--load",
        "2x",
        "--arm",
        "off",
        "--arm",
        "tidegate default",
        "--timeout",
        "500ms",
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let knee = doc["fit"]["knee"].as_u64().unwrap();
    assert!((18..=22).contains(&knee), "{knee}");
    assert_eq!(doc["timeout_ms"], 500.0);
    assert_eq!(doc["timeout_default"], false);
    let loads = doc["loads"].as_array().unwrap();
    assert_eq!(loads.len(), 1);
    assert_eq!(loads[0]["multiple"], 2.0);
    let arms = loads[0]["report"]["arms"].as_array().unwrap();
    let names: Vec<&str> = arms.iter().map(|a| a["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["off", "tidegate default"]);
    // The log's 3608 requests over about half its 15.8 s.
    let offered = arms[0]["offered_rps"].as_f64().unwrap();
    assert!((400.0..520.0).contains(&offered), "{offered}");
}

#[test]
fn bad_lines_are_reported_by_number_and_skipped() {
    let bad: Vec<(usize, &str)> = vec![
        (3, "not a log line"),
        (
            10,
            "127.0.0.1 - - [24/Nov/2026:19:59:52 +0000] \"GET / HTTP/1.1\" 2xx 3 \"-\" \"-\" 0.1 0.1 1795550392.748",
        ),
        (20, "x"),
        (30, "x"),
        (40, "x"),
        (50, "x"),
        (60, "x"),
    ];
    let path = log_with_bad_lines("bad", 400, &bad);
    let out = tidegate(&[
        "sim",
        "replay",
        path.to_str().unwrap(),
        "--load",
        "1x",
        "--arm",
        "off",
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("407 lines, 400 requests, 7 bad lines"),
        "{text}"
    );
    assert!(
        text.contains("  line 3: line: expected the nginx format"),
        "{text}"
    );
    assert!(
        text.contains("  line 10: $status: \"2xx\" is not an HTTP status"),
        "{text}"
    );
    assert!(
        text.contains("  line 40: ") && !text.contains("  line 50: "),
        "{text}"
    );
    assert!(text.contains("... and 2 more bad lines"), "{text}");
}

#[test]
fn a_log_of_another_format_is_refused_naming_its_first_line() {
    let log = fixture().display().to_string();
    let out = tidegate(&["sim", "replay", &log, "--format", "envoy"]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("no line is a request in the Envoy format (3608 lines, line 1: line: expected Envoy's default format"), "{err}");
}

#[test]
fn a_bad_load_multiple_is_a_usage_error() {
    let log = fixture().display().to_string();
    let out = tidegate(&["sim", "replay", &log, "--load", "1x,0x"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("\"0x\": expected a positive multiple"),
        "{}",
        stderr(&out)
    );
}

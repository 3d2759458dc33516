//! `tidegate demo`, shortened: both runs on real sockets, the before/after table, and the
//! files it points to. The full demo is what the README shows.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::process::Command;

/// The real p50 of a before/after line: the third column's first number.
fn real_p50(line: &str) -> f64 {
    let numbers: Vec<f64> = line
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter_map(|w| w.parse().ok())
        .collect();
    // goodput real, sim, p50 real, sim, ...
    numbers[2]
}

#[test]
fn a_short_demo_shows_tidegate_cutting_the_latency_and_writes_its_charts() {
    let out_dir = std::env::temp_dir().join(format!("tidegate-demo-test-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(["demo", "--duration", "8s", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    // The arm behind tidegate says where to watch it live; the unprotected one has no proxy.
    assert!(
        stderr.contains("tidegate default: live dashboard at http://127.0.0.1:")
            && !stderr.contains("off: live dashboard"),
        "{stderr}"
    );
    let line = |prefix: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no {prefix:?} line in\n{stdout}"))
    };
    // 4 s a run is too short to show the overload, and the demo says so, before and after.
    assert_eq!(
        stdout.matches("warning: 4 s a run is too short").count(),
        2,
        "{stdout}"
    );
    // Requests turned away and requests the load generator could not send, apart.
    let header = line("  ");
    assert!(
        header.contains("turned away") && header.contains("not sent"),
        "{header}"
    );
    let without = real_p50(line("without tidegate (off)"));
    let with = real_p50(line("with tidegate (tidegate default)"));
    // 4 s per run: unprotected, the queue has grown to several hundred milliseconds of wait;
    // behind tidegate, requests take about their work time.
    assert!(
        with * 2.0 < without,
        "p50 with tidegate {with} ms, without {without} ms\n{stdout}"
    );
    for file in [
        "kanaloa-positive-lab.md",
        "kanaloa-positive-lab.csv",
        "kanaloa-positive-lab-goodput.svg",
        "kanaloa-positive-lab-latency.svg",
    ] {
        assert!(out_dir.join(file).is_file(), "{file} missing\n{stdout}");
        assert!(stdout.contains(&out_dir.display().to_string()), "{stdout}");
    }
    let csv = std::fs::read_to_string(out_dir.join("kanaloa-positive-lab.csv")).unwrap();
    assert!(
        csv.lines()
            .any(|l| l.starts_with("tidegate default,250,real,"))
    );
    assert!(csv.lines().any(|l| l.starts_with("off,250,sim,")));
    std::fs::remove_dir_all(&out_dir).unwrap();
}

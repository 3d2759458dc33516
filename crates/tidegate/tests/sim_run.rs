//! `tidegate sim run`: tables, `--json`, `--out`, and clear errors naming the culprit.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

mod common;

use std::path::PathBuf;

use common::{scenario, stderr, stdout, tidegate};

#[test]
fn prints_the_whole_run_and_the_steady_state_per_arm() {
    let file = scenario("capacity-baseline");
    let out = tidegate(&["sim", "run", &file, "--duration", "20s"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("capacity-baseline (whole run, seed 7)"),
        "{text}"
    );
    assert!(
        text.contains("capacity-baseline (steady state, seed 7)"),
        "{text}"
    );
    assert_eq!(text.matches("tidegate default").count(), 2, "{text}");
}

#[test]
fn json_has_an_entry_per_arm_and_load_point_and_out_writes_the_series() {
    let dir: PathBuf =
        std::env::temp_dir().join(format!("tidegate-sim-run-{}", std::process::id()));
    let file = scenario("cinnamon-tiers");
    let args = [
        "sim",
        "run",
        &file,
        "--duration",
        "5s",
        "--load",
        "200",
        "--load",
        "4000",
        "--arm",
        "off",
        "--arm",
        "tidegate default",
        "--seed",
        "3",
        "--json",
        "--out",
        dir.to_str().unwrap(),
    ];
    let out = tidegate(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["scenario"], "cinnamon-tiers");
    assert_eq!(json["seed"], 3);
    let arms = json["arms"].as_array().unwrap();
    assert_eq!(arms.len(), 4);
    let names: Vec<(&str, f64)> = arms
        .iter()
        .map(|a| (a["name"].as_str().unwrap(), a["load_rps"].as_f64().unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            ("off", 200.0),
            ("tidegate default", 200.0),
            ("off", 4000.0),
            ("tidegate default", 4000.0)
        ]
    );
    for a in arms {
        for key in [
            "offered_rps",
            "goodput_rps",
            "shed_ratio",
            "timeout_ratio",
            "p50_ms",
            "p99_ms",
        ] {
            assert!(
                a.get(key).is_some() && a["steady"].get(key).is_some(),
                "{key}: {a}"
            );
        }
        assert!(a["tiers"]["1"]["goodput_rps"].is_number(), "{a}");
        assert!(a["steady"]["tiers"]["5"]["offered_rps"].is_number(), "{a}");
    }
    let csv = std::fs::read_to_string(dir.join("cinnamon-tiers.csv")).expect("the CSV");
    let mut lines = csv.lines();
    assert_eq!(
        lines.next(),
        Some(
            "arm,load,second,offered,ok,shed,expired,timed_out,p50_ms,p99_ms,limit,inflight,queued,drop_p,ok_tier1,ok_tier5"
        )
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 4 * 5, "a row per second of each run");
    for row in &rows {
        let number = |i: usize| row[i].parse::<u64>().unwrap();
        assert_eq!(
            number(4),
            number(14) + number(15),
            "ok is the tiers' sum: {row:?}"
        );
    }
    // Tiers are the scenario's point: steady goodput per tier by load, a line per arm.
    for tier in [1, 5] {
        let svg = std::fs::read_to_string(
            dir.join(format!("cinnamon-tiers-goodput-by-load-tier{tier}.svg")),
        )
        .unwrap();
        assert!(svg.contains(&format!("goodput of tier {tier}")), "{svg}");
        assert_eq!(svg.matches("<polyline").count(), 2, "{svg}");
    }
    // A sweep gets charts by load, a line per arm, and time charts at its highest load.
    for what in [
        "goodput-by-load",
        "p99-by-load",
        "latency",
        "goodput",
        "limit",
        "queue",
        "drop",
    ] {
        let svg = std::fs::read_to_string(dir.join(format!("cinnamon-tiers-{what}.svg")))
            .unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(
            svg.starts_with("<svg") && svg.ends_with("</svg>\n"),
            "{what}"
        );
        assert!(
            svg.contains(">off</text>") && svg.contains(">tidegate default</text>"),
            "{what}"
        );
    }
    let by_load = std::fs::read_to_string(dir.join("cinnamon-tiers-goodput-by-load.svg")).unwrap();
    assert_eq!(
        by_load.matches("<polyline").count(),
        2,
        "a line of two points per arm"
    );
    let latency = std::fs::read_to_string(dir.join("cinnamon-tiers-latency.svg")).unwrap();
    assert!(latency.contains("at 4000 rps"), "{latency}");
    let page = std::fs::read_to_string(dir.join("cinnamon-tiers.md")).expect("the page");
    assert!(page.starts_with("# Scenario `cinnamon-tiers`"), "{page}");
    assert!(
        page.contains("Uber's Cinnamon against QALM"),
        "the file's comment: {page}"
    );
    assert!(
        page.contains("--arm 'tidegate default'"),
        "the command, quoted: {page}"
    );
    assert!(page.contains("(cinnamon-tiers-latency.svg)"), "{page}");
    // The same command gives the same bytes.
    assert_eq!(tidegate(&args).stdout, out.stdout);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn errors_name_the_culprit() {
    let file = scenario("rsocket-leases");
    let out = tidegate(&["sim", "run", &file, "--arm", "lease 50"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("\"lease 50\"") && stderr(&out).contains("lease 100"),
        "{}",
        stderr(&out)
    );

    let out = tidegate(&["sim", "run", &file, "--load", "10"]);
    assert!(stderr(&out).contains("--load 10"), "{}", stderr(&out));

    let bad: PathBuf =
        std::env::temp_dir().join(format!("tidegate-bad-{}.toml", std::process::id()));
    std::fs::write(
        &bad,
        "duration = \"10s\"\nwarmup = \"1s\"\n[service]\nkind = \"pool\"\nworkerz = 3\n",
    )
    .unwrap();
    let out = tidegate(&["sim", "run", bad.to_str().unwrap()]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(err.contains("line 5") && err.contains("workerz"), "{err}");
    std::fs::remove_file(&bad).ok();

    let out = tidegate(&["sim", "run", "/no/such/file.toml"]);
    assert!(
        stderr(&out).contains("/no/such/file.toml"),
        "{}",
        stderr(&out)
    );
}

//! `tidegate sim pdc`: the output line, sweeps, determinism and usage errors.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a binary that does not run is a failure"
)]

use std::process::{Command, Output};

fn tidegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn prints_the_article_s_line_for_all_uniform() {
    let out = tidegate(&[
        "sim", "pdc", "1", "uniform", "200000", "uniform", "uniform", "200000",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "200000 200000  mean 0.000500  p95 0.000500  p99 0.000500  max 0.000500  max_queued 99\n"
    );
}

#[test]
fn the_line_has_the_tool_s_fields_for_every_process() {
    for process in ["uniform", "poisson", "expdelay", "capdelay"] {
        let out = tidegate(&[
            "sim", "pdc", "200ms", process, "150000", process, process, "200000", "--seed", "7",
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let line = stdout(&out);
        let words: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(words.len(), 12, "{line}");
        assert_eq!(&words[..2], ["150000", "200000"], "{line}");
        for (i, label) in [
            (2, "mean"),
            (4, "p95"),
            (6, "p99"),
            (8, "max"),
            (10, "max_queued"),
        ] {
            assert_eq!(words[i], label, "{line}");
        }
        for i in [3, 5, 7, 9] {
            let secs: f64 = words[i].parse().expect("seconds");
            assert!(secs > 0.0 && words[i].split_once('.').is_some_and(|(_, d)| d.len() == 6));
        }
        words[11].parse::<u64>().expect("a count");
    }
}

#[test]
fn same_seed_same_bytes_other_seed_other_bytes() {
    let run = |seed: &str| {
        stdout(&tidegate(&[
            "sim", "pdc", "1", "poisson", "190000", "poisson", "uniform", "200000", "--seed", seed,
        ]))
    };
    assert_eq!(run("3"), run("3"));
    assert_ne!(run("3"), run("4"));
}

#[test]
fn a_sweep_prints_one_row_per_point_and_writes_csv() {
    let dir = std::env::temp_dir().join(format!("tidegate-pdc-{}", std::process::id()));
    let out = tidegate(&[
        "sim",
        "pdc",
        "500ms",
        "uniform",
        "1",
        "uniform",
        "uniform",
        "200000",
        "--sweep",
        "jitter=producer,dispatcher",
        "--sweep",
        "rate=100000,140000,160000",
        "--jobs",
        "2",
        "--out",
        dir.to_str().expect("utf-8 path"),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2 + 6, "{table}");
    assert!(lines[0].starts_with("# pdc 0.5 s"), "{table}");
    assert!(
        lines[1].split_whitespace().eq([
            "jitter",
            "prod_rate",
            "cons_rate",
            "mean_s",
            "p95_s",
            "p99_s",
            "max_s",
            "max_queued",
            "consumed/s"
        ]),
        "{table}"
    );
    assert!(
        lines[2].starts_with("producer") && lines[7].starts_with("dispatcher"),
        "{table}"
    );
    assert!(
        lines[7].split_whitespace().nth(1) == Some("160000"),
        "{table}"
    );
    let csv = std::fs::read_to_string(dir.join("pdc.csv")).expect("the CSV was written");
    assert_eq!(csv.lines().count(), 1 + 6, "{csv}");
    assert!(
        csv.starts_with("duration_s,producer,producer_rate,"),
        "{csv}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unknown_process_lists_the_valid_ones_and_exits_2() {
    let out = tidegate(&[
        "sim", "pdc", "1", "gaussian", "200000", "uniform", "uniform", "200000",
    ]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(
        err.contains("<PRODUCER>") && err.contains("\"gaussian\""),
        "{err}"
    );
    assert!(
        err.contains("uniform, poisson, expdelay, capdelay"),
        "{err}"
    );
}

#[test]
fn bad_numbers_name_their_argument_and_exit_2() {
    for (args, names) in [
        (
            ["1", "uniform", "fast", "uniform", "uniform", "200000"],
            "<PRODUCER_RATE>",
        ),
        (
            ["1", "uniform", "100", "uniform", "uniform", "0"],
            "<CONSUMER_RATE>",
        ),
        (
            ["-1", "uniform", "100", "uniform", "uniform", "200000"],
            "-1",
        ),
        (
            ["soon", "uniform", "100", "uniform", "uniform", "200000"],
            "<DURATION>",
        ),
    ] {
        let out = tidegate(&[&["sim", "pdc"][..], &args[..]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(names), "{args:?}: {err}");
    }
    let out = tidegate(&[
        "sim", "pdc", "1", "uniform", "100", "uniform", "uniform", "200000", "--period", "0s",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("--period"), "{}", stderr(&out));
    let out = tidegate(&[
        "sim", "pdc", "1", "uniform", "100", "uniform", "uniform", "200000", "--sweep", "speed=1",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("unknown sweep key \"speed\""),
        "{}",
        stderr(&out)
    );
    // Parses, but the dispatcher could never hand over a message: still a usage error.
    let out = tidegate(&[
        "sim", "pdc", "1", "uniform", "100", "uniform", "uniform", "1000",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains("less than 1"), "{}", stderr(&out));
}

#[test]
fn sim_help_lists_only_what_exists() {
    let out = tidegate(&["sim", "--help"]);
    assert!(out.status.success());
    let help = stdout(&out);
    let commands: Vec<&str> = help
        .split("Commands:")
        .nth(1)
        .expect("a command list")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .take_while(|w| !w.ends_with(':'))
        .collect();
    assert_eq!(
        commands,
        ["pdc", "run", "replay", "sweep", "fleet", "help"],
        "{help}"
    );
    let help = stdout(&tidegate(&["sim", "pdc", "--help"]));
    for word in [
        "--period",
        "--multiplier",
        "--seed",
        "--sweep",
        "--out",
        "capdelay",
    ] {
        assert!(help.contains(word), "{word}: {help}");
    }
}

//! What a new user meets first: the help without arguments, errors said once on one line,
//! usage errors that name the flag and its bound, and the same flags for the same thing in
//! every command.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

mod common;

use std::process::Output;

use common::{scenario, stderr, tidegate};

/// The error a command ended with: exit code 1, and `error:` once on stderr.
fn failed_once(out: &Output) -> String {
    let err = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("error:").count(), 1, "{err}");
    err
}

#[test]
fn no_arguments_prints_the_help() {
    let out = tidegate(&[]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("Usage: tidegate"), "{err}");
    for command in ["demo", "sim", "load", "origin", "experiment", "proxy"] {
        assert!(err.contains(&format!("  {command} ")), "{command}: {err}");
    }
}

#[test]
fn a_missing_file_is_said_once_on_one_line() {
    for args in [
        &["sim", "run", "no-such-scenario.toml"][..],
        &["experiment", "no-such-scenario.toml"][..],
    ] {
        let out = tidegate(args);
        let err = failed_once(&out);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("no-such-scenario.toml"), "{args:?}: {err}");
        // The OS's words for "not found", once (their wording varies by platform).
        let reason = err.rsplit(": ").next().unwrap().trim();
        assert_eq!(err.matches(reason).count(), 1, "{args:?}: {err}");
    }
}

#[test]
fn a_toml_error_is_shown_once_with_its_line() {
    let dir = std::env::temp_dir().join(format!("tidegate-first-hour-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("typo.toml");
    std::fs::write(&file, "name = \"typo\"\n[[arm\n").unwrap();
    let file = file.display().to_string();
    for args in [&["sim", "run", &file][..], &["experiment", &file][..]] {
        let out = tidegate(args);
        let err = failed_once(&out);
        assert_eq!(err.matches("line 2").count(), 1, "{args:?}: {err}");
        assert_eq!(err.matches("[[arm").count(), 1, "{args:?}: {err}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_zero_count_names_the_flag_and_its_bound() {
    for flag in ["--workers", "--instances"] {
        let out = tidegate(&["origin", flag, "0"]);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(flag) && err.contains("at least 1"),
            "{flag}: {err}"
        );
    }
}

#[test]
fn arms_are_chosen_the_same_way_in_sim_run_and_experiment() {
    let file = scenario("capacity-baseline");
    // Repeated, as a list, and under either spelling: the same two arms.
    for arms in [
        &["--arm", "off", "--arm", "tidegate default"][..],
        &["--arm", "off,tidegate default"][..],
        &["--arms", "off, tidegate default"][..],
    ] {
        let mut args = vec!["sim", "run", &file, "--duration", "5s", "--json"];
        args.extend_from_slice(arms);
        let out = tidegate(&args);
        assert!(out.status.success(), "{arms:?}: {}", stderr(&out));
        let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<&str> = json["arms"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["off", "tidegate default"], "{arms:?}");
    }
    // An unknown arm is refused before anything runs, under both commands and spellings.
    for command in ["sim run", "experiment"] {
        for flag in ["--arm", "--arms"] {
            let mut args: Vec<&str> = command.split(' ').collect();
            args.extend([file.as_str(), flag, "off,of"]);
            let out = tidegate(&args);
            let err = failed_once(&out);
            assert!(err.contains("\"of\""), "{args:?}: {err}");
        }
    }
}

#[test]
fn load_says_its_error_once() {
    // A port nothing listens on: bound, then let go.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let closed = format!("http://127.0.0.1:{port}/");
    let out = tidegate(&["load", &closed, "--rate", "50", "--duration", "30s"]);
    let err = failed_once(&out);
    assert!(
        err.contains("nothing answered") && err.contains("connect_refused"),
        "{err}"
    );
    let out = tidegate(&["load", "https://127.0.0.1:1/", "--rate", "50"]);
    let err = failed_once(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(
        err.matches("https").count(),
        2,
        "the URL and the scheme: {err}"
    );
}

//! The binary answers `--help` and `--version`, and rejects what it does not know.

use std::process::{Command, Output};

fn tidegate(args: &[&str]) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(args)
        .output()
}

#[test]
fn version_names_the_package_version() {
    let out = tidegate(&["--version"]).expect("the binary runs");
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("tidegate {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn help_says_what_tidegate_does() {
    let out = tidegate(&["--help"]).expect("the binary runs");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("keeps services fast"), "{help}");
    assert!(help.contains("Usage: tidegate"), "{help}");
}

#[test]
fn unknown_arguments_are_an_error_with_usage() {
    let out = tidegate(&["--no-such-flag"]).expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--no-such-flag") && err.contains("Usage"),
        "{err}"
    );
}

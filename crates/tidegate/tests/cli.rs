//! The binary answers `--help` and `--version`, rejects what it does not know, and describes
//! its commands in shell completions and a man page (`tidegate completions SHELL`, `tidegate
//! man`).

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

/// The top-level commands, as `tidegate --help` lists them.
const COMMANDS: [&str; 8] = [
    "demo",
    "proxy",
    "sim",
    "load",
    "origin",
    "experiment",
    "completions",
    "man",
];

#[test]
fn completions_name_every_command_in_each_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = tidegate(&["completions", shell]).expect("the binary runs");
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8_lossy(&out.stdout);
        for command in COMMANDS {
            assert!(script.contains(command), "{shell} lacks {command}");
        }
        // A nested command and a flag of the proxy's, not only the top level.
        assert!(script.contains("replay"), "{shell} lacks sim replay");
        assert!(script.contains("print-default-config"), "{shell}");
    }
}

#[test]
fn completions_refuse_an_unknown_shell() {
    let out = tidegate(&["completions", "tcsh"]).expect("the binary runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("tcsh"));
}

#[test]
fn man_page_is_roff_naming_every_command() {
    let out = tidegate(&["man"]).expect("the binary runs");
    assert!(out.status.success(), "{out:?}");
    let page = String::from_utf8_lossy(&out.stdout);
    assert!(page.contains(".TH tidegate 1"), "{page}");
    assert!(page.contains(".SH SUBCOMMANDS"), "{page}");
    for command in COMMANDS {
        assert!(
            page.contains(&format!("tidegate\\-{command}(1)")),
            "lacks {command}"
        );
    }
    // Every page it points to is one `man --out` writes: no `help` page.
    assert!(!page.contains("tidegate\\-help"), "{page}");
}

#[test]
fn man_out_writes_a_page_per_command() {
    let dir = std::env::temp_dir().join(format!("tidegate-man-{}", std::process::id()));
    let out = tidegate(&["man", "--out", dir.to_str().expect("a UTF-8 temp dir")])
        .expect("the binary runs");
    assert!(out.status.success(), "{out:?}");
    for page in ["tidegate.1", "tidegate-proxy.1", "tidegate-sim-replay.1"] {
        let text = std::fs::read_to_string(dir.join(page)).expect(page);
        assert!(text.contains(".TH"), "{page}: {text}");
    }
    let proxy = std::fs::read_to_string(dir.join("tidegate-proxy.1")).expect("proxy page");
    assert!(proxy.contains("print\\-default\\-config"), "{proxy}");
    let _ = std::fs::remove_dir_all(&dir);
}

//! What the binary's tests share: running it, and the repository's scenario files.

#![allow(
    dead_code,
    reason = "each test file compiles this module and uses some of it"
)]

use std::path::Path;
use std::process::{Command, Output};

pub(crate) fn tidegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// The path of `scenarios/NAME.toml`.
pub(crate) fn scenario(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios")
        .join(format!("{name}.toml"))
        .display()
        .to_string()
}

pub(crate) fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

pub(crate) fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

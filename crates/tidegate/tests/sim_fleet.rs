//! `tidegate sim fleet`: the table of a fleet scenario, its page and charts, and clear errors.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers on the repository's own files"
)]

mod common;

use std::path::Path;

use common::tidegate;

fn chain() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scenarios/fleet/chain.toml")
        .display()
        .to_string()
}

#[test]
fn runs_an_arm_and_writes_its_page() {
    let dir = std::env::temp_dir().join(format!("tidegate-sim-fleet-{}", std::process::id()));
    let out = tidegate(&[
        "sim",
        "fleet",
        &chain(),
        "--duration",
        "4s",
        "--arm",
        "tidegate",
        "--out",
        dir.to_str().unwrap(),
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| tidegate | "), "{stdout}");
    assert!(
        !stdout.contains("| no gate |"),
        "only the arm asked for: {stdout}"
    );
    let page = std::fs::read_to_string(dir.join("fleet-chain.md")).unwrap();
    assert!(page.contains("tidegate sim fleet"), "{page}");
    assert!(page.contains("fleet-chain-goodput.svg"), "{page}");
    assert!(dir.join("fleet-chain-agreement.svg").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn errors_name_the_culprit() {
    let out = tidegate(&["sim", "fleet", &chain(), "--arm", "nope"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--arm \"nope\"") && stderr.contains("tidegate"),
        "{stderr}"
    );
    let bad = std::env::temp_dir().join(format!("tidegate-bad-fleet-{}.toml", std::process::id()));
    std::fs::write(
        &bad,
        "duration = \"1s\"\nmeasure_from = \"2s\"\n[load]\nrate = 1\ntimeout = \"1s\"\nusers = 1\ntiers = [{ tier = 1, weight = 1 }]\n[[hops]]\nwork = \"1ms\"\n[[arms]]\nname = \"x\"\n",
    )
    .unwrap();
    let out = tidegate(&["sim", "fleet", bad.to_str().unwrap()]);
    std::fs::remove_file(&bad).unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("measure_from"), "{stderr}");
}

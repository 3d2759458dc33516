//! The fleet scenario of `scenarios/fleet/chain.toml`, shortened, shows the shape of its
//! full run (`tidegate sim fleet scenarios/fleet/chain.toml`, docs/experiments/fleet-chain):
//! the same users shed on every edge proxy, no work wasted across hops, no retry storm, the
//! chain near its bottleneck with tiers 0-1 served; and each feature's absence costs what it
//! should.

use std::path::Path;

use tidegate_core::Nanos;
use tidegate_sim::fleet::{self, ArmResult, FleetScenario};

fn arm(scenario: &FleetScenario, name: &str) -> ArmResult {
    let arm = scenario
        .arms
        .iter()
        .find(|a| a.name == name)
        .unwrap_or_else(|| panic!("no arm {name}"));
    fleet::run(scenario, arm, scenario.seed)
}

#[test]
fn the_chain_scenario_shortened() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios/fleet/chain.toml");
    let scenario = FleetScenario::load(&path)
        .unwrap_or_else(|e| panic!("{e}"))
        .shortened(Nanos::from_secs(12));
    let tidegate = arm(&scenario, "tidegate");
    let unsalted = arm(&scenario, "no shared salt");
    let naive = arm(&scenario, "naive retries");
    let open = arm(&scenario, "no gate");
    let tidegate_agreement = tidegate.agreement().unwrap_or(0.0);
    assert!(tidegate_agreement > 0.9, "{tidegate:?}");
    assert!(
        unsalted.agreement().unwrap_or(1.0) < tidegate_agreement,
        "{unsalted:?}"
    );
    assert!(
        tidegate.wasted_share().is_some_and(|w| w < 0.02),
        "{tidegate:?}"
    );
    assert!(
        tidegate.amplification().is_some_and(|a| a <= 1.12),
        "{tidegate:?}"
    );
    assert!(naive.amplification().is_some_and(|a| a > 2.0), "{naive:?}");
    assert!(tidegate.goodput_share() > 0.85, "{tidegate:?}");
    assert!(
        tidegate.served().0.is_some_and(|s| s > 0.98),
        "tiers 0-1 first: {tidegate:?}"
    );
    assert!(open.goodput_share() < 0.1, "{open:?}");
}

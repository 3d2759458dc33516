use super::*;

const SMALL: &str = r#"
seed = 3
duration = "6s"
measure_from = "3s"
[load]
rate = 900
timeout = "1s"
users = 500
tiers = [{ tier = 1, weight = 0.2 }, { tier = 4, weight = 0.8 }]
[[hops]]
proxies = 2
instances = 2
workers = 8
work = "1ms"
calls = 2
[[hops]]
proxies = 2
instances = 2
workers = 2
work = "2ms"
slowdown = { at = "2s", factor = 2 }
[[arms]]
name = "tidegate"
queue = { wait_bound = inf }
retry = { mode = "retry_after", budget = true }
[[arms]]
name = "no gate"
gate = false
retry = { mode = "naive" }
"#;

fn small() -> FleetScenario {
    let scenario: FleetScenario = toml::from_str(SMALL).expect("valid");
    scenario.validate().expect("consistent");
    scenario
}

#[test]
fn errors_name_the_key() {
    let unknown = SMALL.replace("calls = 2", "calls = 2\ncals = 1");
    let err = toml::from_str::<FleetScenario>(&unknown)
        .expect_err("unknown key")
        .to_string();
    assert!(err.contains("cals"), "{err}");
    let mut scenario = small();
    scenario.hops[1].calls = 1;
    assert_eq!(
        scenario.validate().map_err(|e| e.key),
        Err("hops[1].calls".to_owned())
    );
    let mut scenario = small();
    scenario.measure_from = scenario.duration;
    assert_eq!(
        scenario.validate().map_err(|e| e.key),
        Err("measure_from".to_owned())
    );
    let mut scenario = small();
    scenario.arms[0].retry.max_attempts = 0;
    assert_eq!(
        scenario.validate().map_err(|e| e.key),
        Err("arms[0].retry.max_attempts".to_owned())
    );
}

#[test]
fn bottleneck_is_the_least_capacity_per_original_request() {
    // Hop 2 after the slowdown: 2 x 2 workers at 4 ms = 1,000/s, called twice: 500/s.
    assert!((small().bottleneck() - 500.0).abs() < 1e-9);
}

#[test]
fn same_seed_same_run() {
    let scenario = small();
    let a = run(&scenario, &scenario.arms[0], 7);
    let b = run(&scenario, &scenario.arms[0], 7);
    assert_eq!(a, b);
    let c = run(&scenario, &scenario.arms[0], 8);
    assert_ne!(a.events, c.events);
}

#[test]
fn every_request_ends_and_the_gates_hold_the_chain_up() {
    let scenario = small();
    let gated = run(&scenario, &scenario.arms[0], 1);
    let open = run(&scenario, &scenario.arms[1], 1);
    // 900/s into 500/s of capacity: the gated chain serves near capacity, tier 1 first;
    // without gates, the queues grow past every timeout and naive retries triple the load.
    assert!(gated.goodput_share() > 0.85, "{gated:?}");
    let (important, other) = gated.served();
    assert!(important.is_some_and(|s| s > 0.98), "{gated:?}");
    assert!(other.is_some_and(|s| s < 0.7), "{gated:?}");
    assert!(
        gated.amplification().is_some_and(|a| a <= 1.12),
        "{gated:?}"
    );
    assert!(open.goodput_share() < 0.2, "{open:?}");
    assert!(open.amplification().is_some_and(|a| a > 2.5), "{open:?}");
    // Everything sent is accounted for: the seconds' counts add up to the run's.
    let offered: u64 = gated.seconds.iter().map(|s| s.offered).sum();
    assert!((5_000..5_800).contains(&offered), "{offered}");
}

/// `SMALL` where only the last hop's gates see the overload: the first hop's have a fixed
/// limit above anything it is sent (`scenarios/fleet/chain-fixed-edge.toml`, shortened).
fn fixed_edge() -> FleetScenario {
    let doc = SMALL.replacen(
        "calls = 2\n",
        "calls = 2\nmode = \"sequential\"\ngate = { limit = { algorithm = \"fixed\", fixed = { limit = 1000 } }, queue = { wait_bound = inf } }\n",
        1,
    ) + "[[arms]]\nname = \"no feedback\"\nfeedback = false\nqueue = { wait_bound = inf }\nretry = { mode = \"retry_after\", budget = true }\n";
    let scenario: FleetScenario = toml::from_str(&doc).expect("valid");
    scenario.validate().expect("consistent");
    scenario
}

#[test]
fn with_only_the_last_hop_cutting_feedback_keeps_the_waste_small() {
    // The last hop's cut-off is a level its callers hold back, and callers hold the deepest
    // of its gates' cut-offs: the first hop drops before any work what the last refuses.
    let scenario = fixed_edge();
    let feedback = run(&scenario, &scenario.arms[0], 1);
    let blind = run(&scenario, &scenario.arms[2], 1);
    let wasted = |r: &ArmResult| r.wasted_share().unwrap_or(1.0);
    assert!(wasted(&blind) > 0.3, "{blind:?}");
    assert!(wasted(&feedback) < 0.08, "{feedback:?}");
    assert!(feedback.goodput_share() > 0.85, "{feedback:?}");
}

#[test]
fn a_chain_admitted_under_a_hint_is_not_dropped_on_a_later_one() {
    // The first hop's instances call the next hop twice, one call after the other: the
    // answer to the first brings a hint deeper than the one the edge admitted the chain
    // under, and the second call was dropped on it, the first call's work wasted. With the
    // edge's hint carried along the chain, no call of it is dropped on a hint: what fails
    // later fails at the callee's own gate.
    let mut scenario = fixed_edge();
    let mut latest = scenario.arms[0].clone();
    latest.name = "hint does not hold for the chain".to_owned();
    latest.hint_holds_for_chain = false;
    scenario.arms.push(latest);
    let on_hints = |r: &ArmResult| {
        r.wasted_by[1..]
            .iter()
            .map(|by| by[Refusal::Withheld.index()] + by[Refusal::Hint.index()])
            .sum::<u64>()
    };
    let held = run(&scenario, &scenario.arms[0], 1);
    let latest = run(&scenario, &scenario.arms[3], 1);
    assert!(on_hints(&latest) > 0, "{latest:?}");
    assert_eq!(on_hints(&held), 0, "{held:?}");
    assert!(held.goodput_share() > 0.85, "{held:?}");
}

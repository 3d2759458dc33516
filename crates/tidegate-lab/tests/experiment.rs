//! An experiment end to end on 127.0.0.1: an unprotected arm and a gate arm behind the
//! in-process proxy, each beside the simulator's prediction.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use tidegate_lab::experiment::{self, Event};
use tidegate_sim::scenario::Scenario;

/// 4 workers at 20 ms (200 rps) offered 300 rps for 3 s; a gate that lets 4 in at a time
/// and queues nothing sheds the third it cannot serve.
const SCENARIO: &str = r#"
seed = 5
duration = "3s"
warmup = "1s"

[service]
spread = "constant"
[service.pool]
workers = 4
work = "20ms"

[load]
arrivals = "constant"
rate = 300
timeout = "2s"

[[arms]]
name = "off"
kind = "off"

[[arms]]
name = "fixed 4"
limit = { algorithm = "fixed", fixed = { limit = 4 } }
regulator = { algorithm = "off" }
queue = { capacity = 0 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_off_arm_and_a_gate_arm_run_beside_the_simulator() {
    let scenario = Scenario::parse(SCENARIO, "two-arms").unwrap();
    let mut started = Vec::new();
    let report = experiment::run(&scenario, |event| {
        if let Event::Started { arm, .. } = event {
            started.push(arm.to_owned());
        }
    })
    .await
    .unwrap();
    assert_eq!(started, ["off", "fixed 4"]);
    let (off, gate) = (&report.runs[0], &report.runs[1]);

    // Unprotected, everything is served, ever later: the queue grows by 100 a second.
    assert_eq!(off.real.whole.shed_ratio, 0.0);
    let (real_p50, sim_p50) = (
        off.real.steady.p50_ms.unwrap(),
        off.sim.steady.figures.p50_ms.unwrap(),
    );
    assert!(sim_p50 > 200.0, "the simulator's queue grew: {sim_p50}");
    assert!(
        (real_p50 / sim_p50 - 1.0).abs() < 0.2,
        "p50 real {real_p50}, sim {sim_p50}"
    );

    // Behind the proxy: the gate's 503s carry its header, and the service's capacity is
    // what gets through, as predicted.
    let real = &gate.real.steady;
    let sim = &gate.sim.steady.figures;
    assert!(
        gate.real.report.total.shed_by_tidegate > 100,
        "{:?}",
        gate.real.report.total
    );
    assert_eq!(gate.real.errors, 0);
    assert!(
        (real.goodput_rps / sim.goodput_rps - 1.0).abs() < 0.1,
        "goodput real {}, sim {}",
        real.goodput_rps,
        sim.goodput_rps
    );
    assert!(
        (real.shed_ratio - sim.shed_ratio).abs() < 0.1,
        "{real:?}\n{sim:?}"
    );

    let table = report.table();
    assert!(table.contains("fixed 4"), "{table}");
    let csv = report.csv();
    assert!(
        csv.lines().any(|l| l.starts_with("fixed 4,300,real,1,")),
        "{csv}"
    );
}

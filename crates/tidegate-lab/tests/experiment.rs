//! An experiment end to end on 127.0.0.1: an unprotected arm and a gate arm behind the
//! in-process proxy, each beside the simulator's prediction.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::collections::HashMap;

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

    // The gate's path, read each second: the fixed limit on both sides, the service's 4
    // workers busy (at 300 rps against 200, a slot is refilled within milliseconds), and
    // nothing queued with no room to queue; nothing to read without a gate.
    let gates = gate.real.gate_series.as_ref().unwrap();
    assert_eq!(
        gates.iter().map(|g| g.second).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    let rows = csv_rows(&csv, "fixed 4", "real");
    assert_eq!(rows.len(), 3, "{csv}");
    for row in &rows {
        assert_eq!(row["limit"], "4", "{row:?}");
        let inflight: u32 = row["inflight"].parse().unwrap();
        assert!((1..=4).contains(&inflight), "{row:?}");
        assert_eq!(row["queued"], "0", "{row:?}");
    }
    for row in csv_rows(&csv, "fixed 4", "sim") {
        assert_eq!(row["limit"], "4", "{row:?}");
    }
    assert!(off.real.gate_series.is_none());
    let rows = csv_rows(&csv, "off", "real");
    assert_eq!(rows.len(), 3, "{csv}");
    for row in &rows {
        assert_eq!(
            (row["limit"], row["inflight"], row["queued"]),
            ("", "", ""),
            "{row:?}"
        );
    }

    // The limit chart: a real and a simulated line for the gate arm only, on the page.
    let charts = report.charts();
    let limit = charts
        .iter()
        .find(|c| c.file_name == "two-arms-lab-limit.svg")
        .unwrap();
    let lines: Vec<&str> = limit.chart.series.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(lines, ["fixed 4 real", "fixed 4 sim"]);
    assert_eq!(
        limit.chart.series[0].points,
        [(1.0, 4.0), (2.0, 4.0), (3.0, 4.0)]
    );
    assert!(limit.chart.to_svg().contains("<polyline"));
    assert!(report.page("", "").contains("(two-arms-lab-limit.svg)"));
}

/// The CSV's rows of one arm and side, each as its columns by header name.
fn csv_rows<'a>(csv: &'a str, arm: &str, side: &str) -> Vec<HashMap<&'a str, &'a str>> {
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    lines
        .map(|line| header.iter().copied().zip(line.split(',')).collect())
        .filter(|row: &HashMap<&str, &str>| row["arm"] == arm && row["side"] == side)
        .collect()
}

/// Three instances (as in the RSocket scenario), a gate each with a fixed limit of 3, under
/// capacity: the real limit is the gates' sum, as the simulator's is.
const THREE_INSTANCES: &str = r#"
seed = 5
duration = "2s"
warmup = "1s"

[service]
spread = "constant"
instances = 3
[service.pool]
workers = 2
work = "20ms"

[load]
arrivals = "constant"
rate = 150
timeout = "2s"

[[arms]]
name = "fixed 3"
limit = { algorithm = "fixed", fixed = { limit = 3 } }
regulator = { algorithm = "off" }
queue = { capacity = 0 }
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gates_of_every_instance_are_read_and_summed_each_second() {
    let scenario = Scenario::parse(THREE_INSTANCES, "three-instances").unwrap();
    let report = experiment::run(&scenario, |_| {}).await.unwrap();
    let csv = report.csv();
    for side in ["real", "sim"] {
        let rows = csv_rows(&csv, "fixed 3", side);
        assert_eq!(rows.len(), 2, "{csv}");
        for row in rows {
            assert_eq!(row["limit"], "9", "{side}: {row:?}");
            // 150 rps of 20 ms each: about 3 in flight, never none.
            let inflight: u32 = row["inflight"].parse().unwrap();
            assert!((1..=9).contains(&inflight), "{side}: {row:?}");
            assert_eq!(row["queued"], "0", "{side}: {row:?}");
        }
    }
}

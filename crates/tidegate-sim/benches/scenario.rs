//! The scenario engine's speed: events per second on the seed scenarios, and the time to run
//! one whole scenario file, all arms.
//!
//! `cargo bench -p tidegate-sim --bench scenario` measures, with criterion, one run of the
//! `tidegate default` arm of `kanaloa-positive` (the full 180 s) and of `cinnamon-tiers` at
//! 4,000 rps (the full 300 s), each on one thread, and reports its events per second as the
//! throughput (`thrpt`, in Melem/s: millions of events per second); then it times every seed
//! scenario in full, all arms and load points, on one thread and then on the available cores,
//! and prints the wall-clock time and the engine's events per second, per file and over all. Under `cargo test --bench scenario`
//! it runs each measurement once, on scenarios shortened to 5 s, as a smoke test.
//!
//! An event is one the engine takes from its timeline and handles: an arrival, a completion
//! by the service, a client deadline, a gate's tick, a capacity change, the end of a second.

#![allow(
    clippy::expect_used,
    reason = "benchmark on the repository's own files"
)]

use std::path::{Path, PathBuf};
use std::time::Instant;

use criterion::{Criterion, Throughput};
use tidegate_core::Nanos;
use tidegate_sim::scenario::Scenario;
use tidegate_sim::scenario::engine::{run_all, run_arm};

fn scenarios_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scenarios")
}

fn load(name: &str) -> Scenario {
    Scenario::load(&scenarios_dir().join(format!("{name}.toml"))).expect("a seed scenario")
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test` runs the target without it.
    let smoke = !std::env::args().any(|a| a == "--bench");
    let shorten = |s: Scenario| {
        if smoke {
            s.shortened(Nanos::from_secs(5))
        } else {
            s
        }
    };

    let mut criterion = Criterion::default().configure_from_args();
    if !smoke {
        criterion = criterion.sample_size(10);
    }
    let mut group = criterion.benchmark_group("engine");
    // One arm at one load point each, on one thread; the throughput is the run's events.
    for (name, arm_name, point) in [
        ("kanaloa-positive", "tidegate default", None),
        ("cinnamon-tiers", "tidegate default", Some(4000.0)),
    ] {
        let scenario = shorten(load(name));
        let arm = scenario
            .arms
            .iter()
            .find(|a| a.name == arm_name)
            .expect("the arm");
        let events = run_arm(&scenario, arm, point).events;
        group.throughput(Throughput::Elements(events));
        let id = match point {
            Some(rps) => format!("{name}@{rps}/{arm_name}"),
            None => format!("{name}/{arm_name}"),
        };
        group.bench_function(id, |b| b.iter(|| run_arm(&scenario, arm, point)));
    }
    group.finish();

    let jobs = std::thread::available_parallelism().map_or(1, usize::from);
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .expect("the scenarios directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    // On one thread, then on all: one thread gives the engine's own rate over every seed
    // scenario (each arm's run as the user's command makes it), all of them the wall-clock time.
    for threads in [1, jobs] {
        println!("\nwhole scenarios, all arms, {threads} thread(s):");
        let (mut all_events, mut all_wall) = (0u64, 0.0);
        for path in &files {
            let scenario = shorten(Scenario::load(path).expect("a seed scenario"));
            let start = Instant::now();
            let report = run_all(&scenario, threads);
            let wall = start.elapsed().as_secs_f64();
            let events: u64 = report.arms.iter().map(|a| a.events).sum();
            all_events += events;
            all_wall += wall;
            println!(
                "{:<20} {:>3} runs {:>12} events {:>7.2} s  {:>6.1} M events/s",
                scenario.name,
                report.arms.len(),
                events,
                wall,
                events as f64 / wall / 1e6
            );
        }
        println!(
            "{:<29} {:>12} events {:>7.2} s  {:>6.1} M events/s",
            "every seed scenario",
            all_events,
            all_wall,
            all_events as f64 / all_wall / 1e6
        );
    }
}

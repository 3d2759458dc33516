//! The scenario engine's speed: events per second on the seed scenarios, and the time to run
//! one whole scenario file, all arms.
//!
//! `cargo bench -p tidegate-sim --bench scenario` measures, with criterion, one arm of
//! `kanaloa-positive` (`tidegate default`, the full 120 s run) and reports its events per
//! second as the throughput; then it times every seed scenario in full, all arms and load
//! points on the available cores, and prints the wall-clock time and the engine's events per
//! second. Under `cargo test --bench scenario` it runs each measurement once, on scenarios
//! shortened to 5 s, as a smoke test.

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

    let kanaloa = shorten(load("kanaloa-positive"));
    let arm = kanaloa
        .arms
        .iter()
        .find(|a| a.name == "tidegate default")
        .expect("the default arm");
    let events = run_arm(&kanaloa, arm, None).events;
    let mut criterion = Criterion::default().configure_from_args();
    if !smoke {
        criterion = criterion.sample_size(10);
    }
    let mut group = criterion.benchmark_group("engine");
    group.throughput(Throughput::Elements(events));
    group.bench_function("kanaloa-positive/tidegate default", |b| {
        b.iter(|| run_arm(&kanaloa, arm, None))
    });
    group.finish();

    let jobs = std::thread::available_parallelism().map_or(1, usize::from);
    let mut files: Vec<PathBuf> = std::fs::read_dir(scenarios_dir())
        .expect("the scenarios directory")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    println!("\nwhole scenarios, all arms, {jobs} threads:");
    for path in files {
        let scenario = shorten(Scenario::load(&path).expect("a seed scenario"));
        let start = Instant::now();
        let report = run_all(&scenario, jobs);
        let wall = start.elapsed().as_secs_f64();
        let events: u64 = report.arms.iter().map(|a| a.events).sum();
        println!(
            "{:<20} {:>3} runs {:>12} events {:>7.2} s  {:>6.1} M events/s",
            scenario.name,
            report.arms.len(),
            events,
            wall,
            events as f64 / wall / 1e6
        );
    }
}

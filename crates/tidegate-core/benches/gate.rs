//! The hot path: what a request pays to pass the gate.
//!
//! `cargo bench -p tidegate-core --bench gate`; figures in `docs/performance.md`.

#![allow(clippy::expect_used, reason = "benchmark set-up on constant inputs")]

use std::hint::black_box;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_core::gate::Arrival;
use tidegate_core::limit::Outcome;
use tidegate_core::queue::{Entry, Order, PriorityQueue};
use tidegate_core::{Nanos, Priority, Time};

/// One request through an uncontended gate: arrive, admitted at once, complete. Time moves
/// 1 us per request and each takes 100 us, so the limits see a steady, healthy service and
/// the regulators an empty queue: the fast path every request takes when there is no
/// overload.
fn arrive_complete(c: &mut Criterion) {
    let mut group = c.benchmark_group("gate/arrive+complete");
    let fixed = {
        let mut limit = LimitConfig::of(LimitAlgorithm::Fixed);
        limit.fixed.limit = 1000;
        limit
    };
    let mut configs = vec![
        (
            "fixed+off".to_owned(),
            GateConfig {
                limit: fixed.clone(),
                regulator: RegulatorConfig::of(RegulatorAlgorithm::Off),
                ..GateConfig::default()
            },
        ),
        ("default".to_owned(), GateConfig::default()),
    ];
    // Each adaptive limit with no regulator, each regulator with a fixed limit.
    for limit in LimitAlgorithm::ALL
        .into_iter()
        .filter(|l| *l != LimitAlgorithm::Fixed)
    {
        let config = GateConfig {
            limit: LimitConfig::of(limit),
            regulator: RegulatorConfig::of(RegulatorAlgorithm::Off),
            ..GateConfig::default()
        };
        configs.push((format!("{limit:?}+off").to_lowercase(), config));
    }
    // The default limit without its product floor: what the floor's estimators cost.
    let mut bare = LimitConfig::of(LimitAlgorithm::Autotune);
    bare.autotune.product_floor = false;
    configs.push((
        "autotune-without-floor+off".to_owned(),
        GateConfig {
            limit: bare,
            regulator: RegulatorConfig::of(RegulatorAlgorithm::Off),
            ..GateConfig::default()
        },
    ));
    for regulator in RegulatorAlgorithm::ALL
        .into_iter()
        .filter(|r| *r != RegulatorAlgorithm::Off)
    {
        let config = GateConfig {
            limit: fixed.clone(),
            regulator: RegulatorConfig::of(regulator),
            ..GateConfig::default()
        };
        configs.push((format!("fixed+{regulator:?}").to_lowercase(), config));
    }
    let priority = Priority::new(1, 17).expect("valid");
    for (name, config) in configs {
        let mut gate = config.build();
        let mut now = Time::ZERO;
        group.bench_function(name, |b| {
            b.iter(|| {
                now += Nanos::from_micros(1);
                if now >= gate.next_tick() {
                    gate.tick(now);
                }
                if let Arrival::Admitted(permit) = gate.arrive(now, black_box(priority)) {
                    gate.complete(now + Nanos::from_micros(100), permit, Outcome::Success);
                }
            })
        });
    }
    group.finish();
}

fn queue_push_pop(c: &mut Criterion) {
    let mut group = c.benchmark_group("queue");
    // A queue holding 1,000 entries spread over all ranks; each iteration adds one and takes
    // the most important, the steady state of an overloaded gate.
    let mut queue = PriorityQueue::new();
    let entry = |i: u64| Entry {
        priority: Priority::from_rank((i * 7919 % 768) as u16).expect("in range"),
        enqueued: Time::from_nanos(i),
        deadline: Time::from_nanos(i + 1_000_000_000),
    };
    for i in 0..1_000 {
        queue.push(entry(i));
    }
    let mut i = 1_000;
    group.bench_function("push+pop/1000-deep", |b| {
        b.iter(|| {
            i += 1;
            black_box(queue.push(entry(i)));
            black_box(queue.pop(Order::Fifo));
        })
    });
    group.bench_function("push+cancel/1000-deep", |b| {
        b.iter_batched(
            || {
                i += 1;
                entry(i)
            },
            |e| {
                let ticket = queue.push(e);
                black_box(queue.remove(ticket));
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, arrive_complete, queue_push_pop);
criterion_main!(benches);

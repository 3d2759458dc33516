//! What the library form costs a request, side by side with tower's `ConcurrencyLimit` +
//! `LoadShed` in the same run: compare the ratios, not the absolute figures, on a shared
//! machine.
//!
//! `cargo bench -p tidegate-tower --bench acquire`; figures in `docs/performance.md`.

#![allow(clippy::expect_used, reason = "benchmark set-up")]

use std::convert::Infallible;
use std::hint::black_box;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use futures_util::FutureExt;
use http::{Request, Response};
use http_body_util::Empty;
use tidegate_core::Priority;
use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_tower::{ClockSource, SharedGate, TidegateLayer};
use tokio::sync::Semaphore;
use tower::{Layer, Service, ServiceBuilder, ServiceExt, service_fn};

type Body = Empty<bytes::Bytes>;

/// A fixed limit of 1,000 (the semaphore's permits) and no regulator.
fn fixed_limit() -> GateConfig {
    let mut limit = LimitConfig::of(LimitAlgorithm::Fixed);
    limit.fixed.limit = 1000;
    GateConfig {
        limit,
        regulator: RegulatorConfig::of(RegulatorAlgorithm::Off),
        ..GateConfig::default()
    }
}

/// One acquire and one release, no contention: the gate with the default configuration and
/// the semaphore under tower's `ConcurrencyLimit`.
fn uncontended(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended/acquire+release");
    let gate = SharedGate::new(&GateConfig::default(), Duration::from_secs(1));
    let priority = Priority::default();
    group.bench_function("tidegate", |b| b.iter(|| acquire_release(&gate, priority)));
    // The same with tokio's clock (what a gate made in a paused runtime reads): the OS clock
    // instead of the time-stamp counter, two reads per request.
    let tokio_clock = SharedGate::with_clock(
        &GateConfig::default(),
        Duration::from_secs(1),
        ClockSource::Tokio,
    );
    group.bench_function("tidegate (tokio clock)", |b| {
        b.iter(|| acquire_release(&tokio_clock, priority))
    });
    // The same machinery with the cheapest algorithms (a fixed limit, no regulator): what the
    // sharing costs apart from what the default limit and regulator learn per request.
    let fixed = SharedGate::new(&fixed_limit(), Duration::from_secs(1));
    group.bench_function("tidegate (fixed limit, no regulator)", |b| {
        b.iter(|| acquire_release(&fixed, priority))
    });
    let semaphore = Arc::new(Semaphore::new(1000));
    group.bench_function("tokio-semaphore (tower ConcurrencyLimit)", |b| {
        b.iter(|| {
            let permit = semaphore.clone().try_acquire_owned().expect("a permit");
            drop(black_box(permit));
        })
    });
    group.finish();
}

/// One request through `gate`, admitted at once and a success.
fn acquire_release(gate: &SharedGate, priority: Priority) {
    let permit = gate
        .acquire(black_box(priority))
        .now_or_never()
        .expect("ready")
        .expect("admitted");
    permit.success();
}

/// The whole middleware stack around the same trivial service: poll_ready, call, response.
fn layers(c: &mut Criterion) {
    let mut group = c.benchmark_group("uncontended/layer");
    let inner =
        service_fn(|_: Request<()>| async { Ok::<_, Infallible>(Response::new(Body::new())) });
    let mut tidegate = TidegateLayer::<()>::builder().build().layer(inner);
    group.bench_function("tidegate", |b| b.iter(|| one_call(&mut tidegate)));
    let mut tower = ServiceBuilder::new()
        .load_shed()
        .concurrency_limit(1000)
        .service(inner);
    group.bench_function("tower ConcurrencyLimit+LoadShed", |b| {
        b.iter(|| one_call(&mut tower))
    });
    group.finish();
}

/// One request through a stack that is ready at once and answers at once.
fn one_call<S>(service: &mut S)
where
    S: Service<Request<()>>,
    S::Error: std::fmt::Debug,
{
    let ready = service.ready().now_or_never().expect("ready").expect("ok");
    let response = ready
        .call(Request::new(()))
        .now_or_never()
        .expect("ready")
        .expect("ok");
    drop(black_box(response));
}

/// Two threads acquiring and releasing as fast as they can: time per operation of the pair,
/// so the inverse is the throughput of both threads together.
///
/// The default gate's limit follows the latency it sees (about 100 ns here), and may fall
/// below two: then one thread's arrival queues, which needs a tokio timer, and is given up
/// at once by `now_or_never` (a cancel). The fixed-limit row never queues: the sharing alone.
fn contended(c: &mut Criterion) {
    let mut group = c.benchmark_group("contended-2-threads/acquire+release");
    let gate = SharedGate::new(&GateConfig::default(), Duration::from_secs(1));
    group.bench_function("tidegate", |b| {
        b.iter_custom(|iters| two_threads(iters, gate_op(&gate)))
    });
    eprintln!(
        "the default gate's limit after the contended run: {}",
        gate.limit()
    );
    let fixed = SharedGate::new(&fixed_limit(), Duration::from_secs(1));
    group.bench_function("tidegate (fixed limit, no regulator)", |b| {
        b.iter_custom(|iters| two_threads(iters, gate_op(&fixed)))
    });
    let semaphore = Arc::new(Semaphore::new(1000));
    group.bench_function("tokio-semaphore (tower ConcurrencyLimit)", |b| {
        b.iter_custom(|iters| {
            two_threads(iters, {
                let semaphore = semaphore.clone();
                move || {
                    if let Ok(permit) = semaphore.clone().try_acquire_owned() {
                        drop(black_box(permit));
                    }
                }
            })
        })
    });
    group.finish();
}

/// One request through `gate` from a bench thread: admitted and a success, or given up.
fn gate_op(gate: &SharedGate) -> impl Fn() + Clone + Send + 'static {
    let gate = gate.clone();
    move || {
        if let Some(Ok(permit)) = gate.acquire(Priority::default()).now_or_never() {
            permit.success();
        }
    }
}

/// Runs `op` `iters` times split over two threads started together, each inside a tokio
/// runtime (for the timer of a request that queues); returns the wall time.
fn two_threads(iters: u64, op: impl Fn() + Clone + Send + 'static) -> Duration {
    let barrier = Arc::new(Barrier::new(2));
    let threads: Vec<_> = (0..2)
        .map(|_| {
            let (barrier, op) = (barrier.clone(), op.clone());
            std::thread::spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .expect("a runtime");
                let _context = runtime.enter();
                barrier.wait();
                let start = Instant::now();
                for _ in 0..iters / 2 {
                    op();
                }
                start.elapsed()
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("bench thread"))
        .max()
        .unwrap_or_default()
}

criterion_group!(benches, uncontended, layers, contended);
criterion_main!(benches);

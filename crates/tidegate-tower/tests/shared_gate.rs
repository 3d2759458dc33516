//! The shared gate in tokio's paused time: waiting, expiry, priority order, shedding,
//! cancellation, no slot leaked whatever the callers do, and a regulator that keeps its
//! clock though only the traffic ticks it.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is a test failure"
)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures_util::FutureExt;
use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_core::gate::{QueueConfig, TierCounters};
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Priority};
use tidegate_tower::{SharedGate, ShedReason};

fn fixed(limit: u32, queue: QueueConfig) -> SharedGate {
    let mut config = GateConfig {
        limit: LimitConfig::of(LimitAlgorithm::Fixed),
        regulator: RegulatorConfig::of(RegulatorAlgorithm::Off),
        queue,
    };
    config.limit.fixed.limit = limit;
    SharedGate::new(&config, Duration::from_secs(1))
}

fn queue(timeout_ms: u64) -> QueueConfig {
    QueueConfig {
        timeout: Nanos::from_millis(timeout_ms),
        ..QueueConfig::default()
    }
}

fn p(tier: u32) -> Priority {
    Priority::new(tier, 0).expect("valid")
}

fn totals(gate: &SharedGate) -> TierCounters {
    gate.snapshot().counters.total()
}

#[tokio::test(start_paused = true)]
async fn admits_at_once_and_counts_the_outcome() {
    let gate = SharedGate::new(&GateConfig::default(), Duration::from_secs(1));
    let permit = gate.acquire(p(1)).await.expect("admitted");
    assert_eq!(gate.snapshot().inflight, 1);
    tokio::time::advance(Duration::from_millis(20)).await;
    permit.success();
    let snapshot = gate.snapshot();
    assert_eq!(snapshot.inflight, 0);
    assert_eq!(snapshot.counters.total().completed_ok, 1);
    assert_eq!(snapshot.counters.tiers[1].arrived, 1);
}

#[tokio::test(start_paused = true)]
async fn queued_request_waits_for_a_slot_then_expires_at_its_deadline() {
    let gate = fixed(1, queue(100));
    let first = gate.acquire(p(1)).await.expect("admitted");
    let mut second = gate.acquire(p(1));
    assert!((&mut second).now_or_never().is_none(), "no slot: it waits");
    assert_eq!(gate.snapshot().queued, 1);
    tokio::time::advance(Duration::from_millis(50)).await;
    first.success();
    let second = second
        .now_or_never()
        .expect("woken by the release")
        .expect("admitted");

    // Nobody releases now: the waiter expires itself at its deadline, without a timer task.
    let waiting = tokio::spawn({
        let gate = gate.clone();
        async move { gate.acquire(p(1)).await }
    });
    tokio::time::sleep(Duration::from_millis(99)).await;
    assert!(!waiting.is_finished());
    let shed = waiting.await.expect("task").expect_err("expired");
    assert_eq!(shed.reason(), ShedReason::Expired);
    assert_eq!(totals(&gate).expired, 1);
    assert_eq!(gate.snapshot().queued, 0);
    let histogram_has_the_wait = format!("{:?}", second);
    assert!(histogram_has_the_wait.contains("Permit"));
    second.success();
}

#[tokio::test(start_paused = true)]
async fn waiting_requests_are_admitted_most_important_first() {
    let gate = fixed(1, queue(10_000));
    let running = gate.acquire(p(0)).await.expect("admitted");
    let order = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for tier in [5, 1, 3, 1, 4] {
        let (gate, order) = (gate.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let permit = gate.acquire(p(tier)).await.expect("admitted");
            order.lock().expect("not poisoned").push(tier);
            tokio::time::sleep(Duration::from_millis(10)).await;
            permit.success();
        }));
        tokio::task::yield_now().await; // queue them in this order
    }
    assert_eq!(gate.snapshot().queued, 5);
    running.success();
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(*order.lock().expect("not poisoned"), vec![1, 1, 3, 4, 5]);
}

#[tokio::test(start_paused = true)]
async fn shedding_is_a_typed_error_with_its_reason() {
    let gate = fixed(
        1,
        QueueConfig {
            capacity: 0,
            ..QueueConfig::default()
        },
    );
    let _running = gate.acquire(p(1)).await.expect("admitted");
    let shed = gate.acquire(p(1)).await.expect_err("no room, no queue");
    assert_eq!(shed.reason(), ShedReason::QueueFull);
    assert_eq!(shed.retry_after(), Duration::from_secs(1));
    assert_eq!(totals(&gate).rejected_queue_full, 1);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_waiting_future_takes_it_out_of_the_queue() {
    let gate = fixed(1, queue(10_000));
    let running = gate.acquire(p(1)).await.expect("admitted");
    let mut waiting = gate.acquire(p(1));
    assert!((&mut waiting).now_or_never().is_none());
    drop(waiting);
    let snapshot = gate.snapshot();
    assert_eq!(
        (snapshot.queued, snapshot.counters.total().cancelled_queued),
        (0, 1)
    );
    running.success();
    assert_eq!(gate.snapshot().inflight, 0);
}

#[tokio::test(start_paused = true)]
async fn a_permit_dropped_without_a_word_is_cancelled_and_frees_its_slot() {
    let gate = fixed(1, queue(10_000));
    let running = gate.acquire(p(1)).await.expect("admitted");
    let mut waiting = gate.acquire(p(1));
    assert!((&mut waiting).now_or_never().is_none());
    drop(running);
    let next = waiting
        .now_or_never()
        .expect("the freed slot")
        .expect("admitted");
    assert_eq!(totals(&gate).cancelled_inflight, 1);
    next.ignore();
    assert_eq!(totals(&gate).completed_ignored, 1);
}

#[tokio::test(start_paused = true)]
async fn an_admission_nobody_collects_goes_back() {
    let gate = fixed(1, queue(10_000));
    let running = gate.acquire(p(1)).await.expect("admitted");
    let mut waiting = gate.acquire(p(1));
    assert!((&mut waiting).now_or_never().is_none());
    running.success(); // admits `waiting`, which is never polled again
    drop(waiting);
    let snapshot = gate.snapshot();
    assert_eq!(snapshot.inflight, 0);
    assert_eq!(snapshot.counters.total().cancelled_inflight, 1);
}

/// Random callers: each acquires with a random priority, may give up while waiting, holds
/// its permit a random time, and ends it in a random way (including dropping it). Across
/// 100,000 callers in paused time, the gate must end empty with every arrival accounted for.
#[tokio::test(start_paused = true)]
async fn no_slot_leaks_under_random_cancellation() {
    const CALLERS: usize = 100_000;
    let mut config = GateConfig::default();
    config.queue.timeout = Nanos::from_millis(30);
    let gate = SharedGate::new(&config, Duration::from_secs(1));
    let mut rng = Rng::seed(4);
    let finished = Arc::new(AtomicUsize::new(0));
    for _ in 0..CALLERS {
        let gate = gate.clone();
        let finished = finished.clone();
        let priority = Priority::new((rng.next_u64() % 6) as u32, (rng.next_u64() % 128) as u32)
            .expect("valid");
        let patience = Duration::from_micros(rng.next_u64() % 40_000);
        let hold = Duration::from_micros(500 + rng.next_u64() % 3_000);
        let ending = rng.next_u64() % 5;
        tokio::spawn(async move {
            if let Ok(Ok(permit)) = tokio::time::timeout(patience, gate.acquire(priority)).await {
                tokio::time::sleep(hold).await;
                match ending {
                    0 => permit.success(),
                    1 => permit.dropped(),
                    2 => permit.ignore(),
                    _ => drop(permit),
                }
            }
            finished.fetch_add(1, Ordering::Relaxed);
        });
        tokio::time::advance(Duration::from_micros(rng.next_u64() % 200)).await;
    }
    while finished.load(Ordering::Relaxed) < CALLERS {
        tokio::time::advance(Duration::from_millis(1)).await;
    }
    let snapshot = gate.snapshot();
    let total = snapshot.counters.total();
    assert_eq!(
        (snapshot.inflight, snapshot.lent, snapshot.queued),
        (0, 0, 0),
        "{snapshot:?}"
    );
    assert_eq!(total.arrived, CALLERS as u64);
    assert_eq!(total.arrived, total.ended());
    assert!(
        total.cancelled_queued > 0
            && total.cancelled_inflight > 0
            && total.rejected() + total.expired > 0,
        "{total:?}"
    );
}

/// Two threads hammering the gate: the lock-free path and the locked one race; nothing may
/// leak or be counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_threads_leave_nothing_behind() {
    let mut config = GateConfig {
        limit: LimitConfig::of(LimitAlgorithm::Fixed),
        ..GateConfig::default()
    };
    config.limit.fixed.limit = 4;
    let gate = SharedGate::new(&config, Duration::from_secs(1));
    let mut workers = Vec::new();
    for worker in 0..4u64 {
        let gate = gate.clone();
        workers.push(tokio::spawn(async move {
            let mut ok = 0u64;
            for i in 0..20_000u64 {
                match gate.acquire(p(((worker + i) % 6) as u32)).await {
                    Ok(permit) if i % 7 == 0 => drop(permit),
                    Ok(permit) => {
                        ok += 1;
                        permit.success();
                    }
                    Err(_) => {}
                }
            }
            ok
        }));
    }
    // Bounded: a leaked slot would make every later acquire wait out its queue timeout.
    let all = async {
        let mut ok = 0;
        for worker in workers {
            ok += worker.await.expect("worker");
        }
        ok
    };
    let ok = tokio::time::timeout(Duration::from_secs(60), all)
        .await
        .expect("no slot leaked: the workers finish");
    let snapshot = gate.snapshot();
    let total = snapshot.counters.total();
    assert_eq!(
        (snapshot.inflight, snapshot.lent, snapshot.queued),
        (0, 0, 0)
    );
    assert_eq!(total.arrived, 80_000);
    assert_eq!(total.completed_ok, ok);
    assert_eq!(total.arrived, total.ended());
}

#[tokio::test(start_paused = true)]
async fn a_limit_that_falls_below_the_requests_in_flight_binds_as_they_end() {
    let gate = fixed(
        4,
        QueueConfig {
            capacity: 0,
            ..queue(100)
        },
    );
    // Nothing queues and nothing is regulated: the four slots are lent, taken without the lock.
    let mut permits = Vec::new();
    for _ in 0..4 {
        permits.push(gate.acquire(p(1)).await.expect("admitted"));
    }
    // The upstream now allows one (a lease; a limit backing off does the same).
    gate.set_lease(1, Duration::from_secs(60));
    let full = |gate: &SharedGate| {
        gate.acquire(p(1))
            .now_or_never()
            .expect("decided at once")
            .is_err()
    };
    for ended in 1..=3 {
        permits.pop().expect("held").success();
        // A slot that ends while more are in flight than the limit must not be lent again.
        assert!(full(&gate), "admitted with {} in flight", 4 - ended);
        assert_eq!(gate.snapshot().inflight, 4 - ended);
    }
    permits.pop().expect("held").success();
    let permit = gate.acquire(p(1)).now_or_never().expect("decided at once");
    assert!(permit.is_ok(), "the last end makes room for one");
}

#[tokio::test(start_paused = true)]
async fn a_drop_backs_the_limit_off_before_the_next_arrival() {
    let mut config = GateConfig {
        limit: LimitConfig::of(LimitAlgorithm::Aimd),
        regulator: RegulatorConfig::of(RegulatorAlgorithm::Off),
        queue: QueueConfig {
            capacity: 0,
            ..queue(100)
        },
    };
    config.limit.aimd.initial_limit = 4;
    config.limit.aimd.min_limit = 1;
    config.limit.aimd.backoff_ratio = 0.5;
    let gate = SharedGate::new(&config, Duration::from_secs(1));
    // Two of four slots taken (the first through the lock, which lends the other three; the
    // second takes one of those without it); two stay lent.
    let _first = gate.acquire(p(1)).await.expect("admitted");
    let second = gate.acquire(p(1)).await.expect("admitted");
    tokio::time::advance(Duration::from_millis(10)).await;
    second.dropped();
    // The limit halved to 2, with one still in flight: room for exactly one more, at once
    // (not after the two slots lent under the old limit have gone too).
    let mut admitted = Vec::new();
    for _ in 0..3 {
        if let Ok(permit) = gate.acquire(p(1)).now_or_never().expect("decided at once") {
            admitted.push(permit);
        }
    }
    assert_eq!(admitted.len(), 1);
    assert_eq!(gate.limit(), 2);
}

/// PIE's control law is a clock's, an update every 15 ms, but nothing here ticks the gate
/// but its own traffic: at 8 arrivals a second, every 125 ms. In front of a service of 4 a
/// second (one at a time, 250 ms each) a queue stands, and the drop probability must climb
/// as the simulator's on-time ticks make it climb. With one update per tick it stayed under
/// a percent for the whole 10 s, and the queue timeout did the shedding, after each
/// request had waited its 500 ms.
#[tokio::test(start_paused = true)]
async fn pie_steers_by_the_clock_when_only_the_traffic_ticks_it() {
    let mut config = GateConfig {
        limit: LimitConfig::of(LimitAlgorithm::Fixed),
        regulator: RegulatorConfig::of(RegulatorAlgorithm::Pie),
        queue: QueueConfig {
            wait_bound: f64::INFINITY,
            ..QueueConfig::default()
        },
    };
    config.limit.fixed.limit = 1;
    let gate = SharedGate::new(&config, Duration::from_secs(1));
    for _ in 0..80 {
        let caller = gate.clone();
        tokio::spawn(async move {
            if let Ok(permit) = caller.acquire(p(1)).await {
                tokio::time::sleep(Duration::from_millis(250)).await;
                permit.success();
            }
        });
        tokio::time::sleep(Duration::from_millis(125)).await;
    }
    // Half the arrivals must go. Measured: p 0.58, 35 turned away by PIE at the door and 3
    // expired in the queue; with one update per tick, p 0.007, 5 and 31.
    let snapshot = gate.snapshot();
    let totals = snapshot.counters.total();
    assert!(snapshot.regulator.reject_ratio > 0.3, "{snapshot:?}");
    assert!(totals.rejected_regulator > 3 * totals.expired, "{totals:?}");
}

#[tokio::test(start_paused = true)]
async fn once_callers_are_seen_leaving_a_waiter_that_would_answer_too_late_is_shed() {
    // One slot answering in 100 ms; each caller leaves 200 ms after its request arrived,
    // while the service still has it (as a proxy's client does): the permit says so.
    let unbounded = QueueConfig {
        wait_bound: f64::INFINITY,
        ..queue(1_000)
    };
    let gate = fixed(1, unbounded);
    let mut running = gate.acquire(p(1)).await.expect("admitted");
    for _ in 0..15 {
        tokio::time::advance(Duration::from_millis(50)).await;
        let mut waiting = gate.acquire(p(1));
        assert!((&mut waiting).now_or_never().is_none());
        tokio::time::advance(Duration::from_millis(50)).await;
        running.caller_left(Duration::from_millis(200));
        running.success();
        running = waiting
            .now_or_never()
            .expect("woken by the release")
            .expect("admitted after 50 ms");
    }
    // A waiter that has waited 140 ms when the slot frees would, at the service's 100 ms,
    // answer after its caller left: it is shed. One that waited 40 ms goes in.
    tokio::time::advance(Duration::from_millis(10)).await;
    let mut stale = gate.acquire(p(1));
    assert!((&mut stale).now_or_never().is_none());
    tokio::time::advance(Duration::from_millis(100)).await;
    let mut fresh = gate.acquire(p(1));
    assert!((&mut fresh).now_or_never().is_none());
    tokio::time::advance(Duration::from_millis(40)).await;
    running.success();
    let shed = stale
        .now_or_never()
        .expect("decided by the release")
        .expect_err("its caller would have left");
    assert_eq!(shed.reason(), ShedReason::Expired);
    fresh
        .now_or_never()
        .expect("woken by the release")
        .expect("admitted")
        .success();
}

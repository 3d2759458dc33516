//! A shedding gate says how deep it cuts (`tidegate-cutoff`), and a caller's outbound layer
//! stops sending what it would refuse, in tokio's paused time.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is a test failure"
)]

use std::convert::Infallible;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use tidegate_core::config::{
    GateConfig, LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig,
};
use tidegate_core::feedback::CutoffHeader;
use tidegate_core::gate::QueueConfig;
use tidegate_core::{Nanos, Priority};
use tidegate_tower::SharedGate;
use tidegate_tower::feedback::CutoffLayer;
use tidegate_tower::outbound::{OutboundLayer, Throttled, with_priority};
use tower::util::ServiceExt as _;
use tower::{Layer, service_fn};

/// One request at a time, 250 ms each, PIE shedding by priority.
fn slow_gate() -> SharedGate {
    let mut config = GateConfig {
        limit: LimitConfig::of(LimitAlgorithm::Fixed),
        regulator: RegulatorConfig::of(RegulatorAlgorithm::Pie),
        queue: QueueConfig {
            wait_bound: f64::INFINITY,
            ..QueueConfig::default()
        },
    };
    config.limit.fixed.limit = 1;
    SharedGate::new(&config, Duration::from_secs(1))
}

fn p(tier: u32, cohort: u32) -> Priority {
    Priority::new(tier, cohort).expect("valid")
}

/// Twice what the gate's service can take, half tier 1 and half tier 4 (of every cohort),
/// for 10 s.
async fn overload(gate: &SharedGate) {
    for i in 0..80 {
        let caller = gate.clone();
        let priority = if i % 2 == 0 {
            p(1, 0)
        } else {
            p(4, (i * 3) % 128)
        };
        tokio::spawn(async move {
            if let Ok(permit) = caller.acquire(priority).await {
                tokio::time::sleep(Duration::from_millis(250)).await;
                permit.success();
            }
        });
        tokio::time::sleep(Duration::from_millis(125)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_cutting_gate_says_its_cutoff_and_a_caller_honours_it() {
    let gate = slow_gate();
    // The service behind the gate answers 503 for what the gate sheds; the layer only adds
    // the header.
    let service = CutoffLayer::new(gate.clone(), Duration::from_millis(250)).layer(service_fn(
        |_: Request<()>| async { Ok::<_, Infallible>(Response::new(())) },
    ));
    let idle = service.clone().oneshot(Request::new(())).await.expect("ok");
    assert!(
        idle.headers().get("tidegate-cutoff").is_none(),
        "nothing is cut: no header"
    );

    overload(&gate).await;
    let cutoff = gate.snapshot().regulator.cutoff_rank;
    assert!(cutoff.is_some(), "{:?}", gate.snapshot());
    let response = service.clone().oneshot(Request::new(())).await.expect("ok");
    let header: CutoffHeader = response.headers()["tidegate-cutoff"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("parses");
    // The least important rank admitted in full: the one before the partly cut rank.
    assert_eq!(Some(header.rank + 1), cutoff);
    assert_eq!(header.ttl, Nanos::from_millis(250));
    // The least important of tier 4 is what the gate sheds, tier 1 what it keeps.
    assert!(
        header.rank < p(4, 127).rank() && header.rank >= p(1, 0).rank(),
        "{header}"
    );

    // A caller that saw the header sends tier 1 and keeps the last of tier 4 home.
    let outbound = OutboundLayer::new(None, Priority::default());
    let client = outbound.layer(service.map_response(|mut r: Response<()>| {
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        r
    }));
    let _ = with_priority(p(1, 0), client.clone().oneshot(Request::new(()))).await;
    let refused = with_priority(p(4, 127), client.clone().oneshot(Request::new(())))
        .await
        .expect_err("tier 4 stays home");
    assert!(matches!(
        refused.downcast_ref::<Throttled>(),
        Some(Throttled::Cutoff { .. })
    ));
    assert!(
        with_priority(p(1, 0), client.oneshot(Request::new(())))
            .await
            .is_ok()
    );
    assert_eq!(outbound.stats().cut_off, 1);
}

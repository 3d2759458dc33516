//! Dry run per upstream, over real sockets: a gate full to its limit forwards what it would
//! shed, counts it by reason and tier, and keeps its slots for the requests it admitted; a
//! reload that turns enforcing on makes the same gate shed.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::{Request, StatusCode};
use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::Mode;

fn spawn_get(url: String, tier: u32) -> tokio::task::JoinHandle<http::Response<bytes::Bytes>> {
    tokio::spawn(async move {
        let request = Request::get(&url)
            .header("tidegate-priority", tier.to_string())
            .body(empty())
            .unwrap();
        send(&client(), request).await
    })
}

#[tokio::test]
async fn an_upstream_in_dry_run_forwards_what_it_would_shed_until_a_reload_enforces() {
    let origin = Origin::start("a").await;
    // The proxy enforces; its one upstream is in dry run. A limit of 1 and no queue.
    let mut config = config(&[&origin]);
    config.upstreams[0].mode = Some(Mode::DryRun);
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
    config.gate.limit.fixed.limit = 1;
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config.gate.queue.capacity = 0;
    config.gate.queue.timeout = Nanos::from_secs(30);
    let mut enforcing = config.clone();
    enforcing.upstreams[0].mode = None;
    let mut reloader = None;
    let proxy = TestProxy::start_with(config, |proxy| reloader = Some(proxy.reloader())).await;

    // Three at once behind a limit of 1: all three reach the origin.
    let held: Vec<_> = [0, 2, 5]
        .into_iter()
        .map(|tier| spawn_get(proxy.url("/hold"), tier))
        .collect();
    origin.wait_held(3).await;
    let gate = proxy.gate("a").await;
    assert_eq!(
        gate["inflight"], 1,
        "only the admitted one holds a slot: {gate}"
    );
    let would_shed = &gate["would_shed"];
    assert_eq!(would_shed["total"], 2, "{gate}");
    assert_eq!(would_shed["by_reason"]["queue_full"], 2, "{gate}");
    assert_eq!(proxy.status().await["upstreams"][0]["mode"], "dry-run");
    origin.release(3);
    for response in held {
        let response = within("a held response", response).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
    }
    eventually("the slot released", || async {
        proxy.gate("a").await["inflight"] == 0
    })
    .await;
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_would_shed_total", &[("gate", "a")]),
        2.0
    );
    assert_eq!(
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "a"), ("class", "ok")]
        ),
        3.0
    );

    // Enforcing now, by a reload: the same gate sheds the second request.
    let summary = reloader.unwrap().apply(enforcing).unwrap();
    assert_eq!(summary.kept, ["a"]);
    let first = spawn_get(proxy.url("/hold"), 0);
    origin.wait_held(1).await;
    let shed = get(&proxy.url("/hold")).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["tidegate-shed"], "queue_full");
    origin.release(1);
    assert_eq!(
        within("the first", first).await.unwrap().status(),
        StatusCode::OK
    );
    let gate = proxy.gate("a").await;
    assert_eq!(
        gate["would_shed"]["total"], 2,
        "nothing more would-shed: {gate}"
    );
    assert_eq!(proxy.status().await["upstreams"][0]["mode"], "enforce");
}

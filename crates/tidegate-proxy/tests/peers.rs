//! The proxies' exchange over loopback (`docs/peers.md`): with `[peers]`, the proxy stamps its
//! gate's learnt limit on what it forwards, holds the limit in force at the mean its upstream
//! says back, keeps that header from its client, and ignores and counts a malformed one.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::{Request, StatusCode};
use tidegate_core::peers::{PeerConfig, PeerStamp};

#[tokio::test]
async fn the_proxy_stamps_its_limit_and_holds_the_peers_mean() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.peers = Some(PeerConfig::default());
    let proxy = TestProxy::start(config).await;
    let client = client();
    let limit = || async { proxy.metrics().await.sum("tidegate_limit", &[]) };
    let learnt = limit().await;
    assert!(learnt > 3.0, "{learnt}");
    let get = |path: &str| Request::get(proxy.url(path)).body(empty()).unwrap();
    let stamp = || -> PeerStamp {
        origin.last_seen().headers["tidegate-peer"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    let response = send(&client, get("/peers/3")).await;
    assert_eq!(response.status(), StatusCode::OK);
    // Between the proxy and its upstream only.
    assert!(response.headers().get("tidegate-peers").is_none());
    assert_eq!(f64::from(stamp().limit), learnt);
    // The limit in force is the mean; the stamp still says what the gate learnt.
    assert_eq!(limit().await, 3.0);
    send(&client, get("/echo")).await;
    assert_eq!(f64::from(stamp().limit), learnt);
    // A mean that no board says is ignored, and counted.
    send(&client, get("/peers/0")).await;
    assert_eq!(limit().await, 3.0);
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.sum("tidegate_peers_header_invalid_total", &[]), 1.0);
}

#[tokio::test]
async fn without_peers_the_proxy_neither_stamps_nor_listens() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    let learnt = proxy.metrics().await.sum("tidegate_limit", &[]);
    let request = Request::get(proxy.url("/peers/3")).body(empty()).unwrap();
    send(&client, request).await;
    assert!(origin.last_seen().headers.get("tidegate-peer").is_none());
    assert_eq!(proxy.metrics().await.sum("tidegate_limit", &[]), learnt);
}

#[tokio::test]
async fn with_line_at_peers_the_gates_draw_the_mean_line_of_all_the_instances() {
    // Instance `a` says its peers' lines lie at the start of tier 4 (rank 512), `b` at the
    // start of tier 5 (640). The proxy's gates, in front of either, draw the line at the mean
    // over both, 576 (tier 4, cohort 64): tier 5 and the rest of tier 4 are turned away, the
    // first half of tier 4 and tier 3 go through. At either instance's own line, one of the
    // two tier-4 requests below would go the other way.
    let (a, b) = (Origin::start("a").await, Origin::start("b").await);
    let mut config = config(&[&a, &b]);
    config.peers = Some(PeerConfig::default());
    config.gate.regulator.pie.line_at_peers = true;
    let proxy = TestProxy::start(config).await;
    let client = client();
    let get = |path: &str, priority: &str| get_at(proxy.url(path), priority);
    // Each gate takes in the mean over the lines heard so far when its own instance answers:
    // twice each, so that the second answer of each comes after the first of the other.
    while a.served() < 2 || b.served() < 2 {
        let response = send(&client, get("/peers/20/512/640", "0")).await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    // The gates' regulators draw the heard line at their next update, 15 ms on.
    tokio::time::sleep(std::time::Duration::from_millis(30)).await;
    let status = |priority: &'static str| {
        let client = client.clone();
        let request = get("/echo", priority);
        async move { send(&client, request).await.status() }
    };
    // Each gate updates on the traffic it sees: one request through each first.
    for _ in 0..4 {
        status("0").await;
    }
    assert_eq!(status("5/0").await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(status("4/100").await, StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(status("4/10").await, StatusCode::OK);
    assert_eq!(status("3/127").await, StatusCode::OK);
    // The stamps say the gate's own line, drawn on its own traffic (nearly all of tier 0) at
    // its own ratio (pulled toward the instances' 0.5): inside tier 0, not the line in force.
    let stamp: PeerStamp = b.last_seen().headers["tidegate-peer"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(stamp.line.is_some_and(|line| line < 128.0), "{stamp}");
}

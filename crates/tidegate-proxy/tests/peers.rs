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

//! The upstream's cut-off over loopback: once an upstream says `tidegate-cutoff`, the proxy
//! sheds what it refuses before sending it, and ignores and counts a malformed header.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::{Request, StatusCode};

#[tokio::test]
async fn the_proxy_sheds_what_its_upstream_refuses_until_the_hint_expires() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    let get = |path: &str, priority: &str| {
        Request::get(proxy.url(path))
            .header("tidegate-priority", priority)
            .body(empty())
            .unwrap()
    };
    // The upstream refuses, cutting past rank 127 (tier 0) for 10 s.
    let refused = send(&client, get("/cutoff/127/10s", "3")).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["tidegate-cutoff"], "rank=127, ttl=10s");
    assert_eq!(origin.served(), 1);
    // Tier 3 is now shed at the proxy, never reaching the upstream, and told why.
    let shed = send(&client, get("/echo", "3/0")).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["tidegate-shed"], "cutoff");
    assert_eq!(shed.headers()["retry-after"], "1");
    assert_eq!(shed.headers()["tidegate-cutoff"], "rank=127, ttl=250ms");
    assert_eq!(origin.served(), 1);
    // Tier 0 still goes.
    let ok = send(&client, get("/echo", "0/5")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(origin.served(), 2);
    // Counted once, as shed, though its gate never saw it.
    let metrics = proxy.metrics().await;
    let class = |class| {
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "a"), ("class", class)],
        )
    };
    assert_eq!(
        (class("shed"), class("dropped"), class("ok")),
        (1.0, 1.0, 1.0)
    );
}

#[tokio::test]
async fn a_malformed_cutoff_is_ignored_and_counted() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for _ in 0..2 {
        let request = Request::get(proxy.url("/cutoff/all/10s"))
            .body(empty())
            .unwrap();
        send(&client, request).await;
    }
    let request = Request::get(proxy.url("/echo")).body(empty()).unwrap();
    assert_eq!(send(&client, request).await.status(), StatusCode::OK);
    assert_eq!(origin.served(), 3);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_cutoff_header_invalid_total", &[]),
        2.0
    );
}

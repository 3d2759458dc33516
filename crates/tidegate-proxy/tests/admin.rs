//! The admin listener and the proxy's shutdown, over loopback.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::time::Duration;

use common::*;
use http::{Request, StatusCode};
use tidegate_core::Nanos;

#[tokio::test]
async fn a_metrics_scrape_parses_and_accounts_for_every_request() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for (path, priority) in [
        ("/echo", "1"),
        ("/echo", "1"),
        ("/echo", "5/9"),
        ("/status/503", "1"),
        ("/status/500", "1"),
        ("/echo", "nonsense"),
    ] {
        send(&client, get_at(proxy.url(path), priority)).await;
    }
    let metrics = proxy.metrics().await;
    for (family, kind) in [
        ("tidegate_requests", "counter"),
        ("tidegate_inflight", "gauge"),
        ("tidegate_limit", "gauge"),
        ("tidegate_queue_length", "gauge"),
        ("tidegate_queue_oldest_wait_seconds", "gauge"),
        ("tidegate_queue_wait_seconds", "histogram"),
        ("tidegate_reject_ratio", "gauge"),
        ("tidegate_request_duration_seconds", "histogram"),
        ("tidegate_upstream_errors", "counter"),
        ("tidegate_upstream_ejections", "counter"),
        ("tidegate_upstream_ejected", "gauge"),
        ("tidegate_lease_header_invalid", "counter"),
        ("tidegate_priority_header_invalid", "counter"),
    ] {
        assert_eq!(
            metrics.types.get(family).map(String::as_str),
            Some(kind),
            "{family}"
        );
    }
    let requests = |tier, outcome| {
        metrics.sum(
            "tidegate_requests_total",
            &[("gate", "a"), ("tier", tier), ("outcome", outcome)],
        )
    };
    assert_eq!(requests("1", "ok"), 2.0);
    assert_eq!(requests("5", "ok"), 1.0);
    assert_eq!(
        requests("3", "ok"),
        1.0,
        "the malformed header's default tier"
    );
    assert_eq!(
        requests("1", "dropped"),
        1.0,
        "503 from the upstream is an overload signal"
    );
    assert_eq!(
        requests("1", "ignored"),
        1.0,
        "500 says nothing about capacity"
    );
    assert_eq!(
        metrics.sum("tidegate_requests_total", &[("gate", "a")]),
        6.0
    );
    let durations = |class| {
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "a"), ("class", class)],
        )
    };
    assert_eq!(
        (durations("ok"), durations("dropped"), durations("ignored")),
        (4.0, 1.0, 1.0)
    );
    assert_eq!(
        metrics.sum("tidegate_priority_header_invalid_total", &[]),
        1.0
    );
    assert!(metrics.sum("tidegate_limit", &[("gate", "a")]) >= 1.0);
    assert_eq!(metrics.sum("tidegate_inflight", &[("gate", "a")]), 0.0);
    assert!(metrics.has("tidegate_queue_wait_seconds_bucket"));
    // Every help text is one sentence with one full stop (the client library adds it).
    let (_, text) = get_text(&format!("http://{}/metrics", proxy.admin)).await;
    let helps: Vec<&str> = text.lines().filter(|l| l.starts_with("# HELP")).collect();
    assert!(helps.len() >= 13, "{text}");
    for help in helps {
        assert!(help.ends_with('.') && !help.ends_with(".."), "{help}");
    }
}

#[tokio::test]
async fn status_healthz_and_readyz_answer() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    get(&proxy.url("/echo")).await;
    let status = proxy.status().await;
    assert_eq!(status["draining"], false);
    let upstream = &status["upstreams"][0];
    assert_eq!(upstream["name"], "a");
    assert_eq!(upstream["url"], origin.url());
    assert_eq!(upstream["ejected"], false);
    let gate = &upstream["gates"][0];
    assert_eq!(gate["gate"], "a");
    assert_eq!(gate["partition"], "default");
    assert_eq!(gate["requests"]["ok"], 1);
    assert!(gate["limit"].as_u64().unwrap() >= 1);
    let admin = |path: &str| {
        let url = format!("http://{}{path}", proxy.admin);
        async move { get_text(&url).await }
    };
    assert_eq!(admin("/healthz").await, (StatusCode::OK, "ok\n".to_owned()));
    assert_eq!(
        admin("/readyz").await,
        (StatusCode::OK, "ready\n".to_owned())
    );
    assert_eq!(admin("/nope").await.0, StatusCode::NOT_FOUND);
    let post = Request::post(format!("http://{}/metrics", proxy.admin))
        .body(empty())
        .unwrap();
    assert_eq!(
        send(&client(), post).await.status(),
        StatusCode::METHOD_NOT_ALLOWED
    );
}

#[tokio::test]
async fn shutdown_stops_accepting_and_lets_requests_in_flight_finish() {
    let origin = Origin::start("a").await;
    let mut proxy = TestProxy::start(config(&[&origin])).await;
    let addr = proxy.addr;
    let held = tokio::spawn({
        let url = proxy.url("/hold");
        async move { get(&url).await }
    });
    origin.wait_held(1).await;
    proxy.shutdown();
    eventually("the listener to close", || async {
        tokio::net::TcpStream::connect(addr).await.is_err()
    })
    .await;
    let (status, body) = get_text(&format!("http://{}/readyz", proxy.admin)).await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "draining\n")
    );
    origin.release(1);
    let response = within("the request in flight", held).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.body(), "released");
    assert_eq!(proxy.stopped().await.cut, 0);
}

#[tokio::test]
async fn the_drain_timeout_bounds_the_shutdown() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.server.drain_timeout = Nanos::from_millis(200);
    let mut proxy = TestProxy::start(config).await;
    let held = tokio::spawn({
        let url = proxy.url("/hold");
        async move {
            let request = Request::get(url).body(empty()).unwrap();
            client().request(request).await
        }
    });
    origin.wait_held(1).await;
    let started = std::time::Instant::now();
    proxy.shutdown();
    assert_eq!(proxy.stopped().await.cut, 1);
    assert!(started.elapsed() >= Duration::from_millis(200));
    let cut = within("the cut request", held).await.unwrap();
    assert!(cut.is_err(), "the connection was cut: {cut:?}");
    origin.wait_held(0).await;
}

#[tokio::test]
async fn the_drain_waits_for_requests_whose_client_left_then_cuts_them() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.server.drain_timeout = Nanos::from_millis(200);
    let mut proxy = TestProxy::start(config).await;
    let mut stream = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut stream, b"GET /hold HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .unwrap();
    origin.wait_held(1).await;
    drop(stream);
    eventually("the proxy to see the client gone", || async {
        let metrics = proxy.metrics().await;
        metrics.sum("tidegate_upstream_abandoned", &[("upstream", "a")]) == 1.0
    })
    .await;
    let started = std::time::Instant::now();
    proxy.shutdown();
    // No connection is left to cut, but the upstream still has a request: the drain waits
    // for it to its timeout, then cuts the upstream exchange.
    assert_eq!(proxy.stopped().await.cut, 0);
    assert!(started.elapsed() >= Duration::from_millis(200));
    origin.wait_held(0).await;
}

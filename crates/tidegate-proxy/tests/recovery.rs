//! An upstream that restarts (issue 14): it comes back within `ejection.reconnect_interval`
//! of accepting connections again, not when its ejection, doubled by failed probes, ends.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::StatusCode;
use tidegate_core::Nanos;
use tokio::net::TcpListener;

#[tokio::test]
async fn a_restarted_upstream_is_probed_as_soon_as_it_accepts_connections() {
    let down = closed_port().await;
    let mut config = config(&[]);
    config.upstreams.push(tidegate_proxy::UpstreamConfig {
        url: format!("http://{down}"),
        name: Some("a".to_owned()),
        mode: None,
    });
    config.ejection.consecutive_failures = 1;
    // Far longer than the test's patience: only the reconnection can bring it back in time.
    config.ejection.base_time = Nanos::from_secs(60);
    config.ejection.max_time = Nanos::from_secs(60);
    config.ejection.reconnect_interval = Nanos::from_millis(50);
    let proxy = TestProxy::start(config).await;
    assert_eq!(
        get(&proxy.url("/echo")).await.status(),
        StatusCode::BAD_GATEWAY
    );
    let unavailable = get(&proxy.url("/echo")).await;
    assert_eq!(unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    let origin = Origin::serve("a", TcpListener::bind(down).await.unwrap());
    eventually("the restarted upstream to serve again", || async {
        get(&proxy.url("/echo")).await.status() == StatusCode::OK
    })
    .await;
    assert!(origin.served() >= 1);
    assert_eq!(proxy.status().await["upstreams"][0]["ejected"], false);
    ledgers_agree(&proxy, "a").await;
}

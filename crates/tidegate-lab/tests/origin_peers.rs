//! An origin that keeps the proxies' stamps (`OriginConfig::peers`, `tidegate origin --peers`)
//! over loopback: each listener takes in the `tidegate-peer` of every request, says the means
//! of the latest stamp of each proxy as `tidegate-peers` on every response, and counts the
//! malformed stamps in `/metrics`.
//!
//! The stamps are kept for a minute, so that no check depends on how fast a busy machine
//! answers; forgetting them after the ttl is `PeerBoard`'s and `SharedPeerBoard`'s to test
//! (on paused time, in tidegate-core and tidegate-tower).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

mod common;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use http::StatusCode;
use tidegate_core::Nanos;
use tidegate_lab::origin::OriginConfig;
use tidegate_model::service::{PoolConfig, ServiceConfig};

/// One GET, stamped with `stamp` when it is not empty: the status, the response's
/// `tidegate-peers` and the body.
async fn get(addr: SocketAddr, path: &str, stamp: &str) -> (StatusCode, Option<String>, String) {
    common::get(addr, path, ("tidegate-peer", stamp), "tidegate-peers").await
}

/// An origin of `instances` instances, keeping the stamps a minute with `peers`.
async fn start(instances: u32, peers: bool) -> common::Running {
    let service = ServiceConfig {
        instances: NonZeroU32::new(instances),
        pool: PoolConfig {
            workers: NonZeroU32::new(4).unwrap(),
            work: Nanos::from_millis(1),
            ..PoolConfig::default()
        },
        ..ServiceConfig::default()
    };
    let mut config = OriginConfig::new(service, "127.0.0.1:0".parse().unwrap());
    config.peers = peers.then_some(Duration::from_secs(60));
    common::start(config).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_instance_says_the_means_of_its_proxies_latest_stamps() {
    let origin = start(2, true).await;
    let (first, second) = (origin.instances[0], origin.instances[1]);

    // No proxy has stamped yet: nothing to say.
    let (status, means, _) = get(first, "/", "").await;
    assert_eq!((status, means), (StatusCode::OK, None));
    // Each response says the means with its own request's stamp taken in.
    let (_, means, _) = get(first, "/", "id=1, limit=10, ratio=0.2").await;
    assert_eq!(means.as_deref(), Some("limit=10.0, ratio=0.200, peers=1"));
    let (_, means, _) = get(first, "/", "id=2, limit=30, ratio=0.4").await;
    assert_eq!(means.as_deref(), Some("limit=20.0, ratio=0.300, peers=2"));
    // Proxy 1's latest stamp replaces its first.
    let (_, means, _) = get(first, "/", "id=1, limit=14, ratio=0.6").await;
    assert_eq!(means.as_deref(), Some("limit=22.0, ratio=0.500, peers=2"));
    // A malformed stamp is ignored, the request still served, and counted.
    let (status, means, _) = get(first, "/", "id=3, limit=0, ratio=0.5").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(means.as_deref(), Some("limit=22.0, ratio=0.500, peers=2"));
    get(first, "/", "id=4, limit=9").await;

    // The other instance has its own proxies' gates in front, and its own board.
    let (_, means, _) = get(second, "/", "").await;
    assert_eq!(means, None);
    let (_, means, _) = get(second, "/", "id=5, limit=6, ratio=1").await;
    assert_eq!(means.as_deref(), Some("limit=6.0, ratio=1.000, peers=1"));

    let (_, _, metrics) = get(first, "/metrics", "").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "tidegate_origin_peers_header_invalid_total 2"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_peers_stamps_are_not_read_and_nothing_is_said() {
    let origin = start(1, false).await;
    for stamp in ["id=1, limit=10, ratio=0.2", "id=1, limit=0"] {
        let (status, means, _) = get(origin.addr, "/", stamp).await;
        assert_eq!((status, means), (StatusCode::OK, None));
    }
    let (_, _, metrics) = get(origin.addr, "/metrics", "").await;
    assert!(!metrics.contains("tidegate_origin_peers"), "{metrics}");
}

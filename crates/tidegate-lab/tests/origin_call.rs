//! An origin that calls the next hop of a chain (`OriginConfig::call`, `tidegate origin
//! --call`) over loopback: it forwards the request's priority, answers by the call's outcome,
//! holds back what the next hop's cut-off refuses, and passes that cut-off on; a next hop of
//! several instances is called round-robin, the deepest cut-off of any held for all.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tidegate_core::Nanos;
use tidegate_lab::origin::OriginConfig;
use tidegate_model::service::{PoolConfig, ServiceConfig, Spread};
use tokio::net::TcpListener;

/// A next hop that cuts past rank 128 (tiers 0 and 1, cohort 0): it refuses what ranks
/// below and says so in `tidegate-cutoff`; it records the priority of every request.
async fn next_hop() -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    hop(true).await
}

/// A next hop that records the priority of every request, and cuts as [`next_hop`] if
/// `cuts` (else admits everything and says no cut-off).
async fn hop(cuts: bool) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let record = record.clone();
            tokio::spawn(async move {
                let service = service_fn(move |request: Request<hyper::body::Incoming>| {
                    let priority = request
                        .headers()
                        .get("tidegate-priority")
                        .map(|v| v.to_str().unwrap().to_owned())
                        .unwrap_or_default();
                    record.lock().unwrap().push(priority.clone());
                    let rank = priority
                        .parse::<tidegate_core::Priority>()
                        .map_or(u16::MAX, |p| p.rank());
                    let mut response = Response::new(Full::new(Bytes::from_static(b"ok\n")));
                    if cuts && rank > 128 {
                        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                        response.headers_mut().insert(
                            "tidegate-cutoff",
                            http::HeaderValue::from_static("rank=128, ttl=30s"),
                        );
                    }
                    async move { Ok::<_, Infallible>(response) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    (addr, seen)
}

/// One GET with a priority: status, the `tidegate-cutoff` of the response, and the body.
async fn get(addr: SocketAddr, path: &str, priority: &str) -> (StatusCode, Option<String>, String) {
    common::get(
        addr,
        path,
        ("tidegate-priority", priority),
        "tidegate-cutoff",
    )
    .await
}

/// Fails unless the origin's `/metrics` holds each of `lines`, whole.
async fn assert_metrics_show(addr: SocketAddr, lines: &[&str]) {
    let (_, _, metrics) = get(addr, "/metrics", "").await;
    for line in lines {
        assert!(metrics.lines().any(|l| l == *line), "{line} in\n{metrics}");
    }
}

/// An origin calling `hop` at `/b`, feedback on or off.
fn calling(hop: SocketAddr, service: ServiceConfig, feedback: bool) -> OriginConfig {
    let mut config = OriginConfig::new(service, "127.0.0.1:0".parse().unwrap());
    config.call = vec![format!("http://{hop}/b").parse().unwrap()];
    config.call_feedback = feedback;
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_calls_the_next_hop_with_the_priority_and_honours_its_cutoff() {
    let (hop, seen) = next_hop().await;
    let service = ServiceConfig {
        spread: Spread::Constant,
        pool: PoolConfig {
            workers: NonZeroU32::new(4).unwrap(),
            work: Nanos::from_millis(1),
            ..PoolConfig::default()
        },
        ..ServiceConfig::default()
    };
    let origin = common::start(calling(hop, service, true)).await;
    let addr = origin.addr;

    // Admitted at the next hop: 200, and the priority travelled.
    let (status, cutoff, _) = get(addr, "/a", "0/5").await;
    assert_eq!((status, cutoff), (StatusCode::OK, None));
    // Refused there: the chain failed (502), and its cut-off comes back to the caller.
    let (status, cutoff, body) = get(addr, "/a", "2/0").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    let cutoff = cutoff.expect("the next hop's cut-off is passed on");
    assert!(cutoff.starts_with("rank=128, ttl="), "{cutoff}");
    // Now held back without a call: 503.
    let (status, _, body) = get(addr, "/a", "2/0").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(body.contains("held back"), "{body}");
    // The cut rank itself is sent: the next hop decides about it.
    let (status, _, _) = get(addr, "/a", "1/0").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(*seen.lock().unwrap(), ["0/5", "2/0", "1/0"]);

    assert_metrics_show(
        addr,
        &[
            "tidegate_origin_calls_total{outcome=\"ok\"} 2",
            "tidegate_origin_calls_total{outcome=\"held_back\"} 1",
            "tidegate_origin_calls_total{outcome=\"failed\"} 1",
            "tidegate_origin_invalid_cutoffs_total 0",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_deepest_cutoff_of_several_instances_holds_for_all_and_is_passed_on() {
    // Two instances of the next hop, called round-robin: the first cuts past 128, the other
    // admits everything and says no cut-off.
    let (cutting, cut_seen) = hop(true).await;
    let (open, open_seen) = hop(false).await;
    let mut config = calling(cutting, ServiceConfig::default(), true);
    config
        .call
        .push(format!("http://{open}/b").parse().unwrap());
    let origin = common::start(config).await;
    let addr = origin.addr;

    // The first call goes to the cutting instance: refused there, its cut-off passed on.
    let (status, cutoff, body) = get(addr, "/a", "2/0").await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    assert!(cutoff.is_some_and(|c| c.starts_with("rank=128, ttl=")));
    // The next would go to the other instance, which admits it: held back all the same.
    let (status, cutoff, body) = get(addr, "/a", "2/0").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    assert!(cutoff.is_some_and(|c| c.starts_with("rank=128, ttl=")));
    // What the cut-off admits goes there, and the answer still says the cut-off.
    let (status, cutoff, body) = get(addr, "/a", "0/5").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(cutoff.is_some_and(|c| c.starts_with("rank=128, ttl=")));
    // Round-robin among the calls sent: the next goes to the cutting instance again.
    let (status, _, body) = get(addr, "/a", "1/0").await;
    assert_eq!(status, StatusCode::OK, "{body}");

    assert_eq!(*cut_seen.lock().unwrap(), ["2/0", "1/0"]);
    assert_eq!(*open_seen.lock().unwrap(), ["0/5"]);
    assert_metrics_show(
        addr,
        &[
            "tidegate_origin_calls_total{outcome=\"ok\"} 2",
            "tidegate_origin_calls_total{outcome=\"held_back\"} 1",
            "tidegate_origin_calls_total{outcome=\"failed\"} 1",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_priority_or_chain_hint_is_counted() {
    let (hop, _) = next_hop().await;
    let origin = common::start(calling(hop, ServiceConfig::default(), true)).await;
    let addr = origin.addr;
    // A chain hint that is not a rank, and a member with no value: ignored, the priority
    // stands; a priority that does not parse: the default priority.
    get(addr, "/a", "0/5, under=high").await;
    get(addr, "/a", "0/6, under=767, x").await;
    get(addr, "/a", "high").await;
    assert_metrics_show(
        addr,
        &[
            "tidegate_origin_priority_header_ignored_total 2",
            "tidegate_origin_priority_header_invalid_total 1",
        ],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_feedback_everything_is_sent_and_nothing_passed_on() {
    let (hop, seen) = next_hop().await;
    let origin = common::start(calling(hop, ServiceConfig::default(), false)).await;
    let addr = origin.addr;
    for _ in 0..2 {
        let (status, cutoff, body) = get(addr, "/a", "2/0").await;
        assert_eq!((status, cutoff), (StatusCode::BAD_GATEWAY, None), "{body}");
    }
    assert_eq!(seen.lock().unwrap().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_next_hop_that_is_not_there_fails_the_chain() {
    // A port nobody listens on: bind, read the address, close.
    let gone = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let gone_addr = gone.local_addr().unwrap();
    drop(gone);
    let origin = common::start(calling(gone_addr, ServiceConfig::default(), true)).await;
    let addr = origin.addr;
    let (status, cutoff, body) = get(addr, "/", "").await;
    assert_eq!((status, cutoff), (StatusCode::BAD_GATEWAY, None), "{body}");
    assert!(body.contains("no response"), "{body}");
}

//! A 2-hop chain on loopback: client -> proxy 1 -> service A -> proxy 2 -> origin. Service A
//! serves each request in the scope of the priority proxy 1 forwarded and calls on through
//! tidegate-tower's outbound layer; the priority computed once at the edge reaches the last
//! hop, and the last hop's cut-off comes back up so that the edge sheds what the last hop
//! would refuse, before any hop works on it.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tidegate_proxy::UpstreamConfig;
use tidegate_tower::outbound::{OutboundLayer, PriorityScopeLayer, Throttled};
use tokio::net::TcpListener;
use tower::util::ServiceExt as _;
use tower::{Layer, ServiceBuilder};

type Body = http_body_util::combinators::BoxBody<bytes::Bytes, Infallible>;

/// Service A: passes each request's path on to `next` through an outbound layer and answers
/// with what came back (status and headers), or 503 if the outbound layer held it back.
/// Returns its address and the count of requests it served.
async fn service_a(next: String) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let served = Arc::new(AtomicUsize::new(0));
    let outbound = OutboundLayer::new(None, tidegate_core::Priority::default());
    let count = served.clone();
    let handler = ServiceBuilder::new()
        .layer(PriorityScopeLayer::default())
        .service_fn(move |request: Request<Incoming>| {
            count.fetch_add(1, Ordering::SeqCst);
            let client = outbound.layer(client());
            let uri = format!("{next}{}", request.uri().path());
            async move {
                let call = Request::get(uri).body(empty()).unwrap();
                let answer = match client.oneshot(call).await {
                    Ok(response) => {
                        let (parts, _) = response.into_parts();
                        Response::from_parts(parts, Full::default().boxed())
                    }
                    Err(error) => {
                        assert!(error.is::<Throttled>(), "{error}");
                        let mut refused = Response::new(Empty::new().boxed());
                        *refused.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                        refused
                    }
                };
                Ok::<Response<Body>, Infallible>(answer)
            }
        });
    accept_each(listener, move |stream| {
        let handler = handler.clone();
        async move {
            let service =
                hyper::service::service_fn(move |request| handler.clone().oneshot(request));
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        }
    });
    (format!("http://{addr}"), served)
}

#[tokio::test]
async fn the_edge_priority_reaches_the_last_hop_and_its_cutoff_the_edge() {
    let origin = Origin::start("c").await;
    let proxy2 = TestProxy::start(config(&[&origin])).await;
    let (a_url, a_served) = service_a(proxy2.url("")).await;
    let mut edge = config(&[]);
    edge.upstreams = vec![UpstreamConfig {
        url: a_url,
        name: Some("a".to_owned()),
        mode: None,
    }];
    edge.priority.caller_key_header = "x-user".to_owned();
    let proxy1 = TestProxy::start(edge).await;
    let client = client();
    let get = |path: &str, priority: &str, user: &str| {
        Request::get(proxy1.url(path))
            .header("tidegate-priority", priority)
            .header("x-user", user)
            .body(empty())
            .unwrap()
    };

    // The cohort is computed once, at the edge, from the caller key, and kept to the end.
    let mut cohorts = Vec::new();
    for user in ["ann", "bob", "cy", "di"] {
        let response = send(&client, get("/echo", "0", user)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let seen = origin.last_seen().headers["tidegate-priority"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(seen.starts_with("0/"), "{seen}");
        cohorts.push(seen);
    }
    cohorts.dedup();
    assert!(cohorts.len() > 1, "cohorts from the keys: {cohorts:?}");

    // The origin refuses, cutting past rank 127; the cut-off travels back to the edge.
    let refused = send(&client, get("/cutoff/127/10s", "3", "ann")).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["tidegate-cutoff"], "rank=127, ttl=10s");
    let (a_before, origin_before) = (a_served.load(Ordering::SeqCst), origin.served());
    // Tier 2 is shed by the edge proxy: neither A nor the origin spends anything on it.
    let shed = send(&client, get("/echo", "2", "bob")).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["tidegate-shed"], "cutoff");
    assert_eq!(a_served.load(Ordering::SeqCst), a_before);
    assert_eq!(origin.served(), origin_before);
    // Tier 0 goes all the way.
    let ok = send(&client, get("/echo", "0", "bob")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(origin.served(), origin_before + 1);
}

//! The tower layer over an HTTP service, in paused time: shedding as a typed error, the
//! permit held to the end of a streaming body, priorities from the request, outcomes from
//! the status, the lease header and a metrics scrape.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is a test failure"
)]

use std::convert::Infallible;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use tidegate_core::Priority;
use tidegate_core::config::{LimitAlgorithm, LimitConfig};
use tidegate_tower::lease::LeaseLayer;
use tidegate_tower::{Shed, ShedReason, TidegateLayer, metrics};
use tower::{Layer, Service, ServiceExt, service_fn};

fn fixed(limit: u32) -> LimitConfig {
    let mut config = LimitConfig::of(LimitAlgorithm::Fixed);
    config.fixed.limit = limit;
    config
}

fn tier_header(request: &Request<Empty<Bytes>>) -> Priority {
    request
        .headers()
        .get("tidegate-priority")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

fn request(tier: u32) -> Request<Empty<Bytes>> {
    Request::builder()
        .header("tidegate-priority", tier.to_string())
        .body(Empty::new())
        .expect("valid request")
}

#[tokio::test(start_paused = true)]
async fn sheds_with_a_typed_error_and_never_calls_the_service() {
    let layer = TidegateLayer::builder()
        .limit(fixed(1))
        .queue_capacity(0)
        .retry_after(Duration::from_secs(3))
        .build();
    let (release, hold) = tokio::sync::oneshot::channel::<()>();
    let hold = std::sync::Arc::new(tokio::sync::Mutex::new(Some(hold)));
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let service = layer.layer(service_fn({
        let calls = calls.clone();
        move |_: Request<Empty<Bytes>>| {
            calls.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let hold = hold.clone();
            async move {
                if let Some(hold) = hold.lock().await.take() {
                    let _ = hold.await;
                }
                Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok"))))
            }
        }
    }));
    let first = tokio::spawn(service.clone().oneshot(request(1)));
    tokio::task::yield_now().await;
    let error = service.clone().oneshot(request(1)).await.expect_err("shed");
    let shed = error.downcast_ref::<Shed>().expect("a Shed error");
    assert_eq!(shed.reason(), ShedReason::QueueFull);
    let response: Response<()> = shed.to_http_response();
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["retry-after"], "3");
    assert_eq!(
        calls.load(std::sync::atomic::Ordering::Relaxed),
        1,
        "the shed request never reached the service"
    );
    release.send(()).expect("first is waiting");
    let body = first
        .await
        .expect("task")
        .expect("served")
        .into_body()
        .collect()
        .await
        .expect("body");
    assert_eq!(body.to_bytes(), "ok");
    assert_eq!(layer.gate().snapshot().counters.total().completed_ok, 1);
}

#[tokio::test(start_paused = true)]
async fn permit_is_held_until_a_streaming_body_ends() {
    let layer = TidegateLayer::builder().limit(fixed(1)).build();
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, Infallible>>(4);
    let rx = std::sync::Arc::new(std::sync::Mutex::new(Some(rx)));
    let service =
        layer.layer(service_fn(move |_: Request<Empty<Bytes>>| {
            let rx = rx
                .lock()
                .expect("not poisoned")
                .take()
                .expect("called once");
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|f| (f, rx))
            });
            async move { Ok::<_, Infallible>(Response::new(StreamBody::new(stream))) }
        }));
    let response = service.oneshot(request(1)).await.expect("admitted");
    let mut body = Box::pin(response.into_body());
    tx.send(Ok(http_body::Frame::data(Bytes::from_static(b"first"))))
        .await
        .expect("open");
    let frame = body
        .as_mut()
        .frame()
        .await
        .expect("a frame")
        .expect("no error");
    assert_eq!(frame.into_data().ok(), Some(Bytes::from_static(b"first")));
    assert_eq!(
        layer.gate().snapshot().inflight,
        1,
        "the body is still streaming"
    );
    // A second request waits: the slot is still taken.
    let second = layer.layer(service_fn(|_: Request<Empty<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    }));
    let mut waiting = Box::pin(second.oneshot(request(1)));
    assert!(waiting.as_mut().now_or_never().is_none());
    tokio::time::advance(Duration::from_millis(30)).await;
    drop(tx);
    assert!(body.as_mut().frame().await.is_none(), "the body ended");
    assert_eq!(layer.gate().snapshot().counters.total().completed_ok, 1);
    let response = waiting.await.expect("admitted after the body ended");
    drop(response); // an empty body ends at once
    let total = layer.gate().snapshot().counters.total();
    assert_eq!(
        (total.completed_ok, layer.gate().snapshot().inflight),
        (2, 0)
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_dropped_before_its_end_is_cancelled() {
    let layer = TidegateLayer::builder().limit(fixed(1)).build();
    let service = layer.layer(service_fn(|_: Request<Empty<Bytes>>| async {
        let stream = futures_util::stream::pending::<Result<http_body::Frame<Bytes>, Infallible>>();
        Ok::<_, Infallible>(Response::new(StreamBody::new(stream)))
    }));
    let response = service.oneshot(request(1)).await.expect("admitted");
    drop(response);
    let snapshot = layer.gate().snapshot();
    assert_eq!(
        (
            snapshot.inflight,
            snapshot.counters.total().cancelled_inflight
        ),
        (0, 1)
    );
}

#[tokio::test(start_paused = true)]
async fn priority_comes_from_the_request_and_outcome_from_the_status() {
    let layer = TidegateLayer::builder().priority(tier_header).build();
    let service = layer.layer(service_fn(|request: Request<Empty<Bytes>>| async move {
        let status = if request.headers()["tidegate-priority"] == "5" {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::OK
        };
        let mut response = Response::new(Full::new(Bytes::from_static(b"body")));
        *response.status_mut() = status;
        Ok::<_, Infallible>(response)
    }));
    for tier in [1, 1, 5] {
        let response = service
            .clone()
            .oneshot(request(tier))
            .await
            .expect("admitted");
        response.into_body().collect().await.expect("body");
    }
    let counters = layer.gate().snapshot().counters;
    assert_eq!(counters.tiers[1].completed_ok, 2);
    assert_eq!(
        counters.tiers[5].completed_dropped, 1,
        "503 is an overload signal"
    );
}

#[tokio::test(start_paused = true)]
async fn a_failing_service_is_a_dropped_sample() {
    let layer = TidegateLayer::builder().build();
    let mut service = layer.layer(service_fn(|_: Request<Empty<Bytes>>| async {
        Err::<Response<Empty<Bytes>>, _>(std::io::Error::other("connection reset"))
    }));
    let error = service
        .ready()
        .await
        .expect("ready")
        .call(request(1))
        .await
        .expect_err("fails");
    assert_eq!(error.to_string(), "connection reset");
    assert_eq!(
        layer.gate().snapshot().counters.total().completed_dropped,
        1
    );
}

#[tokio::test(start_paused = true)]
async fn lease_header_advertises_the_limit() {
    let layer = TidegateLayer::builder().limit(fixed(42)).build();
    let service = LeaseLayer::new(layer.gate().clone(), Duration::from_secs(2)).layer(layer.layer(
        service_fn(|_: Request<Empty<Bytes>>| async {
            Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
        }),
    ));
    let response = service.oneshot(request(1)).await.expect("admitted");
    let header = response.headers()["tidegate-lease"]
        .to_str()
        .expect("ascii");
    let lease: tidegate_core::lease::LeaseHeader = header.parse().expect("parses");
    assert_eq!(
        (lease.allowed, lease.ttl),
        (42, tidegate_core::Nanos::from_secs(2))
    );
}

#[tokio::test(start_paused = true)]
async fn metrics_scrape_has_every_series_with_its_value() {
    let layer = TidegateLayer::builder()
        .limit(fixed(7))
        .priority(tier_header)
        .build();
    let mut registry = prometheus_client::registry::Registry::default();
    metrics::register(&mut registry, layer.gate(), "api");
    let service = layer.layer(service_fn(|_: Request<Empty<Bytes>>| async {
        Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new()))
    }));
    service.oneshot(request(2)).await.expect("admitted");
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).expect("encodes");
    for line in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let (series, value) = line.rsplit_once(' ').expect("series and value");
        assert!(series.starts_with("tidegate_"), "{line}");
        value
            .parse::<f64>()
            .unwrap_or_else(|_| panic!("value of {line}"));
    }
    for expected in [
        r#"tidegate_requests_total{gate="api",tier="2",outcome="ok"} 1"#,
        r#"tidegate_requests_total{gate="api",tier="5",outcome="expired"} 0"#,
        r#"tidegate_limit{gate="api"} 7"#,
        r#"tidegate_inflight{gate="api"} 0"#,
        r#"tidegate_queue_length{gate="api"} 0"#,
        r#"tidegate_priority_cutoff_rank{gate="api"} -1"#,
        r#"tidegate_queue_wait_seconds_count{gate="api"} 0"#,
    ] {
        assert!(text.contains(expected), "missing {expected} in\n{text}");
    }
    assert_eq!(text.matches("tidegate_requests_total{").count(), 6 * 9);
}

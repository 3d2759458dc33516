//! `cargo run --example axum` is in the README; this test runs the same application and
//! checks what the example promises: answers carry a lease, priorities come from headers,
//! shed requests get `503` and `Retry-After`, and `/metrics` serves the gate's metrics.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is a test failure"
)]

#[allow(dead_code, reason = "the example's main is not called here")]
#[path = "../examples/axum.rs"]
mod example;

use axum::body::Body;
use http::{Request, StatusCode};
use http_body_util::BodyExt;
use tidegate_core::Priority;
use tower::ServiceExt;

fn work(priority: Option<&str>) -> Request<Body> {
    let mut request = Request::builder().uri("/work");
    if let Some(priority) = priority {
        request = request.header("tidegate-priority", priority);
    }
    request.body(Body::empty()).expect("valid request")
}

#[tokio::test(start_paused = true)]
async fn serves_with_a_lease_and_exports_metrics() {
    let app = example::app();
    let response = app
        .clone()
        .oneshot(work(Some("1")))
        .await
        .expect("infallible");
    assert_eq!(response.status(), StatusCode::OK);
    assert!(
        response.headers()["tidegate-lease"]
            .to_str()
            .expect("ascii")
            .starts_with("allowed=")
    );
    assert_eq!(
        response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes(),
        "done\n"
    );

    let metrics = app
        .oneshot(Request::get("/metrics").body(Body::empty()).expect("valid"))
        .await
        .expect("infallible");
    let text = String::from_utf8(
        metrics
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes()
            .to_vec(),
    )
    .expect("utf-8");
    assert!(
        text.contains(r#"tidegate_requests_total{gate="work",tier="1",outcome="ok"} 1"#),
        "{text}"
    );
}

#[tokio::test(start_paused = true)]
async fn overload_is_shed_with_503_and_retry_after_tier_5_first() {
    let app = example::app();
    // 2,000 requests at once, half tier 1 and half tier 5, against 20 workers of 50 ms and a
    // queue of 1,000 that waits at most 300 ms: the first 20 go straight in whatever their
    // tier; after that the queue keeps tier 1 and sheds tier 5.
    let tiers: Vec<&str> = (0..2_000)
        .map(|i| if i % 2 == 0 { "1" } else { "5" })
        .collect();
    let requests: Vec<_> = tiers
        .iter()
        .map(|&tier| tokio::spawn(app.clone().oneshot(work(Some(tier)))))
        .collect();
    let (mut ok, mut shed) = ([0u32; 6], 0);
    for (request, tier) in requests.into_iter().zip(&tiers) {
        let response = request.await.expect("task").expect("infallible");
        match response.status() {
            StatusCode::OK => ok[tier.parse::<usize>().expect("a tier")] += 1,
            StatusCode::SERVICE_UNAVAILABLE => {
                assert_eq!(response.headers()["retry-after"], "1");
                assert!(response.headers().contains_key("tidegate-shed"));
                shed += 1;
            }
            other => panic!("unexpected {other}"),
        }
    }
    assert!(shed > 1_000, "shed {shed}");
    assert!(ok[1] >= 20, "tier 1 served: {}", ok[1]);
    assert!(
        ok[5] <= 10,
        "tier 5 served only among the first 20 admitted at once: {}",
        ok[5]
    );
}

#[test]
fn priority_and_cohort_come_from_headers() {
    let request = Request::builder()
        .header("tidegate-priority", "2/9")
        .body(Body::empty())
        .expect("valid");
    assert_eq!(
        example::priority(&request),
        Priority::new(2, 9).expect("valid")
    );
    let garbage = Request::builder()
        .header("tidegate-priority", "urgent")
        .body(Body::empty())
        .expect("valid");
    assert_eq!(
        example::priority(&garbage),
        Priority::default(),
        "a bad header falls back to the default"
    );
    let user = |id: &str| {
        Request::builder()
            .header("tidegate-priority", "1")
            .header("x-user-id", id)
            .body(Body::empty())
            .expect("valid")
    };
    let (a, b) = (
        example::priority(&user("alice")),
        example::priority(&user("alice")),
    );
    assert_eq!(a, b, "the same user, the same cohort");
    assert_eq!(a.tier(), 1);
}

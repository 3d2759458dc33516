//! The dashboard on the admin listener: the page, and the data it polls (rates from counter
//! deltas, bounded history, `since`, and a sampler that keeps the past before anyone looks).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::StatusCode;
use serde_json::Value;
use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::Config;

/// Samples every `interval_ms`, keeps `history` of them.
fn dashboard(mut config: Config, interval_ms: u64, history: usize) -> Config {
    config.dashboard.interval = Nanos::from_millis(interval_ms);
    config.dashboard.history = history;
    config
}

async fn data(proxy: &TestProxy, since: u64) -> Value {
    let url = format!("http://{}/dashboard/data?since={since}", proxy.admin);
    let (status, body) = get_text(&url).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    serde_json::from_str(&body).unwrap()
}

fn seqs(answer: &Value) -> Vec<u64> {
    answer["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["seq"].as_u64().unwrap())
        .collect()
}

/// Polls until the newest sample is at least `seq`.
async fn wait_for_sample(proxy: &TestProxy, seq: u64) {
    eventually(&format!("sample #{seq}"), || async {
        data(proxy, 0).await["seq"].as_u64().unwrap() >= seq
    })
    .await;
}

#[tokio::test]
async fn the_page_is_served_whole_and_may_load_nothing_from_elsewhere() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    for path in ["/dashboard", "/dashboard/"] {
        let response = get(&format!("http://{}{path}", proxy.admin)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers["content-type"], "text/html; charset=utf-8");
        let policy = headers["content-security-policy"].to_str().unwrap();
        assert!(policy.starts_with("default-src 'none'"), "{policy}");
        assert!(policy.contains("connect-src 'self'"), "{policy}");
        let page = std::str::from_utf8(response.body()).unwrap();
        assert!(page.contains("<canvas") || page.contains("createElement(\"canvas\")"));
        assert!(page.contains("/data"), "the page polls its data");
        for external in ["http://", "https://", "src=", "<link", "@import"] {
            assert!(!page.contains(external), "the page refers to {external}");
        }
    }
}

#[tokio::test]
async fn samples_are_rates_of_what_the_gates_counted() {
    let origin = Origin::start("a").await;
    let mut config = dashboard(config(&[&origin]), 50, 1000);
    // One in flight, nothing queued, no regulator: the second request is shed at once.
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
    config.gate.limit.fixed.limit = 1;
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config.gate.queue.capacity = 0;
    let proxy = TestProxy::start(config).await;

    let first = data(&proxy, 0).await;
    assert_eq!(first["gates"], serde_json::json!(["a"]));
    assert_eq!(first["interval"], 0.05);
    assert_eq!(first["history"], 1000);
    // The reading the traffic is measured from.
    wait_for_sample(&proxy, 1).await;
    let start = data(&proxy, 0).await["seq"].as_u64().unwrap();

    let held = {
        let url = proxy.url("/hold");
        tokio::spawn(async move { get(&url).await })
    };
    origin.wait_held(1).await;
    for tier in ["1", "5", "5"] {
        let request = http::Request::get(proxy.url("/echo"))
            .header("tidegate-priority", tier)
            .body(empty())
            .unwrap();
        let shed = send(&client(), request).await;
        assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
    eventually(
        "a sample with the request in flight at the limit",
        || async {
            data(&proxy, start).await["points"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["gates"][0]["inflight"] == 1 && p["gates"][0]["limit"] == 1)
        },
    )
    .await;
    origin.release(1);
    assert_eq!(
        within("the held response", held).await.unwrap().status(),
        StatusCode::OK
    );
    eventually("a sample with the held request's latency", || async {
        data(&proxy, start).await["points"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["e2e_ms"].is_array() && p["upstream_ms"].is_array())
    })
    .await;

    // Every point is a rate over the time since the one before it: rate x interval, summed,
    // gives back the counts (4 arrivals, 1 admitted and served, 3 shed, 1 at tier 1).
    let all = data(&proxy, start - 1).await;
    let points = all["points"].as_array().unwrap();
    let total = |read: &dyn Fn(&Value) -> f64| -> f64 {
        points
            .windows(2)
            .map(|w| read(&w[1]) * (w[1]["t"].as_f64().unwrap() - w[0]["t"].as_f64().unwrap()))
            .sum()
    };
    let near = |got: f64, want: f64, what: &str| {
        assert!((got - want).abs() < 1e-6, "{what}: {got}, not {want}");
    };
    near(total(&|p| p["offered"].as_f64().unwrap()), 4.0, "offered");
    near(total(&|p| p["admitted"].as_f64().unwrap()), 1.0, "admitted");
    near(total(&|p| p["goodput"].as_f64().unwrap()), 1.0, "goodput");
    near(
        total(&|p| p["rejected"]["queue_full"].as_f64().unwrap()),
        3.0,
        "rejected for a full queue",
    );
    near(
        total(&|p| p["rejected"]["regulator"].as_f64().unwrap()),
        0.0,
        "rejected by the regulator",
    );
    near(
        total(&|p| p["rejected_by_tier"][1].as_f64().unwrap()),
        1.0,
        "tier 1",
    );
    near(
        total(&|p| p["rejected_by_tier"][5].as_f64().unwrap()),
        2.0,
        "tier 5",
    );
    let held_ms = points.iter().find_map(|p| p["e2e_ms"].as_array()).unwrap();
    assert!(held_ms[0].as_f64().unwrap() > 0.0);
    assert!(held_ms[1].as_f64().unwrap() >= held_ms[0].as_f64().unwrap());
}

#[tokio::test]
async fn history_is_bounded_and_since_answers_only_newer_points() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(dashboard(config(&[&origin]), 10, 5)).await;
    wait_for_sample(&proxy, 12).await;
    let all = data(&proxy, 0).await;
    let latest = all["seq"].as_u64().unwrap();
    assert_eq!(
        seqs(&all),
        (latest - 4..=latest).collect::<Vec<_>>(),
        "the last five"
    );
    let newer = data(&proxy, latest - 2).await;
    let newer = seqs(&newer);
    assert!(
        newer.first() == Some(&(latest - 1)) && newer.windows(2).all(|w| w[1] == w[0] + 1),
        "{newer:?} after {}",
        latest - 2
    );
    // A page that talked to an earlier run of the proxy gets everything kept.
    assert_eq!(seqs(&data(&proxy, 1_000_000).await).len(), 5);

    let url = format!("http://{}/dashboard/data?since=soon", proxy.admin);
    let (status, body) = get_text(&url).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(body.contains("since=\"soon\""), "{body}");
}

#[tokio::test]
async fn the_past_is_kept_before_anyone_looks() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(dashboard(config(&[&origin]), 10, 1000)).await;
    for _ in 0..3 {
        let response = send(
            &client(),
            http::Request::get(proxy.url("/echo"))
                .body(empty())
                .unwrap(),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    // Nobody has asked for the dashboard's data: the sampler runs anyway (`/status` does not
    // poll it).
    let samples = |status: Value| status["dashboard"]["samples"].as_u64().unwrap();
    let before = samples(proxy.status().await);
    eventually("samples taken while nobody looks", || async {
        samples(proxy.status().await) >= before + 3
    })
    .await;
    // It reports its own cost: how long its last sample held the thread.
    let cost = proxy.status().await["dashboard"]["last_sample_us"]
        .as_f64()
        .unwrap();
    assert!(cost > 0.0 && cost < 1e6, "{cost}");
    // The first page to open sees the requests served before it, with their latencies.
    let first = data(&proxy, 0).await;
    let points = first["points"].as_array().unwrap();
    assert_eq!(points[0]["seq"], 1, "from the proxy's start: {first}");
    assert!(
        points.iter().any(|p| p["goodput"].as_f64().unwrap() > 0.0),
        "{first}"
    );
    assert!(points.iter().any(|p| p["e2e_ms"].is_array()), "{first}");
}

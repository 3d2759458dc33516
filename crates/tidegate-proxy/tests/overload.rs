//! Overload and failure over loopback: shedding with its status and headers, bounded queue
//! waits, clients that go away, upstreams that are down, reset or hang, ejection, balancing
//! and leases.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::time::{Duration, Instant};

use common::*;
use http::{Request, StatusCode};
use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A gate that admits `limit` at once and queues `queue` more, with no regulator: overload
/// is then exact and immediate.
fn fixed(mut config: Config, limit: u32, queue: usize) -> Config {
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
    config.gate.limit.fixed.limit = limit;
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config.gate.queue.capacity = queue;
    config.gate.queue.timeout = Nanos::from_secs(30);
    config
}

fn spawn_get(url: String) -> tokio::task::JoinHandle<http::Response<bytes::Bytes>> {
    tokio::spawn(async move { get(&url).await })
}

#[tokio::test]
async fn overload_is_shed_at_once_with_503_retry_after_and_a_reason() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(fixed(config(&[&origin]), 2, 1)).await;
    let held: Vec<_> = (0..2).map(|_| spawn_get(proxy.url("/hold"))).collect();
    origin.wait_held(2).await;
    let queued = spawn_get(proxy.url("/hold"));
    eventually("a queued request", || async {
        proxy.gate("a").await["queued"] == 1
    })
    .await;

    let started = Instant::now();
    let shed = get(&proxy.url("/hold")).await;
    assert!(started.elapsed() < Duration::from_secs(2), "shed at once");
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["retry-after"], "1");
    assert_eq!(shed.headers()["tidegate-shed"], "queue_full");
    assert!(
        !shed.headers().contains_key("x-origin"),
        "never reached the origin"
    );

    origin.release(3);
    for response in held.into_iter().chain([queued]) {
        let response = within("a held response", response).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), "released");
    }
    let metrics = proxy.metrics().await;
    let count = |outcome| {
        metrics.sum(
            "tidegate_requests_total",
            &[("gate", "a"), ("outcome", outcome)],
        )
    };
    assert_eq!(count("ok"), 3.0);
    assert_eq!(count("rejected_queue_full"), 1.0);
    let class = |class| {
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "a"), ("class", class)],
        )
    };
    assert_eq!((class("ok"), class("shed")), (3.0, 1.0));
}

#[tokio::test]
async fn a_queued_request_waits_at_most_the_queue_timeout_and_429_can_replace_503() {
    let origin = Origin::start("a").await;
    let mut config = fixed(config(&[&origin]), 1, 10);
    config.gate.queue.timeout = Nanos::from_millis(300);
    config.server.shed_status = 429;
    config.server.retry_after = Nanos::from_millis(2500);
    let proxy = TestProxy::start(config).await;
    let held = spawn_get(proxy.url("/hold"));
    origin.wait_held(1).await;
    let started = Instant::now();
    let expired = get(&proxy.url("/echo")).await;
    let waited = started.elapsed();
    assert_eq!(expired.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(expired.headers()["tidegate-shed"], "expired");
    assert_eq!(expired.headers()["retry-after"], "3");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "waited {waited:?} for a 300 ms queue timeout"
    );
    origin.release(1);
    assert_eq!(
        within("the held one", held).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(proxy.gate("a").await["requests"]["expired"], 1);
}

/// Sends a request on a raw connection and returns it, so that the test can hang up.
async fn raw_request(proxy: &TestProxy, path: &str) -> TcpStream {
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: test\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn a_client_gone_while_queued_leaves_the_queue() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(fixed(config(&[&origin]), 1, 10)).await;
    let held = spawn_get(proxy.url("/hold"));
    origin.wait_held(1).await;
    let impatient = raw_request(&proxy, "/hold").await;
    eventually("a queued request", || async {
        proxy.gate("a").await["queued"] == 1
    })
    .await;
    drop(impatient);
    eventually("the queue to empty", || async {
        let gate = proxy.gate("a").await;
        gate["queued"] == 0 && gate["requests"]["cancelled_queued"] == 1
    })
    .await;
    origin.release(1);
    assert_eq!(
        within("the held one", held).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        origin.served(),
        1,
        "the cancelled request never reached the origin"
    );
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "a"), ("class", "cancelled")]
        ),
        1.0
    );
}

#[tokio::test]
async fn a_client_gone_while_in_flight_keeps_its_slot_until_the_upstream_answers() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(fixed(config(&[&origin]), 1, 10)).await;
    let abandoned = || async {
        proxy
            .metrics()
            .await
            .sum("tidegate_upstream_abandoned", &[("upstream", "a")])
    };
    let impatient = raw_request(&proxy, "/hold").await;
    origin.wait_held(1).await;
    drop(impatient);
    eventually("the proxy to see the client gone", || async {
        abandoned().await == 1.0
    })
    .await;
    // The origin still works on it, so the slot stays taken: the next request queues.
    let next = spawn_get(proxy.url("/echo"));
    eventually("the next request to queue", || async {
        proxy.gate("a").await["queued"] == 1
    })
    .await;
    assert_eq!(proxy.gate("a").await["inflight"], 1);
    origin.release(1);
    assert_eq!(
        within("the next request", next).await.unwrap().status(),
        StatusCode::OK
    );
    let gate = proxy.gate("a").await;
    // The origin alone took longer than the client waited: an overload signal.
    assert_eq!(gate["requests"]["dropped"], 1, "{gate}");
    assert_eq!(gate["requests"]["cancelled_inflight"], 0, "{gate}");
    assert_eq!(abandoned().await, 0.0);
    // Counted once, and as the same outcome in the duration histogram as in
    // tidegate_requests_total (it was `cancelled` in one and `dropped` in the other).
    let counts = ledgers_agree(&proxy, "a").await;
    assert_eq!(counts["dropped"], 1.0, "{counts:?}");
    assert_eq!(counts["cancelled"], 0.0, "{counts:?}");
    assert_eq!(counts["ok"], 1.0, "{counts:?}");
}

#[tokio::test]
async fn clients_gone_while_the_upstream_works_teach_the_gate_how_long_callers_wait() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(fixed(config(&[&origin]), 4, 10)).await;
    let callers_wait = || async { proxy.gate("a").await["callers_wait_seconds"].clone() };
    assert!(callers_wait().await.is_null(), "nobody left yet");
    // Two clients leave while the origin holds their requests, and a third a second later:
    // the second is a whole period in which every request that ended was a caller leaving.
    let leave = |n: usize| {
        let proxy = &proxy;
        let origin = &origin;
        async move {
            let impatient = raw_request(proxy, "/hold").await;
            origin.wait_held(n).await;
            drop(impatient);
        }
    };
    leave(1).await;
    leave(2).await;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    leave(3).await;
    eventually("the gate to learn how long its callers wait", || async {
        callers_wait().await.as_f64().is_some_and(|wait| wait > 0.0)
    })
    .await;
    origin.release(3);
}

#[tokio::test]
async fn a_client_gone_while_in_flight_frees_its_slot_at_once_when_told_to() {
    let origin = Origin::start("a").await;
    let mut config = fixed(config(&[&origin]), 1, 10);
    config.server.on_client_gone = tidegate_proxy::config::OnClientGone::Release;
    let proxy = TestProxy::start(config).await;
    let impatient = raw_request(&proxy, "/hold").await;
    origin.wait_held(1).await;
    drop(impatient);
    // The slot comes back, and the upstream request is abandoned too.
    eventually("the slot to free", || async {
        let gate = proxy.gate("a").await;
        gate["inflight"] == 0 && gate["requests"]["cancelled_inflight"] == 1
    })
    .await;
    origin.wait_held(0).await;
    let next = get(&proxy.url("/echo")).await;
    assert_eq!(
        next.status(),
        StatusCode::OK,
        "the freed slot serves the next request"
    );
}

#[tokio::test]
async fn a_client_gone_mid_body_frees_its_slot() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(fixed(config(&[&origin]), 1, 10)).await;
    let feed = origin.download();
    let mut stream = raw_request(&proxy, "/download").await;
    feed.send(bytes::Bytes::from_static(b"first chunk"))
        .await
        .unwrap();
    let mut received = Vec::new();
    within("the first chunk", async {
        let mut buf = [0u8; 1024];
        while !String::from_utf8_lossy(&received).contains("first chunk") {
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "the proxy closed early");
            received.extend_from_slice(&buf[..n]);
        }
    })
    .await;
    assert_eq!(
        proxy.gate("a").await["inflight"],
        1,
        "held while the body streams"
    );
    drop(stream);
    eventually("the slot to free", || async {
        let gate = proxy.gate("a").await;
        gate["inflight"] == 0 && gate["requests"]["cancelled_inflight"] == 1
    })
    .await;
}

#[tokio::test]
async fn an_upstream_that_is_down_gives_502_and_a_dropped_sample() {
    let down = closed_port().await;
    let mut config = config(&[]);
    config.upstreams.push(tidegate_proxy::UpstreamConfig {
        url: format!("http://{down}"),
        name: Some("down".to_owned()),
        mode: None,
    });
    let proxy = TestProxy::start(config).await;
    let response = get(&proxy.url("/")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["tidegate-error"], "connect");
    let gate = proxy.gate("down").await;
    assert_eq!(gate["requests"]["dropped"], 1);
    assert_eq!(gate["inflight"], 0);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_upstream_errors_total",
            &[("upstream", "down"), ("kind", "connect")]
        ),
        1.0
    );
}

/// An upstream that reads each request and then misbehaves: resets the connection, or never
/// answers.
async fn rogue(reset: bool) -> (std::net::SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        let mut hanging = Vec::new();
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 1024];
            while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            if reset {
                stream.set_zero_linger().unwrap();
                drop(stream);
            } else {
                hanging.push(stream);
            }
        }
    });
    (addr, task)
}

#[tokio::test]
async fn an_upstream_that_resets_gives_502() {
    let (addr, _rogue) = rogue(true).await;
    let mut config = config(&[]);
    config
        .upstreams
        .push(tidegate_proxy::UpstreamConfig::new(format!(
            "http://{addr}"
        )));
    let proxy = TestProxy::start(config).await;
    let response = get(&proxy.url("/")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["tidegate-error"], "reset");
    assert_eq!(
        proxy.gate(&addr.to_string()).await["requests"]["dropped"],
        1
    );
}

#[tokio::test]
async fn an_upstream_that_hangs_gives_504_after_the_timeout() {
    let (addr, _rogue) = rogue(false).await;
    let mut config = config(&[]);
    config
        .upstreams
        .push(tidegate_proxy::UpstreamConfig::new(format!(
            "http://{addr}"
        )));
    config.client.timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let started = Instant::now();
    let response = get(&proxy.url("/")).await;
    let waited = started.elapsed();
    assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(response.headers()["tidegate-error"], "timeout");
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    let gate = proxy.gate(&addr.to_string()).await;
    assert_eq!(gate["requests"]["dropped"], 1);
    assert_eq!(gate["inflight"], 0);
}

#[tokio::test]
async fn a_failing_upstream_is_ejected_then_probed_back() {
    let healthy = Origin::start("b").await;
    let down = closed_port().await;
    let mut config = config(&[&healthy]);
    config.upstreams.insert(
        0,
        tidegate_proxy::UpstreamConfig {
            url: format!("http://{down}"),
            name: Some("a".to_owned()),
            mode: None,
        },
    );
    config.ejection.consecutive_failures = 2;
    config.ejection.base_time = Nanos::from_millis(200);
    let proxy = TestProxy::start(config).await;
    let client = client();
    let fetch = || async {
        let request = Request::get(proxy.url("/echo")).body(empty()).unwrap();
        send(&client, request).await
    };
    let mut failures = 0;
    while proxy.status().await["upstreams"][0]["ejected"] != true {
        if fetch().await.status() == StatusCode::BAD_GATEWAY {
            failures += 1;
        }
        assert!(failures <= 2, "ejected after 2 failures in a row");
    }
    assert_eq!(failures, 2);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_upstream_ejections_total", &[("upstream", "a")]),
        1.0
    );
    assert_eq!(
        metrics.sum("tidegate_upstream_ejected", &[("upstream", "a")]),
        1.0
    );
    // While ejected, everything goes to the healthy upstream.
    for _ in 0..10 {
        let response = fetch().await;
        if proxy.status().await["upstreams"][0]["ejected"] != true {
            break; // the ejection ended: the next request may probe
        }
        assert_eq!(response.headers()["x-origin"], "b");
    }
    // The upstream comes back on its address; a probe finds it and it rejoins.
    let revived = Origin::serve("a", TcpListener::bind(down).await.unwrap());
    eventually("a request to reach the revived upstream", || async {
        fetch()
            .await
            .headers()
            .get("x-origin")
            .is_some_and(|o| o == "a")
    })
    .await;
    assert!(revived.served() >= 1);
    let status = proxy.status().await;
    assert_eq!(status["upstreams"][0]["ejected"], false);
    assert_eq!(
        proxy
            .metrics()
            .await
            .sum("tidegate_upstream_ejected", &[("upstream", "a")]),
        0.0
    );
}

#[tokio::test]
async fn a_lone_ejected_upstream_fails_fast_and_is_not_ready() {
    let down = closed_port().await;
    let mut config = config(&[]);
    config
        .upstreams
        .push(tidegate_proxy::UpstreamConfig::new(format!(
            "http://{down}"
        )));
    config.ejection.consecutive_failures = 2;
    config.ejection.base_time = Nanos::from_secs(20);
    config.ejection.max_time = Nanos::from_secs(20);
    let proxy = TestProxy::start(config).await;
    assert_eq!(
        get_text(&format!("http://{}/readyz", proxy.admin)).await.0,
        StatusCode::OK
    );
    for _ in 0..2 {
        assert_eq!(get(&proxy.url("/")).await.status(), StatusCode::BAD_GATEWAY);
    }
    let response = get(&proxy.url("/")).await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(response.headers()["tidegate-shed"], "no_upstream");
    let retry: u64 = response.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (15..=20).contains(&retry),
        "retry after the ejection: {retry}"
    );
    let (status, body) = get_text(&format!("http://{}/readyz", proxy.admin)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("ejected"), "{body}");
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "none"), ("class", "unavailable")]
        ),
        1.0
    );
}

#[tokio::test]
async fn requests_go_to_the_upstream_with_the_most_room() {
    let a = Origin::start("a").await;
    let b = Origin::start("b").await;
    let proxy = TestProxy::start(config(&[&a, &b])).await;
    // `/hold-if/a` holds on a and answers at once on b. Once a holds one request, b (with
    // nothing outstanding) has more room than a, so a never gets a second.
    let mut pending = Vec::new();
    for _ in 0..20 {
        let held_before = a.held();
        let request = spawn_get(proxy.url("/hold-if/a"));
        eventually("an answer from b or a held request on a", || async {
            request.is_finished() || a.held() > held_before
        })
        .await;
        if request.is_finished() {
            let response = request.await.unwrap();
            assert_eq!(response.headers()["x-origin"], "b");
        } else {
            pending.push(request);
        }
    }
    assert_eq!(
        a.held(),
        1,
        "a has one outstanding request: the rest went to b"
    );
    assert_eq!(b.served(), 19);
    a.release(1);
    for request in pending {
        assert_eq!(
            within("a's answer", request).await.unwrap().headers()["x-origin"],
            "a"
        );
    }
}

#[tokio::test]
async fn a_lease_caps_an_upstream_and_steers_traffic_away() {
    let a = Origin::start("a").await;
    let b = Origin::start("b").await;
    let proxy = TestProxy::start(config(&[&a, &b])).await;
    // b grants nothing: once its lease arrives, b's limit is 0 and a gets everything.
    for _ in 0..10 {
        let response = get(&proxy.url("/lease-if/b/0")).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert!(
            !response.headers().contains_key("tidegate-lease"),
            "leases stay in the proxy"
        );
    }
    assert_eq!(
        b.served(),
        1,
        "b served once, then its lease steered traffic to a"
    );
    let gate = proxy.gate("b").await;
    assert_eq!(gate["lease"]["allowed"], 0);
    assert_eq!(gate["limit"], 0);
    // Once a grants nothing either, requests are shed: nobody may be sent anything.
    assert_eq!(
        get(&proxy.url("/lease-if/a/0")).await.status(),
        StatusCode::OK
    );
    let shed = get(&proxy.url("/echo")).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["tidegate-shed"], "no_lease");
}

#[tokio::test]
async fn an_upstream_silent_mid_body_is_cut_after_the_read_timeout() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.client.read_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let feed = origin.download();
    let request = Request::get(proxy.url("/download")).body(empty()).unwrap();
    let response = within("response headers", client().request(request))
        .await
        .unwrap();
    let mut body = http_body_util::BodyExt::boxed(response.into_body());
    feed.send(bytes::Bytes::from_static(b"first"))
        .await
        .unwrap();
    let first = within("the first chunk", http_body_util::BodyExt::frame(&mut body))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first.into_data().unwrap(), "first");
    // The origin keeps the body open and says nothing more.
    let started = Instant::now();
    let cut = within("the cut", http_body_util::BodyExt::frame(&mut body)).await;
    assert!(
        matches!(cut, Some(Err(_)) | None),
        "the body ends early: {cut:?}"
    );
    assert!(
        started.elapsed() >= Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
    let gate = proxy.gate("a").await;
    assert_eq!(gate["requests"]["dropped"], 1);
    assert_eq!(gate["inflight"], 0);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_upstream_errors_total",
            &[("upstream", "a"), ("kind", "timeout")]
        ),
        1.0
    );
    drop(feed);
}

//! The data path over loopback: methods, headers, bodies (large, chunked, streamed both
//! ways), h2c, and priorities.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use bytes::Bytes;
use common::*;
use http::{Method, Request, StatusCode, Version};
use http_body_util::BodyExt;
use tidegate_proxy::config::Route;

#[tokio::test]
async fn methods_paths_and_bodies_pass_through() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for method in ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "HEAD"] {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let payload = format!("payload of {method}");
        let request = Request::builder()
            .method(method.clone())
            .uri(proxy.url("/echo?x=1&y=%20"))
            .body(body(payload.clone()))
            .unwrap();
        let response = send(&client, request).await;
        assert_eq!(response.status(), StatusCode::OK, "{method}");
        assert_eq!(response.headers()["x-origin"], "a");
        let expected = if method == Method::HEAD { "" } else { &payload };
        assert_eq!(response.body(), expected.as_bytes(), "{method}");
        let seen = origin.last_seen();
        assert_eq!(seen.method, method);
        assert_eq!(seen.uri, "/echo?x=1&y=%20");
        assert_eq!(seen.version, Version::HTTP_11);
    }
    let not_found = send(
        &client,
        Request::get(proxy.url("/status/404"))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(
        not_found.status(),
        StatusCode::NOT_FOUND,
        "statuses pass through"
    );
    assert_eq!(not_found.body(), "status");
}

#[tokio::test]
async fn headers_are_rewritten_as_rfc_9110_says() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let request = Request::get(proxy.url("/echo"))
        .header("host", "service.example")
        .header("connection", "x-secret")
        .header("x-secret", "token")
        .header("keep-alive", "timeout=5")
        .header("proxy-connection", "keep-alive")
        .header("te", "gzip")
        .header("upgrade", "websocket")
        .header("x-forwarded-for", "203.0.113.9")
        .header("via", "1.1 edge")
        .header("x-custom", "kept")
        .body(empty())
        .unwrap();
    let response = send(&client(), request).await;
    assert_eq!(response.status(), StatusCode::OK);
    let seen = origin.last_seen().headers;
    for hop in [
        "connection",
        "x-secret",
        "keep-alive",
        "proxy-connection",
        "te",
        "upgrade",
    ] {
        assert!(!seen.contains_key(hop), "{hop} crossed the proxy: {seen:?}");
    }
    assert_eq!(seen["host"], "service.example");
    assert_eq!(seen["x-custom"], "kept");
    assert_eq!(seen["x-forwarded-for"], "203.0.113.9, 127.0.0.1");
    let vias: Vec<_> = seen.get_all("via").iter().collect();
    assert_eq!(vias, ["1.1 edge", "1.1 tidegate"]);
    assert_eq!(seen["tidegate-priority"], "3/0");

    let response = get(&proxy.url("/hop")).await;
    let headers = response.headers();
    for hop in ["x-hop", "keep-alive"] {
        assert!(
            !headers.contains_key(hop),
            "{hop} crossed back: {headers:?}"
        );
    }
    assert_eq!(headers["x-kept"], "1");
    assert_eq!(headers["via"], "1.1 tidegate");
}

#[tokio::test]
async fn large_and_chunked_bodies_cross_whole() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    let big = pattern(8 << 20);
    let request = Request::post(proxy.url("/echo"))
        .body(body(big.clone()))
        .unwrap();
    let response = send(&client, request).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert!(response.body()[..] == big[..], "8 MiB echoed intact");
    assert_eq!(origin.last_seen().headers["content-length"], "8388608");

    let download = send(
        &client,
        Request::get(proxy.url("/big?3000001"))
            .body(empty())
            .unwrap(),
    )
    .await;
    assert!(download.body()[..] == pattern(3_000_001)[..]);

    // No length given: the body goes chunked, in as many pieces as the client sends.
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    let request = Request::post(proxy.url("/echo"))
        .body(http_body_util::BodyExt::boxed(ChannelBody(rx)))
        .unwrap();
    let sending = tokio::spawn(async move {
        for i in 0..64u32 {
            tx.send(Bytes::from(vec![i as u8; 10_000])).await.unwrap();
        }
    });
    let response = send(&client, request).await;
    sending.await.unwrap();
    let expected: Vec<u8> = (0..64u32).flat_map(|i| vec![i as u8; 10_000]).collect();
    assert!(
        response.body()[..] == expected[..],
        "chunked body echoed intact"
    );
    let seen = origin.last_seen().headers;
    assert_eq!(seen["transfer-encoding"], "chunked");
    assert!(!seen.contains_key("content-length"));
}

#[tokio::test]
async fn request_bodies_stream_without_being_buffered() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let request = Request::post(proxy.url("/upload"))
        .body(http_body_util::BodyExt::boxed(ChannelBody(rx)))
        .unwrap();
    let client = client();
    let response = tokio::spawn(async move { send(&client, request).await });
    // Each chunk reaches the origin before the next one is even written.
    for chunk in ["first ", "second ", "third"] {
        tx.send(Bytes::from(chunk)).await.unwrap();
        assert_eq!(origin.uploaded().await, chunk);
    }
    drop(tx);
    let response = within("the upload's answer", response).await.unwrap();
    assert_eq!(response.body(), "18");
}

#[tokio::test]
async fn response_bodies_stream_without_being_buffered() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let feed = origin.download();
    let request = Request::get(proxy.url("/download")).body(empty()).unwrap();
    let response = within("response headers", client().request(request))
        .await
        .unwrap();
    let mut body = response.into_body();
    // Each chunk reaches the client while the origin has not sent the next.
    for chunk in ["alpha", "beta", "gamma"] {
        feed.send(Bytes::from(chunk)).await.unwrap();
        let frame = within("a chunk", body.frame()).await.unwrap().unwrap();
        assert_eq!(frame.into_data().unwrap(), chunk);
    }
    drop(feed);
    assert!(within("the end", body.frame()).await.is_none());
}

#[tokio::test]
async fn h2c_clients_are_served_and_forwarded_as_http_1_1() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let h2 = h2c_client();
    let responses = futures_util::future::join_all((0..8).map(|i| {
        let request = Request::post(proxy.url(&format!("/echo?{i}")))
            .header("tidegate-priority", "2")
            .body(body(format!("h2 body {i}")))
            .unwrap();
        send(&h2, request)
    }))
    .await;
    for (i, response) in responses.iter().enumerate() {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.version(), Version::HTTP_2);
        assert_eq!(response.body(), format!("h2 body {i}").as_bytes());
    }
    let seen = origin.last_seen();
    assert_eq!(seen.version, Version::HTTP_11);
    assert_eq!(seen.headers["host"], proxy.addr.to_string());
    assert_eq!(seen.headers["via"], "2 tidegate");
    assert_eq!(seen.headers["tidegate-priority"], "2/0");
}

#[tokio::test]
async fn priorities_are_read_routed_and_passed_on() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.routes.push(Route {
        prefix: "/batch/".to_owned(),
        tier: Some(5),
        partition: Some("batch".to_owned()),
    });
    let proxy = TestProxy::start(config).await;
    let client = client();
    let request = Request::get(proxy.url("/echo"))
        .header("tidegate-priority", "1/17")
        .body(empty())
        .unwrap();
    send(&client, request).await;
    assert_eq!(origin.last_seen().headers["tidegate-priority"], "1/17");

    let request = Request::get(proxy.url("/batch/job"))
        .header("tidegate-priority", "0/4")
        .body(empty())
        .unwrap();
    send(&client, request).await;
    assert_eq!(
        origin.last_seen().headers["tidegate-priority"],
        "5/4",
        "the route's tier, the header's cohort"
    );
    let batch = proxy.gate("batch/a").await;
    assert_eq!(batch["partition"], "batch");
    assert_eq!(batch["requests"]["arrived"], 1);
    assert_eq!(proxy.gate("a").await["requests"]["arrived"], 1);
}

#[tokio::test]
async fn a_malformed_priority_header_gets_the_default_and_is_counted() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for bad in ["urgent", "7", "1/300"] {
        let request = Request::get(proxy.url("/echo"))
            .header("tidegate-priority", bad)
            .body(empty())
            .unwrap();
        let response = send(&client, request).await;
        assert_eq!(response.status(), StatusCode::OK, "{bad} is not an error");
        assert_eq!(origin.last_seen().headers["tidegate-priority"], "3/0");
    }
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_priority_header_invalid_total", &[]),
        3.0
    );
    assert_eq!(
        metrics.sum(
            "tidegate_requests_total",
            &[("gate", "a"), ("tier", "3"), ("outcome", "ok")]
        ),
        3.0
    );
}

#[tokio::test]
async fn an_upstream_path_prefix_goes_before_the_path() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.upstreams[0].url = format!("{}/base/", origin.url());
    let proxy = TestProxy::start(config).await;
    let response = get(&proxy.url("/echo?q")).await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(origin.last_seen().uri, "/base/echo?q");
}

#[tokio::test]
async fn upstream_connections_are_kept_alive_and_reused() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for i in 0..20 {
        let request = Request::post(proxy.url("/echo"))
            .body(body(format!("{i}")))
            .unwrap();
        assert_eq!(
            send(&client, request).await.body(),
            format!("{i}").as_bytes()
        );
    }
    assert_eq!(
        origin.connections(),
        1,
        "one keep-alive connection served them all"
    );
    // Concurrent requests need as many connections, which stay for later.
    let concurrent = futures_util::future::join_all((0..4).map(|_| spawn_get(proxy.url("/hold"))));
    let releasing = async {
        origin.wait_held(4).await;
        origin.release(4);
    };
    let (responses, ()) = tokio::join!(concurrent, releasing);
    assert!(
        responses
            .into_iter()
            .all(|r| r.unwrap().status() == StatusCode::OK)
    );
    let connections = origin.connections();
    assert!(connections <= 4, "{connections}");
    for _ in 0..10 {
        get(&proxy.url("/echo")).await;
    }
    assert_eq!(origin.connections(), connections, "the pool reuses them");
}

#[tokio::test]
async fn an_upstream_that_closes_every_connection_still_gets_every_request() {
    let origin = Origin::start_without_keep_alive("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for i in 0..10 {
        let request = Request::post(proxy.url("/echo"))
            .body(body(format!("{i}")))
            .unwrap();
        let response = send(&client, request).await;
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), format!("{i}").as_bytes());
    }
    assert_eq!(origin.connections(), 10);
}

#[tokio::test]
async fn an_http2_upstream_shares_one_connection() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.client.http2 = true;
    let proxy = TestProxy::start(config).await;
    let client = client();
    let responses = futures_util::future::join_all((0..8).map(|i| {
        let request = Request::post(proxy.url(&format!("/echo?{i}")))
            .body(body(format!("to h2 {i}")))
            .unwrap();
        send(&client, request)
    }))
    .await;
    for (i, response) in responses.iter().enumerate() {
        assert_eq!(response.status(), StatusCode::OK);
        assert_eq!(response.body(), format!("to h2 {i}").as_bytes());
    }
    let seen = origin.last_seen();
    assert_eq!(seen.version, Version::HTTP_2);
    assert_eq!(seen.uri.path(), "/echo");
    assert_eq!(origin.connections(), 1);
}

fn spawn_get(url: String) -> tokio::task::JoinHandle<http::Response<Bytes>> {
    tokio::spawn(async move { get(&url).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_threaded_proxy_serves_concurrent_clients_and_counts_each_request() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    let workers = (0..16).map(|worker| {
        let client = client.clone();
        let url = proxy.url("/echo");
        tokio::spawn(async move {
            for i in 0..25 {
                let payload = format!("{worker}-{i}");
                let request = Request::post(&url).body(body(payload.clone())).unwrap();
                let response = send(&client, request).await;
                assert_eq!(response.status(), StatusCode::OK);
                assert_eq!(response.body(), payload.as_bytes());
            }
        })
    });
    for worker in futures_util::future::join_all(workers).await {
        worker.unwrap();
    }
    let gate = proxy.gate("a").await;
    assert_eq!(gate["requests"]["ok"], 400);
    assert_eq!(gate["requests"]["arrived"], 400);
    assert_eq!(gate["inflight"], 0);
    assert_eq!(gate["outstanding"], 0);
}

#[tokio::test]
async fn a_caller_key_header_gives_each_caller_a_stable_cohort() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.priority.caller_key_header = "x-api-key".to_owned();
    let proxy = TestProxy::start(config).await;
    let client = client();
    let mut cohorts = std::collections::BTreeSet::new();
    for user in 0..20 {
        let mut seen = Vec::new();
        for _ in 0..2 {
            let request = Request::get(proxy.url("/echo"))
                .header("x-api-key", format!("key-{user}"))
                .header("tidegate-priority", "2")
                .body(empty())
                .unwrap();
            send(&client, request).await;
            let forwarded = origin.last_seen().headers["tidegate-priority"].clone();
            seen.push(forwarded.to_str().unwrap().to_owned());
        }
        assert_eq!(seen[0], seen[1], "the same caller, the same cohort");
        let (tier, cohort) = seen[0].split_once('/').unwrap();
        assert_eq!(tier, "2", "the header's tier");
        cohorts.insert(cohort.to_owned());
    }
    assert!(
        cohorts.len() > 5,
        "callers spread over cohorts: {cohorts:?}"
    );
    let request = Request::get(proxy.url("/echo"))
        .header("x-api-key", "key-0")
        .header("tidegate-priority", "2/9")
        .body(empty())
        .unwrap();
    send(&client, request).await;
    assert_eq!(
        origin.last_seen().headers["tidegate-priority"],
        "2/9",
        "a cohort in the header wins"
    );
}

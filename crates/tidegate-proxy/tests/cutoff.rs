//! The upstream's cut-off over loopback: once an upstream says `tidegate-cutoff`, the proxy
//! sheds what it refuses before sending it, and ignores and counts a malformed header.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::{Request, StatusCode};

#[tokio::test]
async fn the_proxy_sheds_what_its_upstream_refuses_until_the_hint_expires() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    let get = |path: &str, priority: &str| get_at(proxy.url(path), priority);
    // The upstream refuses, cutting past rank 127 (tier 0) for 10 s.
    let refused = send(&client, get("/cutoff/127/10s", "3")).await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["tidegate-cutoff"], "rank=127, ttl=10s");
    assert_eq!(origin.served(), 1);
    // Tier 3 is now shed at the proxy, never reaching the upstream, and told why.
    let shed = send(&client, get("/echo", "3/0")).await;
    assert_eq!(shed.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(shed.headers()["tidegate-shed"], "cutoff");
    assert_eq!(shed.headers()["retry-after"], "1");
    assert_eq!(shed.headers()["tidegate-cutoff"], "rank=127, ttl=250ms");
    assert_eq!(origin.served(), 1);
    // Tier 0 still goes.
    let ok = send(&client, get("/echo", "0/5")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(origin.served(), 2);
    // Counted once, as shed, though its gate never saw it.
    let metrics = proxy.metrics().await;
    let class = |class| {
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", "a"), ("class", class)],
        )
    };
    assert_eq!(
        (class("shed"), class("dropped"), class("ok")),
        (1.0, 1.0, 1.0)
    );
}

#[tokio::test]
async fn a_malformed_cutoff_is_ignored_and_counted() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for _ in 0..2 {
        let request = Request::get(proxy.url("/cutoff/all/10s"))
            .body(empty())
            .unwrap();
        send(&client, request).await;
    }
    let request = Request::get(proxy.url("/echo")).body(empty()).unwrap();
    assert_eq!(send(&client, request).await.status(), StatusCode::OK);
    assert_eq!(origin.served(), 3);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_cutoff_header_invalid_total", &[]),
        2.0
    );
}

/// A request with the given `tidegate-priority` field lines.
fn with_lines(url: String, lines: &[&str]) -> Request<TestBody> {
    let mut request = Request::get(url).body(empty()).unwrap();
    for &line in lines {
        request
            .headers_mut()
            .append("tidegate-priority", line.parse().unwrap());
    }
    request
}

/// The `tidegate-priority` field lines of the last request the origin got.
fn lines_seen(origin: &Origin) -> Vec<String> {
    origin
        .last_seen()
        .headers
        .get_all("tidegate-priority")
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn the_edge_stamps_the_hint_it_admits_under_and_no_proxy_drops_a_chain_it_admits() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.feedback.hold_for_chain = Some(true);
    let proxy = TestProxy::start(config).await;
    let client = client();
    // No hint held: admitted under every rank.
    let ok = send(&client, with_lines(proxy.url("/echo"), &["1/0"])).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(lines_seen(&origin), ["1/0", "under=767"]);
    // The upstream cuts past rank 300.
    send(&client, with_lines(proxy.url("/cutoff/300/10s"), &["0"])).await;
    let ok = send(&client, with_lines(proxy.url("/echo"), &["1/0"])).await;
    assert_eq!(ok.status(), StatusCode::OK);
    assert_eq!(lines_seen(&origin), ["1/0", "under=300"]);
    // Rank 350 (2/94), a new chain: shed before sending.
    let shed = send(&client, with_lines(proxy.url("/echo"), &["2/94"])).await;
    assert_eq!(shed.headers()["tidegate-shed"], "cutoff");
    // A call of a chain an edge admitted under rank 400: sent, its hint as it came.
    for lines in [&["2/94", "under=400"][..], &["2/94, under=400"]] {
        let ok = send(&client, with_lines(proxy.url("/echo"), lines)).await;
        assert_eq!(ok.status(), StatusCode::OK, "{lines:?}");
        assert_eq!(lines_seen(&origin), ["2/94", "under=400"]);
    }
    // Admitted under a hint that did not admit it, or a malformed one: shed; the malformed
    // member ignored and counted, the priority kept.
    let served = origin.served();
    for lines in [&["2/94", "under=349"][..], &["2/94", "under=most"]] {
        let shed = send(&client, with_lines(proxy.url("/echo"), lines)).await;
        assert_eq!(shed.headers()["tidegate-shed"], "cutoff", "{lines:?}");
    }
    assert_eq!(origin.served(), served);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_priority_header_ignored_total", &[]),
        1.0
    );
    assert_eq!(
        metrics.sum("tidegate_priority_header_invalid_total", &[]),
        0.0
    );
}

#[tokio::test]
async fn a_proxy_not_at_the_edge_passes_the_hint_on_and_stamps_none() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.feedback.hold_for_chain = Some(false);
    let proxy = TestProxy::start(config).await;
    let client = client();
    send(&client, with_lines(proxy.url("/echo"), &["1/0"])).await;
    assert_eq!(lines_seen(&origin), ["1/0"]);
    send(&client, with_lines(proxy.url("/echo"), &["1/0", "under=5"])).await;
    assert_eq!(lines_seen(&origin), ["1/0", "under=5"]);
}

#[tokio::test]
async fn by_default_the_proxy_stamps_the_hint_where_it_forwards_the_priority() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    send(&client, with_lines(proxy.url("/echo"), &["1/0"])).await;
    assert_eq!(lines_seen(&origin), ["1/0", "under=767"]);
    // A hint that came with the request is passed on as it came.
    send(&client, with_lines(proxy.url("/echo"), &["1/0", "under=5"])).await;
    assert_eq!(lines_seen(&origin), ["1/0", "under=5"]);
    // Not forwarding the priority adds no hint either (the client's header goes through as
    // it came), and is no error.
    let mut quiet = config(&[&origin]);
    quiet.priority.forward = false;
    let proxy = TestProxy::start(quiet).await;
    send(&client, with_lines(proxy.url("/echo"), &["1/0"])).await;
    assert_eq!(lines_seen(&origin), ["1/0"]);
}

#[tokio::test]
async fn the_edge_reopens_at_its_rate() {
    // 100 ranks a second: from rank 127, the least important rank 767 is 6.4 s away.
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.feedback.hold_for_chain = Some(true);
    config.feedback.reopen_rate = 100.0;
    let proxy = TestProxy::start(config).await;
    let client = client();
    send(&client, with_lines(proxy.url("/cutoff/127/100ms"), &["0"])).await;
    let shed = send(&client, with_lines(proxy.url("/echo"), &["5/127"])).await;
    assert_eq!(shed.headers()["tidegate-shed"], "cutoff");
    // Once the hint has lapsed, the line rises from 127 toward every rank, not at once.
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    let shed = send(&client, with_lines(proxy.url("/echo"), &["5/127"])).await;
    assert_eq!(shed.headers()["tidegate-shed"], "cutoff");
    let ok = send(&client, with_lines(proxy.url("/echo"), &["0"])).await;
    assert_eq!(ok.status(), StatusCode::OK);
    let under: u16 = lines_seen(&origin)[1]
        .strip_prefix("under=")
        .unwrap()
        .parse()
        .unwrap();
    assert!((128..767).contains(&under), "{under}");
}

#[tokio::test]
async fn a_shedding_gate_holds_back_the_ranks_starving_in_its_queue() {
    // One request at a time, held at the origin: tier 1 (1/5, rank 133) waits in the queue
    // behind it past half the queue's timeout (200 of 400 ms), while PIE cuts tier 4.
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.gate.limit.algorithm = tidegate_core::config::LimitAlgorithm::Fixed;
    config.gate.limit.fixed.limit = 1;
    config.gate.queue.timeout = tidegate_core::Nanos::from_millis(400);
    config.gate.queue.wait_bound = f64::INFINITY;
    config.gate.queue.hold_back_starving = true;
    let proxy = TestProxy::start(config).await;
    let client = client();
    let holding = {
        let (client, url) = (client.clone(), proxy.url("/hold"));
        tokio::spawn(async move { send(&client, with_lines(url, &["0"])).await })
    };
    origin.wait_held(1).await;
    // Tier 1 and four times as much tier 4 arrive every 20 ms and wait behind the held
    // request; what the refusals of tier 4 say comes back on a channel. PIE's cut reaches
    // tier 1 only once it drops four fifths of the arrivals: it climbs by at most 0.02 every
    // 15 ms past a tenth (RFC 8033), half a second after tier 1 starts starving at 200 ms.
    let (said_tx, mut said_rx) = tokio::sync::mpsc::unbounded_channel();
    let load = {
        let (client, proxy_url) = (client.clone(), proxy.url("/echo"));
        tokio::spawn(async move {
            loop {
                for priority in ["1/5", "4/9", "4/9", "4/9", "4/9"] {
                    let (client, url, said) = (client.clone(), proxy_url.clone(), said_tx.clone());
                    tokio::spawn(async move {
                        let response = send(&client, with_lines(url, &[priority])).await;
                        let cutoff = response.headers().get("tidegate-cutoff").and_then(|v| {
                            v.to_str()
                                .ok()?
                                .parse::<tidegate_core::feedback::CutoffHeader>()
                                .ok()
                        });
                        if let Some(cutoff) = cutoff {
                            let _ = said.send(cutoff.rank);
                        }
                    });
                }
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        })
    };
    let said = within("a refusal that holds tier 1 back", async {
        loop {
            let rank = said_rx.recv().await.unwrap();
            if rank < 512 {
                break rank;
            }
        }
    })
    .await;
    load.abort();
    // The most important rank waiting that long is 133: it and every rank after it are held
    // back, though the regulator still admits tier 1.
    assert_eq!(said, 132);
    let cut = proxy.gate("a").await["cutoff_rank"].as_u64();
    assert!(cut.is_some_and(|cut| cut > 133), "{cut:?}");
    origin.release(1);
    holding.await.unwrap();
}

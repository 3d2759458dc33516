//! The shed path over loopback: a request the gate turns away costs no upstream work and no
//! read of its body; the connection stays open when it can carry the next request, and closes
//! (saying so) when an unread body may stand in the way.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A proxy whose gate has one slot, held by a request the origin keeps, and no queue: every
/// other request is shed at once.
async fn full_proxy(origin: &Origin) -> (TestProxy, tokio::task::JoinHandle<()>) {
    let mut config: Config = config(&[origin]);
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
    config.gate.limit.fixed.limit = 1;
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config.gate.queue.capacity = 0;
    let proxy = TestProxy::start(config).await;
    let url = proxy.url("/hold");
    let held = tokio::spawn(async move {
        get(&url).await;
    });
    origin.wait_held(1).await;
    (proxy, held)
}

/// Reads one response head from `stream`: its status line and header lines, lower-cased.
async fn read_head(stream: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut byte = [0u8];
    while !head.ends_with(b"\r\n\r\n") {
        let n = within("a response head", stream.read(&mut byte))
            .await
            .unwrap();
        assert_eq!(n, 1, "the connection closed mid-head: {head:?}");
        head.push(byte[0]);
    }
    String::from_utf8(head).unwrap().to_lowercase()
}

#[tokio::test]
async fn a_shed_request_with_an_unsent_body_is_answered_without_reading_it_and_closed() {
    let origin = Origin::start("a").await;
    let (proxy, held) = full_proxy(&origin).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    // A client that waits for `100 Continue` before sending a megabyte.
    let request = "POST /upload HTTP/1.1\r\nhost: test\r\ncontent-length: 1000000\r\n\
                   expect: 100-continue\r\n\r\n";
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.starts_with("http/1.1 503"), "{head}");
    assert!(head.contains("tidegate-shed: queue_full"), "{head}");
    assert!(head.contains("connection: close"), "{head}");
    // Then the proxy closes: nothing more comes, the body was never asked for.
    let mut rest = Vec::new();
    within("the connection's end", stream.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    assert_eq!(origin.served(), 0, "the origin never saw it");
    assert_eq!(origin.held(), 1);
    held.abort();
}

#[tokio::test]
async fn a_shed_request_without_a_body_keeps_its_connection_and_one_with_a_body_closes_it() {
    let origin = Origin::start("a").await;
    let (proxy, held) = full_proxy(&origin).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    let request = "GET /a HTTP/1.1\r\nhost: test\r\n\r\n";
    for _ in 0..2 {
        stream.write_all(request.as_bytes()).await.unwrap();
        let head = read_head(&mut stream).await;
        assert!(head.starts_with("http/1.1 503"), "{head}");
        assert!(head.contains("content-length: 0"), "{head}");
        assert!(!head.contains("connection: close"), "{head}");
    }
    // A body that came whole with its head is not read either: the refusal says close.
    let request = "POST /a HTTP/1.1\r\nhost: test\r\ncontent-length: 5\r\n\r\nhello";
    stream.write_all(request.as_bytes()).await.unwrap();
    let head = read_head(&mut stream).await;
    assert!(head.contains("connection: close"), "{head}");
    let mut rest = Vec::new();
    within("the connection's end", stream.read_to_end(&mut rest))
        .await
        .unwrap();
    assert!(rest.is_empty());
    let metrics = proxy.metrics().await;
    let shed = metrics.sum(
        "tidegate_request_duration_seconds_count",
        &[("upstream", "a"), ("class", "shed")],
    );
    assert_eq!(shed, 3.0);
    assert_eq!(origin.served(), 0);
    held.abort();
}

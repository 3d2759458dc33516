//! Hostile and broken clients over loopback (issue 14): each attack class with the proxy
//! staying up, the upstream not blamed for the client's doing, a well-behaved client still
//! served, and every request in exactly one outcome, the same in both ledgers.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use common::*;
use http::StatusCode;
use tidegate_core::Nanos;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends `bytes` on a new connection and reads what comes back until the proxy closes it
/// (bounded): the raw answer, possibly empty.
async fn exchange_raw(proxy: &TestProxy, bytes: &[u8], then_close_write: bool) -> String {
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream.write_all(bytes).await.unwrap();
    if then_close_write {
        stream.shutdown().await.unwrap();
    }
    let mut answer = Vec::new();
    within("the proxy to close the connection", async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    String::from_utf8_lossy(&answer).into_owned()
}

/// Finding 1 of issue 14: a malformed chunked body, or an upload cut off, was answered 502
/// and counted against the upstream (a dropped sample, a strike toward ejection): a few such
/// clients ejected a healthy upstream. It is the client's outcome, counted apart.
#[tokio::test]
async fn a_client_whose_body_breaks_is_not_the_upstreams_failure() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    // Two strikes would eject: the test sends many more broken bodies than that.
    config.ejection.consecutive_failures = 2;
    config.ejection.base_time = Nanos::from_secs(30);
    let proxy = TestProxy::start(config).await;
    let head = "POST /upload HTTP/1.1\r\nhost: test\r\n";
    let malformed = format!("{head}transfer-encoding: chunked\r\n\r\n5\r\nhello\r\nZZ\r\n\r\n");
    let cut_short = format!("{head}content-length: 1000\r\n\r\n{}", "x".repeat(100));
    let mut sent = 0;
    for _ in 0..3 {
        for (bytes, close_write) in [
            (malformed.as_str(), false),
            (cut_short.as_str(), true),
            (cut_short.as_str(), false),
        ] {
            // Closing without reading: the client gives up on its upload.
            if close_write || bytes == malformed {
                let answer = exchange_raw(&proxy, bytes.as_bytes(), close_write).await;
                assert!(!answer.contains(" 502 "), "{answer}");
            } else {
                let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
                stream.write_all(bytes.as_bytes()).await.unwrap();
                drop(stream);
            }
            sent += 1;
        }
    }
    eventually("every broken request to end", || async {
        let counts = ledgers_agree(&proxy, "a").await;
        counts.values().sum::<f64>() == f64::from(sent)
    })
    .await;
    let counts = ledgers_agree(&proxy, "a").await;
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_upstream_errors_total", &[("upstream", "a")]),
        0.0,
        "{counts:?}"
    );
    assert_eq!(
        metrics.sum("tidegate_upstream_ejections_total", &[("upstream", "a")]),
        0.0
    );
    assert_eq!(counts["dropped"], 0.0, "{counts:?}");
    assert!(counts["client_error"] >= 3.0, "{counts:?}");
    // The well-behaved client is still served.
    let ok = get(&proxy.url("/echo")).await;
    assert_eq!(ok.status(), StatusCode::OK);
    ledgers_agree(&proxy, "a").await;
}

//! Bounded resources over loopback (issue 14): slowloris on the main and admin ports, clients
//! that never read their response, and connection floods, each closed by the proxy within
//! its bound while a well-behaved client is served.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::net::SocketAddr;

use common::*;
use http::StatusCode;
use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::Config;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// Waits until the proxy closes `stream` (a read returns end of file or an error), reading and
/// dropping whatever it sends first.
async fn closed_by_the_proxy(stream: &mut TcpStream, what: &str) {
    within(what, async {
        let mut buf = [0u8; 4096];
        while let Ok(n) = stream.read(&mut buf).await {
            if n == 0 {
                break;
            }
        }
    })
    .await;
}

async fn closed(proxy: &TestProxy, reason: &str) -> f64 {
    proxy.metrics().await.sum(
        "tidegate_client_connections_closed_total",
        &[("reason", reason)],
    )
}

/// Clients that send nothing, trickle the HTTP/2 preface, or stop in the middle of a request
/// head: each is closed after `header_read_timeout` (the first two were held forever: hyper's
/// own timeout starts only once it has recognised HTTP/1.1). The admin port too.
#[tokio::test]
async fn slowloris_connections_are_closed_after_the_header_timeout() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.header_read_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let mut slow = Vec::new();
    for (addr, bytes) in [
        (proxy.addr, &b""[..]),
        (proxy.addr, b"PRI * HT"),
        (proxy.addr, b"GET /echo HTTP/1.1\r\nhost: t\r\nx-a: "),
        (proxy.admin, b"GET /metrics HTTP/1.1\r\nhost: t\r\n"),
    ] {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(bytes).await.unwrap();
        slow.push(stream);
    }
    // Served alongside.
    assert_eq!(get(&proxy.url("/echo")).await.status(), StatusCode::OK);
    for stream in &mut slow {
        closed_by_the_proxy(stream, "a slow client to be closed").await;
    }
    // Each one on the main port counted, whichever of hyper's timer and the proxy's fired
    // first.
    eventually("every slow client counted", || async {
        closed(&proxy, "header_timeout").await == 3.0
    })
    .await;
    assert_eq!(get(&proxy.url("/echo")).await.status(), StatusCode::OK);
    ledgers_agree(&proxy, "a").await;
}

fn one_slot(mut config: Config) -> Config {
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
    config.gate.limit.fixed.limit = 1;
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config.gate.queue.capacity = 10;
    config.gate.queue.timeout = Nanos::from_secs(30);
    config
}

/// A connection whose socket takes few bytes at a time, for a client that never reads.
async fn never_reading(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(addr).await.unwrap()
}

/// A client that asks for a large response and never reads it held its gate slot for as long
/// as it liked (twenty starved everyone else). Its connection is closed once a write has been
/// blocked for `write_timeout`, and the slot freed.
#[tokio::test]
async fn a_client_that_never_reads_loses_its_slot_after_the_write_timeout() {
    let origin = Origin::start("a").await;
    let mut config = one_slot(config(&[&origin]));
    config.connections.write_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let mut stalled = never_reading(proxy.addr).await;
    // More than the socket buffers on both sides hold.
    let request = "GET /big?16000000 HTTP/1.1\r\nhost: t\r\n\r\n";
    stalled.write_all(request.as_bytes()).await.unwrap();
    eventually("the stalled response to take the slot", || async {
        proxy.gate("a").await["inflight"] == 1
    })
    .await;
    eventually("the slot to be freed", || async {
        let gate = proxy.gate("a").await;
        gate["inflight"] == 0 && gate["requests"]["cancelled_inflight"] == 1
    })
    .await;
    assert_eq!(closed(&proxy, "write_timeout").await, 1.0);
    assert_eq!(get(&proxy.url("/echo")).await.status(), StatusCode::OK);
    ledgers_agree(&proxy, "a").await;
}

/// Past `connections.max`, a new connection is closed at once, before anything is read; the
/// ones open are served, and room comes back as they close.
#[tokio::test]
async fn connections_past_the_maximum_are_closed_at_once() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.max = 2;
    let proxy = TestProxy::start(config).await;
    let open = |n: f64| {
        let proxy = &proxy;
        async move {
            proxy
                .metrics()
                .await
                .sum("tidegate_client_connections", &[])
                == n
        }
    };
    let first = TcpStream::connect(proxy.addr).await.unwrap();
    let second = TcpStream::connect(proxy.addr).await.unwrap();
    eventually("two connections open", || open(2.0)).await;
    let mut third = TcpStream::connect(proxy.addr).await.unwrap();
    third
        .write_all(b"GET /echo HTTP/1.1\r\nhost: t\r\n\r\n")
        .await
        .ok();
    closed_by_the_proxy(&mut third, "the connection past the maximum to close").await;
    assert_eq!(closed(&proxy, "max_connections").await, 1.0);
    assert!(origin.seen().is_empty());
    drop((first, second));
    eventually("the connections to close", || open(0.0)).await;
    assert_eq!(get(&proxy.url("/echo")).await.status(), StatusCode::OK);
}

/// With `at_max = "wait"`, a connection past `connections.max` is not accepted (nor closed):
/// it waits in the kernel's backlog, and is served once an open one closes.
#[tokio::test]
async fn past_the_maximum_a_connection_waits_with_at_max_wait() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.max = 2;
    config.connections.at_max = tidegate_proxy::config::AtMax::Wait;
    let proxy = TestProxy::start(config).await;
    let first = TcpStream::connect(proxy.addr).await.unwrap();
    let second = TcpStream::connect(proxy.addr).await.unwrap();
    let mut third = TcpStream::connect(proxy.addr).await.unwrap();
    third
        .write_all(b"GET /echo HTTP/1.1\r\nhost: t\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    drop(first);
    let mut answer = Vec::new();
    within("the waiting connection to be served", async {
        let _ = third.read_to_end(&mut answer).await;
    })
    .await;
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    assert_eq!(closed(&proxy, "max_connections").await, 0.0);
    drop(second);
}

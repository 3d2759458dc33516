//! Hostile HTTP/2 clients over loopback (issue 14): the `h2` crate as a client that resets
//! every stream it opens (rapid reset), and hand-written frames for CONTINUATION, PING and
//! SETTINGS floods. Each time the proxy stays up within a memory bound, closes or resets what
//! it must, and serves a well-behaved client alongside, with exact accounting.

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

/// The test process's resident memory, where the system says it.
fn rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Fails if the process grew by more than `bound` bytes since `before`.
fn within_memory(before: Option<u64>, bound: u64, what: &str) {
    if let (Some(before), Some(after)) = (before, rss_bytes()) {
        let grown = after.saturating_sub(before);
        assert!(
            grown < bound,
            "{what}: resident memory grew by {grown} bytes"
        );
    }
}

async fn served_alongside(proxy: &TestProxy) {
    assert_eq!(get(&proxy.url("/echo")).await.status(), StatusCode::OK);
    let request = http::Request::get(proxy.url("/echo"))
        .body(empty())
        .unwrap();
    assert_eq!(
        send(&h2c_client(), request).await.status(),
        StatusCode::OK,
        "an h2c client is served"
    );
}

/// The limits are the proxy's own, not the library's: a client learns them in SETTINGS.
/// Then a client opens and at once resets stream after stream (CVE-2023-44487): the proxy
/// answers what it can, closes the connection if the resets outrun it, frees every slot, and
/// counts each request once.
#[tokio::test]
async fn a_rapid_reset_client_is_survived_and_the_stream_limit_is_explicit() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.http2_max_concurrent_streams = 32;
    let proxy = TestProxy::start(config).await;
    let before = rss_bytes();
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let mut client = within("the handshake", client.ready()).await.unwrap();
    eventually("the proxy's SETTINGS", || {
        let limit = client.current_max_send_streams();
        async move { limit == 32 }
    })
    .await;
    let uri = proxy.url("/echo");
    let (flood, sent) = within("the reset flood", async move {
        let mut sent = 0u32;
        for _ in 0..2000 {
            client = match client.ready().await {
                Ok(client) => client,
                Err(error) => return (Some(error), sent),
            };
            let request = http::Request::get(&uri).body(()).unwrap();
            match client.send_request(request, false) {
                Ok((response, mut stream)) => {
                    stream.send_reset(h2::Reason::CANCEL);
                    drop(response);
                    sent += 1;
                }
                Err(error) => return (Some(error), sent),
            }
        }
        (None, sent)
    })
    .await;
    // Closed by the proxy (GOAWAY) or not: either way it is still up.
    let _ = within("the flooding connection to end", connection).await;
    assert!(sent > 0, "{flood:?}");
    served_alongside(&proxy).await;
    eventually("every slot to be freed", || async {
        proxy.gate("a").await["inflight"] == 0
    })
    .await;
    let counts = ledgers_agree(&proxy, "a").await;
    let counted: f64 = counts.values().sum();
    assert!(
        counted <= f64::from(sent) + 2.0,
        "{counts:?} for {sent} streams"
    );
    within_memory(before, 64 << 20, "rapid reset");
}

/// An HTTP/2 frame: length, type, flags, stream, payload.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut bytes = len.to_be_bytes()[1..].to_vec();
    bytes.extend_from_slice(&[kind, flags]);
    bytes.extend_from_slice(&stream.to_be_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const HEADERS: u8 = 1;
const RST_STREAM: u8 = 3;
const SETTINGS: u8 = 4;
const PING: u8 = 6;
const GOAWAY: u8 = 7;
const CONTINUATION: u8 = 9;
const END_STREAM: u8 = 1;
const END_HEADERS: u8 = 4;

/// An HPACK integer with a `prefix`-bit prefix (RFC 7541 section 5.1), after `first`'s high
/// bits.
fn hpack_int(first: u8, prefix: u32, mut value: usize, out: &mut Vec<u8>) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | u8::try_from(value).unwrap());
        return;
    }
    out.push(first | u8::try_from(max).unwrap());
    value -= max;
    while value >= 128 {
        out.push(u8::try_from(value % 128).unwrap() | 0x80);
        value /= 128;
    }
    out.push(u8::try_from(value).unwrap());
}

/// A header field as an HPACK literal without indexing, new name.
fn hpack_literal(name: &str, value: &str, out: &mut Vec<u8>) {
    out.push(0);
    hpack_int(0, 7, name.len(), out);
    out.extend_from_slice(name.as_bytes());
    hpack_int(0, 7, value.len(), out);
    out.extend_from_slice(value.as_bytes());
}

/// A connection's start: the preface, empty SETTINGS, and HEADERS for a GET of `path` on
/// stream 1 with `flags`.
fn preface_and_get(path: &str, flags: u8) -> Vec<u8> {
    let mut start = PREFACE.to_vec();
    start.extend(frame(SETTINGS, 0, 0, &[]));
    let mut block = Vec::new();
    for (name, value) in [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "t"),
    ] {
        hpack_literal(name, value, &mut block);
    }
    start.extend(frame(HEADERS, flags, 1, &block));
    start
}

/// Reads frames until one of `kinds` arrives or the proxy closes the connection: which one
/// (`None` for closed).
async fn until_frame(stream: &mut (impl AsyncReadExt + Unpin), kinds: &[u8]) -> Option<u8> {
    within("the proxy to answer the flood", async {
        loop {
            let mut head = [0u8; 9];
            if stream.read_exact(&mut head).await.is_err() {
                return None;
            }
            let len = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0u8; len];
            if stream.read_exact(&mut payload).await.is_err() {
                return None;
            }
            if kinds.contains(&head[3]) {
                return Some(head[3]);
            }
        }
    })
    .await
}

/// A header block that never ends: HEADERS without END_HEADERS, then CONTINUATION after
/// CONTINUATION, far past the header list bound. The stream is reset or the connection closed,
/// before the proxy has buffered it all.
#[tokio::test]
async fn a_continuation_flood_is_cut_off() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.max_header_bytes = 16 * 1024;
    let proxy = TestProxy::start(config).await;
    let before = rss_bytes();
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    // Without END_HEADERS: the block goes on in CONTINUATION frames.
    stream
        .write_all(&preface_and_get("/echo", END_STREAM))
        .await
        .unwrap();
    let mut filler = Vec::new();
    while filler.len() < 15_000 {
        hpack_literal("x-flood", &"a".repeat(1000), &mut filler);
    }
    let continuation = frame(CONTINUATION, 0, 1, &filler);
    let (mut reader, mut writer) = stream.into_split();
    // 32 MB of header block, unless the proxy stops reading first.
    let writing = tokio::spawn(async move {
        for _ in 0..2000 {
            if writer.write_all(&continuation).await.is_err() {
                break;
            }
        }
    });
    // A 431, a reset stream, a GOAWAY, or the connection closed; never a forwarded request.
    let answer = until_frame(&mut reader, &[HEADERS, RST_STREAM, GOAWAY]).await;
    writing.abort();
    assert!(origin.seen().is_empty(), "{answer:?}");
    served_alongside(&proxy).await;
    ledgers_agree(&proxy, "a").await;
    within_memory(before, 64 << 20, "CONTINUATION flood");
}

/// PING and SETTINGS frames, each of which asks for an answer, sent as fast as the socket
/// takes them by a client that never reads. The proxy must neither queue the answers without
/// bound nor stall: it answers as its writes allow and reads on, or closes the connection once
/// its writes have been blocked for the write timeout. Its memory stays bounded and others
/// are served.
#[tokio::test]
async fn ping_and_settings_floods_are_answered_within_bounds() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.write_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let before = rss_bytes();
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut stream = socket.connect(proxy.addr).await.unwrap();
    let mut start = PREFACE.to_vec();
    start.extend(frame(SETTINGS, 0, 0, &[]));
    stream.write_all(&start).await.unwrap();
    let mut burst = Vec::new();
    for i in 0u64..1000 {
        burst.extend(frame(PING, 0, 0, &i.to_be_bytes()));
        if i % 10 == 0 {
            burst.extend(frame(SETTINGS, 0, 0, &[]));
        }
    }
    // 200,000 PINGs and 20,000 SETTINGS (3.8 MB): taken, or the connection closed.
    let _taken_or_closed: std::io::Result<()> = within("the flood to be taken or cut", async {
        for _ in 0..200 {
            stream.write_all(&burst).await?;
        }
        stream.flush().await
    })
    .await;
    served_alongside(&proxy).await;
    within_memory(before, 64 << 20, "PING and SETTINGS flood");
}

/// A client that reads its socket but never opens a stream's flow-control window (an initial
/// window of 0, no WINDOW_UPDATE): the response cannot leave, while the socket stays
/// writable. Within the write timeout its connection is closed, the slot freed, and the
/// request counted once, as cancelled.
#[tokio::test]
async fn a_client_that_never_opens_a_streams_window_loses_its_connection_and_slot() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.write_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (client, connection) = h2::client::Builder::new()
        .initial_window_size(0)
        .handshake::<_, bytes::Bytes>(tcp)
        .await
        .unwrap();
    let connection = tokio::spawn(connection);
    let mut client = within("the handshake", client.ready()).await.unwrap();
    let request = http::Request::get(proxy.url("/big?100000"))
        .body(())
        .unwrap();
    let (response, _stream) = client.send_request(request, true).unwrap();
    // The head leaves (HEADERS are not flow-controlled); the body never can.
    let response = within("the response head", response).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    eventually("the slot to be freed", || async {
        proxy.gate("a").await["inflight"] == 0
    })
    .await;
    let _ = within("the connection to be closed", connection).await;
    drop(response);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_client_connections_closed_total",
            &[("reason", "write_timeout")]
        ),
        1.0
    );
    let counts = ledgers_agree(&proxy, "a").await;
    assert_eq!(counts["cancelled"], 1.0, "{counts:?}");
    assert_eq!(counts.values().sum::<f64>(), 1.0, "{counts:?}");
    served_alongside(&proxy).await;
}

/// An HTTP/2 connection with no stream open for the idle timeout gets GOAWAY and is closed:
/// it was held open for ever after its last request.
#[tokio::test]
async fn an_idle_http2_connection_is_shut_down() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.idle_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.unwrap();
    let connection = tokio::spawn(connection);
    let mut client = within("the handshake", client.ready()).await.unwrap();
    let request = http::Request::get(proxy.url("/big?1000")).body(()).unwrap();
    let (response, _stream) = client.send_request(request, true).unwrap();
    let mut body = within("the response", response).await.unwrap().into_body();
    let mut received = 0;
    while let Some(data) = within("the body", body.data()).await {
        let data = data.unwrap();
        received += data.len();
        let _ = body.flow_control().release_capacity(data.len());
    }
    assert_eq!(received, 1000);
    // GOAWAY with no error, then the end of the connection.
    within("the idle connection to be shut down", connection)
        .await
        .unwrap()
        .unwrap();
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_client_connections_closed_total",
            &[("reason", "idle_timeout")]
        ),
        1.0
    );
    eventually("the connection to be counted closed", || async {
        proxy
            .metrics()
            .await
            .sum("tidegate_client_connections", &[])
            == 0.0
    })
    .await;
    assert_eq!(ledgers_agree(&proxy, "a").await["ok"], 1.0);
}

/// A client that opens a stream and then goes silent, answering nothing (as one gone without
/// closing its socket): after the keep-alive interval it gets a PING, and without an answer
/// within the write timeout its connection is closed; the request is counted once, when the
/// upstream answers.
#[tokio::test]
async fn a_client_that_does_not_answer_a_ping_loses_its_connection() {
    let origin = Origin::start("a").await;
    let mut config = config(&[&origin]);
    config.connections.http2_keep_alive_interval = Nanos::from_millis(200);
    config.connections.write_timeout = Nanos::from_millis(200);
    let proxy = TestProxy::start(config).await;
    let mut stream = TcpStream::connect(proxy.addr).await.unwrap();
    stream
        .write_all(&preface_and_get("/hold", END_HEADERS | END_STREAM))
        .await
        .unwrap();
    origin.wait_held(1).await;
    // Read everything (the proxy's SETTINGS, its PING), answer nothing, until closed.
    let mut pinged = false;
    while until_frame(&mut stream, &[PING]).await.is_some() {
        pinged = true;
    }
    assert!(pinged, "closed without a PING");
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum(
            "tidegate_client_connections_closed_total",
            &[("reason", "ping_timeout")]
        ),
        1.0
    );
    origin.release(1);
    eventually("the request to be counted", || async {
        proxy.gate("a").await["inflight"] == 0
    })
    .await;
    let counts = ledgers_agree(&proxy, "a").await;
    assert_eq!(counts.values().sum::<f64>(), 1.0, "{counts:?}");
    served_alongside(&proxy).await;
}

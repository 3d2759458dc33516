//! Long-lived streams over loopback: a WebSocket echo through the proxy while a flood is shed,
//! event streams that do not starve short requests nor drag the limit down, the stream cap,
//! and an HTTP/2 bidirectional stream passed through unbuffered.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use futures_util::{SinkExt, StreamExt};
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::{Config, UpstreamConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::{WebSocketStream, client_async};

const UPSTREAM: &str = "s";

struct State {
    /// The senders of the open `/events` and `/download` bodies, in order of arrival.
    feeds: Mutex<Vec<mpsc::Sender<Bytes>>>,
    opened: watch::Sender<usize>,
    held: watch::Sender<usize>,
    release: Semaphore,
}

/// An origin (HTTP/1.1 and h2c) with:
/// - `/ws`: a WebSocket echo;
/// - `/events` (`text/event-stream`) and `/download` (`text/plain`): a body fed by
///   [`StreamOrigin::feed`], ending when [`StreamOrigin::close_feeds`] drops its sender;
/// - `/bidi` (`application/grpc`): the request body echoed frame by frame;
/// - `/hold`: answers once [`StreamOrigin::release`]d;
/// - anything else: `200 ok` at once.
struct StreamOrigin {
    addr: SocketAddr,
    state: Arc<State>,
    task: JoinHandle<()>,
}

type OriginBody = BoxBody<Bytes, hyper::Error>;

impl StreamOrigin {
    async fn start() -> StreamOrigin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            feeds: Mutex::new(Vec::new()),
            opened: watch::Sender::new(0),
            held: watch::Sender::new(0),
            release: Semaphore::new(0),
        });
        let task = accept_each(listener, {
            let state = state.clone();
            move |stream| {
                let state = state.clone();
                async move {
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(serve(state, request).await) }
                    });
                    let builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    let _ = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
        StreamOrigin { addr, state, task }
    }

    fn config(&self) -> Config {
        Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            admin: "127.0.0.1:0".parse().unwrap(),
            upstreams: vec![UpstreamConfig {
                url: format!("http://{}", self.addr),
                name: Some(UPSTREAM.to_owned()),
                mode: None,
            }],
            ..Config::default()
        }
    }

    /// Waits until `n` bodies have been opened in all.
    async fn wait_opened(&self, n: usize) {
        let mut opened = self.state.opened.subscribe();
        within(&format!("{n} streams opened"), opened.wait_for(|o| *o >= n))
            .await
            .unwrap();
    }

    async fn feed(&self, stream: usize, data: &'static str) {
        let sender = self.state.feeds.lock().unwrap()[stream].clone();
        sender
            .send(Bytes::from_static(data.as_bytes()))
            .await
            .unwrap();
    }

    /// Ends every body fed so far.
    fn close_feeds(&self) {
        self.state.feeds.lock().unwrap().clear();
    }

    async fn wait_held(&self, n: usize) {
        let mut held = self.state.held.subscribe();
        within(&format!("{n} held"), held.wait_for(|h| *h == n))
            .await
            .unwrap();
    }

    fn release(&self, n: usize) {
        self.state.release.add_permits(n);
    }
}

impl Drop for StreamOrigin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn text(body: &'static str) -> OriginBody {
    Full::new(Bytes::from_static(body.as_bytes()))
        .map_err(|never| match never {})
        .boxed()
}

async fn serve(state: Arc<State>, mut request: Request<Incoming>) -> Response<OriginBody> {
    let mut response = Response::new(text("ok"));
    match request.uri().path() {
        "/ws" => {
            let key = request.headers()["sec-websocket-key"].as_bytes().to_vec();
            let upgrade = hyper::upgrade::on(&mut request);
            tokio::spawn(async move {
                let upgraded = upgrade.await.unwrap();
                let mut ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                while let Some(Ok(message)) = ws.next().await {
                    if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err()
                    {
                        break;
                    }
                }
            });
            *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
            *response.body_mut() = Empty::new().map_err(|never| match never {}).boxed();
            let headers = response.headers_mut();
            headers.insert("upgrade", "websocket".parse().unwrap());
            headers.insert("connection", "upgrade".parse().unwrap());
            headers.insert(
                "sec-websocket-accept",
                derive_accept_key(&key).parse().unwrap(),
            );
        }
        path @ ("/events" | "/download") => {
            let (tx, rx) = mpsc::channel(16);
            state.feeds.lock().unwrap().push(tx);
            let content_type = if path == "/events" {
                "text/event-stream"
            } else {
                "text/plain"
            };
            response
                .headers_mut()
                .insert("content-type", content_type.parse().unwrap());
            *response.body_mut() = ChannelBody(rx).map_err(|never| match never {}).boxed();
            state.opened.send_modify(|o| *o += 1);
        }
        "/bidi" => {
            response
                .headers_mut()
                .insert("content-type", "application/grpc".parse().unwrap());
            *response.body_mut() = request.into_body().boxed();
        }
        "/hold" => {
            state.held.send_modify(|h| *h += 1);
            state.release.acquire().await.unwrap().forget();
            state.held.send_modify(|h| *h -= 1);
        }
        _ => {}
    }
    response
}

/// A gate that admits `limit` at once and queues nothing, with no regulator: overload is
/// exact and immediate.
fn fixed(mut config: Config, limit: u32) -> Config {
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
    config.gate.limit.fixed.limit = limit;
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config.gate.queue.capacity = 0;
    config
}

async fn websocket(proxy: &TestProxy) -> Result<WebSocketStream<TcpStream>, StatusCode> {
    let tcp = TcpStream::connect(proxy.addr).await.unwrap();
    let url = format!("ws://{}/ws", proxy.addr);
    match within("a WebSocket handshake", client_async(url, tcp)).await {
        Ok((ws, response)) => {
            assert_eq!(response.headers()["via"], "1.1 tidegate");
            Ok(ws)
        }
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => Err(response.status()),
        Err(other) => panic!("the handshake failed: {other}"),
    }
}

async fn echo(ws: &mut WebSocketStream<TcpStream>, text: &str) {
    ws.send(Message::text(text)).await.unwrap();
    let echoed = within("an echo", ws.next()).await.unwrap().unwrap();
    assert_eq!(echoed.into_text().unwrap().as_str(), text);
}

/// An event stream through the proxy: its response with the body still open.
async fn open_events(proxy: &TestProxy) -> Response<Incoming> {
    let request = Request::get(proxy.url("/events"))
        .header("accept", "text/event-stream")
        .body(empty())
        .unwrap();
    within("an event stream's headers", client().request(request))
        .await
        .unwrap()
}

async fn next_data(body: &mut Incoming) -> Bytes {
    loop {
        let frame = within("an event", body.frame()).await.unwrap().unwrap();
        if let Ok(data) = frame.into_data() {
            return data;
        }
    }
}

async fn streams_total(proxy: &TestProxy, outcome: &str) -> f64 {
    proxy.metrics().await.sum(
        "tidegate_streams_total",
        &[("upstream", UPSTREAM), ("outcome", outcome)],
    )
}

/// Waits until `n` streams have closed in good order in all, then checks none is open.
async fn closed(proxy: &TestProxy, n: f64) {
    eventually(&format!("{n} streams counted closed"), || async {
        streams_total(proxy, "closed").await == n
    })
    .await;
    assert_eq!(streams_open(proxy).await, 0.0);
}

/// Reads a response's body to its end, which must be in good order.
async fn ends_well(response: &mut Response<Incoming>) {
    let end = within("the stream's end", response.body_mut().collect()).await;
    assert!(end.is_ok(), "the stream ended in good order");
}

async fn streams_open(proxy: &TestProxy) -> f64 {
    proxy
        .metrics()
        .await
        .sum("tidegate_streams_open", &[("upstream", UPSTREAM)])
}

#[tokio::test]
async fn a_websocket_echoes_through_the_proxy_while_a_flood_of_short_requests_is_shed() {
    let origin = StreamOrigin::start().await;
    let proxy = TestProxy::start(fixed(origin.config(), 2)).await;
    let mut ws = websocket(&proxy).await.expect("the upgrade is admitted");
    echo(&mut ws, "before").await;
    // Both slots taken by held requests: the open WebSocket holds none.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let url = proxy.url("/hold");
            tokio::spawn(async move { get(&url).await })
        })
        .collect();
    origin.wait_held(2).await;

    let flood: Vec<_> = (0..200)
        .map(|_| {
            let url = proxy.url("/short");
            tokio::spawn(async move { get(&url).await.status() })
        })
        .collect();
    for i in 0..20 {
        echo(&mut ws, &format!("during {i}")).await;
    }
    // A new upgrade goes through the gate like any request: shed.
    assert_eq!(
        websocket(&proxy).await.err(),
        Some(StatusCode::SERVICE_UNAVAILABLE)
    );
    for status in flood {
        assert_eq!(
            within("a flood request", status).await.unwrap(),
            StatusCode::SERVICE_UNAVAILABLE
        );
    }
    echo(&mut ws, "after").await;
    assert_eq!(streams_open(&proxy).await, 1.0);

    origin.release(2);
    for response in held {
        assert_eq!(
            within("a held answer", response).await.unwrap().status(),
            StatusCode::OK
        );
    }
    ws.close(None).await.unwrap();
    while let Some(Ok(_)) = within("the close", ws.next()).await {}
    drop(ws);
    closed(&proxy, 1.0).await;
    let classes = ledgers_agree(&proxy, UPSTREAM).await;
    // The upgrade and the two held requests; the flood and the second upgrade shed.
    assert_eq!(classes["ok"], 3.0);
    assert_eq!(classes["shed"], 201.0);
}

#[tokio::test]
async fn open_event_streams_do_not_starve_short_requests_of_the_limit() {
    let origin = StreamOrigin::start().await;
    let proxy = TestProxy::start(fixed(origin.config(), 2)).await;
    let mut streams = Vec::new();
    for i in 0..5 {
        let mut response = open_events(&proxy).await;
        assert_eq!(response.status(), StatusCode::OK);
        origin.wait_opened(i + 1).await;
        origin.feed(i, "data: hello\n\n").await;
        assert_eq!(next_data(response.body_mut()).await, "data: hello\n\n");
        streams.push(response);
    }
    // Five streams open on a limit of 2, and short requests still pass, one after another.
    assert_eq!(proxy.gate(UPSTREAM).await["inflight"], 0);
    for _ in 0..20 {
        assert_eq!(get(&proxy.url("/short")).await.status(), StatusCode::OK);
    }
    assert_eq!(streams_open(&proxy).await, 5.0);
    let status = proxy.status().await;
    assert_eq!(status["upstreams"][0]["streams"]["open"], 5);

    origin.close_feeds();
    for mut response in streams {
        ends_well(&mut response).await;
    }
    closed(&proxy, 5.0).await;
    let classes = ledgers_agree(&proxy, UPSTREAM).await;
    assert_eq!(classes["ok"], 25.0);
    assert_eq!(classes["shed"], 0.0);
}

#[tokio::test]
async fn the_stream_cap_refuses_the_stream_past_it_with_a_counted_outcome() {
    let origin = StreamOrigin::start().await;
    let mut config = origin.config();
    config.streams.max_per_upstream = 2;
    let proxy = TestProxy::start(config).await;
    let mut open = Vec::new();
    for _ in 0..2 {
        open.push(open_events(&proxy).await);
    }
    let refused = send(
        &client(),
        Request::get(proxy.url("/events"))
            .header("accept", "text/event-stream")
            .body(empty())
            .unwrap(),
    )
    .await;
    assert_eq!(refused.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(refused.headers()["tidegate-shed"], "streams");
    assert_eq!(refused.headers()["retry-after"], "1");
    // Refused before the upstream: it saw two streams only.
    assert_eq!(*origin.state.opened.borrow(), 2);
    assert_eq!(streams_total(&proxy, "refused").await, 1.0);
    // Short requests are no streams: the cap does not touch them.
    assert_eq!(get(&proxy.url("/short")).await.status(), StatusCode::OK);
    // A WebSocket is a stream too.
    assert_eq!(
        websocket(&proxy).await.err(),
        Some(StatusCode::SERVICE_UNAVAILABLE)
    );
    assert_eq!(streams_total(&proxy, "refused").await, 2.0);

    // Streams that end give their places to the next.
    origin.close_feeds();
    for mut response in open {
        ends_well(&mut response).await;
    }
    eventually("places free", || async {
        streams_open(&proxy).await == 0.0
    })
    .await;
    let mut ws = websocket(&proxy).await.expect("room again");
    echo(&mut ws, "in").await;
    drop(ws);
    eventually("every stream ended", || async {
        streams_open(&proxy).await == 0.0
    })
    .await;
    let classes = ledgers_agree(&proxy, UPSTREAM).await;
    assert_eq!(classes["shed"], 2.0, "the refused streams");
    assert_eq!(classes["ok"], 4.0);
}

/// An AIMD limit of 10 that halves on a drop, and counts an answer slower than 100 ms as one.
fn aimd(mut config: Config) -> Config {
    config.gate.limit = LimitConfig::of(LimitAlgorithm::Aimd);
    let aimd = &mut config.gate.limit.aimd;
    aimd.initial_limit = 10;
    aimd.min_limit = 1;
    aimd.max_limit = 10;
    aimd.backoff_ratio = 0.5;
    aimd.timeout = Nanos::from_millis(100);
    config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
    config
}

/// Feeds `stream` five chunks 60 ms apart (a body open for 300 ms, three times the limit's
/// timeout), reading each at the client as it comes, then ends it.
async fn trickle(origin: &StreamOrigin, stream: usize, response: &mut Response<Incoming>) {
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        origin.feed(stream, "data: tick\n\n").await;
        assert_eq!(next_data(response.body_mut()).await, "data: tick\n\n");
    }
    origin.close_feeds();
    ends_well(response).await;
}

#[tokio::test]
async fn a_long_stream_does_not_drag_the_limit_down_where_a_slow_body_does() {
    let origin = StreamOrigin::start().await;
    let proxy = TestProxy::start(aimd(origin.config())).await;
    let mut events = open_events(&proxy).await;
    origin.wait_opened(1).await;
    trickle(&origin, 0, &mut events).await;
    closed(&proxy, 1.0).await;
    assert_eq!(
        proxy.gate(UPSTREAM).await["limit"],
        10,
        "sampled at its headers"
    );
    let metrics = proxy.metrics().await;
    let seconds = metrics.sum(
        "tidegate_request_duration_seconds_sum",
        &[("upstream", UPSTREAM), ("class", "ok")],
    );
    assert!(seconds < 0.1, "timed to its headers: {seconds} s");
    assert_eq!(
        metrics.sum(
            "tidegate_stream_duration_seconds_count",
            &[("upstream", UPSTREAM)]
        ),
        1.0
    );
    assert!(
        metrics.sum(
            "tidegate_stream_duration_seconds_sum",
            &[("upstream", UPSTREAM)]
        ) >= 0.3
    );

    // The same shape as an ordinary response is a request 300 ms slow: a drop, the limit halves.
    let request = Request::get(proxy.url("/download")).body(empty()).unwrap();
    let mut download = within("the download's headers", client().request(request))
        .await
        .unwrap();
    origin.wait_opened(2).await;
    trickle(&origin, 0, &mut download).await;
    eventually("the slow body's sample", || async {
        proxy.gate(UPSTREAM).await["limit"] == 5
    })
    .await;
    ledgers_agree(&proxy, UPSTREAM).await;
}

#[tokio::test]
async fn an_http2_bidirectional_stream_passes_each_message_before_the_next_is_sent() {
    let origin = StreamOrigin::start().await;
    let mut config = fixed(origin.config(), 1);
    config.client.http2 = true;
    config
        .streams
        .content_types
        .push("application/grpc".to_owned());
    let proxy = TestProxy::start(config).await;
    let (tx, rx) = mpsc::channel::<Bytes>(1);
    let request = Request::post(proxy.url("/bidi"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(ChannelBody(rx).boxed())
        .unwrap();
    let client = h2c_client();
    let answer = tokio::spawn(async move { client.request(request).await });
    tx.send(Bytes::from_static(b"one")).await.unwrap();
    let mut response = within("the stream's headers", answer)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(response.version(), http::Version::HTTP_2);
    assert_eq!(next_data(response.body_mut()).await, "one");
    // The stream left the limit of 1 at its headers: a short request passes meanwhile.
    let short = send(
        &h2c_client(),
        Request::get(proxy.url("/short")).body(empty()).unwrap(),
    )
    .await;
    assert_eq!(short.status(), StatusCode::OK);
    for message in ["two", "three"] {
        tx.send(Bytes::from_static(message.as_bytes()))
            .await
            .unwrap();
        assert_eq!(next_data(response.body_mut()).await, message);
    }
    drop(tx);
    ends_well(&mut response).await;
    closed(&proxy, 1.0).await;
    let classes = ledgers_agree(&proxy, UPSTREAM).await;
    assert_eq!(classes["ok"], 2.0);
}

#[tokio::test]
async fn an_open_websocket_is_cut_at_the_drain_timeout_and_counted() {
    let origin = StreamOrigin::start().await;
    let mut config = origin.config();
    config.server.drain_timeout = Nanos::from_millis(200);
    let mut proxy = TestProxy::start(config).await;
    let mut ws = websocket(&proxy).await.unwrap();
    echo(&mut ws, "hello").await;
    // Handed over by hyper, the connection still counts as a client connection.
    let metrics = proxy.metrics().await;
    assert_eq!(metrics.sum("tidegate_client_connections", &[]), 1.0);
    proxy.shutdown();
    let drained = proxy.stopped().await;
    assert_eq!(drained.cut, 1, "the tunnel, cut");
    // The client sees its connection end.
    while let Some(Ok(_)) = within("the cut", ws.next()).await {}
}

#[tokio::test]
async fn a_silent_stream_outlives_the_read_timeout_and_ends_at_the_idle_timeout() {
    let origin = StreamOrigin::start().await;
    let mut config = origin.config();
    config.client.read_timeout = Nanos::from_millis(20);
    config.streams.idle_timeout = Nanos::from_secs(1);
    let proxy = TestProxy::start(config).await;
    let mut events = open_events(&proxy).await;
    origin.wait_opened(1).await;
    // Silent for more than the read timeout between two events: still open.
    tokio::time::sleep(Duration::from_millis(100)).await;
    origin.feed(0, "data: late\n\n").await;
    assert_eq!(next_data(events.body_mut()).await, "data: late\n\n");
    // Then silent past the idle timeout: closed, and counted so.
    let end = within("the idle timeout", events.body_mut().collect()).await;
    assert!(end.is_err(), "cut short, not ended in good order");
    assert_eq!(streams_total(&proxy, "idle").await, 1.0);
    assert_eq!(streams_open(&proxy).await, 0.0);
    let metrics = proxy.metrics().await;
    assert_eq!(
        metrics.sum("tidegate_upstream_errors_total", &[("upstream", UPSTREAM)]),
        0.0,
        "an idle stream is not the upstream's failure"
    );
    ledgers_agree(&proxy, UPSTREAM).await;
}

#[tokio::test]
async fn a_stream_seen_only_on_its_response_past_the_cap_is_served_as_an_ordinary_request() {
    let origin = StreamOrigin::start().await;
    let mut config = fixed(origin.config(), 2);
    config.streams.max_per_upstream = 1;
    let proxy = TestProxy::start(config).await;
    let mut first = open_events(&proxy).await;
    origin.wait_opened(1).await;
    // No `Accept: text/event-stream`: a stream only by its response's content type, with the
    // cap full. Refusing it now would throw the upstream's answer away: it is served, holding
    // its slot like any request.
    let request = Request::get(proxy.url("/events")).body(empty()).unwrap();
    let mut second = within("the second stream's headers", client().request(request))
        .await
        .unwrap();
    assert_eq!(second.status(), StatusCode::OK);
    origin.wait_opened(2).await;
    origin.feed(1, "data: served\n\n").await;
    assert_eq!(next_data(second.body_mut()).await, "data: served\n\n");
    assert_eq!(streams_total(&proxy, "over_cap").await, 1.0);
    assert_eq!(proxy.gate(UPSTREAM).await["inflight"], 1, "its slot held");
    assert_eq!(streams_open(&proxy).await, 1.0);
    origin.close_feeds();
    ends_well(&mut first).await;
    ends_well(&mut second).await;
    closed(&proxy, 1.0).await;
    eventually("its slot freed at its end", || async {
        proxy.gate(UPSTREAM).await["inflight"] == 0
    })
    .await;
    let classes = ledgers_agree(&proxy, UPSTREAM).await;
    assert_eq!(classes["ok"], 2.0);
}

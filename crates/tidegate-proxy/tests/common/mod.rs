//! What the proxy's integration tests share: a tiny origin server over loopback, a proxy
//! started on port 0, an HTTP client, and readers for `/metrics` and `/status`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]
#![allow(dead_code, reason = "each test binary uses a part of the helpers")]

pub(crate) mod tls;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Method, Request, Response, StatusCode, Uri, Version};
use http_body::{Body, Frame};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tidegate_proxy::{Config, Drained, Proxy, UpstreamConfig};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;

/// Bounds every wait in the tests: generous, since the machine is shared, and never reached
/// when things work.
pub(crate) const PATIENCE: Duration = Duration::from_secs(10);

/// Awaits `future`, failing the test if it takes longer than [`PATIENCE`].
pub(crate) async fn within<F: Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(PATIENCE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {what}"))
}

/// Polls `check` until it holds (a state the proxy reaches on its own, seen from outside),
/// failing the test after [`PATIENCE`].
pub(crate) async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    within(what, async {
        while !check().await {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

/// A request the origin received.
#[derive(Clone, Debug)]
pub(crate) struct Seen {
    pub(crate) method: Method,
    pub(crate) uri: Uri,
    pub(crate) version: Version,
    pub(crate) headers: HeaderMap,
}

struct OriginState {
    name: String,
    seen: Mutex<Vec<Seen>>,
    /// Requests being held now (`/hold`), dropped ones excluded.
    held: watch::Sender<usize>,
    release: Semaphore,
    served: AtomicUsize,
    /// Connections accepted.
    connections: AtomicUsize,
    downloads: Mutex<Option<mpsc::Receiver<Bytes>>>,
    uploads: mpsc::UnboundedSender<Bytes>,
}

/// A small HTTP/1.1 + h2c server with endpoints for each behaviour under test:
///
/// - `/echo`: the request's body back, streamed;
/// - `/status/NNN`: that status;
/// - `/hold` and `/hold-if/NAME`: wait for [`Origin::release`] (the latter only on the origin
///   named NAME);
/// - `/lease-if/NAME/N`: a `tidegate-lease: allowed=N, ttl=10s` header from the origin
///   named NAME;
/// - `/hop`: hop-by-hop headers in the response;
/// - `/download`: a body fed by [`Origin::download`], chunk by chunk;
/// - `/upload`: reports each received chunk to [`Origin::uploaded`] as it arrives;
/// - `/big?N`: N bytes.
pub(crate) struct Origin {
    pub(crate) addr: SocketAddr,
    state: Arc<OriginState>,
    uploads: tokio::sync::Mutex<mpsc::UnboundedReceiver<Bytes>>,
    task: JoinHandle<()>,
}

impl Origin {
    pub(crate) async fn start(name: &str) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Origin::serve(name, listener)
    }

    pub(crate) fn serve(name: &str, listener: TcpListener) -> Origin {
        Origin::serve_with(name, listener, true)
    }

    /// An origin that closes each HTTP/1.1 connection after one exchange.
    pub(crate) async fn start_without_keep_alive(name: &str) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Origin::serve_with(name, listener, false)
    }

    fn serve_with(name: &str, listener: TcpListener, keep_alive: bool) -> Origin {
        let addr = listener.local_addr().unwrap();
        let (uploads_tx, uploads_rx) = mpsc::unbounded_channel();
        let state = Arc::new(OriginState {
            name: name.to_owned(),
            seen: Mutex::new(Vec::new()),
            held: watch::Sender::new(0),
            release: Semaphore::new(0),
            served: AtomicUsize::new(0),
            connections: AtomicUsize::new(0),
            downloads: Mutex::new(None),
            uploads: uploads_tx,
        });
        let task = accept_each(listener, {
            let state = state.clone();
            move |stream| {
                state.connections.fetch_add(1, Ordering::SeqCst);
                let state = state.clone();
                async move {
                    let service = service_fn(move |request| {
                        let state = state.clone();
                        async move { Ok::<_, Infallible>(origin(state, request).await) }
                    });
                    let mut builder =
                        hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                    builder.http1().keep_alive(keep_alive);
                    let _ = builder
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                }
            }
        });
        Origin {
            addr,
            state,
            uploads: tokio::sync::Mutex::new(uploads_rx),
            task,
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn name(&self) -> &str {
        &self.state.name
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    pub(crate) fn last_seen(&self) -> Seen {
        self.seen().pop().expect("the origin saw a request")
    }

    /// Requests answered (held ones once released).
    pub(crate) fn served(&self) -> usize {
        self.state.served.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub(crate) fn connections(&self) -> usize {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Requests held now.
    pub(crate) fn held(&self) -> usize {
        *self.state.held.borrow()
    }

    /// Waits until `n` requests are held at once.
    pub(crate) async fn wait_held(&self, n: usize) {
        let mut held = self.state.held.subscribe();
        within(&format!("{n} held requests"), held.wait_for(|h| *h == n))
            .await
            .unwrap();
    }

    /// Lets `n` held requests answer.
    pub(crate) fn release(&self, n: usize) {
        self.state.release.add_permits(n);
    }

    /// The next `/download` streams what is sent on the returned channel, ending when it is
    /// dropped.
    pub(crate) fn download(&self) -> mpsc::Sender<Bytes> {
        let (tx, rx) = mpsc::channel(1);
        *self.state.downloads.lock().unwrap() = Some(rx);
        tx
    }

    /// The next chunk an `/upload` received.
    pub(crate) async fn uploaded(&self) -> Bytes {
        within("an uploaded chunk", self.uploads.lock().await.recv())
            .await
            .unwrap()
    }
}

impl Drop for Origin {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Decrements the held count however the handler ends (answered or dropped).
struct Holding(Arc<OriginState>);

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.held.send_modify(|h| *h -= 1);
    }
}

type OriginBody = BoxBody<Bytes, hyper::Error>;

fn full(text: impl Into<Bytes>) -> OriginBody {
    Full::new(text.into())
        .map_err(|never| match never {})
        .boxed()
}

async fn origin(state: Arc<OriginState>, request: Request<Incoming>) -> Response<OriginBody> {
    state.seen.lock().unwrap().push(Seen {
        method: request.method().clone(),
        uri: request.uri().clone(),
        version: request.version(),
        headers: request.headers().clone(),
    });
    let path = request.uri().path().to_owned();
    let mut response = Response::new(full(""));
    response
        .headers_mut()
        .insert("x-origin", state.name.parse().unwrap());
    let hold = path == "/hold" || path.strip_prefix("/hold-if/") == Some(state.name.as_str());
    if hold {
        state.held.send_modify(|h| *h += 1);
        let _holding = Holding(state.clone());
        state.release.acquire().await.unwrap().forget();
        *response.body_mut() = full("released");
    } else if path == "/echo" {
        *response.body_mut() = request.into_body().boxed();
    } else if let Some(code) = path.strip_prefix("/status/") {
        *response.status_mut() = StatusCode::from_u16(code.parse().unwrap()).unwrap();
        *response.body_mut() = full("status");
    } else if let Some(rest) = path.strip_prefix("/lease-if/") {
        let (name, allowed) = rest.split_once('/').unwrap();
        if name == state.name {
            let lease = format!("allowed={allowed}, ttl=10s");
            response
                .headers_mut()
                .insert("tidegate-lease", lease.parse().unwrap());
        }
    } else if let Some(rest) = path.strip_prefix("/cutoff/") {
        // Refused, with `tidegate-cutoff: rank=RANK, ttl=TTL` from `/cutoff/RANK/TTL`.
        let (rank, ttl) = rest.split_once('/').unwrap();
        *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
        let cutoff = format!("rank={rank}, ttl={ttl}");
        response
            .headers_mut()
            .insert("tidegate-cutoff", cutoff.parse().unwrap());
    } else if let Some(rest) = path.strip_prefix("/peers/") {
        // What a `PeerBoardLayer` would say of two proxies: `/peers/LIMIT`, or
        // `/peers/LIMIT/LINE_A/LINE_B` with their mean line, the first from the origin named
        // `a`, the second from any other.
        let mut parts = rest.split('/');
        let limit = parts.next().unwrap_or_default();
        let mut mean = format!("limit={limit}, ratio=0.5, peers=2");
        if let (Some(a), Some(b)) = (parts.next(), parts.next()) {
            let line = if state.name == "a" { a } else { b };
            mean.push_str(&format!(", line={line}"));
        }
        response
            .headers_mut()
            .insert("tidegate-peers", mean.parse().unwrap());
    } else if path == "/hop" {
        let headers = response.headers_mut();
        headers.insert("connection", "x-hop".parse().unwrap());
        headers.insert("x-hop", "1".parse().unwrap());
        headers.insert("keep-alive", "timeout=5".parse().unwrap());
        headers.insert("x-kept", "1".parse().unwrap());
    } else if path == "/download" {
        let rx = state
            .downloads
            .lock()
            .unwrap()
            .take()
            .expect("download set up");
        *response.body_mut() = ChannelBody(rx).map_err(|never| match never {}).boxed();
    } else if path == "/upload" {
        let mut body = request.into_body();
        let mut total = 0;
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Ok(data) = frame.into_data() {
                total += data.len();
                let _ = state.uploads.send(data);
            }
        }
        *response.body_mut() = full(total.to_string());
    } else if path == "/big" {
        let n: usize = request.uri().query().unwrap().parse().unwrap();
        *response.body_mut() = full(pattern(n));
    }
    state.served.fetch_add(1, Ordering::SeqCst);
    response
}

/// `n` bytes of a recognisable pattern.
pub(crate) fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// A body fed from a channel: each message a frame, the end when the sender is dropped.
pub(crate) struct ChannelBody(pub(crate) mpsc::Receiver<Bytes>);

impl Body for ChannelBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|data| Ok(Frame::data(data))))
    }
}

/// A proxy running in the test's runtime.
pub(crate) struct TestProxy {
    pub(crate) addr: SocketAddr,
    pub(crate) admin: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<JoinHandle<Drained>>,
}

/// A configuration for the tests: both listeners on a free loopback port, the given
/// upstreams, and short timeouts.
pub(crate) fn config(upstreams: &[&Origin]) -> Config {
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        ..Config::default()
    };
    config.upstreams = upstreams
        .iter()
        .map(|origin| UpstreamConfig {
            url: origin.url(),
            name: Some(origin.name().to_owned()),
            mode: None,
        })
        .collect();
    config
}

impl TestProxy {
    pub(crate) async fn start(config: Config) -> TestProxy {
        TestProxy::start_with(config, |_| {}).await
    }

    /// As [`TestProxy::start`], with `prepare` given the bound proxy before it runs.
    pub(crate) async fn start_with(config: Config, prepare: impl FnOnce(&Proxy)) -> TestProxy {
        let proxy = Proxy::bind(config).await.expect("the proxy starts");
        prepare(&proxy);
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let addr = proxy.local_addr();
        let admin = proxy.admin_addr();
        let task = tokio::spawn(proxy.run(async {
            let _ = stopped.await;
        }));
        TestProxy {
            addr,
            admin,
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Starts the drain; [`TestProxy::stopped`] waits for its end.
    pub(crate) fn shutdown(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }

    pub(crate) async fn stopped(&mut self) -> Drained {
        let task = self.task.take().expect("running");
        within("the proxy to stop", task).await.unwrap()
    }

    pub(crate) async fn status(&self) -> serde_json::Value {
        let (status, body) = get_text(&format!("http://{}/status", self.admin)).await;
        assert_eq!(status, StatusCode::OK);
        serde_json::from_str(&body).unwrap()
    }

    /// The gate named `gate` in `/status`.
    pub(crate) async fn gate(&self, gate: &str) -> serde_json::Value {
        let status = self.status().await;
        for upstream in status["upstreams"].as_array().unwrap() {
            for g in upstream["gates"].as_array().unwrap() {
                if g["gate"] == gate {
                    return g.clone();
                }
            }
        }
        panic!("no gate {gate} in {status}")
    }

    pub(crate) async fn metrics(&self) -> Metrics {
        let (status, body) = get_text(&format!("http://{}/metrics", self.admin)).await;
        assert_eq!(status, StatusCode::OK);
        Metrics::parse(&body)
    }
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

pub(crate) type TestBody = BoxBody<Bytes, Infallible>;

/// An HTTP/1.1 client with a keep-alive pool.
pub(crate) fn client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new()).build_http()
}

/// An h2c (HTTP/2 prior knowledge) client.
pub(crate) fn h2c_client() -> Client<HttpConnector, TestBody> {
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub(crate) fn empty() -> TestBody {
    Empty::new().boxed()
}

/// A `GET` of `url` with `tidegate-priority: PRIORITY`.
pub(crate) fn get_at(url: String, priority: &str) -> Request<TestBody> {
    Request::get(url)
        .header("tidegate-priority", priority)
        .body(empty())
        .unwrap()
}

pub(crate) fn body(bytes: impl Into<Bytes>) -> TestBody {
    Full::new(bytes.into()).boxed()
}

/// Sends `request` and reads the whole answer.
pub(crate) async fn send(
    client: &Client<HttpConnector, TestBody>,
    request: Request<TestBody>,
) -> Response<Bytes> {
    let response = within("a response", client.request(request))
        .await
        .expect("the proxy answers");
    let (parts, body) = response.into_parts();
    let bytes = within("a response body", body.collect())
        .await
        .expect("the body arrives")
        .to_bytes();
    Response::from_parts(parts, bytes)
}

pub(crate) async fn get(url: &str) -> Response<Bytes> {
    let request = Request::get(url).body(empty()).unwrap();
    send(&client(), request).await
}

pub(crate) async fn get_text(url: &str) -> (StatusCode, String) {
    let response = get(url).await;
    let status = response.status();
    (
        status,
        String::from_utf8(response.into_body().to_vec()).unwrap(),
    )
}

/// One request, one outcome (issue 14, finding 5): the two ledgers agree for upstream `name`: the duration histogram's classes and the gate's
/// `tidegate_requests_total` outcomes count the same requests the same way. Returns the
/// histogram's count by class.
pub(crate) async fn ledgers_agree(proxy: &TestProxy, name: &str) -> BTreeMap<String, f64> {
    let metrics = proxy.metrics().await;
    let class = |class: &str| {
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", name), ("class", class)],
        )
    };
    let outcome = |outcome: &str| {
        metrics.sum(
            "tidegate_requests_total",
            &[("gate", name), ("outcome", outcome)],
        )
    };
    let pairs = [
        ("ok", class("ok"), outcome("ok")),
        ("dropped", class("dropped"), outcome("dropped")),
        (
            "ignored",
            class("ignored") + class("client_error"),
            outcome("ignored"),
        ),
        (
            "cancelled",
            class("cancelled"),
            outcome("cancelled_queued") + outcome("cancelled_inflight"),
        ),
        (
            "shed",
            class("shed"),
            outcome("rejected_regulator")
                + outcome("rejected_queue_full")
                + outcome("rejected_no_lease")
                + outcome("expired")
                // Streams refused at their cap, before the gate.
                + metrics.sum(
                    "tidegate_streams_total",
                    &[("upstream", name), ("outcome", "refused")],
                ),
        ),
    ];
    for (what, histogram, requests) in pairs {
        assert_eq!(
            histogram, requests,
            "{what}: the duration histogram and tidegate_requests_total disagree"
        );
    }
    [
        "ok",
        "dropped",
        "ignored",
        "cancelled",
        "shed",
        "client_error",
    ]
    .into_iter()
    .map(|c| (c.to_owned(), class(c)))
    .collect()
}

/// A parsed Prometheus text exposition: every sample line must parse.
#[derive(Debug)]
pub(crate) struct Metrics {
    pub(crate) samples: Vec<(String, BTreeMap<String, String>, f64)>,
    pub(crate) types: BTreeMap<String, String>,
}

impl Metrics {
    pub(crate) fn parse(text: &str) -> Metrics {
        let mut samples = Vec::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                types.insert(name.to_owned(), kind.to_owned());
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').expect("a sample: series value");
            let value: f64 = match value {
                "+Inf" => f64::INFINITY,
                "-Inf" => f64::NEG_INFINITY,
                v => v
                    .parse()
                    .unwrap_or_else(|_| panic!("bad value in {line:?}")),
            };
            let (name, labels) = match series.split_once('{') {
                None => (series.to_owned(), BTreeMap::new()),
                Some((name, rest)) => {
                    let inner = rest.strip_suffix('}').expect("labels end with }");
                    let labels = inner
                        .split("\",")
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair.split_once("=\"").expect("key=\"value\"");
                            (key.to_owned(), value.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
            };
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                "bad metric name in {line:?}"
            );
            samples.push((name, labels, value));
        }
        Metrics { samples, types }
    }

    /// The value of the series `name` with (at least) `labels`, summed over the others.
    pub(crate) fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| v)
            .sum()
    }

    pub(crate) fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|(n, _, _)| n == name)
    }
}

/// A free loopback port with nothing listening on it.
pub(crate) async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// Accepts connections on `listener` until the returned task is aborted, each served by
/// the future `on_connection` makes of it, on a task of its own: every test origin's loop.
pub(crate) fn accept_each<F, Fut>(listener: TcpListener, on_connection: F) -> JoinHandle<()>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            tokio::spawn(on_connection(stream));
        }
    })
}

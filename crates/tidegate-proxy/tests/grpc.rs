//! gRPC through the proxy with a real gRPC client and server (tonic, messages written by
//! hand with prost): shed calls get RESOURCE_EXHAUSTED with a pushback (over h2c and over
//! TLS), calls with no upstream get UNAVAILABLE, and the upstream's own statuses teach the
//! limit what they mean (RESOURCE_EXHAUSTED and UNAVAILABLE a drop, others an answer).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a failure is the test's failure"
)]

mod common;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use common::tls::{Files, TestCa};
use common::*;
use http::uri::PathAndQuery;
use tidegate_core::Nanos;
use tidegate_core::config::{LimitAlgorithm, LimitConfig, RegulatorAlgorithm, RegulatorConfig};
use tidegate_proxy::{Config, UpstreamConfig};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic::{Code, Status};
use tonic_prost::ProstCodec;

#[derive(Clone, PartialEq, prost::Message)]
struct Ask {
    #[prost(string, tag = "1")]
    what: String,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Answer {
    #[prost(string, tag = "1")]
    text: String,
}

/// The gRPC service behind the proxy, `test.Gate`:
///
/// - `Hold`: answers once released ([`GateServer::release`]);
/// - `Fail`: answers the status whose code is `what` (`"0"`: a message);
/// - `Stream`: streams one message, then ends with the status whose code is `what`, in the
///   trailers.
#[derive(Clone)]
struct Gate {
    held: watch::Sender<usize>,
    release: Arc<Semaphore>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

fn status(what: &str) -> Option<Status> {
    match what.parse::<i32>().unwrap() {
        0 => None,
        code => Some(Status::new(
            Code::from_i32(code),
            format!("upstream says {code}"),
        )),
    }
}

impl tower::Service<http::Request<tonic::body::Body>> for Gate {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = BoxFuture<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let gate = self.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Answer, Ask>::default());
            let answer = |text: &str| {
                tonic::Response::new(Answer {
                    text: text.to_owned(),
                })
            };
            Ok(match request.uri().path() {
                "/test.Gate/Hold" => {
                    let hold = tower::service_fn(move |_: tonic::Request<Ask>| {
                        let gate = gate.clone();
                        async move {
                            gate.held.send_modify(|n| *n += 1);
                            gate.release.acquire().await.unwrap().forget();
                            gate.held.send_modify(|n| *n -= 1);
                            Ok(answer("released"))
                        }
                    });
                    grpc.unary(hold, request).await
                }
                "/test.Gate/Fail" => {
                    let fail = tower::service_fn(|ask: tonic::Request<Ask>| async move {
                        match status(&ask.get_ref().what) {
                            Some(status) => Err(status),
                            None => Ok(answer("fine")),
                        }
                    });
                    grpc.unary(fail, request).await
                }
                "/test.Gate/Stream" => {
                    let stream = tower::service_fn(|ask: tonic::Request<Ask>| async move {
                        let mut items = vec![Ok(Answer {
                            text: "first".to_owned(),
                        })];
                        items.extend(status(&ask.get_ref().what).map(Err));
                        Ok::<_, Status>(tonic::Response::new(futures_util::stream::iter(items)))
                    });
                    grpc.server_streaming(stream, request).await
                }
                _ => Status::unimplemented("no such method").into_http(),
            })
        })
    }
}

impl tonic::server::NamedService for Gate {
    const NAME: &'static str = "test.Gate";
}

/// A tonic server of [`Gate`] on a loopback port.
struct GateServer {
    url: String,
    gate: Gate,
    task: tokio::task::JoinHandle<()>,
}

impl GateServer {
    async fn start() -> GateServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let gate = Gate {
            held: watch::Sender::new(0),
            release: Arc::new(Semaphore::new(0)),
        };
        let server = tonic::transport::Server::builder()
            .add_service(gate.clone())
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener));
        let task = tokio::spawn(async move {
            let _ = server.await;
        });
        GateServer { url, gate, task }
    }

    async fn wait_held(&self, n: usize) {
        let mut held = self.gate.held.subscribe();
        within("held calls", held.wait_for(|h| *h == n))
            .await
            .unwrap();
    }

    fn release(&self, n: usize) {
        self.gate.release.add_permits(n);
    }
}

impl Drop for GateServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A proxy in front of `upstream`, speaking HTTP/2 to it.
fn grpc_config(upstream: &str) -> Config {
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec![UpstreamConfig {
            url: upstream.to_owned(),
            name: Some("grpc".to_owned()),
            mode: None,
        }],
        ..Config::default()
    };
    config.client.http2 = true;
    config
}

async fn channel(endpoint: Endpoint) -> Channel {
    within("a gRPC connection", endpoint.connect())
        .await
        .unwrap()
}

/// A client on `channel`, ready for a call, and the request asking `what`.
async fn client(
    channel: &Channel,
    what: &str,
) -> (tonic::client::Grpc<Channel>, tonic::Request<Ask>) {
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.unwrap();
    let ask = tonic::Request::new(Ask {
        what: what.to_owned(),
    });
    (grpc, ask)
}

async fn call(channel: &Channel, method: &'static str, what: &str) -> Result<Answer, Status> {
    let (mut grpc, ask) = client(channel, what).await;
    let call = grpc.unary(
        ask,
        PathAndQuery::from_static(method),
        ProstCodec::<Ask, Answer>::default(),
    );
    within("a gRPC answer", call)
        .await
        .map(tonic::Response::into_inner)
}

/// The messages of a server-streaming call, then how it ended.
async fn stream(channel: &Channel, what: &str) -> (Vec<String>, Result<(), Status>) {
    let (mut grpc, ask) = client(channel, what).await;
    let call = grpc.server_streaming(
        ask,
        PathAndQuery::from_static("/test.Gate/Stream"),
        ProstCodec::<Ask, Answer>::default(),
    );
    let mut streaming = match within("a gRPC stream", call).await {
        Ok(response) => response.into_inner(),
        Err(status) => return (Vec::new(), Err(status)),
    };
    let mut texts = Vec::new();
    loop {
        match within("a streamed message", streaming.message()).await {
            Ok(Some(answer)) => texts.push(answer.text),
            Ok(None) => return (texts, Ok(())),
            Err(status) => return (texts, Err(status)),
        }
    }
}

fn pushback(status: &Status) -> u64 {
    status
        .metadata()
        .get("grpc-retry-pushback-ms")
        .unwrap_or_else(|| panic!("no pushback in {status:?}"))
        .to_str()
        .unwrap()
        .parse()
        .unwrap()
}

#[tokio::test]
async fn a_shed_call_gets_resource_exhausted_with_pushback_over_h2c_and_tls() {
    let upstream = GateServer::start().await;
    let (ca, files) = (TestCa::new(), Files::new());
    let leaf = ca.leaf(&["localhost"]);
    let (certificate, key) = files.leaf(&leaf);
    for tls in [false, true] {
        // One call at a time and no queue: the second is shed at once.
        let mut config = grpc_config(&upstream.url);
        config.gate.limit = LimitConfig::of(LimitAlgorithm::Fixed);
        config.gate.limit.fixed.limit = 1;
        config.gate.regulator = RegulatorConfig::of(RegulatorAlgorithm::Off);
        config.gate.queue.capacity = 0;
        config.server.retry_after = Nanos::from_millis(1500);
        let endpoint = if tls {
            config.tls.certificate = Some(certificate.clone());
            config.tls.key = Some(key.clone());
            let tls = ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(ca.pem()))
                .domain_name("localhost");
            let proxy = TestProxy::start(config).await;
            let url = format!("https://localhost:{}", proxy.addr.port());
            (
                proxy,
                Endpoint::from_shared(url).unwrap().tls_config(tls).unwrap(),
            )
        } else {
            let proxy = TestProxy::start(config).await;
            let url = format!("http://{}", proxy.addr);
            (proxy, Endpoint::from_shared(url).unwrap())
        };
        let (proxy, endpoint) = endpoint;
        let channel = channel(endpoint).await;

        let held = tokio::spawn({
            let channel = channel.clone();
            async move { call(&channel, "/test.Gate/Hold", "0").await }
        });
        upstream.wait_held(1).await;
        let shed = call(&channel, "/test.Gate/Hold", "0").await.unwrap_err();
        assert_eq!(shed.code(), Code::ResourceExhausted, "tls {tls}: {shed:?}");
        assert!(shed.message().contains("queue_full"), "{shed:?}");
        assert_eq!(shed.metadata().get("tidegate-shed").unwrap(), "queue_full");
        let wait = pushback(&shed);
        assert!((1..=1500).contains(&wait), "pushback {wait} ms");

        upstream.release(1);
        let answer = within("the held call", held).await.unwrap().unwrap();
        assert_eq!(answer.text, "released");
        let classes = ledgers_agree(&proxy, "grpc").await;
        assert_eq!((classes["ok"], classes["shed"]), (1.0, 1.0), "tls {tls}");
    }
}

#[tokio::test]
async fn upstream_overload_statuses_count_as_drops_and_other_statuses_as_answers() {
    let upstream = GateServer::start().await;
    let proxy = TestProxy::start(grpc_config(&upstream.url)).await;
    let channel = channel(Endpoint::from_shared(format!("http://{}", proxy.addr)).unwrap()).await;

    // Trailers-only answers: the status in the response headers.
    for (what, code) in [
        ("8", Code::ResourceExhausted),
        ("14", Code::Unavailable),
        ("5", Code::NotFound),
        ("13", Code::Internal),
    ] {
        let status = call(&channel, "/test.Gate/Fail", what).await.unwrap_err();
        assert_eq!(status.code(), code, "{status:?}");
        assert_eq!(status.message(), format!("upstream says {what}"));
    }
    assert_eq!(
        call(&channel, "/test.Gate/Fail", "0").await.unwrap().text,
        "fine"
    );
    // Streams: the status in the trailers, after a message.
    let (texts, end) = stream(&channel, "8").await;
    assert_eq!(texts, ["first"]);
    assert_eq!(end.unwrap_err().code(), Code::ResourceExhausted);
    let (texts, end) = stream(&channel, "0").await;
    assert_eq!(texts, ["first"]);
    end.unwrap();

    // RESOURCE_EXHAUSTED twice and UNAVAILABLE once are drops; NOT_FOUND, INTERNAL and the
    // two good answers are answers like any other.
    eventually("every call counted", || async {
        let classes = ledgers_agree(&proxy, "grpc").await;
        classes.values().sum::<f64>() == 7.0
    })
    .await;
    let classes = ledgers_agree(&proxy, "grpc").await;
    assert_eq!(
        (classes["dropped"], classes["ok"]),
        (3.0, 4.0),
        "{classes:?}"
    );
}

#[tokio::test]
async fn with_no_upstream_to_send_it_to_a_call_gets_unavailable_with_pushback() {
    let mut config = grpc_config(&format!("http://{}", closed_port().await));
    config.ejection.consecutive_failures = 1;
    config.ejection.base_time = Nanos::from_secs(5);
    config.ejection.reconnect_interval = Nanos::ZERO;
    let proxy = TestProxy::start(config).await;
    let channel = channel(Endpoint::from_shared(format!("http://{}", proxy.addr)).unwrap()).await;

    // The upstream refuses the connection: 502, which gRPC reads as UNAVAILABLE. It is now
    // ejected for 5 s.
    let failed = call(&channel, "/test.Gate/Fail", "0").await.unwrap_err();
    assert_eq!(failed.code(), Code::Unavailable, "{failed:?}");
    assert_eq!(failed.metadata().get("tidegate-error").unwrap(), "connect");

    let unavailable = call(&channel, "/test.Gate/Fail", "0").await.unwrap_err();
    assert_eq!(unavailable.code(), Code::Unavailable, "{unavailable:?}");
    assert_eq!(
        unavailable.metadata().get("tidegate-shed").unwrap(),
        "no_upstream"
    );
    assert!(
        unavailable.message().contains("no_upstream"),
        "{unavailable:?}"
    );
    let wait = pushback(&unavailable);
    assert!((1..=5000).contains(&wait), "pushback {wait} ms");
}

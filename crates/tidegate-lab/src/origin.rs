//! The mock origin: an HTTP server that behaves as a scenario's service model says.
//!
//! The simulator predicts what a protection does to a service model; the origin makes that
//! same model answer real HTTP requests, so that the prediction can be checked over real
//! sockets. Every request that arrives is handed to the very service model the simulator
//! drives ([`tidegate_model::service::Instance`]), with real time converted to the model's
//! nanoseconds since the origin started; the response leaves when the model says the work
//! ends.
//!
//! What the origin inherits from the model, and why it matters for overload experiments:
//!
//! - a worker pool with a bounded internal queue (refused with `503` when full), contention
//!   beyond an optimal concurrency, a latency curve by concurrency or per window, and a
//!   capacity schedule: the services of the seed documents;
//! - **work goes on after the client hung up**: a request is the model's until its work ends,
//!   whether or not anyone still reads the answer; that wasted work is what makes an
//!   unprotected service collapse, so the origin must not "helpfully" cancel it
//!   (`tidegate_origin_abandoned_total` counts it);
//! - several instances: one listener per instance, for a proxy with an upstream (and a gate)
//!   each, and a front listener that spreads requests over them as the scenario's `balance`
//!   says, for runs without a proxy.
//!
//! With `call`, each request calls the next hop of a chain once its own work is done
//! (`call`, round-robin over its URLs, holding the deepest cut-off any of them said), and is
//! answered 200 only if that call was: a chain of proxies and origins on loopback.
//!
//! With `peers`, each listener keeps a board of the `tidegate-peer` stamps of the proxies in
//! front of it and says their means on every response (`tidegate-peers`, `docs/peers.md`), as
//! `tidegate_tower::peers::PeerBoardLayer` does in a real service: the proxies of a hop then
//! hold the same limit and the edge draws the same line. A board per listener, because a
//! listener is what a proxy has a gate for: the means are over the gates in front of one
//! instance, as at a real one.
//!
//! `GET /metrics` on any listener ([`METRICS_PATH`]) gives the origin's own counters; every
//! other request is work. An instance may also hold an RSocket-style static lease (requests per
//! window, refused beyond it), for the scenarios' `static_lease` arms.

mod call;
mod driver;
mod engine;
mod metrics;
pub mod spec;

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tidegate_model::ConfigError;
use tidegate_model::lease::StaticLeaseConfig;
use tidegate_model::service::ServiceConfig;
use tidegate_tower::peers::SharedPeerBoard;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinSet;

use self::call::{Called, NextHop};
use self::driver::Command;
use self::engine::{Answer, Engine};
pub use self::spec::{SpecError, parse_change, parse_delay_curve};
use crate::load::SHED_HEADER;

/// The path of the origin's metrics, on every listener.
pub const METRICS_PATH: &str = "/metrics";

/// What the origin serves, and where.
#[derive(Debug, Clone)]
pub struct OriginConfig {
    pub service: ServiceConfig,
    /// A static lease on each instance (an RSocket responder's), if any.
    pub lease: Option<StaticLeaseConfig>,
    /// Seeds the work-time spread.
    pub seed: u64,
    /// The front listener. With several instances, instance `i` listens on the next port
    /// `+ 1 + i` (or on any free port when this port is 0).
    pub listen: SocketAddr,
    /// The next hop each request calls once its work is done: its instances, called
    /// round-robin, their cut-offs held as one (the deepest in force). Empty: no call.
    pub call: Vec<http::Uri>,
    /// Whether those calls honour the next hop's `tidegate-cutoff` and pass it on. Default
    /// true.
    pub call_feedback: bool,
    /// With `Some(ttl)`, each listener keeps the proxies' `tidegate-peer` stamps for `ttl` and
    /// says their means on its responses (`tidegate origin --peers`: the proxies' default
    /// ttl, 1 s). Default none.
    pub peers: Option<Duration>,
}

impl OriginConfig {
    /// One instance of `service` on `listen`, seed 1, no lease.
    pub fn new(service: ServiceConfig, listen: SocketAddr) -> OriginConfig {
        OriginConfig {
            service,
            lease: None,
            seed: 1,
            listen,
            call: Vec::new(),
            call_feedback: true,
            peers: None,
        }
    }
}

/// Why the origin could not start.
#[derive(Debug, thiserror::Error)]
pub enum OriginError {
    #[error("the service: {0}")]
    Config(#[from] ConfigError),
    #[error("reading {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: {reason}")]
    Parse { path: String, reason: String },
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        addr: SocketAddr,
        error: std::io::Error,
    },
    #[error("cannot start the origin's model thread: {0}")]
    Thread(std::io::Error),
}

/// Reads the `[service]` table of a file: a whole scenario, or a file with only that table.
pub fn service_from_file(path: &Path) -> Result<ServiceConfig, OriginError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| OriginError::Read {
        path: shown.clone(),
        error,
    })?;
    let parse_error = |reason: String| OriginError::Parse {
        path: shown.clone(),
        reason,
    };
    let mut doc: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| parse_error(e.to_string()))?;
    let service = doc
        .remove("service")
        .ok_or_else(|| parse_error("it has no [service] table".to_owned()))?;
    let service: ServiceConfig = service
        .try_into()
        .map_err(|e: toml::de::Error| parse_error(format!("[service]: {e}")))?;
    Ok(service)
}

/// A bound origin, not yet serving.
#[derive(Debug)]
pub struct Origin {
    config: OriginConfig,
    front: TcpListener,
    /// One per instance when there are several.
    instances: Vec<TcpListener>,
}

impl Origin {
    /// Checks the service and binds the listeners.
    pub async fn bind(config: OriginConfig) -> Result<Origin, OriginError> {
        config.service.validate()?;
        let bind = |addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|error| OriginError::Bind { addr, error })
        };
        let front = bind(config.listen).await?;
        let n = config.service.instances();
        let mut instances = Vec::new();
        if n > 1 {
            for i in 0..n {
                let mut addr = config.listen;
                if addr.port() != 0 {
                    let port = u32::from(addr.port()) + 1 + i;
                    addr.set_port(u16::try_from(port).map_err(|_| OriginError::Bind {
                        addr,
                        error: std::io::Error::other("instance ports beyond 65535"),
                    })?);
                }
                instances.push(bind(addr).await?);
            }
        }
        Ok(Origin {
            config,
            front,
            instances,
        })
    }

    /// The front listener's address: requests spread over the instances.
    pub fn addr(&self) -> SocketAddr {
        local_addr(&self.front)
    }

    /// Each instance's own address (the front's when there is one instance): what a proxy
    /// lists as its upstreams.
    pub fn instance_addrs(&self) -> Vec<SocketAddr> {
        if self.instances.is_empty() {
            vec![self.addr()]
        } else {
            self.instances.iter().map(local_addr).collect()
        }
    }

    /// Serves until `shutdown` completes; the model's clock starts now (the capacity
    /// schedule counts from here). Connections still open are then closed, and work in
    /// progress is dropped.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<(), OriginError> {
        let Origin {
            config,
            front,
            instances,
        } = self;
        let engine = Engine::new(config.service, config.lease.as_ref(), config.seed);
        let feedback = config.call_feedback;
        let next = Arc::new(NextHop::new(config.call, feedback));
        let (commands, receiver) = mpsc::channel();
        std::thread::Builder::new()
            .name("tidegate-origin-model".to_owned())
            .spawn(move || driver::run(engine, receiver))
            .map_err(OriginError::Thread)?;
        let peers = Arc::new(PeerBoards::new(config.peers, instances.len()));
        let mut listeners = JoinSet::new();
        let context = |instance| ListenerContext {
            instance,
            commands: commands.clone(),
            next: next.clone(),
            peers: peers.clone(),
        };
        listeners.spawn(accept(front, context(None)));
        for (i, listener) in instances.into_iter().enumerate() {
            listeners.spawn(accept(listener, context(Some(i))));
        }
        // The listeners hold the only senders left: once they are gone, the model thread ends.
        drop(commands);
        shutdown.await;
        listeners.abort_all();
        while listeners.join_next().await.is_some() {}
        Ok(())
    }
}

fn local_addr(listener: &TcpListener) -> SocketAddr {
    // A bound TCP listener always has a local address; the fallback is never used.
    listener
        .local_addr()
        .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
}

/// The peer boards of the origin's listeners (`OriginConfig::peers`): the front's, then each
/// instance's; none without.
#[derive(Debug)]
struct PeerBoards(Vec<SharedPeerBoard>);

impl PeerBoards {
    fn new(ttl: Option<Duration>, instances: usize) -> PeerBoards {
        PeerBoards(match ttl {
            Some(ttl) => (0..=instances).map(|_| SharedPeerBoard::new(ttl)).collect(),
            None => Vec::new(),
        })
    }

    /// The board of the front listener (`None`) or of an instance's.
    fn of(&self, instance: Option<usize>) -> Option<&SharedPeerBoard> {
        self.0.get(instance.map_or(0, |i| 1 + i))
    }

    /// The boards' counter for `/metrics`, when there are boards.
    fn metrics(&self) -> Option<String> {
        (!self.0.is_empty()).then(|| {
            let invalid: u64 = self.0.iter().map(SharedPeerBoard::invalid).sum();
            format!(
                "# HELP tidegate_origin_peers_header_invalid_total Malformed tidegate-peer \
                 stamps from the proxies in front, ignored.\n\
                 # TYPE tidegate_origin_peers_header_invalid_total counter\n\
                 tidegate_origin_peers_header_invalid_total {invalid}\n"
            )
        })
    }
}

/// What the connections of one listener share.
#[derive(Debug, Clone)]
struct ListenerContext {
    /// The instance the listener is, or `None` for the front.
    instance: Option<usize>,
    commands: mpsc::Sender<Command>,
    next: Arc<Option<NextHop>>,
    peers: Arc<PeerBoards>,
}

/// Accepts connections for one listener; its connections end with it.
async fn accept(listener: TcpListener, context: ListenerContext) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of file descriptors and the like: wait a moment rather than spin,
                    // the next accept may succeed.
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                    continue;
                };
                let _ = stream.set_nodelay(true);
                let context = context.clone();
                connections.spawn(async move {
                    let service = service_fn(move |request| {
                        let context = context.clone();
                        async move { Ok::<_, Infallible>(context.handle(request).await) }
                    });
                    let _ = auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            // Reap finished connections so the set does not grow with the run.
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The answer of a request whose own work is done, once it has called the next hop: 200 if
/// the call was answered 2xx, 503 if the next hop's cut-off held it back, 502 otherwise; with
/// the next hop's cut-off, for the proxy in front.
async fn chained(next: &NextHop, headers: &http::HeaderMap) -> Response<Full<Bytes>> {
    let mut response = match next.call(headers).await {
        Called::Ok => text(StatusCode::OK, "ok\n"),
        Called::HeldBack => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "held back: the next hop's cut-off refuses this priority\n",
        ),
        Called::Failed(status) => text(
            StatusCode::BAD_GATEWAY,
            match status {
                Some(status) => format!("the call to the next hop failed: {status}\n"),
                None => "the call to the next hop failed: no response\n".to_owned(),
            },
        ),
    };
    if let Some(cutoff) = next.cutoff() {
        response
            .headers_mut()
            .insert(tidegate_core::feedback::HEADER, cutoff);
    }
    response
}

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body.into()));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, http::HeaderValue::from_static("text/plain"));
    response
}

impl ListenerContext {
    /// A request's answer, with the means of the proxies in front when this listener keeps
    /// them.
    async fn handle(&self, request: Request<Incoming>) -> Response<Full<Bytes>> {
        let board = self.peers.of(self.instance);
        if let Some(board) = board {
            board.receive(request.headers());
        }
        let mut response = answer(self, request).await;
        if let Some(board) = board {
            board.say_means(response.headers_mut());
        }
        response
    }
}

/// A request's own answer: `/metrics`, or the work and the call to the next hop.
async fn answer(context: &ListenerContext, request: Request<Incoming>) -> Response<Full<Bytes>> {
    let (instance, commands, next) = (
        context.instance,
        &context.commands,
        context.next.as_ref().as_ref(),
    );
    let stopped = || text(StatusCode::SERVICE_UNAVAILABLE, "the origin is stopping\n");
    if request.uri().path() == METRICS_PATH {
        let (reply, stats) = oneshot::channel();
        if commands.send(Command::Stats(reply)).is_err() {
            return stopped();
        }
        return match stats.await {
            Ok(stats) => {
                let mut body = metrics::render(&stats);
                if let Some(next) = next {
                    body.push_str(&next.metrics());
                }
                if let Some(peers) = context.peers.metrics() {
                    body.push_str(&peers);
                }
                let mut response = text(StatusCode::OK, body);
                response.headers_mut().insert(
                    CONTENT_TYPE,
                    http::HeaderValue::from_static("text/plain; version=0.0.4"),
                );
                response
            }
            Err(_) => stopped(),
        };
    }
    let (reply, answer) = oneshot::channel();
    if commands.send(Command::Arrive { instance, reply }).is_err() {
        return stopped();
    }
    match answer.await {
        Ok(Answer::Served { .. }) => match next {
            None => text(StatusCode::OK, "ok\n"),
            Some(next) => chained(next, request.headers()).await,
        },
        Ok(Answer::Refused { .. }) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "refused: the service's internal queue is full\n",
        ),
        Ok(Answer::LeaseExhausted { .. }) => {
            let mut response = text(
                StatusCode::SERVICE_UNAVAILABLE,
                "rejected: the lease is exhausted\n",
            );
            // The lease is the protection of a lease arm, so its rejections are marked as a
            // protection's (the header a tidegate proxy sets): reports count them as shed,
            // apart from the service's own refusals.
            response.headers_mut().insert(
                SHED_HEADER,
                http::HeaderValue::from_static("lease_exhausted"),
            );
            response
        }
        Err(_) => stopped(),
    }
}

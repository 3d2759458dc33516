//! One request's way through the proxy: classify, pick an upstream, pass its gate, forward,
//! and hold the permit until the response's last byte (a stream's until its response headers:
//! [`crate::stream`]).
//!
//! Every request ends in exactly one counted outcome. The [`Completion`] made on arrival
//! travels with the request (into the response body when there is one) and records how it
//! ended: the gate's outcome from the status (`tidegate_tower::default_outcome`), a dropped
//! sample for an upstream that failed, shed, cancelled when the client went away, or the
//! client's error when its request body broke ([`crate::request_body`]). The duration
//! histogram's class and the gate's outcome always agree.
//!
//! A client that goes away while queued, or while its response streams, frees its slot at
//! once. One that goes away while the upstream works on its request leaves the slot held
//! until the upstream answers ([`OnClientGone::Wait`], the default): the upstream is not told
//! and keeps working, and a slot freed early would let the gate push one more request into an
//! upstream that has freed nothing (callers that time out would pile work up as if there were
//! no limit). What the late answer teaches the limit follows the simulator's rule: a drop if
//! the upstream alone took as long as the client was willing to wait, else a plain success
//! (the client's patience went in the gate's queue, not the upstream).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use futures_util::FutureExt;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use prometheus_client::registry::Registry;
use tidegate_core::Time;
use tidegate_core::lease::LeaseHeader;
use tidegate_core::peers::{PeerMean, fleet_line};

use crate::cutoff;
use tidegate_core::limit::Outcome;
use tidegate_tower::{Permit, default_outcome};

use crate::abandoned::Abandoned;
use crate::classify::Classifier;
use crate::config::OnClientGone;
use crate::dashboard::{self, Dashboard};
use crate::dry_run;
use crate::forward::{self, Forwarding};
use crate::grpc;
use crate::metrics::{Class, ErrorKind, ProxyMetrics};
use crate::pool::{Lent, Pool, SendError};
use crate::refuse;
use crate::reload::{Live, Reloader};
use crate::request_body::{BodyState, RequestBody};
use crate::shed::Refusals;
use crate::stall::Stall;
use crate::stream::{self, Streams};
use crate::stream_cap::{End, Slot};
use crate::trust::{Cidr, Peer};
use crate::upstream::{Pick, Upstream, Upstreams};

/// The header that names an upstream failure on a 502 or 504.
pub const ERROR_HEADER: &str = "tidegate-error";

static ERROR_HEADER_NAME: HeaderName = HeaderName::from_static(ERROR_HEADER);
static LEASE_HEADER: HeaderName = HeaderName::from_static(tidegate_core::lease::HEADER);
static PEER_STAMP_HEADER: HeaderName = HeaderName::from_static(tidegate_core::peers::STAMP_HEADER);
static PEER_MEAN_HEADER: HeaderName = HeaderName::from_static(tidegate_core::peers::MEAN_HEADER);

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Swapped whole by a reload ([`crate::reload`]); a request keeps the upstream it picked.
    pub(crate) upstreams: Arc<ArcSwap<Upstreams>>,
    pub(crate) classifier: Classifier,
    pub(crate) forwarding: Forwarding,
    pub(crate) metrics: ProxyMetrics,
    pub(crate) registry: Registry,
    pub(crate) timeout: Duration,
    pub(crate) read_timeout: Duration,
    /// The gate's refusals, made once.
    pub(crate) refusals: Refusals,
    pub(crate) retry_after: Duration,
    pub(crate) on_client_gone: OnClientGone,
    pub(crate) abandoned: Abandoned,
    pub(crate) draining: AtomicBool,
    pub(crate) dashboard: Dashboard,
    pub(crate) reload: Reloader,
    /// `trust.sources`.
    pub(crate) trusted: Vec<Cidr>,
    pub(crate) streams: Streams,
    clock: quanta::Clock,
    epoch: quanta::Instant,
}

impl Shared {
    #[allow(clippy::too_many_arguments, reason = "built once, in one place")]
    pub(crate) fn new(
        upstreams: Arc<ArcSwap<Upstreams>>,
        classifier: Classifier,
        forwarding: Forwarding,
        metrics: ProxyMetrics,
        registry: Registry,
        timeout: Duration,
        read_timeout: Duration,
        shed_status: StatusCode,
        retry_after: Duration,
        on_client_gone: OnClientGone,
        dashboard: Dashboard,
        trusted: Vec<Cidr>,
        streams: Streams,
    ) -> Shared {
        let clock = quanta::Clock::new();
        let epoch = clock.now();
        Shared {
            upstreams,
            classifier,
            forwarding,
            metrics,
            registry,
            timeout,
            read_timeout,
            refusals: Refusals::new(shed_status, retry_after),
            retry_after,
            on_client_gone,
            abandoned: Abandoned::default(),
            reload: Reloader::default(),
            draining: AtomicBool::new(false),
            dashboard,
            trusted,
            streams,
            clock,
            epoch,
        }
    }

    /// What a reload swaps and builds with.
    pub(crate) fn live(&self) -> Live<'_> {
        Live {
            upstreams: &self.upstreams,
            metrics: &self.metrics,
            streams: &self.streams,
        }
    }

    /// Nanoseconds since the proxy started (never 0, which marks a healthy upstream).
    pub(crate) fn now(&self) -> u64 {
        let elapsed = self.clock.now().saturating_duration_since(self.epoch);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1)
    }
}

impl dashboard::Source for Shared {
    fn dashboard(&self) -> &Dashboard {
        &self.dashboard
    }

    fn upstreams(&self) -> Arc<Upstreams> {
        self.upstreams.load_full()
    }

    fn now(&self) -> u64 {
        Shared::now(self)
    }
}

/// Forwards one request. Never fails: every problem is an HTTP answer.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    client: Peer,
    mut request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let arrived = shared.now();
    if let Some(status) = refuse::refusal(&request) {
        let seconds = Duration::from_nanos(shared.now().saturating_sub(arrived)).as_secs_f64();
        shared.metrics.refused.observe(seconds);
        let mut response = empty(status);
        if request.version() < http::Version::HTTP_2 {
            response
                .headers_mut()
                .insert(http::header::CONNECTION, HeaderValue::from_static("close"));
        }
        return Ok(response);
    }
    let class = shared
        .classifier
        .classify(request.uri().path(), request.headers(), client.trusted);
    if class.header_invalid {
        shared.metrics.priority_invalid.inc();
    }
    if class.header_untrusted {
        shared.metrics.priority_untrusted.inc();
    }
    if class.header_ignored > 0 {
        shared
            .metrics
            .priority_ignored
            .inc_by(u64::from(class.header_ignored));
    }
    let grpc = grpc::is_grpc(request.headers());
    let (pick, upstream) = {
        let upstreams = shared.upstreams.load();
        match upstreams.pick(class.partition, arrived) {
            Ok(pick) => (pick, upstreams.list[pick.upstream].clone()),
            Err(until) => return Ok(unavailable(&shared, arrived, until, grpc)),
        }
    };
    let mut completion = Completion::new(
        shared.clone(),
        pick,
        upstream.clone(),
        class.partition,
        arrived,
    );
    completion.grpc = grpc;
    // The streams' cap bounds a resource, as `connections.max` does: a dry run keeps it.
    let http1_upstream = shared.forwarding.upstream_version != http::Version::HTTP_2;
    let stream = match shared
        .streams
        .candidate(&mut request, &upstream.streams, http1_upstream)
    {
        Ok(stream) => stream,
        Err(stream::Refused) => {
            completion.finish(Class::Shed, None);
            return Ok(shared.refusals.streams(&request));
        }
    };
    if upstream.dry_run.load(Ordering::Relaxed) {
        completion.shadow = dry_run::judge(
            &upstream,
            class.partition,
            class.priority,
            class.under,
            arrived,
        );
    } else {
        if let Some(rank) = upstream
            .cutoff
            .refuses(arrived, class.priority, class.under)
        {
            // The upstream said it refuses this priority for now: shed it here, before any
            // work is spent on it (docs/feedback.md).
            completion.finish(Class::Shed, None);
            let mut response = shared.refusals.cutoff(rank, &request);
            if grpc {
                let code = grpc::Code::ResourceExhausted;
                response = grpc::shed(response, code, "cutoff", shared.retry_after);
            }
            return Ok(response);
        }
        match upstream.gates[class.partition]
            .gate
            .acquire(class.priority)
            .await
        {
            Ok(permit) => completion.permit = Some(permit),
            Err(shed) => {
                completion.finish(Class::Shed, None);
                let mut response = shared.refusals.shed(&shed, &request);
                if grpc {
                    let (code, reason) = (grpc::Code::ResourceExhausted, shed.reason().as_str());
                    response = grpc::shed(response, code, reason, shed.retry_after());
                }
                return Ok(response);
            }
        }
    }
    // The hint the request's chain was admitted under travels with it: the one it came
    // with, or at the edge of a chain, this proxy's line for its upstream (docs/feedback.md).
    let under = class.under.or_else(|| {
        shared
            .forwarding
            .hold_for_chain
            .then(|| upstream.cutoff.under(arrived))
    });
    let sent = send(
        &shared,
        client,
        request,
        (class.priority, under),
        upstream,
        stream,
        completion,
    );
    match sent {
        Ok(at_upstream) => Ok(at_upstream.await),
        Err(status) => Ok(empty(status)),
    }
}

/// Sends an admitted request (or, in dry run, any request) to the upstream, or says with
/// which status to answer it at once. Not `async`: the request's future then holds only the exchange under way
/// ([`AtUpstream`]), not this function's locals, and is moved the smaller for it.
fn send(
    shared: &Arc<Shared>,
    client: Peer,
    request: Request<Incoming>,
    (priority, under): (tidegate_core::Priority, Option<u16>),
    upstream: Arc<Upstream>,
    stream: Option<Box<stream::Candidate>>,
    mut completion: Completion,
) -> Result<AtUpstream, StatusCode> {
    completion.admitted = shared.now();

    let (mut parts, body) = request.into_parts();
    if !client.trusted {
        untrusted_headers(&mut parts.headers, shared.classifier.header());
    }
    shared.forwarding.request_headers(
        &mut parts.headers,
        parts.version,
        parts.uri.authority(),
        &client.address,
        upstream.target.host(),
        (priority, under),
    );
    if let Some(stream) = &stream {
        stream.forward_headers(&mut parts.headers);
    }
    if let Some((id, _)) = &upstream.peers {
        // What this proxy's gate learnt, for the instances to pass on to its peers.
        let stamp = upstream.gates[completion.partition].gate.peer_stamp(*id);
        if let Ok(value) = HeaderValue::from_str(&stamp.to_string()) {
            parts.headers.insert(&PEER_STAMP_HEADER, value);
        }
    }
    completion.stream = stream;
    let http2 = shared.forwarding.upstream_version == http::Version::HTTP_2;
    parts.uri = match upstream.target.uri(parts.uri, http2) {
        Ok(uri) => uri,
        // Only an upstream path prefix joined with a path that is not a valid URI path
        // (`OPTIONS *`) gets here: the client's fault, not the upstream's.
        Err(_) => {
            completion.finish(Class::Ignored, Some(Outcome::Ignored));
            return Err(StatusCode::BAD_REQUEST);
        }
    };
    parts.version = shared.forwarding.upstream_version;
    let (body, body_state) = RequestBody::new(body);
    completion.body = body_state;
    let exchange = exchange(shared, upstream, Request::from_parts(parts, body));
    Ok(AtUpstream::new(exchange, completion))
}

/// Removes what an untrusted client claims for itself: its priority (the one in force is
/// sent instead when forwarding is on) and the addresses it says it was forwarded for (its
/// own is appended after).
fn untrusted_headers(headers: &mut http::HeaderMap, priority: Option<&HeaderName>) {
    if let Some(name) = priority {
        headers.remove(name);
    }
    headers.remove(&X_FORWARDED_FOR);
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// The upstream's response headers, or the kind of failure, within `client.timeout`.
type Exchange = Pin<Box<dyn Future<Output = Answer> + Send>>;

type Answer = Result<(Response<Incoming>, Lent), ErrorKind>;

/// Sends `request` to `upstream`. Owned (boxed, holding its upstream) so that it can outlive
/// the client's connection: see [`AtUpstream`]. One future per upstream protocol, each boxed
/// at its own size ([`crate::pool::Pool::http2`]).
fn exchange(shared: &Shared, upstream: Arc<Upstream>, request: Request<RequestBody>) -> Exchange {
    let timeout = shared.timeout;
    if upstream.pool.http2() {
        Box::pin(async move {
            within(tokio::time::timeout(timeout, upstream.pool.send_http2(request)).await)
        })
    } else {
        Box::pin(exchange_http1(timeout, upstream, request))
    }
}

/// An HTTP/1.1 exchange: no `async` block, whose captures would keep their room beside the
/// future they are moved into ([`Pool::send_http1`]).
fn exchange_http1(
    timeout: Duration,
    upstream: Arc<Upstream>,
    request: Request<RequestBody>,
) -> impl Future<Output = Answer> + Send + use<> {
    tokio::time::timeout(timeout, Pool::send_http1(PoolOf(upstream), request)).map(within)
}

/// An upstream's pool, owned through the upstream: see [`Pool::send_http1`].
struct PoolOf(Arc<Upstream>);

impl std::ops::Deref for PoolOf {
    type Target = Pool;

    fn deref(&self) -> &Pool {
        &self.0.pool
    }
}

fn within(
    sent: Result<Result<(Response<Incoming>, Lent), SendError>, tokio::time::error::Elapsed>,
) -> Answer {
    match sent {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(error)) => Err(error.kind),
        Err(_elapsed) => Err(ErrorKind::Timeout),
    }
}

/// A request the upstream has, until its response headers. Dropped before them (the client
/// went away), it either lets the exchange run on in a task of its own that completes the
/// request when the upstream answers ([`OnClientGone::Wait`]), or drops it, closing the
/// upstream connection and freeing the slot as cancelled ([`OnClientGone::Release`]).
struct AtUpstream {
    exchange: Exchange,
    /// `None` once answered.
    completion: Option<Completion>,
}

impl AtUpstream {
    fn new(exchange: Exchange, completion: Completion) -> AtUpstream {
        AtUpstream {
            exchange,
            completion: Some(completion),
        }
    }
}

/// Answers with what the upstream answered.
impl Future for AtUpstream {
    type Output = Response<ResponseBody>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Response<ResponseBody>> {
        let answer = ready!(self.exchange.as_mut().poll(cx));
        let Some(completion) = self.completion.take() else {
            unreachable!("only an answer or a drop takes the completion, and each once")
        };
        Poll::Ready(match answer {
            Ok((response, lent)) => completion.respond(response, lent),
            Err(kind) => completion.fail(kind),
        })
    }
}

impl Drop for AtUpstream {
    fn drop(&mut self) {
        let Some(mut completion) = self.completion.take() else {
            return;
        };
        if completion.shared.on_client_gone == OnClientGone::Release {
            return;
        }
        // Outside a runtime (it is shutting down), nothing can wait: cancelled.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut cut = completion.shared.abandoned.cut_signal();
        if *cut.borrow() {
            return;
        }
        let now = completion.shared.now();
        completion.client_left = Some(now);
        if let Some(permit) = &completion.permit {
            permit.caller_left(Duration::from_nanos(now.saturating_sub(completion.arrived)));
        }
        completion.upstream().metrics.abandoned.inc();
        completion.shared.abandoned.started();
        let exchange = std::mem::replace(&mut self.exchange, Box::pin(std::future::pending()));
        runtime.spawn(async move {
            tokio::select! {
                answer = exchange => completion.late(answer),
                // The proxy is shutting down past its drain timeout: cancelled.
                _ = cut.wait_for(|cut| *cut) => {}
            }
        });
    }
}

/// Every upstream is ejected: 503 with the time until one may be probed (gRPC: UNAVAILABLE).
fn unavailable(shared: &Shared, now: u64, until: u64, grpc: bool) -> Response<ResponseBody> {
    // `u64::MAX`: another request is probing; its answer comes within the upstream timeout.
    let wait = match until {
        u64::MAX => shared.retry_after,
        until => Duration::from_nanos(until.saturating_sub(now)),
    };
    let seconds = wait.as_secs_f64().ceil().max(1.0) as u64;
    let mut response = empty(StatusCode::SERVICE_UNAVAILABLE);
    let headers = response.headers_mut();
    headers.insert(http::header::RETRY_AFTER, HeaderValue::from(seconds));
    headers.insert(
        tidegate_tower::error::REASON_HEADER,
        HeaderValue::from_static("no_upstream"),
    );
    let seconds = Duration::from_nanos(shared.now().saturating_sub(now)).as_secs_f64();
    shared.metrics.unavailable.observe(seconds);
    if grpc {
        return grpc::shed(response, grpc::Code::Unavailable, "no_upstream", wait);
    }
    response
}

fn empty(status: StatusCode) -> Response<ResponseBody> {
    let mut response = Response::new(ResponseBody::default());
    *response.status_mut() = status;
    response
}

/// A request from arrival to its end: releases its permit, tells the upstream's health how
/// it went, and records its duration, exactly once.
pub(crate) struct Completion {
    shared: Arc<Shared>,
    pick: Pick,
    /// The upstream picked, kept even if a reload removes it.
    upstream: Arc<Upstream>,
    partition: usize,
    arrived: u64,
    permit: Option<Permit>,
    /// In dry run, instead of the permit.
    shadow: Option<dry_run::Shadow>,
    /// When the request left the gate (0 before).
    admitted: u64,
    /// When the client went away while the upstream had the request.
    client_left: Option<u64>,
    /// How the client's request body went, to tell its failures from the upstream's.
    body: BodyState,
    /// The upstream connection, back to its pool when the response has been read whole.
    lent: Option<Lent>,
    /// What the upstream itself took, measured at the socket once the answer is in
    /// ([`crate::timed`]): what the gate learns from, rather than the slot's whole span,
    /// which holds the proxy's own delays.
    upstream_time: Option<Duration>,
    /// A request that may become a stream ([`crate::stream`]).
    stream: Option<Box<stream::Candidate>>,
    /// A gRPC request: its answer's `grpc-status` counts (see [`crate::grpc`]).
    grpc: bool,
    finished: bool,
}

impl Completion {
    fn new(
        shared: Arc<Shared>,
        pick: Pick,
        upstream: Arc<Upstream>,
        partition: usize,
        arrived: u64,
    ) -> Completion {
        let completion = Completion {
            shared,
            pick,
            upstream,
            partition,
            arrived,
            permit: None,
            shadow: None,
            admitted: 0,
            client_left: None,
            body: BodyState::default(),
            lent: None,
            upstream_time: None,
            stream: None,
            grpc: false,
            finished: false,
        };
        completion.upstream().gates[partition]
            .outstanding
            .fetch_add(1, Ordering::Relaxed);
        completion
    }

    fn upstream(&self) -> &Upstream {
        &self.upstream
    }

    /// The upstream answered: its health is good, its lease applies, and the response goes
    /// to the client with this completion in its body.
    fn respond(mut self, mut response: Response<Incoming>, lent: Lent) -> Response<ResponseBody> {
        let candidate = self.stream.take();
        let opened = self
            .shared
            .streams
            .open(&self.upstream.streams, candidate, &mut response);
        let (mut parts, body) = response.into_parts();
        self.answered(&mut parts.headers);
        forward::response_headers(&mut parts.headers, parts.version);
        let mut outcome = default_outcome(parts.status);
        if self.grpc {
            outcome = grpc::outcome(outcome, &parts.headers);
        }
        let Some(opened) = opened else {
            self.lent = Some(lent);
            return Response::from_parts(parts, ResponseBody::new(body, self, outcome));
        };
        // A stream: its sample is the time to these headers, and its slot is free from now
        // on (`crate::stream`).
        self.upstream_time = lent.upstream_time();
        self.finish(class_of(outcome), Some(outcome));
        match opened {
            stream::Opened::Tunnel(tunnel) => {
                tunnel.response_headers(&mut parts.headers);
                tunnel.start(self.shared.clone());
                Response::from_parts(parts, ResponseBody::default())
            }
            stream::Opened::Body(slot) => {
                let open = OpenStream {
                    slot,
                    lent,
                    shared: self.shared.clone(),
                    upstream: self.upstream.clone(),
                };
                Response::from_parts(parts, ResponseBody::stream(body, open))
            }
        }
    }

    /// The upstream answered with `headers`: its health is good and its lease applies.
    fn answered(&mut self, headers: &mut http::HeaderMap) {
        let probe = std::mem::replace(&mut self.pick.probe, false);
        let upstream = self.upstream();
        upstream.health.success(probe, &upstream.metrics);
        if let Some(value) = headers.get(&cutoff::HEADER)
            && !upstream.cutoff.receive(self.shared.now(), value)
        {
            upstream.metrics.cutoff_invalid.inc();
        }
        // The peers' means are between this proxy and its upstream: taken in, not passed on.
        if let Some(value) = headers.remove(&PEER_MEAN_HEADER)
            && let Some((_, config)) = &upstream.peers
        {
            match value.to_str().ok().and_then(|v| v.parse::<PeerMean>().ok()) {
                Some(mut mean) => {
                    if let (Some(line), Some(heard_line)) = (mean.line, &upstream.heard_line) {
                        // One line for the gates in front of all the instances (see
                        // `fleet_line`).
                        let now = self.shared.now();
                        heard_line.hear(line, now);
                        let upstreams = self.shared.upstreams.load();
                        let heard = upstreams
                            .list
                            .iter()
                            .filter_map(|u| u.heard_line.as_ref()?.get());
                        mean.line = fleet_line(heard, Time::from_nanos(now), config.ttl);
                    }
                    upstream.gates[self.partition]
                        .gate
                        .hear_peers(&mean, config)
                }
                None => {
                    upstream.metrics.peers_invalid.inc();
                }
            }
        }
        if let Some(value) = take_lease(headers) {
            match value
                .to_str()
                .ok()
                .and_then(|v| v.parse::<LeaseHeader>().ok())
            {
                Some(lease) => {
                    for slot in &upstream.gates {
                        slot.gate.set_lease(lease.allowed, lease.ttl.into());
                    }
                }
                None => {
                    upstream.metrics.lease_invalid.inc();
                }
            }
        }
    }

    /// The upstream failed with `kind`: counted, and a failure for its health (a probe's
    /// verdict, once).
    fn upstream_failed(&mut self, kind: ErrorKind) {
        let upstream = self.upstream();
        upstream.metrics.error(kind);
        upstream
            .health
            .failure(self.pick.probe, self.shared.now(), &upstream.metrics, kind);
        self.pick.probe = false;
    }

    /// The upstream's answer to a request whose client went away at `client_left` (see the
    /// module docs). The answer's body is not read: the connection closes.
    fn late(mut self, answer: Result<(Response<Incoming>, Lent), ErrorKind>) {
        let outcome = match answer {
            Ok((mut response, _lent)) => {
                self.answered(response.headers_mut());
                let patience = self
                    .client_left
                    .unwrap_or(self.arrived)
                    .saturating_sub(self.arrived);
                let upstream_took = self.shared.now().saturating_sub(self.admitted);
                let mut outcome = default_outcome(response.status());
                if self.grpc {
                    outcome = grpc::outcome(outcome, response.headers());
                }
                late_outcome(outcome, patience, upstream_took)
            }
            Err(kind) if self.client_fault(kind).is_some() => {
                self.finish(Class::ClientError, Some(Outcome::Ignored));
                return;
            }
            // Too slow, or unreachable: the upstream's failure whoever waits.
            Err(kind @ (ErrorKind::Timeout | ErrorKind::Connect)) => {
                self.upstream_failed(kind);
                Outcome::Dropped
            }
            // A reset or a broken exchange may be the upstream's reaction to the request body
            // the client cut short: nothing to learn from it.
            Err(_) => return,
        };
        // The gate's outcome is the request's in every ledger, the client gone or not (the
        // abandoned gauge counts those still at the upstream).
        self.finish(class_of(outcome), Some(outcome));
    }

    /// The status for an exchange that failed with `kind` by the client's fault: its body
    /// broke (malformed, or cut off), or it had not finished sending it when the upstream
    /// timed out waiting. `None`: the upstream's failure.
    fn client_fault(&self, kind: ErrorKind) -> Option<StatusCode> {
        if self.body.broken() {
            Some(StatusCode::BAD_REQUEST)
        } else if kind == ErrorKind::Timeout && self.body.incomplete() {
            Some(StatusCode::REQUEST_TIMEOUT)
        } else {
            None
        }
    }

    /// The upstream failed: 502 (504 for a timeout), a dropped sample, a failure for its
    /// health. Unless the client's body made it fail: then the client's outcome, counted
    /// apart (`client_error`), with nothing learned about the upstream.
    fn fail(mut self, kind: ErrorKind) -> Response<ResponseBody> {
        if let Some(status) = self.client_fault(kind) {
            self.finish(Class::ClientError, Some(Outcome::Ignored));
            return empty(status);
        }
        self.upstream_failed(kind);
        let status = match kind {
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        };
        self.finish(Class::Dropped, Some(Outcome::Dropped));
        let mut response = empty(status);
        response.headers_mut().insert(
            ERROR_HEADER_NAME.clone(),
            HeaderValue::from_static(kind.as_str()),
        );
        response
    }

    /// The response body was read to its end: what the upstream took is known, and the
    /// connection can serve another exchange.
    fn reuse_connection(&mut self) {
        if let Some(lent) = self.lent.take() {
            self.upstream_time = lent.upstream_time();
            self.upstream().pool.put(lent);
        }
    }

    /// Releases the permit with `outcome` (`None`: no permit, or cancelled) and records the
    /// request as `class`.
    fn finish(&mut self, class: Class, outcome: Option<Outcome>) {
        if self.finished {
            return;
        }
        self.finished = true;
        if let Some(mut permit) = self.permit.take() {
            if let Some(upstream_time) = self.upstream_time {
                permit.measured(upstream_time);
            }
            permit.release(outcome);
        }
        if let Some(shadow) = self.shadow.take() {
            shadow.release(outcome, self.upstream_time);
        }
        let now = self.shared.now();
        // A client that went away is timed to when it left.
        let elapsed = match self.client_left {
            Some(left) => {
                self.upstream().metrics.abandoned.dec();
                self.shared.abandoned.ended();
                left.saturating_sub(self.arrived)
            }
            None => now.saturating_sub(self.arrived),
        };
        self.upstream()
            .metrics
            .observe(class, Duration::from_nanos(elapsed).as_secs_f64());
        let dashboard = &self.shared.dashboard;
        if matches!(class, Class::Ok | Class::Dropped | Class::Ignored) {
            dashboard.e2e.record(elapsed);
            if self.admitted != 0 {
                dashboard.upstream.record(now.saturating_sub(self.admitted));
            }
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // Dropped unfinished: the client went away (or the proxy is cutting connections
        // after its drain timeout), or a late answer taught nothing. The permit, dropped with
        // it, frees its slot as cancelled.
        self.finish(Class::Cancelled, None);
        let upstream = self.upstream();
        if self.pick.probe {
            upstream.health.probe_abandoned(self.shared.now());
        }
        upstream.gates[self.partition]
            .outstanding
            .fetch_sub(1, Ordering::Relaxed);
    }
}

impl std::fmt::Debug for Completion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Completion")
            .field("upstream", &self.upstream().name)
            .field("partition", &self.partition)
            .field("permit", &self.permit)
            .field("finished", &self.finished)
            .finish()
    }
}

/// A response body: the upstream's, streamed frame by frame, or empty for the proxy's own
/// answers. It holds the request's [`Completion`] until its last frame.
///
/// An upstream that stops sending mid-body must not hold its slot forever: while the body
/// waits for the upstream, a timer runs, and past `client.read_timeout` without a frame the
/// body ends with an error (a dropped sample, the connection closed). A body that arrived with
/// its headers, the common case, never waits and never arms it.
#[derive(Debug, Default)]
pub(crate) struct ResponseBody {
    inner: Option<Incoming>,
    end: Option<(Completion, Outcome)>,
    /// A stream's, instead of `end`: its place under the cap (boxed: most bodies are none).
    stream: Option<Box<OpenStream>>,
    read_timeout: Duration,
    /// The deadline for the next frame.
    idle: Stall,
}

/// The upstream sent nothing for `client.read_timeout` in the middle of a body.
#[derive(Debug, thiserror::Error)]
#[error("the upstream sent nothing for {0:?} in the middle of the response body")]
pub(crate) struct ReadTimeout(Duration);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl ResponseBody {
    fn new(inner: Incoming, completion: Completion, outcome: Outcome) -> ResponseBody {
        let read_timeout = completion.shared.read_timeout;
        let body = ResponseBody {
            inner: Some(inner),
            end: Some((completion, outcome)),
            stream: None,
            read_timeout,
            idle: Stall::default(),
        };
        body.ended_if_empty()
    }

    /// A stream's body: silent past `streams.idle_timeout` rather than `client.read_timeout`,
    /// it is closed.
    fn stream(inner: Incoming, open: OpenStream) -> ResponseBody {
        let body = ResponseBody {
            inner: Some(inner),
            end: None,
            read_timeout: open.shared.streams.idle_timeout,
            stream: Some(Box::new(open)),
            idle: Stall::default(),
        };
        body.ended_if_empty()
    }

    /// An empty body (204, HEAD, a 0-length answer) may never be polled: it ends now.
    fn ended_if_empty(mut self) -> ResponseBody {
        if self.is_end_stream() {
            self.end(None);
        }
        self
    }

    /// The body ended: normally, or with an upstream error (`Some(kind)`).
    fn end(&mut self, error: Option<ErrorKind>) {
        if let Some(stream) = self.stream.take() {
            stream.end(error);
        }
        if let Some((mut completion, outcome)) = self.end.take() {
            match error {
                None => {
                    completion.reuse_connection();
                    completion.finish(class_of(outcome), Some(outcome));
                }
                Some(kind) => {
                    completion.upstream().metrics.error(kind);
                    completion.finish(Class::Dropped, Some(Outcome::Dropped));
                }
            }
        }
    }
}

/// A stream's body on its way to the client, holding its place under the cap and, over
/// HTTP/1.1, its upstream connection (back to the pool when the body ends in good order).
#[derive(Debug)]
struct OpenStream {
    slot: Slot,
    lent: Lent,
    shared: Arc<Shared>,
    upstream: Arc<Upstream>,
}

impl OpenStream {
    fn end(self, error: Option<ErrorKind>) {
        let upstream = &self.upstream;
        let end = match error {
            None => {
                upstream.pool.put(self.lent);
                End::Closed
            }
            // Silent past the idle timeout: not the upstream's failure.
            Some(ErrorKind::Timeout) => End::Idle,
            Some(kind) => {
                upstream.metrics.error(kind);
                End::Error
            }
        };
        self.slot.end(end);
    }
}

/// What an answer to a client that left after `patience` nanoseconds teaches the limit, the
/// upstream having had the request for `upstream_took`: a success is a drop if the upstream
/// alone took the client's whole patience (it would have lost the client even with no queue);
/// otherwise the patience went in the gate's queue, and the answer measures the upstream like
/// any other. (As the simulator's engine does with a caller's timeout.)
fn late_outcome(outcome: Outcome, patience: u64, upstream_took: u64) -> Outcome {
    match outcome {
        Outcome::Success if upstream_took >= patience => Outcome::Dropped,
        outcome => outcome,
    }
}

/// Removes the lease header, looking it up only if a pass over the names finds it (most
/// responses have none).
fn take_lease(headers: &mut http::HeaderMap) -> Option<HeaderValue> {
    if headers.keys().any(|name| name == LEASE_HEADER) {
        headers.remove(&LEASE_HEADER)
    } else {
        None
    }
}

fn class_of(outcome: Outcome) -> Class {
    match outcome {
        Outcome::Success => Class::Ok,
        Outcome::Dropped => Class::Dropped,
        Outcome::Ignored => Class::Ignored,
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        let Some(inner) = this.inner.as_mut() else {
            return Poll::Ready(None);
        };
        let frame = match Pin::new(&mut *inner).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                ready!(this.idle.poll_waiting(cx, this.read_timeout));
                this.inner = None;
                this.end(Some(ErrorKind::Timeout));
                return Poll::Ready(Some(Err(ReadTimeout(this.read_timeout).into())));
            }
        };
        this.idle.progressed();
        if let Some(Ok(frame)) = &frame
            && let Some(trailers) = frame.trailers_ref()
            && let Some((completion, outcome)) = &mut this.end
            && completion.grpc
        {
            *outcome = grpc::outcome(*outcome, trailers);
        }
        match &frame {
            None => this.end(None),
            Some(Err(_)) => this.end(Some(ErrorKind::Body)),
            // Hyper stops polling a body that says it is over: its last frame is the end.
            Some(Ok(_)) if inner.is_end_stream() => this.end(None),
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame.map(|frame| frame.map_err(BoxError::from)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(Body::is_end_stream)
    }

    fn size_hint(&self) -> SizeHint {
        self.inner
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), Body::size_hint)
    }
}

#[cfg(test)]
mod future_sizes;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_late_answer_is_a_drop_only_if_the_upstream_alone_took_the_clients_patience() {
        let ok = Outcome::Success;
        // Admitted at once, gone after 100 ms, answered after 300: the upstream's fault.
        assert_eq!(late_outcome(ok, 100, 300), Outcome::Dropped);
        assert_eq!(late_outcome(ok, 100, 100), Outcome::Dropped);
        // 90 ms of the 100 spent queued, answered 20 ms after admission: a healthy upstream.
        assert_eq!(late_outcome(ok, 100, 20), Outcome::Success);
        // Other outcomes (a 503, a 500) keep their own meaning.
        assert_eq!(late_outcome(Outcome::Dropped, 100, 20), Outcome::Dropped);
        assert_eq!(late_outcome(Outcome::Ignored, 100, 300), Outcome::Ignored);
    }
}

//! One request's way through the proxy: classify, pick an upstream, pass its gate, forward,
//! and hold the permit until the response's last byte.
//!
//! Every request ends in exactly one counted outcome. The [`Completion`] made on arrival
//! travels with the request (into the response body when there is one) and records how it
//! ended: the gate's outcome from the status (`tidegate_tower::default_outcome`), a dropped
//! sample for an upstream that failed, shed, or cancelled when it is dropped unfinished (the
//! client went away while queued, waiting for the upstream or receiving the body: the permit
//! goes back to the gate at once and teaches the limit nothing).

use std::convert::Infallible;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use prometheus_client::registry::Registry;
use tidegate_core::lease::LeaseHeader;
use tidegate_core::limit::Outcome;
use tidegate_tower::{Permit, default_outcome};

use crate::classify::Classifier;
use crate::dashboard::Dashboard;
use crate::forward::{self, Forwarding};
use crate::metrics::{Class, ErrorKind, ProxyMetrics};
use crate::pool::Lent;
use crate::upstream::{Pick, Upstream, Upstreams};

/// The header that names an upstream failure on a 502 or 504.
pub const ERROR_HEADER: &str = "tidegate-error";

static ERROR_HEADER_NAME: HeaderName = HeaderName::from_static(ERROR_HEADER);
static LEASE_HEADER: HeaderName = HeaderName::from_static(tidegate_core::lease::HEADER);

/// What every request handler shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) upstreams: Upstreams,
    pub(crate) classifier: Classifier,
    pub(crate) forwarding: Forwarding,
    pub(crate) metrics: ProxyMetrics,
    pub(crate) registry: Registry,
    pub(crate) timeout: Duration,
    pub(crate) read_timeout: Duration,
    pub(crate) shed_status: StatusCode,
    pub(crate) retry_after: Duration,
    pub(crate) draining: AtomicBool,
    pub(crate) dashboard: Dashboard,
    clock: quanta::Clock,
    epoch: quanta::Instant,
}

impl Shared {
    #[allow(clippy::too_many_arguments, reason = "built once, in one place")]
    pub(crate) fn new(
        upstreams: Upstreams,
        classifier: Classifier,
        forwarding: Forwarding,
        metrics: ProxyMetrics,
        registry: Registry,
        timeout: Duration,
        read_timeout: Duration,
        shed_status: StatusCode,
        retry_after: Duration,
        dashboard: Dashboard,
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
            shed_status,
            retry_after,
            draining: AtomicBool::new(false),
            dashboard,
            clock,
            epoch,
        }
    }

    /// Nanoseconds since the proxy started (never 0, which marks a healthy upstream).
    pub(crate) fn now(&self) -> u64 {
        let elapsed = self.clock.now().saturating_duration_since(self.epoch);
        u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX).max(1)
    }
}

/// Forwards one request. Never fails: every problem is an HTTP answer.
pub(crate) async fn handle(
    shared: Arc<Shared>,
    client: HeaderValue,
    request: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let arrived = shared.now();
    let class = shared
        .classifier
        .classify(request.uri().path(), request.headers());
    if class.header_invalid {
        shared.metrics.priority_invalid.inc();
    }
    let pick = match shared.upstreams.pick(class.partition, arrived) {
        Ok(pick) => pick,
        Err(until) => return Ok(unavailable(&shared, arrived, until)),
    };
    let mut completion = Completion::new(shared.clone(), pick, class.partition, arrived);
    let upstream = &shared.upstreams.list[pick.upstream];
    let permit = match upstream.gates[class.partition]
        .gate
        .acquire(class.priority)
        .await
    {
        Ok(permit) => permit,
        Err(shed) => {
            let mut response: Response<ResponseBody> = shed.to_http_response();
            *response.status_mut() = shared.shed_status;
            completion.finish(Class::Shed, None);
            return Ok(response);
        }
    };
    completion.permit = Some(permit);
    if shared.dashboard.watched() {
        completion.admitted = Some(shared.now());
    }

    let (mut parts, body) = request.into_parts();
    shared.forwarding.request_headers(
        &mut parts.headers,
        parts.version,
        parts.uri.authority(),
        &client,
        upstream.target.host(),
        class.priority,
    );
    let http2 = shared.forwarding.upstream_version == http::Version::HTTP_2;
    parts.uri = match upstream.target.uri(parts.uri, http2) {
        Ok(uri) => uri,
        // Only an upstream path prefix joined with a path that is not a valid URI path
        // (`OPTIONS *`) gets here: the client's fault, not the upstream's.
        Err(_) => {
            completion.finish(Class::Ignored, Some(Outcome::Ignored));
            return Ok(empty(StatusCode::BAD_REQUEST));
        }
    };
    parts.version = shared.forwarding.upstream_version;
    let sent = upstream.pool.send(Request::from_parts(parts, body));
    let kind = match tokio::time::timeout(shared.timeout, sent).await {
        Ok(Ok((response, lent))) => return Ok(completion.respond(response, lent)),
        Ok(Err(error)) => error.kind,
        Err(_elapsed) => ErrorKind::Timeout,
    };
    Ok(completion.fail(kind))
}

/// Every upstream is ejected: 503 with the time until one may be probed.
fn unavailable(shared: &Shared, now: u64, until: u64) -> Response<ResponseBody> {
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
    partition: usize,
    arrived: u64,
    permit: Option<Permit>,
    /// When the request left the gate, read only while the dashboard is watched.
    admitted: Option<u64>,
    /// The upstream connection, back to its pool when the response has been read whole.
    lent: Option<Lent>,
    finished: bool,
}

impl Completion {
    fn new(shared: Arc<Shared>, pick: Pick, partition: usize, arrived: u64) -> Completion {
        let completion = Completion {
            shared,
            pick,
            partition,
            arrived,
            permit: None,
            admitted: None,
            lent: None,
            finished: false,
        };
        completion.upstream().gates[partition]
            .outstanding
            .fetch_add(1, Ordering::Relaxed);
        completion
    }

    fn upstream(&self) -> &Upstream {
        &self.shared.upstreams.list[self.pick.upstream]
    }

    /// The upstream answered: its health is good, its lease applies, and the response goes
    /// to the client with this completion in its body.
    fn respond(mut self, response: Response<Incoming>, lent: Lent) -> Response<ResponseBody> {
        let probe = std::mem::replace(&mut self.pick.probe, false);
        self.lent = Some(lent);
        let upstream = self.upstream();
        upstream.health.success(probe, &upstream.metrics);
        let (mut parts, body) = response.into_parts();
        if let Some(value) = take_lease(&mut parts.headers) {
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
        forward::response_headers(&mut parts.headers, parts.version);
        let outcome = default_outcome(parts.status);
        Response::from_parts(parts, ResponseBody::new(body, self, outcome))
    }

    /// The upstream failed: 502 (504 for a timeout), a dropped sample, a failure for its
    /// health.
    fn fail(self, kind: ErrorKind) -> Response<ResponseBody> {
        let upstream = self.upstream();
        upstream.metrics.error(kind);
        upstream
            .health
            .failure(self.pick.probe, self.shared.now(), &upstream.metrics);
        let status = match kind {
            ErrorKind::Timeout => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        };
        let mut completion = self;
        completion.pick.probe = false;
        completion.finish(Class::Dropped, Some(Outcome::Dropped));
        let mut response = empty(status);
        response.headers_mut().insert(
            ERROR_HEADER_NAME.clone(),
            HeaderValue::from_static(kind.as_str()),
        );
        response
    }

    /// The response body was read to its end: the connection can serve another exchange.
    fn reuse_connection(&mut self) {
        if let Some(lent) = self.lent.take() {
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
        if let Some(permit) = self.permit.take() {
            permit.release(outcome);
        }
        let now = self.shared.now();
        let elapsed = now.saturating_sub(self.arrived);
        self.upstream()
            .metrics
            .observe(class, Duration::from_nanos(elapsed).as_secs_f64());
        let dashboard = &self.shared.dashboard;
        if matches!(class, Class::Ok | Class::Dropped | Class::Ignored) && dashboard.watched() {
            dashboard.e2e.record(elapsed);
            if let Some(admitted) = self.admitted {
                dashboard.upstream.record(now.saturating_sub(admitted));
            }
        }
    }
}

impl Drop for Completion {
    fn drop(&mut self) {
        // Dropped unfinished: the client went away (or the proxy is cutting connections
        // after its drain timeout). The permit, dropped with it, frees its slot as cancelled.
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
    read_timeout: Duration,
    /// The deadline for the next frame, made on the first wait and reused.
    idle: Option<Pin<Box<tokio::time::Sleep>>>,
    /// Whether `idle` runs for the frame being waited for.
    armed: bool,
}

/// The upstream sent nothing for `client.read_timeout` in the middle of a body.
#[derive(Debug, thiserror::Error)]
#[error("the upstream sent nothing for {0:?} in the middle of the response body")]
pub(crate) struct ReadTimeout(Duration);

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl ResponseBody {
    fn new(inner: Incoming, completion: Completion, outcome: Outcome) -> ResponseBody {
        let read_timeout = completion.shared.read_timeout;
        let mut body = ResponseBody {
            inner: Some(inner),
            end: Some((completion, outcome)),
            read_timeout,
            idle: None,
            armed: false,
        };
        // An empty body (204, HEAD, a 0-length answer) may never be polled.
        if body.is_end_stream() {
            body.end(None);
        }
        body
    }

    /// The body ended: normally, or with an upstream error (`Some(kind)`).
    fn end(&mut self, error: Option<ErrorKind>) {
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

impl ResponseBody {
    /// Runs the idle timer while the upstream is silent: ready when it fired.
    fn poll_idle(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.armed {
            let deadline = tokio::time::Instant::now() + self.read_timeout;
            match &mut self.idle {
                Some(idle) => idle.as_mut().reset(deadline),
                None => self.idle = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
            self.armed = true;
        }
        match &mut self.idle {
            Some(idle) => idle.as_mut().poll(cx),
            None => Poll::Pending,
        }
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
                ready!(this.poll_idle(cx));
                this.inner = None;
                this.end(Some(ErrorKind::Timeout));
                return Poll::Ready(Some(Err(ReadTimeout(this.read_timeout).into())));
            }
        };
        this.armed = false;
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

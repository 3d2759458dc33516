//! The gate as tower middleware for HTTP services.
//!
//! [`Tidegate`] asks the gate for a permit before calling the inner service, with the
//! priority a user closure reads from the request. A shed request never reaches the service:
//! the call fails with [`Shed`](crate::Shed), which the framework turns into `503` and
//! `Retry-After` (axum: `HandleErrorLayer`; see `examples/axum.rs`). An admitted request
//! keeps its permit until the response body has been sent to the end, because the service
//! is still working (or at least still holding resources) while it streams; the latency the
//! limit learns from is the whole of it.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tidegate_core::config::{GateConfig, LimitConfig, RegulatorConfig};
use tidegate_core::limit::Outcome;
use tidegate_core::{Nanos, Priority};
use tower::{BoxError, Layer, Service};

use crate::ClockSource;
use crate::body::PermitBody;
use crate::shared::{Acquire, SharedGate};

type Classify<B> = Arc<dyn Fn(&Request<B>) -> Priority + Send + Sync>;

/// Builds a [`TidegateLayer`]. Every default is tidegate's default configuration
/// ([`GateConfig::default`]): the Autotune limit, PIE shedding by priority, a queue of 1,000
/// with a 500 ms timeout, `Retry-After: 1`, and every request at [`Priority::default`].
pub struct Builder<B> {
    config: GateConfig,
    retry_after: Duration,
    clock: ClockSource,
    classify: Classify<B>,
    outcome: fn(StatusCode) -> Outcome,
}

impl<B> Default for Builder<B> {
    fn default() -> Builder<B> {
        Builder {
            config: GateConfig::default(),
            retry_after: Duration::from_secs(1),
            clock: ClockSource::Auto,
            classify: Arc::new(|_| Priority::default()),
            outcome: default_outcome,
        }
    }
}

impl<B> fmt::Debug for Builder<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Builder")
            .field("config", &self.config)
            .field("retry_after", &self.retry_after)
            .finish()
    }
}

impl<B> Builder<B> {
    /// The whole gate configuration at once (for one read from a file).
    pub fn config(mut self, config: GateConfig) -> Self {
        self.config = config;
        self
    }

    /// The concurrency limit algorithm and its settings.
    pub fn limit(mut self, limit: LimitConfig) -> Self {
        self.config.limit = limit;
        self
    }

    /// The regulator and its settings.
    pub fn regulator(mut self, regulator: RegulatorConfig) -> Self {
        self.config.regulator = regulator;
        self
    }

    /// Most requests waiting at once (entries). Default 1,000.
    pub fn queue_capacity(mut self, capacity: usize) -> Self {
        self.config.queue.capacity = capacity;
        self
    }

    /// Longest a request waits in the queue before it is shed. A third of the clients'
    /// timeout is a good value. Default 500 ms.
    pub fn queue_timeout(mut self, timeout: Duration) -> Self {
        self.config.queue.timeout = Nanos::from(timeout);
        self
    }

    /// Serve the newest waiting request of a priority first once the queue has not been empty
    /// for this long (adaptive LIFO). Default off.
    pub fn lifo_after(mut self, after: Duration) -> Self {
        self.config.queue.lifo_after = Some(Nanos::from(after));
        self
    }

    /// What a shed request is told to wait before retrying (`Retry-After`). Default 1 s.
    pub fn retry_after(mut self, retry_after: Duration) -> Self {
        self.retry_after = retry_after;
        self
    }

    /// Which clock the gate reads. Default [`ClockSource::Auto`]: the CPU's time-stamp
    /// counter, or tokio's clock when the gate is built inside a runtime with paused time.
    pub fn clock(mut self, clock: ClockSource) -> Self {
        self.clock = clock;
        self
    }

    /// How to read a request's priority: a tier and a cohort, from a header, the route, the
    /// caller's identity. Default: [`Priority::default`] for all.
    pub fn priority(
        mut self,
        classify: impl Fn(&Request<B>) -> Priority + Send + Sync + 'static,
    ) -> Self {
        self.classify = Arc::new(classify);
        self
    }

    /// How a response's status tells the limit how the service is doing. Default: `429`,
    /// `502`, `503` and `504` are overload signals ([`Outcome::Dropped`]); other `5xx` say
    /// nothing about capacity ([`Outcome::Ignored`]: a bug answers fast and would make the
    /// service look faster than it is); everything else is a success.
    pub fn outcome(mut self, outcome: fn(StatusCode) -> Outcome) -> Self {
        self.outcome = outcome;
        self
    }

    pub fn build(self) -> TidegateLayer<B> {
        TidegateLayer {
            gate: SharedGate::with_clock(&self.config, self.retry_after, self.clock),
            classify: self.classify,
            outcome: self.outcome,
        }
    }
}

/// The default reading of a response status: see [`Builder::outcome`].
pub fn default_outcome(status: StatusCode) -> Outcome {
    match status.as_u16() {
        429 | 502 | 503 | 504 => Outcome::Dropped,
        500..=599 => Outcome::Ignored,
        _ => Outcome::Success,
    }
}

/// Applies [`Tidegate`] to a service. Every service it wraps shares one gate.
pub struct TidegateLayer<B> {
    gate: SharedGate,
    classify: Classify<B>,
    outcome: fn(StatusCode) -> Outcome,
}

impl<B> TidegateLayer<B> {
    pub fn builder() -> Builder<B> {
        Builder::default()
    }

    /// The gate, for metrics, status pages and leases.
    pub fn gate(&self) -> &SharedGate {
        &self.gate
    }
}

impl<B> Clone for TidegateLayer<B> {
    fn clone(&self) -> Self {
        TidegateLayer {
            gate: self.gate.clone(),
            classify: self.classify.clone(),
            outcome: self.outcome,
        }
    }
}

impl<B> fmt::Debug for TidegateLayer<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TidegateLayer")
            .field("gate", &self.gate)
            .finish()
    }
}

impl<S, B> Layer<S> for TidegateLayer<B> {
    type Service = Tidegate<S, B>;

    fn layer(&self, inner: S) -> Tidegate<S, B> {
        Tidegate {
            inner,
            gate: self.gate.clone(),
            classify: self.classify.clone(),
            outcome: self.outcome,
        }
    }
}

/// An HTTP service behind a tidegate gate.
pub struct Tidegate<S, B> {
    inner: S,
    gate: SharedGate,
    classify: Classify<B>,
    outcome: fn(StatusCode) -> Outcome,
}

impl<S: Clone, B> Clone for Tidegate<S, B> {
    fn clone(&self) -> Self {
        Tidegate {
            inner: self.inner.clone(),
            gate: self.gate.clone(),
            classify: self.classify.clone(),
            outcome: self.outcome,
        }
    }
}

impl<S: fmt::Debug, B> fmt::Debug for Tidegate<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tidegate")
            .field("inner", &self.inner)
            .field("gate", &self.gate)
            .finish()
    }
}

impl<S, B, ResB> Service<Request<B>> for Tidegate<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    S::Error: Into<BoxError>,
    ResB: http_body::Body,
{
    type Response = Response<PermitBody<ResB>>;
    type Error = BoxError;
    type Future = ResponseFuture<S, B>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, request: Request<B>) -> ResponseFuture<S, B> {
        let priority = (self.classify)(&request);
        // The ready service goes with this request, which may wait in the queue before using
        // it; the clone stays for the next `poll_ready` (tower's usual idiom).
        let clone = self.inner.clone();
        let ready = std::mem::replace(&mut self.inner, clone);
        ResponseFuture {
            state: State::Acquiring {
                acquire: self.gate.acquire(priority),
                service: Some(ready),
                request: Some(request),
            },
            outcome: self.outcome,
        }
    }
}

pin_project! {
    /// The future of a [`Tidegate`] call.
    pub struct ResponseFuture<S: Service<Request<B>>, B> {
        #[pin]
        state: State<S, B>,
        outcome: fn(StatusCode) -> Outcome,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S: Service<Request<B>>, B> {
        Acquiring { acquire: Acquire, service: Option<S>, request: Option<Request<B>> },
        Calling { #[pin] future: S::Future, permit: Option<crate::Permit> },
    }
}

impl<S: Service<Request<B>>, B> fmt::Debug for ResponseFuture<S, B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, B, ResB> Future for ResponseFuture<S, B>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
    ResB: http_body::Body,
{
    type Output = Result<Response<PermitBody<ResB>>, BoxError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let this = self.as_mut().project();
            match this.state.project() {
                StateProj::Acquiring {
                    acquire,
                    service,
                    request,
                } => {
                    let permit = ready!(Pin::new(acquire).poll(cx))?;
                    let (Some(mut service), Some(request)) = (service.take(), request.take())
                    else {
                        // Both are taken only here, right before leaving this state.
                        unreachable!("Acquiring polled after its call was made")
                    };
                    let future = service.call(request);
                    self.as_mut().project().state.set(State::Calling {
                        future,
                        permit: Some(permit),
                    });
                }
                StateProj::Calling { future, permit } => {
                    let result = ready!(future.poll(cx));
                    let permit = permit.take();
                    return Poll::Ready(match result {
                        Ok(response) => {
                            let outcome = (this.outcome)(response.status());
                            Ok(response.map(|body| PermitBody::new(body, permit, outcome)))
                        }
                        Err(error) => {
                            // The service failed outright: an overload signal for the limit.
                            if let Some(permit) = permit {
                                permit.dropped();
                            }
                            Err(error.into())
                        }
                    });
                }
            }
        }
    }
}

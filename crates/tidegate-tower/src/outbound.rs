//! The client side: a tower layer for the calls a service makes to others (hyper's client,
//! tonic's channels, any `tower::Service<http::Request<B>>`), so that a caller does not make
//! its callee's overload worse.
//!
//! [`OutboundLayer`] / [`Outbound`], in front of the client:
//! - stamps every request with the priority of the request being served (the task-local that
//!   [`with_priority`] and [`PriorityScope`] set), so that the callee ranks it as the edge did;
//! - drops, before sending, a request the callee said it would refuse: the `tidegate-cutoff`
//!   header of its responses (`docs/feedback.md`, DAGOR's idea) holds a rank below which it
//!   refuses, for a while ([`Throttled::Cutoff`]), unless the edge admitted the chain of the
//!   request being served under a hint that admits it (`under=` in `tidegate-priority`,
//!   stamped on along with the priority: [`Served`]); with [`OutboundLayer::reopening`],
//!   the rank it sends up to rises back at a bounded rate when the hint loosens;
//! - throttles adaptively (Google SRE): while the callee refuses more than half of what it is
//!   sent, requests are rejected locally with probability `max(0, (requests - K * accepts) /
//!   (requests + 1))` ([`Throttled::Adaptive`], `tidegate_core::outbound::AdaptiveThrottle`).
//!
//! [`RetryLayer`] / [`Retrying`], outside it, retries a refused or failed request within a
//! [`tidegate_core::outbound::RetryBudget`] (10% of the requests, plus a floor), after an
//! exponential backoff with jitter and at least the `Retry-After` the callee asked for; a
//! request the outbound layer itself rejected is not retried.
//!
//! A refusal is a `429` or `503` answer (the callee's gate shedding); a transport error also
//! counts as not accepted.

mod priority;
mod retry;

pub use priority::{
    PRIORITY_HEADER, PriorityScope, PriorityScopeLayer, Served, ServedScope, current_priority,
    current_served, header_priority, header_served, with_priority, with_served,
};
pub use retry::{RetryFuture, RetryLayer, Retrying};

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, ready};

use http::{HeaderValue, Request, Response, StatusCode};
use pin_project_lite::pin_project;
use tidegate_core::feedback::{self, Feedback};
use tidegate_core::outbound::{AdaptiveThrottle, ThrottleConfig};
use tidegate_core::rng::Rng;
use tidegate_core::{Nanos, Priority, Time};
use tokio::time::Instant;
use tower::{BoxError, Layer, Service};

/// Why the outbound layer did not send a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Throttled {
    /// The callee refuses this priority for now (its `tidegate-cutoff` header).
    Cutoff {
        /// The least important rank the layer sends now: the callee's hint, or the line
        /// reopening toward it.
        rank: u16,
    },
    /// The adaptive throttle: the callee has been refusing most of what it is sent.
    Adaptive,
}

impl fmt::Display for Throttled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Throttled::Cutoff { rank } => write!(
                f,
                "request not sent: the callee refuses ranks past {rank} for now"
            ),
            Throttled::Adaptive => f.write_str(
                "request not sent: the callee has been refusing most requests (adaptive throttle)",
            ),
        }
    }
}

impl std::error::Error for Throttled {}

/// Whether a response is the callee refusing for overload.
pub fn is_refusal(status: StatusCode) -> bool {
    matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS | StatusCode::SERVICE_UNAVAILABLE
    )
}

/// What an outbound layer has done so far, for metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OutboundStats {
    /// Requests sent to the callee.
    pub sent: u64,
    /// Of those, answered with a refusal or failed outright.
    pub refused: u64,
    /// Not sent: the callee's cut-off refuses their priority.
    pub cut_off: u64,
    /// Not sent: the adaptive throttle.
    pub throttled: u64,
    /// `tidegate-cutoff` headers that did not parse, ignored.
    pub feedback_invalid: u64,
}

#[derive(Debug)]
struct State {
    throttle: Option<AdaptiveThrottle>,
    feedback: Feedback,
    rng: Rng,
    stats: OutboundStats,
    /// See [`OutboundLayer::without_chain_hint`].
    hold_for_chain: bool,
}

/// A layer's state behind a lock, and the clock it is read against (tokio's, so that paused
/// time in tests moves it).
#[derive(Debug)]
struct Clocked<S> {
    epoch: Instant,
    state: Mutex<S>,
}

impl<S> Clocked<S> {
    fn new(state: S) -> Clocked<S> {
        Clocked {
            epoch: Instant::now(),
            state: Mutex::new(state),
        }
    }

    fn now(&self) -> Time {
        Time::ZERO + Nanos::from(self.epoch.elapsed())
    }

    /// The state; a panic while it was held (none of the code holding it panics) leaves
    /// counts that are still counts.
    fn state(&self) -> MutexGuard<'_, S> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[derive(Debug)]
struct Shared {
    default: Priority,
    clocked: Clocked<State>,
}

impl Shared {
    fn now(&self) -> Time {
        self.clocked.now()
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.clocked.state()
    }
}

/// Applies [`Outbound`] to a client. Every client it wraps shares its throttle and hint: use
/// one layer per callee.
#[derive(Clone, Debug)]
pub struct OutboundLayer {
    shared: Arc<Shared>,
}

impl OutboundLayer {
    /// Throttling with `throttle` (`None`: off), honouring the callee's cut-off, and stamping
    /// `default` on requests made outside any priority scope.
    pub fn new(throttle: Option<ThrottleConfig>, default: Priority) -> OutboundLayer {
        OutboundLayer {
            shared: Arc::new(Shared {
                default,
                clocked: Clocked::new(State {
                    throttle: throttle.as_ref().map(AdaptiveThrottle::new),
                    feedback: Feedback::default(),
                    rng: Rng::seed(seed()),
                    stats: OutboundStats::default(),
                    hold_for_chain: true,
                }),
            }),
        }
    }

    /// The same layer, its line reopening slowly: when the callee's hint loosens or lapses,
    /// the least important rank it sends rises toward it by at most `per_second` ranks a
    /// second, and follows a deeper one at once ([`Feedback::reopening`],
    /// `docs/feedback.md`). For a caller at the edge of a call chain; not a positive number:
    /// at once, as without it.
    pub fn reopening(self, per_second: f64) -> OutboundLayer {
        self.shared.state().feedback = Feedback::reopening(per_second);
        self
    }

    /// The same layer, holding no chain's hint. By default the layer is an edge for the
    /// requests that come without one: a request served with no chain hint (`under=` in
    /// `tidegate-priority`, from an edge before this service) is admitted into its chain at
    /// its first call this layer sends, under the layer's line then (the least important rank
    /// it sends, every rank when it holds no hint: [`Feedback::under`]), and that call and
    /// every later one of the request carry it, through any outbound layer, so that no hop of
    /// the chain drops a call that hint admits (`docs/feedback.md`, "A chain holds its
    /// hint"), as the proxy's `feedback.hold_for_chain` does by default. Without it, each
    /// call of such a request is held back on the hint in force when it is sent.
    pub fn without_chain_hint(self) -> OutboundLayer {
        self.shared.state().hold_for_chain = false;
        self
    }

    pub fn stats(&self) -> OutboundStats {
        let state = self.shared.state();
        OutboundStats {
            feedback_invalid: state.feedback.invalid(),
            ..state.stats
        }
    }
}

/// The throttle's draws need only differ between processes and layers.
fn seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (std::process::id() as u64).rotate_left(32)
}

impl Default for OutboundLayer {
    /// The throttle with K = 2 over 10 s, the cut-off honoured, [`Priority::default`].
    fn default() -> OutboundLayer {
        OutboundLayer::new(Some(ThrottleConfig::default()), Priority::default())
    }
}

impl<S> Layer<S> for OutboundLayer {
    type Service = Outbound<S>;
    fn layer(&self, inner: S) -> Outbound<S> {
        Outbound {
            inner,
            shared: self.shared.clone(),
        }
    }
}

/// A client whose requests carry the current priority, are dropped if the callee would
/// refuse them, and are throttled while it refuses most. See the module docs.
#[derive(Clone, Debug)]
pub struct Outbound<S> {
    inner: S,
    shared: Arc<Shared>,
}

impl<S, B, ResB> Service<Request<B>> for Outbound<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    S::Error: Into<BoxError>,
{
    type Response = Response<ResB>;
    type Error = BoxError;
    type Future = OutboundFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        // A priority the caller put on the request itself is the request's, not the one of
        // the request being served: it neither reads nor fixes that one's chain hint.
        let (mut served, own) = match header_served(request.headers()) {
            Some((served, _)) => (served, true),
            None => (
                current_served().unwrap_or(self.shared.default.into()),
                false,
            ),
        };
        let now = self.shared.now();
        let refused = {
            let mut guard = self.shared.state();
            let state = &mut *guard;
            if let Some(rank) = state
                .feedback
                .refuses_in_chain(now, served.priority, served.under)
            {
                state.stats.cut_off += 1;
                Some(Throttled::Cutoff { rank })
            } else if let Some(throttle) = state.throttle.as_mut()
                && !throttle.admit(now, &mut state.rng)
            {
                state.stats.throttled += 1;
                Some(Throttled::Adaptive)
            } else {
                state.stats.sent += 1;
                if state.hold_for_chain && served.under.is_none() {
                    let line = state.feedback.under(now);
                    served.under = Some(line);
                    if !own {
                        priority::hold_chain(line);
                    }
                }
                None
            }
        };
        let state = match refused {
            Some(throttled) => Stage::Refused {
                throttled: Some(throttled),
            },
            None => {
                priority::stamp(request.headers_mut(), served);
                Stage::Calling {
                    future: self.inner.call(request),
                }
            }
        };
        OutboundFuture {
            stage: state,
            shared: self.shared.clone(),
        }
    }
}

pin_project! {
    /// The future of an [`Outbound`] call.
    pub struct OutboundFuture<F> {
        #[pin]
        stage: Stage<F>,
        shared: Arc<Shared>,
    }
}

pin_project! {
    #[project = StageProj]
    enum Stage<F> {
        Refused { throttled: Option<Throttled> },
        Calling { #[pin] future: F },
    }
}

impl<F> fmt::Debug for OutboundFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutboundFuture").finish_non_exhaustive()
    }
}

impl<F, ResB, E> Future for OutboundFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    E: Into<BoxError>,
{
    type Output = Result<Response<ResB>, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        match this.stage.project() {
            StageProj::Refused { throttled } => Poll::Ready(Err(match throttled.take() {
                Some(throttled) => throttled.into(),
                None => "OutboundFuture polled after completion".into(),
            })),
            StageProj::Calling { future } => {
                let result = ready!(future.poll(cx));
                let now = this.shared.now();
                let mut state = this.shared.state();
                let accepted = match &result {
                    Ok(response) => {
                        let cutoff = response.headers().get(feedback::HEADER);
                        state
                            .feedback
                            .receive(now, cutoff.map(HeaderValue::as_bytes));
                        !is_refusal(response.status())
                    }
                    Err(_) => false,
                };
                if accepted {
                    if let Some(throttle) = state.throttle.as_mut() {
                        throttle.accepted(now);
                    }
                } else {
                    state.stats.refused += 1;
                }
                Poll::Ready(result.map_err(Into::into))
            }
        }
    }
}

#[cfg(test)]
mod tests;

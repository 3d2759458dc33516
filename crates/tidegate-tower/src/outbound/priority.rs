//! The priority of the request being served, carried to the calls made while serving it.
//!
//! A request's priority (tier and cohort) is computed once, at the edge, and every later hop
//! must rank it the same: otherwise a request admitted at hop 1 may be the one hop 3 sheds, and
//! the work of hops 1 and 2 on it is wasted. The edge (the tidegate proxy) forwards it in the
//! `tidegate-priority` header; a service that calls others while serving a request keeps it in
//! a task-local for the duration of the call ([`PriorityScopeLayer`] does this for every
//! request of an HTTP service), and [`super::Outbound`] stamps it on every request sent from
//! inside that scope.

use std::fmt;
use std::future::Future;
use std::task::{Context, Poll};

use http::{HeaderMap, Request};
use tidegate_core::Priority;
use tokio::task::futures::TaskLocalFuture;
use tower::{Layer, Service};

/// The request header that carries a priority between hops (`TIER/COHORT`).
pub const PRIORITY_HEADER: &str = "tidegate-priority";

tokio::task_local! {
    static CURRENT: Priority;
}

/// The priority of the request being served by the calling task, if it runs inside
/// [`with_priority`] (or a [`PriorityScopeLayer`]'d service).
pub fn current_priority() -> Option<Priority> {
    CURRENT.try_with(|p| *p).ok()
}

/// Runs `future` with `priority` as the current priority: outbound calls made by it carry it.
pub fn with_priority<F: Future>(priority: Priority, future: F) -> TaskLocalFuture<Priority, F> {
    CURRENT.scope(priority, future)
}

/// The priority a request's `tidegate-priority` header says, if it has a valid one.
pub fn header_priority(headers: &HeaderMap) -> Option<Priority> {
    headers
        .get(PRIORITY_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
}

/// Serves each request inside the scope of its priority: the one its `tidegate-priority`
/// header says (forwarded by the hop before), or `default` without a valid one.
#[derive(Clone, Copy, Debug)]
pub struct PriorityScopeLayer {
    default: Priority,
}

impl PriorityScopeLayer {
    pub fn new(default: Priority) -> PriorityScopeLayer {
        PriorityScopeLayer { default }
    }
}

impl Default for PriorityScopeLayer {
    fn default() -> PriorityScopeLayer {
        PriorityScopeLayer::new(Priority::default())
    }
}

impl<S> Layer<S> for PriorityScopeLayer {
    type Service = PriorityScope<S>;
    fn layer(&self, inner: S) -> PriorityScope<S> {
        PriorityScope {
            inner,
            default: self.default,
        }
    }
}

/// A service whose requests are served in the scope of their priority.
#[derive(Clone)]
pub struct PriorityScope<S> {
    inner: S,
    default: Priority,
}

impl<S: fmt::Debug> fmt::Debug for PriorityScope<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PriorityScope")
            .field("inner", &self.inner)
            .field("default", &self.default)
            .finish()
    }
}

impl<S, B> Service<Request<B>> for PriorityScope<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TaskLocalFuture<Priority, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let priority = header_priority(request.headers()).unwrap_or(self.default);
        with_priority(priority, self.inner.call(request))
    }
}

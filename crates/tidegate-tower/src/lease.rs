//! Advertising the service's lease to the proxies in front of it.
//!
//! A service that runs its own gate knows its capacity better than any proxy can guess it.
//! [`LeaseLayer`] adds `tidegate-lease: allowed=N, ttl=T` (see `docs/lease.md`) to every
//! response, with `N` the gate's current limit: a tidegate proxy caps its limit for this
//! upstream at `N` until `T` has passed, and balances towards the upstreams with the most room,
//! as RSocket's least-loaded balancer does with request leases. The lease is refreshed by
//! every response, so `T` only needs to outlast the gap between two responses; when responses
//! stop, the lease lapses and the proxy falls back to its own limit.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tidegate_core::Nanos;
use tidegate_core::lease::{HEADER, LeaseHeader};
use tower::{Layer, Service};

use crate::SharedGate;

/// Adds the `tidegate-lease` header to every response of the wrapped service.
#[derive(Clone, Debug)]
pub struct LeaseLayer {
    gate: SharedGate,
    ttl: Duration,
}

impl LeaseLayer {
    /// Leases `gate`'s current limit, valid for `ttl` after each response.
    pub fn new(gate: SharedGate, ttl: Duration) -> LeaseLayer {
        LeaseLayer { gate, ttl }
    }
}

impl<S> Layer<S> for LeaseLayer {
    type Service = Leasing<S>;

    fn layer(&self, inner: S) -> Leasing<S> {
        Leasing {
            inner,
            gate: self.gate.clone(),
            ttl: self.ttl,
        }
    }
}

/// A service whose responses carry its lease.
#[derive(Clone, Debug)]
pub struct Leasing<S> {
    inner: S,
    gate: SharedGate,
    ttl: Duration,
}

impl<S, B, ResB> Service<Request<B>> for Leasing<S>
where
    S: Service<Request<B>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = LeasingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        LeasingFuture {
            inner: self.inner.call(request),
            gate: self.gate.clone(),
            ttl: self.ttl,
        }
    }
}

pin_project! {
    /// The future of a [`Leasing`] call.
    pub struct LeasingFuture<F> {
        #[pin]
        inner: F,
        gate: SharedGate,
        ttl: Duration,
    }
}

impl<F> fmt::Debug for LeasingFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeasingFuture")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

impl<F, ResB, E> Future for LeasingFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        let lease = LeaseHeader {
            allowed: this.gate.limit(),
            ttl: Nanos::from(*this.ttl),
        };
        if let Ok(value) = HeaderValue::from_str(&lease.to_string()) {
            response.headers_mut().insert(HEADER, value);
        }
        Poll::Ready(Ok(response))
    }
}

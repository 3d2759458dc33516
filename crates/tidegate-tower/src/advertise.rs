//! A gate's state told on every response of the service behind it, in a header its callers
//! act on: its lease ([`crate::lease`]) or its priority cut-off ([`crate::feedback`]).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::{HeaderValue, Request, Response};
use pin_project_lite::pin_project;
use tidegate_core::Nanos;
use tidegate_core::feedback::{self, CutoffHeader};
use tidegate_core::lease::{self, LeaseHeader};

use crate::SharedGate;

/// Which of the gate's states a response carries, valid for how long after its receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Advert {
    /// `tidegate-lease`: the gate's current limit (`docs/lease.md`).
    Lease { ttl: Duration },
    /// `tidegate-cutoff`: the least important rank the gate admits, while it cuts by rank
    /// (`docs/feedback.md`).
    Cutoff { ttl: Duration },
}

impl Advert {
    /// The header's name and value for `gate` now; `None` when there is nothing to say.
    fn header(self, gate: &SharedGate) -> Option<(&'static str, HeaderValue)> {
        let (name, value) = match self {
            Advert::Lease { ttl } => {
                let lease = LeaseHeader {
                    allowed: gate.limit(),
                    ttl: Nanos::from(ttl),
                };
                (lease::HEADER, lease.to_string())
            }
            Advert::Cutoff { ttl } => {
                let cutoff = CutoffHeader::of_rank(gate.told_cutoff(), Nanos::from(ttl))?;
                (feedback::HEADER, cutoff.to_string())
            }
        };
        HeaderValue::from_str(&value)
            .ok()
            .map(|value| (name, value))
    }
}

/// A service whose responses carry the header of an [`Advert`] about a gate.
#[derive(Clone, Debug)]
pub struct Advertising<S> {
    pub(crate) inner: S,
    pub(crate) gate: SharedGate,
    pub(crate) advert: Advert,
}

impl<S, B, ResB> tower::Service<Request<B>> for Advertising<S>
where
    S: tower::Service<Request<B>, Response = Response<ResB>>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = AdvertisingFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        AdvertisingFuture {
            inner: self.inner.call(request),
            gate: self.gate.clone(),
            advert: self.advert,
        }
    }
}

pin_project! {
    /// The future of an [`Advertising`] call.
    pub struct AdvertisingFuture<F> {
        #[pin]
        inner: F,
        gate: SharedGate,
        advert: Advert,
    }
}

impl<F> fmt::Debug for AdvertisingFuture<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdvertisingFuture")
            .field("advert", &self.advert)
            .finish_non_exhaustive()
    }
}

impl<F, ResB, E> Future for AdvertisingFuture<F>
where
    F: Future<Output = Result<Response<ResB>, E>>,
{
    type Output = Result<Response<ResB>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let mut response = ready!(this.inner.poll(cx))?;
        if let Some((name, value)) = this.advert.header(this.gate) {
            response.headers_mut().insert(name, value);
        }
        Poll::Ready(Ok(response))
    }
}

//! Advertising the service's lease to the proxies in front of it.
//!
//! A service that runs its own gate knows its capacity better than any proxy can guess it.
//! [`LeaseLayer`] adds `tidegate-lease: allowed=N, ttl=T` (see `docs/lease.md`) to every
//! response, with `N` the gate's current limit: a tidegate proxy caps its limit for this
//! upstream at `N` until `T` has passed, and balances towards the upstreams with the most room,
//! as RSocket's least-loaded balancer does with request leases. The lease is refreshed by
//! every response, so `T` only needs to outlast the gap between two responses; when responses
//! stop, the lease lapses and the proxy falls back to its own limit.

use std::time::Duration;

use tower::Layer;

use crate::SharedGate;
use crate::advertise::{Advert, Advertising, AdvertisingFuture};

/// A service whose responses carry its lease.
pub type Leasing<S> = Advertising<S>;
/// The future of a [`Leasing`] call.
pub type LeasingFuture<F> = AdvertisingFuture<F>;

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
        Advertising {
            inner,
            gate: self.gate.clone(),
            advert: Advert::Lease { ttl: self.ttl },
        }
    }
}

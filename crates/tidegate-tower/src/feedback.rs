//! Telling callers how deep the gate is cutting.
//!
//! [`CutoffLayer`] adds `tidegate-cutoff: rank=R, ttl=T` (see `docs/feedback.md`) to every
//! response while the gate's regulator sheds by priority, with `R` the least important rank
//! it still admits. A caller that honours it (the outbound layer of [`crate::outbound`])
//! drops, before sending, the requests ranked past `R` until `T` has passed: they die at the
//! caller, before any of the work upstream of it is spent on them. Put the layer outside the
//! one that turns [`crate::Shed`] into responses, so that refusals carry it too.

use std::time::Duration;

use tower::Layer;

use crate::SharedGate;
use crate::advertise::{Advert, Advertising};

/// The `ttl` tidegate's senders put on their cut-off: a few of PIE's 15 ms updates, and
/// short enough for callers to follow a cut that loosens.
pub const DEFAULT_TTL: Duration = Duration::from_millis(250);

/// Adds the `tidegate-cutoff` header to every response of the wrapped service while its
/// gate cuts by rank.
#[derive(Clone, Debug)]
pub struct CutoffLayer {
    gate: SharedGate,
    ttl: Duration,
}

impl CutoffLayer {
    /// Says `gate`'s cut-off, valid for `ttl` after each response.
    pub fn new(gate: SharedGate, ttl: Duration) -> CutoffLayer {
        CutoffLayer { gate, ttl }
    }
}

impl<S> Layer<S> for CutoffLayer {
    type Service = Advertising<S>;

    fn layer(&self, inner: S) -> Advertising<S> {
        Advertising {
            inner,
            gate: self.gate.clone(),
            advert: Advert::Cutoff { ttl: self.ttl },
        }
    }
}

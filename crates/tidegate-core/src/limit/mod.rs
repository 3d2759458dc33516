//! Concurrency limits: how many requests may be in flight in the service at once.
//!
//! A limit observes one [`Sample`] per finished request (its round-trip time, how many were in
//! flight when it started, and whether it succeeded) and exposes the current limit. It never
//! reads a clock: a sample carries its own time. Each algorithm lives in its own file, with its
//! source and its defaults in its doc comment; `docs/algorithms.md` compares them.

mod aimd;
mod autotune;
mod bdp;
mod fixed;
mod gradient2;
mod hill_climb;
#[cfg(test)]
pub(crate) mod testkit;
mod vegas;
mod window_counts;

use std::fmt;

pub use aimd::{Aimd, AimdConfig};
pub use autotune::{Autotune, AutotuneConfig};
pub use bdp::{Bdp, BdpConfig};
pub use fixed::{Fixed, FixedConfig};
pub use gradient2::{Gradient2, Gradient2Config};
pub use hill_climb::{HillClimb, HillClimbConfig};
pub use vegas::{Vegas, VegasConfig};

use crate::time::{Nanos, Time};

/// How a request that held a permit ended, as far as the limit should learn from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The service answered in time; the round-trip time is a measurement of its health.
    Success,
    /// The service failed in a way that signals overload: refused, reset, timed out, or
    /// answered with an overload status. Limits back off on these.
    Dropped,
    /// Says nothing about the service's capacity (a client error, a cancelled call): the limit
    /// must not learn from it.
    Ignored,
}

/// One finished request, as seen by a limit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sample {
    /// When the request finished.
    pub now: Time,
    /// From admission into the service to completion (queueing in the gate excluded).
    pub rtt: Nanos,
    /// Requests in flight when this one was admitted, itself included.
    pub inflight: u32,
    pub outcome: Outcome,
}

impl Sample {
    /// Whether the service answered in time: a success, and (a caller's `timeout` known) one
    /// that came before it. A success at or past the timeout is a timeout that looks like a
    /// success, and the limits that know the timeout count it as a drop.
    pub fn in_time(&self, timeout: Option<Nanos>) -> bool {
        self.outcome == Outcome::Success && timeout.is_none_or(|timeout| self.rtt < timeout)
    }
}

/// An adaptive (or fixed) concurrency limit.
pub trait Limit: Send + fmt::Debug {
    /// The current limit, at least 1.
    fn limit(&self) -> u32;

    /// Learns from one finished request. Samples arrive in completion order, with `now`
    /// non-decreasing.
    fn on_sample(&mut self, sample: &Sample);

    /// Whether the limit is an operator's bound rather than an estimate: the gate then holds
    /// to it where it would let requests past an estimate (while the driver's own delays,
    /// not the service, hold the slots). A fixed limit is often a hard fact of the service
    /// (a pool of connections, a licence), which no measurement of the driver changes.
    fn is_fixed(&self) -> bool {
        false
    }
}

impl<L: Limit + ?Sized> Limit for Box<L> {
    fn limit(&self) -> u32 {
        (**self).limit()
    }
    fn on_sample(&mut self, sample: &Sample) {
        (**self).on_sample(sample)
    }
    fn is_fixed(&self) -> bool {
        (**self).is_fixed()
    }
}

//! tidegate inside a Rust service: the core's gate made safe to share between tasks and
//! threads, and a tower layer that puts it in front of an HTTP service.
//!
//! - [`SharedGate`]: `acquire(priority).await` gives a [`Permit`] (at once, or after
//!   queueing) or a [`Shed`] error; the permit reports how the request went.
//! - [`TidegateLayer`] / [`Tidegate`]: the gate as tower middleware for `http` services
//!   (axum, tonic, hyper), holding the permit until the response body ends.
//! - [`metrics`]: the gate's counters and gauges in a `prometheus-client` registry.
//! - [`lease`]: advertise the service's current lease to the proxies in front of it.
//! - [`feedback`]: tell callers how deep the gate is cutting (`tidegate-cutoff`).
//! - [`outbound`]: the client side: the current priority stamped on outbound calls, the
//!   callee's cut-off honoured, adaptive throttling and budgeted retries.

pub mod advertise;
mod body;
mod clock;
mod credits;
pub mod error;
pub mod feedback;
mod layer;
pub mod lease;
pub mod metrics;
pub mod outbound;
pub mod peers;
mod shared;

pub use body::PermitBody;
pub use clock::ClockSource;
pub use error::{Shed, ShedReason};
pub use layer::{Builder, ResponseFuture, Tidegate, TidegateLayer, default_outcome};
pub use shared::{Acquire, Permit, SharedGate};

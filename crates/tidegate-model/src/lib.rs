//! Sans-IO models of the services and the clients of the overload experiments.
//!
//! Like the core, a model never reads a clock and does no I/O: a service is told "this request
//! arrives now" and answers at once with when it will complete (or that it queued or refused
//! it); a client is asked when its next request goes out and what it looks like. Whoever
//! drives them (the simulator in virtual time, the lab on real sockets) owns the timers. The
//! models cover the services of the seed documents (DESIGN.md section 4):
//!
//! - [`service::Pool`]: a worker pool with a bounded internal FIFO that refuses when full
//!   (the capacity-management demo), and contention beyond an optimal concurrency that slows
//!   every new piece of work (Kanaloa's mock service);
//! - [`service::Curve`]: a latency curve by concurrency or by requests per window (the RSocket
//!   demo's `10 => 2; 50 => 5; 120 => 20; => 5000`);
//! - capacity changes on a schedule ([`service::Change`]) and several instances;
//! - [`lease::StaticLease`]: an RSocket responder's static lease, N requests per window;
//! - [`client`]: open-loop arrivals (constant or Poisson, with steps and ramps), closed-loop
//!   workers, a per-request timeout, a connection cap, a tier mix, caller keys and retries;
//! - [`fleet`]: hops of a call chain, proxies and instances behind load balancers, and the
//!   clients' retry modes, for the simulator's fleet models.
//!
//! Work a service accepted always runs to its end, whether or not its client is still waiting:
//! a service does not learn that its caller gave up, which is what makes an overload collapse.

pub mod client;
pub mod fleet;
pub mod lease;
pub mod service;

mod de;

pub use de::NonNegative;

/// A configuration that parsed but makes no sense, naming the offending key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {reason}")]
pub struct ConfigError {
    /// The key's path, e.g. `service.pool.workers`.
    pub key: String,
    pub reason: String,
}

impl ConfigError {
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> ConfigError {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

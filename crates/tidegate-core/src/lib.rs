//! Sans-IO overload control for tidegate.
//!
//! Everything here is a plain state machine: no clock, no threads, no I/O. Time is an argument
//! ([`Time`], nanoseconds), randomness comes from a seeded [`rng::Rng`], and the same code runs
//! in the simulator (virtual time), in the tower layer and the proxy (real time) and in tests
//! (a list of events). See `docs/algorithms.md` for the algorithms.
//!
//! - [`priority`]: tiers and cohorts, 768 ranks; cohorts from caller keys.
//! - [`limit`]: how many requests may be in flight (`Fixed`, `Aimd`, `Vegas`, `Gradient2`,
//!   `HillClimb`, `Autotune`, `Bdp`).
//! - [`regulator`]: who is turned away before queueing (`Pie`, `Codel`, `Pid`, `Off`).
//! - [`outbound`]: the caller's side: adaptive throttling, retry budgets, retry policies.
//! - [`feedback`]: a gate's cut-off told to its callers (`tidegate-cutoff`).

pub mod config;
pub mod fast_hash;
pub mod feedback;
pub mod gate;
pub mod lease;
pub mod limit;
pub mod outbound;
pub mod peers;
pub mod priority;
pub mod queue;
pub mod regulator;
pub mod rng;
pub mod time;

pub use priority::Priority;
pub use time::{Nanos, Time};

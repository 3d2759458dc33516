//! tidegate's lab: the pieces that prove the gate works over real sockets.
//!
//! The simulator answers "what would happen" in virtual time; the lab answers "what does
//! happen" with real connections, real kernels and real clocks, on the same scenarios.
//!
//! - [`load`]: an open-loop HTTP load generator that measures latency from each request's
//!   intended send time (no coordinated omission), by tier, with HDR histograms.
//! - [`origin`]: the mock origin, an HTTP server driven by the simulator's own service model.
//! - [`experiment`]: a scenario file over real sockets (origin, protection, load), each
//!   figure beside the simulator's prediction.

pub mod experiment;
pub mod load;
pub mod origin;

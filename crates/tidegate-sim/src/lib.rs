//! tidegate's simulator: models of overload experiments, run in virtual time.
//!
//! Every model here is event-driven: it jumps from one event to the next instead of stepping
//! virtual time, so that hours of simulated traffic at hundreds of thousands of messages per
//! second take seconds, and it draws all randomness from seeded [`tidegate_core::rng::Rng`]
//! streams, so that the same arguments and seed give byte-identical results.
//!
//! - [`pdc`]: the producer-dispatcher-consumer model of ScyllaDB's "phantom jams" article.
//! - [`scenario`]: scenario files (`scenarios/*.toml`) and the engine that runs their arms,
//!   tidegate's gate between the models of `tidegate-model`.
//! - [`replay`]: an access log's service fitted and its traffic replayed through every arm.
//! - [`fleet`]: fleet scenarios (`scenarios/fleet/*.toml`): call chains of hops, each several
//!   proxies with their own gates in front of several instances, clients that retry.
//! - [`chart`]: line charts as standalone SVG files for the reports.
//! - [`sweep`]: the robustness sweep, every arm on a generated family of service shapes and
//!   loads, with an oracle and the targets.
//! - [`histogram`]: a fixed-size log-linear latency histogram (memory independent of the
//!   number of samples).

pub mod chart;
pub mod fleet;
pub mod histogram;
mod parallel;
pub mod pdc;
pub mod replay;
pub mod scenario;
pub mod sweep;

//! tidegate as a reverse proxy in front of any HTTP service: the service needs no change and
//! the proxy no knowledge of its capacity (Kanaloa's promise).
//!
//! Per request: classify (priority header, caller-key header, route rules) -> pick the
//! upstream with the most availability -> pass its gate (`tidegate-tower`'s shared gate, the
//! core's algorithms) -> forward over a pooled keep-alive client -> hold the permit until the
//! response's last byte (a stream's, until its headers) -> feed the limit how it went. Turned
//! away: 503 (or 429) with `Retry-After` and `tidegate-shed: REASON`, at once or after at most
//! the queue timeout (a gRPC request: gRPC's own RESOURCE_EXHAUSTED or UNAVAILABLE, `grpc`).
//! Either side may speak TLS (`tls`).
//!
//! ```no_run
//! # async fn example() -> Result<(), tidegate_proxy::Error> {
//! use tidegate_proxy::{Config, Proxy, UpstreamConfig};
//!
//! let config = Config {
//!     upstreams: vec![UpstreamConfig::new("http://127.0.0.1:3000")],
//!     ..Config::default()
//! };
//! let proxy = Proxy::bind(config).await?;
//! println!("listening on {}", proxy.local_addr());
//! // Any future that completes when the proxy should drain and stop: a signal, a channel.
//! let (_stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let drained = proxy.run(async { let _ = stopped.await; }).await;
//! assert_eq!(drained.cut, 0);
//! # Ok(())
//! # }
//! ```
//!
//! `docs/proxy.md` is the user's guide: configuration, headers, status codes, metrics and
//! shutdown.

mod abandoned;
mod accept;
mod admin;
mod checks;
mod classify;
pub mod config;
mod connection;
mod cutoff;
mod dashboard;
mod dry_run;
mod error;
mod forward;
mod grpc;
mod handler;
#[cfg(test)]
mod header_props;
mod http2_watch;
mod metrics;
mod pool;
mod readings;
mod recovery;
mod refuse;
mod reload;
mod request_body;
mod server;
mod shed;
mod stall;
mod stream;
mod stream_cap;
mod target;
mod timed;
mod tls;
mod trust;
mod upgrade;
mod upstream;
mod would_shed;

pub use config::{Config, DEFAULT_CONFIG, Mode, UpstreamConfig};
pub use error::Error;
pub use handler::ERROR_HEADER;
pub use readings::{GateReading, GateReadings};
pub use reload::{ReloadError, ReloadSummary};
pub use server::{Drained, Proxy, Reload};
pub use trust::{Cidr, ParseCidrError};

//! Why the proxy could not start. Each error names its culprit: the file and line of a bad
//! key, the URL that does not parse, the address already in use. The underlying error (the
//! parser's message with the line, the operating system's) is the `source`, not repeated in
//! the message: print the chain (`{:#}` with anyhow).

use std::net::SocketAddr;

/// A startup error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("cannot read {path}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    /// toml's message names the key, its line and column, and the expected keys or type.
    #[error("in {origin}")]
    Parse {
        origin: String,
        #[source]
        source: Box<toml::de::Error>,
    },
    #[error("invalid {key}: {reason}")]
    Invalid { key: String, reason: String },
    #[error("invalid upstream URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error(
        "no upstream: give --upstream URL, or [[upstreams]] url = \"...\" in the configuration"
    )]
    NoUpstream,
    #[error("cannot listen on {addr} ({role})")]
    Bind {
        role: &'static str,
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

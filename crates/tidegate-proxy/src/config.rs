//! The proxy's configuration: every key has a default, so `--upstream URL` alone is a complete
//! configuration, and every table rejects unknown keys, so that a typo is an error naming the
//! key and its line instead of a setting silently ignored.
//!
//! The gate's section is `tidegate_core::config::GateConfig`, unchanged: the same file format
//! as the simulator's and the library's. [`DEFAULT_CONFIG`] (`tidegate proxy
//! --print-default-config`) lists every key with its default and what it does.

use std::net::SocketAddr;
use std::path::Path;

use http::HeaderName;
use serde::{Deserialize, Deserializer, Serialize};
use tidegate_core::config::GateConfig;
use tidegate_core::priority::CohortMap;
use tidegate_core::{Nanos, Priority};

pub use crate::accept::AtMax;
use crate::checks;
pub use crate::connection::ConnectionsConfig;
use crate::error::Error;
pub use crate::stream::StreamsConfig;
use crate::target::Target;
pub use crate::tls::TlsConfig;
use crate::trust::Cidr;

/// Everything the proxy needs. `Config::default()` plus one upstream is a working proxy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Where clients connect (HTTP/1.1 and h2c on the same port, or TLS with `[tls]`).
    pub listen: SocketAddr,
    /// Where `/metrics`, `/status`, `/dashboard`, `/healthz` and `/readyz` are served.
    pub admin: SocketAddr,
    /// Worker threads of the runtime (the CLI's `--threads`): 1 runs everything on one thread,
    /// 0 one per core; at most 1024.
    #[serde(deserialize_with = "checks::threads")]
    pub threads: usize,
    /// The services behind the proxy, each with its own name.
    #[serde(deserialize_with = "upstreams")]
    pub upstreams: Vec<UpstreamConfig>,
    /// `enforce` sheds; `dry-run` forwards everything and counts what it would have shed
    /// (each upstream's `mode` overrides it).
    pub mode: Mode,
    pub client: ClientConfig,
    pub server: ServerConfig,
    /// Bounds on client connections: how many, how slow, how large.
    pub connections: ConnectionsConfig,
    /// TLS on the listener (a certificate and key) and to `https://` upstreams.
    pub tls: TlsConfig,
    pub priority: PriorityConfig,
    /// Whose priority, caller-key and `X-Forwarded-For` headers are believed.
    pub trust: TrustConfig,
    /// Path prefixes with their own tier or partition; the longest matching prefix applies.
    pub routes: Vec<Route>,
    pub ejection: EjectionConfig,
    /// Each gate's limit, regulator and queue (one gate per upstream and partition).
    pub gate: GateConfig,
    /// The live page on the admin listener, `/dashboard`.
    pub dashboard: DashboardConfig,
    /// WebSocket, event streams and other long-lived streams: their cap and idle timeout.
    pub streams: StreamsConfig,
    /// With `[peers]`, the proxy stamps its gate's learnt limit and drop ratio on what it
    /// forwards (`tidegate-peer`) and holds its limit and ratio toward the means its
    /// upstream's instances say back (`tidegate-peers`), so that proxies in front of the
    /// same instances hold the same room and draw the same line (`docs/peers.md`). The
    /// instances need `tidegate_tower::peers::PeerBoardLayer` (the lab's origin:
    /// `tidegate origin --peers`). Off unless set.
    pub peers: Option<tidegate_core::peers::PeerConfig>,
    /// How the proxy acts on its upstream's cut-off (`tidegate-cutoff`) in a call chain
    /// (`docs/feedback.md`).
    pub feedback: FeedbackConfig,
}

/// The proxy as a caller in a call chain: what it does with its upstream's cut-off hints
/// beyond dropping what they refuse (`docs/feedback.md`). Both off by default: together
/// with the gates' `queue.hold_back_starving` they keep a chain's work at a cost of
/// goodput (`docs/experiments/README.md`, "Fleets and call chains").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct FeedbackConfig {
    /// At the edge of a call chain: forward every request with the hint it was admitted
    /// under (`under=R` in the priority header, on a field line after the priority's),
    /// unless it came with one, so that no later proxy or outbound layer drops a call of
    /// its chain on a hint that admits it. Default: on wherever the priority is forwarded
    /// (`priority.forward` with a `priority.header`): it spares the work of the chains whose
    /// last hop sheds and costs those whose edge sheds for itself nothing measurable
    /// (docs/feedback.md, "What the three rules cost"); `false` forwards no hint; `true`
    /// insists, an error where the priority is not forwarded.
    pub hold_for_chain: Option<bool>,
    /// When the upstream's hint loosens or lapses, the least important rank the proxy sends
    /// rises toward it by at most this many ranks a second; it follows a deeper hint at
    /// once. 0: at once. Default 0.
    pub reopen_rate: f64,
}

impl Default for FeedbackConfig {
    fn default() -> FeedbackConfig {
        FeedbackConfig {
            hold_for_chain: None,
            reopen_rate: 0.0,
        }
    }
}

impl Default for Config {
    fn default() -> Config {
        Config {
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            admin: SocketAddr::from(([127, 0, 0, 1], 9090)),
            threads: 0,
            upstreams: Vec::new(),
            mode: Mode::Enforce,
            client: ClientConfig::default(),
            server: ServerConfig::default(),
            connections: ConnectionsConfig::default(),
            tls: TlsConfig::default(),
            priority: PriorityConfig::default(),
            trust: TrustConfig::default(),
            routes: Vec::new(),
            ejection: EjectionConfig::default(),
            gate: GateConfig::default(),
            dashboard: DashboardConfig::default(),
            streams: StreamsConfig::default(),
            peers: None,
            feedback: FeedbackConfig::default(),
        }
    }
}

/// Whether a gate sheds or only counts what it would shed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Shed what the gate sheds (the default).
    #[default]
    Enforce,
    /// Forward everything; count what would have been shed.
    DryRun,
}

/// One service behind the proxy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamConfig {
    /// `http://host:port`, optionally with a path prefix put before every request's path.
    #[serde(deserialize_with = "checks::url")]
    pub url: String,
    /// The name in metrics and `/status`; the URL's `host:port` when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// This upstream's mode, when it differs from the proxy's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<Mode>,
}

impl UpstreamConfig {
    pub fn new(url: impl Into<String>) -> UpstreamConfig {
        UpstreamConfig {
            url: url.into(),
            name: None,
            mode: None,
        }
    }
}

/// How the proxy talks to the upstreams.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientConfig {
    /// Longest wait for an upstream's response headers (connecting included); past it the
    /// client gets 504. The gate's limits are told it, so that answers pinned at the timeout
    /// count as failures.
    pub timeout: Nanos,
    /// Longest wait for a TCP connection to an upstream; past it the client gets 502.
    pub connect_timeout: Nanos,
    /// Longest silence of an upstream in the middle of a response body; past it the body is
    /// cut (the client sees the response end early) and the gate gets a dropped sample.
    pub read_timeout: Nanos,
    /// How long an idle keep-alive connection stays in the pool.
    pub pool_idle_timeout: Nanos,
    /// Most idle connections kept per upstream.
    pub pool_max_idle: usize,
    /// Speak HTTP/2 (prior knowledge, h2c) to the upstreams instead of HTTP/1.1.
    pub http2: bool,
}

impl Default for ClientConfig {
    fn default() -> ClientConfig {
        ClientConfig {
            timeout: Nanos::from_secs(30),
            connect_timeout: Nanos::from_secs(1),
            read_timeout: Nanos::from_secs(60),
            pool_idle_timeout: Nanos::from_secs(90),
            pool_max_idle: 1024,
            http2: false,
        }
    }
}

/// How the proxy answers its clients.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// The status of a shed request: 503 or 429.
    pub shed_status: u16,
    /// What a shed request is told in `Retry-After` (rounded up to whole seconds).
    pub retry_after: Nanos,
    /// On SIGTERM or SIGINT, how long requests in flight may take to finish.
    pub drain_timeout: Nanos,
    /// Accept HTTP/2 with prior knowledge (h2c) besides HTTP/1.1.
    pub http2: bool,
    /// What happens to the slot of a request whose client goes away while the upstream has it.
    pub on_client_gone: OnClientGone,
}

impl Default for ServerConfig {
    fn default() -> ServerConfig {
        ServerConfig {
            shed_status: 503,
            retry_after: Nanos::from_secs(1),
            drain_timeout: Nanos::from_secs(10),
            http2: true,
            on_client_gone: OnClientGone::Wait,
        }
    }
}

/// A client went away while its request was at the upstream (before the response headers):
/// what becomes of the request's slot in the gate. (A request still queued always leaves the
/// queue at once; one whose response is streaming releases its slot at once either way.)
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnClientGone {
    /// Keep the slot until the upstream answers or `client.timeout` passes, then release it
    /// with what the answer says about the upstream. An upstream is not told that a client
    /// left, and most keep working on the request: freeing its slot at once would let the
    /// gate send one more request to an upstream that has freed nothing, and callers that time
    /// out would then pile work up as if there were no limit.
    Wait,
    /// Free the slot at once and close the upstream connection: for upstreams that stop
    /// working on a request when its connection closes.
    Release,
}

/// How a request's priority is read.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PriorityConfig {
    /// The request header with the tier, or the tier and cohort: `1` or `1/17`. A malformed
    /// value gets the default priority and is counted. Empty: no header is read.
    #[serde(deserialize_with = "checks::header")]
    pub header: String,
    /// The priority of a request that says nothing, as `TIER/COHORT`.
    #[serde(with = "priority_text")]
    pub default: Priority,
    /// A request header naming the caller (a user id, an API key): its cohort is a stable
    /// hash of it, the same on every proxy instance, so that all instances shed the same
    /// callers first. Empty: cohorts come only from the priority header.
    #[serde(deserialize_with = "checks::header")]
    pub caller_key_header: String,
    /// How the caller keys map to cohorts (how often a caller changes cohort, and a salt).
    pub cohorts: CohortMap,
    /// Send the priority in force to the upstream in `header`, so that tidegate gates further
    /// down see the same priority.
    pub forward: bool,
}

impl Default for PriorityConfig {
    fn default() -> PriorityConfig {
        PriorityConfig {
            header: "tidegate-priority".to_owned(),
            default: Priority::default(),
            caller_key_header: String::new(),
            cohorts: CohortMap::default(),
            forward: true,
        }
    }
}

/// The trust boundary (`crate::trust`): the clients whose priority and caller-key headers
/// are honoured and whose `X-Forwarded-For` is kept.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TrustConfig {
    /// Address blocks (`"10.0.0.0/8"`, `"fd00::/8"`, `"192.0.2.7"`) of the clients trusted:
    /// the load balancers and gateways in front of the proxy. Any other client gets the
    /// route's or the default priority and an `X-Forwarded-For` of its own address only.
    /// Default: loopback.
    pub sources: Vec<Cidr>,
}

impl Default for TrustConfig {
    fn default() -> TrustConfig {
        TrustConfig {
            sources: crate::trust::loopback(),
        }
    }
}

/// A route rule: requests whose path starts with `prefix` get `tier` (whatever their header
/// says) and go through the gates of `partition`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    pub prefix: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<u32>,
    /// A name: the routes sharing it share a gate per upstream, apart from the default one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<String>,
}

/// When an upstream that keeps failing is taken out of the balancing, and how it comes back.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EjectionConfig {
    /// Failures in a row (refused, reset, timed out) that eject an upstream; 0 never ejects.
    pub consecutive_failures: u32,
    /// How long the first ejection lasts; each ejection in a row doubles it.
    pub base_time: Nanos,
    /// The longest an ejection lasts.
    pub max_time: Nanos,
    /// While an upstream is ejected, a connection to it is tried this often; once one
    /// succeeds the next request probes it, without waiting for the ejection to end. Zero:
    /// only the ejection's end brings a probe.
    pub reconnect_interval: Nanos,
}

impl Default for EjectionConfig {
    fn default() -> EjectionConfig {
        EjectionConfig {
            consecutive_failures: 5,
            base_time: Nanos::from_secs(5),
            max_time: Nanos::from_secs(60),
            reconnect_interval: Nanos::from_millis(500),
        }
    }
}

/// The live dashboard (`/dashboard` on the admin listener): how often it samples the gates and
/// how much it keeps. It samples from the start, so that a page opened late shows the past.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DashboardConfig {
    /// Time between two samples of every gate (at least 10 ms).
    pub interval: Nanos,
    /// Samples kept in memory, the oldest forgotten first (1 to 86,400).
    pub history: usize,
}

impl Default for DashboardConfig {
    fn default() -> DashboardConfig {
        DashboardConfig {
            interval: Nanos::from_secs(1),
            history: 300,
        }
    }
}

/// The default configuration as `tidegate proxy --print-default-config` prints it: every key
/// with its default and a comment. A test checks that it parses to `Config::default()` and
/// names every key.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

impl Config {
    /// Parses a TOML document; `origin` (a file name) prefixes the error, which names the key
    /// and its line.
    pub fn parse(text: &str, origin: &str) -> Result<Config, Error> {
        toml::from_str(text).map_err(|source| Error::Parse {
            origin: origin.to_owned(),
            source: Box::new(source),
        })
    }

    /// Reads and parses a TOML file.
    pub fn from_file(path: &Path) -> Result<Config, Error> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: origin.clone(),
            source,
        })?;
        Config::parse(&text, &origin)
    }

    /// The configuration as TOML (what `--check` prints).
    pub fn to_toml(&self) -> Result<String, Error> {
        toml::to_string(self).map_err(|e| Error::Invalid {
            key: "configuration".to_owned(),
            reason: e.to_string(),
        })
    }

    /// Checks what the types cannot: values in range, valid header names, valid URLs.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |key: &str, reason: String| {
            Err(Error::Invalid {
                key: key.to_owned(),
                reason,
            })
        };
        if self.upstreams.is_empty() {
            return Err(Error::NoUpstream);
        }
        for upstream in &self.upstreams {
            Target::parse(&upstream.url)?;
        }
        crate::tls::check(&self.tls, self.any_https())?;
        if let Some(reason) = duplicate_upstream(&self.upstreams) {
            return invalid("upstreams", reason);
        }
        if let Some(reason) = checks::threads_reason(self.threads) {
            return invalid("threads", reason);
        }
        if let Some(reason) = checks::header_bytes_reason(self.connections.max_header_bytes) {
            return invalid("connections.max_header_bytes", reason);
        }
        for (key, value) in [
            ("connections.max", self.connections.max),
            ("connections.max_headers", self.connections.max_headers),
            (
                "connections.http2_max_concurrent_streams",
                self.connections.http2_max_concurrent_streams as usize,
            ),
        ] {
            if value == 0 {
                return invalid(key, "must be at least 1".to_owned());
            }
        }
        let rate = self.feedback.reopen_rate;
        if !(rate.is_finite() && rate >= 0.0) {
            return invalid(
                "feedback.reopen_rate",
                format!("{rate} is not a number of ranks a second (0 or more)"),
            );
        }
        if self.feedback.hold_for_chain == Some(true) && !self.forwards_priority() {
            return invalid(
                "feedback.hold_for_chain",
                "the hint travels in the priority header: needs priority.forward and priority.header".to_owned(),
            );
        }
        if !matches!(self.server.shed_status, 429 | 503) {
            return invalid(
                "server.shed_status",
                format!("{} is not 503 or 429", self.server.shed_status),
            );
        }
        for (key, value) in [
            ("client.timeout", self.client.timeout),
            ("client.connect_timeout", self.client.connect_timeout),
            ("client.read_timeout", self.client.read_timeout),
            ("ejection.base_time", self.ejection.base_time),
            (
                "connections.header_read_timeout",
                self.connections.header_read_timeout,
            ),
            ("connections.write_timeout", self.connections.write_timeout),
            ("connections.idle_timeout", self.connections.idle_timeout),
            (
                "connections.http2_keep_alive_interval",
                self.connections.http2_keep_alive_interval,
            ),
        ] {
            if value.is_zero() {
                return invalid(key, "must be longer than zero".to_owned());
            }
        }
        if self.dashboard.interval < Nanos::from_millis(10) {
            return invalid(
                "dashboard.interval",
                format!("{} is shorter than 10ms", self.dashboard.interval),
            );
        }
        if !(1..=86_400).contains(&self.dashboard.history) {
            return invalid(
                "dashboard.history",
                format!("{} is not between 1 and 86400", self.dashboard.history),
            );
        }
        if let Some((key, reason)) = self.streams.invalid() {
            return invalid(key, reason);
        }
        if self.ejection.max_time < self.ejection.base_time {
            return invalid(
                "ejection.max_time",
                format!(
                    "{} is shorter than ejection.base_time ({})",
                    self.ejection.max_time, self.ejection.base_time
                ),
            );
        }
        for (key, value) in [
            ("priority.header", &self.priority.header),
            (
                "priority.caller_key_header",
                &self.priority.caller_key_header,
            ),
        ] {
            if let Some(reason) = checks::header_reason(value) {
                return invalid(key, reason);
            }
        }
        for (i, route) in self.routes.iter().enumerate() {
            if !route.prefix.starts_with('/') {
                return invalid(
                    &format!("routes[{i}].prefix"),
                    format!("{:?} does not start with '/'", route.prefix),
                );
            }
            if let Some(tier) = route.tier
                && let Err(e) = Priority::new(tier, 0)
            {
                return invalid(&format!("routes[{i}].tier"), e.to_string());
            }
            if route.partition.as_deref() == Some("") {
                return invalid(
                    &format!("routes[{i}].partition"),
                    "must not be empty".to_owned(),
                );
            }
        }
        Ok(())
    }

    /// The gate configuration the proxy runs: the configured one, with every limit's
    /// `timeout` no longer than the upstream timeout. An answer can take no longer than that
    /// (it becomes a 504), so a longer limit timeout would never fire, and a limit that is not
    /// told the timeout takes answers pinned at it for a stable service and grows (the "stable
    /// timeout" failure of `docs/algorithms.md`).
    pub fn effective_gate(&self) -> GateConfig {
        let timeout = self.client.timeout;
        let mut gate = self.gate.clone();
        let limit = &mut gate.limit;
        limit.aimd.timeout = limit.aimd.timeout.min(timeout);
        limit.gradient2.timeout = limit.gradient2.timeout.min(timeout);
        limit.vegas.timeout = limit.vegas.timeout.min(timeout);
        limit.hill_climb.timeout =
            Some(limit.hill_climb.timeout.map_or(timeout, |t| t.min(timeout)));
        limit.autotune.timeout = Some(limit.autotune.timeout.map_or(timeout, |t| t.min(timeout)));
        limit.bdp.timeout = Some(limit.bdp.timeout.map_or(timeout, |t| t.min(timeout)));
        gate
    }

    /// Whether the proxy sends the priority on to its upstreams.
    fn forwards_priority(&self) -> bool {
        self.priority.forward && !self.priority.header.is_empty()
    }

    /// Whether the proxy forwards each request with the chain's hint it was admitted under
    /// (see [`FeedbackConfig::hold_for_chain`]).
    pub fn holds_for_chain(&self) -> bool {
        self.forwards_priority() && self.feedback.hold_for_chain.unwrap_or(true)
    }
}

impl Config {
    /// The mode `upstream` runs in: its own, else the proxy's.
    pub fn mode_of(&self, upstream: &UpstreamConfig) -> Mode {
        upstream.mode.unwrap_or(self.mode)
    }

    /// Whether any upstream is reached over TLS (`https://`).
    pub(crate) fn any_https(&self) -> bool {
        self.upstreams
            .iter()
            .any(|u| Target::parse(&u.url).is_ok_and(|target| target.tls()))
    }
}

/// A header name from the configuration; `None` for the empty string (the feature is off).
pub(crate) fn header_name(key: &str, value: &str) -> Result<Option<HeaderName>, Error> {
    if value.is_empty() {
        return Ok(None);
    }
    HeaderName::from_bytes(value.as_bytes())
        .map(Some)
        .map_err(|_| Error::Invalid {
            key: key.to_owned(),
            reason: format!("{value:?} is not a valid header name"),
        })
}

/// Two upstreams with the same name (given, or the URL's `host:port`): their metrics and
/// `/status` entries would collide. The later index and its name.
fn duplicate_upstream(upstreams: &[UpstreamConfig]) -> Option<String> {
    let names: Vec<Option<String>> = upstreams
        .iter()
        .map(|u| match &u.name {
            Some(name) => Some(name.clone()),
            None => Target::parse(&u.url).ok().map(|t| t.authority().to_owned()),
        })
        .collect();
    for (later, name) in names.iter().enumerate() {
        let Some(name) = name else { continue };
        if let Some(earlier) = names[..later].iter().position(|n| n.as_ref() == Some(name)) {
            return Some(format!(
                "upstreams[{later}] has the name {name:?} of upstreams[{earlier}]: give each \
                 upstream its own URL or name"
            ));
        }
    }
    None
}

fn upstreams<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<UpstreamConfig>, D::Error> {
    let upstreams = Vec::<UpstreamConfig>::deserialize(deserializer)?;
    checks::refuse::<D, _>(duplicate_upstream(&upstreams), upstreams)
}

/// A priority written as `TIER/COHORT`, as in the header.
mod priority_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use tidegate_core::Priority;

    pub(super) fn serialize<S: Serializer>(p: &Priority, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(p)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Priority, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The error with its sources, as the CLI prints it.
    fn message(error: &Error) -> String {
        let mut text = error.to_string();
        let mut source = std::error::Error::source(error);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    #[test]
    fn a_bad_mode_is_named_with_its_key_and_line() {
        for (text, line) in [
            ("mode = \"dryrun\"\n", 1),
            (
                "\n[[upstreams]]\nurl = \"http://127.0.0.1:1\"\nmode = \"off\"\n",
                4,
            ),
        ] {
            let err = Config::parse(text, "mode.toml").unwrap_err();
            let message = format!("{err}: {}", std::error::Error::source(&err).unwrap());
            assert!(
                message.contains(&format!("line {line}"))
                    && message.contains("mode")
                    && message.contains("dry-run"),
                "{message}"
            );
        }
    }

    #[test]
    fn an_upstreams_mode_overrides_the_proxys() {
        let text = "mode = \"dry-run\"\n[[upstreams]]\nurl = \"http://127.0.0.1:1\"\n\
                    [[upstreams]]\nurl = \"http://127.0.0.1:2\"\nmode = \"enforce\"\n";
        let config = Config::parse(text, "modes").unwrap();
        let modes: Vec<_> = config.upstreams.iter().map(|u| config.mode_of(u)).collect();
        assert_eq!(modes, [Mode::DryRun, Mode::Enforce]);
    }

    #[test]
    fn the_chain_hint_is_held_wherever_the_priority_is_forwarded_unless_told_not_to() {
        let parsed = |text: &str| {
            Config::parse(
                &format!("{text}[[upstreams]]\nurl = \"http://127.0.0.1:1\"\n"),
                "feedback.toml",
            )
        };
        assert!(parsed("").unwrap().holds_for_chain());
        assert!(
            !parsed("[feedback]\nhold_for_chain = false\n")
                .unwrap()
                .holds_for_chain()
        );
        // Not forwarding the priority turns the default off, and is no error.
        let quiet = parsed("[priority]\nforward = false\n").unwrap();
        quiet.validate().unwrap();
        assert!(!quiet.holds_for_chain());
        // Asked for where it cannot travel: the key named.
        let err = parsed("[priority]\nforward = false\n[feedback]\nhold_for_chain = true\n")
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            message(&err).contains("feedback.hold_for_chain"),
            "{}",
            message(&err)
        );
    }

    #[test]
    fn empty_document_is_the_default() {
        assert_eq!(Config::parse("", "empty").unwrap(), Config::default());
    }

    #[test]
    fn default_config_text_parses_to_the_defaults() {
        assert_eq!(
            Config::parse(DEFAULT_CONFIG, "default").unwrap(),
            Config::default()
        );
    }

    /// Every key path of a TOML table, as `a.b.c`.
    fn key_paths(table: &toml::Table, prefix: &str, out: &mut Vec<String>) {
        for (key, value) in table {
            let path = format!("{prefix}{key}");
            match value {
                toml::Value::Table(inner) => key_paths(inner, &format!("{path}."), out),
                // Arrays of tables (upstreams, routes) are checked by their keys below.
                toml::Value::Array(_) => {}
                _ => out.push(path),
            }
        }
    }

    #[test]
    fn default_config_text_names_every_key() {
        let mut example = Config::default();
        example.upstreams.push(UpstreamConfig {
            url: "http://127.0.0.1:3000".to_owned(),
            name: Some("a".to_owned()),
            mode: Some(Mode::DryRun),
        });
        example.routes.push(Route {
            prefix: "/".to_owned(),
            tier: Some(1),
            partition: Some("p".to_owned()),
        });
        let serialized: toml::Table = toml::from_str(&example.to_toml().unwrap()).unwrap();
        let mut keys = Vec::new();
        key_paths(&serialized, "", &mut keys);
        // Keys of the tables in arrays (upstreams, routes) and the optional limit timeouts
        // appear in comments: look for `key =` in the text, commented or not.
        for key in keys {
            let last = key.rsplit('.').next().unwrap();
            let section = key.rsplit_once('.').map_or("", |(s, _)| s);
            let header = format!("[{section}]");
            let found = if section.is_empty() {
                DEFAULT_CONFIG.contains(&format!("\n{last} ="))
            } else {
                DEFAULT_CONFIG
                    .split_once(&header)
                    .is_some_and(|(_, rest)| rest.contains(&format!("{last} =")))
            };
            assert!(found, "{key} is missing from default.toml");
        }
        for table in ["# [[upstreams]]", "# [[routes]]"] {
            assert!(DEFAULT_CONFIG.contains(table), "{table}");
        }
        for key in [
            "url",
            "name",
            "certificate",
            "key",
            "upstream_ca",
            "prefix",
            "tier",
            "partition",
            "timeout",
            "lifo_after",
        ] {
            assert!(DEFAULT_CONFIG.contains(&format!("# {key} =")), "{key}");
        }
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = message(
            &Config::parse(
                "listen = \"127.0.0.1:1\"\n[client]\ntimeuot = \"1s\"\n",
                "p.toml",
            )
            .unwrap_err(),
        );
        assert!(err.contains("p.toml"), "{err}");
        assert!(err.contains("line 3") && err.contains("timeuot"), "{err}");
    }

    #[test]
    fn gate_keys_are_checked_too() {
        let err =
            message(&Config::parse("[gate.limit]\nalgoritm = \"aimd\"\n", "g.toml").unwrap_err());
        assert!(err.contains("line 2") && err.contains("algoritm"), "{err}");
    }

    #[test]
    fn mistyped_values_are_named() {
        let err =
            message(&Config::parse("[server]\nshed_status = \"busy\"\n", "s.toml").unwrap_err());
        assert!(
            err.contains("line 2") && err.contains("shed_status"),
            "{err}"
        );
        let err = message(&Config::parse("[priority]\ndefault = \"7\"\n", "p.toml").unwrap_err());
        assert!(err.contains("line 2") && err.contains("tier 7"), "{err}");
        let err = message(&Config::parse("listen = \"localhost\"\n", "l.toml").unwrap_err());
        assert!(err.contains("line 1") && err.contains("listen"), "{err}");
    }

    #[test]
    fn bad_stream_keys_are_named_with_their_line() {
        for (text, line, key, reason) in [
            (
                "[streams]\nmax_per_upstream = 0\n",
                2,
                "max_per_upstream",
                "at least 1",
            ),
            (
                "[streams]\n\ncontent_types = [\"text/event-stream\", \"grpc\"]\n",
                3,
                "content_types",
                "\"grpc\" is not a media type",
            ),
            (
                "[streams]\nidle_timeout = \"0s\"\n",
                2,
                "idle_timeout",
                "longer than zero",
            ),
            ("[streams]\nmax = 3\n", 2, "max", "unknown field"),
        ] {
            let err = message(&Config::parse(text, "s.toml").unwrap_err());
            assert!(
                err.contains("s.toml") && err.contains(&format!("line {line}")),
                "{text}: {err}"
            );
            assert!(err.contains(key) && err.contains(reason), "{text}: {err}");
        }
    }

    /// The issue-14 findings: each of these passed `--check` and then misbehaved.
    #[test]
    fn bad_values_are_refused_while_parsing_with_the_key_and_line() {
        for (text, line, key, reason) in [
            ("[client]\ntimeout = 30\n", 2, "timeout", "no unit"),
            (
                "[gate.queue]\n\ntimeout = 2.5\n",
                3,
                "timeout",
                "ns, us, ms, s, m, h",
            ),
            ("threads = 100000\n", 1, "threads", "more than 1024"),
            (
                "[[upstreams]]\nurl = \"http://127.0.0.1:1\"\n[[upstreams]]\n\
                 url = \"http://127.0.0.1:1\"\n",
                1,
                "upstreams",
                "upstreams[1] has the name \"127.0.0.1:1\" of upstreams[0]",
            ),
            (
                "[[upstreams]]\nurl = \"http://127.0.0.1:0\"\n",
                2,
                "url",
                "port 0 is not between 1 and 65535",
            ),
            (
                "[[upstreams]]\nurl = \"http://127.0.0.1:99999\"\n",
                2,
                "url",
                "port 99999",
            ),
            (
                "[priority]\nheader = \"host\"\n",
                2,
                "header",
                "frames or routes",
            ),
            (
                "[priority]\nheader = \"Content-Length\"\n",
                2,
                "header",
                "frames or routes",
            ),
            (
                "[priority]\ncaller_key_header = \"transfer-encoding\"\n",
                2,
                "caller_key_header",
                "frames or routes",
            ),
            ("[gate.limit.fixed]\nlimit = 0\n", 2, "limit", "at least 1"),
            (
                "[connections]\nmax = 10\nidle_timeout = \"0s\"\n",
                3,
                "idle_timeout",
                "longer than zero",
            ),
            (
                "[connections]\nidle_timeout = 60\n",
                2,
                "idle_timeout",
                "no unit",
            ),
            (
                "[connections]\nhttp2_keep_alive_interval = \"0ms\"\n",
                2,
                "http2_keep_alive_interval",
                "longer than zero",
            ),
        ] {
            let err = message(&Config::parse(text, "bad.toml").unwrap_err());
            assert!(
                err.contains("bad.toml") && err.contains(&format!("line {line}")),
                "{text}: {err}"
            );
            assert!(
                err.contains(&format!("{key} =")) || err.contains(&format!("[[{key}]]")),
                "{text}: {err}"
            );
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn validation_refuses_what_the_command_line_sets_too() {
        let mut config = with_upstream();
        config.threads = 100_000;
        let err = message(&config.validate().unwrap_err());
        assert!(err.contains("threads") && err.contains("1024"), "{err}");
        let mut config = with_upstream();
        config
            .upstreams
            .push(UpstreamConfig::new("http://127.0.0.1:3000/"));
        let err = message(&config.validate().unwrap_err());
        assert!(err.contains("upstreams[1]"), "{err}");
        let mut config = with_upstream();
        config.upstreams[0].url = "http://127.0.0.1:70000".to_owned();
        let err = message(&config.validate().unwrap_err());
        assert!(err.contains("port 70000"), "{err}");
        let mut config = with_upstream();
        config.priority.header = "host".to_owned();
        let err = message(&config.validate().unwrap_err());
        assert!(err.contains("priority.header"), "{err}");
    }

    fn with_upstream() -> Config {
        Config {
            upstreams: vec![UpstreamConfig::new("http://127.0.0.1:3000")],
            ..Config::default()
        }
    }

    #[test]
    fn validation_names_the_culprit() {
        assert!(matches!(
            Config::default().validate(),
            Err(Error::NoUpstream)
        ));
        with_upstream().validate().unwrap();
        let mut config = with_upstream();
        config.server.shed_status = 500;
        let err = message(&config.validate().unwrap_err());
        assert!(
            err.contains("server.shed_status") && err.contains("500"),
            "{err}"
        );
        let mut config = with_upstream();
        config.priority.header = "bad header".to_owned();
        let err = message(&config.validate().unwrap_err());
        assert!(
            err.contains("priority.header") && err.contains("bad header"),
            "{err}"
        );
        let mut config = with_upstream();
        config.routes.push(Route {
            prefix: "api".to_owned(),
            tier: None,
            partition: None,
        });
        let err = message(&config.validate().unwrap_err());
        assert!(err.contains("routes[0].prefix"), "{err}");
        let mut config = with_upstream();
        config.routes.push(Route {
            prefix: "/api".to_owned(),
            tier: Some(6),
            partition: None,
        });
        let err = message(&config.validate().unwrap_err());
        assert!(
            err.contains("routes[0].tier") && err.contains("tier 6"),
            "{err}"
        );
        let mut config = with_upstream();
        config
            .upstreams
            .push(UpstreamConfig::new("ftp://example.com"));
        let err = message(&config.validate().unwrap_err());
        assert!(err.contains("ftp://example.com"), "{err}");
    }

    #[test]
    fn limits_are_told_the_upstream_timeout() {
        let mut config = with_upstream();
        config.client.timeout = Nanos::from_millis(800);
        let gate = config.effective_gate();
        assert_eq!(gate.limit.autotune.timeout, Some(Nanos::from_millis(800)));
        assert_eq!(gate.limit.hill_climb.timeout, Some(Nanos::from_millis(800)));
        assert_eq!(gate.limit.aimd.timeout, Nanos::from_millis(800));
        assert_eq!(gate.limit.gradient2.timeout, Nanos::from_millis(800));
        // A shorter timeout configured for a limit is kept.
        config.gate.limit.aimd.timeout = Nanos::from_millis(200);
        assert_eq!(
            config.effective_gate().limit.aimd.timeout,
            Nanos::from_millis(200)
        );
    }
}

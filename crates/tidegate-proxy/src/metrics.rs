//! The proxy's metrics, in Prometheus text on the admin listener's `/metrics`.
//!
//! Each gate exports `tidegate-tower`'s collector (requests by tier and outcome, in flight,
//! limit, queue length and wait, the regulator's ratio), labelled `gate` with the upstream's
//! name (`PARTITION/UPSTREAM` for a route partition's gates). The proxy adds what only it sees:
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `tidegate_request_duration_seconds` | histogram | `upstream`, `class` | time from arrival to the response's last byte (or to the answer, when shed), by how the request ended: `ok`, `dropped`, `ignored` (the limit's outcomes), `shed`, `cancelled` (the client went away), `client_error` (the client's request body broke), `unavailable` (every upstream ejected; `upstream="none"`), `refused` (a `CONNECT` or two `Host` fields, answered at once; `upstream="none"`) |
//! | `tidegate_upstream_errors_total` | counter | `upstream`, `kind` | upstream failures: `connect` (refused or unreachable), `timeout` (no response headers in time, or silent mid-body), `reset` (closed mid-exchange), `protocol`, `body` (failed while streaming the response) |
//! | `tidegate_upstream_ejections_total` | counter | `upstream` | times the upstream was ejected |
//! | `tidegate_upstream_ejected` | gauge | `upstream` | 1 while ejected |
//! | `tidegate_upstream_abandoned` | gauge | `upstream` | requests whose client went away that the upstream still has, their slots held (`server.on_client_gone = "wait"`) |
//! | `tidegate_lease_header_invalid_total` | counter | `upstream` | `tidegate-lease` headers that did not parse (ignored) |
//! | `tidegate_priority_header_invalid_total` | counter | | priority headers that did not parse (the request got the default priority) |
//! | `tidegate_priority_header_ignored_total` | counter | | members of priority headers after the priority that did not parse (a chain hint `under=` that is not a rank), ignored (the request kept its priority) |
//! | `tidegate_priority_header_untrusted_total` | counter | | priority headers from clients outside `trust.sources`, not read (the request got the route's or the default priority) |
//! | `tidegate_client_connections` | gauge | | client connections open (`crate::connection`) |
//! | `tidegate_client_connections_closed_total` | counter | `reason` | client connections the proxy closed itself: `max_connections`, `header_timeout`, `write_timeout`, `idle_timeout`, `ping_timeout` |
//! | `tidegate_streams_open` | gauge | `upstream` | streams open, or asked for and waiting for their headers (`crate::stream`, which registers the three stream metrics) |
//! | `tidegate_streams_total` | counter | `upstream`, `outcome` | streams by how they ended: `closed`, `error`, `idle`, `cancelled`, `refused`, `over_cap` |
//! | `tidegate_stream_duration_seconds` | histogram | `upstream` | from a stream's response headers to its end |
//! | `tidegate_tls_handshake_failures_total` | counter | `reason` | client TLS handshakes that failed: `error`, `timeout` (`crate::tls`) |
//! | `tidegate_tls_reloads_total` | counter | `result` | reloads of the listener's certificate: `ok`, `failed` |
//!
//! Every handle a request touches is created at startup and kept, so that the request path
//! does no label lookup: an observation is a few atomic operations.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

fn duration_histogram() -> Histogram {
    // 0.5 ms to 16 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// How a request ended, for the duration histogram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Ok,
    Dropped,
    Ignored,
    Shed,
    Cancelled,
    /// The client's request body broke or stalled: its failure, not the upstream's (the
    /// gate's `ignored`).
    ClientError,
}

impl Class {
    const ALL: [Class; 6] = [
        Class::Ok,
        Class::Dropped,
        Class::Ignored,
        Class::Shed,
        Class::Cancelled,
        Class::ClientError,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Class::Ok => "ok",
            Class::Dropped => "dropped",
            Class::Ignored => "ignored",
            Class::Shed => "shed",
            Class::Cancelled => "cancelled",
            Class::ClientError => "client_error",
        }
    }
}

/// Why an upstream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    Connect,
    Timeout,
    Reset,
    Protocol,
    Body,
}

impl ErrorKind {
    const ALL: [ErrorKind; 5] = [
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Reset,
        ErrorKind::Protocol,
        ErrorKind::Body,
    ];

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Connect => "connect",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Reset => "reset",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Body => "body",
        }
    }
}

/// One upstream's handles.
#[derive(Debug)]
pub(crate) struct UpstreamMetrics {
    durations: [Histogram; Class::ALL.len()],
    errors: [Counter; ErrorKind::ALL.len()],
    pub(crate) ejections: Counter,
    pub(crate) ejected: Gauge,
    pub(crate) abandoned: Gauge,
    pub(crate) lease_invalid: Counter,
    pub(crate) cutoff_invalid: Counter,
    pub(crate) peers_invalid: Counter,
}

impl UpstreamMetrics {
    pub(crate) fn observe(&self, class: Class, seconds: f64) {
        self.durations[class as usize].observe(seconds);
    }

    pub(crate) fn error(&self, kind: ErrorKind) {
        self.errors[kind as usize].inc();
    }

    /// Handles registered nowhere, for unit tests.
    #[cfg(test)]
    pub(crate) fn detached() -> UpstreamMetrics {
        UpstreamMetrics {
            durations: std::array::from_fn(|_| duration_histogram()),
            errors: Default::default(),
            ejections: Counter::default(),
            ejected: Gauge::default(),
            abandoned: Gauge::default(),
            lease_invalid: Counter::default(),
            cutoff_invalid: Counter::default(),
            peers_invalid: Counter::default(),
        }
    }
}

/// The proxy's own families, and the handles not tied to an upstream.
#[derive(Debug)]
pub(crate) struct ProxyMetrics {
    durations: Family<Labels, Histogram, fn() -> Histogram>,
    errors: Family<Labels, Counter>,
    ejections: Family<Labels, Counter>,
    ejected: Family<Labels, Gauge>,
    abandoned: Family<Labels, Gauge>,
    lease_invalid: Family<Labels, Counter>,
    cutoff_invalid: Family<Labels, Counter>,
    peers_invalid: Family<Labels, Counter>,
    pub(crate) priority_invalid: Counter,
    /// Malformed members of priority headers after the priority, ignored.
    pub(crate) priority_ignored: Counter,
    /// Priority headers from clients outside `trust.sources`, not read.
    pub(crate) priority_untrusted: Counter,
    /// Requests answered 503 because every upstream was ejected.
    pub(crate) unavailable: Histogram,
    /// Requests refused before any gate (`crate::refuse`).
    pub(crate) refused: Histogram,
}

impl ProxyMetrics {
    pub(crate) fn register(registry: &mut Registry) -> ProxyMetrics {
        // Help texts without their full stop: `register` adds one (the gates' collector,
        // which encodes its own descriptors, writes its own).
        let durations = Family::<Labels, Histogram, fn() -> Histogram>::new_with_constructor(
            duration_histogram,
        );
        let errors = Family::<Labels, Counter>::default();
        let ejections = Family::<Labels, Counter>::default();
        let ejected = Family::<Labels, Gauge>::default();
        let abandoned = Family::<Labels, Gauge>::default();
        let lease_invalid = Family::<Labels, Counter>::default();
        let cutoff_invalid = Family::<Labels, Counter>::default();
        let peers_invalid = Family::<Labels, Counter>::default();
        let priority_invalid = Counter::default();
        let priority_ignored = Counter::default();
        let priority_untrusted = Counter::default();
        registry.register(
            "tidegate_request_duration_seconds",
            "Time from a request's arrival to its response's last byte, by upstream and how it ended",
            durations.clone(),
        );
        registry.register(
            "tidegate_upstream_errors",
            "Upstream failures by kind",
            errors.clone(),
        );
        registry.register(
            "tidegate_upstream_ejections",
            "Times an upstream was ejected for failing",
            ejections.clone(),
        );
        registry.register(
            "tidegate_upstream_ejected",
            "1 while the upstream is ejected",
            ejected.clone(),
        );
        registry.register(
            "tidegate_upstream_abandoned",
            "Requests whose client went away that the upstream still has; their slots are held until it answers",
            abandoned.clone(),
        );
        registry.register(
            "tidegate_lease_header_invalid",
            "Lease headers from an upstream that did not parse",
            lease_invalid.clone(),
        );
        registry.register(
            "tidegate_cutoff_header_invalid",
            "Cut-off headers (tidegate-cutoff) from an upstream that did not parse; ignored",
            cutoff_invalid.clone(),
        );
        registry.register(
            "tidegate_peers_header_invalid",
            "Peer means (tidegate-peers) from an upstream that did not parse; ignored",
            peers_invalid.clone(),
        );
        registry.register(
            "tidegate_priority_header_invalid",
            "Priority headers that did not parse; the request got the default priority",
            priority_invalid.clone(),
        );
        registry.register(
            "tidegate_priority_header_ignored",
            "Members of priority headers after the priority that did not parse (a chain hint that is not a rank); ignored, the priority taken",
            priority_ignored.clone(),
        );
        registry.register(
            "tidegate_priority_header_untrusted",
            "Priority headers from clients outside trust.sources; the request got the route's or the default priority",
            priority_untrusted.clone(),
        );
        let unavailable = durations
            .get_or_create(&vec![
                ("upstream", "none".to_owned()),
                ("class", "unavailable".to_owned()),
            ])
            .clone();
        let refused = durations
            .get_or_create(&vec![
                ("upstream", "none".to_owned()),
                ("class", "refused".to_owned()),
            ])
            .clone();
        ProxyMetrics {
            durations,
            errors,
            ejections,
            ejected,
            abandoned,
            lease_invalid,
            cutoff_invalid,
            peers_invalid,
            priority_invalid,
            priority_ignored,
            priority_untrusted,
            unavailable,
            refused,
        }
    }

    /// Creates `upstream`'s series now (so that they are exported from the start, at zero)
    /// and returns its handles.
    pub(crate) fn upstream(&self, upstream: &str) -> UpstreamMetrics {
        let name = || ("upstream", upstream.to_owned());
        UpstreamMetrics {
            durations: Class::ALL.map(|class| {
                self.durations
                    .get_or_create(&vec![name(), ("class", class.as_str().to_owned())])
                    .clone()
            }),
            errors: ErrorKind::ALL.map(|kind| {
                self.errors
                    .get_or_create(&vec![name(), ("kind", kind.as_str().to_owned())])
                    .clone()
            }),
            ejections: self.ejections.get_or_create(&vec![name()]).clone(),
            ejected: self.ejected.get_or_create(&vec![name()]).clone(),
            abandoned: self.abandoned.get_or_create(&vec![name()]).clone(),
            lease_invalid: self.lease_invalid.get_or_create(&vec![name()]).clone(),
            cutoff_invalid: self.cutoff_invalid.get_or_create(&vec![name()]).clone(),
            peers_invalid: self.peers_invalid.get_or_create(&vec![name()]).clone(),
        }
    }
}

//! The gate's metrics in a `prometheus-client` registry the service passes in.
//!
//! Counters and gauges are read from the gate when the registry is scraped, so they cost the
//! request path nothing; only the queue-wait histogram is recorded as requests leave the
//! queue. The names are tidegate's, shared with the proxy (which exports the same collector
//! per upstream), in base units, each labelled with the gate's name:
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `tidegate_requests_total` | counter | `gate`, `tier`, `outcome` | requests by how they ended: `ok`, `dropped`, `ignored`, `rejected_regulator`, `rejected_queue_full`, `rejected_no_lease`, `expired`, `cancelled_queued`, `cancelled_inflight` |
//! | `tidegate_inflight` | gauge | `gate` | requests in the service |
//! | `tidegate_limit` | gauge | `gate` | the concurrency limit in force |
//! | `tidegate_queue_length` | gauge | `gate` | requests waiting |
//! | `tidegate_queue_oldest_wait_seconds` | gauge | `gate` | how long the oldest waiting request has waited |
//! | `tidegate_queue_wait_seconds` | histogram | `gate` | time spent queued by requests admitted from the queue |
//! | `tidegate_reject_ratio` | gauge | `gate` | the regulator's drop probability or rejection ratio |
//! | `tidegate_priority_cutoff_rank` | gauge | `gate` | least important rank still admitted (0-767), -1 when nothing is cut off |
//! | `tidegate_burst` | gauge | `gate` | 1 while a burst allowance lets everything in |
//! | `tidegate_overloaded` | gauge | `gate` | 1 while the regulator judges the service overloaded |
//!
//! A request is counted when it ends, so `tidegate_requests_total` lags the arrivals by the
//! requests in flight and waiting.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use tidegate_core::gate::TierCounters;

use crate::SharedGate;

/// Registers `gate`'s metrics in `registry`, labelled `gate="<name>"`.
pub fn register(registry: &mut Registry, gate: &SharedGate, name: &str) {
    registry.register_collector(Box::new(GateCollector {
        gate: gate.clone(),
        name: name.to_owned(),
    }));
}

/// Encodes `gate`'s metrics, labelled `gate="<name>"`, with a collector's `encoder`: for a
/// collector of one's own over gates that come and go (the proxy's, across reloads), where
/// [`register`] would keep a removed gate's metrics forever.
pub fn encode(
    encoder: &mut DescriptorEncoder<'_>,
    gate: &SharedGate,
    name: &str,
) -> Result<(), std::fmt::Error> {
    GateMetrics { gate, name }.encode(encoder)
}

const TIER_NAMES: [&str; 6] = ["0", "1", "2", "3", "4", "5"];

/// Reads one outcome's count.
type Read = fn(&TierCounters) -> u64;

/// Each outcome's label and how to read it from the counters.
const OUTCOMES: [(&str, Read); 9] = [
    ("ok", |c| c.completed_ok),
    ("dropped", |c| c.completed_dropped),
    ("ignored", |c| c.completed_ignored),
    ("rejected_regulator", |c| c.rejected_regulator),
    ("rejected_queue_full", |c| c.rejected_queue_full),
    ("rejected_no_lease", |c| c.rejected_no_lease),
    ("expired", |c| c.expired),
    ("cancelled_queued", |c| c.cancelled_queued),
    ("cancelled_inflight", |c| c.cancelled_inflight),
];

#[derive(Debug)]
struct GateCollector {
    gate: SharedGate,
    name: String,
}

impl Collector for GateCollector {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        encode(&mut encoder, &self.gate, &self.name)
    }
}

struct GateMetrics<'a> {
    gate: &'a SharedGate,
    name: &'a str,
}

impl GateMetrics<'_> {
    fn gauge<N: prometheus_client::encoding::EncodeGaugeValue>(
        &self,
        encoder: &mut DescriptorEncoder<'_>,
        name: &str,
        help: &str,
        value: N,
    ) -> Result<(), std::fmt::Error> {
        let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
        ConstGauge::new(value).encode(family.encode_family(&[("gate", self.name)])?)
    }

    fn encode(&self, encoder: &mut DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let snapshot = self.gate.snapshot();
        let gate = self.name;
        {
            let help = "Requests through the gate, by tier and by how they ended.";
            let mut family =
                encoder.encode_descriptor("tidegate_requests", help, None, MetricType::Counter)?;
            for (tier, counters) in TIER_NAMES.iter().zip(&snapshot.counters.tiers) {
                for (outcome, read) in OUTCOMES {
                    let labels = [("gate", gate), ("tier", tier), ("outcome", outcome)];
                    ConstCounter::new(read(counters)).encode(family.encode_family(&labels)?)?;
                }
            }
        }
        let regulator = snapshot.regulator;
        self.gauge(
            encoder,
            "tidegate_inflight",
            "Requests in the service.",
            snapshot.inflight,
        )?;
        self.gauge(
            encoder,
            "tidegate_limit",
            "The concurrency limit in force.",
            snapshot.limit,
        )?;
        self.gauge(
            encoder,
            "tidegate_queue_length",
            "Requests waiting in the queue.",
            snapshot.queued as u64,
        )?;
        let oldest = snapshot.oldest_wait.as_secs_f64();
        self.gauge(
            encoder,
            "tidegate_queue_oldest_wait_seconds",
            "How long the oldest waiting request has waited.",
            oldest,
        )?;
        let ratio = regulator.reject_ratio;
        self.gauge(
            encoder,
            "tidegate_reject_ratio",
            "The regulator's drop probability or rejection ratio.",
            ratio,
        )?;
        let cutoff = regulator.cutoff_rank.map_or(-1, i64::from);
        self.gauge(
            encoder,
            "tidegate_priority_cutoff_rank",
            "Least important rank admitted; -1 when none is cut.",
            cutoff,
        )?;
        self.gauge(
            encoder,
            "tidegate_burst",
            "1 while a burst allowance admits everything.",
            i64::from(regulator.burst),
        )?;
        self.gauge(
            encoder,
            "tidegate_overloaded",
            "1 while the regulator judges the service overloaded.",
            i64::from(regulator.overloaded),
        )?;
        let help = "Time spent queued by requests admitted from the queue.";
        let mut family = encoder.encode_descriptor(
            "tidegate_queue_wait_seconds",
            help,
            None,
            MetricType::Histogram,
        )?;
        self.gate
            .queue_wait()
            .encode(family.encode_family(&[("gate", gate)])?)
    }
}

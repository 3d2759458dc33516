//! The services behind the proxy: where each is, its gates, whether it is ejected, and which
//! one a request goes to.
//!
//! Balancing follows RSocket's least-loaded balancer: each upstream has its own gate, and a
//! request goes to the upstream with the most availability, `(limit - outstanding) / limit`,
//! where `outstanding` counts the requests the proxy has sent or queued there. The limit is the
//! gate's, capped by the upstream's lease, so an upstream that grants less gets less, and one
//! whose limit adapts down under trouble is avoided before it fails. Ties go round-robin, so
//! that idle upstreams share the load.
//!
//! Ejection is the circuit breaker for upstreams that do not answer at all (refused, reset,
//! timed out), which the limit alone would keep trying at its minimum: after
//! `consecutive_failures` in a row the upstream leaves the balancing for `base_time`, then a
//! single request probes it; a good answer brings it back, a failure ejects it again for twice
//! as long (up to `max_time`).
//!
//! Each change of that state is logged once, as it happens (`tracing`, target
//! `tidegate_proxy::upstream`): ejected (warn, with the failures and the last one's kind),
//! a failed probe (warn), recovered (info). Nothing is logged per request: a failing upstream
//! under load writes one line per ejection, however many requests it fails.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use tidegate_core::Nanos;
use tidegate_tower::SharedGate;

use crate::classify::DEFAULT_PARTITION;
use crate::config::{Config, EjectionConfig, Mode, UpstreamConfig};
use crate::error::Error;
use crate::metrics::{ErrorKind, ProxyMetrics, UpstreamMetrics};
use crate::pool::{Pool, PoolConfig};
use crate::target::Target;

/// One upstream's gate for one partition, and the requests sent or queued through it.
#[derive(Debug)]
pub(crate) struct GateSlot {
    pub(crate) gate: SharedGate,
    /// The gate's name in metrics and `/status`.
    pub(crate) name: String,
    pub(crate) outstanding: AtomicU32,
    /// What the gate would have shed while its upstream runs in dry run.
    pub(crate) would_shed: std::sync::Arc<crate::would_shed::WouldShed>,
}

impl GateSlot {
    pub(crate) fn new(gate: SharedGate, name: String) -> GateSlot {
        GateSlot {
            gate,
            name,
            outstanding: AtomicU32::new(0),
            would_shed: Default::default(),
        }
    }

    /// `(limit - outstanding) / limit`: 1 when idle, 0 or less when full or leased nothing.
    fn availability(&self) -> f64 {
        let limit = self.gate.limit();
        let outstanding = self.outstanding.load(Ordering::Relaxed);
        if limit == 0 {
            return f64::NEG_INFINITY;
        }
        (f64::from(limit) - f64::from(outstanding)) / f64::from(limit)
    }
}

/// A service behind the proxy.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) name: String,
    pub(crate) url: String,
    pub(crate) target: Target,
    pub(crate) pool: crate::pool::Pool,
    /// One per partition, the default partition first.
    pub(crate) gates: Vec<GateSlot>,
    pub(crate) health: Health,
    pub(crate) metrics: UpstreamMetrics,
    /// What the upstream last said it refuses (`tidegate-cutoff`).
    pub(crate) cutoff: crate::cutoff::UpstreamCutoff,
    /// With `[peers]`: this proxy's id in its stamps (drawn when the upstream is built) and
    /// how its gates take in the means the upstream's instances say (`docs/peers.md`).
    pub(crate) peers: Option<(u64, tidegate_core::peers::PeerConfig)>,
    /// `mode = "dry-run"` ([`crate::dry_run`]); a reload may change it.
    pub(crate) dry_run: std::sync::atomic::AtomicBool,
    /// Its long-lived streams, under their own cap ([`crate::stream`]).
    pub(crate) streams: std::sync::Arc<crate::stream_cap::UpstreamStreams>,
    /// With `[peers]` and PIE's `line_at_peers`: the line its instance last said its peers
    /// draw (`tidegate-peers`), for the gates in front of every instance to draw one
    /// (`tidegate_core::peers::fleet_line`). Without them nothing reads it, and each response
    /// skips the mean.
    pub(crate) heard_line: Option<HeardLine>,
}

impl Upstream {
    /// The upstream `upstream` of `config`, with a fresh gate per partition (`partitions`,
    /// the default one first).
    pub(crate) fn build(
        config: &Config,
        upstream: &UpstreamConfig,
        partitions: &[String],
        metrics: &ProxyMetrics,
        streams: &crate::stream::Streams,
        upstream_tls: Option<&std::sync::Arc<rustls::ClientConfig>>,
    ) -> Result<Upstream, Error> {
        let target = Target::parse(&upstream.url)?;
        let name = upstream
            .name
            .clone()
            .unwrap_or_else(|| target.authority().to_owned());
        let gate_config = config.effective_gate();
        let retry_after = Duration::from(config.server.retry_after);
        let gates = partitions
            .iter()
            .map(|partition| {
                let gate = SharedGate::new(&gate_config, retry_after);
                let gate_name = if partition == DEFAULT_PARTITION {
                    name.clone()
                } else {
                    format!("{partition}/{name}")
                };
                GateSlot::new(gate, gate_name)
            })
            .collect();
        let pool = Pool::new(PoolConfig {
            address: target.address(),
            connect_timeout: Duration::from(config.client.connect_timeout),
            idle_timeout: Duration::from(config.client.pool_idle_timeout),
            max_idle: config.client.pool_max_idle,
            http2: config.client.http2,
            tls: crate::tls::Connector::for_target(upstream_tls, &target, &upstream.url)?,
        });
        Ok(Upstream {
            pool,
            metrics: metrics.upstream(&name),
            url: upstream.url.clone(),
            target,
            gates,
            health: Health::new(&name, config.ejection.clone()),
            cutoff: crate::cutoff::UpstreamCutoff::new(config.feedback.reopen_rate),
            peers: config.peers.clone().map(|peers| (peer_id(), peers)),
            dry_run: (config.mode_of(upstream) == Mode::DryRun).into(),
            streams: streams.upstream(&name),
            heard_line: (config.peers.is_some() && gate_config.regulator.pie.line_at_peers)
                .then(HeardLine::default),
            name,
        })
    }
}

/// A line an instance said, and when (nanoseconds on the proxy's clock; 0: never), read
/// and written by every thread that takes a response from any instance without a lock: a
/// line and its time read apart at worst pair a line with the time of the one before it,
/// within a few milliseconds.
#[derive(Debug)]
pub(crate) struct HeardLine {
    line: AtomicU64,
    at: AtomicU64,
}

impl Default for HeardLine {
    fn default() -> HeardLine {
        HeardLine {
            line: AtomicU64::new(f64::NAN.to_bits()),
            at: AtomicU64::new(0),
        }
    }
}

impl HeardLine {
    pub(crate) fn hear(&self, line: f64, now: u64) {
        self.line.store(line.to_bits(), Ordering::Relaxed);
        self.at.store(now, Ordering::Relaxed);
    }

    /// The line and when it was heard, if ever.
    pub(crate) fn get(&self) -> Option<(f64, tidegate_core::Time)> {
        let at = self.at.load(Ordering::Relaxed);
        let line = f64::from_bits(self.line.load(Ordering::Relaxed));
        (at > 0).then(|| (line, tidegate_core::Time::from_nanos(at)))
    }
}

/// A number this proxy's peers do not share: the standard library's per-process random
/// hash keys, over the time.
fn peer_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Whether an upstream may be sent requests.
#[derive(Debug)]
pub(crate) struct Health {
    /// 0 while healthy, [`PROBING`] while a probe is out, otherwise when the ejection ends
    /// (nanoseconds on the proxy's clock).
    ejected_until: AtomicU64,
    /// Failures since the last good answer.
    failures: AtomicU32,
    /// Ejections since the upstream was last healthy: each doubles the next.
    ejections: AtomicU32,
    config: EjectionConfig,
    /// The upstream's name, for the log lines.
    name: String,
}

const HEALTHY: u64 = 0;
const PROBING: u64 = u64::MAX;

/// What an upstream's health allows for one request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    Healthy,
    /// Ejected and due for a probe: this request is the probe.
    Probe,
    /// Ejected until this time, or while another request probes it ([`u64::MAX`]).
    Ejected(u64),
}

impl Health {
    pub(crate) fn new(name: &str, config: EjectionConfig) -> Health {
        Health {
            ejected_until: AtomicU64::new(HEALTHY),
            failures: AtomicU32::new(0),
            ejections: AtomicU32::new(0),
            config,
            name: name.to_owned(),
        }
    }

    pub(crate) fn admit(&self, now: u64) -> Admission {
        let until = self.ejected_until.load(Ordering::Acquire);
        if until == HEALTHY {
            return Admission::Healthy;
        }
        if until != PROBING
            && now >= until
            && self
                .ejected_until
                .compare_exchange(until, PROBING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            return Admission::Probe;
        }
        Admission::Ejected(until)
    }

    pub(crate) fn is_ejected(&self) -> bool {
        self.ejected_until.load(Ordering::Acquire) != HEALTHY
    }

    /// The upstream answered.
    pub(crate) fn success(&self, probe: bool, metrics: &UpstreamMetrics) {
        if probe {
            let ejections = self.ejections.swap(0, Ordering::Relaxed);
            self.ejected_until.store(HEALTHY, Ordering::Release);
            metrics.ejected.set(0);
            tracing::info!(
                upstream = %self.name,
                ejections,
                "upstream recovered: a probe was answered, back in the balancing"
            );
        }
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
    }

    /// The upstream refused, reset or did not answer in time (`kind`).
    pub(crate) fn failure(
        &self,
        probe: bool,
        now: u64,
        metrics: &UpstreamMetrics,
        kind: ErrorKind,
    ) {
        if probe {
            let time = self.eject(now, metrics);
            tracing::warn!(
                upstream = %self.name,
                error = kind.as_str(),
                ejected_for_ms = time.as_millis_f64(),
                "upstream probe failed: ejected again"
            );
            return;
        }
        let failures = self.failures.fetch_add(1, Ordering::Relaxed) + 1;
        let threshold = self.config.consecutive_failures;
        if threshold > 0
            && failures >= threshold
            && self
                .ejected_until
                .compare_exchange(HEALTHY, PROBING, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        {
            let time = self.eject(now, metrics);
            tracing::warn!(
                upstream = %self.name,
                failures,
                error = kind.as_str(),
                ejected_for_ms = time.as_millis_f64(),
                "upstream ejected: failed {failures} times in a row"
            );
        }
    }

    /// A connection to the ejected upstream succeeded ([`crate::recovery`]): the ejection
    /// ends now, and the next request probes. False if it was no longer ejected, or a probe
    /// is out.
    pub(crate) fn reconnected(&self, now: u64) -> bool {
        let until = self.ejected_until.load(Ordering::Acquire);
        until != HEALTHY
            && until != PROBING
            && until > now
            && self
                .ejected_until
                .compare_exchange(until, now.max(1), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
    }

    /// A probe ended without telling anything (the client went away): the next request
    /// probes instead.
    pub(crate) fn probe_abandoned(&self, now: u64) {
        let _ = self.ejected_until.compare_exchange(
            PROBING,
            now.max(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// Takes the upstream out of the balancing; returns for how long.
    fn eject(&self, now: u64, metrics: &UpstreamMetrics) -> Nanos {
        let ejections = self.ejections.fetch_add(1, Ordering::Relaxed);
        let base = self.config.base_time.as_nanos();
        let time = base
            .saturating_mul(1u64 << ejections.min(32))
            .min(self.config.max_time.as_nanos())
            .max(1);
        self.failures.store(0, Ordering::Relaxed);
        self.ejected_until
            .store(now.saturating_add(time).min(PROBING - 1), Ordering::Release);
        metrics.ejections.inc();
        metrics.ejected.set(1);
        Nanos::from_nanos(time)
    }

    /// Time left in the ejection, for `/status` and `Retry-After`.
    pub(crate) fn ejected_for(&self, now: u64) -> Option<Nanos> {
        match self.ejected_until.load(Ordering::Acquire) {
            HEALTHY => None,
            PROBING => Some(Nanos::ZERO),
            until => Some(Nanos::from_nanos(until.saturating_sub(now))),
        }
    }

    pub(crate) fn failures(&self) -> u32 {
        self.failures.load(Ordering::Relaxed)
    }
}

/// Which upstream a request goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Pick {
    pub(crate) upstream: usize,
    pub(crate) probe: bool,
}

/// The upstreams and the balancer over them.
#[derive(Debug)]
pub(crate) struct Upstreams {
    pub(crate) list: Vec<Arc<Upstream>>,
    next: AtomicUsize,
}

impl Upstreams {
    pub(crate) fn new(list: Vec<Arc<Upstream>>) -> Upstreams {
        Upstreams {
            list,
            next: AtomicUsize::new(0),
        }
    }

    /// Every gate, upstream by upstream and, within an upstream, partition by partition (the
    /// default partition first): the order of the dashboard's `gates` and of
    /// [`crate::GateReadings`].
    pub(crate) fn gates(&self) -> impl Iterator<Item = &GateSlot> {
        self.list.iter().flat_map(|u| &u.gates)
    }

    /// The upstream with the most availability in `partition` among those not ejected, or
    /// the first one due for a probe; `Err(until)` when all are ejected, with the earliest
    /// time one may be probed.
    pub(crate) fn pick(&self, partition: usize, now: u64) -> Result<Pick, u64> {
        if let [only] = self.list.as_slice() {
            return match only.health.admit(now) {
                Admission::Healthy => Ok(Pick {
                    upstream: 0,
                    probe: false,
                }),
                Admission::Probe => Ok(Pick {
                    upstream: 0,
                    probe: true,
                }),
                Admission::Ejected(until) => Err(until),
            };
        }
        let n = self.list.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        let mut best: Option<(usize, f64)> = None;
        let mut earliest = u64::MAX;
        for offset in 0..n {
            let index = (start + offset) % n;
            let upstream = &self.list[index];
            match upstream.health.admit(now) {
                Admission::Probe => {
                    return Ok(Pick {
                        upstream: index,
                        probe: true,
                    });
                }
                Admission::Ejected(until) => earliest = earliest.min(until),
                Admission::Healthy => {
                    let availability = upstream.gates[partition].availability();
                    if best.is_none_or(|(_, most)| availability > most) {
                        best = Some((index, availability));
                    }
                }
            }
        }
        match best {
            Some((upstream, _)) => Ok(Pick {
                upstream,
                probe: false,
            }),
            None => Err(earliest),
        }
    }
}

/// Every gate's metrics, read from the upstreams in force when scraped: a reload's new
/// gates appear, removed ones disappear (registering each gate in the registry would keep a
/// removed gate's metrics, and the gate, forever).
#[derive(Debug)]
pub(crate) struct LiveGates {
    upstreams: Arc<ArcSwap<Upstreams>>,
}

impl LiveGates {
    pub(crate) fn new(upstreams: Arc<ArcSwap<Upstreams>>) -> LiveGates {
        LiveGates { upstreams }
    }
}

impl Collector for LiveGates {
    fn encode(&self, mut encoder: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let upstreams = self.upstreams.load();
        for slot in upstreams.gates() {
            tidegate_tower::metrics::encode(&mut encoder, &slot.gate, &slot.name)?;
        }
        crate::would_shed::encode(
            &mut encoder,
            upstreams
                .gates()
                .map(|slot| (slot.name.as_str(), &*slot.would_shed)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(consecutive_failures: u32) -> (Health, UpstreamMetrics) {
        let config = EjectionConfig {
            consecutive_failures,
            base_time: Nanos::from_millis(100),
            max_time: Nanos::from_millis(250),
            reconnect_interval: Nanos::ZERO,
        };
        (Health::new("a", config), UpstreamMetrics::detached())
    }

    #[test]
    fn failures_in_a_row_eject_and_a_probe_brings_back() {
        let (health, metrics) = health(3);
        let ms = 1_000_000;
        health.failure(false, 0, &metrics, ErrorKind::Connect);
        health.failure(false, 0, &metrics, ErrorKind::Connect);
        health.success(false, &metrics);
        health.failure(false, 0, &metrics, ErrorKind::Connect);
        health.failure(false, 0, &metrics, ErrorKind::Connect);
        assert_eq!(
            health.admit(0),
            Admission::Healthy,
            "a success resets the count"
        );
        health.failure(false, ms, &metrics, ErrorKind::Connect);
        assert_eq!(health.admit(50 * ms), Admission::Ejected(101 * ms));
        assert_eq!(metrics.ejections.get(), 1);
        assert_eq!(metrics.ejected.get(), 1);
        // Due: one request probes, the others wait for its answer.
        assert_eq!(health.admit(101 * ms), Admission::Probe);
        assert_eq!(health.admit(101 * ms), Admission::Ejected(u64::MAX));
        // A failed probe doubles the ejection; the next doubling is capped at max_time.
        health.failure(true, 101 * ms, &metrics, ErrorKind::Connect);
        assert_eq!(health.admit(102 * ms), Admission::Ejected(301 * ms));
        assert_eq!(health.admit(301 * ms), Admission::Probe);
        health.failure(true, 301 * ms, &metrics, ErrorKind::Connect);
        assert_eq!(health.admit(302 * ms), Admission::Ejected(551 * ms));
        // An abandoned probe lets the next request probe.
        assert_eq!(health.admit(551 * ms), Admission::Probe);
        health.probe_abandoned(552 * ms);
        assert_eq!(health.admit(552 * ms), Admission::Probe);
        health.success(true, &metrics);
        assert_eq!(health.admit(553 * ms), Admission::Healthy);
        assert_eq!(metrics.ejected.get(), 0);
        assert_eq!(metrics.ejections.get(), 3);
        // After coming back, the ejection time starts over from base_time.
        for _ in 0..3 {
            health.failure(false, 600 * ms, &metrics, ErrorKind::Connect);
        }
        assert_eq!(health.admit(600 * ms), Admission::Ejected(700 * ms));
    }

    #[test]
    fn zero_failures_never_ejects() {
        let (health, metrics) = health(0);
        for _ in 0..100 {
            health.failure(false, 0, &metrics, ErrorKind::Connect);
        }
        assert_eq!(health.admit(0), Admission::Healthy);
    }
}

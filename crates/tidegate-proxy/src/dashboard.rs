//! The live dashboard on the admin listener: `/dashboard` (one self-contained page, every asset
//! in the binary) and `/dashboard/data?since=SEQ` (the samples after `SEQ`, as compact JSON).
//!
//! Why a sampler rather than computing on each poll: rates and latency percentiles need two
//! readings a known time apart, and several pages polling at once must see the same points.
//! So a task reads every gate's counters once per `dashboard.interval` into a bounded ring of
//! [`Point`]s, and the pages only copy points out of it.
//!
//! Why it always runs: a page opened during an incident must show what led to it, so the ring
//! holds the last `dashboard.history` samples whether or not anybody looked (five minutes by
//! default). What that costs: the sampler holds a thread about 10 us per sample (once a
//! second by default), and each request increments two relaxed atomic counters for its
//! latencies; the gates' counters are kept anyway, for `/metrics`. Measured in
//! docs/proxy.md ("The dashboard"): within the noise of a proxy serving 60,000 requests a
//! second.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tidegate_core::gate::TierCounters;
use tidegate_core::priority::TIERS;
use tokio::sync::watch;

use crate::config::DashboardConfig;
use crate::stream_cap::End;
use crate::upstream::Upstreams;
use crate::would_shed::Reason;

/// What the dashboard reads of the proxy: its own state, the upstreams as they are now (a
/// reload swaps them), and the proxy's clock. The request handlers' shared state provides
/// it; the dashboard knows nothing else of them.
pub(crate) trait Source: Send + Sync + 'static {
    fn dashboard(&self) -> &Dashboard;
    fn upstreams(&self) -> Arc<Upstreams>;
    /// Nanoseconds since the proxy started.
    fn now(&self) -> u64;
}

/// The page, served as is: HTML, CSS and JavaScript in one file, charts drawn on canvases.
pub(crate) const PAGE: &str = include_str!("dashboard.html");

/// Sub-buckets per power of two in [`LatencyHistogram`]: 8, so a bucket spans at most 1/8 of
/// its lower bound and a percentile is within about 6% (the bucket's middle is reported).
const SUB_BITS: u32 = 3;
const SUB_BUCKETS: usize = 1 << SUB_BITS;
/// Values below this (in nanoseconds) get a bucket each.
const LINEAR: u64 = 2 * SUB_BUCKETS as u64;
const BUCKETS: usize = LINEAR as usize + (64 - (SUB_BITS as usize + 1)) * SUB_BUCKETS;

/// Latencies in nanoseconds, counted in log-linear buckets of atomic counters: recording is
/// one relaxed increment, reading is a copy of the counts, and the percentiles of an interval
/// come from the difference of two copies.
#[derive(Debug)]
pub(crate) struct LatencyHistogram {
    counts: Box<[AtomicU64]>,
}

impl LatencyHistogram {
    fn new() -> LatencyHistogram {
        LatencyHistogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    fn bucket(nanos: u64) -> usize {
        if nanos < LINEAR {
            return nanos as usize;
        }
        let exponent = 63 - nanos.leading_zeros();
        let mantissa = (nanos >> (exponent - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
        LINEAR as usize + (exponent - SUB_BITS - 1) as usize * SUB_BUCKETS + mantissa
    }

    /// The middle of a bucket, in nanoseconds.
    fn middle(bucket: usize) -> f64 {
        if bucket < LINEAR as usize {
            return bucket as f64;
        }
        let offset = bucket - LINEAR as usize;
        let exponent = (offset / SUB_BUCKETS) as u32 + SUB_BITS + 1;
        let mantissa = (offset % SUB_BUCKETS) as u64;
        let width = 1u64 << (exponent - SUB_BITS);
        let low = (SUB_BUCKETS as u64 + mantissa) * width;
        low as f64 + width as f64 / 2.0
    }

    pub(crate) fn record(&self, nanos: u64) {
        self.counts[Self::bucket(nanos)].fetch_add(1, Ordering::Relaxed);
    }

    fn read(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// The `q`-quantiles (in milliseconds) of what was recorded between two readings, `None`
/// when nothing was.
fn quantiles<const N: usize>(before: &[u64], after: &[u64], q: [f64; N]) -> Option<[f64; N]> {
    let delta: Vec<u64> = after
        .iter()
        .zip(before)
        .map(|(a, b)| a.saturating_sub(*b))
        .collect();
    let total: u64 = delta.iter().sum();
    if total == 0 {
        return None;
    }
    Some(q.map(|q| {
        // The rank of the quantile among `total` values, 1-based.
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        let bucket = delta
            .iter()
            .position(|&count| {
                seen += count;
                seen >= rank
            })
            .unwrap_or(BUCKETS - 1);
        LatencyHistogram::middle(bucket) / 1e6
    }))
}

/// One gate at one sample.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct GatePoint {
    pub(crate) inflight: u32,
    pub(crate) limit: u32,
    pub(crate) queued: usize,
    /// How long the oldest waiting request has waited, in milliseconds.
    pub(crate) wait_ms: f64,
    /// The regulator's drop probability or rejection ratio.
    pub(crate) ratio: f64,
    /// The least important rank still admitted (`tier * 128 + cohort`), when one is cut off.
    pub(crate) cutoff: Option<u16>,
    pub(crate) burst: bool,
    pub(crate) overloaded: bool,
}

/// Requests per second turned away, by why.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct Rejected {
    pub(crate) regulator: f64,
    pub(crate) queue_full: f64,
    pub(crate) no_lease: f64,
    /// Waited in the queue past its timeout.
    pub(crate) expired: f64,
}

/// One sample: rates over the interval before it (per second, summed over the gates),
/// latency percentiles of the requests that ended in it, and every gate's state at its end.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Point {
    pub(crate) seq: u64,
    /// Seconds since the proxy started.
    pub(crate) t: f64,
    pub(crate) offered: f64,
    pub(crate) admitted: f64,
    /// Answered with success by the upstream.
    pub(crate) goodput: f64,
    /// Answered with a failure (5xx, refused, reset, timed out).
    pub(crate) failed: f64,
    pub(crate) rejected: Rejected,
    /// Rejected or expired, by tier (0 most important).
    pub(crate) rejected_by_tier: [f64; TIERS as usize],
    /// What the gates in dry run would have shed and forwarded instead, by tier; their
    /// gates' decisions are in it and not in `rejected` ([`crate::dry_run`]).
    pub(crate) would_shed_by_tier: [f64; TIERS as usize],
    /// p50 and p99 in milliseconds, from arrival to the response's last byte, of the requests
    /// the upstream answered.
    pub(crate) e2e_ms: Option<[f64; 2]>,
    /// p50 and p99 in milliseconds, from leaving the gate to the response's last byte.
    pub(crate) upstream_ms: Option<[f64; 2]>,
    /// In the order of the answer's `gates`.
    pub(crate) gates: Vec<GatePoint>,
    /// Long-lived streams, apart from the requests (`crate::stream`).
    pub(crate) streams: StreamsPoint,
}

/// The streams of every upstream at one sample.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub(crate) struct StreamsPoint {
    /// Open at the sample.
    pub(crate) open: i64,
    /// Ended per second, however they ended.
    pub(crate) ended: f64,
    /// Refused per second at `streams.max_per_upstream`.
    pub(crate) refused: f64,
}

/// The last `capacity` points, oldest first.
#[derive(Debug)]
pub(crate) struct History {
    points: VecDeque<Point>,
    capacity: usize,
    next_seq: u64,
}

impl History {
    pub(crate) fn new(capacity: usize) -> History {
        History {
            points: VecDeque::with_capacity(capacity),
            capacity,
            next_seq: 1,
        }
    }

    /// Appends `point`, numbered after the last one, and forgets the oldest beyond capacity.
    pub(crate) fn push(&mut self, mut point: Point) {
        point.seq = self.next_seq;
        self.next_seq += 1;
        if self.points.len() == self.capacity {
            self.points.pop_front();
        }
        self.points.push_back(point);
    }

    /// The sequence number of the newest point, 0 before any.
    pub(crate) fn latest(&self) -> u64 {
        self.next_seq - 1
    }

    /// The points after `since`; all of them when `since` is from the future (a page that
    /// talked to an earlier run of the proxy).
    pub(crate) fn since(&self, since: u64) -> Vec<Point> {
        let since = if since > self.latest() { 0 } else { since };
        // Sequence numbers are consecutive: skip straight to the first one wanted.
        let first = self.points.front().map_or(0, |p| p.seq);
        let skip =
            usize::try_from(since.saturating_sub(first.saturating_sub(1))).unwrap_or(usize::MAX);
        self.points.iter().skip(skip).cloned().collect()
    }
}

/// The dashboard's state in the proxy.
#[derive(Debug)]
pub(crate) struct Dashboard {
    interval: Duration,
    history: Mutex<History>,
    /// Arrival to the response's last byte.
    pub(crate) e2e: LatencyHistogram,
    /// Leaving the gate to the response's last byte.
    pub(crate) upstream: LatencyHistogram,
    /// Milliseconds since the Unix epoch when the proxy started: a page that sees it change
    /// knows the proxy restarted and drops what it has.
    instance: u64,
    /// The dashboard's own cost, for `/status`: how long the last sample and the last answer
    /// to `/dashboard/data` held the thread they ran on (the proxy's worker, which requests
    /// wait for), in nanoseconds.
    last_sample_nanos: AtomicU64,
    last_answer_nanos: AtomicU64,
}

impl Dashboard {
    pub(crate) fn new(config: &DashboardConfig) -> Dashboard {
        let instance = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        Dashboard {
            interval: Duration::from(config.interval),
            history: Mutex::new(History::new(config.history)),
            e2e: LatencyHistogram::new(),
            upstream: LatencyHistogram::new(),
            instance,
            last_sample_nanos: AtomicU64::new(0),
            last_answer_nanos: AtomicU64::new(0),
        }
    }

    /// For `/status`: the samples taken, and how long the last sample and the last answer
    /// took, in microseconds.
    pub(crate) fn status(&self) -> serde_json::Value {
        let micros = |nanos: &AtomicU64| nanos.load(Ordering::Relaxed) as f64 / 1e3;
        serde_json::json!({
            "samples": self.history().latest(),
            "last_sample_us": micros(&self.last_sample_nanos),
            "last_answer_us": micros(&self.last_answer_nanos),
        })
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        // A panic while holding the lock cannot leave a ring half-updated in a way that
        // matters to a chart: carry on with it.
        self.history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Answers `/dashboard/data?since=SEQ`, or names what is wrong with the query.
pub(crate) fn data(source: &impl Source, query: Option<&str>) -> Result<String, String> {
    let started = Instant::now();
    let since = parse_since(query)?;
    let dashboard = source.dashboard();
    let (latest, capacity, points) = {
        let history = dashboard.history();
        (history.latest(), history.capacity, history.since(since))
    };
    let upstreams = source.upstreams();
    let gates: Vec<&str> = upstreams.gates().map(|g| g.name.as_str()).collect();
    let answer = serde_json::json!({
        "instance": dashboard.instance,
        "seq": latest,
        "interval": dashboard.interval.as_secs_f64(),
        "history": capacity,
        "gates": gates,
        "points": points,
    });
    let answer = answer.to_string();
    store_elapsed(&dashboard.last_answer_nanos, started);
    Ok(answer)
}

fn parse_since(query: Option<&str>) -> Result<u64, String> {
    let mut since = 0;
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("since", value)) => {
                since = value.parse().map_err(|_| {
                    format!("since={value:?} is not a sequence number (a whole number >= 0)")
                })?;
            }
            _ => {
                return Err(format!(
                    "unknown parameter {pair:?}: the only one is since=SEQ"
                ));
            }
        }
    }
    Ok(since)
}

/// Every gate's counters summed, every gate's state, and the latency counts, at one instant.
struct Reading {
    at: u64,
    tiers: [TierCounters; TIERS as usize],
    /// Would-shed counts by tier, by reason (in [`Reason::ALL`]'s order).
    would_shed: [[u64; Reason::ALL.len()]; TIERS as usize],
    gates: Vec<GatePoint>,
    e2e: Vec<u64>,
    upstream: Vec<u64>,
    streams_open: i64,
    streams_ended: u64,
    streams_refused: u64,
}

impl Reading {
    fn take(source: &impl Source) -> Reading {
        let upstreams = source.upstreams();
        let mut tiers = [TierCounters::default(); TIERS as usize];
        let mut gates = Vec::new();
        let mut would_shed = [[0; Reason::ALL.len()]; TIERS as usize];
        for slot in upstreams.gates() {
            for (tier, counts) in would_shed.iter_mut().enumerate() {
                for (count, reason) in counts.iter_mut().zip(Reason::ALL) {
                    *count += slot.would_shed.get(tier, reason);
                }
            }
            let s = slot.gate.snapshot();
            for (sum, tier) in tiers.iter_mut().zip(&s.counters.tiers) {
                add(sum, tier);
            }
            gates.push(GatePoint {
                inflight: s.inflight,
                limit: s.limit,
                queued: s.queued,
                wait_ms: s.oldest_wait.as_secs_f64() * 1e3,
                ratio: s.regulator.reject_ratio,
                cutoff: s.regulator.cutoff_rank,
                burst: s.regulator.burst,
                overloaded: s.regulator.overloaded,
            });
        }
        let mut streams_open = 0;
        let mut streams_ended = 0;
        let mut streams_refused = 0;
        for upstream in upstreams.list.iter() {
            let streams = &upstream.streams;
            streams_open += streams.open();
            streams_ended += streams.ended_in_all();
            streams_refused += streams.ended(End::Refused);
        }
        Reading {
            at: source.now(),
            tiers,
            would_shed,
            gates,
            streams_open,
            streams_ended,
            streams_refused,
            e2e: source.dashboard().e2e.read(),
            upstream: source.dashboard().upstream.read(),
        }
    }

    /// The point for the interval from `before` to `self`.
    fn point_since(&self, before: &Reading) -> Point {
        let seconds = (self.at.saturating_sub(before.at) as f64 / 1e9).max(1e-9);
        let rate = |read: fn(&TierCounters) -> u64| {
            let now: u64 = self.tiers.iter().map(read).sum();
            let then: u64 = before.tiers.iter().map(read).sum();
            now.saturating_sub(then) as f64 / seconds
        };
        // What the dry-run gates decided to shed, by reason: out of the rejections, which
        // were not.
        let would = |reason: Reason| {
            let now: u64 = self.would_shed.iter().map(|t| t[reason.index()]).sum();
            let then: u64 = before.would_shed.iter().map(|t| t[reason.index()]).sum();
            now.saturating_sub(then) as f64 / seconds
        };
        let real = |read: fn(&TierCounters) -> u64, reason| (rate(read) - would(reason)).max(0.0);
        let mut rejected_by_tier = [0.0; TIERS as usize];
        let mut would_shed_by_tier = [0.0; TIERS as usize];
        for tier in 0..TIERS as usize {
            let (now, then) = (&self.would_shed[tier], &before.would_shed[tier]);
            let since = |reason: Reason| now[reason.index()].saturating_sub(then[reason.index()]);
            let would_all: u64 = Reason::ALL.into_iter().map(since).sum();
            // The gate counted these as rejected; the upstream's cut-off never reached it.
            let would_gate = would_all - since(Reason::Cutoff);
            let turned_away = |c: &TierCounters| c.rejected() + c.expired;
            let all =
                turned_away(&self.tiers[tier]).saturating_sub(turned_away(&before.tiers[tier]));
            rejected_by_tier[tier] = all.saturating_sub(would_gate) as f64 / seconds;
            would_shed_by_tier[tier] = would_all as f64 / seconds;
        }
        Point {
            seq: 0,
            t: self.at as f64 / 1e9,
            offered: rate(|c| c.arrived),
            admitted: rate(|c| c.admitted),
            goodput: rate(|c| c.completed_ok),
            failed: rate(|c| c.completed_dropped),
            rejected: Rejected {
                regulator: real(|c| c.rejected_regulator, Reason::Regulator),
                queue_full: real(|c| c.rejected_queue_full, Reason::QueueFull),
                no_lease: real(|c| c.rejected_no_lease, Reason::NoLease),
                expired: real(|c| c.expired, Reason::Expired),
            },
            rejected_by_tier,
            would_shed_by_tier,
            e2e_ms: quantiles(&before.e2e, &self.e2e, [0.5, 0.99]),
            upstream_ms: quantiles(&before.upstream, &self.upstream, [0.5, 0.99]),
            gates: self.gates.clone(),
            streams: StreamsPoint {
                open: self.streams_open,
                ended: self.streams_ended.saturating_sub(before.streams_ended) as f64 / seconds,
                refused: self.streams_refused.saturating_sub(before.streams_refused) as f64
                    / seconds,
            },
        }
    }
}

fn add(sum: &mut TierCounters, c: &TierCounters) {
    sum.arrived += c.arrived;
    sum.admitted += c.admitted;
    sum.completed_ok += c.completed_ok;
    sum.completed_dropped += c.completed_dropped;
    sum.completed_ignored += c.completed_ignored;
    sum.rejected_regulator += c.rejected_regulator;
    sum.rejected_queue_full += c.rejected_queue_full;
    sum.rejected_no_lease += c.rejected_no_lease;
    sum.expired += c.expired;
    sum.cancelled_queued += c.cancelled_queued;
    sum.cancelled_inflight += c.cancelled_inflight;
}

fn store_elapsed(nanos: &AtomicU64, since: Instant) {
    let elapsed = u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX);
    nanos.store(elapsed, Ordering::Relaxed);
}

/// Samples every interval until `stop` turns true. The first reading, which the first point
/// is measured from, is taken at the call, not when the task first runs: the requests served
/// in between would be in it and never counted (a proxy that served three requests before
/// its sampler's task was first polled showed no goodput for them).
pub(crate) fn sample(
    source: Arc<impl Source>,
    mut stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> {
    let mut before = Reading::take(&*source);
    async move {
        let dashboard = source.dashboard();
        let mut ticks = tokio::time::interval(dashboard.interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is at once.
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = stop.wait_for(|stop| *stop) => break,
                _ = ticks.tick() => {}
            }
            let started = Instant::now();
            let now = Reading::take(&*source);
            let point = now.point_since(&before);
            before = now;
            dashboard.history().push(point);
            store_elapsed(&dashboard.last_sample_nanos, started);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t: f64) -> Point {
        Point {
            seq: 0,
            t,
            offered: 0.0,
            admitted: 0.0,
            goodput: 0.0,
            failed: 0.0,
            rejected: Rejected::default(),
            rejected_by_tier: [0.0; TIERS as usize],
            would_shed_by_tier: [0.0; TIERS as usize],
            e2e_ms: None,
            upstream_ms: None,
            gates: Vec::new(),
            streams: StreamsPoint::default(),
        }
    }

    #[test]
    fn buckets_are_ordered_and_within_an_eighth() {
        let mut last = 0;
        let mut values: Vec<u64> = (0..20_000u64)
            .chain((1..64).map(|shift| (1u64 << shift) + 7))
            .chain((1..64).map(|shift| (1u64 << shift) - 1))
            .collect();
        values.sort_unstable();
        for nanos in values {
            let bucket = LatencyHistogram::bucket(nanos);
            assert!(bucket >= last, "{nanos}: {bucket} < {last}");
            last = bucket;
            let middle = LatencyHistogram::middle(bucket);
            let error = (middle - nanos as f64).abs() / (nanos as f64).max(1.0);
            assert!(error <= 1.0 / 16.0 + 1e-9, "{nanos} -> {middle}");
        }
        assert!(LatencyHistogram::bucket(u64::MAX) < BUCKETS);
    }

    #[test]
    fn quantiles_come_from_the_difference_of_two_readings() {
        let histogram = LatencyHistogram::new();
        // Before: a thousand 1 s requests, which must not count.
        for _ in 0..1000 {
            histogram.record(1_000_000_000);
        }
        let before = histogram.read();
        assert_eq!(quantiles(&before, &histogram.read(), [0.5]), None);
        // 98 at 1 ms, 2 at 100 ms: p50 1 ms, p99 100 ms (within a bucket).
        for _ in 0..98 {
            histogram.record(1_000_000);
        }
        for _ in 0..2 {
            histogram.record(100_000_000);
        }
        let [p50, p99] = quantiles(&before, &histogram.read(), [0.5, 0.99]).unwrap();
        assert!((p50 - 1.0).abs() < 0.07, "{p50}");
        assert!((p99 - 100.0).abs() < 7.0, "{p99}");
    }

    #[test]
    fn history_is_bounded_and_answers_what_came_after() {
        let mut history = History::new(5);
        assert_eq!(history.latest(), 0);
        assert!(history.since(0).is_empty());
        for i in 0..12 {
            history.push(point(f64::from(i)));
        }
        assert_eq!(history.latest(), 12);
        let seqs = |points: Vec<Point>| points.iter().map(|p| p.seq).collect::<Vec<_>>();
        assert_eq!(seqs(history.since(0)), [8, 9, 10, 11, 12]);
        assert_eq!(seqs(history.since(3)), [8, 9, 10, 11, 12]);
        assert_eq!(seqs(history.since(9)), [10, 11, 12]);
        assert_eq!(seqs(history.since(12)), Vec::<u64>::new());
        // From an earlier run of the proxy: everything.
        assert_eq!(seqs(history.since(40)), [8, 9, 10, 11, 12]);
        assert_eq!(
            history.points.capacity(),
            5,
            "never grows past its capacity"
        );
    }

    #[test]
    fn a_dry_run_gates_decisions_are_would_shed_not_rejections() {
        let reading = |at: u64, rejected: u64, expired: u64, would: [u64; 5]| {
            let mut tiers = [TierCounters::default(); TIERS as usize];
            tiers[5].rejected_queue_full = rejected;
            tiers[5].expired = expired;
            let mut would_shed = [[0; Reason::ALL.len()]; TIERS as usize];
            would_shed[5] = would;
            Reading {
                at,
                tiers,
                would_shed,
                gates: Vec::new(),
                streams_open: 0,
                streams_ended: 0,
                streams_refused: 0,
                e2e: Vec::new(),
                upstream: Vec::new(),
            }
        };
        // Over one second: 30 queue-full rejections and 4 expirations, of which 20 and 4 by
        // gates in dry run, and 6 more would-shed on an upstream's cut-off.
        let before = reading(1_000_000_000, 100, 10, [0, 50, 0, 5, 1]);
        let after = reading(2_000_000_000, 130, 14, [0, 70, 0, 9, 7]);
        let point = after.point_since(&before);
        assert_eq!(point.rejected.queue_full, 10.0);
        assert_eq!(point.rejected.expired, 0.0);
        assert_eq!(point.rejected_by_tier[5], 10.0);
        assert_eq!(point.would_shed_by_tier[5], 30.0);
        assert_eq!(point.would_shed_by_tier[1], 0.0);
    }

    #[test]
    fn bad_queries_are_named() {
        assert_eq!(parse_since(None), Ok(0));
        assert_eq!(parse_since(Some("since=42")), Ok(42));
        assert_eq!(parse_since(Some("")), Ok(0));
        let err = parse_since(Some("since=-1")).unwrap_err();
        assert!(err.contains("since=\"-1\""), "{err}");
        let err = parse_since(Some("from=3")).unwrap_err();
        assert!(err.contains("from=3"), "{err}");
    }
}

//! Dry run (`mode = "dry-run"`, for the whole proxy or one upstream): the gate decides every
//! request as usual, and the proxy counts what it would have shed, by reason and tier, but
//! forwards everything. What an operator needs before trusting a load shedder in production:
//! how much it would turn away, whom, and why, on their own traffic.
//!
//! How a request goes through a dry-run gate ([`judge`]):
//!
//! - **Admitted at once**: it holds its permit as in enforcing mode, released with its outcome
//!   at its last byte, so the limit keeps learning from the requests it would have let in.
//! - **Shed at once** (regulator, queue full, no lease; or the upstream's cut-off): counted in
//!   [`WouldShed`] and forwarded *without* a slot.
//! - **Queued**: forwarded at once (a dry run must not add latency), while its ticket stays in
//!   the gate's queue, in a task of its own, until the gate decides: shed (expired, or evicted
//!   by a more important arrival) is counted; admitted takes its slot until the request ends
//!   (at once, as cancelled, if it already has).
//!
//! Why a would-shed request takes no slot: the gate's in-flight count and queue must be what
//! they would be if it enforced. Forced into a slot, a would-shed request would push the
//! in-flight count past the limit, every later arrival would queue or be shed behind it, and
//! the dry run would report far more than enforcing would shed. The upstream still serves
//! every request, so under overload it is slower than it would be behind an enforcing gate,
//! and the limit learns from that: under overload the dry run's "would shed" tends to be
//! above what enforcing would shed (docs/proxy.md, "Dry run").

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tidegate_core::Priority;
use tidegate_core::limit::Outcome;
use tidegate_core::priority::TIERS;
use tidegate_tower::Permit;
use tidegate_tower::error::ShedReason;

use crate::upstream::{GateSlot, Upstream};

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

/// Why a request would have been shed: the gate's reasons, and the upstream's cut-off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Reason {
    Regulator = 0,
    QueueFull = 1,
    NoLease = 2,
    Expired = 3,
    /// Not the gate's: the upstream's `tidegate-cutoff`.
    Cutoff = 4,
}

impl Reason {
    pub(crate) const ALL: [Reason; 5] = [
        Reason::Regulator,
        Reason::QueueFull,
        Reason::NoLease,
        Reason::Expired,
        Reason::Cutoff,
    ];

    /// Its place in [`Reason::ALL`].
    pub(crate) fn index(self) -> usize {
        self as usize
    }

    /// The `reason` label, as `tidegate-shed` names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Reason::Regulator => "regulator",
            Reason::QueueFull => "queue_full",
            Reason::NoLease => "no_lease",
            Reason::Expired => "expired",
            Reason::Cutoff => "cutoff",
        }
    }

    /// `None` for a gate that went away (nothing to count: the request was not judged).
    fn of(shed: ShedReason) -> Option<Reason> {
        match shed {
            ShedReason::Regulator => Some(Reason::Regulator),
            ShedReason::QueueFull => Some(Reason::QueueFull),
            ShedReason::NoLease => Some(Reason::NoLease),
            ShedReason::Expired => Some(Reason::Expired),
            // `Cancelled` (the gate went away), and reasons a later core may add.
            _ => None,
        }
    }
}

const REASONS: usize = Reason::ALL.len();

/// One gate's would-shed requests, by tier and reason: relaxed atomic counters, read by
/// `/metrics`, `/status` and the dashboard.
#[derive(Debug, Default)]
pub(crate) struct WouldShed {
    counts: [[AtomicU64; REASONS]; TIERS as usize],
}

impl WouldShed {
    pub(crate) fn count(&self, tier: u8, reason: Reason) {
        let tier = usize::from(tier).min(TIERS as usize - 1);
        self.counts[tier][reason.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn get(&self, tier: usize, reason: Reason) -> u64 {
        self.counts
            .get(tier)
            .map_or(0, |tier| tier[reason.index()].load(Ordering::Relaxed))
    }

    /// Every reason's count for `tier`.
    pub(crate) fn tier_total(&self, tier: usize) -> u64 {
        Reason::ALL.iter().map(|r| self.get(tier, *r)).sum()
    }
}

/// A dry-run request's hold on its gate: the permit when the gate admitted it, and what
/// becomes of one that comes later from the queue.
#[derive(Debug)]
pub(crate) struct Shadow {
    held: Arc<Mutex<Held>>,
}

#[derive(Debug)]
enum Held {
    /// Queued in the gate: the decision is still to come.
    Waiting,
    Permit(Permit),
    /// The request ended (or was shed): a late admission gives its slot straight back.
    Ended,
}

impl Shadow {
    fn held(held: Held) -> Shadow {
        Shadow {
            held: Arc::new(Mutex::new(held)),
        }
    }

    /// The request ended with `outcome` (`None`: cancelled), the upstream having taken
    /// `upstream_time` if it was measured: the permit, if it has one, is released with them.
    pub(crate) fn release(self, outcome: Option<Outcome>, upstream_time: Option<Duration>) {
        let held = std::mem::replace(&mut *lock(&self.held), Held::Ended);
        if let Held::Permit(mut permit) = held {
            if let Some(upstream_time) = upstream_time {
                permit.measured(upstream_time);
            }
            permit.release(outcome);
        }
    }
}

fn lock(held: &Mutex<Held>) -> std::sync::MutexGuard<'_, Held> {
    // The state is one enum written whole: a panic elsewhere cannot leave it half-updated.
    held.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Judges a request of `priority` for `upstream`'s gate of `partition` as an enforcing proxy
/// would, at `now`: the upstream's cut-off first, then the gate. Returns at once, whatever the
/// gate decides (see the module docs); `None`: the request holds nothing in the gate.
pub(crate) fn judge(
    upstream: &Upstream,
    partition: usize,
    priority: Priority,
    now: u64,
) -> Option<Shadow> {
    let slot = &upstream.gates[partition];
    if upstream.cutoff.refuses(now, priority).is_some() {
        slot.would_shed.count(priority.tier(), Reason::Cutoff);
        return None;
    }
    judge_gate(slot, priority)
}

fn judge_gate(slot: &GateSlot, priority: Priority) -> Option<Shadow> {
    let tier = priority.tier();
    let mut acquire = slot.gate.acquire(priority);
    // One poll decides at once whatever the gate decides at once; a queued request has
    // registered this no-op waker, replaced by the task's when it polls again.
    let mut cx = Context::from_waker(Waker::noop());
    match Pin::new(&mut acquire).poll(&mut cx) {
        Poll::Ready(Ok(permit)) => Some(Shadow::held(Held::Permit(permit))),
        Poll::Ready(Err(shed)) => {
            if let Some(reason) = Reason::of(shed.reason()) {
                slot.would_shed.count(tier, reason);
            }
            None
        }
        Poll::Pending => {
            let shadow = Shadow::held(Held::Waiting);
            let held = shadow.held.clone();
            let would_shed = slot.would_shed.clone();
            tokio::spawn(async move {
                match acquire.await {
                    Ok(permit) => {
                        let mut held = lock(&held);
                        if matches!(*held, Held::Waiting) {
                            *held = Held::Permit(permit);
                        }
                        // Otherwise the request already ended: the permit drops here, its
                        // slot freed as cancelled, teaching the limit nothing.
                    }
                    Err(shed) => {
                        *lock(&held) = Held::Ended;
                        if let Some(reason) = Reason::of(shed.reason()) {
                            would_shed.count(tier, reason);
                        }
                    }
                }
            });
            Some(shadow)
        }
    }
}

/// `/status`'s view of a gate's would-shed counts: `{"total": N, "by_tier": [..],
/// "by_reason": {"regulator": N, ..}}`.
pub(crate) fn status(would_shed: &WouldShed) -> serde_json::Value {
    let by_tier: Vec<u64> = (0..TIERS as usize)
        .map(|tier| would_shed.tier_total(tier))
        .collect();
    let by_reason: serde_json::Map<String, serde_json::Value> = Reason::ALL
        .iter()
        .map(|reason| {
            let count: u64 = (0..TIERS as usize)
                .map(|tier| would_shed.get(tier, *reason))
                .sum();
            (reason.as_str().to_owned(), count.into())
        })
        .collect();
    serde_json::json!({
        "total": by_tier.iter().sum::<u64>(),
        "by_tier": by_tier,
        "by_reason": by_reason,
    })
}

const TIER_NAMES: [&str; TIERS as usize] = ["0", "1", "2", "3", "4", "5"];

/// `tidegate_would_shed_total{gate, tier, reason}` for `gates`, read as they are scraped.
pub(crate) fn encode<'a>(
    encoder: &mut prometheus_client::encoding::DescriptorEncoder<'_>,
    gates: impl Iterator<Item = &'a GateSlot>,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::EncodeMetric as _;
    let mut family = encoder.encode_descriptor(
        "tidegate_would_shed",
        "Requests a gate in dry run would have shed (and forwarded), by tier and reason.",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for slot in gates {
        let (gate, would_shed) = (&slot.name, &slot.would_shed);
        for (tier, tier_name) in TIER_NAMES.iter().enumerate() {
            for reason in Reason::ALL {
                let labels = [
                    ("gate", gate.as_str()),
                    ("tier", tier_name),
                    ("reason", reason.as_str()),
                ];
                prometheus_client::metrics::counter::ConstCounter::new(
                    would_shed.get(tier, reason),
                )
                .encode(family.encode_family(&labels)?)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Config;

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
        assert_eq!(modes, [super::Mode::DryRun, super::Mode::Enforce]);
    }
}

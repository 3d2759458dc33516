//! What a gate in dry run counts (see [`crate::dry_run`]): the requests it would have shed,
//! by tier and reason, and how `/status` and `/metrics` report them.

use std::sync::atomic::{AtomicU64, Ordering};

use tidegate_core::priority::TIERS;
use tidegate_tower::error::ShedReason;

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
    pub(crate) fn of(shed: ShedReason) -> Option<Reason> {
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

/// `tidegate_would_shed_total{gate, tier, reason}` for `gates` (each gate's name and its
/// counts), read as they are scraped.
pub(crate) fn encode<'a>(
    encoder: &mut prometheus_client::encoding::DescriptorEncoder<'_>,
    gates: impl Iterator<Item = (&'a str, &'a WouldShed)>,
) -> Result<(), std::fmt::Error> {
    use prometheus_client::encoding::EncodeMetric as _;
    let mut family = encoder.encode_descriptor(
        "tidegate_would_shed",
        "Requests a gate in dry run would have shed (and forwarded), by tier and reason.",
        None,
        prometheus_client::metrics::MetricType::Counter,
    )?;
    for (gate, would_shed) in gates {
        for (tier, tier_name) in TIER_NAMES.iter().enumerate() {
            for reason in Reason::ALL {
                let labels = [
                    ("gate", gate),
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

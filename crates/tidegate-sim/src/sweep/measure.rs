//! What one arm did on one case, read from its run: the goodput of each judged window, what
//! it shed, its p99, the important tier's losses and the limit's settling time.
//!
//! The goodput of a window is the ok responses of the series entries that end in it, over
//! what an ideal protection could serve in them: in each entry, the capacity if the load
//! offered then is above it, else the requests offered. Over an overloaded window that is
//! the capacity, over a window below it the offered load, and over bursts the mix of both.
//! Whether an entry is overloaded is read from the load's nominal rate, not from the
//! requests that happened to arrive: the smaller of a random count and the capacity is
//! biased low (at 2 requests offered per entry on average against a capacity of 4, by 4%).

use serde::Serialize;

use super::case::{Case, SERIES_STEP, TIER_IMPORTANT, TIER_SHEDDABLE, Window};
use crate::scenario::engine::settle_time;
use crate::scenario::report::{ArmRun, Second};

/// One arm on one case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArmResult {
    pub arm: String,
    /// Ok responses over the ideal, per judged window, in the case's order.
    pub goodput: Vec<f64>,
    /// Requests shed, expired, refused by the service or unsent, over the whole run.
    pub shed: u64,
    /// p99 of the ok responses after the warm-up, in ms.
    pub p99_ms: Option<f64>,
    /// Of the requests let through to the service after the warm-up (answered in time or
    /// not), the share whose caller gave up first: above 1%, the p99 of the requests served
    /// is above the client's timeout (the p99 of the ok responses never is). Not counting
    /// the requests whose own work outlasted the timeout, late whatever the protection does
    /// (a cache in front of a slow store, 99% of answers at 50 ms and 1% at 5 s, with a 1 s
    /// timeout: a share of 1% at any limit).
    pub late_share: f64,
    /// The important tier's share of requests lost after the warm-up (two-tier cases): shed,
    /// expired, refused, unsent, or late for their wait. Not those whose own work outlasted
    /// the caller's timeout: no protection answers them in time (with exponential work and a
    /// timeout of 10 work times, e^-10 of the requests, at any limit).
    pub tier1_loss: Option<f64>,
    /// The sheddable tier's ok responses after the warm-up, as a fraction of the capacity.
    pub tier2_served: Option<f64>,
    /// Mean work times from each judged window's onset until the limit settled, the longest;
    /// `None` without an onset or a limit.
    pub settle_w: Option<f64>,
    /// The limit never settled after some onset.
    pub unsettled: bool,
}

impl ArmResult {
    /// The worst judged window's goodput: the arm's goodput on the case.
    pub fn worst_goodput(&self) -> f64 {
        self.goodput.iter().copied().fold(f64::INFINITY, f64::min)
    }
}

/// Reads `run`, an arm's run on `case`.
pub fn measure(case: &Case, run: &ArmRun) -> ArmResult {
    let step = case.works(SERIES_STEP);
    let step_s = step.as_secs_f64();
    let w = case.work().as_secs_f64();
    let at_w = |s: &Second| f64::from(s.second) * SERIES_STEP;
    let windows = case.windows();
    let goodput = windows
        .iter()
        .map(|window| {
            let entries = run
                .series
                .iter()
                .filter(|s| at_w(s) > window.from && at_w(s) <= window.to);
            let capacity = case.capacity_rps() * window.capacity * step_s;
            let (ok, ideal) = entries.fold((0.0, 0.0), |(ok, ideal), s| {
                let middle = at_w(s) - SERIES_STEP / 2.0;
                let most = if case.overloaded_at(middle) {
                    capacity
                } else {
                    s.offered as f64
                };
                (ok + s.ok as f64, ideal + most)
            });
            if ideal > 0.0 { round4(ok / ideal) } else { 1.0 }
        })
        .collect();
    let shed = run.series.iter().map(|s| s.shed + s.expired).sum();
    let steady = &run.steady.figures;
    let ok_share = steady.goodput_rps / steady.offered_rps.max(f64::MIN_POSITIVE);
    let late = steady.avoidable_timeout_ratio;
    let late_share = if ok_share + late > 0.0 {
        round4(late / (ok_share + late))
    } else {
        0.0
    };
    let tier = |t: u8| run.steady.tiers.get(&t.to_string());
    let (tier1_loss, tier2_served) = if case.tiers {
        let lost = tier(TIER_IMPORTANT).map_or(0.0, |f| {
            f.shed_ratio
                + f.expired_ratio
                + f.refused_ratio
                + f.avoidable_timeout_ratio
                + f.unsent_ratio
        });
        let served = tier(TIER_SHEDDABLE).map_or(0.0, |f| f.goodput_rps / case.capacity_rps());
        (Some(round4(lost)), Some(round4(served)))
    } else {
        (None, None)
    };
    let (settle_w, unsettled) = settling(&windows, &run.series, step_s, w);
    ArmResult {
        arm: run.name.clone(),
        goodput,
        shed,
        p99_ms: steady.p99_ms,
        late_share,
        tier1_loss,
        tier2_served,
        settle_w,
        unsettled,
    }
}

/// The longest settling time over the windows with an onset, in work times, and whether
/// the limit failed to settle after one: settled is within 20% (or one request) of the limit's mean
/// over the window, read as [`settle_time`] reads it, over the entries up to the window's end.
fn settling(windows: &[Window], series: &[Second], step_s: f64, w: f64) -> (Option<f64>, bool) {
    let mut longest: Option<f64> = None;
    let mut unsettled = false;
    let at_w = |s: &Second| f64::from(s.second) * SERIES_STEP;
    for window in windows {
        let Some(onset) = window.onset else { continue };
        let upto: Vec<Second> = series
            .iter()
            .filter(|s| at_w(s) <= window.to)
            .cloned()
            .collect();
        let judged: Vec<f64> = upto
            .iter()
            .filter(|s| at_w(s) > window.from)
            .filter_map(|s| s.limit.map(f64::from))
            .collect();
        if judged.is_empty() {
            continue;
        }
        let settled = judged.iter().sum::<f64>() / judged.len() as f64;
        match settle_time(&upto, step_s, onset * w, settled) {
            Some(s) => longest = Some(longest.map_or(s / w, |l: f64| l.max(s / w))),
            None => unsettled = true,
        }
    }
    (longest.map(round4), unsettled)
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

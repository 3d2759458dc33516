//! The targets for an arm on a case, and every miss with its reason.
//!
//! - goodput >= 97% of the capacity in every overloaded window, >= 99% of the offered load in
//!   every window below it, and nothing shed at 0.5x;
//! - p99 of the ok responses <= 1.25x the oracle's, and the p99 of every request served
//!   (in time or not) <= the client's timeout: at most 1% of them answered too late (of
//!   those whose own work is within the timeout);
//! - with two tiers, tier 1 loses nothing while tier 2 still gets served (lost: shed,
//!   refused, or late for a wait; a request whose own work outlasts the timeout is late
//!   whatever the protection does);
//! - the limit settled within 50 mean work times after an overload or a capacity change.

use serde::Serialize;

use super::case::{Case, LoadShape, SETTLE_ALLOWANCE};
use super::measure::ArmResult;

pub const OVERLOADED_GOODPUT: f64 = 0.97;
pub const UNDERLOADED_GOODPUT: f64 = 0.99;
pub const P99_OVER_ORACLE: f64 = 1.25;
/// The share of the requests served that may come too late with their p99 within the timeout.
pub const LATE_SHARE: f64 = 0.01;

/// Which target a miss is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Target {
    Goodput,
    Shed,
    P99Oracle,
    P99Timeout,
    Tiers,
    Settle,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Goodput => "goodput",
            Target::Shed => "shed at 0.5x",
            Target::P99Oracle => "p99 vs oracle",
            Target::P99Timeout => "p99 vs timeout",
            Target::Tiers => "tier 1 losses",
            Target::Settle => "settling",
        }
    }
}

/// A target an arm missed on a case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Miss {
    pub target: Target,
    pub reason: String,
}

/// The targets `arm` misses on `case`; `oracle` is the oracle's result, when it ran.
pub fn targets(case: &Case, arm: &ArmResult, oracle: Option<&ArmResult>) -> Vec<Miss> {
    let mut misses = Vec::new();
    let mut miss = |target, reason: String| misses.push(Miss { target, reason });
    for (window, &goodput) in case.windows().iter().zip(&arm.goodput) {
        let (floor, of) = if window.overloaded {
            (OVERLOADED_GOODPUT, "capacity")
        } else {
            (UNDERLOADED_GOODPUT, "offered")
        };
        if goodput < floor {
            miss(
                Target::Goodput,
                format!(
                    "{:.1}% of {of} over {:.0}-{:.0} W (target {:.0}%)",
                    goodput * 100.0,
                    window.from,
                    window.to,
                    floor * 100.0
                ),
            );
        }
    }
    if case.load == LoadShape::Half && arm.shed > 0 {
        miss(Target::Shed, format!("{} requests shed at 0.5x", arm.shed));
    }
    if let Some(p99) = arm.p99_ms
        && let Some(oracle_p99) = oracle.and_then(|o| o.p99_ms)
        && p99 > P99_OVER_ORACLE * oracle_p99
    {
        miss(
            Target::P99Oracle,
            format!(
                "p99 {} is {:.2}x the oracle's {}",
                ms(p99),
                p99 / oracle_p99,
                ms(oracle_p99)
            ),
        );
    }
    if arm.late_share > LATE_SHARE {
        miss(
            Target::P99Timeout,
            format!(
                "{:.1}% of the requests served came after the {} timeout",
                arm.late_share * 100.0,
                ms(case.timeout().as_secs_f64() * 1e3)
            ),
        );
    }
    if let (Some(lost), Some(served)) = (arm.tier1_loss, arm.tier2_served)
        && lost > 0.0
        && served > 0.0
    {
        miss(
            Target::Tiers,
            format!(
                "tier 1 lost {:.2}% while tier 2 got {:.1}% of the capacity",
                lost * 100.0,
                served * 100.0
            ),
        );
    }
    if arm.unsettled {
        miss(Target::Settle, "the limit never settled".to_owned());
    } else if let Some(w) = arm.settle_w
        && w > SETTLE_ALLOWANCE
    {
        miss(
            Target::Settle,
            format!("settled after {w:.0} W (target {SETTLE_ALLOWANCE:.0})"),
        );
    }
    misses
}

fn ms(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2}s", v / 1e3)
    } else {
        format!("{v:.1}ms")
    }
}

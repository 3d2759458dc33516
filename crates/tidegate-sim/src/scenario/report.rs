//! What a run measured, and its renderings: a text table, a per-second CSV, and the `--json`
//! document's structure.
//!
//! Counting rules. A request is counted by the second it was *sent* for the whole-run and
//! steady-state summaries (steady: sent from the warm-up to the end), and by the second its
//! outcome happened for the per-second series, which is what a dashboard would show. Every
//! request ends in exactly one outcome: ok (a response within the caller's timeout), shed
//! (turned away by the protection: the gate's regulator or full queue, or an exhausted lease),
//! expired (waited past the gate's queue timeout), refused (by the service's own full queue),
//! timed out (the caller gave up), or unsent (every connection of the client was busy). With
//! retries, a request's outcome is its last attempt's, and its latency runs from its first
//! attempt. Latencies are those of the ok responses.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use tidegate_core::Nanos;
use tidegate_core::priority::TIERS;

use crate::histogram::Histogram;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    Ok(Nanos),
    Shed,
    Expired,
    Refused,
    /// The caller gave up; `unservable` if the request's own work (see
    /// [`tidegate_model::service::Instance::own_work`]) outlasted the caller's timeout, so
    /// that no protection could have answered it in time.
    TimedOut {
        unservable: bool,
    },
    Unsent,
}

/// Counts of one tier (or of all) over a span of the run.
#[derive(Clone, Debug, Default)]
pub(crate) struct Count {
    offered: u64,
    ok: u64,
    shed: u64,
    expired: u64,
    refused: u64,
    timed_out: u64,
    /// Of `timed_out`, the unservable.
    unservable: u64,
    unsent: u64,
    latency: Option<Histogram>,
}

impl Count {
    /// Adds `other`'s counts and latencies, as if its requests had been counted here too.
    fn add(&mut self, other: &Count) {
        self.offered += other.offered;
        self.ok += other.ok;
        self.shed += other.shed;
        self.expired += other.expired;
        self.refused += other.refused;
        self.timed_out += other.timed_out;
        self.unservable += other.unservable;
        self.unsent += other.unsent;
        if let Some(latency) = &other.latency {
            self.latency.get_or_insert_with(Histogram::new).add(latency);
        }
    }

    fn end(&mut self, ending: Ending) {
        match ending {
            Ending::Ok(latency) => {
                self.ok += 1;
                self.latency
                    .get_or_insert_with(Histogram::new)
                    .record(latency.as_nanos());
            }
            Ending::Shed => self.shed += 1,
            Ending::Expired => self.expired += 1,
            Ending::Refused => self.refused += 1,
            Ending::TimedOut { unservable } => {
                self.timed_out += 1;
                self.unservable += u64::from(unservable);
            }
            Ending::Unsent => self.unsent += 1,
        }
    }

    fn figures(&self, seconds: f64) -> Figures {
        let offered = self.offered.max(1) as f64;
        let ratio = |n: u64| n as f64 / offered;
        let ms = |q: f64| {
            self.latency
                .as_ref()
                .and_then(|h| h.quantile(q))
                .map(|ns| round3(ns as f64 / 1e6))
        };
        Figures {
            offered_rps: round3(self.offered as f64 / seconds),
            goodput_rps: round3(self.ok as f64 / seconds),
            shed_ratio: round4(ratio(self.shed)),
            expired_ratio: round4(ratio(self.expired)),
            refused_ratio: round4(ratio(self.refused)),
            timeout_ratio: round4(ratio(self.timed_out)),
            avoidable_timeout_ratio: round4(ratio(self.timed_out - self.unservable)),
            unsent_ratio: round4(ratio(self.unsent)),
            p50_ms: ms(0.5),
            p90_ms: ms(0.9),
            p99_ms: ms(0.99),
            max_ms: self
                .latency
                .as_ref()
                .and_then(Histogram::max)
                .map(|ns| round3(ns as f64 / 1e6)),
        }
    }
}

fn round3(x: f64) -> f64 {
    (x * 1e3).round() / 1e3
}

fn round4(x: f64) -> f64 {
    (x * 1e4).round() / 1e4
}

/// Counts per tier over a span of the run. The total over the tiers is added up once, for
/// the summary, rather than counted beside them for every request.
#[derive(Clone, Debug, Default)]
pub(crate) struct Tally {
    tiers: [Count; TIERS as usize],
}

impl Tally {
    pub(crate) fn offer(&mut self, tier: u8) {
        self.tiers[usize::from(tier)].offered += 1;
    }

    pub(crate) fn end(&mut self, tier: u8, ending: Ending) {
        self.tiers[usize::from(tier)].end(ending);
    }

    /// Adds `other`'s counts, tier by tier, as if its requests had been counted here too.
    pub(crate) fn add(&mut self, other: &Tally) {
        self.tiers
            .iter_mut()
            .zip(&other.tiers)
            .for_each(|(count, other)| count.add(other));
    }

    pub(crate) fn summary(&self, seconds: f64, limit: Option<f64>) -> Summary {
        let tiers: BTreeMap<String, Figures> = self
            .tiers
            .iter()
            .enumerate()
            .filter(|(_, c)| c.offered > 0)
            .map(|(tier, c)| (tier.to_string(), c.figures(seconds)))
            .collect();
        // A tier without offers has nothing counted, so traffic of one tier is the total.
        let figures = match tiers.values().collect::<Vec<_>>()[..] {
            [only] => only.clone(),
            _ => {
                let mut total = Count::default();
                self.tiers.iter().for_each(|c| total.add(c));
                total.figures(seconds)
            }
        };
        Summary {
            figures,
            limit: limit.map(round3),
            tiers,
        }
    }
}

/// Rates, ratios of the offered requests, and latencies of the ok responses.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Figures {
    pub offered_rps: f64,
    /// Ok responses per second.
    pub goodput_rps: f64,
    pub shed_ratio: f64,
    pub expired_ratio: f64,
    pub refused_ratio: f64,
    pub timeout_ratio: f64,
    /// Of `timeout_ratio`, the requests whose own work was within the caller's timeout: the
    /// wait (in a queue, or behind other requests in the service) made them late. All of
    /// them where the work is not known apart from the wait.
    pub avoidable_timeout_ratio: f64,
    pub unsent_ratio: f64,
    pub p50_ms: Option<f64>,
    pub p90_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    pub max_ms: Option<f64>,
}

/// The figures of a span of the run, in total and per tier.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    #[serde(flatten)]
    pub figures: Figures,
    /// Mean of the per-second limits (summed over instances); `None` without a limit.
    pub limit: Option<f64>,
    /// By tier number, tiers with traffic only.
    pub tiers: BTreeMap<String, Figures>,
}

/// One second of one run: what happened during it, and the state at its end. The series of
/// these is what the charts are drawn from.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Second {
    /// The second's end, in seconds from the start (in series steps, for a scenario built in
    /// code with a `series_step` other than a second).
    pub second: u32,
    pub offered: u64,
    pub ok: u64,
    /// Of `ok`, by tier (0 most important).
    pub ok_by_tier: [u64; TIERS as usize],
    /// Shed, refused and unsent.
    pub shed: u64,
    pub expired: u64,
    pub timed_out: u64,
    /// Of the ok responses of the second.
    pub p50_ms: Option<f64>,
    pub p99_ms: Option<f64>,
    /// The limit in force, summed over instances (a lease's allowed requests for a static
    /// lease arm); `None` without either.
    pub limit: Option<u32>,
    /// Requests in the service (working or in its internal queue), over all instances.
    pub inflight: u32,
    /// Requests waiting in the gates.
    pub queued: u32,
    /// The regulators' rejection ratio (PIE's drop probability), averaged over instances.
    pub drop_p: Option<f64>,
}

/// One arm at one load point.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ArmRun {
    pub name: String,
    /// The load point's rate (a sweep), or the final rate of the load schedule.
    pub load_rps: f64,
    #[serde(flatten)]
    pub whole: Summary,
    pub steady: Summary,
    /// Seconds from `overload_at` until the per-second limit stayed within 20% of its
    /// steady-state mean; `None` without an overload start or a limit, or if it never did.
    pub settle_s: Option<f64>,
    #[serde(skip)]
    pub series: Vec<Second>,
    /// Events the engine handled (for its speed).
    #[serde(skip)]
    pub events: u64,
}

/// The `--json` document.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    pub scenario: String,
    pub seed: u64,
    pub arms: Vec<ArmRun>,
}

fn opt(x: Option<f64>, decimals: usize) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}"))
}

impl Report {
    /// The per-arm table: the whole run and the steady state, each with a line per tier when
    /// there are several.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for (title, pick) in [
            (
                "whole run",
                (|a: &ArmRun| &a.whole) as fn(&ArmRun) -> &Summary,
            ),
            ("steady state", |a: &ArmRun| &a.steady),
        ] {
            let _ = writeln!(out, "{} ({title}, seed {})", self.scenario, self.seed);
            let _ = writeln!(
                out,
                "{:<24} {:>6} {:>4} {:>9} {:>9} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6}",
                "arm",
                "load",
                "tier",
                "offered/s",
                "goodput/s",
                "shed%",
                "exp%",
                "ref%",
                "tout%",
                "uns%",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
                "limit",
                "settle"
            );
            for arm in &self.arms {
                let s = pick(arm);
                let mut rows: Vec<(String, &Figures)> = vec![("all".to_owned(), &s.figures)];
                if s.tiers.len() > 1 {
                    rows.extend(s.tiers.iter().map(|(t, f)| (t.clone(), f)));
                }
                for (i, (tier, f)) in rows.iter().enumerate() {
                    let (name, limit, settle) = if i == 0 {
                        (
                            arm.name.as_str(),
                            opt(s.limit, 1),
                            arm.settle_s
                                .map_or_else(|| "-".to_owned(), |v| format!("{v:.0}s")),
                        )
                    } else {
                        ("", String::new(), String::new())
                    };
                    let pct = |r: f64| format!("{:.1}", r * 100.0);
                    let row = format!(
                        "{:<24} {:>6} {:>4} {:>9.1} {:>9.1} {:>6} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8} {:>7} {:>6}",
                        name,
                        if i == 0 {
                            format!("{}", arm.load_rps)
                        } else {
                            String::new()
                        },
                        tier,
                        f.offered_rps,
                        f.goodput_rps,
                        pct(f.shed_ratio),
                        pct(f.expired_ratio),
                        pct(f.refused_ratio),
                        pct(f.timeout_ratio),
                        pct(f.unsent_ratio),
                        opt(f.p50_ms, 1),
                        opt(f.p90_ms, 1),
                        opt(f.p99_ms, 1),
                        opt(f.max_ms, 1),
                        limit,
                        settle,
                    );
                    // A tier's row leaves the limit and the settling blank: no trailing
                    // spaces in the pages that quote the table.
                    let _ = writeln!(out, "{}", row.trim_end());
                }
            }
            out.push('\n');
        }
        out
    }

    /// Per-second rows of every run: `arm,load,second,offered,ok,shed,expired,timed_out,
    /// p50_ms,p99_ms,limit,inflight,queued,drop_p`; empty fields where there is no value.
    pub fn csv(&self) -> String {
        // With several tiers, their ok responses too, a column per tier with traffic.
        let tiers = self.tiers();
        let mut out = String::from(
            "arm,load,second,offered,ok,shed,expired,timed_out,p50_ms,p99_ms,limit,inflight,queued,drop_p",
        );
        if tiers.len() > 1 {
            for tier in &tiers {
                let _ = write!(out, ",ok_tier{tier}");
            }
        }
        out.push('\n');
        let field = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v}"));
        for arm in &self.arms {
            for s in &arm.series {
                let _ = write!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                    csv_text(&arm.name),
                    arm.load_rps,
                    s.second,
                    s.offered,
                    s.ok,
                    s.shed,
                    s.expired,
                    s.timed_out,
                    field(s.p50_ms),
                    field(s.p99_ms),
                    s.limit.map_or_else(String::new, |l| l.to_string()),
                    s.inflight,
                    s.queued,
                    field(s.drop_p.map(round4)),
                );
                if tiers.len() > 1 {
                    for &tier in &tiers {
                        let _ = write!(out, ",{}", s.ok_by_tier[usize::from(tier)]);
                    }
                }
                out.push('\n');
            }
        }
        out
    }

    /// The tiers any arm offered traffic at, in order.
    pub fn tiers(&self) -> Vec<u8> {
        let mut tiers: Vec<u8> = self
            .arms
            .iter()
            .flat_map(|a| a.whole.tiers.keys())
            .filter_map(|t| t.parse().ok())
            .collect();
        tiers.sort_unstable();
        tiers.dedup();
        tiers
    }
}

/// A CSV field, quoted when it holds a separator or a quote.
fn csv_text(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The total of a span is the sum of its tiers, whether one tier has traffic (its figures
    /// are taken as they are) or several (added up).
    #[test]
    fn the_total_is_the_sum_of_the_tiers() {
        for tiers in [&[3u8][..], &[0, 3, 5]] {
            let mut tally = Tally::default();
            for i in 0..1_000u64 {
                let tier = tiers[i as usize % tiers.len()];
                tally.offer(tier);
                let ending = match i % 7 {
                    0 => Ending::Shed,
                    1 => Ending::TimedOut {
                        unservable: i % 2 == 0,
                    },
                    _ => Ending::Ok(Nanos::from_micros(100 + i * i % 9_000)),
                };
                tally.end(tier, ending);
            }
            let mut total = Count::default();
            tally.tiers.iter().for_each(|c| total.add(c));
            let summary = tally.summary(10.0, None);
            assert_eq!(summary.figures, total.figures(10.0), "tiers {tiers:?}");
            assert_eq!(summary.tiers.len(), tiers.len());
        }
    }
}

//! The sweep's renderings: a table per axis (rows its values, columns the arms, each cell the
//! worst and the median goodput over the cases with that value), two heatmaps as SVG (the
//! same rows and columns, coloured by the worst goodput and by the worst p99 over the
//! service's own p99), the misses of `tidegate default`, and the documentation page.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::CaseResult;
use super::arms::{ARMS, DEFAULT, ORACLE};
use super::case::{Case, work_label};
use super::causes::Cause;
use super::measure::ArmResult;
use super::targets::Target;
use crate::chart::{escape, svg_start};

/// An axis of the family: its name and a case's value on it (a sort key and a label).
type AxisOf = (&'static str, fn(&Case) -> (u64, String));

/// The axes the tables and heatmaps group the cases by.
pub const AXES: [AxisOf; 7] = [
    ("distribution", |c| {
        (c.dist as u64, c.dist.name().to_owned())
    }),
    ("knee", |c| (u64::from(c.knee), c.knee.to_string())),
    ("work", |c| (c.work_ms, work_label(c.work_ms))),
    ("load", |c| (c.load as u64, c.load.name().to_owned())),
    ("timeout", |c| {
        (u64::from(c.timeout), format!("{}x work", c.timeout))
    }),
    ("service queue", |c| {
        let key = u64::from(c.contention) + 2 * u64::from(c.bounded_queue);
        let label = match (c.contention, c.bounded_queue) {
            (false, false) => "unbounded",
            (true, false) => "unbounded + contention",
            (false, true) => "bounded",
            (true, true) => "bounded + contention",
        };
        (key, label.to_owned())
    }),
    ("tiers", |c| {
        (
            u64::from(c.tiers),
            if c.tiers { "2 tiers" } else { "1 tier" }.to_owned(),
        )
    }),
];

/// One row of a table or heatmap: a value of an axis and, per arm, the figures of the cases
/// with that value.
#[derive(Debug)]
struct Row {
    label: String,
    cases: usize,
    /// By arm (in `arms`' order): the worst and the median goodput, and the worst p99 over
    /// the service's own.
    cells: Vec<Option<Cell>>,
}

#[derive(Clone, Copy, Debug)]
struct Cell {
    worst: f64,
    median: f64,
    p99_ratio: Option<f64>,
}

/// The arms that ran, in [`ARMS`]' order.
pub fn arms_ran(results: &[CaseResult]) -> Vec<&'static str> {
    ARMS.iter()
        .copied()
        .filter(|name| results.iter().any(|r| r.arm(name).is_some()))
        .collect()
}

/// The service's own p99 (no wait, no contention) over an arm's p99, on a case.
fn p99_ratio(case: &Case, arm: &ArmResult) -> Option<f64> {
    let own = case.dist.p99() * case.work_ms as f64;
    arm.p99_ms.map(|p| p / own)
}

fn rows(results: &[CaseResult], arms: &[&str], axis: &AxisOf) -> Vec<Row> {
    let mut groups: BTreeMap<(u64, String), Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        groups.entry((axis.1)(&r.case)).or_default().push(r);
    }
    groups
        .into_iter()
        .map(|((_, label), members)| Row {
            label,
            cases: members.len(),
            cells: arms.iter().map(|&arm| cell(&members, arm)).collect(),
        })
        .collect()
}

fn cell(members: &[&CaseResult], arm: &str) -> Option<Cell> {
    let mut goodputs: Vec<f64> = Vec::new();
    let mut p99_worst: Option<f64> = None;
    for r in members {
        let Some(a) = r.arm(arm) else { continue };
        goodputs.push(a.worst_goodput());
        if let Some(ratio) = p99_ratio(&r.case, a) {
            p99_worst = Some(p99_worst.map_or(ratio, |w: f64| w.max(ratio)));
        }
    }
    if goodputs.is_empty() {
        return None;
    }
    goodputs.sort_by(f64::total_cmp);
    Some(Cell {
        worst: goodputs[0],
        median: goodputs[(goodputs.len() - 1) / 2],
        p99_ratio: p99_worst,
    })
}

fn percent(x: f64) -> String {
    format!("{:.0}", (x * 100.0).min(999.0))
}

/// The text tables, one per axis: cell `worst/median` goodput in percent (of the capacity
/// when overloaded, of the offered load below it; the worst judged window of each case).
pub fn table(results: &[CaseResult]) -> String {
    let arms = arms_ran(results);
    let mut out = String::new();
    let width = 11;
    for axis in &AXES {
        let rows = rows(results, &arms, axis);
        let label_width = rows
            .iter()
            .map(|r| r.label.len() + 6)
            .chain([axis.0.len()])
            .max()
            .unwrap_or(10)
            + 1;
        let _ = write!(out, "{:<label_width$}", axis.0);
        for arm in &arms {
            let short: String = arm.chars().take(width - 1).collect();
            let _ = write!(out, "{short:>width$}");
        }
        out.push('\n');
        for row in rows {
            let label = format!("{} ({})", row.label, row.cases);
            let _ = write!(out, "{label:<label_width$}");
            for c in &row.cells {
                let text = c.map_or("-".to_owned(), |c| {
                    format!("{}/{}", percent(c.worst), percent(c.median))
                });
                let _ = write!(out, "{text:>width$}");
            }
            out.push('\n');
        }
        out.push('\n');
    }
    out
}

/// What a heatmap colours its cells by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Heat {
    /// The worst goodput (green at 100%, red at 50% and below).
    Goodput,
    /// The worst p99 over the service's own p99 (green at 1, red at 10 and beyond, log).
    P99,
}

const CELL_W: f64 = 74.0;
const CELL_H: f64 = 20.0;
const LABEL_W: f64 = 230.0;
const HEAD_H: f64 = 96.0;

/// A heatmap of every axis value (rows, grouped by axis) by arm (columns).
pub fn heatmap(results: &[CaseResult], heat: Heat) -> String {
    let arms = arms_ran(results);
    let mut lines: Vec<(String, Option<Vec<Option<Cell>>>)> = Vec::new();
    for axis in &AXES {
        lines.push((axis.0.to_owned(), None));
        for row in rows(results, &arms, axis) {
            lines.push((format!("{} ({})", row.label, row.cases), Some(row.cells)));
        }
    }
    let width = LABEL_W + CELL_W * arms.len() as f64 + 10.0;
    let height = HEAD_H + CELL_H * lines.len() as f64 + 10.0;
    let title = match heat {
        Heat::Goodput => "worst goodput, % of capacity (of offered below it)",
        Heat::P99 => "worst p99 over the service's own p99",
    };
    let mut svg = svg_start(width, height, width / 2.0, title);
    for (i, arm) in arms.iter().enumerate() {
        let x = LABEL_W + CELL_W * (i as f64 + 0.5);
        let _ = writeln!(
            svg,
            r##"<text transform="translate({x:.1} {:.1}) rotate(-35)" text-anchor="start"{}>{}</text>"##,
            HEAD_H - 6.0,
            if *arm == DEFAULT {
                r#" font-weight="bold""#
            } else {
                ""
            },
            escape(arm)
        );
    }
    for (j, (label, cells)) in lines.iter().enumerate() {
        let y = HEAD_H + CELL_H * j as f64;
        let Some(cells) = cells else {
            let _ = writeln!(
                svg,
                r##"<text x="6" y="{:.1}" font-weight="bold">{}</text>"##,
                y + 14.0,
                escape(label)
            );
            continue;
        };
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LABEL_W - 6.0,
            y + 14.0,
            escape(label)
        );
        for (i, c) in cells.iter().enumerate() {
            let x = LABEL_W + CELL_W * i as f64;
            let (badness, text) = match (heat, c) {
                (Heat::Goodput, Some(c)) => (
                    Some(((1.0 - c.worst) / 0.5).clamp(0.0, 1.0)),
                    percent(c.worst),
                ),
                (
                    Heat::P99,
                    Some(Cell {
                        p99_ratio: Some(r), ..
                    }),
                ) => (
                    Some((r.max(1.0).log10()).clamp(0.0, 1.0)),
                    format!("{r:.1}"),
                ),
                _ => (None, "-".to_owned()),
            };
            let fill = badness.map_or("#eeeeee".to_owned(), colour);
            let _ = writeln!(
                svg,
                r##"<rect x="{x:.1}" y="{y:.1}" width="{CELL_W}" height="{CELL_H}" fill="{fill}" stroke="#ffffff"/><text x="{:.1}" y="{:.1}" text-anchor="middle">{text}</text>"##,
                x + CELL_W / 2.0,
                y + 14.0
            );
        }
    }
    svg.push_str("</svg>\n");
    svg
}

/// From green (0) through yellow to red (1).
fn colour(badness: f64) -> String {
    let (r, g) = if badness < 0.5 {
        (2.0 * badness, 1.0)
    } else {
        (1.0, 2.0 * (1.0 - badness))
    };
    let byte = |v: f64| (110.0 + 145.0 * v).round() as u8;
    format!("#{:02x}{:02x}{:02x}", byte(r), byte(g), 110)
}

/// The misses of `arm`, counted by target and by axis value, then listed case by case (at
/// most `limit` cases; for `tidegate default`, at most `limit` a group, by cause).
pub fn misses(results: &[CaseResult], arm: &str, limit: usize) -> String {
    let missed: Vec<&CaseResult> = results
        .iter()
        .filter(|r| r.misses.contains_key(arm))
        .collect();
    let ran = results.iter().filter(|r| r.arm(arm).is_some()).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "`{arm}` misses a target in {} of {ran} cases.",
        missed.len()
    );
    if missed.is_empty() {
        return out;
    }
    // Per target, the cases that miss it and those where the oracle misses it too.
    let mut by_target: BTreeMap<Target, (usize, usize)> = BTreeMap::new();
    let mut beyond_oracle = 0;
    for r in &missed {
        let targets = targets_missed(r, arm);
        let shared = |t: &Target| oracle_misses(r, *t);
        beyond_oracle += usize::from(targets.iter().all(shared));
        for t in targets {
            let entry = by_target.entry(t).or_default();
            entry.0 += 1;
            entry.1 += usize::from(shared(&t));
        }
    }
    if arm != ORACLE && results.iter().any(|r| r.arm(ORACLE).is_some()) {
        let _ = writeln!(
            out,
            "\nIn {beyond_oracle} of them the oracle misses every target `{arm}` misses: no \
             point of its grid, a fixed limit and queue timeout picked in hindsight, meets them."
        );
    }
    let _ = writeln!(
        out,
        "\nBy target (cases; of them, those the oracle misses too):"
    );
    for (t, (n, shared)) in &by_target {
        let _ = writeln!(out, "- {}: {n} ({shared})", t.name());
    }
    let _ = writeln!(out, "\nBy axis value (cases missed / cases):");
    for axis in &AXES {
        let mut counts: BTreeMap<(u64, String), (usize, usize)> = BTreeMap::new();
        for r in results.iter().filter(|r| r.arm(arm).is_some()) {
            let entry = counts.entry((axis.1)(&r.case)).or_default();
            entry.1 += 1;
            entry.0 += usize::from(r.misses.contains_key(arm));
        }
        let parts: Vec<String> = counts
            .iter()
            .map(|((_, label), (m, n))| format!("{label} {m}/{n}"))
            .collect();
        let _ = writeln!(out, "- {}: {}", axis.0, parts.join(", "));
    }
    if arm == DEFAULT {
        let _ = writeln!(
            out,
            "\nBy cause: each case in the first group whose rule matches it \
             (`crates/tidegate-sim/src/sweep/causes.rs`). A group's cause was traced on a few \
             of its cases, not proven on each; what was tried for it is in \
             `docs/experiments/README.md` (\"Why the default still misses\")."
        );
        for cause in Cause::ALL {
            let members: Vec<&CaseResult> = missed
                .iter()
                .copied()
                .filter(|r| r.cause == Some(cause))
                .collect();
            if members.is_empty() {
                continue;
            }
            let mut by_target: BTreeMap<Target, usize> = BTreeMap::new();
            for t in members.iter().flat_map(|r| targets_missed(r, arm)) {
                *by_target.entry(t).or_default() += 1;
            }
            let mut by_target: Vec<(Target, usize)> = by_target.into_iter().collect();
            by_target.sort_by_key(|&(t, n)| (std::cmp::Reverse(n), t));
            let by_target: Vec<String> = by_target
                .iter()
                .map(|(t, n)| format!("{} {n}", t.name()))
                .collect();
            let _ = writeln!(
                out,
                "\n### {} ({} cases: {})\n\n{}\n",
                cause.name(),
                members.len(),
                by_target.join(", "),
                cause.why()
            );
            list(&mut out, &members, arm, limit);
        }
    } else {
        let _ = writeln!(out, "\nCase by case:");
        list(&mut out, &missed, arm, limit);
    }
    out
}

/// The targets `arm` missed on `result`'s case, each once (a target missed in several
/// windows has a miss for each, one after the other).
fn targets_missed(result: &CaseResult, arm: &str) -> Vec<Target> {
    let mut targets: Vec<Target> = result.misses[arm].iter().map(|m| m.target).collect();
    targets.dedup();
    targets
}

/// A line for each of the first `limit` of `missed`, with the figures `arm` missed by.
fn list(out: &mut String, missed: &[&CaseResult], arm: &str, limit: usize) {
    for r in missed.iter().take(limit) {
        let reasons: Vec<String> = r.misses[arm]
            .iter()
            .map(|m| {
                if arm != ORACLE && oracle_misses(r, m.target) {
                    format!("{} (the oracle too)", m.reason)
                } else {
                    m.reason.clone()
                }
            })
            .collect();
        let _ = writeln!(out, "- {}: {}", r.name, reasons.join("; "));
    }
    if missed.len() > limit {
        let _ = writeln!(
            out,
            "- ... and {} more (see the JSON)",
            missed.len() - limit
        );
    }
}

/// Whether the oracle ran on `result`'s case and missed `target` there.
fn oracle_misses(result: &CaseResult, target: Target) -> bool {
    result
        .misses
        .get(ORACLE)
        .is_some_and(|misses| misses.iter().any(|m| m.target == target))
}

/// The files a page shows.
pub const GOODPUT_SVG: &str = "robustness-goodput.svg";
pub const P99_SVG: &str = "robustness-p99.svg";

/// The documentation page: how to re-run it, the family, the table, the heatmaps and the
/// misses of `tidegate default`.
pub fn page(results: &[CaseResult], command: &str) -> String {
    let mut page = String::new();
    let _ = writeln!(page, "# Robustness sweep\n");
    let _ = writeln!(
        page,
        "Generated by the command below; re-run it rather than trust the copy (the figures \
         are deterministic: same tree, same bytes).\n\n```sh\n{command}\n```\n"
    );
    let _ = writeln!(
        page,
        "Every arm runs on every case of a generated family ({} cases) on identical random \
         streams, beside the **oracle**: the best fixed limit and queue timeout for that case, \
         found in hindsight on a grid (limit 0.5, 1, 1.5, 2 x the knee; queue off, one work \
         time, a third of the client's timeout, the timeout). The family, its load shapes, \
         the arms and the targets are described in the module docs of \
         `crates/tidegate-sim/src/sweep/` (`family.rs`, `case.rs`, `arms.rs`, `targets.rs`). \
         For a service of your own shape, `--knee` and `--work` build the same family around \
         your knee and mean work time (`tidegate sim sweep --knee 200 --work 5ms`).\n",
        results.len()
    );
    let _ = writeln!(
        page,
        "## Goodput by axis\n\nA row is a value of one axis, over every case with it; a cell \
         is `worst/median` over those cases of the arm's goodput in its worst judged window, \
         in percent of the capacity while overloaded and of the offered load below it. \
         The target for `tidegate default` is 97 (99 below capacity) in every case.\n"
    );
    let _ = writeln!(page, "```text\n{}```\n", table(results));
    let _ = writeln!(page, "![worst goodput]({GOODPUT_SVG})\n");
    let _ = writeln!(
        page,
        "The worst p99 of the ok responses over the service's own p99 (one work time's p99, \
         no wait):\n\n![worst p99 over the service's]({P99_SVG})\n"
    );
    let _ = writeln!(page, "## Where `{DEFAULT}` misses the targets\n");
    page.push_str(&misses(results, DEFAULT, usize::MAX));
    page
}

//! The charts of a scenario report: what a reader looks at first.
//!
//! A run at one load point is a story over time, so it gets one chart per quantity (latency,
//! goodput against offered load, limit, queue, drop probability) with a line per arm. A sweep
//! over load points (cinnamon-tiers) is a story over load, so it also gets steady-state
//! goodput and p99 against the offered rate, and its time charts show the highest load point,
//! where the arms differ most.

use super::report::{ArmRun, Report, Second};
use crate::chart::{Chart, Pen, Scale, Series};

/// The arm every chart emphasises.
const DEFAULT_ARM: &str = "tidegate default";

/// A chart and the file name it belongs in, `<scenario>-<what>.svg`.
#[derive(Debug)]
pub struct NamedChart {
    pub file_name: String,
    pub chart: Chart,
}

impl Report {
    /// Every chart of the report; see the module documentation.
    pub fn charts(&self) -> Vec<NamedChart> {
        let mut charts = Vec::new();
        let named = |what: &str, chart: Chart| NamedChart {
            file_name: format!("{}-{what}.svg", self.scenario),
            chart: chart.emphasise(DEFAULT_ARM),
        };
        let loads = self.load_points();
        if loads.len() > 1 {
            charts.push(named(
                "goodput-by-load",
                self.by_load(
                    "goodput (ok/s)",
                    &|r| Some(r.steady.figures.goodput_rps),
                    Scale::Linear,
                ),
            ));
            charts.push(named(
                "p99-by-load",
                self.by_load("p99 latency (ms)", &|r| r.steady.figures.p99_ms, Scale::Log),
            ));
        }
        // Tiers are the point of a tiered scenario: goodput per tier, by load for a sweep,
        // over time otherwise (then below, with the other time charts).
        let tiers = self.tiers();
        let tiered = tiers.len() > 1;
        if tiered && loads.len() > 1 {
            for &tier in &tiers {
                let key = tier.to_string();
                charts.push(named(
                    &format!("goodput-by-load-tier{tier}"),
                    self.by_load(
                        &format!("goodput of tier {tier} (ok/s)"),
                        &|r| r.steady.tiers.get(&key).map(|f| f.goodput_rps),
                        Scale::Linear,
                    ),
                ));
            }
        }
        let top = loads.last().copied().unwrap_or_default();
        let runs: Vec<&ArmRun> = self.arms.iter().filter(|r| r.load_rps == top).collect();
        let at = if loads.len() > 1 {
            format!(" at {top} rps")
        } else {
            String::new()
        };
        let over_time = |title: &str, y_label: &str, value: fn(&Second) -> Option<f64>| {
            let mut chart = Chart::new(
                &format!("{}: {title}{at}", self.scenario),
                "second",
                y_label,
            );
            for run in &runs {
                let points = run
                    .series
                    .iter()
                    .map(|s| (f64::from(s.second), value(s).unwrap_or(f64::NAN)))
                    .collect();
                chart = chart.line_with(&run.name, self.pen(&run.name), points);
            }
            chart
        };
        let mut latency = over_time("p99 latency of ok responses", "ms", |s| s.p99_ms);
        latency.y_scale = Scale::Log;
        charts.push(named("latency", latency));
        let mut goodput = over_time("offered load and goodput (ok/s)", "requests/s", |s| {
            Some(s.ok as f64)
        });
        if let Some(first) = runs.first() {
            // Every arm sees the same offered load: one line for it.
            goodput.series.insert(
                0,
                Series {
                    emphasis: false,
                    pen: Pen::Reference,
                    name: "offered".to_owned(),
                    points: first
                        .series
                        .iter()
                        .map(|s| (f64::from(s.second), s.offered as f64))
                        .collect(),
                },
            );
        }
        charts.push(named("goodput", goodput));
        if tiered && loads.len() == 1 {
            for &tier in &tiers {
                let mut chart = Chart::new(
                    &format!("{}: goodput of tier {tier} (ok/s){at}", self.scenario),
                    "second",
                    "requests/s",
                );
                for run in &runs {
                    let points = run
                        .series
                        .iter()
                        .map(|s| {
                            let ok = s.ok_by_tier[usize::from(tier)] as f64;
                            (f64::from(s.second), ok)
                        })
                        .collect();
                    chart = chart.line_with(&run.name, self.pen(&run.name), points);
                }
                charts.push(named(&format!("goodput-tier{tier}"), chart));
            }
        }
        charts.push(named(
            "limit",
            over_time("concurrency limit (all instances)", "requests", |s| {
                s.limit.map(f64::from)
            }),
        ));
        charts.push(named(
            "queue",
            over_time("requests waiting in the gate", "requests", |s| {
                Some(f64::from(s.queued))
            }),
        ));
        charts.push(named(
            "drop",
            over_time("drop probability / rejection ratio", "ratio", |s| s.drop_p),
        ));
        charts
    }

    /// The distinct load points, in increasing order.
    fn load_points(&self) -> Vec<f64> {
        let mut loads: Vec<f64> = self.arms.iter().map(|r| r.load_rps).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        loads
    }

    /// The arms' names, each once, in the report's order.
    fn arm_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for run in &self.arms {
            if !names.contains(&run.name.as_str()) {
                names.push(&run.name);
            }
        }
        names
    }

    /// The arm's colour: by its place among the report's arms, the same in every chart.
    fn pen(&self, arm: &str) -> Pen {
        Pen::Arm {
            index: self.arm_names().iter().position(|n| *n == arm).unwrap_or(0),
            dashed: false,
        }
    }

    /// A steady-state figure against the offered rate, a line per arm.
    fn by_load(
        &self,
        y_label: &str,
        value: &dyn Fn(&ArmRun) -> Option<f64>,
        scale: Scale,
    ) -> Chart {
        let names = self.arm_names();
        let mut chart = Chart {
            y_scale: scale,
            markers: true,
            ..Chart::new(
                &format!("{}: steady-state {y_label} by offered load", self.scenario),
                "offered (requests/s)",
                y_label,
            )
        };
        for name in names {
            let points = self
                .arms
                .iter()
                .filter(|r| r.name == name)
                .map(|r| (r.steady.figures.offered_rps, value(r).unwrap_or(f64::NAN)))
                .collect();
            chart = chart.line_with(name, self.pen(name), points);
        }
        chart
    }
}

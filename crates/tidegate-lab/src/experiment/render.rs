//! An experiment's renderings: the table with each real figure above the simulator's, the
//! per-second CSV of both sides, the charts, and a documentation page.

use std::fmt::Write as _;

use tidegate_sim::chart::{Chart, Pen, Scale};
use tidegate_sim::scenario::NamedChart;
use tidegate_sim::scenario::report::Figures;

use super::{Comparison, ExperimentReport, GateSecond, RealRun};

/// The arm the charts emphasise, as the simulator's do.
const DEFAULT_ARM: &str = "tidegate default";

fn opt(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
}

fn percent(x: Option<f64>) -> String {
    match x {
        Some(e) if e.is_finite() => format!("{:+.1}%", e * 100.0),
        Some(_) => "one side only".to_owned(),
        None => "-".to_owned(),
    }
}

/// One line of figures; the simulator's shed counts its expired too (see the module docs).
fn row(f: &Figures, shed_with_expired: bool) -> String {
    let pct = |r: f64| format!("{:.1}", r * 100.0);
    let shed = if shed_with_expired {
        f.shed_ratio + f.expired_ratio
    } else {
        f.shed_ratio
    };
    format!(
        "{:>9.1} {:>9.1} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}",
        f.offered_rps,
        f.goodput_rps,
        pct(shed),
        pct(f.refused_ratio),
        pct(f.timeout_ratio),
        pct(f.unsent_ratio),
        opt(f.p50_ms),
        opt(f.p90_ms),
        opt(f.p99_ms),
        opt(f.max_ms),
    )
}

impl RealRun {
    /// The gates' reading at the end of `second`, for a gate arm. The series holds seconds
    /// 1, 2, ... in order, so the reading of second N is at N - 1.
    fn gate_at(&self, second: u64) -> Option<GateSecond> {
        let index = usize::try_from(second.checked_sub(1)?).ok()?;
        self.gate_series
            .as_ref()?
            .get(index)
            .filter(|g| u64::from(g.second) == second)
            .copied()
    }
}

impl Comparison {
    /// "yes (goodput -0.4%, p50 +3.1%)".
    pub fn verdict(&self) -> String {
        let a = &self.agreement;
        format!(
            "{} (goodput {}, p50 {})",
            if a.agrees { "yes" } else { "NO" },
            percent(a.goodput_error),
            percent(a.p50_error)
        )
    }
}

impl ExperimentReport {
    /// How many runs agree with the simulator, of how many.
    pub fn agreed(&self) -> (usize, usize) {
        let agreed = self.runs.iter().filter(|r| r.agreement.agrees).count();
        (agreed, self.runs.len())
    }

    /// The whole run and the steady state: per arm a `real` line, the simulator's `sim` line
    /// under it, and per tier where there are several; the steady state says whether they
    /// agree.
    pub fn table(&self) -> String {
        let mut out = String::new();
        for steady in [false, true] {
            let title = if steady {
                format!("steady state, from {}s", self.warmup_s)
            } else {
                "whole run".to_owned()
            };
            let _ = writeln!(
                out,
                "{} on real sockets and simulated ({title} of {}s, seed {})",
                self.scenario, self.duration_s, self.seed
            );
            let _ = writeln!(
                out,
                "{:<24} {:>6} {:>4} {:<4} {:>9} {:>9} {:>6} {:>6} {:>6} {:>6} {:>8} {:>8} {:>8} {:>8}{}",
                "arm",
                "load",
                "tier",
                "side",
                "offered/s",
                "goodput/s",
                "shed%",
                "ref%",
                "tout%",
                "uns%",
                "p50 ms",
                "p90 ms",
                "p99 ms",
                "max ms",
                if steady { "  agrees" } else { "" }
            );
            for run in &self.runs {
                let (real, sim) = if steady {
                    (&run.real.steady, &run.sim.steady)
                } else {
                    (&run.real.whole, &run.sim.whole)
                };
                let verdict = if steady {
                    format!("  {}", run.verdict())
                } else {
                    String::new()
                };
                let _ = writeln!(
                    out,
                    "{:<24} {:>6} {:>4} real {}{verdict}",
                    run.arm,
                    run.load_rps,
                    "all",
                    row(real, false)
                );
                let _ = writeln!(
                    out,
                    "{:<24} {:>6} {:>4} sim  {}",
                    "",
                    "",
                    "",
                    row(&sim.figures, true)
                );
                if steady {
                    for (tier, figures) in &run.real.steady_tiers {
                        let _ = writeln!(
                            out,
                            "{:<24} {:>6} {:>4} real {}",
                            "",
                            "",
                            tier,
                            row(figures, false)
                        );
                        if let Some(sim_tier) = sim.tiers.get(&tier.to_string()) {
                            let _ = writeln!(
                                out,
                                "{:<24} {:>6} {:>4} sim  {}",
                                "",
                                "",
                                tier,
                                row(sim_tier, true)
                            );
                        }
                    }
                }
            }
            out.push('\n');
        }
        let (agreed, runs) = self.agreed();
        let _ = writeln!(
            out,
            "{agreed} of {runs} runs agree with the simulator (steady goodput within {:.0}%, p50 within {:.0}%)",
            super::GOODPUT_TOLERANCE * 100.0,
            super::P50_TOLERANCE * 100.0
        );
        out
    }

    /// Per-second rows of both sides: `arm,load,side,second,offered,ok,shed,timed_out,
    /// p50_ms,p99_ms,limit,inflight,queued`, `second` being the end of the second. The real
    /// side counts requests by their intended send second, the simulator by the second of
    /// their outcome; `shed` is everything turned away (shed, refused, unsent) on both sides.
    ///
    /// `limit`, `inflight` and `queued` are read at the second's end, summed over the gates
    /// (or instances): the real ones from the proxy's gates, empty without a gate; the
    /// simulator's as its own series has them (a static lease's allowance as its limit, and
    /// as in flight the requests in the service, working or in its queue, where the real
    /// side counts those past the gate and not yet answered).
    ///
    /// With a mix of several tiers, `ok_tier{T}` columns follow: each tier's ok responses.
    pub fn csv(&self) -> String {
        // The tiers of the load's mix, in its order (the order of the real side's
        // `ok_by_tier`); the simulator's are by tier number.
        let tiers: Vec<u8> = self
            .runs
            .first()
            .map(|r| r.real.report.tiers.iter().filter_map(|t| t.tier).collect())
            .unwrap_or_default();
        let tiered = tiers.len() > 1;
        let mut out = String::from(
            "arm,load,side,second,offered,ok,shed,timed_out,p50_ms,p99_ms,limit,inflight,queued",
        );
        if tiered {
            for tier in &tiers {
                let _ = write!(out, ",ok_tier{tier}");
            }
        }
        out.push('\n');
        let field = |x: Option<f64>| x.map_or_else(String::new, |v| format!("{v}"));
        let whole = |x: Option<u64>| x.map_or_else(String::new, |v| v.to_string());
        let name = |s: &str| {
            if s.contains([',', '"', '\n']) {
                format!("\"{}\"", s.replace('"', "\"\""))
            } else {
                s.to_owned()
            }
        };
        for run in &self.runs {
            for s in &run.real.report.per_second {
                let latency = |v: f64| (s.ok > 0).then_some(v);
                let gates = run.real.gate_at(s.second + 1);
                let _ = write!(
                    out,
                    "{},{},real,{},{},{},{},{},{},{},{},{},{}",
                    name(&run.arm),
                    run.load_rps,
                    s.second + 1,
                    s.offered,
                    s.ok,
                    s.shed + s.not_sent,
                    s.timed_out,
                    field(latency(s.p50_ms)),
                    field(latency(s.p99_ms)),
                    whole(gates.map(|g| g.limit)),
                    whole(gates.map(|g| g.inflight)),
                    whole(gates.map(|g| g.queued)),
                );
                if tiered {
                    for i in 0..tiers.len() {
                        let _ = write!(out, ",{}", s.ok_by_tier.get(i).copied().unwrap_or(0));
                    }
                }
                out.push('\n');
            }
            for s in &run.sim.series {
                let _ = write!(
                    out,
                    "{},{},sim,{},{},{},{},{},{},{},{},{},{}",
                    name(&run.arm),
                    run.load_rps,
                    s.second,
                    s.offered,
                    s.ok,
                    s.shed,
                    s.timed_out,
                    field(s.p50_ms),
                    field(s.p99_ms),
                    whole(s.limit.map(u64::from)),
                    s.inflight,
                    s.queued,
                );
                if tiered {
                    for &tier in &tiers {
                        let _ = write!(out, ",{}", s.ok_by_tier[usize::from(tier)]);
                    }
                }
                out.push('\n');
            }
        }
        out
    }

    /// The steady state of two arms, one line each, every real figure with the simulator's
    /// in brackets: what a protection changed for the clients.
    pub fn before_after(&self, without: &str, with: &str) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "steady state (requests sent from {}s to {}s); the simulator's prediction in brackets",
            self.warmup_s, self.duration_s
        );
        // "turned away": refused by the protection or the service; "not sent": due while the
        // load generator's connections were all waiting, as Gatling's 900 were.
        let _ = writeln!(
            out,
            "{:<34} {:>17} {:>17} {:>17} {:>15} {:>15} {:>15}",
            "", "goodput (ok/s)", "p50 (ms)", "p99 (ms)", "turned away", "not sent", "timed out"
        );
        let pair = |real: String, sim: String| format!("{real} ({sim})");
        let ms = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.0}"));
        let pct = |r: f64| format!("{:.0}%", r * 100.0);
        for (label, arm) in [("without", without), ("with", with)] {
            let Some(run) = self.runs.iter().find(|r| r.arm == arm) else {
                continue;
            };
            let (real, sim) = (&run.real.steady, &run.sim.steady.figures);
            let away = |f: &Figures, sim: bool| {
                f.shed_ratio + f.refused_ratio + if sim { f.expired_ratio } else { 0.0 }
            };
            let _ = writeln!(
                out,
                "{:<34} {:>17} {:>17} {:>17} {:>15} {:>15} {:>15}",
                format!("{label} tidegate ({arm})"),
                pair(
                    format!("{:.1}", real.goodput_rps),
                    format!("{:.1}", sim.goodput_rps)
                ),
                pair(ms(real.p50_ms), ms(sim.p50_ms)),
                pair(ms(real.p99_ms), ms(sim.p99_ms)),
                pair(pct(away(real, false)), pct(away(sim, true))),
                pair(pct(real.unsent_ratio), pct(sim.unsent_ratio)),
                pair(pct(real.timeout_ratio), pct(sim.timeout_ratio)),
            );
        }
        out
    }

    /// Goodput and p99 over time at the highest load point, a real and a simulated line per
    /// arm, and the limit over time, a real and a simulated line per gate arm (the only
    /// arms whose limit the real side reads); for a sweep, also steady goodput and p99 by
    /// load.
    pub fn charts(&self) -> Vec<NamedChart> {
        let mut loads: Vec<f64> = self.runs.iter().map(|r| r.load_rps).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        let named = |what: &str, chart: Chart| NamedChart {
            file_name: format!("{}-lab-{what}.svg", self.scenario),
            // The real line only: two emphasised lines would look alike.
            chart: chart.emphasise(&format!("{DEFAULT_ARM} real")),
        };
        let mut charts = Vec::new();
        if loads.len() > 1 {
            type Pick = fn(&Figures) -> Option<f64>;
            let by_load = |label: &str, pick: Pick, scale: Scale| {
                let mut chart = Chart {
                    y_scale: scale,
                    markers: true,
                    ..Chart::new(
                        &format!(
                            "{}: steady {label} by offered load, real and simulated",
                            self.scenario
                        ),
                        "offered (requests/s)",
                        label,
                    )
                };
                for (index, arm) in self.arm_names().into_iter().enumerate() {
                    let runs: Vec<&Comparison> =
                        self.runs.iter().filter(|r| r.arm == arm).collect();
                    let real = runs
                        .iter()
                        .map(|r| (r.load_rps, pick(&r.real.steady).unwrap_or(f64::NAN)))
                        .collect();
                    let sim = runs
                        .iter()
                        .map(|r| (r.load_rps, pick(&r.sim.steady.figures).unwrap_or(f64::NAN)))
                        .collect();
                    chart = real_and_sim(chart, (index, arm), real, sim);
                }
                chart
            };
            charts.push(named(
                "goodput-by-load",
                by_load("goodput (ok/s)", |f| Some(f.goodput_rps), Scale::Linear),
            ));
            charts.push(named(
                "p99-by-load",
                by_load("p99 latency (ms)", |f| f.p99_ms, Scale::Log),
            ));
        }
        let top = loads.last().copied().unwrap_or_default();
        let at = if loads.len() > 1 {
            format!(" at {top} rps")
        } else {
            String::new()
        };
        let top_runs: Vec<&Comparison> = self.runs.iter().filter(|r| r.load_rps == top).collect();
        let mut goodput = Chart::new(
            &format!("{}: goodput (ok/s){at}, real and simulated", self.scenario),
            "second",
            "requests/s",
        );
        let mut latency = Chart {
            y_scale: Scale::Log,
            ..Chart::new(
                &format!(
                    "{}: p99 latency of ok responses{at}, real and simulated",
                    self.scenario
                ),
                "second",
                "ms",
            )
        };
        let mut limit = Chart::new(
            &format!(
                "{}: concurrency limit (all gates){at}, real and simulated",
                self.scenario
            ),
            "second",
            "requests",
        );
        let names = self.arm_names();
        for run in top_runs {
            let arm = (
                names.iter().position(|n| *n == run.arm).unwrap_or(0),
                run.arm.as_str(),
            );
            let sim = &run.sim.series;
            if let Some(gates) = &run.real.gate_series {
                limit = real_and_sim(
                    limit,
                    arm,
                    gates
                        .iter()
                        .map(|g| (f64::from(g.second), g.limit as f64))
                        .collect(),
                    sim.iter()
                        .map(|s| (f64::from(s.second), s.limit.map_or(f64::NAN, f64::from)))
                        .collect(),
                );
            }
            let real = &run.real.report.per_second;
            goodput = real_and_sim(
                goodput,
                arm,
                // By the second the answers ended, as the simulator counts its series: by
                // send second, the unprotected side's late answers would pile up above the
                // service's capacity.
                real.iter()
                    .map(|s| ((s.second + 1) as f64, s.ok_answered as f64))
                    .collect(),
                sim.iter()
                    .map(|s| (f64::from(s.second), s.ok as f64))
                    .collect(),
            );
            latency = real_and_sim(
                latency,
                arm,
                real.iter()
                    .map(|s| {
                        let p99 = if s.ok > 0 { s.p99_ms } else { f64::NAN };
                        ((s.second + 1) as f64, p99)
                    })
                    .collect(),
                sim.iter()
                    .map(|s| (f64::from(s.second), s.p99_ms.unwrap_or(f64::NAN)))
                    .collect(),
            );
        }
        charts.push(named("goodput", goodput));
        charts.push(named("latency", latency));
        charts.push(named("limit", limit));
        charts
    }

    fn arm_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = Vec::new();
        for run in &self.runs {
            if !names.contains(&run.arm.as_str()) {
                names.push(&run.arm);
            }
        }
        names
    }

    /// A page for `docs/experiments/`: the command, the scenario's head comment, the table
    /// and the charts by file name.
    pub fn page(&self, about: &str, command: &str) -> String {
        let mut page = String::new();
        let _ = writeln!(page, "# Scenario `{}` on real sockets\n", self.scenario);
        let _ = writeln!(
            page,
            "Generated by the command below (seed {}): every arm ran over real sockets on \
             127.0.0.1 (the mock origin, the arm's protection, the open-loop load generator), \
             then in the simulator on the same scenario. Each `real` line is followed by the \
             simulator's `sim` line; the steady state says whether they agree (goodput within \
             {:.0}%, p50 within {:.0}%). Real runs depend on the machine: re-run the command \
             rather than trust the copy.\n",
            self.seed,
            super::GOODPUT_TOLERANCE * 100.0,
            super::P50_TOLERANCE * 100.0
        );
        let _ = writeln!(page, "```sh\n{command}\n```\n");
        let _ = writeln!(page, "## The experiment\n\n{}\n", about.trim_end());
        let _ = writeln!(page, "## Results\n\n```text\n{}```\n", self.table());
        let _ = writeln!(page, "## Charts\n");
        for named in self.charts() {
            let _ = writeln!(page, "![{}]({})\n", named.chart.title, named.file_name);
        }
        page
    }
}

/// Adds an arm's two lines to `chart`: `ARM real` and `ARM sim`, the names every lab chart
/// gives them (the default arm's real line is emphasised by that name).
/// An arm's real line and, dashed in the same colour, its simulated one; `index` is the
/// arm's place in the report, which gives it the same colour in every chart.
fn real_and_sim(
    chart: Chart,
    (index, arm): (usize, &str),
    real: Vec<(f64, f64)>,
    sim: Vec<(f64, f64)>,
) -> Chart {
    chart
        .line_with(
            &format!("{arm} real"),
            Pen::Arm {
                index,
                dashed: false,
            },
            real,
        )
        .line_with(
            &format!("{arm} sim"),
            Pen::Arm {
                index,
                dashed: true,
            },
            sim,
        )
}

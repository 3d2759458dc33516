//! `tidegate experiment FILE`: a scenario over real sockets, beside the simulator.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;
use tidegate_core::Nanos;
use tidegate_lab::experiment::{self, Event, ExperimentReport, Selection};
use tidegate_lab::load::Progress;
use tidegate_sim::scenario::{Scenario, header_comment};

/// Run a scenario file over real sockets, each figure beside the simulator's prediction
///
/// For each arm (and load point), one after the other: a fresh mock origin with the
/// scenario's service on 127.0.0.1, the arm's protection in front of it (nothing for off,
/// the origin's static leases for a lease arm, a tidegate proxy for a gate arm), and the
/// open-loop load generator with the scenario's [load]; then the simulator on the same
/// scenario. Prints the table of `tidegate sim run` with a real and a simulated line per
/// arm, and whether they agree (steady goodput within 10%, p50 within 20%); writes the
/// per-second CSV of both sides, SVG charts and a page into --out.
///
/// --time-scale X divides the scenario's schedule (duration, warm-up, load phases,
/// capacity changes) by X; work times, timeouts and the protections' constants stay as
/// they are, so the service and its protection are the same, with less time to settle.
///
/// Examples:
///   tidegate experiment scenarios/capacity-slow.toml --time-scale 5 --arm off
///   tidegate experiment scenarios/kanaloa-positive.toml --time-scale 3 --arm off --arm "tidegate default"
///   tidegate experiment scenarios/rsocket-leases.toml --arms "off,lease 100,lease 30"
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct ExperimentArgs {
    /// The scenario file (see scenarios/*.toml).
    file: PathBuf,
    /// Run the schedule X times faster (at least 1).
    #[arg(long, value_name = "X", conflicts_with = "duration")]
    time_scale: Option<f64>,
    /// Or shorten the schedule to last this long: 30s, 2m, ...
    #[arg(long, value_parser = crate::parse_duration)]
    duration: Option<Nanos>,
    /// Run only the arm of this name; repeat for several, or give a comma-separated list
    /// (--arms is the same flag).
    #[arg(
        long = "arm",
        visible_alias = "arms",
        value_name = "NAME",
        value_delimiter = ','
    )]
    arms: Vec<String>,
    /// Only this load point of a sweep (requests per second); repeat for several.
    #[arg(long = "load", value_name = "RPS")]
    loads: Vec<f64>,
    /// Write <scenario>-lab.csv, the charts and <scenario>-lab.md into this directory.
    #[arg(long, value_name = "DIR", default_value = "lab-results")]
    out: PathBuf,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub(crate) fn experiment(args: ExperimentArgs) -> anyhow::Result<()> {
    let selection = Selection {
        time_scale: args.time_scale,
        duration: args.duration,
        arms: crate::sim_run::trimmed(&args.arms),
        loads: args.loads.clone(),
    };
    let scenario = experiment::prepare(&args.file, &selection)?;
    let text = std::fs::read_to_string(&args.file)
        .with_context(|| format!("reading {}", args.file.display()))?;
    let report = run(&scenario)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    let written = write_out(
        &report,
        &header_comment(&text),
        &args.out,
        &crate::sim_run::command_line(),
    )?;
    eprintln!("wrote {written}");
    Ok(())
}

/// Seconds between two progress lines of a running arm.
const PROGRESS_EVERY_S: u64 = 5;

/// Runs the experiment on its own runtime, with a line on stderr as each arm starts and ends,
/// and every few seconds while it runs.
pub(crate) fn run(scenario: &Scenario) -> anyhow::Result<ExperimentReport> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate-experiment")
        .build()
        .context("starting the tokio runtime")?;
    let seconds = scenario.duration.as_secs_f64();
    // The progress at the last line printed, to give rates over the seconds since.
    let mut last: Option<Progress> = None;
    let report = runtime.block_on(experiment::run(scenario, |event| {
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not stop the run.
        let _ = match event {
            Event::Started { arm, load, seconds } => {
                last = None;
                writeln!(
                    err,
                    "{arm}{}: running {seconds}s on real sockets...",
                    load.map_or_else(String::new, |l| format!(" at {l} rps"))
                )
            }
            Event::Dashboard { arm, admin } => {
                writeln!(err, "{arm}: live dashboard at http://{admin}/dashboard")
            }
            Event::Progress { arm, progress } => {
                let elapsed = progress.elapsed.as_secs();
                if elapsed == 0 || elapsed % PROGRESS_EVERY_S != 0 || elapsed as f64 > seconds {
                    return;
                }
                let before = last.replace(*progress);
                let span = before
                    .map_or(progress.elapsed, |b| {
                        progress.elapsed.saturating_sub(b.elapsed)
                    })
                    .as_secs_f64()
                    .max(1e-9);
                let rate = |now: u64, then: fn(&Progress) -> u64| {
                    now.saturating_sub(before.as_ref().map_or(0, then)) as f64 / span
                };
                writeln!(
                    err,
                    "{arm}: {elapsed}s of {seconds}s: sent {:.0}/s, ok {:.0}/s, turned away \
                     {:.0}/s, {} in flight",
                    rate(progress.sent, |p| p.sent),
                    rate(progress.finished.ok, |p| p.finished.ok),
                    rate(progress.finished.shed, |p| p.finished.shed),
                    progress.inflight
                )
            }
            Event::Done(run) => writeln!(
                err,
                "{}: goodput {:.1}/s real, {:.1}/s simulated; agrees: {}",
                run.arm,
                run.real.steady.goodput_rps,
                run.sim.steady.figures.goodput_rps,
                run.verdict()
            ),
        };
    }));
    runtime.shutdown_timeout(Duration::from_millis(100));
    Ok(report?)
}

/// Writes the CSV, the charts and the page (`about`: the scenario file's head comment);
/// returns a line naming them.
pub(crate) fn write_out(
    report: &ExperimentReport,
    about: &str,
    dir: &Path,
    command: &str,
) -> anyhow::Result<String> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let write = |name: &str, text: &str| {
        let path = dir.join(name);
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))
    };
    write(&format!("{}-lab.csv", report.scenario), &report.csv())?;
    let page = format!("{}-lab.md", report.scenario);
    write(&page, &report.page(about, command))?;
    let charts = report.charts();
    for named in &charts {
        write(&named.file_name, &named.chart.to_svg())?;
    }
    Ok(format!(
        "{} ({} and {} charts) in {}",
        page,
        format_args!("{}-lab.csv", report.scenario),
        charts.len(),
        dir.display()
    ))
}

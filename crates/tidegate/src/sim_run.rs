//! `tidegate sim run FILE`: runs a scenario file's arms in virtual time and reports them.

use std::path::PathBuf;

use anyhow::{Context as _, anyhow};
use clap::Args;
use tidegate_core::Nanos;
use tidegate_sim::scenario::engine::run_all;
use tidegate_sim::scenario::{Scenario, header_comment};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The scenario file (see scenarios/*.toml).
    file: PathBuf,
    /// Seed of the random streams, instead of the file's: same file and seed, same output.
    #[arg(long)]
    seed: Option<u64>,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Also write into this directory (created if needed) <scenario>.csv, the per-second
    /// series of every run; SVG charts: latency, offered load and goodput, limit, queue and
    /// drop probability over time, and for a sweep goodput and p99 by offered load; and
    /// <scenario>.md, a page with the scenario file's head comment, the command, the tables
    /// and the charts.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Compress the scenario in time to last this long: its warm-up, load phases and capacity
    /// changes scale with it, the service's work times and the clients' timeouts do not.
    #[arg(long, value_parser = crate::parse_duration)]
    duration: Option<Nanos>,
    /// Run only this load point of a sweep (requests per second); repeat for several.
    #[arg(long = "load", value_name = "RPS")]
    loads: Vec<f64>,
    /// Run only the arm of this name; repeat for several, or give a comma-separated list
    /// (--arms is the same flag).
    #[arg(
        long = "arm",
        visible_alias = "arms",
        value_name = "NAME",
        value_delimiter = ','
    )]
    arms: Vec<String>,
    /// Threads for the runs [default: the available cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
}

pub(crate) fn run(args: RunArgs) -> anyhow::Result<()> {
    let mut scenario = Scenario::load(&args.file)?;
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if let Some(duration) = args.duration {
        scenario = scenario.shortened(duration);
    }
    // The flags' names in front of the shared messages: "--arm \"x\": ...", "--load 7: ...".
    scenario
        .keep_arms(&trimmed(&args.arms))
        .and_then(|()| scenario.keep_loads(&args.loads))
        .map_err(|e| anyhow!("--{e}"))?;
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    let report = run_all(&scenario, jobs);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if let Some(dir) = args.out {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join(format!("{}.csv", scenario.name));
        std::fs::write(&path, report.csv())
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        let text = std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?;
        let path = dir.join(format!("{}.md", scenario.name));
        std::fs::write(&path, report.page(&header_comment(&text), &command_line()))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        for named in report.charts() {
            let path = dir.join(&named.file_name);
            std::fs::write(&path, named.chart.to_svg())
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

/// The arm names as given, without the spaces around the commas of a list ("off, aimd").
pub(crate) fn trimmed(arms: &[String]) -> Vec<String> {
    arms.iter().map(|a| a.trim().to_owned()).collect()
}

/// This invocation as a command to paste into a shell: `tidegate` and the arguments as given,
/// quoted where needed.
pub(crate) fn command_line() -> String {
    let quote = |arg: String| {
        let plain = arg
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+".contains(c));
        if plain && !arg.is_empty() {
            arg
        } else {
            format!("'{}'", arg.replace('\'', r"'\''"))
        }
    };
    std::iter::once("tidegate".to_owned())
        .chain(std::env::args().skip(1).map(quote))
        .collect::<Vec<_>>()
        .join(" ")
}

//! `tidegate sim fleet FILE`: runs a fleet scenario's arms in virtual time and reports the
//! cohort agreement, wasted work, retry amplification and chain goodput of each.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Args;
use tidegate_core::Nanos;
use tidegate_sim::fleet::{self, ArmResult, FleetScenario};
use tidegate_sim::scenario::header_comment;

use crate::sim_run::command_line;

#[derive(Debug, Args)]
pub(crate) struct FleetArgs {
    /// The fleet scenario file (see scenarios/fleet/*.toml).
    file: PathBuf,
    /// Seed of the random streams, instead of the file's.
    #[arg(long)]
    seed: Option<u64>,
    /// Compress the scenario in time to last this long (the measurement start and the
    /// slowdowns scale with it; work times and timeouts do not).
    #[arg(long, value_parser = crate::parse_duration)]
    duration: Option<Nanos>,
    /// Run only the arm of this name; repeat for several.
    #[arg(long = "arm", value_name = "NAME")]
    arms: Vec<String>,
    /// Also write into this directory <scenario>.md (the table and the charts) and the SVG
    /// charts: goodput, tiers 0-1 goodput, attempts and cohort agreement over time.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
}

pub(crate) fn run(args: FleetArgs) -> anyhow::Result<()> {
    let mut scenario = FleetScenario::load(&args.file)?;
    if let Some(seed) = args.seed {
        scenario.seed = seed;
    }
    if let Some(duration) = args.duration {
        scenario = scenario.shortened(duration);
    }
    if let Some(unknown) = args
        .arms
        .iter()
        .find(|name| !scenario.arms.iter().any(|a| &a.name == *name))
    {
        let names: Vec<&str> = scenario.arms.iter().map(|a| a.name.as_str()).collect();
        bail!(
            "--arm {unknown:?}: {} has no such arm (its arms: {})",
            scenario.name,
            names.join(", ")
        );
    }
    let arms: Vec<_> = scenario
        .arms
        .iter()
        .filter(|a| args.arms.is_empty() || args.arms.contains(&a.name))
        .collect();
    let started = std::time::Instant::now();
    let results: Vec<ArmResult> = std::thread::scope(|s| {
        let handles: Vec<_> = arms
            .iter()
            .map(|arm| s.spawn(|| fleet::run(&scenario, arm, scenario.seed)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_default())
            .collect()
    });
    let events: u64 = results.iter().map(|r| r.events).sum();
    print!("{}", fleet::table(&results));
    eprintln!(
        "{} arms, {events} events in {:.1} s",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    if let Some(dir) = args.out {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let text = std::fs::read_to_string(&args.file)
            .with_context(|| format!("reading {}", args.file.display()))?;
        let page = fleet::markdown(&scenario, &header_comment(&text), &command_line(), &results);
        let path = dir.join(format!("{}.md", scenario.name));
        std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
        for (file, chart) in fleet::charts(&scenario, &results) {
            let path = dir.join(file);
            std::fs::write(&path, chart.to_svg())
                .with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

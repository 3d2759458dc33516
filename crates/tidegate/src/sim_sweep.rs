//! `tidegate sim sweep`: every arm on the generated family of service shapes, beside the
//! oracle, judged by the robustness targets.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Args;
use tidegate_sim::sweep::arms::{ARMS, DEFAULT};
use tidegate_sim::sweep::case::work_label;
use tidegate_sim::sweep::family::{Axes, Family, MAX_CAPACITY_RPS, family_on};
use tidegate_sim::sweep::render::{self, GOODPUT_SVG, Heat, P99_SVG};
use tidegate_sim::sweep::run;

/// Time between two progress lines.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// The reduced family (about 35 cases, one seed, knees up to 10): seconds in a debug
    /// build, for CI and quick looks.
    #[arg(long)]
    quick: bool,
    /// Seeds per shape of the full family (the reduced one runs one).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=100))]
    seeds: u64,
    /// Cross this knee (workers of the pool) instead of the family's 1, 3, 10, 30, 100 and
    /// 500; repeat for several. The first is the base case's, the one every other axis
    /// varies around: `--knee 200 --work 5ms` is the family around a service of 200
    /// workers answering in 5 ms.
    #[arg(long = "knee", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    knees: Vec<u32>,
    /// Cross this mean work time (whole milliseconds, e.g. 5ms, 300ms, 5s) instead of the
    /// family's 1ms, 20ms, 100ms and 2s; repeat for several. The first is the base case's.
    /// Shapes that would serve more than 50,000 requests a second (knee / work) are left
    /// out.
    #[arg(long = "work", value_name = "DURATION", value_parser = parse_work_ms)]
    works_ms: Vec<u64>,
    /// Run only this arm (and the oracle's grid for `oracle`); repeat for several.
    #[arg(long = "arm", value_name = "NAME")]
    arms: Vec<String>,
    /// Run only the cases whose name contains this text (e.g. "pareto", "knee=500",
    /// "step 10x", "2-tiers", "seed=1"); repeat to keep the cases that contain them all.
    #[arg(long = "case", value_name = "TEXT")]
    cases: Vec<String>,
    /// Print the results as JSON (every case, arm and miss) instead of the tables.
    #[arg(long)]
    json: bool,
    /// Also write into this directory (created if needed) robustness.md (the page: command,
    /// tables, heatmaps, the misses of the default), robustness.txt (the tables),
    /// robustness.json and the two heatmaps as SVG.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Threads for the runs [default: the available cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
}

/// The longest mean work time a case may have: a case runs 250 of them or more.
const LONGEST_WORK_MS: u64 = 60_000;

/// A mean work time for `--work`, in whole milliseconds: "5ms", "2s".
fn parse_work_ms(s: &str) -> Result<u64, String> {
    let work = crate::parse_positive_duration(s)?;
    let nanos = work.as_nanos();
    if !nanos.is_multiple_of(1_000_000) {
        return Err("a whole number of milliseconds, at least 1ms".to_owned());
    }
    let ms = nanos / 1_000_000;
    if ms > LONGEST_WORK_MS {
        return Err(format!("at most {}", work_label(LONGEST_WORK_MS)));
    }
    Ok(ms)
}

pub(crate) fn sweep(args: SweepArgs) -> anyhow::Result<()> {
    if let Some(unknown) = args.arms.iter().find(|a| !ARMS.contains(&a.as_str())) {
        bail!(
            "--arm {unknown:?}: no such arm (the arms: {})",
            ARMS.join(", ")
        );
    }
    let arms: Vec<&str> = if args.arms.is_empty() {
        ARMS.to_vec()
    } else {
        ARMS.iter()
            .copied()
            .filter(|a| args.arms.iter().any(|b| b == a))
            .collect()
    };
    let which = if args.quick {
        Family::Reduced
    } else {
        Family::Full
    };
    let axes = Axes::of(which)
        .with_knees(&args.knees)
        .with_works_ms(&args.works_ms);
    let all = family_on(which, &axes, args.seeds);
    if all.is_empty() {
        bail!(
            "no shape of --knee {:?} --work {:?} serves at most {MAX_CAPACITY_RPS} requests \
             a second (knee / work): use fewer workers or longer work",
            axes.knees,
            axes.works_ms
                .iter()
                .map(|&ms| work_label(ms))
                .collect::<Vec<_>>()
        );
    }
    let cases: Vec<_> = all
        .into_iter()
        .filter(|c| {
            let name = c.name();
            args.cases.iter().all(|text| name.contains(text.as_str()))
        })
        .collect();
    if cases.is_empty() {
        bail!("--case {:?}: no case of the family matches", args.cases);
    }
    let jobs = args.jobs.map_or_else(
        || std::thread::available_parallelism().map_or(1, usize::from),
        usize::from,
    );
    let started = Instant::now();
    // A line every few seconds on stderr: the full family runs for a minute or two.
    let last_line = std::sync::Mutex::new(started);
    let progress = |done: usize, all: usize| {
        let Ok(mut last) = last_line.lock() else {
            return;
        };
        if last.elapsed() >= PROGRESS_EVERY {
            *last = Instant::now();
            eprintln!(
                "sweep: {done} of {all} runs, {:.0} s",
                started.elapsed().as_secs_f64()
            );
        }
    };
    let results = run(&cases, &arms, jobs, &progress);
    eprintln!(
        "{} cases x {} arms in {:.1} s",
        results.len(),
        arms.len(),
        started.elapsed().as_secs_f64()
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&results)?);
    } else {
        print!("{}", render::table(&results));
        if arms.contains(&DEFAULT) {
            println!("{}", render::misses(&results, DEFAULT, 5));
        }
    }
    if let Some(dir) = args.out {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let files = [
            (
                "robustness.md",
                render::page(&results, &crate::sim_run::command_line()),
            ),
            ("robustness.txt", render::table(&results)),
            (
                "robustness.json",
                serde_json::to_string_pretty(&results)? + "\n",
            ),
            (GOODPUT_SVG, render::heatmap(&results, Heat::Goodput)),
            (P99_SVG, render::heatmap(&results, Heat::P99)),
        ];
        for (name, text) in files {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            eprintln!("wrote {}", path.display());
        }
    }
    Ok(())
}

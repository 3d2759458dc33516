//! `tidegate sim replay ACCESS_LOG`: fits a service to an access log and replays the log's
//! traffic through every arm.

use std::fs::File;
use std::io::BufReader;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use tidegate_core::Nanos;
use tidegate_sim::replay::{LogFormat, Replay, ReplayConfig, parse_log};

#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The access log, one request a line.
    log: PathBuf,
    /// The log's format: nginx (combined + $request_time $upstream_response_time [$msec],
    /// docs/replay.md gives the log_format line) or envoy (Envoy's default format).
    #[arg(long, default_value = "nginx", value_name = "nginx|envoy")]
    format: LogFormat,
    /// Load multiples, comma-separated: 2x replays the log's arrivals with their gaps
    /// halved.
    #[arg(long = "load", default_value = "1x,2x,5x", value_name = "MULTIPLES", value_parser = parse_multiples)]
    multiples: Multiples,
    /// How long each client waits [default: 10x the log's median request].
    #[arg(long, value_parser = crate::parse_positive_duration)]
    timeout: Option<Nanos>,
    /// Seed of the fitted service's work-time draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run only the arm of this name; repeat for several.
    #[arg(long = "arm", value_name = "NAME")]
    arms: Vec<String>,
    /// Print the results as JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Threads for the runs [default: the available cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
}

/// The load multiples of --load (a newtype: clap would take a bare `Vec` for a repeated flag).
#[derive(Debug, Clone)]
struct Multiples(Vec<f64>);

fn parse_multiples(s: &str) -> Result<Multiples, String> {
    s.split(',')
        .map(|m| {
            let m = m.trim();
            match m.strip_suffix('x').unwrap_or(m).parse::<f64>() {
                Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
                _ => Err(format!(
                    "{m:?}: expected a positive multiple, e.g. 1x,2.5x,5x"
                )),
            }
        })
        .collect::<Result<Vec<f64>, String>>()
        .map(Multiples)
}

pub(crate) fn replay(args: ReplayArgs) -> anyhow::Result<()> {
    let file = File::open(&args.log).with_context(|| format!("opening {}", args.log.display()))?;
    let log = parse_log(args.format, BufReader::new(file))
        .with_context(|| args.log.display().to_string())?;
    let config = ReplayConfig {
        multiples: args.multiples.0,
        timeout: args.timeout,
        seed: args.seed,
        arms: args.arms,
        jobs: args.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, usize::from),
            usize::from,
        ),
    };
    let replay = Replay::new(&log, &config).with_context(|| args.log.display().to_string())?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&replay)?);
    } else {
        print!("{}", replay.text());
    }
    Ok(())
}

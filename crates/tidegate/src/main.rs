//! The `tidegate` command line.

mod demo;
mod error_line;
mod experiment;
mod load;
mod logging;
mod origin;
mod packaging;
mod proxy;
mod sim_fleet;
mod sim_replay;
mod sim_run;
mod sim_sweep;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory as _, Parser, Subcommand};
use tidegate_core::Nanos;
use tidegate_sim::pdc::sweep::{self, Axis, Sweep};
use tidegate_sim::pdc::{DEFAULT_MULTIPLIER, PdcConfig, ProcessKind};

/// tidegate keeps services fast when more traffic arrives than they can serve: it learns how
/// much the service can do in parallel, queues a little, and turns the rest away early, lowest
/// priority first.
#[derive(Debug, Parser)]
#[command(
    name = "tidegate",
    version,
    arg_required_else_help = true,
    after_help = "Start with `tidegate demo`: an overloaded service on 127.0.0.1, without and \
                  with tidegate, in under a minute. `tidegate COMMAND --help` says what a \
                  command does, with examples."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    Demo(demo::DemoArgs),
    Proxy(proxy::ProxyArgs),
    /// Run a model in virtual time (deterministic from a seed).
    #[command(subcommand)]
    Sim(Sim),
    Load(load::LoadArgs),
    Origin(origin::OriginArgs),
    Experiment(experiment::ExperimentArgs),
    Completions(packaging::CompletionsArgs),
    Man(packaging::ManArgs),
}

#[derive(Debug, Subcommand)]
enum Sim {
    /// The producer-dispatcher-consumer model of ScyllaDB's "phantom jams" article
    ///
    /// A producer generates messages at PRODUCER_RATE into a queue; a dispatcher wakes up once
    /// per --period and moves messages from the queue into the consumer, never letting it hold
    /// more than floor(multiplier x period x CONSUMER_RATE) messages; the consumer processes
    /// them in order at CONSUMER_RATE. Each component spaces its events by a process:
    /// uniform (exactly the nominal gap L), poisson (L x Exp(1)), expdelay (L x (1 + Exp(1))),
    /// capdelay (L x U(1, 2 x multiplier)).
    ///
    /// Prints, as the article's tool does, one line with the latencies (production to end of
    /// processing) in seconds:
    /// PROD_RATE CONS_RATE  mean S  p95 S  p99 S  max S  max_queued N
    ///
    /// With --sweep, runs a grid of points instead and prints a table, one row per point,
    /// with the consumed messages per second (the effective dispatch rate when the producer
    /// outpaces the dispatcher). The positional arguments are the base of the grid.
    ///
    /// Examples:
    ///   tidegate sim pdc 600 uniform 200000 uniform uniform 200000
    ///   tidegate sim pdc 60 uniform 200000 uniform uniform 200000 --sweep jitter=producer,consumer,dispatcher --sweep rate=20000..200000:20000
    ///   tidegate sim pdc 60 uniform 400000 poisson uniform 200000 --sweep period=250us,500us,2ms --sweep multiplier=0.5..4:0.5
    #[command(verbatim_doc_comment)]
    Pdc(PdcArgs),
    /// Run a scenario file: every arm (protection) against the same clients and service
    ///
    /// Prints a table per arm, for the whole run and for the steady state after the warm-up:
    /// offered and ok requests per second, the shares shed, expired, refused by the service,
    /// timed out and unsent, latency p50/p90/p99/max of the ok responses per tier, the mean
    /// limit, and how long the limit took to settle after the overload started.
    ///
    /// Examples:
    ///   tidegate sim run scenarios/kanaloa-positive.toml
    ///   tidegate sim run scenarios/cinnamon-tiers.toml --load 3000 --arm "tidegate default" --json
    ///   tidegate sim run scenarios/capacity-slow.toml --duration 30s --out results/
    #[command(verbatim_doc_comment)]
    Run(sim_run::RunArgs),
    /// Fit a service to an access log and replay its traffic through every arm
    ///
    /// Reads the log (--format nginx or envoy; bad lines are reported by number and skipped),
    /// fits a worker pool to its latency by concurrency (the knee, the work time and its
    /// spread, contention beyond the knee, the queue from the refusals), then replays the
    /// log's own arrivals, compressed by each --load multiple, against the fitted service
    /// through every arm: off, a fixed limit at the knee, aimd, vegas, gradient2, hillclimb,
    /// bdp, autotune + pid, and tidegate default. Prints the fit, then per load multiple what
    /// each arm would have done: offered and goodput per second, the shares shed, refused and
    /// timed out, p50 and p99. See docs/replay.md.
    ///
    /// Examples:
    ///   tidegate sim replay /var/log/nginx/access.log
    ///   tidegate sim replay envoy.log --format envoy --load 1x,3x --timeout 2s --json
    #[command(verbatim_doc_comment)]
    Replay(sim_replay::ReplayArgs),
    /// Run every arm on a generated family of service shapes, beside an oracle
    ///
    /// Checks the robustness targets of `tidegate default` on every case. The family crosses the work-time distribution, the knee, contention and the service's
    /// queue, the work time, the load shape, the client timeout and the tier mix (544
    /// cases with two seeds); `--knee` and `--work` build it around a service of your own. Prints a table per axis (cell: worst/median goodput in percent)
    /// and the cases where `tidegate default` misses a target, with why.
    ///
    /// Examples:
    ///   tidegate sim sweep --out docs/experiments/robustness
    ///   tidegate sim sweep --quick
    ///   tidegate sim sweep --case pareto --case "step 10x" --arm "tidegate default" --arm oracle
    ///   tidegate sim sweep --knee 200 --work 5ms --arm "tidegate default" --arm oracle
    #[command(verbatim_doc_comment)]
    Sweep(sim_sweep::SweepArgs),
    /// Run a fleet scenario: call chains across proxies and instances, clients that retry
    ///
    /// Prints, per arm, the cohort agreement across edge proxies, the wasted work (first-hop
    /// admissions whose chain failed later), attempts per request, and the chain's goodput.
    ///
    /// Example:
    ///   tidegate sim fleet scenarios/fleet/chain.toml --out docs/experiments/fleet-chain
    #[command(verbatim_doc_comment)]
    Fleet(sim_fleet::FleetArgs),
}

#[derive(Debug, Args)]
struct PdcArgs {
    /// Virtual time to simulate: seconds ("600") or a duration with a unit ("1.5s", "200ms").
    #[arg(value_parser = parse_duration)]
    duration: Nanos,
    /// The producer's process: uniform, poisson, expdelay or capdelay.
    producer: ProcessKind,
    /// Messages per second the producer generates (a whole number, at least 1).
    #[arg(value_parser = parse_rate)]
    producer_rate: u64,
    /// The dispatcher's process: uniform, poisson, expdelay or capdelay.
    dispatcher: ProcessKind,
    /// The consumer's process: uniform, poisson, expdelay or capdelay.
    consumer: ProcessKind,
    /// Messages per second the consumer processes (a whole number, at least 1).
    #[arg(value_parser = parse_rate)]
    consumer_rate: u64,
    /// The dispatcher's nominal time between wake-ups (Seastar's 2 kHz).
    #[arg(long, default_value = "500us", value_parser = parse_positive_duration)]
    period: Nanos,
    /// The consumer may hold this many times the C x period messages it processes between
    /// two ideal wake-ups (Seastar's 1.5).
    #[arg(long, default_value_t = DEFAULT_MULTIPLIER, value_parser = parse_multiplier)]
    multiplier: f64,
    /// Seed of the random processes: same arguments and seed, same output, byte for byte.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Sweep a parameter: KEY=VALUES, VALUES a comma-separated list of values or ranges
    /// FROM..TO:STEP. Repeat for a grid (first outermost). Keys: rate (the producer's),
    /// consumer-rate, multiplier, period, jitter (producer, dispatcher, consumer or none: that
    /// component runs poisson and the other two uniform, replacing the processes given).
    #[arg(long, value_name = "KEY=VALUES")]
    sweep: Vec<Axis>,
    /// Also write the results as CSV into this directory (created if needed).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Threads for the points of a sweep [default: the available cores].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    jobs: Option<u16>,
}

fn parse_duration(s: &str) -> Result<Nanos, String> {
    let d = match s.trim().parse::<f64>() {
        Ok(secs) if secs.is_finite() && secs > 0.0 => Nanos::from_secs_f64(secs),
        Ok(_) => return Err("must be longer than zero".to_owned()),
        Err(_) => s.parse::<Nanos>().map_err(|e| e.to_string())?,
    };
    if d.is_zero() {
        return Err("must be longer than zero".to_owned());
    }
    Ok(d)
}

/// A duration with its unit ("500us", "2s"), longer than zero.
pub(crate) fn parse_positive_duration(s: &str) -> Result<Nanos, String> {
    match s.parse::<Nanos>() {
        Ok(d) if d.is_zero() => Err("must be longer than zero".to_owned()),
        Ok(d) => Ok(d),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_rate(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(r) if r >= 1 => Ok(r),
        _ => Err("expected messages per second, a whole number of at least 1".to_owned()),
    }
}

fn parse_multiplier(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(m) if m.is_finite() && m > 0.0 => Ok(m),
        _ => Err("expected a positive number, e.g. 1.5".to_owned()),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(Sim::Pdc(args)) => pdc(args),
        Command::Sim(Sim::Run(args)) => sim_run::run(args),
        Command::Sim(Sim::Replay(args)) => sim_replay::replay(args),
        Command::Sim(Sim::Sweep(args)) => sim_sweep::sweep(args),
        Command::Sim(Sim::Fleet(args)) => sim_fleet::run(args),
        Command::Load(args) => load::load(args),
        Command::Origin(args) => origin::origin(args),
        Command::Experiment(args) => experiment::experiment(args),
        Command::Demo(args) => demo::demo(args),
        Command::Proxy(args) => proxy::run(args),
        Command::Completions(args) => packaging::completions(&args, Cli::command()),
        Command::Man(args) => packaging::man(&args, Cli::command()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line::error_line(&e));
            ExitCode::FAILURE
        }
    }
}

/// A configuration the model refuses is a usage error: report it as clap does, with the
/// usage of `tidegate sim pdc`, and exit 2.
fn usage_error(msg: impl std::fmt::Display) -> ! {
    let mut cli = Cli::command();
    cli.build();
    let mut pdc = cli
        .find_subcommand("sim")
        .and_then(|sim| sim.find_subcommand("pdc"))
        .cloned()
        .unwrap_or(cli);
    pdc.error(ErrorKind::ValueValidation, msg.to_string())
        .exit()
}

fn pdc(args: PdcArgs) -> anyhow::Result<()> {
    let base = PdcConfig {
        duration: args.duration,
        producer: args.producer,
        producer_rate: args.producer_rate,
        dispatcher: args.dispatcher,
        consumer: args.consumer,
        consumer_rate: args.consumer_rate,
        period: args.period,
        multiplier: args.multiplier,
        seed: args.seed,
    };
    let (reports, text) = if args.sweep.is_empty() {
        let report = base.run().unwrap_or_else(|e| usage_error(e));
        let line = format!("{report}\n");
        (vec![report], line)
    } else {
        let sweep = Sweep::new(base, args.sweep).unwrap_or_else(|e| usage_error(e));
        let jobs = args.jobs.map_or_else(
            || std::thread::available_parallelism().map_or(1, usize::from),
            usize::from,
        );
        let reports = sweep.run(jobs).unwrap_or_else(|e| usage_error(e));
        let table = sweep.table(&reports);
        (reports, table)
    };
    print!("{text}");
    if let Some(dir) = args.out {
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let path = dir.join("pdc.csv");
        std::fs::write(&path, sweep::csv(&reports))
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

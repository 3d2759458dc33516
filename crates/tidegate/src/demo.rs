//! `tidegate demo`: the first command to run. A compact overload experiment on real sockets,
//! without and with tidegate, and the before/after table.
//!
//! The scenario is kanaloa-positive (a service that serves 200 rps at best and slows down
//! when pushed, traffic ramping up to 250 rps), compiled into the binary so that the demo
//! needs nothing but the binary, whatever the working directory.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::Args;
use tidegate_core::Nanos;
use tidegate_lab::experiment::{self, Selection};
use tidegate_sim::scenario::{Scenario, header_comment};

const SCENARIO: &str = include_str!("../../../scenarios/kanaloa-positive.toml");
const WITHOUT: &str = "off";
const WITH: &str = "tidegate default";
/// The shortest run (each half of --duration) whose steady state shows what an overload does
/// to the unprotected service. Before its queue has filled up to the clients' 900
/// connections, every request is still answered, only later and later: counted by send time,
/// the unprotected side then looks better than the protected one. In the simulator
/// (`tidegate sim run scenarios/kanaloa-positive.toml --duration D --arm off --arm "tidegate
/// default"`, steady goodput): at D = 15s, off 237 ok/s against tidegate's 196; at 20s, off 191
/// against 199; at 25s, 167 against 199.
const SHORTEST_RUN_S: f64 = 20.0;

/// Show tidegate at work: an overloaded service on 127.0.0.1, without and with tidegate
///
/// A mock service that serves 200 requests per second at best (20 workers at 100 ms, slower
/// beyond 20 requests in flight) receives traffic ramping up to 250 requests per second
/// (the kanaloa-positive scenario, time-scaled). The demo runs it twice on real sockets:
/// without protection, then behind a tidegate proxy with its default settings, which knows
/// nothing of the service's capacity. It prints what the clients got (goodput, latency,
/// requests turned away) with the simulator's prediction beside each figure, and writes
/// charts and a page into --out.
///
/// Examples:
///   tidegate demo
///   tidegate demo --duration 2m --out /tmp/demo
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct DemoArgs {
    /// How long the two runs take together (half each); add a few seconds for the
    /// unprotected run's last requests to come back. The default ends within a minute; under
    /// 40s the unprotected run ends before its queue fills, and looks better than it is.
    #[arg(long, default_value = "50s", value_parser = crate::parse_duration)]
    duration: Nanos,
    /// Where to write the charts, the CSV and the page.
    #[arg(long, value_name = "DIR", default_value = "tidegate-demo")]
    out: PathBuf,
}

pub(crate) fn demo(args: DemoArgs) -> anyhow::Result<()> {
    let scenario =
        Scenario::parse(SCENARIO, "kanaloa-positive").context("the demo's built-in scenario")?;
    let selection = Selection {
        duration: Some(Nanos::from_nanos(args.duration.as_nanos() / 2)),
        arms: vec![WITHOUT.to_owned(), WITH.to_owned()],
        ..Selection::default()
    };
    let scenario = experiment::select(scenario, &selection)?;
    println!(
        "tidegate demo: a service that serves 200 rps at best gets up to 250 rps, on 127.0.0.1;\n\
         {} s without protection, then {} s behind tidegate (default settings, capacity unknown).\n",
        scenario.duration.as_secs_f64(),
        scenario.duration.as_secs_f64()
    );
    let seconds = scenario.duration.as_secs_f64();
    let too_short = (seconds < SHORTEST_RUN_S).then(|| {
        format!(
            "warning: {seconds} s a run is too short to show the overload: the unprotected \
             service's queue fills in about {SHORTEST_RUN_S} s, and until then it answers \
             everything, only late. Give --duration {} or more.",
            2.0 * SHORTEST_RUN_S
        )
    });
    if let Some(warning) = &too_short {
        println!("{warning}\n");
    }
    let report = crate::experiment::run(&scenario)?;
    print!("{}", report.before_after(WITHOUT, WITH));
    if let Some(warning) = &too_short {
        println!("\n{warning}");
    }
    let written = crate::experiment::write_out(
        &report,
        &header_comment(SCENARIO),
        &args.out,
        &crate::sim_run::command_line(),
    )?;
    println!("\ncharts and the full table: {written}");
    Ok(())
}

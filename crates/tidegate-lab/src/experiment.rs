//! Experiments: a scenario file run over real sockets, each figure beside the simulator's
//! prediction for the same file.
//!
//! For each arm (and each load point of a sweep) the runner starts a fresh [`Origin`] with the
//! scenario's service, puts the arm's protection in front of it, runs the load generator with
//! the scenario's `[load]` section on 127.0.0.1, and then runs the simulator on the very same
//! scenario and arm. Real and simulated figures are then set side by side, with whether they
//! agree: steady-state goodput within 10% and p50 within 20% of the simulator's.
//!
//! **Time scaling** shortens the *schedule* only, as [`Scenario::shortened`] does: the run,
//! the warm-up, the load phases and the capacity changes are divided by the scale; work times,
//! client timeouts and the protections' own constants are not. Dividing those too would look
//! more faithful but is not: a controller's constants (PIE's 15 ms target, a queue timeout)
//! would no longer match the service they regulate, and fixed costs (a loopback round trip,
//! a timer's wake-up) would weigh X times more against the work. The simulator runs the same
//! shortened scenario, so the comparison stays exact; what shortening changes is how long the
//! protections have to settle, which both sides share.
//!
//! **What stands in front of the origin**, per arm kind: nothing for `off`; for
//! `static_lease`, the origin's own per-instance leases with its front listener choosing the
//! instance of most lease availability (an RSocket responder and its least-loaded balancer);
//! for a gate arm, a tidegate proxy ([`tidegate_proxy`], in this process) with the arm's
//! gate, one upstream per instance ([`gate_front`]).
//!
//! **Counting.** Requests are counted by their intended send time on both sides, so the
//! steady state is the same set of requests. The real side cannot tell a request that
//! expired in a gate's queue from one the gate shed (both are a 503 from tidegate): its
//! `shed` column holds both, and the simulator's `shed` is given as shed + expired to match.
//! A 503 without tidegate's header is the service's own refusal (its full queue).
//!
//! **The gates' path.** Behind a gate arm's proxy, a separate task reads the gates
//! ([`GateReadings`]) at the end of each whole second of the load's schedule, when the
//! simulator records its own per-second limit, in flight and queue, so that where real and
//! simulated figures part one can see whether the controller took another path. It runs
//! beside the load, never in its dispatch or its requests.

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use http::Uri;
use serde::Serialize;
use tidegate_core::Nanos;
use tidegate_model::NonNegative;
use tidegate_model::client::Arrivals as ModelArrivals;
use tidegate_proxy::{Config as ProxyConfig, GateReadings, Proxy, UpstreamConfig};
use tidegate_sim::scenario::engine::run_arm;
use tidegate_sim::scenario::report::{ArmRun, Figures};
use tidegate_sim::scenario::{ArmConfig, ArmKind, Scenario, ScenarioError};
use tokio::sync::oneshot;

use crate::load::{self, Arrivals, LoadConfig, LoadError, Phase, Schedule, TierMix, TierReport};
use crate::origin::{Origin, OriginConfig, OriginError};

mod render;

/// Goodput agrees when within this share of the simulator's.
pub const GOODPUT_TOLERANCE: f64 = 0.10;
/// The p50 latency agrees when within this share of the simulator's.
pub const P50_TOLERANCE: f64 = 0.20;

/// Why an experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    #[error(transparent)]
    Scenario(#[from] ScenarioError),
    #[error("{0}")]
    Usage(String),
    #[error("{scenario}: {what} cannot run on real sockets yet")]
    Unsupported { scenario: String, what: String },
    #[error("arm {arm:?}: {reason}")]
    Front { arm: String, reason: String },
    #[error("the origin: {0}")]
    Origin(#[from] OriginError),
    #[error("the load: {0}")]
    Load(#[from] LoadError),
}

/// Which part of a scenario to run, and how fast.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    /// Divide the scenario's schedule by this (see the module documentation); `None`: 1.
    pub time_scale: Option<f64>,
    /// Or shorten it to this duration.
    pub duration: Option<Nanos>,
    /// Only these arms (by name); empty: all.
    pub arms: Vec<String>,
    /// Only these load points of a sweep; empty: all.
    pub loads: Vec<f64>,
}

/// Reads a scenario and applies a [`Selection`], with errors naming the culprit.
pub fn prepare(path: &Path, selection: &Selection) -> Result<Scenario, ExperimentError> {
    let scenario = Scenario::load(path)?;
    select(scenario, selection)
}

/// Applies a [`Selection`] to a scenario.
pub fn select(mut scenario: Scenario, selection: &Selection) -> Result<Scenario, ExperimentError> {
    if let Some(scale) = selection.time_scale {
        if !(scale.is_finite() && scale >= 1.0) {
            return Err(ExperimentError::Usage(format!(
                "--time-scale {scale}: expected a number of at least 1 (2 runs twice as fast)"
            )));
        }
        scenario = scenario.shortened(scenario.duration.mul_f64(1.0 / scale));
    }
    if let Some(duration) = selection.duration {
        scenario = scenario.shortened(duration);
    }
    scenario
        .keep_arms(&selection.arms)
        .and_then(|()| scenario.keep_loads(&selection.loads))
        .map_err(|e| ExperimentError::Usage(e.to_string()))?;
    check_supported(&scenario)?;
    Ok(scenario)
}

/// What the lab's generator cannot send, refused by name before anything starts.
fn check_supported(scenario: &Scenario) -> Result<(), ExperimentError> {
    let unsupported = |what: &str| {
        Err(ExperimentError::Unsupported {
            scenario: scenario.name.clone(),
            what: what.to_owned(),
        })
    };
    if scenario.load.arrivals == ModelArrivals::Closed {
        return unsupported("a closed-loop client (load.arrivals = \"closed\")");
    }
    if scenario.load.arrivals == ModelArrivals::Trace {
        return unsupported("a recorded trace (load.arrivals = \"trace\")");
    }
    if scenario.load.retries.max > 0 {
        return unsupported("retries (load.retries)");
    }
    Ok(())
}

/// The real side of one arm at one load point, in the simulator's terms.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealRun {
    pub whole: Figures,
    pub steady: Figures,
    /// Steady state by tier, when the load has several.
    pub steady_tiers: Vec<(u8, Figures)>,
    /// Requests that failed otherwise (connection errors, other statuses): none expected.
    pub errors: u64,
    /// The load generator's p99 lateness, to tell a busy machine from a slow service.
    pub dispatch_lag_p99_ms: f64,
    #[serde(skip)]
    pub report: load::Report,
    /// The gates' state at the end of each whole second of the load, for a gate arm;
    /// `None` without a gate in front (`off`, a static lease). Per second, as the load's
    /// own `per_second` (not in the JSON either).
    #[serde(skip)]
    pub gate_series: Option<Vec<GateSecond>>,
}

/// The gates in front of the origin at the end of one second of the load's schedule,
/// summed over the gates (one per instance of the origin): what the simulator's
/// per-second series records as `limit` and `queued`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GateSecond {
    /// The second's end, in seconds from the load's start: second N is [N-1, N), as in the
    /// load's report and the simulator's series.
    pub second: u32,
    /// The concurrency limits in force.
    pub limit: u64,
    /// Requests let through and not yet answered.
    pub inflight: u64,
    /// Requests waiting in the gates' queues.
    pub queued: u64,
}

/// Whether a real run agrees with the simulator's prediction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Agreement {
    /// Real steady goodput relative to the simulator's, minus 1 (`None` when both are zero).
    pub goodput_error: Option<f64>,
    /// Real steady p50 relative to the simulator's, minus 1 (`None` without ok responses).
    pub p50_error: Option<f64>,
    pub agrees: bool,
}

impl Agreement {
    fn of(real: &Figures, sim: &Figures) -> Agreement {
        let relative = |real: f64, sim: f64| {
            if sim > 0.0 {
                Some(real / sim - 1.0)
            } else if real > 0.0 {
                Some(f64::INFINITY)
            } else {
                None
            }
        };
        let goodput_error = relative(real.goodput_rps, sim.goodput_rps);
        let p50_error = match (real.p50_ms, sim.p50_ms) {
            (Some(r), Some(s)) => relative(r, s),
            (None, None) => None,
            // Ok responses on one side only: as far apart as can be.
            _ => Some(f64::INFINITY),
        };
        let within = |e: Option<f64>, tolerance: f64| e.is_none_or(|e| e.abs() <= tolerance);
        Agreement {
            goodput_error,
            p50_error,
            agrees: within(goodput_error, GOODPUT_TOLERANCE) && within(p50_error, P50_TOLERANCE),
        }
    }
}

/// One arm at one load point: real and simulated.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub arm: String,
    pub load_rps: f64,
    pub real: RealRun,
    pub sim: ArmRun,
    pub agreement: Agreement,
}

/// A whole experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentReport {
    pub scenario: String,
    pub seed: u64,
    /// The run's duration after scaling, in seconds.
    pub duration_s: f64,
    pub warmup_s: f64,
    pub runs: Vec<Comparison>,
}

/// What the runner is doing, for a progress display.
#[derive(Debug, Clone)]
pub enum Event<'a> {
    /// An arm starts at a load point (`None`: the load's own schedule) and runs this long.
    Started {
        arm: &'a str,
        load: Option<f64>,
        seconds: f64,
    },
    /// An arm's proxy is up: its live dashboard is at `http://{admin}/dashboard`.
    Dashboard { arm: &'a str, admin: SocketAddr },
    /// Once a second while an arm's load runs: what its clients got so far.
    Progress {
        arm: &'a str,
        progress: &'a load::Progress,
    },
    /// An arm is done.
    Done(&'a Comparison),
}

/// Runs every arm of `scenario` (see [`select`]) at every load point, one after the other,
/// over real sockets on 127.0.0.1, beside the simulator. Must be called within a tokio
/// runtime with the time and I/O drivers enabled.
pub async fn run(
    scenario: &Scenario,
    mut observe: impl FnMut(Event<'_>),
) -> Result<ExperimentReport, ExperimentError> {
    check_supported(scenario)?;
    let mut runs = Vec::new();
    for point in scenario.load.points() {
        for arm in &scenario.arms {
            observe(Event::Started {
                arm: &arm.name,
                load: point,
                seconds: scenario.duration.as_secs_f64(),
            });
            let real = run_real(scenario, arm, point, &mut observe).await?;
            let sim = run_arm(scenario, arm, point);
            let agreement = Agreement::of(&real.steady, &sim.steady.figures);
            let comparison = Comparison {
                arm: arm.name.clone(),
                load_rps: sim.load_rps,
                real,
                sim,
                agreement,
            };
            observe(Event::Done(&comparison));
            runs.push(comparison);
        }
    }
    Ok(ExperimentReport {
        scenario: scenario.name.clone(),
        seed: scenario.seed,
        duration_s: scenario.duration.as_secs_f64(),
        warmup_s: scenario.warmup.as_secs_f64(),
        runs,
    })
}

/// A protection in front of the origin, running until dropped or stopped.
#[derive(Debug)]
pub struct RunningFront {
    /// Where the load goes.
    pub addr: SocketAddr,
    /// The proxy's admin listener (`/dashboard`, `/metrics`, `/status`), for a gate arm.
    pub admin: Option<SocketAddr>,
    /// The proxy's gates, for a gate arm.
    pub gates: Option<GateReadings>,
    /// Stops the front when sent or dropped.
    pub stop: Option<oneshot::Sender<()>>,
}

/// A tidegate proxy started in this process for a gate arm: the arm's gate on one upstream
/// per instance of the origin (`upstreams`), reading the load's priority and caller-key
/// headers. Its upstream timeout is far beyond anything the clients wait for, as the
/// simulator has none: the limits keep their own configured timeouts.
pub async fn gate_front(
    scenario: &Scenario,
    arm: &ArmConfig,
    upstreams: &[SocketAddr],
) -> Result<RunningFront, ExperimentError> {
    let front_error = |reason: String| ExperimentError::Front {
        arm: arm.name.clone(),
        reason,
    };
    let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
    let mut config = ProxyConfig {
        listen: loopback,
        admin: loopback,
        upstreams: upstreams
            .iter()
            .map(|addr| UpstreamConfig::new(format!("http://{addr}")))
            .collect(),
        gate: arm.gate_config(),
        ..ProxyConfig::default()
    };
    config.client.timeout = scenario
        .load
        .timeout
        .saturating_mul(2)
        .max(Nanos::from_secs(120));
    config.priority.header = load::PRIORITY_HEADER.to_owned();
    if scenario.load.keys > 0 {
        config.priority.caller_key_header = load::DEFAULT_KEY_HEADER.to_owned();
        config.priority.cohorts = scenario.load.cohorts;
    }
    config.server.drain_timeout = Nanos::from_secs(1);
    let proxy = Proxy::bind(config)
        .await
        .map_err(|e| front_error(format!("the proxy: {e}")))?;
    let addr = proxy.local_addr();
    let admin = proxy.admin_addr();
    let gates = proxy.gates();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(proxy.run(async {
        let _ = stopped.await;
    }));
    Ok(RunningFront {
        addr,
        admin: Some(admin),
        gates: Some(gates),
        stop: Some(stop),
    })
}

/// `observe` hears the admin address of the arm's proxy, if it has one, once it is up, then
/// the load's progress once a second.
async fn run_real(
    scenario: &Scenario,
    arm: &ArmConfig,
    point: Option<f64>,
    observe: &mut dyn FnMut(Event<'_>),
) -> Result<RealRun, ExperimentError> {
    let lease = match arm.kind {
        ArmKind::StaticLease => arm.lease.clone(),
        ArmKind::Off | ArmKind::Gate => None,
    };
    let origin = Origin::bind(OriginConfig {
        service: scenario.service.clone(),
        lease,
        seed: scenario.seed,
        listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        call: Vec::new(),
        call_feedback: true,
        peers: None,
    })
    .await?;
    let front = match arm.kind {
        ArmKind::Off | ArmKind::StaticLease => RunningFront {
            addr: origin.addr(),
            admin: None,
            gates: None,
            stop: None,
        },
        ArmKind::Gate => gate_front(scenario, arm, &origin.instance_addrs()).await?,
    };
    if let Some(admin) = front.admin {
        observe(Event::Dashboard {
            arm: &arm.name,
            admin,
        });
    }
    let (stop_origin, origin_stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(origin.run(async {
        let _ = origin_stopped.await;
    }));
    let config = load_config(scenario, point, front.addr)?;
    // The load's seconds count from its start, microseconds after this (it parses the
    // target's IP literal and sets up its recorder): far below a reading's one second.
    let sampler = front.gates.clone().map(|gates| {
        tokio::spawn(sample_gates(
            gates,
            tokio::time::Instant::now(),
            scenario.duration,
        ))
    });
    let report = load::run_observed(config, std::future::pending(), |progress| {
        observe(Event::Progress {
            arm: &arm.name,
            progress,
        });
    })
    .await;
    let gate_series = match sampler {
        // The load ran its whole schedule, so the sampler is done or about to be; it
        // neither panics nor is aborted, so joining it cannot fail.
        Some(sampler) if report.is_ok() => Some(sampler.await.unwrap_or_default()),
        Some(sampler) => {
            sampler.abort();
            None
        }
        None => None,
    };
    drop(front);
    let _ = stop_origin.send(());
    // The origin ends as soon as it is told; its own error (none once bound) is secondary.
    let _ = serving.await;
    Ok(real_run(report?, gate_series))
}

/// Reads `gates` at the end of every whole second of a schedule of `duration` that started
/// at `start`, as the simulator records its series (a last partial second has no row on
/// either side). A reading the runtime wakes late for still belongs to its second.
async fn sample_gates(
    gates: GateReadings,
    start: tokio::time::Instant,
    duration: Nanos,
) -> Vec<GateSecond> {
    let seconds = u32::try_from(duration.as_nanos() / 1_000_000_000).unwrap_or(u32::MAX);
    let mut series = Vec::with_capacity(seconds as usize);
    for second in 1..=seconds {
        tokio::time::sleep_until(start + Duration::from_secs(u64::from(second))).await;
        let mut sum = GateSecond {
            second,
            limit: 0,
            inflight: 0,
            queued: 0,
        };
        for gate in gates.read() {
            sum.limit += u64::from(gate.limit);
            sum.inflight += u64::from(gate.inflight);
            sum.queued += gate.queued as u64;
        }
        series.push(sum);
    }
    series
}

/// The scenario's `[load]` at a load point, as the generator's configuration.
pub fn load_config(
    scenario: &Scenario,
    point: Option<f64>,
    target: SocketAddr,
) -> Result<LoadConfig, ExperimentError> {
    let load = &scenario.load;
    let url: Uri = format!("http://{target}/")
        .parse()
        .map_err(|e| ExperimentError::Usage(format!("target {target}: {e}")))?;
    let schedule = schedule(scenario, point).map_err(|e| ExperimentError::Unsupported {
        scenario: scenario.name.clone(),
        what: format!("its load schedule ({e})"),
    })?;
    let shares: Vec<(u8, f64)> = load
        .tiers
        .iter()
        .map(|t| (t.tier, t.weight.get()))
        .collect();
    let tiers =
        TierMix::new(&shares).map_err(|e| ExperimentError::Usage(format!("load.tiers: {e}")))?;
    Ok(LoadConfig {
        arrivals: match load.arrivals {
            ModelArrivals::Constant => Arrivals::Constant,
            ModelArrivals::Poisson | ModelArrivals::Closed | ModelArrivals::Trace => {
                Arrivals::Poisson
            }
        },
        timeout: load.timeout,
        tiers,
        caller_keys: load.keys,
        max_inflight: load.connections.map_or(100_000, |c| c.get() as usize),
        seed: scenario.seed,
        steady_from: Some(scenario.warmup),
        ..LoadConfig::new(url, schedule)
    })
}

/// The rates of the run: the sweep point or `rate` throughout, or the phases cut at the
/// run's end, the last one's final rate holding until then (as the simulator reads them).
fn schedule(scenario: &Scenario, point: Option<f64>) -> Result<Schedule, load::ScheduleError> {
    let load = &scenario.load;
    let duration = scenario.duration;
    if let Some(rate) = point.or(load.rate.map(NonNegative::get)) {
        return Schedule::constant(rate, duration);
    }
    let mut phases = Vec::new();
    let mut start = Nanos::ZERO;
    let mut last_rate = 0.0;
    for phase in &load.phases {
        if start >= duration {
            break;
        }
        let from = phase.rate.get();
        let to = phase.to.map_or(from, NonNegative::get);
        let end = (start + phase.duration).min(duration);
        // A phase cut short ends at the rate it had reached by then.
        let reached = if end < start + phase.duration && !phase.duration.is_zero() {
            from + (to - from) * ((end - start).as_secs_f64() / phase.duration.as_secs_f64())
        } else {
            to
        };
        if end > start {
            phases.push(Phase {
                duration: end - start,
                from,
                to: reached,
            });
        }
        start = end;
        last_rate = to;
    }
    if start < duration {
        phases.push(Phase {
            duration: duration - start,
            from: last_rate,
            to: last_rate,
        });
    }
    Schedule::new(phases)
}

/// A tier's figures over `seconds` of the *schedule* (not the wall time, which ends a little
/// later), rounded as the simulator rounds its own.
fn figures(t: &TierReport, seconds: f64) -> Figures {
    let round = |x: f64, scale: f64| (x * scale).round() / scale;
    let offered = t.offered.max(1) as f64;
    let ratio = |n: u64| round(n as f64 / offered, 1e4);
    let latency = (t.latency_ms.count > 0).then_some(t.latency_ms);
    let ms = |pick: fn(&load::Latency) -> f64| latency.as_ref().map(|l| round(pick(l), 1e3));
    Figures {
        offered_rps: round(t.offered as f64 / seconds, 1e3),
        goodput_rps: round(t.ok as f64 / seconds, 1e3),
        shed_ratio: ratio(t.shed_by_tidegate),
        expired_ratio: 0.0,
        refused_ratio: ratio(t.shed - t.shed_by_tidegate),
        timeout_ratio: ratio(t.timed_out),
        // A real origin's work is not known apart from its wait.
        avoidable_timeout_ratio: ratio(t.timed_out),
        unsent_ratio: ratio(t.not_sent),
        p50_ms: ms(|l| l.p50),
        p90_ms: ms(|l| l.p90),
        p99_ms: ms(|l| l.p99),
        max_ms: ms(|l| l.max),
    }
}

fn real_run(report: load::Report, gate_series: Option<Vec<GateSecond>>) -> RealRun {
    let duration = report.run.duration_s.max(1e-9);
    let whole = figures(&report.total, duration);
    let (steady, steady_tiers) = match &report.steady {
        Some(s) => {
            let seconds = (duration - s.from_s).max(1e-9);
            (
                figures(&s.total, seconds),
                if s.tiers.len() > 1 {
                    s.tiers
                        .iter()
                        .filter_map(|t| Some((t.tier?, figures(t, seconds))))
                        .collect()
                } else {
                    Vec::new()
                },
            )
        }
        None => (whole.clone(), Vec::new()),
    };
    RealRun {
        whole,
        steady,
        steady_tiers,
        errors: report.total.errors,
        dispatch_lag_p99_ms: report.dispatch_lag_ms.p99,
        report,
        gate_series,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario(load: &str) -> Scenario {
        let text = format!(
            "seed = 3\nduration = \"60s\"\nwarmup = \"30s\"\n[service.pool]\nworkers = 2\n\
             [load]\ntimeout = \"1s\"\n{load}\n[[arms]]\nname = \"off\"\nkind = \"off\"\n\
             [[arms]]\nname = \"tidegate default\"\n"
        );
        Scenario::parse(&text, "test").unwrap()
    }

    fn secs(s: f64) -> Nanos {
        Nanos::from_secs_f64(s)
    }

    #[test]
    fn phases_are_cut_at_the_end_and_the_last_rate_holds_to_it() {
        let s = scenario(
            "[[load.phases]]\nduration = \"20s\"\nrate = 100\nto = 200\n\
             [[load.phases]]\nduration = \"10s\"\nrate = 250\n",
        );
        let rates = schedule(&s, None).unwrap();
        assert_eq!(rates.duration(), secs(60.0));
        assert_eq!(rates.rate_at(secs(10.0)), 150.0);
        assert_eq!(rates.rate_at(secs(25.0)), 250.0);
        assert_eq!(rates.rate_at(secs(59.0)), 250.0, "the last phase holds");

        // Shortened to 10 s: the ramp is cut where it stood, at 150.
        let short = select(
            scenario(
                "[[load.phases]]\nduration = \"20s\"\nrate = 100\nto = 200\n\
                 [[load.phases]]\nduration = \"80s\"\nrate = 250\n",
            ),
            &Selection::default(),
        )
        .unwrap();
        let mut cut = short.clone();
        cut.duration = secs(10.0);
        let rates = schedule(&cut, None).unwrap();
        assert_eq!(rates.duration(), secs(10.0));
        assert_eq!(rates.phases().len(), 1);
        assert!((rates.phases()[0].to - 150.0).abs() < 1e-9);
    }

    #[test]
    fn the_load_section_maps_onto_the_generator() {
        let s = scenario(
            "rates = [100, 300]\narrivals = \"constant\"\nconnections = 50\nkeys = 10\n\
             tiers = [{ tier = 1, weight = 1 }, { tier = 5, weight = 3 }]\n",
        );
        let target = SocketAddr::from(([127, 0, 0, 1], 9));
        let config = load_config(&s, Some(300.0), target).unwrap();
        assert_eq!(config.url.to_string(), "http://127.0.0.1:9/");
        assert_eq!(config.schedule.rate_at(secs(1.0)), 300.0);
        assert_eq!(config.schedule.duration(), secs(60.0));
        assert_eq!(config.arrivals, Arrivals::Constant);
        assert_eq!(config.timeout, secs(1.0));
        assert_eq!(config.max_inflight, 50);
        assert_eq!(config.caller_keys, 10);
        assert_eq!(config.tiers.tiers(), vec![1, 5]);
        assert_eq!(config.steady_from, Some(secs(30.0)));
        assert_eq!(config.seed, 3);
    }

    #[test]
    fn a_selection_scales_filters_and_names_what_it_cannot_find() {
        let s = scenario("rates = [100, 300]\n");
        let scaled = select(
            s.clone(),
            &Selection {
                time_scale: Some(4.0),
                arms: vec!["off".to_owned()],
                loads: vec![300.0],
                ..Selection::default()
            },
        )
        .unwrap();
        assert_eq!((scaled.duration, scaled.warmup), (secs(15.0), secs(7.5)));
        assert_eq!(scaled.arms.len(), 1);
        assert_eq!(scaled.load.points(), vec![Some(300.0)]);

        let err = |selection: Selection| select(s.clone(), &selection).unwrap_err().to_string();
        let e = err(Selection {
            arms: vec!["of".to_owned()],
            ..Selection::default()
        });
        assert!(
            e.contains("\"of\"") && e.contains("off, tidegate default"),
            "{e}"
        );
        let e = err(Selection {
            loads: vec![200.0],
            ..Selection::default()
        });
        assert!(
            e.contains("load 200") && e.contains("[100.0, 300.0]"),
            "{e}"
        );
        let e = err(Selection {
            time_scale: Some(0.5),
            ..Selection::default()
        });
        assert!(e.contains("--time-scale 0.5"), "{e}");
        let closed = select(
            scenario("arrivals = \"closed\"\nworkers = 3\n"),
            &Selection::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(closed.contains("closed-loop"), "{closed}");
    }

    fn figures(goodput: f64, p50: Option<f64>) -> Figures {
        Figures {
            offered_rps: 100.0,
            goodput_rps: goodput,
            shed_ratio: 0.0,
            expired_ratio: 0.0,
            refused_ratio: 0.0,
            timeout_ratio: 0.0,
            avoidable_timeout_ratio: 0.0,
            unsent_ratio: 0.0,
            p50_ms: p50,
            p90_ms: p50,
            p99_ms: p50,
            max_ms: p50,
        }
    }

    #[test]
    fn agreement_is_goodput_within_10_and_p50_within_20_percent() {
        let sim = figures(100.0, Some(50.0));
        let agrees = |real: Figures| Agreement::of(&real, &sim).agrees;
        assert!(agrees(figures(109.0, Some(59.0))));
        assert!(!agrees(figures(89.0, Some(50.0))));
        assert!(!agrees(figures(100.0, Some(61.0))));
        assert!(
            !agrees(figures(100.0, None)),
            "ok responses on one side only"
        );
        let nothing = figures(0.0, None);
        assert!(
            Agreement::of(&nothing, &nothing).agrees,
            "both served nothing"
        );
        let a = Agreement::of(&figures(95.0, Some(55.0)), &sim);
        assert!((a.goodput_error.unwrap() + 0.05).abs() < 1e-9);
        assert!((a.p50_error.unwrap() - 0.1).abs() < 1e-9);
    }
}

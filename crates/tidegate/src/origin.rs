//! `tidegate origin`: the mock origin on the command line.

use std::io::Write as _;
use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::path::PathBuf;

use anyhow::Context as _;
use clap::error::ErrorKind;
use clap::{Args, CommandFactory as _};
use tidegate_core::Nanos;
use tidegate_core::peers::PeerConfig;
use tidegate_lab::origin::{
    METRICS_PATH, Origin, OriginConfig, parse_change, parse_delay_curve, service_from_file,
};
use tidegate_model::NonNegative;
use tidegate_model::lease::StaticLeaseConfig;
use tidegate_model::service::{Balance, Change, CurveBy, ServiceConfig, ServiceKind, Spread};

/// Serve HTTP as a service model says: a worker pool or a latency curve
///
/// Every request goes through the simulator's own service model, in real time: it starts
/// at once if a worker is free, waits in the internal queue otherwise, and is refused with
/// 503 when that queue is full; its response leaves when the model says its work ends. Work
/// goes on after a client hangs up, as in a real service. GET /metrics gives the origin's
/// counters (Prometheus text): in flight, queued, arrived, served, refused, abandoned.
///
/// The service comes from --scenario (its [service] table) and/or the flags, which override
/// the file. --delay-curve makes it a latency curve; the pool flags a pool.
///
/// Examples:
///   tidegate origin --workers 20 --work 100ms --optimal 20 --contention 0.0005
///   tidegate origin --workers 7 --work 1s --queue 100 --change 60s:work=2s
///   tidegate origin --delay-curve "10=>2ms;50=>5ms;120=>20ms;=>5000ms" --curve-by window
///   tidegate origin --scenario scenarios/capacity-slow.toml --listen 127.0.0.1:9000
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub(crate) struct OriginArgs {
    /// Where to listen. With several instances, instance i also listens on the port
    /// + 1 + i (any free port when this one is 0).
    #[arg(long, default_value = "127.0.0.1:8081", value_name = "ADDR")]
    listen: SocketAddr,
    /// Read the service from this file's [service] table (a scenario file, or a file with
    /// only that table); the flags below override it.
    #[arg(long, value_name = "FILE")]
    scenario: Option<PathBuf>,
    /// Workers of the pool: requests worked on at once.
    #[arg(long, value_name = "N", value_parser = parse_at_least_one)]
    workers: Option<NonZeroU32>,
    /// Nominal time a worker spends on a request: 100ms, 1s, ...
    #[arg(long, value_name = "DURATION", value_parser = crate::parse_positive_duration)]
    work: Option<Nanos>,
    /// Size of the pool's internal queue; requests that find it full get 503. Default:
    /// unbounded.
    #[arg(long, value_name = "N")]
    queue: Option<u32>,
    /// Requests the pool holds without contention [default: the workers].
    #[arg(long, value_name = "N")]
    optimal: Option<u32>,
    /// Slowdown of new work per request held beyond --optimal: work x (1 + C x excess).
    #[arg(long, value_name = "C", value_parser = parse_non_negative)]
    contention: Option<NonNegative>,
    /// A latency curve instead of a pool, COUNT=>LATENCY;...: linear between the points,
    /// flat before the first; a last =>LATENCY applies beyond the last count. Latencies
    /// without a unit are milliseconds, as the RSocket demo writes "10 => 2; 50 => 5".
    #[arg(long, value_name = "CURVE", value_parser = parse_curve)]
    delay_curve: Option<CurvePoints>,
    /// What the curve's COUNT counts: concurrency (requests in the service) or window
    /// (requests arrived in the current --window).
    #[arg(long, value_name = "concurrency|window", value_parser = parse_curve_by)]
    curve_by: Option<CurveBy>,
    /// The counting window of --curve-by window.
    #[arg(long, value_name = "DURATION", value_parser = crate::parse_positive_duration)]
    window: Option<Nanos>,
    /// How each request's work time spreads around its nominal value: constant, uniform
    /// (+-jitter) or exponential.
    #[arg(long, value_name = "constant|uniform|exponential", value_parser = parse_spread)]
    spread: Option<Spread>,
    /// Half-width of the uniform spread, a fraction below 1 [default: 0.2].
    #[arg(long, value_name = "F", value_parser = parse_non_negative)]
    jitter: Option<NonNegative>,
    /// A capacity change of the pool, AT:workers=N,work=DURATION from the start, e.g.
    /// 60s:work=2s; repeat for a schedule (replaces the file's).
    #[arg(long = "change", value_name = "AT:KEY=VALUE,...", value_parser = parse_capacity_change)]
    changes: Vec<Change>,
    /// Identical instances, each with its own workers and listener.
    #[arg(long, value_name = "N", value_parser = parse_at_least_one)]
    instances: Option<NonZeroU32>,
    /// How the front listener spreads requests over the instances: round-robin or
    /// least-loaded (the fewest requests in the service).
    #[arg(long, value_name = "round-robin|least-loaded", value_parser = parse_balance)]
    balance: Option<Balance>,
    /// An RSocket-style static lease on each instance: ALLOWED requests per TTL (default
    /// 1s), refused with 503 beyond it, e.g. 100 or 100/1s.
    #[arg(long, value_name = "ALLOWED[/TTL]", value_parser = parse_lease)]
    lease: Option<StaticLeaseConfig>,
    /// Seed of the work-time spread.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Once a request's work is done, call this URL (the next hop of a chain, e.g. a proxy
    /// in front of other origins) with the request's tidegate-priority, and answer 200 only
    /// if it answered 2xx (502 otherwise); a tidegate-cutoff it says is honoured (requests
    /// it refuses are not sent: 503) and passed back on this origin's responses.
    ///
    /// Repeat, or give a comma-separated list, for a next hop of several instances (e.g.
    /// all of its proxies): they are called round-robin, and the deepest cut-off any of them
    /// said holds for every call until it lapses, and is the one passed back.
    #[arg(long, value_name = "URL", value_parser = parse_call, value_delimiter = ',')]
    call: Vec<http::Uri>,
    /// With --call: ignore the next hop's tidegate-cutoff (send everything, pass nothing
    /// on), for a chain without the feedback to compare with.
    #[arg(long, requires = "call")]
    ignore_cutoff: bool,
    /// Keep the stamps of the proxies in front (tidegate-peer) and say their means on every
    /// response (tidegate-peers), so that they hold the same limit and drop ratio
    /// (docs/peers.md).
    ///
    /// A board per listener, each stamp kept 1 s (the proxies' default [peers] ttl).
    /// Malformed stamps are ignored and counted in /metrics
    /// (tidegate_origin_peers_header_invalid_total).
    #[arg(long)]
    peers: bool,
}

fn parse_call(s: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if uri.scheme_str() != Some("http") || uri.authority().is_none() {
        return Err(format!("{s:?}: expected http://HOST[:PORT]/PATH"));
    }
    Ok(uri)
}

/// The points of --delay-curve (a newtype: clap would take a bare `Vec` for a repeated flag).
#[derive(Debug, Clone)]
struct CurvePoints(Vec<(u32, Nanos)>);

fn parse_curve(s: &str) -> Result<CurvePoints, String> {
    parse_delay_curve(s)
        .map(CurvePoints)
        .map_err(|e| e.to_string())
}

fn parse_capacity_change(s: &str) -> Result<Change, String> {
    parse_change(s).map_err(|e| e.to_string())
}

/// A count that must be at least 1; clap's own parser would say "number would be zero for
/// non-zero type", which names neither the bound nor what to give.
fn parse_at_least_one(s: &str) -> Result<NonZeroU32, String> {
    s.trim()
        .parse::<u32>()
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| "expected a whole number of at least 1".to_owned())
}

fn parse_non_negative(s: &str) -> Result<NonNegative, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .and_then(NonNegative::new)
        .ok_or_else(|| "expected a finite number of at least 0".to_owned())
}

fn parse_curve_by(s: &str) -> Result<CurveBy, String> {
    match s {
        "concurrency" => Ok(CurveBy::Concurrency),
        "window" => Ok(CurveBy::Window),
        _ => Err("expected concurrency or window".to_owned()),
    }
}

fn parse_spread(s: &str) -> Result<Spread, String> {
    match s {
        "constant" => Ok(Spread::Constant),
        "uniform" => Ok(Spread::Uniform),
        "exponential" => Ok(Spread::Exponential),
        _ => Err("expected constant, uniform or exponential".to_owned()),
    }
}

fn parse_balance(s: &str) -> Result<Balance, String> {
    match s {
        "round-robin" => Ok(Balance::RoundRobin),
        "least-loaded" => Ok(Balance::LeastLoaded),
        _ => Err("expected round-robin or least-loaded".to_owned()),
    }
}

fn parse_lease(s: &str) -> Result<StaticLeaseConfig, String> {
    let (allowed, ttl) = s.split_once('/').unwrap_or((s, "1s"));
    let allowed = allowed
        .trim()
        .parse::<u32>()
        .ok()
        .and_then(NonZeroU32::new)
        .ok_or_else(|| "expected ALLOWED[/TTL], ALLOWED at least 1, e.g. 100/1s".to_owned())?;
    let ttl = crate::parse_positive_duration(ttl)?;
    Ok(StaticLeaseConfig { allowed, ttl })
}

/// A service the model refuses is a usage error: reported as clap does, exit code 2.
fn usage_error(msg: impl std::fmt::Display) -> ! {
    let mut cli = crate::Cli::command();
    cli.build();
    let mut origin = cli.find_subcommand("origin").cloned().unwrap_or(cli);
    origin
        .error(ErrorKind::ValueValidation, msg.to_string())
        .exit()
}

impl OriginArgs {
    /// The file's service with the flags applied over it.
    fn service(&self) -> anyhow::Result<ServiceConfig> {
        let mut service = match &self.scenario {
            Some(path) => service_from_file(path)?,
            None => ServiceConfig::default(),
        };
        let pool_flag = [
            (self.workers.is_some(), "--workers"),
            (self.work.is_some(), "--work"),
            (self.queue.is_some(), "--queue"),
            (self.optimal.is_some(), "--optimal"),
            (self.contention.is_some(), "--contention"),
            (!self.changes.is_empty(), "--change"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag));
        if let Some(points) = &self.delay_curve {
            if let Some(flag) = pool_flag {
                usage_error(format!(
                    "--delay-curve makes a latency curve, which has no pool: {flag} does not apply"
                ));
            }
            service.kind = ServiceKind::Curve;
            service.curve.points.clone_from(&points.0);
        } else if pool_flag.is_some() {
            service.kind = ServiceKind::Pool;
        }
        let pool = &mut service.pool;
        if let Some(workers) = self.workers {
            pool.workers = workers;
        }
        if let Some(work) = self.work {
            pool.work = work;
        }
        pool.queue = self.queue.or(pool.queue);
        pool.optimal = self.optimal.or(pool.optimal);
        if let Some(contention) = self.contention {
            pool.contention = contention;
        }
        if let Some(by) = self.curve_by {
            service.curve.by = by;
        }
        if let Some(window) = self.window {
            service.curve.window = window;
        }
        if let Some(spread) = self.spread {
            service.spread = spread;
        }
        service.jitter = self.jitter.or(service.jitter);
        if !self.changes.is_empty() {
            service.changes.clone_from(&self.changes);
        }
        service.instances = self.instances.or(service.instances);
        if let Some(balance) = self.balance {
            service.balance = balance;
        }
        if let Err(e) = service.validate() {
            usage_error(e);
        }
        Ok(service)
    }
}

/// One line on what the origin serves.
fn describe(service: &ServiceConfig) -> String {
    let model = match service.kind {
        ServiceKind::Pool => {
            let p = &service.pool;
            let plural = if p.workers.get() == 1 { "" } else { "s" };
            let mut text = format!("pool of {} worker{plural}, {} of work", p.workers, p.work);
            if let Some(q) = p.queue {
                text.push_str(&format!(", queue {q}"));
            }
            if p.contention.get() > 0.0 {
                let optimal = p.optimal.unwrap_or(p.workers.get());
                text.push_str(&format!(", contention {} beyond {optimal}", p.contention));
            }
            if !service.changes.is_empty() {
                text.push_str(&format!(", {} capacity changes", service.changes.len()));
            }
            text
        }
        ServiceKind::Curve => {
            let points: Vec<String> = service
                .curve
                .points
                .iter()
                .map(|(x, l)| format!("{x}=>{l}"))
                .collect();
            let by = match service.curve.by {
                CurveBy::Concurrency => "concurrency".to_owned(),
                CurveBy::Window => format!("requests per {}", service.curve.window),
            };
            format!("latency curve {} by {by}", points.join(";"))
        }
    };
    match service.instances() {
        1 => model,
        n => format!("{n} instances, each a {model}"),
    }
}

pub(crate) fn origin(args: OriginArgs) -> anyhow::Result<()> {
    let service = args.service()?;
    let description = describe(&service);
    let config = OriginConfig {
        service,
        lease: args.lease.clone(),
        seed: args.seed,
        listen: args.listen,
        call: args.call.clone(),
        call_feedback: !args.ignore_cutoff,
        peers: args.peers.then(|| PeerConfig::default().ttl.into()),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate-origin")
        .build()
        .context("starting the tokio runtime")?;
    runtime.block_on(async {
        let origin = Origin::bind(config).await?;
        let mut out = std::io::stdout().lock();
        writeln!(out, "tidegate origin: {description}")?;
        writeln!(out, "listening on http://{}/", origin.addr())?;
        let instances = origin.instance_addrs();
        if instances.len() > 1 {
            for (i, addr) in instances.iter().enumerate() {
                writeln!(out, "instance {i} on http://{addr}/")?;
            }
        }
        writeln!(out, "metrics at http://{}{METRICS_PATH}", origin.addr())?;
        out.flush()?;
        drop(out);
        origin.run(stop_signal()).await?;
        anyhow::Ok(())
    })?;
    Ok(())
}

/// Completes on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let interrupt = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let terminate = async {
            match signal(SignalKind::terminate()) {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            () = interrupt => {}
            () = terminate => {}
        }
    }
    #[cfg(not(unix))]
    interrupt.await;
}

//! `tidegate load`: the open-loop load generator on the command line.

use std::io::{IsTerminal as _, Write as _};
use std::time::Duration;

use anyhow::Context as _;
use clap::error::ErrorKind;
use clap::{ArgGroup, Args, CommandFactory as _, ValueEnum};
use http::header::{HeaderName, HeaderValue};
use http::{HeaderMap, Method, Uri};
use tidegate_core::Nanos;
use tidegate_lab::load::{self, Arrivals, LoadConfig, LoadRetry, Progress, Schedule, TierMix};

/// Send HTTP requests on a schedule, whatever the responses do, and report per tier
///
/// Open loop: each request leaves at its scheduled time, on an idle keep-alive connection or
/// a new one, and its latency counts from that intended time, so a slow server cannot slow
/// the load down nor hide its delays (no coordinated omission). Give exactly one of --rate,
/// --ramp or --schedule.
///
/// Outcomes: ok (2xx, 3xx within --timeout), shed (429, 503), timed out (no complete
/// response within --timeout), errors (other statuses, refused or broken connections, by
/// kind), not sent (due while --max-inflight requests were outstanding). Latency
/// percentiles are of the ok responses.
///
/// Examples:
///   tidegate load http://127.0.0.1:8080/ --rate 500 --duration 30s
///   tidegate load http://127.0.0.1:8080/work --ramp 100..2000 --duration 2m --arrivals poisson
///   tidegate load http://127.0.0.1:8080/ --schedule 0s:150,10s:250,40s:150 --duration 1m \
///       --tiers 1:50,5:50 --cohort-keys 1000 --timeout 1s --json
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
#[command(group(ArgGroup::new("load").required(true).args(["rate", "ramp", "schedule"])))]
pub(crate) struct LoadArgs {
    /// The URL to request: http://HOST[:PORT]/PATH[?QUERY] (HTTP/1.1, no TLS).
    url: String,
    /// Requests per second, constant over the run.
    #[arg(long, value_name = "RPS", value_parser = parse_rate)]
    rate: Option<f64>,
    /// Requests per second going linearly from FROM to TO over the run, e.g. 100..2000.
    #[arg(long, value_name = "FROM..TO")]
    ramp: Option<String>,
    /// Phases, comma-separated: AT:RATE holds a rate from offset AT, AT:FROM..TO ramps until
    /// the next phase; the first at 0s, e.g. 0s:150,10s:250 or 0s:0..500,20s:500.
    #[arg(long, value_name = "AT:RATE,...")]
    schedule: Option<String>,
    /// How long to send: 500ms, 30s, 2m, ...
    #[arg(long, short = 'd', default_value = "30s", value_parser = crate::parse_positive_duration)]
    duration: Nanos,
    /// Spacing of the requests: constant (evenly spaced) or poisson (random, the rate as the
    /// mean).
    #[arg(long, default_value = "constant", value_name = "constant|poisson")]
    arrivals: Arrivals,
    /// How long each request may take, from its intended send time to the end of the
    /// response; later ones are abandoned and count as timed out.
    #[arg(long, default_value = "2s", value_parser = crate::parse_positive_duration)]
    timeout: Nanos,
    /// Tier mix in percent, sent in the tidegate-priority header: 1:50,5:50; a lone TIER
    /// sends every request at that tier. Default: no priority header.
    #[arg(long, value_name = "TIER:PERCENT,...")]
    tiers: Option<TierMix>,
    /// Number of distinct caller keys (0..N-1, drawn uniformly per request), sent in
    /// --key-header; a tidegate proxy maps them to cohorts. 0: no key header.
    #[arg(long, default_value_t = 0, value_name = "N")]
    cohort_keys: u32,
    /// Each caller key always sends the same tier (drawn from --tiers by the key, the same in
    /// every load), as a customer on a plan does; otherwise each request draws its tier.
    #[arg(long)]
    tier_by_key: bool,
    /// How refused (429, 503) and failed requests are retried, all attempts within --timeout:
    /// none; naive (at once, whatever Retry-After says, up to --attempts); budget (the
    /// library's default, as tidegate-tower's RetryLayer: backoff of 25 ms to 1 s with
    /// jitter, Retry-After honoured, retries at most 10% of requests plus 1 a second).
    #[arg(long, value_enum, default_value_t = RetryMode::None)]
    retry: RetryMode,
    /// Attempts in all per request (the first included) when retrying.
    #[arg(long, default_value_t = 3, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    attempts: u32,
    /// Write every attempt to FILE, one CSV line each: when it left (Unix seconds), the
    /// request's intended time, its attempt number, tier, key, outcome, status, the
    /// tidegate-shed reason and its latency.
    #[arg(long, value_name = "FILE")]
    attempt_log: Option<std::path::PathBuf>,
    /// The header that carries the caller key.
    #[arg(long, default_value = load::DEFAULT_KEY_HEADER, value_name = "NAME")]
    key_header: HeaderName,
    /// An extra request header, NAME:VALUE; repeat for more.
    #[arg(long = "header", short = 'H', value_name = "NAME:VALUE", value_parser = parse_header)]
    headers: Vec<(HeaderName, HeaderValue)>,
    /// The request method.
    #[arg(long, short = 'X', default_value = "GET")]
    method: Method,
    /// Bytes of request body to send (zeros).
    #[arg(long, default_value_t = 0, value_name = "BYTES")]
    body_size: usize,
    /// Most requests outstanding at once (each holds a connection); one due beyond this is
    /// not sent and is counted as not_sent.
    #[arg(long, default_value_t = 10_000, value_name = "N", value_parser = parse_max_inflight)]
    max_inflight: usize,
    /// Seed of the Poisson gaps, tier draws and key draws: the same seed sends the same
    /// requests at the same offsets.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Print the report as JSON on stdout (per tier, per second, statuses, errors).
    #[arg(long)]
    json: bool,
    /// A one-line live progress per second on stderr: auto (only on a terminal), always,
    /// never.
    #[arg(long, value_enum, default_value_t = ProgressMode::Auto)]
    progress: ProgressMode,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RetryMode {
    None,
    Naive,
    Budget,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum ProgressMode {
    Auto,
    Always,
    Never,
}

fn parse_rate(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 => Ok(r),
        _ => Err("expected requests per second, a positive number".to_owned()),
    }
}

fn parse_max_inflight(s: &str) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("expected a whole number of at least 1".to_owned()),
    }
}

fn parse_header(s: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = s
        .split_once(':')
        .ok_or_else(|| "expected NAME:VALUE, e.g. \"authorization:Bearer x\"".to_owned())?;
    let name = HeaderName::try_from(name.trim())
        .map_err(|_| format!("invalid header name {:?}", name.trim()))?;
    let value = HeaderValue::try_from(value.trim())
        .map_err(|_| format!("invalid value for header {name}"))?;
    Ok((name, value))
}

/// A bad combination of valid flags: reported as clap reports its own, with the usage of
/// `tidegate load`, exit code 2.
fn usage_error(msg: impl std::fmt::Display) -> ! {
    let mut cli = crate::Cli::command();
    cli.build();
    let mut load = cli.find_subcommand("load").cloned().unwrap_or(cli);
    load.error(ErrorKind::ValueValidation, msg.to_string())
        .exit()
}

impl LoadArgs {
    fn config(self) -> LoadConfig {
        let schedule = match (self.rate, &self.ramp, &self.schedule) {
            (Some(rate), _, _) => Schedule::constant(rate, self.duration),
            (_, Some(ramp), _) => Schedule::parse_ramp(ramp, self.duration),
            (_, _, Some(steps)) => Schedule::parse_steps(steps, self.duration),
            // clap's group requires one of the three.
            (None, None, None) => usage_error("give one of --rate, --ramp or --schedule"),
        }
        .unwrap_or_else(|e| usage_error(e));
        let url: Uri = self
            .url
            .parse()
            .unwrap_or_else(|e| usage_error(format!("invalid URL {:?}: {e}", self.url)));
        let mut headers = HeaderMap::new();
        for (name, value) in self.headers {
            headers.append(name, value);
        }
        LoadConfig {
            method: self.method,
            arrivals: self.arrivals,
            timeout: self.timeout,
            tiers: self.tiers.unwrap_or_default(),
            caller_keys: self.cohort_keys,
            tier_by_key: self.tier_by_key,
            retry: match self.retry {
                RetryMode::None => None,
                RetryMode::Naive => Some(LoadRetry::naive(self.attempts)),
                RetryMode::Budget => Some(LoadRetry::budgeted(self.attempts)),
            },
            attempt_log: self.attempt_log,
            key_header: self.key_header,
            headers,
            body_size: self.body_size,
            max_inflight: self.max_inflight,
            seed: self.seed,
            ..LoadConfig::new(url, schedule)
        }
    }
}

/// Prints one progress line a second: rates over the last second, then the totals.
#[derive(Debug)]
struct ProgressLine {
    terminal: bool,
    last: Option<Progress>,
}

impl ProgressLine {
    fn show(&mut self, p: &Progress) {
        let last = self.last.replace(*p);
        let per_s = |now: u64, before: fn(&Progress) -> u64| {
            now.saturating_sub(last.as_ref().map_or(0, before))
        };
        let line = format!(
            "{:>4}s  sent {}/s  ok {}/s  shed {}/s  timed out {}/s  errors {}/s  not sent {}/s  in flight {}",
            p.elapsed.as_secs(),
            per_s(p.sent, |l| l.sent),
            per_s(p.finished.ok, |l| l.finished.ok),
            per_s(p.finished.shed, |l| l.finished.shed),
            per_s(p.finished.timed_out, |l| l.finished.timed_out),
            per_s(p.finished.errors, |l| l.finished.errors),
            per_s(p.not_sent, |l| l.not_sent),
            p.inflight,
        );
        let mut err = std::io::stderr().lock();
        // Progress is best effort: a closed stderr must not stop the run.
        let _ = if self.terminal {
            // Overwrite the line in place: carriage return, clear to the end of the line.
            write!(err, "\r{line}\x1b[K")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.terminal && self.last.is_some() {
            let _ = write!(std::io::stderr(), "\r\x1b[K");
        }
    }
}

pub(crate) fn load(args: LoadArgs) -> anyhow::Result<()> {
    let terminal = std::io::stderr().is_terminal();
    let show_progress = match args.progress {
        ProgressMode::Auto => terminal,
        ProgressMode::Always => true,
        ProgressMode::Never => false,
    };
    let json = args.json;
    let config = args.config();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .thread_name("tidegate-load")
        .build()
        .context("starting the tokio runtime")?;
    let mut line = ProgressLine {
        terminal,
        last: None,
    };
    let url = config.url.to_string();
    let (give_up, gave_up) = tokio::sync::oneshot::channel::<()>();
    let mut give_up = Some(give_up);
    let report = runtime.block_on(async {
        // Ctrl-C stops sending; the report covers what was sent, after the requests in
        // flight end (within the timeout). So does an address where nothing answers.
        let interrupted = async {
            let ctrl_c = async {
                if tokio::signal::ctrl_c().await.is_err() {
                    std::future::pending::<()>().await;
                }
            };
            tokio::select! {
                () = ctrl_c => {}
                Ok(()) = gave_up => {}
            }
        };
        load::run_observed(config, interrupted, |p| {
            if show_progress {
                line.show(p);
            }
            if nobody_there(p)
                && let Some(give_up) = give_up.take()
            {
                let _ = give_up.send(());
            }
        })
        .await
    });
    line.finish();
    let report = report.context("running the load")?;
    // Let the runtime's connections close without waiting on them.
    runtime.shutdown_timeout(Duration::from_millis(100));
    if json {
        println!("{}", report.to_json());
    } else {
        print!("{report}");
    }
    match nothing_answered(&report, &url) {
        Some(why) => Err(anyhow::anyhow!(why)),
        None => Ok(()),
    }
}

/// Whether every request that has ended so far failed to reach anything that speaks HTTP
/// (refused, unreachable, reset before a status): then the rest of the run would only repeat
/// it, and the run stops. Timeouts are not a reason: a service that is slow now may answer
/// later, and measuring that is what the load is for.
fn nobody_there(p: &Progress) -> bool {
    let f = &p.finished;
    f.errors > 0 && f.answered == 0 && f.ok == 0 && f.shed == 0 && f.timed_out == 0
}

/// What to say when no request of the run got an HTTP response: which address, and what
/// became of the requests instead.
fn nothing_answered(report: &load::Report, url: &str) -> Option<String> {
    if !report.statuses.is_empty() || report.total.sent == 0 {
        return None;
    }
    let mut what: Vec<String> = report
        .errors
        .iter()
        .map(|(kind, n)| format!("{n} {}", kind.as_str()))
        .collect();
    if report.total.timed_out > 0 {
        what.push(format!("{} timed out", report.total.timed_out));
    }
    let stopped = if report.stopped_early {
        format!(", stopped after {:.1} s", report.elapsed_s)
    } else {
        String::new()
    };
    Some(format!(
        "nothing answered at {url}: {} requests sent, {}{stopped}",
        report.total.sent,
        what.join(", ")
    ))
}

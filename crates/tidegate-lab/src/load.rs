//! An open-loop HTTP load generator: requests leave at the times a schedule says, whatever
//! the responses do, and each latency counts from the time its request was *meant* to leave.
//!
//! Closed-loop tools (a fixed set of connections each waiting for its response before the
//! next request) slow down when the server does, so an overloaded server sees less load than
//! intended and the tool reports latencies of requests it merely postponed: Gil Tene's
//! "coordinated omission". Overload control is judged precisely where that hides the damage,
//! so here:
//!
//! - a dedicated dispatcher thread computes each request's intended send time from the
//!   [`Schedule`] and spawns it on the tokio runtime at that time (an OS thread sleeps with
//!   microsecond precision; tokio's timer has a granularity of a millisecond, too coarse at
//!   5,000 requests per second);
//! - a request never waits for a connection: it takes an idle keep-alive connection or opens
//!   a new one, up to `max_inflight` requests outstanding; one due beyond that is counted as
//!   *not sent*, never silently dropped nor delayed;
//! - latency and the timeout run from the intended send time, so a late dispatcher, a slow
//!   connect or a full accept queue all show up in the figures;
//! - the dispatcher's own lateness is measured and reported (`dispatch_lag_ms`), so a run on
//!   an overloaded machine says so.
//!
//! [`run`] takes a [`LoadConfig`] and returns a [`Report`]; the `tidegate load` command and
//! the lab's experiment runner both drive it. A scenario file's `[load]` section maps onto a
//! [`LoadConfig`]: its phases onto [`Phase`]s, its tier weights onto [`TierMix::new`], its
//! keys onto `caller_keys`.

mod attempt_log;
mod http;
mod mix;
mod report;
mod retry;
mod schedule;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use ::http::header::{HOST, HeaderName, HeaderValue};
use ::http::{HeaderMap, Method, Request, Uri};
use bytes::Bytes;
use http_body_util::Full;
use tidegate_core::Nanos;
use tidegate_core::rng::Rng;
use tokio::runtime::Handle;
use tokio::sync::{Notify, oneshot};

use self::attempt_log::{Attempt, AttemptLog};
use self::http::{Answer, Outcome, Pool};
pub use self::http::{ErrorKind, SHED_HEADER};
pub use self::mix::{MixError, TierMix};
use self::report::{Dispatched, Recorder};
pub use self::report::{
    Finished, Latency, Report, RunInfo, SecondReport, SteadyReport, TierReport,
};
pub use self::retry::LoadRetry;
use self::retry::Retrier;
pub use self::schedule::{ArrivalTimes, Arrivals, Phase, Schedule, ScheduleError};

/// The request header that carries a request's tier.
pub const PRIORITY_HEADER: &str = "tidegate-priority";
/// The default header for caller keys.
pub const DEFAULT_KEY_HEADER: &str = "x-caller-key";

/// What to send, where, and when.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// `http://host[:port]/path?query`; the host is resolved once, at the start.
    pub url: Uri,
    pub method: Method,
    /// Rates over time; the run lasts as long as the schedule.
    pub schedule: Schedule,
    pub arrivals: Arrivals,
    /// How long each request may take from its intended send time to the end of its response.
    pub timeout: Nanos,
    /// Tiers sent in the `tidegate-priority` header; empty: no header.
    pub tiers: TierMix,
    /// Distinct caller keys, drawn uniformly per request; 0: no key header.
    pub caller_keys: u32,
    /// Each caller key always sends the same tier (drawn from the mix by the key), as a
    /// customer on a plan does; otherwise each request draws its tier.
    pub tier_by_key: bool,
    pub key_header: HeaderName,
    /// Sent with every request.
    pub headers: HeaderMap,
    /// Bytes of request body (zeros); 0: no body.
    pub body_size: usize,
    /// Most requests outstanding at once (and so most connections open).
    pub max_inflight: usize,
    /// Seeds the arrivals (Poisson), the tier draws and the key draws.
    pub seed: u64,
    /// If given, the report also counts apart the requests intended from this offset on
    /// ([`Report::steady`]): the steady state after a warm-up, as a simulator reports it.
    pub steady_from: Option<Nanos>,
    /// How refused and failed requests are retried; `None`: never.
    pub retry: Option<LoadRetry>,
    /// A file to write every attempt to, one CSV line each (`attempt_log`'s columns).
    pub attempt_log: Option<PathBuf>,
}

impl LoadConfig {
    /// A GET of `url` on `schedule` with the defaults: constant arrivals, a 2 s timeout, no
    /// priority or key headers, at most 10,000 requests in flight, seed 1.
    pub fn new(url: Uri, schedule: Schedule) -> LoadConfig {
        LoadConfig {
            url,
            method: Method::GET,
            schedule,
            arrivals: Arrivals::Constant,
            timeout: Nanos::from_secs(2),
            tiers: TierMix::none(),
            caller_keys: 0,
            tier_by_key: false,
            key_header: HeaderName::from_static(DEFAULT_KEY_HEADER),
            headers: HeaderMap::new(),
            body_size: 0,
            max_inflight: 10_000,
            seed: 1,
            steady_from: None,
            retry: None,
            attempt_log: None,
        }
    }

    /// The arrivals of this run in order, with their tiers and keys: what [`run`] sends.
    pub fn plan(&self) -> Plan {
        Plan {
            times: ArrivalTimes::new(self.schedule.clone(), self.arrivals, Rng::seed(self.seed)),
            tiers: self.tiers.clone(),
            tier_rng: Rng::seed(self.seed.wrapping_add(1)),
            caller_keys: self.caller_keys,
            tier_by_key: self.tier_by_key,
            key_rng: Rng::seed(self.seed.wrapping_add(2)),
        }
    }

    fn check(&self) -> Result<Target, LoadError> {
        if self.timeout.is_zero() {
            return Err(LoadError::Config(
                "the timeout must be longer than zero".to_owned(),
            ));
        }
        if self.max_inflight == 0 {
            return Err(LoadError::Config(
                "max_inflight must be at least 1".to_owned(),
            ));
        }
        Target::parse(&self.url)
    }
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid URL {url:?}: {reason}")]
    Url { url: String, reason: String },
    #[error("cannot resolve {host}: {source}")]
    Resolve {
        host: String,
        source: std::io::Error,
    },
    #[error("{0}")]
    Config(String),
    #[error("cannot start the dispatcher thread: {0}")]
    Thread(std::io::Error),
    #[error("cannot create a latency histogram: {0}")]
    Histogram(#[from] hdrhistogram::CreationError),
    #[error("the dispatcher thread ended without a result")]
    Dispatcher,
    #[error("cannot write the attempts file {path:?}: {source}")]
    AttemptLog {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// One request of a run: when it is due, at which tier, from which caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    /// Since the start of the run.
    pub offset: Nanos,
    /// Index into the mix's tiers (0 without a mix).
    pub slot: usize,
    pub key: Option<u32>,
}

/// The arrivals of a run, deterministic from its seed.
#[derive(Debug, Clone)]
pub struct Plan {
    times: ArrivalTimes,
    tiers: TierMix,
    tier_rng: Rng,
    caller_keys: u32,
    tier_by_key: bool,
    key_rng: Rng,
}

impl Iterator for Plan {
    type Item = Arrival;
    fn next(&mut self) -> Option<Arrival> {
        let offset = self.times.next()?;
        let key = (self.caller_keys > 0).then(|| {
            let last = i64::from(self.caller_keys) - 1;
            // In 0..caller_keys, so the conversion back cannot fail.
            u32::try_from(self.key_rng.range_inclusive(0, last)).unwrap_or(0)
        });
        let slot = match key {
            // The key's own draw, the same whatever the seed: loads with different seeds
            // (one per proxy) give a key the same tier.
            Some(key) if self.tier_by_key => self.tiers.draw(&mut Rng::seed(u64::from(key))),
            _ => self.tiers.draw(&mut self.tier_rng),
        };
        Some(Arrival { offset, slot, key })
    }
}

/// The address to connect to and what goes in every request's start line and Host header.
#[derive(Debug, Clone)]
struct Target {
    host: String,
    port: u16,
    authority: HeaderValue,
    path: Uri,
}

impl Target {
    fn parse(url: &Uri) -> Result<Target, LoadError> {
        let bad = |reason: &str| LoadError::Url {
            url: url.to_string(),
            reason: reason.to_owned(),
        };
        match url.scheme_str() {
            Some("http") => {}
            Some("https") => return Err(bad("https is not supported; use http://")),
            Some(_) => return Err(bad("the scheme must be http://")),
            None => return Err(bad("expected http://HOST[:PORT]/PATH")),
        }
        let authority = url.authority().ok_or_else(|| bad("it has no host"))?;
        let path = url
            .path_and_query()
            .map_or_else(|| "/".to_owned(), ToString::to_string);
        Ok(Target {
            host: authority.host().to_owned(),
            port: authority.port_u16().unwrap_or(80),
            authority: HeaderValue::from_str(authority.as_str())
                .map_err(|_| bad("the host is not a valid header value"))?,
            path: path.parse().map_err(|_| bad("invalid path"))?,
        })
    }

    async fn resolve(&self) -> Result<Vec<SocketAddr>, LoadError> {
        // `lookup_host` wants IPv6 literals without their brackets.
        let host = self.host.trim_start_matches('[').trim_end_matches(']');
        let resolve_error = |source| LoadError::Resolve {
            host: self.host.clone(),
            source,
        };
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, self.port))
            .await
            .map_err(resolve_error)?
            .collect();
        if addrs.is_empty() {
            return Err(resolve_error(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                "no address",
            )));
        }
        Ok(addrs)
    }
}

/// A snapshot for a live progress display, taken once a second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    pub elapsed: Duration,
    /// Requests sent so far.
    pub sent: u64,
    pub not_sent: u64,
    pub finished: Finished,
    pub inflight: usize,
}

/// What the request tasks share.
#[derive(Debug)]
struct Shared {
    pool: Pool,
    method: Method,
    path: Uri,
    /// Host, the user's headers.
    headers: HeaderMap,
    /// Per tier slot; empty without a mix.
    priority_values: Vec<HeaderValue>,
    /// The tier of each slot; empty without a mix.
    tiers: Vec<u8>,
    retrier: Option<Retrier>,
    attempt_log: Option<AttemptLog>,
    key_header: HeaderName,
    body: Bytes,
    timeout: Duration,
    recorder: Mutex<Recorder>,
    steady_from: Option<Nanos>,
    inflight: AtomicUsize,
    sent: AtomicU64,
    not_sent: AtomicU64,
    /// Signalled when the last request in flight finishes.
    drained: Notify,
}

impl Shared {
    fn request(&self, arrival: &Arrival) -> Request<Full<Bytes>> {
        let mut request = Request::new(Full::new(self.body.clone()));
        *request.method_mut() = self.method.clone();
        *request.uri_mut() = self.path.clone();
        *request.headers_mut() = self.headers.clone();
        let headers = request.headers_mut();
        if let Some(priority) = self.priority_values.get(arrival.slot) {
            headers.insert(PRIORITY_HEADER, priority.clone());
        }
        if let Some(key) = arrival.key {
            headers.insert(self.key_header.clone(), HeaderValue::from(key));
        }
        request
    }

    fn recorder(&self) -> std::sync::MutexGuard<'_, Recorder> {
        self.recorder.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One attempt at `arrival`'s request, within its deadline, written to the attempts file.
async fn attempt(shared: &Shared, arrival: &Arrival, number: u32, deadline: Instant) -> Answer {
    let (sent, started) = (SystemTime::now(), Instant::now());
    let request = shared.request(arrival);
    let answer = tokio::time::timeout_at(deadline.into(), shared.pool.exchange(request))
        .await
        .unwrap_or_else(|_| Outcome::TimedOut.into());
    if let Some(log) = &shared.attempt_log {
        log.write(&Attempt {
            sent,
            intended: arrival.offset,
            number,
            tier: shared.tiers.get(arrival.slot).copied(),
            key: arrival.key,
            outcome: answer.outcome,
            shed: answer.shed.as_ref(),
            took: started.elapsed(),
        });
    }
    answer
}

/// One request, from its intended send time to its outcome: its attempts, retried as the
/// load's [`LoadRetry`] says, all within the timeout.
async fn send(shared: Arc<Shared>, arrival: Arrival, intended: Instant) {
    let deadline = intended + shared.timeout;
    if let Some(retrier) = &shared.retrier {
        retrier.request(Instant::now());
    }
    let mut attempts = 0;
    let outcome = loop {
        attempts += 1;
        let answer = attempt(&shared, &arrival, attempts, deadline).await;
        let retry_after = match answer.outcome {
            Outcome::Shed { .. } => answer.retry_after,
            Outcome::Failed { .. } => None,
            Outcome::Ok { .. } | Outcome::TimedOut => break answer.outcome,
        };
        let wait = shared
            .retrier
            .as_ref()
            .and_then(|retrier| retrier.next_wait(attempts, retry_after, Instant::now(), deadline));
        match wait {
            Some(wait) => tokio::time::sleep(wait).await,
            None => break answer.outcome,
        }
    };
    let latency = intended.elapsed();
    // The timer may fire a little late; a response past the timeout is not goodput.
    let outcome = match outcome {
        Outcome::Ok { .. } if latency > shared.timeout => Outcome::TimedOut,
        other => other,
    };
    let whole_seconds = |nanos: u64| usize::try_from(nanos / 1_000_000_000).unwrap_or(usize::MAX);
    let second = whole_seconds(arrival.offset.as_nanos());
    let answered = whole_seconds(
        arrival
            .offset
            .as_nanos()
            .saturating_add(u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX)),
    );
    let steady = shared
        .steady_from
        .is_some_and(|from| arrival.offset >= from);
    let mut recorder = shared.recorder();
    recorder.record(arrival.slot, (second, answered), steady, outcome, latency);
    recorder.retried(attempts - 1);
    drop(recorder);
    if shared.inflight.fetch_sub(1, Ordering::AcqRel) == 1 {
        shared.drained.notify_waiters();
    }
}

/// The dispatcher thread's state: sleeps until each arrival's intended time and spawns its
/// request on the runtime.
#[derive(Debug)]
struct Dispatcher {
    plan: Plan,
    slots: usize,
    shared: Arc<Shared>,
    max_inflight: usize,
    runtime: Handle,
    start: Instant,
    end: Instant,
    stop: mpsc::Receiver<()>,
}

impl Dispatcher {
    /// Sleeps until `until`; false when told to stop first.
    fn wait_until(&self, until: Instant) -> bool {
        loop {
            let now = Instant::now();
            if now >= until {
                return matches!(self.stop.try_recv(), Err(mpsc::TryRecvError::Empty));
            }
            match self.stop.recv_timeout(until - now) {
                Err(RecvTimeoutError::Timeout) => {}
                Ok(()) | Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    fn run(mut self) -> Dispatched {
        let mut d = Dispatched {
            offered: vec![0; self.slots],
            not_sent: vec![0; self.slots],
            seconds: Vec::new(),
            steady_offered: vec![0; self.slots],
            steady_not_sent: vec![0; self.slots],
            steady_from: self.shared.steady_from.map(Duration::from),
            lag: self.shared.recorder().lag_histogram(),
            elapsed: Duration::ZERO,
            stopped_early: false,
        };
        while let Some(arrival) = self.plan.next() {
            let intended = self.start + Duration::from(arrival.offset);
            if !self.wait_until(intended) {
                d.stopped_early = true;
                break;
            }
            let lag = intended.elapsed().as_micros();
            d.lag
                .saturating_record(u64::try_from(lag).unwrap_or(u64::MAX));
            let second = usize::try_from(arrival.offset.as_nanos() / 1_000_000_000).unwrap_or(0);
            if d.seconds.len() <= second {
                d.seconds.resize(second + 1, (0, 0));
            }
            let steady = self
                .shared
                .steady_from
                .is_some_and(|from| arrival.offset >= from);
            d.offered[arrival.slot] += 1;
            d.steady_offered[arrival.slot] += u64::from(steady);
            d.seconds[second].0 += 1;
            // Only this thread adds to `inflight`, so the bound holds without a race.
            if self.shared.inflight.load(Ordering::Acquire) >= self.max_inflight {
                d.not_sent[arrival.slot] += 1;
                d.steady_not_sent[arrival.slot] += u64::from(steady);
                d.seconds[second].1 += 1;
                self.shared.not_sent.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.shared.inflight.fetch_add(1, Ordering::AcqRel);
            self.shared.sent.fetch_add(1, Ordering::Relaxed);
            self.runtime
                .spawn(send(Arc::clone(&self.shared), arrival, intended));
        }
        // The run lasts the whole schedule, even when its last arrival comes earlier.
        if !d.stopped_early && !self.wait_until(self.end) {
            d.stopped_early = true;
        }
        let elapsed = self.start.elapsed();
        d.elapsed = if d.stopped_early {
            elapsed
        } else {
            elapsed.max(self.end - self.start)
        };
        d
    }
}

/// Runs the load to the end of its schedule, or until `cancel` completes, then waits for the
/// requests in flight (at most the timeout) and reports. Must be called within a tokio
/// runtime with the time and I/O drivers enabled.
pub async fn run(
    config: LoadConfig,
    cancel: impl Future<Output = ()>,
) -> Result<Report, LoadError> {
    run_observed(config, cancel, |_| {}).await
}

/// [`run`], calling `observe` once a second with the progress so far.
pub async fn run_observed(
    config: LoadConfig,
    cancel: impl Future<Output = ()>,
    mut observe: impl FnMut(&Progress),
) -> Result<Report, LoadError> {
    let target = config.check()?;
    let addrs = target.resolve().await?;
    let tiers = config.tiers.tiers();
    let slots = tiers.len().max(1);
    let mut headers = config.headers.clone();
    headers.insert(HOST, target.authority.clone());
    let priority_values = tiers
        .iter()
        .map(|&t| HeaderValue::from(u16::from(t)))
        .collect();
    let attempt_log = config
        .attempt_log
        .as_deref()
        .map(AttemptLog::create)
        .transpose()?;
    let start = Instant::now();
    let shared = Arc::new(Shared {
        pool: Pool::new(addrs),
        method: config.method.clone(),
        path: target.path.clone(),
        headers,
        priority_values,
        tiers: tiers.clone(),
        retrier: config
            .retry
            .as_ref()
            .map(|retry| Retrier::new(retry, config.seed.wrapping_add(3), start)),
        attempt_log,
        key_header: config.key_header.clone(),
        body: Bytes::from(vec![0u8; config.body_size]),
        timeout: config.timeout.into(),
        recorder: Mutex::new(Recorder::new(slots, config.steady_from.is_some())?),
        steady_from: config.steady_from,
        inflight: AtomicUsize::new(0),
        sent: AtomicU64::new(0),
        not_sent: AtomicU64::new(0),
        drained: Notify::new(),
    });

    let (stop_tx, stop_rx) = mpsc::channel();
    let (done_tx, mut done_rx) = oneshot::channel();
    let end = start + Duration::from(config.schedule.duration());
    let dispatcher = Dispatcher {
        plan: config.plan(),
        slots,
        shared: Arc::clone(&shared),
        max_inflight: config.max_inflight,
        runtime: Handle::current(),
        start,
        end,
        stop: stop_rx,
    };
    std::thread::Builder::new()
        .name("tidegate-load-dispatch".to_owned())
        .spawn(move || {
            let _ = done_tx.send(dispatcher.run());
        })
        .map_err(LoadError::Thread)?;

    let progress = |shared: &Shared| Progress {
        elapsed: start.elapsed(),
        sent: shared.sent.load(Ordering::Relaxed),
        not_sent: shared.not_sent.load(Ordering::Relaxed),
        finished: shared.recorder().finished(),
        inflight: shared.inflight.load(Ordering::Relaxed),
    };
    let mut ticker = tokio::time::interval_at(
        tokio::time::Instant::from_std(start + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut cancel = std::pin::pin!(cancel);
    let mut cancelled = false;
    let dispatched = loop {
        tokio::select! {
            d = &mut done_rx => break d,
            () = &mut cancel, if !cancelled => {
                cancelled = true;
                let _ = stop_tx.send(());
            }
            _ = ticker.tick() => observe(&progress(&shared)),
        }
    };
    let Ok(dispatched) = dispatched else {
        return Err(LoadError::Dispatcher);
    };
    // Every request in flight ends by its timeout.
    loop {
        let drained = shared.drained.notified();
        let mut drained = std::pin::pin!(drained);
        drained.as_mut().enable();
        if shared.inflight.load(Ordering::Acquire) == 0 {
            break;
        }
        tokio::select! {
            () = drained => {}
            _ = ticker.tick() => observe(&progress(&shared)),
        }
    }
    if let Some(log) = &shared.attempt_log {
        log.finish()?;
    }
    let recorder = std::mem::replace(&mut *shared.recorder(), Recorder::new(slots, false)?);
    let run = RunInfo {
        url: config.url.to_string(),
        method: config.method.to_string(),
        arrivals: config.arrivals.to_string(),
        schedule: config.schedule.to_string(),
        duration_s: config.schedule.duration().as_secs_f64(),
        timeout_ms: config.timeout.as_millis_f64(),
        tiers: config.tiers.to_string(),
        caller_keys: config.caller_keys,
        max_inflight: config.max_inflight,
        seed: config.seed,
    };
    Ok(Report::build(
        run,
        &tiers,
        recorder,
        dispatched,
        shared.pool.opened(),
    ))
}

//! The load generator against real origins on 127.0.0.1: its rate and latencies against a
//! fixed-latency origin, and each outcome class against an origin that produces it.
//!
//! The tests take turns (a shared lock): the accuracy test needs the machine's two cores to
//! itself, and the others are short.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tidegate_core::Nanos;
use tidegate_lab::load::{self, ErrorKind, LoadConfig, Schedule, TierMix};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// What the origin does with a request.
#[derive(Clone, Copy, Debug)]
struct Reply {
    delay: Duration,
    status: u16,
    shed_header: bool,
}

fn ok_after(delay: Duration) -> Reply {
    Reply {
        delay,
        status: 200,
        shed_header: false,
    }
}

/// What the origin saw.
#[derive(Debug, Default)]
struct Seen {
    requests: u64,
    by_priority: BTreeMap<String, u64>,
    keys: HashSet<String>,
    concurrent: u64,
    max_concurrent: u64,
    /// How long each request was held, from its arrival to its response (microseconds).
    held_us: Vec<u64>,
}

type Behavior = Arc<dyn Fn(&Request<Incoming>) -> Reply + Send + Sync>;

struct Origin {
    addr: SocketAddr,
    seen: Arc<Mutex<Seen>>,
}

impl Origin {
    async fn start(
        behavior: impl Fn(&Request<Incoming>) -> Reply + Send + Sync + 'static,
    ) -> Origin {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let behavior: Behavior = Arc::new(behavior);
        let origin_seen = Arc::clone(&seen);
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                stream.set_nodelay(true).expect("nodelay");
                let (seen, behavior) = (Arc::clone(&origin_seen), Arc::clone(&behavior));
                tokio::spawn(async move {
                    let service = service_fn(move |req: Request<Incoming>| {
                        let (seen, behavior) = (Arc::clone(&seen), Arc::clone(&behavior));
                        async move { Ok::<_, Infallible>(answer(req, &seen, &*behavior).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Origin { addr, seen }
    }

    fn url(&self) -> http::Uri {
        format!("http://{}/work?x=1", self.addr)
            .parse()
            .expect("url")
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, Seen> {
        self.seen.lock().expect("lock")
    }
}

async fn answer(
    req: Request<Incoming>,
    seen: &Mutex<Seen>,
    behavior: &(dyn Fn(&Request<Incoming>) -> Reply + Send + Sync),
) -> Response<Full<Bytes>> {
    let received = Instant::now();
    let reply = behavior(&req);
    {
        let mut s = seen.lock().expect("lock");
        s.requests += 1;
        let header = |name: &str| {
            req.headers()
                .get(name)
                .map(|v| v.to_str().unwrap_or("?").to_owned())
        };
        if let Some(priority) = header(load::PRIORITY_HEADER) {
            *s.by_priority.entry(priority).or_default() += 1;
        }
        if let Some(key) = header(load::DEFAULT_KEY_HEADER) {
            s.keys.insert(key);
        }
        s.concurrent += 1;
        s.max_concurrent = s.max_concurrent.max(s.concurrent);
    }
    if !reply.delay.is_zero() {
        tokio::time::sleep_until((received + reply.delay).into()).await;
    }
    {
        let mut s = seen.lock().expect("lock");
        s.concurrent -= 1;
        s.held_us
            .push(u64::try_from(received.elapsed().as_micros()).unwrap_or(u64::MAX));
    }
    let mut response = Response::new(Full::new(Bytes::from_static(b"done\n")));
    *response.status_mut() = StatusCode::from_u16(reply.status).expect("status");
    if reply.shed_header {
        response
            .headers_mut()
            .insert(load::SHED_HEADER, http::HeaderValue::from_static("pie"));
    }
    response
}

fn config(url: http::Uri, rate: f64, duration: Duration) -> LoadConfig {
    LoadConfig::new(
        url,
        Schedule::constant(rate, Nanos::from(duration)).expect("schedule"),
    )
}

async fn run(config: LoadConfig) -> load::Report {
    load::run(config, std::future::pending())
        .await
        .expect("run")
}

fn assert_adds_up(report: &load::Report) {
    for t in report.tiers.iter().chain([&report.total]) {
        assert_eq!(t.offered, t.sent + t.not_sent, "{t:?}");
        assert_eq!(t.sent, t.ok + t.shed + t.timed_out + t.errors, "{t:?}");
    }
    let sent: u64 = report.per_second.iter().map(|s| s.sent).sum();
    assert_eq!(sent, report.total.sent);
    for s in &report.per_second {
        assert_eq!(s.sent, s.ok + s.shed + s.timed_out + s.errors, "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_5000_rps_the_rate_is_within_1_percent_and_p50_within_1_ms() {
    let _turn = SERIAL.lock().await;
    const RATE: f64 = 5000.0;
    const DELAY: Duration = Duration::from_millis(10);
    let origin = Origin::start(|_| ok_after(DELAY)).await;
    let started = Instant::now();
    let report = run(config(origin.url(), RATE, Duration::from_secs(3))).await;
    let wall = started.elapsed();
    eprintln!("{report}");
    assert_adds_up(&report);
    let t = &report.total;
    assert_eq!(t.offered, 15_000);
    assert_eq!(t.ok, t.sent, "{report}");
    assert!(
        (t.send_rate - RATE).abs() <= RATE * 0.01,
        "send rate {} (elapsed {} s)",
        t.send_rate,
        report.elapsed_s
    );
    // Checked against the test's own clock and the origin's count.
    assert!(report.elapsed_s <= wall.as_secs_f64(), "{wall:?}");
    let seen = origin.seen();
    assert_eq!(seen.requests, t.sent);
    // The truth: how long the origin held each request. tokio's timer rounds its sleep up to
    // the next millisecond, and a busy machine wakes it later still, so the origin measures it
    // rather than trusting D.
    let mut held = seen.held_us.clone();
    held.sort_unstable();
    let held_p50_ms = held[held.len() / 2] as f64 / 1e3;
    let l = &t.latency_ms;
    eprintln!(
        "origin held p50 {held_p50_ms} ms; generator p50 {} ms",
        l.p50
    );
    assert!(held_p50_ms >= DELAY.as_secs_f64() * 1e3);
    assert!(
        l.p50 >= held_p50_ms && l.p50 - held_p50_ms <= 1.0,
        "p50 {} ms against the origin's {held_p50_ms} ms\n{report}",
        l.p50
    );
    assert!(l.max >= l.p999 && l.p999 >= l.p99 && l.p99 >= l.p90 && l.p90 >= l.p50);
    assert_eq!(report.per_second.len(), 3);
    assert!(report.per_second.iter().all(|s| s.offered == 5000));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_origin_shows_in_full_no_coordinated_omission() {
    let _turn = SERIAL.lock().await;
    // The origin answers nothing for its first 300 ms, then everything at once, then at once.
    // A closed-loop client would send a request per connection during the stall and report
    // one slow request each; open loop keeps sending, and every request sent in the stall
    // waits until its end: latencies spread evenly from 300 ms down to 0.
    const STALL: Duration = Duration::from_millis(300);
    let first = std::sync::OnceLock::new();
    let origin = Origin::start(move |_| {
        let release = *first.get_or_init(|| Instant::now() + STALL);
        ok_after(release.saturating_duration_since(Instant::now()))
    })
    .await;
    let report = run(config(origin.url(), 1000.0, Duration::from_secs(1))).await;
    assert_adds_up(&report);
    let t = &report.total;
    assert_eq!((t.sent, t.ok), (1000, 1000), "{report}");
    assert!(
        origin.seen().max_concurrent >= 250,
        "open loop kept sending"
    );
    // 300 of 1,000 requests waited, evenly from 300 ms to 0: 10% waited more than 200 ms,
    // 1% more than 290 ms, none more than the stall.
    let l = &t.latency_ms;
    assert!(
        (180.0..=240.0).contains(&l.p90),
        "p90 {} ms\n{report}",
        l.p90
    );
    assert!((280.0..=350.0).contains(&l.p99), "p99 {} ms", l.p99);
    assert!(l.max >= 295.0 && l.max <= 400.0, "max {} ms", l.max);
    // The per-second histograms keep two significant digits, the totals three.
    let second_p99 = report.per_second[0].p99_ms;
    assert!((second_p99 - l.p99).abs() <= l.p99 * 0.01, "{second_p99}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn responses_429_and_503_count_as_shed_and_others_by_kind() {
    let _turn = SERIAL.lock().await;
    // Tier 5 is shed by "tidegate", tier 4 gets a plain 429, tier 2 a 404, tier 1 passes.
    let origin = Origin::start(|req| {
        let tier = req.headers().get(load::PRIORITY_HEADER).cloned();
        let (status, shed_header) = match tier.as_ref().and_then(|v| v.to_str().ok()) {
            Some("5") => (503, true),
            Some("4") => (429, false),
            Some("2") => (404, false),
            Some("3") => (500, false),
            _ => (200, false),
        };
        Reply {
            delay: Duration::ZERO,
            status,
            shed_header,
        }
    })
    .await;
    let mut c = config(origin.url(), 400.0, Duration::from_millis(500));
    c.tiers = "1:20,2:20,3:20,4:20,5:20".parse().unwrap();
    let report = run(c).await;
    assert_adds_up(&report);
    let by_tier: HashMap<u8, &load::TierReport> =
        report.tiers.iter().map(|t| (t.tier.unwrap(), t)).collect();
    let t1 = by_tier[&1];
    assert_eq!((t1.ok, t1.shed, t1.errors), (t1.sent, 0, 0));
    let t2 = by_tier[&2];
    assert_eq!((t2.ok, t2.errors), (0, t2.sent));
    let t3 = by_tier[&3];
    assert_eq!((t3.ok, t3.errors), (0, t3.sent));
    let t4 = by_tier[&4];
    assert_eq!((t4.shed, t4.shed_by_tidegate), (t4.sent, 0));
    let t5 = by_tier[&5];
    assert_eq!((t5.shed, t5.shed_by_tidegate), (t5.sent, t5.sent));
    assert_eq!(report.errors[&ErrorKind::Status4xx], t2.sent);
    assert_eq!(report.errors[&ErrorKind::Status5xx], t3.sent);
    assert_eq!(report.statuses[&503], t5.sent);
    assert_eq!(report.statuses[&429], t4.sent);
    assert_eq!(report.total.goodput, t1.ok as f64 / report.elapsed_s);
    assert!(t1.sent > 25 && t5.sent > 25, "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_responses_time_out_and_their_connections_are_not_reused() {
    let _turn = SERIAL.lock().await;
    let origin = Origin::start(|_| ok_after(Duration::from_secs(3))).await;
    let mut c = config(origin.url(), 50.0, Duration::from_millis(400));
    c.timeout = Nanos::from_millis(100);
    let started = Instant::now();
    let report = run(c).await;
    assert_adds_up(&report);
    let t = &report.total;
    assert_eq!(t.sent, 20);
    assert_eq!((t.timed_out, t.ok), (20, 0), "{report}");
    // A connection with a request outstanding cannot carry another: each was closed.
    assert_eq!(report.connections_opened, 20);
    // The run waits for each request's timeout (the last ends at 0.49 s), not for the
    // origin's answers (3 s later).
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(report.statuses.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_an_error() {
    let _turn = SERIAL.lock().await;
    // A port that was just free: bound, then released.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}/").parse().unwrap();
    let report = run(config(url, 100.0, Duration::from_millis(300))).await;
    assert_adds_up(&report);
    assert_eq!(report.total.sent, 30);
    assert_eq!(report.total.errors, 30, "{report}");
    assert_eq!(report.errors[&ErrorKind::ConnectRefused], 30);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tier_mix_and_caller_keys_reach_the_origin_in_proportion() {
    let _turn = SERIAL.lock().await;
    let origin = Origin::start(|_| ok_after(Duration::ZERO)).await;
    let mut c = config(origin.url(), 2000.0, Duration::from_secs(1));
    c.tiers = "1:20,5:80".parse::<TierMix>().unwrap();
    c.caller_keys = 50;
    c.arrivals = load::Arrivals::Poisson;
    c.seed = 11;
    let report = run(c.clone()).await;
    assert_adds_up(&report);
    let seen = origin.seen();
    let tier1 = seen.by_priority.get("1").copied().unwrap_or(0);
    let tier5 = seen.by_priority.get("5").copied().unwrap_or(0);
    assert_eq!(tier1 + tier5, seen.requests);
    assert_eq!(report.tiers[0].sent, tier1);
    assert_eq!(report.tiers[1].sent, tier5);
    // 20% of about 2,000 has a standard deviation of about 18.
    let share = tier1 as f64 / seen.requests as f64;
    assert!((share - 0.2).abs() < 0.035, "tier 1 share {share}");
    let expected_keys: HashSet<String> = (0..50).map(|k| k.to_string()).collect();
    assert_eq!(seen.keys, expected_keys);
    // The same seed draws the same requests.
    let plan: Vec<_> = c.plan().collect();
    assert_eq!(plan.len() as u64, report.total.offered);
    assert_eq!(
        plan.iter().filter(|a| a.slot == 0).count() as u64,
        report.tiers[0].offered
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_inflight_bounds_the_outstanding_requests_and_counts_the_rest() {
    let _turn = SERIAL.lock().await;
    let origin = Origin::start(|_| ok_after(Duration::from_millis(300))).await;
    let mut c = config(origin.url(), 100.0, Duration::from_secs(1));
    c.max_inflight = 10;
    let report = run(c).await;
    assert_adds_up(&report);
    let t = &report.total;
    assert_eq!(t.offered, 100);
    // 10 go out, the next 20 find 10 outstanding, and so on: about 3 in 10 are sent.
    assert!(t.not_sent >= 50 && t.sent >= 10, "{report}");
    assert_eq!(t.ok, t.sent);
    let seen = origin.seen();
    assert_eq!(seen.requests, t.sent);
    assert!(seen.max_concurrent <= 10, "{}", seen.max_concurrent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_report_has_its_documented_shape() {
    let _turn = SERIAL.lock().await;
    let origin = Origin::start(|_| ok_after(Duration::from_millis(1))).await;
    let mut c = config(origin.url(), 200.0, Duration::from_millis(1500));
    c.tiers = "0:50,3:50".parse().unwrap();
    let report = run(c).await;
    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    for key in [
        "run",
        "elapsed_s",
        "stopped_early",
        "total",
        "tiers",
        "per_second",
    ] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["run"]["schedule"], "0s:200");
    assert_eq!(json["run"]["tiers"], "0:50,3:50");
    let total = &json["total"];
    for key in [
        "offered",
        "sent",
        "ok",
        "shed",
        "shed_by_tidegate",
        "timed_out",
        "errors",
        "not_sent",
        "send_rate",
        "goodput",
    ] {
        assert!(total[key].is_number(), "total.{key}: {total}");
    }
    for key in ["count", "mean", "p50", "p90", "p99", "p999", "max"] {
        assert!(total["latency_ms"][key].is_number(), "latency_ms.{key}");
    }
    assert_eq!(json["tiers"][1]["tier"], 3);
    assert!(total["tier"].is_null());
    assert_eq!(json["per_second"].as_array().unwrap().len(), 2);
    assert_eq!(json["per_second"][1]["second"], 1);
    assert_eq!(
        json["per_second"][0]["ok_by_tier"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(json["statuses"]["200"], report.total.ok);
    assert!(json["errors"].as_object().unwrap().is_empty());
    assert!(json["dispatch_lag_ms"]["p99"].is_number());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_stops_sending_and_reports_what_was_sent() {
    let _turn = SERIAL.lock().await;
    // The origin signals its 10th request; the run is cancelled on that signal.
    let (tenth, stopped) = oneshot::channel::<()>();
    let tenth = Mutex::new(Some(tenth));
    let count = std::sync::atomic::AtomicU64::new(0);
    let origin = Origin::start(move |_| {
        if count.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1 == 10
            && let Some(tx) = tenth.lock().unwrap().take()
        {
            let _ = tx.send(());
        }
        ok_after(Duration::ZERO)
    })
    .await;
    let c = config(origin.url(), 100.0, Duration::from_secs(30));
    let report = load::run(c, async {
        let _ = stopped.await;
    })
    .await
    .unwrap();
    assert!(report.stopped_early);
    assert_adds_up(&report);
    assert!((10..100).contains(&report.total.sent), "{report}");
    assert!(
        report.elapsed_s < 2.0,
        "a 30 s run stopped after about 0.1 s"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_are_refused_by_name() {
    let schedule = Schedule::constant(1.0, Nanos::from_secs(1)).unwrap();
    for (url, expected) in [
        ("https://127.0.0.1/", "https is not supported"),
        ("/just/a/path", "expected http://"),
        (
            "http://no-such-host.invalid/",
            "cannot resolve no-such-host.invalid",
        ),
    ] {
        let c = LoadConfig::new(url.parse().unwrap(), schedule.clone());
        let err = load::run(c, std::future::pending()).await.unwrap_err();
        assert!(err.to_string().contains(expected), "{url}: {err}");
    }
}

/// Tier 5 always refused by "tidegate", the others served.
async fn refusing_tier_5() -> Origin {
    Origin::start(|req| {
        let refused = req
            .headers()
            .get(load::PRIORITY_HEADER)
            .is_some_and(|v| v == "5");
        Reply {
            delay: Duration::ZERO,
            status: if refused { 503 } else { 200 },
            shed_header: refused,
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn naive_retries_multiply_the_attempts_and_each_is_logged() {
    let _turn = SERIAL.lock().await;
    let origin = refusing_tier_5().await;
    let path = std::env::temp_dir().join(format!("tidegate-attempts-{}.csv", std::process::id()));
    let mut c = config(origin.url(), 400.0, Duration::from_millis(500));
    c.tiers = "1:50,5:50".parse().unwrap();
    c.caller_keys = 40;
    c.tier_by_key = true;
    c.retry = Some(load::LoadRetry::naive(3));
    c.attempt_log = Some(path.clone());
    let report = run(c).await;
    assert_adds_up(&report);
    let tier5 = &report.tiers[1];
    assert!(tier5.sent > 20, "{report}");
    assert_eq!(tier5.shed, tier5.sent);
    assert_eq!(report.retries, 2 * tier5.sent);
    assert_eq!(origin.seen().requests, report.total.sent + report.retries);

    let log = std::fs::read_to_string(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    let mut lines = log.lines();
    assert_eq!(
        lines.next(),
        Some("sent_unix_s,intended_s,attempt,tier,key,outcome,status,shed,latency_ms")
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len() as u64, report.total.sent + report.retries);
    let mut tier_of_key: HashMap<&str, &str> = HashMap::new();
    for row in &rows {
        let (attempt, tier, key, outcome, status, shed) =
            (row[2], row[3], row[4], row[5], row[6], row[7]);
        // A key always sends the same tier.
        assert_eq!(*tier_of_key.entry(key).or_insert(tier), tier, "{row:?}");
        match tier {
            "5" => assert_eq!((outcome, status, shed), ("shed", "503", "pie"), "{row:?}"),
            _ => assert_eq!((attempt, outcome, status, shed), ("1", "ok", "200", "")),
        }
    }
    for attempt in ["1", "2", "3"] {
        let n = rows
            .iter()
            .filter(|r| r[3] == "5" && r[2] == attempt)
            .count();
        assert_eq!(n as u64, tier5.sent, "attempt {attempt}");
    }
    assert!(tier_of_key.len() > 30, "{}", tier_of_key.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_budget_keeps_retries_to_a_tenth_plus_its_floor() {
    let _turn = SERIAL.lock().await;
    let origin = refusing_tier_5().await;
    let mut c = config(origin.url(), 400.0, Duration::from_millis(500));
    c.tiers = "1:50,5:50".parse().unwrap();
    c.retry = Some(load::LoadRetry::budgeted(3));
    let report = run(c).await;
    assert_adds_up(&report);
    // 10% of about 200 requests, plus 1 a second over the budget's 10 s window.
    let most = report.total.sent / 10 + 10;
    assert!(
        report.retries > 0 && report.retries <= most,
        "{} retries of {} requests",
        report.retries,
        report.total.sent
    );
    assert_eq!(origin.seen().requests, report.total.sent + report.retries);
}

//! The mock origin over loopback: the pool's capacity, refusals, the delay curve, a capacity
//! change, work that outlives its client, instances and `/metrics`.
//!
//! Times are real (the origin's model runs on an OS thread's clock, which tokio's paused time
//! cannot drive), so every check is a bound with room for a busy machine on the late side:
//! a response can be late, never early, since the model decides when the work ends.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

mod common;

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt as _, Empty};
use hyper_util::rt::TokioIo;
use tidegate_core::Nanos;
use tidegate_lab::load::{self, LoadConfig, Schedule};
use tidegate_lab::origin::{OriginConfig, parse_change, parse_delay_curve, service_from_file};
use tidegate_model::NonNegative;
use tidegate_model::service::{CurveBy, PoolConfig, ServiceConfig, ServiceKind, Spread};

/// Late responses allowed on a busy machine.
const SLACK: Duration = Duration::from_millis(120);

fn pool(workers: u32, work: Nanos, queue: Option<u32>) -> ServiceConfig {
    ServiceConfig {
        spread: Spread::Constant,
        pool: PoolConfig {
            workers: NonZeroU32::new(workers).unwrap(),
            work,
            queue,
            ..PoolConfig::default()
        },
        ..ServiceConfig::default()
    }
}

async fn start(service: ServiceConfig) -> common::Running {
    common::start(OriginConfig::new(service, "127.0.0.1:0".parse().unwrap())).await
}

/// One GET on its own connection: status, body and how long it took.
async fn get(addr: SocketAddr, path: &str) -> (StatusCode, String, Duration) {
    let started = Instant::now();
    let stream = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("handshake");
    tokio::spawn(connection);
    let request = Request::get(path)
        .header("host", addr.to_string())
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.expect("response");
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .expect("body")
        .to_bytes();
    (
        status,
        String::from_utf8_lossy(&body).into_owned(),
        started.elapsed(),
    )
}

/// The value of a series of `/metrics`.
async fn metric(addr: SocketAddr, series: &str) -> f64 {
    let (status, text, _) = get(addr, "/metrics").await;
    assert_eq!(status, StatusCode::OK);
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {series} in\n{text}"))
}

/// Polls a metric until `done` holds, for at most `within`.
async fn wait_for(addr: SocketAddr, series: &str, done: impl Fn(f64) -> bool, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let value = metric(addr, series).await;
        if done(value) {
            return;
        }
        assert!(Instant::now() < deadline, "{series} stayed at {value}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn assert_between(d: Duration, low: Duration, what: &str) {
    assert!(
        d >= low && d <= low + SLACK,
        "{what}: {d:?}, expected {low:?} to {:?}",
        low + SLACK
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_serves_in_waves_of_its_workers() {
    let origin = start(pool(4, Nanos::from_millis(150), None)).await;
    let addr = origin.addr;
    let requests: Vec<_> = (0..12)
        .map(|_| tokio::spawn(async move { get(addr, "/work").await }))
        .collect();
    let mut latencies = Vec::new();
    for r in requests {
        let (status, body, took) = r.await.unwrap();
        assert_eq!((status, body.as_str()), (StatusCode::OK, "ok\n"));
        latencies.push(took);
    }
    latencies.sort();
    // Little's law: 4 workers at 150 ms serve 12 requests in three waves.
    for (k, wave) in latencies.chunks(4).enumerate() {
        for &took in wave {
            assert_between(took, Duration::from_millis(150 * (k as u64 + 1)), "wave");
        }
    }
    let series = |name: &str| format!("tidegate_origin_{name}{{instance=\"0\"}}");
    assert_eq!(metric(addr, &series("served_total")).await, 12.0);
    assert_eq!(metric(addr, &series("in_flight")).await, 0.0);
    assert_eq!(metric(addr, &series("workers")).await, 4.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_internal_queue_refuses_with_503_at_once() {
    let origin = start(pool(1, Nanos::from_millis(300), Some(2))).await;
    let addr = origin.addr;
    let requests: Vec<_> = (0..3)
        .map(|_| tokio::spawn(async move { get(addr, "/").await }))
        .collect();
    // One working, two queued: the queue is full.
    wait_for(
        addr,
        "tidegate_origin_queued{instance=\"0\"}",
        |v| v == 2.0,
        Duration::from_secs(2),
    )
    .await;
    let (status, body, took) = get(addr, "/").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("queue is full"), "{body}");
    assert!(
        took < Duration::from_millis(150),
        "refused at once: {took:?}"
    );
    for r in requests {
        assert_eq!(r.await.unwrap().0, StatusCode::OK);
    }
    let refused = metric(addr, "tidegate_origin_refused_total{instance=\"0\"}").await;
    assert_eq!(refused, 1.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_goodput_of_an_overloaded_pool_is_its_capacity() {
    // 5 workers at 50 ms: 100 rps at best; 150 rps offered, a queue of 5 refuses the rest.
    let origin = start(pool(5, Nanos::from_millis(50), Some(5))).await;
    let url = format!("http://{}/", origin.addr).parse().unwrap();
    let mut config = LoadConfig::new(url, Schedule::constant(150.0, Nanos::from_secs(2)).unwrap());
    config.timeout = Nanos::from_secs(1);
    let report = load::run(config, std::future::pending()).await.unwrap();
    let total = &report.total;
    assert!(
        (90.0..=110.0).contains(&total.goodput),
        "goodput {}",
        total.goodput
    );
    assert!(total.shed >= 60, "refused {}", total.shed);
    assert_eq!(total.shed_by_tidegate, 0, "the service's own refusals");
    assert_eq!(total.timed_out + total.errors, 0);
    // Served requests waited at most the queue (5 deep, one wave of 50 ms) and worked 50 ms.
    assert!(total.latency_ms.p50 >= 50.0, "{:?}", total.latency_ms);
    assert!(total.latency_ms.max <= 100.0 + SLACK.as_millis() as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_delay_curve_sets_each_latency_by_the_requests_in_its_window() {
    let mut service = ServiceConfig {
        kind: ServiceKind::Curve,
        spread: Spread::Constant,
        ..ServiceConfig::default()
    };
    service.curve.by = CurveBy::Window;
    service.curve.window = Nanos::from_secs(60);
    service.curve.points = parse_delay_curve("1=>20ms;3=>100ms;=>1s").unwrap();
    let origin = start(service).await;
    let mut latencies = Vec::new();
    for _ in 0..4 {
        latencies.push(get(origin.addr, "/").await.2);
    }
    // The 1st, 2nd, 3rd and 4th requests of the window: on the curve, then beyond its end.
    for (took, expected) in latencies.into_iter().zip([20, 60, 100, 1000]) {
        assert_between(took, Duration::from_millis(expected), "curve");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capacity_change_slows_the_work_started_after_it() {
    let mut service = pool(1, Nanos::from_millis(30), None);
    service.changes = vec![parse_change("400ms:work=200ms,workers=2").unwrap()];
    let origin = start(service).await;
    let addr = origin.addr;
    let (_, _, before) = get(addr, "/").await;
    assert_between(before, Duration::from_millis(30), "before the change");
    let work = "tidegate_origin_work_seconds{instance=\"0\"}";
    wait_for(addr, work, |v| v == 0.2, Duration::from_secs(3)).await;
    assert_eq!(
        metric(addr, "tidegate_origin_workers{instance=\"0\"}").await,
        2.0
    );
    let (_, _, after) = get(addr, "/").await;
    assert_between(after, Duration::from_millis(200), "after the change");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_goes_on_after_the_client_hangs_up() {
    let origin = start(pool(1, Nanos::from_millis(300), None)).await;
    let addr = origin.addr;
    let gave_up = tokio::time::timeout(Duration::from_millis(50), get(addr, "/")).await;
    assert!(gave_up.is_err(), "the client gave up");
    // The worker is still busy with the abandoned request: the next one waits for it.
    let (status, _, took) = get(addr, "/").await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        took >= Duration::from_millis(500),
        "waited for the abandoned work: {took:?}"
    );
    let abandoned = metric(addr, "tidegate_origin_abandoned_total{instance=\"0\"}").await;
    assert_eq!(abandoned, 1.0);
    assert_eq!(
        metric(addr, "tidegate_origin_served_total{instance=\"0\"}").await,
        2.0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_instance_has_its_own_listener_and_the_front_spreads_in_turn() {
    let mut service = pool(1, Nanos::from_millis(1), None);
    service.instances = NonZeroU32::new(3);
    service.jitter = NonNegative::new(0.0);
    let origin = start(service).await;
    assert_eq!(origin.instances.len(), 3);
    let (status, _, _) = get(origin.instances[2], "/").await;
    assert_eq!(status, StatusCode::OK);
    for _ in 0..3 {
        get(origin.addr, "/").await;
    }
    let arrived = |i: usize| format!("tidegate_origin_arrived_total{{instance=\"{i}\"}}");
    let addr = origin.addr;
    assert_eq!(metric(addr, &arrived(0)).await, 1.0);
    assert_eq!(metric(addr, &arrived(1)).await, 1.0);
    assert_eq!(metric(addr, &arrived(2)).await, 2.0);
}

#[test]
fn the_service_table_is_read_from_a_scenario_file() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scenarios/");
    let service = service_from_file(format!("{root}capacity-slow.toml").as_ref()).unwrap();
    assert_eq!(service.pool.workers.get(), 7);
    assert_eq!(service.pool.work, Nanos::from_secs(2));
    assert_eq!(service.pool.queue, Some(100));

    let dir = std::env::temp_dir().join(format!("tidegate-origin-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[service.pool]\nworkers = 2\nwrok = \"1s\"\n").unwrap();
    let err = service_from_file(&file).unwrap_err().to_string();
    assert!(err.contains("bad.toml") && err.contains("wrok"), "{err}");
    std::fs::write(&file, "seed = 1\n").unwrap();
    let err = service_from_file(&file).unwrap_err().to_string();
    assert!(err.contains("no [service] table"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

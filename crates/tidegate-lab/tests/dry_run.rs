//! The proxy in dry run, over real sockets, between the lab's load generator and its mock
//! origin: what an operator needs to trust it before letting it shed. Under light load it
//! would shed nothing; under overload it would shed at least the excess over the origin's
//! capacity, the least important tier first; and either way every request is answered by
//! the origin, none shed.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::net::SocketAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use serde_json::Value;
use tidegate_core::Nanos;
use tidegate_lab::load::{self, LoadConfig, Schedule, TierMix};
use tidegate_lab::origin::{Origin, OriginConfig};
use tidegate_model::service::{PoolConfig, ServiceConfig, Spread};
use tidegate_proxy::{Config, Proxy};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::sync::oneshot;

/// 4 workers at 20 ms: 200 requests a second at best.
const WORKERS: u32 = 4;
const WORK: Duration = Duration::from_millis(20);

/// Starts the origin and the proxy in front of it with `gate` (a TOML `[gate]` body) and
/// `mode = "dry-run"`; both stop when the returned senders drop.
async fn start(gate: &str) -> (SocketAddr, SocketAddr, [oneshot::Sender<()>; 2]) {
    let service = ServiceConfig {
        spread: Spread::Constant,
        pool: PoolConfig {
            workers: NonZeroU32::new(WORKERS).unwrap(),
            work: Nanos::from(WORK),
            ..PoolConfig::default()
        },
        ..ServiceConfig::default()
    };
    let origin = Origin::bind(OriginConfig::new(service, "127.0.0.1:0".parse().unwrap()))
        .await
        .unwrap();
    let text = format!(
        "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\nmode = \"dry-run\"\n\
         [[upstreams]]\nurl = \"http://{}\"\nname = \"origin\"\n{gate}",
        origin.addr()
    );
    let config = Config::parse(&text, "dry-run test").unwrap();
    let proxy = Proxy::bind(config).await.unwrap();
    let (listen, admin) = (proxy.local_addr(), proxy.admin_addr());
    let (stop_origin, origin_stopped) = oneshot::channel::<()>();
    let (stop_proxy, proxy_stopped) = oneshot::channel::<()>();
    tokio::spawn(origin.run(async {
        let _ = origin_stopped.await;
    }));
    tokio::spawn(proxy.run(async {
        let _ = proxy_stopped.await;
    }));
    (listen, admin, [stop_origin, stop_proxy])
}

/// `rate` requests a second for `seconds`, half tier 1 and half tier 5, with a timeout long
/// enough for the origin's own queue.
async fn load(listen: SocketAddr, rate: f64, seconds: u64) -> load::Report {
    let mut config = LoadConfig::new(
        format!("http://{listen}/").parse().unwrap(),
        Schedule::constant(rate, Nanos::from_secs(seconds)).unwrap(),
    );
    config.tiers = "1:50,5:50".parse::<TierMix>().unwrap();
    config.timeout = Nanos::from_secs(10);
    load::run(config, std::future::pending()).await.unwrap()
}

/// The body of a GET of `path` on the admin listener.
async fn get(admin: SocketAddr, path: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(admin).await.unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nhost: admin\r\nconnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (_, body) = answer.split_once("\r\n\r\n").unwrap();
    body.to_owned()
}

/// `/status` of the admin listener.
async fn status(admin: SocketAddr) -> Value {
    serde_json::from_str(&get(admin, "/status").await).unwrap()
}

/// The gate's `/status`, once nothing is in flight or queued in it (each request has
/// released what it held): within 10 s.
async fn settled_gate(admin: SocketAddr) -> Value {
    for _ in 0..1000 {
        let status = status(admin).await;
        let gate = status["upstreams"][0]["gates"][0].clone();
        if gate["inflight"] == 0 && gate["queued"] == 0 && gate["outstanding"] == 0 {
            assert_eq!(status["upstreams"][0]["mode"], "dry-run");
            return gate;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the gate still holds requests: {}", status(admin).await)
}

fn u(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("not a count: {value}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_light_load_the_default_gate_would_shed_nothing() {
    let (listen, admin, _stop) = start("").await;
    // 40 a second at 20 ms: about one in flight, a fifth of the capacity.
    let report = load(listen, 40.0, 2).await;
    let total = &report.total;
    assert_eq!(total.ok, total.sent, "{report}");
    let gate = settled_gate(admin).await;
    assert_eq!(u(&gate["would_shed"]["total"]), 0, "{gate}");
    // Every request went through the gate and released its permit with its outcome: the
    // limit learned from each.
    assert_eq!(u(&gate["requests"]["arrived"]), total.sent, "{gate}");
    assert_eq!(u(&gate["requests"]["ok"]), total.sent, "{gate}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_overload_it_would_shed_the_excess_lowest_tier_first_and_sheds_nothing() {
    // A gate that lets the origin's 4 workers work and queues 8, the more important first:
    // what it sheds depends only on the arrivals and the tiers.
    let gate = "[gate.limit]\nalgorithm = \"fixed\"\n[gate.limit.fixed]\nlimit = 4\n\
                [gate.regulator]\nalgorithm = \"off\"\n\
                [gate.queue]\ncapacity = 8\ntimeout = \"200ms\"\nwait_bound = inf\n";
    let (listen, admin, _stop) = start(gate).await;
    const RATE: f64 = 300.0;
    const SECONDS: u64 = 2;
    let report = load(listen, RATE, SECONDS).await;
    let total = &report.total;
    // Nothing was shed: the origin answered every request.
    assert_eq!(total.shed, 0, "{report}");
    assert_eq!(total.ok, total.sent, "{report}");
    let gate = settled_gate(admin).await;
    let would_shed = &gate["would_shed"];
    eprintln!("{report}\nwould shed: {would_shed}");
    // The excess over capacity: what was sent beyond 200 a second.
    let capacity = f64::from(WORKERS) / WORK.as_secs_f64() * report.elapsed_s;
    let excess = total.sent as f64 - capacity;
    assert!(excess > 100.0, "the load was no overload: {report}");
    assert!(
        u(&would_shed["total"]) as f64 >= excess,
        "would shed {would_shed} < the excess {excess:.0} ({report})"
    );
    let by_tier = &would_shed["by_tier"];
    let (tier1, tier5) = (u(&by_tier[1]), u(&by_tier[5]));
    assert!(tier5 > tier1, "tier 5 {tier5} before tier 1 {tier1}");
    assert_eq!(
        u(&would_shed["total"]),
        tier1 + tier5,
        "only tiers 1 and 5 were sent: {would_shed}"
    );
    // The same counts in /metrics.
    let metrics = get(admin, "/metrics").await;
    let scraped: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("tidegate_would_shed_total{gate=\"origin\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(scraped as u64, u(&would_shed["total"]), "{metrics}");
    // The gate's ledger: every arrival was decided, and every admitted one released.
    let requests = &gate["requests"];
    assert_eq!(u(&requests["arrived"]), total.sent, "{gate}");
    let decided = u(&requests["ok"])
        + u(&requests["dropped"])
        + u(&requests["rejected_queue_full"])
        + u(&requests["expired"])
        + u(&requests["cancelled_queued"])
        + u(&requests["cancelled_inflight"]);
    assert_eq!(decided, total.sent, "{gate}");
    assert_eq!(
        u(&requests["rejected_queue_full"]) + u(&requests["expired"]),
        u(&would_shed["total"]),
        "{gate}"
    );
}

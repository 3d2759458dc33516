//! Live reload over real sockets: under a steady stream of requests, an upstream added by a
//! reload starts receiving traffic, a removed one leaves, a bad file is refused with its reason
//! in `/status` while the proxy runs on, and no request is lost or fails on the way; a gate
//! that survives a reload keeps what it learned.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::*;
use http::{Request, StatusCode};
use tidegate_proxy::Config;
use tokio::sync::watch;

/// A configuration file naming `origins` as upstreams, both listeners on free ports.
fn write_config(path: &Path, origins: &[&Origin]) {
    let mut text = "listen = \"127.0.0.1:0\"\nadmin = \"127.0.0.1:0\"\n".to_owned();
    for origin in origins {
        text.push_str(&format!(
            "[[upstreams]]\nurl = \"{}\"\nname = \"{}\"\n",
            origin.url(),
            origin.name()
        ));
    }
    std::fs::write(path, text).unwrap();
}

fn temp_file(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tidegate-reload-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join("proxy.toml")
}

/// `POST /reload`: the status and the JSON answer.
async fn reload(proxy: &TestProxy) -> (StatusCode, serde_json::Value) {
    let request = Request::post(format!("http://{}/reload", proxy.admin))
        .body(empty())
        .unwrap();
    let response = send(&client(), request).await;
    let status = response.status();
    (status, serde_json::from_slice(response.body()).unwrap())
}

/// Clients sending one request after another, each on its own keep-alive connection, until
/// told to stop; they count the answers and fail on any that is not 200.
struct Traffic {
    sent: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Traffic {
    fn start(proxy: &TestProxy, clients: usize) -> Traffic {
        let sent = Arc::new(AtomicU64::new(0));
        let (stop, stopped) = watch::channel(false);
        let tasks = (0..clients)
            .map(|_| {
                let (sent, stopped, url) = (sent.clone(), stopped.clone(), proxy.url("/echo"));
                tokio::spawn(async move {
                    let client = client();
                    while !*stopped.borrow() {
                        let response =
                            send(&client, Request::get(&url).body(empty()).unwrap()).await;
                        assert_eq!(response.status(), StatusCode::OK, "{response:?}");
                        sent.fetch_add(1, Ordering::SeqCst);
                    }
                })
            })
            .collect();
        Traffic { sent, stop, tasks }
    }

    /// Stops the clients; the requests they sent, each answered 200.
    async fn stop(self) -> u64 {
        self.stop.send_replace(true);
        for task in self.tasks {
            within("the clients to stop", task).await.unwrap();
        }
        self.sent.load(Ordering::SeqCst)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_under_load_adds_and_removes_upstreams_and_loses_no_request() {
    let (a, b) = (Origin::start("a").await, Origin::start("b").await);
    let file = temp_file("load");
    write_config(&file, &[&a]);
    let source = file.clone();
    let proxy = TestProxy::start_with(Config::from_file(&file).unwrap(), move |proxy| {
        proxy.reload_from(move || Config::from_file(&source));
    })
    .await;
    let traffic = Traffic::start(&proxy, 4);
    eventually("traffic at a", || async { a.served() >= 50 }).await;

    // Add b: it starts receiving traffic.
    write_config(&file, &[&a, &b]);
    let (status, answer) = reload(&proxy).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["summary"]["added"], serde_json::json!(["b"]));
    assert_eq!(answer["summary"]["kept"], serde_json::json!(["a"]));
    eventually("traffic at b", || async { b.served() >= 50 }).await;

    // Remove a: the traffic goes on, to b alone.
    write_config(&file, &[&b]);
    let (status, answer) = reload(&proxy).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["summary"]["removed"], serde_json::json!(["a"]));
    let status = proxy.status().await;
    let names: Vec<_> = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].clone())
        .collect();
    assert_eq!(names, ["b"]);
    let at_b = b.served();
    eventually("more traffic at b", || async { b.served() >= at_b + 50 }).await;

    // A bad file: refused with its key and line, in the answer and in /status, and the
    // proxy runs on with b.
    std::fs::write(
        &file,
        "[[upstreams]]\nurl = \"http://127.0.0.1:1\"\ntimeout = \"1s\"\n",
    )
    .unwrap();
    let (status, answer) = reload(&proxy).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{answer}");
    let error = answer["error"].as_str().unwrap();
    assert!(
        error.contains("line 3") && error.contains("timeout"),
        "{error}"
    );
    let status = proxy.status().await;
    assert_eq!(status["reload"]["last"]["ok"], false, "{status}");
    assert_eq!(status["reload"]["last"]["error"], error, "{status}");
    assert_eq!(status["reload"]["applied"], 2);
    assert_eq!(status["reload"]["refused"], 1);
    assert_eq!(status["upstreams"][0]["name"], "b");
    let at_b = b.served();
    eventually("traffic at b after the refusal", || async {
        b.served() >= at_b + 50
    })
    .await;

    // Every request was answered 200 (the clients assert it), and each has exactly one
    // outcome, split between a and b: in the duration histogram (a's gate, removed, is no
    // longer in /metrics), and in b's two ledgers, which agree.
    let sent = traffic.stop().await;
    let metrics = proxy.metrics().await;
    let counted = |upstream: &str| {
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("upstream", upstream)],
        )
    };
    assert_eq!(counted("a") + counted("b"), sent as f64);
    assert_eq!(
        metrics.sum("tidegate_requests_total", &[("gate", "a")]),
        0.0
    );
    let at_b: f64 = ledgers_agree(&proxy, "b").await.values().sum();
    assert_eq!(at_b, counted("b"));
    assert_eq!(
        metrics.sum(
            "tidegate_request_duration_seconds_count",
            &[("class", "ok")]
        ),
        sent as f64
    );
    assert_eq!((a.served() + b.served()) as u64, sent);
    let _ = std::fs::remove_dir_all(file.parent().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gate_that_survives_a_reload_keeps_its_limit_and_counts() {
    let (a, b) = (Origin::start("a").await, Origin::start("b").await);
    let file = temp_file("keep");
    write_config(&file, &[&a]);
    // A limit that starts at 2 and grows while the clients keep it full: what the gate
    // learned shows in its limit.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str("[gate.limit]\nalgorithm = \"aimd\"\n[gate.limit.aimd]\n");
    text.push_str("initial_limit = 2\nmin_limit = 1\n[gate.queue]\nwait_bound = inf\n");
    std::fs::write(&file, text).unwrap();
    let source = file.clone();
    let proxy = TestProxy::start_with(Config::from_file(&file).unwrap(), move |proxy| {
        proxy.reload_from(move || Config::from_file(&source));
    })
    .await;
    let traffic = Traffic::start(&proxy, 8);
    eventually("traffic at a", || async { a.served() >= 300 }).await;
    let sent = traffic.stop().await;
    let before = proxy.gate("a").await;
    assert_eq!(before["requests"]["arrived"], sent);
    assert!(
        before["limit"].as_u64().unwrap() > 2,
        "nothing learned: {before}"
    );

    // A reload that adds b and changes a setting that needs a restart.
    let mut text = std::fs::read_to_string(&file).unwrap();
    text.push_str(&format!(
        "[[upstreams]]\nurl = \"{}\"\nname = \"b\"\n",
        b.url()
    ));
    text.push_str("[dashboard]\nhistory = 10\n");
    std::fs::write(&file, text).unwrap();
    let (status, answer) = reload(&proxy).await;
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(
        answer["summary"]["restart_needed"],
        serde_json::json!(["dashboard"])
    );

    // The same gate: its limit, its counts and its state, not a fresh one.
    let after = proxy.gate("a").await;
    for key in ["limit", "requests", "reject_ratio", "overloaded"] {
        assert_eq!(after[key], before[key], "{key}: {before} then {after}");
    }
    let fresh = proxy.gate("b").await;
    assert_eq!(fresh["requests"]["arrived"], 0);
    let _ = std::fs::remove_dir_all(file.parent().unwrap());
}

#[tokio::test]
async fn reload_needs_post_and_a_source() {
    let origin = Origin::start("a").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let (status, _) = get_text(&format!("http://{}/reload", proxy.admin)).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    let (status, answer) = reload(&proxy).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "{answer}");
    assert_eq!(proxy.status().await["reload"]["refused"], 1);
}

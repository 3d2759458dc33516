//! TLS over loopback, with certificates made at test time: the listener (ALPN, failed
//! handshakes, certificate reload, bad files at startup) and `https://` upstreams (verified,
//! with SNI).

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "tests: a failure is the test's failure"
)]

mod common;

use common::tls::{Files, TestCa, TlsOrigin};
use common::*;
use http::StatusCode;
use tidegate_core::Nanos;
use tidegate_proxy::{Config, Proxy, UpstreamConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A proxy for `origin` whose listener speaks TLS with `leaf`'s files in `files`.
fn tls_config(origin: &Origin, files: &Files, leaf: &common::tls::Leaf) -> Config {
    let mut config = config(&[origin]);
    let (certificate, key) = files.leaf(leaf);
    config.tls.certificate = Some(certificate);
    config.tls.key = Some(key);
    config
}

/// The proxy's sum of `name` over every label set with `labels`.
async fn metric(proxy: &TestProxy, name: &str, labels: &[(&str, &str)]) -> f64 {
    proxy.metrics().await.sum(name, labels)
}

#[tokio::test]
async fn clients_get_h2_or_http1_as_alpn_agrees() {
    let origin = Origin::start("a").await;
    let (ca, files) = (TestCa::new(), Files::new());
    let leaf = ca.leaf(&["localhost"]);
    let proxy = TestProxy::start(tls_config(&origin, &files, &leaf)).await;

    let mut h2 = common::tls::h2(proxy.addr, &ca).await;
    let (status, body) = common::tls::get_h2(&mut h2, "/status/200").await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "status"));
    assert_eq!(origin.last_seen().headers["via"], "2 tidegate");

    let mut http1 = common::tls::http1(proxy.addr, &ca).await;
    let request = http::Request::get("/status/200")
        .header("host", "localhost")
        .body(http_body_util::Full::default())
        .unwrap();
    let response = within("a response", http1.send_request(request))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(origin.last_seen().headers["via"], "1.1 tidegate");

    // Plain HTTP to a TLS listener is a failed handshake, not a request.
    let mut plain = TcpStream::connect(proxy.addr).await.unwrap();
    plain
        .write_all(b"GET / HTTP/1.1\r\nhost: a\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let _ = within(
        "the plain connection to close",
        plain.read_to_end(&mut answer),
    )
    .await;
    assert!(!answer.starts_with(b"HTTP/"), "{answer:?}");
    let failures = "tidegate_tls_handshake_failures_total";
    assert_eq!(metric(&proxy, failures, &[("reason", "error")]).await, 1.0);
    assert_eq!(origin.served(), 2);
}

#[tokio::test]
async fn failed_handshakes_are_counted_and_disturb_no_other_client() {
    let origin = Origin::start("a").await;
    let (ca, files) = (TestCa::new(), Files::new());
    let leaf = ca.leaf(&["localhost"]);
    let mut config = tls_config(&origin, &files, &leaf);
    config.connections.header_read_timeout = Nanos::from_millis(300);
    let proxy = TestProxy::start(config).await;
    let mut good = common::tls::h2(proxy.addr, &ca).await;

    // Garbage, a handshake cut short, and a client that never finishes its handshake, all
    // while the good client keeps asking.
    let addr = proxy.addr;
    let hostile = tokio::spawn(async move {
        let mut garbage = TcpStream::connect(addr).await.unwrap();
        garbage
            .write_all(&[0x16, 0x03, 0x01, 0xff, 0xff])
            .await
            .unwrap();
        // The proxy may have closed it already.
        let _ = garbage.write_all(&[0xab; 4096]).await;
        let mut cut = TcpStream::connect(addr).await.unwrap();
        // The start of a ClientHello record, then nothing more.
        let _ = cut.write_all(&[0x16, 0x03, 0x01, 0x00, 0x40, 0x01]).await;
        drop(cut);
        let silent = TcpStream::connect(addr).await.unwrap();
        (garbage, silent)
    });
    let mut answered = 0;
    let timeout = "tidegate_tls_handshake_failures_total";
    while metric(&proxy, timeout, &[("reason", "timeout")]).await < 1.0 {
        let (status, _) = common::tls::get_h2(&mut good, "/status/200").await;
        assert_eq!(status, StatusCode::OK);
        answered += 1;
        assert!(answered < 10_000, "the silent handshake never timed out");
    }
    let (mut garbage, _silent) = hostile.await.unwrap();
    let mut rest = Vec::new();
    let _ = within(
        "the garbage connection to close",
        garbage.read_to_end(&mut rest),
    )
    .await;
    eventually("both failed handshakes counted", || async {
        metric(&proxy, timeout, &[("reason", "error")]).await == 2.0
    })
    .await;
    // The good connection was served throughout, and still is.
    let (status, _) = common::tls::get_h2(&mut good, "/status/200").await;
    assert_eq!(status, StatusCode::OK);
    assert!(answered >= 1);
}

/// Sends this process SIGHUP (the proxy under test installed its handler when it started).
fn hangup() {
    let status = std::process::Command::new("kill")
        .args(["-HUP", &std::process::id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn the_certificate_is_reloaded_on_sighup_and_when_its_files_change() {
    let origin = Origin::start("a").await;
    let (ca, files) = (TestCa::new(), Files::new());
    let (first, second, third) = (
        ca.leaf(&["localhost"]),
        ca.leaf(&["localhost"]),
        ca.leaf(&["localhost"]),
    );
    let mut config = tls_config(&origin, &files, &first);
    config.tls.reload_interval = Nanos::ZERO;
    let proxy = TestProxy::start(config).await;
    let served = || common::tls::served_certificate(proxy.addr, &ca);
    assert_eq!(served().await, first.der);

    // New files: nothing changes until SIGHUP (the files are not watched).
    files.leaf(&second);
    assert_eq!(served().await, first.der);
    hangup();
    eventually("the second certificate served", || async {
        served().await == second.der
    })
    .await;
    let reloads = "tidegate_tls_reloads_total";
    assert!(metric(&proxy, reloads, &[("result", "ok")]).await >= 1.0);

    // A key that does not load keeps the certificate in force.
    files.write("key.pem", "not a key");
    hangup();
    eventually("the failed reload counted", || async {
        metric(&proxy, reloads, &[("result", "failed")]).await >= 1.0
    })
    .await;
    assert_eq!(served().await, second.der);
    let mut h2 = common::tls::h2(proxy.addr, &ca).await;
    assert_eq!(
        common::tls::get_h2(&mut h2, "/status/200").await.0,
        StatusCode::OK
    );

    // Watched files: a change is enough.
    let watched = Files::new();
    let mut config = tls_config(&origin, &watched, &first);
    config.tls.reload_interval = Nanos::from_millis(20);
    let proxy = TestProxy::start(config).await;
    assert_eq!(
        common::tls::served_certificate(proxy.addr, &ca).await,
        first.der
    );
    watched.leaf(&third);
    eventually("the changed files served", || async {
        common::tls::served_certificate(proxy.addr, &ca).await == third.der
    })
    .await;
}

/// The error with its sources, as the CLI prints it.
fn message(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(&format!(": {cause}"));
        source = cause.source();
    }
    text
}

#[tokio::test]
async fn a_bad_certificate_or_key_stops_the_proxy_at_startup_naming_it() {
    let (ca, files) = (TestCa::new(), Files::new());
    let leaf = ca.leaf(&["localhost"]);
    let (certificate, key) = files.leaf(&leaf);
    let garbage = files.write("garbage.pem", "-----BEGIN CERTIFICATE-----\nnot base64\n");
    let empty = files.write("empty.pem", "");
    let missing = files.dir.join("missing.pem");
    let quoted = |p: &std::path::Path| p.to_str().unwrap().replace('\\', "\\\\");
    for (certificate, key, line, reason) in [
        (&garbage, &key, 2, "garbage.pem"),
        (&empty, &key, 2, "no PEM certificate"),
        (&missing, &key, 2, "missing.pem"),
        (&certificate, &certificate, 3, "no PEM private key"),
    ] {
        let text = format!(
            "[tls]\ncertificate = \"{}\"\nkey = \"{}\"\n",
            quoted(certificate),
            quoted(key)
        );
        let err = message(&Config::parse(&text, "tls.toml").unwrap_err());
        assert!(
            err.contains("tls.toml") && err.contains(&format!("line {line}")),
            "{err}"
        );
        assert!(err.contains(reason), "{err}");
    }

    // A key of another certificate: the check names both files, and so does startup.
    let other = ca.leaf(&["localhost"]);
    let other_key = files.write("other-key.pem", &other.key);
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec![UpstreamConfig::new("http://127.0.0.1:9")],
        ..Config::default()
    };
    config.tls.certificate = Some(certificate.clone());
    config.tls.key = Some(other_key);
    let err = message(&config.validate().unwrap_err());
    assert!(
        err.contains("tls.key") && err.contains("other-key.pem"),
        "{err}"
    );
    assert!(err.contains("cert.pem"), "{err}");
    let err = message(&Proxy::bind(config.clone()).await.unwrap_err());
    assert!(err.contains("tls.key"), "{err}");
    config.tls.key = None;
    let err = message(&config.validate().unwrap_err());
    assert!(err.contains("tls.key") && err.contains("missing"), "{err}");
}

#[tokio::test]
async fn an_https_upstream_is_verified_and_told_its_name() {
    let (ca, files) = (TestCa::new(), Files::new());
    let leaf = ca.leaf(&["localhost", "127.0.0.1"]);
    let (certificate, key) = files.leaf(&leaf);
    let upstream = TlsOrigin::start(&certificate, &key).await;
    let ca_file = files.write("ca.pem", &ca.pem());
    let port = upstream.addr.port();

    for (http2, url, sni) in [
        (
            false,
            format!("https://localhost:{port}/base"),
            Some("localhost"),
        ),
        (
            true,
            format!("https://localhost:{port}/base"),
            Some("localhost"),
        ),
        // An address is checked against the certificate's addresses, and sent as no name.
        (false, format!("https://127.0.0.1:{port}"), None),
    ] {
        let mut config = Config {
            listen: "127.0.0.1:0".parse().unwrap(),
            admin: "127.0.0.1:0".parse().unwrap(),
            upstreams: vec![UpstreamConfig::new(url.clone())],
            ..Config::default()
        };
        config.client.http2 = http2;
        config.tls.upstream_ca = Some(ca_file.clone());
        let proxy = TestProxy::start(config).await;
        let (status, body) = get_text(&proxy.url("/x")).await;
        assert_eq!(status, StatusCode::OK, "{url}");
        let (path, version) = if url.ends_with("/base") {
            ("/base/x", if http2 { "HTTP/2.0" } else { "HTTP/1.1" })
        } else {
            ("/x", "HTTP/1.1")
        };
        assert_eq!(body, format!("tls origin, {path}, {version}"), "{url}");
        assert_eq!(
            upstream.names().last().unwrap().as_deref(),
            sni,
            "{url}: the server name sent"
        );
    }

    // A certificate that does not chain to the configured CA: no connection.
    let stranger = TestCa::new();
    let mut config = Config {
        listen: "127.0.0.1:0".parse().unwrap(),
        admin: "127.0.0.1:0".parse().unwrap(),
        upstreams: vec![UpstreamConfig::new(format!("https://localhost:{port}"))],
        ..Config::default()
    };
    config.tls.upstream_ca = Some(files.write("stranger.pem", &stranger.pem()));
    config.ejection.consecutive_failures = 0;
    let proxy = TestProxy::start(config).await;
    let response = get(&proxy.url("/x")).await;
    assert_eq!(response.status(), StatusCode::BAD_GATEWAY);
    assert_eq!(response.headers()["tidegate-error"], "connect");
}

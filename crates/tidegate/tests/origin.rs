//! `tidegate origin` end to end: the startup lines, requests served and refused as the flags
//! say, `/metrics`, usage errors naming the flag, and a clean exit on SIGTERM.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::Duration;

fn tidegate() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
}

/// One HTTP/1.1 GET with `Connection: close`: the status line and the body.
fn get(addr: &str, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}

#[cfg(unix)]
#[test]
fn serves_refuses_reports_and_stops_on_sigterm() {
    let mut child = tidegate()
        .args([
            "origin",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "1",
            "--work",
            "400ms",
            "--queue",
            "0",
            "--spread",
            "constant",
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    assert_eq!(
        first,
        "tidegate origin: pool of 1 worker, 400ms of work, queue 0"
    );
    let listening = lines.next().unwrap().unwrap();
    let addr = listening
        .strip_prefix("listening on http://")
        .and_then(|a| a.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{listening}"))
        .to_owned();
    // The only worker is busy and the queue holds nothing: the second request is refused.
    let busy = {
        let addr = addr.clone();
        std::thread::spawn(move || get(&addr, "/work"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !get(&addr, "/metrics")
        .1
        .contains("tidegate_origin_in_flight{instance=\"0\"} 1")
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the request never arrived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, body) = get(&addr, "/work");
    assert_eq!(status, "HTTP/1.1 503 Service Unavailable", "{body}");
    let (status, body) = busy.join().unwrap();
    assert_eq!(
        (status.as_str(), body.as_str()),
        ("HTTP/1.1 200 OK", "ok\n")
    );
    let (_, metrics) = get(&addr, "/metrics");
    for line in [
        "tidegate_origin_served_total{instance=\"0\"} 1",
        "tidegate_origin_refused_total{instance=\"0\"} 1",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line}\n{metrics}");
    }
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    assert!(child.wait().unwrap().success(), "exits 0 on SIGTERM");
}

#[test]
fn bad_flags_are_usage_errors_naming_the_flag() {
    for (args, needle) in [
        (
            &["origin", "--delay-curve", "10=>2ms;5=>1ms"][..],
            "counts must increase",
        ),
        (
            &["origin", "--delay-curve", "10=>2", "--queue", "3"],
            "--queue does not apply",
        ),
        (&["origin", "--jitter", "1.5"], "service.jitter"),
        (&["origin", "--change", "60s:speed=2"], "--change"),
        (&["origin", "--lease", "0"], "--lease"),
        (
            &["origin", "--call", "http://127.0.0.1:1/,ftp://127.0.0.1:2/"],
            "\"ftp://127.0.0.1:2/\": expected http://",
        ),
        (
            &[
                "origin",
                "--call",
                "http://127.0.0.1:1/",
                "--call",
                "127.0.0.1:2",
            ],
            "\"127.0.0.1:2\": expected http://",
        ),
    ] {
        let out = tidegate().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
    let out = tidegate()
        .args(["origin", "--scenario", "/nonexistent/x.toml"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr.contains("/nonexistent/x.toml"), "{stderr}");
}

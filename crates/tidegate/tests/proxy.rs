//! `tidegate proxy` from the command line: the default configuration round-trips, startup
//! errors name their culprit, and a signal drains and exits 0.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failure is the test's failure"
)]

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn tidegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// A file in the temporary directory, unique to this test process and `name`.
fn temp_file(name: &str, contents: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tidegate-proxy-{}-{name}", std::process::id()));
    std::fs::write(&path, contents).expect("the temporary file is written");
    path
}

/// `tidegate proxy --config PATH --upstream http://127.0.0.1:3000 --check`.
fn check(path: &std::path::Path) -> Output {
    tidegate(&[
        "proxy",
        "--config",
        path.to_str().expect("UTF-8 path"),
        "--upstream",
        "http://127.0.0.1:3000",
        "--check",
    ])
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn help_documents_the_proxy_and_its_threads() {
    let out = tidegate(&["proxy", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in [
        "--upstream",
        "--listen",
        "--admin",
        "--config",
        "--threads",
        "--print-default-config",
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
    }
    assert!(help.contains("current-thread"), "{help}");
}

#[test]
fn the_default_configuration_round_trips_through_config() {
    let out = tidegate(&["proxy", "--print-default-config"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let printed = String::from_utf8(out.stdout).expect("UTF-8");
    assert!(printed.contains("[gate.limit.autotune]") && printed.contains("# "));
    let path = temp_file("default.toml", &printed);
    let from_file = check(&path);
    let without_file = tidegate(&["proxy", "--upstream", "http://127.0.0.1:3000", "--check"]);
    let _ = std::fs::remove_file(&path);
    assert!(from_file.status.success(), "{}", stderr(&from_file));
    assert!(without_file.status.success(), "{}", stderr(&without_file));
    assert_eq!(
        String::from_utf8_lossy(&from_file.stdout),
        String::from_utf8_lossy(&without_file.stdout),
        "the printed defaults are the defaults"
    );
    let checked = String::from_utf8_lossy(&from_file.stdout);
    assert!(
        checked.contains("url = \"http://127.0.0.1:3000\""),
        "{checked}"
    );
}

#[test]
fn a_certificate_file_that_does_not_load_fails_the_check_naming_file_key_and_line() {
    let certificate = temp_file("not-a-cert.pem", "-----BEGIN CERTIFICATE-----\n%%%\n");
    let path = temp_file(
        "tls.toml",
        &format!(
            "[tls]\nreload_interval = \"5s\"\ncertificate = {:?}\n",
            certificate.to_str().expect("UTF-8 path")
        ),
    );
    let out = check(&path);
    let _ = std::fs::remove_file(&path);
    let _ = std::fs::remove_file(&certificate);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("line 3") && err.contains("certificate ="),
        "{err}"
    );
    assert!(err.contains("not-a-cert.pem"), "{err}");
}

#[test]
fn flags_override_the_file() {
    let path = temp_file(
        "override.toml",
        "listen = \"127.0.0.1:1111\"\nthreads = 4\n[[upstreams]]\nurl = \"http://127.0.0.1:1\"\n",
    );
    let out = tidegate(&[
        "proxy",
        "--config",
        path.to_str().expect("UTF-8 path"),
        "--listen",
        "127.0.0.1:2222",
        "--threads",
        "1",
        "--check",
    ]);
    let _ = std::fs::remove_file(&path);
    assert!(out.status.success(), "{}", stderr(&out));
    let checked = String::from_utf8_lossy(&out.stdout);
    assert!(checked.contains("listen = \"127.0.0.1:2222\""), "{checked}");
    assert!(checked.contains("threads = 1"), "{checked}");
    assert!(checked.contains("http://127.0.0.1:1"), "{checked}");
}

#[test]
fn a_mistyped_key_is_named_with_its_file_and_line() {
    let path = temp_file(
        "typo.toml",
        "[client]\ntimeout = \"2s\"\nconect_timeout = \"1s\"\n",
    );
    let out = tidegate(&[
        "proxy",
        "--config",
        path.to_str().expect("UTF-8 path"),
        "--upstream",
        "http://127.0.0.1:3000",
    ]);
    let _ = std::fs::remove_file(&path);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains(path.to_str().expect("UTF-8 path")), "{err}");
    assert!(
        err.contains("line 3") && err.contains("conect_timeout"),
        "{err}"
    );
    assert!(
        err.contains("connect_timeout"),
        "the valid keys are listed: {err}"
    );
}

#[test]
fn bad_urls_and_missing_upstreams_are_clear_errors() {
    let out = tidegate(&["proxy", "--upstream", "localhost:3000"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("\"localhost:3000\""),
        "{}",
        stderr(&out)
    );
    let out = tidegate(&["proxy", "--check"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("--upstream"), "{}", stderr(&out));
}

#[test]
fn a_port_in_use_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    let addr = taken.local_addr().expect("bound").to_string();
    let out = tidegate(&[
        "proxy",
        "--upstream",
        "http://127.0.0.1:3000",
        "--listen",
        &addr,
        "--admin",
        "127.0.0.1:0",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("cannot listen on {addr} (listen)")),
        "{err}"
    );
    assert!(err.to_lowercase().contains("in use"), "{err}");
}

/// `tidegate proxy` with `args`, on free ports and one thread, and its stderr line by line.
fn spawn_proxy(args: &[&str]) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .arg("proxy")
        .args(args)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--threads",
            "1",
        ])
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    let (lines_tx, lines) = mpsc::channel();
    let stderr = child.stderr.take().expect("piped");
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    (child, lines)
}

#[test]
fn sigterm_and_sigint_drain_and_exit_zero() {
    for signal in ["TERM", "INT"] {
        let (mut child, lines) = spawn_proxy(&["--upstream", "http://127.0.0.1:3000"]);
        let started = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a startup line");
        assert!(started.contains("listening on 127.0.0.1:"), "{started}");
        let killed = Command::new("kill")
            .args([&format!("-{signal}"), &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(killed.success());
        let deadline = Instant::now() + Duration::from_secs(10);
        let status = loop {
            if let Some(status) = child.try_wait().expect("waitable") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "SIG{signal} did not stop the proxy"
            );
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(status.code(), Some(0), "SIG{signal}");
        let last = lines
            .recv_timeout(Duration::from_secs(5))
            .expect("a last line");
        assert!(last.contains("drained"), "{last}");
    }
}

/// One `GET /` through `addr` with `Connection: close`: the status code, 0 if the exchange
/// failed.
fn status_of_get(addr: &str) -> u16 {
    use std::io::{Read as _, Write as _};
    let Ok(mut stream) = std::net::TcpStream::connect(addr) else {
        return 0;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    if write!(
        stream,
        "GET / HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n"
    )
    .is_err()
    {
        return 0;
    }
    let mut response = String::new();
    let _ = stream.read_to_string(&mut response);
    response
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or(0)
}

/// An origin on `listener` answering every request 200 and closing, a thread per connection.
fn answer_ok(listener: std::net::TcpListener) {
    use std::io::Write as _;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(&stream);
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                    line.clear();
                }
                let _ = (&stream).write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\nconnection: close\r\n\r\nok\n",
                );
            });
        }
    });
}

#[cfg(unix)]
#[test]
fn an_upstream_ejected_and_recovered_is_logged_once_each_as_json() {
    // The upstream's port, closed for now: every request to it is refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let config = temp_file(
        "ejection.toml",
        "[ejection]\nconsecutive_failures = 3\nbase_time = \"300ms\"\nmax_time = \"300ms\"\n",
    );
    let (mut child, lines) = spawn_proxy(&[
        "--config",
        config.to_str().expect("UTF-8 path"),
        "--upstream",
        &format!("http://127.0.0.1:{port}"),
        "--log-format",
        "json",
    ]);
    let started: serde_json::Value = serde_json::from_str(
        &lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a startup line"),
    )
    .expect("a JSON line");
    assert_eq!(started["level"], "INFO", "{started}");
    let listen = started["listen"].as_str().expect("the listen address");

    // Forty requests while nothing listens: three failures eject, the rest are turned away.
    let statuses: Vec<u16> = (0..40).map(|_| status_of_get(listen)).collect();
    assert!(
        statuses.iter().all(|&s| s == 502 || s == 503),
        "{statuses:?}"
    );
    // The upstream comes back; within a few ejections a probe finds it.
    answer_ok(std::net::TcpListener::bind(("127.0.0.1", port)).expect("the port again"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while status_of_get(listen) != 200 {
        assert!(Instant::now() < deadline, "the upstream never came back");
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let _ = std::fs::remove_file(&config);

    let events: Vec<serde_json::Value> = lines
        .try_iter()
        .map(|line| serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}")))
        .filter(|event: &serde_json::Value| event.get("upstream").is_some())
        .collect();
    let count = |start: &str| {
        events
            .iter()
            .filter(|e| e["message"].as_str().is_some_and(|m| m.starts_with(start)))
            .count()
    };
    assert_eq!(count("upstream ejected"), 1, "{events:#?}");
    assert_eq!(count("upstream recovered"), 1, "{events:#?}");
    // Between them only failed probes, one per ejection period: never a line per request.
    assert_eq!(
        events.len(),
        2 + count("upstream probe failed"),
        "{events:#?}"
    );
    let ejected = &events[0];
    assert_eq!(ejected["level"], "WARN");
    assert_eq!(ejected["upstream"], format!("127.0.0.1:{port}"));
    assert_eq!(ejected["error"], "connect");
    assert_eq!(ejected["failures"], 3);
}

#[cfg(unix)]
#[test]
fn sighup_reloads_the_file_and_a_bad_one_changes_nothing() {
    let origin = |name: &str| {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
        let url = format!("http://{}", listener.local_addr().expect("bound"));
        answer_ok(listener);
        format!("[[upstreams]]\nurl = \"{url}\"\nname = \"{name}\"\n")
    };
    let (a, b) = (origin("a"), origin("b"));
    let config = temp_file("reload.toml", &a);
    let (mut child, lines) = spawn_proxy(&[
        "--config",
        config.to_str().expect("UTF-8 path"),
        "--log-format",
        "json",
    ]);
    let next = || -> serde_json::Value {
        let line = lines
            .recv_timeout(Duration::from_secs(10))
            .expect("a log line");
        serde_json::from_str(&line).unwrap_or_else(|_| panic!("not JSON: {line}"))
    };
    let started = next();
    let listen = started["listen"]
        .as_str()
        .expect("the listen address")
        .to_owned();
    let hangup = || {
        let sent = Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
    };

    std::fs::write(&config, format!("{a}{b}")).expect("rewritten");
    hangup();
    let reloaded = next();
    assert_eq!(reloaded["level"], "INFO", "{reloaded}");
    assert_eq!(reloaded["added"], "[\"b\"]", "{reloaded}");
    assert_eq!(reloaded["kept"], "[\"a\"]", "{reloaded}");

    std::fs::write(&config, format!("{b}[server]\nshed_status = 500\n")).expect("rewritten");
    hangup();
    let refused = next();
    assert_eq!(refused["level"], "ERROR", "{refused}");
    let error = refused["error"].as_str().expect("the reason");
    assert!(
        error.contains("shed_status") && error.contains("500"),
        "{error}"
    );
    assert_eq!(status_of_get(&listen), 200);

    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let _ = child.wait();
    let _ = std::fs::remove_file(&config);
}

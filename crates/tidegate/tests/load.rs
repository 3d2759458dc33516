//! `tidegate load` end to end: a run against a small origin on 127.0.0.1, its JSON report,
//! and the usage errors that name the offending flag.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers fail loudly on setup errors"
)]

use std::io::{BufRead as _, BufReader, Write as _};
use std::net::{SocketAddr, TcpListener};
use std::process::{Command, Output};

fn tidegate(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidegate"))
        .args(args)
        .output()
        .expect("the binary runs")
}

/// An HTTP/1.1 origin answering every request at once, 503 with `tidegate-shed` for tier 5
/// and 200 otherwise, on keep-alive connections, a thread per connection.
fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                let mut tier5 = false;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) {
                    if line
                        .to_ascii_lowercase()
                        .starts_with("tidegate-priority: 5")
                    {
                        tier5 = true;
                    }
                    if line == "\r\n" {
                        let response: &[u8] = if tier5 {
                            b"HTTP/1.1 503 Service Unavailable\r\ntidegate-shed: test\r\ncontent-length: 0\r\n\r\n"
                        } else {
                            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nok\n"
                        };
                        if writer.write_all(response).is_err() {
                            return;
                        }
                        tier5 = false;
                    }
                    line.clear();
                }
            });
        }
    });
    addr
}

#[test]
fn a_run_reports_per_tier_in_json() {
    let addr = origin();
    let url = format!("http://{addr}/");
    let out = tidegate(&[
        "load",
        &url,
        "--rate",
        "200",
        "--duration",
        "1s",
        "--tiers",
        "1:50,5:50",
        "--cohort-keys",
        "20",
        "--json",
        "--progress",
        "never",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "no progress when told never");
    let json = String::from_utf8(out.stdout).unwrap();
    // The report's own shape is tested in tidegate-lab; here, that the flags reached it.
    for expected in [
        "\"schedule\": \"0s:200\"",
        "\"tiers\": \"1:50,5:50\"",
        "\"caller_keys\": 20",
        "\"offered\": 200",
    ] {
        assert!(json.contains(expected), "{expected} in {json}");
    }
    let tier = |t: &str| {
        let at = json
            .find(&format!("\"tier\": {t}"))
            .expect("the tier's row");
        json[at..].to_owned()
    };
    let field = |row: &str, name: &str| -> u64 {
        let at = row.find(&format!("\"{name}\": ")).unwrap() + name.len() + 4;
        let digits: String = row[at..].chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap()
    };
    let (t1, t5) = (tier("1"), tier("5"));
    assert_eq!(field(&t1, "ok"), field(&t1, "sent"));
    assert_eq!(field(&t5, "shed_by_tidegate"), field(&t5, "sent"));
    assert_eq!(field(&t1, "sent") + field(&t5, "sent"), 200);
}

#[test]
fn a_text_report_with_progress_when_asked() {
    let addr = origin();
    // By name: resolved once, each of its addresses tried in turn.
    let url = format!("http://localhost:{}/", addr.port());
    let out = tidegate(&[
        "load",
        &url,
        "--rate",
        "50",
        "-d",
        "1500ms",
        "--progress",
        "always",
    ]);
    assert!(out.status.success());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("sent 75 of 75"), "{report}");
    assert!(report.contains("statuses: 200 x75"), "{report}");
    // Not a terminal: one progress line per second, each ending in a newline.
    let progress = String::from_utf8_lossy(&out.stderr);
    assert!(progress.starts_with("   1s  sent "), "{progress}");
    assert!(
        progress.lines().all(|l| l.contains("/s  ok ")),
        "{progress}"
    );
    assert!(!progress.contains('\r'));
}

#[test]
fn bad_flags_are_usage_errors_naming_the_culprit() {
    let cases: [(&[&str], &str); 6] = [
        (&["--schedule", "0s:100,x:5"], "\"x:5\""),
        (&["--schedule", "1s:100"], "must start at 0s"),
        (&["--ramp", "100-200"], "\"100-200\""),
        (&["--rate", "10", "--tiers", "1:60,5:60"], "add up to 120%"),
        (&["--rate", "-3"], "--rate"),
        (&["--rate", "10", "--duration", "soon"], "\"soon\""),
    ];
    for (args, expected) in cases {
        let mut all = vec!["load", "http://127.0.0.1:9/"];
        all.extend_from_slice(args);
        let out = tidegate(&all);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(expected), "{args:?}: {err}");
    }
    let out = tidegate(&["load", "http://127.0.0.1:9/"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate"));
}

#[test]
fn an_address_where_nothing_answers_stops_the_run_and_fails() {
    // A port nobody listens on: bound, then closed.
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let url = format!("http://{addr}/");
    let out = tidegate(&[
        "load",
        &url,
        "--rate",
        "50",
        "--duration",
        "60s",
        "--json",
        "--progress",
        "never",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("nothing answered at {url}")) && err.contains("connect_refused"),
        "{err}"
    );
    // The report of what was tried still comes, and shows the run cut short.
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["stopped_early"], true);
    assert!(json["elapsed_s"].as_f64().unwrap() < 30.0, "{json}");
    assert_eq!(json["total"]["ok"], 0);
}

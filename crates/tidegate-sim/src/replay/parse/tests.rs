use proptest::prelude::*;

use super::*;

const NGINX: &str = r#"127.0.0.1 - - [24/Nov/2026:19:40:00 +0000] "GET /work?x=1 HTTP/1.1" 200 6 "-" "tidegate-load" 0.105 0.104 1795549200.105"#;
const ENVOY: &str = r#"[2026-11-24T19:40:00.000Z] "GET /work HTTP/1.1" 200 - 0 6 105 104 "-" "tidegate-load" "5b9f-11" "127.0.0.1:8080" "127.0.0.1:8081""#;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-6
}

#[test]
fn nginx_with_msec() {
    let e = parse_line(LogFormat::Nginx, NGINX).unwrap();
    assert!(close(e.end(), 1_795_549_200.105), "{e:?}");
    assert!(close(e.duration, 0.105));
    assert_eq!(e.upstream, Some(0.104));
    assert_eq!(e.status, 200);
}

#[test]
fn nginx_without_msec_ends_in_the_middle_of_its_second() {
    let line = NGINX.rsplit_once(' ').unwrap().0;
    let e = parse_line(LogFormat::Nginx, line).unwrap();
    assert!(close(e.end(), 1_795_549_200.5), "{e:?}");
    assert_eq!(e.upstream, Some(0.104));
}

#[test]
fn nginx_upstream_lists_and_missing_upstreams() {
    let with = |upstream: &str| NGINX.replace(" 0.104 ", &format!(" {upstream} "));
    let e = parse_line(LogFormat::Nginx, &with("0.002, 0.100")).unwrap();
    assert!(close(e.upstream.unwrap(), 0.102), "{e:?}");
    let e = parse_line(LogFormat::Nginx, &with("0.002 : 0.050, -")).unwrap();
    assert!(close(e.upstream.unwrap(), 0.052), "{e:?}");
    let e = parse_line(LogFormat::Nginx, &with("-")).unwrap();
    assert_eq!(e.upstream, None);
    assert!(close(e.end(), 1_795_549_200.105));
    let err = parse_line(LogFormat::Nginx, &with("0.1x")).unwrap_err();
    assert_eq!(err.field, "$upstream_response_time");
}

#[test]
fn nginx_escaped_quotes_stay_inside_their_field() {
    let line = NGINX.replace(r#""tidegate-load""#, r#""curl \"7\" x\x22y""#);
    assert_eq!(parse_line(LogFormat::Nginx, &line).unwrap().status, 200);
}

#[test]
fn envoy_default_format() {
    let e = parse_line(LogFormat::Envoy, ENVOY).unwrap();
    assert!(close(e.start, 1_795_549_200.0), "{e:?}");
    assert!(close(e.duration, 0.105));
    assert_eq!(e.upstream, Some(0.104));
    let no_upstream = ENVOY
        .replace(" 105 104 ", " 3 - ")
        .replace(" 200 - ", " 503 UO ");
    let e = parse_line(LogFormat::Envoy, &no_upstream).unwrap();
    assert_eq!((e.status, e.upstream), (503, None));
}

#[test]
fn each_format_refuses_the_other() {
    assert_eq!(
        parse_line(LogFormat::Envoy, NGINX).unwrap_err().field,
        "line"
    );
    assert_eq!(
        parse_line(LogFormat::Nginx, ENVOY).unwrap_err().field,
        "line"
    );
}

#[test]
fn bad_lines_are_reported_by_number_and_counted() {
    let mut log = String::new();
    for i in 1..=14 {
        match i {
            2 => log.push_str("garbage\n"),
            3 => log.push('\n'),
            5 => log.push_str(&NGINX.replace(" 200 ", " two-hundred ")),
            _ if i >= 7 && i % 2 == 1 => log.push_str("truncated \"GET / HTTP/1.1\n"),
            _ => log.push_str(NGINX),
        }
        if !log.ends_with('\n') {
            log.push('\n');
        }
    }
    let log = parse_log(LogFormat::Nginx, log.as_bytes()).unwrap();
    assert_eq!(log.lines, 13, "the blank line is not a line of the log");
    assert_eq!(
        log.entries.iter().map(|e| e.line).collect::<Vec<_>>(),
        [1, 4, 6, 8, 10, 12, 14]
    );
    assert_eq!(log.bad_count, 6, "line 13 is counted, not shown");
    let shown: Vec<(usize, &str)> = log.bad.iter().map(|b| (b.line, b.error.field)).collect();
    assert_eq!(
        shown,
        [
            (2, "line"),
            (5, "$status"),
            (7, "line"),
            (9, "line"),
            (11, "line")
        ]
    );
}

#[test]
fn a_log_of_which_nothing_parses_is_an_error_naming_the_first_bad_line() {
    let err = parse_log(LogFormat::Envoy, format!("\n{NGINX}\n").as_bytes()).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("1 lines, line 2: line:"), "{text}");
}

/// A line of the nginx format for generated values (the log_format of the module docs).
fn nginx_line(end_ms: u64, request_ms: u64, upstream_ms: &[Option<u64>], status: u16) -> String {
    let upstream = if upstream_ms.is_empty() {
        "-".to_owned()
    } else {
        upstream_ms
            .iter()
            .map(|u| u.map_or_else(|| "-".to_owned(), |ms| format!("{:.3}", ms as f64 / 1e3)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    format!(
        r#"10.0.0.1 - alice [24/Nov/2026:19:40:00 +0000] "GET /a HTTP/1.1" {status} 12 "-" "ua/1.0" {:.3} {upstream} {}.{:03}"#,
        request_ms as f64 / 1e3,
        end_ms / 1000,
        end_ms % 1000,
    )
}

proptest! {
    #[test]
    fn arbitrary_lines_never_panic(line in "\\PC{0,200}") {
        let _ = parse_line(LogFormat::Nginx, &line);
        let _ = parse_line(LogFormat::Envoy, &line);
    }

    #[test]
    fn lines_of_the_right_characters_never_panic(line in "[\\[\\]\" \\\\a0-9.:,/+-]{0,120}") {
        let _ = parse_line(LogFormat::Nginx, &line);
        let _ = parse_line(LogFormat::Envoy, &line);
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = parse_log(LogFormat::Nginx, bytes.as_slice());
        let _ = parse_log(LogFormat::Envoy, bytes.as_slice());
    }

    #[test]
    fn generated_nginx_lines_round_trip(
        end_ms in 1_000_000_000_000u64..4_000_000_000_000,
        request_ms in 0u64..100_000,
        upstream_ms in proptest::collection::vec(proptest::option::of(0u64..100_000), 0..4),
        status in 100u16..600,
    ) {
        let line = nginx_line(end_ms, request_ms, &upstream_ms, status);
        let e = parse_line(LogFormat::Nginx, &line).map_err(|err| {
            TestCaseError::fail(format!("{line}: {err}"))
        })?;
        prop_assert_eq!(e.status, status);
        prop_assert!((e.end() - end_ms as f64 / 1e3).abs() < 1e-3, "{} {:?}", line, e);
        prop_assert!((e.duration - request_ms as f64 / 1e3).abs() < 1e-9);
        let known: Vec<u64> = upstream_ms.iter().flatten().copied().collect();
        match e.upstream {
            None => prop_assert!(known.is_empty()),
            Some(u) => prop_assert!((u - known.iter().sum::<u64>() as f64 / 1e3).abs() < 1e-6),
        }
    }

    #[test]
    fn generated_envoy_lines_round_trip(
        start_ms in 0u64..4_000_000_000_000,
        duration_ms in 0u64..1_000_000,
        upstream_ms in proptest::option::of(0u64..1_000_000),
        status in 0u16..600,
    ) {
        let secs = start_ms / 1000;
        let (days, rem) = (secs / 86_400, secs % 86_400);
        // Civil date of `days` since the epoch (Howard Hinnant's civil_from_days).
        let z = days as i64 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        let line = format!(
            r#"[{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z] "GET /x HTTP/2" {status} - 0 10 {duration_ms} {} "-" "ua" "id" "host" "10.0.0.2:80""#,
            rem / 3600, rem / 60 % 60, rem % 60, start_ms % 1000,
            upstream_ms.map_or_else(|| "-".to_owned(), |u| u.to_string()),
        );
        let e = parse_line(LogFormat::Envoy, &line).map_err(|err| {
            TestCaseError::fail(format!("{line}: {err}"))
        })?;
        prop_assert!((e.start - start_ms as f64 / 1e3).abs() < 1e-3, "{} {:?}", line, e);
        prop_assert_eq!(e.status, status);
        prop_assert!((e.duration - duration_ms as f64 / 1e3).abs() < 1e-9);
        prop_assert_eq!(e.upstream.map(|u| (u * 1e3).round() as u64), upstream_ms);
    }
}

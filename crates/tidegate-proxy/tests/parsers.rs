//! Property tests of what the proxy parses from outside (issue 14): the configuration file,
//! with its durations and addresses. Whatever the text, parsing either succeeds or fails with
//! an error naming the file and the line, and never panics. CI runs the default number of
//! cases; `bench/fuzz.sh` runs millions.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

use proptest::prelude::*;
use tidegate_core::Nanos;
use tidegate_proxy::{Cidr, Config, DEFAULT_CONFIG};

/// The error with its sources, as the CLI prints it.
fn message(error: &tidegate_proxy::Error) -> String {
    std::iter::successors(Some(error as &dyn std::error::Error), |e| e.source())
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(": ")
}

/// The default file's lines that set a key, as `(line index, key)`.
fn keyed_lines() -> Vec<(usize, String)> {
    DEFAULT_CONFIG
        .lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let (key, _) = line.split_once(" = ")?;
            (!key.starts_with('#')).then(|| (i, key.to_owned()))
        })
        .collect()
}

/// Values of every kind a hostile or careless file could put after a key.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        "[a-z0-9./:_ -]{0,12}".prop_map(|s| format!("{s:?}")),
        "\\PC{0,16}".prop_map(|s| format!("{s:?}")),
        Just("true".to_owned()),
        Just("[]".to_owned()),
        Just("{}".to_owned()),
        Just("\"\"".to_owned()),
        Just("\"0\"".to_owned()),
        Just("\"18446744073709551616ns\"".to_owned()),
    ]
}

proptest! {
    /// The default file with one key's value replaced by anything: parsed and validated, or
    /// refused with the file's name and the line of that key; never a panic.
    #[test]
    fn any_value_for_any_key_parses_or_names_its_line(
        which in any::<prop::sample::Index>(),
        value in value(),
    ) {
        let lines = keyed_lines();
        let (index, key) = &lines[which.index(lines.len())];
        let text: String = DEFAULT_CONFIG
            .lines()
            .enumerate()
            .map(|(i, line)| if i == *index { format!("{key} = {value}\n") } else { format!("{line}\n") })
            .collect();
        match Config::parse(&text, "fuzz.toml") {
            Ok(mut config) => {
                config.upstreams.push(tidegate_proxy::UpstreamConfig::new("http://127.0.0.1:1"));
                // Validation may refuse it too, naming the key; it must not panic.
                if let Err(e) = config.validate() {
                    prop_assert!(message(&e).contains("invalid") || message(&e).contains("upstream"));
                }
            }
            Err(e) => {
                let text = message(&e);
                prop_assert!(text.contains("fuzz.toml"), "{}", text);
                prop_assert!(text.contains(&format!("line {}", index + 1)), "{}", text);
            }
        }
    }

    /// Any text at all: a configuration or an error, never a panic.
    #[test]
    fn any_text_parses_or_fails_cleanly(text in "\\PC{0,200}") {
        let _ = Config::parse(&text, "fuzz.toml").map(|c| c.validate());
    }

    /// A duration prints and parses back to itself; anything else is an error, never a panic.
    #[test]
    fn durations_round_trip(nanos in any::<u64>(), text in "\\PC{0,24}") {
        let duration = Nanos::from_nanos(nanos);
        prop_assert_eq!(duration.to_string().parse::<Nanos>().ok(), Some(duration));
        let _ = text.parse::<Nanos>();
    }

    /// Any address block text parses or is refused naming itself.
    #[test]
    fn address_blocks_parse_or_name_themselves(text in "[0-9a-f:./]{0,44}") {
        if let Err(e) = text.parse::<Cidr>() {
            let quoted = format!("{text:?}");
            prop_assert!(e.to_string().contains(&quoted));
        }
    }
}

//! `dashboards/grafana.json` against a live scrape: every metric a panel or a variable queries,
//! and every label it filters or groups by, is one the proxy really exports.
//!
//! A dashboard is code that no compiler checks; a renamed metric would leave a panel silently
//! empty in the middle of an incident. This test is that compiler.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test helpers: a failure is the test's failure"
)]

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::*;

/// Every PromQL expression of the dashboard: the panels' targets and the variables' queries.
fn queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            queries.push(target["expr"].as_str().expect("expr").to_owned());
        }
    }
    for variable in dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
    {
        if let Some(query) = variable["query"]["query"].as_str() {
            queries.push(query.to_owned());
        }
    }
    queries
}

/// The `tidegate_*` metric names in an expression, each with the label names used right after
/// it in a `{...}` selector.
fn selectors(expr: &str) -> Vec<(String, BTreeSet<String>)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("tidegate_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = tail[..end].to_owned();
        let mut labels = BTreeSet::new();
        if let Some(inner) = tail[end..].strip_prefix('{') {
            let inner = &inner[..inner.find('}').expect("a closed selector")];
            for matcher in inner.split(',') {
                let label = matcher.split(['=', '!']).next().unwrap().trim();
                labels.insert(label.to_owned());
            }
        }
        found.push((name, labels));
        rest = &tail[end..];
    }
    found
}

/// The label names of `by (...)` groupings and of `label_values(metric, label)`.
fn grouped_labels(expr: &str) -> BTreeSet<String> {
    let mut labels = BTreeSet::new();
    for part in expr.split("by (").skip(1) {
        let inner = &part[..part.find(')').expect("a closed grouping")];
        labels.extend(inner.split(',').map(|l| l.trim().to_owned()));
    }
    if let Some(args) = expr.strip_prefix("label_values(") {
        let label = args.trim_end_matches(')').rsplit(',').next().unwrap();
        labels.insert(label.trim().to_owned());
    }
    labels
}

#[tokio::test]
async fn every_query_of_the_grafana_dashboard_names_metrics_and_labels_the_proxy_exports() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../dashboards/grafana.json");
    let dashboard: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("the dashboard"))
            .expect("valid JSON");
    assert!(dashboard["title"].is_string() && dashboard["uid"].is_string());

    let origin = Origin::start("origin").await;
    let proxy = TestProxy::start(config(&[&origin])).await;
    let client = client();
    for (path, priority) in [("/echo", "1"), ("/status/503", "5"), ("/echo", "bad")] {
        send(&client, get_at(proxy.url(path), priority)).await;
    }
    let metrics = proxy.metrics().await;
    let mut exported: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (name, labels, _) in &metrics.samples {
        exported
            .entry(name)
            .or_default()
            .extend(labels.keys().map(String::as_str));
    }

    let queries = queries(&dashboard);
    assert!(queries.len() >= 15, "{queries:?}");
    let mut checked = BTreeSet::new();
    for query in &queries {
        let selected = selectors(query);
        assert!(
            !selected.is_empty(),
            "a query without a tidegate metric: {query}"
        );
        let mut labels_here = BTreeSet::new();
        for (name, labels) in selected {
            let Some(known) = exported.get(name.as_str()) else {
                panic!(
                    "{query}: the proxy exports no {name}; it exports {:?}",
                    exported.keys()
                );
            };
            for label in &labels {
                assert!(
                    known.contains(label.as_str()),
                    "{query}: {name} has no label {label:?}"
                );
            }
            labels_here.extend(known.iter().map(|l| (*l).to_owned()));
            checked.insert(name);
        }
        for label in grouped_labels(query) {
            assert!(
                labels_here.contains(&label),
                "{query}: nothing it reads has a label {label:?}"
            );
        }
    }
    // The test itself would notice a dashboard that lost its panels.
    for name in [
        "tidegate_requests_total",
        "tidegate_limit",
        "tidegate_request_duration_seconds_bucket",
    ] {
        assert!(checked.contains(name), "{name} is on no panel");
    }
}

#[test]
fn the_query_reader_finds_metrics_labels_and_groupings() {
    let expr = r#"sum by (upstream, kind) (rate(tidegate_x_total{upstream=~"$u",class!="ok"}[1m])) / tidegate_y"#;
    let found = selectors(expr);
    assert_eq!(found[0].0, "tidegate_x_total");
    assert_eq!(
        found[0].1,
        BTreeSet::from(["upstream".to_owned(), "class".to_owned()])
    );
    assert_eq!(found[1], ("tidegate_y".to_owned(), BTreeSet::new()));
    assert_eq!(
        grouped_labels(expr),
        BTreeSet::from(["upstream".to_owned(), "kind".to_owned()])
    );
    assert_eq!(
        grouped_labels("label_values(tidegate_limit, gate)"),
        BTreeSet::from(["gate".to_owned()])
    );
}

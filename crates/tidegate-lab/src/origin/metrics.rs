//! The origin's `/metrics`, in the Prometheus text format: what the service itself sees,
//! to set beside what the client and the proxy report. Counters say what happened to the
//! requests that reached the service; gauges say what it holds now.

use std::fmt::Write as _;

use super::driver::Stats;

/// One family: name, type, help, and the value of each instance.
struct Family {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
    value: fn(&Stats) -> Option<f64>,
}

const FAMILIES: [Family; 9] = [
    Family {
        name: "tidegate_origin_in_flight",
        kind: "gauge",
        help: "Requests in the service: worked on or waiting in its internal queue.",
        value: |s| Some(f64::from(s.model.working + s.model.queued)),
    },
    Family {
        name: "tidegate_origin_queued",
        kind: "gauge",
        help: "Requests waiting in the service's internal queue.",
        value: |s| Some(f64::from(s.model.queued)),
    },
    Family {
        name: "tidegate_origin_arrived_total",
        kind: "counter",
        help: "Requests that reached the service.",
        value: |s| Some(s.model.arrived as f64),
    },
    Family {
        name: "tidegate_origin_served_total",
        kind: "counter",
        help: "Requests whose work ended, whether or not their caller still waited.",
        value: |s| Some(s.model.served as f64),
    },
    Family {
        name: "tidegate_origin_refused_total",
        kind: "counter",
        help: "Requests refused (503) because the internal queue was full.",
        value: |s| Some(s.model.refused as f64),
    },
    Family {
        name: "tidegate_origin_lease_exhausted_total",
        kind: "counter",
        help: "Requests refused (503) because the instance's static lease was used up.",
        value: |s| Some(s.model.lease_exhausted as f64),
    },
    Family {
        name: "tidegate_origin_abandoned_total",
        kind: "counter",
        help: "Requests served after their caller had gone: work done for nobody.",
        value: |s| Some(s.abandoned as f64),
    },
    Family {
        name: "tidegate_origin_workers",
        kind: "gauge",
        help: "Workers of the pool now, after the capacity changes so far.",
        value: |s| s.model.workers.map(f64::from),
    },
    Family {
        name: "tidegate_origin_work_seconds",
        kind: "gauge",
        help: "Nominal work time of the pool now, after the capacity changes so far.",
        value: |s| s.model.work.map(|w| w.as_secs_f64()),
    },
];

/// The text of `/metrics`, a series per instance.
pub(crate) fn render(stats: &[Stats]) -> String {
    let mut out = String::new();
    for family in &FAMILIES {
        let values: Vec<(usize, f64)> = stats
            .iter()
            .enumerate()
            .filter_map(|(i, s)| (family.value)(s).map(|v| (i, v)))
            .collect();
        if values.is_empty() {
            continue;
        }
        let _ = writeln!(out, "# HELP {} {}", family.name, family.help);
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for (i, v) in values {
            let _ = writeln!(out, "{}{{instance=\"{i}\"}} {v}", family.name);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use tidegate_core::Nanos;

    use super::super::engine::InstanceStats;
    use super::*;

    #[test]
    fn every_instance_has_a_series_and_curves_have_no_workers() {
        let pool = Stats {
            model: InstanceStats {
                working: 7,
                queued: 3,
                arrived: 12,
                served: 2,
                refused: 1,
                lease_exhausted: 0,
                workers: Some(7),
                work: Some(Nanos::from_millis(1500)),
            },
            abandoned: 1,
        };
        let text = render(&[pool, Stats::default()]);
        for line in [
            "# TYPE tidegate_origin_in_flight gauge",
            "tidegate_origin_in_flight{instance=\"0\"} 10",
            "tidegate_origin_queued{instance=\"1\"} 0",
            "tidegate_origin_served_total{instance=\"0\"} 2",
            "tidegate_origin_refused_total{instance=\"0\"} 1",
            "tidegate_origin_abandoned_total{instance=\"0\"} 1",
            "tidegate_origin_work_seconds{instance=\"0\"} 1.5",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
        assert!(!text.contains("tidegate_origin_workers{instance=\"1\"}"));
        let curve_only = render(&[Stats::default()]);
        assert!(!curve_only.contains("tidegate_origin_workers"));
    }
}

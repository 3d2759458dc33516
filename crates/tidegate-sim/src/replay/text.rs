//! The replay's report as text: what was read, what was fitted, and a table per load
//! multiple of what each arm would have done.

use std::fmt::Write as _;

use tidegate_model::NonNegative;
use tidegate_model::service::Spread;

use super::Replay;
use super::fit::{Bucket, Fit};

/// Rows of the latency-by-concurrency table at most: evenly spread, the knee always shown.
const CURVE_ROWS: usize = 16;

fn ms(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_owned(), |v| format!("{v:.1}"))
}

fn spread(fit: &Fit) -> String {
    match fit.service.spread {
        Spread::Constant => "constant".to_owned(),
        Spread::Uniform => format!(
            "uniform +-{:.2}",
            fit.service.jitter.map_or(0.2, NonNegative::get)
        ),
        Spread::Exponential => "exponential".to_owned(),
    }
}

/// The buckets shown: all of them if few, else evenly spread ones and the knee.
fn shown_buckets(fit: &Fit) -> Vec<&Bucket> {
    let n = fit.buckets.len();
    let step = n.div_ceil(CURVE_ROWS).max(1);
    fit.buckets
        .iter()
        .enumerate()
        .filter(|(i, b)| i % step == 0 || *i + 1 == n || (b.concurrency..=b.to).contains(&fit.knee))
        .map(|(_, b)| b)
        .collect()
}

impl Replay {
    pub fn text(&self) -> String {
        let mut out = String::new();
        let log = &self.log;
        let fit = &self.fit;
        let _ = writeln!(
            out,
            "log: {} lines, {} requests, {} bad lines",
            log.lines, log.requests, log.bad_count
        );
        for bad in &log.bad_lines {
            let _ = writeln!(out, "  line {}: {}", bad.line, bad.error);
        }
        if log.bad_count > log.bad_lines.len() {
            let _ = writeln!(
                out,
                "  ... and {} more bad lines",
                log.bad_count - log.bad_lines.len()
            );
        }
        let _ = writeln!(
            out,
            "  over {:.1} s ({:.1} rps): {} served, {} refused (429/503), {} abandoned (499); \
             at most {} in the service at once",
            fit.span_s,
            fit.requests as f64 / fit.span_s.max(1e-9),
            fit.served,
            fit.refused,
            fit.abandoned,
            fit.max_concurrency,
        );
        let knee = if fit.knee_seen {
            format!(
                "{} workers (the latency rises beyond {} in flight)",
                fit.knee, fit.knee
            )
        } else {
            format!(
                "{} workers (at least: the latency never rose up to the {} in flight the log \
                 reached)",
                fit.knee, fit.max_concurrency
            )
        };
        let queue = match fit.queue {
            Some(q) => format!("a queue of {q} (from the refusals)"),
            None => "an unbounded queue".to_owned(),
        };
        let _ = writeln!(
            out,
            "fit: a pool of {knee}, work {:.1} ms mean (cv {:.2}: {}), contention {:.4}, {queue}",
            fit.work_ms,
            fit.work_cv,
            spread(fit),
            fit.contention,
        );
        let _ = writeln!(
            out,
            "  latency by concurrency at arrival (served requests):"
        );
        let _ = writeln!(
            out,
            "  {:>10} {:>9} {:>10} {:>10}",
            "in flight", "requests", "median ms", "model ms"
        );
        for b in shown_buckets(fit) {
            let range = if b.to > b.concurrency {
                format!("{}-{}", b.concurrency, b.to)
            } else {
                b.concurrency.to_string()
            };
            let _ = writeln!(
                out,
                "  {range:>10} {:>9} {:>10.1} {:>10.1}",
                b.requests, b.median_ms, b.model_ms
            );
        }
        let _ = writeln!(
            out,
            "client timeout: {:.1} ms{}",
            self.timeout_ms,
            if self.timeout_default {
                " (10x the log's median request; --timeout to change)"
            } else {
                ""
            }
        );
        for load in &self.loads {
            let _ = writeln!(
                out,
                "\nload {}x: {} requests over {:.1} s",
                load.multiple, load.requests, load.duration_s
            );
            let _ = writeln!(
                out,
                "  {:<18} {:>9} {:>9} {:>8} {:>7} {:>9} {:>9} {:>8} {:>8}",
                "arm",
                "offered/s",
                "goodput/s",
                "goodput%",
                "shed%",
                "refused%",
                "timeout%",
                "p50 ms",
                "p99 ms"
            );
            for arm in &load.report.arms {
                let f = &arm.whole.figures;
                let pct = |r: f64| r * 100.0;
                let _ = writeln!(
                    out,
                    "  {:<18} {:>9.1} {:>9.1} {:>8.1} {:>7.1} {:>9.1} {:>9.1} {:>8} {:>8}",
                    arm.name,
                    f.offered_rps,
                    f.goodput_rps,
                    if f.offered_rps > 0.0 {
                        f.goodput_rps / f.offered_rps * 100.0
                    } else {
                        0.0
                    },
                    pct(f.shed_ratio + f.expired_ratio + f.unsent_ratio),
                    pct(f.refused_ratio),
                    pct(f.timeout_ratio),
                    ms(f.p50_ms),
                    ms(f.p99_ms),
                );
            }
        }
        out
    }
}

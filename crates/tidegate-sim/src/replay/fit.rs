//! A service model fitted to a log: the latency as a function of the concurrency, read from
//! the log's own timestamps and durations, and the worker pool that has that curve.
//!
//! 1. Each request was in the service from `end - service time` to `end` (the service time
//!    is the upstream's when the proxy logged one, else the whole request's). A sweep over
//!    those starts and ends gives, at each request's start, how many requests the service
//!    held, this one included: its concurrency at arrival.
//! 2. The requests the service answered (not refused with 429/503, not abandoned: nginx's
//!    499) are grouped by that concurrency, one bucket per value; a bucket's median latency
//!    is a point of the curve.
//! 3. A pool of `W` workers with an unbounded queue and contention `C` beyond `W` (the
//!    `tidegate_model` pool) answers a request arriving at concurrency `c` in about
//!    `T * max(1, c / W) * (1 + C * max(0, c - W))`: `T` below the knee, then the wait for
//!    `c - W` completions at `W / (T (1 + C (c - W)))` per second. The fit searches `W` over
//!    the concurrencies seen and `C` over a grid, with `T` the mean of the buckets at or
//!    below `W`, for the least squared relative error, weighted by the requests of each
//!    bucket. A log that never shows the latency rising fits `W` at the highest
//!    concurrency seen: a lower bound, reported as such ([`Fit::knee_seen`]).
//! 4. The work time is the mean latency at or below the knee, and its spread the model's
//!    spread closest in coefficient of variation: constant (below 0.05), uniform with the
//!    matching half-width (up to 0.55, a half-width of 0.95), exponential beyond (a heavier
//!    tail is approximated by the exponential's).
//! 5. Refusals (429/503) bound the service's queue: a request is refused when `W` work and
//!    the queue is full, so the queue is the median concurrency of the refused, less one
//!    (itself) and `W`. Without refusals, the queue is unbounded.
//!
//! What the log cannot show: work the service goes on doing after its client left (the proxy
//! logged the request as ended at the client's leaving), so a log of a service that was
//! overloaded far beyond its clients' patience understates the concurrency of those times.

use serde::Serialize;
use tidegate_core::Nanos;
use tidegate_model::NonNegative;
use tidegate_model::service::{PoolConfig, ServiceConfig, ServiceKind, Spread};

use super::parse::Entry;

/// Buckets with fewer requests than this are left out of the fit (when enough others are
/// left): one request's latency is noise, not a point of the curve.
const MIN_BUCKET: usize = 5;

/// Statuses of a request the service turned away rather than served.
fn refused(status: u16) -> bool {
    matches!(status, 429 | 503)
}

/// nginx's status for a client that closed the connection before the response.
const CLIENT_CLOSED: u16 = 499;

/// The requests of the log at one concurrency at arrival (one value up to
/// [`EXACT_BUCKETS`], a range beyond).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Bucket {
    /// The lowest concurrency of the range.
    pub concurrency: u32,
    /// The highest.
    pub to: u32,
    pub mean_concurrency: f64,
    /// Served requests that arrived at this concurrency.
    pub requests: usize,
    pub median_ms: f64,
    /// The fitted model's latency at this concurrency.
    pub model_ms: f64,
}

/// The fitted service, and what it was fitted on.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Fit {
    pub requests: usize,
    /// Answered by the service (the latency samples).
    pub served: usize,
    /// Turned away by the service (429, 503).
    pub refused: usize,
    /// Left by their clients before the answer (499).
    pub abandoned: usize,
    /// From the first request's start to the last one's end.
    pub span_s: f64,
    pub max_concurrency: u32,
    pub buckets: Vec<Bucket>,
    /// The pool's workers: the concurrency beyond which the latency rises.
    pub knee: u32,
    /// Whether the log shows the latency rising; if not, `knee` is only the highest
    /// concurrency the log reached, a lower bound.
    pub knee_seen: bool,
    /// Mean latency of the requests served at or below the knee.
    pub work_ms: f64,
    /// Their coefficient of variation (standard deviation over mean).
    pub work_cv: f64,
    /// Relative slowdown of work per request held beyond the knee.
    pub contention: f64,
    /// The service's internal queue, from its refusals; `None`: unbounded.
    pub queue: Option<u32>,
    /// Median of the whole requests' durations (what a client waited), for the default
    /// timeout.
    pub median_duration_ms: f64,
    pub service: ServiceConfig,
}

/// Why no model fits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FitError {
    #[error(
        "no request of the log was answered by the service (all refused or abandoned): \
         nothing to fit a latency on"
    )]
    NothingServed,
}

/// A request in the service: its interval, its latency, and how it ended.
#[derive(Clone, Copy, Debug)]
struct Stay {
    from: f64,
    to: f64,
    status: u16,
}

/// Each stay's concurrency at arrival: the stays under way at its start, itself included.
/// At equal times, ends come before starts (a request that ends as another starts does not
/// count for it).
fn concurrency(stays: &[Stay]) -> Vec<u32> {
    let mut events: Vec<(f64, bool, usize)> = Vec::with_capacity(stays.len() * 2);
    for (i, s) in stays.iter().enumerate() {
        events.push((s.from, true, i));
        events.push((s.to, false, i));
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
    let mut held: u32 = 0;
    let mut at = vec![0; stays.len()];
    for (_, start, i) in events {
        if start {
            held += 1;
            at[i] = held;
        } else {
            held = held.saturating_sub(1);
        }
    }
    at
}

fn median(values: &mut [f64]) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Concurrencies up to this have a bucket each; beyond, a bucket spans 1/16 of its start,
/// so that a log that reached thousands in flight still has enough requests per bucket.
pub const EXACT_BUCKETS: u32 = 32;

/// The buckets of `samples` (sorted by concurrency).
fn buckets(samples: &[(u32, f64)]) -> Vec<Bucket> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(&(from, _)) = samples.get(i) {
        let to = if from <= EXACT_BUCKETS {
            from
        } else {
            from + from / 16
        };
        let n = samples[i..].partition_point(|&(c, _)| c <= to);
        let bucket = &samples[i..i + n];
        let mut latencies: Vec<f64> = bucket.iter().map(|&(_, l)| l).collect();
        out.push(Bucket {
            concurrency: from,
            to,
            mean_concurrency: bucket.iter().map(|&(c, _)| f64::from(c)).sum::<f64>() / n as f64,
            requests: n,
            median_ms: median(&mut latencies) * 1e3,
            model_ms: 0.0,
        });
        i += n;
    }
    out
}

/// The worker counts searched: every one up to 64, then steps of about 2%.
fn candidate_workers(max_concurrency: u32) -> impl Iterator<Item = f64> {
    let mut w = 0u32;
    std::iter::from_fn(move || {
        w = if w < 64 { w + 1 } else { w + w / 50 };
        (w <= max_concurrency).then_some(f64::from(w))
    })
}

/// The model's latency at concurrency `c`, relative to the work time.
fn shape(c: f64, workers: f64, contention: f64) -> f64 {
    let excess = (c - workers).max(0.0);
    (c / workers).max(1.0) * (1.0 + contention * excess)
}

/// The contention values searched: none, then a geometric grid from 1e-4 to 1.
fn contention_grid() -> impl Iterator<Item = f64> {
    std::iter::once(0.0).chain((0..=40).map(|i| 1e-4 * 10f64.powf(f64::from(i) / 10.0)))
}

/// Fits a service to the log's requests.
pub fn fit(entries: &[Entry]) -> Result<Fit, FitError> {
    let stays: Vec<Stay> = entries
        .iter()
        .map(|e| {
            let service = e.upstream.unwrap_or(e.duration);
            Stay {
                from: e.end() - service,
                to: e.end(),
                status: e.status,
            }
        })
        .collect();
    let at = concurrency(&stays);
    let served = |s: &Stay| !refused(s.status) && s.status != CLIENT_CLOSED;
    let max_concurrency = at.iter().copied().max().unwrap_or(0);
    // (concurrency, latency) of the served requests, by concurrency.
    let mut samples: Vec<(u32, f64)> = stays
        .iter()
        .zip(&at)
        .filter(|(s, _)| served(s))
        .map(|(s, &c)| (c, s.to - s.from))
        .collect();
    if samples.is_empty() {
        return Err(FitError::NothingServed);
    }
    samples.sort_by_key(|&(c, _)| c);
    let mut buckets = buckets(&samples);
    let populated: Vec<&Bucket> = buckets
        .iter()
        .filter(|b| b.requests >= MIN_BUCKET)
        .collect();
    // (mean concurrency, requests, median latency in seconds) of the buckets fitted on.
    let points: Vec<(f64, f64, f64)> = if populated.len() >= 2 {
        populated
    } else {
        buckets.iter().collect()
    }
    .iter()
    .map(|b| (b.mean_concurrency, b.requests as f64, b.median_ms / 1e3))
    .collect();
    let base_for = |workers: f64| {
        let (mut sum, mut weight) = (0.0, 0.0);
        for &(_, n, m) in points.iter().filter(|p| p.0 <= workers) {
            sum += n * m;
            weight += n;
        }
        (weight > 0.0).then(|| sum / weight)
    };
    let error = |workers: f64, contention: f64, base: f64| -> f64 {
        points
            .iter()
            .map(|&(c, n, m)| {
                let predicted = base * shape(c, workers, contention);
                n * ((m - predicted) / predicted).powi(2)
            })
            .sum()
    };

    // The search: W over the concurrencies seen, C over the grid.
    let top = f64::from(max_concurrency.max(1));
    let flat_base = base_for(top).unwrap_or(0.0);
    let mut best = (error(top, 0.0, flat_base), top, 0.0, flat_base);
    for workers in candidate_workers(max_concurrency) {
        let Some(base) = base_for(workers) else {
            continue;
        };
        for contention in contention_grid() {
            let e = error(workers, contention, base);
            if e < best.0 {
                best = (e, workers, contention, base);
            }
        }
    }
    // A knee is seen only if the fitted curve rises by a quarter over the concurrencies the
    // log reached: a rise within the noise of a flat log is no knee.
    let highest = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let knee_seen = shape(highest, best.1, best.2) >= 1.25;
    let (knee, contention, base) = if knee_seen {
        (best.1 as u32, best.2, best.3)
    } else {
        (max_concurrency.max(1), 0.0, flat_base)
    };
    for b in &mut buckets {
        b.model_ms = base * shape(b.mean_concurrency, f64::from(knee), contention) * 1e3;
    }

    // The work time and its spread, from the requests served at or below the knee.
    let low: Vec<f64> = samples
        .iter()
        .filter(|&&(c, _)| c <= knee)
        .map(|&(_, latency)| latency)
        .collect();
    let mean = low.iter().sum::<f64>() / low.len().max(1) as f64;
    let variance = low.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / low.len().max(1) as f64;
    let work_cv = if mean > 0.0 {
        variance.sqrt() / mean
    } else {
        0.0
    };
    let (spread, jitter) = if work_cv < 0.05 {
        (Spread::Constant, None)
    } else if work_cv <= 0.55 {
        // Uniform on [1 - j, 1 + j] has a coefficient of variation of j / sqrt(3).
        (Spread::Uniform, NonNegative::new(work_cv * 3f64.sqrt()))
    } else {
        (Spread::Exponential, None)
    };

    let mut refused_at: Vec<f64> = stays
        .iter()
        .zip(&at)
        .filter(|(s, _)| refused(s.status))
        .map(|(_, &c)| f64::from(c))
        .collect();
    let refused_count = refused_at.len();
    // A few refusals could be anything (a deploy, a health check); a queue shows in many.
    let queue = (refused_count >= 3 && refused_count * 200 >= entries.len())
        .then(|| (median(&mut refused_at) - 1.0 - f64::from(knee)).max(0.0) as u32);

    let mut durations: Vec<f64> = entries.iter().map(|e| e.duration).collect();
    let median_duration_ms = median(&mut durations) * 1e3;
    let work = Nanos::from_secs_f64(mean.max(1e-6));
    let service = ServiceConfig {
        kind: ServiceKind::Pool,
        spread,
        jitter,
        pool: PoolConfig {
            workers: std::num::NonZeroU32::new(knee).unwrap_or(std::num::NonZeroU32::MIN),
            work,
            queue,
            optimal: None,
            contention: NonNegative::new(contention).unwrap_or_default(),
        },
        ..ServiceConfig::default()
    };
    let start = entries
        .iter()
        .map(|e| e.start)
        .fold(f64::INFINITY, f64::min);
    let end = entries
        .iter()
        .map(Entry::end)
        .fold(f64::NEG_INFINITY, f64::max);
    Ok(Fit {
        requests: entries.len(),
        served: samples.len(),
        refused: refused_count,
        abandoned: entries.iter().filter(|e| e.status == CLIENT_CLOSED).count(),
        span_s: (end - start).max(0.0),
        max_concurrency,
        buckets,
        knee,
        knee_seen,
        work_ms: mean * 1e3,
        work_cv,
        contention,
        queue,
        median_duration_ms,
        service,
    })
}

#[cfg(test)]
mod tests;

//! Counting outcomes while the load runs, and the report they add up to.
//!
//! Latencies go into HDR histograms (3 significant digits, microseconds, up to an hour) so
//! that p99.9 and max are exact to 0.1% whatever the run length, in constant memory per tier.
//! Requests are counted by the second of their *intended* send time: a request scheduled in
//! second 12 that times out in second 14 belongs to second 12, so each second's row adds up
//! (sent = ok + shed + timed out + errors) and shows what happened to the traffic offered
//! then.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::http::{ErrorKind, Outcome};

/// Microseconds in an hour: the largest latency a histogram tells apart (larger saturate).
const HISTOGRAM_MAX_US: u64 = 3_600_000_000;

/// An empty latency histogram in microseconds with `digits` significant decimal digits.
pub(crate) fn histogram(digits: u8) -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, HISTOGRAM_MAX_US, digits)
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

/// Outcome counts of one tier (or of every request).
#[derive(Debug, Clone)]
pub(crate) struct TierCounts {
    ok: u64,
    shed: u64,
    shed_by_tidegate: u64,
    timed_out: u64,
    errors: u64,
    /// Of the ok responses.
    latency: Histogram<u64>,
    /// Of the answers that refused: a status other than 2xx or 3xx (the shed and the errors
    /// with a status). A connection that fails, the kernel's refusal of a connect included,
    /// is not an answer and is not timed here.
    refused_latency: Histogram<u64>,
}

impl TierCounts {
    fn new(template: &Histogram<u64>) -> TierCounts {
        TierCounts {
            ok: 0,
            shed: 0,
            shed_by_tidegate: 0,
            timed_out: 0,
            errors: 0,
            latency: Histogram::new_from(template),
            refused_latency: Histogram::new_from(template),
        }
    }

    fn count(&mut self, outcome: Outcome, latency: Duration) {
        match outcome {
            Outcome::Ok { .. } => {
                self.ok += 1;
                self.latency.saturating_record(micros(latency));
            }
            Outcome::Shed { by_tidegate, .. } => {
                self.shed += 1;
                self.shed_by_tidegate += u64::from(by_tidegate);
                self.refused_latency.saturating_record(micros(latency));
            }
            Outcome::Failed { status, .. } => {
                self.errors += 1;
                if status.is_some() {
                    self.refused_latency.saturating_record(micros(latency));
                }
            }
            Outcome::TimedOut => self.timed_out += 1,
        }
    }
}

/// Outcome counts of the requests scheduled in one second.
#[derive(Debug, Clone)]
struct SecondCounts {
    ok_by_slot: Vec<u64>,
    shed: u64,
    timed_out: u64,
    errors: u64,
    /// Of the ok responses; two digits keep a long run's per-second histograms small.
    latency: Histogram<u64>,
}

/// What the request tasks record as they finish (behind a mutex: one short lock per request).
#[derive(Debug)]
pub(crate) struct Recorder {
    /// Empty histograms to copy the bounds of: 3 digits for tiers, 2 for seconds.
    fine: Histogram<u64>,
    coarse: Histogram<u64>,
    slots: Vec<TierCounts>,
    /// Per slot, of the requests intended in the steady window; `None` without one.
    steady: Option<Vec<TierCounts>>,
    seconds: Vec<SecondCounts>,
    /// Ok responses by the second they ended in, whenever they were sent.
    ok_answered: Vec<u64>,
    statuses: BTreeMap<u16, u64>,
    errors: BTreeMap<ErrorKind, u64>,
    /// Attempts beyond each request's first.
    retries: u64,
}

/// Totals for the live progress line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Finished {
    pub ok: u64,
    pub shed: u64,
    pub timed_out: u64,
    pub errors: u64,
    /// Responses with an HTTP status, whatever the status: 0 while nothing at the address
    /// has answered at all.
    pub answered: u64,
}

impl Recorder {
    /// Counts `slots` tiers, and apart those in a steady window if `steady`.
    pub(crate) fn new(slots: usize, steady: bool) -> Result<Recorder, hdrhistogram::CreationError> {
        let fine = histogram(3)?;
        let counts = || (0..slots.max(1)).map(|_| TierCounts::new(&fine)).collect();
        Ok(Recorder {
            slots: counts(),
            steady: steady.then(counts),
            coarse: histogram(2)?,
            fine,
            seconds: Vec::new(),
            ok_answered: Vec::new(),
            statuses: BTreeMap::new(),
            errors: BTreeMap::new(),
            retries: 0,
        })
    }

    /// An empty histogram for the dispatcher's lag.
    pub(crate) fn lag_histogram(&self) -> Histogram<u64> {
        Histogram::new_from(&self.fine)
    }

    /// Records a request's outcome; `second` is the one it was intended in, `answered` the one
    /// its response ended in; `steady` if it was intended in the steady window.
    pub(crate) fn record(
        &mut self,
        slot: usize,
        (second, answered): (usize, usize),
        steady: bool,
        outcome: Outcome,
        latency: Duration,
    ) {
        let slots = self.slots.len();
        let coarse = &self.coarse;
        let Some(tier) = self.slots.get_mut(slot) else {
            return;
        };
        tier.count(outcome, latency);
        if steady && let Some(counts) = self.steady.as_mut().and_then(|s| s.get_mut(slot)) {
            counts.count(outcome, latency);
        }
        if self.seconds.len() <= second {
            self.seconds.resize_with(second + 1, || SecondCounts {
                ok_by_slot: vec![0; slots],
                shed: 0,
                timed_out: 0,
                errors: 0,
                latency: Histogram::new_from(coarse),
            });
        }
        if matches!(outcome, Outcome::Ok { .. }) {
            if self.ok_answered.len() <= answered {
                self.ok_answered.resize(answered + 1, 0);
            }
            self.ok_answered[answered] += 1;
        }
        let sec = &mut self.seconds[second];
        match outcome {
            Outcome::Ok { status } => {
                *self.statuses.entry(status).or_default() += 1;
                sec.ok_by_slot[slot] += 1;
                sec.latency.saturating_record(micros(latency));
            }
            Outcome::Shed { status, .. } => {
                *self.statuses.entry(status).or_default() += 1;
                sec.shed += 1;
            }
            Outcome::Failed { kind, status } => {
                if let Some(status) = status {
                    *self.statuses.entry(status).or_default() += 1;
                }
                *self.errors.entry(kind).or_default() += 1;
                sec.errors += 1;
            }
            Outcome::TimedOut => sec.timed_out += 1,
        }
    }

    /// A request that ended took `retries` attempts beyond its first.
    pub(crate) fn retried(&mut self, retries: u32) {
        self.retries += u64::from(retries);
    }

    pub(crate) fn finished(&self) -> Finished {
        let answered = self.statuses.values().sum();
        self.slots.iter().fold(
            Finished {
                answered,
                ..Finished::default()
            },
            |f, t| Finished {
                ok: f.ok + t.ok,
                shed: f.shed + t.shed,
                timed_out: f.timed_out + t.timed_out,
                errors: f.errors + t.errors,
                answered: f.answered,
            },
        )
    }
}

/// What the dispatcher counted: requests due, and those it could not send.
#[derive(Debug, Clone)]
pub(crate) struct Dispatched {
    /// Per slot.
    pub(crate) offered: Vec<u64>,
    pub(crate) not_sent: Vec<u64>,
    /// Per second of intended send time: (offered, not sent).
    pub(crate) seconds: Vec<(u64, u64)>,
    /// Per slot, of the requests intended in the steady window.
    pub(crate) steady_offered: Vec<u64>,
    pub(crate) steady_not_sent: Vec<u64>,
    /// Where the steady window starts, if there is one.
    pub(crate) steady_from: Option<Duration>,
    /// How late the dispatcher sent each request, after its intended time.
    pub(crate) lag: Histogram<u64>,
    /// From the start to the end of the schedule (or to the stop).
    pub(crate) elapsed: Duration,
    pub(crate) stopped_early: bool,
}

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
}

impl Latency {
    fn of(h: &Histogram<u64>) -> Latency {
        if h.is_empty() {
            return Latency::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        Latency {
            count: h.len(),
            mean: h.mean() / 1000.0,
            p50: ms(h.value_at_quantile(0.5)),
            p90: ms(h.value_at_quantile(0.9)),
            p99: ms(h.value_at_quantile(0.99)),
            p999: ms(h.value_at_quantile(0.999)),
            max: ms(h.max()),
        }
    }
}

/// The outcomes of one tier's requests (or of all of them: `tier` is then `None`).
///
/// `offered = sent + not_sent` and `sent = ok + shed + timed_out + errors`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierReport {
    pub tier: Option<u8>,
    /// Requests the schedule called for.
    pub offered: u64,
    pub sent: u64,
    /// 2xx or 3xx within the timeout.
    pub ok: u64,
    /// 429 or 503.
    pub shed: u64,
    /// Of the shed, those carrying the `tidegate-shed` header.
    pub shed_by_tidegate: u64,
    /// No complete response within the timeout, counted from the intended send time.
    pub timed_out: u64,
    /// Other statuses and connection failures.
    pub errors: u64,
    /// Due while `max_inflight` requests were outstanding: never sent.
    pub not_sent: u64,
    /// Sent requests per second of the run.
    pub send_rate: f64,
    /// Ok responses per second of the run.
    pub goodput: f64,
    /// Of the ok responses, from the intended send time to the end of the response.
    pub latency_ms: Latency,
    /// Of the answers with another status (429, 503, the errors that have a status), timed
    /// the same way: how fast the excess is turned away. Connections that failed or were
    /// never accepted (refused, reset, a handshake the kernel dropped until the timeout) are
    /// not answers and are not in it: they count in `errors` or `timed_out`.
    pub refused_latency_ms: Latency,
}

/// The requests scheduled in one second of the run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecondReport {
    /// Seconds since the start: this row covers `[second, second + 1)`.
    pub second: u64,
    pub offered: u64,
    pub sent: u64,
    pub ok: u64,
    /// Ok responses that ended in this second, whenever they were sent: the rate a service's
    /// goodput is measured by (`ok` and the other outcomes count by intended send second).
    /// Answers that end after the run's last second are in no row.
    pub ok_answered: u64,
    pub shed: u64,
    pub timed_out: u64,
    pub errors: u64,
    pub not_sent: u64,
    /// Ok per tier, in the order of the report's `tiers` (empty without a tier mix).
    pub ok_by_tier: Vec<u64>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

/// The outcomes of the requests intended from a point of the run on (after a warm-up), to
/// compare a steady state with a simulator's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SteadyReport {
    /// Seconds from the start to the window's start.
    pub from_s: f64,
    /// Seconds the window lasted (rates are per second of it).
    pub seconds: f64,
    pub total: TierReport,
    /// One per tier of the mix, in its order; empty without a mix.
    pub tiers: Vec<TierReport>,
}

/// The run's settings, as the report restates them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunInfo {
    pub url: String,
    pub method: String,
    pub arrivals: String,
    pub schedule: String,
    pub duration_s: f64,
    pub timeout_ms: f64,
    pub tiers: String,
    pub caller_keys: u32,
    pub max_inflight: usize,
    pub seed: u64,
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    pub run: RunInfo,
    /// Wall time from the start to the end of the schedule (earlier if stopped).
    pub elapsed_s: f64,
    pub stopped_early: bool,
    pub total: TierReport,
    /// One per tier of the mix, in its order; empty without a mix.
    pub tiers: Vec<TierReport>,
    /// The requests intended from `steady_from` on, when the run was given one.
    pub steady: Option<SteadyReport>,
    pub per_second: Vec<SecondReport>,
    /// Responses by status code, all outcomes together.
    pub statuses: BTreeMap<u16, u64>,
    /// Errors by kind.
    pub errors: BTreeMap<ErrorKind, u64>,
    /// How late requests left after their intended send time: the generator's own accuracy.
    pub dispatch_lag_ms: Latency,
    /// Connections the generator opened (each request in flight holds one).
    pub connections_opened: u64,
    /// Attempts beyond each request's first (`LoadConfig::retry`): the sent requests plus
    /// these are the attempts the service saw.
    pub retries: u64,
}

impl Report {
    pub(crate) fn build(
        run: RunInfo,
        tiers: &[u8],
        recorder: Recorder,
        dispatched: Dispatched,
        connections_opened: u64,
    ) -> Report {
        let elapsed = dispatched.elapsed.as_secs_f64().max(1e-9);
        let (total, tier_reports) = summarize(
            tiers,
            &recorder.fine,
            &recorder.slots,
            &dispatched.offered,
            &dispatched.not_sent,
            elapsed,
        );
        let steady = match (&recorder.steady, dispatched.steady_from) {
            (Some(slots), Some(from)) => {
                let from_s = from.as_secs_f64();
                let seconds = (elapsed - from_s).max(1e-9);
                let (total, tiers) = summarize(
                    tiers,
                    &recorder.fine,
                    slots,
                    &dispatched.steady_offered,
                    &dispatched.steady_not_sent,
                    seconds,
                );
                Some(SteadyReport {
                    from_s,
                    seconds,
                    total,
                    tiers,
                })
            }
            _ => None,
        };
        let seconds = dispatched.seconds.len().max(recorder.seconds.len());
        let per_second = (0..seconds)
            .map(|s| {
                let (offered, not_sent) = dispatched.seconds.get(s).copied().unwrap_or((0, 0));
                let counts = recorder.seconds.get(s);
                let latency = counts.map(|c| Latency::of(&c.latency)).unwrap_or_default();
                let ok_by_slot = counts.map(|c| c.ok_by_slot.clone()).unwrap_or_default();
                SecondReport {
                    second: s as u64,
                    offered,
                    sent: offered.saturating_sub(not_sent),
                    ok: ok_by_slot.iter().sum(),
                    ok_answered: recorder.ok_answered.get(s).copied().unwrap_or(0),
                    shed: counts.map_or(0, |c| c.shed),
                    timed_out: counts.map_or(0, |c| c.timed_out),
                    errors: counts.map_or(0, |c| c.errors),
                    not_sent,
                    ok_by_tier: if tiers.is_empty() {
                        Vec::new()
                    } else {
                        ok_by_slot
                    },
                    p50_ms: latency.p50,
                    p99_ms: latency.p99,
                    max_ms: latency.max,
                }
            })
            .collect();
        Report {
            run,
            elapsed_s: elapsed,
            stopped_early: dispatched.stopped_early,
            total,
            tiers: tier_reports,
            steady,
            per_second,
            statuses: recorder.statuses,
            errors: recorder.errors,
            dispatch_lag_ms: Latency::of(&dispatched.lag),
            connections_opened,
            retries: recorder.retries,
        }
    }

    /// The report as pretty-printed JSON.
    pub fn to_json(&self) -> String {
        // Plain data with string and integer keys: serializing cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

/// The total and per-tier reports of `slots`, over `seconds`.
fn summarize(
    tiers: &[u8],
    template: &Histogram<u64>,
    slots: &[TierCounts],
    offered: &[u64],
    not_sent: &[u64],
    seconds: f64,
) -> (TierReport, Vec<TierReport>) {
    let tier_report = |tier: Option<u8>, offered: u64, not_sent: u64, c: &TierCounts| {
        let sent = offered.saturating_sub(not_sent);
        TierReport {
            tier,
            offered,
            sent,
            ok: c.ok,
            shed: c.shed,
            shed_by_tidegate: c.shed_by_tidegate,
            timed_out: c.timed_out,
            errors: c.errors,
            not_sent,
            send_rate: sent as f64 / seconds,
            goodput: c.ok as f64 / seconds,
            latency_ms: Latency::of(&c.latency),
            refused_latency_ms: Latency::of(&c.refused_latency),
        }
    };
    let mut all = TierCounts::new(template);
    for c in slots {
        all.ok += c.ok;
        all.shed += c.shed;
        all.shed_by_tidegate += c.shed_by_tidegate;
        all.timed_out += c.timed_out;
        all.errors += c.errors;
        // Same bounds on both sides: adding cannot fail.
        let _ = all.latency.add(&c.latency);
        let _ = all.refused_latency.add(&c.refused_latency);
    }
    let total = tier_report(None, offered.iter().sum(), not_sent.iter().sum(), &all);
    let per_tier = tiers
        .iter()
        .enumerate()
        .map(|(slot, &tier)| {
            tier_report(
                Some(tier),
                offered.get(slot).copied().unwrap_or(0),
                not_sent.get(slot).copied().unwrap_or(0),
                &slots[slot.min(slots.len() - 1)],
            )
        })
        .collect();
    (total, per_tier)
}

fn ms(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else if v >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

/// The human-readable report: a header, a table per tier, statuses and errors.
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = &self.run;
        writeln!(
            f,
            "{} {}  {} arrivals, schedule {} over {}s, timeout {}ms, seed {}{}",
            r.method,
            r.url,
            r.arrivals,
            r.schedule,
            r.duration_s,
            r.timeout_ms,
            r.seed,
            if self.stopped_early {
                "  (stopped early)"
            } else {
                ""
            }
        )?;
        writeln!(
            f,
            "sent {} of {} in {:.3}s: {:.1} rps; goodput {:.1} rps; {} connections; dispatch lag p99 {} ms, max {} ms",
            self.total.sent,
            self.total.offered,
            self.elapsed_s,
            self.total.send_rate,
            self.total.goodput,
            self.connections_opened,
            ms(self.dispatch_lag_ms.p99),
            ms(self.dispatch_lag_ms.max),
        )?;
        writeln!(f)?;
        writeln!(
            f,
            "{:<5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}",
            "tier",
            "sent",
            "ok",
            "shed",
            "timeout",
            "errors",
            "not_sent",
            "send/s",
            "goodput/s",
            "p50 ms",
            "p90 ms",
            "p99 ms",
            "p99.9 ms",
            "max ms",
            "refused p50",
            "refused p99"
        )?;
        for t in self.tiers.iter().chain(std::iter::once(&self.total)) {
            let (l, r) = (&t.latency_ms, &t.refused_latency_ms);
            // No answer, no latency: a dash rather than a misleading zero.
            let of = |l: &Latency, v: f64| if l.count == 0 { "-".to_owned() } else { ms(v) };
            let ms = |v: f64| of(l, v);
            writeln!(
                f,
                "{:<5} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8.1} {:>9.1} {:>8} {:>8} {:>8} {:>8} {:>8} {:>11} {:>11}",
                t.tier.map_or_else(|| "all".to_owned(), |t| t.to_string()),
                t.sent,
                t.ok,
                t.shed,
                t.timed_out,
                t.errors,
                t.not_sent,
                t.send_rate,
                t.goodput,
                ms(l.p50),
                ms(l.p90),
                ms(l.p99),
                ms(l.p999),
                ms(l.max),
                of(r, r.p50),
                of(r, r.p99),
            )?;
        }
        if !self.statuses.is_empty() {
            let statuses: Vec<String> = self
                .statuses
                .iter()
                .map(|(s, n)| format!("{s} x{n}"))
                .collect();
            writeln!(f, "\nstatuses: {}", statuses.join(", "))?;
        }
        if !self.errors.is_empty() {
            let errors: Vec<String> = self
                .errors
                .iter()
                .map(|(k, n)| format!("{} x{n}", k.as_str()))
                .collect();
            writeln!(f, "errors: {}", errors.join(", "))?;
        }
        if self.total.shed > 0 {
            writeln!(
                f,
                "shed: {} ({} with the tidegate-shed header)",
                self.total.shed, self.total.shed_by_tidegate
            )?;
        }
        if self.retries > 0 {
            let sent = self.total.sent.max(1) as f64;
            writeln!(
                f,
                "retries: {} ({:.2} attempts per request sent)",
                self.retries,
                (sent + self.retries as f64) / sent
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_info() -> RunInfo {
        RunInfo {
            url: "http://127.0.0.1:1/".to_owned(),
            method: "GET".to_owned(),
            arrivals: "constant".to_owned(),
            schedule: "0s:2".to_owned(),
            duration_s: 2.0,
            timeout_ms: 1000.0,
            tiers: "1:50,5:50".to_owned(),
            caller_keys: 0,
            max_inflight: 10,
            seed: 1,
        }
    }

    /// The words of the text report's first line that starts with `prefix`.
    fn row<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting with {prefix:?}: {text}"))
            .split_whitespace()
            .collect()
    }

    #[test]
    fn outcomes_add_up_per_tier_per_second_and_in_total() {
        let mut r = Recorder::new(2, true).unwrap();
        let ms = Duration::from_millis;
        r.record(0, (0, 0), false, Outcome::Ok { status: 200 }, ms(10));
        // Sent in the first second, answered in the third.
        r.record(0, (0, 2), false, Outcome::Ok { status: 204 }, ms(30));
        r.record(
            1,
            (0, 0),
            false,
            Outcome::Shed {
                status: 503,
                by_tidegate: true,
            },
            ms(1),
        );
        r.record(1, (1, 2), true, Outcome::TimedOut, ms(1000));
        let refused = Outcome::Failed {
            kind: ErrorKind::ConnectRefused,
            status: None,
        };
        r.record(1, (1, 1), true, refused, ms(0));
        let dispatched = Dispatched {
            offered: vec![2, 4],
            not_sent: vec![0, 1],
            seconds: vec![(3, 0), (3, 1)],
            steady_offered: vec![0, 3],
            steady_not_sent: vec![0, 1],
            steady_from: Some(Duration::from_secs(1)),
            lag: r.lag_histogram(),
            elapsed: Duration::from_secs(2),
            stopped_early: false,
        };
        let report = Report::build(run_info(), &[1, 5], r, dispatched, 3);
        let (t1, t5, all) = (&report.tiers[0], &report.tiers[1], &report.total);
        assert_eq!((t1.tier, t1.sent, t1.ok, t1.goodput), (Some(1), 2, 2, 1.0));
        assert!((t1.latency_ms.p50 - 10.0).abs() < 0.01 && (t1.latency_ms.max - 30.0).abs() < 0.05);
        assert_eq!(
            (
                t5.sent,
                t5.shed,
                t5.shed_by_tidegate,
                t5.timed_out,
                t5.errors
            ),
            (3, 1, 1, 1, 1)
        );
        assert_eq!((all.offered, all.sent, all.not_sent, all.ok), (6, 5, 1, 2));
        assert_eq!(
            all.latency_ms.count, 2,
            "latencies are of ok responses only"
        );
        let s1 = &report.per_second[1];
        assert_eq!(
            (s1.sent, s1.ok, s1.timed_out, s1.errors, s1.not_sent),
            (2, 0, 1, 1, 1)
        );
        assert_eq!(report.per_second[0].ok_by_tier, vec![2, 0]);
        let answered: Vec<u64> = report.per_second.iter().map(|s| s.ok_answered).collect();
        assert_eq!(
            answered,
            [1, 0],
            "ok by the second the answer ended, within the run's seconds"
        );
        let steady = report.steady.as_ref().unwrap();
        assert_eq!((steady.from_s, steady.seconds), (1.0, 1.0));
        let st = &steady.total;
        assert_eq!(
            (
                st.offered,
                st.sent,
                st.ok,
                st.timed_out,
                st.errors,
                st.not_sent
            ),
            (3, 2, 0, 1, 1, 1),
            "the second second only"
        );
        assert_eq!(steady.tiers[1].sent, 2);
        assert_eq!(report.statuses.get(&200), Some(&1));
        assert_eq!(report.statuses.get(&503), Some(&1));
        assert_eq!(report.errors.get(&ErrorKind::ConnectRefused), Some(&1));

        let json = report.to_json();
        assert!(json.contains("\"connect_refused\": 1"), "{json}");
        let text = report.to_string();
        assert!(
            text.contains("sent 5 of 6 in 2.000s: 2.5 rps; goodput 1.0 rps; 3 connections"),
            "{text}"
        );
        assert!(text.contains("errors: connect_refused x1"), "{text}");
        let tier5 = row(&text, "5 ");
        assert_eq!(
            tier5[9..],
            ["-", "-", "-", "-", "-", "1.00", "1.00"],
            "no ok response, no latency; the refusal's own"
        );
    }

    #[test]
    fn refusals_are_timed_apart_from_successes_and_failed_connections_not_at_all() {
        let mut r = Recorder::new(1, false).unwrap();
        let ms = Duration::from_millis;
        for _ in 0..98 {
            r.record(0, (0, 0), false, Outcome::Ok { status: 200 }, ms(40));
        }
        let shed = Outcome::Shed {
            status: 503,
            by_tidegate: true,
        };
        for _ in 0..99 {
            r.record(0, (0, 0), false, shed, ms(2));
        }
        let not_found = Outcome::Failed {
            kind: ErrorKind::Status4xx,
            status: Some(404),
        };
        r.record(0, (0, 0), false, not_found, ms(7));
        // Not answers: a connect refused by the kernel, a connection reset, a timeout.
        for kind in [ErrorKind::ConnectRefused, ErrorKind::Closed] {
            r.record(
                0,
                (0, 0),
                false,
                Outcome::Failed { kind, status: None },
                ms(900),
            );
        }
        r.record(0, (0, 0), false, Outcome::TimedOut, ms(2000));
        let dispatched = Dispatched {
            offered: vec![202],
            not_sent: vec![0],
            seconds: vec![(202, 0)],
            steady_offered: vec![0],
            steady_not_sent: vec![0],
            steady_from: None,
            lag: r.lag_histogram(),
            elapsed: Duration::from_secs(1),
            stopped_early: false,
        };
        let report = Report::build(run_info(), &[], r, dispatched, 1);
        let (ok, refused) = (&report.total.latency_ms, &report.total.refused_latency_ms);
        assert_eq!((ok.count, refused.count), (98, 100), "{refused:?}");
        assert!((ok.p99 - 40.0).abs() < 0.05, "{ok:?}");
        assert!((refused.p50 - 2.0).abs() < 0.01, "{refused:?}");
        assert!((refused.p99 - 2.0).abs() < 0.01, "{refused:?}");
        assert!(
            (refused.max - 7.0).abs() < 0.01,
            "the 404 is a refusal: {refused:?}"
        );
        let json = report.to_json();
        assert!(
            json.contains("\"refused_latency_ms\": {\n      \"count\": 100,"),
            "{json}"
        );
        let text = report.to_string();
        let header = row(&text, "tier");
        assert_eq!(
            header[header.len() - 4..],
            ["refused", "p50", "refused", "p99"]
        );
        let all = row(&text, "all");
        assert_eq!(all[all.len() - 2..], ["2.00", "2.00"], "{text}");
    }
}

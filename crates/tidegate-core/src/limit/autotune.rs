//! A latency-driven limit that checks its own premise: Cinnamon's auto-tuner.
//!
//! Vegas-style limits compare the current latency with a no-load baseline and read the excess
//! as a queue. They are fast and need no exploration, but everything rests on the baseline:
//! measured under load (cold start, approach from above) or after it drifted, it is too high
//! and the limit sits far above the service's knee; when the service genuinely got slower, a
//! baseline that only ever goes down is too low and the limit shrinks to nothing. Uber's
//! Cinnamon keeps the Vegas core but arbitrates with a second, model-free signal: whether
//! more concurrency still buys more throughput (the covariance of inflight and throughput).
//! This module is tidegate's reading of that design.
//!
//! The whole rule is stated on [`Autotune`]; this file holds the state, the latency rule and
//! the close of a window that runs the rest, each part in a file of its own: `window` (when a
//! window is measured well enough to be judged), `baseline` (the no-queue rtt and when the
//! service was seen not saturated), `trial` (large steps judged by the throughput they
//! bought), `served` (regaining a level the service held before it got slower),
//! `covariance` (Cinnamon's arbitration, its resets and re-anchorings) and `rounds` (slow
//! start's doubling once a round, between windows).

use serde::{Deserialize, Serialize};

use super::window_counts::WindowCounts;
use super::{Limit, Outcome, Sample};
use crate::time::{Nanos, Time};

mod baseline;
mod covariance;
mod floor;
mod latency;
mod rounds;
mod served;
mod trial;
mod window;

use baseline::{Baseline, Light};
use covariance::{RING, ResetCheck, RingWindow};
use floor::ProductFloor;
use latency::Shrink;
use rounds::{LITTLE_DOUBLING, RoundEnd, Rounds};
use trial::{MAX_DOUBLINGS, Span, Trial, one_request_is_judged};
use window::{FIRST_WINDOW_RTTS, LITTLE_EXCESS, WINDOW_RTTS};

/// Configuration of [`Autotune`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutotuneConfig {
    /// Limit before any measurement, in requests. Default 20. It holds until the first
    /// window anchors the baseline (see [`Autotune`]): above it a service's normal load is
    /// shed for those first seconds, and below a knee under it a start into an overload
    /// anchors the baseline on the service's own queue (`docs/experiments/cold-start.md`).
    pub initial: u32,
    /// Smallest limit, in requests (at least 1). Default 1.
    pub min: u32,
    /// Largest limit, in requests. Default 1000.
    pub max: u32,
    /// Longest measurement window: the limit moves at most once per window. A window also
    /// closes after 100 of its answers' mean rtt, so a service answering in under 5 ms is
    /// measured faster, and lasts at least one smoothed rtt, so a service answering in
    /// seconds is measured on whole answers. Default 500 ms.
    pub window: Nanos,
    /// A window closes only once it holds at least this many samples, even if `window` has
    /// passed, so that quiet services are not judged on a handful of requests. Default 10.
    pub min_window_samples: u32,
    /// Weight of the newest window's mean rtt in the smoothed rtt, in `(0, 1]`. Default 0.5.
    pub smoothing: f64,
    /// Latency tolerance: the smoothed rtt may exceed the baseline by `tolerance / sqrt(limit)`
    /// (a fraction) before the limit shrinks; below half that it grows. Default 1.5: 34% at
    /// 20, 11% at 200, 150% at 1.
    pub tolerance: f64,
    /// Multiplicative decrease after a window whose drop fraction exceeds `drop_tolerance`.
    /// Default 0.9.
    pub backoff: f64,
    /// Fraction of a window's samples that may be drops without a backoff. Default 0.05.
    pub drop_tolerance: f64,
    /// Below this elasticity of throughput to inflight, concurrency buys nothing. Default 0.2.
    pub low_elasticity: f64,
    /// Above this elasticity, concurrency still buys throughput almost proportionally.
    /// Default 0.6.
    pub high_elasticity: f64,
    /// Factor applied to the limit when the baseline is found to have drifted up, at the
    /// deepest: where the covariance check's windows bracketed the knee, a reset goes only
    /// down to the least concurrency at which they saw their best throughput. Default 0.5.
    pub reset_factor: f64,
    /// Factor of a probe: when the limit held too steady for the covariance to tell anything,
    /// one window runs at `limit x probe_factor`, then the limit is restored. Default 0.75.
    pub probe_factor: f64,
    /// Client timeout, if known: a `Success` whose rtt is at or beyond it is counted as a
    /// drop (a timeout that looks like a success). Default none.
    pub timeout: Option<Nanos>,
    /// Hold the limit at least at the concurrency the service was seen to hold without a
    /// queue: the rate of the windows that answered at the no-queue rtt, times that rtt
    /// (Little's law, measured by [`Bdp`](super::Bdp)'s estimators; except while probing).
    /// Where the answers' spread reads as a queue, the latency rule alone walks the limit
    /// below the knee. Default true.
    pub product_floor: bool,
}

impl Default for AutotuneConfig {
    fn default() -> AutotuneConfig {
        AutotuneConfig {
            initial: 20,
            min: 1,
            max: 1000,
            window: Nanos::from_millis(500),
            min_window_samples: 10,
            smoothing: 0.5,
            tolerance: 1.5,
            backoff: 0.9,
            drop_tolerance: 0.05,
            low_elasticity: 0.2,
            high_elasticity: 0.6,
            reset_factor: 0.5,
            probe_factor: 0.75,
            timeout: None,
            product_floor: true,
        }
    }
}

/// What the latency rule did in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Grow,
    Hold,
    Shrink,
}

/// Cinnamon's auto-tuner (Uber engineering blog, "Cinnamon: Using Century Old Tech to Build a
/// Mean Load Shedder", 2023: "a heavily modified version of TCP Vegas" with smoothed timings,
/// a tolerance that grows as the limit shrinks, and resets guided by the covariance of
/// inflight and throughput). The detail post was not available; this is tidegate's design
/// from that description, stated precisely:
///
/// **Windows.** Samples are grouped in windows of 500 ms, or of 100 of their answers' mean
/// rtt if that is shorter (a service answering in 1 ms is measured every 100 ms), of at
/// least one smoothed rtt (a service answering in 2 s is measured every 2 s: in 500 ms
/// windows of 10 answers, each window held the answers that finished first, and an
/// exponential service of 30 workers at 3x lost two thirds of its capacity), and at least
/// 10 samples. Above a limit of 10, a window without drops also waits (up to 8 s) until its
/// answers measure their mean to a sixth of the tolerance, unless they are beyond doubt
/// above it or moved since the window was due (see `Autotune::measured_enough`): a
/// cached or heavy-tailed service's 500 ms of answers read noise as a queue. Per window:
/// mean rtt of successes `r` (rtt at or beyond the known timeout counts as a drop), throughput
/// `x` (successes per second), mean inflight at admission `q`, largest inflight, drops. A drop's
/// rtt is never a latency measurement.
///
/// **Latency rule (modified Vegas).** `srtt` = EWMA of `r` (weight 0.5), with the variance of
/// that estimate from the spread of each window's answers; `base` = the lowest `srtt` since the
/// last reset, the `n`-th window offering its `srtt` plus `sqrt(2 ln n)` of its standard errors
/// (the expected shortfall of the least of `n` noisy estimates: a bare minimum sinks under
/// the true mean as windows accumulate; see `Baseline`). With `ratio = srtt / base - 1` and
/// `tol = 1.5 / sqrt(limit)`:
/// - drops above 5% of the window: `limit x min(0.9, 1 - f/2)`, `f` the window's drop
///   fraction (DCTCP's proportional decrease where it is deeper than 0.9), and at least one
///   request less than the limit in force;
/// - `ratio > tol`: shrink to `limit x (1 + tol) / (1 + ratio)` (what the tolerance would allow
///   if latency is proportional to concurrency), at most halving;
/// - `ratio < tol / 2` and the limit is in use (largest inflight >= limit / 2): grow by
///   `max(1, log10(limit))`, or by the headroom `limit x (tol / 2 - ratio)` (FAST TCP's
///   update, capped under a trial's step) once a covariance check saw throughput follow
///   inflight; double instead during slow start (from the first window until the first that
///   does not grow, but for one that holds because the rounds doubled the limit past the
///   demand, and only while the largest inflight reached the limit), and between windows
///   once a round while the round's least answer holds (see `rounds`); except back to
///   the limit that last drew drops, which waits
///   for 10 such windows, doubled after each retry that drew drops again (up to 160) and
///   halved after one that held; the limit grows past a retried level only once it has
///   held there for 10 windows;
/// - otherwise hold.
///
/// `tol` grows as `1/sqrt(limit)`: a mean over fewer concurrent requests is noisier, and at small
/// limits one more request is a large relative change, so the rule tolerates more there and
/// does not walk down to 1 on jitter. After a shrink the next window is a mix of both limits:
/// it is not measured. The first window does not anchor the baseline unless it lasted 20 of
/// its answers' mean rtt: its answers are those of the requests that finished first, the
/// short ones (it still seeds `srtt`, but the first baseline is at least the anchoring
/// window's own mean). Nor does any window whose requests stayed in the service, by
/// Little's law (mean inflight over rate), more than twice as long as its answers took:
/// its answers are the short ones while longer requests still run, and it neither sets
/// nor lowers the baseline.
///
/// **Covariance arbitration.** Every 10 windows, the slope of `ln x` on `ln q` (the
/// elasticity: `cov / var`, about 1 below the knee, 0 on a plateau, negative with contention)
/// is computed if `q` spread by at least 15%. It only arbitrates when the latency rule pushed
/// one way in those windows:
/// - mostly *grow* but elasticity < 0.2: more concurrency buys nothing although latency says
///   there is no queue, so the baseline is too high (measured under load, or drifted up):
///   **reset**: `limit x 0.5`, forget `base` and `srtt`, re-learn them at the lower limit;
///   but no deeper than the ring's evidence: where a window at less concurrency, the limit
///   bound, served less than the ring's best beyond the noise of the counts, the ring
///   bracketed the knee, and the reset goes to the least mean inflight of a window that
///   served as much as the best (see `Autotune::best_served_at`). A reset is judged by
///   what it cost: if throughput then fell with inflight while the rtt lost a queue, it
///   went below the knee, and the limit goes back to where throughput scales up to what
///   the ring served (see `Autotune::judge_reset`);
/// - more *shrinks* than growths but elasticity > 0.6: less concurrency costs throughput
///   proportionally although latency says there is a queue, so the service got slower, not
///   busier, and the baseline is stale: **re-anchor** `base = srtt`. (Requiring most windows
///   to shrink missed the case where the rule shrinks a little and holds in turn at the
///   tolerance's edge: after Kanaloa's work slowed by 46%, the limit sat at 8-11 of 20 for
///   three minutes on two seeds of five.)
///
/// At the knee the rule mostly holds, so neither fires.
///
/// **Futile shrinks.** A latency shrink from `L` to `L'` expects, if the excess is a queue,
/// the rtt to fall to `base + (srtt - base) x L'/L`. The first measured window after it
/// judges it: if the rtt fell by less than half of that, the shrink was futile. Two futile
/// shrinks in a row re-anchor `base = srtt`: the service got slower, not busier. This is
/// the covariance check's re-anchoring from the shrinks' own evidence, within two shrinks
/// instead of ten windows (minutes, at a few answers a second). Shrinks expecting less than
/// 5% are not judged.
///
/// **Probes.** If inflight spread less than 15% over the 10 windows (the limit held steady),
/// the covariance cannot tell anything, and a baseline measured under load would never be
/// questioned (started at 60 on the synthetic service, the limit held at 50 for good). So the
/// next window runs at `limit x 0.75`, as BBR's ProbeRTT drains its queue to re-measure the
/// minimum rtt: the baseline sees a lighter load and the next check has a spread. The limit is
/// then restored, unless the probe window itself asked for less. The window after any
/// deliberate change is not measured, and smoothing restarts after it. A probe that lowered
/// the baseline by less than 5% found nothing, and the next one waits for twice as many
/// steady checks (up to 16); one that found something, a reset or a re-anchoring brings
/// them back to every check. Cost at the knee: one window in about twelve at 3/4 of the
/// limit at first, one in about 190 once settled. No probe where the baseline is clear:
/// measured while the demand set the rate and, within 10 windows, the service served a
/// third more (it was not saturated, so its rtt held no queue of its own; see `Light`);
/// a baseline re-anchored, or falling by 5% or more, is not clear until seen so again.
///
/// **Trials at small limits.** Where one request is at least 10% of the limit (10 or less),
/// the tolerance is widest and one request is a large step: from 1 to 2 on RSocket's
/// service (latency by requests per second) the rtt rises by 84% for 8% more throughput,
/// within the 106% tolerated at 2; from 7 to 8 in front of the capacity demo's 7 workers
/// by 14% for nothing. So such a step is a trial, judged over a whole span (two windows
/// and at least 1 s, a whole period of a service that counts per second) on each side:
/// if the higher limit's mean inflight exceeds the lower's by 5% and throughput rose with
/// an elasticity under `low_elasticity` and short of following inflight by more than three
/// standard errors of its noise (see `Span::gain_noise`), the higher limit bought a queue,
/// not service. A growth is then undone, a probe (one request less, in place of the 3/4
/// probe) kept and followed by the next one, and the higher level is retried as one that
/// drew drops is, after 80 windows asking to grow, then 160 (after 10 for a growth above
/// 10 that latency sent back). A step whose throughput moved with an
/// elasticity above `high_elasticity`, by three standard errors of its noise, was below
/// the knee: the baseline is re-anchored, as the covariance check would, which cannot see
/// a one-request step (under its 15%).
///
/// **Regaining a level.** Above 10, the largest mean inflight of a window the demand set
/// (the limit not reached) within the tolerance is a concurrency the service held. If a
/// latency shrink then finds the rtt beyond doubt above what the tolerance allows even
/// were every request past that level queued (the service got slower: fewer workers,
/// slower work), the limit remembers the level; once the smoothed rtt is back at the
/// baseline at a limit where the slower service queued, with the gate saturated, the
/// limit grows straight back to it as a trial, rather than by `log10(limit)` a window
/// (see `Autotune::regain`). Drops, a failed trial, a reset or a re-anchoring forget it.
///
/// Defaults: initial 20, range 1..=1000 (Cinnamon is zero-configuration and started at ~240 in
/// its experiment; 20 is the convention of the other limits here), and the values above, chosen
/// on the synthetic service of `limit::testkit` and documented in `docs/algorithms.md`.
#[derive(Clone, Debug)]
pub struct Autotune {
    config: AutotuneConfig,
    min: f64,
    max: f64,
    limit: f64,
    /// The least limit the service's rate and no-queue rtt allow (see `floor`), if enabled.
    floor: Option<ProductFloor>,
    srtt: Option<f64>,
    base: Option<Baseline>,
    /// The next window is not measured (it mixes two limits), and the one after restarts the
    /// smoothing.
    settling: bool,
    /// The last window was skipped: the next measurement starts `srtt` afresh.
    fresh: bool,
    /// While probing: the limit to restore after the probe window.
    probe: Option<f64>,
    /// The last latency shrink, to be judged by the next measured window.
    shrunk: Option<Shrink>,
    /// Futile latency shrinks in a row (see [`Autotune::check_shrink`]).
    futile: u32,
    /// The limit in force in the last window that backed off for drops, until a window at
    /// it asks to grow.
    drop_level: Option<f64>,
    /// Windows that asked to grow since the last backoff for drops.
    clean: u32,
    /// Retries of the fenced level (one that drew drops or failed a trial) that failed
    /// again, counted afresh at a fence below the last, less those that held for `RING` windows
    /// (at most [`MAX_DOUBLINGS`]; see [`Autotune::fence`]): the wait before the
    /// next retry is `RING << retries`.
    retries: u32,
    /// The last level fenced, by drops or a failed trial (see [`Autotune::fence`]).
    fenced: Option<f64>,
    /// The limit went back to the level that drew drops since the last backoff.
    retried: bool,
    /// Windows at or above the level that drew drops that asked to grow since it was
    /// retried.
    held: u32,
    /// Probes in a row that lowered nothing (at most [`MAX_DOUBLINGS`]): the next probe
    /// waits for `1 << idle_probes` rings without spread.
    idle_probes: u32,
    /// Rings without spread since the last probe.
    steady_rings: u32,
    /// While probing: the baseline before the probe, to tell whether it found anything.
    probe_base: Option<f64>,
    /// Measured windows since the limit in force last changed.
    span: Span,
    /// A large step waiting for its judgement.
    trial: Option<Trial>,
    /// A reset waiting for its judgement.
    reset: Option<ResetCheck>,
    /// The windows of the ring where the limit bound and latency saw no queue (they did not
    /// shrink), together: what a reset's premise rests on.
    ring_bound: Span,
    /// The last probe at a small limit was kept: probe again as soon as the span at the
    /// new limit is whole, rather than after a steady ring.
    descending: bool,
    /// A small limit that a probe of one request below showed to be the knee (see
    /// [`Autotune::at_the_knee`]).
    knee: Option<f64>,
    started: bool,
    /// The window open is the first since the start (see [`FIRST_WINDOW_RTTS`]).
    first_window: bool,
    /// No window has asked for less yet: growth doubles (TCP's slow start).
    slow_start: bool,
    /// Slow start's last window before its limit last moved, if the limit bound in it: what
    /// a doubling bought is judged against it (see [`Autotune::doubling_paid`]).
    before_doubling: Option<Span>,
    /// A window since slow start's limit last moved held rather than grew, and re-anchored
    /// the baseline instead of ending slow start.
    rebased_in_slow_start: bool,
    /// Slow start's doubling by rounds (see `rounds`).
    rounds: Rounds,
    /// The rounds doubled the limit in the window open.
    doubled_by_round: bool,
    /// The last covariance check that could tell saw throughput follow inflight (elasticity
    /// above `high_elasticity`), and none since below `low_elasticity`.
    elastic: bool,
    window: WindowCounts,
    success_rtt: Nanos,
    /// Sum of the squared rtts of the window's successes, in seconds squared: the spread
    /// that tells a queue from the service's own variability (see [`Autotune::measured_enough`]).
    success_rtt_sq: f64,
    /// Variance of `srtt` as an estimate of the mean rtt, in seconds squared.
    srtt_var: f64,
    /// `srtt` was started afresh on a censored window (see [`LITTLE_EXCESS`]) and no window
    /// since was not: it holds only the short answers, and is no level to anchor on.
    srtt_censored: bool,
    /// See [`Light`].
    light: Option<Light>,
    /// The largest mean inflight of a window that the demand set (the limit was not
    /// reached), within the tolerance and with at most one drop: a concurrency the service held
    /// without a queue (see [`Autotune::regain`]).
    served: Option<f64>,
    /// A latency shrink since found the service slower at `served` (see
    /// [`Autotune::slower_than_served`]).
    served_left: bool,
    /// Since then, the least limit in force at which the smoothed rtt was beyond two of its
    /// standard errors above the baseline: a concurrency at which the slower service
    /// queued.
    slower_at: Option<f64>,
    /// Windows in a row that cast doubt on the baseline, and whether they have (see
    /// [`Autotune::weigh_baseline`]).
    doubting: u32,
    base_in_doubt: bool,
    /// The window's successes and the sum of their rtts, in seconds, when it was first due
    /// (see [`Autotune::moved_since_due`]).
    at_due: Option<(u32, f64)>,
    /// The windows since the last check.
    ring: [RingWindow; RING],
    filled: usize,
}

impl Autotune {
    pub fn new(config: &AutotuneConfig) -> Autotune {
        let min = config.min.max(1);
        let max = config.max.max(min);
        Autotune {
            config: config.clone(),
            min: f64::from(min),
            max: f64::from(max),
            limit: f64::from(config.initial.clamp(min, max)),
            floor: config.product_floor.then(|| ProductFloor::new(config)),
            srtt: None,
            base: None,
            settling: false,
            fresh: false,
            probe: None,
            shrunk: None,
            futile: 0,
            drop_level: None,
            clean: 0,
            retries: 0,
            fenced: None,
            retried: false,
            held: 0,
            idle_probes: 0,
            steady_rings: 0,
            probe_base: None,
            span: Span::default(),
            trial: None,
            reset: None,
            ring_bound: Span::default(),
            descending: false,
            knee: None,
            started: false,
            first_window: false,
            slow_start: true,
            before_doubling: None,
            rebased_in_slow_start: false,
            rounds: Rounds::default(),
            doubled_by_round: false,
            elastic: false,
            window: WindowCounts::default(),
            success_rtt: Nanos::ZERO,
            success_rtt_sq: 0.0,
            srtt_var: 0.0,
            srtt_censored: false,
            light: None,
            served: None,
            served_left: false,
            slower_at: None,
            doubting: 0,
            base_in_doubt: false,
            at_due: None,
            ring: [RingWindow::EMPTY; RING],
            filled: 0,
        }
    }

    /// The floor in force, if enabled: none while probing, whose window below the limit
    /// is what tells the covariance anything (see `floor`).
    fn floor(&self) -> Option<u32> {
        self.floor
            .as_ref()
            .filter(|_| self.probe.is_none())
            .map(ProductFloor::get)
    }

    /// Latency increase tolerated at the current limit, as a fraction of the baseline.
    fn tolerance(&self) -> f64 {
        tolerance_at(self.config.tolerance, self.limit)
    }

    /// Whether slow start's last doubling bought throughput in proportion to the requests
    /// it added, within two standard errors of the counts' noise (`Span::gain_noise`), as
    /// `window`, the first after it, measured. Then the service is below its knee, and a
    /// window's rtt in the hold band (past half the tolerance, within it) is its own mean
    /// read against a baseline anchored under it: slow start's windows follow each
    /// doubling, so their answers are the short ones (docs/algorithms.md, "A baseline
    /// anchored on short-biased windows"). A doubling past the knee buys less than in
    /// proportion, with contention nothing.
    fn doubling_paid(&self, window: &Span) -> bool {
        self.before_doubling.is_some_and(|before| {
            let inflight = (window.inflight() / before.inflight().max(f64::MIN_POSITIVE)).ln();
            let gain = (window.throughput() / before.throughput().max(f64::MIN_POSITIVE)).ln();
            // At least `e^0.5`, 1.65 times the requests in flight: a doubling that filled.
            inflight >= 0.5 && gain >= inflight - 2.0 * Span::gain_noise(&before, window)
        })
    }

    /// Feeds slow start's rounds an answer in time, and doubles the limit if it ends a
    /// round that asks for it: one whose least answer did not rise, the limit full in it,
    /// the window's mean rtt so far within half the tolerance of the baseline (the latency
    /// rule's growth band: a queue the least answer missed, as contention's, stops it), and
    /// its requests in flight within [`LITTLE_DOUBLING`] of what Little's law gives for its
    /// answers.
    fn double_by_round(&mut self, sample: &Sample) {
        let in_force = self.limit.round();
        let mean = self.success_rtt.as_secs_f64() / f64::from(self.window.successes);
        let (base, window, now) = (self.base, &self.window, sample.now);
        let (tolerance, limit) = (self.config.tolerance, self.limit);
        // Asked only at a round's end: the tolerance's square root is not paid per answer.
        let may_double = || {
            let elapsed = now.saturating_since(window.start).as_secs_f64();
            let rate = f64::from(window.samples) / elapsed.max(f64::MIN_POSITIVE);
            let tol = tolerance_at(tolerance, limit);
            base.is_some_and(|base| mean <= base.value * (1.0 + tol / 2.0))
                && (window.mean_inflight() - 1.0).max(0.0) <= LITTLE_DOUBLING * rate * mean
        };
        let full = f64::from(sample.inflight) >= in_force;
        if self
            .rounds
            .on_answer(now, sample.rtt, full, mean, may_double)
            == RoundEnd::Double
        {
            self.limit = (self.limit * 2.0).min(self.max);
            self.doubled_by_round = true;
        }
    }

    fn open_window(&mut self, now: Time) {
        self.doubled_by_round = false;
        self.window = WindowCounts::open(now);
        self.success_rtt = Nanos::ZERO;
        self.success_rtt_sq = 0.0;
        self.at_due = None;
    }

    /// Closes the current window at `now`.
    fn close_window(&mut self, now: Time) {
        let elapsed = now.saturating_since(self.window.start).as_secs_f64();
        // The first window's answers are those of the requests that finished first, the
        // short ones, unless it lasted many times their rtt: anchored on it, the baseline
        // of an exponential 100 ms service sat 27% under its mean, and the limit under the
        // knee. (A service answering in milliseconds is anchored on its first window.) Nor
        // does any window whose requests stayed in flight far longer than its answers took
        // (see `LITTLE_EXCESS`).
        let rtt = self.window_rtt();
        let inflight = self.window.mean_inflight();
        let rate = f64::from(self.window.samples) / elapsed.max(f64::MIN_POSITIVE);
        let first = std::mem::take(&mut self.first_window);
        // How many times longer the window's requests stayed in flight than Little's law
        // allows its answers (see `LITTLE_EXCESS`).
        let overstay = rtt.map_or(0.0, |rtt| {
            inflight / (LITTLE_EXCESS * rate * rtt.mean + 1.0)
        });
        let censored = overstay > 1.0
            || rtt.is_some_and(|rtt| first && elapsed < FIRST_WINDOW_RTTS * rtt.mean);
        let settling = std::mem::take(&mut self.settling);
        let fresh = std::mem::replace(&mut self.fresh, settling);
        if !settling && elapsed > 0.0 {
            self.fresh = fresh;
            let throughput = f64::from(self.window.successes) / elapsed;
            let in_force = self.limit.round();
            let tol = self.tolerance();
            let window = Span {
                windows: 1,
                seconds: elapsed,
                successes: self.window.successes,
                samples: self.window.samples,
                inflight_sum: self.window.inflight_sum,
                rtt: self.success_rtt.as_secs_f64(),
                rtt_sq: self.success_rtt_sq,
            };
            self.span.add(&window);
            let mut judged = None;
            if let Some(mut trial) = self.trial.take() {
                trial.after.add(&window);
                if trial.after.whole() {
                    judged = Some(self.judge_trial(&trial));
                } else {
                    self.trial = Some(trial);
                }
            }
            // Whether the window's demand filled the limit in force.
            let bound = f64::from(self.window.inflight_max) >= in_force;
            self.weigh_baseline(rtt, overstay, censored, !bound);
            let moved = match judged {
                // The limit in force changes (back, or up from a probe): the latency
                // rule waits for a window at it.
                Some(lower) if self.settling => {
                    if lower {
                        Move::Shrink
                    } else {
                        Move::Grow
                    }
                }
                _ => self.latency_rule(rtt, censored, !bound),
            };
            self.fresh = false;
            let held = moved != Move::Shrink && judged.is_none();
            self.watch_served(rtt, held, in_force, tol, inflight);
            self.watch_demand(throughput, bound);
            // A window that holds only because the demand left the limit unfilled (the
            // rounds doubled it past a demand under the knee, which a step then fills) says
            // nothing of the knee, and does not end slow start.
            let unfilled = self.doubled_by_round
                && moved == Move::Hold
                && judged.is_none()
                && f64::from(self.window.inflight_max) * 2.0 < self.limit.round();
            if moved != Move::Grow && self.base.is_some() && !unfilled {
                // The first window judged that does not grow ends slow start for good; but
                // one that only holds after a doubling that paid read the service's own
                // mean against a baseline anchored under it: it re-anchors the baseline
                // there, once a doubling, and the next window decides.
                let rebase = self.slow_start
                    && moved == Move::Hold
                    && bound
                    && !self.rebased_in_slow_start
                    && self.doubling_paid(&window);
                if rebase {
                    self.rebased_in_slow_start = true;
                    self.anchor();
                } else {
                    self.slow_start = false;
                }
            }
            if let Some(restore) = self.probe.take() {
                // The probe is over; keep its outcome only if latency asked for even less.
                if moved != Move::Shrink {
                    self.limit = restore;
                    self.settling = true;
                }
                // It found something if it lowered the baseline beyond noise (a baseline
                // measured under load, as from Kanaloa's 60): probe again at the next ring.
                let found = match (self.probe_base.take(), self.base.map(|b| b.value)) {
                    (Some(before), Some(after)) => after < before * 0.95,
                    _ => true,
                };
                self.idle_probes = if found || moved == Move::Shrink {
                    0
                } else {
                    (self.idle_probes + 1).min(MAX_DOUBLINGS)
                };
            }
            if let Some(mut reset) = self.reset.take() {
                // A reset whose demand no longer filled it stands: throughput fell with the
                // demand. (A shrink since, for drops or latency, is judged with the rest:
                // the drops of a slow tail admitted before the reset land in its first
                // windows.)
                if bound {
                    reset.after.add(&window);
                    if reset.after.whole() {
                        self.judge_reset(&reset);
                    } else {
                        self.reset = Some(reset);
                    }
                }
            }
            if inflight > 0.0 && throughput > 0.0 {
                if bound && moved != Move::Shrink {
                    self.ring_bound.add(&window);
                }
                self.ring[self.filled] = RingWindow {
                    ln_inflight: inflight.ln(),
                    ln_throughput: throughput.ln(),
                    moved,
                    bound,
                    successes: self.window.successes,
                };
                self.filled += 1;
                if self.filled == RING {
                    self.arbitrate();
                }
            }
            // A limit the demand did not fill is no level to judge a doubling from.
            if self.slow_start && self.limit.round() != in_force {
                self.before_doubling = bound.then_some(window);
                self.rebased_in_slow_start = false;
            }
            let floor = self
                .floor()
                .map_or(self.min, |floor| self.min.max(f64::from(floor)));
            self.limit = self.limit.clamp(floor.min(self.max), self.max);
            if self.limit.round() != in_force {
                self.span = Span::default();
            }
            // Anything else that moved the limit in force (a shrink, a backoff, a reset, a
            // probe) ends the experiment.
            if let Some(trial) = self.trial
                && self.limit.round() != trial.to
            {
                self.trial = None;
                // A growth that latency sent back down within its trial failed it.
                if trial.to > trial.from && self.limit.round() < trial.to && moved == Move::Shrink {
                    self.remember_level(trial.to, true);
                }
            }
            // A latency shrink into small limits: walk on down by probes, each a trial.
            if moved == Move::Shrink
                && judged.is_none()
                && self.limit.round() < in_force
                && one_request_is_judged(self.limit.round())
            {
                self.descending = true;
            }
            // A kept probe walks on down, one request at a time, from 20 per server to 1
            // within seconds on RSocket's service rather than one probe per steady ring.
            if self.descending && !self.settling && self.trial.is_none() {
                if self.limit.round() - 1.0 < self.min {
                    self.descending = false;
                } else if self.span.whole() {
                    // Its judgement decides whether to walk on.
                    self.start_probe();
                }
            }
        }
        self.open_window(now);
    }
}

/// The latency increase tolerated at `limit`, as a fraction of the baseline, for a
/// configured `tolerance`: `tolerance / sqrt(limit)`.
fn tolerance_at(tolerance: f64, limit: f64) -> f64 {
    tolerance.max(0.0) / limit.sqrt()
}

impl Limit for Autotune {
    fn limit(&self) -> u32 {
        // In [min, max] and at least 1 by construction; `as` saturates. The floor moves
        // between windows (its own close at other times).
        let limit = self.limit.round() as u32;
        self.floor().map_or(limit, |floor| limit.max(floor))
    }

    fn on_sample(&mut self, sample: &Sample) {
        if sample.outcome == Outcome::Ignored {
            return;
        }
        if let Some(floor) = &mut self.floor {
            floor.observe(sample);
        }
        if !self.started {
            self.started = true;
            self.first_window = true;
            self.open_window(sample.now);
        }
        let in_time = self.window.count(sample, self.config.timeout);
        if in_time {
            self.success_rtt += sample.rtt;
            let rtt = sample.rtt.as_secs_f64();
            self.success_rtt_sq += rtt * rtt;
        }
        if in_time && self.slow_start && !self.rounds.ended() {
            self.double_by_round(sample);
        }
        // Multiplied out: `elapsed >= WINDOW_RTTS x mean rtt`, without a division per sample.
        let elapsed = sample.now.saturating_since(self.window.start);
        let due = elapsed >= self.config.window
            || (self.window.successes > 0
                && elapsed
                    .as_nanos()
                    .saturating_mul(u64::from(self.window.successes))
                    >= self.success_rtt.as_nanos().saturating_mul(WINDOW_RTTS));
        // And at least one smoothed rtt: a window shorter than the answers holds only those
        // that finished first, the short ones of a service whose work is spread; and a mean
        // measured well enough to be judged. (Last, so the arithmetic is done only for a
        // window otherwise due.)
        if due
            && self.window.samples >= self.config.min_window_samples
            && self.srtt.is_none_or(|srtt| elapsed.as_secs_f64() >= srtt)
            && self.measured_enough(elapsed)
        {
            self.close_window(sample.now);
        }
    }
}

#[cfg(test)]
mod tests;

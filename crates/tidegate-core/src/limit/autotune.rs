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

use serde::{Deserialize, Serialize};

use super::{Limit, Outcome, Sample};
use crate::time::{Nanos, Time};

/// A window also closes once it lasted this many of its answers' mean rtt (and holds
/// `min_window_samples`): a service answering in a millisecond is measured every 100 ms,
/// not every 500. At 500 ms, an overload of a 1 ms service was over before its first window
/// closed, and the limit sat at its initial 20 in front of 30 workers (a third of the
/// capacity shed). Services slower than 5 ms keep the configured window.
const WINDOW_RTTS: u64 = 100;

/// Standard errors of a window's mean rtt that must fit in the tolerance before the window
/// is judged (see [`Autotune::measured_enough`]). The latency rule reads a mean `tol` above
/// the baseline as a queue; a window of `n` answers whose spread is `cv` times their mean
/// measures that mean to `cv / sqrt(n)` of it, so below `n = (6 cv / tol)^2` noise alone
/// crosses the tolerance. At 500 ms, a cached service (90% of answers at 1 ms, 10% at
/// 100 ms: `cv` 2.7) judged its mean on a few dozen answers and halved its limit on windows
/// that happened to hold several slow ones; an exponential service answering in 2 s on 10.
/// Six rather than two or three: a window's own spread underestimates a heavy tail's (most
/// windows of a few dozen answers hold none of the slowest), and 2, 3 and 4 left more of
/// the family's heavy-tailed shapes shrinking on noise (docs/algorithms.md).
const WINDOW_PRECISION: f64 = 6.0;

/// Standard errors by which a window's mean rtt must exceed what the tolerance allows for
/// the window to be judged before it is measured to [`WINDOW_PRECISION`]: a queue that
/// doubles the rtt is seen as soon as it is beyond doubt, not after seconds of answers.
const CLEAR_EXCESS: f64 = 3.0;

/// A window waiting for precision lasts at most this many configured windows (8 s at
/// 500 ms): a service whose answers are too few or too spread to be measured in that time
/// is judged on what it gave.
const MAX_WINDOW_STRETCH: u32 = 16;

/// Windows per covariance check (about 5 s at the default 500 ms window).
const RING: usize = 10;

/// A step of at least this fraction of the limit in force is a trial, judged by the
/// throughput it changed (see [`Autotune::judge_trial`]); smaller steps are within the
/// noise of a window.
const JUDGED_STEP: f64 = 0.1;

/// Standard errors by which a trial's throughput must fall short of following inflight to
/// be futile (see [`Autotune::judge_trial`]): judged on the point estimate, an exponential
/// service's noise at a few dozen answers a second failed trials below its knee and walked
/// the limit down to half of it.
const TRIAL_EVIDENCE: f64 = 3.0;

/// Least length of each side of a trial: a whole period of a service that
/// counts its requests per second (leases, rate limits), which 500 ms windows would see
/// alternately in its fast and its slow half.
const JUDGED_SPAN: Nanos = Nanos::from_secs(1);

/// Most doublings of the wait before a limit that drew drops is tried again, and of the
/// rings between probes that found nothing: at most 16 times the first wait.
const MAX_DOUBLINGS: u32 = 4;

/// Doublings of the wait before a level that failed a trial is tried again the first
/// time: `RING << 3`, 80 windows (see [`Autotune::remember_level`]).
const FIRST_RETRY_DOUBLINGS: u32 = 3;

/// A closed window's mean rtt of successes, in seconds, and the variance of that mean.
#[derive(Clone, Copy, Debug)]
struct WindowRtt {
    mean: f64,
    variance_of_mean: f64,
}

/// The baseline: the lowest mean rtt the service has shown since the baseline was last set.
/// Each window's smoothed rtt is a noisy estimate, and the lowest of `n` of them falls short
/// of the mean they estimate by about `sqrt(2 ln n)` standard errors (the expected minimum of
/// `n` normal draws): a bare minimum sinks as windows accumulate, and every window then looks
/// like a queue (a 100 ms exponential service at 90 answers a second, window means spread by
/// 15%: the lowest sat 20-25% under the true mean within a minute, and the limit walked down
/// to 7 in front of 30 workers). So each window offers its estimate plus about that many of
/// its own standard errors: precise windows (a steady service, or many answers) set the
/// baseline almost exactly, noisy ones cannot drag it down by chance.
///
/// A baseline can also be measured under load, the service's own queue included (started
/// above the knee, or re-anchored there): then it is too high, and only a probe can tell
/// (see [`Autotune::arbitrate`]). It is *clear* once the service was seen not saturated
/// (see [`Light`]): then every window's rtt holds no queue of the service's own, the
/// least of them none either, and a probe finds nothing. A baseline that falls by more than
/// a probe would call a find (5%) is no longer clear: the service is changing.
#[derive(Clone, Copy, Debug)]
struct Baseline {
    value: f64,
    /// The variance of the estimate that set `value`.
    variance: f64,
    /// Windows seen since it was set.
    windows: u32,
    clear: bool,
}

impl Baseline {
    fn anchored(srtt: f64, variance: f64) -> Baseline {
        let mut base = Baseline {
            value: f64::INFINITY,
            variance: f64::INFINITY,
            windows: 0,
            clear: false,
        };
        base.observe(srtt, variance, 0.0);
        base
    }

    /// The `n`-th window offers `srtt` plus `sqrt(2 ln n)` standard errors (the first,
    /// alone, is no minimum: its own). A baseline measured less precisely than `needed`
    /// (a standard deviation: the precision the latency rule now asks of a window) is
    /// replaced, even upwards, by the offer of a more precise `srtt` of the same level
    /// (within [`SAME_LEVEL`] standard errors of their difference; the offer, like any
    /// other, so that the windows after it compare with it as with a minimum; the bare
    /// `srtt` left the family's mean goodput where it was): anchored early, on a window
    /// measured for a small limit's wide tolerance, it is otherwise kept as if exact, and at
    /// large limits the tolerance is smaller than its error (an exponential service anchored
    /// during slow start 5% under its mean, on a window of 381 answers, read that error as a
    /// queue at 260 and never grew back to its knee of 500 after a capacity that halved had
    /// recovered). Only where it is too coarse: a baseline replaced whenever a window was
    /// within the noise of it crept up over queues of 10-15% at a knee of 30.
    fn observe(&mut self, srtt: f64, variance: f64, needed: f64) {
        self.windows = self.windows.saturating_add(1);
        let shortfall = (2.0 * f64::from(self.windows).ln()).sqrt();
        let offered = srtt + shortfall * variance.sqrt();
        if offered < self.value * 0.95 {
            self.clear = false;
        }
        let difference = srtt - self.value;
        let refined = self.value.is_finite()
            && self.variance > needed * needed
            && variance < self.variance
            && difference * difference <= SAME_LEVEL * SAME_LEVEL * (variance + self.variance);
        if refined || offered < self.value {
            self.value = offered;
            self.variance = variance;
        }
    }
}

/// Standard errors of their difference within which a window's smoothed rtt measures the
/// same level as the baseline (see [`Baseline::observe`]).
const SAME_LEVEL: f64 = 2.0;

/// The least-served recent window whose rate the demand set (the limit was never reached):
/// if a window within [`RING`] windows after it served a third more (`1 / probe_factor`),
/// beyond two standard errors of their counts' noise (a Poisson count's, `1 / sqrt(n)` in
/// the log), the service was not saturated at that rate: the demand grew and the service
/// kept up. Only a demand-set rate tells it: a service that sped up under a limit that
/// binds (warming after a deploy) serves more too, and there its baseline, measured
/// slower, is exactly what a probe must find.
#[derive(Clone, Copy, Debug)]
struct Light {
    successes: u32,
    rate: f64,
    /// Measured windows since.
    age: u32,
}

impl Light {
    /// Whether a window that served `successes` at `rate` shows the service kept up.
    fn outgrown(&self, successes: u32, rate: f64, probe_factor: f64) -> bool {
        if successes == 0 || self.successes == 0 || self.rate <= 0.0 {
            return false;
        }
        let noise = (1.0 / f64::from(successes) + 1.0 / f64::from(self.successes)).sqrt();
        (rate / self.rate).ln() >= -probe_factor.clamp(f64::MIN_POSITIVE, 1.0).ln() + 2.0 * noise
    }
}

/// The first window sets the baseline only if it lasted this many of its answers' mean rtt:
/// its answers are those of the requests that finished first, biased short by about the
/// ratio of the rtt to the window's length.
const FIRST_WINDOW_RTTS: f64 = 20.0;

/// A window whose requests, by Little's law, stayed in the service more than this many
/// times as long as its answers took is *censored*: its answers are the short ones, while
/// longer requests still run (`mean inflight - 1 > LITTLE_EXCESS x rate x mean rtt`; the
/// request itself is counted in the inflight it was admitted at). Its mean seeds the
/// smoothed rtt but neither sets nor lowers the baseline. In any window, not only the
/// first: a cache in front of a slow store (90% of answers at 0.18 s, 10% at 18 s) answers
/// nothing slow for its first 18 s, and the windows of those seconds, each of ten fast
/// answers, anchored the baseline at the fast tenth of the mean; every later window read
/// as a queue ten times the baseline, and the limit walked from 20 to 1 at half the
/// service's capacity. A steady service's windows agree with Little's law to within their
/// noise, far inside a factor of two; a window that by chance holds few slow answers does
/// not, and is no evidence of a faster service either.
const LITTLE_EXCESS: f64 = 2.0;

/// Configuration of [`Autotune`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AutotuneConfig {
    /// Limit before any measurement, in requests. Default 20.
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
        }
    }
}

/// A latency shrink, as the window after it will judge it.
#[derive(Clone, Copy, Debug)]
struct Shrink {
    /// The smoothed rtt that asked for it.
    rtt: f64,
    /// The rtt to expect after it if the excess over the baseline was a queue, shrinking
    /// in proportion to the limit.
    expected_rtt: f64,
}

/// Throughput and inflight over consecutive measured windows at one limit in force.
#[derive(Clone, Copy, Debug, Default)]
struct Span {
    windows: u32,
    seconds: f64,
    successes: u32,
    samples: u32,
    inflight_sum: u64,
    /// Sum of the successes' rtts, in seconds.
    rtt: f64,
    /// Sum of their squares, in seconds squared.
    rtt_sq: f64,
}

impl Span {
    fn add(&mut self, other: &Span) {
        self.windows += other.windows;
        self.seconds += other.seconds;
        self.successes += other.successes;
        self.samples += other.samples;
        self.inflight_sum += other.inflight_sum;
        self.rtt += other.rtt;
        self.rtt_sq += other.rtt_sq;
    }

    /// Long enough to judge by: two windows and [`JUDGED_SPAN`].
    fn whole(&self) -> bool {
        self.windows >= 2 && self.seconds >= JUDGED_SPAN.as_secs_f64()
    }

    fn throughput(&self) -> f64 {
        f64::from(self.successes) / self.seconds.max(f64::MIN_POSITIVE)
    }

    fn inflight(&self) -> f64 {
        self.inflight_sum as f64 / f64::from(self.samples.max(1))
    }

    /// The mean rtt of its successes and the variance of that mean, in seconds.
    fn rtt(&self) -> (f64, f64) {
        let n = f64::from(self.successes.max(1));
        let mean = self.rtt / n;
        (mean, (self.rtt_sq / n - mean * mean).max(0.0) / n)
    }

    /// Standard error of `ln(throughput of b / throughput of a)`, the gain of a trial. The
    /// answers of a service kept busy are a renewal process: over `n` of them the count's
    /// variance is about `n x cv^2`, `cv` the coefficient of variation of their times (here
    /// of both spans' rtts together). So a Poisson-like exponential service (`cv` 1) needs
    /// hundreds of answers on each side to tell a step of one request in seven from noise,
    /// and a service of constant work (`cv` near 0) tells it from a few dozen.
    fn gain_noise(a: &Span, b: &Span) -> f64 {
        let n = f64::from(a.successes + b.successes);
        if n < 2.0 {
            return f64::INFINITY;
        }
        let mean = (a.rtt + b.rtt) / n;
        let variance = ((a.rtt_sq + b.rtt_sq) / n - mean * mean).max(0.0);
        let cv2 = variance / (mean * mean).max(f64::MIN_POSITIVE);
        let counts = 1.0 / f64::from(a.successes.max(1)) + 1.0 / f64::from(b.successes.max(1));
        (cv2 * counts).sqrt()
    }
}

/// A large step of the limit (a growth, or a probe at a small limit), until a whole span
/// at the new limit judges it against a whole span at the old one.
#[derive(Clone, Copy, Debug)]
struct Trial {
    /// The limit before it.
    from: f64,
    /// The limit in force during it.
    to: f64,
    /// The span at `from`, just before it.
    before: Span,
    /// The measured windows at `to` so far.
    after: Span,
}

/// A reset of the covariance check, until a whole span at the limit it set judges it by the
/// throughput it cost (see [`Autotune::judge_reset`]).
#[derive(Clone, Copy, Debug)]
struct ResetCheck {
    /// The limit before it.
    from: f64,
    /// The ring's windows where the limit bound and latency saw no queue, before it.
    before: Span,
    /// The measured windows since, each bound.
    after: Span,
}

/// Whether at the limit `in_force` a step of one request is a trial: it is at least
/// [`JUDGED_STEP`] of the limit (a limit of 10 or less).
fn one_request_is_judged(in_force: f64) -> bool {
    1.0 >= JUDGED_STEP * in_force
}

/// What the latency rule did in a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Move {
    Grow,
    Hold,
    Shrink,
}

/// A closed window, as the covariance check reads it.
#[derive(Clone, Copy, Debug)]
struct RingWindow {
    /// `ln` of its mean inflight.
    ln_inflight: f64,
    /// `ln` of its throughput.
    ln_throughput: f64,
    moved: Move,
    /// Whether its largest inflight reached the limit.
    bound: bool,
    /// Its successes: the noise of its throughput.
    successes: u32,
}

impl RingWindow {
    const EMPTY: RingWindow = RingWindow {
        ln_inflight: 0.0,
        ln_throughput: 0.0,
        moved: Move::Hold,
        bound: false,
        successes: 0,
    };
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
///   does not grow, and only while the largest inflight reached the limit); except back to
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
/// elasticity above `high_elasticity` was below the knee: the baseline is re-anchored, as
/// the covariance check would, which cannot see a one-request step (under its 15%).
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
    /// Retries of a limit that drew drops which drew drops again, less those that held
    /// for `RING` windows (at most [`MAX_DOUBLINGS`]): the wait before the next retry is
    /// `RING << retries`.
    retries: u32,
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
    /// The last covariance check that could tell saw throughput follow inflight (elasticity
    /// above `high_elasticity`), and none since below `low_elasticity`.
    elastic: bool,
    window_start: Time,
    samples: u32,
    successes: u32,
    drops: u32,
    success_rtt: Nanos,
    /// Sum of the squared rtts of the window's successes, in seconds squared: the spread
    /// that tells a queue from the service's own variability (see [`Autotune::measured_enough`]).
    success_rtt_sq: f64,
    /// Variance of `srtt` as an estimate of the mean rtt, in seconds squared.
    srtt_var: f64,
    /// `srtt` was started afresh on a censored window (see [`LITTLE_EXCESS`]) and no window
    /// since was not: it holds only the short answers, and is no level to anchor on.
    srtt_censored: bool,
    inflight_sum: u64,
    inflight_max: u32,
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
            elastic: false,
            window_start: Time::ZERO,
            samples: 0,
            successes: 0,
            drops: 0,
            success_rtt: Nanos::ZERO,
            success_rtt_sq: 0.0,
            srtt_var: 0.0,
            srtt_censored: false,
            inflight_sum: 0,
            inflight_max: 0,
            light: None,
            served: None,
            served_left: false,
            slower_at: None,
            at_due: None,
            ring: [RingWindow::EMPTY; RING],
            filled: 0,
        }
    }

    /// Latency increase tolerated at the current limit, as a fraction of the baseline.
    fn tolerance(&self) -> f64 {
        self.config.tolerance.max(0.0) / self.limit.sqrt()
    }

    fn open_window(&mut self, now: Time) {
        self.window_start = now;
        self.samples = 0;
        self.successes = 0;
        self.drops = 0;
        self.success_rtt = Nanos::ZERO;
        self.success_rtt_sq = 0.0;
        self.inflight_sum = 0;
        self.inflight_max = 0;
        self.at_due = None;
    }

    /// The mean rtt of the window's successes and the variance of that mean, if it had any.
    fn window_rtt(&self) -> Option<WindowRtt> {
        if self.successes == 0 {
            return None;
        }
        let n = f64::from(self.successes);
        let mean = self.success_rtt.as_secs_f64() / n;
        // One success says nothing of the spread: take it as wide as an exponential's.
        let variance = if self.successes > 1 {
            ((self.success_rtt_sq - n * mean * mean) / (n - 1.0)).max(0.0)
        } else {
            mean * mean
        };
        Some(WindowRtt {
            mean,
            variance_of_mean: variance / n,
        })
    }

    /// Whether the open window, due by its length, measured its mean rtt well enough to be
    /// judged: to [`WINDOW_PRECISION`] standard errors within the tolerance, or beyond
    /// doubt above it ([`CLEAR_EXCESS`]). A window with drops is judged at once (they are
    /// the plainest sign of overload, and the drop rule does not read the mean), as is one
    /// at a limit where one request is a trial (trials are judged over spans of their own,
    /// and at RSocket's limits of 1-3 a window waiting for precision held a queue for
    /// seconds). Before the baseline is set, a window waits at most
    /// [`FIRST_WINDOW_RTTS`] of its requests' mean time in the service: what the service does while a queue
    /// forms from the initial limit is a trend, not noise, and a window that waited for it
    /// to settle anchored the baseline on the queue (RSocket's at ten times its rtt).
    fn measured_enough(&mut self, elapsed: Nanos) -> bool {
        if self.drops > 0
            || one_request_is_judged(self.limit.round())
            || elapsed
                >= self
                    .config
                    .window
                    .saturating_mul(u64::from(MAX_WINDOW_STRETCH))
        {
            return true;
        }
        let Some(rtt) = self.window_rtt() else {
            return true;
        };
        if self.moved_since_due(rtt) {
            return true;
        }
        let precision = self.tolerance() * rtt.mean / WINDOW_PRECISION;
        let precise = rtt.variance_of_mean <= precision * precision;
        match self.base {
            None => {
                // Answers biased short (longer ones still run, as through the first
                // seconds of a cached service) understate how long a window must last:
                // by Little's law the requests' mean time in the service is their mean
                // inflight over the throughput, which counts the ones still running.
                let secs = elapsed.as_secs_f64();
                let inflight = self.inflight_sum as f64 / f64::from(self.samples.max(1));
                let in_service = inflight * secs / f64::from(self.successes.max(1));
                precise || secs >= FIRST_WINDOW_RTTS * rtt.mean.max(in_service)
            }
            Some(base) => {
                let excess = rtt.mean - base.value * (1.0 + self.tolerance());
                precise
                    || (excess > 0.0
                        && excess * excess > CLEAR_EXCESS * CLEAR_EXCESS * rtt.variance_of_mean)
            }
        }
    }

    /// Whether the answers of a window kept open past its length moved away from those it
    /// held when it was due, by [`CLEAR_EXCESS`] standard errors: the service changed (a
    /// queue forming, capacity lost), which is news to act on, not noise to average. A
    /// window waiting for precision while a queue grew in front of a limit set far above
    /// the knee anchored its baseline on that queue (from 200 on Kanaloa's service, the
    /// descent took minutes instead of seconds).
    fn moved_since_due(&mut self, window: WindowRtt) -> bool {
        let Some((n1, sum1)) = self.at_due else {
            self.at_due = Some((self.successes, self.success_rtt.as_secs_f64()));
            return false;
        };
        let n2 = self.successes - n1;
        if n1 == 0 || n2 < self.config.min_window_samples {
            return false;
        }
        let (n1, n2) = (f64::from(n1), f64::from(n2));
        let difference = (self.success_rtt.as_secs_f64() - sum1) / n2 - sum1 / n1;
        // The window's spread, from its variance of the mean.
        let variance = window.variance_of_mean * (n1 + n2);
        difference * difference > CLEAR_EXCESS * CLEAR_EXCESS * variance * (1.0 / n1 + 1.0 / n2)
    }

    /// Sets the baseline to the current smoothed rtt, if there is one.
    fn anchor(&mut self) {
        // What the service kept up with before says nothing of an rtt measured now.
        self.light = None;
        self.forget_served();
        // Seeded by a censored window only, the smoothed rtt is the short answers' mean: the
        // next window that is not censored anchors instead (see `latency_rule`). A trial
        // judged elastic re-anchored a cache in front of a slow store (90% of answers at
        // 0.18 s, 10% at 18 s) on a window of ten fast answers, every later window read as a
        // queue ten times the baseline, and the limit walked from 9 to 1.
        self.base = match self.srtt {
            Some(_) if self.srtt_censored => None,
            Some(srtt) => Some(Baseline::anchored(srtt, self.srtt_var)),
            None => self.base,
        };
    }

    /// The latency rule, on one closed window; returns what it did.
    fn latency_rule(&mut self, rtt: Option<WindowRtt>, censored: bool) -> Move {
        // The successes' latency is learnt even in a window with drops.
        if let Some(window) = rtt {
            let w = self.config.smoothing.clamp(f64::MIN_POSITIVE, 1.0);
            let (srtt, var) = match self.srtt {
                Some(s) if !self.fresh => (
                    s + w * (window.mean - s),
                    (1.0 - w) * (1.0 - w) * self.srtt_var + w * w * window.variance_of_mean,
                ),
                _ => {
                    self.srtt_censored = censored;
                    (window.mean, window.variance_of_mean)
                }
            };
            self.srtt_censored &= censored;
            self.srtt = Some(srtt);
            self.srtt_var = var;
            // A censored window (see `LITTLE_EXCESS`, `FIRST_WINDOW_RTTS`) seeds the
            // smoothing but neither anchors nor moves the baseline. (Not seeding the
            // smoothing either, an unbiased baseline, moved Kanaloa's limit from 25 to 30
            // with the file's seed, p99 264 ms against the 250 of its target: the tolerance
            // at 20 is wide enough there.)
            let tol = self.tolerance();
            match &mut self.base {
                Some(base) if !censored => {
                    base.observe(srtt, var, tol * base.value / WINDOW_PRECISION);
                }
                Some(_) => {}
                None if !censored => {
                    // Seeded by a censored first window, `srtt` is still half that
                    // window's short answers: the first baseline is the larger of it and
                    // this window's own mean (after a first window of a cached service's
                    // fast answers, anchored well under the mean, every window after read
                    // as a queue).
                    if window.mean > srtt {
                        self.srtt = Some(window.mean);
                        self.srtt_var = window.variance_of_mean;
                    }
                    self.anchor();
                }
                None => {}
            }
            if let Some(shrink) = self.shrunk.take() {
                self.check_shrink(&shrink, srtt);
            }
        }
        let drop_fraction = f64::from(self.drops) / f64::from(self.samples.max(1));
        if self.drops_call_for_backoff(drop_fraction) {
            // DCTCP's proportional decrease, `1 - f/2`, where it is deeper than `backoff`:
            // a window of nothing but drops halves the limit. At the mild 0.9, a service
            // that answered nothing in time (the capacity demo after its work doubled, 10-s
            // windows at 1 answer a second) took a minute to come down from 20 to 9. And at
            // least one request less: 0.9 of 8.4 is 7.6, still 8 in force.
            let factor = self
                .config
                .backoff
                .clamp(0.0, 1.0)
                .min(1.0 - drop_fraction / 2.0);
            // A retry of the limit that drew drops drew them again: wait twice as long
            // before the next one. The capacity demo's 8 (one request queued in a pool of 7
            // workers, callers with 0.5 s of slack) drew drops at every retry; at a retry
            // every 10 windows of 3 s, a sixth of the time was spent at 8 or backing off.
            if std::mem::take(&mut self.retried) {
                self.retries = (self.retries + 1).min(MAX_DOUBLINGS);
            }
            self.drop_level = Some(self.limit.round());
            self.clean = 0;
            self.held = 0;
            self.forget_served();
            self.limit = (self.limit * factor).min(self.limit.round() - 1.0);
            self.settling = true;
            self.shrunk = None;
            return Move::Shrink;
        }
        let base = self.base.map(|b| b.value);
        let (Some(srtt), Some(base), Some(window)) = (self.srtt, base, rtt) else {
            return Move::Hold;
        };
        let ratio = srtt / base - 1.0;
        let tol = self.tolerance();
        if ratio > tol {
            let before = self.limit;
            self.limit = (self.limit * (1.0 + tol) / (1.0 + ratio)).max(self.limit * 0.5);
            self.settling = true;
            self.shrunk = Some(Shrink {
                rtt: srtt,
                expected_rtt: base + (srtt - base) * self.limit / before,
            });
            if self.slower_than_served(window, base, tol) {
                self.served_left = true;
            }
            Move::Shrink
        } else if ratio < tol / 2.0 && f64::from(self.inflight_max) * 2.0 >= self.limit {
            // A limit that drew drops is tried again only after `RING` windows that asked to
            // grow, as a probe: latency alone may not see why it was too high (a pool of 7
            // workers at 2 s holding 8 queues one request, a few percent of the mean rtt,
            // yet enough to push some callers past their timeout). Growing back at once
            // kept the limit at 8 half of the time.
            self.clean += 1;
            if self
                .drop_level
                .is_some_and(|level| self.limit.round() >= level)
            {
                // The level held for a window: growing further is a retry of it. It must
                // hold for `RING` windows to shorten the next wait (one window of 10
                // samples without drops is weak evidence: 8 in the capacity demo draws
                // one drop in ten requests).
                self.drop_level = None;
                self.retried = true;
            }
            if self.retried {
                // Not past a retried level until it has held for `RING` windows: one
                // window of 10 samples without drops is weak evidence (8 in the capacity
                // demo draws one drop in ten requests, and growing on at once reached 10).
                self.held += 1;
                if self.held < RING as u32 {
                    return Move::Hold;
                }
                self.held = 0;
                self.retried = false;
                self.retries = self.retries.saturating_sub(1);
            }
            // FAST TCP's update, `limit x base / rtt + alpha`, read at the growth's end: far
            // below the knee (the rtt at its baseline) a limit grows in proportion to the
            // headroom the tolerance leaves, up to just under a trial's step, so that a knee
            // of 500 is found in seconds rather than in 200 windows of `log10(limit)`. Only
            // where the last covariance check saw concurrency buy throughput in proportion:
            // a baseline measured under load (started far above the knee) shows headroom
            // that is not there, and growing by it undid each reset of the descent.
            let headroom = if self.elastic {
                (self.limit * (tol / 2.0 - ratio)).min(JUDGED_STEP * self.limit.round() - 1.0)
            } else {
                0.0
            };
            // Slow start (TCP's, BBR's startup): from the first window until the first that
            // does not grow, the limit doubles, so that a knee of 500 is found in five windows
            // rather than two hundred. Only while demand exceeds the limit (it was reached): a
            // limit that doubled on half its use overshot RSocket's servers from their first
            // window. A doubling past the knee is shrunk back by the latency it adds.
            let slow_start = self.slow_start && f64::from(self.inflight_max) >= self.limit.round();
            let grown = if slow_start {
                self.limit * 2.0
            } else {
                self.limit + self.limit.log10().max(1.0).max(headroom)
            };
            let wait = (RING as u32) << self.retries;
            // Straight back to a level the service held before it got slower, once it is
            // fast again (see `regain`); not past a level that drew drops before its wait.
            let regained = self.regain(slow_start, srtt, base).filter(|&level| {
                self.drop_level
                    .is_none_or(|dropped| level < dropped || self.clean >= wait)
            });
            if regained.is_some() {
                // One jump per slowdown: the trial judges it, and the windows after it
                // measure what the service holds now.
                self.forget_served();
            }
            let grown = regained.unwrap_or(grown);
            if self
                .drop_level
                .is_some_and(|level| grown.round() >= level && self.clean < wait)
            {
                return Move::Hold;
            }
            let large = grown.round() - self.limit.round() >= JUDGED_STEP * self.limit.round();
            if large && self.probe.is_none() && !slow_start {
                // A large step is a trial: judged by the throughput it buys over a whole
                // span at each limit (see `judge_trial`), one at a time. A regain's span
                // before may be one window (see `regain`).
                if self.trial.is_some() || !(self.span.whole() || regained.is_some()) {
                    return Move::Hold;
                }
                self.start_trial(grown.round());
                self.settling = true;
            }
            if self.drop_level.is_some_and(|level| grown.round() >= level) {
                self.retried = true;
            }
            self.limit = grown;
            Move::Grow
        } else {
            Move::Hold
        }
    }

    /// Whether the window's drops, `fraction` of its samples, exceed the tolerated share,
    /// by more than one drop: one drop in a window of 10-19 samples reads as 5-10%, but
    /// says nothing of a rate. A service whose slowest answer in a hundred outlasts the
    /// caller's timeout drew one such drop every few windows once its windows were small,
    /// and each backoff made them smaller: a cache in front of a slow store (bimodal 99/1,
    /// 10 workers, a step to 3x) walked down to 1 and served 67% of its capacity (83% with
    /// two drops; 2 s of work at 30 workers, 36% -> 98%).
    fn drops_call_for_backoff(&self, fraction: f64) -> bool {
        fraction > self.config.drop_tolerance && self.drops >= 2
    }

    /// Judges a trial once a whole span at its limit is measured; returns whether it ended
    /// at the lower of its two limits. By Little's law, more requests in flight at the
    /// same throughput are a queue: if the mean inflight at the higher limit exceeds the
    /// lower's by more than half of [`JUDGED_STEP`] and throughput rose with an elasticity
    /// under `low_elasticity`, by [`TRIAL_EVIDENCE`] standard errors less than inflight
    /// would have given, the higher limit buys latency, not service. A growth is then
    /// undone and a probe kept, and the higher level is remembered as one that drew drops
    /// is (retried after 80 windows, then 160; see `remember_level`). The latency rule
    /// cannot see this at small limits, where its tolerance is widest: from 1 to 2 on
    /// RSocket's service (latency by requests per second) the rtt rises by 84% for 8% more
    /// throughput, within the 106% tolerated at 2; from 7 to 8 on the capacity demo's
    /// 7 workers by 14% for nothing, within 53%. A growth that the load did not fill is
    /// kept, a probe that it did not tell from the limit before is not.
    fn judge_trial(&mut self, trial: &Trial) -> bool {
        let grew = trial.to > trial.from;
        let (lower, higher) = if grew {
            (&trial.before, &trial.after)
        } else {
            (&trial.after, &trial.before)
        };
        let inflight = higher.inflight() / lower.inflight().max(f64::MIN_POSITIVE);
        let gain = (higher.throughput() / lower.throughput()).ln();
        let elasticity = gain / inflight.ln();
        let told = inflight >= 1.0 + JUDGED_STEP / 2.0 && !elasticity.is_nan();
        // Futile only if throughput fell short of following inflight by more than its noise.
        let futile = told
            && elasticity < self.config.low_elasticity
            && gain < inflight.ln() - TRIAL_EVIDENCE * Span::gain_noise(lower, higher);
        if told && elasticity > self.config.high_elasticity {
            // The step bought throughput in proportion: below the knee, where whatever rtt
            // the latency rule reads as a queue is the service's own (it got slower, not
            // busier). Re-anchor, as the covariance check would with a spread to see: at
            // these limits a probe of one request is under its 15%, and the baseline from
            // before the service slowed held the limit at half its knee for minutes.
            self.anchor();
        }
        if !grew {
            // A probe that cost throughput in proportion was at the knee.
            if told && elasticity > self.config.high_elasticity {
                self.knee = Some(trial.from.round());
            }
            // As probes for the baseline: one that found nothing spaces the next out.
            self.descending = futile;
            self.idle_probes = if futile {
                0
            } else {
                (self.idle_probes + 1).min(MAX_DOUBLINGS)
            };
        }
        if !futile {
            if !grew {
                self.limit = trial.from;
                self.settling = true;
            }
            return false;
        }
        self.remember_level(trial.from.max(trial.to).round());
        if grew {
            self.limit = trial.from;
            self.settling = true;
            self.shrunk = None;
        }
        true
    }

    /// A level that failed a trial is tried again as one that drew drops is: after
    /// `RING << retries` windows asking to grow, and at least 80 (`RING << 3`) where one
    /// request is a large step of the level below it (10 or less). There a retry is dear: on
    /// RSocket's service it holds a server at twice its concurrency for a whole span, past
    /// the curve's knee (p99 90-180 ms in those seconds against 19 ms); in the capacity
    /// demo, 8 for 7 workers costs the queued callers their timeout. Waiting 20 windows,
    /// those retries were a third of RSocket's steady seconds above 19 ms and most of what
    /// the capacity demo lost in its steady state (capacity-adaptive seed 5: 3.26 ok/s;
    /// 3.34 waiting 80). Above, a failed trial is a growth of a tenth that latency sent
    /// back: retrying it costs a window of a small queue, and waiting 80 windows held a
    /// Pareto service at 18 of its 30 workers for 40 s after its capacity came back.
    fn remember_level(&mut self, level: f64) {
        self.forget_served();
        let retried = std::mem::take(&mut self.retried);
        let first = if one_request_is_judged(level - 1.0) {
            FIRST_RETRY_DOUBLINGS
        } else {
            0
        };
        self.retries = (self.retries + u32::from(retried)).clamp(first, MAX_DOUBLINGS);
        self.drop_level = Some(level);
        self.clean = 0;
        self.held = 0;
    }

    /// Forgets the concurrency the service held: a backoff for drops, a failed trial, a
    /// reset or a re-anchored baseline says it (or the baseline it was measured against) no
    /// longer holds; a regain starts its own measurement.
    fn forget_served(&mut self) {
        self.served = None;
        self.served_left = false;
        self.slower_at = None;
    }

    /// Whether a window that asked for a latency shrink shows the service slower at the
    /// concurrency it held (`served`), not only asked for more: its mean rtt exceeds, by
    /// [`CLEAR_EXCESS`] of its standard errors, what the tolerance allows even if every
    /// request past `served` queued, `base x (1 + tol) x inflight / served` by Little's
    /// law. A demand that grew past the knee of an unchanged service stays under that: the
    /// rtt grows at most in proportion to the concurrency above a level held at the
    /// baseline. When half the workers left, the rtt at twice the concurrency held tripled
    /// (30 workers, 100 ms of exponential work: 0.34 s at 51 in flight, 23 held at 0.1 s).
    fn slower_than_served(&self, window: WindowRtt, base: f64, tol: f64) -> bool {
        let Some(served) = self.served.filter(|&served| served > 0.0) else {
            return false;
        };
        let inflight = self.inflight_sum as f64 / f64::from(self.samples.max(1));
        let excess = window.mean - base * (1.0 + tol) * (inflight / served).max(1.0);
        excess > 0.0 && excess * excess > CLEAR_EXCESS * CLEAR_EXCESS * window.variance_of_mean
    }

    /// Follows the concurrency the service holds (see `regain`), after a measured window
    /// closed at the limit `in_force`, with the tolerance `tol` there and a mean inflight
    /// `inflight`; `held` if the latency rule neither shrank on it nor judged a trial.
    fn watch_served(
        &mut self,
        rtt: Option<WindowRtt>,
        held: bool,
        in_force: f64,
        tol: f64,
        inflight: f64,
    ) {
        let (Some(srtt), Some(base)) = (self.srtt, self.base) else {
            return;
        };
        // One drop in a window says nothing of a rate (see `drops_call_for_backoff`): a
        // window of a thousand answers of exponential work with a 10x timeout holds one
        // about every twentieth time, and refusing it left the level a service held before
        // it got slower unknown, so that nothing was regained once it was fast again.
        if self.drops > 1 {
            return;
        }
        if self.served_left && srtt > base.value + 2.0 * self.srtt_var.sqrt() {
            self.slower_at = Some(self.slower_at.map_or(in_force, |l| l.min(in_force)));
        }
        // By Little's law a window's answers measure the rtt at its mean inflight, not at
        // its peak: the peak of a Poisson demand at half a knee of 10 reached 16 in flight
        // with the window's mean at the baseline, and a jump back to 16 queued.
        let demand_set = f64::from(self.inflight_max) < in_force;
        if held && demand_set && rtt.is_some_and(|rtt| rtt.mean <= base.value * (1.0 + tol)) {
            let level = inflight.min(in_force);
            self.served = Some(self.served.map_or(level, |served| served.max(level)));
        }
    }

    /// The level to grow straight back to, as a trial, if the limit left it for a service
    /// that got slower and is fast again. The service held `served` in flight, set by the
    /// demand, at the baseline; a latency shrink then found it slower there (see
    /// `slower_than_served`: fewer workers, slower work), and neither drops nor a failed
    /// trial since said the level itself was too high. Now, at a limit in force at which
    /// the slower service queued (`slower_at`), the gate is saturated (demand exceeds the
    /// limit) and the smoothed rtt is at the baseline (not re-anchored since: that forgets
    /// `served`), within two of its standard errors, and below the growth threshold (half
    /// the tolerance) by as much: the queue is gone, and the service is faster than it was
    /// at this concurrency. Growing by `log10(limit)` per window measured to the tolerance's
    /// precision (16 x limit answers for exponential work) or by FAST's headroom, capped
    /// under a trial's step, took 50-100 work times back to the workers that had returned
    /// (500 workers, halved, then back: from 263 at the recovery to 290 a hundred work
    /// times later). The jump is a trial, judged as any other large growth (see
    /// `judge_trial`); one that buys no throughput is undone and remembered as a level
    /// that failed. Its span before may be a single window of at least a second, measured
    /// to the precision the latency rule asks (each growth restarts the span, so a limit
    /// growing window after window never has a whole one). Not at limits of 10 or less,
    /// where every step of one request is a trial already; not during slow start.
    ///
    /// Without `slower_at`, a jump followed the first window after a shrink, at the
    /// slower service's knee, where the rtt is at the baseline too: the knee of 100 halved
    /// jumped from 54 back to 145 while the capacity was still halved.
    fn regain(&self, slow_start: bool, srtt: f64, base: f64) -> Option<f64> {
        let served = self
            .served
            .filter(|_| self.served_left)?
            .min(self.max)
            .round();
        let in_force = self.limit.round();
        let saturated = f64::from(self.inflight_max) >= in_force;
        let error = 2.0 * self.srtt_var.sqrt();
        let at_baseline =
            srtt <= base + error && srtt + error <= base * (1.0 + self.tolerance() / 2.0);
        (!slow_start
            && !one_request_is_judged(in_force)
            && saturated
            && at_baseline
            && served - in_force >= JUDGED_STEP * in_force
            && self.slower_at.is_some_and(|queued| in_force >= queued)
            && self.probe.is_none()
            && self.trial.is_none()
            && self.span.windows >= 1
            && self.span.seconds >= JUDGED_SPAN.as_secs_f64())
        .then_some(served)
    }

    /// Judges a latency shrink by the first measured window after it. A shrink is futile if
    /// the rtt fell by less than half of what a queue shrinking with the limit would have
    /// given back: less concurrency bought no latency, so the excess over the baseline is
    /// not a queue; the service got slower, not busier, and the baseline is stale. Two
    /// futile shrinks in a row re-anchor it to the current rtt, as the covariance check
    /// does, but within two shrinks rather than ten windows, which at a few answers a
    /// second is minutes (the capacity demo after its work doubled walked from 20 down to 2
    /// on a 1 s baseline while every request took 2 s). Shrinks whose expected gain is under
    /// 5% of the rtt are within noise and are not judged. (Requiring the throughput to fall
    /// with the limit as well, as the covariance check does, let the noise of 10-sample
    /// windows veto the re-anchoring for two minutes in one seed of that demo.)
    fn check_shrink(&mut self, shrink: &Shrink, rtt: f64) {
        let gain = shrink.rtt - shrink.expected_rtt;
        if gain < 0.05 * shrink.rtt {
            return;
        }
        if rtt > shrink.rtt - gain / 2.0 {
            self.futile += 1;
        } else {
            self.futile = 0;
        }
        if self.futile >= 2 {
            self.futile = 0;
            self.anchor();
        }
    }

    /// Elasticity of throughput to inflight over the ring, if inflight varied enough to tell.
    fn elasticity(&self) -> Option<f64> {
        let points = &self.ring[..self.filled];
        let n = points.len() as f64;
        let (lo, hi) = points.iter().fold((f64::MAX, f64::MIN), |(lo, hi), p| {
            (lo.min(p.ln_inflight), hi.max(p.ln_inflight))
        });
        if points.len() < 3 || hi - lo < 1.15f64.ln() {
            return None;
        }
        let mq = points.iter().map(|p| p.ln_inflight).sum::<f64>() / n;
        let mx = points.iter().map(|p| p.ln_throughput).sum::<f64>() / n;
        let cov = points
            .iter()
            .map(|p| (p.ln_inflight - mq) * (p.ln_throughput - mx))
            .sum::<f64>();
        let var = points
            .iter()
            .map(|p| (p.ln_inflight - mq) * (p.ln_inflight - mq))
            .sum::<f64>();
        Some(cov / var)
    }

    /// The covariance arbitration, once the ring is full.
    fn arbitrate(&mut self) {
        let moves = |m: Move| self.ring.iter().filter(|p| p.moved == m).count();
        let (grew, shrank) = (moves(Move::Grow), moves(Move::Shrink));
        let elasticity = self.elasticity();
        // Only where the limit bound: while demand ramps up under it, throughput follows
        // inflight because the demand grew, not because concurrency pays (Kanaloa's ramp
        // read that way sent the limit to 42 for a knee of 20 once the overload came).
        let bound = self.ring.iter().filter(|p| p.bound).count();
        if let Some(e) = elasticity {
            if e > self.config.high_elasticity && bound * 2 > RING {
                self.elastic = true;
            } else if e < self.config.low_elasticity {
                self.elastic = false;
            }
        }
        match elasticity {
            Some(e) if grew * 2 > RING && e < self.config.low_elasticity => {
                // No deeper than the ring's evidence (see `best_served_at`): where it
                // bracketed the knee, concurrency above the least that served its best buys
                // nothing, and below it served less. Halving took exponential work at a
                // knee of 30 with contention (a step to 1.5x, seed 2) from 34.5 to 18, on a
                // ring whose best throughput came at 26-32 in flight and whose low
                // elasticity was slow start's windows (15 and 20 in flight before the step,
                // an overshoot to 55): growth after a reset is `log10(limit)` a window, and
                // the limit stayed at 18-20 for the rest of the run (75% of the capacity
                // served; reset to 25.6, 88%). Where nothing brackets the knee (from far
                // above it, every window on the plateau), the reset halves: stopped at the
                // ring's least window, a descent from 200 took resets from 148 to 75 and 93
                // to 78, and probes alone the rest (still 78 after 21 s).
                let deepest = self.limit * self.config.reset_factor.clamp(0.0, 1.0);
                self.reset = Some(ResetCheck {
                    from: self.limit,
                    before: self.ring_bound,
                    after: Span::default(),
                });
                self.limit = self
                    .best_served_at()
                    .map_or(deepest, |level| level.clamp(deepest, self.limit));
                self.forget_served();
                self.base = None;
                self.srtt = None;
                self.shrunk = None;
                self.settling = true;
                self.idle_probes = 0;
            }
            Some(e) if shrank > grew && e > self.config.high_elasticity => {
                self.anchor();
                self.idle_probes = 0;
            }
            Some(_) => {}
            // A clear baseline (see `Baseline`) has nothing for a probe to find: at the
            // knee, each probe cost the service a second at 3/4 of its limit, 10% of its
            // throughput in that second, and moved the limit out of its band. Probes of one
            // request at small limits are trials of the limit itself, and go on.
            None if self.base.is_some_and(|b| b.clear)
                && !one_request_is_judged(self.limit.round()) => {}
            // Nor has a small limit that a probe already showed to be the knee, while its
            // rtt stays at the baseline (see `Autotune::at_the_knee`).
            None if self.at_the_knee() => {}
            None => {
                // Too steady to tell: dip for one window, as BBR's ProbeRTT does, so that the
                // baseline sees a lighter load and the next check has a spread to judge.
                // Probes that found nothing come at doubling intervals (up to 16 rings): at
                // the knee each costs a window at 3/4 of the limit and one not measured,
                // a fifth of the time in the capacity demo (probes every 10 windows of 3 s).
                self.steady_rings += 1;
                if self.steady_rings >= 1 << self.idle_probes {
                    self.steady_rings = 0;
                    self.start_probe();
                }
            }
        }
        self.filled = 0;
        self.ring_bound = Span::default();
    }

    /// The least mean inflight of a window of the ring whose throughput is within two
    /// standard errors (a Poisson count's, `1 / sqrt(n)` in the log, of each) of the
    /// ring's best, if a window at less concurrency where the limit bound served less (so
    /// beyond that noise): the ring saw where more concurrency stopped paying. Without such
    /// a window, the knee may be anywhere below the ring's windows.
    fn best_served_at(&self) -> Option<f64> {
        let mut windows = self.ring[..self.filled].iter().filter(|w| w.successes > 0);
        let best = windows
            .clone()
            .max_by(|a, b| a.ln_throughput.total_cmp(&b.ln_throughput))?;
        let level = windows
            .clone()
            .filter(|w| {
                let noise = (1.0 / f64::from(w.successes) + 1.0 / f64::from(best.successes)).sqrt();
                w.ln_throughput >= best.ln_throughput - 2.0 * noise
            })
            .map(|w| w.ln_inflight)
            .min_by(f64::total_cmp)?;
        windows
            .any(|w| w.bound && w.ln_inflight < level)
            .then(|| level.exp())
    }

    /// Whether the limit in force is a small one that a probe of one request below showed
    /// to be the knee (throughput fell with it in proportion), and the smoothed rtt is still
    /// within two of its standard errors of the baseline: no queue for the next probe to
    /// find. At a small limit a probe is a trial of one request (see
    /// [`Autotune::start_probe`]); in front of a service held at its knee of 3 it cost a
    /// span at 2, a third of the throughput, and the gate's queue its wait, every 16 rings,
    /// with nothing to find. A knee that moves shows: one request past it, one answer in
    /// eight waits a whole service time at 8 for 7 workers (the rtt 12% over the baseline
    /// of a service whose work varies by 2%), and RSocket's servers answer 84% slower at 2
    /// than at 1. Not a limit no probe has judged: a baseline measured under load is at
    /// its rtt too, and only probes walk such a limit down to its knee.
    fn at_the_knee(&self) -> bool {
        let in_force = self.limit.round();
        let at_baseline = match (self.srtt, self.base) {
            (Some(srtt), Some(base)) => srtt <= base.value + 2.0 * self.srtt_var.sqrt(),
            _ => false,
        };
        one_request_is_judged(in_force) && self.knee == Some(in_force) && at_baseline
    }

    /// Starts a trial of the limit `to`, judged against the span at the limit in force.
    /// Judges a reset once a whole span at its limit is measured, each window bound. Where
    /// the ring's windows straddled the knee without bracketing it (see `best_served_at`),
    /// halving can go far below it: the check's low elasticity came from windows past the
    /// knee, not from a baseline measured under load. If throughput then fell with inflight
    /// (an elasticity above `high_elasticity`, beyond [`TRIAL_EVIDENCE`] standard errors of
    /// its noise), the reset went below the knee, and the limit goes to where throughput
    /// scaled back up reaches what the ring served: `limit x before / after`, at most the
    /// limit before the reset. Below the knee throughput follows inflight, so that is the
    /// knee. From far above it (a descent from 200 to a knee of 20), throughput holds and the
    /// reset stands.
    fn judge_reset(&mut self, reset: &ResetCheck) {
        let (before, after) = (&reset.before, &reset.after);
        let inflight = (before.inflight() / after.inflight().max(f64::MIN_POSITIVE)).ln();
        let gain = (before.throughput() / after.throughput().max(f64::MIN_POSITIVE)).ln();
        let ((rtt_before, var_before), (rtt_after, var_after)) = (before.rtt(), after.rtt());
        let queue_left = rtt_before - rtt_after;
        if before.whole()
            && inflight >= (1.0 + JUDGED_STEP).ln()
            && gain > self.config.high_elasticity * inflight
            && gain > TRIAL_EVIDENCE * Span::gain_noise(before, after)
            && queue_left * queue_left > 4.0 * (var_before + var_after)
            && queue_left > 0.0
        {
            self.limit = (self.limit * gain.exp()).min(reset.from);
            self.settling = true;
        }
    }

    fn start_trial(&mut self, to: f64) {
        self.trial = Some(Trial {
            from: self.limit,
            to,
            before: self.span,
            after: Span::default(),
        });
    }

    /// Starts a probe. Where one request is a large step (a limit of 10 or less), the probe
    /// is one request less, for a whole span, and a trial: kept if the request it took
    /// away bought no throughput (RSocket's service at 2 per server, the capacity demo at
    /// 8 for 7 workers, where latency is within the tolerance), else undone. Elsewhere it
    /// is one window at `probe_factor`, for the baseline only.
    fn start_probe(&mut self) {
        let in_force = self.limit.round();
        if one_request_is_judged(in_force) {
            if in_force - 1.0 < self.min || self.trial.is_some() || !self.span.whole() {
                return;
            }
            self.start_trial(in_force - 1.0);
            self.limit = in_force - 1.0;
        } else {
            self.probe = Some(self.limit);
            self.probe_base = self.base.map(|b| b.value);
            self.limit *= self.config.probe_factor.clamp(0.0, 1.0);
        }
        self.settling = true;
    }

    /// Follows the demand-set windows (see [`Light`]) with a measured window that served at
    /// `rate`, and clears the baseline when the service kept up with a growing demand.
    fn watch_demand(&mut self, rate: f64, bound: bool) {
        let probe_factor = self.config.probe_factor;
        if let Some(light) = self.light
            && light.outgrown(self.successes, rate, probe_factor)
            && let Some(base) = &mut self.base
        {
            base.clear = true;
        }
        self.light = self
            .light
            .map(|light| Light {
                age: light.age + 1,
                ..light
            })
            .filter(|light| light.age <= RING as u32);
        if !bound && self.light.is_none_or(|light| rate < light.rate) {
            self.light = Some(Light {
                successes: self.successes,
                rate,
                age: 0,
            });
        }
    }

    /// Closes the current window at `now`.
    fn close_window(&mut self, now: Time) {
        let elapsed = now.saturating_since(self.window_start).as_secs_f64();
        // The first window's answers are those of the requests that finished first, the
        // short ones, unless it lasted many times their rtt: anchored on it, the baseline
        // of an exponential 100 ms service sat 27% under its mean, and the limit under the
        // knee. (A service answering in milliseconds is anchored on its first window.) Nor
        // does any window whose requests stayed in flight far longer than its answers took
        // (see `LITTLE_EXCESS`).
        let rtt = self.window_rtt();
        let inflight = self.inflight_sum as f64 / f64::from(self.samples.max(1));
        let rate = f64::from(self.samples) / elapsed.max(f64::MIN_POSITIVE);
        let first = std::mem::take(&mut self.first_window);
        let censored = rtt.is_some_and(|rtt| {
            (first && elapsed < FIRST_WINDOW_RTTS * rtt.mean)
                || inflight > LITTLE_EXCESS * rate * rtt.mean + 1.0
        });
        let settling = std::mem::take(&mut self.settling);
        let fresh = std::mem::replace(&mut self.fresh, settling);
        if !settling && elapsed > 0.0 {
            self.fresh = fresh;
            let throughput = f64::from(self.successes) / elapsed;
            let in_force = self.limit.round();
            let tol = self.tolerance();
            let window = Span {
                windows: 1,
                seconds: elapsed,
                successes: self.successes,
                samples: self.samples,
                inflight_sum: self.inflight_sum,
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
                _ => self.latency_rule(rtt, censored),
            };
            self.fresh = false;
            let held = moved != Move::Shrink && judged.is_none();
            self.watch_served(rtt, held, in_force, tol, inflight);
            self.watch_demand(throughput, f64::from(self.inflight_max) >= in_force);
            if moved != Move::Grow && self.base.is_some() {
                // The first window judged that does not grow ends slow start for good.
                self.slow_start = false;
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
            let bound = f64::from(self.inflight_max) >= in_force;
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
                    successes: self.successes,
                };
                self.filled += 1;
                if self.filled == RING {
                    self.arbitrate();
                }
            }
            self.limit = self.limit.clamp(self.min, self.max);
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
                    self.remember_level(trial.to);
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

impl Limit for Autotune {
    fn limit(&self) -> u32 {
        // In [min, max] and at least 1 by construction; `as` saturates.
        self.limit.round() as u32
    }

    fn on_sample(&mut self, sample: &Sample) {
        if sample.outcome == Outcome::Ignored {
            return;
        }
        if !self.started {
            self.started = true;
            self.first_window = true;
            self.open_window(sample.now);
        }
        self.samples += 1;
        self.inflight_sum += u64::from(sample.inflight);
        self.inflight_max = self.inflight_max.max(sample.inflight);
        let timed_out = self
            .config
            .timeout
            .is_some_and(|timeout| sample.rtt >= timeout);
        if sample.outcome == Outcome::Success && !timed_out {
            self.successes += 1;
            self.success_rtt += sample.rtt;
            let rtt = sample.rtt.as_secs_f64();
            self.success_rtt_sq += rtt * rtt;
        } else {
            self.drops += 1;
        }
        // Multiplied out: `elapsed >= WINDOW_RTTS x mean rtt`, without a division per sample.
        let elapsed = sample.now.saturating_since(self.window_start);
        let due = elapsed >= self.config.window
            || (self.successes > 0
                && elapsed.as_nanos().saturating_mul(u64::from(self.successes))
                    >= self.success_rtt.as_nanos().saturating_mul(WINDOW_RTTS));
        // And at least one smoothed rtt: a window shorter than the answers holds only those
        // that finished first, the short ones of a service whose work is spread; and a mean
        // measured well enough to be judged. (Last, so the arithmetic is done only for a
        // window otherwise due.)
        if due
            && self.samples >= self.config.min_window_samples
            && self.srtt.is_none_or(|srtt| elapsed.as_secs_f64() >= srtt)
            && self.measured_enough(elapsed)
        {
            self.close_window(sample.now);
        }
    }
}

#[cfg(test)]
mod tests;

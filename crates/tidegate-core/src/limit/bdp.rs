//! BBR's model applied to a concurrency limit: the limit is the service's bandwidth-delay
//! product.
//!
//! A service with `k` workers answering in `w` when nothing queues delivers at most `k / w`
//! answers a second, and by Little's law holds `rate x rtt` requests: below `k` in flight the
//! rtt stays at `w` and the rate grows with the load; above, the rate stays at `k / w` and the
//! rtt grows. The one concurrency at which the service is both fully used and not queueing is
//! the product of the highest rate delivered and the lowest rtt seen, `btl_bw x rt_prop`:
//! BBR's operating point (Cardwell, Cheng, Gunn, Hassas Yeganeh and Jacobson, "BBR:
//! Congestion-Based Congestion Control", ACM Queue 14(5), 2016). The two cannot be measured at
//! once (the rate is only seen at its highest with a queue, the rtt at its lowest without), so
//! BBR keeps a windowed maximum of one and a windowed minimum of the other, and cycles a gain
//! on their product to keep both fresh:
//!
//! - **Startup**: gain 2, so the limit doubles every window while the rate follows it; it ends
//!   once the rate stopped growing by 25% over three windows that filled the limit (the pipe
//!   is full), or on drops.
//! - **Drain**: gain 1 for one window. BBR paces below the bottleneck to empty the queue its
//!   startup built; a concurrency limit needs no pacing for that: while more are in flight
//!   than the limit, the gate admits nothing and the service's queue empties by itself.
//! - **ProbeBw**: a cycle of one window at `probe_gain` (1.2) then `cycle - 1` windows at
//!   `cruise_gain` (1), to see whether more rate is to be had. BBR's window at 0.75 after
//!   the probe is left out for the same reason as the drain's pacing: the limit caps what is
//!   in flight, so back at 1 the probe's queue is served within one rtt, while a window at
//!   0.75 would idle a quarter of the service for a whole window. A probe whose rate grew by
//!   half its gain over the maximum probes again at once: after a capacity came back, one
//!   probe a cycle takes dozens of rtts.
//! - **ProbeRtt**: when no window answered at `rt_prop` (within its noise) for
//!   `probe_rtt_interval` and 20 windows, one window at `probe_rtt_gain` (0.75) of the
//!   product (or of what the last window's rate needs at `rt_prop`, if less) drains, the
//!   next measures, and its rtt replaces the minimum even upwards: a service that became
//!   slower is measured again (a minimum only goes down). A measurement 10% under the old
//!   minimum found a queue the product included, and ProbeRtt runs again.
//!
//! A request is not a packet. The departures from BBR, and why (each measured on `tidegate
//! sim sweep --arm "tidegate default" --arm "bdp + pie" --seeds 6`, docs/algorithms.md):
//!
//! - **Windows, not round trips.** Rate and rtt are measured per window of answers, which
//!   closes once it holds enough answers to measure its mean rtt to 10% (from the answers'
//!   spread pooled over windows, below; at least [`MIN_ANSWERS`]) and lasted [`WINDOW_RTTS`]
//!   of its answers' mean rtt and of `rt_prop`. The first window lasts
//!   [`FIRST_WINDOW_RTTS`]: a window shorter than the answers' spread holds only those that
//!   finished first, and a first window of four rtts read an exponential service 25% short,
//!   which the minimum then kept, and the limit under the knee with it.
//! - **The rtt is the time a permit is held**, every answer's, a drop's too: that is what
//!   Little's law relates to the limit. A client that gives up at 1 s on 1% of requests holds
//!   a permit for 1 s each time, which the successes' mean (50 ms) does not show: the product
//!   of the successes' rtt sat at half the knee. A window with too many drops measures no
//!   rtt at all: a bounded queue refuses in no time, and such a window took `rt_prop` to a
//!   fifth of the work.
//! - **The minimum is corrected for noise, with a pooled spread.** The least of `n` noisy
//!   window means falls about `sqrt(2 ln n)` standard errors below the mean they estimate
//!   (Autotune's `Baseline`), so each window offers its mean plus that many standard errors,
//!   `n` the windows since `rt_prop` was measured afresh. A window's own spread understates a
//!   heavy tail's (most windows hold none of its slowest answers), so the spread is the
//!   larger of the window's own and the answers' squared coefficient of variation averaged
//!   over windows (each window's sample variance is unbiased); and the window that set
//!   `rt_prop` is offered again with the spread and `n` of now, so that a minimum set before
//!   the tail showed is not kept as if exact.
//! - **The maximum is not corrected.** The rate is measured at the limit: a maximum biased
//!   low (each window offered its rate less two standard errors) lowers the limit, which
//!   lowers the next rates, window after window down to a fraction of the knee; one biased
//!   high is bounded by the service (past the knee the rate stops following the limit).
//! - **Windows the demand set are app-limited**, as BBR calls them: a window counts as a
//!   measurement of the rate only if its requests were admitted within half a request of the
//!   limit on average; otherwise its rate only enters the maximum if it raises it, and it
//!   does not count towards the startup's end. Not a fraction of the limit: the regulator
//!   keeps the gate's queue short, so a limit is often not quite filled, and a window filled
//!   to 90% delivers 90% of the limit's rate; taken as a measurement it lowers the product by
//!   as much, window after window. Under a light load the startup therefore goes on, and the
//!   limit stays at twice what the demand needs: room for its bursts.
//! - **Censored windows set no `rt_prop`.** A window whose requests, by Little's law, stayed
//!   in the service more than twice as long as its answers took answered only its short
//!   requests while the long ones still ran (Autotune's `LITTLE_EXCESS`).
//! - **One request of headroom** (`headroom`): see [`BdpConfig::headroom`].
//! - **A start above the knee is probed at once.** BBR starts below the product (ten
//!   packets); a gate starts at 20, above knees of 1, 3 or 10, and then measures `rt_prop`
//!   on the queue it built. When the startup ended without a window the demand set or a rate
//!   that grew with the limit, ProbeRtt follows the drain at once.
//! - **Drops back off.** BBR v1 does not react to loss; a service that refuses or times out
//!   requests is telling the limit it is past its capacity (a bounded queue, a client
//!   timeout shorter than the product's rtt). A window with more than `drop_tolerance` of
//!   drops caps the limit at `backoff` times the limit in force (BBR v2's `inflight_hi`),
//!   ends the startup, and the cap grows back by `probe_gain` per window without drops.
//! - **ProbeRtt is rare.** BBR drains to four packets every 10 s regardless. Here a window at
//!   the product answers at `rt_prop` within its noise, which counts as seeing it again, so
//!   the probe only runs when every window for 10 s read a queue; and also for 20 windows,
//!   since 10 s are hundreds of Internet round trips but five of a service answering in 2 s
//!   (measured afresh every other window at half its limit, it lost 10 points of goodput),
//!   unless four windows in a row read an rtt clearly above it (half as much again, beyond
//!   their noise): a service whose work doubled, measured every 25 s, would wait 500 s.
//!
//! The hot path adds a sample to the window's sums and compares the window's length with its
//! answers' rtt multiplied out (no division); the estimates move only when a window closes.

use serde::{Deserialize, Serialize};

use super::window_counts::WindowCounts;
use super::{Limit, Outcome, Sample};
use crate::rng::splitmix64;
use crate::time::{Nanos, Time};

/// Least answers (successes and drops) in a window: fewer measure neither the rate nor the
/// spread of the rtt.
const MIN_ANSWERS: u32 = 50;

/// Relative standard error of a window's mean rtt at which it closes (with the other
/// conditions): 10%, about 100 answers of exponential work, [`MIN_ANSWERS`] of constant
/// work. See the module docs.
const WINDOW_PRECISION: f64 = 0.1;

/// A window closes with this many answers, however spread (a heavy tail's spread is not
/// measured to any precision by a window's own answers).
const MAX_ANSWERS: u32 = 1000;

/// A window is *bound* (its rate measures the service, not the demand) when its requests
/// were admitted, on average, at most this many requests under the limit in force: under
/// overload every admission fills a freed slot, at the limit. Not a fraction of the limit:
/// a window admitted at 90% of it delivers 90% of what the limit would, and taken as a
/// measurement it would lower the product by as much, window after window (the regulator
/// keeps the gate's queue short, so a limit under the knee is often not filled). A slack of
/// 5% of the limit instead traded cases on the sweep: settling misses 1,109 -> 871
/// case-seeds (the startup at large limits ends sooner), goodput misses 502 -> 558.
const BOUND_SLACK: f64 = 0.5;

/// Least length of a window, in its answers' mean rtt (and in `rt_prop`): see the module
/// docs.
const WINDOW_RTTS: u64 = 4;

/// The first window lasts this many of its answers' mean rtt: its answers are those of the
/// requests that finished first, biased short by about the ratio of the rtt to the window's
/// length (Autotune's `FIRST_WINDOW_RTTS`; a first window of 4 rtts read an exponential
/// service's rtt 25% short, and the product under it held the limit there).
const FIRST_WINDOW_RTTS: u64 = 20;

/// Windows the startup waits without 25% more rate before it calls the pipe full (BBR's 3).
const FULL_BW_WINDOWS: u32 = 3;

/// The growth of the rate over [`FULL_BW_WINDOWS`] below which the startup ends (BBR's 25%).
const FULL_BW_GROWTH: f64 = 1.25;

/// A window is censored when its requests stayed in the service more than this many times as
/// long as its answers took (see the module docs).
const LITTLE_EXCESS: f64 = 2.0;

/// Weight of a window's spread in the pooled spread (see [`Bdp::offer_rt_prop`]).
const POOLED_WEIGHT: f64 = 1.0 / 16.0;

/// A window's mean rtt within this fraction of `rt_prop` (and its noise) sees it again.
const RT_PROP_SEEN: f64 = 0.05;

/// Least windows without seeing `rt_prop` before it is measured afresh, whatever the time:
/// BBR's 10 s are hundreds of Internet round trips but five of a service answering in 2 s,
/// which measured afresh every other window at half its limit.
const PROBE_RTT_WINDOWS: u32 = 20;

/// A window whose mean rtt is this many times `rt_prop` (and three of its standard errors
/// beyond) reads a queue the cycle's gains (1.2, and one request of headroom) do not make.
const CLEARLY_ABOVE: f64 = 1.5;

/// Windows in a row clearly above `rt_prop` after which (and `probe_rtt_interval`) it is
/// measured afresh without waiting for [`PROBE_RTT_WINDOWS`]: a service whose work doubled
/// from 1 s to 2 s, measured every 25 s at 2 answers a second, would wait 500 s, its limit
/// at half the workers (the capacity demo's 2.3 ok/s of 3.5).
const CLEARLY_ABOVE_WINDOWS: u32 = 4;

/// The unqueued product counts once a window at this fraction of it or less also answered
/// at `rt_prop`: lowering the concurrency did not lower the rtt, so there was no queue to
/// drain (see [`Bdp::unqueued_product`]).
const UNQUEUED_LOWER: f64 = 0.8;

/// A measurement afresh of `rt_prop` this much under the old one found a queue: measure
/// again (see [`Phase::ProbeRtt`]).
const FOUND_LOWER: f64 = 0.9;

/// Configuration of [`Bdp`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BdpConfig {
    /// Limit before the first window, in requests. Default 20.
    pub initial: u32,
    /// Smallest limit, in requests (at least 1). Default 1.
    pub min: u32,
    /// Largest limit, in requests. Default 1000.
    pub max: u32,
    /// Gain on the product during the startup. Default 2 (BBR's `2 / ln 2` paces; a
    /// concurrency limit doubles per window).
    pub startup_gain: f64,
    /// Gain of the probing window of each cycle. Default 1.2: BBR's 1.25 gave the same
    /// goodput on the sweep and 95 more case-seeds whose limit was not settled (a probe
    /// window of 1.25 is beyond the settling target's 20% band).
    pub probe_gain: f64,
    /// Gain of the other windows of the cycle. Default 1.
    pub cruise_gain: f64,
    /// Requests allowed on top of the gain times the product, outside ProbeRtt. Default 1:
    /// the gate refills a freed slot only from its queue, which the regulator keeps short,
    /// so a slot often waits for the next arrival; at the product exactly, one worker of a
    /// knee of 1 idled a quarter of the time (7.5 answers a second of 10), and the product
    /// measured that. One request queued in the service covers the gap (+1.0 point of the
    /// sweep's mean worst-window goodput; 2 lost 0.7 of it).
    pub headroom: f64,
    /// Windows per probing cycle (one probing, the others cruising). Default 8 (BBR's).
    pub cycle: u32,
    /// Windows the maximum of the rate spans. Default 10 (BBR's 10 round trips).
    pub bw_windows: u32,
    /// Time without seeing `rt_prop` again after which it is measured afresh. Default 10 s
    /// (BBR's).
    pub probe_rtt_interval: Nanos,
    /// Gain on the product while `rt_prop` is measured afresh. Default 0.75: a limit above
    /// the knee by more than a third is found in several steps (each finds a lower rtt and
    /// probes again), and each probe costs a quarter of the service for two windows rather
    /// than half (the sweep's mean worst-window goodput +0.15 point against 0.5).
    pub probe_rtt_gain: f64,
    /// Cap, as a fraction of the limit in force, after a window with too many drops.
    /// Default 0.7 (BBR v2's `beta`).
    pub backoff: f64,
    /// Fraction of a window's answers that may be drops without a backoff. Default 0.05.
    pub drop_tolerance: f64,
    /// Client timeout, if known: a `Success` whose rtt is at or beyond it is counted as a
    /// drop. Default none.
    pub timeout: Option<Nanos>,
}

impl Default for BdpConfig {
    fn default() -> BdpConfig {
        BdpConfig {
            initial: 20,
            min: 1,
            max: 1000,
            startup_gain: 2.0,
            probe_gain: 1.2,
            cruise_gain: 1.0,
            headroom: 1.0,
            cycle: 8,
            bw_windows: 10,
            probe_rtt_interval: Nanos::from_secs(10),
            probe_rtt_gain: 0.75,
            backoff: 0.7,
            drop_tolerance: 0.05,
            timeout: None,
        }
    }
}

/// BBR's states (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Startup,
    Drain,
    /// The index of the window in the cycle: 0 probes.
    ProbeBw(u32),
    /// The first window drains what the limit before it admitted; the second measures.
    ProbeRtt {
        measuring: bool,
    },
}

/// A running maximum over the last `span` windows that keeps its best three candidates
/// (Kathleen Nichols' algorithm, as in Linux's `lib/minmax.c`, which BBR uses): O(1), no
/// allocation.
#[derive(Clone, Copy, Debug, Default)]
struct WindowedMax {
    /// (window index, value), best first; later ones are later and smaller.
    s: [(u64, f64); 3],
}

impl WindowedMax {
    /// No value yet: every update is at least this.
    const NONE: WindowedMax = WindowedMax {
        s: [(0, f64::NEG_INFINITY); 3],
    };

    fn get(&self) -> f64 {
        self.s[0].1
    }

    fn reset(&mut self, at: u64, value: f64) {
        self.s = [(at, value); 3];
    }

    fn update(&mut self, at: u64, span: u64, value: f64) {
        if value >= self.s[0].1 || at.saturating_sub(self.s[2].0) > span {
            self.reset(at, value);
            return;
        }
        if value >= self.s[1].1 {
            self.s[1] = (at, value);
            self.s[2] = (at, value);
        } else if value >= self.s[2].1 {
            self.s[2] = (at, value);
        }
        // The best is older than the span: the next ones move up (twice if need be; the
        // third is within the span, checked above). A quarter of the span without a second
        // best, or half without a third: take this one.
        let age = at.saturating_sub(self.s[0].0);
        if age > span {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = (at, value);
            if at.saturating_sub(self.s[0].0) > span {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = (at, value);
            }
        } else if self.s[1].0 == self.s[0].0 && age > span / 4 {
            self.s[1] = (at, value);
            self.s[2] = (at, value);
        } else if self.s[2].0 == self.s[1].0 && age > span / 2 {
            self.s[2] = (at, value);
        }
    }
}

/// The lowest rtt, as offered by the windows since it was last measured afresh.
#[derive(Clone, Copy, Debug)]
struct RtProp {
    /// Seconds; infinite before the first offer.
    value: f64,
    /// Windows that offered since it was measured afresh.
    windows: u32,
    /// When a window last answered at it (within its noise), and windows closed since.
    seen: Time,
    unseen_windows: u32,
    /// Windows in a row whose mean was clearly above it (see [`CLEARLY_ABOVE`]).
    clearly_above: u32,
    /// Set from a censored window for want of any other: the next window measured replaces
    /// it, even upwards.
    provisional: bool,
    /// The window that set it: its mean rtt, squared coefficient of variation and answers,
    /// so that its offer is taken again with the spread pooled since (`answers` 0 when it
    /// was not set by an offer).
    best: (f64, f64, f64),
}

impl RtProp {
    fn empty(now: Time) -> RtProp {
        RtProp {
            value: f64::INFINITY,
            windows: 0,
            seen: now,
            unseen_windows: 0,
            clearly_above: 0,
            provisional: false,
            best: (0.0, 0.0, 0.0),
        }
    }
}

/// A limit at the service's bandwidth-delay product, `btl_bw x rt_prop`, with BBR's phases.
///
/// Source: BBR (Cardwell et al., ACM Queue 2016; the Linux `tcp_bbr.c` v1 state machine),
/// adapted to a concurrency limit as the module docs describe. Defaults: initial 20, min 1,
/// max 1000, startup gain 2, probe gain 1.2, cruise gain 1, one request of headroom, cycle of
/// 8 windows, rate maximum over 10 windows, `rt_prop` measured afresh at 0.75 of the product
/// after 10 s (and 20 windows) unseen, backoff 0.7 above 5% of drops, no timeout.
#[derive(Clone, Debug)]
pub struct Bdp {
    config: BdpConfig,
    min: f64,
    max: f64,
    limit: f64,
    phase: Phase,
    btl_bw: WindowedMax,
    /// The rate of the windows that answered at `rt_prop`, each less one standard error,
    /// their maximum over `bw_windows`; forgotten when `rt_prop` is measured afresh (see
    /// [`Bdp::unqueued_product`]).
    unqueued_bw: WindowedMax,
    /// Over the same windows, the least mean inflight of a window that answered at
    /// `rt_prop`, negated (a maximum of negated values; minus infinity when none).
    unqueued_least: WindowedMax,
    /// The least `rt_prop` before a measurement afresh raised it (see
    /// [`Bdp::unqueued_product`]).
    rt_prop_before_raised: f64,
    rt_prop: RtProp,
    /// The cap set by drops (BBR v2's `inflight_hi`); infinite when none.
    inflight_hi: f64,
    /// Whether the startup found the pipe full (and no probe found more since).
    full: bool,
    /// The product ProbeRtt's gain applies to (see [`Bdp::close_window`]).
    probe_rtt_base: f64,
    /// Whether a window was seen below the knee (its rate set by the demand, or growing
    /// with the limit): `rt_prop` was measured without a queue.
    unqueued: bool,
    /// The startup's reference rate and the windows since it grew by 25%.
    full_bw: f64,
    full_bw_windows: u32,
    /// Closed windows so far: the maximum's clock.
    windows: u64,
    started: bool,
    window: WindowCounts,
    /// Least length of the open window, from `rt_prop`.
    least_window: Nanos,
    /// The answers' squared coefficient of variation, pooled over windows (see
    /// [`Bdp::offer_rt_prop`]); negative before the first window.
    pooled_cv2: f64,
    /// Least answers of the open window, from `pooled_cv2`.
    least_answers: u32,
    /// The window's answers' rtts, a drop's too, summed, and their squares.
    rtt_sum: Nanos,
    rtt_sq: f64,
}

impl Bdp {
    pub fn new(config: &BdpConfig) -> Bdp {
        let min = f64::from(config.min.max(1));
        let max = f64::from(config.max).max(min);
        Bdp {
            config: config.clone(),
            min,
            max,
            limit: f64::from(config.initial).clamp(min, max),
            phase: Phase::Startup,
            btl_bw: WindowedMax::default(),
            unqueued_bw: WindowedMax::default(),
            unqueued_least: WindowedMax::NONE,
            rt_prop_before_raised: f64::INFINITY,
            rt_prop: RtProp::empty(Time::ZERO),
            inflight_hi: f64::INFINITY,
            full: false,
            probe_rtt_base: f64::INFINITY,
            unqueued: false,
            full_bw: 0.0,
            full_bw_windows: 0,
            windows: 0,
            started: false,
            window: WindowCounts::default(),
            least_window: Nanos::ZERO,
            pooled_cv2: -1.0,
            least_answers: MIN_ANSWERS,
            rtt_sum: Nanos::ZERO,
            rtt_sq: 0.0,
        }
    }

    /// The bottleneck rate, in answers a second, once measured.
    pub fn btl_bw(&self) -> Option<f64> {
        Some(self.btl_bw.get()).filter(|&bw| bw > 0.0)
    }

    /// The no-queue rtt, once measured.
    pub fn rt_prop(&self) -> Option<Nanos> {
        Some(self.rt_prop.value)
            .filter(|v| v.is_finite())
            .map(Nanos::from_secs_f64)
    }

    /// The concurrency the service was seen to hold without a queue, in requests: the
    /// highest rate of the last `bw_windows` windows that answered at `rt_prop` (within its
    /// noise), times `rt_prop`; `None` unless one of those windows, at four fifths of
    /// that concurrency or less, also answered at `rt_prop`.
    ///
    /// Unlike [`Bdp::bdp`], it takes no rate from a window whose rtt exceeded `rt_prop`: a
    /// service whose latency grows with the rate it is sent rather than with what is in
    /// flight (RSocket's, answering in 2 ms at 10 requests a second and 20 ms at 120)
    /// delivers more and more as its limit grows, so the highest rate at any rtt times the
    /// lowest rtt grows with the limit it sets. Each rate is offered less one standard
    /// error (of a count of answers, `1 / sqrt(successes)`): the window whose answers
    /// happened to be short both answered at `rt_prop` and delivered the highest rate, and
    /// the maximum of ten such windows sat a third above a knee of 30 with exponential
    /// work. The rates are forgotten when `rt_prop` is measured afresh, and the product
    /// never takes an `rt_prop` that such a measurement raised: ProbeRtt drains to three
    /// quarters of the product, which in front of a service that lost half its workers
    /// still queues, and the rtt it measures is that queue's. Autotune holds its limit at
    /// least at this product
    /// ([`AutotuneConfig::product_floor`](super::AutotuneConfig::product_floor)).
    pub fn unqueued_product(&self) -> Option<f64> {
        let product = self.unqueued_bw.get() * self.rt_prop.value.min(self.rt_prop_before_raised);
        let least = -self.unqueued_least.get();
        (product.is_finite() && product > 0.0 && least <= UNQUEUED_LOWER * product)
            .then_some(product)
    }

    /// Windows closed so far: the estimates move only when one closes.
    pub fn windows(&self) -> u64 {
        self.windows
    }

    /// The product `btl_bw x rt_prop`, in requests, once both are measured.
    pub fn bdp(&self) -> Option<f64> {
        let bdp = self.btl_bw.get() * self.rt_prop.value;
        (bdp.is_finite() && bdp > 0.0).then_some(bdp)
    }

    fn gain(&self) -> f64 {
        match self.phase {
            Phase::Startup => self.config.startup_gain,
            Phase::Drain => 1.0,
            Phase::ProbeBw(0) => self.config.probe_gain,
            Phase::ProbeBw(_) => self.config.cruise_gain,
            Phase::ProbeRtt { .. } => self.config.probe_rtt_gain,
        }
    }

    fn open_window(&mut self, now: Time) {
        self.window = WindowCounts::open(now);
        self.rtt_sum = Nanos::ZERO;
        self.rtt_sq = 0.0;
        let needed = (self.pooled_cv2 / (WINDOW_PRECISION * WINDOW_PRECISION)).ceil();
        self.least_answers = (needed.min(f64::from(MAX_ANSWERS)) as u32).max(MIN_ANSWERS);
        self.least_window = if self.rt_prop.value.is_finite() {
            Nanos::from_secs_f64(self.rt_prop.value).saturating_mul(WINDOW_RTTS)
        } else {
            Nanos::ZERO
        };
    }

    /// Enters the probing cycle at a window picked from the time (not the probing one, as
    /// BBR: the window after a drain or a probe of the rtt is spent cruising), so that gates
    /// started together do not probe in lockstep.
    fn enter_probe_bw(&mut self, now: Time) {
        let cycle = self.config.cycle.max(1);
        let index = if cycle > 1 {
            1 + (splitmix64(now.as_nanos()) % u64::from(cycle - 1)) as u32
        } else {
            0
        };
        self.phase = Phase::ProbeBw(index);
    }

    /// Offers `rt_prop` a window's mean rtt and the variance of that mean.
    ///
    /// A window offers its mean plus `sqrt(2 ln n)` of its standard errors, `n` the windows
    /// offered since `rt_prop` was measured afresh, its spread the larger of its own and the
    /// pooled one (see [`Bdp::close_window`]); the window that set `rt_prop` is offered
    /// again with the spread and `n` of now, so that a minimum set before a heavy tail
    /// showed is not kept as if exact. Returns whether the window answered at `rt_prop`:
    /// set it, or came within [`RT_PROP_SEEN`] and two of its standard errors of it.
    fn offer_rt_prop(&mut self, now: Time, mean: f64, cv2: f64, answers: f64) -> bool {
        let pooled = self.pooled_cv2.max(0.0);
        let rt = &mut self.rt_prop;
        if rt.provisional {
            *rt = RtProp::empty(now);
        }
        rt.windows = rt.windows.saturating_add(1);
        rt.unseen_windows = rt.unseen_windows.saturating_add(1);
        let shortfall = (2.0 * f64::from(rt.windows).ln()).sqrt();
        let error = |mean: f64, cv2: f64, answers: f64| mean * (cv2.max(pooled) / answers).sqrt();
        let (best_mean, best_cv2, best_answers) = rt.best;
        if best_answers > 0.0 {
            rt.value = best_mean + shortfall * error(best_mean, best_cv2, best_answers);
        }
        let error = error(mean, cv2, answers);
        let offered = mean + shortfall * error;
        if mean > rt.value * CLEARLY_ABOVE + 3.0 * error {
            rt.clearly_above = rt.clearly_above.saturating_add(1);
        } else {
            rt.clearly_above = 0;
        }
        if offered < rt.value {
            rt.value = offered;
            rt.best = (mean, cv2, answers);
        } else if mean > rt.value * (1.0 + RT_PROP_SEEN) + 2.0 * error {
            return false;
        }
        rt.seen = now;
        rt.unseen_windows = 0;
        true
    }

    fn close_window(&mut self, now: Time) {
        let elapsed = now.saturating_since(self.window.start).as_secs_f64();
        let in_force = self.limit.round();
        self.windows += 1;
        let index = self.windows;
        let answers = f64::from(self.window.samples.max(1));
        let lossy = f64::from(self.window.drops) > self.config.drop_tolerance * answers;
        let rate = f64::from(self.window.successes) / elapsed.max(f64::MIN_POSITIVE);
        let inflight = self.window.mean_inflight();
        let bound = inflight >= in_force - BOUND_SLACK;
        let probing_rtt = matches!(self.phase, Phase::ProbeRtt { .. });

        let mut previous_rt_prop = self.rt_prop.value;
        let mut at_rt_prop = false;
        if self.window.samples >= 2 && elapsed > 0.0 {
            let n = f64::from(self.window.samples);
            let answer_rate = n / elapsed;
            let mean = self.rtt_sum.as_secs_f64() / n;
            let variance = ((self.rtt_sq - n * mean * mean) / (n - 1.0)).max(0.0);
            // A window's own spread understates a heavy tail's: most windows hold none of
            // its slowest answers (99% at 50 ms and 1% timing out at 1 s: three windows in
            // five have no spread at all, and their least mean sets rt_prop at the fast
            // mode, under the time a permit is held on average, and the product at half
            // the knee). Each window's sample variance estimates the answers' variance
            // without bias, so their average over windows (relative to the mean, which a
            // queue moves) does not miss the tail; a window is taken as spread as the
            // larger of the two.
            let cv2 = if mean > 0.0 {
                variance / (mean * mean)
            } else {
                0.0
            };
            self.pooled_cv2 = if self.pooled_cv2 < 0.0 {
                cv2
            } else {
                self.pooled_cv2 + POOLED_WEIGHT * (cv2 - self.pooled_cv2)
            };
            // Censored: answers are the short ones while long ones still run (module docs).
            // And a window with too many drops measures no rtt: a service that refuses at
            // once answers in no time (a bounded queue's refusals took rt_prop to a fifth
            // of the work, and the product with it).
            let censored = inflight - 1.0 > LITTLE_EXCESS * answer_rate * mean || lossy;
            match self.phase {
                // The first window of a fresh measurement drains what was admitted before.
                Phase::ProbeRtt { measuring: false } => {}
                Phase::ProbeRtt { measuring: true } if !censored => {
                    // Measured afresh: the new minimum replaces the old, even upwards.
                    self.rt_prop_before_raised = self.rt_prop_before_raised.min(self.rt_prop.value);
                    self.rt_prop = RtProp::empty(now);
                    // Rates delivered at the old rtt are not rates at the new one (a service
                    // whose work went from 1 s to 2 s delivers half as much at each
                    // concurrency).
                    self.unqueued_bw = WindowedMax::default();
                    self.unqueued_least = WindowedMax::NONE;
                    at_rt_prop = self.offer_rt_prop(now, mean, cv2, n);
                }
                _ if !censored => at_rt_prop = self.offer_rt_prop(now, mean, cv2, n),
                _ if !self.rt_prop.value.is_finite() => {
                    // Nothing better yet: the time in the service by Little's law, which
                    // counts the requests still running.
                    self.rt_prop.value = mean.max(inflight / answer_rate);
                    self.rt_prop.seen = now;
                    self.rt_prop.provisional = true;
                    previous_rt_prop = self.rt_prop.value;
                }
                _ => {}
            }
        }

        // btl_bw: a measurement if the limit was reached (and not held down to measure the
        // rtt), else only a floor. Offered as measured: see the module docs for why its noise
        // is left in.
        let mut found = false;
        if self.window.successes > 0 && elapsed > 0.0 {
            let span = u64::from(self.config.bw_windows.max(1));
            let offered = rate;
            let before = self.btl_bw.get();
            if self.phase == Phase::ProbeBw(0) && bound && before > 0.0 {
                // A probe whose rate grew by half its gain or more over the maximum: the
                // service follows the limit, capacity to find.
                let more = 1.0 + (self.config.probe_gain - 1.0) / 2.0;
                found = offered > before * more;
            }
            // (A window with too many drops measures no rate either: the rate of the
            // successes of a service timing out most requests is no bandwidth.)
            if !lossy && ((bound && !probing_rtt) || offered > before) {
                self.btl_bw.update(index, span, offered);
            }
        }

        // Every window counts in the span of the unqueued rate, those that did not answer at
        // `rt_prop` as none: a maximum only moves on an update, and a service that stopped
        // answering at `rt_prop` would keep its last rate for ever.
        let unqueued = if lossy || !at_rt_prop || self.window.successes == 0 || elapsed <= 0.0 {
            0.0
        } else {
            rate * (1.0 - 1.0 / f64::from(self.window.successes).sqrt())
        };
        let span = u64::from(self.config.bw_windows.max(1));
        self.unqueued_bw.update(index, span, unqueued);
        let least = if unqueued > 0.0 {
            -inflight
        } else {
            f64::NEG_INFINITY
        };
        self.unqueued_least.update(index, span, least);

        // Drops cap the limit; windows without let the cap grow back.
        if lossy {
            self.inflight_hi = (self.config.backoff * in_force).max(self.min);
        } else if self.inflight_hi.is_finite() {
            self.inflight_hi *= self.config.probe_gain.max(1.0);
            if self.inflight_hi > self.max {
                self.inflight_hi = f64::INFINITY;
            }
        }

        // The phases.
        self.phase = match self.phase {
            Phase::Startup => {
                let bw = self.btl_bw.get();
                if f64::from(self.window.inflight_max) < in_force {
                    // The demand, not the limit, set this window (it never reached the
                    // limit): its rtt had no queue of the limit's making. (Not merely a
                    // window not bound: a first window's admissions ramp up from none, and a
                    // gate started at 60 in front of a knee of 20 skipped its probe of the
                    // rtt and stayed at 60.)
                    self.unqueued = true;
                }
                if bound && bw > 0.0 {
                    if bw >= self.full_bw * FULL_BW_GROWTH {
                        // Growth after a first reference: the limit was below the knee.
                        self.unqueued |= self.full_bw > 0.0;
                        self.full_bw = bw;
                        self.full_bw_windows = 0;
                    } else {
                        self.full_bw_windows += 1;
                    }
                }
                if lossy || self.full_bw_windows >= FULL_BW_WINDOWS {
                    self.full = true;
                    Phase::Drain
                } else {
                    Phase::Startup
                }
            }
            // A limit set above the knee from the start (the initial 20 in front of one
            // worker) measured its rt_prop on the queue it built, and the startup could not
            // tell (the rate never grew, and the demand always filled the limit); only a
            // window at a lower limit tells. Then the rtt is measured afresh at once.
            Phase::Drain if !self.unqueued => Phase::ProbeRtt { measuring: false },
            Phase::Drain => {
                self.enter_probe_bw(now);
                self.phase
            }
            Phase::ProbeBw(i) => {
                if found && !lossy {
                    // Probe again at once, from the rate found: 25% a window rather than a
                    // cycle while the service follows.
                    Phase::ProbeBw(0)
                } else {
                    Phase::ProbeBw((i + 1) % self.config.cycle.max(1))
                }
            }
            Phase::ProbeRtt { measuring: false } => Phase::ProbeRtt { measuring: true },
            Phase::ProbeRtt { measuring: true } => {
                if self.rt_prop.value < previous_rt_prop * FOUND_LOWER {
                    // Half the limit answered clearly faster: the service was queueing at
                    // the product, which is halved with it. Again, until it is not.
                    Phase::ProbeRtt { measuring: false }
                } else if self.full {
                    self.enter_probe_bw(now);
                    self.phase
                } else {
                    Phase::Startup
                }
            }
        };
        // No window answered at rt_prop within its noise for `probe_rtt_interval`: a
        // standing queue, a slower service, or a minimum measured short. Measure afresh.
        if matches!(self.phase, Phase::ProbeBw(_))
            && self.rt_prop.value.is_finite()
            && now.saturating_since(self.rt_prop.seen) >= self.config.probe_rtt_interval
            && (self.rt_prop.unseen_windows >= PROBE_RTT_WINDOWS
                || self.rt_prop.clearly_above >= CLEARLY_ABOVE_WINDOWS)
        {
            self.phase = Phase::ProbeRtt { measuring: false };
        }

        if self.phase == (Phase::ProbeRtt { measuring: false }) {
            // What the rate just delivered needs at the lowest rtt known, if less than the
            // product: BBR drains to four packets, far under any product, while a gain of
            // 0.75 on a product whose maximum still holds a capacity just halved queued in
            // the service, and the rtt it measured replaced rt_prop upwards, queue included
            // (the limit then held 16 in front of a knee of 10).
            let needed = rate * self.rt_prop.value;
            self.probe_rtt_base = self.bdp().map_or(needed, |bdp| bdp.min(needed));
        }
        if let Some(bdp) = self.bdp() {
            if matches!(self.phase, Phase::ProbeRtt { .. }) {
                // (No headroom while measuring the rtt: the point is nothing queued.)
                self.limit = self.gain() * self.probe_rtt_base.min(bdp);
            } else {
                self.limit = self.gain() * bdp + self.config.headroom;
            }
        } else if lossy {
            self.limit = in_force;
        }
        self.limit = self.limit.min(self.inflight_hi).clamp(self.min, self.max);
        self.open_window(now);
    }
}

impl Limit for Bdp {
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
            self.open_window(sample.now);
        }
        self.window.count(sample, self.config.timeout);
        // Every answer held its permit for its rtt, a drop's too: by Little's law that is
        // the time that sets how many the limit must allow (a timeout holds one for the
        // whole timeout, while the successes' mean shows none of it).
        self.rtt_sum += sample.rtt;
        let rtt = sample.rtt.as_secs_f64();
        self.rtt_sq += rtt * rtt;
        if self.window.samples < self.least_answers {
            return;
        }
        // Multiplied out: `elapsed >= WINDOW_RTTS x mean rtt`, without a division.
        let elapsed = sample.now.saturating_since(self.window.start);
        let rtts = if self.windows == 0 {
            FIRST_WINDOW_RTTS
        } else {
            WINDOW_RTTS
        };
        // (The first window's rtts are waited for only up to `MAX_ANSWERS`: a gate that
        // starts far above the knee would otherwise wait twenty queued rtts. And a window
        // with too many drops closes at once: they are the plainest sign of overload, and a
        // gate started at 20 in front of 7 workers answering in 2 s, every answer past the
        // client's 2.5 s, waited 100 s for its first window.)
        let lossy = f64::from(self.window.drops)
            > self.config.drop_tolerance * f64::from(self.window.samples);
        if !lossy
            && (elapsed < self.least_window
                || (elapsed
                    .as_nanos()
                    .saturating_mul(u64::from(self.window.samples))
                    < self.rtt_sum.as_nanos().saturating_mul(rtts)
                    && (self.windows > 0 || self.window.samples < MAX_ANSWERS)))
        {
            return;
        }
        self.close_window(sample.now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limit::testkit::{Load, Service, run};

    fn secs(s: u64) -> Nanos {
        Nanos::from_secs(s)
    }

    fn bdp(config: BdpConfig) -> Bdp {
        Bdp::new(&config)
    }

    /// Feeds `count` answers evenly over `span` from `from`, each with `rtt`, admitted at
    /// `inflight`, every `drop_every`-th one dropped (0: none).
    fn feed(
        bdp: &mut Bdp,
        from: Nanos,
        span: Nanos,
        count: u64,
        rtt: Nanos,
        inflight: u32,
        drop_every: u64,
    ) {
        for i in 0..count {
            let outcome = if drop_every > 0 && i % drop_every == 0 {
                Outcome::Dropped
            } else {
                Outcome::Success
            };
            bdp.on_sample(&Sample {
                now: Time::ZERO + from + Nanos::from_nanos(span.as_nanos() * (i + 1) / count),
                rtt,
                inflight,
                outcome,
            });
        }
    }

    #[test]
    fn windowed_max_keeps_the_best_of_its_span() {
        let mut max = WindowedMax::default();
        max.update(1, 10, 5.0);
        max.update(2, 10, 3.0);
        max.update(8, 10, 4.0);
        assert_eq!(max.get(), 5.0, "within the span");
        max.update(12, 10, 2.0);
        assert_eq!(max.get(), 4.0, "5 expired, 4 was kept as the second best");
        max.update(30, 10, 1.0);
        assert_eq!(max.get(), 1.0, "all expired");
        max.update(31, 10, 7.0);
        assert_eq!(max.get(), 7.0);
    }

    #[test]
    fn settles_at_the_knee_of_kanaloa() {
        // 20 in parallel at 100 ms: the product is 200 rps x 100 ms = 20.
        let mut limit = bdp(BdpConfig::default());
        let trace = run(&mut limit, &Service::kanaloa(), Load::Saturating, secs(90));
        let mean = trace.mean_limit(secs(10), secs(90));
        assert!((18.0..25.0).contains(&mean), "{mean}");
        let goodput = trace.goodput(secs(10), secs(90));
        assert!(goodput > 185.0, "{goodput}");
        let product = limit.bdp().unwrap_or(0.0);
        assert!((17.0..24.0).contains(&product), "{product}");
    }

    #[test]
    fn startup_doubles_to_a_large_knee() {
        // From 1 to a knee of 200: doublings, not 25% a cycle.
        let config = BdpConfig {
            initial: 1,
            ..BdpConfig::default()
        };
        let service = Service {
            optimal: 200,
            ..Service::kanaloa()
        };
        let trace = run(&mut bdp(config), &service, Load::Saturating, secs(40));
        let settled = trace.settled_within(Nanos::ZERO, 200.0, 0.3);
        assert!(settled.is_some_and(|t| t < secs(20)), "{settled:?}");
        let mean = trace.mean_limit(secs(20), secs(40));
        assert!((180.0..240.0).contains(&mean), "{mean}");
    }

    #[test]
    fn follows_capacity_down_and_back_up() {
        let service = Service::halving(secs(30), secs(60));
        let trace = run(
            &mut bdp(BdpConfig::default()),
            &service,
            Load::Saturating,
            secs(100),
        );
        let before = trace.mean_limit(secs(10), secs(30));
        // The maximum of the rate expires within its ten windows.
        let halved = trace.mean_limit(secs(40), secs(60));
        // A probe that finds more probes again at once.
        let after = trace.mean_limit(secs(70), secs(100));
        assert!((18.0..25.0).contains(&before), "{before}");
        assert!((8.0..14.0).contains(&halved), "{halved}");
        assert!((18.0..25.0).contains(&after), "{after}");
    }

    #[test]
    fn a_slower_service_is_measured_afresh() {
        // The work doubles over ten seconds: the rate halves, the rtt doubles, the product
        // stays 20. A minimum that only goes down keeps the old rtt, and the product halves
        // with the rate; the probe of the rtt measures the new one.
        let service = Service::kanaloa().with_base_ramp(secs(30), secs(40), 2.0);
        let probing = run(
            &mut bdp(BdpConfig::default()),
            &service,
            Load::Saturating,
            secs(100),
        );
        let held = probing.mean_limit(secs(60), secs(100));
        assert!((17.0..25.0).contains(&held), "{held}");
        let never = BdpConfig {
            probe_rtt_interval: secs(1000),
            ..BdpConfig::default()
        };
        let stale = run(&mut bdp(never), &service, Load::Saturating, secs(100));
        let shrunk = stale.mean_limit(secs(60), secs(100));
        assert!(shrunk < 12.0, "the failure this guards against: {shrunk}");
    }

    #[test]
    fn drops_cap_the_limit_and_the_cap_grows_back() {
        let ms = Nanos::from_millis;
        let mut limit = bdp(BdpConfig::default());
        // 200 answers a second at 100 ms, 20 in flight, demand-bound: product 20, startup
        // at twice that, plus the headroom.
        feed(&mut limit, Nanos::ZERO, secs(4), 800, ms(100), 20, 0);
        assert_eq!(limit.limit(), 41);
        // A window at 41 with a drop in four: capped at 0.7 x 41.
        feed(&mut limit, secs(4), secs(1), 200, ms(100), 41, 4);
        let capped = limit.limit();
        assert!(capped <= 29, "{capped}");
        // Clean windows at the limit: the cap grows back by 25% a window.
        feed(&mut limit, secs(5), secs(3), 600, ms(100), capped, 0);
        assert!(limit.limit() > capped, "{}", limit.limit());
        // Ignored answers change nothing.
        let before = limit.limit();
        for i in 0..500 {
            limit.on_sample(&Sample {
                now: Time::ZERO + secs(8) + ms(i),
                rtt: ms(1),
                inflight: 1,
                outcome: Outcome::Ignored,
            });
        }
        assert_eq!(limit.limit(), before);
    }

    #[test]
    fn a_light_load_leaves_room_for_its_bursts() {
        // 100 rps against a capacity of 200: the windows are set by the demand, not the
        // limit, so they do not end the startup, and the limit stays at twice what the
        // demand needs. Taken as measurements (any window), the startup would end and the
        // limit sit at the product of the demand (~10), turning Poisson bursts away.
        let trace = run(
            &mut bdp(BdpConfig::default()),
            &Service::kanaloa(),
            Load::Poisson { rps: 100.0 },
            secs(90),
        );
        assert!(trace.min_limit() >= 15, "{}", trace.min_limit());
        let goodput = trace.goodput(secs(10), secs(90));
        assert!(goodput > 97.0, "{goodput}");
    }

    #[test]
    fn the_unqueued_product_counts_rates_at_rt_prop_once_less_concurrency_answered_as_fast() {
        let ms = Nanos::from_millis;
        let mut limit = bdp(BdpConfig::default());
        // 20 in flight answering in 100 ms (200 a second): the rtt could be a queue's.
        feed(&mut limit, ms(0), ms(6000), 1200, ms(100), 20, 0);
        assert!(limit.rt_prop().is_some());
        assert_eq!(limit.unqueued_product(), None, "no lower concurrency seen");
        // 10 in flight answer as fast: no queue at 20.
        feed(&mut limit, ms(6000), ms(3000), 300, ms(100), 10, 0);
        let product = limit.unqueued_product().expect("measured");
        assert!((17.0..20.5).contains(&product), "{product}");
        // More rate at a longer rtt (a service whose latency follows the rate it is sent):
        // the product of the highest rate and the lowest rtt grows, the unqueued one does
        // not, and once no window in the rate's span answered at rt_prop it is gone.
        feed(&mut limit, ms(9000), ms(1000), 400, ms(150), 60, 0);
        let bdp = limit.bdp().expect("measured");
        assert!(bdp > 30.0, "{bdp}");
        let product = limit.unqueued_product().expect("still in its span");
        assert!(product < 20.5, "{product}");
        feed(&mut limit, ms(10_000), ms(10_000), 4000, ms(150), 60, 0);
        assert_eq!(limit.unqueued_product(), None);
    }

    #[test]
    fn respects_min_and_max() {
        let config = BdpConfig {
            initial: 5000,
            min: 0,
            max: 30,
            ..BdpConfig::default()
        };
        let mut limit = bdp(config);
        assert_eq!(limit.limit(), 30);
        let trace = run(&mut limit, &Service::kanaloa(), Load::Saturating, secs(30));
        assert!(trace.max_limit() <= 30 && trace.min_limit() >= 1);
    }
}

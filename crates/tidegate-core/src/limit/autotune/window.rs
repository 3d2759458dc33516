//! Closing a window: when its answers are enough, and measured well enough, for the
//! latency rule to judge their mean rtt (the module docs of `autotune`, **Windows**). A mean
//! over answers that leave out the slow requests still running, or over too few of a spread
//! service, reads noise or censoring as a queue.

use super::Autotune;
use super::trial::one_request_is_judged;
use crate::time::Nanos;

/// A window also closes once it lasted this many of its answers' mean rtt (and holds
/// `min_window_samples`): a service answering in a millisecond is measured every 100 ms,
/// not every 500. At 500 ms, an overload of a 1 ms service was over before its first window
/// closed, and the limit sat at its initial 20 in front of 30 workers (a third of the
/// capacity shed). Services slower than 5 ms keep the configured window.
pub(super) const WINDOW_RTTS: u64 = 100;

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
pub(super) const WINDOW_PRECISION: f64 = 6.0;

/// Standard errors by which a window's mean rtt must exceed what the tolerance allows for
/// the window to be judged before it is measured to [`WINDOW_PRECISION`]: a queue that
/// doubles the rtt is seen as soon as it is beyond doubt, not after seconds of answers.
pub(super) const CLEAR_EXCESS: f64 = 3.0;

/// A window waiting for precision lasts at most this many configured windows (8 s at
/// 500 ms): a service whose answers are too few or too spread to be measured in that time
/// is judged on what it gave.
pub(super) const MAX_WINDOW_STRETCH: u32 = 16;

/// The first window sets the baseline only if it lasted this many of its answers' mean rtt:
/// its answers are those of the requests that finished first, biased short by about the
/// ratio of the rtt to the window's length.
pub(super) const FIRST_WINDOW_RTTS: f64 = 20.0;

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
pub(super) const LITTLE_EXCESS: f64 = 2.0;

/// Windows in a row, censored by [`LITTLE_EXCESS`] with their answers within the tolerance
/// and the limit unfilled, that put the baseline in doubt (see
/// [`Autotune::weigh_baseline`]): at a few requests in flight, one such window happens by
/// chance (exponential work at a knee of 3, ten answers a window, re-anchored on a window
/// twice the mean), two in a row far less.
pub(super) const DOUBTING_WINDOWS: u32 = 2;

/// A window whose requests stayed in flight this many times longer than [`LITTLE_EXCESS`]
/// allows puts the baseline in doubt on its own: no chance at a few requests in flight, and
/// a service whose slow answers come back within a window or two leaves only one such window
/// (a cache in front of a store of 917 ms answers at half a knee of 30: 9 in flight where its
/// 9 ms answers allowed 3.3, then the slow answers in the next window).
pub(super) const DOUBTING_AT_ONCE: f64 = 2.0;

/// A closed window's mean rtt of successes, in seconds, and the variance of that mean.
#[derive(Clone, Copy, Debug)]
pub(super) struct WindowRtt {
    pub(super) mean: f64,
    pub(super) variance_of_mean: f64,
}

impl Autotune {
    /// Weighs the baseline against a closed window (`overstay`: how many times longer its
    /// requests stayed in flight than Little's law allows its answers, censored past 1,
    /// [`LITTLE_EXCESS`]; `unbound`: its demand never filled the limit). Censoring keeps a
    /// window of short answers from anchoring the baseline, but the window just before the
    /// slow requests are many enough in flight to censor one is as short, and anchors it: a
    /// cache in front of a slow store whose slow tenth takes 18 s was anchored at its fast
    /// answers' 0.18 s on its second window (2.9 in flight, 3.5 allowed), every window read
    /// as a queue once the slow answers came back, and the limit walked from 24 to 0.5 at
    /// half the service's capacity. So windows that Little's law censors while the limit is
    /// unfilled and their answers are within the tolerance, [`DOUBTING_WINDOWS`] in a row
    /// (or one past [`DOUBTING_AT_ONCE`]), put the baseline in doubt; the first window that
    /// is not censored and reads as a queue while the limit is unfilled then re-anchors it
    /// rather than shrinking the limit (`latency_rule`): an unfilled limit queues nothing,
    /// and the slow answers are the service's own. A window that is not censored and within
    /// the tolerance clears the doubt, as does any anchoring.
    pub(super) fn weigh_baseline(
        &mut self,
        rtt: Option<WindowRtt>,
        overstay: f64,
        censored: bool,
        unbound: bool,
    ) {
        let (Some(rtt), Some(base)) = (rtt, self.base) else {
            return;
        };
        let within = rtt.mean <= base.value * (1.0 + self.tolerance());
        if overstay > 1.0 && unbound && within {
            self.doubting += if overstay > DOUBTING_AT_ONCE {
                DOUBTING_WINDOWS
            } else {
                1
            };
            self.base_in_doubt |= self.doubting >= DOUBTING_WINDOWS;
        } else {
            self.doubting = 0;
            if !censored && within {
                self.base_in_doubt = false;
            }
        }
    }

    /// The mean rtt of the window's successes and the variance of that mean, if it had any.
    pub(super) fn window_rtt(&self) -> Option<WindowRtt> {
        if self.window.successes == 0 {
            return None;
        }
        let n = f64::from(self.window.successes);
        let mean = self.success_rtt.as_secs_f64() / n;
        // One success says nothing of the spread: take it as wide as an exponential's.
        let variance = if self.window.successes > 1 {
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
    /// seconds). Before the baseline is set, a window waits at most [`FIRST_WINDOW_RTTS`] of
    /// its requests' mean time in the service: what the service does while a queue forms
    /// from the initial limit is a trend, not noise, and a window that waited for it to
    /// settle anchored the baseline on the queue (RSocket's at ten times its rtt).
    pub(super) fn measured_enough(&mut self, elapsed: Nanos) -> bool {
        if self.window.drops > 0
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
                let inflight = self.window.mean_inflight();
                let in_service = inflight * secs / f64::from(self.window.successes.max(1));
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
    pub(super) fn moved_since_due(&mut self, window: WindowRtt) -> bool {
        let Some((n1, sum1)) = self.at_due else {
            self.at_due = Some((self.window.successes, self.success_rtt.as_secs_f64()));
            return false;
        };
        let n2 = self.window.successes - n1;
        if n1 == 0 || n2 < self.config.min_window_samples {
            return false;
        }
        let (n1, n2) = (f64::from(n1), f64::from(n2));
        let difference = (self.success_rtt.as_secs_f64() - sum1) / n2 - sum1 / n1;
        // The window's spread, from its variance of the mean.
        let variance = window.variance_of_mean * (n1 + n2);
        difference * difference > CLEAR_EXCESS * CLEAR_EXCESS * variance * (1.0 / n1 + 1.0 / n2)
    }
}

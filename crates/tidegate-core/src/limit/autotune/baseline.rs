//! The baseline the latency rule compares each window with, and the evidence that it holds
//! no queue of the service's own: a window whose rate the demand set, outgrown by a later
//! one (`Light`).

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
pub(super) struct Baseline {
    pub(super) value: f64,
    /// The variance of the estimate that set `value`.
    pub(super) variance: f64,
    /// Windows seen since it was set.
    pub(super) windows: u32,
    pub(super) clear: bool,
}

impl Baseline {
    pub(super) fn anchored(srtt: f64, variance: f64) -> Baseline {
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
    pub(super) fn observe(&mut self, srtt: f64, variance: f64, needed: f64) {
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
pub(super) const SAME_LEVEL: f64 = 2.0;

/// The least-served recent window whose rate the demand set (the limit was never reached):
/// if a window within [`RING`] windows after it served a third more (`1 / probe_factor`),
/// beyond two standard errors of their counts' noise (a Poisson count's, `1 / sqrt(n)` in
/// the log), the service was not saturated at that rate: the demand grew and the service
/// kept up. Only a demand-set rate tells it: a service that sped up under a limit that
/// binds (warming after a deploy) serves more too, and there its baseline, measured
/// slower, is exactly what a probe must find.
#[derive(Clone, Copy, Debug)]
pub(super) struct Light {
    pub(super) successes: u32,
    pub(super) rate: f64,
    /// Measured windows since.
    pub(super) age: u32,
}

impl Light {
    /// Whether a window that served `successes` at `rate` shows the service kept up.
    pub(super) fn outgrown(&self, successes: u32, rate: f64, probe_factor: f64) -> bool {
        if successes == 0 || self.successes == 0 || self.rate <= 0.0 {
            return false;
        }
        let noise = (1.0 / f64::from(successes) + 1.0 / f64::from(self.successes)).sqrt();
        (rate / self.rate).ln() >= -probe_factor.clamp(f64::MIN_POSITIVE, 1.0).ln() + 2.0 * noise
    }
}

//! The four ways a component of the model spaces its events, as the article's tool defines
//! them (`pdc-model/simulate.cc` in github.com/xemul/queue-dispatch).
//!
//! Each process is built from a nominal gap `L` (`1 / rate` for the producer and the consumer,
//! the period for the dispatcher) and yields the gaps between consecutive events:
//!
//! | name | gap | mean gap |
//! |---|---|---|
//! | `uniform` | `L` | `L` |
//! | `poisson` | `L * Exp(1)` (a Poisson point process of rate `1/L`) | `L` |
//! | `expdelay` | `L * (1 + Exp(1))`: never faster than `L`, sometimes much slower | `2L` |
//! | `capdelay` | `L * U(1, 2 * multiplier)`: never faster than `L`, at most `2 * multiplier` slower | `L * (1 + 2m) / 2` |
//!
//! `expdelay` and `capdelay` therefore run at about half their nominal rate; that is how the
//! tool defines them, and we keep it.
//!
//! Gaps are whole nanoseconds; see [`Process::next_gap`] for the rounding.

use std::fmt;
use std::str::FromStr;

use tidegate_core::rng::Rng;

/// How a component spaces its events; see the module documentation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProcessKind {
    Uniform,
    Poisson,
    ExpDelay,
    CapDelay,
}

impl ProcessKind {
    pub const ALL: [ProcessKind; 4] = [
        ProcessKind::Uniform,
        ProcessKind::Poisson,
        ProcessKind::ExpDelay,
        ProcessKind::CapDelay,
    ];

    /// The name on the command line, as in the article's tool.
    pub const fn name(self) -> &'static str {
        match self {
            ProcessKind::Uniform => "uniform",
            ProcessKind::Poisson => "poisson",
            ProcessKind::ExpDelay => "expdelay",
            ProcessKind::CapDelay => "capdelay",
        }
    }

    /// Whether the process draws random numbers (all but `uniform`).
    pub const fn is_random(self) -> bool {
        !matches!(self, ProcessKind::Uniform)
    }
}

impl fmt::Display for ProcessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A process name that is none of the four.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown process {input:?}: expected one of uniform, poisson, expdelay, capdelay")]
pub struct ParseProcessError {
    input: String,
}

impl FromStr for ProcessKind {
    type Err = ParseProcessError;

    fn from_str(s: &str) -> Result<ProcessKind, ParseProcessError> {
        ProcessKind::ALL
            .into_iter()
            .find(|k| k.name() == s)
            .ok_or_else(|| ParseProcessError {
                input: s.to_owned(),
            })
    }
}

/// A running process: yields the gaps between a component's consecutive events.
#[derive(Clone, Debug)]
pub struct Process {
    kind: ProcessKind,
    /// The nominal gap `L = numerator / denominator` nanoseconds, exactly...
    whole: u64,
    remainder: u64,
    denominator: u64,
    /// ... and as a float, for the random processes.
    nominal: f64,
    /// The uniform process's accumulated remainder, in `1 / denominator` nanoseconds.
    carry: u64,
    /// `capdelay`'s `2 * multiplier - 1`: the gap is `L * (1 + span * U(0, 1))`.
    cap_span: f64,
    rng: Rng,
}

impl Process {
    /// A process of nominal gap `numerator / denominator` nanoseconds (`1e9 / rate` for a
    /// rate, `period / 1` for a period); `multiplier` only matters to `capdelay`. A zero
    /// denominator is taken as 1.
    pub fn new(
        kind: ProcessKind,
        (numerator, denominator): (u64, u64),
        multiplier: f64,
        rng: Rng,
    ) -> Process {
        let denominator = denominator.max(1);
        Process {
            kind,
            whole: numerator / denominator,
            remainder: numerator % denominator,
            denominator,
            nominal: numerator as f64 / denominator as f64,
            carry: 0,
            cap_span: 2.0 * multiplier - 1.0,
            rng,
        }
    }

    /// The gap to the next event, in whole nanoseconds (possibly zero).
    ///
    /// `uniform` hands out the exact nominal gap in integers, carrying the fraction of a
    /// nanosecond to the next gap, so that `n` gaps always sum to `n * L` within a
    /// nanosecond (a uniform 140,000/s producer really produces 140,000 messages per second,
    /// not 140,003 as rounding each 7,142.857 ns gap down would). The random processes round
    /// each gap to the nearest nanosecond, which on gaps of microseconds does not move their
    /// mean.
    #[inline]
    pub fn next_gap(&mut self) -> u64 {
        let gap = match self.kind {
            ProcessKind::Uniform => {
                self.carry += self.remainder;
                if self.carry >= self.denominator {
                    self.carry -= self.denominator;
                    return self.whole + 1;
                }
                return self.whole;
            }
            ProcessKind::Poisson => self.nominal * exp1(&mut self.rng),
            ProcessKind::ExpDelay => self.nominal * (1.0 + exp1(&mut self.rng)),
            ProcessKind::CapDelay => self.nominal * (1.0 + self.cap_span * self.rng.next_f64()),
        };
        // Rounds to nearest; `as` saturates, which only matters for gaps of centuries.
        (gap + 0.5) as u64
    }
}

/// A draw from the exponential distribution of mean 1: Marsaglia and Tsang's ziggurat
/// ("The Ziggurat Method for Generating Random Variables", 2000), 256 layers, with Doornik's
/// use of one 64-bit draw for both the layer and the abscissa. 99% of draws cost one
/// random number, a multiplication and a comparison; the logarithm of plain inversion made
/// the Poisson processes three times slower.
#[inline]
fn exp1(rng: &mut Rng) -> f64 {
    let z = ziggurat();
    loop {
        let bits = rng.next_u64();
        let layer = (bits & 0xff) as usize;
        let x = unit(bits) * z.x[layer];
        if x < z.x[layer + 1] {
            return x;
        }
        if layer == 0 {
            // The tail beyond R is R plus an exponential, by memorylessness.
            return ZIGGURAT_R - open_unit(rng.next_u64()).ln();
        }
        if z.f[layer + 1] + unit(rng.next_u64()) * (z.f[layer] - z.f[layer + 1]) < (-x).exp() {
            return x;
        }
    }
}

/// `[0, 1)` from the top 53 bits.
#[inline]
fn unit(bits: u64) -> f64 {
    (bits >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `(0, 1]` from the top 53 bits.
#[inline]
fn open_unit(bits: u64) -> f64 {
    ((bits >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// The start of the tail and the area of each layer, for 256 layers (Marsaglia and Tsang).
const ZIGGURAT_R: f64 = 7.697_117_470_131_05;
const ZIGGURAT_V: f64 = 0.003_949_659_822_581_557;

#[derive(Debug)]
struct Ziggurat {
    /// Right edges of the layers, decreasing: `x[0] = V / f(R)` (the base layer's
    /// equivalent width), `x[1] = R`, ..., `x[256] = 0`.
    x: [f64; 257],
    /// `f(x[i]) = exp(-x[i])`.
    f: [f64; 257],
}

fn ziggurat() -> &'static Ziggurat {
    static TABLES: std::sync::OnceLock<Ziggurat> = std::sync::OnceLock::new();
    TABLES.get_or_init(|| {
        let mut x = [0.0; 257];
        x[0] = ZIGGURAT_V * ZIGGURAT_R.exp();
        x[1] = ZIGGURAT_R;
        for i in 1..255 {
            x[i + 1] = -(ZIGGURAT_V / x[i] + (-x[i]).exp()).ln();
        }
        x[256] = 0.0;
        let f = x.map(|v: f64| (-v).exp());
        Ziggurat { x, f }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_gap(kind: ProcessKind, nominal: u64, n: u64) -> f64 {
        let mut p = Process::new(kind, (nominal, 1), 1.5, Rng::seed(3));
        (0..n).map(|_| p.next_gap()).sum::<u64>() as f64 / n as f64
    }

    #[test]
    fn names_round_trip_and_unknown_names_list_the_valid_ones() {
        for k in ProcessKind::ALL {
            assert_eq!(k.name().parse(), Ok(k));
        }
        let err = "gauss".parse::<ProcessKind>().expect_err("unknown");
        assert_eq!(
            err.to_string(),
            "unknown process \"gauss\": expected one of uniform, poisson, expdelay, capdelay"
        );
    }

    #[test]
    fn mean_gaps_are_as_the_article_s_tool_defines_them() {
        let n = 200_000;
        let close = |got: f64, want: f64| (got / want - 1.0).abs() < 0.01;
        assert_eq!(mean_gap(ProcessKind::Uniform, 5_000, n), 5_000.0);
        assert!(close(mean_gap(ProcessKind::Poisson, 5_000, n), 5_000.0));
        assert!(close(mean_gap(ProcessKind::ExpDelay, 5_000, n), 10_000.0));
        // U(1, 3) at multiplier 1.5: mean 2 L.
        assert!(close(mean_gap(ProcessKind::CapDelay, 5_000, n), 10_000.0));
    }

    #[test]
    fn delay_processes_are_never_faster_than_nominal_and_capdelay_is_capped() {
        let mut e = Process::new(ProcessKind::ExpDelay, (1_000, 1), 1.5, Rng::seed(1));
        let mut c = Process::new(ProcessKind::CapDelay, (1_000, 1), 1.5, Rng::seed(1));
        for _ in 0..100_000 {
            assert!(e.next_gap() >= 999);
            assert!((999..=3_001).contains(&c.next_gap()));
        }
    }

    #[test]
    fn the_ziggurat_draws_an_exponential() {
        let z = ziggurat();
        assert!(
            z.x[255] > 0.0 && z.x[255] < z.x[254],
            "the layers close at zero"
        );
        let mut rng = Rng::seed(9);
        let n = 1_000_000;
        let draws: Vec<f64> = (0..n).map(|_| exp1(&mut rng)).collect();
        let mean = draws.iter().sum::<f64>() / n as f64;
        let var = draws.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / n as f64;
        assert!((mean - 1.0).abs() < 0.005, "mean {mean}");
        assert!((var - 1.0).abs() < 0.01, "variance {var}");
        // The survival function at several points, the tail included.
        for t in [0.1, 0.5, 1.0, 2.0, 4.0, 8.0] {
            let share = draws.iter().filter(|&&d| d > t).count() as f64 / n as f64;
            let want = (-t).exp();
            assert!(
                (share - want).abs() < 4.0 * (want / n as f64).sqrt() + 1e-5,
                "P(X > {t}) = {share}, want {want}"
            );
        }
    }

    #[test]
    fn fractional_gaps_add_up_exactly() {
        let mut p = Process::new(
            ProcessKind::Uniform,
            (1_000_000_000, 140_000),
            1.5,
            Rng::seed(0),
        );
        let total: u64 = (0..140_000).map(|_| p.next_gap()).sum();
        assert!(total.abs_diff(1_000_000_000) <= 1, "{total}");
    }
}

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
//! Gaps are real numbers of nanoseconds; they are turned into whole nanoseconds with the
//! rounding error carried to the next gap, so that the sum of the first `n` gaps is always
//! within a nanosecond of the exact sum (a uniform 140,000/s producer really produces
//! 140,000 messages per second, not 140,003 as rounding each 7,142.857 ns gap would).

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
pub(crate) struct Process {
    kind: ProcessKind,
    /// The nominal gap `L`, in nanoseconds.
    nominal: f64,
    /// `capdelay`'s `2 * multiplier - 1`: the gap is `L * (1 + span * U(0, 1))`.
    cap_span: f64,
    rng: Rng,
    /// The fraction of a nanosecond not yet handed out.
    carry: f64,
}

impl Process {
    /// `nominal` in nanoseconds; `multiplier` only matters to `capdelay`.
    pub(crate) fn new(kind: ProcessKind, nominal: f64, multiplier: f64, rng: Rng) -> Process {
        Process {
            kind,
            nominal,
            cap_span: 2.0 * multiplier - 1.0,
            rng,
            carry: 0.0,
        }
    }

    /// The gap to the next event, in whole nanoseconds (possibly zero).
    #[inline]
    pub(crate) fn next_gap(&mut self) -> u64 {
        let gap = match self.kind {
            ProcessKind::Uniform => self.nominal,
            ProcessKind::Poisson => self.nominal * exp1(&mut self.rng),
            ProcessKind::ExpDelay => self.nominal * (1.0 + exp1(&mut self.rng)),
            ProcessKind::CapDelay => self.nominal * (1.0 + self.cap_span * self.rng.next_f64()),
        };
        let total = self.carry + gap;
        let whole = total.floor();
        self.carry = total - whole;
        whole as u64
    }
}

/// A draw from the exponential distribution of mean 1, by inversion.
#[inline]
fn exp1(rng: &mut Rng) -> f64 {
    // In (0, 1], so that the logarithm is finite.
    let u = ((rng.next_u64() >> 11) + 1) as f64 * (1.0 / (1u64 << 53) as f64);
    -u.ln()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_gap(kind: ProcessKind, nominal: f64, n: u64) -> f64 {
        let mut p = Process::new(kind, nominal, 1.5, Rng::seed(3));
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
        assert_eq!(mean_gap(ProcessKind::Uniform, 5_000.0, n), 5_000.0);
        assert!(close(mean_gap(ProcessKind::Poisson, 5_000.0, n), 5_000.0));
        assert!(close(mean_gap(ProcessKind::ExpDelay, 5_000.0, n), 10_000.0));
        // U(1, 3) at multiplier 1.5: mean 2 L.
        assert!(close(mean_gap(ProcessKind::CapDelay, 5_000.0, n), 10_000.0));
    }

    #[test]
    fn delay_processes_are_never_faster_than_nominal_and_capdelay_is_capped() {
        let mut e = Process::new(ProcessKind::ExpDelay, 1_000.0, 1.5, Rng::seed(1));
        let mut c = Process::new(ProcessKind::CapDelay, 1_000.0, 1.5, Rng::seed(1));
        for _ in 0..100_000 {
            assert!(e.next_gap() >= 999);
            assert!((999..=3_001).contains(&c.next_gap()));
        }
    }

    #[test]
    fn fractional_gaps_add_up_exactly() {
        let mut p = Process::new(ProcessKind::Uniform, 1e9 / 140_000.0, 1.5, Rng::seed(0));
        let total: u64 = (0..140_000).map(|_| p.next_gap()).sum();
        assert!(total.abs_diff(1_000_000_000) <= 1, "{total}");
    }
}

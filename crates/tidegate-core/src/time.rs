//! Time as plain integers, passed in by whoever drives the core.
//!
//! The core never reads a clock: the simulator passes virtual time, the async runtime passes
//! time read from its own clock, and tests pass literal values. [`Time`] is a point in time
//! and [`Nanos`] a span, both in nanoseconds as a `u64` (584 years of range), so arithmetic on
//! the hot path is a single integer instruction and runs are reproducible bit for bit.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// 2^63: the nanoseconds below it (and at least zero) convert through `i64`.
const I64_RANGE: f64 = 9_223_372_036_854_775_808.0;

/// A point in time, in nanoseconds since an origin chosen by the driver.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Time(u64);

/// A span of time in nanoseconds.
#[derive(Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Nanos(u64);

impl Time {
    /// The origin of the driver's time line.
    pub const ZERO: Time = Time(0);
    /// Later than any time a driver will pass; used for "never".
    pub const MAX: Time = Time(u64::MAX);

    pub const fn from_nanos(nanos: u64) -> Time {
        Time(nanos)
    }

    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Time elapsed since `earlier`, or zero if `earlier` is in the future.
    ///
    /// Drivers on real clocks may hand in slightly out-of-order times from different threads;
    /// saturating keeps one such inversion from turning into a 584-year span.
    pub const fn saturating_since(self, earlier: Time) -> Nanos {
        Nanos(self.0.saturating_sub(earlier.0))
    }
}

impl Add<Nanos> for Time {
    type Output = Time;
    fn add(self, rhs: Nanos) -> Time {
        Time(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign<Nanos> for Time {
    fn add_assign(&mut self, rhs: Nanos) {
        *self = *self + rhs;
    }
}

impl Sub for Time {
    type Output = Nanos;
    /// Saturating: see [`Time::saturating_since`].
    fn sub(self, rhs: Time) -> Nanos {
        self.saturating_since(rhs)
    }
}

impl Nanos {
    pub const ZERO: Nanos = Nanos(0);
    pub const MAX: Nanos = Nanos(u64::MAX);

    pub const fn from_nanos(nanos: u64) -> Nanos {
        Nanos(nanos)
    }
    pub const fn from_micros(micros: u64) -> Nanos {
        Nanos(micros.saturating_mul(1_000))
    }
    pub const fn from_millis(millis: u64) -> Nanos {
        Nanos(millis.saturating_mul(1_000_000))
    }
    pub const fn from_secs(secs: u64) -> Nanos {
        Nanos(secs.saturating_mul(1_000_000_000))
    }
    /// Rounds to the nearest nanosecond; negative and NaN become zero, overflow saturates.
    #[inline]
    pub fn from_secs_f64(secs: f64) -> Nanos {
        // `f64::round` is a call into libm on the baseline x86-64 target, and the simulator
        // converts every arrival's gap: rounding by hand is the same to the nanosecond
        // (half away from zero), without the call. `as` from f64 truncates, saturates, and
        // maps NaN to 0, which is what we want; the fraction `nanos - whole` is exact (the
        // two are within a factor of two of each other, or `whole` is 0).
        // The half is added as a 0 or 1 rather than on a branch: which way the fraction
        // falls is a coin toss on random durations, a branch the processor mispredicts half
        // the time (every service start of the simulator).
        let nanos = secs * 1e9;
        if (0.0..I64_RANGE).contains(&nanos) {
            // The usual case, through `i64`: one instruction each way on x86-64, where
            // `u64` to `f64` and back are sequences of several (and this is in the chain
            // of every arrival's time). The same truncation, and `whole + 1` fits.
            let whole = nanos as i64;
            return Nanos(whole as u64 + u64::from(nanos - whole as f64 >= 0.5));
        }
        let whole = nanos as u64;
        Nanos(whole.saturating_add(u64::from(nanos - whole as f64 >= 0.5)))
    }
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1e9
    }
    pub fn as_millis_f64(self) -> f64 {
        self.0 as f64 / 1e6
    }
    pub const fn is_zero(self) -> bool {
        self.0 == 0
    }
    pub const fn saturating_sub(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_sub(rhs.0))
    }
    pub const fn saturating_mul(self, factor: u64) -> Nanos {
        Nanos(self.0.saturating_mul(factor))
    }
    /// Scales by a non-negative factor, rounding to the nearest nanosecond.
    pub fn mul_f64(self, factor: f64) -> Nanos {
        Nanos::from_secs_f64(self.as_secs_f64() * factor)
    }
}

impl Add for Nanos {
    type Output = Nanos;
    fn add(self, rhs: Nanos) -> Nanos {
        Nanos(self.0.saturating_add(rhs.0))
    }
}

impl AddAssign for Nanos {
    fn add_assign(&mut self, rhs: Nanos) {
        *self = *self + rhs;
    }
}

impl Sub for Nanos {
    type Output = Nanos;
    fn sub(self, rhs: Nanos) -> Nanos {
        self.saturating_sub(rhs)
    }
}

impl From<core::time::Duration> for Nanos {
    fn from(d: core::time::Duration) -> Nanos {
        Nanos(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
    }
}

impl From<Nanos> for core::time::Duration {
    fn from(n: Nanos) -> core::time::Duration {
        core::time::Duration::from_nanos(n.0)
    }
}

/// Prints the largest unit that keeps the value exact: `150ms`, `1500ms`, `250us`, `7ns`, so
/// that the printed form always parses back to the same value.
impl fmt::Display for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const UNITS: [(u64, &str); 3] = [(1_000_000_000, "s"), (1_000_000, "ms"), (1_000, "us")];
        if self.0 == 0 {
            return f.write_str("0s");
        }
        match UNITS
            .iter()
            .find(|(scale, _)| self.0.is_multiple_of(*scale))
        {
            Some((scale, unit)) => write!(f, "{}{unit}", self.0 / scale),
            None => write!(f, "{}ns", self.0),
        }
    }
}

impl fmt::Debug for Nanos {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a duration string did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid duration {input:?}: expected a number followed by a unit (ns, us, ms, s, m, h), e.g. \"150ms\" or \"1.5s\""
)]
pub struct ParseNanosError {
    input: String,
}

impl FromStr for Nanos {
    type Err = ParseNanosError;

    /// Parses `"150ms"`, `"1.5s"`, `"250us"`, `"2m"`: a non-negative decimal and a unit.
    fn from_str(s: &str) -> Result<Nanos, ParseNanosError> {
        let err = || ParseNanosError {
            input: s.to_owned(),
        };
        let trimmed = s.trim();
        let split = trimmed
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(err)?;
        let (number, unit) = trimmed.split_at(split);
        let scale: u64 = match unit.trim() {
            "ns" => 1,
            "us" | "µs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" | "min" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            _ => return Err(err()),
        };
        if number.is_empty() {
            return Err(err());
        }
        // Whole and fractional parts in integers so that "0.1s" is exactly 100 ms.
        let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
        if whole.is_empty() && frac.is_empty() {
            return Err(err());
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err())?
        };
        let mut nanos = whole.checked_mul(scale).ok_or_else(err)?;
        let mut place = scale;
        for digit in frac.chars() {
            let d = u64::from(digit.to_digit(10).ok_or_else(err)?);
            place /= 10;
            if place == 0 {
                if d != 0 {
                    return Err(err()); // finer than a nanosecond
                }
                continue;
            }
            nanos = nanos.checked_add(d * place).ok_or_else(err)?;
        }
        Ok(Nanos(nanos))
    }
}

/// Durations appear in configuration files as strings with a unit (`"15ms"`). A bare number
/// other than 0 is refused: `timeout = 30` could mean seconds or milliseconds, and read as
/// nanoseconds it silently made every request time out. The error names the units, and the
/// parser's message adds the key and its line.
impl Serialize for Nanos {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// What a duration without a unit is told.
const UNITS: &str = "write a duration as a string with a unit, such as \"30s\" or \"150ms\" \
                     (units: ns, us, ms, s, m, h)";

impl<'de> Deserialize<'de> for Nanos {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Nanos, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Nanos;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a duration such as \"150ms\" or \"1.5s\"")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Nanos, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Nanos, E> {
                match v {
                    0 => Ok(Nanos::ZERO),
                    v => Err(E::custom(format_args!("{v} has no unit: {UNITS}"))),
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Nanos, E> {
                match u64::try_from(v) {
                    Ok(v) => self.visit_u64(v),
                    Err(_) => Err(E::custom("a duration cannot be negative")),
                }
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Nanos, E> {
                Err(E::custom(format_args!("{v} has no unit: {UNITS}")))
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hand rounding of `from_secs_f64` is `f64::round` (then saturated), to the
    /// nanosecond, at the halves, the edges of the range and on random values at every scale.
    #[test]
    fn from_secs_f64_rounds_as_f64_round() {
        let by_round = |secs: f64| (secs * 1e9).round() as u64;
        let mut cases = vec![
            0.0,
            -0.0,
            -1e-10,
            -0.6e-9,
            0.4e-9,
            0.5e-9,
            1.5e-9,
            2.5e-9,
            // The largest double below one half, where adding 0.5 and flooring goes wrong.
            f64::from_bits(0.5f64.to_bits() - 1) / 1e9,
            1e9,
            4.5e9,
            9.2e9,
            // Around 2^63 ns, where the conversion leaves `i64` for `u64`.
            I64_RANGE / 1e9,
            f64::from_bits(I64_RANGE.to_bits() - 1) / 1e9,
            f64::from_bits(I64_RANGE.to_bits() + 1) / 1e9,
            9.3e9,
            1.8446744073709552e10,
            1.9e10,
            f64::MAX,
            f64::INFINITY,
            f64::NEG_INFINITY,
            f64::NAN,
        ];
        let mut rng = crate::rng::Rng::seed(17);
        for _ in 0..200_000 {
            let scale = 10f64.powi(rng.range_inclusive(-10, 11) as i32);
            cases.push(rng.next_f64() * scale);
            // Exact halves of a nanosecond.
            cases.push((rng.range_inclusive(0, 1 << 40) as f64 + 0.5) / 1e9);
        }
        for secs in cases {
            assert_eq!(
                Nanos::from_secs_f64(secs).as_nanos(),
                by_round(secs),
                "{secs:e}"
            );
        }
    }

    #[test]
    fn parses_units_and_fractions_exactly() {
        assert_eq!("150ms".parse(), Ok(Nanos::from_millis(150)));
        assert_eq!("1.5s".parse(), Ok(Nanos::from_millis(1500)));
        assert_eq!("0.1s".parse(), Ok(Nanos::from_millis(100)));
        assert_eq!(".5ms".parse(), Ok(Nanos::from_micros(500)));
        assert_eq!("250us".parse(), Ok(Nanos::from_micros(250)));
        assert_eq!("2m".parse(), Ok(Nanos::from_secs(120)));
        assert_eq!(" 7 ns ".parse(), Ok(Nanos::from_nanos(7)));
    }

    #[test]
    fn rejects_garbage_with_the_input_in_the_message() {
        for bad in [
            "",
            "ms",
            "15",
            "15 parsecs",
            "-1s",
            "1.2.3s",
            ".s",
            "0.0000000001s",
        ] {
            let err = bad.parse::<Nanos>().expect_err(bad);
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
    }

    #[test]
    fn display_round_trips() {
        for n in [
            0,
            1,
            999,
            1_000,
            1_500,
            15_000_000,
            1_500_000_000,
            123_456_789_012,
            u64::MAX,
        ] {
            let d = Nanos::from_nanos(n);
            assert_eq!(d.to_string().parse(), Ok(d), "{d}");
        }
        assert_eq!(Nanos::from_millis(15).to_string(), "15ms");
        assert_eq!(Nanos::from_millis(1500).to_string(), "1500ms");
        assert_eq!(Nanos::from_nanos(1_500_000_001).to_string(), "1500000001ns");
    }

    #[test]
    fn time_arithmetic_saturates() {
        let t = Time::from_nanos(10);
        assert_eq!(Time::from_nanos(5) - t, Nanos::ZERO);
        assert_eq!(Time::MAX + Nanos::from_secs(1), Time::MAX);
        assert_eq!((t + Nanos::from_nanos(5)) - t, Nanos::from_nanos(5));
    }

    #[test]
    fn deserializes_strings_with_a_unit_and_refuses_bare_numbers() {
        #[derive(Debug, Deserialize)]
        struct C {
            a: Nanos,
            b: Nanos,
        }
        let c: C = toml::from_str("a = \"15ms\"\nb = 0").expect("valid");
        assert_eq!((c.a, c.b), (Nanos::from_millis(15), Nanos::ZERO));
        let err = toml::from_str::<C>("a = \"15 parsecs\"\nb = 1")
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("line 1")));
        // A bare number is not read as nanoseconds: the error names the line, the key and the
        // units.
        for bare in ["30", "1.5", "-2"] {
            let err = toml::from_str::<C>(&format!("a = \"1s\"\nb = {bare}"))
                .expect_err(bare)
                .to_string();
            assert!(err.contains("line 2") && err.contains("b = "), "{err}");
            assert!(
                bare == "-2" || (err.contains("no unit") && err.contains("ms, s, m, h")),
                "{err}"
            );
        }
    }
}

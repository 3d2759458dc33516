//! When requests are due: a rate over time, and the arrival times it implies.
//!
//! A [`Schedule`] is a list of phases, each holding a rate or ramping it linearly, so one type
//! covers a constant rate, steps and ramps. Arrival times come from inverting the integral of
//! the rate, Λ(t): the k-th constant arrival is due when Λ(t) = k + ½ (evenly spaced, and a
//! ramp from zero does not fire at zero), and Poisson arrivals when Λ(t) reaches a running
//! sum of Exp(1) draws, which is the exact non-homogeneous Poisson process by time change.
//! Each arrival is computed from the start, not from the previous one, so that rounding to
//! nanoseconds never accumulates into a drift of the rate.

use std::fmt;
use std::str::FromStr;

use serde::Serialize;
use tidegate_core::Nanos;
use tidegate_core::rng::Rng;

/// A schedule, or the text of one, that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid rate {0:?}: expected requests per second, a non-negative number")]
    Rate(String),
    #[error("invalid schedule entry {0:?}: expected AT:RATE or AT:FROM..TO, e.g. \"10s:250\"")]
    Entry(String),
    #[error("invalid schedule: {0}")]
    Shape(String),
    #[error("invalid ramp {0:?}: expected FROM..TO in requests per second, e.g. \"100..400\"")]
    Ramp(String),
}

/// A stretch of the run whose rate goes linearly from `from` to `to` (equal for a step).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Phase {
    pub duration: Nanos,
    /// Requests per second at the start of the phase.
    pub from: f64,
    /// Requests per second at the end of the phase.
    pub to: f64,
}

impl Phase {
    /// Requests due over the whole phase: the area under its rate.
    fn mass(&self) -> f64 {
        (self.from + self.to) / 2.0 * self.duration.as_secs_f64()
    }
}

/// Requests per second over the run, phase after phase; the run lasts as long as the phases.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(into = "String")]
pub struct Schedule {
    phases: Vec<Phase>,
    /// Λ at the start of each phase, and at the end of the last one.
    cumulative: Vec<f64>,
}

fn check_rate(rate: f64) -> Result<f64, ScheduleError> {
    if rate.is_finite() && rate >= 0.0 {
        Ok(rate)
    } else {
        Err(ScheduleError::Rate(rate.to_string()))
    }
}

fn parse_rate(s: &str) -> Result<f64, ScheduleError> {
    match s.trim().parse::<f64>() {
        Ok(rate) if rate.is_finite() && rate >= 0.0 => Ok(rate),
        _ => Err(ScheduleError::Rate(s.trim().to_owned())),
    }
}

impl Schedule {
    /// The phases in order. Rates must be finite and non-negative, durations non-zero.
    pub fn new(phases: Vec<Phase>) -> Result<Schedule, ScheduleError> {
        if phases.is_empty() {
            return Err(ScheduleError::Shape("it has no phase".to_owned()));
        }
        let mut cumulative = Vec::with_capacity(phases.len() + 1);
        let mut total = 0.0;
        for (i, phase) in phases.iter().enumerate() {
            check_rate(phase.from)?;
            check_rate(phase.to)?;
            if phase.duration.is_zero() {
                return Err(ScheduleError::Shape(format!("phase {} lasts zero", i + 1)));
            }
            cumulative.push(total);
            total += phase.mass();
        }
        cumulative.push(total);
        Ok(Schedule { phases, cumulative })
    }

    /// `rate` requests per second for `duration`.
    pub fn constant(rate: f64, duration: Nanos) -> Result<Schedule, ScheduleError> {
        Schedule::ramp(rate, rate, duration)
    }

    /// From `from` to `to` requests per second, linearly over `duration`.
    pub fn ramp(from: f64, to: f64, duration: Nanos) -> Result<Schedule, ScheduleError> {
        Schedule::new(vec![Phase { duration, from, to }])
    }

    /// Parses `FROM..TO` (requests per second) into a ramp over `duration`.
    pub fn parse_ramp(text: &str, duration: Nanos) -> Result<Schedule, ScheduleError> {
        let (from, to) = text
            .split_once("..")
            .ok_or_else(|| ScheduleError::Ramp(text.to_owned()))?;
        let rate = |s: &str| parse_rate(s).map_err(|_| ScheduleError::Ramp(text.to_owned()));
        Schedule::ramp(rate(from)?, rate(to)?, duration)
    }

    /// Parses `AT:RATE,AT:FROM..TO,...` over a run of `duration`: each entry starts a phase at
    /// offset `AT` (the first at `0s`, then strictly increasing, all before `duration`) that
    /// holds `RATE`, or ramps from `FROM` to `TO` by the start of the next phase (or the end).
    /// `"0s:150,10s:250"` steps from 150 to 250 rps at 10 s; `"0s:0..200,20s:200"` ramps up
    /// over 20 s and holds.
    pub fn parse_steps(text: &str, duration: Nanos) -> Result<Schedule, ScheduleError> {
        let mut starts = Vec::new();
        for entry in text.split(',') {
            let bad = || ScheduleError::Entry(entry.trim().to_owned());
            let (at, rate) = entry.split_once(':').ok_or_else(bad)?;
            let at: Nanos = at.trim().parse().map_err(|_| bad())?;
            let (from, to) = match rate.split_once("..") {
                Some((from, to)) => (parse_rate(from)?, parse_rate(to)?),
                None => {
                    let rate = parse_rate(rate)?;
                    (rate, rate)
                }
            };
            starts.push((at, from, to));
        }
        match starts.first() {
            Some((at, _, _)) if at.is_zero() => {}
            _ => {
                return Err(ScheduleError::Shape(format!(
                    "{text:?} must start at 0s, e.g. \"0s:100,10s:200\""
                )));
            }
        }
        let mut phases = Vec::with_capacity(starts.len());
        for (i, &(at, from, to)) in starts.iter().enumerate() {
            let end = starts.get(i + 1).map_or(duration, |next| next.0);
            if end <= at {
                let culprit = if end == duration && i + 1 == starts.len() {
                    format!("phase at {at} starts at or after the end of the run ({duration})")
                } else {
                    format!("phase at {end} does not come after the one at {at}")
                };
                return Err(ScheduleError::Shape(culprit));
            }
            phases.push(Phase {
                duration: end - at,
                from,
                to,
            });
        }
        Schedule::new(phases)
    }

    pub fn phases(&self) -> &[Phase] {
        &self.phases
    }

    /// The length of the run.
    pub fn duration(&self) -> Nanos {
        self.phases
            .iter()
            .fold(Nanos::ZERO, |total, p| total + p.duration)
    }

    /// Requests due over the whole run (Λ at the end).
    pub fn total_mass(&self) -> f64 {
        self.cumulative.last().copied().unwrap_or(0.0)
    }

    /// The rate at offset `t` from the start; zero after the end.
    pub fn rate_at(&self, t: Nanos) -> f64 {
        let mut start = Nanos::ZERO;
        for phase in &self.phases {
            let end = start + phase.duration;
            if t < end {
                let x = (t - start).as_secs_f64() / phase.duration.as_secs_f64();
                return phase.from + (phase.to - phase.from) * x;
            }
            start = end;
        }
        0.0
    }

    /// The offset at which Λ reaches `mass`, or `None` if it never does within the run.
    fn time_of_mass(&self, mass: f64) -> Option<Nanos> {
        let mut start = Nanos::ZERO;
        for (i, phase) in self.phases.iter().enumerate() {
            let (below, above) = (self.cumulative[i], self.cumulative[i + 1]);
            if mass < above {
                // Solve from*x + slope/2*x² = mass - below for x in seconds into the phase.
                let m = (mass - below).max(0.0);
                let span = phase.duration.as_secs_f64();
                let slope = (phase.to - phase.from) / span;
                // The numerically stable root, for both signs of the slope and for none
                // (then it is m / from; a phase reached here has a positive mass).
                let disc = (phase.from * phase.from + 2.0 * slope * m).max(0.0);
                let x = 2.0 * m / (phase.from + disc.sqrt());
                let into = Nanos::from_secs_f64(x).min(phase.duration);
                return Some(start + into);
            }
            start += phase.duration;
        }
        None
    }
}

/// `AT:RATE` or `AT:FROM..TO` entries, the form [`Schedule::parse_steps`] reads.
impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut at = Nanos::ZERO;
        for (i, phase) in self.phases.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            if phase.from == phase.to {
                write!(f, "{at}:{}", phase.from)?;
            } else {
                write!(f, "{at}:{}..{}", phase.from, phase.to)?;
            }
            at += phase.duration;
        }
        Ok(())
    }
}

impl From<Schedule> for String {
    fn from(s: Schedule) -> String {
        s.to_string()
    }
}

/// How arrivals are spaced at a given rate.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Arrivals {
    /// Evenly spaced: exactly the rate, as wrk2 does.
    #[default]
    Constant,
    /// Independent arrivals with the rate as their mean: the bursts real traffic has.
    Poisson,
}

impl FromStr for Arrivals {
    type Err = String;
    fn from_str(s: &str) -> Result<Arrivals, String> {
        match s.trim() {
            "constant" => Ok(Arrivals::Constant),
            "poisson" => Ok(Arrivals::Poisson),
            other => Err(format!(
                "invalid arrivals {other:?}: expected constant or poisson"
            )),
        }
    }
}

impl fmt::Display for Arrivals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Arrivals::Constant => "constant",
            Arrivals::Poisson => "poisson",
        })
    }
}

/// The arrival offsets of a run, in order, from the start of the schedule to its end.
#[derive(Debug, Clone)]
pub struct ArrivalTimes {
    schedule: Schedule,
    arrivals: Arrivals,
    rng: Rng,
    /// Λ of the last arrival handed out (constant: its index).
    mass: f64,
    started: bool,
}

impl ArrivalTimes {
    pub fn new(schedule: Schedule, arrivals: Arrivals, rng: Rng) -> ArrivalTimes {
        ArrivalTimes {
            schedule,
            arrivals,
            rng,
            mass: 0.0,
            started: false,
        }
    }
}

impl Iterator for ArrivalTimes {
    type Item = Nanos;

    fn next(&mut self) -> Option<Nanos> {
        let step = match self.arrivals {
            Arrivals::Constant if self.started => 1.0,
            Arrivals::Constant => 0.5,
            // Exp(1) by inversion; 1 - u is in (0, 1] so the logarithm is finite.
            Arrivals::Poisson => -(1.0 - self.rng.next_f64()).ln(),
        };
        self.started = true;
        self.mass += step;
        self.schedule.time_of_mass(self.mass)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Nanos {
        Nanos::from_secs_f64(s)
    }

    #[test]
    fn constant_arrivals_are_evenly_spaced_and_exactly_the_rate() {
        let schedule = Schedule::constant(5000.0, secs(3.0)).unwrap();
        let times: Vec<Nanos> =
            ArrivalTimes::new(schedule, Arrivals::Constant, Rng::seed(1)).collect();
        assert_eq!(times.len(), 15_000);
        assert_eq!(times[0], Nanos::from_micros(100));
        assert_eq!(times[1], Nanos::from_micros(300));
        assert_eq!(times[14_999], Nanos::from_nanos(2_999_900_000));
    }

    #[test]
    fn steps_and_ramps_have_the_right_counts_and_rates() {
        let s = Schedule::parse_steps("0s:100,10s:200..400,20s:0", secs(30.0)).unwrap();
        assert_eq!(s.duration(), secs(30.0));
        assert_eq!(s.rate_at(secs(5.0)), 100.0);
        assert_eq!(s.rate_at(secs(15.0)), 300.0);
        assert_eq!(s.rate_at(secs(25.0)), 0.0);
        let times: Vec<Nanos> = ArrivalTimes::new(s, Arrivals::Constant, Rng::seed(1)).collect();
        let first = times.iter().filter(|&&t| t < secs(10.0)).count();
        let ramp = times
            .iter()
            .filter(|&&t| t >= secs(10.0) && t < secs(20.0))
            .count();
        assert_eq!((first, ramp, times.len()), (1000, 3000, 4000));
        // Within the ramp, the gaps shrink as the rate grows: 1/200 s at its start.
        let at_ramp_start = times.iter().position(|&t| t >= secs(10.0)).unwrap();
        let gap = times[at_ramp_start + 1] - times[at_ramp_start];
        assert!((gap.as_secs_f64() - 1.0 / 200.0).abs() < 1e-4, "{gap}");
        let last_gap = times[3999] - times[3998];
        assert!(
            (last_gap.as_secs_f64() - 1.0 / 400.0).abs() < 1e-4,
            "{last_gap}"
        );
    }

    #[test]
    fn a_ramp_from_zero_starts_slowly_and_has_the_area_of_its_triangle() {
        let s = Schedule::parse_ramp("0..1000", secs(10.0)).unwrap();
        assert_eq!(s.total_mass(), 5000.0);
        let times: Vec<Nanos> = ArrivalTimes::new(s, Arrivals::Constant, Rng::seed(1)).collect();
        assert_eq!(times.len(), 5000);
        assert!(times[0] > secs(0.09), "{}", times[0]);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn poisson_arrivals_have_the_mean_rate_and_exponential_gaps() {
        let s = Schedule::constant(1000.0, secs(100.0)).unwrap();
        let times: Vec<Nanos> = ArrivalTimes::new(s, Arrivals::Poisson, Rng::seed(7)).collect();
        let n = times.len() as f64;
        assert!((n - 100_000.0).abs() < 1_000.0, "{n}");
        // Exponential gaps: the share shorter than the mean is 1 - 1/e.
        let short = times
            .windows(2)
            .filter(|w| w[1] - w[0] < Nanos::from_millis(1))
            .count() as f64;
        assert!(
            (short / n - (1.0 - (-1.0f64).exp())).abs() < 0.01,
            "{short}"
        );
        let again: Vec<Nanos> = ArrivalTimes::new(
            Schedule::constant(1000.0, secs(100.0)).unwrap(),
            Arrivals::Poisson,
            Rng::seed(7),
        )
        .collect();
        assert_eq!(times, again, "same seed, same arrivals");
    }

    #[test]
    fn a_zero_rate_phase_sends_nothing() {
        let s = Schedule::parse_steps("0s:0,1s:10", secs(2.0)).unwrap();
        let times: Vec<Nanos> = ArrivalTimes::new(s, Arrivals::Constant, Rng::seed(1)).collect();
        assert_eq!(times.len(), 10);
        assert!(times.iter().all(|&t| t >= secs(1.0)));
        let silent = Schedule::constant(0.0, secs(1.0)).unwrap();
        assert_eq!(
            ArrivalTimes::new(silent, Arrivals::Poisson, Rng::seed(1)).count(),
            0
        );
    }

    #[test]
    fn bad_text_names_the_culprit() {
        let d = secs(30.0);
        let cases = [
            ("0s:100,10x:200", "\"10x:200\""),
            ("0s:fast", "\"fast\""),
            ("0s:-5", "\"-5\""),
            ("5s:100", "must start at 0s"),
            ("0s:100,20s:5,10s:7", "10s does not come after"),
            ("0s:100,30s:5", "at or after the end"),
            ("0s:1,0s:2", "0s does not come after"),
        ];
        for (text, expected) in cases {
            let err = Schedule::parse_steps(text, d).unwrap_err().to_string();
            assert!(err.contains(expected), "{text}: {err}");
        }
        let err = Schedule::parse_ramp("100-200", d).unwrap_err().to_string();
        assert!(err.contains("\"100-200\""), "{err}");
        assert!(Schedule::constant(f64::NAN, d).is_err());
        assert!(Schedule::constant(1.0, Nanos::ZERO).is_err());
    }

    #[test]
    fn display_parses_back() {
        let s = Schedule::parse_steps("0s:150,10s:250..300,25s:0.5", secs(30.0)).unwrap();
        assert_eq!(s.to_string(), "0s:150,10s:250..300,25s:0.5");
        assert_eq!(
            Schedule::parse_steps(&s.to_string(), secs(30.0)).unwrap(),
            s
        );
    }
}

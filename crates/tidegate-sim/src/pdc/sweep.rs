//! Sweeps: many runs of the model over a grid of parameters, for the article's pictures.
//!
//! An [`Axis`] is one parameter and its values, written `KEY=VALUES` on the command line;
//! several axes make a grid (their cartesian product, the first axis outermost). VALUES is a
//! comma-separated list of values or inclusive ranges `FROM..TO:STEP`:
//!
//! - `rate=20000..200000:20000`: the producer's rate (pictures 1 to 4);
//! - `consumer-rate=100000,200000`: the consumer's rate;
//! - `multiplier=0.5..4:0.5`: the over-dispatch multiplier (picture 5);
//! - `period=250us,500us,2ms`: the dispatcher's period (picture 5);
//! - `jitter=producer,consumer,dispatcher`: which component runs a `poisson` process, the
//!   other two running `uniform` (this replaces the processes given as arguments; `none`
//!   makes all three `uniform`). Pictures 1 to 3 are one value each, picture 4 all three.
//!
//! Every point runs with the same seed, so that points differ only by their parameters.
//! Points run on up to `jobs` threads; the results come back in grid order whatever the
//! threads do, so the output is the same for any `jobs`.

use std::fmt::{self, Write as _};
use std::str::FromStr;

use tidegate_core::Nanos;

use super::{ConfigError, PdcConfig, PdcReport, ProcessKind, secs};

/// Which component [`Axis::Jitter`] makes `poisson`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Jitter {
    None,
    Producer,
    Dispatcher,
    Consumer,
}

impl Jitter {
    const ALL: [Jitter; 4] = [
        Jitter::None,
        Jitter::Producer,
        Jitter::Dispatcher,
        Jitter::Consumer,
    ];

    pub const fn name(self) -> &'static str {
        match self {
            Jitter::None => "none",
            Jitter::Producer => "producer",
            Jitter::Dispatcher => "dispatcher",
            Jitter::Consumer => "consumer",
        }
    }

    fn apply(self, config: &mut PdcConfig) {
        let pick = |this: Jitter| {
            if self == this {
                ProcessKind::Poisson
            } else {
                ProcessKind::Uniform
            }
        };
        config.producer = pick(Jitter::Producer);
        config.dispatcher = pick(Jitter::Dispatcher);
        config.consumer = pick(Jitter::Consumer);
    }
}

/// One swept parameter and its values; see the module documentation.
#[derive(Clone, Debug, PartialEq)]
pub enum Axis {
    Rate(Vec<u64>),
    ConsumerRate(Vec<u64>),
    Multiplier(Vec<f64>),
    Period(Vec<Nanos>),
    Jitter(Vec<Jitter>),
}

impl Axis {
    pub const KEYS: [&'static str; 5] = ["rate", "consumer-rate", "multiplier", "period", "jitter"];

    pub fn key(&self) -> &'static str {
        match self {
            Axis::Rate(_) => "rate",
            Axis::ConsumerRate(_) => "consumer-rate",
            Axis::Multiplier(_) => "multiplier",
            Axis::Period(_) => "period",
            Axis::Jitter(_) => "jitter",
        }
    }

    fn len(&self) -> usize {
        match self {
            Axis::Rate(v) | Axis::ConsumerRate(v) => v.len(),
            Axis::Multiplier(v) => v.len(),
            Axis::Period(v) => v.len(),
            Axis::Jitter(v) => v.len(),
        }
    }

    fn apply(&self, i: usize, config: &mut PdcConfig) {
        match self {
            Axis::Rate(v) => config.producer_rate = v[i],
            Axis::ConsumerRate(v) => config.consumer_rate = v[i],
            Axis::Multiplier(v) => config.multiplier = v[i],
            Axis::Period(v) => config.period = v[i],
            Axis::Jitter(v) => v[i].apply(config),
        }
    }
}

/// Why a sweep specification did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseAxisError {
    #[error("expected KEY=VALUES with KEY one of {keys}, got {0:?}", keys = Axis::KEYS.join(", "))]
    Syntax(String),
    #[error("unknown sweep key {0:?}: expected one of {keys}", keys = Axis::KEYS.join(", "))]
    Key(String),
    #[error("invalid value {value:?} for {key}: {why}")]
    Value {
        key: &'static str,
        value: String,
        why: String,
    },
}

/// Parses one item of a list: a single value or a range `FROM..TO:STEP`, into `out`.
fn expand<T, F, S>(
    key: &'static str,
    item: &str,
    parse: F,
    step_by: S,
    out: &mut Vec<T>,
) -> Result<(), ParseAxisError>
where
    T: PartialOrd + Copy,
    F: Fn(&str) -> Result<T, String>,
    S: Fn(T, T, usize) -> T,
{
    let bad = |why: String| ParseAxisError::Value {
        key,
        value: item.to_owned(),
        why,
    };
    let Some((from, rest)) = item.split_once("..") else {
        out.push(parse(item).map_err(bad)?);
        return Ok(());
    };
    let (to, step) = rest
        .split_once(':')
        .ok_or_else(|| bad("a range is FROM..TO:STEP".to_owned()))?;
    let (from, to, step) = (
        parse(from).map_err(bad)?,
        parse(to).map_err(bad)?,
        parse(step).map_err(bad)?,
    );
    if from > to {
        return Err(bad("FROM is larger than TO".to_owned()));
    }
    for i in 0.. {
        let v = step_by(from, step, i);
        // Tolerate rounding in float steps (0.1 * 3 > 0.3).
        if v > to || i > 100_000 {
            if i > 100_000 {
                return Err(bad("more than 100,000 values".to_owned()));
            }
            break;
        }
        if i > 0 && v <= step_by(from, step, i - 1) {
            return Err(bad("STEP must be larger than zero".to_owned()));
        }
        out.push(v);
    }
    Ok(())
}

fn positive_int(s: &str) -> Result<u64, String> {
    match s.trim().parse::<u64>() {
        Ok(0) => Err("must be at least 1".to_owned()),
        Ok(v) => Ok(v),
        Err(_) => Err(format!("{s:?} is not a whole number")),
    }
}

fn positive_float(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

impl FromStr for Axis {
    type Err = ParseAxisError;

    fn from_str(s: &str) -> Result<Axis, ParseAxisError> {
        let (key, values) = s
            .split_once('=')
            .ok_or_else(|| ParseAxisError::Syntax(s.to_owned()))?;
        let items = values.split(',').map(str::trim);
        let int_step =
            |a: u64, step: u64, i: usize| a.saturating_add(step.saturating_mul(i as u64));
        let axis = match key.trim() {
            k @ ("rate" | "consumer-rate") => {
                let key = if k == "rate" { "rate" } else { "consumer-rate" };
                let mut out = Vec::new();
                for item in items {
                    expand(key, item, positive_int, int_step, &mut out)?;
                }
                if key == "rate" {
                    Axis::Rate(out)
                } else {
                    Axis::ConsumerRate(out)
                }
            }
            "multiplier" => {
                let mut out = Vec::new();
                let float_step = |a: f64, step: f64, i: usize| {
                    // Rounded to 1e-9 so that 0.5 + 3 * 0.1 prints as 0.8.
                    ((a + step * i as f64) * 1e9).round() / 1e9
                };
                for item in items {
                    expand("multiplier", item, positive_float, float_step, &mut out)?;
                }
                Axis::Multiplier(out)
            }
            "period" => {
                let mut out = Vec::new();
                let parse = |s: &str| match s.trim().parse::<Nanos>() {
                    Ok(v) if !v.is_zero() => Ok(v),
                    Ok(_) => Err("must be longer than zero".to_owned()),
                    Err(e) => Err(e.to_string()),
                };
                let step = |a: Nanos, step: Nanos, i: usize| a + step.saturating_mul(i as u64);
                for item in items {
                    expand("period", item, parse, step, &mut out)?;
                }
                Axis::Period(out)
            }
            "jitter" => Axis::Jitter(
                items
                    .map(|item| {
                        Jitter::ALL
                            .into_iter()
                            .find(|j| j.name() == item)
                            .ok_or_else(|| ParseAxisError::Value {
                                key: "jitter",
                                value: item.to_owned(),
                                why: "expected none, producer, dispatcher or consumer".to_owned(),
                            })
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => return Err(ParseAxisError::Key(other.to_owned())),
        };
        Ok(axis)
    }
}

/// Why a sweep cannot run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SweepError {
    #[error("--sweep {0} is given twice")]
    DuplicateKey(&'static str),
    #[error("at {point}: {error}")]
    Config { point: String, error: ConfigError },
}

/// A grid of runs around a base configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Sweep {
    pub base: PdcConfig,
    pub axes: Vec<Axis>,
}

impl Sweep {
    pub fn new(base: PdcConfig, axes: Vec<Axis>) -> Result<Sweep, SweepError> {
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].iter().any(|b| b.key() == a.key()) {
                return Err(SweepError::DuplicateKey(a.key()));
            }
        }
        Ok(Sweep { base, axes })
    }

    /// The configurations of the grid, the first axis outermost.
    pub fn points(&self) -> Vec<PdcConfig> {
        let mut points = vec![self.base.clone()];
        for axis in &self.axes {
            points = points
                .iter()
                .flat_map(|p| {
                    (0..axis.len()).map(move |i| {
                        let mut c = p.clone();
                        axis.apply(i, &mut c);
                        c
                    })
                })
                .collect();
        }
        points
    }

    /// Runs every point, on up to `jobs` threads, and returns the reports in grid order.
    pub fn run(&self, jobs: usize) -> Result<Vec<PdcReport>, SweepError> {
        let points = self.points();
        for p in &points {
            p.limit().map_err(|error| SweepError::Config {
                point: self.describe(p),
                error,
            })?;
        }
        crate::parallel::map(&points, jobs, PdcConfig::run)
            .into_iter()
            .zip(&points)
            .map(|(r, p)| {
                r.map_err(|error| SweepError::Config {
                    point: self.describe(p),
                    error,
                })
            })
            .collect()
    }

    fn describe(&self, p: &PdcConfig) -> String {
        format!(
            "{} {} {} {} {} period {} multiplier {}",
            p.producer,
            p.producer_rate,
            p.dispatcher,
            p.consumer,
            p.consumer_rate,
            p.period,
            p.multiplier
        )
    }

    fn has(&self, key: &str) -> bool {
        self.axes.iter().any(|a| a.key() == key)
    }

    /// A table with one row per point: the swept parameters that are not rates (jitter,
    /// period, multiplier), then the tool's figures and the consumed messages per second.
    pub fn table(&self, reports: &[PdcReport]) -> String {
        let b = &self.base;
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# pdc {} s  producer {}  dispatcher {}  consumer {}  period {}  multiplier {}  seed {}{}",
            b.duration.as_secs_f64(),
            b.producer,
            b.dispatcher,
            b.consumer,
            b.period,
            b.multiplier,
            b.seed,
            if self.has("jitter") {
                "  (jitter: that component poisson, the others uniform)"
            } else {
                ""
            }
        );
        let mut header = String::new();
        let jitter = self.axes.iter().find_map(|a| match a {
            Axis::Jitter(_) => Some(()),
            _ => None,
        });
        let (period, multiplier) = (self.has("period"), self.has("multiplier"));
        if jitter.is_some() {
            let _ = write!(header, "{:<10}  ", "jitter");
        }
        if period {
            let _ = write!(header, "{:>6}  ", "period");
        }
        if multiplier {
            let _ = write!(header, "{:>10}  ", "multiplier");
        }
        let _ = writeln!(
            header,
            "{:>9} {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}",
            "prod_rate",
            "cons_rate",
            "mean_s",
            "p95_s",
            "p99_s",
            "max_s",
            "max_queued",
            "consumed/s"
        );
        out.push_str(&header);
        for r in reports {
            if jitter.is_some() {
                let _ = write!(out, "{:<10}  ", jitter_of(&r.config).name());
            }
            if period {
                let _ = write!(out, "{:>6}  ", r.config.period.to_string());
            }
            if multiplier {
                let _ = write!(out, "{:>10}  ", r.config.multiplier);
            }
            let l = &r.latency;
            let _ = writeln!(
                out,
                "{:>9} {:>9}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10}  {:>10.0}",
                r.config.producer_rate,
                r.config.consumer_rate,
                secs(l.mean),
                secs(l.p95),
                secs(l.p99),
                secs(l.max),
                r.max_queued,
                r.consumed_per_sec()
            );
        }
        out
    }
}

/// Which single component is `poisson` while the others are `uniform`, if that is the case.
fn jitter_of(c: &PdcConfig) -> Jitter {
    let u = ProcessKind::Uniform;
    let p = ProcessKind::Poisson;
    match (c.producer, c.dispatcher, c.consumer) {
        (x, y, z) if x == p && y == u && z == u => Jitter::Producer,
        (x, y, z) if x == u && y == p && z == u => Jitter::Dispatcher,
        (x, y, z) if x == u && y == u && z == p => Jitter::Consumer,
        _ => Jitter::None,
    }
}

/// The reports as CSV, one row per point, every parameter in its own column.
pub fn csv(reports: &[PdcReport]) -> String {
    let mut out = String::from(
        "duration_s,producer,producer_rate,dispatcher,consumer,consumer_rate,period_s,multiplier,seed,\
         mean_s,p95_s,p99_s,max_s,max_queued,produced,consumed,consumed_per_s\n",
    );
    for r in reports {
        let c = &r.config;
        let l = &r.latency;
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{:.0}",
            c.duration.as_secs_f64(),
            c.producer,
            c.producer_rate,
            c.dispatcher,
            c.consumer,
            c.consumer_rate,
            c.period.as_secs_f64(),
            c.multiplier,
            c.seed,
            secs(l.mean),
            secs(l.p95),
            secs(l.p99),
            secs(l.max),
            r.max_queued,
            r.produced,
            r.consumed,
            r.consumed_per_sec()
        );
    }
    out
}

impl fmt::Display for Jitter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

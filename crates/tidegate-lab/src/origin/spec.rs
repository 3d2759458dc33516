//! The text forms of the origin's flags: a latency curve and a capacity change, parsed into
//! the service model's own types so that a flag and a scenario file mean the same thing.

use std::num::NonZeroU32;

use tidegate_core::Nanos;
use tidegate_model::service::Change;

/// A flag's text that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error(
        "invalid curve entry {0:?}: expected COUNT=>LATENCY (e.g. \"50=>5ms\"), or =>LATENCY last"
    )]
    CurveEntry(String),
    #[error("invalid curve: {0}")]
    Curve(String),
    #[error("invalid latency {0:?}: expected a duration (\"5ms\") or milliseconds (\"5\")")]
    Latency(String),
    #[error(
        "invalid capacity change {0:?}: expected AT:KEY=VALUE,... with keys workers and work, e.g. \"60s:work=2s\""
    )]
    Change(String),
}

/// A duration, or a plain number of milliseconds as the RSocket demo writes its curve.
fn latency(text: &str) -> Result<Nanos, SpecError> {
    let text = text.trim();
    let bad = || SpecError::Latency(text.to_owned());
    match text.parse::<f64>() {
        Ok(ms) if ms.is_finite() && ms >= 0.0 => Ok(Nanos::from_secs_f64(ms / 1e3)),
        Ok(_) => Err(bad()),
        Err(_) => text.parse::<Nanos>().map_err(|_| bad()),
    }
}

/// Parses `"10=>2ms;50=>5ms;120=>20ms;=>5000ms"` (the RSocket demo's `10 => 2; 50 => 5;
/// 120 => 20; => 5000`, latencies in milliseconds when they have no unit) into the points of a
/// [`tidegate_model::service::CurveConfig`]. Between points the latency is linear; a last
/// `=>LATENCY` without a count is the latency beyond the last count, a step one request
/// further. Entries are separated by `;` or `,`.
pub fn parse_delay_curve(text: &str) -> Result<Vec<(u32, Nanos)>, SpecError> {
    let entries: Vec<&str> = text
        .split([';', ','])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .collect();
    if entries.is_empty() {
        return Err(SpecError::Curve("it has no point".to_owned()));
    }
    let mut points: Vec<(u32, Nanos)> = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let bad = || SpecError::CurveEntry((*entry).to_owned());
        let (count, lat) = entry.split_once("=>").ok_or_else(bad)?;
        let lat = latency(lat)?;
        let count = count.trim();
        let x = if count.is_empty() {
            if i + 1 != entries.len() {
                return Err(SpecError::Curve(format!(
                    "{entry:?}: only the last entry may leave out its count"
                )));
            }
            let last = points.last().map_or(0, |&(x, _)| x);
            last.checked_add(1).ok_or_else(bad)?
        } else {
            count.parse::<u32>().map_err(|_| bad())?
        };
        if let Some(&(prev, _)) = points.last()
            && x <= prev
        {
            return Err(SpecError::Curve(format!(
                "{entry:?}: counts must increase ({x} after {prev})"
            )));
        }
        points.push((x, lat));
    }
    Ok(points)
}

/// Parses a capacity change `AT:KEY=VALUE,...`: `"60s:work=2s"`, `"240s:workers=20,work=91ms"`.
pub fn parse_change(text: &str) -> Result<Change, SpecError> {
    let bad = || SpecError::Change(text.to_owned());
    let (at, rest) = text.split_once(':').ok_or_else(bad)?;
    let at: Nanos = at.trim().parse().map_err(|_| bad())?;
    let mut change = Change {
        at,
        workers: None,
        work: None,
    };
    for pair in rest.split(',') {
        let (key, value) = pair.split_once('=').ok_or_else(bad)?;
        match key.trim() {
            "workers" => {
                let n: u32 = value.trim().parse().map_err(|_| bad())?;
                change.workers = Some(NonZeroU32::new(n).ok_or_else(bad)?);
            }
            "work" => {
                let work: Nanos = value.trim().parse().map_err(|_| bad())?;
                if work.is_zero() {
                    return Err(bad());
                }
                change.work = Some(work);
            }
            _ => return Err(bad()),
        }
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: u64) -> Nanos {
        Nanos::from_millis(v)
    }

    #[test]
    fn the_rsocket_curve_parses_with_and_without_units() {
        let expected = vec![(10, ms(2)), (50, ms(5)), (120, ms(20)), (121, ms(5000))];
        assert_eq!(
            parse_delay_curve("10=>2ms;50=>5ms;120=>20ms;=>5000ms").unwrap(),
            expected
        );
        assert_eq!(
            parse_delay_curve("10 => 2; 50 => 5; 120 => 20; => 5000").unwrap(),
            expected
        );
        assert_eq!(
            parse_delay_curve("1=>0.5").unwrap(),
            vec![(1, Nanos::from_micros(500))]
        );
    }

    #[test]
    fn bad_curves_name_the_entry() {
        for (text, needle) in [
            ("", "no point"),
            ("10=>2ms;=>5s;20=>3ms", "only the last"),
            ("10=>2ms;5=>3ms", "must increase"),
            ("ten=>2ms", "\"ten=>2ms\""),
            ("10=>fast", "\"fast\""),
            ("10:2ms", "\"10:2ms\""),
        ] {
            let err = parse_delay_curve(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn changes_parse_and_bad_ones_are_quoted() {
        assert_eq!(
            parse_change("60s:work=2s").unwrap(),
            Change {
                at: Nanos::from_secs(60),
                workers: None,
                work: Some(Nanos::from_secs(2)),
            }
        );
        let c = parse_change("1m:workers=5, work=133ms").unwrap();
        assert_eq!(c.workers, NonZeroU32::new(5));
        assert_eq!(c.work, Some(ms(133)));
        for text in [
            "60s",
            "60s:speed=2",
            "60s:workers=0",
            "x:work=1s",
            "1s:work=0s",
        ] {
            let err = parse_change(text).unwrap_err().to_string();
            assert!(err.contains(&format!("{text:?}")), "{err}");
        }
    }
}

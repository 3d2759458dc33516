//! The timestamps of access logs, as seconds since the Unix epoch: nginx's `$time_local`
//! (`10/Oct/2000:13:55:36 -0700`) and ISO 8601 (`2000-10-10T20:55:36.123Z`, Envoy's
//! `%START_TIME%`). Written out here (a few lines of calendar arithmetic) rather than
//! pulling a date library into the simulator for two fixed formats.

/// Days from 1970-01-01 to the civil date (proleptic Gregorian), after Howard Hinnant's
/// `days_from_civil`.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A number of digits only, within `range`.
fn field<T: std::str::FromStr + PartialOrd>(
    text: &str,
    name: &str,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, String> {
    let all_digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<T>() {
        Ok(v) if all_digits && range.contains(&v) => Ok(v),
        _ => Err(format!("bad {name} {text:?}")),
    }
}

/// Seconds since the epoch of a civil date and time at UTC offset `offset_s`.
fn epoch(
    (year, month, day): (i64, u32, u32),
    (hour, minute, second): (u32, u32, f64),
    offset_s: i64,
) -> Result<f64, String> {
    if day > days_in_month(year, month) {
        return Err(format!("day {day} is past the end of month {month}"));
    }
    let days = days_from_civil(year, month, day);
    let whole = days * 86_400 + i64::from(hour * 3600 + minute * 60) - offset_s;
    Ok(whole as f64 + second)
}

/// A `+hhmm` or `+hh:mm` offset (or `-`), in seconds.
fn offset(text: &str) -> Result<i64, String> {
    let bad = || format!("bad UTC offset {text:?}");
    let sign = match text.as_bytes().first() {
        Some(b'+') => 1,
        Some(b'-') => -1,
        _ => return Err(bad()),
    };
    let digits: String = text[1..].chars().filter(|&c| c != ':').collect();
    if digits.len() != 4 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let hours: i64 = field(&digits[..2], "offset hours", 0..=23)?;
    let minutes: i64 = field(&digits[2..], "offset minutes", 0..=59)?;
    Ok(sign * (hours * 3600 + minutes * 60))
}

/// nginx's `$time_local`: `10/Oct/2000:13:55:36 -0700`.
pub(crate) fn parse_time_local(text: &str) -> Result<f64, String> {
    let shape = || format!("{text:?} is not dd/Mon/yyyy:hh:mm:ss +zzzz");
    let (stamp, zone) = text.split_once(' ').ok_or_else(shape)?;
    let mut parts = stamp.splitn(3, '/');
    let (Some(day), Some(month), Some(rest)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(shape());
    };
    let mut clock = rest.split(':');
    let (Some(year), Some(hour), Some(minute), Some(second), None) = (
        clock.next(),
        clock.next(),
        clock.next(),
        clock.next(),
        clock.next(),
    ) else {
        return Err(shape());
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS
        .iter()
        .position(|&m| m == month)
        .ok_or_else(|| format!("bad month {month:?}"))? as u32
        + 1;
    epoch(
        (
            field(year, "year", 1..=9999)?,
            month,
            field(day, "day", 1..=31)?,
        ),
        (
            field(hour, "hour", 0..=23)?,
            field(minute, "minute", 0..=59)?,
            f64::from(field::<u32>(second, "second", 0..=60)?),
        ),
        offset(zone)?,
    )
}

/// ISO 8601 / RFC 3339: `2000-10-10T20:55:36.123Z`, any number of decimals, `Z` or an offset.
pub(crate) fn parse_iso8601(text: &str) -> Result<f64, String> {
    let shape = || format!("{text:?} is not yyyy-mm-ddThh:mm:ss[.fff](Z|+hh:mm)");
    let (date, time) = text.split_once(['T', ' ']).ok_or_else(shape)?;
    let mut d = date.split('-');
    let (Some(year), Some(month), Some(day), None) = (d.next(), d.next(), d.next(), d.next())
    else {
        return Err(shape());
    };
    let (clock, zone) = match time.find(['Z', 'z', '+', '-']) {
        Some(i) => (&time[..i], &time[i..]),
        None => return Err(shape()),
    };
    let offset_s = if zone.eq_ignore_ascii_case("z") {
        0
    } else {
        offset(zone)?
    };
    let mut c = clock.split(':');
    let (Some(hour), Some(minute), Some(second), None) = (c.next(), c.next(), c.next(), c.next())
    else {
        return Err(shape());
    };
    let (whole, fraction) = second.split_once('.').unwrap_or((second, ""));
    let fraction = if fraction.is_empty() {
        0.0
    } else if fraction.bytes().all(|b| b.is_ascii_digit()) {
        format!("0.{fraction}")
            .parse::<f64>()
            .map_err(|_| shape())?
    } else {
        return Err(shape());
    };
    epoch(
        (
            field(year, "year", 1..=9999)?,
            field(month, "month", 1..=12)?,
            field(day, "day", 1..=31)?,
        ),
        (
            field(hour, "hour", 0..=23)?,
            field(minute, "minute", 0..=59)?,
            f64::from(field::<u32>(whole, "second", 0..=60)?) + fraction,
        ),
        offset_s,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nginx_time_local_with_its_offset() {
        // 2000-10-10 20:55:36 UTC.
        assert_eq!(
            parse_time_local("10/Oct/2000:13:55:36 -0700"),
            Ok(971_211_336.0)
        );
        assert_eq!(parse_time_local("01/Jan/1970:00:00:00 +0000"), Ok(0.0));
        assert_eq!(
            parse_time_local("29/Feb/2024:12:00:00 +0100"),
            Ok(1_709_204_400.0)
        );
        assert!(parse_time_local("30/Feb/2024:12:00:00 +0100").is_err());
        assert!(parse_time_local("10/Foo/2000:13:55:36 -0700").is_err());
        assert!(parse_time_local("10/Oct/2000:13:55:36").is_err());
        assert!(parse_time_local("10/Oct/2000:13:55:+6 -0700").is_err());
    }

    #[test]
    fn iso8601_as_envoy_writes_it() {
        let t = parse_iso8601("2000-10-10T20:55:36.123Z").unwrap();
        assert!((t - 971_211_336.123).abs() < 1e-6, "{t}");
        assert_eq!(
            parse_iso8601("2000-10-10T13:55:36-07:00"),
            Ok(971_211_336.0)
        );
        assert!(parse_iso8601("2000-13-10T20:55:36Z").is_err());
        assert!(parse_iso8601("2000-10-10T20:55:36").is_err());
        assert!(parse_iso8601("2000-10-10T20:55:36.1e3Z").is_err());
    }
}

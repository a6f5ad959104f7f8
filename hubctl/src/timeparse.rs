//! Parsers for the times and durations operators type: RFC 3339 instants (or `now`) and
//! durations like `30m`, `2h`, `1d`, `90s` or `1h30m`. Used as clap value parsers, so a bad
//! value is reported with the flag it was given to.

use std::time::{SystemTime, UNIX_EPOCH};

/// A point in time given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    /// `now`: the client's clock (or, where the command allows it, the entry's time).
    Now,
    /// An instant, milliseconds since the Unix epoch.
    At(i64),
}

impl TimeArg {
    /// Milliseconds since the epoch, `now` read from this machine's clock.
    pub fn ms(self) -> i64 {
        match self {
            TimeArg::Now => now_ms(),
            TimeArg::At(ms) => ms,
        }
    }
}

/// This machine's clock, milliseconds since the epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Longest duration accepted (100 years), so arithmetic on it cannot overflow.
const MAX_DURATION_MS: i64 = 100 * 365 * 86_400_000;

/// Parses a duration: one or more `<number><unit>` with units `ms`, `s`, `m`, `h`, `d`, `w`
/// (e.g. `30m`, `2h`, `1d`, `90s`, `1h30m`). Returns milliseconds; zero is refused.
pub fn parse_duration(s: &str) -> Result<i64, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err("empty duration: write e.g. 30m, 2h, 1d or 90s".into());
    }
    let mut total: i64 = 0;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!(
                "{s:?} is not a duration: expected a number at {rest:?} (e.g. 30m, 2h, 1d, 90s)"
            ));
        }
        let number: i64 = rest[..digits]
            .parse()
            .map_err(|_| format!("{s:?} is not a duration: number too large"))?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        rest = &rest[unit_len..];
        let factor: i64 = match unit {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            "w" => 7 * 86_400_000,
            "" => {
                return Err(format!(
                    "{s:?} is not a duration: missing unit after {number} (ms, s, m, h, d or w)"
                ))
            }
            other => {
                return Err(format!(
                    "{s:?} is not a duration: unknown unit {other:?} (ms, s, m, h, d or w)"
                ))
            }
        };
        total = number
            .checked_mul(factor)
            .and_then(|ms| total.checked_add(ms))
            .filter(|ms| *ms <= MAX_DURATION_MS)
            .ok_or_else(|| format!("{s:?} is too long (at most 100 years)"))?;
    }
    if total == 0 {
        return Err(format!("{s:?} is zero: a duration must be positive"));
    }
    Ok(total)
}

/// Formats milliseconds as the largest exact units, e.g. `1h30m`, `2d`, `1m30s` (`0ms` for 0 or less).
pub fn format_duration(ms: i64) -> String {
    if ms <= 0 {
        return format!("{ms}ms");
    }
    let mut rest = ms;
    let mut out = String::new();
    for (unit, size) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ] {
        if rest >= size {
            out.push_str(&format!("{}{unit}", rest / size));
            rest %= size;
        }
    }
    out
}

/// Parses `now` or an RFC 3339 instant such as `2026-11-30T22:00:00Z` or
/// `2026-11-30T17:00:00.5-05:00`.
pub fn parse_time(s: &str) -> Result<TimeArg, String> {
    let text = s.trim();
    if text.eq_ignore_ascii_case("now") {
        return Ok(TimeArg::Now);
    }
    parse_rfc3339(text).map(TimeArg::At).map_err(|reason| {
        format!("{s:?} is not a time: {reason} (write RFC 3339 like 2026-11-30T22:00:00Z, or now)")
    })
}

fn number(text: &str, what: &str) -> Result<i64, String> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("bad {what} {text:?}"));
    }
    text.parse().map_err(|_| format!("bad {what} {text:?}"))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if is_leap(year) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn parse_rfc3339(text: &str) -> Result<i64, String> {
    let bytes = text.as_bytes();
    // YYYY-MM-DDTHH:MM:SS is 19 characters, then fraction and offset.
    if bytes.len() < 20 || !text.is_ascii() {
        return Err("expected YYYY-MM-DDTHH:MM:SS and Z or ±HH:MM".into());
    }
    if bytes[4] != b'-' || bytes[7] != b'-' || bytes[13] != b':' || bytes[16] != b':' {
        return Err("expected YYYY-MM-DDTHH:MM:SS".into());
    }
    if !matches!(bytes[10], b'T' | b't' | b' ') {
        return Err("expected 'T' between date and time".into());
    }
    let year = number(&text[0..4], "year")?;
    let month = number(&text[5..7], "month")?;
    let day = number(&text[8..10], "day")?;
    let hour = number(&text[11..13], "hour")?;
    let minute = number(&text[14..16], "minute")?;
    let second = number(&text[17..19], "second")?;
    if !(1..=12).contains(&month) {
        return Err(format!("month {month} is not 1-12"));
    }
    if day < 1 || day > days_in_month(year, month) {
        return Err(format!("day {day} does not exist in {year}-{month:02}"));
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(format!(
            "{hour:02}:{minute:02}:{second:02} is not a time of day"
        ));
    }
    let mut rest = &text[19..];
    let mut millis = 0;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(frac.len());
        if digits == 0 {
            return Err("expected digits after '.'".into());
        }
        let padded = format!("{:0<3}", &frac[..digits.min(3)]);
        millis = number(&padded, "fraction")?;
        rest = &frac[digits..];
    }
    let offset_minutes = match rest {
        "Z" | "z" => 0,
        _ if rest.len() == 6 && matches!(&rest[0..1], "+" | "-") && &rest[3..4] == ":" => {
            let h = number(&rest[1..3], "offset hour")?;
            let m = number(&rest[4..6], "offset minute")?;
            if h > 23 || m > 59 {
                return Err(format!("offset {rest:?} is out of range"));
            }
            let sign = if rest.starts_with('-') { -1 } else { 1 };
            sign * (h * 60 + m)
        }
        "" => return Err("missing time zone offset (Z or ±HH:MM)".into()),
        _ => return Err(format!("bad time zone offset {rest:?} (Z or ±HH:MM)")),
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Ok(seconds * 1_000 + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90s"), Ok(90_000));
        assert_eq!(parse_duration("30m"), Ok(1_800_000));
        assert_eq!(parse_duration("2h"), Ok(7_200_000));
        assert_eq!(parse_duration("1d"), Ok(86_400_000));
        assert_eq!(parse_duration("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("1w"), Ok(604_800_000));
        for bad in [
            "",
            "30",
            "m",
            "1x",
            "0m",
            "-5m",
            "1.5h",
            "99999999999999999999d",
            "200000w",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("30").unwrap_err().contains("missing unit"));
        assert!(parse_duration("1x").unwrap_err().contains("unknown unit"));
        for d in ["1m30s", "1h30m", "2d", "1d1ms"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("now"), Ok(TimeArg::Now));
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Ok(TimeArg::At(0)));
        // 2026-11-30T22:00:00Z = 1796076000 s.
        assert_eq!(
            parse_time("2026-11-30T22:00:00Z"),
            Ok(TimeArg::At(1_796_076_000_000))
        );
        assert_eq!(
            parse_time("2026-11-30T17:00:00-05:00"),
            Ok(TimeArg::At(1_796_076_000_000))
        );
        assert_eq!(
            parse_time("2026-11-30T22:00:00.25Z"),
            Ok(TimeArg::At(1_796_076_000_250))
        );
        assert_eq!(
            parse_time("2024-02-29T00:00:00Z"),
            Ok(TimeArg::At(1_709_164_800_000))
        );
        for bad in [
            "",
            "tomorrow",
            "2026-11-30",
            "2026-11-30T22:00:00",
            "2026-13-01T00:00:00Z",
            "2025-02-29T00:00:00Z",
            "2026-11-30T24:00:00Z",
            "2026-11-30T22:00:00+5",
            "2026-11-30T22:00:00.Z",
        ] {
            assert!(parse_time(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn civil_days() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(days_from_civil(1969, 12, 31), -1);
    }
}

//! Durations as canary resources spell them (`30s`, `1m`, `1m30s`, `500ms`, `1h`): one or
//! more `<whole number><unit>` parts with units `h`, `m`, `s`, `ms`, each unit at most once
//! and in that order. Values are milliseconds (`i64`, like [`crate::TimestampMs`]).

/// Longest duration accepted anywhere in a canary resource: 7 days.
pub const MAX_DURATION_MS: i64 = 7 * 24 * 3_600_000;

/// Parses a duration into milliseconds. The message of an error says what is wrong, without
/// naming the field (the caller does).
pub fn parse_duration(text: &str) -> Result<i64, String> {
    const UNITS: [(&str, i64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    let expected = "expected a duration such as 30s, 1m, 1m30s or 500ms";
    let s = text.trim();
    if s.is_empty() {
        return Err(format!("empty duration: {expected}"));
    }
    let bytes = s.as_bytes();
    let mut total: i64 = 0;
    let mut i = 0;
    // Index into UNITS of the last unit read: units must come in decreasing order.
    let mut last_unit: Option<usize> = None;
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start {
            return Err(format!("{:?} is not a duration: {expected}", text));
        }
        let digits = &s[start..i];
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[unit_start..i];
        if unit.is_empty() {
            return Err(format!(
                "{:?} has a number without a unit (h, m, s or ms): {expected}",
                text
            ));
        }
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(format!(
                "{:?} has unknown unit {unit:?} (use h, m, s or ms): {expected}",
                text
            ));
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(format!(
                "{:?} repeats a unit or has them out of order (h, m, s, ms)",
                text
            ));
        }
        last_unit = Some(index);
        let value: i64 = digits
            .parse()
            .map_err(|_| format!("{:?} is too long a duration", text))?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|part| total.checked_add(part))
            .filter(|t| *t <= MAX_DURATION_MS)
            .ok_or_else(|| format!("{:?} is longer than the maximum of 168h", text))?;
    }
    Ok(total)
}

/// Formats milliseconds as [`parse_duration`] reads them (`90000` → `1m30s`, `0` → `0s`).
pub fn format_duration(ms: i64) -> String {
    if ms <= 0 {
        return "0s".to_string();
    }
    let mut rest = ms;
    let mut out = String::new();
    for (unit, size) in [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)] {
        let n = rest / size;
        if n > 0 {
            out.push_str(&format!("{n}{unit}"));
            rest -= n * size;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_forms() {
        assert_eq!(parse_duration("30s"), Ok(30_000));
        assert_eq!(parse_duration("1m"), Ok(60_000));
        assert_eq!(parse_duration("1m30s"), Ok(90_000));
        assert_eq!(parse_duration("500ms"), Ok(500));
        assert_eq!(parse_duration("1h2m3s4ms"), Ok(3_723_004));
        assert_eq!(parse_duration(" 2m "), Ok(120_000));
        assert_eq!(parse_duration("0s"), Ok(0));
    }

    #[test]
    fn refuses_malformed() {
        for bad in [
            "", "10", "1.5s", "1d", "s", "-1s", "1s1m", "1m1m", "1 m", "ms10",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_duration("169h").unwrap_err().contains("maximum"));
        assert!(parse_duration("99999999999999999999s").is_err());
    }

    #[test]
    fn format_round_trips() {
        for ms in [0, 1, 500, 1_000, 90_000, 3_723_004] {
            assert_eq!(parse_duration(&format_duration(ms)), Ok(ms));
        }
        assert_eq!(format_duration(90_000), "1m30s");
    }
}

//! Durations as canary resources spell them (`30s`, `1m`, `1m30s`, `500ms`, `1h`): one or
//! more `<whole number><unit>` parts with units `h`, `m`, `s`, `ms`, each unit at most once
//! and in that order. Values are milliseconds (`i64`, like [`crate::TimestampMs`]).

/// Longest duration accepted anywhere in a canary resource: 7 days.
pub const MAX_DURATION_MS: i64 = 7 * 24 * 3_600_000;

/// What a malformed duration's message ends with.
const EXPECTED: &str = "expected a duration such as 30s, 1m, 1m30s or 500ms";

/// Why a text is not a duration. The message says what is wrong, without naming the field
/// (the caller does); `text` is the input as written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    /// Empty or blank.
    #[error("empty duration: {EXPECTED}")]
    Empty,
    /// A part that does not start with a number.
    #[error("{text:?} is not a duration: {EXPECTED}")]
    NotADuration {
        /// The input.
        text: String,
    },
    /// A number without a unit.
    #[error("{text:?} has a number without a unit (h, m, s or ms): {EXPECTED}")]
    NoUnit {
        /// The input.
        text: String,
    },
    /// A unit other than `h`, `m`, `s` and `ms`.
    #[error("{text:?} has unknown unit {unit:?} (use h, m, s or ms): {EXPECTED}")]
    UnknownUnit {
        /// The input.
        text: String,
        /// The unit.
        unit: String,
    },
    /// A unit twice, or units out of order.
    #[error("{text:?} repeats a unit or has them out of order (h, m, s, ms)")]
    UnitOrder {
        /// The input.
        text: String,
    },
    /// A number too long for milliseconds.
    #[error("{text:?} is too long a duration")]
    TooLong {
        /// The input.
        text: String,
    },
    /// Above [`MAX_DURATION_MS`].
    #[error("{text:?} is longer than the maximum of 168h")]
    AboveMaximum {
        /// The input.
        text: String,
    },
}

/// Parses a duration into milliseconds.
pub fn parse_duration(text: &str) -> Result<i64, DurationError> {
    const UNITS: [(&str, i64); 4] = [("h", 3_600_000), ("m", 60_000), ("s", 1_000), ("ms", 1)];
    let owned = || text.to_string();
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
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
            return Err(DurationError::NotADuration { text: owned() });
        }
        let digits = &s[start..i];
        let unit_start = i;
        while i < bytes.len() && bytes[i].is_ascii_alphabetic() {
            i += 1;
        }
        let unit = &s[unit_start..i];
        if unit.is_empty() {
            return Err(DurationError::NoUnit { text: owned() });
        }
        let Some(index) = UNITS.iter().position(|(u, _)| *u == unit) else {
            return Err(DurationError::UnknownUnit {
                text: owned(),
                unit: unit.to_string(),
            });
        };
        if last_unit.is_some_and(|last| index <= last) {
            return Err(DurationError::UnitOrder { text: owned() });
        }
        last_unit = Some(index);
        let value: i64 = digits
            .parse()
            .map_err(|_| DurationError::TooLong { text: owned() })?;
        total = value
            .checked_mul(UNITS[index].1)
            .and_then(|part| total.checked_add(part))
            .filter(|t| *t <= MAX_DURATION_MS)
            .ok_or_else(|| DurationError::AboveMaximum { text: owned() })?;
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
        let long = parse_duration("169h").unwrap_err();
        assert!(
            matches!(long, DurationError::AboveMaximum { .. }),
            "{long:?}"
        );
        assert!(long.to_string().contains("maximum"), "{long}");
        assert!(matches!(
            parse_duration("99999999999999999999s"),
            Err(DurationError::TooLong { .. })
        ));
    }

    #[test]
    fn format_round_trips() {
        for ms in [0, 1, 500, 1_000, 90_000, 3_723_004] {
            assert_eq!(parse_duration(&format_duration(ms)), Ok(ms));
        }
        assert_eq!(format_duration(90_000), "1m30s");
    }
}

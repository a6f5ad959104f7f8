//! Maintenance windows (SPEC C3): weekly ranges of local wall-clock time in a named IANA time
//! zone, such as `MONDAY/22:00-TUESDAY/06:00` in `America/New_York`, or `all-time`.
//!
//! A spec is `all-time` or up to 64 comma-separated ranges `DAY/HH:MM-DAY/HH:MM`. Days are
//! case-insensitive (canonical upper case); times are exactly two-digit `HH:MM` from `00:00` to
//! `23:59`, and `24:00` is allowed only as an end. A range may wrap across days and over the
//! week end (`SATURDAY/22:00-MONDAY/02:00`); its start is inclusive, its end exclusive.
//!
//! Everything here is pure: time (milliseconds since the Unix epoch) is always an argument.
//! Local time jumps at DST changes: a window opens at the first instant whose local time is
//! inside a range, so a range starting in a skipped hour opens right after the gap, and a local
//! time that happens twice (fall back) is open both times.

use chrono::{DateTime, Offset, TimeZone};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

const MINUTES_PER_DAY: u32 = 24 * 60;
const MINUTES_PER_WEEK: u32 = 7 * MINUTES_PER_DAY;
const MINUTE_MS: i64 = 60_000;
const DAY_MS: i64 = 86_400_000;
const WEEK_MS: i64 = 7 * DAY_MS;
/// At most this many comma-separated ranges in one spec.
const MAX_RANGES: usize = 64;
/// Offsets are sampled this often when looking for DST changes (two changes closer than this
/// could be missed; tz data has none in practice).
const SAMPLE_MS: i64 = 6 * 3_600_000;
/// `next_open`/`next_close` give up after this long (a valid window opens every week).
const HORIZON_MS: i64 = 3 * WEEK_MS;
const DAYS: [&str; 7] = [
    "MONDAY",
    "TUESDAY",
    "WEDNESDAY",
    "THURSDAY",
    "FRIDAY",
    "SATURDAY",
    "SUNDAY",
];
const ALL_TIME: &str = "all-time";

/// Why a window spec or time zone was refused. Messages quote the bad text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WindowError {
    /// The spec is empty or blank.
    #[error(
        "empty maintenance window: write ranges like `MONDAY/22:00-TUESDAY/06:00`, or `all-time`"
    )]
    Empty,
    /// The time zone is not an IANA zone name known to the hub.
    #[error("unknown time zone {0:?}: expected an IANA name such as `UTC` or `America/New_York`")]
    UnknownTimeZone(String),
    /// One comma-separated range is malformed.
    #[error("bad maintenance window range {range:?}: {reason}")]
    BadRange {
        /// The range as written (shortened if very long).
        range: String,
        /// What is wrong with it.
        #[source]
        reason: RangeError,
    },
    /// More than 64 ranges.
    #[error("too many ranges in maintenance window: {0} (at most 64)")]
    TooManyRanges(usize),
}

/// What is wrong with one range of a window spec ([`WindowError::BadRange`]). The quoted
/// text is shortened to 80 characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Two commas with nothing between them.
    #[error("nothing between commas")]
    Nothing,
    /// `all-time` among other ranges.
    #[error("`all-time` cannot be combined with other ranges")]
    AllTimeCombined,
    /// No `-` between the two ends.
    #[error("expected DAY/HH:MM-DAY/HH:MM, e.g. MONDAY/22:00-TUESDAY/06:00")]
    Shape,
    /// Both ends at the same time of the week.
    #[error(
        "empty range: it starts and ends at the same time of the week \
         (write `all-time` for a window that is always open)"
    )]
    EmptyRange,
    /// An end without `/`.
    #[error("{0:?} must be DAY/HH:MM, e.g. MONDAY/22:00")]
    Point(String),
    /// A day that is not MONDAY to SUNDAY.
    #[error("unknown day {0:?} (expected MONDAY to SUNDAY)")]
    UnknownDay(String),
    /// A time that is not `HH:MM`.
    #[error("time {0:?} must be HH:MM with two-digit hours and minutes, e.g. 06:00")]
    TimeShape(String),
    /// `24:00` as a start.
    #[error("24:00 is allowed only as the end of a range")]
    MidnightStart,
    /// Hours or minutes out of range.
    #[error("time {0:?} is out of range (00:00 to 23:59, or 24:00 as an end)")]
    TimeRange(String),
}

/// A weekly maintenance window in a named time zone. Persisted as `{spec, time_zone}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "WindowRepr", into = "WindowRepr")]
pub struct MaintenanceWindow {
    /// Canonical spec, e.g. `MONDAY/22:00-TUESDAY/06:00`.
    spec: String,
    /// The zone, parsed once.
    tz: Tz,
    /// Open minutes of the week (Monday 00:00 = 0): sorted, merged, non-empty, half-open
    /// `[start, end)` pairs with `end <= MINUTES_PER_WEEK`; wrapping ranges are split in two.
    open: Vec<(u32, u32)>,
}

/// The persisted form of a [`MaintenanceWindow`]; re-parsed (and so re-validated) on load.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WindowRepr {
    spec: String,
    time_zone: String,
}

impl From<MaintenanceWindow> for WindowRepr {
    fn from(w: MaintenanceWindow) -> Self {
        let time_zone = w.time_zone().to_string();
        Self {
            spec: w.spec,
            time_zone,
        }
    }
}

impl TryFrom<WindowRepr> for MaintenanceWindow {
    type Error = WindowError;
    fn try_from(r: WindowRepr) -> Result<Self, WindowError> {
        Self::parse(&r.spec, &r.time_zone)
    }
}

impl MaintenanceWindow {
    /// Parses `spec` (`all-time` or comma-separated ranges) in IANA zone `time_zone`
    /// (e.g. `UTC`, `America/New_York`, `Asia/Seoul`).
    pub fn parse(spec: &str, time_zone: &str) -> Result<Self, WindowError> {
        let tz: Tz = time_zone
            .trim()
            .parse()
            .map_err(|_| WindowError::UnknownTimeZone(shorten(time_zone)))?;
        let spec = spec.trim();
        if spec.is_empty() {
            return Err(WindowError::Empty);
        }
        if spec.eq_ignore_ascii_case(ALL_TIME) {
            return Ok(Self::all_time_in(tz));
        }
        let count = spec.split(',').count();
        if count > MAX_RANGES {
            return Err(WindowError::TooManyRanges(count));
        }
        let mut canonical = Vec::with_capacity(count);
        let mut pieces = Vec::with_capacity(2 * count);
        for raw in spec.split(',') {
            let raw = raw.trim();
            let bad = |reason: RangeError| WindowError::BadRange {
                range: shorten(raw),
                reason,
            };
            let (start, end, text) = parse_range(raw).map_err(bad)?;
            canonical.push(text);
            if start < end {
                pieces.push((start, end));
            } else {
                pieces.push((start, MINUTES_PER_WEEK));
                if end > 0 {
                    pieces.push((0, end));
                }
            }
        }
        pieces.sort_unstable();
        let mut open: Vec<(u32, u32)> = Vec::with_capacity(pieces.len());
        for (s, e) in pieces {
            match open.last_mut() {
                Some(last) if s <= last.1 => last.1 = last.1.max(e),
                _ => open.push((s, e)),
            }
        }
        Ok(Self {
            spec: canonical.join(","),
            tz,
            open,
        })
    }

    /// A window that is always open (`all-time`, UTC).
    pub fn all_time() -> Self {
        Self::all_time_in(Tz::UTC)
    }

    fn all_time_in(tz: Tz) -> Self {
        Self {
            spec: ALL_TIME.to_string(),
            tz,
            open: vec![(0, MINUTES_PER_WEEK)],
        }
    }

    /// True for `all-time`.
    pub fn is_all_time(&self) -> bool {
        self.spec == ALL_TIME
    }

    /// The canonical spec, e.g. `MONDAY/22:00-TUESDAY/06:00` (upper-case days, zero-padded
    /// times, ranges joined by `,`), or `all-time`.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The IANA time-zone name.
    pub fn time_zone(&self) -> &str {
        self.tz.name()
    }

    /// Whether the window is open at `t_ms` (start inclusive, end exclusive), in local time.
    /// Instants outside chrono's range count as closed (except for `all-time`).
    pub fn is_open(&self, t_ms: i64) -> bool {
        if self.is_all_time() {
            return true;
        }
        match self.offset_ms(t_ms).and_then(|o| t_ms.checked_add(o)) {
            Some(local) => self.contains(minute_of_week(local)),
            None => false,
        }
    }

    /// The first instant `>= t_ms` at which the window is open: `t_ms` itself if open now.
    /// Exact to the millisecond across DST changes. `None` only near the ends of time.
    pub fn next_open(&self, t_ms: i64) -> Option<i64> {
        if self.is_all_time() {
            return Some(t_ms);
        }
        self.walk(t_ms, |local| self.next_open_local(local))
    }

    /// The first instant `> t_ms` at which the window, open at `t_ms`, closes; `None` for
    /// `all-time`, for a window that never closes, or when closed at `t_ms`.
    pub fn next_close(&self, t_ms: i64) -> Option<i64> {
        if self.is_all_time() || !self.is_open(t_ms) {
            return None;
        }
        self.walk(t_ms.checked_add(1)?, |local| self.next_close_local(local))
    }

    /// UTC offset of the zone at `t_ms`, in milliseconds.
    fn offset_ms(&self, t_ms: i64) -> Option<i64> {
        let utc = DateTime::from_timestamp_millis(t_ms)?.naive_utc();
        let seconds = self
            .tz
            .offset_from_utc_datetime(&utc)
            .fix()
            .local_minus_utc();
        Some(i64::from(seconds) * 1000)
    }

    fn contains(&self, minute: u32) -> bool {
        let i = self.open.partition_point(|&(s, _)| s <= minute);
        i > 0 && minute < self.open[i - 1].1
    }

    /// First local instant `>= local` (local ms) inside the window.
    fn next_open_local(&self, local: i64) -> Option<i64> {
        let m = minute_of_week(local);
        if self.contains(m) {
            return Some(local);
        }
        let into_week = i64::from(m) * MINUTE_MS + local.rem_euclid(MINUTE_MS);
        let i = self.open.partition_point(|&(s, _)| s <= m);
        let target = match self.open.get(i) {
            Some(&(s, _)) => i64::from(s) * MINUTE_MS,
            None => WEEK_MS + i64::from(self.open.first()?.0) * MINUTE_MS,
        };
        local.checked_add(target - into_week)
    }

    /// First local instant `>= local` (local ms) outside the window; `None` if always open.
    fn next_close_local(&self, local: i64) -> Option<i64> {
        let m = minute_of_week(local);
        if !self.contains(m) {
            return Some(local);
        }
        let into_week = i64::from(m) * MINUTE_MS + local.rem_euclid(MINUTE_MS);
        let i = self.open.partition_point(|&(s, _)| s <= m);
        let end = self.open.get(i.checked_sub(1)?)?.1;
        let target = if end < MINUTES_PER_WEEK {
            i64::from(end)
        } else {
            match *self.open.first()? {
                (0, MINUTES_PER_WEEK) => return None,
                (0, e) => i64::from(MINUTES_PER_WEEK + e),
                _ => i64::from(MINUTES_PER_WEEK),
            }
        };
        local.checked_add(target * MINUTE_MS - into_week)
    }

    /// First UTC instant `>= t` whose local time satisfies `first_local` (which maps a local
    /// instant to the first local instant `>=` it that qualifies). Within a span of constant
    /// offset local time is `utc + offset`, so the answer in that span is exact; at each DST
    /// change the search restarts with the new offset.
    fn walk(&self, t: i64, first_local: impl Fn(i64) -> Option<i64>) -> Option<i64> {
        let limit = t.saturating_add(HORIZON_MS);
        let mut a = t;
        let mut off = self.offset_ms(a)?;
        while a <= limit {
            let c = first_local(a.checked_add(off)?)?.checked_sub(off)?;
            match self.first_change(a, c, off) {
                None => return Some(c),
                Some(b) => {
                    a = b;
                    off = self.offset_ms(b)?;
                }
            }
        }
        None
    }

    /// First instant in `(a, c]` whose offset differs from `off` (the offset at `a`), if any.
    fn first_change(&self, a: i64, c: i64, off: i64) -> Option<i64> {
        let mut lo = a;
        while lo < c {
            let hi = lo.saturating_add(SAMPLE_MS).min(c);
            if self.offset_ms(hi) != Some(off) {
                // Invariant: offset(lo) == off != offset(hi).
                let mut hi = hi;
                while hi - lo > 1 {
                    let mid = lo + (hi - lo) / 2;
                    if self.offset_ms(mid) == Some(off) {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                return Some(hi);
            }
            lo = hi;
        }
        None
    }
}

impl std::fmt::Display for MaintenanceWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.spec, self.time_zone())
    }
}

/// Minute of the week (Monday 00:00 = 0) of a local instant; 1970-01-01 was a Thursday.
fn minute_of_week(local_ms: i64) -> u32 {
    let since_monday = (local_ms.rem_euclid(WEEK_MS) + 3 * DAY_MS) % WEEK_MS;
    // In 0..MINUTES_PER_WEEK, so the cast cannot truncate.
    (since_monday / MINUTE_MS) as u32
}

/// Quotes at most 80 characters of user text in an error.
fn shorten(s: &str) -> String {
    match s.char_indices().nth(80) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Parses `DAY/HH:MM-DAY/HH:MM` into start and end minute-of-week (end taken modulo the week)
/// and its canonical text.
fn parse_range(raw: &str) -> Result<(u32, u32, String), RangeError> {
    if raw.is_empty() {
        return Err(RangeError::Nothing);
    }
    if raw.eq_ignore_ascii_case(ALL_TIME) {
        return Err(RangeError::AllTimeCombined);
    }
    let (a, b) = raw.split_once('-').ok_or(RangeError::Shape)?;
    let (start_day, start) = parse_point(a.trim(), false)?;
    let (end_day, end) = parse_point(b.trim(), true)?;
    let s = start_day as u32 * MINUTES_PER_DAY + start;
    let e = (end_day as u32 * MINUTES_PER_DAY + end) % MINUTES_PER_WEEK;
    if s == e {
        return Err(RangeError::EmptyRange);
    }
    let text = format!(
        "{}/{:02}:{:02}-{}/{:02}:{:02}",
        DAYS[start_day],
        start / 60,
        start % 60,
        DAYS[end_day],
        end / 60,
        end % 60
    );
    Ok((s, e, text))
}

/// Parses `DAY/HH:MM` into a day index (Monday = 0) and minute of the day (1440 for `24:00`).
fn parse_point(p: &str, is_end: bool) -> Result<(usize, u32), RangeError> {
    let (day, time) = p
        .split_once('/')
        .ok_or_else(|| RangeError::Point(shorten(p)))?;
    let day_index = DAYS
        .iter()
        .position(|d| d.eq_ignore_ascii_case(day.trim()))
        .ok_or_else(|| RangeError::UnknownDay(shorten(day)))?;
    let b = time.trim().as_bytes();
    let digit = |i: usize| (b[i] as char).to_digit(10);
    let parsed = if b.len() == 5 && b[2] == b':' {
        match (digit(0), digit(1), digit(3), digit(4)) {
            (Some(h1), Some(h2), Some(m1), Some(m2)) => Some((h1 * 10 + h2, m1 * 10 + m2)),
            _ => None,
        }
    } else {
        None
    };
    let (h, m) = parsed.ok_or_else(|| RangeError::TimeShape(shorten(time)))?;
    match (h, m) {
        (24, 0) if is_end => Ok((day_index, MINUTES_PER_DAY)),
        (24, 0) => Err(RangeError::MidnightStart),
        (0..=23, 0..=59) => Ok((day_index, h * 60 + m)),
        _ => Err(RangeError::TimeRange(shorten(time))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(s: &str) -> i64 {
        DateTime::parse_from_rfc3339(s).unwrap().timestamp_millis()
    }

    fn w(spec: &str, tz: &str) -> MaintenanceWindow {
        MaintenanceWindow::parse(spec, tz).unwrap()
    }

    /// Rows of a `|`-separated table, cells trimmed.
    fn rows(table: &str) -> impl Iterator<Item = Vec<&str>> {
        let rows = table.lines().filter(|l| !l.trim().is_empty());
        rows.map(|l| l.split('|').map(str::trim).collect())
    }

    // SPEC C3: accepted specs -> canonical spec.
    #[test]
    fn parse_accepts() {
        let table = "
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | MONDAY/22:00-TUESDAY/06:00
            monday/22:00-Tuesday/06:00  | UTC              | MONDAY/22:00-TUESDAY/06:00
            SATURDAY/22:00-MONDAY/02:00 | Asia/Seoul       | SATURDAY/22:00-MONDAY/02:00
            SUNDAY/23:00-MONDAY/01:00   | UTC              | SUNDAY/23:00-MONDAY/01:00
            MONDAY/22:00-TUESDAY/06:00 , friday/20:00-FRIDAY/23:00 | UTC | MONDAY/22:00-TUESDAY/06:00,FRIDAY/20:00-FRIDAY/23:00
            FRIDAY/20:00-FRIDAY/24:00   | UTC              | FRIDAY/20:00-FRIDAY/24:00
            SUNDAY/23:00-SUNDAY/24:00   | UTC              | SUNDAY/23:00-SUNDAY/24:00
            all-time                    | UTC              | all-time
            ALL-TIME                    | Europe/Paris     | all-time";
        for row in rows(table) {
            let (spec, tz, canonical) = (row[0], row[1], row[2]);
            let win = MaintenanceWindow::parse(spec, tz).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!((win.spec(), win.time_zone()), (canonical, tz), "{spec}");
            assert_eq!(win.is_all_time(), canonical == "all-time");
        }
        let many = vec!["monday/01:00-monday/02:00"; 64].join(",");
        assert_eq!(w(&many, "UTC").spec(), many.to_uppercase());
        assert_eq!(w("all-time", "UTC"), MaintenanceWindow::all_time());
        let ny = w("MONDAY/22:00-TUESDAY/06:00", "America/New_York");
        assert_eq!(
            ny.to_string(),
            "MONDAY/22:00-TUESDAY/06:00 (America/New_York)"
        );
    }

    // SPEC C3: refused specs, each with a fragment of its error message.
    #[test]
    fn parse_rejects() {
        let table = r#"
                                        | UTC  | empty maintenance window
            ,                           | UTC  | bad maintenance window range "": nothing between commas
            MONDAY/01:00-MONDAY/02:00,  | UTC  | nothing between commas
            MONDAY                      | UTC  | "MONDAY": expected DAY/HH:MM-DAY/HH:MM
            MONDAY-TUESDAY              | UTC  | "MONDAY" must be DAY/HH:MM
            MONDAY/25:00-TUESDAY/01:00  | UTC  | time "25:00" is out of range
            MONDAY/10:60-TUESDAY/01:00  | UTC  | time "10:60" is out of range
            MONDAY/24:00-TUESDAY/01:00  | UTC  | 24:00 is allowed only as the end
            MONDAY/01:00-TUESDAY/24:01  | UTC  | time "24:01" is out of range
            FUNDAY/01:00-MONDAY/02:00   | UTC  | unknown day "FUNDAY"
            MONDAY/1:00-MONDAY/02:00    | UTC  | time "1:00" must be HH:MM
            MONDAY/01:00-MONDAY/2       | UTC  | time "2" must be HH:MM
            MONDAY/+1:00-MONDAY/02:00   | UTC  | time "+1:00" must be HH:MM
            MONDAY/01:00-MONDAY/01:00   | UTC  | empty range
            MONDAY/00:00-SUNDAY/24:00   | UTC  | write `all-time`
            all-time,MONDAY/01:00-MONDAY/02:00 | UTC | cannot be combined
            all-time                    | Mars/Olympus     | unknown time zone "Mars/Olympus"
            all-time                    |                  | unknown time zone ""
            all-time                    | america/new_york | unknown time zone"#;
        let too_many = vec!["MONDAY/01:00-MONDAY/02:00"; 65].join(",");
        let huge = "X".repeat(100_000);
        let extra = [
            vec![
                too_many.as_str(),
                "UTC",
                "too many ranges in maintenance window: 65",
            ],
            vec![huge.as_str(), "UTC", "XXX..."],
        ];
        for row in rows(table).chain(extra) {
            let (spec, tz, fragment) = (row[0], row[1], row[2]);
            let err = MaintenanceWindow::parse(spec, tz).unwrap_err().to_string();
            assert!(
                err.contains(fragment),
                "{spec:.40}: {err:?} lacks {fragment:?}"
            );
            assert!(err.len() < 300, "{err}");
        }
    }

    // SPEC C3: is_open at boundaries (start inclusive, end exclusive), wraps, time zones.
    // 2026-01-05 and 2026-07-06 are Mondays; New York is UTC-5 in January, UTC-4 in July.
    #[test]
    fn is_open_table() {
        let table = "
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-05T22:00:00Z     | true
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-05T21:59:59.999Z | false
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-06T00:00:00Z     | true
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-06T05:59:59.999Z | true
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-06T06:00:00Z     | false
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-10T21:59:59.999Z | false
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-10T22:00:00Z     | true
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-11T12:00:00Z     | true
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-12T01:59:59.999Z | true
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-12T02:00:00Z     | false
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-07T12:00:00Z     | false
            SUNDAY/23:00-MONDAY/01:00   | UTC | 2026-01-11T23:30:00Z     | true
            SUNDAY/23:00-MONDAY/01:00   | UTC | 2026-01-12T00:30:00Z     | true
            SUNDAY/23:00-MONDAY/01:00   | UTC | 2026-01-12T01:00:00Z     | false
            FRIDAY/20:00-FRIDAY/24:00   | UTC | 2026-01-09T23:59:59.999Z | true
            FRIDAY/20:00-FRIDAY/24:00   | UTC | 2026-01-10T00:00:00Z     | false
            all-time                    | UTC | 1900-01-01T00:00:00Z     | true
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-01-06T02:59:59.999Z | false
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-01-06T03:00:00Z     | true
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-01-06T10:59:59.999Z | true
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-01-06T11:00:00Z     | false
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-07-07T01:59:59.999Z | false
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-07-07T02:00:00Z     | true
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-07-07T09:59:59.999Z | true
            MONDAY/22:00-TUESDAY/06:00  | America/New_York | 2026-07-07T10:00:00Z     | false
            MONDAY/22:00-TUESDAY/06:00  | Asia/Seoul       | 2026-01-05T13:00:00Z     | true";
        for row in rows(table) {
            let open = w(row[0], row[1]).is_open(utc(row[2]));
            assert_eq!(open.to_string(), row[3], "{row:?}");
        }
        let win = w("MONDAY/22:00-TUESDAY/06:00", "UTC");
        assert!(!win.is_open(i64::MIN) && !win.is_open(i64::MAX));
        assert_eq!(
            (win.next_open(i64::MAX), win.next_close(i64::MIN)),
            (None, None)
        );
        assert_eq!(win.next_close(utc("2026-01-05T10:00:00Z")), None);
    }

    // SPEC C3: next_open from t, then next_close from that opening ("-" = never closes).
    // New York springs forward 2026-03-08 at 07:00Z (02:00 EST -> 03:00 EDT: 02:30 does not
    // exist, so the window opens right after the gap; a range wholly inside the gap skips that
    // week) and falls back 2026-11-01 at 06:00Z (02:00 EDT -> 01:00 EST: 01:30 happens twice,
    // the earliest first; a range the clock falls back into reopens at the change).
    #[test]
    fn next_open_and_close_table() {
        let table = "
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-06T01:00:00.5Z | 2026-01-06T01:00:00.5Z | 2026-01-06T06:00:00Z
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-05T10:00:00Z   | 2026-01-05T22:00:00Z   | 2026-01-06T06:00:00Z
            MONDAY/22:00-TUESDAY/06:00  | UTC | 2026-01-06T06:00:00Z   | 2026-01-12T22:00:00Z   | 2026-01-13T06:00:00Z
            SATURDAY/22:00-MONDAY/02:00 | UTC | 2026-01-07T00:00:00Z   | 2026-01-10T22:00:00Z   | 2026-01-12T02:00:00Z
            MONDAY/00:00-MONDAY/01:00,SUNDAY/23:00-SUNDAY/24:00 | UTC | 2026-01-11T12:00:00Z | 2026-01-11T23:00:00Z | 2026-01-12T01:00:00Z
            MONDAY/00:00-THURSDAY/00:00,THURSDAY/00:00-MONDAY/00:00 | UTC | 2026-01-11T12:00:00Z | 2026-01-11T12:00:00Z | -
            all-time                    | UTC | 2026-01-11T12:00:00Z   | 2026-01-11T12:00:00Z   | -
            SUNDAY/02:30-SUNDAY/03:30 | America/New_York | 2026-03-07T12:00:00Z | 2026-03-08T07:00:00Z | 2026-03-08T07:30:00Z
            SUNDAY/02:10-SUNDAY/02:20 | America/New_York | 2026-03-07T12:00:00Z | 2026-03-15T06:10:00Z | 2026-03-15T06:20:00Z
            SUNDAY/01:30-SUNDAY/01:45 | America/New_York | 2026-10-31T12:00:00Z | 2026-11-01T05:30:00Z | 2026-11-01T05:45:00Z
            SUNDAY/01:30-SUNDAY/01:45 | America/New_York | 2026-11-01T05:50:00Z | 2026-11-01T06:30:00Z | 2026-11-01T06:45:00Z
            SUNDAY/00:00-SUNDAY/01:30 | America/New_York | 2026-11-01T05:40:00Z | 2026-11-01T06:00:00Z | 2026-11-01T06:30:00Z";
        for row in rows(table) {
            let win = w(row[0], row[1]);
            let open = win.next_open(utc(row[2]));
            assert_eq!(open, Some(utc(row[3])), "{row:?}");
            let close = (row[4] != "-").then(|| utc(row[4]));
            assert_eq!(win.next_close(utc(row[3])), close, "{row:?}");
        }
    }

    // SPEC C3: persisted as {spec, time_zone}, re-validated on load.
    #[test]
    fn serde_round_trip() {
        let ny = "America/New_York";
        for win in [
            w("monday/22:00-TUESDAY/06:00,FRIDAY/20:00-FRIDAY/23:00", ny),
            MaintenanceWindow::all_time(),
        ] {
            let json = serde_json::to_string(&win).unwrap();
            let repr = format!(
                r#"{{"spec":"{}","time_zone":"{}"}}"#,
                win.spec(),
                win.time_zone()
            );
            assert_eq!(json, repr);
            assert_eq!(
                serde_json::from_str::<MaintenanceWindow>(&json).unwrap(),
                win
            );
            let config = bincode::config::standard();
            let bytes = bincode::serde::encode_to_vec(&win, config).unwrap();
            let back: (MaintenanceWindow, usize) =
                bincode::serde::decode_from_slice(&bytes, config).unwrap();
            assert_eq!(back.0, win);
        }
        let bad = r#"{"spec":"FUNDAY/01:00-MONDAY/02:00","time_zone":"UTC"}"#;
        let err = serde_json::from_str::<MaintenanceWindow>(bad).unwrap_err();
        assert!(err.to_string().contains("unknown day"), "{err}");
    }

    /// SplitMix64, for reproducible pseudo-random instants.
    fn splitmix(state: &mut u64) -> u64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// First instant >= t (t itself, then minute boundaries) where `open` holds.
    fn brute(t: i64, open: impl Fn(i64) -> bool) -> i64 {
        let mut m = (t.div_euclid(MINUTE_MS) + 1) * MINUTE_MS;
        if open(t) {
            return t;
        }
        while !open(m) {
            m += MINUTE_MS;
        }
        m
    }

    // SPEC C3: next_open/next_close agree with a minute-stepped scan of is_open, for 2000
    // instants: half over 2025-2027, half within two days before a DST change.
    #[test]
    fn brute_force_cross_check() {
        let windows = [
            (
                "MONDAY/22:00-TUESDAY/06:00,FRIDAY/20:00-FRIDAY/23:00",
                "America/New_York",
            ),
            (
                "SUNDAY/01:30-SUNDAY/02:45,SATURDAY/23:00-SUNDAY/00:30",
                "America/New_York",
            ),
            ("SATURDAY/22:00-MONDAY/02:00", "Asia/Seoul"),
            (
                "SUNDAY/00:30-SUNDAY/01:15,WEDNESDAY/12:00-WEDNESDAY/13:00",
                "Europe/London",
            ),
            ("SUNDAY/01:45-SUNDAY/02:15", "Australia/Lord_Howe"), // 30-minute DST shift
        ];
        let changes = [
            "2026-03-08T07:00:00Z", // New York
            "2026-11-01T06:00:00Z",
            "2026-03-29T01:00:00Z", // London
            "2026-10-25T01:00:00Z",
            "2026-04-04T15:00:00Z", // Lord Howe
            "2026-10-03T15:30:00Z",
        ];
        let (from, to) = (utc("2025-01-01T00:00:00Z"), utc("2028-01-01T00:00:00Z"));
        let mut seed = 42;
        for (k, &(spec, tz)) in windows.iter().enumerate() {
            let win = w(spec, tz);
            for i in 0..2000 / windows.len() {
                let r = splitmix(&mut seed);
                let mut t = match i % 2 {
                    0 => from + (r % (to - from) as u64) as i64,
                    _ => utc(changes[i % changes.len()]) - (r % (2 * DAY_MS as u64)) as i64,
                };
                if k % 2 == 0 {
                    t -= t.rem_euclid(MINUTE_MS); // some windows start on minute boundaries
                }
                let open = win.next_open(t).unwrap();
                assert_eq!(open, brute(t, |u| win.is_open(u)), "{win} from {t}");
                assert!(win.is_open(open));
                assert!(open == t || !win.is_open(open - 1), "{win} from {t}");
                let close = win.next_close(open).unwrap();
                assert_eq!(
                    close,
                    brute(open + 1, |u| !win.is_open(u)),
                    "{win} at {open}"
                );
            }
        }
    }
}

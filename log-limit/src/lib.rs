//! Quiet logging of repeated conditions.
//!
//! A node or an agent meets some conditions over and over in a loop: a peer that refuses every
//! connection, a plan fetch that fails at each retry, a webhook that answers 500 at every
//! tick. Logging each occurrence fills a disk (a dead follower once made a leader write 25,000
//! lines a second) and buries the line that matters. The rule of the project is: a repeated
//! condition is logged **once per change of state**, then reminded at most once per period,
//! and its end is logged once.
//!
//! A [`LogLimiter`] decides which occurrences get a line. The caller reports each occurrence
//! of a condition of a key ([`LogLimiter::failed`], with the condition's kind: a change of
//! kind is a change of state) and each success ([`LogLimiter::succeeded`]), and logs what it
//! gets back, a [`Notice`]:
//!
//! - [`Change::Began`]: the condition began (or changed kind), once it has held for
//!   [`Limits::grace`] (a blip shorter than that is never logged, nor its end);
//! - [`Change::Still`]: it still holds, at most once per [`Limits::remind_every`], with the
//!   number of occurrences since the last line;
//! - [`Change::Ended`]: it ended, after a logged beginning, with how long it lasted.
//!
//! No key gets two lines less than [`Limits::min_gap`] apart: a condition flapping faster
//! than that is logged where it stands at its first observation after the gap. So a key
//! writes at most one line per `min_gap` whatever happens, and one per `remind_every` while
//! its condition holds.
//!
//! Pure: no clock and no I/O, the time is an argument. [`SharedLogLimiter`] is the same
//! behind a mutex, for loops on several tasks.
//!
//! ```
//! use std::time::{Duration, Instant};
//! use hub_log_limit::{Change, Limits, LogLimiter};
//!
//! let mut peers: LogLimiter<u64, &str> = LogLimiter::new(Limits::DEFAULT);
//! let t0 = Instant::now();
//! let ms = |n| t0 + Duration::from_millis(n);
//! // The first refusal is logged, the next thousand in the following second are not.
//! assert_eq!(peers.failed(&2, "refused", t0).unwrap().change, Change::Began);
//! for i in 1..=1000 {
//!     assert!(peers.failed(&2, "refused", ms(i)).is_none());
//! }
//! // Thirty seconds on: one reminder, counting what was not logged.
//! let still = peers.failed(&2, "refused", ms(30_000)).unwrap();
//! assert_eq!((still.change, still.repeats), (Change::Still, 1001));
//! // The peer answers: its recovery is logged once.
//! let ended = peers.succeeded(&2, ms(31_000)).unwrap();
//! assert_eq!((ended.change, ended.lasted), (Change::Ended, Duration::from_secs(31)));
//! assert!(peers.succeeded(&2, ms(31_001)).is_none());
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How quiet a [`LogLimiter`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A condition is logged only once it has held this long; one that ends sooner is never
    /// logged, nor is its end.
    pub grace: Duration,
    /// The least time between two lines about one key.
    pub min_gap: Duration,
    /// While a condition holds, one reminder per this period.
    pub remind_every: Duration,
}

impl Limits {
    /// Logged at once, at most a line a second per key, a reminder every 30 s.
    pub const DEFAULT: Limits = Limits {
        grace: Duration::ZERO,
        min_gap: Duration::from_secs(1),
        remind_every: Duration::from_secs(30),
    };

    /// [`Limits::DEFAULT`] with a grace: a condition is logged once it has held `grace`.
    pub const fn with_grace(grace: Duration) -> Limits {
        Limits {
            grace,
            ..Limits::DEFAULT
        }
    }
}

/// What a [`Notice`] says about its condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The condition began, or changed kind.
    Began,
    /// It still holds (a reminder).
    Still,
    /// It ended.
    Ended,
}

/// A line to log about a key's condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice<S> {
    /// Began, still holds, or ended.
    pub change: Change,
    /// The condition (for [`Change::Ended`], the one that ended).
    pub state: S,
    /// How long the condition has held (has lasted, when it ended).
    pub lasted: Duration,
    /// Occurrences since the last line about the key (this one included).
    pub repeats: u64,
}

impl<S> fmt::Display for Notice<S> {
    /// A summary for a log field: `for 31.0 s, 120 occurrences since the last line`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "for {:.1} s, {} occurrence{} since the last line",
            self.lasted.as_secs_f64(),
            self.repeats,
            if self.repeats == 1 { "" } else { "s" }
        )
    }
}

/// One key's condition and what the log has said of it.
#[derive(Debug)]
struct Track<S> {
    /// The condition now (`None`: it ended).
    now: Option<S>,
    /// When the current condition (of its kind) began.
    since: Instant,
    /// What the last line said (`None`: nothing yet).
    logged: Option<S>,
    /// When the last line about the key was written.
    last_line: Option<Instant>,
    /// Occurrences since the last line.
    unlogged: u64,
}

impl<S> Track<S> {
    fn gap_open(&self, now: Instant, limits: &Limits) -> bool {
        self.last_line
            .is_none_or(|t| now.saturating_duration_since(t) >= limits.min_gap)
    }

    fn line(&mut self, change: Change, state: S, now: Instant) -> Notice<S> {
        let notice = Notice {
            change,
            state,
            lasted: now.saturating_duration_since(self.since),
            repeats: self.unlogged,
        };
        self.last_line = Some(now);
        self.unlogged = 0;
        notice
    }
}

/// Decides which occurrences of repeated conditions, one per key `K`, get a log line; `S` is
/// the kind of condition (a change of kind is logged as a new beginning). See the crate's
/// documentation.
#[derive(Debug)]
pub struct LogLimiter<K, S> {
    limits: Limits,
    keys: HashMap<K, Track<S>>,
}

impl<K: Eq + Hash + Clone, S: PartialEq + Clone> LogLimiter<K, S> {
    /// A limiter with no condition yet.
    pub fn new(limits: Limits) -> Self {
        Self {
            limits,
            keys: HashMap::new(),
        }
    }

    /// An occurrence of condition `state` for `key` at `now`: the line to log, if any.
    pub fn failed(&mut self, key: &K, state: S, now: Instant) -> Option<Notice<S>> {
        let limits = self.limits;
        let track = match self.keys.get_mut(key) {
            Some(t) => t,
            None => self.keys.entry(key.clone()).or_insert(Track {
                now: None,
                since: now,
                logged: None,
                last_line: None,
                unlogged: 0,
            }),
        };
        if track.now.as_ref() != Some(&state) {
            track.now = Some(state.clone());
            track.since = now;
        }
        track.unlogged += 1;
        if !track.gap_open(now, &limits) {
            return None;
        }
        if track.logged.as_ref() != Some(&state) {
            if now.saturating_duration_since(track.since) < limits.grace {
                return None;
            }
            track.logged = Some(state.clone());
            return Some(track.line(Change::Began, state, now));
        }
        let reminded = track
            .last_line
            .is_some_and(|t| now.saturating_duration_since(t) >= limits.remind_every);
        reminded.then(|| track.line(Change::Still, state, now))
    }

    /// A success for `key` at `now` (its condition, if any, ended): the line to log, if any.
    pub fn succeeded(&mut self, key: &K, now: Instant) -> Option<Notice<S>> {
        let limits = self.limits;
        let track = self.keys.get_mut(key)?;
        track.now = None;
        let gap_open = track.gap_open(now, &limits);
        let Some(logged) = track.logged.clone() else {
            // Nothing to say (it ended within its grace, or its end was said): the key is
            // forgotten once its last line is older than the gap.
            if gap_open {
                self.keys.remove(key);
            }
            return None;
        };
        if !gap_open {
            // Said at the next success after the gap.
            return None;
        }
        track.logged = None;
        Some(track.line(Change::Ended, logged, now))
    }

    /// Drops what is known of `key` (it is gone: a removed peer, a deleted canary).
    pub fn forget(&mut self, key: &K) {
        self.keys.remove(key);
    }

    /// Keeps only the keys `keep` accepts (the others are gone: plans no longer listed).
    pub fn retain(&mut self, mut keep: impl FnMut(&K) -> bool) {
        self.keys.retain(|k, _| keep(k));
    }

    /// Whether `key` has a condition now.
    pub fn is_failing(&self, key: &K) -> bool {
        self.keys.get(key).is_some_and(|t| t.now.is_some())
    }
}

/// A [`LogLimiter`] behind a mutex, for a condition met on several tasks.
#[derive(Debug)]
pub struct SharedLogLimiter<K, S>(Mutex<LogLimiter<K, S>>);

impl<K: Eq + Hash + Clone, S: PartialEq + Clone> SharedLogLimiter<K, S> {
    /// A shared limiter with no condition yet.
    pub fn new(limits: Limits) -> Self {
        Self(Mutex::new(LogLimiter::new(limits)))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LogLimiter<K, S>> {
        // The limiter's state is consistent after any panic of a caller (no call panics).
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// [`LogLimiter::failed`].
    pub fn failed(&self, key: &K, state: S, now: Instant) -> Option<Notice<S>> {
        self.lock().failed(key, state, now)
    }

    /// [`LogLimiter::succeeded`].
    pub fn succeeded(&self, key: &K, now: Instant) -> Option<Notice<S>> {
        self.lock().succeeded(key, now)
    }

    /// [`LogLimiter::forget`].
    pub fn forget(&self, key: &K) {
        self.lock().forget(key)
    }

    /// [`LogLimiter::is_failing`].
    pub fn is_failing(&self, key: &K) -> bool {
        self.lock().is_failing(key)
    }
}

impl<K: Eq + Hash + Clone, S: PartialEq + Clone> Default for SharedLogLimiter<K, S> {
    fn default() -> Self {
        Self::new(Limits::DEFAULT)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(t0: Instant, ms: u64) -> Instant {
        t0 + Duration::from_millis(ms)
    }

    /// Feeds `occurrences` (time in ms, `Some(kind)` for a failure, `None` for a success) to
    /// a limiter and returns the lines: (time, change, kind, repeats).
    fn lines(
        limits: Limits,
        occurrences: impl IntoIterator<Item = (u64, Option<&'static str>)>,
    ) -> Vec<(u64, Change, &'static str, u64)> {
        let t0 = Instant::now();
        let mut l = LogLimiter::new(limits);
        occurrences
            .into_iter()
            .filter_map(|(ms, o)| {
                let n = match o {
                    Some(kind) => l.failed(&"k", kind, at(t0, ms)),
                    None => l.succeeded(&"k", at(t0, ms)),
                }?;
                Some((ms, n.change, n.state, n.repeats))
            })
            .collect()
    }

    /// A failure every millisecond for two minutes: the beginning and one reminder per 30 s.
    #[test]
    fn a_condition_in_a_busy_loop_is_logged_once_then_reminded_every_period() {
        let got = lines(
            Limits::DEFAULT,
            (0..120_000).map(|ms| (ms, Some("refused"))),
        );
        assert_eq!(
            got,
            vec![
                (0, Change::Began, "refused", 1),
                (30_000, Change::Still, "refused", 30_000),
                (60_000, Change::Still, "refused", 30_000),
                (90_000, Change::Still, "refused", 30_000),
            ]
        );
    }

    /// A logged condition's end is logged once, with how long it lasted; a new failure after
    /// it begins anew.
    #[test]
    fn the_end_is_logged_once_and_a_new_failure_begins_anew() {
        let t0 = Instant::now();
        let mut l: LogLimiter<u64, &str> = LogLimiter::new(Limits::DEFAULT);
        assert!(l.succeeded(&1, t0).is_none(), "nothing to end");
        assert_eq!(l.failed(&1, "refused", t0).unwrap().change, Change::Began);
        assert!(l.is_failing(&1));
        l.failed(&1, "refused", at(t0, 500));
        let end = l.succeeded(&1, at(t0, 2_000)).unwrap();
        assert_eq!(end.change, Change::Ended);
        assert_eq!(end.state, "refused");
        assert_eq!(end.lasted, Duration::from_secs(2));
        assert_eq!(end.repeats, 1, "the failure at 500 ms was not logged");
        assert!(!l.is_failing(&1));
        assert!(l.succeeded(&1, at(t0, 2_001)).is_none());
        let again = l.failed(&1, "refused", at(t0, 5_000)).unwrap();
        assert_eq!(
            (again.change, again.lasted),
            (Change::Began, Duration::ZERO)
        );
    }

    /// A change of kind is a change of state: logged, but never two lines within the gap.
    #[test]
    fn a_change_of_kind_is_logged_within_the_gap() {
        let got = lines(
            Limits::DEFAULT,
            [
                (0, Some("refused")),
                (200, Some("timed out")),
                (900, Some("timed out")),
                (1_100, Some("timed out")),
                (1_200, Some("refused")),
            ],
        );
        assert_eq!(
            got,
            vec![
                (0, Change::Began, "refused", 1),
                (1_100, Change::Began, "timed out", 3),
            ]
        );
    }

    /// Flapping faster than the gap: at most one line per gap, and the log ends where the
    /// condition stands.
    #[test]
    fn a_flapping_condition_writes_at_most_a_line_per_gap() {
        let flaps = (0..10_000u64).map(|ms| (ms, (ms % 2 == 0).then_some("refused")));
        let got = lines(Limits::DEFAULT, flaps.chain([(12_000, None)]));
        assert!(got.len() <= 11, "{got:?}");
        for w in got.windows(2) {
            assert!(w[1].0 - w[0].0 >= 1_000, "{got:?}");
            assert_ne!(w[0].1, w[1].1, "alternates: {got:?}");
        }
        assert_eq!(got.last().unwrap().1, Change::Ended, "{got:?}");
    }

    /// Within its grace a condition is not logged, nor its end; past it, it is.
    #[test]
    fn a_blip_within_the_grace_is_not_logged() {
        let grace = Limits::with_grace(Duration::from_secs(1));
        let blip = lines(grace, [(0, Some("t")), (300, Some("t")), (600, None)]);
        assert!(blip.is_empty(), "{blip:?}");
        let held = lines(
            grace,
            [
                (0, Some("t")),
                (600, Some("t")),
                (1_200, Some("t")),
                (2_400, None),
            ],
        );
        assert_eq!(
            held,
            vec![
                (1_200, Change::Began, "t", 3),
                (2_400, Change::Ended, "t", 0)
            ]
        );
    }

    /// Keys are independent; a forgotten key starts afresh.
    #[test]
    fn keys_are_independent_and_can_be_forgotten() {
        let t0 = Instant::now();
        let l: SharedLogLimiter<u64, &str> = SharedLogLimiter::default();
        assert!(l.failed(&1, "x", t0).is_some());
        assert!(l.failed(&2, "x", t0).is_some());
        assert!(l.failed(&1, "x", at(t0, 10)).is_none());
        l.forget(&1);
        assert!(!l.is_failing(&1) && l.is_failing(&2));
        assert!(l.failed(&1, "x", at(t0, 20)).is_some());
        let mut l: LogLimiter<u64, &str> = LogLimiter::new(Limits::DEFAULT);
        for k in 0..10 {
            l.failed(&k, "x", t0);
        }
        l.retain(|k| k % 2 == 0);
        assert!(l.is_failing(&4) && !l.is_failing(&5));
        assert!(l.failed(&5, "x", at(t0, 10)).is_some(), "5 starts afresh");
    }

    #[test]
    fn a_notice_reads_as_a_summary() {
        let n = Notice {
            change: Change::Still,
            state: (),
            lasted: Duration::from_millis(31_040),
            repeats: 120,
        };
        assert_eq!(
            n.to_string(),
            "for 31.0 s, 120 occurrences since the last line"
        );
    }
}

//! The replicated clock of the log: the time the state machine gives each entry.
//!
//! The leader stamps every entry with its estimate of the cluster's time (the median of the
//! voters' clocks, `node/src/cluster_clock.rs`), but a new leader's estimate may be behind the
//! last one's by the two clocks' difference. Apply therefore runs every entry at
//! `max(stamp, last_ms)`, where `last_ms` is the time of the last entry that changed the
//! state: every time the state records (a plan's issue, a suppression's start, an audit row)
//! is at least every time recorded before it, whatever the leaders' clocks did, and a
//! suppression's end or the 4-hour re-check is never judged at a time earlier than one the
//! state already holds. An entry that changes nothing (a stale `Evaluate`, a refusal without
//! an audit row) leaves the clock as it was, so "changes nothing" stays exact. The record
//! also counts the entries whose stamp was behind and raised, for operators and the chaos
//! checkers.

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// The record's one name.
pub const ENTRY_CLOCK_KEY: &str = "log";

/// The time of the last applied entry: one record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryClock {
    /// The time the last entry was applied at (milliseconds since the Unix epoch).
    pub last_ms: TimestampMs,
    /// Entries whose stamp was earlier than the entry before them and ran at its time.
    pub raised: u64,
    /// The largest amount a stamp was raised by, in milliseconds.
    pub max_raise_ms: i64,
}

impl EntryClock {
    /// The time an entry stamped `stamp` runs at, and the clock after it.
    pub fn advance(&self, stamp: TimestampMs) -> (TimestampMs, EntryClock) {
        if stamp >= self.last_ms {
            let next = EntryClock {
                last_ms: stamp,
                ..self.clone()
            };
            return (stamp, next);
        }
        let raise = self.last_ms - stamp;
        let next = EntryClock {
            last_ms: self.last_ms,
            raised: self.raised + 1,
            max_raise_ms: self.max_raise_ms.max(raise),
        };
        (self.last_ms, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_never_goes_backwards_and_raises_are_counted() {
        let c = EntryClock::default();
        let (t, c) = c.advance(1_000);
        assert_eq!((t, c.last_ms, c.raised), (1_000, 1_000, 0));
        // A leader whose clock is 300 ms behind.
        let (t, c) = c.advance(700);
        assert_eq!(
            (t, c.last_ms, c.raised, c.max_raise_ms),
            (1_000, 1_000, 1, 300)
        );
        let (t, c) = c.advance(1_000);
        assert_eq!((t, c.raised), (1_000, 1));
        let (t, c) = c.advance(1_500);
        assert_eq!(
            (t, c.last_ms, c.raised, c.max_raise_ms),
            (1_500, 1_500, 1, 300)
        );
    }
}

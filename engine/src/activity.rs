//! Activity: the per-entity timeline of decisions with their reasons (SPEC P3, P5, C1).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// Entries kept per entity; older ones are dropped.
pub const ACTIVITY_KEPT: usize = 100;

/// One line of an entity's timeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityEntry {
    /// Entry time.
    pub time_ms: TimestampMs,
    /// Log index.
    pub index: u64,
    /// `decision`, `plan`, `command`, `suppression`, `report`, `settings`.
    pub kind: String,
    /// What happened and why.
    pub message: String,
}

/// An entity's activity record.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// The entity.
    pub entity: String,
    /// The newest [`ACTIVITY_KEPT`] entries, oldest first.
    pub entries: VecDeque<ActivityEntry>,
    /// A fingerprint of the last recorded decision, so an unchanged decision is not recorded
    /// twice.
    pub last_decision: Option<String>,
    /// Since when the current candidate has been blocked (for the 4-hour re-check, SPEC P11,
    /// and a plan's `created` time).
    pub blocked_since_ms: Option<TimestampMs>,
    /// Which candidate `blocked_since_ms` belongs to.
    pub blocked_candidate: Option<String>,
}

impl Activity {
    /// Appends an entry, dropping the oldest beyond [`ACTIVITY_KEPT`].
    pub fn push(&mut self, time_ms: TimestampMs, index: u64, kind: &str, message: String) {
        self.entries.push_back(ActivityEntry {
            time_ms,
            index,
            kind: kind.to_string(),
            message,
        });
        while self.entries.len() > ACTIVITY_KEPT {
            self.entries.pop_front();
        }
    }
}

//! Activity: the per-entity timeline of decisions with their reasons (SPEC P3, P5, C1).
//!
//! An entity's timeline is split in two, by who reads it:
//! - [`Activity`], the head, is a row of the state: what apply's decisions read (the last
//!   recorded decision, since when the candidate is blocked, the last 4-hour re-check) and
//!   how many lines were written.
//! - [`ActivityLine`]s are history: apply writes each as its own record
//!   ([`crate::HistoryWrite`]), storage keeps the newest [`ACTIVITY_KEPT`] per entity, and
//!   nothing in the state holds or reads them. Queries read them from storage.
//!
//! So a line costs one small record instead of a rewrite of the whole timeline, and a
//! node's memory does not grow with it. [`ActivityV1`] is the format before the split: it is
//! read only to migrate it ([`ActivityV1::split`]).

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// Lines kept per entity; older ones are deleted.
pub const ACTIVITY_KEPT: usize = 100;

/// The separator between the entity id and the sequence number in a line's record name
/// (entity ids never contain it: [`crate::EntityId`]).
const LINE_SEPARATOR: char = '/';

/// One line of an entity's timeline, stored as its own record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityLine {
    /// The entity.
    pub entity: String,
    /// The line's number in the entity's timeline, from 0.
    pub seq: u64,
    /// Entry time.
    pub time_ms: TimestampMs,
    /// Log index.
    pub index: u64,
    /// `decision`, `plan`, `recheck`, `canary`, `command`, `suppression`, `report`, …
    pub kind: String,
    /// What happened and why.
    pub message: String,
}

impl ActivityLine {
    /// The record name of line `seq` of `entity`: the entity id, `/`, and `seq` zero-padded,
    /// so an entity's lines are contiguous and in order under
    /// [`ActivityLine::entity_prefix`].
    pub fn key_name(entity: &str, seq: u64) -> String {
        format!("{entity}{LINE_SEPARATOR}{seq:020}")
    }

    /// The name prefix shared by every line of `entity` and no other entity's.
    pub fn entity_prefix(entity: &str) -> String {
        format!("{entity}{LINE_SEPARATOR}")
    }
}

/// An entity's activity head: the state apply's decisions read, and the line count.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Activity {
    /// The entity.
    pub entity: String,
    /// Lines written so far: the next line's `seq`. Lines `lines - ACTIVITY_KEPT ..` are
    /// stored.
    pub lines: u64,
    /// A fingerprint of the last recorded decision, so an unchanged decision is not recorded
    /// twice.
    pub last_decision: Option<String>,
    /// Since when the current candidate has been blocked (for the 4-hour re-check, SPEC P11,
    /// and a plan's `created` time).
    pub blocked_since_ms: Option<TimestampMs>,
    /// Which candidate `blocked_since_ms` belongs to.
    pub blocked_candidate: Option<String>,
    /// The time of the newest `recheck` line.
    pub last_recheck_ms: Option<TimestampMs>,
}

impl Activity {
    /// Appends a line: returns it, with the key name ([`ActivityLine::key_name`]) of the
    /// line that falls out of the newest [`ACTIVITY_KEPT`], which storage deletes.
    pub(crate) fn push(
        &mut self,
        time_ms: TimestampMs,
        index: u64,
        kind: &str,
        message: String,
    ) -> (ActivityLine, Option<String>) {
        let seq = self.lines;
        self.lines += 1;
        if kind == RECHECK {
            self.last_recheck_ms = Some(time_ms);
        }
        let line = ActivityLine {
            entity: self.entity.clone(),
            seq,
            time_ms,
            index,
            kind: kind.to_string(),
            message,
        };
        let dropped = seq
            .checked_sub(ACTIVITY_KEPT as u64)
            .map(|old| ActivityLine::key_name(&self.entity, old));
        (line, dropped)
    }
}

/// The kind of a 4-hour re-check line (SPEC P11).
pub(crate) const RECHECK: &str = "recheck";

/// One line of [`ActivityV1`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityEntryV1 {
    /// Entry time.
    pub time_ms: TimestampMs,
    /// Log index.
    pub index: u64,
    /// The line's kind.
    pub kind: String,
    /// What happened and why.
    pub message: String,
}

/// An entity's activity before lines became records of their own: the head and the newest
/// lines in one record. Stores and snapshots written before the split hold it; it is only
/// read, to be split ([`ActivityV1::split`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityV1 {
    /// The entity.
    pub entity: String,
    /// The newest lines, oldest first.
    pub entries: VecDeque<ActivityEntryV1>,
    /// See [`Activity::last_decision`].
    pub last_decision: Option<String>,
    /// See [`Activity::blocked_since_ms`].
    pub blocked_since_ms: Option<TimestampMs>,
    /// See [`Activity::blocked_candidate`].
    pub blocked_candidate: Option<String>,
}

impl ActivityV1 {
    /// The head and the lines this record becomes: lines numbered from 0, oldest first, and
    /// the head's re-check time from the newest `recheck` line.
    pub fn split(self) -> (Activity, Vec<ActivityLine>) {
        let last_recheck_ms = self
            .entries
            .iter()
            .rev()
            .find(|e| e.kind == RECHECK)
            .map(|e| e.time_ms);
        let lines: Vec<ActivityLine> = self
            .entries
            .into_iter()
            .zip(0u64..)
            .map(|(e, seq)| ActivityLine {
                entity: self.entity.clone(),
                seq,
                time_ms: e.time_ms,
                index: e.index,
                kind: e.kind,
                message: e.message,
            })
            .collect();
        let head = Activity {
            entity: self.entity,
            lines: lines.len() as u64,
            last_decision: self.last_decision,
            blocked_since_ms: self.blocked_since_ms,
            blocked_candidate: self.blocked_candidate,
            last_recheck_ms,
        };
        (head, lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_returns_the_line_and_the_one_beyond_the_kept() {
        let mut a = Activity {
            entity: "eid:prod:helmChart:web".into(),
            ..Activity::default()
        };
        for i in 0..ACTIVITY_KEPT as u64 {
            let (line, dropped) = a.push(i as TimestampMs, i, "decision", format!("d{i}"));
            assert_eq!(
                (line.seq, dropped),
                (i, None),
                "none beyond while within the kept"
            );
        }
        let (line, dropped) = a.push(500, 500, RECHECK, "r".into());
        assert_eq!(
            (
                ActivityLine::key_name(&line.entity, line.seq),
                dropped.as_deref()
            ),
            (
                "eid:prod:helmChart:web/00000000000000000100".to_string(),
                Some("eid:prod:helmChart:web/00000000000000000000")
            )
        );
        assert_eq!((a.lines, a.last_recheck_ms), (101, Some(500)));
    }

    #[test]
    fn line_names_sort_by_seq_and_stay_under_their_entity() {
        let e = "eid:prod:helmChart:web";
        assert!(ActivityLine::key_name(e, 9) < ActivityLine::key_name(e, 10));
        assert!(ActivityLine::key_name(e, u64::MAX).starts_with(&ActivityLine::entity_prefix(e)));
        // An entity whose id extends another's (`web` and `web-2`) shares no line prefix.
        assert!(!ActivityLine::key_name("eid:prod:helmChart:web-2", 0)
            .starts_with(&ActivityLine::entity_prefix(e)));
    }

    #[test]
    fn a_v1_record_splits_into_its_head_and_numbered_lines() {
        let entry = |t: TimestampMs, kind: &str| ActivityEntryV1 {
            time_ms: t,
            index: t as u64 + 1,
            kind: kind.into(),
            message: format!("m{t}"),
        };
        let v1 = ActivityV1 {
            entity: "eid:prod:helmChart:web".into(),
            entries: VecDeque::from([entry(1, RECHECK), entry(2, RECHECK), entry(3, "plan")]),
            last_decision: Some("f".into()),
            blocked_since_ms: Some(1),
            blocked_candidate: Some("c".into()),
        };
        let (head, lines) = v1.split();
        assert_eq!(
            head,
            Activity {
                entity: "eid:prod:helmChart:web".into(),
                lines: 3,
                last_decision: Some("f".into()),
                blocked_since_ms: Some(1),
                blocked_candidate: Some("c".into()),
                last_recheck_ms: Some(2),
            }
        );
        let seqs: Vec<(u64, TimestampMs, u64, &str)> = lines
            .iter()
            .map(|l| (l.seq, l.time_ms, l.index, l.kind.as_str()))
            .collect();
        assert_eq!(
            seqs,
            [(0, 1, 2, RECHECK), (1, 2, 3, RECHECK), (2, 3, 4, "plan")]
        );
        assert!(lines.iter().all(|l| l.entity == head.entity));
    }
}

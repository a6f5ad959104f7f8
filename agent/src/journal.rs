//! The agent's local journal: which tasks of which plans have run, and the reports the hub
//! has not acknowledged yet. An agent killed at any point resumes from it: a finished task
//! never runs again, a task that was running runs again with the next attempt number
//! (drivers make tasks idempotent), and unacknowledged reports are sent again (the hub counts
//! each once).
//!
//! Two files in the data directory, as a write-ahead log and its checkpoint:
//! - `journal.wal`: one line per change, appended and `fdatasync`ed before the change is
//!   acted on (a task runs, a report is sent). A line is `<crc32 in 8 hex digits> <JSON>`,
//!   the JSON a [`WalRecord`] with a sequence number one above the line before it.
//! - `journal.json`: the whole [`Journal`] as of sequence number [`Journal::seq`], written
//!   atomically (temp file, fsync, rename, fsync of the directory) when the log has grown by
//!   [`COMPACT_RECORDS`] lines or [`COMPACT_BYTES`] and at every start; the log is then
//!   truncated.
//!
//! A change costs one append and one `fdatasync` whatever the journal holds (rewriting the
//! whole file cost two fsyncs, a rename and a write of every finished plan id, up to
//! 10,000 of them). Reading at start: the checkpoint, then every line above its sequence
//! number, in order. A torn last line (a crash mid-append) is cut off; a damaged line with
//! intact lines after it, or a gap in the numbers, is corruption and refused, not reset (a
//! crash cannot cause either: appends are synced in order). A crash between a checkpoint
//! and the truncation leaves lines the checkpoint already holds, which are skipped.
//!
//! Secret values are never written here.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::driver::process::layout::read_limited;
use crate::plan::TaskFailure;

/// Largest journal or log read at start (both stay far smaller; a larger file is refused,
/// not buffered).
pub const MAX_JOURNAL_BYTES: u64 = 256 << 20;

/// Lines appended to the log after which it is folded into the checkpoint.
pub const COMPACT_RECORDS: u64 = 4096;

/// Log size after which it is folded into the checkpoint (task outputs make lines long).
pub const COMPACT_BYTES: u64 = 8 << 20;

/// The checkpoint's file name in the data directory.
const CHECKPOINT_FILE: &str = "journal.json";

/// The log's file name in the data directory.
pub const WAL_FILE: &str = "journal.wal";

/// Plans remembered as finished, so a plan the hub still lists (its final report in flight)
/// is not run again.
const FINISHED_KEPT: usize = 10_000;

/// Why the journal could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// I/O on the journal file.
    #[error("journal {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The file is not a journal.
    #[error("journal {path} is corrupt: {reason}")]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: Damage,
    },
}

/// What is wrong with a journal file. Each message carries its cause, which is not also
/// returned as `source()`: the journal's error ends the agent's start, whose report lists
/// every `source()` and would print the cause twice.
#[derive(Debug, thiserror::Error)]
pub enum Damage {
    /// The checkpoint is not a journal's JSON, or the journal or a record could not be
    /// written as JSON.
    #[error("{0}")]
    Json(serde_json::Error),
    /// The data directory belongs to another environment.
    #[error("this data directory belongs to environment {found:?}, not {expected:?}")]
    OtherEnvironment {
        /// The checkpoint's environment.
        found: String,
        /// The environment this agent serves.
        expected: String,
    },
    /// A log line is not a record, and records follow it (not a torn end).
    #[error("line {number}: {reason}, with intact lines after it")]
    DamagedLine {
        /// The line's number (from 1).
        number: usize,
        /// Why it is not a record.
        reason: LineDamage,
    },
    /// The log's records skip numbers.
    #[error("record {seq} follows record {previous}: records are missing")]
    Gap {
        /// The record read.
        seq: u64,
        /// The last record before it.
        previous: u64,
    },
    /// A record of the log cannot be applied.
    #[error("record {seq}: {reason}")]
    Replay {
        /// The record.
        seq: u64,
        /// Why.
        reason: Overacknowledged,
    },
    /// A change just written cannot be applied.
    #[error("{0}")]
    Apply(Overacknowledged),
}

/// Why one log line is not a record.
#[derive(Debug, thiserror::Error)]
pub enum LineDamage {
    /// The line does not start with a checksum and a space.
    #[error("no checksum")]
    NoChecksum,
    /// The checksum is not 8 hex digits.
    #[error("an unreadable checksum")]
    UnreadableChecksum,
    /// The checksum is not the JSON's.
    #[error("checksum mismatch")]
    ChecksumMismatch,
    /// The JSON is not a record.
    #[error("{0}")]
    Json(serde_json::Error),
}

/// An acknowledgement of more reports than are queued (only a damaged log holds one).
#[derive(Debug, thiserror::Error)]
#[error("acknowledges {reports} reports, {queued} are queued")]
pub struct Overacknowledged {
    /// Reports acknowledged.
    pub reports: usize,
    /// Reports queued.
    pub queued: usize,
}

/// Where one task is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TaskRecord {
    /// Started with this attempt number; not known to have finished.
    Running {
        /// Attempt number (1, 2, …).
        attempt: u32,
    },
    /// Finished well.
    Succeeded {
        /// Attempt number.
        attempt: u32,
    },
    /// Finished badly.
    Failed {
        /// Attempt number.
        attempt: u32,
        /// What failed.
        failure: TaskFailure,
    },
}

impl TaskRecord {
    /// The attempt number.
    pub fn attempt(&self) -> u32 {
        match self {
            TaskRecord::Running { attempt }
            | TaskRecord::Succeeded { attempt }
            | TaskRecord::Failed { attempt, .. } => *attempt,
        }
    }
}

/// The state a task report gives: stored as `running`, `succeeded` or `failed` (the
/// journal's format since before it was typed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReportedState {
    /// The task started.
    Running,
    /// It finished well.
    Succeeded,
    /// It finished badly.
    Failed,
}

impl ReportedState {
    /// Lower-case name (also part of the report's idempotency key).
    pub fn as_str(self) -> &'static str {
        match self {
            ReportedState::Running => "running",
            ReportedState::Succeeded => "succeeded",
            ReportedState::Failed => "failed",
        }
    }

    /// The hub's task state.
    pub fn task_state(self) -> hub_wire::plan_state::TaskState {
        match self {
            ReportedState::Running => hub_wire::plan_state::TaskState::Running,
            ReportedState::Succeeded => hub_wire::plan_state::TaskState::Succeeded,
            ReportedState::Failed => hub_wire::plan_state::TaskState::Failed,
        }
    }
}

/// A report the hub has not acknowledged yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingReport {
    /// The plan.
    pub plan_id: String,
    /// The task.
    pub task: String,
    /// The attempt.
    pub attempt: u32,
    /// What the task did.
    pub state: ReportedState,
    /// Output to append to the plan.
    pub output: String,
    /// On failure.
    pub failure: Option<TaskFailure>,
}

impl PendingReport {
    /// The idempotency key the hub deduplicates on.
    pub fn request_id(&self) -> String {
        format!(
            "task:{}:{}:{}:{}",
            self.plan_id,
            self.task,
            self.attempt,
            self.state.as_str()
        )
    }
}

/// The journal's contents (the checkpoint file holds them whole).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Format version.
    pub version: u32,
    /// The environment this data directory belongs to.
    pub environment: String,
    /// The last log line this holds (0: none; journals from before the log have none).
    #[serde(default)]
    pub seq: u64,
    /// plan id -> task name -> record, for plans not finished.
    pub plans: BTreeMap<String, BTreeMap<String, TaskRecord>>,
    /// Plans finished (all tasks succeeded, or one failed), oldest first.
    pub finished: VecDeque<String>,
    /// Reports to send, in order.
    pub outbox: VecDeque<PendingReport>,
}

/// One change of the journal, as the log holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Change {
    /// A task's record is set and its report queued ([`JournalFile::record`]).
    Task {
        /// The plan.
        plan: String,
        /// The task.
        task: String,
        /// Where it is.
        record: TaskRecord,
        /// Output for its report.
        output: String,
    },
    /// A plan finished ([`JournalFile::finish`]).
    Finish {
        /// The plan.
        plan: String,
    },
    /// A plan never finished here was dropped ([`JournalFile::abandon`]).
    Abandon {
        /// The plan.
        plan: String,
    },
    /// The oldest reports were acknowledged ([`JournalFile::acknowledge_many`]).
    Acknowledge {
        /// How many, from the front of the outbox.
        reports: usize,
    },
}

/// One line of the log: a change and its sequence number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalRecord {
    /// One above the line before it (the first after a checkpoint: one above its `seq`).
    pub seq: u64,
    /// What changed.
    pub change: Change,
}

impl Journal {
    /// Applies `change`; `finished` is the index of [`Journal::finished`]. An acknowledgement
    /// of more reports than are queued is refused (only a damaged log holds one).
    fn apply(
        &mut self,
        finished: &mut HashSet<String>,
        change: Change,
    ) -> Result<(), Overacknowledged> {
        match change {
            Change::Task {
                plan,
                task,
                record,
                output,
            } => {
                let (state, failure) = match &record {
                    TaskRecord::Running { .. } => (ReportedState::Running, None),
                    TaskRecord::Succeeded { .. } => (ReportedState::Succeeded, None),
                    TaskRecord::Failed { failure, .. } => {
                        (ReportedState::Failed, Some(failure.clone()))
                    }
                };
                self.outbox.push_back(PendingReport {
                    plan_id: plan.clone(),
                    task: task.clone(),
                    attempt: record.attempt(),
                    state,
                    output,
                    failure,
                });
                self.plans.entry(plan).or_default().insert(task, record);
            }
            Change::Finish { plan } => {
                self.plans.remove(&plan);
                if finished.insert(plan.clone()) {
                    self.finished.push_back(plan);
                    while self.finished.len() > FINISHED_KEPT {
                        if let Some(old) = self.finished.pop_front() {
                            finished.remove(&old);
                        }
                    }
                }
            }
            Change::Abandon { plan } => {
                self.plans.remove(&plan);
            }
            Change::Acknowledge { reports } => {
                if reports > self.outbox.len() {
                    return Err(Overacknowledged {
                        reports,
                        queued: self.outbox.len(),
                    });
                }
                self.outbox.drain(..reports);
            }
        }
        Ok(())
    }
}

/// The open log.
struct Wal {
    path: PathBuf,
    /// Opened for appending.
    file: File,
    /// Bytes of whole lines in it.
    len: u64,
    /// Lines in it.
    lines: u64,
    /// Lines after which it is folded ([`COMPACT_RECORDS`]; tests lower it).
    fold_lines: u64,
}

/// The journal and where it lives.
pub struct JournalFile {
    /// The checkpoint.
    path: PathBuf,
    journal: Journal,
    /// Index of `journal.finished`, so the fetch loop's check is not a scan.
    finished: HashSet<String>,
    wal: Wal,
}

/// A log line for `record` (CRC-32 of the JSON, space, the JSON, newline).
fn encode_line(record: &WalRecord) -> Result<Vec<u8>, serde_json::Error> {
    let json = serde_json::to_vec(record)?;
    let mut line = format!("{:08x} ", crc32fast::hash(&json)).into_bytes();
    line.extend_from_slice(&json);
    line.push(b'\n');
    Ok(line)
}

/// The record of one log line (without its newline), or why it is not one.
fn decode_line(line: &[u8]) -> Result<WalRecord, LineDamage> {
    let (crc, json) = match line.split_first_chunk::<9>() {
        Some((head, json)) if head[8] == b' ' => (&head[..8], json),
        _ => return Err(LineDamage::NoChecksum),
    };
    let crc = std::str::from_utf8(crc)
        .ok()
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or(LineDamage::UnreadableChecksum)?;
    if crc32fast::hash(json) != crc {
        return Err(LineDamage::ChecksumMismatch);
    }
    serde_json::from_slice(json).map_err(LineDamage::Json)
}

/// The whole lines of `bytes` that are log records, in order, and the length of the prefix
/// they take. A line that is not a record ends the log if nothing after it is one (the torn
/// end of an interrupted append); otherwise the log is damaged, and the error says where.
fn read_lines(bytes: &[u8]) -> Result<(Vec<WalRecord>, usize), Damage> {
    let mut records = Vec::new();
    let mut at = 0;
    let mut number = 0;
    while let Some(end) = bytes[at..].iter().position(|b| *b == b'\n') {
        number += 1;
        match decode_line(&bytes[at..at + end]) {
            Ok(record) => records.push(record),
            Err(reason) => {
                let rest = &bytes[at + end + 1..];
                let intact_after = rest
                    .split(|b| *b == b'\n')
                    .any(|line| decode_line(line).is_ok());
                if intact_after {
                    return Err(Damage::DamagedLine { number, reason });
                }
                return Ok((records, at));
            }
        }
        at += end + 1;
    }
    Ok((records, at))
}

impl JournalFile {
    /// The data directory holding the journal.
    pub fn data_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// What the journal holds.
    pub fn journal(&self) -> &Journal {
        &self.journal
    }

    /// Opens (or creates) the journal of `data_dir` for `environment`: the checkpoint, then
    /// the log above it, then a new checkpoint holding both (so the log starts empty).
    /// Refuses a data directory of another environment, and a damaged checkpoint or log
    /// (leaving both as they are).
    pub fn open(data_dir: &Path, environment: &str) -> Result<Self, JournalError> {
        let path = data_dir.join(CHECKPOINT_FILE);
        let wal_path = data_dir.join(WAL_FILE);
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| JournalError::Io { path, source }
        };
        let corrupt = |path: &Path, reason: Damage| JournalError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        crate::driver::process::layout::create_private_dir(data_dir).map_err(io(data_dir))?;
        let mut journal = match read_limited(&path, MAX_JOURNAL_BYTES) {
            Ok(bytes) => {
                let j: Journal =
                    serde_json::from_slice(&bytes).map_err(|e| corrupt(&path, Damage::Json(e)))?;
                if j.environment != environment {
                    return Err(corrupt(
                        &path,
                        Damage::OtherEnvironment {
                            found: j.environment,
                            expected: environment.to_string(),
                        },
                    ));
                }
                j
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Journal {
                version: 1,
                environment: environment.to_string(),
                ..Default::default()
            },
            Err(e) => return Err(io(&path)(e)),
        };
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&wal_path)
            .map_err(io(&wal_path))?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io(&wal_path))?;
        // Bounded as the checkpoint is: a larger file is refused before it is buffered.
        let bytes = read_limited(&wal_path, MAX_JOURNAL_BYTES).map_err(io(&wal_path))?;
        let (records, intact) = read_lines(&bytes).map_err(|r| corrupt(&wal_path, r))?;
        let mut finished: HashSet<String> = journal.finished.iter().cloned().collect();
        for record in records {
            if record.seq <= journal.seq {
                // Already in the checkpoint (a crash came before the log's truncation).
                continue;
            }
            if record.seq != journal.seq + 1 {
                return Err(corrupt(
                    &wal_path,
                    Damage::Gap {
                        seq: record.seq,
                        previous: journal.seq,
                    },
                ));
            }
            journal
                .apply(&mut finished, record.change)
                .map_err(|reason| {
                    corrupt(
                        &wal_path,
                        Damage::Replay {
                            seq: record.seq,
                            reason,
                        },
                    )
                })?;
            journal.seq = record.seq;
        }
        let mut f = JournalFile {
            path,
            journal,
            finished,
            wal: Wal {
                path: wal_path,
                file,
                len: intact as u64,
                lines: 0,
                fold_lines: COMPACT_RECORDS,
            },
        };
        // The checkpoint holds everything now; the log (a torn end included) goes.
        f.save()?;
        Ok(f)
    }

    /// Writes the whole journal durably as the checkpoint and empties the log. Every change
    /// is durable without it ([`JournalFile::record`] and the others append to the log); it
    /// runs on its own when the log has grown ([`COMPACT_RECORDS`], [`COMPACT_BYTES`]).
    pub fn save(&mut self) -> Result<(), JournalError> {
        let bytes = serde_json::to_vec(&self.journal).map_err(|e| JournalError::Corrupt {
            path: self.path.clone(),
            reason: Damage::Json(e),
        })?;
        // Owner-only (SECURITY "At rest"): temp file 0600, fsync, rename, fsync of the dir.
        crate::driver::process::layout::write_atomic(&self.path, &bytes, 0o600).map_err(
            |source| JournalError::Io {
                path: self.path.clone(),
                source,
            },
        )?;
        // The checkpoint holds every line: a crash before the truncation is durable leaves
        // lines that the next start skips.
        let wal_io = |source| JournalError::Io {
            path: self.wal.path.clone(),
            source,
        };
        self.wal.file.set_len(0).map_err(wal_io)?;
        self.wal.file.sync_data().map_err(wal_io)?;
        self.wal.len = 0;
        self.wal.lines = 0;
        Ok(())
    }

    /// Applies `change` and appends it to the log durably; folds the log into the checkpoint
    /// when it has grown.
    fn change(&mut self, change: Change) -> Result<(), JournalError> {
        if let Change::Acknowledge { reports } = &change {
            // The callers acknowledge only reports they found queued: a log line that could
            // not be replayed must never be written.
            assert!(
                *reports <= self.journal.outbox.len(),
                "acknowledging {reports} of {} queued reports",
                self.journal.outbox.len()
            );
        }
        let record = WalRecord {
            seq: self.journal.seq + 1,
            change,
        };
        let line = encode_line(&record).map_err(|e| JournalError::Corrupt {
            path: self.wal.path.clone(),
            reason: Damage::Json(e),
        })?;
        let wal_io = |source| JournalError::Io {
            path: self.wal.path.clone(),
            source,
        };
        if let Err(e) = self
            .wal
            .file
            .write_all(&line)
            .and_then(|()| self.wal.file.sync_data())
        {
            // A partial line must not stay in front of the next one (that would read as
            // damage): cut back to the last whole line. The change is not made.
            let _ = self.wal.file.set_len(self.wal.len);
            return Err(wal_io(e));
        }
        self.wal.len += line.len() as u64;
        self.wal.lines += 1;
        self.journal.seq = record.seq;
        self.journal
            .apply(&mut self.finished, record.change)
            .map_err(|reason| JournalError::Corrupt {
                path: self.wal.path.clone(),
                reason: Damage::Apply(reason),
            })?;
        if self.wal.lines >= self.wal.fold_lines || self.wal.len >= COMPACT_BYTES {
            if let Err(e) = self.save() {
                // The change is durable in the log; the fold is tried again at the next one.
                tracing::warn!(error = %e, "journal: cannot fold the log into the checkpoint");
            }
        }
        Ok(())
    }

    /// Whether `plan` has finished here.
    pub fn is_finished(&self, plan: &str) -> bool {
        self.finished.contains(plan)
    }

    /// The record of one task.
    pub fn task(&self, plan: &str, task: &str) -> Option<&TaskRecord> {
        self.journal.plans.get(plan).and_then(|t| t.get(task))
    }

    /// Records a task state and queues its report, durably.
    pub fn record(
        &mut self,
        plan: &str,
        task: &str,
        record: TaskRecord,
        output: String,
    ) -> Result<(), JournalError> {
        self.change(Change::Task {
            plan: plan.to_string(),
            task: task.to_string(),
            record,
            output,
        })
    }

    /// Marks a plan finished (its task records are dropped; its reports stay queued).
    pub fn finish(&mut self, plan: &str) -> Result<(), JournalError> {
        self.change(Change::Finish {
            plan: plan.to_string(),
        })
    }

    /// Forgets a plan the hub no longer lists and that never finished here (cancelled).
    pub fn abandon(&mut self, plan: &str) -> Result<(), JournalError> {
        if self.journal.plans.contains_key(plan) {
            self.change(Change::Abandon {
                plan: plan.to_string(),
            })?;
        }
        Ok(())
    }

    /// The oldest unacknowledged report.
    pub fn next_report(&self) -> Option<&PendingReport> {
        self.journal.outbox.front()
    }

    /// The oldest `max` unacknowledged reports, in order.
    pub fn next_reports(&self, max: usize) -> Vec<PendingReport> {
        self.journal.outbox.iter().take(max).cloned().collect()
    }

    /// Drops the oldest reports once the hub acknowledged them (they must still be first).
    pub fn acknowledge_many(&mut self, reports: &[PendingReport]) -> Result<(), JournalError> {
        let matches = self.journal.outbox.len() >= reports.len()
            && self.journal.outbox.iter().zip(reports).all(|(a, b)| a == b);
        if matches && !reports.is_empty() {
            self.change(Change::Acknowledge {
                reports: reports.len(),
            })?;
        }
        Ok(())
    }

    /// Drops the oldest report once the hub acknowledged it.
    pub fn acknowledge(&mut self, report: &PendingReport) -> Result<(), JournalError> {
        self.acknowledge_many(std::slice::from_ref(report))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_data_directory_journal_and_execution_log_are_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        let tmp = tempfile::tempdir().unwrap();
        let data = tmp.path().join("agent");
        // What an older release under umask 022 left behind.
        std::fs::create_dir(&data).unwrap();
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(data.join(crate::execlog::EXEC_LOG_FILE), b"").unwrap();
        std::fs::set_permissions(
            data.join(crate::execlog::EXEC_LOG_FILE),
            std::fs::Permissions::from_mode(0o644),
        )
        .unwrap();
        let mut j = JournalFile::open(&data, "prod").unwrap();
        j.save().unwrap();
        drop(crate::execlog::ExecLog::open(&data).unwrap());
        assert_eq!(mode(&data), 0o700);
        assert_eq!(mode(&data.join("journal.json")), 0o600);
        assert_eq!(mode(&data.join(WAL_FILE)), 0o600);
        assert_eq!(mode(&data.join(crate::execlog::EXEC_LOG_FILE)), 0o600);
    }

    #[test]
    fn survives_reopen_and_refuses_another_environment() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = JournalFile::open(dir.path(), "prod").unwrap();
        j.record(
            "p1",
            "fetch",
            TaskRecord::Running { attempt: 1 },
            String::new(),
        )
        .unwrap();
        j.record(
            "p1",
            "fetch",
            TaskRecord::Succeeded { attempt: 1 },
            "ok".into(),
        )
        .unwrap();
        drop(j);
        let mut j = JournalFile::open(dir.path(), "prod").unwrap();
        assert_eq!(
            j.task("p1", "fetch"),
            Some(&TaskRecord::Succeeded { attempt: 1 })
        );
        assert_eq!(j.journal().outbox.len(), 2);
        let first = j.next_report().unwrap().clone();
        assert_eq!(first.request_id(), "task:p1:fetch:1:running");
        j.acknowledge(&first).unwrap();
        j.finish("p1").unwrap();
        assert!(j.is_finished("p1"));
        assert!(j.task("p1", "fetch").is_none());
        let err = JournalFile::open(dir.path(), "staging").err().unwrap();
        assert!(
            err.to_string().contains("belongs to environment \"prod\""),
            "{err}"
        );
    }

    #[test]
    fn report_states_keep_the_names_older_journals_hold() {
        for s in [
            ReportedState::Running,
            ReportedState::Succeeded,
            ReportedState::Failed,
        ] {
            let json = format!("\"{}\"", s.as_str());
            assert_eq!(serde_json::to_string(&s).unwrap(), json);
            assert_eq!(serde_json::from_str::<ReportedState>(&json).unwrap(), s);
            assert_eq!(s.task_state().as_str(), s.as_str());
        }
        assert!(serde_json::from_str::<ReportedState>("\"pending\"").is_err());
    }

    #[test]
    fn a_corrupt_journal_is_refused_not_reset() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("journal.json"), b"{not json").unwrap();
        let err = JournalFile::open(dir.path(), "prod").err().unwrap();
        assert!(err.to_string().contains("corrupt"), "{err}");
        assert_eq!(
            std::fs::read(dir.path().join("journal.json")).unwrap(),
            b"{not json"
        );
    }

    /// A journal in `dir` after a run of changes of every kind, with the journal as it was
    /// after each change (the first: as opened).
    fn changed(dir: &Path) -> (JournalFile, Vec<Journal>) {
        let mut j = JournalFile::open(dir, "prod").unwrap();
        let mut after = vec![j.journal().clone()];
        let running = TaskRecord::Running { attempt: 1 };
        let done = TaskRecord::Succeeded { attempt: 1 };
        j.record("p1", "fetch", running.clone(), String::new())
            .unwrap();
        after.push(j.journal().clone());
        j.record("p1", "fetch", done.clone(), "fetched \"x\"\n".into())
            .unwrap();
        after.push(j.journal().clone());
        let first = j.next_reports(1);
        j.acknowledge_many(&first).unwrap();
        after.push(j.journal().clone());
        j.finish("p1").unwrap();
        after.push(j.journal().clone());
        j.record("p2", "start", running, String::new()).unwrap();
        after.push(j.journal().clone());
        j.abandon("p2").unwrap();
        after.push(j.journal().clone());
        let failure = TaskFailure::new("start", "exited with status 3");
        j.record(
            "p3",
            "start",
            TaskRecord::Failed {
                attempt: 2,
                failure,
            },
            "x".into(),
        )
        .unwrap();
        after.push(j.journal().clone());
        (j, after)
    }

    fn wal(dir: &Path) -> Vec<u8> {
        std::fs::read(dir.join(WAL_FILE)).unwrap()
    }

    /// [`changed`]'s files as a killed agent leaves them: the checkpoint as opened, the log
    /// of every change; and the journal after each change.
    fn killed() -> (Vec<u8>, Vec<u8>, Vec<Journal>) {
        let dir = tempfile::tempdir().unwrap();
        let (j, after) = changed(dir.path());
        drop(j);
        let checkpoint = std::fs::read(dir.path().join(CHECKPOINT_FILE)).unwrap();
        (checkpoint, wal(dir.path()), after)
    }

    #[test]
    fn every_prefix_of_the_log_reopens_as_the_changes_it_holds_whole() {
        let (checkpoint, log, after) = killed();
        assert_eq!(log.iter().filter(|b| **b == b'\n').count(), after.len() - 1);
        // A crash can leave any prefix of the log (an append cut anywhere).
        for cut in 0..=log.len() {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join(CHECKPOINT_FILE), &checkpoint).unwrap();
            std::fs::write(d.path().join(WAL_FILE), &log[..cut]).unwrap();
            let whole = log[..cut].iter().filter(|b| **b == b'\n').count();
            let mut j = JournalFile::open(d.path(), "prod").unwrap();
            let mut expected = after[whole].clone();
            expected.seq = whole as u64;
            assert_eq!(j.journal(), &expected, "cut at byte {cut}");
            // Folded into the checkpoint at open; the log goes on from there.
            assert!(wal(d.path()).is_empty());
            j.finish("p9").unwrap();
            assert_eq!(j.journal().seq, whole as u64 + 1);
            drop(j);
            let j = JournalFile::open(d.path(), "prod").unwrap();
            assert!(j.is_finished("p9"), "cut at byte {cut}");
        }
    }

    #[test]
    fn a_damaged_line_before_intact_ones_or_a_gap_is_refused_and_left_alone() {
        let (checkpoint, log, _) = killed();
        let lines: Vec<&[u8]> = log.split_inclusive(|b| *b == b'\n').collect();
        let refused = |bytes: Vec<u8>, says: &str| {
            let d = tempfile::tempdir().unwrap();
            std::fs::write(d.path().join(CHECKPOINT_FILE), &checkpoint).unwrap();
            std::fs::write(d.path().join(WAL_FILE), &bytes).unwrap();
            let err = JournalFile::open(d.path(), "prod").err().expect("refused");
            assert!(matches!(err, JournalError::Corrupt { .. }), "{err}");
            assert!(err.to_string().contains(says), "{err}");
            assert_eq!(wal(d.path()), bytes);
            assert_eq!(
                std::fs::read(d.path().join(CHECKPOINT_FILE)).unwrap(),
                checkpoint
            );
        };
        // One byte of the second line's JSON flipped.
        let mut flipped = log.clone();
        flipped[lines[0].len() + 20] ^= 0x01;
        refused(
            flipped,
            "line 2: checksum mismatch, with intact lines after it",
        );
        // The second line gone.
        let mut gap = lines[0].to_vec();
        for line in &lines[2..] {
            gap.extend_from_slice(line);
        }
        refused(gap, "record 3 follows record 1");
    }

    #[test]
    fn lines_the_checkpoint_already_holds_are_skipped() {
        // A crash after a checkpoint was written and before the log was truncated.
        let dir = tempfile::tempdir().unwrap();
        let (mut j, after) = changed(dir.path());
        let log = wal(dir.path());
        j.save().unwrap();
        drop(j);
        std::fs::write(dir.path().join(WAL_FILE), &log).unwrap();
        let j = JournalFile::open(dir.path(), "prod").unwrap();
        let mut expected = after.last().unwrap().clone();
        expected.seq = after.len() as u64 - 1;
        assert_eq!(j.journal(), &expected);
    }

    #[test]
    fn the_log_is_folded_into_the_checkpoint_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let mut j = JournalFile::open(dir.path(), "prod").unwrap();
        j.wal.fold_lines = 4;
        for i in 0..10 {
            j.finish(&format!("p{i}")).unwrap();
        }
        // Folded after the 4th and the 8th change.
        assert_eq!(wal(dir.path()).iter().filter(|b| **b == b'\n').count(), 2);
        let checkpoint: Journal =
            serde_json::from_slice(&std::fs::read(dir.path().join(CHECKPOINT_FILE)).unwrap())
                .unwrap();
        assert_eq!(checkpoint.seq, 8);
        let expected = j.journal().clone();
        drop(j);
        assert_eq!(
            JournalFile::open(dir.path(), "prod").unwrap().journal(),
            &expected
        );
    }

    #[test]
    fn a_journal_from_before_the_log_opens_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CHECKPOINT_FILE),
            br#"{"version":1,"environment":"prod","plans":{"p1":{"fetch":{"Running":{"attempt":1}}}},"finished":["p0"],"outbox":[]}"#,
        )
        .unwrap();
        let mut j = JournalFile::open(dir.path(), "prod").unwrap();
        assert!(j.is_finished("p0"));
        assert_eq!(
            j.task("p1", "fetch"),
            Some(&TaskRecord::Running { attempt: 1 })
        );
        j.finish("p1").unwrap();
        drop(j);
        assert!(JournalFile::open(dir.path(), "prod")
            .unwrap()
            .is_finished("p1"));
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        fn seeds() -> Vec<Vec<u8>> {
            vec![super::killed().1]
        }

        proptest! {
            #![proptest_config(hub_fuzz::config(500))]

            /// Whatever a log file holds, reading it ends in records or a refusal.
            #[test]
            fn log_bytes(bytes in hub_fuzz::mutated(seeds())) {
                hub_fuzz::within(std::time::Duration::from_secs(2), "journal log", || {
                    if let Ok((_, intact)) = read_lines(&bytes) {
                        assert!(intact <= bytes.len());
                    }
                });
            }
        }
    }
}

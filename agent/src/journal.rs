//! The agent's local journal (`DATA/journal.json`): which tasks of which plans have run, and
//! the reports the hub has not acknowledged yet. Written atomically (temp file, fsync,
//! rename, fsync of the directory) after every change, so an agent killed at any point
//! resumes: a finished task never runs again, a task that was running runs again with the
//! next attempt number (drivers make tasks idempotent), and unacknowledged reports are sent
//! again (the hub counts each once).
//!
//! Secret values are never written here.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::driver::process::layout::read_limited;
use crate::plan::TaskFailure;

/// Largest journal read at start (a journal rewritten after every task event stays far
/// smaller; a larger file is refused, not buffered).
pub const MAX_JOURNAL_BYTES: u64 = 256 << 20;

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
        reason: String,
    },
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
    pub fn task_state(self) -> hub_engine::plan::TaskState {
        match self {
            ReportedState::Running => hub_engine::plan::TaskState::Running,
            ReportedState::Succeeded => hub_engine::plan::TaskState::Succeeded,
            ReportedState::Failed => hub_engine::plan::TaskState::Failed,
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

/// The persisted journal.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Journal {
    /// Format version.
    pub version: u32,
    /// The environment this data directory belongs to.
    pub environment: String,
    /// plan id -> task name -> record, for plans not finished.
    pub plans: BTreeMap<String, BTreeMap<String, TaskRecord>>,
    /// Plans finished (all tasks succeeded, or one failed), oldest first.
    pub finished: VecDeque<String>,
    /// Reports to send, in order.
    pub outbox: VecDeque<PendingReport>,
}

/// The journal and where it lives.
pub struct JournalFile {
    path: PathBuf,
    /// The contents.
    pub journal: Journal,
    /// Index of `journal.finished`, so the fetch loop's check is not a scan.
    finished: std::collections::HashSet<String>,
}

impl JournalFile {
    /// The data directory holding the journal.
    pub fn data_dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// Opens (or creates) `DATA/journal.json` for `environment`; refuses a data directory of
    /// another environment.
    pub fn open(data_dir: &Path, environment: &str) -> Result<Self, JournalError> {
        let path = data_dir.join("journal.json");
        let io = |source| JournalError::Io {
            path: path.clone(),
            source,
        };
        crate::driver::process::layout::create_private_dir(data_dir).map_err(io)?;
        let journal = match read_limited(&path, MAX_JOURNAL_BYTES) {
            Ok(bytes) => {
                let j: Journal =
                    serde_json::from_slice(&bytes).map_err(|e| JournalError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    })?;
                if j.environment != environment {
                    return Err(JournalError::Corrupt {
                        path: path.clone(),
                        reason: format!(
                            "this data directory belongs to environment {:?}, not {environment:?}",
                            j.environment
                        ),
                    });
                }
                j
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Journal {
                version: 1,
                environment: environment.to_string(),
                ..Default::default()
            },
            Err(e) => return Err(io(e)),
        };
        let finished = journal.finished.iter().cloned().collect();
        let mut f = JournalFile {
            path,
            journal,
            finished,
        };
        f.save()?;
        Ok(f)
    }

    /// Writes the journal durably.
    pub fn save(&mut self) -> Result<(), JournalError> {
        let io = |source| JournalError::Io {
            path: self.path.clone(),
            source,
        };
        let bytes = serde_json::to_vec(&self.journal).map_err(|e| JournalError::Corrupt {
            path: self.path.clone(),
            reason: e.to_string(),
        })?;
        // Owner-only (SECURITY "At rest"): temp file 0600, fsync, rename, fsync of the dir.
        crate::driver::process::layout::write_atomic(&self.path, &bytes, 0o600).map_err(io)
    }

    /// Whether `plan` has finished here.
    pub fn is_finished(&self, plan: &str) -> bool {
        self.finished.contains(plan)
    }

    /// The record of one task.
    pub fn task(&self, plan: &str, task: &str) -> Option<&TaskRecord> {
        self.journal.plans.get(plan).and_then(|t| t.get(task))
    }

    /// Records a task state and queues its report; then saves.
    pub fn record(
        &mut self,
        plan: &str,
        task: &str,
        record: TaskRecord,
        output: String,
    ) -> Result<(), JournalError> {
        let (state, failure) = match &record {
            TaskRecord::Running { .. } => (ReportedState::Running, None),
            TaskRecord::Succeeded { .. } => (ReportedState::Succeeded, None),
            TaskRecord::Failed { failure, .. } => (ReportedState::Failed, Some(failure.clone())),
        };
        self.journal.outbox.push_back(PendingReport {
            plan_id: plan.to_string(),
            task: task.to_string(),
            attempt: record.attempt(),
            state,
            output,
            failure,
        });
        self.journal
            .plans
            .entry(plan.to_string())
            .or_default()
            .insert(task.to_string(), record);
        self.save()
    }

    /// Marks a plan finished (its task records are dropped; its reports stay queued).
    pub fn finish(&mut self, plan: &str) -> Result<(), JournalError> {
        self.journal.plans.remove(plan);
        if self.finished.insert(plan.to_string()) {
            self.journal.finished.push_back(plan.to_string());
            while self.journal.finished.len() > FINISHED_KEPT {
                if let Some(old) = self.journal.finished.pop_front() {
                    self.finished.remove(&old);
                }
            }
        }
        self.save()
    }

    /// Forgets a plan the hub no longer lists and that never finished here (cancelled).
    pub fn abandon(&mut self, plan: &str) -> Result<(), JournalError> {
        if self.journal.plans.remove(plan).is_some() {
            self.save()?;
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
            self.journal.outbox.drain(..reports.len());
            self.save()?;
        }
        Ok(())
    }

    /// Drops the oldest report once the hub acknowledged it.
    pub fn acknowledge(&mut self, report: &PendingReport) -> Result<(), JournalError> {
        if self.journal.outbox.front() == Some(report) {
            self.journal.outbox.pop_front();
            self.save()?;
        }
        Ok(())
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
        assert_eq!(j.journal.outbox.len(), 2);
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
}

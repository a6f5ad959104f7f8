//! The agent's execution log (`DATA/executions.jsonl`): one JSON line per task event, for
//! chaos runs and audits to check that every task ran at most once.
//!
//! ```text
//! {"plan":"p-12-0","entity":"eid:prod:helmChart:web","task":"start","attempt":1,"state":"started","at_ns":123}
//! ```
//!
//! `state` is `started`, `succeeded` or `failed`; `at_ns` is `CLOCK_MONOTONIC` in nanoseconds
//! (comparable between processes of one machine, not across reboots).
//!
//! Order and durability: the executor journals a task state first ([`crate::journal`]), then
//! appends its line here (write + `fdatasync`), both under the journal's lock. A `started` line
//! is written before the task runs, so every finished attempt has its `started` line. An
//! agent killed between the two writes leaves a journal record without its line: at start-up
//! [`ExecLog::reconcile`] appends the missing `succeeded`/`failed` line of every finished task
//! the journal still holds (stamped with the reconcile time). The executor writes a finish
//! line before it marks the plan finished (which drops the plan's task records), so after
//! reconciliation the log has a `succeeded` line exactly for the tasks the journal recorded
//! as succeeded. A torn last line (a crash mid-write) is cut off when the log is opened.
//!
//! The log grows by a line per task event for as long as the agent runs, so nothing reads it
//! whole: opening looks for the last newline from the end, and reconciliation streams the
//! lines, one at a time and at most [`MAX_LINE_BYTES`] each, keeping only those of the plans
//! the journal holds.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::journal::{Journal, TaskRecord};

/// The log's file name in the data directory.
pub const EXEC_LOG_FILE: &str = "executions.jsonl";

/// The longest line a reader of the log takes (newline excluded); a longer one is skipped.
/// The agent's own lines are far shorter: the hub bounds plan ids, entity ids and task names.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// How much of the file's end is read at a time when looking for its last newline.
const TAIL_CHUNK_BYTES: usize = 64 * 1024;

/// Why the execution log could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum ExecLogError {
    /// I/O on the log file.
    #[error("execution log {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// A task event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecState {
    /// The agent starts running the task (journaled as running).
    Started,
    /// The task finished well (journaled as succeeded).
    Succeeded,
    /// The task finished badly (journaled as failed).
    Failed,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecLine {
    /// The plan id.
    pub plan: String,
    /// The entity the plan acts on.
    pub entity: String,
    /// The task.
    pub task: String,
    /// The attempt number (1, 2, …).
    pub attempt: u32,
    /// What happened.
    pub state: ExecState,
    /// `CLOCK_MONOTONIC` nanoseconds when it was logged.
    pub at_ns: u64,
}

/// `CLOCK_MONOTONIC` now, in nanoseconds (what [`ExecLine::at_ns`] records).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own; CLOCK_MONOTONIC always exists
    // on Linux, so it cannot fail (a failure would leave zeros, which is harmless).
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// The open log.
pub struct ExecLog {
    path: PathBuf,
    file: std::fs::File,
}

impl ExecLog {
    /// Opens (or creates) `DATA/executions.jsonl`, cutting off a torn last line.
    pub fn open(data_dir: &Path) -> Result<Self, ExecLogError> {
        let path = data_dir.join(EXEC_LOG_FILE);
        let io = |source| ExecLogError::Io {
            path: path.clone(),
            source,
        };
        crate::driver::process::layout::create_private_dir(data_dir).map_err(io)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&path)
            .map_err(io)?;
        // A log an older release created under a loose umask is tightened too.
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        let keep = whole_lines_len(&file, len).map_err(io)?;
        if keep < len {
            file.set_len(keep).map_err(io)?;
            file.sync_data().map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        Ok(Self { path, file })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `line` durably (write, then `fdatasync`).
    pub fn append(&mut self, line: &ExecLine) -> Result<(), ExecLogError> {
        let io = |source| ExecLogError::Io {
            path: self.path.clone(),
            source,
        };
        // Serializing plain strings and integers cannot fail.
        let mut bytes = serde_json::to_vec(line).unwrap_or_default();
        bytes.push(b'\n');
        self.file.write_all(&bytes).map_err(io)?;
        self.file.sync_data().map_err(io)
    }

    /// Appends the finish line of every task `journal` records as succeeded or failed whose
    /// line is missing (an agent killed between the journal write and the log write); returns
    /// how many were appended. The entity comes from the attempt's `started` line.
    /// Only the lines of the plans `journal` holds are kept while the log is read.
    pub fn reconcile(&mut self, journal: &Journal) -> Result<usize, ExecLogError> {
        let mut lines = Vec::new();
        let read = std::fs::File::open(&self.path).and_then(|file| {
            for_each_line(std::io::BufReader::new(file), |line| {
                if journal.plans.contains_key(line.plan.as_str()) {
                    lines.push(line);
                }
            })
        });
        read.map_err(|source| ExecLogError::Io {
            path: self.path.clone(),
            source,
        })?;
        let logged: HashSet<(&str, &str, u32, ExecState)> = lines
            .iter()
            .map(|l| (l.plan.as_str(), l.task.as_str(), l.attempt, l.state))
            .collect();
        let entities: HashMap<&str, &str> = lines
            .iter()
            .map(|l| (l.plan.as_str(), l.entity.as_str()))
            .collect();
        let mut missing = Vec::new();
        for (plan, tasks) in &journal.plans {
            for (task, record) in tasks {
                let state = match record {
                    TaskRecord::Running { .. } => continue,
                    TaskRecord::Succeeded { .. } => ExecState::Succeeded,
                    TaskRecord::Failed { .. } => ExecState::Failed,
                };
                let attempt = record.attempt();
                if logged.contains(&(plan.as_str(), task.as_str(), attempt, state)) {
                    continue;
                }
                missing.push(ExecLine {
                    plan: plan.clone(),
                    entity: entities
                        .get(plan.as_str())
                        .copied()
                        .unwrap_or("")
                        .to_string(),
                    task: task.clone(),
                    attempt,
                    state,
                    at_ns: monotonic_ns(),
                });
            }
        }
        for line in &missing {
            self.append(line)?;
        }
        Ok(missing.len())
    }
}

/// Every complete, well-formed line of the log at `path` (a missing file has none; a torn,
/// foreign or overlong line is skipped). For audits of a whole run: the result holds every
/// line, so it is as large as the file.
pub fn read_lines(path: &Path) -> std::io::Result<Vec<ExecLine>> {
    let file = match std::fs::File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut lines = Vec::new();
    for_each_line(std::io::BufReader::new(file), |line| lines.push(line))?;
    Ok(lines)
}

/// Calls `each` with every complete, well-formed line `reader` yields, in order, holding one
/// line of at most [`MAX_LINE_BYTES`] at a time. A longer line is skipped (read past, not
/// held), as is a line that is not an [`ExecLine`] and a last line without its newline.
fn for_each_line(mut reader: impl BufRead, mut each: impl FnMut(ExecLine)) -> std::io::Result<()> {
    let mut line = Vec::with_capacity(256);
    loop {
        line.clear();
        let limit = MAX_LINE_BYTES as u64 + 1;
        let n = (&mut reader).take(limit).read_until(b'\n', &mut line)?;
        if n == 0 {
            return Ok(());
        }
        if let Some((b'\n', text)) = line.split_last() {
            if let Ok(parsed) = serde_json::from_slice(text) {
                each(parsed);
            }
            continue;
        }
        if n <= MAX_LINE_BYTES {
            // The end of the file came first: a torn last line.
            return Ok(());
        }
        // Overlong: skip to the byte after its newline.
        loop {
            let buf = reader.fill_buf()?;
            if buf.is_empty() {
                return Ok(());
            }
            match buf.iter().position(|b| *b == b'\n') {
                Some(i) => {
                    reader.consume(i + 1);
                    break;
                }
                None => {
                    let all = buf.len();
                    reader.consume(all);
                }
            }
        }
    }
}

/// The length of `file`'s first `len` bytes up to and including their last newline (0 when
/// there is none): what is left once a torn last line is cut. Reads backwards from the end,
/// [`TAIL_CHUNK_BYTES`] at a time.
fn whole_lines_len(file: &std::fs::File, len: u64) -> std::io::Result<u64> {
    let mut chunk = vec![0u8; TAIL_CHUNK_BYTES];
    let mut end = len;
    while end > 0 {
        let start = end.saturating_sub(TAIL_CHUNK_BYTES as u64);
        // `end - start` is at most TAIL_CHUNK_BYTES, so the cast cannot truncate.
        let part = &mut chunk[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(i) = part.iter().rposition(|b| *b == b'\n') {
            return Ok(start + i as u64 + 1);
        }
        end = start;
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::JournalFile;

    fn line(plan: &str, task: &str, attempt: u32, state: ExecState) -> ExecLine {
        ExecLine {
            plan: plan.into(),
            entity: "eid:prod:helmChart:web".into(),
            task: task.into(),
            attempt,
            state,
            at_ns: monotonic_ns(),
        }
    }

    /// Appends `bytes` to the file at `path` as they are (a crash's torn write, or garbage).
    fn append_raw(path: &Path, bytes: &[u8]) {
        let mut f = std::fs::OpenOptions::new().append(true).open(path).unwrap();
        f.write_all(bytes).unwrap();
    }

    #[test]
    fn lines_round_trip_in_the_documented_format() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = ExecLog::open(dir.path()).unwrap();
        let a = line("p-1-0", "fetch", 1, ExecState::Started);
        let b = line("p-1-0", "fetch", 1, ExecState::Succeeded);
        log.append(&a).unwrap();
        log.append(&b).unwrap();
        assert!(b.at_ns >= a.at_ns, "monotonic");
        let text = std::fs::read_to_string(dir.path().join(EXEC_LOG_FILE)).unwrap();
        let first: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
        assert_eq!(first["state"], "started");
        assert_eq!(first["attempt"], 1);
        assert_eq!(first["entity"], "eid:prod:helmChart:web");
        assert!(first["at_ns"].as_u64().unwrap() > 0);
        assert_eq!(read_lines(log.path()).unwrap(), vec![a, b]);
    }

    #[test]
    fn a_torn_last_line_is_cut_off_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = ExecLog::open(dir.path()).unwrap();
        let a = line("p-1-0", "fetch", 1, ExecState::Started);
        log.append(&a).unwrap();
        drop(log);
        let path = dir.path().join(EXEC_LOG_FILE);
        append_raw(&path, br#"{"plan":"p-1-0","ent"#);
        let mut log = ExecLog::open(dir.path()).unwrap();
        let b = line("p-1-0", "fetch", 1, ExecState::Succeeded);
        log.append(&b).unwrap();
        assert_eq!(read_lines(&path).unwrap(), vec![a, b]);
    }

    #[test]
    fn a_torn_tail_longer_than_a_read_chunk_is_cut_off_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = ExecLog::open(dir.path()).unwrap();
        let a = line("p-1-0", "fetch", 1, ExecState::Started);
        log.append(&a).unwrap();
        drop(log);
        let path = dir.path().join(EXEC_LOG_FILE);
        let whole = std::fs::metadata(&path).unwrap().len();
        append_raw(&path, &vec![b'x'; 3 * TAIL_CHUNK_BYTES + 17]);
        let mut log = ExecLog::open(dir.path()).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
        let b = line("p-1-0", "fetch", 1, ExecState::Succeeded);
        log.append(&b).unwrap();
        assert_eq!(read_lines(&path).unwrap(), vec![a, b]);

        // A file that is one torn line is emptied.
        std::fs::write(&path, vec![b'y'; TAIL_CHUNK_BYTES + 1]).unwrap();
        drop(ExecLog::open(dir.path()).unwrap());
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    }

    #[test]
    fn a_line_over_the_bound_is_skipped_and_the_lines_after_it_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(EXEC_LOG_FILE);
        let a = line("p-1-0", "fetch", 1, ExecState::Started);
        // A well-formed line of exactly the bound is read; one byte more is not.
        let sized = |bytes: usize| {
            let mut l = line("p-1-0", "big", 1, ExecState::Started);
            l.entity.clear();
            let bare = serde_json::to_vec(&l).unwrap().len();
            l.entity = "e".repeat(bytes - bare);
            let text = serde_json::to_vec(&l).unwrap();
            assert_eq!(text.len(), bytes);
            (l, text)
        };
        let (at_bound, at_bound_text) = sized(MAX_LINE_BYTES);
        let (_, over_text) = sized(MAX_LINE_BYTES + 1);
        let b = line("p-1-0", "fetch", 1, ExecState::Succeeded);
        let mut bytes = Vec::new();
        for text in [
            serde_json::to_vec(&a).unwrap(),
            at_bound_text,
            over_text,
            vec![b'z'; 5 * MAX_LINE_BYTES],
            b"not json".to_vec(),
            serde_json::to_vec(&b).unwrap(),
        ] {
            bytes.extend(text);
            bytes.push(b'\n');
        }
        std::fs::write(&path, bytes).unwrap();
        assert_eq!(read_lines(&path).unwrap(), vec![a, at_bound, b]);
    }

    #[test]
    fn reconcile_appends_the_finish_a_crash_left_out_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let mut journal = JournalFile::open(dir.path(), "prod").unwrap();
        let mut log = ExecLog::open(dir.path()).unwrap();
        // fetch: journaled and logged in full. start: journaled succeeded, then the agent
        // died before the log line. readiness: running (no finish to add). p-2: failed, logged.
        for (plan, task, rec) in [
            ("p-1-0", "fetch", TaskRecord::Running { attempt: 1 }),
            ("p-1-0", "fetch", TaskRecord::Succeeded { attempt: 1 }),
            ("p-1-0", "start", TaskRecord::Running { attempt: 2 }),
        ] {
            journal
                .record(plan, task, rec.clone(), String::new())
                .unwrap();
            let state = match rec {
                TaskRecord::Running { .. } => ExecState::Started,
                _ => ExecState::Succeeded,
            };
            log.append(&line(plan, task, rec.attempt(), state)).unwrap();
        }
        journal
            .record(
                "p-1-0",
                "start",
                TaskRecord::Succeeded { attempt: 2 },
                String::new(),
            )
            .unwrap();
        // (crash: no succeeded line for start)
        journal
            .record(
                "p-1-0",
                "readiness",
                TaskRecord::Running { attempt: 1 },
                String::new(),
            )
            .unwrap();
        log.append(&line("p-1-0", "readiness", 1, ExecState::Started))
            .unwrap();
        drop((journal, log));

        // Restart: the journal survived, the log is reconciled with it.
        let journal = JournalFile::open(dir.path(), "prod").unwrap();
        let mut log = ExecLog::open(dir.path()).unwrap();
        assert_eq!(log.reconcile(journal.journal()).unwrap(), 1);
        let lines = read_lines(log.path()).unwrap();
        let last = lines.last().unwrap();
        assert_eq!(
            (
                last.plan.as_str(),
                last.task.as_str(),
                last.attempt,
                last.state
            ),
            ("p-1-0", "start", 2, ExecState::Succeeded)
        );
        assert_eq!(
            last.entity, "eid:prod:helmChart:web",
            "from the started line"
        );
        // Every succeeded record has exactly one succeeded line; a second reconcile adds none.
        assert_eq!(log.reconcile(journal.journal()).unwrap(), 0);
        let succeeded = |task: &str| {
            read_lines(log.path())
                .unwrap()
                .iter()
                .filter(|l| l.task == task && l.state == ExecState::Succeeded)
                .count()
        };
        assert_eq!((succeeded("fetch"), succeeded("start")), (1, 1));
        assert_eq!(succeeded("readiness"), 0);
    }
}

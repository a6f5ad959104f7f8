//! `hub-bench journal`: what journaling a task step costs an agent, on the file system of a
//! given directory. The journal appends each change to its log with one `fdatasync`
//! ([`hub_agent::journal`]); before the log, every change rewrote the whole journal (temp
//! file, fsync, rename, fsync of the directory), whose size grows with the finished plans it
//! remembers (up to 10,000). Both are measured on the same changes: per step, a task's
//! record and the acknowledgement of its report.

use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use hub_agent::journal::{Journal, JournalFile, TaskRecord};

/// One measured design at one journal size.
#[derive(Debug, Clone)]
pub struct Row {
    /// `log` (now) or `rewrite` (before the log).
    pub design: &'static str,
    /// Finished plans the journal remembers.
    pub finished: usize,
    /// Changes made (two per step).
    pub changes: usize,
    /// Time per change.
    pub per_change: Duration,
}

/// Measures `steps` task steps with each journal size of `finished`, in fresh directories
/// under `dir`.
pub fn run(dir: &Path, steps: usize, finished: &[usize]) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    for &held in finished {
        let log = tempfile::tempdir_in(dir).with_context(|| format!("{}", dir.display()))?;
        let mut journal = seeded(log.path(), held)?;
        let started = Instant::now();
        steps_on(&mut journal, steps, |_| Ok(()))?;
        rows.push(Row {
            design: "log",
            finished: held,
            changes: steps * 2,
            per_change: started.elapsed() / (steps * 2) as u32,
        });
        // The same changes, applied in memory (a journal on tmpfs when there is one), and the
        // whole journal written to `dir` after each, as every change did before the log.
        let scratch = if Path::new("/dev/shm").is_dir() {
            tempfile::tempdir_in("/dev/shm")?
        } else {
            tempfile::tempdir()?
        };
        let rewrite = tempfile::tempdir_in(dir)?;
        let mut journal = seeded(scratch.path(), held)?;
        let mut spent = Duration::ZERO;
        steps_on(&mut journal, steps, |j| {
            let t = Instant::now();
            rewrite_whole(rewrite.path(), j.journal())?;
            spent += t.elapsed();
            Ok(())
        })?;
        rows.push(Row {
            design: "rewrite",
            finished: held,
            changes: steps * 2,
            per_change: spent / (steps * 2) as u32,
        });
    }
    Ok(rows)
}

/// A journal in `dir` that remembers `finished` finished plans.
fn seeded(dir: &Path, finished: usize) -> anyhow::Result<JournalFile> {
    let journal = Journal {
        version: 1,
        environment: "bench".into(),
        finished: (0..finished).map(|i| format!("p-{i}-0")).collect(),
        ..Default::default()
    };
    std::fs::write(dir.join("journal.json"), serde_json::to_vec(&journal)?)?;
    Ok(JournalFile::open(dir, "bench")?)
}

/// `steps` task steps (a record, then its report's acknowledgement), calling `after` after
/// each change.
fn steps_on(
    journal: &mut JournalFile,
    steps: usize,
    mut after: impl FnMut(&JournalFile) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for i in 0..steps {
        let plan = format!("p-{}-0", 1_000_000 + i / 10);
        let record = if i % 2 == 0 {
            TaskRecord::Running { attempt: 1 }
        } else {
            TaskRecord::Succeeded { attempt: 1 }
        };
        journal.record(
            &plan,
            &format!("task-{}", i % 10 / 2),
            record,
            String::new(),
        )?;
        after(journal)?;
        let reports = journal.next_reports(1);
        journal.acknowledge_many(&reports)?;
        after(journal)?;
    }
    Ok(())
}

/// What every change cost before the log: the whole journal to a temp file, fsync, rename
/// over the journal, fsync of the directory.
fn rewrite_whole(dir: &Path, journal: &Journal) -> anyhow::Result<()> {
    let bytes = serde_json::to_vec(journal)?;
    let tmp = dir.join("journal.json.tmp");
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, dir.join("journal.json"))?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

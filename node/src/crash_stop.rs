//! Crash-stop on a storage failure: when Raft stops because its store failed (a write, a
//! sync, a full disk), the node process exits at once instead of serving on.
//!
//! Why exit rather than retry. After a failed `fsync` the kernel may already have dropped
//! the dirty pages it could not write and cleared the error ("fsyncgate"): a second `fsync`
//! can then succeed although the data is gone, so a node that retries could acknowledge
//! what it never stored. The store never retries a failed sync (its flusher stays failed),
//! openraft stops its core on the error, and this watcher turns that stop into an exit with
//! [`STORAGE_FAILED_EXIT`]. A supervisor restarts the node; start-up recovers from what
//! the log holds durably, and the rest of the cluster fills in what it lacks. A disk that
//! is still full makes start-up or the first write fail again, so the node does not come
//! back until space is freed. etcd stops the same way when its WAL cannot be written.
//!
//! The exit skips destructors on purpose: nothing more is flushed after a failed sync.

use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::Fatal;

use raft_store::TypeConfig;

/// The exit status of a node stopped by a storage failure (sysexits' `EX_IOERR`).
pub const STORAGE_FAILED_EXIT: i32 = 74;

/// The exit status of a node whose Raft core panicked (sysexits' `EX_SOFTWARE`).
pub const RAFT_PANICKED_EXIT: i32 = 70;

/// What a stopped Raft core means for the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Raft runs, or stopped because the node is shutting down: nothing to do.
    Running,
    /// Exit with this status after logging `reason`.
    Exit {
        /// The process exit status.
        status: i32,
        /// Why, for the log.
        reason: String,
    },
}

/// The verdict for Raft's running state.
pub fn verdict(running: &Result<(), Fatal<TypeConfig>>) -> Verdict {
    match running {
        Ok(()) | Err(Fatal::Stopped) => Verdict::Running,
        Err(Fatal::StorageError(e)) => Verdict::Exit {
            status: STORAGE_FAILED_EXIT,
            reason: format!("storage failed: {e}"),
        },
        Err(Fatal::Panicked) => Verdict::Exit {
            status: RAFT_PANICKED_EXIT,
            reason: "the Raft core panicked".into(),
        },
    }
}

/// Spawns the watcher: it exits the process when `raft` stops on a storage failure or a
/// panic of its core.
pub fn watch(raft: &raft_store::Raft) {
    let mut rx = raft.metrics();
    tokio::spawn(async move {
        loop {
            let v = verdict(&rx.borrow_watched().running_state);
            if let Verdict::Exit { status, reason } = v {
                tracing::error!(
                    status,
                    "{reason}; stopping the node now (it recovers from its log when restarted)"
                );
                eprintln!("Error: {reason}; the node stopped (exit {status})");
                std::process::exit(status);
            }
            if rx.changed().await.is_err() {
                // The core is gone and its last state was read above.
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_storage_failure_exits_with_ex_ioerr_and_a_shutdown_does_not() {
        assert_eq!(verdict(&Ok(())), Verdict::Running);
        assert_eq!(verdict(&Err(Fatal::Stopped)), Verdict::Running);
        let io = openraft::StorageError::<TypeConfig>::from_io_error(
            openraft::ErrorSubject::Logs,
            openraft::ErrorVerb::Write,
            std::io::Error::other("sync log: No space left on device"),
        );
        match verdict(&Err(Fatal::StorageError(io))) {
            Verdict::Exit { status, reason } => {
                assert_eq!(status, STORAGE_FAILED_EXIT);
                assert!(reason.contains("No space left on device"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            verdict(&Err(Fatal::Panicked)),
            Verdict::Exit {
                status: RAFT_PANICKED_EXIT,
                ..
            }
        ));
    }
}

//! Group commit: one thread syncs the write-ahead log for every append waiting on it.
//!
//! `append` writes entries into RocksDB (unsynced, so they are readable at once) and hands
//! its completion callback here. The thread takes every callback queued so far, syncs the
//! WAL once, and only then tells openraft the entries are durable. Many concurrent appends
//! share one fsync.

use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::thread;

use openraft::storage::IOFlushed;
use rocksdb::DB;

use crate::types::TypeConfig;

/// Handle to the flusher thread; the thread ends when the last handle is dropped.
#[derive(Clone)]
pub(crate) struct Flusher {
    tx: mpsc::Sender<IOFlushed<TypeConfig>>,
}

impl Flusher {
    pub(crate) fn start(db: Arc<DB>) -> Self {
        let (tx, rx) = mpsc::channel::<IOFlushed<TypeConfig>>();
        thread::Builder::new()
            .name("raft-log-flusher".into())
            .spawn({
                // Weak: the database closes when the stores are dropped, not when this
                // thread notices.
                let db = Arc::downgrade(&db);
                move || run(db, rx)
            })
            // Spawning fails only when the OS is out of threads: the node cannot run then.
            .expect("spawn the log flusher thread");
        Flusher { tx }
    }

    /// Queues `callback` to be completed after the next WAL sync. Must be called after the
    /// entries were written to RocksDB.
    pub(crate) fn flush_then(&self, callback: IOFlushed<TypeConfig>) {
        if let Err(mpsc::SendError(callback)) = self.tx.send(callback) {
            callback.io_completed(Err(std::io::Error::other("log flusher stopped")));
        }
    }
}

fn run(db: Weak<DB>, rx: mpsc::Receiver<IOFlushed<TypeConfig>>) {
    let mut batch = Vec::new();
    // The first failed sync, kept: a failed sync is never retried (after one, the kernel may
    // have dropped the pages and a retry can succeed without them), so every later waiter
    // fails with it too; hub-node's `crash_stop` then stops the process.
    let mut failed: Option<String> = None;
    while let Ok(first) = rx.recv() {
        batch.push(first);
        while let Ok(more) = rx.try_recv() {
            batch.push(more);
        }
        let result = match (&failed, db.upgrade()) {
            (Some(e), _) => Err(e.clone()),
            (None, Some(db)) => db.flush_wal(true).map_err(|e| e.to_string()),
            (None, None) => Err("database closed".to_string()),
        };
        if let Err(e) = &result {
            if failed.is_none() {
                tracing::error!(error = %e, "syncing the log failed; no later sync is tried");
                failed = Some(e.clone());
            }
        }
        tracing::trace!(waiters = batch.len(), "log synced");
        for callback in batch.drain(..) {
            let r = match &result {
                Ok(()) => Ok(()),
                Err(e) => Err(std::io::Error::other(format!("sync log: {e}"))),
            };
            callback.io_completed(r);
        }
    }
}

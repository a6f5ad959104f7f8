//! The Raft log and vote on RocksDB ([`openraft::storage::RaftLogStorage`]).

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex, PoisonError};

use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::{LogState, OptionalSend, RaftLogReader};
use rocksdb::{ColumnFamily, Direction, IteratorMode, WriteBatch, WriteOptions, DB};

use crate::codec::{self, Limit};
use crate::error::io_err;
use crate::flusher::Flusher;
use crate::store::{CF_LOG, CF_META};
use crate::types::{Entry, LogId, TypeConfig, Vote};

const KEY_VOTE: &[u8] = b"vote";
const KEY_LAST_PURGED: &[u8] = b"last_purged";
const KEY_COMMITTED: &[u8] = b"committed";

/// The log store. Cheap to clone; clones share the database, the flusher and the committed
/// log id not yet written.
#[derive(Clone)]
pub struct LogStore {
    db: Arc<DB>,
    flusher: Flusher,
    /// The committed log id openraft last saved, when it is newer than the stored one: it is
    /// written with the next append's batch ([`RaftLogStorage::save_committed`] below).
    unwritten_committed: Arc<Mutex<Option<Option<LogId>>>>,
}

fn index_key(index: u64) -> [u8; 8] {
    index.to_be_bytes()
}

fn synced() -> WriteOptions {
    let mut w = WriteOptions::default();
    w.set_sync(true);
    w
}

impl LogStore {
    pub(crate) fn new(db: Arc<DB>, flusher: Flusher) -> Self {
        Self {
            db,
            flusher,
            unwritten_committed: Arc::default(),
        }
    }

    /// The committed log id waiting for the next append, taken out. A poisoned lock still
    /// holds a whole `Option`: nothing is written to it but by assignment.
    fn take_unwritten_committed(&self) -> Option<Option<LogId>> {
        self.unwritten_committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn cf(&self, name: &str) -> &ColumnFamily {
        // The column families are created in `open`, so they always exist.
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    fn get_meta<T: serde::de::DeserializeOwned>(&self, key: &[u8]) -> io::Result<Option<T>> {
        match self.db.get_cf(self.cf(CF_META), key).map_err(io_err)? {
            None => Ok(None),
            Some(bytes) => codec::decode_bounded(&bytes, Limit::Command)
                .map(Some)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e)),
        }
    }

    /// The durable vote, for tests and diagnostics.
    pub fn vote(&self) -> io::Result<Option<Vote>> {
        self.get_meta(KEY_VOTE)
    }
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, io::Error> {
        let start = match range.start_bound() {
            Bound::Included(x) => *x,
            Bound::Excluded(x) => x.saturating_add(1),
            Bound::Unbounded => 0,
        };
        let mut entries = Vec::new();
        let from = index_key(start);
        let iter = self.db.iterator_cf(
            self.cf(CF_LOG),
            IteratorMode::From(&from, Direction::Forward),
        );
        for item in iter {
            let (key, value) = item.map_err(io_err)?;
            let index = u64::from_be_bytes(key.as_ref().try_into().map_err(|_| {
                io::Error::new(io::ErrorKind::InvalidData, "log key is not 8 bytes")
            })?);
            if !range.contains(&index) {
                break;
            }
            let entry: Entry = codec::decode_bounded(&value, Limit::Message)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            // A corrupt store is an error for openraft to report, never a panic.
            if entry.index() != index {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("log entry {} stored under index {index}", entry.index()),
                ));
            }
            entries.push(entry);
        }
        Ok(entries)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, io::Error> {
        self.get_meta(KEY_VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged: Option<LogId> = self.get_meta(KEY_LAST_PURGED)?;
        let last = match self
            .db
            .iterator_cf(self.cf(CF_LOG), IteratorMode::End)
            .next()
        {
            None => None,
            Some(item) => {
                let (_, value) = item.map_err(io_err)?;
                let entry: Entry = codec::decode_bounded(&value, Limit::Message)
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                Some(entry.log_id())
            }
        };
        Ok(LogState {
            last_log_id: last.or(last_purged),
            last_purged_log_id: last_purged,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), io::Error> {
        // Synced before returning: a vote forgotten in a crash allows a double vote.
        self.db
            .put_cf_opt(self.cf(CF_META), KEY_VOTE, codec::encode(vote), &synced())
            .map_err(io_err)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), io::Error> {
        // Kept, and written with the next append's batch rather than now: openraft calls this
        // between a commit and its apply, so a write of its own would delay every reply by a
        // RocksDB write on the leader. The stored id may then lag by the entries committed
        // since the last append, which after a restart only means less is re-applied before
        // a leader confirms the rest (openraft takes an id older than the applied one as the
        // applied one). It lets a restarted node re-apply its committed entries at once,
        // without waiting for a leader; the state machine's applied id covers the rest.
        *self
            .unwritten_committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(committed);
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, io::Error> {
        let unwritten = *self
            .unwritten_committed
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match unwritten {
            Some(committed) => Ok(committed),
            None => Ok(self.get_meta::<Option<LogId>>(KEY_COMMITTED)?.flatten()),
        }
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::default();
        if let Some(committed) = self.take_unwritten_committed() {
            batch.put_cf(self.cf(CF_META), KEY_COMMITTED, codec::encode(&committed));
        }
        for entry in entries {
            batch.put_cf(
                self.cf(CF_LOG),
                index_key(entry.index()),
                codec::encode(&entry),
            );
        }
        // Written now so the entries are readable when this returns; durable only once the
        // flusher has synced the WAL, and only then is openraft told.
        self.db.write(batch).map_err(io_err)?;
        self.flusher.flush_then(callback);
        Ok(())
    }

    async fn truncate_after(&mut self, last_log_id: Option<LogId>) -> Result<(), io::Error> {
        let from = last_log_id.map(|id| id.index() + 1).unwrap_or(0);
        let mut batch = WriteBatch::default();
        batch.delete_range_cf(self.cf(CF_LOG), index_key(from), index_key(u64::MAX));
        // Rare (only on conflicts); synced so a crash cannot resurrect the removed suffix.
        self.db.write_opt(batch, &synced()).map_err(io_err)
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), io::Error> {
        // `last_purged` and the deletion go in one batch: the log never looks shorter than
        // `last_purged` says. Not synced: losing a purge in a crash only keeps extra entries.
        let mut batch = WriteBatch::default();
        batch.put_cf(self.cf(CF_META), KEY_LAST_PURGED, codec::encode(&log_id));
        batch.delete_range_cf(self.cf(CF_LOG), index_key(0), index_key(log_id.index() + 1));
        self.db.write(batch).map_err(io_err)
    }
}

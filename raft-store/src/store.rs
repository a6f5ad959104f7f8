//! The open RocksDB instance the log and the state machine share, and its column families
//! (listed in the crate's documentation).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use rocksdb::{ColumnFamily, DB};
use serde::{Deserialize, Serialize};

use crate::error::StoreError;

/// The Raft log: big-endian index → entry.
pub(crate) const CF_LOG: &str = "log";
/// Vote, last purged log id, committed log id.
pub(crate) const CF_META: &str = "meta";
/// The state machine's records, when [`RecordSlot::Sm`] is active.
pub(crate) const CF_SM: &str = "sm";
/// The state machine's records, when [`RecordSlot::SmB`] is active.
pub(crate) const CF_SM_B: &str = "sm_b";
/// Last applied log id, membership, and which records family is active.
pub(crate) const CF_SM_META: &str = "sm_meta";

/// `sm_meta`: the last log id applied.
pub(crate) const KEY_LAST_APPLIED: &[u8] = b"last_applied";
/// `sm_meta`: the last membership applied.
pub(crate) const KEY_MEMBERSHIP: &[u8] = b"membership";
/// `sm_meta`: the active records family ([`RecordSlot`]).
pub(crate) const KEY_RECORD_SLOT: &[u8] = b"record_slot";

/// Which of the two column families holds the state machine's records. The other one is
/// where an install stages a snapshot's records before one synced write makes it the
/// active one (`crate::install`). `sm_meta` names the active family; a store that names
/// none is of a release before the second family, whose records are in `sm`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum RecordSlot {
    /// The `sm` family.
    #[default]
    Sm,
    /// The `sm_b` family.
    SmB,
}

impl RecordSlot {
    /// The column family's name.
    pub(crate) fn family_name(self) -> &'static str {
        match self {
            RecordSlot::Sm => CF_SM,
            RecordSlot::SmB => CF_SM_B,
        }
    }

    /// The other slot.
    pub(crate) fn other(self) -> RecordSlot {
        match self {
            RecordSlot::Sm => RecordSlot::SmB,
            RecordSlot::SmB => RecordSlot::Sm,
        }
    }
}

/// An open store: the RocksDB handle and the data directory.
#[derive(Clone)]
pub struct Store {
    pub(crate) db: Arc<DB>,
    pub(crate) dir: PathBuf,
    /// Whether [`RecordSlot::SmB`] is the active records family. Changed only while the
    /// state's write lock is held, right after the write that made it so is synced; so a
    /// reader holding the state's read guard reads the records family of that state.
    slot_b: Arc<AtomicBool>,
    /// Held while an install stages a snapshot or switches to it (`crate::install`): the
    /// number of stagings begun, so a switch can tell that its staged records were not
    /// overwritten by a later staging.
    pub(crate) stagings: Arc<std::sync::Mutex<u64>>,
}

impl Store {
    /// A store on the open database `db` in `dir`, with `sm` active until
    /// [`Store::set_slot`] says otherwise.
    pub(crate) fn new(db: DB, dir: &Path) -> Self {
        Store {
            db: Arc::new(db),
            dir: dir.to_path_buf(),
            slot_b: Arc::default(),
            stagings: Arc::default(),
        }
    }

    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The active records family.
    pub(crate) fn slot(&self) -> RecordSlot {
        if self.slot_b.load(Ordering::Acquire) {
            RecordSlot::SmB
        } else {
            RecordSlot::Sm
        }
    }

    /// Makes `slot` the active records family in memory: only once `sm_meta` durably says
    /// so, and with the state's write lock held.
    pub(crate) fn set_slot(&self, slot: RecordSlot) {
        self.slot_b
            .store(slot == RecordSlot::SmB, Ordering::Release);
    }

    /// A column family of this store by name.
    pub(crate) fn family(&self, name: &str) -> &ColumnFamily {
        // Every family is created when the database is opened (`db::open`), so it exists.
        self.db
            .cf_handle(name)
            .expect("column family created at open")
    }

    /// The state machine's column families: its active records ([`Store::slot`]) and its
    /// meta ([`CF_SM_META`]).
    pub(crate) fn sm_families(&self) -> (&ColumnFamily, &ColumnFamily) {
        (
            self.family(self.slot().family_name()),
            self.family(CF_SM_META),
        )
    }

    /// A RocksDB error of this store, naming its directory.
    pub(crate) fn rocks_error(&self, cause: rocksdb::Error) -> StoreError {
        StoreError::Rocks {
            path: self.dir.clone(),
            cause,
        }
    }
}

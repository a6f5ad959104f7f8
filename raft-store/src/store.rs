//! The open RocksDB instance the log and the state machine share, and its column families
//! (listed in the crate's documentation).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rocksdb::{ColumnFamily, DB};

use crate::error::StoreError;

/// The Raft log: big-endian index → entry.
pub(crate) const CF_LOG: &str = "log";
/// Vote, last purged log id, committed log id.
pub(crate) const CF_META: &str = "meta";
/// The state machine's records.
pub(crate) const CF_SM: &str = "sm";
/// Last applied log id and membership.
pub(crate) const CF_SM_META: &str = "sm_meta";

/// An open store: the RocksDB handle and the data directory.
#[derive(Clone)]
pub struct Store {
    pub(crate) db: Arc<DB>,
    pub(crate) dir: PathBuf,
}

impl Store {
    /// The data directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The state machine's column families: its records ([`CF_SM`]) and its meta
    /// ([`CF_SM_META`]).
    pub(crate) fn sm_families(&self) -> (&ColumnFamily, &ColumnFamily) {
        // Both are created when the database is opened (`db::open`), so they exist.
        let family = |name| {
            self.db
                .cf_handle(name)
                .expect("column family created at open")
        };
        (family(CF_SM), family(CF_SM_META))
    }

    /// A RocksDB error of this store, naming its directory.
    pub(crate) fn rocks_error(&self, cause: rocksdb::Error) -> StoreError {
        StoreError::Rocks {
            path: self.dir.clone(),
            cause,
        }
    }
}

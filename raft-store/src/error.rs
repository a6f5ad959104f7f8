//! Errors opening or using the store.

use std::path::PathBuf;

/// Why the store could not be opened or used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB failed.
    #[error("rocksdb at {path}: {source}")]
    Rocks {
        /// The database directory.
        path: PathBuf,
        /// The error.
        source: rocksdb::Error,
    },
    /// A stored value could not be decoded.
    #[error("corrupt value in {what}: {source}")]
    Corrupt {
        /// Which value.
        what: String,
        /// Why.
        source: crate::codec::CodecError,
    },
    /// Filesystem error outside RocksDB (snapshots).
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The data directory belongs to another node or cluster.
    #[error("{0}")]
    IdentityMismatch(String),
}

pub(crate) fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

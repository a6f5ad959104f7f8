//! Errors opening or using the store.

use std::path::PathBuf;

/// Why the store could not be opened or used. Each message carries its cause (one line in a
/// log), so the cause is not also returned as `source()`: `{:#}` would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// RocksDB failed.
    #[error("rocksdb at {path}: {cause}")]
    Rocks {
        /// The database directory.
        path: PathBuf,
        /// The error.
        cause: rocksdb::Error,
    },
    /// A stored value could not be decoded.
    #[error("corrupt value in {what}: {cause}")]
    Corrupt {
        /// Which value.
        what: String,
        /// Why.
        cause: crate::codec::CodecError,
    },
    /// Filesystem error outside RocksDB (snapshots).
    #[error("{path}: {cause}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The error.
        cause: std::io::Error,
    },
    /// The data directory belongs to another node or cluster.
    #[error("{0}")]
    IdentityMismatch(String),
    /// The replicated state runs at a feature level this binary does not apply: a newer
    /// release wrote it.
    #[error(
        "the cluster's state is at feature level {cluster}; this binary applies at most \
         {supported}: run a release that has level {cluster} (downgrades are not supported)"
    )]
    NewerFeatureLevel {
        /// The state's level.
        cluster: hub_engine::feature_level::FeatureLevel,
        /// This binary's.
        supported: hub_engine::feature_level::FeatureLevel,
    },
}

pub(crate) fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::other(e.to_string())
}

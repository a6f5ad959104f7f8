//! Snapshot files: the whole state, written to a temporary file, synced, renamed into place,
//! and the directory synced, so a crash leaves either the old or the new snapshot.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use hub_engine::Record;
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::StoreError;
use crate::types::{LogId, SnapshotMeta, StoredMembership};

/// The content of a snapshot file (behind the codec's format version).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SnapshotFile {
    pub(crate) last_applied: Option<LogId>,
    pub(crate) membership: StoredMembership,
    pub(crate) records: Vec<Record>,
}

impl SnapshotFile {
    pub(crate) fn meta(&self) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
        }
    }
}

pub(crate) fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("snapshots").join("current.snap")
}

/// Writes `bytes` to `path` so that after a crash the file is either absent/old or complete.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let io = |p: &Path| {
        let p = p.to_path_buf();
        move |cause| StoreError::Io { path: p, cause }
    };
    let parent = path.parent().unwrap_or(Path::new("."));
    crate::private::create_private_dir(parent).map_err(io(parent))?;
    let tmp = path.with_extension("tmp");
    {
        // A leftover temp file keeps its old mode through truncation: remove it first.
        match fs::remove_file(&tmp) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(io(&tmp)(e)),
            _ => {}
        }
        let mut f = crate::private::create_private_file(&tmp).map_err(io(&tmp))?;
        f.write_all(bytes).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io(path))?;
    File::open(parent)
        .and_then(|d| d.sync_all())
        .map_err(io(parent))?;
    Ok(())
}

/// Reads the whole file at `path` if it has at most `max` bytes; a longer file is an
/// `InvalidData` error before anything is buffered (a file, like the network, may be hostile).
pub(crate) fn read_limited(path: &Path, max: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let file = File::open(path)?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

/// Reads and decodes the current snapshot file, if there is one.
pub(crate) fn read_current(dir: &Path) -> Result<Option<(SnapshotFile, Vec<u8>)>, StoreError> {
    let path = snapshot_path(dir);
    let bytes = match read_limited(&path, codec::MAX_SNAPSHOT_BYTES) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(cause) => return Err(StoreError::Io { path, cause }),
    };
    let file = codec::decode_bounded(&bytes, codec::Limit::Snapshot).map_err(|cause| {
        StoreError::Corrupt {
            what: path.display().to_string(),
            cause,
        }
    })?;
    Ok(Some((file, bytes)))
}

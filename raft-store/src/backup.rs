//! Backups: the replicated state of a live node as one file an operator keeps away from the
//! cluster (`hubctl snapshot save`), and the restore that seeds the first node of a new
//! cluster from one (`hubctl snapshot restore`).
//!
//! A backup is read from a RocksDB snapshot of the store, as a Raft snapshot is
//! ([`crate::snapshot`]): apply goes on while it is written, and it holds the state after one
//! applied, so committed, entry. It is streamed, never held whole in memory. Its bytes:
//!
//! | bytes | what |
//! |---|---|
//! | 8 | [`MAGIC`] |
//! | 4 | the header's length, big-endian, at most [`MAX_HEADER_BYTES`] |
//! | n | the header, JSON ([`BackupHeader`]) |
//! | … | a snapshot file ([`crate::snapshot`]): format byte, last applied id, membership, the records' count, the records |
//! | 32 | SHA-256 of every byte before it |
//!
//! A restore checks the whole file before it touches anything, refuses a directory that
//! holds files, installs the snapshot with a membership of the one new node, and compares
//! the digest of what it installed with the header's.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use openraft::storage::{RaftLogStorage, RaftStateMachine};
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};

use crate::codec;
use crate::db::NodeIdentity;
use crate::digest::DigestFreshness;
use crate::error::StoreError;
use crate::snapshot_data::{create_file, SnapshotData};
use crate::state_machine::{families_at, stored_meta, StateMachine};
use crate::types::{LogId, Node, NodeId, SnapshotMeta, StoredMembership, Vote};

/// The first bytes of every backup file.
pub const MAGIC: &[u8; 8] = b"HUBSNAP\n";

/// The framing version this release writes and reads ([`BackupHeader::backup_format`]).
pub const BACKUP_FORMAT: u32 = 1;

/// Largest header a backup may declare: a header is a few hundred bytes plus the
/// membership's addresses; anything near this is not a backup of ours.
pub const MAX_HEADER_BYTES: u32 = 1 << 20;

/// Length of the checksum at the end of the file.
const CHECKSUM_BYTES: u64 = 32;

/// The buffer of a backup's reader and writer.
const BUFFER_BYTES: usize = 1 << 20;

/// What a backup says about itself: where and when it was taken, and of what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BackupHeader {
    /// The framing version ([`BACKUP_FORMAT`]).
    pub backup_format: u32,
    /// The format version of the stored records and the snapshot inside
    /// ([`codec::FORMAT_VERSION`]).
    pub store_format: u8,
    /// The cluster it was taken from.
    pub cluster_id: String,
    /// The node that served it.
    pub node_id: NodeId,
    /// That node's release.
    pub node_version: String,
    /// When it was taken, in milliseconds since the Unix epoch (the serving node's clock).
    pub created_ms: i64,
    /// The last applied (committed) entry the state is at.
    pub last_log_id: LogId,
    /// The membership of the cluster at that entry.
    pub membership: StoredMembership,
    /// Stored records (state and history).
    pub records: u64,
    /// The state digest at that entry, as `hubctl cluster status` shows it.
    pub digest: String,
}

impl BackupHeader {
    /// The index of the last applied entry.
    pub fn index(&self) -> u64 {
        self.last_log_id.index
    }

    /// The term of the last applied entry.
    pub fn term(&self) -> u64 {
        self.last_log_id.leader_id.term
    }
}

/// Who takes a backup: the fields of its header the store does not know.
#[derive(Debug, Clone)]
pub struct BackupOrigin {
    /// The cluster id.
    pub cluster_id: String,
    /// The serving node.
    pub node_id: NodeId,
    /// The serving node's release.
    pub node_version: String,
    /// Now, in milliseconds since the Unix epoch.
    pub created_ms: i64,
}

/// Why a backup could not be written, read or restored.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// Reading or writing a file failed.
    #[error("{path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        cause: io::Error,
    },
    /// The bytes are not a backup this release reads.
    #[error("{path}: {why}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong, in words an operator can act on.
        why: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The restore's target is not fit.
    #[error("{0}")]
    Refused(String),
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> BackupError + '_ {
    move |cause| BackupError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

fn invalid(path: &Path, why: impl Into<String>) -> BackupError {
    BackupError::Invalid {
        path: path.to_path_buf(),
        why: why.into(),
    }
}

/// A writer that hashes what passes through it.
struct Hashing<W> {
    inner: W,
    hasher: Sha256,
}

impl<W: Write> Write for Hashing<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a backup of what `sm` has applied to `out` (blocking I/O: call it off the async
/// runtime). Apply is not held up: the records come from one RocksDB snapshot, read twice
/// (the count and digest first, as the header states them before the records).
pub fn write_backup(
    sm: &StateMachine,
    origin: BackupOrigin,
    out: impl Write,
) -> Result<BackupHeader, BackupError> {
    let store = sm.store();
    let rocks = |cause| store.rocks_error(cause);
    let view = store.db.snapshot();
    let (cf_sm, cf_meta) = families_at(store, &view)?;
    let (last_applied, membership) = stored_meta(store, &view, cf_meta)?;
    let last_log_id = last_applied
        .ok_or_else(|| BackupError::Refused("this node has applied no entry yet".into()))?;
    let mut records = 0u64;
    let mut digest = hub_engine::StateDigest::new();
    for item in view.iterator_cf(cf_sm, rocksdb::IteratorMode::Start) {
        let (key, value) = item.map_err(rocks)?;
        let body = codec::stored_body(&value).map_err(|cause| StoreError::Corrupt {
            what: "state record".into(),
            cause,
        })?;
        digest.add(&key, body);
        records += 1;
    }
    let header = BackupHeader {
        backup_format: BACKUP_FORMAT,
        store_format: codec::FORMAT_VERSION,
        cluster_id: origin.cluster_id,
        node_id: origin.node_id,
        node_version: origin.node_version,
        created_ms: origin.created_ms,
        last_log_id,
        membership: membership.clone(),
        records,
        digest: digest.finish(),
    };
    let stream = Path::new("the backup stream");
    let mut out = Hashing {
        inner: BufWriter::with_capacity(BUFFER_BYTES, out),
        hasher: Sha256::new(),
    };
    let json = serde_json::to_vec(&header).map_err(|e| io_at(stream)(io::Error::other(e)))?;
    let len = u32::try_from(json.len())
        .ok()
        .filter(|len| *len <= MAX_HEADER_BYTES)
        .ok_or_else(|| invalid(stream, "the header is larger than a backup may hold"))?;
    out.write_all(MAGIC).map_err(io_at(stream))?;
    out.write_all(&len.to_be_bytes()).map_err(io_at(stream))?;
    out.write_all(&json).map_err(io_at(stream))?;
    let stored = view
        .iterator_cf(cf_sm, rocksdb::IteratorMode::Start)
        .map(|item| item.map(|(_, value)| value).map_err(rocks));
    crate::snapshot::write_stored(
        &mut out,
        stream,
        &Some(last_log_id),
        &membership,
        records,
        stored,
    )?;
    let checksum = out.hasher.finalize();
    let mut inner = out.inner;
    inner.write_all(&checksum).map_err(io_at(stream))?;
    inner.flush().map_err(io_at(stream))?;
    Ok(header)
}

/// A backup file whose framing, format and checksum were verified.
#[derive(Debug)]
pub struct BackupFile {
    path: PathBuf,
    header: BackupHeader,
    /// Where the snapshot inside starts, and its length.
    snapshot_at: u64,
    snapshot_len: u64,
}

impl BackupFile {
    /// Opens and verifies the backup at `path`: its magic, header, format versions and the
    /// checksum over the whole file (read once, streamed).
    pub fn open(path: &Path) -> Result<Self, BackupError> {
        let mut file = File::open(path).map_err(io_at(path))?;
        let len = file.metadata().map_err(io_at(path))?.len();
        let mut prefix = [0u8; 12];
        file.read_exact(&mut prefix).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => invalid(path, "too short to be a hub backup"),
            _ => io_at(path)(e),
        })?;
        if &prefix[..8] != MAGIC {
            return Err(invalid(
                path,
                "not a hub backup (it does not start as `hubctl snapshot save` writes)",
            ));
        }
        let header_len = u32::from_be_bytes([prefix[8], prefix[9], prefix[10], prefix[11]]);
        if header_len > MAX_HEADER_BYTES {
            return Err(invalid(
                path,
                format!("declares a header of {header_len} bytes, more than {MAX_HEADER_BYTES}"),
            ));
        }
        let snapshot_at = 12 + u64::from(header_len);
        let snapshot_len = len
            .checked_sub(snapshot_at + CHECKSUM_BYTES)
            .filter(|n| *n > 0)
            .ok_or_else(|| invalid(path, format!("truncated: {len} bytes")))?;
        let mut json = vec![0u8; header_len as usize];
        file.read_exact(&mut json).map_err(io_at(path))?;
        // The checksum first: a damaged file is called damaged, whatever byte was hit.
        verify_checksum(path, &mut file, len)?;
        let header: BackupHeader = serde_json::from_slice(&json)
            .map_err(|e| invalid(path, format!("unreadable header: {e}")))?;
        if header.backup_format != BACKUP_FORMAT || header.store_format != codec::FORMAT_VERSION {
            return Err(invalid(
                path,
                format!(
                    "a backup of framing {} and store format {}; this release reads framing \
                     {BACKUP_FORMAT} and store format {}",
                    header.backup_format,
                    header.store_format,
                    codec::FORMAT_VERSION
                ),
            ));
        }
        if snapshot_len > codec::MAX_SNAPSHOT_FILE_BYTES {
            return Err(invalid(
                path,
                format!(
                    "holds a snapshot of {snapshot_len} bytes, more than a node accepts ({})",
                    codec::MAX_SNAPSHOT_FILE_BYTES
                ),
            ));
        }
        Ok(Self {
            path: path.to_path_buf(),
            header,
            snapshot_at,
            snapshot_len,
        })
    }

    /// The verified header.
    pub fn header(&self) -> &BackupHeader {
        &self.header
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.snapshot_at + self.snapshot_len + CHECKSUM_BYTES
    }

    /// Never true of a verified backup (it holds a snapshot).
    pub fn is_empty(&self) -> bool {
        false
    }
}

/// Checks the last 32 bytes of `file` (of `len` bytes) against the SHA-256 of the rest.
fn verify_checksum(path: &Path, file: &mut File, len: u64) -> Result<(), BackupError> {
    file.seek(SeekFrom::Start(0)).map_err(io_at(path))?;
    let mut hasher = Sha256::new();
    let body = len - CHECKSUM_BYTES;
    let mut reader = BufReader::with_capacity(BUFFER_BYTES, &mut *file).take(body);
    io::copy(&mut reader, &mut HashSink(&mut hasher)).map_err(io_at(path))?;
    let mut stored = [0u8; CHECKSUM_BYTES as usize];
    file.seek(SeekFrom::Start(body)).map_err(io_at(path))?;
    file.read_exact(&mut stored).map_err(io_at(path))?;
    if hasher.finalize().as_slice() != stored {
        return Err(invalid(
            path,
            "checksum mismatch: the file is damaged or incomplete",
        ));
    }
    Ok(())
}

/// A sink that only hashes.
struct HashSink<'a>(&'a mut Sha256);

impl Write for HashSink<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The first node of a cluster restored from a backup.
#[derive(Debug, Clone)]
pub struct RestoreTarget {
    /// Its data directory: absent or empty.
    pub data_dir: PathBuf,
    /// Its node id.
    pub node_id: NodeId,
    /// The new cluster's id: not the backup's.
    pub cluster_id: String,
    /// The address the node will be reached at (its membership entry).
    pub advertise: String,
}

/// Seeds `target`'s data directory from `backup`: its state at the backup's entry, a
/// membership of `target` alone, a log that starts after that entry and a vote of a later
/// term, so the node elects itself when it starts and other nodes are then added as to any
/// cluster. Refuses a directory that holds files, and the backup's own cluster id. Returns
/// the digest of the installed state, checked equal to the header's.
pub async fn restore(backup: &BackupFile, target: &RestoreTarget) -> Result<String, BackupError> {
    let header = &backup.header;
    if target.cluster_id == header.cluster_id {
        return Err(BackupError::Refused(format!(
            "--cluster-id: the backup is of cluster {:?}; a restored cluster needs a new id, so \
             the old cluster's members are never taken for its own",
            header.cluster_id
        )));
    }
    refuse_non_empty(&target.data_dir)?;
    let identity = NodeIdentity {
        node_id: target.node_id,
        cluster_id: target.cluster_id.clone(),
    };
    let (_store, mut log, mut sm) = crate::open(&target.data_dir, &identity)?;
    let nodes = BTreeMap::from([(target.node_id, Node::new(target.advertise.clone()))]);
    let membership = openraft::Membership::new(vec![BTreeSet::from([target.node_id])], nodes)
        .map_err(|e| BackupError::Refused(format!("membership: {e}")))?;
    let last_log_id = header.last_log_id;
    let meta = SnapshotMeta {
        last_log_id: Some(last_log_id),
        last_membership: StoredMembership::new(Some(last_log_id), membership),
    };
    let data = {
        let (path, meta, backup_path) = (
            crate::snapshot::incoming_path(&target.data_dir),
            meta.clone(),
            backup.path.clone(),
        );
        let (at, len) = (backup.snapshot_at, backup.snapshot_len);
        tokio::task::spawn_blocking(move || rewrite_snapshot(&backup_path, at, len, &meta, &path))
            .await
            .map_err(|e| BackupError::Refused(format!("restore task: {e}")))??
    };
    let io = |e: io::Error| BackupError::Refused(format!("installing the backup: {e}"));
    sm.install_snapshot(&meta, data).await.map_err(io)?;
    // The log starts after the snapshot; the vote is of a later term than any entry in it.
    log.purge(last_log_id).await.map_err(io)?;
    log.save_vote(&Vote::new(header.term() + 1, target.node_id))
        .await
        .map_err(io)?;
    let (_, digest) = sm
        .digest(DigestFreshness::AtLeast(last_log_id.index))
        .await
        .map_err(io)?;
    if digest != header.digest {
        return Err(BackupError::Refused(format!(
            "the restored state's digest {digest} is not the backup's {}; the data directory \
             {} is not fit to start",
            header.digest,
            target.data_dir.display()
        )));
    }
    Ok(digest)
}

/// Refuses a data directory that exists and holds anything.
fn refuse_non_empty(dir: &Path) -> Result<(), BackupError> {
    let holds_files = match fs::read_dir(dir) {
        Ok(mut entries) => entries.next().is_some(),
        Err(e) if e.kind() == io::ErrorKind::NotFound => false,
        Err(e) => return Err(io_at(dir)(e)),
    };
    if holds_files {
        return Err(BackupError::Refused(format!(
            "--data-dir {}: not empty; a restore seeds a new, empty data directory",
            dir.display()
        )));
    }
    Ok(())
}

/// Writes the snapshot inside the backup at `backup` (`len` bytes from `at`) to `path` with
/// the membership of `meta` in place of the old cluster's, synced, and opens it.
fn rewrite_snapshot(
    backup: &Path,
    at: u64,
    len: u64,
    meta: &SnapshotMeta,
    path: &Path,
) -> Result<SnapshotData, BackupError> {
    let mut file = File::open(backup).map_err(io_at(backup))?;
    file.seek(SeekFrom::Start(at)).map_err(io_at(backup))?;
    let mut prefix = Vec::new();
    (&mut file)
        .take(len.min(codec::MAX_COMMAND_BYTES as u64))
        .read_to_end(&mut prefix)
        .map_err(io_at(backup))?;
    let body =
        codec::stored_body(&prefix).map_err(|e| invalid(backup, format!("snapshot: {e}")))?;
    let ((_, _, count), read): ((Option<LogId>, StoredMembership, u64), usize) =
        codec::decode_body_prefix(body)
            .map_err(|e| invalid(backup, format!("snapshot header: {e}")))?;
    let records_at = at + 1 + read as u64;
    if let Some(parent) = path.parent() {
        crate::private::create_private_dir(parent).map_err(io_at(parent))?;
    }
    let out = create_file(path).map_err(io_at(path))?;
    let mut writer = BufWriter::with_capacity(BUFFER_BYTES, &out);
    writer
        .write_all(&codec::encode(&(
            &meta.last_log_id,
            &meta.last_membership,
            count,
        )))
        .map_err(io_at(path))?;
    file.seek(SeekFrom::Start(records_at))
        .map_err(io_at(backup))?;
    let mut records = BufReader::with_capacity(BUFFER_BYTES, file).take(at + len - records_at);
    io::copy(&mut records, &mut writer).map_err(io_at(path))?;
    writer.flush().map_err(io_at(path))?;
    drop(writer);
    out.sync_all().map_err(io_at(path))?;
    SnapshotData::from_file(path, out).map_err(io_at(path))
}

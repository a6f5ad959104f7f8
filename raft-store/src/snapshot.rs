//! Snapshot files: the whole state, written to a temporary file, synced, renamed into place,
//! and the directory synced, so a crash leaves either the old or the new snapshot.

use std::fs::{self, File};
use std::io::{Cursor, Write};
use std::path::{Path, PathBuf};

use hub_engine::Record;
use serde::{Deserialize, Serialize};

use crate::codec;
use crate::error::StoreError;
use crate::types::{LogId, SnapshotData, SnapshotMeta, StoredMembership};

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

/// The bytes of `codec::encode(&SnapshotFile { last_applied, membership, records })` built
/// from the records as the store keeps them (each one `codec::encode`d) without decoding
/// them: the file's header, the records' count, then each record's bincode (its stored bytes
/// after the format byte). A record of another format version is refused.
pub(crate) fn encode_from_stored(
    last_applied: &Option<LogId>,
    membership: &StoredMembership,
    records: &[Box<[u8]>],
) -> Result<Vec<u8>, codec::CodecError> {
    // bincode encodes a struct as its fields in order, and a sequence's length as a u64.
    let header = (last_applied, membership, records.len() as u64);
    let mut out = codec::encode(&header);
    out.reserve(records.iter().map(|r| r.len()).sum());
    for record in records {
        out.extend_from_slice(codec::stored_body(record)?);
    }
    Ok(out)
}

/// The snapshot a node would send at `meta` if it held exactly `records`: the bytes of
/// `SnapshotFile { last_applied, membership, records }`, encoded one record at a time (no
/// second copy of the records), for tools that seed a store through
/// [`openraft::storage::RaftStateMachine::install_snapshot`] (`hub-bench history`).
pub fn snapshot_data(
    meta: &SnapshotMeta,
    records: impl ExactSizeIterator<Item = Record>,
) -> SnapshotData {
    // bincode encodes a struct as its fields in order, and a sequence's length as a u64.
    let declared = records.len();
    let header = (&meta.last_log_id, &meta.last_membership, declared as u64);
    let mut out = codec::encode(&header);
    let mut written = 0;
    for record in records {
        let encoded = codec::encode(&record);
        // `codec::encode` writes the format byte first; the file holds the bodies after it.
        out.extend_from_slice(&encoded[1..]);
        written += 1;
    }
    // A length that lied would make a file that decodes wrongly: refuse to return one.
    assert_eq!(written, declared, "records' declared length");
    Cursor::new(out)
}

/// Where the store in `dir` keeps its current snapshot file.
pub fn snapshot_path(dir: &Path) -> PathBuf {
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

/// The metadata of the current snapshot file of the store in `dir`, if there is one, from its
/// header alone: what a node needs on start, without reading (and decoding) the whole state a
/// second time.
pub fn read_current_meta(dir: &Path) -> Result<Option<SnapshotMeta>, StoreError> {
    use std::io::Read;
    let path = snapshot_path(dir);
    let io = |cause| StoreError::Io {
        path: path.clone(),
        cause,
    };
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(cause) => return Err(io(cause)),
    };
    // The header (last applied log id, membership) is far smaller than a command's bound.
    let mut prefix = Vec::new();
    file.take(codec::MAX_COMMAND_BYTES as u64)
        .read_to_end(&mut prefix)
        .map_err(io)?;
    let (last_log_id, last_membership): (Option<LogId>, StoredMembership) =
        codec::decode_prefix(&prefix, codec::Limit::Command).map_err(|cause| {
            StoreError::Corrupt {
                what: path.display().to_string(),
                cause,
            }
        })?;
    Ok(Some(SnapshotMeta {
        last_log_id,
        last_membership,
    }))
}

/// Decodes snapshot file `bytes` one record at a time, handing each to `each` with its bincode
/// (the stored record's bytes after the format byte), so that installing a snapshot never
/// holds a second, decoded copy of the whole state. Returns the file's last applied log id
/// and membership. The same checks as decoding the file whole: size, format version, and no
/// bytes missing or left over.
pub(crate) fn decode_each(
    bytes: &[u8],
    mut each: impl FnMut(Record, &[u8]),
) -> Result<(Option<LogId>, StoredMembership), codec::CodecError> {
    let body = codec::bounded_body(bytes, codec::Limit::Snapshot)?;
    let ((last_applied, membership, count), mut at): ((Option<LogId>, StoredMembership, u64), _) =
        codec::decode_body_prefix(body)?;
    // `count` comes from the bytes: nothing is allocated by it, and each record takes at
    // least one byte, so a lying count ends at the end of the input.
    for _ in 0..count {
        let rest = &body[at..];
        let (record, read) = codec::decode_body_prefix::<Record>(rest)?;
        each(record, &rest[..read]);
        at += read;
    }
    if at != body.len() {
        return Err(codec::CodecError::Malformed(format!(
            "{} trailing bytes",
            body.len() - at
        )));
    }
    Ok((last_applied, membership))
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

#[cfg(test)]
mod tests {
    use super::*;
    use hub_engine::{Command, Request, State};
    use openraft::vote::RaftLeaderId;

    /// A state of a few records of different tables, applied as the store applies them.
    fn records() -> Vec<Record> {
        let mut state = State::default();
        let commands = [
            Command::CreateEnvironment {
                name: "prod".into(),
                description: "production".into(),
            },
            Command::CreateEnvironment {
                name: "staging".into(),
                description: "x".repeat(300),
            },
            Command::CreateProduct {
                product_id: "com.example:api".into(),
                description: "the api".into(),
            },
        ];
        for (i, command) in commands.into_iter().enumerate() {
            let index = i as u64 + 1;
            let request = Request {
                command,
                time_ms: 1_700_000_000_000 + index as i64,
                request_id: Some(format!("admin:req-{index}")),
            };
            assert!(state.apply(&request, index).result.is_ok());
        }
        state.records().collect()
    }

    #[test]
    fn a_file_from_stored_records_is_the_file_encoded_whole() {
        let records = records();
        assert!(records.len() >= 3, "{records:?}");
        let nodes = (1..=3u64)
            .map(|id| (id, openraft::BasicNode::new(format!("10.0.0.{id}:7401"))))
            .collect::<std::collections::BTreeMap<_, _>>();
        let membership =
            openraft::Membership::new(vec![(1..=3u64).collect()], nodes).expect("membership");
        let log_id = openraft::LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(3, 1),
            3,
        );
        let file = SnapshotFile {
            last_applied: Some(log_id),
            membership: StoredMembership::new(Some(log_id), membership),
            records,
        };
        let stored: Vec<Box<[u8]>> = file
            .records
            .iter()
            .map(|r| codec::encode(r).into_boxed_slice())
            .collect();
        let bytes = encode_from_stored(&file.last_applied, &file.membership, &stored).unwrap();
        assert_eq!(bytes, codec::encode(&file));
        // Record by record: the same records, each with its stored bincode.
        let mut seen = Vec::new();
        let (last, members) = decode_each(&bytes, |r, body| {
            assert_eq!(body, codec::stored_body(&codec::encode(&r)).unwrap());
            seen.push(r);
        })
        .unwrap();
        assert_eq!(
            (last, members, seen),
            (
                file.last_applied,
                file.membership.clone(),
                file.records.clone()
            )
        );
        for cut in [bytes.len() - 1, bytes.len() / 2, 5] {
            assert!(
                decode_each(&bytes[..cut], |_, _| ()).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode_each(&longer, |_, _| ()),
            Err(codec::CodecError::Malformed(_))
        ));
        // The header alone gives the file's metadata.
        let dir = tempfile::tempdir().unwrap();
        assert!(read_current_meta(dir.path()).unwrap().is_none());
        write_atomically(&snapshot_path(dir.path()), &bytes).unwrap();
        assert_eq!(read_current_meta(dir.path()).unwrap(), Some(file.meta()));
        write_atomically(&snapshot_path(dir.path()), &bytes[..3]).unwrap();
        assert!(matches!(
            read_current_meta(dir.path()),
            Err(StoreError::Corrupt { .. })
        ));
        assert_eq!(
            snapshot_data(&file.meta(), file.records.iter().cloned()).into_inner(),
            bytes
        );
        // And an empty state, as a new cluster's first snapshot.
        let empty = SnapshotFile {
            last_applied: None,
            membership: StoredMembership::default(),
            records: Vec::new(),
        };
        assert_eq!(
            encode_from_stored(&None, &empty.membership, &[]).unwrap(),
            codec::encode(&empty)
        );
        // A record of another format version is refused, not misread.
        let mut other = stored.clone();
        other[1][0] = codec::FORMAT_VERSION + 1;
        assert!(matches!(
            encode_from_stored(&file.last_applied, &file.membership, &other),
            Err(codec::CodecError::UnknownVersion(v)) if v == codec::FORMAT_VERSION + 1
        ));
    }
}

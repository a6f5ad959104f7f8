//! Snapshot files: the whole state, written to a temporary file, synced, renamed into place,
//! and the directory synced, so a crash leaves either the old or the new snapshot.
//!
//! A snapshot is never held whole in memory. The leader streams the records from a RocksDB
//! snapshot into the file ([`write_from_stored`]); the transport sends the file in chunks; a
//! follower writes what arrives into its own file ([`SnapshotReceiver`]) and installs it by
//! decoding one record at a time ([`decode_each`]). Memory stays bounded by one record (and
//! the install's write batch), not by the snapshot: the state's history makes snapshots far
//! larger than the state a node holds.
//!
//! The file's bytes are `codec::encode(&SnapshotFile { last_applied, membership, records })`:
//! the format byte, then bincode of the header and the records' count, then each record.

use std::fs::{self, File};
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use hub_engine::Record;

use crate::codec;
use crate::error::StoreError;
use crate::snapshot_data::{create_file, SnapshotData};
use crate::types::{LogId, SnapshotMeta, StoredMembership};

/// The buffer of a snapshot file's reader and writer.
const FILE_BUFFER_BYTES: usize = 1 << 20;

/// The content of a snapshot file (behind the codec's format version), as a value: what the
/// streamed encoding and decoding below must agree with (the tests check both against it).
#[cfg(test)]
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct SnapshotFile {
    pub(crate) last_applied: Option<LogId>,
    pub(crate) membership: StoredMembership,
    pub(crate) records: Vec<Record>,
}

#[cfg(test)]
impl SnapshotFile {
    pub(crate) fn meta(&self) -> SnapshotMeta {
        SnapshotMeta {
            last_log_id: self.last_applied,
            last_membership: self.membership.clone(),
        }
    }
}

/// Syncs the directory holding `path`, so a rename into it survives a crash.
fn sync_parent(path: &Path) -> io::Result<()> {
    File::open(path.parent().unwrap_or(Path::new(".")))?.sync_all()
}

/// The error of a failed step on the file at `path`.
fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StoreError + '_ {
    move |cause| StoreError::Io {
        path: path.to_path_buf(),
        cause,
    }
}

/// Writes a snapshot file's bytes to `out` from the records as the store keeps them (each
/// one `codec::encode`d), streamed, without decoding them: the header, the records' count,
/// then each record's bincode (its stored bytes after the format byte). `records` must yield
/// exactly `count` records: the count comes first. A record of another format version is
/// refused. `at` names the destination in errors.
pub(crate) fn write_stored(
    out: &mut impl Write,
    at: &Path,
    last_applied: &Option<LogId>,
    membership: &StoredMembership,
    count: u64,
    records: impl Iterator<Item = Result<Box<[u8]>, StoreError>>,
) -> Result<(), StoreError> {
    // bincode encodes a struct as its fields in order, and a sequence's length as a u64.
    out.write_all(&codec::encode(&(last_applied, membership, count)))
        .map_err(io_at(at))?;
    let mut written = 0u64;
    for record in records {
        let record = record?;
        let body = codec::stored_body(&record).map_err(|cause| StoreError::Corrupt {
            what: "state record".to_string(),
            cause,
        })?;
        out.write_all(body).map_err(io_at(at))?;
        written += 1;
    }
    if written != count {
        return Err(StoreError::Corrupt {
            what: at.display().to_string(),
            cause: codec::CodecError::Malformed(format!(
                "{written} records written after a count of {count}"
            )),
        });
    }
    Ok(())
}

/// Writes the snapshot file at `path` from the records as the store keeps them (each one
/// `codec::encode`d), streamed, without decoding them: the header, the records' count, then
/// each record's bincode (its stored bytes after the format byte), into a temporary file
/// that is synced and renamed into place. `records` must yield exactly `count` records: the
/// count comes first in the file. A record of another format version is refused.
pub(crate) fn write_from_stored(
    path: &Path,
    last_applied: &Option<LogId>,
    membership: &StoredMembership,
    count: u64,
    records: impl Iterator<Item = Result<Box<[u8]>, StoreError>>,
) -> Result<SnapshotData, StoreError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    crate::private::create_private_dir(parent).map_err(io_at(parent))?;
    let tmp = path.with_extension("build");
    let file = create_file(&tmp).map_err(io_at(&tmp))?;
    let mut out = BufWriter::with_capacity(FILE_BUFFER_BYTES, &file);
    write_stored(&mut out, &tmp, last_applied, membership, count, records)?;
    out.flush().map_err(io_at(&tmp))?;
    drop(out);
    file.sync_all().map_err(io_at(&tmp))?;
    fs::rename(&tmp, path).map_err(io_at(path))?;
    sync_parent(path).map_err(io_at(path))?;
    SnapshotData::from_file(path, file).map_err(io_at(path))
}

/// Writes the snapshot a node would send at `meta` if it held exactly `records` to a new file
/// at `path`, one record at a time (no second copy of the records), for tools that seed a
/// store through [`openraft::storage::RaftStateMachine::install_snapshot`] (`hub-bench
/// history`, the chaos checker).
pub fn snapshot_data(
    path: &Path,
    meta: &SnapshotMeta,
    records: impl ExactSizeIterator<Item = Record>,
) -> io::Result<SnapshotData> {
    let declared = records.len() as u64;
    write_from_stored(
        path,
        &meta.last_log_id,
        &meta.last_membership,
        declared,
        records.map(|r| Ok(codec::encode(&r).into_boxed_slice())),
    )
    .map_err(io::Error::other)
}

/// Writes `bytes` to `path` so that after a crash the file is either absent/old or complete.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), StoreError> {
    let parent = path.parent().unwrap_or(Path::new("."));
    crate::private::create_private_dir(parent).map_err(io_at(parent))?;
    let tmp = path.with_extension("tmp");
    {
        let mut f = create_file(&tmp).map_err(io_at(&tmp))?;
        f.write_all(bytes).map_err(io_at(&tmp))?;
        f.sync_all().map_err(io_at(&tmp))?;
    }
    fs::rename(&tmp, path).map_err(io_at(path))?;
    sync_parent(path).map_err(io_at(parent))
}

/// Reads the whole file at `path` if it has at most `max` bytes; a longer file is an
/// `InvalidData` error before anything is buffered (a file, like the network, may be hostile).
pub(crate) fn read_limited(path: &Path, max: usize) -> io::Result<Vec<u8>> {
    let file = File::open(path)?;
    let mut bytes = Vec::new();
    file.take(max as u64 + 1).read_to_end(&mut bytes)?;
    if bytes.len() > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{} is larger than {max} bytes", path.display()),
        ));
    }
    Ok(bytes)
}

/// Where the store in `dir` keeps its current snapshot file.
pub fn snapshot_path(dir: &Path) -> PathBuf {
    dir.join("snapshots").join("current.snap")
}

/// Where the store in `dir` writes a snapshot it is receiving ([`SnapshotReceiver`]).
pub fn incoming_path(dir: &Path) -> PathBuf {
    dir.join("snapshots").join("incoming.snap")
}

/// A snapshot arriving from the leader, written to the store's incoming file as it comes.
/// One at a time per store (the transport holds a lock while it receives). Dropped before
/// [`SnapshotReceiver::finish`], it removes its file.
#[derive(Debug)]
pub struct SnapshotReceiver {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    written: u64,
}

impl SnapshotReceiver {
    /// Starts a new incoming file for the store in `dir`, replacing any left behind.
    pub fn create(dir: &Path) -> io::Result<Self> {
        let path = incoming_path(dir);
        if let Some(parent) = path.parent() {
            crate::private::create_private_dir(parent)?;
        }
        let file = create_file(&path)?;
        Ok(Self {
            path,
            out: Some(BufWriter::with_capacity(FILE_BUFFER_BYTES, file)),
            written: 0,
        })
    }

    /// Appends `bytes` (blocking I/O: call it off the async runtime).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        let out = self
            .out
            .as_mut()
            .ok_or_else(|| io::Error::other("snapshot receiver already finished"))?;
        out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// The bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Flushes and syncs the file and opens it for install (blocking I/O).
    pub fn finish(mut self) -> io::Result<SnapshotData> {
        let out = self
            .out
            .take()
            .ok_or_else(|| io::Error::other("snapshot receiver already finished"))?;
        let file = out.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        SnapshotData::from_file(&self.path, file)
    }
}

impl Drop for SnapshotReceiver {
    fn drop(&mut self) {
        if self.out.is_some() {
            // Unfinished: nothing will read it. A failure leaves a file the next receiver
            // replaces.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Makes `data` the current snapshot file of the store in `dir`: the store's own incoming
/// file is renamed into place (it was synced when it arrived); any other file is copied.
/// Either way the directory is synced, so after a crash the file is the old or the new one.
pub(crate) fn make_current(dir: &Path, data: SnapshotData) -> Result<(), StoreError> {
    let path = snapshot_path(dir);
    let parent = path.parent().unwrap_or(Path::new("."));
    crate::private::create_private_dir(parent).map_err(io_at(parent))?;
    if data.path() == incoming_path(dir) {
        fs::rename(data.path(), &path).map_err(io_at(&path))?;
        return sync_parent(&path).map_err(io_at(&path));
    }
    let tmp = path.with_extension("tmp");
    let mut out = create_file(&tmp).map_err(io_at(&tmp))?;
    let mut source = data.into_file().map_err(io_at(&path))?;
    io::copy(&mut source, &mut out).map_err(io_at(&tmp))?;
    out.sync_all().map_err(io_at(&tmp))?;
    fs::rename(&tmp, &path).map_err(io_at(&path))?;
    sync_parent(&path).map_err(io_at(&path))
}

/// The metadata of the current snapshot file of the store in `dir`, if there is one, from its
/// header alone: what a node needs on start, without reading (and decoding) the whole state a
/// second time.
pub fn read_current_meta(dir: &Path) -> Result<Option<SnapshotMeta>, StoreError> {
    Ok(open_current(dir)?.map(|(meta, _)| meta))
}

/// The current snapshot file of the store in `dir`, opened, with its metadata (from its
/// header alone), if there is one.
pub(crate) fn open_current(dir: &Path) -> Result<Option<(SnapshotMeta, SnapshotData)>, StoreError> {
    let path = snapshot_path(dir);
    let data = match SnapshotData::open(&path) {
        Ok(d) => d,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(cause) => return Err(StoreError::Io { path, cause }),
    };
    // The header (last applied log id, membership) is far smaller than a command's bound.
    let mut prefix = Vec::new();
    (&data.file)
        .take(codec::MAX_COMMAND_BYTES as u64)
        .read_to_end(&mut prefix)
        .map_err(io_at(&path))?;
    let (last_log_id, last_membership): (Option<LogId>, StoredMembership) =
        codec::decode_prefix(&prefix, codec::Limit::Command).map_err(|cause| {
            StoreError::Corrupt {
                what: path.display().to_string(),
                cause,
            }
        })?;
    let data = SnapshotData::from_file(&path, data.file).map_err(io_at(&path))?;
    Ok(Some((
        SnapshotMeta {
            last_log_id,
            last_membership,
        },
        data,
    )))
}

/// A reader that keeps a copy of what it has read since it was last cleared, and counts it.
struct Tee<R> {
    inner: R,
    seen: Vec<u8>,
    read: u64,
}

impl<R: Read> Read for Tee<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.seen.extend_from_slice(&buf[..n]);
        self.read += n as u64;
        Ok(n)
    }
}

/// Why a snapshot file could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotDecodeError {
    /// Reading the file failed.
    #[error("reading the snapshot file: {0}")]
    Io(#[from] io::Error),
    /// The bytes are not a snapshot this release reads.
    #[error("snapshot file: {0}")]
    Codec(#[from] codec::CodecError),
}

/// Decodes the snapshot file `data` one record at a time, handing each to `each` with its
/// bincode (the stored record's bytes after the format byte), so that installing a snapshot
/// never holds the file, nor a second decoded copy of the state. An error of `each` stops
/// the decoding and is returned. Returns the file's last
/// applied log id and membership. The checks of decoding the file whole: its size
/// ([`codec::MAX_SNAPSHOT_FILE_BYTES`]), its format version, each record within its bound
/// ([`codec::Limit::Snapshot`]) and the bytes left, no bytes missing or left over.
pub(crate) fn decode_each(
    data: &SnapshotData,
    mut each: impl FnMut(Record, &[u8]) -> io::Result<()>,
) -> Result<(Option<LogId>, StoredMembership), SnapshotDecodeError> {
    use codec::CodecError;
    let len = data.len();
    if len > codec::MAX_SNAPSHOT_FILE_BYTES {
        return Err(CodecError::TooLarge {
            bytes: usize::try_from(len).unwrap_or(usize::MAX),
            limit: usize::try_from(codec::MAX_SNAPSHOT_FILE_BYTES).unwrap_or(usize::MAX),
        }
        .into());
    }
    let mut file = &data.file;
    file.seek(SeekFrom::Start(0))?;
    let mut input = Tee {
        inner: BufReader::with_capacity(FILE_BUFFER_BYTES, file),
        seen: Vec::new(),
        read: 0,
    };
    let mut version = [0u8; 1];
    if input.read(&mut version)? == 0 {
        return Err(CodecError::Empty.into());
    }
    codec::stored_body(&version)?;
    let left = len.saturating_sub(input.read);
    let (last_applied, membership, count): (Option<LogId>, StoredMembership, u64) =
        codec::decode_body_from_reader(&mut input, left, codec::Limit::Command)?;
    // `count` comes from the bytes: nothing is allocated by it, and each record takes at
    // least one byte, so a lying count ends at the end of the input.
    for _ in 0..count {
        input.seen.clear();
        let left = len.saturating_sub(input.read);
        let record: Record =
            codec::decode_body_from_reader(&mut input, left, codec::Limit::Snapshot)?;
        each(record, &input.seen)?;
    }
    let at = input.read;
    let mut more = [0u8; 1];
    if at < len || input.read(&mut more)? != 0 {
        let trailing = len.saturating_sub(at).max(1);
        return Err(CodecError::Malformed(format!("{trailing} trailing bytes")).into());
    }
    Ok((last_applied, membership))
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

    fn sample() -> (SnapshotFile, Vec<Box<[u8]>>) {
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
        let stored = file
            .records
            .iter()
            .map(|r| codec::encode(r).into_boxed_slice())
            .collect();
        (file, stored)
    }

    fn write(
        path: &Path,
        file: &SnapshotFile,
        count: u64,
        stored: &[Box<[u8]>],
    ) -> Result<SnapshotData, StoreError> {
        write_from_stored(
            path,
            &file.last_applied,
            &file.membership,
            count,
            stored.iter().cloned().map(Ok),
        )
    }

    #[test]
    fn a_file_streamed_from_stored_records_is_the_file_encoded_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (file, stored) = sample();
        let path = snapshot_path(dir.path());
        let data = write(&path, &file, stored.len() as u64, &stored).unwrap();
        assert_eq!(data.path(), path);
        let bytes = data.read_all().unwrap();
        assert_eq!(bytes, codec::encode(&file));
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "renamed into place");
        // The header alone gives the file's metadata.
        assert_eq!(read_current_meta(dir.path()).unwrap(), Some(file.meta()));
        let (meta, opened) = open_current(dir.path()).unwrap().unwrap();
        assert_eq!((meta, opened.len()), (file.meta(), bytes.len() as u64));
        // A tool's snapshot of the same records is the same file.
        let tool = snapshot_data(
            &dir.path().join("tool.snap"),
            &file.meta(),
            file.records.iter().cloned(),
        )
        .unwrap();
        assert_eq!(tool.read_all().unwrap(), bytes);
        // An empty state, as a new cluster's first snapshot.
        let empty = SnapshotFile {
            last_applied: None,
            membership: StoredMembership::default(),
            records: Vec::new(),
        };
        let data = write(&dir.path().join("empty.snap"), &empty, 0, &[]).unwrap();
        assert_eq!(data.read_all().unwrap(), codec::encode(&empty));
        // A record of another format version is refused, not misread.
        let mut other = stored.clone();
        other[1][0] = codec::FORMAT_VERSION + 1;
        assert!(matches!(
            write(&dir.path().join("other.snap"), &file, other.len() as u64, &other),
            Err(StoreError::Corrupt { cause: codec::CodecError::UnknownVersion(v), .. })
                if v == codec::FORMAT_VERSION + 1
        ));
        // A count that does not match the records is refused: the file would decode wrongly.
        for count in [stored.len() as u64 - 1, stored.len() as u64 + 1] {
            assert!(
                matches!(
                    write(&dir.path().join("count.snap"), &file, count, &stored),
                    Err(StoreError::Corrupt { .. })
                ),
                "count {count}"
            );
        }
        assert_eq!(
            std::fs::read(&path).unwrap(),
            bytes,
            "failed writes left it alone"
        );
    }

    #[test]
    fn a_file_decodes_record_by_record_with_the_checks_of_a_whole_decode() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = sample();
        let bytes = codec::encode(&file);
        let at =
            |name: &str, bytes: &[u8]| SnapshotData::create(&dir.path().join(name), bytes).unwrap();
        // The same records, each with its stored bincode.
        let mut seen = Vec::new();
        let (last, members) = decode_each(&at("whole", &bytes), |r, body| {
            assert_eq!(body, codec::stored_body(&codec::encode(&r)).unwrap());
            seen.push(r);
            Ok(())
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
        for cut in [bytes.len() - 1, bytes.len() / 2, 5, 1, 0] {
            assert!(
                decode_each(&at("cut", &bytes[..cut]), |_, _| Ok(())).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(matches!(
            decode_each(&at("longer", &longer), |_, _| Ok(())),
            Err(SnapshotDecodeError::Codec(codec::CodecError::Malformed(m))) if m == "1 trailing bytes"
        ));
        let mut version = bytes.clone();
        version[0] = codec::FORMAT_VERSION + 1;
        assert!(matches!(
            decode_each(&at("version", &version), |_, _| Ok(())),
            Err(SnapshotDecodeError::Codec(
                codec::CodecError::UnknownVersion(_)
            ))
        ));
        // Bytes that are not a record (the length bomb's) are refused.
        let mut bomb = codec::encode(&(file.last_applied, file.membership.clone(), 1u64));
        bomb.extend_from_slice(&codec::tests::length_bomb()[1..]);
        assert!(decode_each(&at("bomb", &bomb), |_, _| Ok(())).is_err());
    }

    #[test]
    fn a_received_file_becomes_current_and_an_abandoned_one_is_removed() {
        let dir = tempfile::tempdir().unwrap();
        let (file, _) = sample();
        let bytes = codec::encode(&file);
        // Abandoned mid-way: nothing is left.
        let mut receiver = SnapshotReceiver::create(dir.path()).unwrap();
        receiver.write(&bytes[..10]).unwrap();
        drop(receiver);
        assert!(!incoming_path(dir.path()).exists());
        // Received in chunks, finished, decoded and made current by a rename.
        let mut receiver = SnapshotReceiver::create(dir.path()).unwrap();
        for chunk in bytes.chunks(7) {
            receiver.write(chunk).unwrap();
        }
        assert_eq!(receiver.written(), bytes.len() as u64);
        let data = receiver.finish().unwrap();
        assert_eq!(data.path(), incoming_path(dir.path()));
        let mut n = 0;
        decode_each(&data, |_, _| {
            n += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!(n, file.records.len());
        make_current(dir.path(), data).unwrap();
        assert!(!incoming_path(dir.path()).exists());
        assert_eq!(std::fs::read(snapshot_path(dir.path())).unwrap(), bytes);
        // Another store's file is copied, and stays where it was.
        let other = tempfile::tempdir().unwrap();
        let theirs = SnapshotData::create(&other.path().join("x.snap"), &bytes[..]).unwrap();
        std::fs::remove_file(snapshot_path(dir.path())).unwrap();
        make_current(dir.path(), theirs).unwrap();
        assert_eq!(std::fs::read(snapshot_path(dir.path())).unwrap(), bytes);
        assert!(other.path().join("x.snap").exists());
    }
}

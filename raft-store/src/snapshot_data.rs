//! A snapshot's bytes as openraft carries them: an opened file ([`SnapshotData`]), never a
//! buffer. Apart from [`crate::snapshot`], which writes and reads the files, so the type
//! config ([`crate::types`]) can name it.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// A snapshot's bytes: a snapshot file, opened. Whoever holds it reads the file it opened,
/// even if a newer snapshot has since been renamed over the path.
#[derive(Debug)]
pub struct SnapshotData {
    path: PathBuf,
    pub(crate) file: File,
    len: u64,
}

impl SnapshotData {
    /// Opens the snapshot file at `path`.
    pub fn open(path: &Path) -> io::Result<Self> {
        Self::from_file(path, File::open(path)?)
    }

    /// The snapshot file `file`, opened at `path`, positioned at its start.
    pub(crate) fn from_file(path: &Path, mut file: File) -> io::Result<Self> {
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(0))?;
        Ok(Self {
            path: path.to_path_buf(),
            file,
            len,
        })
    }

    /// Writes `bytes` to a new snapshot file at `path` (synced) and opens it: for tools and
    /// tests that hold a snapshot's bytes.
    pub fn create(path: &Path, bytes: &[u8]) -> io::Result<Self> {
        let mut file = create_file(path)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        Self::from_file(path, file)
    }

    /// The file's length in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty (never a valid snapshot).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Where the file was opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The opened file, positioned at its start (the transport streams it).
    pub fn into_file(mut self) -> io::Result<File> {
        self.file.seek(SeekFrom::Start(0))?;
        Ok(self.file)
    }

    /// Reads the whole file into memory: for tests and tools, never a node.
    pub fn read_all(self) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.into_file()?.read_to_end(&mut out)?;
        Ok(out)
    }
}

/// Creates (truncating) a private file for reading and writing.
pub(crate) fn create_file(path: &Path) -> io::Result<File> {
    // A leftover file keeps its old mode through truncation: remove it first.
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(crate::private::FILE_MODE)
        .open(path)
}

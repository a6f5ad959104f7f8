//! The on-disk layout of one entity, and crash-safe file writes.
//!
//! ```text
//! DATA/process/<kind>--<name>/
//!   downloads/<sha256>.tar.gz         fetched artifacts (kept by `remove`)
//!   versions/<version>/               unpacked artifacts (+ .hub-unpacked marker)
//!   config/<version>-<sha16>.yaml     the plan's config text (content-addressed)
//!   secrets/<version>-r<revision>/    one file per secret, mode 0600 (dir 0700)
//!   data/                             the service's persistent data (`${DATA}`)
//!   service.log                       the service's stdout and stderr (kept by `remove`)
//!   state.json                        what runs (see `state`)
//! ```
//!
//! Temporary files and directories start with `.` and are written next to their final
//! name, then renamed into place, so a crash never leaves a half-written file under a final
//! name.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::deployment::Deployment;

/// Name of the completion marker inside an unpacked version directory.
pub const UNPACKED_MARKER: &str = ".hub-unpacked";

/// Paths of one entity's directory.
#[derive(Debug, Clone)]
pub struct EntityDir {
    root: PathBuf,
}

impl EntityDir {
    /// The entity directory at `root` (absolute).
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    /// `downloads/`.
    pub fn downloads(&self) -> PathBuf {
        self.root.join("downloads")
    }

    /// `downloads/<sha256>.tar.gz` (`sha256` was checked to be 64 hex digits).
    pub fn download(&self, sha256: &str) -> PathBuf {
        self.downloads().join(format!("{sha256}.tar.gz"))
    }

    /// `versions/`.
    pub fn versions(&self) -> PathBuf {
        self.root.join("versions")
    }

    /// `versions/<version>/` (`version` was checked by `names::check_version`).
    pub fn version(&self, version: &str) -> PathBuf {
        self.versions().join(version)
    }

    /// Whether `versions/<version>/` was completely unpacked.
    pub fn is_unpacked(&self, version: &str) -> bool {
        self.version(version).join(UNPACKED_MARKER).is_file()
    }

    /// `config/`.
    pub fn configs(&self) -> PathBuf {
        self.root.join("config")
    }

    /// File name of a deployment's config inside `config/`.
    pub fn config_name(d: &Deployment) -> String {
        let short = d.config_sha256.get(..16).unwrap_or(&d.config_sha256);
        format!("{}-{short}.yaml", d.version)
    }

    /// `config/<version>-<sha16>.yaml`: the rendered config of a deployment.
    pub fn config(&self, d: &Deployment) -> PathBuf {
        self.configs().join(Self::config_name(d))
    }

    /// `secrets/`.
    pub fn secrets_root(&self) -> PathBuf {
        self.root.join("secrets")
    }

    /// Directory name of a deployment's secrets inside `secrets/`.
    pub fn secrets_name(d: &Deployment) -> String {
        format!("{}-r{}", d.version, d.secrets_revision)
    }

    /// `secrets/<version>-r<revision>/`.
    pub fn secrets(&self, d: &Deployment) -> PathBuf {
        self.secrets_root().join(Self::secrets_name(d))
    }

    /// `data/`: the service's persistent data directory.
    pub fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// `service.log`.
    pub fn log(&self) -> PathBuf {
        self.root.join("service.log")
    }

    /// `state.json`.
    pub fn state(&self) -> PathBuf {
        self.root.join("state.json")
    }
}

/// A unique temporary sibling of `path` (`.<name>.tmp-<random>`).
pub fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(".{name}.tmp-{:016x}", rand::random::<u64>()))
}

/// Writes `bytes` to `path` atomically: temp file with `mode`, fsync, rename, fsync of the
/// directory.
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    let tmp = temp_sibling(path);
    let result = (|| {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        fs::rename(&tmp, path)?;
        sync_parent(path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Fsyncs the directory holding `path`, so a rename into it survives a crash.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent() {
        Some(dir) => fs::File::open(dir)?.sync_all(),
        None => Ok(()),
    }
}

/// Creates `dir` (and parents) with `mode` for the directories it creates.
pub fn create_dir_mode(dir: &Path, mode: u32) -> io::Result<()> {
    fs::DirBuilder::new().recursive(true).mode(mode).create(dir)
}

/// Reads the whole file at `path` if it has at most `max` bytes; a longer one is an
/// `InvalidData` error before it is buffered (a damaged or planted file must not exhaust
/// memory).
pub fn read_limited(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    fs::File::open(path)?
        .take(max + 1)
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than {max} bytes"),
        ));
    }
    Ok(bytes)
}

/// Creates `dir` (and parents) 0700 and sets an existing `dir` to 0700: the agent's data
/// directory holds rendered configs and secrets, whatever the umask or an older release left.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    create_dir_mode(dir, 0o700)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Removes a file or directory tree; a missing path is fine.
pub fn remove_path(path: &Path) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

/// Names of the entries of `dir` (none if it does not exist).
pub fn list_names(dir: &Path) -> io::Result<Vec<String>> {
    let entries = match fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut names = Vec::new();
    for entry in entries {
        names.push(entry?.file_name().to_string_lossy().into_owned());
    }
    names.sort();
    Ok(names)
}

/// Writes the secret files into a temporary directory (0700; files 0600), then renames it
/// to `dir`.
pub fn write_secrets(dir: &Path, secrets: &[(String, String)]) -> io::Result<()> {
    let tmp = temp_sibling(dir);
    let result = (|| {
        create_dir_mode(&tmp, 0o700)?;
        for (name, value) in secrets {
            write_atomic(&tmp.join(name), value.as_bytes(), 0o600)?;
        }
        fs::rename(&tmp, dir)?;
        sync_parent(dir)
    })();
    if result.is_err() {
        let _ = remove_path(&tmp);
    }
    result
}

//! Safe unpacking of `.tar.gz` artifacts.
//!
//! Refused (the whole artifact, with the entry named): absolute paths, `..` components,
//! symlinks that point outside the unpacked tree (absolute, climbing above the root, or
//! resolving outside it through other links), hard links with such names, device and FIFO
//! entries, more than [`MAX_ENTRIES`] entries or [`MAX_UNPACKED_BYTES`] in total. Ownership
//! and setuid bits are not restored; group/world write bits are masked.

use std::fs;
use std::io::{self, BufReader};
use std::path::{Component, Path, PathBuf};

use tar::EntryType;

use super::layout::{remove_path, sync_parent, temp_sibling, write_atomic, UNPACKED_MARKER};
use super::spec::ServiceSpec;

/// Most entries unpacked from one version's artifacts.
pub const MAX_ENTRIES: u64 = 100_000;
/// Most bytes unpacked from one version's artifacts.
pub const MAX_UNPACKED_BYTES: u64 = 4 * 1024 * 1024 * 1024;

/// What has been unpacked so far into one directory (limits span all its artifacts).
#[derive(Debug, Default)]
pub struct Budget {
    entries: u64,
    bytes: u64,
}

/// Why a version could not be unpacked.
#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    /// An artifact is not a well-formed, safe `.tar.gz`.
    #[error("corrupt artifact {uri}: {reason}")]
    Corrupt {
        /// The artifact (without credentials).
        uri: String,
        /// What is wrong.
        #[source]
        reason: ArchiveError,
    },
    /// A symlink of the unpacked artifacts resolves outside them, or they cannot be walked.
    #[error("corrupt artifact: {0}")]
    Symlinks(#[source] ArchiveError),
    /// The artifact's `service.json` is invalid (validation errors, reported as a list).
    #[error("{}", .0.join("; "))]
    Invalid(Vec<String>),
    /// The filesystem failed: what was being done and the error.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The completion marker cannot be written as JSON.
    #[error("{0}")]
    Marker(#[source] serde_json::Error),
}

/// Why an artifact is not a well-formed, safe `.tar.gz`. `entry` is the offending entry's
/// path as shown.
#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The download cannot be opened.
    #[error("cannot open the download: {0}")]
    Open(#[source] io::Error),
    /// The archive (gzip or tar) cannot be read, or the unpacked tree cannot be walked.
    #[error("{0}")]
    Read(#[source] io::Error),
    /// More than [`MAX_ENTRIES`] entries.
    #[error("more than {MAX_ENTRIES} entries")]
    TooManyEntries,
    /// An entry's path cannot be read.
    #[error("entry with an invalid path: {0}")]
    EntryPath(#[source] io::Error),
    /// An entry's path is refused.
    #[error("entry {entry:?}: {reason}")]
    Path {
        /// The entry.
        entry: String,
        /// Why.
        #[source]
        reason: PathRefusal,
    },
    /// A link's target cannot be read.
    #[error("entry {entry:?}: bad link name: {source}")]
    LinkName {
        /// The entry.
        entry: String,
        /// The error.
        source: io::Error,
    },
    /// A link without a target.
    #[error("entry {entry:?}: {kind} without a target")]
    NoTarget {
        /// The entry.
        entry: String,
        /// The link's kind.
        kind: LinkKind,
    },
    /// A link's target is refused.
    #[error("{kind} {entry:?} -> {target:?}: {reason}")]
    Target {
        /// The link's kind.
        kind: LinkKind,
        /// The entry.
        entry: String,
        /// Its target.
        target: PathBuf,
        /// Why.
        #[source]
        reason: PathRefusal,
    },
    /// An entry that is not a file, a directory or a link.
    #[error(
        "entry {entry:?}: unsupported entry type {kind:?} (only files, directories and links)"
    )]
    EntryType {
        /// The entry.
        entry: String,
        /// Its type.
        kind: EntryType,
    },
    /// More than [`MAX_UNPACKED_BYTES`] bytes.
    #[error("more than {MAX_UNPACKED_BYTES} bytes unpacked")]
    TooManyBytes,
    /// Writing an entry failed.
    #[error("entry {entry:?}: {source}")]
    Unpack {
        /// The entry.
        entry: String,
        /// The error.
        source: io::Error,
    },
    /// The unpacker refused an entry (it would land outside the destination).
    #[error("entry {entry:?}: refused by the unpacker")]
    Refused {
        /// The entry.
        entry: String,
    },
    /// A symlink of the unpacked tree resolves outside it.
    #[error("symlink {link:?} resolves outside the artifact")]
    Escapes {
        /// The link, relative to the tree's root.
        link: PathBuf,
    },
}

/// A link entry's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkKind {
    /// A symbolic link.
    Symlink,
    /// A hard link.
    HardLink,
}

impl std::fmt::Display for LinkKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Symlink => "symlink",
            Self::HardLink => "hard link",
        })
    }
}

/// Why an entry's path or a link's target is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathRefusal {
    /// An absolute entry path.
    #[error("absolute paths are not allowed")]
    Absolute,
    /// A `..` component.
    #[error("'..' is not allowed")]
    ParentDir,
    /// An absolute symlink target.
    #[error("absolute targets are not allowed")]
    AbsoluteTarget,
    /// A relative symlink target above the root.
    #[error("points outside the artifact")]
    OutsideArtifact,
}

/// Unpacks `archives` (uri for messages, sha256, downloaded file), in order, into
/// `version_dir` through a temporary sibling directory: checks every entry, the symlinks and
/// `service.json`, writes the completion marker (the artifacts' SHA-256s, as JSON), then
/// renames it into place. Blocking: call from `spawn_blocking`.
pub fn unpack_version(
    archives: &[(String, String, PathBuf)],
    version_dir: &Path,
) -> Result<(), UnpackError> {
    let io = |what: &'static str, source: io::Error| UnpackError::Io { what, source };
    let tmp = temp_sibling(version_dir);
    fs::create_dir(&tmp).map_err(|e| io("cannot create the unpack directory", e))?;
    let result = (|| {
        let mut budget = Budget::default();
        for (uri, _, path) in archives {
            unpack_into(path, &tmp, &mut budget).map_err(|reason| UnpackError::Corrupt {
                uri: uri.clone(),
                reason,
            })?;
        }
        check_symlinks(&tmp).map_err(UnpackError::Symlinks)?;
        ServiceSpec::load(&tmp).map_err(UnpackError::Invalid)?;
        let shas: Vec<&str> = archives.iter().map(|(_, sha, _)| sha.as_str()).collect();
        let marker = serde_json::to_vec(&shas).map_err(UnpackError::Marker)?;
        write_atomic(&tmp.join(UNPACKED_MARKER), &marker, 0o644)
            .map_err(|e| io("cannot write the completion marker", e))?;
        // An incomplete leftover (no marker) is replaced.
        remove_path(version_dir).map_err(|e| io("cannot replace an incomplete unpack", e))?;
        fs::rename(&tmp, version_dir).map_err(|e| io("cannot move the unpacked version", e))?;
        sync_parent(version_dir).map_err(|e| io("cannot sync", e))
    })();
    if result.is_err() {
        let _ = remove_path(&tmp);
    }
    result
}

/// Unpacks the gzip'd tarball `archive` into the existing directory `dest`. The error is
/// one line naming the offending entry or the decoding error.
pub fn unpack_into(archive: &Path, dest: &Path, budget: &mut Budget) -> Result<(), ArchiveError> {
    let file = fs::File::open(archive).map_err(ArchiveError::Open)?;
    let mut tarball = tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(file)));
    tarball.set_preserve_permissions(false);
    tarball.set_preserve_ownerships(false);
    tarball.set_preserve_mtime(true);
    tarball.set_unpack_xattrs(false);
    tarball.set_overwrite(true);
    tarball.set_mask(0o022);
    let entries = tarball.entries().map_err(ArchiveError::Read)?;
    for entry in entries {
        let mut entry = entry.map_err(ArchiveError::Read)?;
        budget.entries += 1;
        if budget.entries > MAX_ENTRIES {
            return Err(ArchiveError::TooManyEntries);
        }
        let path = entry.path().map_err(ArchiveError::EntryPath)?.into_owned();
        let shown = path.display().to_string();
        check_entry_path(&path).map_err(|reason| ArchiveError::Path {
            entry: shown.clone(),
            reason,
        })?;
        let kind = entry.header().entry_type();
        let link = match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::Directory => None,
            EntryType::Symlink => Some(LinkKind::Symlink),
            EntryType::Link => Some(LinkKind::HardLink),
            // Metadata entries the reader normally consumes itself.
            EntryType::XGlobalHeader
            | EntryType::XHeader
            | EntryType::GNULongName
            | EntryType::GNULongLink => continue,
            other => {
                return Err(ArchiveError::EntryType {
                    entry: shown,
                    kind: other,
                })
            }
        };
        if let Some(link) = link {
            check_link(&entry, link, &path, &shown)?;
        }
        budget.bytes = budget.bytes.saturating_add(entry.size());
        if budget.bytes > MAX_UNPACKED_BYTES {
            return Err(ArchiveError::TooManyBytes);
        }
        let unpacked = entry
            .unpack_in(dest)
            .map_err(|source| ArchiveError::Unpack {
                entry: shown.clone(),
                source,
            })?;
        if !unpacked {
            return Err(ArchiveError::Refused { entry: shown });
        }
    }
    Ok(())
}

/// Checks the target of link entry `entry` (at `path`, shown as `shown`): a symlink's must
/// stay inside the artifact, a hard link's must be a safe entry path.
fn check_link<R: io::Read>(
    entry: &tar::Entry<'_, R>,
    kind: LinkKind,
    path: &Path,
    shown: &str,
) -> Result<(), ArchiveError> {
    let target = entry
        .link_name()
        .map_err(|source| ArchiveError::LinkName {
            entry: shown.to_string(),
            source,
        })?
        .ok_or_else(|| ArchiveError::NoTarget {
            entry: shown.to_string(),
            kind,
        })?
        .into_owned();
    let checked = match kind {
        LinkKind::Symlink => check_symlink_target(path, &target),
        LinkKind::HardLink => check_entry_path(&target),
    };
    checked.map_err(|reason| ArchiveError::Target {
        kind,
        entry: shown.to_string(),
        target,
        reason,
    })
}

fn check_entry_path(path: &Path) -> Result<(), PathRefusal> {
    for c in path.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => return Err(PathRefusal::Absolute),
            Component::ParentDir => return Err(PathRefusal::ParentDir),
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(())
}

/// A relative symlink target must not climb above the unpacked root (checked lexically
/// from the link's directory).
fn check_symlink_target(link: &Path, target: &Path) -> Result<(), PathRefusal> {
    let normal = |c: &Component| matches!(c, Component::Normal(_));
    let mut depth = link.components().filter(normal).count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => return Err(PathRefusal::AbsoluteTarget),
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return Err(PathRefusal::OutsideArtifact);
                }
            }
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
        }
    }
    Ok(())
}

/// Checks, after unpacking, that every symlink under `root` that resolves at all resolves
/// inside `root` (chains of individually harmless links can still escape).
pub fn check_symlinks(root: &Path) -> Result<(), ArchiveError> {
    let canonical_root = fs::canonicalize(root).map_err(ArchiveError::Read)?;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).map_err(ArchiveError::Read)? {
            let entry = entry.map_err(ArchiveError::Read)?;
            let file_type = entry.file_type().map_err(ArchiveError::Read)?;
            let path = entry.path();
            if file_type.is_symlink() {
                if let Ok(resolved) = fs::canonicalize(&path) {
                    if !resolved.starts_with(&canonical_root) {
                        let link = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
                        return Err(ArchiveError::Escapes { link });
                    }
                }
            } else if file_type.is_dir() {
                dirs.push(path);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar.gz built from raw headers (so that hostile names can be written).
    fn tarball(build: impl FnOnce(&mut tar::Builder<Vec<u8>>)) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        build(&mut builder);
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &tar).unwrap();
        gz.finish().unwrap()
    }

    fn raw_entry(b: &mut tar::Builder<Vec<u8>>, kind: EntryType, name: &str, link: &str) {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(if kind == EntryType::Regular { 2 } else { 0 });
        h.set_mode(0o755);
        // Write the name bytes directly: `set_path` refuses `..` and absolute paths.
        let gnu = h.as_gnu_mut().unwrap();
        gnu.name[..name.len()].copy_from_slice(name.as_bytes());
        if !link.is_empty() {
            gnu.linkname[..link.len()].copy_from_slice(link.as_bytes());
        }
        h.set_cksum();
        let data: &[u8] = if kind == EntryType::Regular {
            b"hi"
        } else {
            b""
        };
        b.append(&h, data).unwrap();
    }

    fn unpack(bytes: &[u8]) -> (tempfile::TempDir, Result<(), ArchiveError>) {
        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.tar.gz");
        std::fs::write(&archive, bytes).unwrap();
        let dest = dir.path().join("out");
        std::fs::create_dir(&dest).unwrap();
        let r = unpack_into(&archive, &dest, &mut Budget::default())
            .and_then(|()| check_symlinks(&dest));
        (dir, r)
    }

    #[test]
    fn unpacks_files_dirs_and_inner_links() {
        let bytes = tarball(|b| {
            raw_entry(b, EntryType::Directory, "bin/", "");
            raw_entry(b, EntryType::Regular, "bin/svc", "");
            raw_entry(b, EntryType::Symlink, "bin/alias", "svc");
            raw_entry(b, EntryType::Symlink, "lib/up", "../bin/svc");
            raw_entry(b, EntryType::Link, "hard", "bin/svc");
        });
        let (dir, r) = unpack(&bytes);
        r.unwrap();
        let out = dir.path().join("out");
        assert_eq!(std::fs::read(out.join("bin/alias")).unwrap(), b"hi");
        assert_eq!(std::fs::read(out.join("hard")).unwrap(), b"hi");
    }

    #[test]
    fn refuses_escapes_and_garbage() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                tarball(|b| raw_entry(b, EntryType::Regular, "../evil", "")),
                "'..' is not allowed",
            ),
            (
                tarball(|b| raw_entry(b, EntryType::Regular, "/etc/evil", "")),
                "absolute paths",
            ),
            (
                tarball(|b| raw_entry(b, EntryType::Symlink, "l", "/etc/passwd")),
                "absolute targets",
            ),
            (
                tarball(|b| raw_entry(b, EntryType::Symlink, "a/l", "../../x")),
                "points outside",
            ),
            (
                tarball(|b| raw_entry(b, EntryType::Link, "h", "../x")),
                "hard link",
            ),
            (
                tarball(|b| raw_entry(b, EntryType::Fifo, "f", "")),
                "unsupported entry type",
            ),
            (b"this is not gzip".to_vec(), "invalid gzip header"),
        ];
        for (bytes, want) in cases {
            let (dir, r) = unpack(&bytes);
            let e = r.unwrap_err().to_string();
            assert!(e.contains(want), "want {want:?}, got {e:?}");
            assert!(!dir.path().join("evil").exists());
        }
        // Truncated gzip.
        let good = tarball(|b| raw_entry(b, EntryType::Regular, "f", ""));
        let (_dir, r) = unpack(&good[..good.len() / 2]);
        assert!(r.is_err());
    }

    /// Hostile archives (SPEC S3, docs/BENCHMARKS.md "Fuzzing"): valid and hostile tarballs,
    /// mutated before compression (headers, names, sizes, link targets: structure-aware) or
    /// after it (the gzip stream), and random bytes, unpacked as a download is. No panic,
    /// within a time bound, and nothing is ever created outside the destination.
    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        fn tars() -> Vec<Vec<u8>> {
            let plain = |build: &dyn Fn(&mut tar::Builder<Vec<u8>>)| {
                let mut b = tar::Builder::new(Vec::new());
                build(&mut b);
                b.into_inner().unwrap()
            };
            vec![
                plain(&|b| {
                    raw_entry(b, EntryType::Directory, "bin/", "");
                    raw_entry(b, EntryType::Regular, "bin/svc", "");
                    raw_entry(b, EntryType::Symlink, "bin/alias", "svc");
                    raw_entry(b, EntryType::Link, "hard", "bin/svc");
                    raw_entry(b, EntryType::Regular, "service.json", "");
                }),
                plain(&|b| raw_entry(b, EntryType::Symlink, "a/l", "../../x")),
                plain(&|b| {
                    raw_entry(b, EntryType::Symlink, "up", "..");
                    raw_entry(b, EntryType::Regular, "up/evil", "");
                }),
                plain(&|b| raw_entry(b, EntryType::Regular, "../evil", "")),
            ]
        }

        fn gzip(tar: &[u8]) -> Vec<u8> {
            let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            std::io::Write::write_all(&mut gz, tar).unwrap();
            gz.finish().unwrap()
        }

        /// Unpacks `archive`; checks that only the archive and `out` exist beside it.
        fn check(archive: &[u8]) {
            let (dir, _result) =
                hub_fuzz::within(std::time::Duration::from_secs(5), "unpack", || {
                    unpack(archive)
                });
            let mut names: Vec<String> = std::fs::read_dir(dir.path())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            assert_eq!(
                names,
                ["a.tar.gz", "out"],
                "something escaped the destination"
            );
        }

        proptest! {
            #![proptest_config(hub_fuzz::config(300))]

            #[test]
            fn mutated_tarballs(tar in hub_fuzz::mutated(tars())) {
                check(&gzip(&tar));
            }

            #[test]
            fn mutated_gzip_streams(bytes in hub_fuzz::mutated(tars().iter().map(|t| gzip(t)).collect())) {
                check(&bytes);
            }
        }
    }
}

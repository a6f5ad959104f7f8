//! Safe unpacking of `.tar.gz` artifacts.
//!
//! Refused (the whole artifact, with the entry named): absolute paths, `..` components,
//! symlinks that point outside the unpacked tree (absolute, climbing above the root, or
//! resolving outside it through other links), hard links with such names, device and FIFO
//! entries, more than [`MAX_ENTRIES`] entries or [`MAX_UNPACKED_BYTES`] in total. Ownership
//! and setuid bits are not restored; group/world write bits are masked.

use std::fs;
use std::io::BufReader;
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
#[derive(Debug)]
pub enum UnpackError {
    /// An artifact is not a well-formed, safe `.tar.gz` (one line).
    Corrupt(String),
    /// The artifact's `service.json` is invalid (validation errors).
    Invalid(Vec<String>),
    /// The filesystem failed (one line).
    Io(String),
}

/// Unpacks `archives` (uri for messages, sha256, downloaded file), in order, into
/// `version_dir` through a temporary sibling directory: checks every entry, the symlinks and
/// `service.json`, writes the completion marker (the artifacts' SHA-256s, as JSON), then
/// renames it into place. Blocking: call from `spawn_blocking`.
pub fn unpack_version(
    archives: &[(String, String, PathBuf)],
    version_dir: &Path,
) -> Result<(), UnpackError> {
    let io = |what: &str, e: std::io::Error| UnpackError::Io(format!("{what}: {e}"));
    let tmp = temp_sibling(version_dir);
    fs::create_dir(&tmp).map_err(|e| io("cannot create the unpack directory", e))?;
    let result = (|| {
        let mut budget = Budget::default();
        for (uri, _, path) in archives {
            unpack_into(path, &tmp, &mut budget)
                .map_err(|e| UnpackError::Corrupt(format!("corrupt artifact {uri}: {e}")))?;
        }
        check_symlinks(&tmp).map_err(|e| UnpackError::Corrupt(format!("corrupt artifact: {e}")))?;
        ServiceSpec::load(&tmp).map_err(UnpackError::Invalid)?;
        let shas: Vec<&str> = archives.iter().map(|(_, sha, _)| sha.as_str()).collect();
        let marker = serde_json::to_vec(&shas).map_err(|e| UnpackError::Io(e.to_string()))?;
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
pub fn unpack_into(archive: &Path, dest: &Path, budget: &mut Budget) -> Result<(), String> {
    let file = fs::File::open(archive).map_err(|e| format!("cannot open the download: {e}"))?;
    let mut tarball = tar::Archive::new(flate2::read::GzDecoder::new(BufReader::new(file)));
    tarball.set_preserve_permissions(false);
    tarball.set_preserve_ownerships(false);
    tarball.set_preserve_mtime(true);
    tarball.set_unpack_xattrs(false);
    tarball.set_overwrite(true);
    tarball.set_mask(0o022);
    let entries = tarball.entries().map_err(|e| e.to_string())?;
    for entry in entries {
        let mut entry = entry.map_err(|e| e.to_string())?;
        budget.entries += 1;
        if budget.entries > MAX_ENTRIES {
            return Err(format!("more than {MAX_ENTRIES} entries"));
        }
        let path = entry
            .path()
            .map_err(|e| format!("entry with an invalid path: {e}"))?
            .into_owned();
        let shown = path.display().to_string();
        check_entry_path(&path).map_err(|why| format!("entry {shown:?}: {why}"))?;
        let kind = entry.header().entry_type();
        match kind {
            EntryType::Regular | EntryType::Continuous | EntryType::Directory => {}
            EntryType::Symlink => {
                let target = entry
                    .link_name()
                    .map_err(|e| format!("entry {shown:?}: bad link name: {e}"))?
                    .ok_or_else(|| format!("entry {shown:?}: symlink without a target"))?
                    .into_owned();
                check_symlink_target(&path, &target)
                    .map_err(|why| format!("symlink {shown:?} -> {:?}: {why}", target.display()))?;
            }
            EntryType::Link => {
                let target = entry
                    .link_name()
                    .map_err(|e| format!("entry {shown:?}: bad link name: {e}"))?
                    .ok_or_else(|| format!("entry {shown:?}: hard link without a target"))?
                    .into_owned();
                check_entry_path(&target).map_err(|why| {
                    format!("hard link {shown:?} -> {:?}: {why}", target.display())
                })?;
            }
            // Metadata entries the reader normally consumes itself.
            EntryType::XGlobalHeader
            | EntryType::XHeader
            | EntryType::GNULongName
            | EntryType::GNULongLink => continue,
            other => {
                return Err(format!(
                    "entry {shown:?}: unsupported entry type {other:?} (only files, \
                     directories and links)"
                ))
            }
        }
        budget.bytes = budget.bytes.saturating_add(entry.size());
        if budget.bytes > MAX_UNPACKED_BYTES {
            return Err(format!("more than {MAX_UNPACKED_BYTES} bytes unpacked"));
        }
        let unpacked = entry
            .unpack_in(dest)
            .map_err(|e| format!("entry {shown:?}: {e}"))?;
        if !unpacked {
            return Err(format!("entry {shown:?}: refused by the unpacker"));
        }
    }
    Ok(())
}

fn check_entry_path(path: &Path) -> Result<(), String> {
    for c in path.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute paths are not allowed".into())
            }
            Component::ParentDir => return Err("'..' is not allowed".into()),
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    Ok(())
}

/// A relative symlink target must not climb above the unpacked root (checked lexically
/// from the link's directory).
fn check_symlink_target(link: &Path, target: &Path) -> Result<(), String> {
    let normal = |c: &Component| matches!(c, Component::Normal(_));
    let mut depth = link.components().filter(normal).count() as i64 - 1;
    for c in target.components() {
        match c {
            Component::RootDir | Component::Prefix(_) => {
                return Err("absolute targets are not allowed".into())
            }
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return Err("points outside the artifact".into());
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
pub fn check_symlinks(root: &Path) -> Result<(), String> {
    let canonical_root = fs::canonicalize(root).map_err(|e| e.to_string())?;
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).map_err(|e| e.to_string())? {
            let entry = entry.map_err(|e| e.to_string())?;
            let file_type = entry.file_type().map_err(|e| e.to_string())?;
            let path = entry.path();
            if file_type.is_symlink() {
                if let Ok(resolved) = fs::canonicalize(&path) {
                    if !resolved.starts_with(&canonical_root) {
                        let shown = path.strip_prefix(root).unwrap_or(&path);
                        return Err(format!(
                            "symlink {:?} resolves outside the artifact",
                            shown.display()
                        ));
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

    fn unpack(bytes: &[u8]) -> (tempfile::TempDir, Result<(), String>) {
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
            let e = r.unwrap_err();
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

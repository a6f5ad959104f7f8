//! Permissions of the data directory (SECURITY "At rest"): the store holds every secret of
//! the hub in plaintext, so its directories are 0700 and the files the store writes 0600,
//! whatever the process umask. RocksDB creates its own files with the umask: `hub-node` sets
//! it to 0o077 at start; [`restrict_tree`] also tightens what an older release (or another
//! umask) left behind.

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Mode of every directory the store creates.
pub const DIR_MODE: u32 = 0o700;
/// Mode of every file the store writes.
pub const FILE_MODE: u32 = 0o600;

/// Creates `dir` and its missing parents with [`DIR_MODE`] and sets an existing `dir` to it.
pub fn create_private_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    fs::set_permissions(dir, fs::Permissions::from_mode(DIR_MODE))
}

/// Creates (truncating) a file with [`FILE_MODE`] for writing.
pub fn create_private_file(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)
}

/// Removes the group and other permission bits of every directory and regular file under
/// `dir` (and of `dir`); symbolic links are not followed. An entry that disappears during
/// the walk (a file renamed or removed by another writer, such as the chaos build's fault
/// layer acknowledging a control file) has nothing left to restrict and is skipped.
pub fn restrict_tree(dir: &Path) -> io::Result<()> {
    let meta = fs::symlink_metadata(dir)?;
    restrict(dir, &meta)?;
    if !meta.is_dir() {
        return Ok(());
    }
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let walked = fs::symlink_metadata(&path).and_then(|meta| {
            if meta.is_dir() {
                restrict_tree(&path)
            } else {
                restrict(&path, &meta)
            }
        });
        match walked {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            other => other?,
        }
    }
    Ok(())
}

fn restrict(path: &Path, meta: &fs::Metadata) -> io::Result<()> {
    if !(meta.is_dir() || meta.is_file()) {
        return Ok(());
    }
    let mode = meta.permissions().mode();
    if mode & 0o077 != 0 {
        fs::set_permissions(path, fs::Permissions::from_mode(mode & !0o077))?;
    }
    Ok(())
}

/// Sets the process umask so files and directories that libraries create (RocksDB's SST,
/// WAL, MANIFEST and LOG files) are readable by the owner only. Call it first in `main`,
/// before any thread starts (the umask is process-wide). Returns the previous umask.
pub fn restrict_umask() -> u32 {
    // SAFETY: umask(2) cannot fail and only swaps the process's file-creation mask.
    unsafe { libc::umask(0o077) as u32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn directories_and_files_end_up_owner_only() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), DIR_MODE);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&dir).unwrap();
        assert_eq!(mode(&dir), DIR_MODE, "an existing directory is fixed");

        let file = dir.join("f");
        drop(create_private_file(&file).unwrap());
        assert_eq!(mode(&file), FILE_MODE);

        let loose = dir.join("sub");
        fs::create_dir(&loose).unwrap();
        fs::set_permissions(&loose, fs::Permissions::from_mode(0o755)).unwrap();
        fs::write(loose.join("g"), b"x").unwrap();
        fs::set_permissions(loose.join("g"), fs::Permissions::from_mode(0o644)).unwrap();
        fs::set_permissions(tmp.path().join("a"), fs::Permissions::from_mode(0o755)).unwrap();
        restrict_tree(&tmp.path().join("a")).unwrap();
        assert_eq!(mode(&tmp.path().join("a")), 0o700);
        assert_eq!(mode(&loose), 0o700);
        assert_eq!(mode(&loose.join("g")), 0o600);
    }

    /// The chaos CI run once failed at start-up: the fault layer renamed its acknowledgement
    /// file between the walk listing it and reading its mode. A file that vanishes mid-walk
    /// is skipped, not an error. The walks go on until the writer has renamed files a
    /// thousand times while they ran (on a loaded machine the writer may start late).
    #[test]
    fn files_renamed_during_the_walk_are_not_an_error() {
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_path_buf();
        let stop = Arc::new(AtomicBool::new(false));
        let renames = Arc::new(AtomicU64::new(0));
        let writer = {
            let (dir, stop, renames) = (dir.clone(), stop.clone(), renames.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    for i in 0..16 {
                        let tmp = dir.join(format!("f{i}.tmp"));
                        fs::write(&tmp, b"x").unwrap();
                        fs::rename(&tmp, dir.join(format!("f{i}"))).unwrap();
                        renames.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let mut during = 0;
        while during < 1_000 {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer renamed only {during} files during the walks in 60 s"
            );
            let before = renames.load(Ordering::Relaxed);
            restrict_tree(&dir).unwrap();
            during += renames.load(Ordering::Relaxed) - before;
        }
        stop.store(true, Ordering::Relaxed);
        writer.join().unwrap();
    }
}

//! A pass-through FUSE filesystem whose syncs the runner can make fail.
//!
//! Mounted over a node's data directory, it forwards every operation to a backing directory
//! on a real filesystem. While [`SyncFault`] is on, `fsync`, `fdatasync` and directory syncs
//! answer `EIO` and write nothing through: what a failing disk does to a database
//! ("fsyncgate"). Reads and writes keep working, so the node's only signal is the failed
//! sync, and the check is that it stops rather than carry on.
//!
//! Concurrency: the kernel sends requests from several threads; the inode table and the
//! open files sit behind one mutex each, held only to look up or change an entry, never
//! across I/O on a backing file.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry,
    ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

/// How long the kernel may cache attributes and names: every change goes through this
/// mount, so the kernel's cache stays true.
const TTL: Duration = Duration::from_secs(1);

/// The switch of a mounted [`FaultFs`]: while on, syncs fail with `EIO`.
#[derive(Debug, Clone, Default)]
pub struct SyncFault {
    on: Arc<AtomicBool>,
    failed: Arc<AtomicU64>,
}

impl SyncFault {
    /// Makes syncs fail (`true`) or pass through again (`false`).
    pub fn set(&self, on: bool) {
        self.on.store(on, Ordering::SeqCst);
    }

    /// How many syncs have failed so far.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::SeqCst)
    }

    fn strike(&self) -> bool {
        let on = self.on.load(Ordering::SeqCst);
        if on {
            self.failed.fetch_add(1, Ordering::SeqCst);
        }
        on
    }
}

/// Inode numbers ↔ backing paths. Numbers are never reused while mounted.
struct Inodes {
    paths: HashMap<u64, PathBuf>,
    numbers: HashMap<PathBuf, u64>,
    next: u64,
}

impl Inodes {
    fn number(&mut self, path: &Path) -> u64 {
        if let Some(n) = self.numbers.get(path) {
            return *n;
        }
        let n = self.next;
        self.next += 1;
        self.paths.insert(n, path.to_path_buf());
        self.numbers.insert(path.to_path_buf(), n);
        n
    }

    /// Moves `from` (and, for a directory, everything under it) to `to`.
    fn rename(&mut self, from: &Path, to: &Path) {
        if let Some(old) = self.numbers.remove(to) {
            self.paths.remove(&old);
        }
        let moved: Vec<(PathBuf, u64)> = self
            .numbers
            .iter()
            .filter(|(p, _)| p.starts_with(from))
            .map(|(p, n)| (p.clone(), *n))
            .collect();
        for (p, n) in moved {
            let rest = p
                .strip_prefix(from)
                .map(Path::to_path_buf)
                .unwrap_or_default();
            let new = if rest.as_os_str().is_empty() {
                to.to_path_buf()
            } else {
                to.join(rest)
            };
            self.numbers.remove(&p);
            self.numbers.insert(new.clone(), n);
            self.paths.insert(n, new);
        }
    }

    fn forget_path(&mut self, path: &Path) {
        if let Some(n) = self.numbers.remove(path) {
            self.paths.remove(&n);
        }
    }
}

/// The filesystem: a backing directory and the fault switch.
pub struct FaultFs {
    inodes: Mutex<Inodes>,
    files: Mutex<HashMap<u64, Arc<File>>>,
    next_fh: AtomicU64,
    fault: SyncFault,
}

impl FaultFs {
    /// A filesystem forwarding to `backing`, its syncs switched by `fault`.
    pub fn new(backing: &Path, fault: SyncFault) -> FaultFs {
        let mut paths = HashMap::new();
        let mut numbers = HashMap::new();
        paths.insert(INodeNo::ROOT.0, backing.to_path_buf());
        numbers.insert(backing.to_path_buf(), INodeNo::ROOT.0);
        FaultFs {
            inodes: Mutex::new(Inodes {
                paths,
                numbers,
                next: INodeNo::ROOT.0 + 1,
            }),
            files: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            fault,
        }
    }

    fn inodes(&self) -> MutexGuard<'_, Inodes> {
        // A panic while holding the table cannot leave it half-changed (each change is one
        // map operation pair), so a poisoned lock is still usable.
        self.inodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn path(&self, ino: INodeNo) -> Result<PathBuf, Errno> {
        self.inodes()
            .paths
            .get(&ino.0)
            .cloned()
            .ok_or(Errno::ENOENT)
    }

    fn child(&self, parent: INodeNo, name: &OsStr) -> Result<PathBuf, Errno> {
        Ok(self.path(parent)?.join(name))
    }

    fn file(&self, fh: FileHandle) -> Result<Arc<File>, Errno> {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&fh.0)
            .cloned()
            .ok_or(Errno::EBADF)
    }

    fn add_file(&self, f: File) -> FileHandle {
        let fh = self.next_fh.fetch_add(1, Ordering::SeqCst);
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(fh, Arc::new(f));
        FileHandle(fh)
    }

    /// The attributes of `path`, numbered in this mount.
    fn attr(&self, path: &Path) -> Result<FileAttr, Errno> {
        let m = std::fs::symlink_metadata(path)?;
        let ino = self.inodes().number(path);
        Ok(to_attr(ino, &m))
    }

    fn close(&self, fh: FileHandle) {
        self.files
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&fh.0);
    }

    /// Syncs an open file or directory, or fails while the fault is on.
    fn sync_handle(&self, fh: FileHandle, datasync: bool, reply: ReplyEmpty) {
        match self.file(fh).and_then(|f| self.sync(&f, datasync)) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn sync(&self, f: &File, datasync: bool) -> Result<(), Errno> {
        if self.fault.strike() {
            return Err(Errno::EIO);
        }
        if datasync {
            f.sync_data()?;
        } else {
            f.sync_all()?;
        }
        Ok(())
    }
}

fn time(secs: i64, nsecs: i64) -> SystemTime {
    let d = Duration::new(secs.unsigned_abs(), nsecs.clamp(0, 999_999_999) as u32);
    if secs >= 0 {
        UNIX_EPOCH + d
    } else {
        UNIX_EPOCH - d
    }
}

fn kind(m: &std::fs::Metadata) -> FileType {
    let t = m.file_type();
    if t.is_dir() {
        FileType::Directory
    } else if t.is_symlink() {
        FileType::Symlink
    } else {
        FileType::RegularFile
    }
}

fn to_attr(ino: u64, m: &std::fs::Metadata) -> FileAttr {
    FileAttr {
        ino: INodeNo(ino),
        size: m.size(),
        blocks: m.blocks(),
        atime: time(m.atime(), m.atime_nsec()),
        mtime: time(m.mtime(), m.mtime_nsec()),
        ctime: time(m.ctime(), m.ctime_nsec()),
        crtime: time(m.ctime(), m.ctime_nsec()),
        kind: kind(m),
        perm: (m.mode() & 0o7777) as u16,
        nlink: m.nlink() as u32,
        uid: m.uid(),
        gid: m.gid(),
        rdev: m.rdev() as u32,
        blksize: m.blksize() as u32,
        flags: 0,
    }
}

fn open_options(flags: i32) -> OpenOptions {
    let mut o = OpenOptions::new();
    match flags & libc::O_ACCMODE {
        libc::O_WRONLY => o.write(true),
        libc::O_RDWR => o.read(true).write(true),
        _ => o.read(true),
    };
    o.append(flags & libc::O_APPEND != 0);
    // O_CREAT, O_EXCL and O_TRUNC are the kernel's to resolve before open; the rest (no
    // O_DIRECT: the backing file is cached like any other) passes through.
    o.custom_flags(flags & !(libc::O_ACCMODE | libc::O_APPEND | libc::O_CREAT | libc::O_EXCL));
    o
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.child(parent, name).and_then(|p| self.attr(&p)) {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.path(ino).and_then(|p| self.attr(&p)) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let result = (|| -> Result<FileAttr, Errno> {
            let path = self.path(ino)?;
            if let Some(mode) = mode {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode & 0o7777))?;
            }
            if let Some(size) = size {
                match fh.map(|fh| self.file(fh)) {
                    Some(Ok(f)) => f.set_len(size)?,
                    _ => OpenOptions::new().write(true).open(&path)?.set_len(size)?,
                }
            }
            self.attr(&path)
        })();
        match result {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let result = self.child(parent, name).and_then(|p| {
            std::fs::DirBuilder::new()
                .mode(mode & !umask & 0o7777)
                .create(&p)?;
            self.attr(&p)
        });
        match result {
            Ok(a) => reply.entry(&TTL, &a, Generation(0)),
            Err(e) => reply.error(e),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.child(parent, name).and_then(|p| {
            std::fs::remove_file(&p)?;
            self.inodes().forget_path(&p);
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.child(parent, name).and_then(|p| {
            std::fs::remove_dir(&p)?;
            self.inodes().forget_path(&p);
            Ok(())
        }) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if flags.bits() != 0 {
            // RENAME_NOREPLACE / EXCHANGE: nothing the node uses.
            return reply.error(Errno::EINVAL);
        }
        let result = (|| -> Result<(), Errno> {
            let from = self.child(parent, name)?;
            let to = self.child(newparent, newname)?;
            std::fs::rename(&from, &to)?;
            self.inodes().rename(&from, &to);
            Ok(())
        })();
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        match self
            .path(ino)
            .and_then(|p| Ok(open_options(flags.0).open(p)?))
        {
            Ok(f) => reply.opened(self.add_file(f), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let result = (|| -> Result<(FileAttr, File), Errno> {
            let p = self.child(parent, name)?;
            let mut o = open_options(flags);
            o.create(true).write(true).mode(mode & !umask & 0o7777);
            if flags & libc::O_EXCL != 0 {
                o.create_new(true);
            }
            let f = o.open(&p)?;
            Ok((self.attr(&p)?, f))
        })();
        match result {
            Ok((a, f)) => reply.created(
                &TTL,
                &a,
                Generation(0),
                self.add_file(f),
                FopenFlags::empty(),
            ),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let result = self.file(fh).and_then(|f| {
            // The kernel asks for at most its max_read (128 KiB by default).
            let mut buf = vec![0; size.min(1 << 20) as usize];
            let mut got = 0;
            while got < buf.len() {
                match f.read_at(&mut buf[got..], offset + got as u64)? {
                    0 => break,
                    n => got += n,
                }
            }
            buf.truncate(got);
            Ok(buf)
        });
        match result {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        match self
            .file(fh)
            .and_then(|f| Ok(f.write_all_at(data, offset)?))
        {
            Ok(()) => reply.written(data.len() as u32),
            Err(e) => reply.error(e),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok();
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        self.close(fh);
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_handle(fh, datasync, reply);
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.path(ino).and_then(|p| Ok(File::open(p)?)) {
            Ok(f) => reply.opened(self.add_file(f), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let result = (|| -> Result<Vec<(u64, FileType, std::ffi::OsString)>, Errno> {
            let dir = self.path(ino)?;
            let mut out = Vec::new();
            for e in std::fs::read_dir(&dir)? {
                let e = e?;
                // An entry removed since the listing is left out, not an error.
                let Ok(m) = e.metadata() else { continue };
                let n = self.inodes().number(&e.path());
                out.push((n, kind(&m), e.file_name()));
            }
            Ok(out)
        })();
        match result {
            Ok(entries) => {
                let dots = [
                    (ino.0, FileType::Directory, ".".into()),
                    (ino.0, FileType::Directory, "..".into()),
                ];
                for (i, (n, k, name)) in dots
                    .into_iter()
                    .chain(entries)
                    .enumerate()
                    .skip(offset as usize)
                {
                    if reply.add(INodeNo(n), i as u64 + 1, k, name) {
                        break;
                    }
                }
                reply.ok();
            }
            Err(e) => reply.error(e),
        }
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.close(fh);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.sync_handle(fh, datasync, reply);
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let result = (|| -> Result<libc::statvfs, Errno> {
            let root = self.path(INodeNo::ROOT)?;
            let c = std::ffi::CString::new(root.as_os_str().as_encoded_bytes())
                .map_err(|_| Errno::EINVAL)?;
            // SAFETY: statvfs(3) fills the zeroed struct from a NUL-terminated path.
            let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
            if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            Ok(s)
        })();
        match result {
            Ok(s) => reply.statfs(
                s.f_blocks,
                s.f_bfree,
                s.f_bavail,
                s.f_files,
                s.f_ffree,
                s.f_bsize as u32,
                s.f_namemax as u32,
                s.f_frsize as u32,
            ),
            Err(e) => reply.error(e),
        }
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let result = self.file(fh).and_then(|f| {
            let (Ok(off), Ok(len)) = (i64::try_from(offset), i64::try_from(length)) else {
                return Err(Errno::EINVAL);
            };
            // SAFETY: fallocate(2) on an open descriptor this filesystem owns.
            if unsafe { libc::fallocate(f.as_raw_fd(), mode, off, len) } != 0 {
                return Err(std::io::Error::last_os_error().into());
            }
            Ok(())
        });
        match result {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renames_move_children_and_replace_the_target() {
        let mut i = Inodes {
            paths: HashMap::new(),
            numbers: HashMap::new(),
            next: 2,
        };
        let a = i.number(Path::new("/b/a"));
        let ax = i.number(Path::new("/b/a/x"));
        let c = i.number(Path::new("/b/c"));
        i.rename(Path::new("/b/a"), Path::new("/b/c"));
        assert_eq!(i.numbers.get(Path::new("/b/c")), Some(&a));
        assert_eq!(i.numbers.get(Path::new("/b/c/x")), Some(&ax));
        assert!(!i.paths.contains_key(&c));
        assert!(!i.numbers.contains_key(Path::new("/b/a")));
        assert_eq!(
            i.paths.get(&ax).map(PathBuf::as_path),
            Some(Path::new("/b/c/x"))
        );
    }
}

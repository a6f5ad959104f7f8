//! Disk faults: every node's data directory on a disk the runner controls.
//!
//! - `disk-full`: the data directory sits on its own small loop-mounted ext4 (no blocks
//!   reserved for root, who runs the nodes). The fault fills it with a ballast file and keeps
//!   it full while it holds, then deletes the ballast.
//! - `fsync-error`: the data directory is a [`faultfs`] FUSE mount over a backing directory
//!   (on the loop filesystem when both faults are drawn). The fault makes every sync under
//!   it fail with `EIO` while it holds.
//!
//! A node that hits either must crash-stop (hub-node exits with status 74 and says so in its
//! log, `crash_stop` in hub-node) rather than carry on, or keep serving correctly. When the
//! fault ends the runner, acting as a supervisor, restarts a node that stopped. The checkers
//! then hold it to the same rules as every other fault: nothing acknowledged lost, the
//! history linearizable, the healed states equal; and [`DiskStrike`] records say whether
//! each stop was the clean one and whether the node served again.
//!
//! The disks are set up before `hubctl dev up` creates the nodes (their data directories
//! are the mount points) and removed when [`Disks`] is dropped, after the nodes are gone.

pub mod faultfs;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::check::{DiskFault, DiskStrike};
use anyhow::{bail, Context};

use super::cluster::Cluster;

/// Each node's loop filesystem: sparse, so it costs only what is written.
const DISK_BYTES: u64 = 512 << 20;

/// The line hub-node's crash-stop writes to its log (`crash_stop` in hub-node).
pub const CRASH_STOP_LINE: &str = "the node stopped (exit 74)";

/// The ballast file's name in the filled filesystem's root.
const BALLAST: &str = "chaos-ballast";

/// Which disk faults a run draws from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskPlan {
    /// Loop-mounted ext4 per node (`disk-full`).
    pub small_disk: bool,
    /// FUSE pass-through per node (`fsync-error`).
    pub sync_faults: bool,
}

/// Why this machine cannot run `plan`'s faults, if it cannot.
pub fn unavailable(plan: DiskPlan) -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the runner is not root (mounting a disk needs root: run it as root)".into());
    }
    if plan.small_disk {
        if !Path::new("/dev/loop-control").exists() {
            return Some(
                "this machine has no loop devices (/dev/loop-control is missing: modprobe loop)"
                    .into(),
            );
        }
        for tool in ["mkfs.ext4", "mount", "umount"] {
            if !on_path(tool) {
                return Some(format!(
                    "{tool} is not installed (apt-get install e2fsprogs mount)"
                ));
            }
        }
    }
    if plan.sync_faults && !Path::new("/dev/fuse").exists() {
        return Some("this machine has no FUSE (/dev/fuse is missing: modprobe fuse)".into());
    }
    None
}

/// Whether `tool` is where the runner will look for it (its `PATH`).
fn on_path(tool: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(tool).is_file()))
}

/// One node's disk.
struct NodeDisk {
    id: u64,
    /// The node's data directory (the mount point the node sees).
    data_dir: PathBuf,
    /// The loop filesystem's mount point, when there is one.
    loop_mount: Option<PathBuf>,
    /// Where the bytes really go: the loop filesystem, a plain directory, or the data dir.
    backing: PathBuf,
    /// The FUSE session (dropped to unmount).
    fuse: Option<fuser::BackgroundSession>,
    sync_fault: faultfs::SyncFault,
}

/// Every node's disk.
pub struct Disks {
    nodes: Vec<NodeDisk>,
}

impl Disks {
    /// Sets up a disk for each node of a cluster about to be created in `hub_dir` (data
    /// directories `hub_dir/node-N`); image files and backing directories go to `work`.
    pub fn create(
        hub_dir: &Path,
        work: &Path,
        ids: &[u64],
        plan: DiskPlan,
    ) -> anyhow::Result<Disks> {
        std::fs::create_dir_all(hub_dir).with_context(|| hub_dir.display().to_string())?;
        std::fs::create_dir_all(work).with_context(|| work.display().to_string())?;
        let hub_dir = hub_dir.canonicalize()?;
        let work = work.canonicalize()?;
        let mut disks = Disks { nodes: Vec::new() };
        for &id in ids {
            let data_dir = hub_dir.join(format!("node-{id}"));
            std::fs::create_dir_all(&data_dir)?;
            let backing = if plan.sync_faults {
                work.join(format!("node-{id}"))
            } else {
                data_dir.clone()
            };
            std::fs::create_dir_all(&backing)?;
            let mut disk = NodeDisk {
                id,
                data_dir: data_dir.clone(),
                loop_mount: None,
                backing: backing.clone(),
                fuse: None,
                sync_fault: faultfs::SyncFault::default(),
            };
            if plan.small_disk {
                let image = work.join(format!("node-{id}.img"));
                make_ext4(&image)?;
                run(Command::new("mount")
                    .args(["-o", "loop"])
                    .arg(&image)
                    .arg(&backing))?;
                disk.loop_mount = Some(backing.clone());
                // hub-node refuses a data directory holding anything but its own files.
                let found = backing.join("lost+found");
                std::fs::remove_dir(&found).with_context(|| found.display().to_string())?;
            }
            if plan.sync_faults {
                let fs = faultfs::FaultFs::new(&backing, disk.sync_fault.clone());
                let mut config = fuser::Config::default();
                config.mount_options = vec![
                    fuser::MountOption::FSName(format!("chaos-node-{id}")),
                    fuser::MountOption::DefaultPermissions,
                ];
                config.n_threads = Some(4);
                let session = fuser::spawn_mount(fs, &data_dir, &config).with_context(|| {
                    format!("mount the fault filesystem on {}", data_dir.display())
                })?;
                disk.fuse = Some(session);
            }
            disks.nodes.push(disk);
        }
        Ok(disks)
    }

    fn node(&self, id: u64) -> anyhow::Result<&NodeDisk> {
        self.nodes
            .iter()
            .find(|d| d.id == id)
            .with_context(|| format!("node {id} has no disk of the runner's"))
    }

    /// Fills node `id`'s filesystem; returns the ballast's size.
    pub fn fill(&self, id: u64) -> anyhow::Result<u64> {
        let d = self.node(id)?;
        let root = d
            .loop_mount
            .as_ref()
            .with_context(|| format!("node {id}'s data is not on a small disk"))?;
        top_up(&root.join(BALLAST))
    }

    /// Deletes node `id`'s ballast.
    pub fn free(&self, id: u64) -> anyhow::Result<()> {
        let d = self.node(id)?;
        if let Some(root) = &d.loop_mount {
            let p = root.join(BALLAST);
            match std::fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e).with_context(|| p.display().to_string()),
            }
        }
        Ok(())
    }

    /// Makes node `id`'s syncs fail (`true`) or pass again; returns how many have failed.
    pub fn set_sync_fault(&self, id: u64, on: bool) -> anyhow::Result<u64> {
        let d = self.node(id)?;
        if d.fuse.is_none() {
            bail!("node {id}'s data is not on the fault filesystem");
        }
        d.sync_fault.set(on);
        Ok(d.sync_fault.failed())
    }

    /// Where node `id`'s bytes really are (for reading its files without the fault layer).
    pub fn backing(&self, id: u64) -> anyhow::Result<&Path> {
        Ok(&self.node(id)?.backing)
    }
}

/// Strikes node `id` with `fault` for `hold`, then ends it and, as a supervisor would,
/// restarts the node if it stopped. Returns what happened and when the fault took effect.
pub async fn strike(
    disks: &Disks,
    cluster: &mut Cluster,
    hub_dir: &Path,
    id: u64,
    fault: DiskFault,
    hold: Duration,
) -> anyhow::Result<(DiskStrike, Instant)> {
    let stops_before = crash_stops(hub_dir, id);
    let mut ballast_bytes = 0;
    match fault {
        DiskFault::DiskFull => ballast_bytes = disks.fill(id)?,
        DiskFault::FsyncError => {
            disks.set_sync_fault(id, true)?;
        }
    }
    let hit = Instant::now();
    // Held, and for a full disk kept full: what the node frees (an obsolete log file) is
    // taken again at once.
    while hit.elapsed() < hold {
        if fault == DiskFault::DiskFull {
            ballast_bytes = disks.fill(id)?;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stopped = !cluster.is_running(id);
    let syncs_failed = match fault {
        DiskFault::DiskFull => {
            disks.free(id)?;
            0
        }
        DiskFault::FsyncError => disks.set_sync_fault(id, false)?,
    };
    // A node the fault stopped may still be writing its last words: give it a moment.
    let clean_stop = stopped
        && tokio::task::block_in_place(|| {
            wait_for(Duration::from_secs(2), || {
                crash_stops(hub_dir, id) > stops_before
            })
        });
    if stopped {
        if let Err(e) = tokio::task::block_in_place(|| cluster.restart(id)) {
            // The checker reports the node that did not come back.
            eprintln!("chaos: node {id} did not restart after {fault:?}: {e:#}");
        }
    }
    let served_again = serves(cluster, id, Duration::from_secs(30)).await;
    Ok((
        DiskStrike {
            node: id,
            fault,
            ballast_bytes,
            syncs_failed,
            stopped,
            clean_stop,
            served_again,
        },
        hit,
    ))
}

/// Whether node `id` answers a status call within `limit`.
async fn serves(cluster: &Cluster, id: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cluster.views().await.iter().any(|v| v.id == id) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    false
}

impl Drop for Disks {
    fn drop(&mut self) {
        // The nodes are gone (the cluster is dropped first). FUSE first, then the loop
        // filesystem under it; lazily, so a straggling open file cannot keep them mounted.
        for d in &mut self.nodes {
            if let Some(session) = d.fuse.take() {
                let _ = Command::new("umount").arg("-l").arg(&d.data_dir).status();
                drop(session);
            }
            if let Some(m) = d.loop_mount.take() {
                let _ = Command::new("umount").arg("-l").arg(&m).status();
            }
        }
    }
}

fn make_ext4(image: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::create(image).with_context(|| image.display().to_string())?;
    f.set_len(DISK_BYTES)?;
    drop(f);
    // -m 0: the nodes run as root, and root may use reserved blocks; none are reserved, so
    // "full" is full for them too.
    run(Command::new("mkfs.ext4")
        .args([
            "-q",
            "-F",
            "-m",
            "0",
            "-E",
            "lazy_itable_init=1,lazy_journal_init=1",
        ])
        .arg(image))
}

fn run(cmd: &mut Command) -> anyhow::Result<()> {
    let out = cmd
        .output()
        .with_context(|| format!("run {:?}", cmd.get_program()))?;
    if !out.status.success() {
        bail!(
            "{:?} failed: {}",
            cmd,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Grows the ballast at `path` until its filesystem has no block left; returns its size.
fn top_up(path: &Path) -> anyhow::Result<u64> {
    use std::os::unix::io::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| path.display().to_string())?;
    let mut chunk: i64 = 256 << 20;
    while chunk >= 4096 {
        let len = f.metadata()?.len() as i64;
        // SAFETY: fallocate(2) on a file this function opened.
        let r = unsafe { libc::fallocate(f.as_raw_fd(), 0, len, chunk) };
        if r != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ENOSPC) {
                return Err(e).with_context(|| format!("fill {}", path.display()));
            }
            chunk /= 2;
        }
    }
    Ok(f.metadata()?.len())
}

/// The crash-stop lines in node `id`'s log (`hub_dir/node-N.log`, where `hubctl dev`
/// sends its output).
pub fn crash_stops(hub_dir: &Path, id: u64) -> usize {
    std::fs::read_to_string(hub_dir.join(format!("node-{id}.log")))
        .map(|t| t.lines().filter(|l| l.contains(CRASH_STOP_LINE)).count())
        .unwrap_or(0)
}

/// Waits up to `limit` for `done()` to become true; returns whether it did.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_disk_needs_root_and_says_so() {
        // SAFETY: geteuid(2) has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let why = unavailable(DiskPlan {
            small_disk: true,
            sync_faults: true,
        });
        if root {
            // A root runner on a machine with loop devices and FUSE can run both.
            let have = Path::new("/dev/loop-control").exists() && Path::new("/dev/fuse").exists();
            assert_eq!(why.is_none(), have && on_path("mkfs.ext4"), "{why:?}");
        } else {
            assert!(why.is_some_and(|w| w.contains("not root")));
        }
    }
}

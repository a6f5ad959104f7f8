//! The nodes' resources as the run goes: every [`INTERVAL`] a thread reads each member's CPU
//! time, resident memory and open file descriptors from `/proc/<pid>`, and counts the bytes and
//! lines its log (`DIR/node-N.log`, which every start of the node appends to) has grown by.
//! The samples go to the resource budgets (`check::resource_budgets`).

use std::collections::HashMap;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::check::ResourceSample;

/// How often the nodes are sampled.
pub const INTERVAL: Duration = Duration::from_millis(250);

/// Samples the members of the cluster in a directory until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<ResourceSample>>>,
}

impl Sampler {
    /// Starts sampling the members of the `hubctl dev` cluster in `hub_dir`, with times
    /// counted from `epoch`.
    pub fn start(hub_dir: &Path, epoch: Instant) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let dir = hub_dir.to_path_buf();
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut logs = HashMap::new();
            let mut samples = Vec::new();
            let mut next = Instant::now();
            while !stopped.load(Ordering::Relaxed) {
                samples.extend(sample(&dir, epoch, &mut logs));
                next += INTERVAL;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
            samples
        });
        Sampler {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sampling and returns the samples, oldest first.
    pub fn stop(mut self) -> Vec<ResourceSample> {
        self.finish()
    }

    fn finish(&mut self) -> Vec<ResourceSample> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.finish();
    }
}

/// How far a node's log has been read: bytes and lines.
#[derive(Default)]
struct LogRead {
    bytes: u64,
    lines: u64,
}

/// One sample of every member of the cluster in `dir`.
fn sample(dir: &Path, epoch: Instant, logs: &mut HashMap<u64, LogRead>) -> Vec<ResourceSample> {
    let Ok(file) = hubctl::read_cluster_file(dir) else {
        return Vec::new();
    };
    file.nodes
        .iter()
        .map(|n| {
            let log = logs.entry(n.id).or_default();
            count_log(&log_path(dir, n.id), log);
            let process = super::process::is_alive(n.pid)
                .then(|| read_process(n.pid))
                .flatten();
            let (cpu_ms, rss_kib, fds) = process.unwrap_or_default();
            ResourceSample {
                node: n.id,
                at_ns: epoch.elapsed().as_nanos() as u64,
                pid: process.map(|_| n.pid),
                cpu_ms,
                rss_kib,
                fds,
                log_bytes: log.bytes,
                log_lines: log.lines,
            }
        })
        .collect()
}

/// Node `id`'s log in the cluster directory `dir`.
fn log_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("node-{id}.log"))
}

/// Reads what `path` gained since `log` and counts it.
fn count_log(path: &Path, log: &mut LogRead) {
    let Ok(mut f) = std::fs::File::open(path) else {
        return;
    };
    if f.seek(SeekFrom::Start(log.bytes)).is_err() {
        return;
    }
    let mut buf = vec![0u8; 1 << 16];
    while let Ok(n) = f.read(&mut buf) {
        if n == 0 {
            break;
        }
        log.bytes += n as u64;
        log.lines += buf[..n].iter().filter(|b| **b == b'\n').count() as u64;
    }
}

/// CPU time (user and system, ms), resident memory (KiB) and open descriptors of `pid`.
fn read_process(pid: u32) -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // After the command (in parentheses, which may hold spaces): state is field 3, utime 14
    // and stime 15 (proc(5)).
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf(3) only reads system constants.
    let (hz, page) = unsafe {
        (
            libc::sysconf(libc::_SC_CLK_TCK),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).ok()?;
    let resident: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count() as u64;
    Some((
        ticks * 1000 / hz.max(1) as u64,
        resident * page.max(1) as u64 / 1024,
        fds,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The runner's own process reads as a node would: some CPU, memory and descriptors.
    #[test]
    fn a_process_is_read_from_proc() {
        let (cpu_ms, rss_kib, fds) = read_process(std::process::id()).expect("readable");
        let _ = cpu_ms;
        assert!(rss_kib > 0 && fds > 0, "{rss_kib} {fds}");
        assert!(read_process(u32::MAX).is_none());
    }

    /// A log is counted as it grows, each byte once.
    #[test]
    fn a_log_is_counted_as_it_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = log_path(dir.path(), 1);
        let mut log = LogRead::default();
        count_log(&path, &mut log);
        assert_eq!((log.bytes, log.lines), (0, 0), "no file yet");
        std::fs::write(&path, "a\nbb\n").unwrap();
        count_log(&path, &mut log);
        assert_eq!((log.bytes, log.lines), (5, 2));
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"ccc\nd").unwrap();
        count_log(&path, &mut log);
        assert_eq!((log.bytes, log.lines), (10, 3));
    }
}

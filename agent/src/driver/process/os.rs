//! Operating-system processes: spawning a service in its own session, telling whether a pid
//! is still the process we started (`/proc`), signalling its process group, describing exit
//! statuses, and the service log.
//!
//! A service is started with `setsid()`, so its pid is also its process group and session
//! id: signals go to the whole group (a `sh -c` wrapper and what it started), and killing the
//! agent (even its process group, as a terminal's Ctrl-C does) does not reach the service.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};

/// The service log is rotated (to `service.log.1`) at a start once it is this large.
const MAX_LOG_BYTES: u64 = 16 * 1024 * 1024;
/// Lines starting with this mark a start in the service log.
const LOG_MARKER: &str = "=== hub-agent";
/// Agent environment variables passed to services (everything else is cleared).
const PASSED_ENV: [&str; 7] = ["PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER"];

/// What to start.
#[derive(Debug, Clone)]
pub struct Launch {
    /// Absolute program path.
    pub program: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment added to the passed agent variables (`PATH`, `HOME`, `LANG`, …).
    pub env: Vec<(String, String)>,
    /// Working directory.
    pub cwd: PathBuf,
    /// The log file stdout and stderr are appended to.
    pub log: PathBuf,
}

/// Starts `launch` in a new session with stdin from `/dev/null` and stdout/stderr appended
/// to its log, after writing a marker line (`header`) to the log.
pub fn spawn(launch: &Launch, header: &str) -> io::Result<tokio::process::Child> {
    rotate_log(&launch.log);
    let mut log = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .open(&launch.log)?;
    writeln!(log, "{LOG_MARKER} {header} ===")?;
    let stderr = log.try_clone()?;
    let mut command = tokio::process::Command::new(&launch.program);
    command
        .args(&launch.args)
        .env_clear()
        .envs(
            PASSED_ENV
                .iter()
                .filter_map(|k| std::env::var_os(k).map(|v| (*k, v))),
        )
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&launch.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(stderr))
        .kill_on_drop(false);
    if std::env::var_os("PATH").is_none() {
        command.env("PATH", "/usr/local/bin:/usr/bin:/bin");
    }
    // SAFETY: the closure runs in the forked child before exec; it only calls setsid(2),
    // which is async-signal-safe, and builds an io::Error from errno without allocating.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() == -1 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

fn rotate_log(log: &Path) {
    if fs::metadata(log).is_ok_and(|m| m.len() > MAX_LOG_BYTES) {
        let mut rotated = log.as_os_str().to_owned();
        rotated.push(".1");
        let _ = fs::rename(log, PathBuf::from(rotated));
    }
}

/// The fields of `/proc/<pid>/stat` the driver uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcStat {
    /// State letter (`R`, `S`, `Z`, …).
    pub state: char,
    /// Parent pid.
    pub ppid: u32,
    /// Process group id.
    pub pgrp: i32,
    /// Start time in clock ticks since boot.
    pub start_ticks: u64,
}

/// Reads `/proc/<pid>/stat`.
pub fn proc_stat(pid: u32) -> Option<ProcStat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may contain spaces and ')'.
    let after = &text[text.rfind(')')? + 1..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    Some(ProcStat {
        state: fields.first()?.chars().next()?,
        ppid: fields.get(1)?.parse().ok()?,
        pgrp: fields.get(2)?.parse().ok()?,
        start_ticks: fields.get(19)?.parse().ok()?,
    })
}

fn as_pid(pid: u32) -> Option<i32> {
    // 0 and 1 (and anything negative) would signal a group, every process, or init.
    i32::try_from(pid).ok().filter(|p| *p > 1)
}

/// Whether `pid` exists and is not a zombie.
pub fn is_alive(pid: u32) -> bool {
    let Some(p) = as_pid(pid) else {
        return false;
    };
    // SAFETY: kill with signal 0 only checks for existence and permission.
    let exists = unsafe { libc::kill(p, 0) } == 0
        || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    exists && proc_stat(pid).is_none_or(|s| !matches!(s.state, 'Z' | 'X' | 'x'))
}

/// Reaps `pid` if it is a zombie whose parent is this agent: an adopted service re-parented
/// to the agent (when the agent runs as PID 1 or a subreaper) that has ended. Never touches
/// a process that has not ended or is not our child.
pub fn reap_if_our_zombie(pid: u32) {
    let Some(p) = as_pid(pid) else {
        return;
    };
    let ours = proc_stat(pid).is_some_and(|s| s.state == 'Z' && s.ppid == std::process::id());
    if ours {
        // SAFETY: waitpid(2) with WNOHANG on a specific pid that is our ended child.
        unsafe {
            libc::waitpid(p, std::ptr::null_mut(), libc::WNOHANG);
        }
    }
}

/// Whether `pid` is alive and still the process that was recorded: same start time (when
/// recorded) and its command line contains `command` or it runs in `cwd` (a wrapper may
/// have exec'd another program in the version directory).
pub fn is_same_process(pid: u32, start_ticks: Option<u64>, command: &str, cwd: &Path) -> bool {
    if !is_alive(pid) {
        return false;
    }
    let Some(stat) = proc_stat(pid) else {
        return false;
    };
    if start_ticks.is_some_and(|t| t != stat.start_ticks) {
        return false;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
    (!command.is_empty() && cmdline.contains(command))
        || fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|d| d == cwd)
}

/// Sends `signal` to the process group led by `pid` (the service and what it started).
/// Returns whether anything received it.
pub fn signal_group(pid: u32, signal: libc::c_int) -> bool {
    let Some(p) = as_pid(pid) else {
        return false;
    };
    // SAFETY: plain kill(2) on a negative pid > 1: signals exactly the process group `p`,
    // which the driver created with setsid() for this service.
    unsafe { libc::kill(-p, signal) == 0 }
}

/// The live (not zombie) processes whose working directory lies under `dir`: the services
/// the driver started from an unpacked version (their working directory is the version's
/// directory) and what they started.
pub fn processes_working_in(dir: &Path) -> Vec<u32> {
    let Ok(dir) = dir.canonicalize() else {
        return Vec::new();
    };
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| proc_stat(pid).is_some_and(|s| s.state != 'Z'))
        .filter(|pid| {
            fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.starts_with(&dir))
        })
        .collect()
}

/// SIGKILLs `pid` and the process group it leads.
pub fn kill_with_group(pid: u32) {
    signal_group(pid, libc::SIGKILL);
    if let Some(p) = as_pid(pid) {
        // SAFETY: kill(2) of one positive pid > 1 (as_pid refuses 0, 1 and overflow).
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
}

/// `exit status 3`, `killed by signal 9 (SIGKILL)`.
pub fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        return format!("exit status {code}");
    }
    match status.signal() {
        Some(sig) => {
            let name = match sig {
                libc::SIGKILL => " (SIGKILL)",
                libc::SIGTERM => " (SIGTERM)",
                libc::SIGSEGV => " (SIGSEGV)",
                libc::SIGABRT => " (SIGABRT)",
                libc::SIGINT => " (SIGINT)",
                libc::SIGHUP => " (SIGHUP)",
                _ => "",
            };
            format!("killed by signal {sig}{name}")
        }
        None => "exited".to_string(),
    }
}

/// The last `max_lines` lines the service wrote since its last start (at most 16 KiB).
pub fn log_tail(log: &Path, max_lines: usize) -> String {
    const WINDOW: u64 = 16 * 1024;
    let Ok(mut file) = fs::File::open(log) else {
        return String::new();
    };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let _ = file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)));
    let mut bytes = Vec::new();
    let _ = file.take(WINDOW).read_to_end(&mut bytes);
    let text = String::from_utf8_lossy(&bytes);
    let since_start = match text.rfind(LOG_MARKER) {
        Some(i) => text[i..]
            .split_once('\n')
            .map(|(_, rest)| rest)
            .unwrap_or(""),
        None => &text,
    };
    let lines: Vec<&str> = since_start
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    lines[lines.len().saturating_sub(max_lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_and_liveness_of_self() {
        let me = std::process::id();
        let stat = proc_stat(me).unwrap();
        assert!(stat.start_ticks > 0);
        assert!(is_alive(me));
        assert!(!is_alive(0) && !is_alive(1));
        let exe = std::env::current_exe().unwrap();
        assert!(is_same_process(
            me,
            Some(stat.start_ticks),
            &exe.to_string_lossy(),
            Path::new("/nonexistent")
        ));
        assert!(!is_same_process(
            me,
            Some(stat.start_ticks + 1),
            &exe.to_string_lossy(),
            Path::new("/")
        ));
        assert!(!signal_group(0, 0) && !signal_group(1, 0));
    }

    #[test]
    fn log_tail_since_last_start() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("service.log");
        std::fs::write(
            &log,
            "=== hub-agent a ===\nold\n=== hub-agent b ===\none\n\ntwo\nthree\n",
        )
        .unwrap();
        assert_eq!(log_tail(&log, 2), "two\nthree");
        assert_eq!(log_tail(&log, 10), "one\ntwo\nthree");
        assert_eq!(log_tail(&dir.path().join("none"), 3), "");
    }
}

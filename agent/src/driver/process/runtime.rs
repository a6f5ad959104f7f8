//! One entity at run time: its directory, the lock that serialises its tasks and its
//! supervision, and what runs — launching a deployment, stopping it, telling whether it is
//! alive, waiting for it to become ready, and the health it reports.
//!
//! Locking: `op` (async) is held by a task for its whole run and by the supervisor (via
//! `try_lock`, so supervision never delays a plan) for one check; only the holder changes
//! what runs. `rt` (sync) guards the in-memory view and is never held across an `.await`,
//! so `observe` never waits for a task.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tracing::{info, warn};

use super::deployment::Deployment;
use super::layout::EntityDir;
use super::os::{self, Launch};
use super::probe;
use super::spec::{parse_config, substitute, ServiceSpec, Vars};
use super::state::RunState;
use crate::plan::{Health, Observed};

/// First delay before restarting a crashed service; it doubles per restart.
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest delay between restarts.
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long a service must stay ready before the backoff starts again at 1 s.
pub const BACKOFF_RESET: Duration = Duration::from_secs(60);
/// Graceful stop timeout when the service definition cannot be read.
const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long to wait for a process to die after SIGKILL.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// Interval of readiness polls.
const POLL: Duration = Duration::from_millis(100);
/// How long a launch waits for SIGKILLed leftovers to be gone (they release their port).
const LEFTOVER_EXIT_WAIT: Duration = Duration::from_secs(2);
/// Longest single readiness probe.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Why launching, stopping or recording an entity's process failed. The messages are the
/// task failures a plan reports.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The version's files are not unpacked.
    #[error(
        "version {version} is not unpacked on this agent (fetch, verify and configure it first)"
    )]
    NotUnpacked {
        /// The version.
        version: String,
    },
    /// The version's `service.json` is invalid (the validation errors).
    #[error("{}", errors.join("; "))]
    InvalidSpec {
        /// What is wrong, one line each.
        errors: Vec<String>,
    },
    /// The deployment's config file cannot be read.
    #[error(
        "version {version} is not configured with config {config}: {}: {source}",
        path.display()
    )]
    NotConfigured {
        /// The version.
        version: String,
        /// The config's SHA-256 (its first 16 digits).
        config: String,
        /// The config file.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The deployment's config text is invalid (the validation errors).
    #[error("{}", errors.join("; "))]
    InvalidConfig {
        /// What is wrong, one line each.
        errors: Vec<String>,
    },
    /// The deployment's secrets are not written.
    #[error("version {version} is not configured with secrets revision {revision}")]
    NoSecrets {
        /// The version.
        version: String,
        /// The secrets revision.
        revision: u64,
    },
    /// The service's data directory cannot be created.
    #[error("cannot create {}: {source}", path.display())]
    DataDir {
        /// The directory.
        path: std::path::PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The program cannot be started.
    #[error("cannot start {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// The error.
        source: std::io::Error,
    },
    /// The program ended before its pid was known.
    #[error("{program} exited at once")]
    ExitedAtOnce {
        /// The program.
        program: String,
    },
    /// The started process cannot be recorded (it was killed).
    #[error("cannot record the started process in state.json: {source}")]
    Record {
        /// The error.
        source: std::io::Error,
    },
    /// The process outlived SIGKILL.
    #[error("pid {pid} did not exit after SIGKILL")]
    NotKilled {
        /// The process.
        pid: u32,
    },
    /// `state.json` cannot be written.
    #[error("cannot write state.json: {source}")]
    WriteState {
        /// The error.
        source: std::io::Error,
    },
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The service definition of the running deployment.
#[derive(Debug, Clone)]
pub struct Running {
    /// Its `service.json`.
    pub spec: ServiceSpec,
    /// The config's `port`.
    pub port: Option<u16>,
}

impl Running {
    /// What its readiness probe checks.
    pub fn describe(&self) -> String {
        probe::describe(self.spec.readiness.as_ref(), self.port)
    }
}

/// A deployment ready to launch: unpacked and configured on disk.
#[derive(Debug, Clone)]
pub struct Prepared {
    /// What is deployed.
    pub deployment: Deployment,
    /// Its service definition and port.
    pub running: Running,
    /// The process to start.
    pub launch: Launch,
}

/// The last readiness result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    /// Not probed since the start.
    Unknown,
    /// The probe passed.
    Ready,
    /// The probe failed (what and why).
    NotReady(String),
}

/// A crash the supervisor handles.
#[derive(Debug, Clone)]
pub struct Crash {
    /// How the process ended.
    pub status: String,
    /// When to restart it; `None` once restarted (until readiness passes again).
    pub restart_at: Option<Instant>,
}

/// Whether the recorded process runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Liveness {
    /// Nothing is recorded as running.
    NotRunning,
    /// It runs.
    Alive,
    /// It ended (how).
    Exited(String),
}

/// Who launches, which decides how `state.json`'s history changes.
#[derive(Debug, Clone, Copy)]
pub enum LaunchMode<'a> {
    /// A plan's `start`: the running deployment becomes `previous`.
    Plan(&'a str),
    /// Restoring `previous` after a failed start or readiness.
    Restore(&'a str),
    /// The supervisor restarting the current deployment after a crash.
    Supervisor,
}

/// In-memory view of an entity.
#[derive(Debug)]
pub struct Runtime {
    /// Mirror of `state.json` (`None`: not installed).
    pub state: Option<RunState>,
    /// The process, when this agent started it (adopted processes are watched by pid).
    pub child: Option<tokio::process::Child>,
    /// The current deployment's service definition.
    pub running: Option<Running>,
    /// The last readiness result.
    pub probe: Probe,
    /// A crash being handled.
    pub crash: Option<Crash>,
    /// Restarts by the supervisor since the last plan started the service.
    pub restarts: u32,
    /// Delay before the next restart.
    pub backoff: Duration,
    /// Since when readiness has passed without interruption.
    pub ready_since: Option<Instant>,
}

impl Default for Runtime {
    fn default() -> Self {
        Self {
            state: None,
            child: None,
            running: None,
            probe: Probe::Unknown,
            crash: None,
            restarts: 0,
            backoff: INITIAL_BACKOFF,
            ready_since: None,
        }
    }
}

impl Runtime {
    /// Whether the recorded process runs. Reaps it if it is this agent's child.
    pub fn liveness(&mut self, dir: &EntityDir) -> Liveness {
        let Some(state) = &self.state else {
            return Liveness::NotRunning;
        };
        let Some(pid) = state.pid else {
            return Liveness::NotRunning;
        };
        if let Some(child) = &mut self.child {
            match child.try_wait() {
                Ok(Some(status)) => {
                    self.child = None;
                    return Liveness::Exited(os::describe_exit(status));
                }
                Ok(None) => return Liveness::Alive,
                Err(_) => self.child = None,
            }
        }
        let cwd = dir.version(&state.current.version);
        if os::is_same_process(pid, state.start_ticks, &state.command, &cwd) {
            Liveness::Alive
        } else {
            os::reap_if_our_zombie(pid);
            Liveness::Exited("exited; status unknown (not started by this agent process)".into())
        }
    }
}

/// Why a wait for readiness failed.
#[derive(Debug, Clone)]
pub struct NotReady {
    /// What was probed.
    pub what: String,
    /// The last probe result, or how the process ended.
    pub last: String,
    /// Whether the process ended.
    pub exited: bool,
}

/// One entity.
#[derive(Debug)]
pub struct Entity {
    /// Entity id.
    pub id: String,
    /// Its directory.
    pub dir: EntityDir,
    /// Serialises tasks and supervision.
    pub op: tokio::sync::Mutex<()>,
    rt: Mutex<Runtime>,
}

impl Entity {
    /// A fresh entity with nothing installed.
    pub fn new(id: String, dir: EntityDir) -> Self {
        Self {
            id,
            dir,
            op: tokio::sync::Mutex::new(()),
            rt: Mutex::new(Runtime::default()),
        }
    }

    /// An entity restored from its `state.json` at agent start: a live process is adopted,
    /// a dead one is handed to the supervisor as a crash (restarted at once).
    pub fn adopt(id: String, dir: EntityDir, state: RunState) -> Self {
        let entity = Self::new(id, dir);
        {
            let mut rt = entity.lock();
            match entity.prepare(&state.current) {
                Ok(p) => rt.running = Some(p.running),
                Err(e) => rt.probe = Probe::NotReady(e.to_string()),
            }
            rt.state = Some(state);
            match rt.liveness(&entity.dir) {
                Liveness::Alive => {
                    if let Some(s) = &rt.state {
                        info!(entity = %entity.id, version = %s.current.version,
                              pid = ?s.pid, "adopted running service");
                    }
                }
                Liveness::Exited(_) => {
                    warn!(entity = %entity.id, "service exited while the agent was not running");
                    rt.crash = Some(Crash {
                        status: "exited while the agent was not running".into(),
                        restart_at: Some(Instant::now()),
                    });
                }
                Liveness::NotRunning => {}
            }
        }
        entity
    }

    /// The in-memory view (poisoning is ignored: every update leaves it consistent).
    pub fn lock(&self) -> MutexGuard<'_, Runtime> {
        self.rt.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The current deployment, if installed.
    pub fn current(&self) -> Option<Deployment> {
        self.lock().state.as_ref().map(|s| s.current.clone())
    }

    /// Loads what launching `d` needs; the error says what is missing.
    pub fn prepare(&self, d: &Deployment) -> Result<Prepared, RuntimeError> {
        let v = &d.version;
        let version_dir = self.dir.version(v);
        if !self.dir.is_unpacked(v) {
            return Err(RuntimeError::NotUnpacked { version: v.clone() });
        }
        let spec = ServiceSpec::load(&version_dir)
            .map_err(|errors| RuntimeError::InvalidSpec { errors })?;
        let config = self.dir.config(d);
        let text =
            std::fs::read_to_string(&config).map_err(|source| RuntimeError::NotConfigured {
                version: v.clone(),
                config: d.config_sha256[..16.min(d.config_sha256.len())].to_string(),
                path: config.clone(),
                source,
            })?;
        let port = parse_config(&text).map_err(|errors| RuntimeError::InvalidConfig { errors })?;
        let secrets_dir = self.dir.secrets(d);
        if !secrets_dir.is_dir() {
            return Err(RuntimeError::NoSecrets {
                version: v.clone(),
                revision: d.secrets_revision,
            });
        }
        let vars = Vars {
            config,
            port,
            version: v.clone(),
            secrets_dir,
            data: self.dir.data(),
        };
        let launch = Launch {
            program: spec.program(&version_dir),
            args: spec.args.iter().map(|a| substitute(a, &vars)).collect(),
            env: spec
                .env
                .iter()
                .map(|(k, val)| (k.clone(), substitute(val, &vars)))
                .collect(),
            cwd: version_dir,
            log: self.dir.log(),
        };
        Ok(Prepared {
            deployment: d.clone(),
            running: Running { spec, port },
            launch,
        })
    }

    /// Starts `p` and records it in `state.json` as the current deployment. Returns the pid.
    pub fn launch(&self, p: &Prepared, mode: LaunchMode<'_>) -> Result<u32, RuntimeError> {
        let by = match mode {
            LaunchMode::Plan(plan) | LaunchMode::Restore(plan) => plan,
            LaunchMode::Supervisor => "supervisor",
        };
        std::fs::create_dir_all(self.dir.data()).map_err(|source| RuntimeError::DataDir {
            path: self.dir.data(),
            source,
        })?;
        let header = format!(
            "{} starting {} {} (by {by})",
            now_ms(),
            self.id,
            p.deployment.version
        );
        self.stop_leftovers();
        let program = p.launch.program.display().to_string();
        let child = os::spawn(&p.launch, &header).map_err(|source| RuntimeError::Spawn {
            program: program.clone(),
            source,
        })?;
        let Some(pid) = child.id() else {
            return Err(RuntimeError::ExitedAtOnce { program });
        };
        let start_ticks = os::proc_stat(pid).map(|s| s.start_ticks);
        let mut rt = self.lock();
        let old = rt.state.clone();
        let (previous, good) = match (&old, mode) {
            (None, _) => (None, Vec::new()),
            (Some(o), LaunchMode::Restore(_)) => (None, o.good.clone()),
            (Some(o), _) if o.current != p.deployment => (Some(o.current.clone()), o.good.clone()),
            (Some(o), _) => (o.previous.clone(), o.good.clone()),
        };
        let state = RunState {
            entity: self.id.clone(),
            current: p.deployment.clone(),
            pid: Some(pid),
            start_ticks,
            command: program,
            started_at: now_ms(),
            started_by: by.to_string(),
            down: None,
            previous,
            good,
        };
        if let Err(source) = state.save(&self.dir.state()) {
            // A process the agent cannot track must not keep running.
            os::signal_group(pid, libc::SIGKILL);
            return Err(RuntimeError::Record { source });
        }
        info!(entity = %self.id, version = %p.deployment.version, pid, by, "service started");
        rt.state = Some(state);
        rt.child = Some(child);
        rt.running = Some(p.running.clone());
        rt.probe = Probe::Unknown;
        rt.ready_since = None;
        if !matches!(mode, LaunchMode::Supervisor) {
            rt.crash = None;
            rt.restarts = 0;
            rt.backoff = INITIAL_BACKOFF;
        }
        Ok(pid)
    }

    /// Before a launch the recorded service has been stopped (or has crashed), so a process
    /// still working under `versions/` is a leftover nobody tracks: a service an agent
    /// started and was killed before recording in `state.json`, or what a crashed service
    /// started. It would hold the port and keep serving an unrecorded version: SIGKILL it
    /// with its group and wait (bounded) until it is gone.
    fn stop_leftovers(&self) {
        let leftovers = os::processes_working_in(&self.dir.versions());
        if leftovers.is_empty() {
            return;
        }
        for &pid in &leftovers {
            warn!(entity = %self.id, pid, "stopping a leftover process not recorded in state.json");
            os::kill_with_group(pid);
        }
        let deadline = Instant::now() + LEFTOVER_EXIT_WAIT;
        while leftovers.iter().any(|&pid| os::is_alive(pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// If the current deployment is `target`, runs, and (when `plan` is given) was started by
    /// that plan: its pid.
    pub fn adoptable(&self, target: &Deployment, plan: Option<&str>) -> Option<u32> {
        let mut rt = self.lock();
        let state = rt.state.as_ref()?;
        let pid = state.pid?;
        if state.current != *target || plan.is_some_and(|p| state.started_by != p) {
            return None;
        }
        (rt.liveness(&self.dir) == Liveness::Alive).then_some(pid)
    }

    /// Waits up to `timeout` for the process to end; `Some(how)` if it did.
    pub async fn exited_within(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Liveness::Exited(how) = self.lock().liveness(&self.dir) {
                return Some(how);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The graceful stop timeout of what runs.
    pub fn stop_timeout(&self) -> Duration {
        self.lock()
            .running
            .as_ref()
            .map(|r| r.spec.stop_timeout())
            .unwrap_or(DEFAULT_STOP_TIMEOUT)
    }

    /// Stops the recorded process: SIGTERM to its process group, up to `stop_timeout_ms`,
    /// then SIGKILL. Clears the pid in memory (the caller persists). Returns what happened.
    pub async fn stop(&self) -> Result<String, RuntimeError> {
        let timeout = self.stop_timeout();
        let (pid, mut child, ident) = {
            let mut rt = self.lock();
            let Some(state) = &rt.state else {
                return Ok("not installed".into());
            };
            let Some(pid) = state.pid else {
                return Ok("not running".into());
            };
            let ident = (
                state.start_ticks,
                state.command.clone(),
                self.dir.version(&state.current.version),
            );
            (pid, rt.child.take(), ident)
        };
        let same = || os::is_same_process(pid, ident.0, &ident.1, &ident.2);
        if child.is_none() && !same() {
            self.clear_pid();
            return Ok(format!("not running (pid {pid} had already exited)"));
        }
        if let Some(c) = &mut child {
            if let Ok(Some(status)) = c.try_wait() {
                os::signal_group(pid, libc::SIGKILL); // leftovers of the group
                self.clear_pid();
                return Ok(format!(
                    "not running (pid {pid} had ended: {})",
                    os::describe_exit(status)
                ));
            }
        }
        os::signal_group(pid, libc::SIGTERM);
        let how = match wait_exit(&mut child, &same, timeout).await {
            Some(how) => how,
            None => {
                warn!(entity = %self.id, pid, timeout_ms = timeout.as_millis() as u64,
                      "service ignored SIGTERM; sending SIGKILL");
                os::signal_group(pid, libc::SIGKILL);
                match wait_exit(&mut child, &same, KILL_WAIT).await {
                    Some(how) => format!("{how} after {} ms", timeout.as_millis()),
                    None => {
                        self.lock().child = child;
                        return Err(RuntimeError::NotKilled { pid });
                    }
                }
            }
        };
        // What the service started in its group (e.g. under a `sh -c` wrapper) goes too.
        os::signal_group(pid, libc::SIGKILL);
        self.clear_pid();
        info!(entity = %self.id, pid, how = %how, "service stopped");
        Ok(format!("stopped pid {pid} ({how})"))
    }

    fn clear_pid(&self) {
        let mut rt = self.lock();
        rt.child = None;
        rt.crash = None;
        rt.probe = Probe::Unknown;
        if let Some(s) = &mut rt.state {
            s.pid = None;
        }
    }

    /// Records that nothing runs (`reason` is reported) and persists it.
    pub fn mark_down(&self, reason: String) -> Result<(), RuntimeError> {
        let mut rt = self.lock();
        rt.child = None;
        rt.crash = None;
        let Some(state) = &mut rt.state else {
            return Ok(());
        };
        state.pid = None;
        state.down = Some(reason);
        state
            .save(&self.dir.state())
            .map_err(|source| RuntimeError::WriteState { source })
    }

    /// Polls readiness (every 100 ms) until it passes or `deadline`; fails at once if the
    /// process ends.
    pub async fn wait_ready(&self, deadline: Instant) -> Result<String, NotReady> {
        loop {
            let (liveness, running, started_at) = {
                let mut rt = self.lock();
                let liveness = rt.liveness(&self.dir);
                let started_at = rt.state.as_ref().map(|s| s.started_at).unwrap_or(0);
                (liveness, rt.running.clone(), started_at)
            };
            let Some(running) = running else {
                return Err(NotReady {
                    what: "service".into(),
                    last: "no service definition".into(),
                    exited: false,
                });
            };
            let what = running.describe();
            match liveness {
                Liveness::Alive => {}
                Liveness::Exited(how) => {
                    return Err(NotReady {
                        what,
                        last: how,
                        exited: true,
                    })
                }
                Liveness::NotRunning => {
                    return Err(NotReady {
                        what,
                        last: "not running".into(),
                        exited: true,
                    })
                }
            }
            let now = Instant::now();
            let timeout = deadline
                .saturating_duration_since(now)
                .clamp(POLL, PROBE_TIMEOUT);
            let alive_for = Duration::from_millis(now_ms().saturating_sub(started_at));
            let last = match probe::probe_once(
                running.spec.readiness.as_ref(),
                running.port,
                alive_for,
                timeout,
            )
            .await
            {
                Ok(()) => {
                    let mut rt = self.lock();
                    rt.probe = Probe::Ready;
                    rt.crash = None;
                    rt.ready_since.get_or_insert_with(Instant::now);
                    return Ok(what);
                }
                Err(e) => e.to_string(),
            };
            if Instant::now() >= deadline {
                self.lock().probe = Probe::NotReady(format!("{what} (last: {last})"));
                return Err(NotReady {
                    what,
                    last,
                    exited: false,
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// What `observe` reports, if installed.
    pub fn observed(&self) -> Option<Observed> {
        let rt = self.lock();
        let state = rt.state.as_ref()?;
        let (health, message) = if state.pid.is_none() {
            (
                Health::Error,
                state.down.clone().unwrap_or_else(|| "not running".into()),
            )
        } else if let Some(crash) = &rt.crash {
            (
                Health::Error,
                format!(
                    "crashed ({}), restarted {} times",
                    crash.status, rt.restarts
                ),
            )
        } else {
            match &rt.probe {
                Probe::Unknown => (Health::Unknown, "starting".into()),
                Probe::Ready => (Health::Healthy, String::new()),
                Probe::NotReady(why) => (Health::Error, format!("not ready: {why}")),
            }
        };
        Some(Observed {
            entity: self.id.clone(),
            version: Some(state.current.version.clone()),
            health,
            config_sha256: Some(state.current.config_sha256.clone()),
            secrets_revision: Some(state.current.secrets_revision),
            message,
        })
    }
}

/// Waits up to `timeout` for the process to end: through its handle when it is our child,
/// else by polling `same` (whether the pid still is the process).
async fn wait_exit(
    child: &mut Option<tokio::process::Child>,
    same: &impl Fn() -> bool,
    timeout: Duration,
) -> Option<String> {
    if let Some(c) = child {
        return match tokio::time::timeout(timeout, c.wait()).await {
            Ok(Ok(status)) => Some(os::describe_exit(status)),
            Ok(Err(_)) => (!same()).then(|| "exited".to_string()),
            Err(_) => None,
        };
    }
    let deadline = Instant::now() + timeout;
    loop {
        if !same() {
            return Some("exited".into());
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

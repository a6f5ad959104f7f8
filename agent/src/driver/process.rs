//! The process driver: runs each entity as a local process built from its release's
//! artifacts (`.tar.gz` with a `service.json` at the root), supervised by the agent.
//!
//! Tasks (each idempotent, see [`super`]):
//!
//! | task | does | fails with stage |
//! |---|---|---|
//! | `fetch` | download every artifact to `downloads/<sha256>.tar.gz` (skipped if present and intact); never from a denied address (`--outbound-deny`/`--outbound-allow`), and a `file://` artifact only from under a `file://` registry | `fetch`: URI (no credentials) and why |
//! | `verify` | SHA-256 of each download equals the manifest's; a bad one is deleted | `verify`: the expected digest (never the digest of what was read) |
//! | `configure` | unpack into `versions/<v>/` (once), check `service.json`, check the config is a YAML mapping, write it and the secrets | `configure`: `corrupt artifact: …`, or validation errors |
//! | `start` | stop what runs (SIGTERM, `stop_timeout_ms`, SIGKILL) and start the target in its own session — or adopt it if it already runs with the same version, config and secrets | `start`: exit status and log tail |
//! | `readiness` | poll the `service.json` probe every 100 ms up to `ready_timeout_ms`; then prune old versions | `readiness`: `not_ready` names the probe and its last result |
//! | `stop` | stop the process (uninstall) | `stop` |
//! | `remove` | delete `versions/`, `config/`, `secrets/`, `state.json`; keep `downloads/`, `data/`, `service.log` | `remove` |
//!
//! A failed `start` or `readiness` restores the deployment that ran before (still on disk
//! with its config and secrets) before reporting the failure, so the service keeps running;
//! the hub's rollback plan that follows then adopts it. A supervisor task (module
//! `supervisor`) restarts crashed services with backoff and keeps the health `observe`
//! reports current. After an agent restart (even `kill -9`),
//! [`ProcessDriver::new`] adopts the services still running instead of starting them twice.
//!
//! The on-disk layout is described in `layout`; `service.json` in `spec`; what runs in
//! `state.json` in `state` (its deployments are the plain data of `deployment`). Secret values
//! are written only to `secrets/<version>-r<revision>/<name>` (mode 0600) and never logged.

mod deployment;
mod fetch;
mod http;
pub(crate) mod layout;
pub(crate) mod names;
mod os;

pub use os::processes_working_in;
mod probe;
mod retention;
mod runtime;
mod spec;
mod state;
mod supervisor;
mod unpack;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use self::deployment::Deployment;
use self::layout::{
    create_dir_mode, list_names, remove_path, sync_parent, write_atomic, EntityDir,
};
use self::runtime::{Entity, LaunchMode, Liveness};
use self::spec::{parse_config, ServiceSpec};
use self::state::RunState;
use super::Driver;
use crate::plan::{Observed, PlanSpec, TaskFailure, TaskOutcome};

/// How long a freshly started process must stay alive for `start` to succeed.
const START_GRACE: Duration = Duration::from_millis(300);
/// Lines of `service.log` included in a start or readiness failure.
const LOG_TAIL_LINES: usize = 20;
/// The tasks this driver runs.
const TASKS: [&str; 7] = [
    "fetch",
    "verify",
    "configure",
    "start",
    "readiness",
    "stop",
    "remove",
];

/// Why a [`ProcessDriver`] cannot be created.
#[derive(Debug, thiserror::Error)]
pub enum DriverError {
    /// The environment name is not a DNS-label-like name.
    #[error("environment {name:?}: {why}")]
    InvalidEnvironment {
        /// The name given.
        name: String,
        /// What is wrong with it (in the message, so not also a `source()`: the agent's
        /// start reports every `source()`).
        why: names::LabelError,
    },
    /// The data directory cannot be created or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// [`ProcessDriver::new`] was called outside a tokio runtime (the supervisor is a task).
    #[error("the process driver must be created inside a tokio runtime")]
    NoRuntime,
}

/// Runs entities as supervised local processes under `DATA/process/` (see the module
/// documentation). Dropping it stops supervision but leaves the services running.
pub struct ProcessDriver {
    inner: Arc<Inner>,
    supervisor: tokio::task::AbortHandle,
}

impl std::fmt::Debug for ProcessDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessDriver")
            .field("root", &self.inner.root)
            .field("environment", &self.inner.environment)
            .finish_non_exhaustive()
    }
}

struct Inner {
    /// `DATA/process` (absolute).
    root: PathBuf,
    environment: String,
    /// The download clients (one per registry trust), refusing denied addresses.
    downloads: hub_http::ClientPool,
    /// Entities by id.
    entities: Mutex<BTreeMap<String, Arc<Entity>>>,
    start_grace: Duration,
}

impl ProcessDriver {
    /// A driver for `environment` keeping its files under `data_dir/process/` and
    /// downloading artifacts from any address `deny` does not deny. Adopts the services
    /// recorded there that still run (and hands those that died while the agent was down to
    /// the supervisor), then starts the supervisor task. Must be called inside a tokio
    /// runtime.
    pub fn new(
        data_dir: PathBuf,
        environment: String,
        deny: hub_http::DenyList,
    ) -> Result<Self, DriverError> {
        Self::with_start_grace(data_dir, environment, deny, START_GRACE)
    }

    fn with_start_grace(
        data_dir: PathBuf,
        environment: String,
        deny: hub_http::DenyList,
        start_grace: Duration,
    ) -> Result<Self, DriverError> {
        names::check_label(&environment).map_err(|why| DriverError::InvalidEnvironment {
            name: environment.clone(),
            why,
        })?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| DriverError::NoRuntime)?;
        let root = data_dir.join("process");
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| DriverError::Io { path, source }
        };
        layout::create_private_dir(&root).map_err(io(&root))?;
        let root = std::fs::canonicalize(&root).map_err(io(&root))?;
        let mut entities = BTreeMap::new();
        for name in list_names(&root).map_err(io(&root))? {
            if name.starts_with('.') {
                continue;
            }
            let dir = EntityDir::new(root.join(&name));
            let state = match RunState::load(&dir.state()) {
                Ok(Some(state)) => state,
                Ok(None) => continue,
                Err(e) => {
                    warn!(error = %e, "ignoring unreadable state.json; its service is not supervised");
                    continue;
                }
            };
            match names::entity_dir_name(&state.entity, &environment) {
                Ok(expected) if expected == name => {}
                Ok(expected) => {
                    warn!(entity = %state.entity, dir = %name, expected = %expected,
                          "ignoring state.json in a directory of another name");
                    continue;
                }
                Err(e) => {
                    warn!(dir = %name, error = %e, "ignoring state.json");
                    continue;
                }
            }
            let id = state.entity.clone();
            entities.insert(id.clone(), Arc::new(Entity::adopt(id, dir, state)));
        }
        info!(root = %root.display(), entities = entities.len(), "process driver ready");
        let inner = Arc::new(Inner {
            root,
            environment,
            downloads: http::downloads(deny),
            entities: Mutex::new(entities),
            start_grace,
        });
        let supervisor = runtime
            .spawn(supervisor::run(Arc::downgrade(&inner), Inner::snapshot))
            .abort_handle();
        Ok(Self { inner, supervisor })
    }
}

impl Drop for ProcessDriver {
    fn drop(&mut self) {
        self.supervisor.abort();
    }
}

impl Driver for ProcessDriver {
    fn run_task<'a>(
        &'a self,
        plan: &'a PlanSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<TaskOutcome, TaskFailure>> {
        Box::pin(self.inner.run_task(plan, task))
    }

    fn observe(&self) -> BoxFuture<'_, Vec<Observed>> {
        Box::pin(async move {
            self.inner
                .snapshot()
                .iter()
                .filter_map(|e| e.observed())
                .collect()
        })
    }
}

/// A task failure: `message` is its text (a typed error's message, or text written here).
fn fail(stage: &str, message: impl std::fmt::Display) -> TaskFailure {
    TaskFailure::new(stage, message.to_string())
}

fn invalid(stage: &str, message: &str, errors: Vec<String>) -> TaskFailure {
    TaskFailure {
        validation_errors: errors,
        ..fail(stage, message)
    }
}

fn outcome(output: impl Into<String>) -> TaskOutcome {
    TaskOutcome {
        output: output.into(),
    }
}

fn config_sha256(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// `command restart` restarts what runs instead of deploying the plan's target.
fn is_restart(plan: &PlanSpec) -> bool {
    plan.kind.is_restart()
}

/// The deployment a plan targets.
fn target_of(plan: &PlanSpec, stage: &str) -> Result<Deployment, TaskFailure> {
    names::check_version(&plan.to_version).map_err(|e| fail(stage, e))?;
    Ok(Deployment {
        version: plan.to_version.clone(),
        config_sha256: config_sha256(&plan.config),
        secrets_revision: plan.secrets_revision,
    })
}

/// The deployment `start` and `readiness` act on: the running one for a restart.
fn run_target(plan: &PlanSpec, entity: &Entity, stage: &str) -> Result<Deployment, TaskFailure> {
    if is_restart(plan) {
        entity.current().ok_or_else(|| {
            fail(
                stage,
                format!("{} is not installed: nothing to restart", entity.id),
            )
        })
    } else {
        target_of(plan, stage)
    }
}

impl Inner {
    fn snapshot(&self) -> Vec<Arc<Entity>> {
        self.entities
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    fn entity(&self, id: &str) -> Result<Arc<Entity>, names::NameError> {
        let name = names::entity_dir_name(id, &self.environment)?;
        let mut entities = self.entities.lock().unwrap_or_else(PoisonError::into_inner);
        let entity = entities.entry(id.to_string()).or_insert_with(|| {
            Arc::new(Entity::new(
                id.to_string(),
                EntityDir::new(self.root.join(name)),
            ))
        });
        Ok(entity.clone())
    }

    async fn run_task(&self, plan: &PlanSpec, task: &str) -> Result<TaskOutcome, TaskFailure> {
        if !TASKS.contains(&task) {
            return Err(fail(
                task,
                format!(
                    "unknown task {task:?}: the process driver runs {}",
                    TASKS.join(", ")
                ),
            ));
        }
        let entity = self.entity(&plan.entity).map_err(|e| fail(task, e))?;
        let _op = entity.op.lock().await;
        let began = Instant::now();
        let result = match task {
            "fetch" => self.fetch(&entity, plan).await,
            "verify" => self.verify(&entity, plan).await,
            "configure" => self.configure(&entity, plan).await,
            "start" => self.start(&entity, plan).await,
            "readiness" => self.readiness(&entity, plan).await,
            "stop" => self.stop(&entity, plan).await,
            _ => self.remove(&entity, plan).await,
        };
        let elapsed_ms = began.elapsed().as_millis() as u64;
        match &result {
            Ok(o) => info!(entity = %plan.entity, plan = %plan.id, task, elapsed_ms,
                           output = %o.output, "task succeeded"),
            Err(f) => warn!(entity = %plan.entity, plan = %plan.id, task, elapsed_ms,
                            stage = %f.stage, message = %f.message,
                            not_ready = ?f.not_ready, validation_errors = ?f.validation_errors,
                            "task failed"),
        }
        result
    }

    async fn fetch(&self, entity: &Entity, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        if plan.artifacts.is_empty() {
            return Ok(outcome("no artifacts to fetch"));
        }
        let downloads = entity.dir.downloads();
        create_dir_mode(&downloads, 0o755).map_err(|e| {
            fail(
                "fetch",
                format!("cannot create {}: {e}", downloads.display()),
            )
        })?;
        let mut lines = Vec::new();
        for artifact in &plan.artifacts {
            let uri = http::redact(&artifact.uri);
            if !names::is_sha256(&artifact.sha256) {
                return Err(fail(
                    "fetch",
                    format!(
                        "{uri}: sha256 {:?} is not 64 lowercase hex digits",
                        artifact.sha256
                    ),
                ));
            }
            let dest = entity.dir.download(&artifact.sha256);
            if dest.is_file()
                && fetch::sha256_file_async(dest.clone()).await.ok().as_deref()
                    == Some(artifact.sha256.as_str())
            {
                lines.push(format!("{uri}: already downloaded"));
                continue;
            }
            let source =
                fetch::resolve(&artifact.uri, &plan.registries).map_err(|e| fail("fetch", e))?;
            let shown = source.shown();
            let size = fetch::download(&self.downloads, &source, &dest)
                .await
                .map_err(|e| fail("fetch", format!("{shown}: {e}")))?;
            info!(entity = %entity.id, source = %shown, size, "artifact downloaded");
            lines.push(format!("fetched {shown} ({size} bytes)"));
        }
        Ok(outcome(lines.join("\n")))
    }

    async fn verify(&self, entity: &Entity, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        let mut lines = Vec::new();
        for artifact in &plan.artifacts {
            let uri = http::redact(&artifact.uri);
            let expected = &artifact.sha256;
            if !names::is_sha256(expected) {
                return Err(fail(
                    "verify",
                    format!("{uri}: sha256 {expected:?} is not 64 lowercase hex digits"),
                ));
            }
            let dest = entity.dir.download(expected);
            if !dest.is_file() {
                return Err(fail(
                    "verify",
                    format!("{uri}: not downloaded (the fetch task must run first)"),
                ));
            }
            let actual = fetch::sha256_file_async(dest.clone())
                .await
                .map_err(|e| fail("verify", format!("{uri}: cannot read the download: {e}")))?;
            if actual != *expected {
                let deleted = match std::fs::remove_file(&dest) {
                    Ok(()) => "the download was deleted".to_string(),
                    Err(e) => format!("deleting the download failed: {e}"),
                };
                // Never the digest of what was read: the failure is shown to every viewer, and
                // a digest of a file the artifact was not meant to be tells something about it.
                return Err(fail(
                    "verify",
                    format!("{uri}: sha256 mismatch: expected {expected}; {deleted}"),
                ));
            }
            lines.push(format!("{uri}: sha256 {actual} ok"));
        }
        if lines.is_empty() {
            return Ok(outcome("no artifacts to verify"));
        }
        Ok(outcome(lines.join("\n")))
    }

    async fn configure(
        &self,
        entity: &Entity,
        plan: &PlanSpec,
    ) -> Result<TaskOutcome, TaskFailure> {
        let target = target_of(plan, "configure")?;
        let v = target.version.clone();
        let dir = &entity.dir;
        for (path, mode) in [
            (dir.versions(), 0o755),
            (dir.configs(), 0o700),
            (dir.secrets_root(), 0o700),
            (dir.data(), 0o755),
        ] {
            create_dir_mode(&path, mode).map_err(|e| {
                fail(
                    "configure",
                    format!("cannot create {}: {e}", path.display()),
                )
            })?;
        }
        let mut lines = Vec::new();
        if dir.is_unpacked(&v) {
            lines.push(format!("version {v} already unpacked"));
        } else if plan.artifacts.is_empty() {
            return Err(fail(
                "configure",
                format!(
                    "version {v} is not unpacked on this agent (a config or secrets change needs \
                     the version installed)"
                ),
            ));
        } else {
            self.unpack(entity, plan, &v).await?;
            lines.push(format!("unpacked {v}"));
        }
        let spec = ServiceSpec::load(&dir.version(&v))
            .map_err(|e| invalid("configure", &format!("invalid service.json in {v}"), e))?;
        let port =
            parse_config(&plan.config).map_err(|e| invalid("configure", "invalid config", e))?;
        let mut errors = Vec::new();
        if port.is_none() && spec.needs_port() {
            errors.push(
                "config: port: required (service.json's readiness or ${PORT} needs it)".to_string(),
            );
        }
        for (name, _) in &plan.secrets {
            if let Err(e) = names::check_secret_name(name) {
                errors.push(format!("secrets: {e}"));
            }
        }
        if !errors.is_empty() {
            return Err(invalid("configure", "invalid config", errors));
        }
        let config = dir.config(&target);
        write_atomic(&config, plan.config.as_bytes(), 0o600).map_err(|e| {
            fail(
                "configure",
                format!("cannot write {}: {e}", config.display()),
            )
        })?;
        let secrets = dir.secrets(&target);
        if secrets.is_dir() {
            lines.push(format!(
                "secrets revision {} already written",
                target.secrets_revision
            ));
        } else {
            layout::write_secrets(&secrets, &plan.secrets)
                .map_err(|e| fail("configure", format!("cannot write secrets: {e}")))?;
            lines.push(format!(
                "wrote {} secrets (revision {})",
                plan.secrets.len(),
                target.secrets_revision
            ));
        }
        lines.push(format!(
            "config {} written to {}",
            &target.config_sha256[..16],
            config.display()
        ));
        Ok(outcome(lines.join("\n")))
    }

    /// Unpacks the plan's artifacts into `versions/<v>/` via a temporary directory, checking
    /// `service.json` before the rename.
    async fn unpack(&self, entity: &Entity, plan: &PlanSpec, v: &str) -> Result<(), TaskFailure> {
        let mut archives = Vec::new();
        for artifact in &plan.artifacts {
            let uri = http::redact(&artifact.uri);
            if !names::is_sha256(&artifact.sha256) {
                return Err(fail("configure", format!("{uri}: invalid sha256")));
            }
            let path = entity.dir.download(&artifact.sha256);
            if !path.is_file() {
                return Err(fail(
                    "configure",
                    format!("{uri}: not downloaded (fetch and verify must run first)"),
                ));
            }
            archives.push((uri, artifact.sha256.clone(), path));
        }
        let version_dir = entity.dir.version(v);
        let result =
            tokio::task::spawn_blocking(move || unpack::unpack_version(&archives, &version_dir))
                .await
                .map_err(|e| fail("configure", format!("unpacking failed: {e}")))?;
        result.map_err(|e| match e {
            unpack::UnpackError::Invalid(errors) => {
                invalid("configure", "invalid service.json in the artifact", errors)
            }
            other => fail("configure", other),
        })
    }

    async fn start(&self, entity: &Entity, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        let target = run_target(plan, entity, "start")?;
        let v = target.version.clone();
        let prepared = entity.prepare(&target).map_err(|e| fail("start", e))?;
        let required_plan = is_restart(plan).then_some(plan.id.as_str());
        if let Some(pid) = entity.adoptable(&target, required_plan) {
            entity.lock().running = Some(prepared.running);
            return Ok(outcome(format!(
                "{v} already runs with this config and secrets (pid {pid}): adopted"
            )));
        }
        let stopped = entity
            .stop()
            .await
            .map_err(|e| fail("start", format!("cannot stop the running version: {e}")))?;
        let pid = match entity.launch(&prepared, LaunchMode::Plan(&plan.id)) {
            Ok(pid) => pid,
            Err(e) => {
                let restored = self.restore(entity, plan, &e.to_string()).await;
                return Err(TaskFailure {
                    output: restored,
                    ..fail("start", e)
                });
            }
        };
        if let Some(how) = entity.exited_within(self.start_grace).await {
            let tail = os::log_tail(&entity.dir.log(), LOG_TAIL_LINES);
            let last = tail.lines().last().unwrap_or("no output");
            let message = format!(
                "{v} exited within {} ms ({how}): {last}",
                self.start_grace.as_millis()
            );
            let restored = self.restore(entity, plan, &message).await;
            return Err(TaskFailure {
                output: format!("service.log:\n{tail}\n{restored}"),
                ..fail("start", message)
            });
        }
        Ok(outcome(format!("{stopped}; started {v} (pid {pid})")))
    }

    async fn readiness(
        &self,
        entity: &Entity,
        plan: &PlanSpec,
    ) -> Result<TaskOutcome, TaskFailure> {
        let target = run_target(plan, entity, "readiness")?;
        let v = target.version.clone();
        let (running, timeout) = {
            let rt = entity.lock();
            let state = rt.state.as_ref();
            if state.map(|s| &s.current) != Some(&target) || state.and_then(|s| s.pid).is_none() {
                let current = state
                    .map(|s| format!("{} (pid {:?})", s.current.version, s.pid))
                    .unwrap_or_else(|| "nothing".into());
                return Err(fail(
                    "readiness",
                    format!("{v} with this config is not running (running: {current}); start must run first"),
                ));
            }
            let timeout = rt.running.as_ref().map(|r| r.spec.ready_timeout());
            (
                rt.running.clone(),
                timeout.unwrap_or(Duration::from_secs(10)),
            )
        };
        let what = running.map(|r| r.describe()).unwrap_or_default();
        match entity.wait_ready(Instant::now() + timeout).await {
            Ok(what) => {
                let pruned = retention::prune(entity);
                Ok(outcome(format!("{v} ready: {what}{pruned}")))
            }
            Err(nr) => {
                let tail = os::log_tail(&entity.dir.log(), LOG_TAIL_LINES);
                let message = if nr.exited {
                    format!("{v} ended before becoming ready ({})", nr.last)
                } else {
                    format!("{v} not ready after {} ms", timeout.as_millis())
                };
                let restored = self.restore(entity, plan, &message).await;
                let what = if nr.what.is_empty() { what } else { nr.what };
                Err(TaskFailure {
                    not_ready: vec![format!("{} {what} (last: {})", entity.id, nr.last)],
                    output: format!("service.log:\n{tail}\n{restored}"),
                    ..fail("readiness", message)
                })
            }
        }
    }

    /// After a failed start or readiness: brings back the deployment that ran before, if
    /// there was one, and waits for it to be ready. Returns a line for the plan's output.
    async fn restore(&self, entity: &Entity, plan: &PlanSpec, why: &str) -> String {
        let (previous, failed) = {
            let rt = entity.lock();
            let state = rt.state.as_ref();
            (
                state.and_then(|s| s.previous.clone()),
                state.map(|s| s.current.clone()),
            )
        };
        let Some(previous) = previous.filter(|p| Some(p) != failed.as_ref()) else {
            let alive = entity.lock().liveness(&entity.dir) == Liveness::Alive;
            if alive {
                return "no previous version to restore; the new version keeps running".into();
            }
            if let Err(e) = entity.mark_down(format!("failed: {why}")) {
                warn!(entity = %entity.id, error = %e, "cannot record the failed start");
            }
            return "no previous version to restore".into();
        };
        let pv = &previous.version;
        if let Err(e) = entity.stop().await {
            warn!(entity = %entity.id, error = %e, "cannot stop the failed version");
            return format!("cannot restore previous version {pv}: {e}");
        }
        let launched = entity.prepare(&previous).and_then(|p| {
            entity
                .launch(&p, LaunchMode::Restore(&plan.id))
                .map(|pid| (pid, p))
        });
        match launched {
            Err(e) => {
                warn!(entity = %entity.id, version = %pv, error = %e, "cannot restore previous version");
                if let Err(e) = entity.mark_down(format!("failed: {why}; restoring {pv} failed")) {
                    warn!(entity = %entity.id, error = %e, "cannot record the failed restore");
                }
                format!("cannot restore previous version {pv}: {e}")
            }
            Ok((pid, p)) => {
                info!(entity = %entity.id, version = %pv, pid, "restored previous version");
                let deadline = Instant::now() + p.running.spec.ready_timeout();
                match entity.wait_ready(deadline).await {
                    Ok(_) => format!("restored previous version {pv} (pid {pid}): ready"),
                    Err(nr) => format!(
                        "restored previous version {pv} (pid {pid}) but it is not ready: {} (last: {})",
                        nr.what, nr.last
                    ),
                }
            }
        }
    }

    async fn stop(&self, entity: &Entity, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        if entity.current().is_none() {
            return Ok(outcome("not installed: nothing to stop"));
        }
        let how = entity.stop().await.map_err(|e| fail("stop", e))?;
        entity
            .mark_down(format!("stopped by plan {}", plan.id))
            .map_err(|e| fail("stop", e))?;
        Ok(outcome(how))
    }

    async fn remove(&self, entity: &Entity, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        let Some(current) = entity.current() else {
            return Ok(outcome("not installed: nothing to remove"));
        };
        let stopped = entity.stop().await.map_err(|e| fail("remove", e))?;
        let dir = &entity.dir;
        // state.json first: a crash half-way leaves no claim of a running deployment.
        for path in [
            dir.state(),
            dir.versions(),
            dir.configs(),
            dir.secrets_root(),
        ] {
            remove_path(&path)
                .map_err(|e| fail("remove", format!("cannot delete {}: {e}", path.display())))?;
        }
        let _ = sync_parent(&dir.state());
        {
            let mut rt = entity.lock();
            *rt = runtime::Runtime::default();
        }
        info!(entity = %entity.id, plan = %plan.id, version = %current.version, "removed");
        Ok(outcome(format!(
            "{stopped}; removed {} (kept downloads/, data/ and service.log)",
            current.version
        )))
    }
}

/// The pids of the services the process driver records as running under an agent's data
/// directory (`DATA/process/*/state.json`), for tools that stop what an agent started once
/// the agent itself is gone. Unreadable state files are skipped.
pub fn recorded_service_pids(data_dir: &Path) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("process")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| state::RunState::load(&layout::EntityDir::new(e.path()).state()).ok()?)
        .filter_map(|s| s.pid)
        .filter(|pid| *pid > 1)
        .collect()
}

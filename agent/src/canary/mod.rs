//! The canary runner: executes `canary-step` plans (the desired state after one committed step
//! of a canary, decided by the hub leader) and observes the canaries it manages (SPEC K2, K6,
//! K9; docs/CANARY.md).
//!
//! A canary of target entity `eid:<env>:<kind>:<name>` runs two workloads through the
//! ordinary [`Driver`], as pseudo-entities named as Flagger names them:
//! `eid:<env>:<kind>:<name>-primary` and `eid:<env>:<kind>:<name>-canary`. A workload is
//! (re)deployed with the driver's `fetch`, `verify`, `configure` and `start` tasks and the
//! hub's config with its `port` set to the workload's own port (never with `readiness`: a
//! failed readiness would restore a deployment the hub did not commit; readiness is read from
//! [`Driver::observe`]), and scaled to zero with `stop`. The [`CanaryProxy`] owns the
//! service's port (`<svc>`) and splits traffic between them.
//!
//! Applying a step reconciles, in order:
//! 1. the primary: on the first step, deploy it, wait until it is healthy, stop the original
//!    entity and start the proxy on the service port; later, redeploy it when its revision
//!    changes (promotion);
//! 2. the canary workload: deploy its revision, or stop it when absent;
//! 3. the fresh baseline (issue 20, `baseline: fresh`), the pseudo-entity
//!    `eid:<env>:<kind>:<name>-baseline` at the primary's revision: deploy it when the step
//!    names one;
//! 4. the proxy's upstreams and routing (weight, A/B rules when `match_routing`, the
//!    baseline's weight once it runs); a baseline the step no longer names gets no traffic,
//!    then stops;
//! 5. `restore_original` instead: shut the proxy down, start the original entity at the
//!    primary's version with the hub's config, remove the workloads, forget the canary.
//!
//! Every step is idempotent (a plan's `apply` runs again after an agent kill): the workload
//! revisions, the ports the agent picked and the last applied routing are persisted in
//! `DATA/canary/<env>--<name>/state.json` (see [`store`]), and each applied step is appended
//! once to `applied.jsonl`. After an agent restart [`CanaryRunner::resume`] brings the proxy
//! back with the last applied routing (the process driver adopts the running workloads).
//!
//! With a simulated driver ([`Driver::simulated`]) no proxy runs; the driver tasks still run
//! (the sim records versions) and the metrics reported are perfect while the canary is
//! healthy.

mod load;
pub mod names;
pub mod samples;
pub mod store;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hub_proto::{CanaryMetricWindow, CanaryObservation};
use sha2::{Digest, Sha256};
use tracing::{info, warn};

use self::names::{config_with_port, CanaryId, WorkloadIds};
use self::store::{AppliedLine, CanaryDir, CanaryState, Deployed, Ports, RoutingState, Slot};
use crate::driver::Driver;
use crate::plan::{
    CanaryStepSpec, CanaryWorkloadSpec, Health, LoadSpec, Observed, PlanKind, PlanSpec,
    TaskFailure, TaskOutcome,
};
use crate::proxy::{
    CanaryProxy, HeaderMatch, InvalidHeaderMatch, ProxyAddrs, Routing, Upstreams, Workload,
};
use hub_wire::canary_addresses::StableAddresses;

/// The one task of a canary-step plan.
pub const APPLY_TASK: &str = "apply";
/// Driver tasks that (re)deploy a workload.
pub const DEPLOY_TASKS: [&str; 4] = ["fetch", "verify", "configure", "start"];

/// Why the runner cannot use a name, a config or its files.
#[derive(Debug, thiserror::Error)]
pub enum CanaryError {
    /// The canary id is not `<environment>/<name>` of DNS labels.
    #[error("canary id {id:?} {why}")]
    InvalidId {
        /// The id given.
        id: String,
        /// What is wrong.
        why: String,
    },
    /// The target entity id cannot carry a canary.
    #[error("canary target {entity:?} {why}")]
    InvalidTarget {
        /// The entity id.
        entity: String,
        /// What is wrong.
        why: String,
    },
    /// A workload's config cannot get its port.
    #[error("{what}: {why}")]
    Config {
        /// Which config.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// I/O on the runner's files.
    #[error("{}: {source}", path.display())]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// A state file that cannot be read.
    #[error("{} is corrupt: {reason}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// Timings of the runner.
#[derive(Debug, Clone)]
pub struct RunnerSettings {
    /// How long the first step waits for the primary workload to become healthy.
    pub ready_timeout: Duration,
    /// How long the proxy retries binding the service port (while the original releases it).
    pub bind_timeout: Duration,
    /// Poll interval of both waits.
    pub poll: Duration,
}

impl Default for RunnerSettings {
    fn default() -> Self {
        Self {
            ready_timeout: Duration::from_secs(30),
            bind_timeout: Duration::from_secs(10),
            poll: Duration::from_millis(100),
        }
    }
}

/// One managed canary.
struct Managed {
    dir: CanaryDir,
    /// Serialises applies (and resume) of this canary.
    op: tokio::sync::Mutex<()>,
    /// The last saved state (`None` until the first apply saves one).
    state: Mutex<Option<CanaryState>>,
    /// The proxy, while it runs.
    proxy: Mutex<Option<Arc<CanaryProxy>>>,
    /// The built-in load tester's loads that run (issue 52 item 4).
    loads: Mutex<load::Loads>,
}

impl Managed {
    fn new(dir: CanaryDir, state: Option<CanaryState>) -> Self {
        Self {
            dir,
            op: tokio::sync::Mutex::new(()),
            state: Mutex::new(state),
            proxy: Mutex::new(None),
            loads: Mutex::new(load::Loads::default()),
        }
    }

    fn snapshot(&self) -> Option<CanaryState> {
        self.state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn proxy(&self) -> Option<Arc<CanaryProxy>> {
        self.proxy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Makes exactly `wanted` of the canary's loads run (none for a forgotten canary), and
    /// remembers them for a restart.
    fn set_loads(&self, service: &str, port: u16, wanted: &[LoadSpec]) -> Vec<String> {
        self.loads
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .set(service, port, wanted)
    }

    /// Saves `st` and makes it what reports read.
    fn save(&self, st: &CanaryState) -> Result<(), TaskFailure> {
        self.dir
            .save(st)
            .map_err(|e| fail(format!("cannot save the canary state: {e}")))?;
        *self.state.lock().unwrap_or_else(PoisonError::into_inner) = Some(st.clone());
        Ok(())
    }
}

/// Runs canary-step plans and observes the canaries of one environment.
pub struct CanaryRunner {
    /// `DATA/canary`.
    root: PathBuf,
    environment: String,
    driver: Arc<dyn Driver>,
    settings: RunnerSettings,
    /// Canaries by id (`<env>/<name>`).
    canaries: Mutex<BTreeMap<String, Arc<Managed>>>,
}

impl std::fmt::Debug for CanaryRunner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CanaryRunner")
            .field("root", &self.root)
            .field("environment", &self.environment)
            .field("canaries", &self.canary_ids())
            .finish_non_exhaustive()
    }
}

/// A failure of the apply task: `message` is its text (a typed error's message, or text
/// written here).
fn fail(message: impl std::fmt::Display) -> TaskFailure {
    TaskFailure::new(APPLY_TASK, message.to_string())
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn loopback(port: u16) -> SocketAddr {
    SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port))
}

fn sha256_hex(text: &str) -> String {
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// The routing a step asks for.
fn routing_state(step: &CanaryStepSpec) -> RoutingState {
    let canary_weight = step.canary_weight.min(100);
    RoutingState {
        canary_weight,
        match_routing: step.match_routing,
        match_rules: step.match_rules.clone(),
        baseline_weight: if step.baseline.is_some() {
            canary_weight
        } else {
            0
        },
    }
}

/// The proxy routing for a step (A/B rules only when `match_routing`).
fn routing_of(r: &RoutingState) -> Result<Routing, InvalidHeaderMatch> {
    let mut match_rules = Vec::new();
    if r.match_routing {
        for rule in &r.match_rules {
            let rule = rule
                .iter()
                .map(|m| HeaderMatch::new(&m.name, &m.op, &m.value))
                .collect::<Result<Vec<_>, _>>()?;
            match_rules.push(rule);
        }
    }
    Ok(Routing {
        canary_weight: r.canary_weight.min(100) as u8,
        match_rules,
        baseline_weight: r.baseline_weight.min(100) as u8,
    })
}

/// [`routing_of`] for a proxy whose upstreams are `st`'s: no traffic to a baseline that does
/// not run (yet, or any more).
fn routing_for(r: &RoutingState, st: &CanaryState) -> Result<Routing, InvalidHeaderMatch> {
    let mut routing = routing_of(r)?;
    if st.baseline.running.is_none() {
        routing.baseline_weight = 0;
    }
    Ok(routing)
}

fn upstreams_of(st: &CanaryState) -> Upstreams {
    Upstreams {
        primary: st
            .primary
            .running
            .as_ref()
            .map(|_| loopback(st.ports.primary_workload)),
        canary: st
            .canary_workload
            .running
            .as_ref()
            .map(|_| loopback(st.ports.canary_workload)),
        baseline: st
            .baseline
            .running
            .as_ref()
            .map(|_| loopback(st.ports.baseline_workload)),
    }
}

/// Whether `id` is observed healthy at `version`.
fn is_ready(observed: &[Observed], id: &str, version: &str) -> bool {
    observed.iter().any(|o| {
        o.entity == id && o.health == Health::Healthy && o.version.as_deref() == Some(version)
    })
}

fn ready_percent(observed: &[Observed], id: &str, slot: &Slot) -> u32 {
    match &slot.running {
        Some(d) if is_ready(observed, id, &d.version) => 100,
        _ => 0,
    }
}

impl CanaryRunner {
    /// A runner for `environment` keeping its files under `data_dir/canary/`; loads the
    /// canaries saved there (an unreadable one is skipped with a warning). Call
    /// [`CanaryRunner::resume`] to bring their proxies back.
    pub fn new(data_dir: &Path, environment: &str, driver: Arc<dyn Driver>) -> Self {
        Self::with_settings(data_dir, environment, driver, RunnerSettings::default())
    }

    /// [`CanaryRunner::new`] with other timings.
    pub fn with_settings(
        data_dir: &Path,
        environment: &str,
        driver: Arc<dyn Driver>,
        settings: RunnerSettings,
    ) -> Self {
        let root = data_dir.join("canary");
        let mut canaries = BTreeMap::new();
        let entries = match std::fs::read_dir(&root) {
            Ok(entries) => entries.flatten().collect(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => {
                warn!(dir = %root.display(), error = %e, "cannot list the canaries' directory");
                Vec::new()
            }
        };
        for entry in entries {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            let dir = CanaryDir::new(root.join(&name));
            let state = match dir.load() {
                Ok(Some(state)) => state,
                Ok(None) => continue,
                Err(e) => {
                    warn!(error = %e, "ignoring an unreadable canary state; its proxy does not run");
                    continue;
                }
            };
            match CanaryId::parse(&state.canary) {
                Ok(id) if id.environment == environment && id.dir_name() == name => {}
                _ => {
                    warn!(canary = %state.canary, dir = %name,
                          "ignoring a canary state in a directory of another name or environment");
                    continue;
                }
            }
            if let Err(e) = WorkloadIds::of(&state.target, environment) {
                warn!(canary = %state.canary, error = %e, "ignoring a canary state");
                continue;
            }
            canaries.insert(
                state.canary.clone(),
                Arc::new(Managed::new(dir, Some(state))),
            );
        }
        if !canaries.is_empty() {
            info!(canaries = canaries.len(), "canary states loaded");
        }
        Self {
            root,
            environment: environment.to_string(),
            driver,
            settings,
            canaries: Mutex::new(canaries),
        }
    }

    /// Ids of the canaries managed.
    pub fn canary_ids(&self) -> Vec<String> {
        self.lock_canaries().keys().cloned().collect()
    }

    /// The proxy of canary `id`, while it runs.
    pub fn proxy(&self, id: &str) -> Option<Arc<CanaryProxy>> {
        self.lock_canaries().get(id).and_then(|m| m.proxy())
    }

    /// The saved state of canary `id`.
    pub fn state(&self, id: &str) -> Option<CanaryState> {
        self.lock_canaries().get(id).and_then(|m| m.snapshot())
    }

    fn lock_canaries(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Arc<Managed>>> {
        // A poisoned lock only means a panic elsewhere mid-insert into a plain map.
        self.canaries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn managed(&self, id: &CanaryId) -> Arc<Managed> {
        let key = id.to_string();
        self.lock_canaries()
            .entry(key)
            .or_insert_with(|| {
                Arc::new(Managed::new(
                    CanaryDir::new(self.root.join(id.dir_name())),
                    None,
                ))
            })
            .clone()
    }

    /// Brings back the proxy of every loaded canary that had one, with its last applied
    /// routing (after an agent restart). A proxy that cannot bind is logged; the next step
    /// of its canary tries again.
    pub async fn resume(&self) {
        if self.driver.simulated() {
            return;
        }
        let all: Vec<Arc<Managed>> = self.lock_canaries().values().cloned().collect();
        for m in all {
            let _op = m.op.lock().await;
            let Some(st) = m.snapshot() else { continue };
            if !st.taken_over {
                continue;
            }
            match self.ensure_proxy(&m, &st).await {
                Ok(()) => {
                    info!(canary = %st.canary, port = st.port, weight = st.routing.canary_weight,
                          step = st.applied_step, "canary proxy resumed");
                    m.set_loads(&st.service, st.port, &st.loads);
                }
                Err(f) => {
                    warn!(canary = %st.canary, error = %f.message, "cannot resume the canary proxy")
                }
            }
        }
    }

    /// Stops every proxy (the workloads keep running).
    pub fn shutdown(&self) {
        for m in self.lock_canaries().values() {
            m.set_loads("", 0, &[]);
            if let Some(p) = m
                .proxy
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                p.shutdown();
            }
        }
    }

    /// Runs task `task` of a `canary-step` plan (only [`APPLY_TASK`] exists).
    pub async fn run_task(&self, plan: &PlanSpec, task: &str) -> Result<TaskOutcome, TaskFailure> {
        if task != APPLY_TASK {
            return Err(TaskFailure::new(
                task,
                format!("unknown task {task:?}: canary-step plans have one task, {APPLY_TASK:?}"),
            ));
        }
        let began = Instant::now();
        let result = self.apply(plan).await;
        let elapsed_ms = began.elapsed().as_millis() as u64;
        let step = plan.canary.as_ref().map(|c| c.step).unwrap_or_default();
        match &result {
            Ok(_) => {
                info!(plan = %plan.id, entity = %plan.entity, step, elapsed_ms, "canary step applied")
            }
            Err(f) => warn!(plan = %plan.id, entity = %plan.entity, step, elapsed_ms,
                            stage = %f.stage, message = %f.message, "canary step failed"),
        }
        result
    }

    /// Brings canary `plan.canary` to the desired state of its step (see the module
    /// documentation). Idempotent.
    pub async fn apply(&self, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        let step = plan
            .canary
            .as_ref()
            .ok_or_else(|| fail("a canary-step plan without its canary step"))?;
        let id = CanaryId::parse(&step.canary).map_err(|e| fail(e.to_string()))?;
        if id.environment != self.environment {
            return Err(fail(format!(
                "canary {id} belongs to environment {:?}, this agent serves {:?}",
                id.environment, self.environment
            )));
        }
        let ids =
            WorkloadIds::of(&plan.entity, &self.environment).map_err(|e| fail(e.to_string()))?;
        let port = u16::try_from(step.port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| fail(format!("port {} is not between 1 and 65535", step.port)))?;
        routing_of(&routing_state(step)).map_err(|e| TaskFailure {
            validation_errors: vec![e.to_string()],
            ..fail(format!("invalid match rule: {e}"))
        })?;
        let managed = self.managed(&id);
        let _op = managed.op.lock().await;
        let mut out = Vec::new();
        if step.restore_original {
            self.restore(plan, step, &id, &ids, &managed, &mut out)
                .await?;
        } else {
            self.reconcile(plan, step, &ids, port, &managed, &mut out)
                .await?;
        }
        let line = AppliedLine {
            step: step.step,
            phase: step.phase.clone(),
            canary_weight: step.canary_weight.min(100),
            match_routing: step.match_routing,
            primary_revision: step
                .primary
                .as_ref()
                .map(|w| w.revision.clone())
                .unwrap_or_default(),
            canary_revision: step
                .canary_workload
                .as_ref()
                .map(|w| w.revision.clone())
                .unwrap_or_default(),
            time_ms: now_ms(),
        };
        match managed.dir.log_applied(&line) {
            Ok(true) => {}
            Ok(false) => out.push(format!("step {} was logged already", step.step)),
            Err(e) => return Err(fail(format!("cannot log the applied step: {e}"))),
        }
        let wanted: &[LoadSpec] = if step.restore_original {
            &[]
        } else {
            &step.loads
        };
        out.extend(managed.set_loads(&step.service, port, wanted));
        if let Some(mut st) = managed.snapshot().filter(|st| st.loads != wanted) {
            st.loads = wanted.to_vec();
            managed.save(&st)?;
        }
        if step.restore_original {
            managed
                .dir
                .forget()
                .map_err(|e| fail(format!("cannot forget the canary state: {e}")))?;
            *managed.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.lock_canaries().remove(&id.to_string());
            out.push(format!("canary {id} forgotten"));
        }
        out.push(format!(
            "step {} ({}) applied: canary weight {}{}",
            step.step,
            step.phase,
            line.canary_weight,
            if step.match_routing {
                ", A/B rules on"
            } else {
                ""
            }
        ));
        Ok(TaskOutcome {
            output: out.join("\n") + "\n",
        })
    }

    // Long: the workload and routing actions of one canary step, applied in the order the step
    // lists them.
    async fn reconcile(
        &self,
        plan: &PlanSpec,
        step: &CanaryStepSpec,
        ids: &WorkloadIds,
        port: u16,
        managed: &Managed,
        out: &mut Vec<String>,
    ) -> Result<(), TaskFailure> {
        let mut st = match managed.snapshot() {
            Some(st) => st,
            None => {
                let ports = Ports::pick()
                    .map_err(|e| fail(format!("cannot pick ports for the canary: {e}")))?;
                let st = CanaryState::new(&step.canary, &ids.target, &step.service, port, ports);
                managed.save(&st)?;
                out.push(format!(
                    "canary {} set up: primary on port {}, canary on port {}",
                    step.canary, ports.primary_workload, ports.canary_workload
                ));
                st
            }
        };
        if st.target != ids.target {
            return Err(fail(format!(
                "canary {} controls {}, not {}",
                step.canary, st.target, ids.target
            )));
        }
        if st.service != step.service || st.port != port {
            st.service = step.service.clone();
            st.port = port;
            managed.save(&st)?;
        }

        // 1. The primary.
        match &step.primary {
            Some(p) => {
                let changed = st.primary.running.as_ref().map(|d| &d.revision) != Some(&p.revision);
                if changed {
                    st.primary.started = true;
                    managed.save(&st)?;
                    let what = if st.taken_over {
                        "promoted"
                    } else {
                        "deployed"
                    };
                    self.deploy(
                        plan,
                        &ids.primary,
                        "primary",
                        p,
                        st.ports.primary_workload,
                        out,
                    )
                    .await?;
                    st.primary.running = Some(deployed(p));
                    managed.save(&st)?;
                    out.push(format!(
                        "primary workload {what} at {} (revision {})",
                        p.version, p.revision
                    ));
                    // During a promotion the proxy keeps routing per the step's weight.
                    if let Some(proxy) = managed.proxy() {
                        proxy.set_upstreams(upstreams_of(&st));
                    }
                }
                if !st.taken_over {
                    self.wait_ready(&ids.primary, &p.version).await?;
                    // Saved only once the original stopped: a step re-run after a crash in
                    // between stops it again (stop is idempotent).
                    self.stop_entity(plan, &ids.target, "original", false)
                        .await?;
                    st.taken_over = true;
                    managed.save(&st)?;
                    out.push(format!("original workload {} stopped", ids.target));
                }
            }
            None if st.taken_over => {
                warn!(canary = %step.canary, step = step.step,
                      "the step names no primary after initialisation; the primary is left alone");
            }
            None => {}
        }
        if st.taken_over {
            self.ensure_proxy(managed, &st).await?;
        }

        // 2. The canary workload, deployed before traffic is routed to it.
        if let Some(c) = &step.canary_workload {
            if st.canary_workload.running.as_ref().map(|d| &d.revision) != Some(&c.revision) {
                if let (Some(proxy), Some(_)) = (managed.proxy(), &st.canary_workload.running) {
                    // Replacing a running canary: traffic leaves it first, as far as the
                    // step allows.
                    let mut away = routing_state(step);
                    away.canary_weight = away.canary_weight.min(st.routing.canary_weight);
                    away.match_routing &= st.routing.match_routing;
                    proxy.set_routing(routing_for(&away, &st).map_err(fail)?);
                }
                st.canary_workload.started = true;
                managed.save(&st)?;
                self.deploy(
                    plan,
                    &ids.canary,
                    "canary",
                    c,
                    st.ports.canary_workload,
                    out,
                )
                .await?;
                st.canary_workload.running = Some(deployed(c));
                managed.save(&st)?;
                out.push(format!(
                    "canary workload deployed at {} (revision {})",
                    c.version, c.revision
                ));
            }
        }

        // 2b. The fresh baseline, deployed before traffic is routed to it.
        if let Some(b) = &step.baseline {
            self.deploy_baseline(plan, b, ids, managed, &mut st, out)
                .await?;
        }

        // 3. Routing and upstreams.
        st.routing = routing_state(step);
        st.applied_step = step.step;
        st.phase = step.phase.clone();
        st.metric_windows_ms = step.metric_windows_ms.clone();
        if step.canary_workload.is_none() {
            // Traffic leaves the canary before it stops.
            let mut routed = st.clone();
            routed.canary_workload.running = None;
            self.route(managed, &routed)?;
            if st.canary_workload.started || st.canary_workload.running.is_some() {
                self.stop_entity(plan, &ids.canary, "canary", false).await?;
                out.push("canary workload scaled to zero".into());
            }
            st.canary_workload = Slot::default();
        } else {
            self.route(managed, &st)?;
        }
        if step.baseline.is_none() && (st.baseline.started || st.baseline.running.is_some()) {
            // Traffic left the baseline with the routing above; now it stops.
            let mut routed = st.clone();
            routed.baseline.running = None;
            self.route(managed, &routed)?;
            self.stop_entity(plan, &ids.baseline, "baseline", false)
                .await?;
            st.baseline = Slot::default();
            out.push("baseline workload scaled to zero".into());
        }
        managed.save(&st)
    }

    /// Deploys the fresh baseline `b` when it does not run that revision yet (on a port of
    /// its own, picked once and kept in the state).
    async fn deploy_baseline(
        &self,
        plan: &PlanSpec,
        b: &CanaryWorkloadSpec,
        ids: &WorkloadIds,
        managed: &Managed,
        st: &mut CanaryState,
        out: &mut Vec<String>,
    ) -> Result<(), TaskFailure> {
        if st.baseline.running.as_ref().map(|d| &d.revision) == Some(&b.revision) {
            return Ok(());
        }
        if st.ports.baseline_workload == 0 {
            st.ports.baseline_workload = Ports::pick_one()
                .map_err(|e| fail(format!("cannot pick a port for the baseline: {e}")))?;
        }
        if let (Some(proxy), Some(_)) = (managed.proxy(), &st.baseline.running) {
            // Replacing a running baseline: no traffic to it while it is replaced.
            let mut away = st.clone();
            away.baseline.running = None;
            proxy.set_upstreams(upstreams_of(&away));
            proxy.set_routing(routing_for(&away.routing, &away).map_err(fail)?);
        }
        st.baseline.started = true;
        managed.save(st)?;
        self.deploy(
            plan,
            &ids.baseline,
            "baseline",
            b,
            st.ports.baseline_workload,
            out,
        )
        .await?;
        st.baseline.running = Some(deployed(b));
        managed.save(st)?;
        out.push(format!(
            "baseline workload deployed at {} (revision {})",
            b.version, b.revision
        ));
        Ok(())
    }

    /// Applies `st`'s routing and upstreams to the proxy, if it runs.
    fn route(&self, managed: &Managed, st: &CanaryState) -> Result<(), TaskFailure> {
        if let Some(proxy) = managed.proxy() {
            proxy.set_upstreams(upstreams_of(st));
            proxy.set_routing(routing_for(&st.routing, st).map_err(fail)?);
        }
        Ok(())
    }

    async fn restore(
        &self,
        plan: &PlanSpec,
        step: &CanaryStepSpec,
        id: &CanaryId,
        ids: &WorkloadIds,
        managed: &Managed,
        out: &mut Vec<String>,
    ) -> Result<(), TaskFailure> {
        let st = managed.snapshot();
        if let Some(st) = &st {
            if st.target != ids.target {
                return Err(fail(format!(
                    "canary {id} controls {}, not {}",
                    st.target, ids.target
                )));
            }
        }
        self.stop_proxy(managed, out).await;
        match &step.primary {
            Some(p) => {
                // The hub's config unchanged: its port is the service's.
                let original =
                    self.workload_plan(plan, &ids.target, "original", p, p.config.clone());
                self.run_tasks(&original, &DEPLOY_TASKS, "original", out)
                    .await?;
                out.push(format!(
                    "original workload {} started at {}",
                    ids.target, p.version
                ));
            }
            None => out.push("no primary to restore: the original is left as it is".into()),
        }
        self.remove_workloads(plan, ids, st.as_ref(), out).await
    }

    /// Shuts the proxy of `managed` down, if it runs, and waits until the service port is
    /// free (the original binds it again).
    async fn stop_proxy(&self, managed: &Managed, out: &mut Vec<String>) {
        let proxy = managed
            .proxy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(proxy) = proxy {
            proxy.shutdown();
            self.wait_port_free(proxy.addrs().main).await;
            out.push("canary proxy stopped".into());
        }
    }

    /// Stops and removes the canary's workloads (primary, canary, baseline) that run or may
    /// run.
    async fn remove_workloads(
        &self,
        plan: &PlanSpec,
        ids: &WorkloadIds,
        st: Option<&CanaryState>,
        out: &mut Vec<String>,
    ) -> Result<(), TaskFailure> {
        let observed = self.driver.observe().await;
        for (entity, which, slot) in [
            (&ids.primary, "primary", st.map(|s| &s.primary)),
            (&ids.canary, "canary", st.map(|s| &s.canary_workload)),
            (&ids.baseline, "baseline", st.map(|s| &s.baseline)),
        ] {
            let known = observed.iter().any(|o| o.entity == *entity)
                || slot.is_some_and(|s| s.started || s.running.is_some());
            if known {
                self.stop_entity(plan, entity, which, true).await?;
                out.push(format!("{which} workload removed"));
            }
        }
        Ok(())
    }

    /// Hands the leftovers of a deleted canary over to an ordinary plan of its target
    /// (docs/CANARY.md, "Deleting a canary"): the hub issues such a plan for a canary's
    /// target only once the canary is deleted (an uninstall also while it exists, and then
    /// the canary's workloads go with the entity). Until then a canary deleted without
    /// `revertOnDeletion` keeps serving as it was left: the proxy on the service port, the
    /// primary behind it, and the target reported as the primary, which is the version the
    /// hub plans from. Before the plan's first task that touches the workload (`task` other
    /// than `fetch`, `verify` and `configure`; a plan that fails before leaves the leftovers
    /// serving), the proxy stops and frees the port, the workloads are removed and the canary
    /// is forgotten; the plan then runs on the original entity. Idempotent: nothing is left
    /// the second time. Returns the lines for the task's output (empty when nothing was
    /// handed over).
    pub async fn hand_over(&self, plan: &PlanSpec, task: &str) -> Result<String, TaskFailure> {
        let ordinary = match plan.kind {
            PlanKind::Install
            | PlanKind::ConfigChange
            | PlanKind::VersionChange
            | PlanKind::Uninstall
            | PlanKind::SecretsChange
            | PlanKind::Rollback
            | PlanKind::RecallRollOff => true,
            // Break-glass commands act on what runs; canary steps are the canary's own.
            PlanKind::Command(_) | PlanKind::CanaryStep => false,
        };
        if !ordinary || matches!(task, "fetch" | "verify" | "configure") {
            return Ok(String::new());
        }
        let leftovers: Vec<(String, Arc<Managed>)> = self
            .lock_canaries()
            .iter()
            .filter(|(_, m)| m.snapshot().is_some_and(|st| st.target == plan.entity))
            .map(|(id, m)| (id.clone(), m.clone()))
            .collect();
        let mut out = Vec::new();
        for (id, managed) in leftovers {
            let _op = managed.op.lock().await;
            let Some(st) = managed.snapshot().filter(|st| st.target == plan.entity) else {
                continue;
            };
            let ids = WorkloadIds::of(&st.target, &self.environment)
                .map_err(|e| TaskFailure::new(task, e.to_string()))?;
            let stage = |f: TaskFailure| TaskFailure {
                stage: task.to_string(),
                ..f
            };
            self.stop_proxy(&managed, &mut out).await;
            self.remove_workloads(plan, &ids, Some(&st), &mut out)
                .await
                .map_err(stage)?;
            managed
                .dir
                .forget()
                .map_err(|e| stage(fail(format!("cannot forget canary {id}: {e}"))))?;
            *managed.state.lock().unwrap_or_else(PoisonError::into_inner) = None;
            self.lock_canaries().remove(&id);
            out.push(format!(
                "canary {id} is deleted on the hub: its proxy and workloads were handed over \
                 to plan {}",
                plan.id
            ));
            info!(canary = %id, plan = %plan.id, entity = %plan.entity,
                  "deleted canary's leftovers handed over to the entity's plan");
        }
        if out.is_empty() {
            return Ok(String::new());
        }
        Ok(out.join("\n") + "\n")
    }

    /// The synthetic plan deploying workload `w` on `entity` with `config`.
    fn workload_plan(
        &self,
        plan: &PlanSpec,
        entity: &str,
        which: &str,
        w: &CanaryWorkloadSpec,
        config: String,
    ) -> PlanSpec {
        PlanSpec {
            id: format!("{}/{which}", plan.id),
            entity: entity.to_string(),
            kind: PlanKind::VersionChange,
            from_version: String::new(),
            to_version: w.version.clone(),
            config,
            secrets_revision: w.secrets_revision,
            secrets: plan.secrets.clone(),
            artifacts: w.artifacts.clone(),
            registries: plan.registries.clone(),
            tasks: DEPLOY_TASKS.iter().map(|t| t.to_string()).collect(),
            canary: None,
        }
    }

    /// Deploys workload `w` (`which`: primary or canary) as `entity` listening on `port`.
    async fn deploy(
        &self,
        plan: &PlanSpec,
        entity: &str,
        which: &str,
        w: &CanaryWorkloadSpec,
        port: u16,
        out: &mut Vec<String>,
    ) -> Result<(), TaskFailure> {
        let what = format!("{which} workload config of revision {}", w.revision);
        let config = config_with_port(&what, &w.config, port).map_err(|e| TaskFailure {
            validation_errors: vec![e.to_string()],
            ..TaskFailure::new("configure", e.to_string())
        })?;
        let spec = self.workload_plan(plan, entity, which, w, config);
        self.run_tasks(&spec, &DEPLOY_TASKS, which, out).await
    }

    /// Runs `tasks` of `spec` through the driver; a failure names the workload.
    async fn run_tasks(
        &self,
        spec: &PlanSpec,
        tasks: &[&str],
        which: &str,
        out: &mut Vec<String>,
    ) -> Result<(), TaskFailure> {
        for task in tasks {
            match self.driver.run_task(spec, task).await {
                Ok(o) => {
                    let text = o.output.trim_end();
                    if !text.is_empty() {
                        out.push(format!("{which} {task}: {text}"));
                    }
                }
                Err(f) => {
                    let mut output = out.join("\n");
                    if !output.is_empty() {
                        output.push('\n');
                    }
                    output.push_str(&f.output);
                    return Err(TaskFailure {
                        message: format!("{which} workload {}: {}", spec.entity, f.message),
                        output,
                        ..f
                    });
                }
            }
        }
        Ok(())
    }

    /// Stops `entity` (and with `remove`, deletes its deployment) through the driver.
    async fn stop_entity(
        &self,
        plan: &PlanSpec,
        entity: &str,
        which: &str,
        remove: bool,
    ) -> Result<(), TaskFailure> {
        let tasks: &[&str] = if remove {
            &["stop", "remove"]
        } else {
            &["stop"]
        };
        let spec = PlanSpec {
            id: format!("{}/{which}", plan.id),
            entity: entity.to_string(),
            // The sim driver forgets an uninstalled entity; the process driver only stops it.
            kind: PlanKind::Uninstall,
            from_version: String::new(),
            to_version: String::new(),
            config: String::new(),
            secrets_revision: 0,
            secrets: Vec::new(),
            artifacts: Vec::new(),
            registries: plan.registries.clone(),
            tasks: tasks.iter().map(|t| t.to_string()).collect(),
            canary: None,
        };
        let mut ignored = Vec::new();
        self.run_tasks(&spec, tasks, which, &mut ignored).await
    }

    /// Waits until `entity` is healthy at `version`.
    async fn wait_ready(&self, entity: &str, version: &str) -> Result<(), TaskFailure> {
        let deadline = Instant::now() + self.settings.ready_timeout;
        loop {
            let observed = self.driver.observe().await;
            if is_ready(&observed, entity, version) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let last = observed
                    .iter()
                    .find(|o| o.entity == entity)
                    .map(|o| {
                        format!(
                            "{} {} {}",
                            o.version.as_deref().unwrap_or("-"),
                            o.health.as_str(),
                            o.message
                        )
                    })
                    .unwrap_or_else(|| "not observed".into());
                return Err(TaskFailure {
                    not_ready: vec![format!("{entity} (last: {})", last.trim_end())],
                    ..fail(format!(
                        "primary workload {version} not healthy after {} ms; the original keeps serving",
                        self.settings.ready_timeout.as_millis()
                    ))
                });
            }
            tokio::time::sleep(self.settings.poll).await;
        }
    }

    /// Waits (up to the bind timeout) until `addr` can be bound.
    async fn wait_port_free(&self, addr: SocketAddr) {
        let deadline = Instant::now() + self.settings.bind_timeout;
        while std::net::TcpListener::bind(addr).is_err() && Instant::now() < deadline {
            tokio::time::sleep(self.settings.poll).await;
        }
    }

    /// Starts the proxy of `st` if it does not run (on another port: restarts it), retrying
    /// the bind while the original releases the port; applies `st`'s routing.
    async fn ensure_proxy(&self, managed: &Managed, st: &CanaryState) -> Result<(), TaskFailure> {
        if self.driver.simulated() {
            return Ok(());
        }
        // The stable addresses (issue 52 item 2): `<svc>-primary` and `<svc>-canary` on
        // 127.0.0.2 and 127.0.0.3 at the service's port.
        let stable = StableAddresses::of(st.port);
        let want = ProxyAddrs {
            main: loopback(st.port),
            primary: SocketAddr::V4(stable.primary),
            canary: SocketAddr::V4(stable.canary),
        };
        if let Some(p) = managed.proxy() {
            if p.addrs() == want {
                return self.route(managed, st);
            }
            p.shutdown();
            *managed.proxy.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
        let deadline = Instant::now() + self.settings.bind_timeout;
        let proxy = loop {
            match CanaryProxy::start(&st.service, want).await {
                Ok(p) => break p,
                Err(e) if Instant::now() < deadline => {
                    tracing::debug!(canary = %st.canary, error = %e, "canary proxy cannot bind yet");
                    tokio::time::sleep(self.settings.poll).await;
                }
                Err(e) => {
                    return Err(fail(format!(
                        "canary proxy for {} cannot bind {}, {}, {}: {e}",
                        st.service, want.main, want.primary, want.canary
                    )))
                }
            }
        };
        *managed.proxy.lock().unwrap_or_else(PoisonError::into_inner) = Some(proxy);
        self.route(managed, st)
    }

    /// Rewrites what the driver observes for the hub: the canaries' workload pseudo-entities
    /// are left out, and a target under canary control is reported as its primary workload
    /// (version, the hub config's SHA-256, secrets revision, health).
    pub fn overlay(&self, observed: Vec<Observed>) -> Vec<Observed> {
        let states: Vec<CanaryState> = self
            .lock_canaries()
            .values()
            .filter_map(|m| m.snapshot())
            .collect();
        if states.is_empty() {
            return observed;
        }
        let mut hidden = std::collections::HashSet::new();
        let mut replaced = BTreeMap::new();
        for st in &states {
            hidden.insert(format!("{}-primary", st.target));
            hidden.insert(format!("{}-canary", st.target));
            hidden.insert(format!("{}-baseline", st.target));
            if !st.taken_over {
                continue;
            }
            let primary_id = format!("{}-primary", st.target);
            let seen = observed.iter().find(|o| o.entity == primary_id);
            let (health, message) = match (seen, &st.primary.running) {
                (Some(o), Some(d)) if o.version.as_deref() == Some(d.version.as_str()) => {
                    (o.health, o.message.clone())
                }
                (Some(o), Some(_)) => (
                    Health::Unknown,
                    format!(
                        "primary workload at {} (deploying)",
                        o.version.as_deref().unwrap_or("-")
                    ),
                ),
                _ => (Health::Error, "primary workload not running".to_string()),
            };
            replaced.insert(
                st.target.clone(),
                Observed {
                    entity: st.target.clone(),
                    version: st.primary.running.as_ref().map(|d| d.version.clone()),
                    health,
                    config_sha256: st.primary.running.as_ref().map(|d| d.config_sha256.clone()),
                    secrets_revision: st.primary.running.as_ref().map(|d| d.secrets_revision),
                    message,
                },
            );
        }
        let mut result: Vec<Observed> = observed
            .into_iter()
            .filter(|o| !hidden.contains(&o.entity))
            .map(|o| replaced.remove(&o.entity).unwrap_or(o))
            .collect();
        // A target the driver no longer lists (the sim forgets a stopped entity).
        result.extend(replaced.into_values());
        result.sort_by(|a, b| a.entity.cmp(&b.entity));
        result
    }

    /// What each managed canary looks like now (for `Agent.ReportCanaries`); empty when the
    /// runner manages none.
    pub async fn observations(&self) -> Vec<CanaryObservation> {
        let managed: Vec<Arc<Managed>> = self.lock_canaries().values().cloned().collect();
        let states: Vec<(Arc<Managed>, CanaryState)> = managed
            .into_iter()
            .filter_map(|m| m.snapshot().map(|s| (m, s)))
            .collect();
        if states.is_empty() {
            return Vec::new();
        }
        let observed = self.driver.observe().await;
        let simulated = self.driver.simulated();
        states
            .into_iter()
            .map(|(m, st)| {
                let primary_id = format!("{}-primary", st.target);
                let canary_id = format!("{}-canary", st.target);
                let canary_ready = ready_percent(&observed, &canary_id, &st.canary_workload);
                let proxy = m.proxy();
                let baseline = st.baseline.running.is_some();
                let (windows, samples) = st
                    .metric_windows_ms
                    .iter()
                    .map(|&interval_ms| {
                        let secs = (interval_ms.max(1) as u64).div_ceil(1000);
                        if simulated {
                            let healthy = canary_ready == 100;
                            (
                                synthetic_window(interval_ms, secs, healthy),
                                samples::synthetic_sample_window(
                                    interval_ms,
                                    secs,
                                    healthy,
                                    baseline,
                                ),
                            )
                        } else {
                            let window = |workload| {
                                proxy
                                    .as_ref()
                                    .map(|p| p.window(workload, secs))
                                    .unwrap_or_default()
                            };
                            let (canary, primary) =
                                (window(Workload::Canary), window(Workload::Primary));
                            let fresh = baseline.then(|| window(Workload::Baseline));
                            (
                                metric_window(interval_ms, &canary),
                                samples::sample_window(
                                    interval_ms,
                                    &canary,
                                    &primary,
                                    fresh.as_ref(),
                                ),
                            )
                        }
                    })
                    .unzip();
                CanaryObservation {
                    canary: st.canary.clone(),
                    applied_step: st.applied_step,
                    primary_revision: revision(&st.primary),
                    primary_ready_percent: ready_percent(&observed, &primary_id, &st.primary),
                    canary_revision: revision(&st.canary_workload),
                    canary_ready_percent: canary_ready,
                    windows,
                    samples,
                }
            })
            .collect()
    }
}

fn deployed(w: &CanaryWorkloadSpec) -> Deployed {
    Deployed {
        revision: w.revision.clone(),
        version: w.version.clone(),
        config_sha256: sha256_hex(&w.config),
        secrets_revision: w.secrets_revision,
    }
}

fn revision(slot: &Slot) -> String {
    slot.running
        .as_ref()
        .map(|d| d.revision.clone())
        .unwrap_or_default()
}

/// A window of the proxy's stats in the wire's fixed point (thousandths).
pub fn metric_window(interval_ms: i64, w: &crate::proxy::WindowStats) -> CanaryMetricWindow {
    let has = w.requests > 0;
    CanaryMetricWindow {
        interval_ms,
        requests: w.requests,
        success_rate_milli: w
            .success_rate
            .filter(|_| has)
            .map(|r| (r * 1000.0).round() as i64),
        p99_ms_milli: w
            .p99_ms
            .filter(|_| has)
            .map(|p| (p * 1000.0).round() as i64),
    }
}

/// The simulated canary's window: perfect (100%, p99 1 ms, 10 requests a second) while it is
/// healthy, no data otherwise.
fn synthetic_window(interval_ms: i64, secs: u64, healthy: bool) -> CanaryMetricWindow {
    if !healthy {
        return CanaryMetricWindow {
            interval_ms,
            ..Default::default()
        };
    }
    CanaryMetricWindow {
        interval_ms,
        requests: secs.max(1) * 10,
        success_rate_milli: Some(100_000),
        p99_ms_milli: Some(1_000),
    }
}

#[cfg(test)]
mod tests;

//! The rollout workload: real `hub-agent` processes executing plans while hub nodes die, and
//! continuous rollouts driving them; after healing, the agents' execution logs and the hub's
//! records become the plan, canary and rollout parts of the history.
//!
//! What it sets up ([`Rollouts::start`]):
//!
//! - per sim agent `K` an environment `chaos-sim-K` with [`APP_ENTITIES`] helm-chart
//!   entities of `com.example:chaos-app` and an installation of the module `chaos-mod` (one
//!   entity of `com.example:chaos-mod-svc`), executed by `hub-agent --driver sim` (40 ms per
//!   task, [`SIM_FAILURE_RATE`] of the plans fail);
//! - with `process_agent`, an environment `chaos-canary` with the demo service (packaged from
//!   `demo-service` next to the runner into a `file://` registry) installed by
//!   `hub-agent --driver process`, and a canary `chaos-canary/demo` on it (1 s interval,
//!   weights 10/20/30, success rate ≥ 99% over 2 s, rollback after 2 failed checks) with
//!   traffic (about 100 requests a second) sent to the service port.
//!
//! What it drives until [`Rollouts::stop_issuing`]: a new `chaos-app` release every
//! [`RELEASE_EVERY`] (version-change plans on every app entity); a new `chaos-mod` version
//! every [`MODULE_EVERY`] (a config change) whose change requests it approves (config-change
//! plans), lifting the suppressions failed plans leave; and canary revisions one after the other — each a new config of the demo entity,
//! alternately healthy and answering half of its requests with 500 — each waited for until
//! the canary promoted or rolled it back.
//!
//! With sim agents, the fleet workload ([`fleet`]) runs too: `com.example:chaos-fleet` in
//! three environments of its own (one sim agent each), rolled out in two waves under a rollout
//! policy, a new release every [`fleet::FLEET_RELEASE_EVERY`], some halted by the driver.
//!
//! Every hub call has a bounded timeout and fails over between nodes ([`hub::Hub`]); a write
//! that gets no answer is retried with the same request id later, or given up, never fatal.
//!
//! [`Rollouts::finish`] (after healing) approves the last change requests, waits (at most
//! [`FINISH_TIMEOUT`]) until every rollout is terminal and the agent applied the last committed
//! canary step, reads the hub's plans, stops every agent and the services it started, and
//! reads the agents' logs. Dropping [`Rollouts`] at any point stops every process too.

mod agent_faults;
mod agents;
pub mod fleet;
pub mod gather;
mod hub;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use hub_client::answer::{
    CanaryView, Explain, GetActivity, GetCanary, GetEntity, GetPlan, ListChangeRequests, ListPlans,
    ListSuppressions,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::check::{CanaryRun, FleetHistory, HubPlan, Rollout, TaskExecution};
pub use agent_faults::{AgentFault, AgentFaultCounts, AgentStrike};
use agents::{AgentProcess, Driver};
use hub::{CallError, Hub};

/// App entities per sim environment.
pub const APP_ENTITIES: usize = 3;
/// Fraction of sim plans that fail (then rolled back). A failed plan suppresses its entity
/// for at least a minute; the driver lifts such suppressions as an operator would, so the
/// entity gets the newest release again.
pub const SIM_FAILURE_RATE: f64 = 0.1;
/// A new `chaos-app` release this often.
pub const RELEASE_EVERY: Duration = Duration::from_secs(3);
/// A new `chaos-mod` version this often.
pub const MODULE_EVERY: Duration = Duration::from_secs(8);
/// How long [`Rollouts::finish`] waits for every rollout to be terminal.
pub const FINISH_TIMEOUT: Duration = Duration::from_secs(90);
/// How long set-up writes are retried (the hub is healthy then, but may still elect).
const SETUP_TIMEOUT: Duration = Duration::from_secs(60);
/// Polling period of the driver and the waits.
const POLL: Duration = Duration::from_millis(500);
/// A canary revision not settled after this long is left behind for the next one.
const REVISION_TIMEOUT: Duration = Duration::from_secs(150);

const APP_PRODUCT: &str = "com.example:chaos-app";
const MOD_PRODUCT: &str = "com.example:chaos-mod-svc";
const MODULE: &str = "chaos-mod";
const DEMO_PRODUCT: &str = "com.example:demo-service";
const CANARY_ENV: &str = "chaos-canary";
const CANARY_NAME: &str = "demo";

/// Where an agent runs: `prefix` is prepended to its command line (e.g.
/// `["ip", "netns", "exec", "hc123-a1"]`), empty for the runner's own host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentHost {
    /// The agent's name (its data directory is `agent-<name>`).
    pub name: String,
    /// The command prefix.
    pub prefix: Vec<String>,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct RolloutConfig {
    /// Hub endpoints (`host:port`), as the runner reaches them (kept current by the runner).
    pub endpoints: crate::runner::endpoints::SharedEndpoints,
    /// The endpoints agents use, one per node in the same order (the latency relay's).
    pub agent_endpoints: Vec<String>,
    /// Where agents' data, logs and the demo registry go.
    pub dir: PathBuf,
    /// One sim agent (and environment) per host.
    pub sim_agents: Vec<AgentHost>,
    /// Whether to run the process agent with the demo service and the canary.
    pub process_agent: bool,
    /// Seeds the sim agents' failures.
    pub seed: u64,
    /// The runner's epoch: execution times are nanoseconds since it.
    pub epoch: Instant,
    /// Where `hub-agent` and `demo-service` are.
    pub bin_dir: PathBuf,
}

/// Counts for the report.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutSummary {
    /// Agents started.
    pub agents: usize,
    /// `chaos-app` releases the hub acknowledged.
    pub releases_published: usize,
    /// `chaos-mod` versions the hub acknowledged.
    pub module_versions: usize,
    /// Change requests approved.
    pub change_requests_approved: usize,
    /// Suppressions of failed plans lifted.
    pub suppressions_lifted: usize,
    /// Canary revisions rolled out.
    pub canary_revisions: usize,
    /// Of those, promoted.
    pub canary_promoted: usize,
    /// Of those, rolled back.
    pub canary_rolled_back: usize,
    /// Distinct plans with at least one task event in the agents' logs.
    pub plans_executed: usize,
    /// Plans the hub records after healing, by status.
    pub hub_plans_by_status: BTreeMap<String, usize>,
    /// Rollouts recorded.
    pub rollouts: usize,
    /// Of those, terminal.
    pub rollouts_terminal: usize,
    /// Agents killed and paused (`kill-agent`, `pause-agent`).
    pub agent_faults: AgentFaultCounts,
    /// Fleet releases the hub acknowledged.
    #[serde(default)]
    pub fleet_releases: usize,
    /// Of those, halted by the driver as an operator would.
    #[serde(default)]
    pub fleet_halted_by_operator: usize,
    /// What went wrong on the way without failing the run (timeouts, unreadable files).
    pub notes: Vec<String>,
}

/// What the workload gathered.
#[derive(Debug, Clone, Default)]
pub struct RolloutHistory {
    /// Task events from every agent's log, on the runner's clock.
    pub task_executions: Vec<TaskExecution>,
    /// The hub's plans of the workload's environments after healing.
    pub hub_plans: Vec<HubPlan>,
    /// Committed and applied canary weights (one run for the whole canary: every revision's
    /// steps in one sequence, which implies the per-revision equality).
    pub canary_runs: Vec<CanaryRun>,
    /// Releases, module change requests and canary revisions.
    pub rollouts: Vec<Rollout>,
    /// The fleet workload's releases and plans (the runner adds the leader faults).
    pub fleet: FleetHistory,
    /// Counts.
    pub summary: RolloutSummary,
}

/// One canary revision as the driver saw it.
#[derive(Debug, Clone)]
struct Revision {
    index: u64,
    healthy: bool,
    revision: Option<String>,
    phase: String,
    terminal: bool,
}

/// What the driver tasks record.
#[derive(Debug, Default)]
struct Progress {
    releases: Vec<String>,
    module_versions: usize,
    approved: BTreeSet<String>,
    lifted: BTreeSet<String>,
    revisions: Vec<Revision>,
    committed: BTreeMap<u64, u8>,
    agent_faults: AgentFaultCounts,
    fleet_releases: Vec<String>,
    fleet_halts: Vec<String>,
    notes: Vec<String>,
}

type Shared = Arc<Mutex<Progress>>;

fn lock(p: &Shared) -> std::sync::MutexGuard<'_, Progress> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// The running workload. Dropping it stops every agent and service.
pub struct Rollouts {
    cfg: RolloutConfig,
    agents: Vec<AgentProcess>,
    progress: Shared,
    stop: Arc<AtomicBool>,
    stop_traffic: Arc<AtomicBool>,
    driver: Option<tokio::task::JoinHandle<()>>,
    canary: Option<tokio::task::JoinHandle<()>>,
    traffic: Option<tokio::task::JoinHandle<()>>,
    epoch_monotonic_ns: u64,
}

impl Drop for Rollouts {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.stop_traffic.store(true, Ordering::Relaxed);
        for t in [self.driver.take(), self.canary.take(), self.traffic.take()]
            .into_iter()
            .flatten()
        {
            t.abort();
        }
        for a in &mut self.agents {
            a.stop();
        }
    }
}

fn sim_env(k: usize) -> String {
    format!("chaos-sim-{k}")
}

fn entity_id(env: &str, name: &str) -> String {
    format!("eid:{env}:helmChart:{name}")
}

fn app_manifest(version: &str) -> String {
    format!("product-group: com.example\nproduct-name: chaos-app\nproduct-version: {version}\n")
}

fn module_yaml(generation: usize) -> String {
    format!(
        "name: {MODULE}\nentities:\n  - type: helmChart\n    helmChart:\n      productId: {MOD_PRODUCT}\n      k8sNamespace: chaos\n      configOverrides: |\n        \"1.0.0\":\n          overrides:\n            generation: {generation}\n"
    )
}

fn canary_yaml(port: u16) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: {CANARY_NAME}
  namespace: {CANARY_ENV}
spec:
  targetRef:
    kind: helmChart
    name: {CANARY_NAME}
  service:
    port: {port}
  progressDeadlineSeconds: 60
  analysis:
    interval: 1s
    threshold: 2
    maxWeight: 30
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 2s
"
    )
}

fn canary_config(port: u16, index: u64, healthy: bool) -> String {
    let mut c = format!("port: {port}\nmessage: chaos revision {index}\n");
    if !healthy {
        c.push_str("error_rate: 0.5\n");
    }
    c
}

/// Submits a set-up command, retrying until the hub answers; "already exists" counts as done.
async fn setup(hub: &Hub, what: &str, command: Value) -> anyhow::Result<Value> {
    match hub
        .submit_until(&command, &format!("chaos-setup-{what}"), SETUP_TIMEOUT)
        .await
    {
        Ok(v) => Ok(v),
        Err(e) if e.already_exists() => Ok(Value::Null),
        Err(e) => Err(anyhow::anyhow!("set-up {what}: {e}")),
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The products, their first releases and the module's first version.
async fn setup_products(hub: &Hub, progress: &Shared) -> anyhow::Result<()> {
    for p in [APP_PRODUCT, MOD_PRODUCT] {
        setup(
            hub,
            &format!("product-{p}"),
            json!({"CreateProduct": {"product_id": p, "description": "chaos"}}),
        )
        .await?;
    }
    setup(
        hub,
        "release-app-1.0.0",
        json!({"PublishRelease": {"manifest": app_manifest("1.0.0")}}),
    )
    .await?;
    lock(progress).releases.push("1.0.0".into());
    setup(
        hub,
        "release-mod-1.0.0",
        json!({"PublishRelease": {"manifest": "product-group: com.example\nproduct-name: chaos-mod-svc\nproduct-version: 1.0.0\n"}}),
    )
    .await?;
    setup(
        hub,
        "module-0",
        json!({"PublishModule": {"file_name": format!("{MODULE}.yml"), "yaml": module_yaml(0)}}),
    )
    .await?;
    lock(progress).module_versions += 1;
    Ok(())
}

/// One environment per sim agent, with its app entities and the module installed.
async fn setup_sim_environments(hub: &Hub, agents: usize) -> anyhow::Result<()> {
    for k in 0..agents {
        let env = sim_env(k);
        setup(
            hub,
            &format!("env-{env}"),
            json!({"CreateEnvironment": {"name": env, "description": "chaos rollouts"}}),
        )
        .await?;
        for i in 0..APP_ENTITIES {
            setup(
                hub,
                &format!("entity-{env}-{i}"),
                json!({"CreateEntity": {"environment": env, "kind": "HelmChart",
                    "name": format!("app{i}"), "product_id": APP_PRODUCT,
                    "k8s_namespace": "chaos", "account_id": null, "release_channel": null}}),
            )
            .await?;
        }
        setup(
            hub,
            &format!("install-{env}"),
            json!({"InstallModule": {"environment": env, "module": MODULE, "version": null,
                "variables": {}, "actor": "chaos"}}),
        )
        .await?;
    }
    Ok(())
}

impl Rollouts {
    /// Creates the environments, entities, releases, module and (with `process_agent`) the
    /// demo service and its canary; starts the agents, the driver, the canary and its traffic.
    pub async fn start(cfg: RolloutConfig) -> anyhow::Result<Rollouts> {
        std::fs::create_dir_all(&cfg.dir).with_context(|| cfg.dir.display().to_string())?;
        let epoch_monotonic_ns = hub_agent::execlog::monotonic_ns()
            .saturating_sub(cfg.epoch.elapsed().as_nanos() as u64);
        let hub = Hub::new(cfg.endpoints.clone());
        let mut this = Rollouts {
            agents: Vec::new(),
            progress: Shared::default(),
            stop: Arc::new(AtomicBool::new(false)),
            stop_traffic: Arc::new(AtomicBool::new(false)),
            driver: None,
            canary: None,
            traffic: None,
            epoch_monotonic_ns,
            cfg: cfg.clone(),
        };

        setup_products(&hub, &this.progress).await?;
        setup_sim_environments(&hub, cfg.sim_agents.len()).await?;
        this.start_sim_agents(&hub).await?;
        if cfg.process_agent {
            this.start_canary(&hub).await?;
        }
        this.driver = Some(tokio::spawn(drive(
            hub,
            this.progress.clone(),
            this.stop.clone(),
            cfg.sim_agents.len(),
        )));
        Ok(this)
    }

    /// A sim agent per sim environment, and (with a sim agent's host) the fleet's agents.
    async fn start_sim_agents(&mut self, hub: &Hub) -> anyhow::Result<()> {
        for (k, host) in self.cfg.sim_agents.iter().enumerate() {
            self.agents.push(AgentProcess::start(
                &self.cfg.bin_dir,
                host,
                &sim_env(k),
                &self.cfg.agent_endpoints,
                &self.cfg.dir,
                &Driver::Sim {
                    failure_rate: SIM_FAILURE_RATE,
                    seed: self.cfg.seed.wrapping_add(k as u64),
                    task_ms: 40,
                },
            )?);
        }
        if let Some(host) = self.cfg.sim_agents.first() {
            fleet::setup(hub, &self.progress).await?;
            for k in 0..fleet::FLEET_ENVS {
                self.agents.push(AgentProcess::start(
                    &self.cfg.bin_dir,
                    &AgentHost {
                        name: format!("fleet-{k}"),
                        prefix: host.prefix.clone(),
                    },
                    &fleet::fleet_env(k),
                    &self.cfg.agent_endpoints,
                    &self.cfg.dir,
                    // No scripted failures: a failed plan would halt its release for good,
                    // and one whose rollback failed too would hold every later release in
                    // its wave (SPEC C10). Halts come from the driver instead.
                    &Driver::Sim {
                        failure_rate: 0.0,
                        seed: self.cfg.seed.wrapping_add(1000 + k as u64),
                        task_ms: fleet::FLEET_TASK_MS,
                    },
                )?);
            }
        }

        Ok(())
    }

    /// The demo service's environment, entity and first release, its process agent, the
    /// canary loop and its traffic.
    async fn start_canary(&mut self, hub: &Hub) -> anyhow::Result<()> {
        let port = free_port()?;
        let registry = self.cfg.dir.join("registry");
        let manifest = hubctl::package_demo_service(
            &self.cfg.bin_dir.join("demo-service"),
            &registry,
            "1.0.0",
        )?;
        setup(
            hub,
            "env-canary",
            json!({"CreateEnvironment": {"name": CANARY_ENV, "description": "chaos canary"}}),
        )
        .await?;
        setup(
            hub,
            "registry-canary",
            json!({"SetRegistry": {"environment": CANARY_ENV, "name": "local",
                "url": format!("file://{}", registry.display()), "hub_access": "expected"}}),
        )
        .await?;
        setup(
            hub,
            "product-demo",
            json!({"CreateProduct": {"product_id": DEMO_PRODUCT, "description": "demo"}}),
        )
        .await?;
        setup(
            hub,
            "entity-canary",
            json!({"CreateEntity": {"environment": CANARY_ENV, "kind": "HelmChart",
                "name": CANARY_NAME, "product_id": DEMO_PRODUCT, "k8s_namespace": "demo",
                "account_id": null, "release_channel": null}}),
        )
        .await?;
        setup(
            hub,
            "config-canary-0",
            json!({"SetConfigOverrides": {"entity": entity_id(CANARY_ENV, CANARY_NAME),
                "version": "0.0.0", "config": canary_config(port, 0, true)}}),
        )
        .await?;
        setup(
            hub,
            "release-demo-1.0.0",
            json!({"PublishRelease": {"manifest": manifest}}),
        )
        .await?;
        self.agents.push(AgentProcess::start(
            &self.cfg.bin_dir,
            &AgentHost {
                name: "process".into(),
                prefix: Vec::new(),
            },
            CANARY_ENV,
            &self.cfg.agent_endpoints,
            &self.cfg.dir,
            &Driver::Process,
        )?);
        self.canary = Some(tokio::spawn(canary_loop(
            hub.clone(),
            self.progress.clone(),
            self.stop.clone(),
            port,
        )));
        self.traffic = Some(tokio::spawn(traffic(port, self.stop_traffic.clone())));
        Ok(())
    }

    /// Approves what is still open and lifts failed-plan suppressions until every rollout is
    /// terminal, or `deadline` (then a note names those that are not).
    async fn settle_rollouts(&self, hub: &Hub, deadline: Instant) -> anyhow::Result<Vec<Rollout>> {
        loop {
            approve_open(hub, &self.progress, self.cfg.sim_agents.len()).await;
            lift_suppressions(hub, &self.progress, self.cfg.sim_agents.len()).await;
            match self.rollouts(hub).await {
                Ok(r) if r.iter().all(|r| r.terminal) => return Ok(r),
                Ok(r) if Instant::now() >= deadline => {
                    lock(&self.progress).notes.push(format!(
                        "rollouts not terminal after {FINISH_TIMEOUT:?}: {}",
                        r.iter()
                            .filter(|r| !r.terminal)
                            .map(|r| format!("{} ({})", r.id, r.state))
                            .collect::<Vec<_>>()
                            .join("; ")
                    ));
                    return Ok(r);
                }
                Err(e) if Instant::now() >= deadline => {
                    anyhow::bail!("rollouts: the healed hub does not answer: {e}")
                }
                _ => tokio::time::sleep(POLL).await,
            }
        }
    }

    /// Stops every agent (noting one that exited early) and reads their execution logs, in
    /// time order.
    fn stop_agents(&mut self) -> Vec<TaskExecution> {
        for a in &mut self.agents {
            if !a.is_running() {
                lock(&self.progress).notes.push(format!(
                    "agent {} exited before the end (see agent-{}.log)",
                    a.name, a.name
                ));
            }
            a.stop();
        }
        let mut task_executions = Vec::new();
        for a in &self.agents {
            let path = a.data_dir.join(hub_agent::execlog::EXEC_LOG_FILE);
            match hub_agent::execlog::read_lines(&path) {
                Ok(lines) => task_executions.extend(gather::task_executions(
                    &a.name,
                    &lines,
                    self.epoch_monotonic_ns,
                )),
                Err(e) => lock(&self.progress)
                    .notes
                    .push(format!("{}: {e}", path.display())),
            }
        }
        task_executions.sort_by_key(|e| e.at_ns);
        task_executions
    }

    /// Stops issuing rollouts: no new release, module version or canary revision (the
    /// revision under way runs to its end).
    pub async fn stop_issuing(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(d) = self.driver.take() {
            let _ = d.await;
        }
    }

    /// After healing: waits until every rollout is terminal (at most [`FINISH_TIMEOUT`]),
    /// gathers the history parts from the hub at `endpoints` and the agents' files, and stops
    /// every agent and service.
    pub async fn finish(
        mut self,
        endpoints: crate::runner::endpoints::SharedEndpoints,
    ) -> anyhow::Result<RolloutHistory> {
        self.stop_issuing().await;
        let deadline = Instant::now() + FINISH_TIMEOUT;
        let hub = Hub::new(endpoints);
        if let Some(c) = self.canary.take() {
            let left = deadline.saturating_duration_since(Instant::now());
            let abort = c.abort_handle();
            if tokio::time::timeout(left, c).await.is_err() {
                abort.abort();
                let why = stall_diagnosis(&hub, &entity_id(CANARY_ENV, CANARY_NAME)).await;
                lock(&self.progress).notes.push(format!(
                    "the last canary revision did not settle in time: {why}"
                ));
            }
        }
        self.stop_traffic.store(true, Ordering::Relaxed);
        if let Some(t) = self.traffic.take() {
            let _ = t.await;
        }

        let rollouts = self.settle_rollouts(&hub, deadline).await?;

        let fleet = self.fleet(&hub, deadline).await?;

        // The canary: the committed steps, and the agent's applied log caught up with them.
        let canary_runs = if self.cfg.process_agent {
            vec![self.canary_run(&hub, deadline).await]
        } else {
            Vec::new()
        };

        let mut envs: Vec<String> = (0..self.cfg.sim_agents.len()).map(sim_env).collect();
        if self.cfg.process_agent {
            envs.push(CANARY_ENV.to_string());
        }
        if !self.cfg.sim_agents.is_empty() {
            envs.extend((0..fleet::FLEET_ENVS).map(fleet::fleet_env));
        }
        let hub_plans = hub_plans(&hub, &envs).await?;

        let task_executions = self.stop_agents();

        let progress = lock(&self.progress);
        let mut by_status: BTreeMap<String, usize> = BTreeMap::new();
        for p in &hub_plans {
            *by_status.entry(p.status.clone()).or_default() += 1;
        }
        let executed: BTreeSet<&str> = task_executions.iter().map(|e| e.plan.as_str()).collect();
        let summary = RolloutSummary {
            agents: self.agents.len(),
            releases_published: progress.releases.len(),
            module_versions: progress.module_versions,
            change_requests_approved: progress.approved.len(),
            suppressions_lifted: progress.lifted.len(),
            canary_revisions: progress.revisions.len(),
            canary_promoted: progress
                .revisions
                .iter()
                .filter(|r| r.terminal && r.phase == "Succeeded")
                .count(),
            canary_rolled_back: progress
                .revisions
                .iter()
                .filter(|r| r.terminal && r.phase == "Failed")
                .count(),
            plans_executed: executed.len(),
            hub_plans_by_status: by_status,
            rollouts: rollouts.len(),
            rollouts_terminal: rollouts.iter().filter(|r| r.terminal).count(),
            agent_faults: progress.agent_faults.clone(),
            fleet_releases: progress.fleet_releases.len(),
            fleet_halted_by_operator: progress.fleet_halts.len(),
            notes: progress.notes.clone(),
        };
        drop(progress);
        Ok(RolloutHistory {
            task_executions,
            hub_plans,
            canary_runs,
            rollouts,
            fleet,
            summary,
        })
    }

    /// The fleet's releases once every one is settled (halted or rolled out through every
    /// wave) or `deadline` passed, and the fleet product's plans.
    async fn fleet(&self, hub: &Hub, deadline: Instant) -> anyhow::Result<FleetHistory> {
        if self.cfg.sim_agents.is_empty() {
            return Ok(FleetHistory::default());
        }
        let versions = lock(&self.progress).fleet_releases.clone();
        let releases = loop {
            let releases = fleet::releases(hub, &versions).await;
            let open: Vec<String> = releases
                .iter()
                .filter(|r| !fleet::settled(r))
                .map(|r| r.version.clone())
                .collect();
            if open.is_empty() {
                break releases;
            }
            if Instant::now() >= deadline {
                lock(&self.progress).notes.push(format!(
                    "fleet releases not settled after {FINISH_TIMEOUT:?}: {}",
                    open.join(", ")
                ));
                break releases;
            }
            tokio::time::sleep(POLL).await;
        };
        let plans = fleet::plans(hub, SETUP_TIMEOUT)
            .await
            .map_err(|e| anyhow::anyhow!("fleet plans: {e}"))?;
        Ok(FleetHistory {
            product: fleet::FLEET_PRODUCT.to_string(),
            releases,
            plans,
            leader_faults_ms: Vec::new(),
            operator_halts: lock(&self.progress).fleet_halts.clone(),
        })
    }

    /// Every rollout as the hub records it now.
    async fn rollouts(&self, hub: &Hub) -> Result<Vec<Rollout>, CallError> {
        let (releases, revisions) = {
            let p = lock(&self.progress);
            (p.releases.clone(), p.revisions.clone())
        };
        let mut out = Vec::new();
        for k in 0..self.cfg.sim_agents.len() {
            let env = sim_env(k);
            let plans = gather::plan_rows(&hub.ask(&env_plans(&env)).await?);
            let mut entities = BTreeMap::new();
            for i in 0..APP_ENTITIES {
                let id = entity_id(&env, &format!("app{i}"));
                let v = hub.ask(&GetEntity(id.clone())).await?;
                entities.insert(id, gather::Reported::from_view(&v));
            }
            for (i, version) in releases.iter().enumerate() {
                out.push(gather::release_rollout(
                    &env,
                    version,
                    i + 1 == releases.len(),
                    &entities,
                    &plans,
                ));
            }
            let installation = format!("{env}/{MODULE}");
            let crs = hub
                .ask(&ListChangeRequests {
                    installation: Some(installation),
                    open: false,
                })
                .await?
                .change_requests;
            let module_entities: BTreeSet<String> =
                [entity_id(&env, "chaos-mod-svc")].into_iter().collect();
            // The newest change request is the one whose plans may still run.
            let newest = crs.iter().filter_map(|c| cr_number(&c.id)).max();
            for cr in &crs {
                let latest = cr_number(&cr.id) == newest;
                out.push(gather::module_rollout(cr, latest, &module_entities, &plans));
            }
        }
        for r in &revisions {
            out.push(Rollout {
                id: format!(
                    "{CANARY_ENV}/{CANARY_NAME}#{}{}",
                    r.index,
                    r.revision
                        .as_deref()
                        .map(|v| format!("@{v}"))
                        .unwrap_or_default()
                ),
                kind: "canary".into(),
                state: format!(
                    "{} ({})",
                    r.phase,
                    if r.healthy { "healthy" } else { "faulty" }
                ),
                terminal: r.terminal,
            });
        }
        Ok(out)
    }

    /// The canary's committed weights (merged over the run) and the agent's applied ones,
    /// once the applied log reaches the last committed step (or the deadline passes).
    async fn canary_run(&self, hub: &Hub, deadline: Instant) -> CanaryRun {
        let applied_path = self
            .agents
            .iter()
            .find(|a| a.environment == CANARY_ENV)
            .map(|a| {
                a.data_dir
                    .join("canary")
                    .join(format!("{CANARY_ENV}--{CANARY_NAME}"))
                    .join("applied.jsonl")
            });
        let id = format!("{CANARY_ENV}/{CANARY_NAME}");
        loop {
            if let Ok(view) = hub.ask(&GetCanary(id.clone())).await {
                gather::merge_committed(&view, &mut lock(&self.progress).committed);
            }
            let committed: Vec<(u64, u8)> = lock(&self.progress)
                .committed
                .iter()
                .map(|(s, w)| (*s, *w))
                .collect();
            let applied = applied_path
                .as_ref()
                .and_then(|p| std::fs::read_to_string(p).ok())
                .map(|t| gather::applied_weights(&t))
                .unwrap_or_default();
            let caught_up = committed
                .last()
                .is_none_or(|(last, _)| applied.iter().any(|(s, _)| s >= last));
            if caught_up || Instant::now() >= deadline {
                if !caught_up {
                    lock(&self.progress)
                        .notes
                        .push("the agent never applied the last committed canary step".into());
                }
                return CanaryRun {
                    canary: id,
                    committed,
                    applied,
                };
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// The plans of environment `env` (all of them: beyond the default limit of 100).
fn env_plans(env: &str) -> ListPlans {
    ListPlans {
        environment: Some(env.to_string()),
        limit: Some(10000),
        ..ListPlans::default()
    }
}

/// The order of a change request id: `cr-<log index>-<n>` → (index, n).
fn cr_number(id: &str) -> Option<(u64, u64)> {
    let rest = id.strip_prefix("cr-")?;
    let (index, n) = rest.split_once('-').unwrap_or((rest, "0"));
    Some((index.parse().ok()?, n.parse().ok()?))
}

/// The hub's plans of `envs`, each with its tasks.
async fn hub_plans(hub: &Hub, envs: &[String]) -> anyhow::Result<Vec<HubPlan>> {
    let mut out = Vec::new();
    for env in envs {
        let list = hub
            .ask_until(&env_plans(env), SETUP_TIMEOUT)
            .await
            .with_context(|| format!("plans of {env}"))?;
        for row in gather::plan_rows(&list) {
            match hub.ask_until(&GetPlan(row.id.clone()), SETUP_TIMEOUT).await {
                Ok(v) => out.push(gather::hub_plan(&v)),
                // Pruned between the two reads (finished plans beyond the newest kept).
                Err(CallError::Refused { .. }) => {}
                Err(e) => return Err(anyhow::anyhow!("plan {}: {e}", row.id)),
            }
        }
    }
    Ok(out)
}

/// Deletes the suppressions failed plans left in the sim environments (what an operator does
/// after looking at the failure), so that the entities take new releases again.
async fn lift_suppressions(hub: &Hub, progress: &Shared, sim_envs: usize) {
    for k in 0..sim_envs {
        let Ok(v) = hub
            .ask(&ListSuppressions {
                environment: Some(sim_env(k)),
            })
            .await
        else {
            continue;
        };
        for sup in &v.suppressions {
            let id = &sup.id;
            if sup.source != "failed-plan" {
                continue;
            }
            let r = hub
                .submit(
                    &json!({"DeleteSuppression": {"id": id, "actor": "chaos"}}),
                    &format!("chaos-lift-{}-{id}", sim_env(k)),
                )
                .await;
            if r.is_ok() {
                lock(progress).lifted.insert(format!("{}/{id}", sim_env(k)));
            }
        }
    }
}

/// Approves every open change request of the sim environments' installations.
async fn approve_open(hub: &Hub, progress: &Shared, sim_envs: usize) {
    for k in 0..sim_envs {
        let installation = format!("{}/{MODULE}", sim_env(k));
        let Ok(v) = hub
            .ask(&ListChangeRequests {
                installation: Some(installation),
                open: true,
            })
            .await
        else {
            continue;
        };
        for cr in &v.change_requests {
            let id = &cr.id;
            if cr.status != "pending-approval" {
                continue;
            }
            let r = hub
                .submit(
                    &json!({"ApproveChangeRequest": {"id": id, "actor": "chaos"}}),
                    &format!("chaos-approve-{id}"),
                )
                .await;
            if r.is_ok() {
                lock(progress).approved.insert(id.clone());
            }
        }
    }
}

/// Publishes releases and module versions and approves change requests until `stop`.
async fn drive(hub: Hub, progress: Shared, stop: Arc<AtomicBool>, sim_envs: usize) {
    if sim_envs == 0 {
        return;
    }
    let mut release = 1u64;
    let mut generation = 1usize;
    let mut next_release = Instant::now() + RELEASE_EVERY;
    let mut next_module = Instant::now() + MODULE_EVERY;
    let mut fleet_driver = fleet::FleetDriver::default();
    while !stop.load(Ordering::Relaxed) {
        fleet_driver.step(&hub, &progress).await;
        let now = Instant::now();
        if now >= next_release {
            let version = format!("1.0.{release}");
            let r = hub
                .submit(
                    &json!({"PublishRelease": {"manifest": app_manifest(&version)}}),
                    &format!("chaos-release-{release}"),
                )
                .await;
            match r {
                Ok(_) => {
                    lock(&progress).releases.push(version);
                    release += 1;
                    next_release = Instant::now() + RELEASE_EVERY;
                }
                Err(e) if e.already_exists() => {
                    lock(&progress).releases.push(version);
                    release += 1;
                    next_release = Instant::now() + RELEASE_EVERY;
                }
                Err(CallError::Refused { message, .. }) => {
                    lock(&progress)
                        .notes
                        .push(format!("release {version} refused: {message}"));
                    release += 1;
                }
                // Unknown outcome: the same request id again at the next round.
                Err(CallError::Unavailable(_)) => {}
            }
        }
        if now >= next_module {
            let r = hub
                .submit(
                    &json!({"PublishModule": {"file_name": format!("{MODULE}.yml"),
                        "yaml": module_yaml(generation)}}),
                    &format!("chaos-module-{generation}"),
                )
                .await;
            match r {
                Ok(_) => {
                    lock(&progress).module_versions += 1;
                    generation += 1;
                    next_module = Instant::now() + MODULE_EVERY;
                }
                Err(CallError::Refused { message, .. }) => {
                    lock(&progress)
                        .notes
                        .push(format!("module generation {generation} refused: {message}"));
                    generation += 1;
                    next_module = Instant::now() + MODULE_EVERY;
                }
                Err(CallError::Unavailable(_)) => {}
            }
        }
        approve_open(&hub, &progress, sim_envs).await;
        lift_suppressions(&hub, &progress, sim_envs).await;
        tokio::time::sleep(POLL).await;
    }
}

/// The canary of the workload.
fn the_canary() -> GetCanary {
    GetCanary(format!("{CANARY_ENV}/{CANARY_NAME}"))
}

/// The canary's view (`None` while the hub does not answer).
async fn canary_view(hub: &Hub, progress: &Shared) -> Option<CanaryView> {
    let view = hub.ask(&the_canary()).await.ok()?;
    gather::merge_committed(&view, &mut lock(progress).committed);
    Some(view)
}

/// The revision the canary's analysis is about (`None`: none yet).
fn target_revision(v: &CanaryView) -> Option<&str> {
    v.target.as_ref()?.as_ref().map(|t| t.revision.as_str())
}

/// Polls until `f` holds for the canary's view (or `stop`, or `timeout`).
async fn wait_view(
    hub: &Hub,
    progress: &Shared,
    stop: Option<&AtomicBool>,
    timeout: Duration,
    f: impl Fn(&CanaryView) -> bool,
) -> Option<CanaryView> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = canary_view(hub, progress).await {
            if f(&v) {
                return Some(v);
            }
        }
        if Instant::now() >= deadline || stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Waits until the demo service is installed, applies the canary and waits until it is
/// initialized; `false` (with a note) when the workload stopped first or the apply was refused.
async fn canary_ready(
    hub: &Hub,
    progress: &Shared,
    stop: &AtomicBool,
    entity: &str,
    port: u16,
) -> bool {
    // The demo service installed.
    let installed = async {
        loop {
            if stop.load(Ordering::Relaxed) {
                return false;
            }
            if let Ok(v) = hub.ask(&GetEntity(entity.to_string())).await {
                if v.reported.version.as_deref() == Some("1.0.0") {
                    return true;
                }
            }
            tokio::time::sleep(POLL).await;
        }
    };
    if !installed.await {
        lock(progress)
            .notes
            .push("the demo service was not installed before the workload stopped".into());
        return false;
    }
    let apply = json!({"ApplyCanary": {"environment": CANARY_ENV, "yaml": canary_yaml(port)}});
    loop {
        match hub.submit(&apply, "chaos-canary-apply").await {
            Ok(_) => break,
            Err(e @ CallError::Refused { .. }) => {
                lock(progress)
                    .notes
                    .push(format!("canary apply refused: {e}"));
                return false;
            }
            Err(CallError::Unavailable(_)) if stop.load(Ordering::Relaxed) => return false,
            Err(CallError::Unavailable(_)) => tokio::time::sleep(POLL).await,
        }
    }
    if wait_view(hub, progress, Some(stop), REVISION_TIMEOUT, |v| {
        v.status == "Initialized"
    })
    .await
    .is_none()
    {
        lock(progress)
            .notes
            .push("the canary was not initialized before the workload stopped".into());
        return false;
    }
    true
}

/// Follows canary revision `index` (in `progress.revisions[slot]`): the hub picks it as the
/// canary's target (other than `before`), then analyses it until it is promoted or rolled
/// back; the revision's record says how far it got, and a note why when it stalled.
async fn follow_revision(
    hub: &Hub,
    progress: &Shared,
    slot: usize,
    before: Option<String>,
    index: u64,
    entity: &str,
) {
    let update = |f: &dyn Fn(&mut Revision)| f(&mut lock(progress).revisions[slot]);
    // The hub picks the new revision as the canary's target …
    let Some(v) = wait_view(hub, progress, None, REVISION_TIMEOUT, |v| {
        target_revision(v).is_some() && target_revision(v) != before.as_deref()
    })
    .await
    else {
        update(&|r| r.phase = "never targeted".into());
        let why = stall_diagnosis(hub, entity).await;
        lock(progress)
            .notes
            .push(format!("canary revision {index} never targeted: {why}"));
        return;
    };
    let revision = target_revision(&v).unwrap_or_default().to_string();
    update(&|r| r.revision = Some(revision.clone()));
    // … and analyses it until it is promoted or rolled back.
    let settled = wait_view(hub, progress, None, REVISION_TIMEOUT, |v| {
        let phase = v.status.as_str();
        let about = v
            .status_block
            .as_ref()
            .and_then(|b| b.last_applied_spec.as_deref())
            == Some(revision.as_str());
        about && (phase == "Succeeded" || phase == "Failed")
    })
    .await;
    match settled {
        Some(v) => {
            let phase = v.status.clone();
            update(&|r| {
                r.phase = phase.clone();
                r.terminal = true;
            });
        }
        None => {
            let phase = canary_view(hub, progress)
                .await
                .map(|v| v.status)
                .unwrap_or_else(|| "unknown".into());
            update(&|r| r.phase = phase.clone());
            let why = stall_diagnosis(hub, entity).await;
            lock(progress).notes.push(format!(
                "canary revision {index} not settled ({phase}): {why}"
            ));
        }
    }
}

/// Applies the canary once the demo entity runs 1.0.0, then rolls out revisions one after
/// the other (healthy, faulty, healthy, …) until `stop`.
async fn canary_loop(hub: Hub, progress: Shared, stop: Arc<AtomicBool>, port: u16) {
    let entity = entity_id(CANARY_ENV, CANARY_NAME);
    if !canary_ready(&hub, &progress, &stop, &entity, port).await {
        return;
    }
    let mut index = 1u64;
    while !stop.load(Ordering::Relaxed) {
        let healthy = index % 2 == 1;
        // The target before this revision, read once: a resend after an unknown outcome
        // must not re-read it, as the first send may already have moved it.
        let before = canary_view(&hub, &progress)
            .await
            .and_then(|v| target_revision(&v).map(String::from));
        let command = json!({"SetConfigOverrides": {"entity": entity, "version": "0.0.0",
            "config": canary_config(port, index, healthy)}});
        let sent = loop {
            match hub
                .submit(&command, &format!("chaos-canary-revision-{index}"))
                .await
            {
                Ok(_) => break true,
                Err(CallError::Unavailable(_)) if stop.load(Ordering::Relaxed) => return,
                Err(CallError::Unavailable(_)) => {
                    // Unknown: send the same request again (applied at most once).
                    tokio::time::sleep(POLL).await;
                }
                Err(e @ CallError::Refused { .. }) => {
                    lock(&progress)
                        .notes
                        .push(format!("canary revision {index} refused: {e}"));
                    break false;
                }
            }
        };
        if !sent {
            index += 1;
            continue;
        }
        let slot = {
            let mut p = lock(&progress);
            p.revisions.push(Revision {
                index,
                healthy,
                revision: None,
                phase: "Published".into(),
                terminal: false,
            });
            p.revisions.len() - 1
        };
        follow_revision(&hub, &progress, slot, before, index, &entity).await;
        index += 1;
    }
}

/// Why the canary of `entity` does not move, from the hub's point of view: the entity's
/// evaluation, its active plans, the canary's status and the last Activity lines (for the
/// report of a run whose canary stalled).
async fn stall_diagnosis(hub: &Hub, entity: &str) -> String {
    // Text fields are shown quoted, as JSON writes them.
    let quoted = |t: &str| Value::from(t).to_string();
    let explain = hub
        .ask(&Explain(entity.to_string()))
        .await
        .map(|v| {
            let issued = serde_json::to_string(&v.issued).unwrap_or_default();
            format!("{} (issued {issued})", quoted(&v.summary))
        })
        .unwrap_or_else(|e| format!("explain failed: {e}"));
    let active = hub
        .ask(&ListPlans {
            entity: Some(entity.to_string()),
            active: true,
            ..ListPlans::default()
        })
        .await
        .map(|v| {
            v.plans
                .iter()
                .map(|p| {
                    format!(
                        "{} {} {}",
                        quoted(&p.id),
                        quoted(&p.kind),
                        quoted(&p.status)
                    )
                })
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_else(|e| format!("plans failed: {e}"));
    let canary = hub
        .ask(&the_canary())
        .await
        .map(|mut c| {
            // Left out as noise.
            (c.history, c.yaml, c.actions, c.committed_weights) = (None, None, None, None);
            serde_json::to_string(&c).unwrap_or_default()
        })
        .unwrap_or_else(|e| format!("canary failed: {e}"));
    let activity = hub
        .ask(&GetActivity(entity.to_string()))
        .await
        .map(|v| {
            v.entries
                .iter()
                .take(8)
                .map(|e| format!("[{} {}] {}", e.index, quoted(&e.kind), quoted(&e.message)))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_else(|e| format!("activity failed: {e}"));
    format!("explain: {explain}; active plans: [{active}]; canary: {canary}; activity: {activity}")
}

/// Sends `GET /` to the service port every 10 ms until `stop`.
async fn traffic(port: u16, stop: Arc<AtomicBool>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    while !stop.load(Ordering::Relaxed) {
        let one = async {
            let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
            s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                .await?;
            let mut buf = Vec::new();
            s.read_to_end(&mut buf).await?;
            Ok::<_, std::io::Error>(())
        };
        let _ = tokio::time::timeout(Duration::from_secs(2), one).await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_request_ids_order_by_log_index() {
        assert_eq!(cr_number("cr-1791-0"), Some((1791, 0)));
        assert_eq!(cr_number("cr-12"), Some((12, 0)));
        assert!(cr_number("cr-9-1") < cr_number("cr-10-0"));
        assert_eq!(cr_number("x-1"), None);
    }

    #[test]
    fn canary_revisions_alternate_healthy_and_faulty_configs() {
        assert_eq!(
            canary_config(8080, 1, true),
            "port: 8080\nmessage: chaos revision 1\n"
        );
        assert!(canary_config(8080, 2, false).ends_with("error_rate: 0.5\n"));
        assert!(module_yaml(3).contains("generation: 3"));
        assert!(canary_yaml(8080).contains("port: 8080"));
    }
}

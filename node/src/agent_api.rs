//! The agent API (`hub.v1.Agent`, SPEC P2, R3, R4): reports are idempotent writes forwarded
//! to the leader; plan fetches are linearizable reads that long-poll for a change of the
//! environment's plan set. Every reply carries the hub's endpoints and the leader hint, so an
//! agent's endpoint list stays fresh (as Nomad's heartbeats do).
//!
//! An agent names its environment in every call and sees and reports only that environment's
//! plans and entities; mTLS identities that pin the environment are SPEC S1's work.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use hub_engine::canary::{analysis_loads, HeaderMatch, Phase};
use hub_engine::canary::{
    Bin, CanaryObservation as EngineObservation, CanaryRevision, CanaryStepSpec, Histogram,
    MetricWindow, SampleWindow, WorkloadSamples, MAX_SAMPLE_WINDOWS,
};
use hub_engine::command::{EntityReport, SampledEntityReport};
use hub_engine::entity::{config_sha256, EntityId};
use hub_engine::plan::{FailureMetadata, TaskReport};
use hub_engine::{Command, State};
use hub_proto::agent_server::Agent;
use hub_proto::*;
use raft_store::StateEvent;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::agent_wire;
use crate::committed::Committed;
use crate::node::HubNode;

/// How long a `ReportTasks` reply waits for this node to apply the batch's write before it
/// goes without the entities' recorded states.
const RECORDED_WAIT: Duration = Duration::from_millis(100);

/// Refuses a poll's `known_plan_ids` beyond [`hub_proto::MAX_KNOWN_PLAN_IDS`] ids or
/// [`hub_proto::MAX_KNOWN_PLAN_ID_BYTES`] bytes per id, naming the field.
fn check_known_plan_ids(ids: &[String]) -> Result<(), Status> {
    if ids.len() > hub_proto::MAX_KNOWN_PLAN_IDS {
        return Err(Status::invalid_argument(format!(
            "known_plan_ids: {} ids, at most {} allowed",
            ids.len(),
            hub_proto::MAX_KNOWN_PLAN_IDS
        )));
    }
    if let Some((i, id)) = ids
        .iter()
        .enumerate()
        .find(|(_, id)| id.len() > hub_proto::MAX_KNOWN_PLAN_ID_BYTES)
    {
        return Err(Status::invalid_argument(format!(
            "known_plan_ids[{i}]: {} bytes, at most {} allowed",
            id.len(),
            hub_proto::MAX_KNOWN_PLAN_ID_BYTES
        )));
    }
    Ok(())
}

/// Plan polls share read barriers younger than this (see `HubNode::shared_read_barrier`).
pub const SHARED_BARRIER_AGE: Duration = Duration::from_millis(200);

/// Longest long-poll a fetch may ask for.
pub const MAX_WAIT: Duration = Duration::from_secs(30);

/// Per-environment wake-ups for plan long-polls: a poll waits on its own environment's
/// counter, so thousands of waiting agents are not all woken by every applied entry.
#[derive(Default)]
pub struct PlanWatch {
    envs: std::sync::Mutex<HashMap<String, watch::Sender<u64>>>,
}

impl PlanWatch {
    /// Starts a watch fed by the node's apply events.
    pub fn start(node: &HubNode) -> Arc<Self> {
        let watch = Arc::new(PlanWatch::default());
        let mut events = node.sm.subscribe();
        let w = watch.clone();
        let state = node.state.clone();
        // A revocation wakes every poll, so one of a revoked certificate ends at once.
        let revocations = move || state.read().state.revocation_list_version();
        let mut known_revocations = revocations();
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(StateEvent::Applied {
                        plan_environments, ..
                    }) => {
                        let now = revocations();
                        if now != known_revocations {
                            known_revocations = now;
                            w.notify_all();
                            continue;
                        }
                        for env in plan_environments.iter() {
                            w.notify(env);
                        }
                    }
                    Ok(StateEvent::Replaced) | Err(RecvError::Lagged(_)) => w.notify_all(),
                    Err(RecvError::Closed) => return,
                }
            }
        });
        watch
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, watch::Sender<u64>>> {
        // Plain map of senders: a panic elsewhere cannot leave it inconsistent.
        self.envs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that changes whenever `environment`'s plans change. Call it only for an
    /// environment that exists: the map holds one entry per environment with waiting polls,
    /// and entries nobody waits on any more are dropped whenever a new one is added (and on
    /// every notification), so names that stopped existing do not accumulate.
    pub fn subscribe(&self, environment: &str) -> watch::Receiver<u64> {
        let mut envs = self.lock();
        if let Some(tx) = envs.get(environment) {
            return tx.subscribe();
        }
        envs.retain(|_, tx| tx.receiver_count() > 0);
        let (tx, rx) = watch::channel(0);
        envs.insert(environment.to_string(), tx);
        rx
    }

    /// Environments with an entry (tests: the map stays bounded).
    pub fn watched(&self) -> usize {
        self.lock().len()
    }

    fn notify(&self, environment: &str) {
        let mut envs = self.lock();
        if let Some(tx) = envs.get(environment) {
            if tx.receiver_count() == 0 {
                envs.remove(environment);
            } else {
                tx.send_modify(|g| *g += 1);
            }
        }
    }

    fn notify_all(&self) {
        let mut envs = self.lock();
        envs.retain(|_, tx| tx.receiver_count() > 0);
        for tx in envs.values() {
            tx.send_modify(|g| *g += 1);
        }
    }
}

/// The gRPC service.
pub struct AgentService {
    /// The node it serves from.
    pub node: Arc<HubNode>,
    /// Long-poll wake-ups.
    pub plans: Arc<PlanWatch>,
}

impl AgentService {
    fn endpoints(&self) -> (Vec<String>, String) {
        let endpoints = self
            .node
            .members()
            .into_iter()
            .map(|(_, addr, _)| addr)
            .collect();
        let leader = self.node.leader().map(|(_, a)| a).unwrap_or_default();
        (endpoints, leader)
    }

    fn reply(&self, w: Committed, refused: Vec<RefusedReport>) -> AgentReply {
        let (endpoints, leader) = self.endpoints();
        AgentReply {
            result: w.result,
            index: w.index,
            endpoints,
            leader,
            refused,
            recorded: Vec::new(),
            recorded_index: 0,
        }
    }

    /// The sample windows worth replicating: those of canaries with judged metrics, and of
    /// them only the judged intervals (this node's state; the apply filters again). Canaries
    /// without judges report samples too, but they are dropped here, before the log.
    fn judged_samples(
        &self,
        samples: Vec<(String, Vec<SampleWindow>)>,
    ) -> Vec<(String, Vec<SampleWindow>)> {
        let s = self.node.state.read();
        samples
            .into_iter()
            .filter_map(|(id, windows)| {
                let j = s
                    .state
                    .canary_judging(&id)
                    .filter(|j| !j.metrics.is_empty())?;
                let kept: Vec<SampleWindow> = windows
                    .into_iter()
                    .filter(|w| j.judges_window(w.interval_ms))
                    .collect();
                (!kept.is_empty()).then_some((id, kept))
            })
            .collect()
    }
}

fn unknown_environment(environment: &str) -> Status {
    Status::not_found(format!("environment {environment:?} not found"))
}

fn bad(field: &str, reason: impl std::fmt::Display) -> Status {
    Status::invalid_argument(format!("invalid {field}: {reason}"))
}

/// Converts one wire report; `prefix` names its place in a batch for errors.
fn task_report(r: ReportTaskRequest, prefix: &str) -> Result<TaskReport, Status> {
    let state = agent_wire::reported_task_state(r.state, &format!("{prefix}state"))?;
    Ok(TaskReport {
        plan_id: r.plan_id,
        task: r.task,
        attempt: r.attempt,
        state,
        output: r.output,
        failure: r.failure.map(|f| FailureMetadata {
            stage: f.stage,
            message: f.message,
            not_ready: f.not_ready,
            validation_errors: f.validation_errors,
        }),
    })
}

/// A canary step plan's desired state on the wire, with its fresh baseline if it runs one.
fn canary_step(
    s: &CanaryStepSpec,
    baseline: Option<&CanaryRevision>,
    spec: Option<&hub_engine::canary::CanarySpec>,
) -> CanaryStep {
    let workload = |r: &CanaryRevision| CanaryWorkload {
        revision: r.revision.clone(),
        version: r.version.to_string(),
        config: r.config.clone(),
        artifacts: r
            .artifacts
            .iter()
            .map(|a| PlanArtifact {
                uri: a.uri.clone(),
                sha256: a.sha256.clone(),
            })
            .collect(),
        secrets_revision: r.secrets_revision,
    };
    CanaryStep {
        canary: s.canary.clone(),
        service: s.service.clone(),
        port: u32::from(s.port),
        step: s.step,
        phase: s.phase.as_str().to_string(),
        primary: s.primary.as_ref().map(workload),
        canary_workload: s.canary_workload.as_ref().map(workload),
        canary_weight: u32::from(s.canary_weight),
        match_routing: s.match_routing,
        r#match: s
            .match_rules
            .iter()
            .map(|rule| CanaryMatchRule {
                headers: rule
                    .headers
                    .iter()
                    .map(|(name, m)| {
                        let (op, value) = match m {
                            HeaderMatch::Exact(v) => ("exact", v),
                            HeaderMatch::Prefix(v) => ("prefix", v),
                            HeaderMatch::Regex(v) => ("regex", v),
                        };
                        CanaryHeaderMatch {
                            name: name.clone(),
                            op: op.to_string(),
                            value: value.clone(),
                        }
                    })
                    .collect(),
            })
            .collect(),
        restore_original: s.restore_original,
        metric_windows_ms: s.metric_windows_ms.clone(),
        baseline: baseline.map(workload),
        loads: match spec {
            Some(spec) if s.phase == Phase::Progressing => canary_loads(spec),
            _ => Vec::new(),
        },
    }
}

/// The built-in load tester's `hey` loads of a canary being analysed (from its committed
/// resource, so every node sends the same).
fn canary_loads(spec: &hub_engine::canary::CanarySpec) -> Vec<CanaryLoad> {
    analysis_loads(&spec.analysis.webhooks)
        .into_iter()
        .map(|(name, h)| CanaryLoad {
            name,
            url: h.url,
            duration_ms: h.duration_ms.unwrap_or(0),
            requests: h.requests,
            workers: h.workers,
            rate_milli_per_worker: h.rate_milli_per_worker.unwrap_or(0),
            method: h.method,
            headers: h
                .headers
                .into_iter()
                .map(|(name, value)| CanaryLoadHeader { name, value })
                .collect(),
            body: h.body.unwrap_or_default(),
            host: h.host.unwrap_or_default(),
            timeout_ms: h.timeout_ms,
        })
        .collect()
}

/// An agent's sample windows of observation `i`, converted and checked (bounds named by field).
fn canary_samples(
    i: usize,
    windows: Vec<hub_proto::CanarySampleWindow>,
) -> Result<Vec<SampleWindow>, Status> {
    if windows.len() > MAX_SAMPLE_WINDOWS {
        return Err(bad(
            &format!("observations[{i}].samples"),
            format!("{} windows, at most {MAX_SAMPLE_WINDOWS}", windows.len()),
        ));
    }
    let histogram = |h: Option<hub_proto::CanaryHistogram>| Histogram {
        bins: h
            .unwrap_or_default()
            .bins
            .into_iter()
            .map(|b| Bin {
                le: b.le,
                count: b.count,
            })
            .collect(),
    };
    let workload = |w: hub_proto::CanaryWorkloadSamples| WorkloadSamples {
        latency: histogram(w.latency),
        success: histogram(w.success),
    };
    windows
        .into_iter()
        .enumerate()
        .map(|(k, w)| {
            let window = SampleWindow {
                interval_ms: w.interval_ms,
                canary: workload(w.canary.unwrap_or_default()),
                primary: workload(w.primary.unwrap_or_default()),
                baseline: w.baseline.map(workload),
            };
            window
                .validate(&format!("observations[{i}].samples[{k}]"))
                .map_err(|e| bad(&e.path, e.message))?;
            Ok(window)
        })
        .collect()
}

/// An agent's canary observation, checked.
fn canary_observation(
    i: usize,
    o: hub_proto::CanaryObservation,
) -> Result<(String, EngineObservation), Status> {
    let percent = |field: &str, v: u32| {
        u8::try_from(v).ok().filter(|v| *v <= 100).ok_or_else(|| {
            bad(
                &format!("observations[{i}].{field}"),
                format!("{v} is not 0-100"),
            )
        })
    };
    let opt = |s: String| (!s.is_empty()).then_some(s);
    Ok((
        o.canary,
        EngineObservation {
            applied_step: o.applied_step,
            primary_revision: opt(o.primary_revision),
            primary_ready_percent: percent("primary_ready_percent", o.primary_ready_percent)?,
            canary_revision: opt(o.canary_revision),
            canary_ready_percent: percent("canary_ready_percent", o.canary_ready_percent)?,
            windows: o
                .windows
                .into_iter()
                .map(|w| MetricWindow {
                    interval_ms: w.interval_ms,
                    requests: w.requests,
                    success_rate_milli: w.success_rate_milli,
                    p99_ms_milli: w.p99_ms_milli,
                })
                .collect(),
            observed_ms: 0,
        },
    ))
}

/// The fingerprint of the environment's active plan set: its plan ids, which is what tells an
/// agent to look at its plans again (a plan issued, cancelled or ended). A plan going from
/// issued to running is not part of it: the agent's own first report makes it running, so
/// waking every poll for it would send each plan twice in a rollout's burst. Cheap: it builds
/// and clones no plan.
pub fn plan_set_fingerprint(state: &State, environment: &str) -> String {
    fingerprint_of(state.active_plans_in(environment).map(|p| p.id.as_str()))
}

/// The fingerprint of a set of plan ids, whatever their order: the first 16 hex digits of the
/// SHA-256 of the sorted ids, each followed by `;`.
fn fingerprint_of<'a>(ids: impl Iterator<Item = &'a str>) -> String {
    let mut ids: Vec<&str> = ids.collect();
    ids.sort_unstable();
    ids.dedup();
    let mut fp = String::new();
    for id in ids {
        fp.push_str(id);
        fp.push(';');
    }
    let mut hex = config_sha256(&fp);
    hex.truncate(16);
    hex
}

/// Whether the agent's known set (`known`, the fingerprint of `known_ids`) differs from the
/// environment's active plans only by plans of `known_ids` that have since succeeded or
/// failed. Those ends come from the environment's agent's own task reports, so it knows
/// them already: waking its poll would only send it the smaller set, one round trip per plan
/// in a rollout's burst. A plan issued or cancelled (or one whose outcome is no longer kept)
/// still tells it something.
fn only_own_ends(state: &State, environment: &str, known: &str, known_ids: &[String]) -> bool {
    if known_ids.is_empty() {
        return false;
    }
    let prefix = EntityId::environment_prefix(environment);
    let ended_here = known_ids.iter().filter(|id| {
        state.plan(id).is_none()
            && state.plan_outcome(id).is_some_and(|o| {
                o.entity.starts_with(&prefix)
                    && matches!(
                        o.status,
                        hub_engine::plan::PlanStatus::Succeeded
                            | hub_engine::plan::PlanStatus::Failed
                    )
            })
    });
    let seen = state
        .active_plans_in(environment)
        .map(|p| p.id.as_str())
        .chain(ended_here.map(String::as_str));
    fingerprint_of(seen) == known
}

/// The states the hub records for the entities of `environment` whose plans `reports` name and
/// which are no longer active, each entity once, in entity order: what a `ReportTasks` reply
/// tells the agent (`AgentReply.recorded`). A plan of another environment, or one whose
/// outcome is no longer kept, contributes nothing.
pub fn recorded_states(
    state: &State,
    environment: &str,
    reports: &[TaskReport],
) -> Vec<EntityState> {
    let prefix = EntityId::environment_prefix(environment);
    let entities: std::collections::BTreeSet<&str> = reports
        .iter()
        .filter(|r| state.plan(&r.plan_id).is_none())
        .filter_map(|r| state.plan_outcome(&r.plan_id))
        .filter(|o| o.entity.starts_with(&prefix))
        .map(|o| o.entity.as_str())
        .collect();
    entities
        .into_iter()
        .filter_map(|id| Some((id, state.entity(id)?)))
        .filter(|(_, e)| e.environment == environment)
        .map(|(id, e)| EntityState {
            entity: id.to_string(),
            version: e
                .reported
                .version
                .as_ref()
                .map(|v| v.to_string())
                .unwrap_or_default(),
            health: agent_wire::health(e.reported.health) as i32,
            config_sha256: e.reported.config_sha256.clone().unwrap_or_default(),
            secrets_revision: Some(e.reported.secrets_revision),
            message: e.reported.message.clone(),
            reflects_through: None,
        })
        .collect()
}

/// What a plan fetch returns: the environment's active plans as the agent sees them
/// (secrets included), their fingerprint and the environment's registries.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanSet {
    /// The active plans, in entity order.
    pub plans: Vec<AgentPlan>,
    /// [`plan_set_fingerprint`] of them.
    pub fingerprint: String,
    /// The environment's registries.
    pub registries: Vec<Registry>,
}

/// One look at the state for a long-poll whose agent knows `known` (the fingerprint of
/// `known_ids`, when the agent sends them): `None` when the agent would learn nothing new and
/// the poll may wait on (`timed_out` false), else the reply's plan set. Nothing new: the same
/// fingerprint, or a set smaller only by the agent's own plan ends ([`only_own_ends`]). The
/// plans are built only for a reply: a wake that changed nothing the agent sees costs a
/// fingerprint, not a copy of every plan and secret.
pub fn look(
    state: &State,
    environment: &str,
    known: &str,
    known_ids: &[String],
    timed_out: bool,
) -> Option<PlanSet> {
    let fingerprint = plan_set_fingerprint(state, environment);
    if !timed_out && (fingerprint == known || only_own_ends(state, environment, known, known_ids)) {
        return None;
    }
    let (plans, registries) = build_plans(state, environment);
    Some(PlanSet {
        plans,
        fingerprint,
        registries,
    })
}

#[cfg(test)]
thread_local! {
    /// Plan sets built on this thread (tests: unchanged polls build none).
    static BUILDS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// The environment's active plans and registries as the agent receives them.
fn build_plans(state: &State, environment: &str) -> (Vec<AgentPlan>, Vec<Registry>) {
    #[cfg(test)]
    BUILDS.with(|b| b.set(b.get() + 1));
    let plans: Vec<AgentPlan> = state
        .active_plans_in(environment)
        .map(|p| {
            let entity = state.entity(&p.entity);
            let secrets = entity
                .map(|e| {
                    e.secrets
                        .iter()
                        .map(|(name, v)| PlanSecret {
                            name: name.clone(),
                            value: v.0.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            let (kind, command) = agent_wire::plan_kind(&p.kind);
            AgentPlan {
                id: p.id.clone(),
                entity: p.entity.clone(),
                kind: kind as i32,
                command: command as i32,
                status: agent_wire::plan_status(p.status) as i32,
                from_version: p
                    .from_version
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                to_version: p
                    .to_version
                    .as_ref()
                    .map(|v| v.to_string())
                    .unwrap_or_default(),
                config: p.to_config.clone().unwrap_or_default(),
                secrets_revision: p.secrets_revision,
                secrets,
                artifacts: p
                    .artifacts
                    .iter()
                    .map(|a| PlanArtifact {
                        uri: a.uri.clone(),
                        sha256: a.sha256.clone(),
                    })
                    .collect(),
                tasks: p
                    .tasks
                    .iter()
                    .map(|t| PlanTask {
                        name: t.name.clone(),
                        state: agent_wire::task_state(t.state) as i32,
                        attempt: t.attempt,
                    })
                    .collect(),
                reason: p.reason.clone(),
                issued_ms: p.issued_ms,
                issued_index: p.issued_index,
                canary: p.kind.canary_step().map(|s| {
                    let spec = state.canary(&s.canary).map(|c| &c.spec);
                    canary_step(s, p.kind.canary_baseline(), spec)
                }),
            }
        })
        .collect();
    let registries = state
        .environment(environment)
        .map(|e| {
            e.settings
                .registries
                .iter()
                .map(|r| Registry {
                    name: r.name.clone(),
                    url: r.url.clone(),
                    ca_pem: r.tls.ca_pem().unwrap_or_default().to_string(),
                    insecure_skip_verify: r.tls.skips_verification(),
                })
                .collect()
        })
        .unwrap_or_default();
    (plans, registries)
}

#[tonic::async_trait]
impl Agent for AgentService {
    async fn report_states(
        &self,
        req: Request<ReportStatesRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let arrived = Instant::now();
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        self.node.metrics.agent_seen(&r.environment);
        let mut states = Vec::with_capacity(r.states.len());
        let mut reflects = Vec::with_capacity(r.states.len());
        for (i, s) in r.states.into_iter().enumerate() {
            reflects.push(s.reflects_through);
            let version = if s.version.is_empty() {
                None
            } else {
                Some(semver::Version::parse(&s.version).map_err(|e| {
                    bad(
                        &format!("states[{i}].version"),
                        format!("{:?}: {e}", s.version),
                    )
                })?)
            };
            let health = agent_wire::reported_health(s.health, &format!("states[{i}].health"))?;
            states.push(EntityReport {
                entity: s.entity,
                version,
                health,
                config_sha256: (!s.config_sha256.is_empty()).then_some(s.config_sha256),
                secrets_revision: s.secrets_revision,
                message: s.message,
            });
        }
        // Most reports repeat what the hub already records (the periodic refresh, the state
        // after a plan whose success already set it). Checked on a linearizable read, such a
        // report is answered without a Raft write.
        self.node.read_barrier_since(arrived).await?;
        let unchanged = {
            let s = self.node.state.read();
            s.state
                .entity_reports_change_nothing(&r.environment, &states)
                .then(|| s.applied_index())
        };
        if let Some(index) = unchanged {
            let (endpoints, leader) = self.endpoints();
            return Ok(Response::new(AgentReply {
                index,
                result: "unchanged".into(),
                endpoints,
                leader,
                refused: Vec::new(),
                recorded: Vec::new(),
                recorded_index: 0,
            }));
        }
        // An agent that says which plans its samples reflect gets its stale samples skipped
        // (an older agent's report applies as before).
        let command = if reflects.iter().any(Option::is_some) {
            Command::ReportSampledEntityStates {
                environment: r.environment,
                states: states
                    .into_iter()
                    .zip(reflects)
                    .map(|(report, reflects_through)| SampledEntityReport {
                        report,
                        reflects_through,
                    })
                    .collect(),
            }
        } else {
            Command::ReportEntityStates {
                environment: r.environment,
                states,
            }
        };
        let w = self
            .node
            .propose(command, Some(r.request_id), &caller)
            .await?;
        Ok(Response::new(self.reply(w, Vec::new())))
    }

    async fn report_task(
        &self,
        req: Request<ReportTaskRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        self.node.metrics.agent_seen(&r.environment);
        let environment = r.environment.clone();
        let given_id = r.request_id.clone();
        let report = task_report(r, "")?;
        // The natural idempotency key: the same report retried is the same key.
        let request_id = if given_id.is_empty() {
            format!(
                "task:{}:{}:{}:{}",
                report.plan_id,
                report.task,
                report.attempt,
                report.state.as_str()
            )
        } else {
            given_id
        };
        let w = self
            .node
            .propose(
                Command::ReportTask {
                    environment,
                    report,
                },
                Some(request_id),
                &caller,
            )
            .await?;
        Ok(Response::new(self.reply(w, Vec::new())))
    }

    async fn report_tasks(
        &self,
        req: Request<ReportTasksRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        self.node.metrics.agent_seen(&r.environment);
        let reports = r
            .reports
            .into_iter()
            .enumerate()
            .map(|(i, t)| task_report(t, &format!("reports[{i}].")))
            .collect::<Result<Vec<_>, _>>()?;
        let request_id = (!r.request_id.is_empty()).then_some(r.request_id);
        // The reports are kept to fill in the attempt and state of each refused one.
        let w = self
            .node
            .propose(
                Command::ReportTasks {
                    environment: r.environment.clone(),
                    reports: reports.clone(),
                },
                request_id,
                &caller,
            )
            .await?;
        // The leader's typed output (a forwarded write's decoded from the leader's reply).
        let output = w.typed_output()?;
        let refused = agent_wire::refused_reports(&output, &reports);
        // What the hub now records for the entities whose plans ended: the agent need not
        // send a state sample that would change none of it. Read once this node has applied
        // the write (a forwarded write is applied here shortly after the leader answers);
        // without it in time the reply goes without, and the agent samples as before.
        let index = w.index;
        let mut reply = self.reply(w, refused);
        if self.node.wait_applied(index, RECORDED_WAIT).await {
            let s = self.node.state.read();
            reply.recorded = recorded_states(&s.state, &r.environment, &reports);
            reply.recorded_index = s.applied_index();
        }
        Ok(Response::new(reply))
    }

    async fn report_canaries(
        &self,
        req: Request<ReportCanariesRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        self.node.metrics.agent_seen(&r.environment);
        let mut samples = Vec::new();
        let mut observations = Vec::with_capacity(r.observations.len());
        for (i, mut o) in r.observations.into_iter().enumerate() {
            let windows = std::mem::take(&mut o.samples);
            let (id, observation) = canary_observation(i, o)?;
            samples.push((id.clone(), canary_samples(i, windows)?));
            observations.push((id, observation));
        }
        let samples = self.judged_samples(samples);
        let request_id = (!r.request_id.is_empty()).then_some(r.request_id);
        let command = if samples.is_empty() {
            Command::ReportCanaries {
                environment: r.environment,
                observations,
            }
        } else {
            Command::ReportCanariesWithSamples {
                environment: r.environment,
                observations,
                samples,
            }
        };
        let w = self.node.propose(command, request_id, &caller).await?;
        Ok(Response::new(self.reply(w, Vec::new())))
    }

    async fn fetch_plans(
        &self,
        req: Request<FetchPlansRequest>,
    ) -> Result<Response<FetchPlansReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        // The serial of the caller's certificate: the poll ends once it is revoked.
        let serial = req
            .extensions()
            .get::<hub_tls::server::ConnInfo>()
            .filter(|i| !i.serial.is_empty())
            .map(|i| hub_engine::revocation::serial_from_der_bytes(&i.serial));
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        check_known_plan_ids(&r.known_plan_ids)?;
        self.node.metrics.agent_seen(&r.environment);
        let wait = Duration::from_millis(r.wait_ms as u64).min(MAX_WAIT);
        let deadline = Instant::now() + wait;
        self.node.shared_read_barrier(SHARED_BARRIER_AGE).await?;
        // An unknown environment is refused before any watch state exists for its name.
        if self
            .node
            .state
            .read()
            .state
            .environment(&r.environment)
            .is_none()
        {
            return Err(unknown_environment(&r.environment));
        }
        let _poll = self.node.metrics.poll_opened(&r.environment);
        // Subscribe before the loop reads, so a change between the read and the wait is not
        // missed.
        let mut changes = self.plans.subscribe(&r.environment);
        loop {
            // Mark the current generation seen *before* reading, so a change applied after
            // the read wakes the wait below.
            changes.borrow_and_update();
            let timed_out = Instant::now() >= deadline;
            let looked = {
                let s = self.node.state.read();
                if s.state.environment(&r.environment).is_none() {
                    return Err(unknown_environment(&r.environment));
                }
                if let Some(serial) = serial.as_deref().filter(|x| s.state.is_revoked(x)) {
                    return Err(Status::unauthenticated(format!(
                        "this certificate (serial {serial}) is revoked"
                    )));
                }
                look(
                    &s.state,
                    &r.environment,
                    &r.known_fingerprint,
                    &r.known_plan_ids,
                    timed_out,
                )
                .map(|set| (set, s.applied_index()))
            };
            if let Some((set, index)) = looked {
                let delivered: Vec<(i64, &str)> = set
                    .plans
                    .iter()
                    .map(|p| (p.issued_ms, p.id.as_str()))
                    .collect();
                self.node
                    .metrics
                    .delivered(&r.environment, &delivered, crate::propose::now_ms());
                let (endpoints, leader) = self.endpoints();
                return Ok(Response::new(FetchPlansReply {
                    plans: set.plans,
                    fingerprint: set.fingerprint,
                    registries: set.registries,
                    endpoints,
                    leader,
                    applied_index: index,
                }));
            }
            // A stopping node answers at once, so the poll does not hold its listener's
            // drain open; the agent asks another member.
            tokio::select! {
                waited = tokio::time::timeout_at(deadline, changes.changed()) => match waited {
                    Err(_) | Ok(Ok(())) => continue,
                    Ok(Err(_)) => return Err(crate::stopping::refusal()),
                },
                () = self.node.stopping.begun() => {
                    return Err(crate::stopping::refusal())
                }
            }
        }
    }
}

#[cfg(test)]
mod plan_watch_tests {
    use super::*;

    #[test]
    fn entries_nobody_waits_on_do_not_accumulate() {
        let watch = PlanWatch::default();
        let kept = watch.subscribe("prod");
        for i in 0..1_000 {
            // A poll that subscribed and went away (its environment was deleted, say).
            drop(watch.subscribe(&format!("env-{i}")));
        }
        assert!(watch.watched() <= 2, "{} entries", watch.watched());
        // The live waiter is still woken.
        let mut same = watch.subscribe("prod");
        same.borrow_and_update();
        watch.notify("prod");
        assert!(same.has_changed().unwrap());
        assert!(kept.has_changed().unwrap());
        watch.notify_all();
        assert_eq!(watch.watched(), 1);
    }
}

#[cfg(test)]
mod fetch_tests {
    use super::*;
    use hub_engine::entity::SecretValue;
    use hub_engine::plan::EmergencyCommand;
    use hub_engine::{EntityKind, Request as EngineRequest};

    struct Hub {
        state: State,
        index: u64,
    }

    impl Hub {
        fn apply(&mut self, command: Command) {
            self.index += 1;
            let applied = self.state.apply(
                &EngineRequest {
                    command,
                    time_ms: 1_700_000_000_000 + self.index as i64,
                    request_id: None,
                },
                self.index,
            );
            applied.result.expect("applied");
        }

        fn entity(&mut self, name: &str) -> String {
            self.apply(Command::CreateEntity {
                environment: "prod".into(),
                kind: EntityKind::HelmChart,
                name: name.into(),
                product_id: "com.example:web".into(),
                k8s_namespace: Some(name.into()),
                account_id: None,
                release_channel: None,
            });
            let id = format!("eid:prod:helmChart:{name}");
            self.apply(Command::SetSecret {
                entity: id.clone(),
                name: "token".into(),
                value: Some(SecretValue(format!("secret-of-{name}"))),
            });
            id
        }

        fn uninstall(&mut self, entity: &str) {
            self.apply(Command::IssueCommand {
                entity: entity.into(),
                command: EmergencyCommand::Uninstall,
                reason: "test".into(),
                actor: "admin".into(),
            });
        }
    }

    /// An environment with a registry and two entities with a plan each (and secrets).
    fn hub() -> Hub {
        let mut hub = Hub {
            state: State::default(),
            index: 0,
        };
        hub.apply(Command::CreateEnvironment {
            name: "prod".into(),
            description: String::new(),
        });
        hub.apply(
            serde_json::from_value(serde_json::json!({"SetRegistry": {
                "environment": "prod", "name": "local", "url": "file:///srv/registry",
                "hub_access": "expected"}}))
            .expect("a command"),
        );
        hub.apply(Command::CreateProduct {
            product_id: "com.example:web".into(),
            description: String::new(),
        });
        for name in ["api", "web"] {
            let id = hub.entity(name);
            hub.uninstall(&id);
        }
        hub
    }

    fn builds() -> usize {
        BUILDS.with(|b| b.get())
    }

    fn report(hub: &mut Hub, entity: &str, task: &str) {
        report_as(hub, entity, task, hub_engine::plan::TaskState::Running);
    }

    fn report_as(hub: &mut Hub, entity: &str, task: &str, state: hub_engine::plan::TaskState) {
        let plan_id = hub
            .state
            .active_plans_in("prod")
            .find(|p| p.entity == entity)
            .expect("a plan")
            .id
            .clone();
        hub.apply(Command::ReportTask {
            environment: "prod".into(),
            report: TaskReport {
                plan_id,
                task: task.into(),
                attempt: 1,
                state,
                output: format!("{task} {state:?}\n"),
                failure: None,
            },
        });
    }

    #[test]
    fn an_unchanged_fingerprint_builds_no_plans() {
        let mut hub = hub();
        let issued = plan_set_fingerprint(&hub.state, "prod");
        let before = builds();
        // Woken by changes of the environment the fingerprint does not cover (the agent's
        // own first report, which makes the plan running; another task report; a new
        // entity): no plan is built or cloned.
        report(&mut hub, "eid:prod:helmChart:web", "stop");
        assert!(hub.state.active_plans_in("prod").any(|p| {
            p.entity == "eid:prod:helmChart:web"
                && p.status == hub_engine::plan::PlanStatus::Running
        }));
        assert_eq!(look(&hub.state, "prod", &issued, &[], false), None);
        report(&mut hub, "eid:prod:helmChart:web", "remove");
        assert_eq!(look(&hub.state, "prod", &issued, &[], false), None);
        hub.entity("db");
        assert_eq!(look(&hub.state, "prod", &issued, &[], false), None);
        assert_eq!(
            builds(),
            before,
            "plans were built for an unchanged fingerprint"
        );
        // A stale fingerprint, or a poll that timed out, gets the plans.
        let set = look(&hub.state, "prod", "stale", &[], false).expect("the plans changed");
        assert_eq!(builds(), before + 1);
        assert_eq!(set.plans.len(), 2);
        assert_eq!(set.fingerprint, issued);
        let timed_out = look(&hub.state, "prod", &issued, &[], true).expect("timed out");
        assert_eq!(timed_out, set);
        assert_eq!(builds(), before + 2);
    }

    #[test]
    fn a_poll_naming_its_plans_is_not_answered_by_their_own_ends() {
        use hub_engine::plan::TaskState::{Running, Succeeded};
        let mut hub = hub();
        let set = look(&hub.state, "prod", "", &[], false).expect("plans");
        let ids: Vec<String> = set.plans.iter().map(|p| p.id.clone()).collect();
        let known = set.fingerprint.clone();
        // The web plan succeeds (the agent's own reports): news only to a poll without ids.
        for task in ["stop", "remove"] {
            report_as(&mut hub, "eid:prod:helmChart:web", task, Running);
            report_as(&mut hub, "eid:prod:helmChart:web", task, Succeeded);
        }
        assert_eq!(hub.state.active_plans_in("prod").count(), 1);
        assert_eq!(look(&hub.state, "prod", &known, &ids, false), None);
        let without_ids = look(&hub.state, "prod", &known, &[], false).expect("changed");
        assert_eq!(without_ids.plans.len(), 1);
        // An id of no plan the hub kept adds nothing to what the poll compares.
        let mut odd = ids.clone();
        odd.push("p-999-0".into());
        assert_eq!(look(&hub.state, "prod", &known, &odd, false), None);
        // A timed-out poll is answered with the smaller set.
        let timed_out = look(&hub.state, "prod", &known, &ids, true).expect("timed out");
        assert_eq!(timed_out, without_ids);
        // A cancelled plan answers it: the agent must stop it.
        hub.apply(Command::CancelPlans {
            target: hub_engine::command::CancelTarget::Entity("eid:prod:helmChart:api".into()),
            reason: "test".into(),
            suppress_for_ms: None,
            actor: "admin".into(),
        });
        let cancelled = look(&hub.state, "prod", &known, &ids, false).expect("cancelled");
        assert!(cancelled.plans.is_empty());
        // So does a plan issued.
        let mut hub = hub_with_one_done(&ids);
        hub.uninstall("eid:prod:helmChart:web");
        assert!(look(&hub.state, "prod", &known, &ids, false).is_some());
    }

    #[test]
    fn a_task_batch_reply_names_what_the_hub_records_for_ended_plans() {
        use hub_engine::plan::TaskState::{Running, Succeeded};
        let mut hub = hub();
        let plan_of = |hub: &Hub, entity: &str| {
            hub.state
                .active_plans_in("prod")
                .find(|p| p.entity == entity)
                .expect("a plan")
                .id
                .clone()
        };
        let web = plan_of(&hub, "eid:prod:helmChart:web");
        let api = plan_of(&hub, "eid:prod:helmChart:api");
        let done = |plan: &str| TaskReport {
            plan_id: plan.into(),
            task: "remove".into(),
            attempt: 1,
            state: Succeeded,
            output: String::new(),
            failure: None,
        };
        let batch = [done(&web), done(&web), done(&api)];
        assert!(
            recorded_states(&hub.state, "prod", &batch).is_empty(),
            "both plans are active"
        );
        for task in ["stop", "remove"] {
            report_as(&mut hub, "eid:prod:helmChart:web", task, Running);
            report_as(&mut hub, "eid:prod:helmChart:web", task, Succeeded);
        }
        let recorded = recorded_states(&hub.state, "prod", &batch);
        let entity = hub.state.entity("eid:prod:helmChart:web").expect("web");
        assert_eq!(
            recorded,
            vec![EntityState {
                entity: "eid:prod:helmChart:web".into(),
                version: String::new(),
                health: agent_wire::health(entity.reported.health) as i32,
                config_sha256: String::new(),
                secrets_revision: Some(entity.reported.secrets_revision),
                message: entity.reported.message.clone(),
                reflects_through: None,
            }],
            "once, for the ended plan only, as recorded (uninstalled)"
        );
        assert!(
            recorded_states(&hub.state, "staging", &batch).is_empty(),
            "another environment's agent learns nothing of prod"
        );
    }

    /// [`hub`] with the web plan (of `ids`, the plans the agent knows) succeeded.
    fn hub_with_one_done(ids: &[String]) -> Hub {
        use hub_engine::plan::TaskState::{Running, Succeeded};
        let mut hub = hub();
        for task in ["stop", "remove"] {
            report_as(&mut hub, "eid:prod:helmChart:web", task, Running);
            report_as(&mut hub, "eid:prod:helmChart:web", task, Succeeded);
        }
        let known = fingerprint_of(ids.iter().map(String::as_str));
        assert_eq!(look(&hub.state, "prod", &known, ids, false), None);
        hub
    }

    #[test]
    fn the_reply_carries_what_it_did_before() {
        let hub = hub();
        let set = look(&hub.state, "prod", "", &[], false).expect("plans");
        // The fingerprint is the sorted plan ids of what is sent.
        let mut ids: Vec<&str> = set.plans.iter().map(|p| p.id.as_str()).collect();
        ids.sort();
        let mut fp = String::new();
        for id in ids {
            fp.push_str(&format!("{id};"));
        }
        assert_eq!(set.fingerprint, config_sha256(&fp)[..16]);
        let web = &set.plans[1];
        assert_eq!(web.entity, "eid:prod:helmChart:web");
        assert_eq!(web.kind, hub_proto::PlanKind::Command as i32);
        assert_eq!(web.command, hub_proto::PlanCommand::Uninstall as i32);
        assert_eq!(web.status, hub_proto::PlanStatus::Issued as i32);
        assert_eq!(
            web.secrets,
            vec![PlanSecret {
                name: "token".into(),
                value: "secret-of-web".into()
            }]
        );
        let tasks: Vec<(&str, i32)> = web
            .tasks
            .iter()
            .map(|t| (t.name.as_str(), t.state))
            .collect();
        let pending = hub_proto::TaskState::Pending as i32;
        assert_eq!(tasks, [("stop", pending), ("remove", pending)]);
        assert_eq!(set.registries.len(), 1);
        assert_eq!(set.registries[0].url, "file:///srv/registry");
        // Another environment's agent sees none of it.
        assert_eq!(
            plan_set_fingerprint(&hub.state, "staging"),
            config_sha256("")[..16]
        );
    }
}

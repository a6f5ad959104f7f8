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

use hub_engine::canary::HeaderMatch;
use hub_engine::canary::{
    CanaryObservation as EngineObservation, CanaryRevision, CanaryStepSpec, MetricWindow,
};
use hub_engine::command::EntityReport;
use hub_engine::entity::{config_sha256, Health};
use hub_engine::plan::{FailureMetadata, PlanKind, TaskReport, TaskState};
use hub_engine::{Command, State};
use hub_proto::agent_server::Agent;
use hub_proto::*;
use raft_store::StateEvent;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::{Request, Response, Status};

use crate::node::HubNode;

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
        tokio::spawn(async move {
            loop {
                match events.recv().await {
                    Ok(StateEvent::Applied {
                        plan_environments, ..
                    }) => {
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

    fn reply(&self, w: WriteReply) -> AgentReply {
        let (endpoints, leader) = self.endpoints();
        AgentReply {
            result: w.result,
            index: w.index,
            endpoints,
            leader,
        }
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
    let state = TaskState::parse(&r.state)
        .filter(|s| *s != TaskState::Pending)
        .ok_or_else(|| {
            bad(
                &format!("{prefix}state"),
                format!("{:?} is not running, succeeded or failed", r.state),
            )
        })?;
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

/// A canary step plan's desired state on the wire.
fn canary_step(s: &CanaryStepSpec) -> CanaryStep {
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
    }
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

/// The environment's active plans as the agent sees them, and their fingerprint.
fn agent_plans(state: &State, environment: &str) -> (Vec<AgentPlan>, String, Vec<Registry>) {
    let mut fp = String::new();
    let plans: Vec<AgentPlan> = state
        .active_plans_in(environment)
        .map(|p| {
            fp.push_str(&p.id);
            fp.push(':');
            fp.push_str(p.status.as_str());
            fp.push(';');
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
            let command = match &p.kind {
                PlanKind::Command { command, .. } => command.label().to_string(),
                _ => String::new(),
            };
            AgentPlan {
                id: p.id.clone(),
                entity: p.entity.clone(),
                kind: p.kind.label().to_string(),
                command,
                status: p.status.as_str().to_string(),
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
                        state: t.state.as_str().to_string(),
                        attempt: t.attempt,
                    })
                    .collect(),
                reason: p.reason.clone(),
                issued_ms: p.issued_ms,
                canary: match &p.kind {
                    PlanKind::CanaryStep(s) => Some(canary_step(s)),
                    _ => None,
                },
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
    (plans, config_sha256(&fp)[..16].to_string(), registries)
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
        let mut states = Vec::with_capacity(r.states.len());
        for (i, s) in r.states.into_iter().enumerate() {
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
            let health = Health::parse(&s.health).ok_or_else(|| {
                bad(
                    &format!("states[{i}].health"),
                    format!("{:?} is not unknown, healthy or error", s.health),
                )
            })?;
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
            }));
        }
        let w = self
            .node
            .propose(
                Command::ReportEntityStates {
                    environment: r.environment,
                    states,
                },
                Some(r.request_id),
                &caller,
            )
            .await?;
        Ok(Response::new(self.reply(w)))
    }

    async fn report_task(
        &self,
        req: Request<ReportTaskRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        // The natural idempotency key: the same report retried is the same key.
        let request_id = if r.request_id.is_empty() {
            format!("task:{}:{}:{}:{}", r.plan_id, r.task, r.attempt, r.state)
        } else {
            r.request_id.clone()
        };
        let environment = r.environment.clone();
        let report = task_report(r, "")?;
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
        Ok(Response::new(self.reply(w)))
    }

    async fn report_tasks(
        &self,
        req: Request<ReportTasksRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        let reports = r
            .reports
            .into_iter()
            .enumerate()
            .map(|(i, t)| task_report(t, &format!("reports[{i}].")))
            .collect::<Result<Vec<_>, _>>()?;
        let request_id = (!r.request_id.is_empty()).then_some(r.request_id);
        let w = self
            .node
            .propose(
                Command::ReportTasks {
                    environment: r.environment,
                    reports,
                },
                request_id,
                &caller,
            )
            .await?;
        Ok(Response::new(self.reply(w)))
    }

    async fn report_canaries(
        &self,
        req: Request<ReportCanariesRequest>,
    ) -> Result<Response<AgentReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
        let observations = r
            .observations
            .into_iter()
            .enumerate()
            .map(|(i, o)| canary_observation(i, o))
            .collect::<Result<Vec<_>, _>>()?;
        let request_id = (!r.request_id.is_empty()).then_some(r.request_id);
        let w = self
            .node
            .propose(
                Command::ReportCanaries {
                    environment: r.environment,
                    observations,
                },
                request_id,
                &caller,
            )
            .await?;
        Ok(Response::new(self.reply(w)))
    }

    async fn fetch_plans(
        &self,
        req: Request<FetchPlansRequest>,
    ) -> Result<Response<FetchPlansReply>, Status> {
        let caller = crate::auth::caller(&req)?;
        let r = req.into_inner();
        caller.require_environment(&r.environment)?;
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
        // Subscribe before the loop reads, so a change between the read and the wait is not
        // missed.
        let mut changes = self.plans.subscribe(&r.environment);
        loop {
            // Mark the current generation seen *before* reading, so a change applied after
            // the read wakes the wait below.
            changes.borrow_and_update();
            let (plans, fingerprint, registries, index) = {
                let s = self.node.state.read();
                if s.state.environment(&r.environment).is_none() {
                    return Err(unknown_environment(&r.environment));
                }
                let (plans, fp, regs) = agent_plans(&s.state, &r.environment);
                (plans, fp, regs, s.applied_index())
            };
            if fingerprint != r.known_fingerprint || Instant::now() >= deadline {
                let (endpoints, leader) = self.endpoints();
                return Ok(Response::new(FetchPlansReply {
                    plans,
                    fingerprint,
                    registries,
                    endpoints,
                    leader,
                    applied_index: index,
                }));
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Err(_) | Ok(Ok(())) => continue,
                Ok(Err(_)) => return Err(Status::unavailable("node shutting down")),
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

//! How canary decisions reach the agent and what comes back (SPEC K2, K6, K9):
//!
//! - **Targets.** An installed entity under a canary gets no version, config or secrets
//!   plans: the evaluation's candidate (which passed every constraint) becomes the canary's
//!   target [`CanaryRevision`] instead ([`crate::evaluate::Outcome::CanaryTarget`]), and the
//!   leader's ticks analyse it.
//! - **Step plans.** Every committed tick (or manual command, or deletion) whose actions
//!   change workloads or routing becomes a `canary-step` plan carrying the desired state
//!   after the step ([`CanaryStepSpec`]). One plan per entity is active at a time; a step
//!   decided while another plan is active waits in the canary's queue and is issued, in
//!   order, when that plan finishes. So the agent applies every committed weight, in order.
//! - **Observations.** The agent reports what its workloads run, their readiness and the
//!   proxy's metrics ([`CanaryObservation`]); they are stored on the canary record with the
//!   entry's time, and the leader's next tick reads them.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::canary::{
    is_revision_of, revision_hash, Action, MatchRule, MetricSource, Phase, Strategy,
};
use crate::canary_lifecycle::Canary;
use crate::cluster_key::SecretKey;
use crate::entity::Entity;
use crate::error::CommandError;
use crate::plan::{Plan, PlanKind, PlanStatus};
use crate::record::RecordKey;
use crate::release::Artifact;
use crate::state::{Effects, State};
use crate::TimestampMs;

/// Revisions remembered per canary besides those its status and target refer to.
pub const MAX_SPARE_REVISIONS: usize = 8;
/// Most observations accepted in one report.
pub const MAX_OBSERVATIONS: usize = 256;
/// Most metric windows accepted per observation.
pub const MAX_WINDOWS: usize = 16;

/// One revision of a canary's target: what the agent deploys for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryRevision {
    /// [`revision_hash`] of version, config and the entity's secrets (or, for a revision
    /// named before the cluster had a revision key, the v1 hash).
    pub revision: String,
    /// The release.
    pub version: Version,
    /// The rendered config overrides (YAML).
    pub config: String,
    /// The entity's secrets revision it carries.
    pub secrets_revision: u64,
    /// The release's artifacts.
    pub artifacts: Vec<Artifact>,
}

/// The secrets a revision covers: all of the entity's.
fn tracked_secrets(entity: &Entity) -> std::collections::BTreeMap<String, String> {
    entity
        .secrets
        .iter()
        .map(|(k, v)| (k.clone(), v.0.clone()))
        .collect()
}

impl CanaryRevision {
    /// The revision of `entity` at `version` with `config` and its current secrets, named
    /// with the cluster's revision `key`.
    pub fn of(
        state: &State,
        entity: &Entity,
        version: &Version,
        config: &str,
        key: &SecretKey,
    ) -> Self {
        let secrets = tracked_secrets(entity);
        CanaryRevision {
            revision: revision_hash(key, &version.to_string(), config, &secrets),
            version: version.clone(),
            config: config.to_string(),
            secrets_revision: entity.secrets_revision,
            artifacts: state
                .release(&entity.product_id, version)
                .map(|r| r.artifacts.clone())
                .unwrap_or_default(),
        }
    }
}

/// Whether `revision` names `entity` at `version` with `config` and its current secrets, in
/// the revision's own hash version ([`is_revision_of`]).
pub fn names_target(
    revision: &str,
    key: Option<&SecretKey>,
    entity: &Entity,
    version: &Version,
    config: &str,
) -> bool {
    is_revision_of(
        revision,
        key,
        &version.to_string(),
        config,
        &tracked_secrets(entity),
    )
}

/// One metric window the agent's proxy measured for the canary workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricWindow {
    /// The window, ending when the observation was taken.
    pub interval_ms: i64,
    /// Requests answered in it.
    pub requests: u64,
    /// Percent of non-5xx answers, in thousandths; `None` without requests.
    pub success_rate_milli: Option<i64>,
    /// 99th percentile latency in ms, in thousandths; `None` without requests.
    pub p99_ms_milli: Option<i64>,
}

/// What the agent observed of one canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryObservation {
    /// The step of the last canary-step plan the agent applied.
    pub applied_step: u64,
    /// Revision the primary workload runs.
    pub primary_revision: Option<String>,
    /// Percent of primary replicas ready.
    pub primary_ready_percent: u8,
    /// Revision the canary workload runs.
    pub canary_revision: Option<String>,
    /// Percent of canary replicas ready.
    pub canary_ready_percent: u8,
    /// The canary workload's proxy metrics.
    pub windows: Vec<MetricWindow>,
    /// Entry time of the report (set on apply; the agent's value is ignored).
    pub observed_ms: TimestampMs,
}

impl CanaryObservation {
    /// The value of a proxy metric over `interval_ms`, in thousandths, if the agent measured
    /// that window and it had requests.
    pub fn metric(&self, source: &MetricSource, interval_ms: i64) -> Option<i64> {
        let w = self
            .windows
            .iter()
            .find(|w| w.interval_ms == interval_ms && w.requests > 0)?;
        match source {
            MetricSource::RequestSuccessRate => w.success_rate_milli,
            MetricSource::RequestDuration => w.p99_ms_milli,
            MetricSource::Prometheus { .. } => None,
        }
    }
}

/// The state a canary's workloads and proxy must reach after one committed step: what a
/// `canary-step` plan carries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryStepSpec {
    /// `<environment>/<name>`.
    pub canary: String,
    /// `spec.service.name`.
    pub service: String,
    /// `spec.service.port`: the `<svc>` address.
    pub port: u16,
    /// The status step after the tick.
    pub step: u64,
    /// The phase after the tick.
    pub phase: Phase,
    /// The primary workload (`None` before initialisation).
    pub primary: Option<CanaryRevision>,
    /// The canary workload (`None`: scaled to zero).
    pub canary_workload: Option<CanaryRevision>,
    /// Percent of `<svc>` traffic to the canary.
    pub canary_weight: u8,
    /// Whether requests matching `match_rules` go to the canary.
    pub match_routing: bool,
    /// The A/B rules of the spec.
    pub match_rules: Vec<MatchRule>,
    /// The canary was deleted with `revertOnDeletion`.
    pub restore_original: bool,
    /// Windows the agent reports proxy metrics for.
    pub metric_windows_ms: Vec<i64>,
}

/// Whether an action changes what the agent runs or routes (alerts and notifications are
/// the leader's).
fn is_agent_action(a: &Action) -> bool {
    !matches!(a, Action::Alert { .. } | Action::NotifyWebhook { .. })
}

impl State {
    /// The canary controlling `entity`, unless it is being deleted.
    pub fn canary_of_entity(&self, entity: &str) -> Option<&Canary> {
        self.idx
            .canary_of_entity
            .get(entity)
            .and_then(|id| self.canaries.get(id))
            .filter(|c| c.status.phase != Phase::Terminating)
    }

    /// Records `target` as the revision canary `id` analyses next (from an evaluation).
    pub(crate) fn set_canary_target(&mut self, id: &str, target: CanaryRevision, fx: &mut Effects) {
        let Some(c) = self.canaries.get_mut(id) else {
            return;
        };
        remember_revision(c, target.clone());
        c.target = Some(target);
        fx.changed.push(RecordKey::Canary(id.to_string()));
    }

    /// The desired state after the status of canary `id` changed with `actions`, as a step
    /// plan (issued now or queued); nothing when no action concerns the agent.
    pub(crate) fn issue_canary_step(
        &mut self,
        id: &str,
        actions: &[Action],
        now: TimestampMs,
        index: u64,
        fx: &mut Effects,
    ) {
        if !actions.iter().any(is_agent_action) {
            return;
        }
        let Some(c) = self.canaries.get(id) else {
            return;
        };
        let restore = actions.iter().any(|a| matches!(a, Action::RestoreOriginal));
        let spec = step_spec(c, restore);
        let plan = step_plan(c, spec, now, index);
        let entity = c.entity.clone();
        if let Some(c) = self.canaries.get_mut(id) {
            c.queued.push(plan);
            fx.changed.push(RecordKey::Canary(id.to_string()));
        }
        // Issued at once when no plan of the entity is active (after older queued steps).
        self.release_queued_canary_step(&entity, now, fx);
    }

    /// Issues the next queued step plan of the canary of `entity`, once no plan of the entity
    /// is active (called when a plan finishes and when a step is decided).
    pub(crate) fn release_queued_canary_step(
        &mut self,
        entity: &str,
        now: TimestampMs,
        fx: &mut Effects,
    ) {
        if self.idx.active_plan.contains_key(entity) {
            return;
        }
        let Some(id) = self
            .idx
            .canary_of_entity
            .get(entity)
            .filter(|id| self.canaries.get(*id).is_some_and(|c| !c.queued.is_empty()))
            .cloned()
        else {
            return;
        };
        let Some(c) = self.canaries.get_mut(&id) else {
            return;
        };
        let mut plan = c.queued.remove(0);
        plan.issued_ms = now;
        fx.changed.push(RecordKey::Canary(id));
        self.insert_plan(plan, fx);
    }

    /// Stores what the agent of `environment` observed (SPEC K6). Observations of canaries
    /// that do not exist (any more) in the environment are skipped; returns how many were
    /// stored.
    pub(crate) fn observe_canaries(
        &mut self,
        environment: &str,
        observations: &[(String, CanaryObservation)],
        now: TimestampMs,
        fx: &mut Effects,
    ) -> Result<usize, CommandError> {
        if observations.len() > MAX_OBSERVATIONS {
            return Err(CommandError::invalid(
                "observations",
                format!(
                    "{} observations, at most {MAX_OBSERVATIONS}",
                    observations.len()
                ),
            ));
        }
        for (id, o) in observations {
            if o.windows.len() > MAX_WINDOWS {
                return Err(CommandError::invalid(
                    "observations.windows",
                    format!("{id}: {} windows, at most {MAX_WINDOWS}", o.windows.len()),
                ));
            }
            if o.primary_ready_percent > 100 || o.canary_ready_percent > 100 {
                return Err(CommandError::invalid(
                    "observations.ready_percent",
                    format!("{id}: above 100"),
                ));
            }
        }
        let mut stored = 0;
        for (id, o) in observations {
            let Some(c) = self
                .canaries
                .get_mut(id)
                .filter(|c| c.environment == environment)
            else {
                continue;
            };
            c.observation = Some(CanaryObservation {
                observed_ms: now,
                ..o.clone()
            });
            fx.changed.push(RecordKey::Canary(id.clone()));
            stored += 1;
        }
        Ok(stored)
    }
}

/// Adds `rev` to the canary's known revisions, forgetting the oldest ones its status, target
/// and queue do not refer to.
fn remember_revision(c: &mut Canary, rev: CanaryRevision) {
    c.revisions.retain(|r| r.revision != rev.revision);
    c.revisions.push(rev);
    let mut keep: Vec<String> = [
        c.status.primary_revision.clone(),
        c.status.canary_revision.clone(),
        c.status.last_applied_spec.clone(),
        c.status.last_promoted_spec.clone(),
        c.target.as_ref().map(|t| t.revision.clone()),
    ]
    .into_iter()
    .flatten()
    .collect();
    keep.push(
        c.revisions
            .last()
            .map(|r| r.revision.clone())
            .unwrap_or_default(),
    );
    while c.revisions.len() > MAX_SPARE_REVISIONS + 5 {
        let Some(pos) = c.revisions.iter().position(|r| !keep.contains(&r.revision)) else {
            break;
        };
        c.revisions.remove(pos);
    }
}

/// The desired state of canary `c` as its status now describes it.
fn step_spec(c: &Canary, restore: bool) -> CanaryStepSpec {
    let find = |rev: &Option<String>| {
        rev.as_ref()
            .and_then(|r| c.revisions.iter().find(|x| &x.revision == r).cloned())
    };
    let mut windows: Vec<i64> = c
        .spec
        .analysis
        .metrics
        .iter()
        .filter(|m| {
            matches!(
                m.source,
                MetricSource::RequestSuccessRate | MetricSource::RequestDuration
            )
        })
        .map(|m| m.interval_ms)
        .collect();
    windows.sort_unstable();
    windows.dedup();
    let match_rules = match &c.spec.analysis.strategy {
        Strategy::AbTesting { match_rules, .. } => match_rules.clone(),
        _ => Vec::new(),
    };
    CanaryStepSpec {
        canary: c.id.clone(),
        service: c.spec.service.name.clone(),
        port: c.spec.service.port,
        step: c.status.step,
        phase: c.status.phase,
        primary: find(&c.status.primary_revision),
        canary_workload: if restore {
            None
        } else {
            find(&c.status.canary_revision)
        },
        canary_weight: if restore { 0 } else { c.status.canary_weight },
        match_routing: !restore && c.status.match_routing,
        match_rules,
        restore_original: restore,
        metric_windows_ms: windows,
    }
}

/// The plan record carrying `spec` for the canary's entity.
fn step_plan(c: &Canary, spec: CanaryStepSpec, now: TimestampMs, index: u64) -> Plan {
    let kind = PlanKind::CanaryStep(Box::new(spec));
    let (version, config, secrets_revision) = match &kind {
        PlanKind::CanaryStep(s) => s
            .primary
            .as_ref()
            .map(|p| {
                (
                    Some(p.version.clone()),
                    Some(p.config.clone()),
                    p.secrets_revision,
                )
            })
            .unwrap_or((None, None, 0)),
        _ => (None, None, 0),
    };
    let reason = match &kind {
        PlanKind::CanaryStep(s) => format!(
            "canary {} step {}: {}, weight {}",
            s.canary,
            s.step,
            s.phase.as_str(),
            s.canary_weight
        ),
        _ => String::new(),
    };
    Plan {
        id: format!("p-{index}-c"),
        entity: c.entity.clone(),
        environment: c.environment.clone(),
        tasks: Plan::tasks_for(&kind),
        kind,
        from_version: version.clone(),
        to_version: version,
        from_config_sha256: None,
        to_config: config,
        secrets_revision,
        artifacts: Vec::new(),
        reason,
        output: String::new(),
        failure: None,
        created_ms: now,
        issued_ms: now,
        started_ms: None,
        ended_ms: None,
        status: PlanStatus::Issued,
        cancel_reason: None,
        issued_index: index,
    }
}

//! What carries canary decisions to the agent and what comes back (SPEC K2, K6, K9). These
//! are data; the transitions that use them are in `apply/canaries.rs`:
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

use super::{is_revision_of, revision_hash, MatchRule, MetricSource, Phase};
use crate::cluster_key::SecretKey;
use crate::entity::Entity;
use crate::release::Artifact;
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
    /// The revision of `entity` at `version` with `config`, its current secrets and the
    /// release's `artifacts`, named with the cluster's revision `key`.
    pub fn of(
        entity: &Entity,
        version: &Version,
        config: &str,
        artifacts: Vec<Artifact>,
        key: &SecretKey,
    ) -> Self {
        let secrets = tracked_secrets(entity);
        CanaryRevision {
            revision: revision_hash(key, &version.to_string(), config, &secrets),
            version: version.clone(),
            config: config.to_string(),
            secrets_revision: entity.secrets_revision,
            artifacts,
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
            MetricSource::Prometheus { .. } | MetricSource::Template { .. } => None,
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

//! `canaries` and `canary`: Flagger canaries (SPEC K7), as listed, and one with its spec,
//! Flagger status block, recent actions, samples and what the agent last observed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One canary. The listing's fields are in every view; the others are in the answer to
/// `canary` only, and left out of a `canaries` row. A field of the full view that may be
/// `null` is `Some(None)` when it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryView {
    /// The newest actions decided (at most 20), newest first (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<Vec<CanaryActionView>>,
    /// Where the agent's proxy serves `<svc>`, `<svc>-primary` and `<svc>-canary` (issue 52
    /// item 2; absent in answers of nodes before it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addresses: Option<CanaryAddressesView>,
    /// The revision the canary workload runs (full view; `Some(None)`: scaled to zero).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub canary_revision: Option<Option<String>>,
    /// The canary weight each committed step set (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub committed_weights: Option<Vec<CommittedWeightView>>,
    /// The entity it controls.
    pub entity: String,
    /// Its samples, oldest first (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<Vec<CanarySampleView>>,
    /// `<environment>/<name>`.
    pub id: String,
    /// When its phase last changed.
    pub last_transition: String,
    /// Its name.
    pub name: String,
    /// Its environment (the resource's namespace).
    pub namespace: String,
    /// When its next tick is due (full view; `Some(None)`: at once).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub next_tick: Option<Option<String>>,
    /// What the agent last observed (full view; `Some(None)`: nothing yet).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub observation: Option<Option<CanaryObservationView>>,
    /// The revision the primary workload runs (full view; `Some(None)`: before
    /// initialisation).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub primary_revision: Option<Option<String>>,
    /// Whether the primary was promoted to the current revision.
    pub promoted: bool,
    /// How many step plans wait for another plan of the entity to end (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_steps: Option<usize>,
    /// Its phase (`Initializing`, `Progressing`, `Succeeded`, `Failed`, …).
    pub status: String,
    /// Flagger's status block, as `kubectl get canary -o yaml` shows it (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_block: Option<CanaryStatusBlock>,
    /// The committed tick counter (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<u64>,
    /// The revision the analysis is about (full view; `Some(None)`: none yet).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub target: Option<Option<CanaryTargetView>>,
    /// Percent of traffic routed to the canary.
    pub weight: u8,
    /// The resource as applied (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yaml: Option<String>,
}

/// The stable addresses of a canary's proxy, `IP:PORT` each.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryAddressesView {
    /// `<svc>-canary`.
    pub canary: String,
    /// `<svc>-primary`.
    pub primary: String,
    /// `<svc>`: split by weight and A/B rules.
    pub service: String,
}

/// One action a step decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryActionView {
    /// What, in short (`deploy canary`, `weights 90/10`, `promote`, …).
    pub action: String,
    /// The step that decided it.
    pub step: u64,
}

/// The canary weight a committed step set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommittedWeightView {
    /// Percent of traffic to the canary.
    pub canary_weight: u8,
    /// The step its plan brings the agent to.
    pub step: u64,
}

/// One sample: where a committed step left phase and weight, and the metric values it
/// judged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanarySampleView {
    /// Percent of traffic to the canary.
    pub canary_weight: u8,
    /// The metric values by metric name, in the metric's unit (`None`: not measured).
    pub metrics: BTreeMap<String, Option<f64>>,
    /// The phase.
    pub phase: String,
    /// The step.
    pub step: u64,
    /// When.
    pub time: String,
    /// When, in milliseconds since the epoch.
    pub time_ms: i64,
}

/// The revision a canary's analysis is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryTargetView {
    /// Its revision hash.
    pub revision: String,
    /// Its release.
    pub version: String,
}

/// What the agent last observed of a canary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryObservationView {
    /// The step of the last canary-step plan the agent applied.
    pub applied_step: u64,
    /// Percent of canary replicas ready.
    pub canary_ready_percent: u8,
    /// The revision the canary workload runs.
    pub canary_revision: Option<String>,
    /// When it was reported.
    pub observed: String,
    /// Percent of primary replicas ready.
    pub primary_ready_percent: u8,
    /// The revision the primary workload runs.
    pub primary_revision: Option<String>,
    /// The canary proxy's metrics, by window.
    pub windows: Vec<MetricWindowView>,
}

/// The canary proxy's metrics over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricWindowView {
    /// The window, in milliseconds, ending when the observation was taken.
    pub interval_ms: i64,
    /// 99th percentile latency in milliseconds (`None` without requests).
    pub p99_ms: Option<f64>,
    /// Requests answered in it.
    pub requests: u64,
    /// Percent of non-5xx answers (`None` without requests).
    pub success_rate: Option<f64>,
}

/// Flagger's status block of a canary (its keys are Flagger's, in camelCase).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryStatusBlock {
    /// Percent of traffic to the canary.
    pub canary_weight: u8,
    /// Its conditions (the `Promoted` one).
    pub conditions: Vec<CanaryConditionView>,
    /// Flagger's events (`kubectl describe canary`), oldest first: at most 100.
    pub events: Vec<CanaryEventView>,
    /// Failed checks of the current revision.
    pub failed_checks: u32,
    /// Fields of the resource the hub accepts but does not act on, with why.
    pub ignored_fields: Vec<IgnoredFieldView>,
    /// Successful checks so far (A/B and blue/green).
    pub iterations: u32,
    /// The judging state, for a canary whose metrics are judged (issue 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub judges: Option<CanaryJudgesView>,
    /// The revision analysis last started for.
    pub last_applied_spec: Option<String>,
    /// The revision the primary was last promoted to.
    pub last_promoted_spec: Option<String>,
    /// The phase.
    pub phase: String,
}

/// A condition of a canary's status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryConditionView {
    /// When `status` last changed.
    pub last_transition_time: String,
    /// When it was last written.
    pub last_update_time: String,
    /// In words.
    pub message: String,
    /// The phase that set it.
    pub reason: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// Its type (`Promoted`).
    #[serde(rename = "type")]
    pub kind: String,
}

/// One Flagger event of a canary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryEventView {
    /// How many ticks in a row recorded it.
    pub count: u32,
    /// When the first of them was recorded.
    pub first_timestamp: String,
    /// When the latest of them was recorded.
    pub last_timestamp: String,
    /// What happened, in Flagger's wording.
    pub message: String,
    /// Why it was recorded (`Synced`).
    pub reason: String,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A field of a canary resource the hub accepts but does not act on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IgnoredFieldView {
    /// Its YAML path (`spec.service.gateways`).
    pub path: String,
    /// Why the hub does not act on it.
    pub reason: String,
}

/// The judging state of a judged canary: the judges, the inconclusive count against its
/// limit, the last verdicts and when the agent's samples were taken.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CanaryJudgesView {
    /// Inconclusive verdicts in a row.
    pub inconclusive: u32,
    /// How many inconclusive verdicts are tolerated (`None`: no limit).
    pub inconclusive_limit: Option<u32>,
    /// The judged metrics.
    pub metrics: Vec<JudgedMetricView>,
    /// The step the agent's samples were taken at.
    pub samples_step: u64,
    /// When the agent's samples were taken (`None`: none yet).
    pub samples_time: Option<String>,
    /// The last verdicts.
    pub verdicts: Vec<VerdictView>,
}

/// One judged metric with its judge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JudgedMetricView {
    /// What the canary is compared with: `primary` or `fresh`.
    pub baseline: String,
    /// The confidence level (0 to 1).
    pub confidence: f64,
    /// Which shift is bad: `increase`, `decrease` or `either`.
    pub direction: String,
    /// The smallest bad Cliff's delta that fails (0 to 1).
    pub effect_size: f64,
    /// The metric's window, in milliseconds.
    pub interval_ms: i64,
    /// The metric's name.
    pub name: String,
}

/// One judge's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictView {
    /// The metric.
    pub metric: String,
    /// Why.
    pub reason: String,
    /// The step it was given at.
    pub step: u64,
    /// `pass`, `fail` or `inconclusive`.
    pub verdict: String,
}

/// The answer to `canaries`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanariesAnswer {
    /// By id, each without the full view's fields.
    pub canaries: Vec<CanaryView>,
}

/// Asks for canaries, optionally of one environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListCanaries {
    /// Only this environment.
    pub environment: Option<String>,
}

impl Typed for ListCanaries {
    type Answer = CanariesAnswer;
    fn query(&self) -> Query {
        Query::Canaries {
            environment: self.environment.clone(),
        }
    }
}

/// Asks for one canary (`<environment>/<name>`), with its full view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetCanary(pub String);

impl Typed for GetCanary {
    type Answer = CanaryView;
    fn query(&self) -> Query {
        Query::Canary { id: self.0.clone() }
    }
}

//! `rollout_policies`, `rollout_policy` and `rollout_status`: how a product's releases move
//! through waves of environments, and where a release's rollout stands.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One wave of a rollout policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveView {
    /// The environments it takes by name.
    pub environments: Vec<String>,
    /// Labels an environment must all carry to be taken (empty: no label selection).
    pub labels: BTreeMap<String, String>,
    /// Most entities of the wave changing to the release at once (`None`: no limit).
    pub max_parallel: Option<u32>,
    /// Its name.
    pub name: String,
    /// What a failure in it does: `halt` or `recall`.
    pub on_failure: String,
    /// How long it must stay done before the next wave opens, in milliseconds (0: no soak).
    pub soak_ms: i64,
}

impl From<&hub_engine::rollout_policy::Wave> for WaveView {
    fn from(w: &hub_engine::rollout_policy::Wave) -> Self {
        WaveView {
            environments: w.selector.environments.iter().cloned().collect(),
            labels: w.selector.labels.clone(),
            max_parallel: w.max_parallel,
            name: w.name.clone(),
            on_failure: w.on_failure.as_str().to_string(),
            soak_ms: w.soak_ms,
        }
    }
}

/// One rollout policy. The YAML is in the answer to `rollout_policy` only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutPolicyView {
    /// The product it belongs to (`group:name`).
    pub product: String,
    /// Products that move with it, upgraded before it within each wave, in this order.
    pub products: Vec<String>,
    /// When it last changed.
    pub updated: String,
    /// Its waves, in order.
    pub waves: Vec<WaveView>,
    /// The document as applied (`rollout_policy` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yaml: Option<String>,
}

/// The answer to `rollout_policies`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutPoliciesAnswer {
    /// By product.
    pub policies: Vec<RolloutPolicyView>,
}

/// Asks for every rollout policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListRolloutPolicies;

impl Typed for ListRolloutPolicies {
    type Answer = RolloutPoliciesAnswer;
    fn query(&self) -> Query {
        Query::RolloutPolicies
    }
}

/// Asks for the rollout policy of a product (`group:name`, any product of the policy's
/// group), with its YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRolloutPolicy(pub String);

impl Typed for GetRolloutPolicy {
    type Answer = RolloutPolicyView;
    fn query(&self) -> Query {
        Query::RolloutPolicy {
            product: self.0.clone(),
        }
    }
}

/// Why and since when a rollout is halted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HaltView {
    /// When it halted.
    pub at: String,
    /// What halted it, in words.
    pub cause: String,
    /// The recalls a `recall` wave created (`r-…`).
    pub recalls: Vec<String>,
}

/// One entity of a wave.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutEntityView {
    /// Its canary's phase, if it has a canary.
    pub canary: Option<String>,
    /// `eid:…`.
    pub entity: String,
    /// Its environment.
    pub environment: String,
    /// Its reported health: `unknown`, `healthy` or `error`.
    pub health: String,
    /// Its product.
    pub product: String,
    /// The version it reports running.
    pub runs: Option<String>,
    /// `done`, `in flight` or `waiting`.
    pub state: String,
}

/// One wave of a release's rollout, as it stands.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaveStatusView {
    /// When every entity of the wave was done.
    pub completed: Option<String>,
    /// The same, in milliseconds since the epoch.
    pub completed_ms: Option<i64>,
    /// How many of its entities are done.
    pub done: usize,
    /// Its entities.
    pub entities: Vec<RolloutEntityView>,
    /// How many entities it has.
    pub entities_total: usize,
    /// How many of its entities are moving to the release.
    pub in_flight: usize,
    /// Who promoted it, if an operator did.
    pub promoted_by: Option<String>,
    /// When its soak ends.
    pub soak_until: Option<String>,
    /// The same, in milliseconds since the epoch.
    pub soak_until_ms: Option<i64>,
    /// `promoted`, `passed`, `soaking until <time>`, `done`, `rolling out` or `waiting`.
    pub state: String,
    /// Its name; `(no wave)` for the entities after the last wave.
    pub wave: String,
}

/// The answer to `rollout_status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolloutStatusView {
    /// Set while the rollout is halted.
    pub halted: Option<HaltView>,
    /// The policy's product.
    pub policy: String,
    /// The release.
    pub version: String,
    /// The policy's waves in order, then the entities in no wave (when there are some).
    pub waves: Vec<WaveStatusView>,
}

/// Asks where a release's rollout stands under its product's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetRolloutStatus {
    /// `group:name` (any product of the policy's group).
    pub product: String,
    /// The release.
    pub version: String,
}

impl Typed for GetRolloutStatus {
    type Answer = RolloutStatusView;
    fn query(&self) -> Query {
        Query::RolloutStatus {
            product: self.product.clone(),
            version: self.version.clone(),
        }
    }
}

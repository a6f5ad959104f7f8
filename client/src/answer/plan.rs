//! `plan` and `plans`: change plans as an operator sees them (never a secret value: plans
//! hold none).

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One plan. The summary fields are in every view; the full record's (`plan`) are left out
/// of a `plans` row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanView {
    /// Who issued a break-glass command plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actor: Option<String>,
    /// The release's artifacts (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<ArtifactView>>,
    /// Why it was cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_reason: Option<String>,
    /// A break-glass command plan's command.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// When it was created.
    pub created: String,
    /// When it ended.
    pub ended: Option<String>,
    /// The entity's id.
    pub entity: String,
    /// The entity's environment.
    pub environment: String,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureView>,
    /// SHA-256 of the config it replaces (full view; `Some(None)`: none known).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub from_config_sha256: Option<Option<String>>,
    /// The version it replaces.
    pub from_version: Option<String>,
    /// `p-…`.
    pub id: String,
    /// When it was issued.
    pub issued: String,
    /// The log index that issued it.
    pub issued_index: u64,
    /// When it was issued, in milliseconds since the epoch.
    pub issued_ms: i64,
    /// `install`, `version-change`, `config-change`, `rollback`, `uninstall`, `command`, …
    pub kind: String,
    /// What the agent reported it printed (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
    /// Why it was issued.
    pub reason: String,
    /// A rollback's failed plan.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolls_back: Option<String>,
    /// The secrets revision it applies (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secrets_revision: Option<u64>,
    /// When the agent started it.
    pub started: Option<String>,
    /// `issued`, `running`, `succeeded`, `failed`, `cancelled`.
    pub status: String,
    /// Its tasks (full view).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<Vec<TaskView>>,
    /// The config it applies (full view; `Some(None)`: none).
    #[serde(
        default,
        deserialize_with = "super::present",
        skip_serializing_if = "Option::is_none"
    )]
    pub to_config: Option<Option<String>>,
    /// The version it deploys.
    pub to_version: Option<String>,
}

/// Why a plan failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureView {
    /// The agent's message.
    pub message: String,
    /// Workloads that were not ready.
    pub not_ready: Vec<String>,
    /// The stage that failed (`fetch`, `verify`, `configure`, …).
    pub stage: String,
    /// What the agent's validation refused.
    pub validation_errors: Vec<String>,
}

/// One artifact of a plan's release.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactView {
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Where it is fetched from.
    pub uri: String,
}

/// One task of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskView {
    /// Its attempt, from 1.
    pub attempt: u32,
    /// When it ended.
    pub ended: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// Its name.
    pub name: String,
    /// When it started.
    pub started: Option<String>,
    /// `pending`, `running`, `succeeded`, `failed`, …
    pub state: String,
}

/// The answer to `plans`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlansAnswer {
    /// Newest first.
    pub plans: Vec<PlanView>,
}

/// Asks for one plan, by id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetPlan(pub String);

impl Typed for GetPlan {
    type Answer = PlanView;
    fn query(&self) -> Query {
        Query::Plan { id: self.0.clone() }
    }
}

/// Asks for plans, newest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListPlans {
    /// Only this environment.
    pub environment: Option<String>,
    /// Only this entity (a reference).
    pub entity: Option<String>,
    /// Only issued or running plans.
    pub active: bool,
    /// At most this many (default 100).
    pub limit: Option<usize>,
}

impl Typed for ListPlans {
    type Answer = PlansAnswer;
    fn query(&self) -> Query {
        Query::Plans {
            environment: self.environment.clone(),
            entity: self.entity.clone(),
            active: self.active,
            limit: self.limit,
        }
    }
}

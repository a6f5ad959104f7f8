//! Plans: the unit of work the hub issues to an agent, and its lifecycle (SPEC P1, P6, P7).

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::release::Artifact;
use crate::TimestampMs;

/// Most agent output kept per plan; older output is cut from the front.
pub const MAX_PLAN_OUTPUT: usize = 64 * 1024;

/// Finished plans kept per entity; older ones are forgotten.
pub const FINISHED_PLANS_KEPT: usize = 20;

/// A break-glass command (SPEC P1, C2): bypasses every plan constraint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EmergencyCommand {
    /// Install `version` (with its config overrides).
    Install {
        /// The release to install.
        version: Version,
    },
    /// Remove the product.
    Uninstall,
    /// Re-apply the entity's config overrides for its current version.
    EnforceConfig,
    /// Move to `version` with its config overrides.
    EnforceConfigAndVersion {
        /// The release to move to.
        version: Version,
    },
    /// Restart the workload as it is.
    Restart,
}

impl EmergencyCommand {
    /// A short name for tables and the CLI.
    pub fn label(&self) -> &'static str {
        match self {
            EmergencyCommand::Install { .. } => "install",
            EmergencyCommand::Uninstall => "uninstall",
            EmergencyCommand::EnforceConfig => "enforce-config",
            EmergencyCommand::EnforceConfigAndVersion { .. } => "enforce-config-and-version",
            EmergencyCommand::Restart => "restart",
        }
    }
}

/// What a plan does (SPEC P1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum PlanKind {
    /// First installation of the product.
    Install,
    /// Same version, new config overrides.
    ConfigChange,
    /// Upgrade or downgrade; the version's config overrides travel with it.
    VersionChange,
    /// Remove the product.
    Uninstall,
    /// New secret values.
    SecretsChange,
    /// Back to the version and config before a failed plan (SPEC P10).
    Rollback {
        /// The failed plan being undone.
        failed_plan: String,
    },
    /// Off a recalled release (SPEC P4, C6).
    RecallRollOff,
    /// A break-glass command (SPEC P1, C2).
    Command {
        /// Which command.
        command: EmergencyCommand,
        /// Who issued it.
        actor: String,
    },
    /// One committed canary step: the state the canary's workloads and routing must reach
    /// (SPEC K2, K9).
    CanaryStep(Box<crate::canary::CanaryStepSpec>),
    /// A canary step whose analysis runs a fresh baseline (issue 20, `judge.baseline:
    /// fresh`): the step, and the baseline workload the agent runs beside the canary (the
    /// primary's revision, with as much traffic as the canary, taken out of the primary's
    /// share). Appended, so every older plan keeps its bytes; a step without a baseline is
    /// still a [`PlanKind::CanaryStep`].
    CanaryStepWithBaseline {
        /// The step.
        step: Box<crate::canary::CanaryStepSpec>,
        /// The fresh baseline's revision.
        baseline: Box<crate::canary::CanaryRevision>,
    },
}

impl PlanKind {
    /// A short name for tables and the CLI.
    pub fn label(&self) -> &'static str {
        match self {
            PlanKind::Install => "install",
            PlanKind::ConfigChange => "config-change",
            PlanKind::VersionChange => "version-change",
            PlanKind::Uninstall => "uninstall",
            PlanKind::SecretsChange => "secrets-change",
            PlanKind::Rollback { .. } => "rollback",
            PlanKind::RecallRollOff => "recall-roll-off",
            PlanKind::Command { .. } => "command",
            PlanKind::CanaryStep(_) | PlanKind::CanaryStepWithBaseline { .. } => "canary-step",
        }
    }

    /// Whether this is a canary step (with or without a fresh baseline).
    pub fn is_canary_step(&self) -> bool {
        self.canary_step().is_some()
    }

    /// The canary step this plan carries, if it is one.
    pub fn canary_step(&self) -> Option<&crate::canary::CanaryStepSpec> {
        match self {
            PlanKind::CanaryStep(s) | PlanKind::CanaryStepWithBaseline { step: s, .. } => Some(s),
            _ => None,
        }
    }

    /// The fresh baseline a canary step runs, if any.
    pub fn canary_baseline(&self) -> Option<&crate::canary::CanaryRevision> {
        match self {
            PlanKind::CanaryStepWithBaseline { baseline, .. } => Some(baseline),
            _ => None,
        }
    }

    /// Whether this is a break-glass command.
    pub fn is_command(&self) -> bool {
        matches!(self, PlanKind::Command { .. })
    }

    /// The tasks an agent runs for this kind, in order.
    pub fn task_names(&self) -> &'static [&'static str] {
        match self {
            PlanKind::Install
            | PlanKind::VersionChange
            | PlanKind::Rollback { .. }
            | PlanKind::RecallRollOff => &["fetch", "verify", "configure", "start", "readiness"],
            PlanKind::ConfigChange | PlanKind::SecretsChange => {
                &["configure", "start", "readiness"]
            }
            PlanKind::Uninstall => &["stop", "remove"],
            PlanKind::CanaryStep(_) | PlanKind::CanaryStepWithBaseline { .. } => &["apply"],
            PlanKind::Command { command, .. } => match command {
                EmergencyCommand::Install { .. }
                | EmergencyCommand::EnforceConfigAndVersion { .. } => {
                    &["fetch", "verify", "configure", "start", "readiness"]
                }
                EmergencyCommand::EnforceConfig => &["configure", "start", "readiness"],
                EmergencyCommand::Uninstall => &["stop", "remove"],
                EmergencyCommand::Restart => &["start", "readiness"],
            },
        }
    }
}

pub use hub_wire::plan_state::{PlanStatus, TaskState};

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    /// `fetch`, `configure`, ...
    pub name: String,
    /// Where it is.
    pub state: TaskState,
    /// The agent's attempt number for the last accepted report.
    pub attempt: u32,
    /// When it started (entry time of the report).
    pub started_ms: Option<TimestampMs>,
    /// When it ended.
    pub ended_ms: Option<TimestampMs>,
    /// Why it failed.
    pub error: Option<String>,
}

/// What an operator needs to tell which stage failed (SPEC P6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FailureMetadata {
    /// `fetch`, `verify`, `configure`, `start`, `readiness`, ...
    pub stage: String,
    /// One line.
    pub message: String,
    /// Resources that never became ready.
    pub not_ready: Vec<String>,
    /// Validation errors.
    pub validation_errors: Vec<String>,
}

/// Failure stages that happen before the workload is touched (fetching or verifying the
/// artifact): such a failure leaves the entity as it was, so it needs no rollback.
pub const UNTOUCHED_STAGES: [&str; 2] = ["fetch", "verify"];

impl FailureMetadata {
    /// Whether the failed stage may have changed the running workload.
    pub fn touched_workload(&self) -> bool {
        !UNTOUCHED_STAGES.contains(&self.stage.as_str())
    }
}

/// A plan record (SPEC P6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Plan {
    /// `p-<index>-<n>`: assigned on apply, so replaying the log yields the same ids.
    pub id: String,
    /// The entity it changes.
    pub entity: String,
    /// The entity's environment.
    pub environment: String,
    /// What it does.
    pub kind: PlanKind,
    /// Version before (as reported).
    pub from_version: Option<Version>,
    /// Version after; `None` for uninstall.
    pub to_version: Option<Version>,
    /// SHA-256 of the config before (as reported).
    pub from_config_sha256: Option<String>,
    /// The rendered config overrides to apply (YAML text).
    pub to_config: Option<String>,
    /// The entity's secrets revision the plan carries (values are sent to the agent on fetch,
    /// never stored in the plan).
    pub secrets_revision: u64,
    /// The target release's artifacts.
    pub artifacts: Vec<Artifact>,
    /// Why it was issued (for Activity and `plan get`).
    pub reason: String,
    /// Tasks in order.
    pub tasks: Vec<Task>,
    /// The agent's output (bounded by [`MAX_PLAN_OUTPUT`]).
    pub output: String,
    /// Set when it failed.
    pub failure: Option<FailureMetadata>,
    /// When its candidate was first seen (blocked since), or when issued.
    pub created_ms: TimestampMs,
    /// When it was committed.
    pub issued_ms: TimestampMs,
    /// The first task report.
    pub started_ms: Option<TimestampMs>,
    /// When it reached a final status.
    pub ended_ms: Option<TimestampMs>,
    /// Where it is (SPEC P7).
    pub status: PlanStatus,
    /// Why it was cancelled.
    pub cancel_reason: Option<String>,
    /// The log index it was issued at.
    pub issued_index: u64,
}

impl Plan {
    /// Tasks for `kind`, all pending.
    pub fn tasks_for(kind: &PlanKind) -> Vec<Task> {
        kind.task_names()
            .iter()
            .map(|name| Task {
                name: (*name).to_string(),
                state: TaskState::Pending,
                attempt: 0,
                started_ms: None,
                ended_ms: None,
                error: None,
            })
            .collect()
    }

    /// Appends agent output, keeping the newest [`MAX_PLAN_OUTPUT`] bytes.
    pub fn append_output(&mut self, more: &str) {
        self.output.push_str(more);
        if self.output.len() > MAX_PLAN_OUTPUT {
            let mut cut = self.output.len() - MAX_PLAN_OUTPUT;
            while !self.output.is_char_boundary(cut) {
                cut += 1;
            }
            self.output.drain(..cut);
        }
    }

    /// Whether this plan changes the deployed version.
    pub fn changes_version(&self) -> bool {
        self.to_version.is_some() && self.to_version != self.from_version
    }
}

/// An agent's report about one task of one plan. Idempotent: a report whose `(attempt, state)`
/// is not newer than what the task already has changes nothing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskReport {
    /// The plan.
    pub plan_id: String,
    /// The task name.
    pub task: String,
    /// The agent's attempt number (starts at 1).
    pub attempt: u32,
    /// The new state (running, succeeded or failed).
    pub state: TaskState,
    /// Output to append.
    pub output: String,
    /// On failure: what failed.
    pub failure: Option<FailureMetadata>,
}

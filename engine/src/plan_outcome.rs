//! Plan outcomes: what the state keeps of a finished plan.
//!
//! A plan is a row of the state while it is issued or running. When it finishes
//! (succeeded, failed, cancelled) it moves out:
//! - the whole plan (tasks, output, artifacts, config, reason) becomes history: a
//!   [`crate::Record::FinishedPlan`] record that storage keeps and queries read
//!   ([`crate::Residence::History`]);
//! - the state keeps its [`PlanOutcome`], the few fields decisions read: its status, its
//!   kind, the versions it moved between, whether a failure touched the workload, and a
//!   canary step's canary and step.
//!
//! So a node's memory grows with the entities, not with the agents' output and the plans'
//! artifacts (issue 18). The newest [`crate::plan::FINISHED_PLANS_KEPT`] outcomes of an
//! entity are kept, and with them their history records; older ones are deleted together.

use semver::Version;
use serde::{Deserialize, Serialize};

use crate::plan::{Plan, PlanKind, PlanStatus};

/// What a finished plan did, as decisions read it (see [`PlanKind`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum OutcomeKind {
    /// [`PlanKind::Install`].
    Install,
    /// [`PlanKind::ConfigChange`].
    ConfigChange,
    /// [`PlanKind::VersionChange`].
    VersionChange,
    /// [`PlanKind::Uninstall`].
    Uninstall,
    /// [`PlanKind::SecretsChange`].
    SecretsChange,
    /// [`PlanKind::Rollback`].
    Rollback,
    /// [`PlanKind::RecallRollOff`].
    RecallRollOff,
    /// [`PlanKind::Command`].
    Command,
    /// A canary step, with or without a fresh baseline.
    CanaryStep {
        /// The canary's id.
        canary: String,
        /// The status step the plan applied.
        step: u64,
    },
}

impl OutcomeKind {
    /// The outcome kind of a plan kind.
    pub fn of(kind: &PlanKind) -> Self {
        match kind {
            PlanKind::Install => OutcomeKind::Install,
            PlanKind::ConfigChange => OutcomeKind::ConfigChange,
            PlanKind::VersionChange => OutcomeKind::VersionChange,
            PlanKind::Uninstall => OutcomeKind::Uninstall,
            PlanKind::SecretsChange => OutcomeKind::SecretsChange,
            PlanKind::Rollback { .. } => OutcomeKind::Rollback,
            PlanKind::RecallRollOff => OutcomeKind::RecallRollOff,
            PlanKind::Command { .. } => OutcomeKind::Command,
            PlanKind::CanaryStep(s) | PlanKind::CanaryStepWithBaseline { step: s, .. } => {
                OutcomeKind::CanaryStep {
                    canary: s.canary.clone(),
                    step: s.step,
                }
            }
        }
    }

    /// The same short name as [`PlanKind::label`].
    pub fn label(&self) -> &'static str {
        match self {
            OutcomeKind::Install => "install",
            OutcomeKind::ConfigChange => "config-change",
            OutcomeKind::VersionChange => "version-change",
            OutcomeKind::Uninstall => "uninstall",
            OutcomeKind::SecretsChange => "secrets-change",
            OutcomeKind::Rollback => "rollback",
            OutcomeKind::RecallRollOff => "recall-roll-off",
            OutcomeKind::Command => "command",
            OutcomeKind::CanaryStep { .. } => "canary-step",
        }
    }
}

/// A finished plan as the state keeps it; the plan itself is history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanOutcome {
    /// The plan's id.
    pub id: String,
    /// The entity it changed.
    pub entity: String,
    /// The log index it was issued at (orders an entity's outcomes).
    pub issued_index: u64,
    /// What it did.
    pub kind: OutcomeKind,
    /// How it ended: succeeded, failed or cancelled.
    pub status: PlanStatus,
    /// Version before (as reported when it was issued).
    pub from_version: Option<Version>,
    /// Version after; `None` for uninstall.
    pub to_version: Option<Version>,
    /// Failed at a stage that may have changed the running workload (a failure without
    /// metadata counts as one); `false` unless it failed.
    pub failure_touched_workload: bool,
    /// When it reached its final status.
    pub ended_ms: Option<crate::TimestampMs>,
}

impl PlanOutcome {
    /// The outcome of `plan`, which has finished.
    pub fn of(plan: &Plan) -> Self {
        assert!(
            !plan.status.is_active(),
            "plan {} is {} and has no outcome yet",
            plan.id,
            plan.status
        );
        PlanOutcome {
            id: plan.id.clone(),
            entity: plan.entity.clone(),
            issued_index: plan.issued_index,
            kind: OutcomeKind::of(&plan.kind),
            status: plan.status,
            from_version: plan.from_version.clone(),
            to_version: plan.to_version.clone(),
            failure_touched_workload: plan.status == PlanStatus::Failed
                && plan.failure.as_ref().is_none_or(|f| f.touched_workload()),
            ended_ms: plan.ended_ms,
        }
    }

    /// The canary step it applied, as (canary id, step), if it was a canary step.
    pub fn canary_step(&self) -> Option<(&str, u64)> {
        match &self.kind {
            OutcomeKind::CanaryStep { canary, step } => Some((canary, *step)),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::FailureMetadata;

    fn finished(kind: PlanKind, status: PlanStatus, stage: Option<&str>) -> Plan {
        Plan {
            id: "p-7-0".into(),
            entity: "eid:prod:helmChart:web".into(),
            environment: "prod".into(),
            tasks: Plan::tasks_for(&kind),
            kind,
            from_version: Some(Version::new(1, 0, 0)),
            to_version: Some(Version::new(2, 0, 0)),
            from_config_sha256: None,
            to_config: None,
            secrets_revision: 0,
            artifacts: Vec::new(),
            reason: "newest".into(),
            output: "lots of output".into(),
            failure: stage.map(|s| FailureMetadata {
                stage: s.into(),
                ..FailureMetadata::default()
            }),
            created_ms: 1,
            issued_ms: 2,
            started_ms: Some(3),
            ended_ms: Some(4),
            status,
            cancel_reason: None,
            issued_index: 7,
        }
    }

    #[test]
    fn an_outcome_keeps_what_decisions_read() {
        let o = PlanOutcome::of(&finished(
            PlanKind::VersionChange,
            PlanStatus::Failed,
            Some("start"),
        ));
        assert_eq!(o.kind.label(), PlanKind::VersionChange.label());
        assert_eq!(o.status, PlanStatus::Failed);
        assert_eq!(o.from_version, Some(Version::new(1, 0, 0)));
        assert_eq!(o.to_version, Some(Version::new(2, 0, 0)));
        assert!(o.failure_touched_workload);
        assert_eq!((o.issued_index, o.ended_ms), (7, Some(4)));
    }

    #[test]
    fn only_a_failure_past_fetch_and_verify_touched_the_workload() {
        let at = |status, stage| {
            PlanOutcome::of(&finished(PlanKind::VersionChange, status, stage))
                .failure_touched_workload
        };
        assert!(!at(PlanStatus::Failed, Some("fetch")));
        assert!(!at(PlanStatus::Failed, Some("verify")));
        assert!(at(PlanStatus::Failed, None));
        assert!(!at(PlanStatus::Succeeded, None));
        assert!(!at(PlanStatus::Cancelled, None));
    }

    #[test]
    #[should_panic(expected = "has no outcome yet")]
    fn an_active_plan_has_no_outcome() {
        PlanOutcome::of(&finished(PlanKind::Install, PlanStatus::Running, None));
    }
}

//! Break-glass commands: an operator's install, uninstall, restart or enforce of one entity.

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::plan::{EmergencyCommand, Plan, PlanKind, PlanStatus};
use crate::state::State;

use super::{check_text, not_found, Tx};

impl State {
    // Long: the checks of a break-glass command, each returning early, then the plan it issues.
    pub(super) fn issue_command(
        &mut self,
        entity: &str,
        command: &EmergencyCommand,
        reason: &str,
        actor: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        let index = tx.index;
        check_text("reason", reason, true)?;
        check_text("actor", actor, true)?;
        let e = self.require_entity(entity)?;
        if let Some(active) = self.active_plan_of(entity) {
            if active.kind.is_command() {
                return Err(CommandError::FailedPrecondition(format!(
                    "command plan {} is still {} on {entity}: one command per entity at a time",
                    active.id, active.status
                )));
            }
        }
        let current = e.reported.version.clone();
        let (to_version, to_config) = match command {
            EmergencyCommand::Install { version }
            | EmergencyCommand::EnforceConfigAndVersion { version } => {
                if self.release(&e.product_id, version).is_none() {
                    return Err(not_found("release", &format!("{}@{version}", e.product_id)));
                }
                (
                    Some(version.clone()),
                    Some(e.config_for(version).to_string()),
                )
            }
            EmergencyCommand::EnforceConfig | EmergencyCommand::Restart => {
                let Some(v) = &current else {
                    return Err(CommandError::FailedPrecondition(format!(
                        "{entity} is not installed; use the install command"
                    )));
                };
                (Some(v.clone()), Some(e.config_for(v).to_string()))
            }
            EmergencyCommand::Uninstall => (None, None),
        };
        let artifacts = to_version
            .as_ref()
            .filter(|_| {
                matches!(
                    command,
                    EmergencyCommand::Install { .. }
                        | EmergencyCommand::EnforceConfigAndVersion { .. }
                )
            })
            .and_then(|v| self.release(&e.product_id, v))
            .map(|r| r.artifacts.clone())
            .unwrap_or_default();
        let kind = PlanKind::Command {
            command: command.clone(),
            actor: actor.to_string(),
        };
        let plan = Plan {
            id: format!("p-{index}-0"),
            entity: entity.to_string(),
            environment: e.environment.clone(),
            tasks: Plan::tasks_for(&kind),
            kind,
            from_version: current,
            to_version,
            from_config_sha256: e.reported.config_sha256.clone(),
            to_config,
            secrets_revision: e.secrets_revision,
            artifacts,
            reason: reason.to_string(),
            output: String::new(),
            failure: None,
            created_ms: now,
            issued_ms: now,
            started_ms: None,
            ended_ms: None,
            status: PlanStatus::Issued,
            cancel_reason: None,
            issued_index: index,
        };
        // SPEC P4: a command beats plans.
        if let Some(active) = self.active_plan_of(entity).map(|p| p.id.clone()) {
            self.cancel_plan(&active, &format!("superseded by command {}", plan.id), tx);
        }
        let id = plan.id.clone();
        let label = command.label();
        self.insert_plan(plan, tx);
        self.audit_entry(
            actor,
            &format!("command {label}"),
            entity.to_string(),
            reason,
            tx,
        );
        self.note(
            entity,
            "command",
            format!("command {label} by {actor} ({id}): {reason}"),
            tx,
        );
        Ok(CommandOutput::Changed {
            id: id.clone(),
            summary: format!("command plan {id} issued"),
        })
    }
}

//! The node's side of the typed agent contract (`hub.v1.Agent`): the engine's plan kinds,
//! plan statuses, task states and health as proto enums and back, with exhaustive matches,
//! and the refused reports of a `ReportTasks` batch as data.
//!
//! Enum values arrive as `i32`s (prost keeps values it does not know): an unknown value, or
//! the never-sent `UNSPECIFIED`, is refused with a [`WireError`] naming the field.

use hub_engine::entity::Health;
use hub_engine::plan::{EmergencyCommand, PlanKind, PlanStatus, TaskReport, TaskState};
use hub_engine::{CommandError, CommandOutput};
use hub_proto as wire;

/// Why a value from the agent's wire was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// An enum field holds a value this node does not know.
    #[error("invalid {field}: unknown {kind} value {value}")]
    Unknown {
        /// The field, as `states[0].health`.
        field: String,
        /// The enum's proto name.
        kind: &'static str,
        /// The value received.
        value: i32,
    },
    /// An enum field holds a known value that this field does not accept.
    #[error("invalid {field}: {value} is not {allowed}")]
    NotAllowed {
        /// The field.
        field: String,
        /// The value's proto name.
        value: &'static str,
        /// What the field accepts, for humans.
        allowed: &'static str,
    },
}

impl From<WireError> for tonic::Status {
    fn from(e: WireError) -> Self {
        tonic::Status::invalid_argument(e.to_string())
    }
}

/// A plan kind on the wire: its kind and, for break-glass commands, which command.
pub fn plan_kind(kind: &PlanKind) -> (wire::PlanKind, wire::PlanCommand) {
    let none = wire::PlanCommand::Unspecified;
    match kind {
        PlanKind::Install => (wire::PlanKind::Install, none),
        PlanKind::ConfigChange => (wire::PlanKind::ConfigChange, none),
        PlanKind::VersionChange => (wire::PlanKind::VersionChange, none),
        PlanKind::Uninstall => (wire::PlanKind::Uninstall, none),
        PlanKind::SecretsChange => (wire::PlanKind::SecretsChange, none),
        PlanKind::Rollback { .. } => (wire::PlanKind::Rollback, none),
        PlanKind::RecallRollOff => (wire::PlanKind::RecallRollOff, none),
        PlanKind::Command { command, .. } => (wire::PlanKind::Command, plan_command(command)),
        PlanKind::CanaryStep(_) | PlanKind::CanaryStepWithBaseline { .. } => {
            (wire::PlanKind::CanaryStep, none)
        }
    }
}

/// A break-glass command on the wire.
pub fn plan_command(command: &EmergencyCommand) -> wire::PlanCommand {
    match command {
        EmergencyCommand::Install { .. } => wire::PlanCommand::Install,
        EmergencyCommand::Uninstall => wire::PlanCommand::Uninstall,
        EmergencyCommand::EnforceConfig => wire::PlanCommand::EnforceConfig,
        EmergencyCommand::EnforceConfigAndVersion { .. } => {
            wire::PlanCommand::EnforceConfigAndVersion
        }
        EmergencyCommand::Restart => wire::PlanCommand::Restart,
    }
}

/// A plan status on the wire.
pub fn plan_status(status: PlanStatus) -> wire::PlanStatus {
    match status {
        PlanStatus::Issued => wire::PlanStatus::Issued,
        PlanStatus::Running => wire::PlanStatus::Running,
        PlanStatus::Succeeded => wire::PlanStatus::Succeeded,
        PlanStatus::Failed => wire::PlanStatus::Failed,
        PlanStatus::Cancelled => wire::PlanStatus::Cancelled,
    }
}

/// A task state on the wire.
pub fn task_state(state: TaskState) -> wire::TaskState {
    match state {
        TaskState::Pending => wire::TaskState::Pending,
        TaskState::Running => wire::TaskState::Running,
        TaskState::Succeeded => wire::TaskState::Succeeded,
        TaskState::Failed => wire::TaskState::Failed,
    }
}

/// The state of a task report (`field` names it for errors): running, succeeded or failed.
pub fn reported_task_state(value: i32, field: &str) -> Result<TaskState, WireError> {
    let state = wire::TaskState::try_from(value).map_err(|_| WireError::Unknown {
        field: field.to_string(),
        kind: "TaskState",
        value,
    })?;
    let not_allowed = |s: wire::TaskState| WireError::NotAllowed {
        field: field.to_string(),
        value: s.as_str_name(),
        allowed: "running, succeeded or failed",
    };
    match state {
        wire::TaskState::Running => Ok(TaskState::Running),
        wire::TaskState::Succeeded => Ok(TaskState::Succeeded),
        wire::TaskState::Failed => Ok(TaskState::Failed),
        wire::TaskState::Pending | wire::TaskState::Unspecified => Err(not_allowed(state)),
    }
}

/// An entity's health on the wire.
pub fn health(health: Health) -> wire::Health {
    match health {
        Health::Unknown => wire::Health::Unknown,
        Health::Healthy => wire::Health::Healthy,
        Health::Error => wire::Health::Error,
    }
}

/// A reported health (`field` names it for errors).
pub fn reported_health(value: i32, field: &str) -> Result<Health, WireError> {
    let h = wire::Health::try_from(value).map_err(|_| WireError::Unknown {
        field: field.to_string(),
        kind: "Health",
        value,
    })?;
    match h {
        wire::Health::Unknown => Ok(Health::Unknown),
        wire::Health::Healthy => Ok(Health::Healthy),
        wire::Health::Error => Ok(Health::Error),
        wire::Health::Unspecified => Err(WireError::NotAllowed {
            field: field.to_string(),
            value: h.as_str_name(),
            allowed: "unknown, healthy or error",
        }),
    }
}

/// The refused reports of a `ReportTasks` batch, from the engine's typed output (empty for
/// any other output). The reason follows from the engine's error: a missing plan, a `task`
/// the plan does not have, or anything else wrong with the report itself.
pub fn refused_reports(output: &CommandOutput, reports: &[TaskReport]) -> Vec<wire::RefusedReport> {
    let CommandOutput::TasksReported { refused, .. } = output else {
        return Vec::new();
    };
    refused
        .iter()
        .map(|r| {
            let report = reports.get(r.position as usize);
            let reason = match &r.error {
                CommandError::NotFound { .. } => wire::ReportRefusal::PlanNotFound,
                CommandError::InvalidField { field, .. } if field == "task" => {
                    wire::ReportRefusal::UnknownTask
                }
                CommandError::InvalidField { .. }
                | CommandError::AlreadyExists { .. }
                | CommandError::FailedPrecondition(_)
                | CommandError::FeatureLevelTooLow { .. }
                | CommandError::PermissionDenied(_) => wire::ReportRefusal::InvalidReport,
            };
            wire::RefusedReport {
                position: r.position,
                plan_id: r.plan_id.clone(),
                task: r.task.clone(),
                attempt: report.map_or(0, |t| t.attempt),
                state: report.map_or(wire::TaskState::Unspecified, |t| task_state(t.state)) as i32,
                reason: reason as i32,
                message: r.error.to_string(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_engine::command::Request;
    use hub_engine::{Command, EntityKind, State};
    use semver::Version;

    #[test]
    fn every_engine_value_has_its_own_wire_value() {
        let v = Version::new(1, 0, 0);
        let kinds = [
            PlanKind::Install,
            PlanKind::ConfigChange,
            PlanKind::VersionChange,
            PlanKind::Uninstall,
            PlanKind::SecretsChange,
            PlanKind::Rollback {
                failed_plan: "p-1-0".into(),
            },
            PlanKind::RecallRollOff,
            PlanKind::Command {
                command: EmergencyCommand::Restart,
                actor: "a".into(),
            },
        ];
        let mut seen = std::collections::BTreeSet::new();
        for k in &kinds {
            let (w, c) = plan_kind(k);
            // The proto name is the engine's label, upper-cased.
            let want = format!("PLAN_KIND_{}", k.label().to_uppercase().replace('-', "_"));
            assert_eq!(w.as_str_name(), want);
            assert_eq!(
                c == wire::PlanCommand::Unspecified,
                !k.is_command(),
                "{k:?}"
            );
            assert!(seen.insert(w as i32));
        }
        for c in [
            EmergencyCommand::Install { version: v.clone() },
            EmergencyCommand::Uninstall,
            EmergencyCommand::EnforceConfig,
            EmergencyCommand::EnforceConfigAndVersion { version: v },
            EmergencyCommand::Restart,
        ] {
            let want = format!(
                "PLAN_COMMAND_{}",
                c.label().to_uppercase().replace('-', "_")
            );
            assert_eq!(plan_command(&c).as_str_name(), want);
        }
        for s in [
            PlanStatus::Issued,
            PlanStatus::Running,
            PlanStatus::Succeeded,
            PlanStatus::Failed,
            PlanStatus::Cancelled,
        ] {
            let want = format!("PLAN_STATUS_{}", s.as_str().to_uppercase());
            assert_eq!(plan_status(s).as_str_name(), want);
        }
        for s in [
            TaskState::Pending,
            TaskState::Running,
            TaskState::Succeeded,
            TaskState::Failed,
        ] {
            let want = format!("TASK_STATE_{}", s.as_str().to_uppercase());
            assert_eq!(task_state(s).as_str_name(), want);
            if s != TaskState::Pending {
                assert_eq!(reported_task_state(task_state(s) as i32, "state"), Ok(s));
            }
        }
        for h in [Health::Unknown, Health::Healthy, Health::Error] {
            let want = format!("HEALTH_{}", h.as_str().to_uppercase());
            assert_eq!(health(h).as_str_name(), want);
            assert_eq!(reported_health(health(h) as i32, "health"), Ok(h));
        }
    }

    #[test]
    fn unknown_and_unset_values_are_refused_naming_the_field() {
        for v in [0, 1, 99, -1, i32::MAX, i32::MIN] {
            let e = reported_task_state(v, "reports[3].state").unwrap_err();
            assert!(
                e.to_string().starts_with("invalid reports[3].state: "),
                "{e}"
            );
        }
        let e = reported_task_state(99, "state").unwrap_err().to_string();
        assert_eq!(e, "invalid state: unknown TaskState value 99");
        let e = reported_task_state(wire::TaskState::Pending as i32, "state").unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid state: TASK_STATE_PENDING is not running, succeeded or failed"
        );
        let e = reported_health(0, "states[0].health")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("states[0].health") && e.contains("UNSPECIFIED"),
            "{e}"
        );
        let e = reported_health(7, "states[0].health")
            .unwrap_err()
            .to_string();
        assert_eq!(e, "invalid states[0].health: unknown Health value 7");
        let s = tonic::Status::from(WireError::Unknown {
            field: "f".into(),
            kind: "Health",
            value: 7,
        });
        assert_eq!(s.code(), tonic::Code::InvalidArgument);
    }

    fn apply(state: &mut State, index: &mut u64, command: Command) -> CommandOutput {
        *index += 1;
        let applied = state.apply(
            &Request {
                command,
                time_ms: 1_700_000_000_000 + *index as i64,
                request_id: None,
            },
            *index,
        );
        applied.result.expect("applied")
    }

    fn report(plan: &str, task: &str, attempt: u32, state: TaskState) -> TaskReport {
        TaskReport {
            plan_id: plan.into(),
            task: task.into(),
            attempt,
            state,
            output: String::new(),
            failure: None,
        }
    }

    /// The contract with the engine: a real `ReportTasks` batch with refused reports of
    /// every kind, applied, and its typed output read back as the wire's refusals.
    #[test]
    fn refusals_follow_the_engines_output() {
        let mut state = State::default();
        let mut index = 0;
        apply(
            &mut state,
            &mut index,
            Command::CreateEnvironment {
                name: "prod".into(),
                description: String::new(),
            },
        );
        apply(
            &mut state,
            &mut index,
            Command::CreateProduct {
                product_id: "com.example:web".into(),
                description: String::new(),
            },
        );
        apply(
            &mut state,
            &mut index,
            Command::CreateEntity {
                environment: "prod".into(),
                kind: EntityKind::HelmChart,
                name: "web".into(),
                product_id: "com.example:web".into(),
                k8s_namespace: Some("web".into()),
                account_id: None,
                release_channel: None,
            },
        );
        apply(
            &mut state,
            &mut index,
            Command::IssueCommand {
                entity: "eid:prod:helmChart:web".into(),
                command: EmergencyCommand::Uninstall,
                reason: "test".into(),
                actor: "admin".into(),
            },
        );
        let plan = state
            .active_plans_in("prod")
            .next()
            .expect("a plan")
            .id
            .clone();
        let mut long = report(&plan, "remove", 1, TaskState::Running);
        long.output = "x".repeat(1024 * 1024 + 1);
        let reports = vec![
            report(&plan, "stop", 1, TaskState::Running),
            report("p-999-0", "stop", 1, TaskState::Running),
            report(&plan, "stop", 0, TaskState::Succeeded),
            report(&plan, "nope; p-1-0 stop: x", 1, TaskState::Running),
            report("p-999-0", "stop", 1, TaskState::Succeeded),
            long,
            report(&plan, "stop", 1, TaskState::Succeeded),
        ];
        let summary = apply(
            &mut state,
            &mut index,
            Command::ReportTasks {
                environment: "prod".into(),
                reports: reports.clone(),
            },
        );
        let refused = refused_reports(&summary, &reports);
        let got: Vec<(u32, i32)> = refused.iter().map(|r| (r.position, r.reason)).collect();
        use wire::ReportRefusal as R;
        assert_eq!(
            got,
            vec![
                (1, R::PlanNotFound as i32),
                (2, R::InvalidReport as i32),
                (3, R::UnknownTask as i32),
                (4, R::PlanNotFound as i32),
                (5, R::InvalidReport as i32),
            ],
            "{summary:?}\n{refused:?}"
        );
        assert_eq!(refused[1].attempt, 0);
        assert_eq!(refused[3].state, wire::TaskState::Succeeded as i32);
        assert!(refused[0].message.contains("p-999-0"), "{:?}", refused[0]);
        // Nothing refused, nothing listed.
        let ok = vec![report(&plan, "remove", 1, TaskState::Running)];
        let summary = apply(
            &mut state,
            &mut index,
            Command::ReportTasks {
                environment: "prod".into(),
                reports: ok.clone(),
            },
        );
        assert!(refused_reports(&summary, &ok).is_empty(), "{summary:?}");
    }
}

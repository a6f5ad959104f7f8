//! The agent's side of the typed agent contract (`hub.v1.Agent`): fetched plans checked into
//! [`PlanSpec`]s, reports and observed states onto the wire, refused reports read back.
//!
//! Every enum is mapped with an exhaustive match to the engine's own type (task states, plan
//! statuses, health) or the agent's ([`PlanKind`]). Enum values arrive as `i32`s (prost keeps
//! values it does not know): an unknown value, or `UNSPECIFIED` where a value is required,
//! is a [`WireError`] naming the field, never a panic or a guess.

use hub_proto as wire;
use hub_proto::{AgentPlan, EntityState, FetchPlansReply, PlanArtifact, ReportTaskRequest};
use hub_wire::entity_state::EntityReport;
use hub_wire::entity_state::ReportedState;
use hub_wire::plan_state::{PlanStatus, TaskState};

use crate::journal::PendingReport;
use crate::plan::{
    Artifact, CanaryHeaderMatchSpec, CanaryStepSpec, CanaryWorkloadSpec, CommandKind, Health,
    LoadSpec, Observed, PlanKind, PlanSpec, Registry,
};

/// Why a value from the hub's wire was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// An enum field holds a value this agent does not know (a newer hub).
    #[error("{field}: unknown {kind} value {value}")]
    Unknown {
        /// The field, as `plans[2].kind`.
        field: String,
        /// The enum's proto name.
        kind: &'static str,
        /// The value received.
        value: i32,
    },
    /// An enum field holds a known value this field does not accept.
    #[error("{field}: {value} {why}")]
    NotAllowed {
        /// The field.
        field: String,
        /// The value's proto name.
        value: &'static str,
        /// Why not, for humans.
        why: &'static str,
    },
}

fn unknown(field: &str, kind: &'static str, value: i32) -> WireError {
    WireError::Unknown {
        field: field.to_string(),
        kind,
        value,
    }
}

fn not_allowed(field: &str, value: &'static str, why: &'static str) -> WireError {
    WireError::NotAllowed {
        field: field.to_string(),
        value,
        why,
    }
}

/// A plan's kind from its `kind` and `command` fields (`field` names the plan).
pub fn plan_kind(kind: i32, command: i32, field: &str) -> Result<PlanKind, WireError> {
    let k = wire::PlanKind::try_from(kind)
        .map_err(|_| unknown(&format!("{field}.kind"), "PlanKind", kind))?;
    let c = wire::PlanCommand::try_from(command)
        .map_err(|_| unknown(&format!("{field}.command"), "PlanCommand", command))?;
    let plain = |kind: PlanKind| match c {
        wire::PlanCommand::Unspecified => Ok(kind),
        _ => Err(not_allowed(
            &format!("{field}.command"),
            c.as_str_name(),
            "is set on a plan that is not a command",
        )),
    };
    match k {
        wire::PlanKind::Unspecified => Err(not_allowed(
            &format!("{field}.kind"),
            k.as_str_name(),
            "is not a plan kind",
        )),
        wire::PlanKind::Install => plain(PlanKind::Install),
        wire::PlanKind::ConfigChange => plain(PlanKind::ConfigChange),
        wire::PlanKind::VersionChange => plain(PlanKind::VersionChange),
        wire::PlanKind::Uninstall => plain(PlanKind::Uninstall),
        wire::PlanKind::SecretsChange => plain(PlanKind::SecretsChange),
        wire::PlanKind::Rollback => plain(PlanKind::Rollback),
        wire::PlanKind::RecallRollOff => plain(PlanKind::RecallRollOff),
        wire::PlanKind::CanaryStep => plain(PlanKind::CanaryStep),
        wire::PlanKind::Command => Ok(PlanKind::Command(match c {
            wire::PlanCommand::Unspecified => {
                return Err(not_allowed(
                    &format!("{field}.command"),
                    c.as_str_name(),
                    "on a command plan",
                ))
            }
            wire::PlanCommand::Install => CommandKind::Install,
            wire::PlanCommand::Uninstall => CommandKind::Uninstall,
            wire::PlanCommand::EnforceConfig => CommandKind::EnforceConfig,
            wire::PlanCommand::EnforceConfigAndVersion => CommandKind::EnforceConfigAndVersion,
            wire::PlanCommand::Restart => CommandKind::Restart,
        })),
    }
}

/// A plan's status.
pub fn plan_status(value: i32, field: &str) -> Result<PlanStatus, WireError> {
    let s = wire::PlanStatus::try_from(value).map_err(|_| unknown(field, "PlanStatus", value))?;
    match s {
        wire::PlanStatus::Unspecified => Err(not_allowed(field, s.as_str_name(), "is not set")),
        wire::PlanStatus::Issued => Ok(PlanStatus::Issued),
        wire::PlanStatus::Running => Ok(PlanStatus::Running),
        wire::PlanStatus::Succeeded => Ok(PlanStatus::Succeeded),
        wire::PlanStatus::Failed => Ok(PlanStatus::Failed),
        wire::PlanStatus::Cancelled => Ok(PlanStatus::Cancelled),
    }
}

/// A task's state.
pub fn task_state(value: i32, field: &str) -> Result<TaskState, WireError> {
    let s = wire::TaskState::try_from(value).map_err(|_| unknown(field, "TaskState", value))?;
    match s {
        wire::TaskState::Unspecified => Err(not_allowed(field, s.as_str_name(), "is not set")),
        wire::TaskState::Pending => Ok(TaskState::Pending),
        wire::TaskState::Running => Ok(TaskState::Running),
        wire::TaskState::Succeeded => Ok(TaskState::Succeeded),
        wire::TaskState::Failed => Ok(TaskState::Failed),
    }
}

/// A task state on the wire.
pub fn task_state_to_wire(state: TaskState) -> wire::TaskState {
    match state {
        TaskState::Pending => wire::TaskState::Pending,
        TaskState::Running => wire::TaskState::Running,
        TaskState::Succeeded => wire::TaskState::Succeeded,
        TaskState::Failed => wire::TaskState::Failed,
    }
}

/// An entity's health on the wire.
pub fn health_to_wire(health: Health) -> wire::Health {
    match health {
        Health::Unknown => wire::Health::Unknown,
        Health::Healthy => wire::Health::Healthy,
        Health::Error => wire::Health::Error,
    }
}

/// A plan of a fetch, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPlan {
    /// What to execute.
    pub spec: PlanSpec,
    /// Where the hub says the plan is.
    pub status: PlanStatus,
    /// Tasks the hub records as succeeded (not run again).
    pub hub_done: Vec<String>,
    /// When it was committed (Unix ms).
    pub issued_ms: i64,
}

/// The environment's registries a plan fetch carries.
pub fn registries(reply: &FetchPlansReply) -> Vec<Registry> {
    reply
        .registries
        .iter()
        .map(|r| Registry {
            name: r.name.clone(),
            url: r.url.clone(),
            ca_pem: (!r.ca_pem.is_empty()).then(|| r.ca_pem.clone()),
            insecure_skip_verify: r.insecure_skip_verify,
        })
        .collect()
}

/// One fetched plan (`field` names it, as `plans[2]`), with the environment's registries.
pub fn plan(p: &AgentPlan, registries: &[Registry], field: &str) -> Result<FetchedPlan, WireError> {
    let kind = plan_kind(p.kind, p.command, field)?;
    let status = plan_status(p.status, &format!("{field}.status"))?;
    let mut hub_done = Vec::new();
    for (i, t) in p.tasks.iter().enumerate() {
        if task_state(t.state, &format!("{field}.tasks[{i}].state"))? == TaskState::Succeeded {
            hub_done.push(t.name.clone());
        }
    }
    let spec = PlanSpec {
        id: p.id.clone(),
        entity: p.entity.clone(),
        kind,
        from_version: p.from_version.clone(),
        to_version: p.to_version.clone(),
        config: p.config.clone(),
        secrets_revision: p.secrets_revision,
        secrets: p
            .secrets
            .iter()
            .map(|s| (s.name.clone(), s.value.clone()))
            .collect(),
        artifacts: artifacts(&p.artifacts),
        registries: registries.to_vec(),
        tasks: p.tasks.iter().map(|t| t.name.clone()).collect(),
        canary: p.canary.as_ref().map(canary_spec),
    };
    Ok(FetchedPlan {
        spec,
        status,
        hub_done,
        issued_ms: p.issued_ms,
    })
}

fn artifacts(a: &[PlanArtifact]) -> Vec<Artifact> {
    a.iter()
        .map(|a| Artifact {
            uri: a.uri.clone(),
            sha256: a.sha256.clone(),
        })
        .collect()
}

fn canary_spec(c: &wire::CanaryStep) -> CanaryStepSpec {
    let workload = |w: &wire::CanaryWorkload| CanaryWorkloadSpec {
        revision: w.revision.clone(),
        version: w.version.clone(),
        config: w.config.clone(),
        artifacts: artifacts(&w.artifacts),
        secrets_revision: w.secrets_revision,
    };
    CanaryStepSpec {
        canary: c.canary.clone(),
        service: c.service.clone(),
        port: c.port,
        step: c.step,
        phase: c.phase.clone(),
        primary: c.primary.as_ref().map(workload),
        canary_workload: c.canary_workload.as_ref().map(workload),
        canary_weight: c.canary_weight,
        match_routing: c.match_routing,
        match_rules: c
            .r#match
            .iter()
            .map(|rule| {
                rule.headers
                    .iter()
                    .map(|h| CanaryHeaderMatchSpec {
                        name: h.name.clone(),
                        op: h.op.clone(),
                        value: h.value.clone(),
                    })
                    .collect()
            })
            .collect(),
        restore_original: c.restore_original,
        metric_windows_ms: c.metric_windows_ms.clone(),
        baseline: c.baseline.as_ref().map(workload),
        loads: c
            .loads
            .iter()
            .map(|l| LoadSpec {
                name: l.name.clone(),
                url: l.url.clone(),
                duration_ms: l.duration_ms,
                requests: l.requests,
                workers: l.workers,
                rate_milli_per_worker: l.rate_milli_per_worker,
                method: l.method.clone(),
                headers: l
                    .headers
                    .iter()
                    .map(|h| (h.name.clone(), h.value.clone()))
                    .collect(),
                body: l.body.clone(),
                host: l.host.clone(),
                timeout_ms: l.timeout_ms,
            })
            .collect(),
    }
}

/// What the driver observes of one entity, on the wire.
pub fn entity_state(o: &Observed, reflects_through: Option<u64>) -> EntityState {
    EntityState {
        entity: o.entity.clone(),
        version: o.version.clone().unwrap_or_default(),
        health: health_to_wire(o.health) as i32,
        config_sha256: o.config_sha256.clone().unwrap_or_default(),
        secrets_revision: o.secrets_revision,
        message: o.message.clone(),
        reflects_through,
    }
}

/// What the hub records for the entities a `ReportTasks` reply names (`recorded`), as the
/// engine holds it. An entry that does not read (a version that is no semver, an unknown
/// health) is left out: the agent then samples that entity as if nothing were recorded.
pub fn recorded(reply: &wire::AgentReply) -> Vec<(String, ReportedState)> {
    reply
        .recorded
        .iter()
        .filter_map(|r| {
            let version = if r.version.is_empty() {
                None
            } else {
                Some(semver::Version::parse(&r.version).ok()?)
            };
            let health = match wire::Health::try_from(r.health).ok()? {
                wire::Health::Unknown => Health::Unknown,
                wire::Health::Healthy => Health::Healthy,
                wire::Health::Error => Health::Error,
                wire::Health::Unspecified => return None,
            };
            Some((
                r.entity.clone(),
                ReportedState {
                    version,
                    health,
                    config_sha256: (!r.config_sha256.is_empty()).then(|| r.config_sha256.clone()),
                    secrets_revision: r.secrets_revision.unwrap_or(0),
                    message: r.message.clone(),
                    reported_at_ms: None,
                },
            ))
        })
        .collect()
}

/// Whether a sample of one entity, `o`, would change what the hub records of it, `recorded`
/// (the engine's own rule, [`EntityReport::changes`]); a version that is no semver counts as
/// a change, so it is sent and the hub names the field.
pub fn changes_recorded(o: &Observed, recorded: &ReportedState) -> bool {
    let version = match &o.version {
        None => None,
        Some(v) => match semver::Version::parse(v) {
            Ok(v) => Some(v),
            Err(_) => return true,
        },
    };
    EntityReport {
        entity: o.entity.clone(),
        version,
        health: o.health,
        config_sha256: o.config_sha256.clone(),
        secrets_revision: o.secrets_revision,
        message: o.message.clone(),
    }
    .changes(recorded)
}

/// A journaled report on the wire.
pub fn task_report(environment: &str, report: &PendingReport) -> ReportTaskRequest {
    ReportTaskRequest {
        environment: environment.to_string(),
        plan_id: report.plan_id.clone(),
        task: report.task.clone(),
        attempt: report.attempt,
        state: task_state_to_wire(report.state.task_state()) as i32,
        output: report.output.clone(),
        failure: report.failure.as_ref().map(|f| wire::PlanFailure {
            stage: f.stage.clone(),
            message: f.message.clone(),
            not_ready: f.not_ready.clone(),
            validation_errors: f.validation_errors.clone(),
        }),
        request_id: report.request_id(),
    }
}

/// Why the hub refused one report of a batch (proto `ReportRefusal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No such plan in the environment (never issued there, or finished and forgotten).
    PlanNotFound,
    /// The plan has no task of that name.
    UnknownTask,
    /// The report itself is malformed.
    InvalidReport,
    /// The hub could not say which report or why (`UNSPECIFIED`).
    Unattributed,
}

impl Refusal {
    /// A short name for logs.
    pub fn label(self) -> &'static str {
        match self {
            Refusal::PlanNotFound => "plan not found",
            Refusal::UnknownTask => "unknown task",
            Refusal::InvalidReport => "invalid report",
            Refusal::Unattributed => "unattributed",
        }
    }
}

/// One report of a batch the hub refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefusedReport {
    /// Its place in the batch.
    pub position: u32,
    /// Its plan.
    pub plan_id: String,
    /// Its task.
    pub task: String,
    /// Why.
    pub reason: Refusal,
    /// The hub's words.
    pub message: String,
}

/// The refused reports of a `ReportTasks` reply, in order; an entry whose reason this agent
/// does not know is an error naming it (`refused[1].reason`).
pub fn refused(reply: &wire::AgentReply) -> Vec<Result<RefusedReport, WireError>> {
    reply
        .refused
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let reason = match wire::ReportRefusal::try_from(r.reason) {
                Ok(wire::ReportRefusal::PlanNotFound) => Refusal::PlanNotFound,
                Ok(wire::ReportRefusal::UnknownTask) => Refusal::UnknownTask,
                Ok(wire::ReportRefusal::InvalidReport) => Refusal::InvalidReport,
                Ok(wire::ReportRefusal::Unspecified) => Refusal::Unattributed,
                Err(_) => {
                    return Err(unknown(
                        &format!("refused[{i}].reason"),
                        "ReportRefusal",
                        r.reason,
                    ))
                }
            };
            Ok(RefusedReport {
                position: r.position,
                plan_id: r.plan_id.clone(),
                task: r.task.clone(),
                reason,
                message: r.message.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::ReportedState;

    #[test]
    fn every_wire_kind_maps_to_the_engines_label() {
        let kinds = [
            (wire::PlanKind::Install, "install"),
            (wire::PlanKind::ConfigChange, "config-change"),
            (wire::PlanKind::VersionChange, "version-change"),
            (wire::PlanKind::Uninstall, "uninstall"),
            (wire::PlanKind::SecretsChange, "secrets-change"),
            (wire::PlanKind::Rollback, "rollback"),
            (wire::PlanKind::RecallRollOff, "recall-roll-off"),
            (wire::PlanKind::CanaryStep, "canary-step"),
        ];
        for (w, label) in kinds {
            let k = plan_kind(w as i32, 0, "plans[0]").unwrap();
            assert_eq!(k.label(), label);
            // The proto name is the label, upper-cased.
            let want = format!("PLAN_KIND_{}", label.to_uppercase().replace('-', "_"));
            assert_eq!(w.as_str_name(), want);
            // A command on a plan that is not a command is refused.
            let e = plan_kind(w as i32, wire::PlanCommand::Restart as i32, "plans[0]");
            assert!(e.unwrap_err().to_string().starts_with("plans[0].command: "));
        }
        let commands = [
            (wire::PlanCommand::Install, CommandKind::Install),
            (wire::PlanCommand::Uninstall, CommandKind::Uninstall),
            (wire::PlanCommand::EnforceConfig, CommandKind::EnforceConfig),
            (
                wire::PlanCommand::EnforceConfigAndVersion,
                CommandKind::EnforceConfigAndVersion,
            ),
            (wire::PlanCommand::Restart, CommandKind::Restart),
        ];
        for (w, c) in commands {
            let k = plan_kind(wire::PlanKind::Command as i32, w as i32, "p").unwrap();
            assert_eq!(k, PlanKind::Command(c));
            assert_eq!(k.label(), "command");
            let want = format!(
                "PLAN_COMMAND_{}",
                c.label().to_uppercase().replace('-', "_")
            );
            assert_eq!(w.as_str_name(), want);
        }
        assert!(PlanKind::Command(CommandKind::Uninstall).is_uninstall());
        assert!(PlanKind::Uninstall.is_uninstall());
        assert!(PlanKind::Command(CommandKind::Restart).is_restart());
        assert!(!PlanKind::Install.is_restart());
    }

    #[test]
    fn unknown_or_unset_values_are_refused_naming_the_field() {
        let cmd = wire::PlanKind::Command as i32;
        let cases = [
            (
                plan_kind(0, 0, "plans[1]"),
                "plans[1].kind: PLAN_KIND_UNSPECIFIED",
            ),
            (
                plan_kind(42, 0, "plans[1]"),
                "plans[1].kind: unknown PlanKind value 42",
            ),
            (
                plan_kind(cmd, 0, "plans[1]"),
                "plans[1].command: PLAN_COMMAND_UNSPECIFIED",
            ),
            (
                plan_kind(cmd, -3, "plans[1]"),
                "plans[1].command: unknown PlanCommand value -3",
            ),
        ];
        for (got, want) in cases {
            let e = got.unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
        }
        let e = plan_status(9, "plans[0].status").unwrap_err().to_string();
        assert_eq!(e, "plans[0].status: unknown PlanStatus value 9");
        assert!(plan_status(0, "s").is_err());
        let e = task_state(i32::MIN, "plans[0].tasks[2].state").unwrap_err();
        assert!(
            e.to_string()
                .starts_with("plans[0].tasks[2].state: unknown"),
            "{e}"
        );
        assert!(task_state(0, "s").is_err());
        // A whole plan names the task at fault.
        let p = AgentPlan {
            id: "p-1-0".into(),
            kind: wire::PlanKind::Install as i32,
            status: wire::PlanStatus::Issued as i32,
            tasks: vec![
                wire::PlanTask {
                    name: "fetch".into(),
                    state: wire::TaskState::Succeeded as i32,
                    attempt: 1,
                },
                wire::PlanTask {
                    name: "verify".into(),
                    state: 77,
                    attempt: 0,
                },
            ],
            ..Default::default()
        };
        let e = plan(&p, &[], "plans[4]").unwrap_err().to_string();
        assert_eq!(e, "plans[4].tasks[1].state: unknown TaskState value 77");
    }

    #[test]
    fn states_and_statuses_map_both_ways() {
        for s in [
            TaskState::Pending,
            TaskState::Running,
            TaskState::Succeeded,
            TaskState::Failed,
        ] {
            assert_eq!(task_state(task_state_to_wire(s) as i32, "s"), Ok(s));
            let want = format!("TASK_STATE_{}", s.as_str().to_uppercase());
            assert_eq!(task_state_to_wire(s).as_str_name(), want);
        }
        for s in [
            PlanStatus::Issued,
            PlanStatus::Running,
            PlanStatus::Succeeded,
            PlanStatus::Failed,
            PlanStatus::Cancelled,
        ] {
            let name = format!("PLAN_STATUS_{}", s.as_str().to_uppercase());
            let w = wire::PlanStatus::from_str_name(&name).unwrap();
            assert_eq!(plan_status(w as i32, "s"), Ok(s));
        }
        for h in [Health::Unknown, Health::Healthy, Health::Error] {
            let want = format!("HEALTH_{}", h.as_str().to_uppercase());
            assert_eq!(health_to_wire(h).as_str_name(), want);
        }
        let r = PendingReport {
            plan_id: "p-1-0".into(),
            task: "start".into(),
            attempt: 2,
            state: ReportedState::Failed,
            output: String::new(),
            failure: None,
        };
        let w = task_report("prod", &r);
        assert_eq!(w.state, wire::TaskState::Failed as i32);
        assert_eq!(w.request_id, "task:p-1-0:start:2:failed");
    }

    #[test]
    fn refused_reports_are_read_with_their_reasons() {
        let reply = wire::AgentReply {
            refused: vec![
                wire::RefusedReport {
                    position: 1,
                    plan_id: "p-1-0".into(),
                    task: "stop".into(),
                    reason: wire::ReportRefusal::PlanNotFound as i32,
                    ..Default::default()
                },
                wire::RefusedReport {
                    reason: 12,
                    ..Default::default()
                },
                wire::RefusedReport::default(),
            ],
            ..Default::default()
        };
        let got = refused(&reply);
        assert_eq!(got[0].as_ref().unwrap().reason, Refusal::PlanNotFound);
        assert_eq!(got[0].as_ref().unwrap().position, 1);
        assert_eq!(
            got[1].as_ref().unwrap_err().to_string(),
            "refused[1].reason: unknown ReportRefusal value 12"
        );
        assert_eq!(got[2].as_ref().unwrap().reason, Refusal::Unattributed);
        assert!(refused(&wire::AgentReply::default()).is_empty());
    }
}

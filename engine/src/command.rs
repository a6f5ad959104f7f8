//! Commands: the only way the replicated state changes. Each is one Raft entry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use semver::Version;

use crate::artifact::{ArtifactLocation, Availability};
use crate::entity::{EntityKind, Health, SecretValue};
use crate::plan::{EmergencyCommand, TaskReport};
use crate::suppression::Scope;
use crate::TimestampMs;

/// One Raft entry's payload: a command, the leader's clock when it proposed it, and an optional
/// idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    /// What to do.
    pub command: Command,
    /// Wall-clock time stamped by the proposing leader; the only time apply ever sees.
    pub time_ms: TimestampMs,
    /// A client-chosen key: a second request with the same key returns the first one's
    /// result and changes nothing.
    pub request_id: Option<String>,
}

/// A maintenance window as the user writes it; parsed on apply so a bad one is refused with
/// the field named.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WindowSpec {
    /// `all-time` or ranges like `MONDAY/22:00-TUESDAY/06:00`.
    pub spec: String,
    /// IANA zone, e.g. `America/New_York`.
    pub time_zone: String,
}

/// A change to a maintenance window setting: set it, or remove it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum WindowChange {
    /// Use this window.
    Set(WindowSpec),
    /// No window of its own any more.
    Remove,
}

impl From<Option<WindowSpec>> for WindowChange {
    fn from(w: Option<WindowSpec>) -> Self {
        w.map_or(WindowChange::Remove, WindowChange::Set)
    }
}

/// Changes to an environment's settings; `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnvironmentSettingsPatch {
    /// Set or remove the window.
    pub maintenance_window: Option<WindowChange>,
    /// `suppress-deployment-after-num-autosuppressions`.
    pub autosuppression_threshold: Option<u32>,
    /// Duration of a failed plan's suppression.
    pub auto_suppression_ms: Option<TimestampMs>,
    /// `override-product-maintenance-windows`.
    pub override_product_maintenance_windows: Option<bool>,
    /// `require-maintenance-windows-for-no-downtime-recalled-release-roll-offs`.
    pub require_windows_for_recall_roll_offs: Option<bool>,
}

/// Changes to an entity's management settings; `None` leaves a setting as it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EntitySettingsPatch {
    /// The release channel to follow.
    pub release_channel: Option<String>,
    /// Replaces the dependency groups.
    pub dependency_groups: Option<Vec<String>>,
    /// Replaces the ignored dependencies (product ids).
    pub ignored_dependencies: Option<Vec<String>>,
    /// Set or remove the entity's window.
    pub maintenance_window: Option<WindowChange>,
    /// Mark (or unmark) the entity for uninstallation.
    pub marked_for_uninstall: Option<bool>,
}

/// What a cancel applies to (SPEC P12).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CancelTarget {
    /// Every active plan of an environment.
    Environment(String),
    /// The active plan of an entity.
    Entity(String),
    /// One plan, by id.
    Plan(String),
}

/// A change to the replicated state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create an environment.
    CreateEnvironment {
        /// A DNS label.
        name: String,
        /// Free text.
        description: String,
    },
    /// Delete an environment that has no entities.
    DeleteEnvironment {
        /// Its name.
        name: String,
    },
    /// Create an entity in an existing environment.
    CreateEntity {
        /// The environment's name.
        environment: String,
        /// Helm chart or Terraform module.
        kind: EntityKind,
        /// A DNS label, unique per environment and kind.
        name: String,
        /// `group:name`.
        product_id: String,
        /// Required for helm charts, refused for terraform modules.
        k8s_namespace: Option<String>,
        /// Optional, terraform modules only.
        account_id: Option<String>,
        /// Defaults to `RELEASE`.
        release_channel: Option<String>,
    },
    /// Change an environment's settings.
    SetEnvironmentSettings {
        /// The environment.
        environment: String,
        /// What to change.
        patch: EnvironmentSettingsPatch,
    },
    /// Add or replace an artifact registry of an environment (SPEC C9).
    SetRegistry {
        /// The environment.
        environment: String,
        /// The registry's name.
        name: String,
        /// `http(s)://…` or `file:///…`.
        url: String,
        /// `expected` or `not-expected`.
        hub_access: String,
        /// PEM CA bundle trusted for this `https` registry besides the system's roots.
        #[serde(default)]
        ca_pem: Option<String>,
        /// Skip the `https` registry's certificate verification (explicit and shown in red;
        /// excludes `ca_pem`).
        #[serde(default)]
        insecure_skip_verify: bool,
    },
    /// Remove an artifact registry.
    RemoveRegistry {
        /// The environment.
        environment: String,
        /// The registry's name.
        name: String,
    },
    /// Change an entity's management settings.
    SetEntitySettings {
        /// The entity id.
        entity: String,
        /// What to change.
        patch: EntitySettingsPatch,
    },
    /// Set (or, with `None`, remove) the config overrides that apply from `version` on.
    SetConfigOverrides {
        /// The entity id.
        entity: String,
        /// The lowest version they apply to (`0.0.0` for all).
        version: String,
        /// YAML text.
        config: Option<String>,
    },
    /// Set (or, with `None`, remove) a secret.
    SetSecret {
        /// The entity id.
        entity: String,
        /// The secret's name.
        name: String,
        /// Its value.
        value: Option<SecretValue>,
    },
    /// Create a product.
    CreateProduct {
        /// `group:name`.
        product_id: String,
        /// Free text.
        description: String,
    },
    /// Set (or remove) a product's maintenance window.
    SetProductWindow {
        /// `group:name`.
        product_id: String,
        /// The window; `None` removes it.
        window: Option<WindowSpec>,
    },
    /// Publish a release from its manifest (YAML text, validated on apply).
    PublishRelease {
        /// The manifest.
        manifest: String,
    },
    /// Create a custom release channel.
    CreateChannel {
        /// Upper-case name.
        name: String,
        /// Free text.
        description: String,
    },
    /// Add a release to (or remove it from) a custom channel.
    SetReleaseChannel {
        /// The custom channel.
        channel: String,
        /// `group:name`.
        product_id: String,
        /// The version.
        version: String,
        /// Add (true) or remove (false).
        member: bool,
    },
    /// Recall a version or an inclusive range of versions of a product.
    RecallReleases {
        /// `group:name`.
        product_id: String,
        /// Lowest version.
        from: String,
        /// Highest version (equal to `from` for one version).
        to: String,
        /// Why.
        reason: String,
    },
    /// Withdraw a recall.
    DeleteRecall {
        /// `r-<index>`.
        id: String,
    },
    /// Add a one-off maintenance-window override (SPEC C5).
    AddWindowOverride {
        /// Entity or environment.
        scope: Scope,
        /// Start (inclusive).
        start_ms: TimestampMs,
        /// End (exclusive).
        end_ms: TimestampMs,
        /// Required.
        reason: String,
        /// Who.
        actor: String,
    },
    /// Remove a window override.
    RemoveWindowOverride {
        /// Entity or environment.
        scope: Scope,
        /// `o-<index>`.
        id: String,
    },
    /// Create a manual suppression window (SPEC C8, P12).
    CreateSuppression {
        /// Entity or environment.
        scope: Scope,
        /// Start; `None` is the entry time.
        start_ms: Option<TimestampMs>,
        /// End (exclusive).
        end_ms: TimestampMs,
        /// Why; required.
        reason: String,
        /// Also cancel the active plans in scope.
        cancel_active_plans: bool,
        /// Who.
        actor: String,
    },
    /// Delete a suppression window (manual or automatic).
    DeleteSuppression {
        /// `s-<index>`.
        id: String,
        /// Who.
        actor: String,
    },
    /// Publish a module definition as the module's next version (SPEC M8).
    PublishModule {
        /// The file it came from (`<name>.yml`), checked against `name` when given.
        file_name: Option<String>,
        /// The definition.
        yaml: String,
    },
    /// Delete a module that has no installations (SPEC M16).
    DeleteModule {
        /// The module's name.
        name: String,
    },
    /// Install a module in an environment, creating or adopting its entities (SPEC M9, M10).
    InstallModule {
        /// The environment.
        environment: String,
        /// The module's name.
        module: String,
        /// The version (the latest when `None`).
        version: Option<String>,
        /// Installer values.
        variables: BTreeMap<String, String>,
        /// Who.
        actor: String,
    },
    /// Set (`Some`) or clear (`None`) installer values of an installation; they apply at its
    /// next update.
    SetModuleVariables {
        /// `<environment>/<module>`.
        installation: String,
        /// The values.
        variables: BTreeMap<String, Option<String>>,
    },
    /// Pause or resume an installation's module updates (SPEC M15).
    SetModuleUpdatesPaused {
        /// `<environment>/<module>`.
        installation: String,
        /// Pause (`true`) or resume.
        paused: bool,
        /// Who.
        actor: String,
    },
    /// Remove an installation; its entities stay installed, unmanaged (SPEC M16).
    UnlinkModule {
        /// `<environment>/<module>`.
        installation: String,
        /// Who.
        actor: String,
    },
    /// Approve a change request: the installation is updated at once (SPEC M9).
    ApproveChangeRequest {
        /// `cr-<index>`.
        id: String,
        /// Who.
        actor: String,
    },
    /// Reject a change request.
    RejectChangeRequest {
        /// `cr-<index>`.
        id: String,
        /// Who.
        actor: String,
        /// Why.
        reason: String,
    },
    /// Create or update a canary from its resource (SPEC K1).
    ApplyCanary {
        /// The environment, when the resource's `metadata.namespace` does not name it.
        environment: Option<String>,
        /// The resource (YAML).
        yaml: String,
    },
    /// Delete a canary (`revertOnDeletion` restores the original routing).
    DeleteCanary {
        /// `<environment>/<name>`.
        id: String,
    },
    /// One analysis tick of a canary, proposed by the leader with what it observed; applied
    /// only while the canary is still at `step` (SPEC K9: at most once across failovers).
    CanaryTick {
        /// `<environment>/<name>`.
        id: String,
        /// The step the tick was planned at.
        step: u64,
        /// Revision, readiness, webhook answers, metric values.
        input: crate::canary::TickInput,
    },
    /// An operator's promote, abort or retry of a canary's revision (SPEC K10).
    CanaryManual {
        /// `<environment>/<name>`.
        id: String,
        /// What to do.
        action: crate::canary::Manual,
        /// Who (audited).
        actor: String,
    },
    /// Cancel active plans (SPEC P12), optionally with a short manual suppression.
    CancelPlans {
        /// What to cancel.
        target: CancelTarget,
        /// Why.
        reason: String,
        /// If set, a manual suppression of this length on the same scope.
        suppress_for_ms: Option<TimestampMs>,
        /// Who.
        actor: String,
    },
    /// Issue a break-glass command (SPEC P1, C2): bypasses every constraint.
    IssueCommand {
        /// The entity id.
        entity: String,
        /// What to do.
        command: EmergencyCommand,
        /// Why; required.
        reason: String,
        /// Who.
        actor: String,
    },
    /// Re-evaluate entities at the entry's time and issue the plans that pass (the leader
    /// proposes this; apply re-validates, so a stale or duplicate proposal issues nothing).
    Evaluate {
        /// Entity ids.
        entities: Vec<String>,
        /// Artifact checks the leader observed (SPEC C9); a location missing here is pending.
        artifacts: Vec<(ArtifactLocation, Availability)>,
    },
    /// Forget ended suppression windows and reconcile environment thresholds (SPEC P9).
    ExpireSuppressions,
    /// An agent's report of its entities' state.
    ReportEntityStates {
        /// The agent's environment: every entity must be in it.
        environment: String,
        /// The reports.
        states: Vec<EntityReport>,
    },
    /// Several task reports in one entry (an agent's outbox drained at once). Each report is
    /// applied on its own, as `ReportTask` would; a refused one is skipped and named in the
    /// output, the others still apply.
    ReportTasks {
        /// The agent's environment: every plan must be in it.
        environment: String,
        /// The reports, in the order the agent produced them.
        reports: Vec<TaskReport>,
    },
    /// What an agent observes of its environment's canaries: workload revisions, readiness
    /// and proxy metrics (SPEC K6), stored for the leader's next tick.
    ReportCanaries {
        /// The agent's environment: every canary must be in it (others are skipped).
        environment: String,
        /// Canary id (`<environment>/<name>`) and what was observed.
        observations: Vec<(String, crate::canary::CanaryObservation)>,
    },
    /// An agent's report about a task of a plan (idempotent).
    ReportTask {
        /// The agent's environment: the plan must be in it.
        environment: String,
        /// The report.
        report: TaskReport,
    },
    /// Set a cluster key once ([`crate::cluster_key`]): the leader proposes it with bytes
    /// from the OS's CSPRNG when it finds the key missing; refused once the key is set.
    SetClusterKey {
        /// One of [`crate::cluster_key::KNOWN_KEYS`].
        name: String,
        /// The key.
        key: crate::cluster_key::SecretKey,
    },
}

/// One entity's reported state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntityReport {
    /// The entity id.
    pub entity: String,
    /// Deployed version, `None` when not installed.
    pub version: Option<Version>,
    /// Health.
    pub health: Health,
    /// SHA-256 of the applied config text, if known.
    pub config_sha256: Option<String>,
    /// The applied secrets revision, if known.
    pub secrets_revision: Option<u64>,
    /// Free text (why unhealthy).
    pub message: String,
}

impl EntityReport {
    /// Whether applying this report would change `reported` (a report that changes nothing
    /// writes no record and fires no trigger). Absent `config_sha256` and `secrets_revision`
    /// leave the recorded values as they are.
    pub fn changes(&self, reported: &crate::entity::ReportedState) -> bool {
        reported.version != self.version
            || reported.health != self.health
            || self
                .config_sha256
                .as_ref()
                .is_some_and(|sha| reported.config_sha256.as_ref() != Some(sha))
            || self
                .secrets_revision
                .is_some_and(|rev| reported.secrets_revision != rev)
            || reported.message != self.message
    }
}

impl Command {
    /// A short name for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Command::CreateEnvironment { .. } => "create_environment",
            Command::DeleteEnvironment { .. } => "delete_environment",
            Command::CreateEntity { .. } => "create_entity",
            Command::SetEnvironmentSettings { .. } => "set_environment_settings",
            Command::SetRegistry { .. } => "set_registry",
            Command::RemoveRegistry { .. } => "remove_registry",
            Command::SetEntitySettings { .. } => "set_entity_settings",
            Command::SetConfigOverrides { .. } => "set_config_overrides",
            Command::SetSecret { .. } => "set_secret",
            Command::CreateProduct { .. } => "create_product",
            Command::SetProductWindow { .. } => "set_product_window",
            Command::PublishRelease { .. } => "publish_release",
            Command::CreateChannel { .. } => "create_channel",
            Command::SetReleaseChannel { .. } => "set_release_channel",
            Command::RecallReleases { .. } => "recall_releases",
            Command::DeleteRecall { .. } => "delete_recall",
            Command::AddWindowOverride { .. } => "add_window_override",
            Command::RemoveWindowOverride { .. } => "remove_window_override",
            Command::CreateSuppression { .. } => "create_suppression",
            Command::DeleteSuppression { .. } => "delete_suppression",
            Command::CancelPlans { .. } => "cancel_plans",
            Command::ApplyCanary { .. } => "apply_canary",
            Command::DeleteCanary { .. } => "delete_canary",
            Command::CanaryManual { .. } => "canary_manual",
            Command::CanaryTick { .. } => "canary_tick",
            Command::PublishModule { .. } => "publish_module",
            Command::DeleteModule { .. } => "delete_module",
            Command::InstallModule { .. } => "install_module",
            Command::SetModuleVariables { .. } => "set_module_variables",
            Command::SetModuleUpdatesPaused { .. } => "set_module_updates_paused",
            Command::UnlinkModule { .. } => "unlink_module",
            Command::ApproveChangeRequest { .. } => "approve_change_request",
            Command::RejectChangeRequest { .. } => "reject_change_request",
            Command::IssueCommand { .. } => "issue_command",
            Command::Evaluate { .. } => "evaluate",
            Command::ExpireSuppressions => "expire_suppressions",
            Command::ReportEntityStates { .. } => "report_entity_states",
            Command::ReportTask { .. } => "report_task",
            Command::ReportTasks { .. } => "report_tasks",
            Command::ReportCanaries { .. } => "report_canaries",
            Command::SetClusterKey { .. } => "set_cluster_key",
        }
    }
}

impl Command {
    /// Records `who` as the command's actor, wherever the command has one. The node calls it
    /// with the caller's verified identity before proposing, so the actor in audit records,
    /// plans and emergency commands is never what a client typed. Exhaustive: a new command
    /// must say whether it has an actor.
    pub fn stamp_actor(&mut self, who: &str) {
        let actor = match self {
            Command::AddWindowOverride { actor, .. }
            | Command::CreateSuppression { actor, .. }
            | Command::DeleteSuppression { actor, .. }
            | Command::InstallModule { actor, .. }
            | Command::SetModuleUpdatesPaused { actor, .. }
            | Command::UnlinkModule { actor, .. }
            | Command::ApproveChangeRequest { actor, .. }
            | Command::RejectChangeRequest { actor, .. }
            | Command::CanaryManual { actor, .. }
            | Command::CancelPlans { actor, .. }
            | Command::IssueCommand { actor, .. } => actor,
            Command::CreateEnvironment { .. }
            | Command::DeleteEnvironment { .. }
            | Command::CreateEntity { .. }
            | Command::SetEnvironmentSettings { .. }
            | Command::SetRegistry { .. }
            | Command::RemoveRegistry { .. }
            | Command::SetEntitySettings { .. }
            | Command::SetConfigOverrides { .. }
            | Command::SetSecret { .. }
            | Command::CreateProduct { .. }
            | Command::SetProductWindow { .. }
            | Command::PublishRelease { .. }
            | Command::CreateChannel { .. }
            | Command::SetReleaseChannel { .. }
            | Command::RecallReleases { .. }
            | Command::DeleteRecall { .. }
            | Command::RemoveWindowOverride { .. }
            | Command::PublishModule { .. }
            | Command::DeleteModule { .. }
            | Command::SetModuleVariables { .. }
            | Command::ApplyCanary { .. }
            | Command::DeleteCanary { .. }
            | Command::CanaryTick { .. }
            | Command::Evaluate { .. }
            | Command::ExpireSuppressions
            | Command::ReportEntityStates { .. }
            | Command::ReportTask { .. }
            | Command::ReportTasks { .. }
            | Command::ReportCanaries { .. }
            | Command::SetClusterKey { .. } => return,
        };
        *actor = who.to_string();
    }
}

/// What a successful command produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum CommandOutput {
    /// Nothing to report beyond success (membership and blank entries too).
    Done,
    /// The environment was created.
    EnvironmentCreated(String),
    /// The environment was deleted.
    EnvironmentDeleted(String),
    /// The entity was created; its id.
    EntityCreated(String),
    /// Something was created or changed; its id and a one-line summary.
    Changed {
        /// The id of what was created or changed (plan, suppression, release, ...).
        id: String,
        /// For humans.
        summary: String,
    },
    /// An evaluation ran: the plans it issued.
    Evaluated {
        /// Ids of the plans issued.
        issued: Vec<String>,
    },
    /// A `ReportTasks` batch was applied: how many reports, and the refused ones.
    TasksReported {
        /// The agent's environment.
        environment: String,
        /// Reports applied.
        applied: u32,
        /// Reports refused, in batch order.
        refused: Vec<RefusedTaskReport>,
    },
}

/// One report of a `ReportTasks` batch that was refused (the others were applied).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedTaskReport {
    /// Its position in the batch.
    pub position: u32,
    /// The plan it named.
    pub plan_id: String,
    /// The task it named.
    pub task: String,
    /// Why it was refused.
    pub error: crate::error::CommandError,
}

impl CommandOutput {
    /// A one-line summary for clients.
    pub fn summary(&self) -> String {
        match self {
            CommandOutput::Done => String::new(),
            CommandOutput::EnvironmentCreated(n) => format!("environment {n} created"),
            CommandOutput::EnvironmentDeleted(n) => format!("environment {n} deleted"),
            CommandOutput::EntityCreated(id) => id.clone(),
            CommandOutput::Changed { summary, .. } => summary.clone(),
            CommandOutput::Evaluated { issued } => format!("{} plans issued", issued.len()),
            CommandOutput::TasksReported {
                applied, refused, ..
            } => {
                let mut summary = format!("{applied} reports applied");
                if !refused.is_empty() {
                    let each: Vec<String> = refused
                        .iter()
                        .map(|r| format!("{} {}: {}", r.plan_id, r.task, r.error))
                        .collect();
                    summary.push_str(&format!("; {} refused: {}", refused.len(), each.join("; ")));
                }
                summary
            }
        }
    }
}

impl std::fmt::Display for Request {
    /// Names the command only: payloads may later carry secrets, which never reach logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}@{}", self.command.kind(), self.time_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::entity::{Health, ReportedState};

    #[test]
    fn a_report_changes_only_what_it_states() {
        let reported = ReportedState {
            version: Some(Version::new(1, 0, 0)),
            health: Health::Healthy,
            config_sha256: Some("abc".into()),
            secrets_revision: 3,
            ..ReportedState::default()
        };
        let same = EntityReport {
            entity: "e".into(),
            version: Some(Version::new(1, 0, 0)),
            health: Health::Healthy,
            config_sha256: None,
            secrets_revision: None,
            message: String::new(),
        };
        assert!(
            !same.changes(&reported),
            "absent fields keep what is recorded"
        );
        let sha = EntityReport {
            config_sha256: Some("abc".into()),
            secrets_revision: Some(3),
            ..same.clone()
        };
        assert!(!sha.changes(&reported));
        for changed in [
            EntityReport {
                version: None,
                ..same.clone()
            },
            EntityReport {
                health: Health::Error,
                ..same.clone()
            },
            EntityReport {
                config_sha256: Some("abd".into()),
                ..same.clone()
            },
            EntityReport {
                secrets_revision: Some(4),
                ..same.clone()
            },
            EntityReport {
                message: "crashed".into(),
                ..same.clone()
            },
        ] {
            assert!(changed.changes(&reported), "{changed:?}");
        }
    }
}

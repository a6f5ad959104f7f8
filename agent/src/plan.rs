//! Plans as the agent receives them, and what running a task produces.

use serde::{Deserialize, Serialize};

/// One artifact to fetch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    /// Absolute (`http(s)://`, `file://`) or relative to the environment's first registry.
    pub uri: String,
    /// Lowercase hex SHA-256.
    pub sha256: String,
}

/// An environment's artifact registry.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Registry {
    /// Its name.
    pub name: String,
    /// `http://…`, `https://…` or `file:///…` base URL; it may carry credentials.
    pub url: String,
    /// PEM CA bundle trusted for an https registry besides the system's roots.
    #[serde(default)]
    pub ca_pem: Option<String>,
    /// Skip the https registry's certificate verification.
    #[serde(default)]
    pub insecure_skip_verify: bool,
}

impl std::fmt::Debug for Registry {
    /// The URL without credentials; the CA bundle by size.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("name", &self.name)
            .field("url", &hub_wire::url_credentials::redact_url(&self.url))
            .field("ca_pem", &self.ca_pem.as_ref().map(String::len))
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .finish()
    }
}

impl Registry {
    /// How its server's certificate is verified.
    pub fn trust(&self) -> hub_http::Trust {
        match (&self.ca_pem, self.insecure_skip_verify) {
            (_, true) => hub_http::Trust::SkipVerification,
            (Some(pem), false) => hub_http::Trust::SystemRootsAnd {
                ca_pem: pem.clone(),
            },
            (None, false) => hub_http::Trust::SystemRoots,
        }
    }
}

/// What a plan does: the engine's `PlanKind` without its payloads (the plan's other fields
/// carry what the agent needs). On the wire, proto `PlanKind` and `PlanCommand`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PlanKind {
    /// First installation of the product.
    Install,
    /// Same version, new config overrides.
    ConfigChange,
    /// Upgrade or downgrade.
    VersionChange,
    /// Remove the product.
    Uninstall,
    /// New secret values.
    SecretsChange,
    /// Back to the version and config before a failed plan.
    Rollback,
    /// Off a recalled release.
    RecallRollOff,
    /// A break-glass command.
    Command(CommandKind),
    /// One committed canary step ([`PlanSpec::canary`] holds the desired state).
    CanaryStep,
}

impl PlanKind {
    /// The engine's label: `install`, `config-change`, `version-change`, `uninstall`,
    /// `secrets-change`, `rollback`, `recall-roll-off`, `command`, `canary-step`.
    pub fn label(self) -> &'static str {
        match self {
            PlanKind::Install => "install",
            PlanKind::ConfigChange => "config-change",
            PlanKind::VersionChange => "version-change",
            PlanKind::Uninstall => "uninstall",
            PlanKind::SecretsChange => "secrets-change",
            PlanKind::Rollback => "rollback",
            PlanKind::RecallRollOff => "recall-roll-off",
            PlanKind::Command(_) => "command",
            PlanKind::CanaryStep => "canary-step",
        }
    }

    /// Whether the plan removes the product.
    pub fn is_uninstall(self) -> bool {
        matches!(
            self,
            PlanKind::Uninstall | PlanKind::Command(CommandKind::Uninstall)
        )
    }

    /// Whether the plan restarts what runs instead of deploying a target.
    pub fn is_restart(self) -> bool {
        self == PlanKind::Command(CommandKind::Restart)
    }
}

impl std::fmt::Display for PlanKind {
    /// The label.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.label())
    }
}

/// A break-glass command: the engine's `EmergencyCommand` without its version (the plan's
/// `to_version` carries it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum CommandKind {
    /// Install a version.
    Install,
    /// Remove the product.
    Uninstall,
    /// Re-apply the config overrides of the current version.
    EnforceConfig,
    /// Move to a version with its config overrides.
    EnforceConfigAndVersion,
    /// Restart the workload as it is.
    Restart,
}

impl CommandKind {
    /// The engine's label: `install`, `uninstall`, `enforce-config`,
    /// `enforce-config-and-version`, `restart`.
    pub fn label(self) -> &'static str {
        match self {
            CommandKind::Install => "install",
            CommandKind::Uninstall => "uninstall",
            CommandKind::EnforceConfig => "enforce-config",
            CommandKind::EnforceConfigAndVersion => "enforce-config-and-version",
            CommandKind::Restart => "restart",
        }
    }
}

/// A plan to execute (from `Agent.FetchPlans`). Secret values are held in memory only and
/// never written to the agent's journal or logs.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanSpec {
    /// Plan id.
    pub id: String,
    /// Entity id (`eid:<env>:<kind>:<name>`).
    pub entity: String,
    /// What it does.
    pub kind: PlanKind,
    /// Version before (may be empty).
    pub from_version: String,
    /// Version after (empty for uninstall).
    pub to_version: String,
    /// Rendered config overrides (YAML text).
    pub config: String,
    /// Secrets revision the plan applies.
    pub secrets_revision: u64,
    /// Secret values by name (never persisted by the agent).
    #[serde(skip)]
    pub secrets: Vec<(String, String)>,
    /// Artifacts of the target release.
    pub artifacts: Vec<Artifact>,
    /// The environment's registries.
    pub registries: Vec<Registry>,
    /// Task names in order.
    pub tasks: Vec<String>,
    /// For kind `canary-step`: the desired state after the step.
    #[serde(default)]
    pub canary: Option<CanaryStepSpec>,
}

/// One workload revision of a canary (proto `CanaryWorkload`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryWorkloadSpec {
    /// The revision hash (version, rendered config, tracked secrets).
    pub revision: String,
    /// The version to run.
    pub version: String,
    /// The hub's rendered config (YAML); the agent sets its top-level `port`.
    pub config: String,
    /// Artifacts of the version.
    pub artifacts: Vec<Artifact>,
    /// Secrets revision of the workload.
    pub secrets_revision: u64,
}

/// One header condition of an A/B rule (proto `CanaryHeaderMatch`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryHeaderMatchSpec {
    /// Header name.
    pub name: String,
    /// `exact`, `prefix` or `regex`.
    pub op: String,
    /// Value compared with.
    pub value: String,
}

/// The desired state after one committed canary step (proto `CanaryStep`). Carries no
/// secret values (those are the plan's).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryStepSpec {
    /// `<environment>/<name>`.
    pub canary: String,
    /// The service name (`<svc>`).
    pub service: String,
    /// The port of the `<svc>` address.
    pub port: u32,
    /// The status step the plan brings the agent to.
    pub step: u64,
    /// The phase after the step.
    pub phase: String,
    /// The primary workload; `None` before initialisation.
    pub primary: Option<CanaryWorkloadSpec>,
    /// The canary workload; `None` when scaled to zero.
    pub canary_workload: Option<CanaryWorkloadSpec>,
    /// Percent of `<svc>` traffic routed to the canary.
    pub canary_weight: u32,
    /// Whether requests matching `match_rules` go to the canary (A/B).
    pub match_routing: bool,
    /// A/B rules: each a list of header conditions that must all hold.
    pub match_rules: Vec<Vec<CanaryHeaderMatchSpec>>,
    /// Run the entity's original workload again and drop the canary's workloads and proxy.
    pub restore_original: bool,
    /// Windows the proxy metrics are reported for, in ms.
    pub metric_windows_ms: Vec<i64>,
    /// The fresh baseline (issue 20): the primary's revision, run beside the canary with the
    /// canary's weight out of the primary's share; `None` when none runs.
    pub baseline: Option<CanaryWorkloadSpec>,
    /// The built-in load tester's `hey` loads to keep running after this step (issue 52
    /// item 4; empty unless the canary is progressing).
    #[serde(default)]
    pub loads: Vec<LoadSpec>,
}

/// One `hey` load (proto `CanaryLoad`; docs/CANARY.md "The built-in load tester").
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LoadSpec {
    /// The webhook's name.
    pub name: String,
    /// The URL (`<svc>`, `<svc>-primary`, `<svc>-canary` hosts are the proxy's addresses).
    pub url: String,
    /// `-z` in ms (0: `requests` requests).
    pub duration_ms: i64,
    /// `-n`.
    pub requests: u64,
    /// `-c`.
    pub workers: u32,
    /// `-q` per worker, thousandths of a request per second (0: unlimited).
    pub rate_milli_per_worker: u64,
    /// `-m`.
    pub method: String,
    /// `-H` and friends.
    pub headers: Vec<(String, String)>,
    /// `-d`.
    pub body: String,
    /// `-host`.
    pub host: String,
    /// `-t` in ms.
    pub timeout_ms: i64,
}

impl std::fmt::Debug for PlanSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanSpec")
            .field("id", &self.id)
            .field("entity", &self.entity)
            .field("kind", &self.kind)
            .field("to_version", &self.to_version)
            .field("secrets", &self.secrets.len())
            .field("canary", &self.canary.as_ref().map(|c| (&c.canary, c.step)))
            .finish_non_exhaustive()
    }
}

impl PlanSpec {
    /// Whether the plan removes the product.
    pub fn is_uninstall(&self) -> bool {
        self.kind.is_uninstall()
    }
}

/// A task that finished well.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskOutcome {
    /// Human-readable output for the plan record.
    pub output: String,
}

/// A task that failed: what an operator needs to tell which stage failed (SPEC P6).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{stage}: {message}")]
pub struct TaskFailure {
    /// `fetch`, `verify`, `configure`, `start`, `readiness`, `stop`, `remove`.
    pub stage: String,
    /// One line.
    pub message: String,
    /// What never became ready (e.g. `eid:…:http http://127.0.0.1:18080/healthz`).
    pub not_ready: Vec<String>,
    /// Validation errors (e.g. of the config).
    pub validation_errors: Vec<String>,
    /// Output collected before the failure.
    pub output: String,
}

impl TaskFailure {
    /// A failure at `stage` with `message`.
    pub fn new(stage: &str, message: impl Into<String>) -> Self {
        Self {
            stage: stage.to_string(),
            message: message.into(),
            ..Default::default()
        }
    }
}

/// Reported health of an entity (the hub's own type).
pub use hub_wire::entity_state::Health;

/// What a driver observes of one entity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observed {
    /// Entity id.
    pub entity: String,
    /// Deployed version (`None` when not installed).
    pub version: Option<String>,
    /// Health.
    pub health: Health,
    /// SHA-256 of the applied config text, if known.
    pub config_sha256: Option<String>,
    /// Applied secrets revision, if known.
    pub secrets_revision: Option<u64>,
    /// Why unhealthy.
    pub message: String,
}

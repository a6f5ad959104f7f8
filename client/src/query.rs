//! The queries a client asks a hub (`Hub.Query`), as they travel: JSON such as
//! `{"query": "explain", "entity": "prod/web"}`.
//!
//! The node answers each from its state (`hub-node`'s `query.rs`); who may ask which, and
//! where a query is answered, is the node's business. A field a client leaves out takes its
//! default, and an unknown field is refused, so a misspelled filter is an error rather than
//! a query that silently filters nothing.

use serde::{Deserialize, Serialize};

fn is_false(b: &bool) -> bool {
    !*b
}

/// One query. JSON form: `{"query": "explain", "entity": "prod/web"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "query", rename_all = "snake_case", deny_unknown_fields)]
pub enum Query {
    /// Resolves an entity reference (`eid:…`, `ENV/NAME` or `ENV/KIND/NAME`) to its id.
    ResolveEntity {
        /// The reference.
        entity: String,
    },
    /// One entity's settings and reported state.
    Entity {
        /// The reference.
        entity: String,
    },
    /// SPEC P3's four questions for one entity, with every constraint.
    Explain {
        /// The reference.
        entity: String,
    },
    /// An entity's activity.
    Activity {
        /// The reference.
        entity: String,
    },
    /// Plans, newest first.
    Plans {
        /// Only this environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
        /// Only this entity (a reference).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        entity: Option<String>,
        /// Only issued or running plans.
        #[serde(default, skip_serializing_if = "is_false")]
        active: bool,
        /// At most this many (default 100).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
    },
    /// One plan.
    Plan {
        /// Its id.
        id: String,
    },
    /// Products.
    Products,
    /// Releases of a product (or all), newest first.
    Releases {
        /// `group:name`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        product: Option<String>,
    },
    /// Custom channels (built-ins are listed too).
    Channels,
    /// Recalls.
    Recalls,
    /// Suppression windows.
    Suppressions {
        /// Only this environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
    },
    /// An environment's settings.
    EnvironmentSettings {
        /// Its name.
        environment: String,
    },
    /// Audit entries, newest first.
    Audit {
        /// At most this many (default 100).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        limit: Option<usize>,
        /// Only this actor (`operator/alice`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        actor: Option<String>,
        /// Only writes whose target is this environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
        /// Only this command (`PutSecret`) or legacy action (`suppression`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
        /// Only entries at or after this time (milliseconds since the epoch).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        since_ms: Option<i64>,
    },
    /// Every module with its versions and installations.
    Modules,
    /// One module version (the latest when none is named), with its YAML.
    Module {
        /// The module's name.
        name: String,
        /// The version.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        version: Option<String>,
    },
    /// Validates a definition as publishing would, without publishing (`--dry-run`).
    ModuleDryRun {
        /// The file name (checked against `name`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        file_name: Option<String>,
        /// The definition.
        yaml: String,
    },
    /// Module installations, optionally of one environment or module.
    ModuleInstallations {
        /// Only this environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
        /// Only this module.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        module: Option<String>,
    },
    /// One installation (`<environment>/<module>`) with its entities.
    ModuleInstallation {
        /// The installation id.
        id: String,
    },
    /// Change requests, optionally of one installation, open ones only with `open`.
    ChangeRequests {
        /// Only this installation.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        installation: Option<String>,
        /// Only pending ones.
        #[serde(default, skip_serializing_if = "is_false")]
        open: bool,
    },
    /// One change request.
    ChangeRequest {
        /// `cr-…`.
        id: String,
    },
    /// Canaries, optionally of one environment (SPEC K7 listing).
    Canaries {
        /// Only this environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
    },
    /// One canary with its spec, status block and recent actions.
    Canary {
        /// `<environment>/<name>`.
        id: String,
    },
    /// Every environment's labels (issue 20).
    EnvironmentLabels,
    /// Rollout policies (issue 20), each with its waves.
    RolloutPolicies,
    /// One product's rollout policy with its YAML (any product of the policy's group).
    RolloutPolicy {
        /// `group:name`.
        product: String,
    },
    /// A release's rollout under its product's policy: waves, entities, what each runs,
    /// health, canary phase, soak and halt (`hubctl rollout status`).
    RolloutStatus {
        /// `group:name` (any product of the policy's group).
        product: String,
        /// The release.
        version: String,
    },
    /// Every role binding.
    RoleBindings,
    /// Every operator token: name, expiry, creator and roles, never its secret or hash.
    Tokens,
    /// Every revoked certificate (admins): serial, whom it names, why, who revoked it and
    /// when (`hubctl pki revoked`).
    RevokedCertificates,
    /// The hub's cluster-wide settings (issue 55: canary config tracking).
    ClusterSettings,
    /// Every approver group (issue 55).
    ApproverGroups,
    /// Every approval policy (issue 55).
    ApprovalPolicies,
    /// Window-exception requests (issue 55), optionally of one environment, pending ones only
    /// with `open`.
    WindowExceptions {
        /// Only those whose scope lies in this environment.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
        /// Only those still approvable.
        #[serde(default, skip_serializing_if = "is_false")]
        open: bool,
    },
    /// One window-exception request.
    WindowException {
        /// `wx-…`.
        id: String,
    },
    /// Flagger MetricTemplates (issue 52), optionally of one environment.
    MetricTemplates {
        /// Only this environment's.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        environment: Option<String>,
    },
    /// One MetricTemplate with its YAML.
    MetricTemplate {
        /// `<environment>/<name>`.
        id: String,
    },
}

//! What every command needs of its actor: the one table, an exhaustive `match` on
//! [`Command`] with no fallback arm, so a new command does not compile without its rule.

use crate::command::{CancelTarget, Command};
use crate::release::parse_manifest;
use crate::state::State;

use crate::role::Role;

/// Who may run a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// An operator holding `role` over the target.
    Role(Role, Target),
    /// The agent of this environment (its reports).
    Agent(String),
    /// A hub node: the leader's own decisions (evaluations, canary ticks, cluster keys, the
    /// cluster's feature level).
    Node,
    /// Someone a pending request's recorded policy counts as an approver (issue 55): the
    /// scope's approvers or a member of a group it requires ([`super::approver_places`]).
    Approver {
        /// The request.
        request: ApprovalTarget,
        /// Where it lies (for the audit and the refusal).
        target: Target,
        /// Who may approve it, for the refusal: `approver on prod or a member of group
        /// compliance`.
        who: String,
    },
}

/// A request that collects approvals.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApprovalTarget {
    /// A module change request, by id.
    ChangeRequest(String),
    /// A window-exception request, by id.
    WindowException(String),
}

impl std::fmt::Display for ApprovalTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ApprovalTarget::ChangeRequest(id) => write!(f, "change request {id}"),
            ApprovalTarget::WindowException(id) => write!(f, "window exception {id}"),
        }
    }
}

/// What a role must cover.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Nothing in particular: the role itself (unscoped roles, and admin-only commands).
    Cluster,
    /// One environment.
    Environment(String),
    /// One product (`group:name`).
    Product(String),
    /// Every one of these products (a rollout policy's group: what it decides moves them
    /// all). Never empty.
    Products(Vec<String>),
    /// A target the command names but the state does not hold (a missing entity, plan or
    /// change request): any binding of the role admits the command, which apply then
    /// refuses as not found.
    Unknown,
}

/// The environment of an entity id (`eid:<env>:<kind>:<name>`), or [`Target::Unknown`].
fn entity_env(id: &str) -> Target {
    match id
        .strip_prefix("eid:")
        .and_then(|rest| rest.split(':').next())
    {
        Some(env) if !env.is_empty() => Target::Environment(env.to_string()),
        _ => Target::Unknown,
    }
}

/// The environment of an id of the form `<env>/<name>` (canaries, installations).
fn prefixed_env(id: &str) -> Target {
    match id.split_once('/') {
        Some((env, _)) if !env.is_empty() => Target::Environment(env.to_string()),
        _ => Target::Unknown,
    }
}

fn env(name: &str) -> Target {
    Target::Environment(name.to_string())
}

fn product(id: &str) -> Target {
    Target::Product(id.to_string())
}

/// `products` and every product of the rollout policies that govern them now, as one
/// [`Target::Products`] (sorted, without repeats).
fn policy_groups<'a>(state: &State, products: impl Iterator<Item = &'a str>) -> Target {
    let mut all = std::collections::BTreeSet::new();
    for p in products {
        all.insert(p.to_string());
        if let Some(policy) = state.rollout_policy_of(p) {
            all.extend(policy.group().map(str::to_string));
        }
    }
    Target::Products(all.into_iter().collect())
}

/// Who may approve `request`: its environment, and its requirements as people read them.
fn approver(state: &State, request: ApprovalTarget) -> Need {
    let (target, who) = match &request {
        ApprovalTarget::ChangeRequest(id) => match state.change_requests.get(id) {
            None => (Target::Unknown, String::new()),
            Some(cr) => {
                let target = prefixed_env(&cr.installation);
                let who = match state.change_request_approval(id) {
                    Some(a) => super::approver_text(&a.approvals.policy),
                    None => match &target {
                        Target::Environment(e) => format!("approver on {e}"),
                        _ => "approver".to_string(),
                    },
                };
                (target, who)
            }
        },
        ApprovalTarget::WindowException(id) => match state.window_exceptions.get(id) {
            None => (Target::Unknown, String::new()),
            Some(w) => (
                env(w.scope.environment()),
                super::approver_text(&w.approvals.policy),
            ),
        },
    };
    Need::Approver {
        request,
        target,
        who,
    }
}

fn operator(target: Target) -> Need {
    Need::Role(Role::EnvironmentOperator, target)
}

fn editor(target: Target) -> Need {
    Need::Role(Role::ProductEditor, target)
}

/// The need of `command` in `state` (the state resolves targets named by id: a plan's or a
/// change request's environment).
// Long: the one exhaustive table, one arm per command.
pub fn need(state: &State, command: &Command) -> Need {
    let admin = Need::Role(Role::Admin, Target::Cluster);
    match command {
        Command::CreateEnvironment { .. } | Command::DeleteEnvironment { .. } => admin,
        Command::CreateEntity { environment, .. }
        | Command::SetEnvironmentSettings { environment, .. }
        | Command::SetRegistry { environment, .. }
        | Command::RemoveRegistry { environment, .. }
        | Command::InstallModule { environment, .. } => operator(env(environment)),
        Command::SetEntitySettings { entity, .. }
        | Command::SetConfigOverrides { entity, .. }
        | Command::SetSecret { entity, .. }
        | Command::PutSecret { entity, .. }
        | Command::IssueCommand { entity, .. } => operator(entity_env(entity)),
        Command::CreateProduct { product_id, .. }
        | Command::SetProductWindow { product_id, .. }
        | Command::SetReleaseChannel { product_id, .. }
        | Command::RecallReleases { product_id, .. } => editor(product(product_id)),
        Command::PublishRelease { manifest } => editor(match parse_manifest(manifest) {
            Ok(m) => product(&m.product_id),
            Err(_) => Target::Unknown,
        }),
        // Channels are shared by every product.
        Command::CreateChannel { .. } => editor(product(crate::role::ALL)),
        Command::DeleteRecall { id } => editor(match state.recalls.get(id) {
            Some(r) => product(&r.product_id),
            None => Target::Unknown,
        }),
        Command::AddWindowOverride { scope, .. }
        | Command::RemoveWindowOverride { scope, .. }
        | Command::CreateSuppression { scope, .. } => operator(env(scope.environment())),
        Command::DeleteSuppression { id, .. } => operator(match state.suppressions.get(id) {
            Some(s) => env(s.scope.environment()),
            None => Target::Unknown,
        }),
        Command::PublishModule { .. } | Command::DeleteModule { .. } => {
            Need::Role(Role::ModuleEditor, Target::Cluster)
        }
        Command::SetModuleVariables { installation, .. }
        | Command::SetModuleUpdatesPaused { installation, .. }
        | Command::UnlinkModule { installation, .. } => operator(prefixed_env(installation)),
        // The approvers its policy counts (without one: the approver role on its environment).
        Command::ApproveChangeRequest { id, .. } | Command::RejectChangeRequest { id, .. } => {
            approver(state, ApprovalTarget::ChangeRequest(id.clone()))
        }
        Command::ApproveWindowException { id, .. } | Command::RejectWindowException { id, .. } => {
            approver(state, ApprovalTarget::WindowException(id.clone()))
        }
        // A request changes nothing until approved: any identity with a role binding may
        // ask (the roles that may bypass approval add an override directly).
        Command::RequestWindowException { scope, .. } => {
            Need::Role(Role::Viewer, env(scope.environment()))
        }
        Command::InstallModuleOnChannel { environment, .. } => operator(env(environment)),
        Command::SetInstallationChannel { installation, .. } => {
            operator(prefixed_env(installation))
        }
        Command::SetModuleChannel { .. } => Need::Role(Role::ModuleEditor, Target::Cluster),
        // Who approves what is the admins' decision.
        Command::SetApproverGroup { .. }
        | Command::DeleteApproverGroup { .. }
        | Command::SetApprovalPolicy { .. } => Need::Role(Role::Admin, Target::Cluster),
        Command::ApplyCanary { environment, yaml } => operator(match crate::canary::parse_canary(
            yaml,
        )
        .ok()
        .and_then(|spec| spec.namespace)
        .or_else(|| environment.clone())
        {
            Some(e) => env(&e),
            None => Target::Unknown,
        }),
        Command::DeleteCanary { id } | Command::CanaryManual { id, .. } => {
            operator(prefixed_env(id))
        }
        // As a canary of the environment (issue 52 item 3).
        Command::ApplyMetricTemplate { environment, yaml } => operator(
            match crate::canary::parse_metric_template(yaml)
                .ok()
                .and_then(|t| t.namespace)
                .or_else(|| environment.clone())
            {
                Some(e) => env(&e),
                None => Target::Unknown,
            },
        ),
        Command::DeleteMetricTemplate { id } => operator(prefixed_env(id)),
        // As a canary of the environment (issue 52 item 6).
        Command::ApplyAlertProvider { environment, yaml } => operator(
            match crate::canary::parse_alert_provider(yaml)
                .ok()
                .and_then(|p| p.namespace)
                .or_else(|| environment.clone())
            {
                Some(e) => env(&e),
                None => Target::Unknown,
            },
        ),
        Command::DeleteAlertProvider { id } => operator(prefixed_env(id)),
        Command::CancelPlans { target, .. } => operator(match target {
            CancelTarget::Environment(e) => env(e),
            CancelTarget::Entity(id) => entity_env(id),
            CancelTarget::Plan(id) => match state.plan_entity(id) {
                Some(entity) => entity_env(entity),
                None => Target::Unknown,
            },
        }),
        Command::CanaryTick { .. }
        | Command::CanaryJudgedTick { .. }
        | Command::Evaluate { .. }
        | Command::ExpireSuppressions
        | Command::SetClusterKey { .. }
        | Command::RecordRefusal { .. }
        // A level is raised once every member advertises it: only a node knows that.
        | Command::SetClusterLevel { .. } => Need::Node,
        Command::ReportEntityStates { environment, .. }
        | Command::ReportSampledEntityStates { environment, .. }
        | Command::ReportTasks { environment, .. }
        | Command::ReportCanaries { environment, .. }
        | Command::ReportCanariesWithSamples { environment, .. }
        | Command::ReportTask { environment, .. } => Need::Agent(environment.clone()),
        Command::BindRole { .. }
        | Command::UnbindRole { .. }
        | Command::SetAuditRetention { .. }
        | Command::SetCanaryConfigTracking { .. }
        | Command::CreateToken { .. }
        | Command::RevokeToken { .. }
        // Every node refuses a revoked certificate: nodes, agents and operators alike.
        | Command::RevokeCertificate { .. }
        | Command::RevokeCertificates { .. } => admin,
        Command::SetEnvironmentLabels { environment, .. } => operator(env(environment)),
        // A policy decides for every product of its group: the role must cover the group it
        // sets and the groups it replaces (an editor of `api` cannot pace or halt `db` by
        // naming it in `api`'s group).
        Command::ApplyRolloutPolicy { yaml } => {
            editor(match crate::rollout_policy::parse_rollout_policy(yaml) {
                Ok(p) => {
                    let named = std::iter::once(&p.product).chain(&p.products);
                    policy_groups(state, named.map(String::as_str))
                }
                Err(_) => Target::Unknown,
            })
        }
        Command::DeleteRolloutPolicy { product: p }
        | Command::PromoteWave { product: p, .. }
        | Command::HaltRollout { product: p, .. }
        | Command::ResumeRollout { product: p, .. } => {
            editor(policy_groups(state, std::iter::once(p.as_str())))
        }
        // Authorized by its own arm in `authorize`: the wrapped command's need.
        Command::As { command, .. } => need(state, command),
    }
}

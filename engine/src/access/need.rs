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
    /// A hub node: the leader's own decisions (evaluations, canary ticks, cluster keys).
    Node,
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
        Command::ApproveChangeRequest { id, .. } | Command::RejectChangeRequest { id, .. } => {
            Need::Role(
                Role::Approver,
                match state.change_requests.get(id) {
                    Some(cr) => prefixed_env(&cr.installation),
                    None => Target::Unknown,
                },
            )
        }
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
        | Command::RecordRefusal { .. } => Need::Node,
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
        | Command::RevokeToken { .. } => admin,
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

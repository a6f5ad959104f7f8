//! Who may do what (roles, default deny): the bindings that give identities roles, the one
//! table of what every command needs ([`need`]), and the check of an actor against both
//! ([`authorize`]).
//!
//! The node checks a write before proposing it, and apply checks it again against the actor
//! the entry records (`Command::As`), so a binding revoked between the two is enforced. A
//! command without a recorded actor was proposed by a hub node on its own behalf (the
//! leader's decisions) or written before roles existed; apply admits it as such.

mod need;

pub use crate::role::{Role, RoleBinding, ScopeKind, ALL, ROLES};
pub use need::{need, ApprovalTarget, Need, Target};

use hub_identity::Identity;

use crate::approval::{AppliedPolicy, Approvers, Requirement};
use crate::command::Command;
use crate::error::CommandError;
use crate::state::State;

/// Whether `actor` may run `command` in `state`; the refusal names the actor, the command and
/// what it lacks: `operator/alice may not SetSecret in prod: needs environment-operator on
/// prod`.
pub fn authorize(state: &State, actor: &Identity, command: &Command) -> Result<(), CommandError> {
    authorize_need(state, actor, command, &need(state, command))
}

/// [`authorize`] with `command`'s need already resolved in `state` (apply resolves it once
/// for the check and the audit row).
pub fn authorize_need(
    state: &State,
    actor: &Identity,
    command: &Command,
    need: &Need,
) -> Result<(), CommandError> {
    if is_bootstrap(state, actor, command) {
        return Ok(());
    }
    if satisfies(state, actor, need) {
        return Ok(());
    }
    Err(CommandError::PermissionDenied(format!(
        "{actor} may not {}{}: needs {}",
        command.variant_name(),
        match need {
            Need::Role(_, Target::Environment(e)) => format!(" in {e}"),
            Need::Role(_, Target::Product(p)) => format!(" on {p}"),
            Need::Role(_, Target::Products(ps)) => format!(" on {}", ps.join(", ")),
            Need::Approver { request, .. } => format!(" on {request}"),
            Need::Role(_, Target::Cluster | Target::Unknown) | Need::Agent(_) | Need::Node => {
                String::new()
            }
        },
        describe(need)
    )))
}

/// The one command admitted without a role: while the cluster has no admin, an operator
/// binding itself admin (as Nomad's ACL bootstrap, once).
pub fn is_bootstrap(state: &State, actor: &Identity, command: &Command) -> bool {
    matches!(actor, Identity::Operator(_))
        && state.admin_count() == 0
        && matches!(
            command,
            Command::BindRole { identity, role: Role::Admin, .. } if identity == actor
        )
}

/// Whether `actor` meets `need` in `state`.
pub fn satisfies(state: &State, actor: &Identity, need: &Need) -> bool {
    match need {
        // A request the state does not hold: any binding admits it, apply refuses it as not
        // found.
        Need::Approver { request, .. } => match approver_places(state, actor, request) {
            Some(places) => !places.is_empty(),
            None => satisfies(state, actor, &Need::Role(Role::Viewer, Target::Cluster)),
        },
        Need::Node => matches!(actor, Identity::Node(_)),
        Need::Agent(env) => matches!(actor, Identity::Agent(own) if own == env),
        // Each product by some binding (one binding need not cover them all); an empty
        // group is never met.
        Need::Role(role, Target::Products(ps)) => {
            !ps.is_empty()
                && ps.iter().all(|p| {
                    satisfies(state, actor, &Need::Role(*role, Target::Product(p.clone())))
                })
        }
        Need::Role(role, target) => state.bindings_of(actor).any(|b| {
            // Every role reads: a viewer's need is met by any binding.
            *role == Role::Viewer
                || b.role == Role::Admin
                || (b.role == *role
                    && match target {
                        Target::Cluster | Target::Unknown => true,
                        Target::Environment(e) => b.covers_environment(e),
                        Target::Product(p) => b.covers_product(p),
                        // Matched above; listed so the match stays exhaustive.
                        Target::Products(_) => false,
                    })
        }),
    }
}

/// Whether `actor` may read: any role binding admits every read (secret values are never
/// part of an answer to an operator).
pub fn may_read(state: &State, actor: &Identity) -> bool {
    matches!(actor, Identity::Node(_))
        || satisfies(state, actor, &Need::Role(Role::Viewer, Target::Cluster))
}

/// What a command acts on, as the write audit records it.
pub fn target_text(need: &Need) -> String {
    match need {
        Need::Role(_, Target::Environment(e))
        | Need::Agent(e)
        | Need::Approver {
            target: Target::Environment(e),
            ..
        } => format!("environment {e}"),
        Need::Approver { request, .. } => request.to_string(),
        Need::Role(_, Target::Product(p)) => format!("product {p}"),
        Need::Role(_, Target::Products(ps)) => format!("products {}", ps.join(", ")),
        Need::Role(_, Target::Cluster) | Need::Node => "cluster".to_string(),
        Need::Role(_, Target::Unknown) => "unknown target".to_string(),
    }
}

/// What a need asks for, as the refusal says it.
fn describe(need: &Need) -> String {
    match need {
        Need::Node => "a hub node".to_string(),
        Need::Agent(env) => format!("the agent of {env}"),
        Need::Role(role, Target::Environment(e)) => format!("{role} on {e}"),
        Need::Role(role, Target::Product(p)) => format!("{role} on {p}"),
        Need::Role(role, Target::Products(ps)) => format!("{role} on {}", ps.join(", ")),
        Need::Role(role, Target::Cluster | Target::Unknown) => role.to_string(),
        Need::Approver { who, .. } if who.is_empty() => "an approver".to_string(),
        Need::Approver { who, .. } => who.clone(),
    }
}

/// The requirements of `request` (indexes into [`AppliedPolicy::requirements`]) that `actor`
/// could fill now, by its role bindings and group memberships; `None` when the state holds
/// no such request. A change request opened without a policy has one requirement: the
/// `approver` role on its environment.
pub fn approver_places(
    state: &State,
    actor: &Identity,
    request: &ApprovalTarget,
) -> Option<Vec<u32>> {
    let policy = match request {
        ApprovalTarget::ChangeRequest(id) => {
            let cr = state.change_requests.get(id)?;
            match state.change_request_approval(id) {
                Some(a) => &a.approvals.policy,
                None => {
                    let env = cr.installation.split('/').next().unwrap_or_default();
                    let need = Need::Role(Role::Approver, Target::Environment(env.to_string()));
                    return Some(if satisfies(state, actor, &need) {
                        vec![0]
                    } else {
                        Vec::new()
                    });
                }
            }
        }
        ApprovalTarget::WindowException(id) => &state.window_exceptions.get(id)?.approvals.policy,
    };
    Some(places_in(state, actor, policy))
}

/// The requirements of `policy` with a place left to fill that `actor` could fill now.
fn places_in(state: &State, actor: &Identity, policy: &AppliedPolicy) -> Vec<u32> {
    let mut places = Vec::new();
    for (i, (requirement, count)) in policy.requirements().into_iter().enumerate() {
        let fits = count > 0
            && match requirement {
                Requirement::Approvers(Approvers::Environment(e)) => satisfies(
                    state,
                    actor,
                    &Need::Role(Role::Approver, Target::Environment(e)),
                ),
                Requirement::Approvers(Approvers::Product(p)) => satisfies(
                    state,
                    actor,
                    &Need::Role(Role::ProductEditor, Target::Product(p)),
                ),
                Requirement::Group(g) => state
                    .approver_group(&g)
                    .is_some_and(|group| group.members.contains(actor)),
            };
        if fits {
            // At most 17 requirements (MAX_REQUIRED_GROUPS + 1).
            places.push(i as u32);
        }
    }
    places
}

/// Who may approve under `policy`, for refusals: `approver on prod or a member of group
/// compliance`.
pub fn approver_text(policy: &AppliedPolicy) -> String {
    let each: Vec<String> = policy
        .requirements()
        .into_iter()
        .filter(|(_, count)| *count > 0)
        .map(|(r, _)| r.to_string())
        .collect();
    each.join(" or ")
}

#[cfg(test)]
mod tests;

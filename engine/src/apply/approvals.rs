//! Approver groups, approval policies, and the approval step every request shares (issue 55):
//! who may add an approval now, and the approvals a new request starts with.

use std::collections::BTreeSet;

use hub_identity::Identity;

use crate::access::{approver_places, approver_text, ApprovalTarget};
use crate::approval::{
    AppliedPolicy, Approval, ApprovalPolicy, ApprovalPolicySpec, ApproverGroup, Approvers,
    AutoApproval, PolicyScope, RequestApprovals, MAX_APPROVALS, MAX_APPROVALS_PER_REQUIREMENT,
    MAX_EXPIRY_MS, MAX_GROUP_MEMBERS, MAX_REQUIRED_GROUPS, MIN_EXPIRY_MS,
};
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::evaluate::format_time;
use crate::name::{
    validate_channel_name, validate_installation_id, validate_name, validate_product_id,
};
use crate::product::is_builtin_channel;
use crate::state::State;
use crate::TimestampMs;

use super::{changed, not_found, Tx};

/// The actor an audit row names for `tx`: its verified identity, or `hub` for a node's entry.
pub(super) fn actor_text(tx: &Tx) -> String {
    tx.actor
        .as_ref()
        .map_or_else(|| "hub".to_string(), Identity::to_string)
}

impl State {
    /// `SetApproverGroup`: every member must be an identity the hub knows (one holding a role
    /// binding).
    pub(super) fn set_approver_group(
        &mut self,
        name: &str,
        members: &BTreeSet<Identity>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        validate_name("name", name)?;
        if members.is_empty() || members.len() > MAX_GROUP_MEMBERS {
            return Err(CommandError::invalid(
                "members",
                format!(
                    "{} identities; 1 to {MAX_GROUP_MEMBERS} allowed",
                    members.len()
                ),
            ));
        }
        if let Some(m) = members
            .iter()
            .find(|m| self.bindings_of(m).next().is_none())
        {
            return Err(CommandError::invalid(
                "members",
                format!("{m} holds no role binding: the hub knows no such identity"),
            ));
        }
        // A group smaller than a policy's requirement of it could never be met.
        if let Some((scope, count)) = self
            .group_requirements(name)
            .find(|(_, c)| usize::try_from(*c).is_ok_and(|c| c > members.len()))
        {
            return Err(CommandError::invalid(
                "members",
                format!(
                    "policy {scope} requires {count} approvals of group {name}; \
                     {} members could never give them",
                    members.len()
                ),
            ));
        }
        let actor = actor_text(tx);
        self.approver_groups.put(
            ApproverGroup {
                name: name.to_string(),
                members: members.clone(),
                updated_ms: tx.now,
            },
            &mut tx.changed,
        );
        let list: Vec<String> = members.iter().map(Identity::to_string).collect();
        self.audit_entry(
            &actor,
            "approver-group",
            name.to_string(),
            &list.join(", "),
            tx,
        );
        Ok(changed(
            name,
            format!("approver group {name}: {} members", members.len()),
        ))
    }

    /// `DeleteApproverGroup`: refused while a policy or a pending request requires it.
    pub(super) fn delete_approver_group(
        &mut self,
        name: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        validate_name("name", name)?;
        if !self.approver_groups.contains_key(name) {
            return Err(not_found("approver group", name));
        }
        if let Some((scope, _)) = self.group_requirements(name).next() {
            return Err(CommandError::FailedPrecondition(format!(
                "approver group {name} is required by policy {scope}; change the policy first"
            )));
        }
        if let Some(what) = self.pending_requiring(name) {
            return Err(CommandError::FailedPrecondition(format!(
                "approver group {name} is required by pending {what}; decide it first"
            )));
        }
        let actor = actor_text(tx);
        self.approver_groups.remove(name, &mut tx.changed);
        self.audit_entry(&actor, "approver-group-delete", name.to_string(), "", tx);
        Ok(changed(name, format!("approver group {name} deleted")))
    }

    /// The policies that require group `name`, with how many approvals of it.
    fn group_requirements<'a>(
        &'a self,
        name: &'a str,
    ) -> impl Iterator<Item = (&'a PolicyScope, u32)> + 'a {
        self.approval_policies.values().flat_map(move |p| {
            p.spec
                .required_groups
                .iter()
                .filter(move |g| g.group == name)
                .map(move |g| (&p.scope, g.count))
        })
    }

    /// A pending request whose rule requires group `name`, as people name it.
    fn pending_requiring(&self, name: &str) -> Option<String> {
        let requires =
            |a: &RequestApprovals| a.policy.required_groups.iter().any(|g| g.group == name);
        let cr = self.change_request_approvals.values().find(|a| {
            requires(&a.approvals)
                && self
                    .change_requests
                    .get(&a.change_request)
                    .is_some_and(|c| c.status.is_open())
        });
        if let Some(a) = cr {
            return Some(format!("change request {}", a.change_request));
        }
        self.window_exceptions
            .values()
            .find(|w| {
                w.status == crate::window_exception::ExceptionStatus::Pending
                    && requires(&w.approvals)
            })
            .map(|w| format!("window exception {}", w.id))
    }

    /// `SetApprovalPolicy`.
    pub(super) fn set_approval_policy(
        &mut self,
        scope: &PolicyScope,
        policy: &Option<ApprovalPolicySpec>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        match scope {
            PolicyScope::Environment(e) => validate_name("scope", e)?,
            PolicyScope::Product(p) => validate_product_id("scope", p)?,
            PolicyScope::Installation(i) => validate_installation_id("scope", i)?,
        }
        let exists = match scope {
            PolicyScope::Environment(e) => self.environments.contains_key(e),
            PolicyScope::Product(p) => self.products.contains_key(p),
            PolicyScope::Installation(i) => self.installations.contains_key(i),
        };
        if !exists {
            return Err(not_found("policy scope", &scope.key_name()));
        }
        let actor = actor_text(tx);
        let key = scope.key_name();
        let Some(spec) = policy else {
            if self
                .approval_policies
                .remove(&key, &mut tx.changed)
                .is_none()
            {
                return Err(not_found("approval policy", &key));
            }
            self.audit_entry(&actor, "approval-policy-remove", key.clone(), "", tx);
            return Ok(changed(
                key.clone(),
                format!("approval policy {key} removed"),
            ));
        };
        self.check_policy(scope, spec)?;
        self.approval_policies.put(
            ApprovalPolicy {
                scope: scope.clone(),
                spec: spec.clone(),
                set_ms: tx.now,
            },
            &mut tx.changed,
        );
        self.audit_entry(&actor, "approval-policy", key.clone(), "", tx);
        Ok(changed(key.clone(), format!("approval policy {key} set")))
    }

    /// Refuses a policy that names a group that does not exist or could never be met, or a
    /// setting that does not apply to its scope.
    fn check_policy(
        &self,
        scope: &PolicyScope,
        spec: &ApprovalPolicySpec,
    ) -> Result<(), CommandError> {
        if spec.approvers > MAX_APPROVALS_PER_REQUIREMENT {
            return Err(CommandError::invalid(
                "approvers",
                format!(
                    "{} is more than {MAX_APPROVALS_PER_REQUIREMENT}",
                    spec.approvers
                ),
            ));
        }
        if spec.required_groups.len() > MAX_REQUIRED_GROUPS {
            return Err(CommandError::invalid(
                "required_groups",
                format!(
                    "{} groups; at most {MAX_REQUIRED_GROUPS} allowed",
                    spec.required_groups.len()
                ),
            ));
        }
        let mut seen = BTreeSet::new();
        for (i, g) in spec.required_groups.iter().enumerate() {
            let field = format!("required_groups[{i}]");
            validate_name(&format!("{field}.group"), &g.group)?;
            if !seen.insert(g.group.as_str()) {
                return Err(CommandError::invalid(
                    &format!("{field}.group"),
                    format!("group {} is listed twice", g.group),
                ));
            }
            let Some(group) = self.approver_groups.get(&g.group) else {
                return Err(CommandError::invalid(
                    &format!("{field}.group"),
                    format!("approver group {:?} does not exist", g.group),
                ));
            };
            if g.count == 0 || g.count > MAX_APPROVALS_PER_REQUIREMENT {
                return Err(CommandError::invalid(
                    &format!("{field}.count"),
                    format!("{} is not 1 to {MAX_APPROVALS_PER_REQUIREMENT}", g.count),
                ));
            }
            if usize::try_from(g.count).map_or(true, |c| c > group.members.len()) {
                return Err(CommandError::invalid(
                    &format!("{field}.count"),
                    format!(
                        "{} approvals of group {}, which has {} members",
                        g.count,
                        g.group,
                        group.members.len()
                    ),
                ));
            }
        }
        if spec.approvers == 0 && spec.required_groups.is_empty() {
            return Err(CommandError::invalid(
                "approvers",
                "0 with no required group: a policy requires at least one approval",
            ));
        }
        if let Some(ttl) = spec.expire_after_ms {
            if !(MIN_EXPIRY_MS..=MAX_EXPIRY_MS).contains(&ttl) {
                return Err(CommandError::invalid(
                    "expire_after_ms",
                    format!("{ttl} is not {MIN_EXPIRY_MS} to {MAX_EXPIRY_MS}"),
                ));
            }
        }
        let modules = !matches!(scope, PolicyScope::Product(_));
        if let Some(c) = &spec.default_channel {
            validate_channel_name("default_channel", c)?;
            if !modules {
                return Err(CommandError::invalid(
                    "default_channel",
                    format!("policy {scope} governs window exceptions, not installations"),
                ));
            }
            if !is_builtin_channel(c) && !self.channels.contains_key(c) {
                return Err(CommandError::invalid(
                    "default_channel",
                    format!("channel {c:?} does not exist"),
                ));
            }
        }
        if !modules && spec.auto_approve != AutoApproval::default() {
            return Err(CommandError::invalid(
                "auto_approve",
                format!("policy {scope} governs window exceptions, which are never automatic"),
            ));
        }
        Ok(())
    }

    /// The approvals a new request starts with: the rule of `policy` (or the hub's default),
    /// over `approvers`, asked by the entry's verified actor, expiring by the policy.
    pub(super) fn new_request_approvals(
        policy: Option<&ApprovalPolicy>,
        approvers: Approvers,
        tx: &Tx,
    ) -> RequestApprovals {
        let default = ApprovalPolicySpec::default();
        let spec = policy.map_or(&default, |p| &p.spec);
        RequestApprovals {
            policy: AppliedPolicy::of(policy.map(|p| p.scope.clone()), approvers, spec),
            requester: tx.actor.clone(),
            approvals: Vec::new(),
            expires_ms: spec.expire_after_ms.map(|ttl| {
                tx.now
                    .saturating_add(TimestampMs::try_from(ttl).unwrap_or(TimestampMs::MAX))
            }),
        }
    }

    /// The approval `tx`'s verified actor adds to `approvals` of `what` now, or why it may
    /// not: no verified actor, expired, approved already, the requester approving their own
    /// request where the policy forbids it, not an approver the policy counts.
    pub(super) fn check_approval(
        &self,
        what: &ApprovalTarget,
        approvals: &RequestApprovals,
        tx: &Tx,
    ) -> Result<Approval, CommandError> {
        let Some(actor) = tx.actor.as_ref() else {
            return Err(CommandError::PermissionDenied(format!(
                "approving {what} needs a verified identity (an entry of an operator)"
            )));
        };
        if let Some(expired) = approvals.expires_ms.filter(|e| tx.now >= *e) {
            return Err(CommandError::FailedPrecondition(format!(
                "{actor} may not approve {what}: it expired at {}",
                format_time(expired)
            )));
        }
        if approvals.approvals.iter().any(|a| a.identity == *actor) {
            return Err(CommandError::FailedPrecondition(format!(
                "{actor} may not approve {what} twice: already approved"
            )));
        }
        let policy = &approvals.policy;
        if !policy.allow_self_approval && approvals.requester.as_ref() == Some(actor) {
            return Err(CommandError::PermissionDenied(format!(
                "{actor} may not approve {what}: they requested it, and {} forbids \
                 approving one's own request",
                policy.source_text()
            )));
        }
        let places = approver_places(self, actor, what).unwrap_or_default();
        if places.is_empty() {
            return Err(CommandError::PermissionDenied(format!(
                "{actor} may not approve {what}: needs {} ({})",
                approver_text(policy),
                policy.source_text()
            )));
        }
        if approvals.approvals.len() >= MAX_APPROVALS {
            return Err(CommandError::FailedPrecondition(format!(
                "{what} holds {MAX_APPROVALS} approvals already"
            )));
        }
        Ok(Approval {
            identity: actor.clone(),
            time_ms: tx.now,
            counts_for: places,
        })
    }

    /// Refuses a rejection of `what` by `tx`'s actor unless the actor is one of its approvers
    /// (the need checks it too; this holds for a nested or replayed entry as well).
    pub(super) fn check_rejection(
        &self,
        what: &ApprovalTarget,
        approvals: &RequestApprovals,
        tx: &Tx,
    ) -> Result<(), CommandError> {
        let Some(actor) = tx.actor.as_ref() else {
            return Ok(());
        };
        if !approver_places(self, actor, what)
            .unwrap_or_default()
            .is_empty()
        {
            return Ok(());
        }
        Err(CommandError::PermissionDenied(format!(
            "{actor} may not reject {what}: needs {} ({})",
            approver_text(&approvals.policy),
            approvals.policy.source_text()
        )))
    }
}

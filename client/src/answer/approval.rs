//! `approver_groups` and `approval_policies` (issue 55), and the approval state a pending
//! change request or window-exception request carries.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One approval given.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalGiven {
    /// Who approved (a verified identity, `operator/alice`).
    pub identity: String,
    /// When.
    pub time: String,
}

/// Where a request stands with its approvals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalView {
    /// The approvals so far, in order.
    pub approvals: Vec<ApprovalGiven>,
    /// Whether it can no longer be approved.
    pub expired: bool,
    /// When it stops being approvable, if ever.
    pub expires: Option<String>,
    /// Who still must approve (`1 more: approver on prod`); empty when approved.
    pub outstanding: Vec<String>,
    /// The rule it was opened under: `policy environment/prod` or `the hub's default policy`.
    pub policy: String,
    /// Who asked, if a person did.
    pub requester: Option<String>,
}

/// Approvals one policy requires from a named group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRequirementView {
    /// How many distinct members.
    pub count: u32,
    /// The group.
    pub group: String,
}

/// Which module updates a policy approves without a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoApprovalView {
    /// Updates that change the managed entities may still be approved automatically.
    pub entity_changes: bool,
    /// The largest version change approved automatically: `patch`, `minor`, `major`, or
    /// none.
    pub up_to: Option<String>,
    /// Updates that change the module's variables may still be approved automatically.
    pub variable_changes: bool,
}

/// One approval policy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicyView {
    /// Whether the requester may approve their own request.
    pub allow_self_approval: bool,
    /// Distinct approvers of the scope required.
    pub approvers: u32,
    /// Module updates approved without a person.
    pub auto_approve: AutoApprovalView,
    /// The channel installations in scope track unless one was chosen for them.
    pub default_channel: Option<String>,
    /// How long a request stays approvable, in milliseconds; `None`: until decided.
    pub expire_after_ms: Option<u64>,
    /// Groups required besides.
    pub required_groups: Vec<GroupRequirementView>,
    /// `environment/prod`, `product/com.example:web` or `installation/prod/control-plane`.
    pub scope: String,
    /// When it was set.
    pub set: String,
}

/// The answer to `approval_policies`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPoliciesAnswer {
    /// By scope.
    pub policies: Vec<ApprovalPolicyView>,
}

/// Asks for every approval policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListApprovalPolicies;

impl Typed for ListApprovalPolicies {
    type Answer = ApprovalPoliciesAnswer;
    fn query(&self) -> Query {
        Query::ApprovalPolicies
    }
}

/// One approver group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproverGroupView {
    /// Its members (verified identities).
    pub members: Vec<String>,
    /// Its name.
    pub name: String,
    /// When it last changed.
    pub updated: String,
}

/// The answer to `approver_groups`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproverGroupsAnswer {
    /// By name.
    pub groups: Vec<ApproverGroupView>,
}

/// Asks for every approver group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListApproverGroups;

impl Typed for ListApproverGroups {
    type Answer = ApproverGroupsAnswer;
    fn query(&self) -> Query {
        Query::ApproverGroups
    }
}

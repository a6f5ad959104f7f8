//! The views of issue 55's approvals: approver groups, approval policies, window-exception
//! requests, and the approval state of a change request. Built field by field from the
//! engine's records into `hub-client`'s typed answers (identities and times as text).

use hub_engine::approval::{ApprovalPolicy, ApproverGroup, RequestApprovals};
use hub_engine::evaluate::format_time;
use hub_engine::window_exception::{ExceptionStatus, WindowException};
use hub_engine::State;

use hub_client::answer::{
    ApprovalGiven, ApprovalPolicyView, ApprovalView, ApproverGroupView, AutoApprovalView,
    GroupRequirementView, WindowExceptionView,
};

/// A request's approvals as seen at `now`; `expired` only for one still awaiting approvals.
pub fn approval_view(a: &RequestApprovals, pending: bool, now: i64) -> ApprovalView {
    ApprovalView {
        approvals: a
            .approvals
            .iter()
            .map(|g| ApprovalGiven {
                identity: g.identity.to_string(),
                time: format_time(g.time_ms),
            })
            .collect(),
        expired: pending && a.expired_at(now),
        expires: a.expires_ms.map(format_time),
        outstanding: a.outstanding().iter().map(ToString::to_string).collect(),
        policy: a.policy.source_text(),
        requester: a.requester.as_ref().map(ToString::to_string),
    }
}

/// The approvals of change request `id`, when it was opened under a policy.
pub fn change_request_approval(
    state: &State,
    c: &hub_engine::installation::ChangeRequest,
    now: i64,
) -> Option<ApprovalView> {
    state
        .change_request_approval(&c.id)
        .map(|a| approval_view(&a.approvals, c.status.is_open(), now))
}

/// One approver group.
pub fn group_view(g: &ApproverGroup) -> ApproverGroupView {
    ApproverGroupView {
        members: g.members.iter().map(ToString::to_string).collect(),
        name: g.name.clone(),
        updated: format_time(g.updated_ms),
    }
}

/// One approval policy.
pub fn policy_view(p: &ApprovalPolicy) -> ApprovalPolicyView {
    let spec = &p.spec;
    ApprovalPolicyView {
        allow_self_approval: spec.allow_self_approval,
        approvers: spec.approvers,
        auto_approve: AutoApprovalView {
            entity_changes: spec.auto_approve.entity_changes,
            up_to: spec.auto_approve.up_to.map(|u| u.as_str().to_string()),
            variable_changes: spec.auto_approve.variable_changes,
        },
        default_channel: spec.default_channel.clone(),
        expire_after_ms: spec.expire_after_ms,
        required_groups: spec
            .required_groups
            .iter()
            .map(|g| GroupRequirementView {
                count: g.count,
                group: g.group.clone(),
            })
            .collect(),
        scope: p.scope.key_name(),
        set: format_time(p.set_ms),
    }
}

/// One window-exception request as seen at `now`.
pub fn window_exception_view(w: &WindowException, now: i64) -> WindowExceptionView {
    let pending = w.status == ExceptionStatus::Pending;
    let mut approval = approval_view(&w.approvals, pending, now);
    // A request whose time range ended can no longer be approved either.
    approval.expired = pending && w.expired_at(now);
    WindowExceptionView {
        approval,
        closed: w.closed_ms.map(format_time),
        created: format_time(w.created_ms),
        decided_by: w.decided_by.clone(),
        end: format_time(w.end_ms),
        id: w.id.clone(),
        message: w.message.clone(),
        override_id: match &w.status {
            ExceptionStatus::Approved { override_id } => Some(override_id.clone()),
            ExceptionStatus::Pending | ExceptionStatus::Rejected => None,
        },
        reason: w.reason.clone(),
        scope: w.scope.to_string(),
        start: format_time(w.start_ms),
        status: w.status_at(now).to_string(),
    }
}

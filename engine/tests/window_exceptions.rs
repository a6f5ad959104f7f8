//! Issue 55, items 2 and 3: window-exception requests approved under a policy, with required
//! approver groups. Every command runs as a verified operator (`Command::As`), so the roles,
//! the groups and the policy decide, through the [`Hub`] harness (twin state, persistence of
//! the changed keys, refused commands change nothing).

mod common;

use common::actors::*;
use common::*;
use hub_engine::access::Role;
use hub_engine::approval::{ApprovalPolicySpec, GroupRequirement, PolicyScope};
use hub_engine::command::{EnvironmentSettingsPatch, WindowChange};
use hub_engine::evaluate::{ConstraintKind, Evaluation};
use hub_engine::suppression::Scope;
use hub_engine::window_exception::ExceptionStatus;
use hub_engine::{Command, CommandError, CommandOutput};

const WEB: &str = "com.example:web";
/// Closed at T0 (a Monday at midnight).
const WEDNESDAY: &str = "WEDNESDAY/10:00-WEDNESDAY/12:00";

fn group(hub: &mut Hub, name: &str, members: &[&str]) {
    hub.ok(as_(
        "root",
        Command::SetApproverGroup {
            name: name.into(),
            members: members.iter().map(|m| operator(m)).collect(),
        },
    ));
}

fn prod() -> PolicyScope {
    PolicyScope::Environment("prod".into())
}

/// `prod` with a window closed at T0 and entity `web`; `root` is admin, `olga` operates
/// prod, `ann` and `bob` approve in prod, `vic` only views, `pat` edits product web.
fn hub_with_window() -> (Hub, String) {
    let mut hub = Hub::new();
    bind(&mut hub, "root", Role::Admin, &[]);
    hub.env("prod");
    hub.product(WEB);
    hub.publish(WEB, "1.0.0", &[]);
    let w = hub.helm("prod", "web", WEB);
    hub.env_settings(
        "prod",
        EnvironmentSettingsPatch {
            maintenance_window: Some(WindowChange::Set(window(WEDNESDAY))),
            ..Default::default()
        },
    );
    bind(&mut hub, "olga", Role::EnvironmentOperator, &["prod"]);
    bind(&mut hub, "ann", Role::Approver, &["prod"]);
    bind(&mut hub, "bob", Role::Approver, &["prod"]);
    bind(&mut hub, "vic", Role::Viewer, &[]);
    bind(&mut hub, "pat", Role::ProductEditor, &[WEB]);
    (hub, w)
}

fn window_passes(e: &Evaluation) -> bool {
    e.constraints
        .iter()
        .find(|c| c.constraint == ConstraintKind::MaintenanceWindow)
        .expect("a window constraint")
        .passed
}

fn request(hub: &mut Hub, who: &str, scope: Scope) -> String {
    match hub.ok(as_(
        who,
        Command::RequestWindowException {
            scope,
            start_ms: T0,
            end_ms: T0 + 2 * HOUR,
            reason: "hotfix for INC-42".into(),
            actor: String::new(),
        },
    )) {
        CommandOutput::Changed { id, .. } => id,
        other => panic!("unexpected {other:?}"),
    }
}

fn approve(who: &str, wx: &str) -> Command {
    as_(
        who,
        Command::ApproveWindowException {
            id: wx.into(),
            actor: String::new(),
        },
    )
}

fn status(hub: &Hub, wx: &str) -> ExceptionStatus {
    hub.state
        .window_exception(wx)
        .expect("request")
        .status
        .clone()
}

fn audit_actions(hub: &Hub) -> Vec<(String, String)> {
    hub.state
        .audit()
        .map(|a| (a.actor.clone(), a.action.clone()))
        .collect()
}

#[test]
fn a_requested_exception_opens_the_window_only_once_approved_and_is_audited() {
    let (mut hub, w) = hub_with_window();
    assert!(!window_passes(&hub.eval(&w)), "closed at T0");
    let wx = request(&mut hub, "vic", Scope::Entity(w.clone()));
    assert_eq!(status(&hub, &wx), ExceptionStatus::Pending);
    assert!(
        !window_passes(&hub.eval(&w)),
        "a pending request opens nothing"
    );
    hub.ok(approve("ann", &wx));
    let ExceptionStatus::Approved { override_id } = status(&hub, &wx) else {
        panic!("approved: {:?}", status(&hub, &wx));
    };
    let e = hub.eval(&w);
    assert!(window_passes(&e), "{}", e.summary());
    assert!(
        hub.state
            .entity(&w)
            .unwrap()
            .window_overrides
            .iter()
            .any(|o| o.id == override_id),
        "the override is the entity's"
    );
    let actions = audit_actions(&hub);
    assert!(
        actions.contains(&("operator/vic".into(), "window-exception-request".into()))
            && actions.contains(&("operator/ann".into(), "window-exception-approve".into())),
        "{actions:?}"
    );
    let activity = hub.activity_of_kind(&w, "window-exception");
    assert_eq!(activity.len(), 2, "{activity:?}");
    assert!(
        activity[0].contains("requested by operator/vic"),
        "{activity:?}"
    );
    assert!(
        activity[1].contains("approved by operator/ann"),
        "{activity:?}"
    );
    // Decided: no second approval, no rejection.
    let err = hub.err(approve("bob", &wx));
    assert!(err.to_string().contains("approved, not pending"), "{err}");
}

#[test]
fn a_rejected_exception_never_opens_the_window() {
    let (mut hub, w) = hub_with_window();
    let wx = request(&mut hub, "vic", Scope::Entity(w.clone()));
    hub.ok(as_(
        "bob",
        Command::RejectWindowException {
            id: wx.clone(),
            reason: "use Wednesday's window".into(),
            actor: String::new(),
        },
    ));
    assert_eq!(status(&hub, &wx), ExceptionStatus::Rejected);
    assert!(!window_passes(&hub.eval(&w)));
    let err = hub.err(approve("ann", &wx));
    assert!(err.to_string().contains("rejected, not pending"), "{err}");
}

#[test]
fn approvals_by_the_wrong_people_twice_by_oneself_or_too_late_are_refused_by_name() {
    let (mut hub, w) = hub_with_window();
    policy(
        &mut hub,
        prod(),
        ApprovalPolicySpec {
            approvers: 2,
            expire_after_ms: Some(HOUR as u64),
            ..Default::default()
        },
    );
    let wx = request(&mut hub, "ann", Scope::Environment("prod".into()));
    // Not an approver of prod.
    let err = hub.err(approve("vic", &wx));
    assert!(matches!(err, CommandError::PermissionDenied(_)), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("operator/vic") && text.contains(&wx) && text.contains("approver on prod"),
        "{text}"
    );
    // The requester, under a policy that forbids it (the default).
    let err = hub.err(approve("ann", &wx)).to_string();
    assert!(
        err.contains("operator/ann")
            && err.contains("they requested it")
            && err.contains("policy environment/prod"),
        "{err}"
    );
    hub.ok(approve("bob", &wx));
    assert_eq!(status(&hub, &wx), ExceptionStatus::Pending, "one of two");
    let err = hub.err(approve("bob", &wx)).to_string();
    assert!(
        err.contains("operator/bob") && err.contains("twice"),
        "{err}"
    );
    // An hour later it expired: refused, still pending, the window closed.
    hub.advance(HOUR);
    bind(&mut hub, "cid", Role::Approver, &["prod"]);
    let err = hub.err(approve("cid", &wx)).to_string();
    assert!(
        err.contains("operator/cid") && err.contains("expired at"),
        "{err}"
    );
    assert_eq!(
        hub.state.window_exception(&wx).unwrap().status_at(hub.now),
        "expired"
    );
    assert!(!window_passes(&hub.eval(&w)));
}

#[test]
fn self_approval_is_allowed_when_the_policy_says_so() {
    let (mut hub, w) = hub_with_window();
    policy(
        &mut hub,
        prod(),
        ApprovalPolicySpec {
            allow_self_approval: true,
            ..Default::default()
        },
    );
    let wx = request(&mut hub, "ann", Scope::Entity(w.clone()));
    hub.ok(approve("ann", &wx));
    assert!(window_passes(&hub.eval(&w)));
}

#[test]
fn required_groups_must_all_be_met_and_an_identity_counts_once() {
    let (mut hub, w) = hub_with_window();
    // ann approves in prod and is in compliance; carl is in compliance only.
    bind(&mut hub, "carl", Role::Viewer, &[]);
    group(&mut hub, "compliance", &["ann", "carl"]);
    policy(
        &mut hub,
        prod(),
        ApprovalPolicySpec {
            approvers: 1,
            required_groups: vec![GroupRequirement {
                group: "compliance".into(),
                count: 1,
            }],
            ..Default::default()
        },
    );
    let wx = request(&mut hub, "olga", Scope::Entity(w.clone()));
    hub.ok(approve("ann", &wx));
    let req = hub.state.window_exception(&wx).unwrap();
    assert_eq!(req.status, ExceptionStatus::Pending, "ann counts once");
    assert_eq!(
        req.approvals.outstanding().len(),
        1,
        "{}",
        req.approvals.outstanding_text()
    );
    assert!(!window_passes(&hub.eval(&w)));
    // bob, an approver only, completes it: ann's approval moves to compliance.
    hub.ok(approve("bob", &wx));
    assert!(matches!(
        status(&hub, &wx),
        ExceptionStatus::Approved { .. }
    ));
    assert!(window_passes(&hub.eval(&w)));

    // Another: carl (compliance, no approver role) may approve; vic may not.
    let wx2 = request(&mut hub, "olga", Scope::Environment("prod".into()));
    hub.ok(approve("carl", &wx2));
    let err = hub.err(approve("vic", &wx2)).to_string();
    assert!(
        err.contains("approver on prod or member of group compliance"),
        "{err}"
    );
    hub.ok(approve("bob", &wx2));
    assert!(matches!(
        status(&hub, &wx2),
        ExceptionStatus::Approved { .. }
    ));
}

#[test]
fn policies_and_groups_naming_what_does_not_exist_are_refused() {
    let (mut hub, _) = hub_with_window();
    let err = hub.err(as_(
        "root",
        Command::SetApprovalPolicy {
            scope: prod(),
            policy: Some(ApprovalPolicySpec {
                required_groups: vec![GroupRequirement {
                    group: "compliance".into(),
                    count: 1,
                }],
                ..Default::default()
            }),
        },
    ));
    assert_eq!(
        err.to_string(),
        "invalid required_groups[0].group: approver group \"compliance\" does not exist"
    );
    let err = hub.err(as_(
        "root",
        Command::SetApproverGroup {
            name: "compliance".into(),
            members: [operator("ann"), operator("zed")].into_iter().collect(),
        },
    ));
    assert_eq!(
        err.to_string(),
        "invalid members: operator/zed holds no role binding: the hub knows no such identity"
    );
    group(&mut hub, "compliance", &["ann"]);
    let err = hub.err(as_(
        "root",
        Command::SetApprovalPolicy {
            scope: prod(),
            policy: Some(ApprovalPolicySpec {
                required_groups: vec![GroupRequirement {
                    group: "compliance".into(),
                    count: 2,
                }],
                ..Default::default()
            }),
        },
    ));
    assert!(err.to_string().contains("which has 1 members"), "{err}");
    let err = hub.err(as_(
        "root",
        Command::SetApprovalPolicy {
            scope: PolicyScope::Environment("nowhere".into()),
            policy: Some(ApprovalPolicySpec::default()),
        },
    ));
    assert!(err.to_string().contains("environment/nowhere"), "{err}");
    // Only admins set policies and groups.
    let err = hub.err(as_(
        "olga",
        Command::SetApprovalPolicy {
            scope: prod(),
            policy: Some(ApprovalPolicySpec::default()),
        },
    ));
    assert!(matches!(err, CommandError::PermissionDenied(_)), "{err:?}");
    // A group a policy requires cannot be deleted.
    policy(
        &mut hub,
        prod(),
        ApprovalPolicySpec {
            required_groups: vec![GroupRequirement {
                group: "compliance".into(),
                count: 1,
            }],
            ..Default::default()
        },
    );
    let err = hub.err(as_(
        "root",
        Command::DeleteApproverGroup {
            name: "compliance".into(),
        },
    ));
    assert!(
        err.to_string()
            .contains("required by policy environment/prod"),
        "{err}"
    );
}

#[test]
fn the_direct_override_stays_for_environment_operators_only() {
    let (mut hub, w) = hub_with_window();
    let add = |who: &str| {
        as_(
            who,
            Command::AddWindowOverride {
                scope: Scope::Entity(w.clone()),
                start_ms: T0,
                end_ms: T0 + HOUR,
                reason: "direct".into(),
                actor: String::new(),
            },
        )
    };
    let err = hub.err(add("ann"));
    assert!(matches!(err, CommandError::PermissionDenied(_)), "{err:?}");
    hub.ok(add("olga"));
    assert!(window_passes(&hub.eval(&w)));
}

#[test]
fn an_exception_to_a_product_window_is_approved_by_the_product_s_editors() {
    let (mut hub, w) = hub_with_window();
    hub.ok(Command::SetProductWindow {
        product_id: WEB.into(),
        window: Some(window(WEDNESDAY)),
    });
    let wx = request(&mut hub, "olga", Scope::Entity(w.clone()));
    let err = hub.err(approve("ann", &wx)).to_string();
    assert!(err.contains("product-editor on com.example:web"), "{err}");
    hub.ok(approve("pat", &wx));
    assert!(window_passes(&hub.eval(&w)));
}

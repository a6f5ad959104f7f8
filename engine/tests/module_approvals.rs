//! Issue 55, items 1 and 3: module installations track a release channel, and their change
//! requests follow an approval policy (automatic by semver part, variable and entity changes;
//! distinct approvers; required groups; no self-approval; expiry). Every command runs as a
//! verified operator through the [`Hub`] harness.

mod common;

use std::collections::BTreeMap;

use common::actors::*;
use common::*;
use hub_engine::access::Role;
use hub_engine::approval::{
    ApprovalPolicySpec, AutoApproval, GroupRequirement, PolicyScope, SemverPart,
};
use hub_engine::installation::ChangeRequestStatus;
use hub_engine::{Command, CommandError, CommandOutput};

const MODULE: &str = "web-module";

/// The module, with `extra` variables declared (each with a default).
fn module_yaml(revision: u32, extra: &[&str]) -> String {
    let mut vars = String::new();
    for name in extra {
        vars.push_str(&format!(
            "  {name}:\n    type: string\n    string:\n      defaultValue: x\n      description: d\n"
        ));
    }
    format!(
        "# revision {revision}\nname: {MODULE}\nvariables:\n  ns:\n    type: string\n    string:\n      \
         defaultValue: web\n      description: namespace\n{vars}entities:\n  - type: helmChart\n    \
         helmChart:\n      productId: com.example:web\n      k8sNamespace: \"{{{{ moduleVariable.ns }}}}\"\n"
    )
}

fn publish(hub: &mut Hub, revision: u32, extra: &[&str]) {
    hub.ok(as_(
        "mo",
        Command::PublishModule {
            file_name: None,
            yaml: module_yaml(revision, extra),
        },
    ));
}

fn install(hub: &mut Hub, env: &str, channel: Option<&str>) {
    hub.ok(as_(
        "root",
        Command::InstallModuleOnChannel {
            environment: env.into(),
            module: MODULE.into(),
            version: None,
            variables: BTreeMap::new(),
            channel: channel.map(str::to_string),
            actor: String::new(),
        },
    ));
}

fn env_scope(env: &str) -> PolicyScope {
    PolicyScope::Environment(env.into())
}

/// Open change requests of an installation.
fn open_crs(hub: &Hub, installation: &str) -> Vec<String> {
    hub.state
        .change_requests()
        .filter(|c| c.installation == installation && c.status.is_open())
        .map(|c| c.id.clone())
        .collect()
}

fn only_open(hub: &Hub, installation: &str) -> String {
    let open = open_crs(hub, installation);
    assert_eq!(open.len(), 1, "{open:?}");
    open[0].clone()
}

fn approve(who: &str, cr: &str) -> Command {
    as_(
        who,
        Command::ApproveChangeRequest {
            id: cr.into(),
            actor: String::new(),
        },
    )
}

/// `root` admin, `mo` module editor, approvers `ann`, `bob` in stage and prod, `vic` viewer;
/// module published at 0.1.0 and installed in stage and prod.
fn hub_with_installations() -> Hub {
    let mut hub = Hub::new();
    bind(&mut hub, "root", Role::Admin, &[]);
    hub.env("stage");
    hub.env("prod");
    bind(&mut hub, "mo", Role::ModuleEditor, &[]);
    bind(&mut hub, "ann", Role::Approver, &["stage", "prod"]);
    bind(&mut hub, "bob", Role::Approver, &["stage", "prod"]);
    bind(&mut hub, "vic", Role::Viewer, &[]);
    publish(&mut hub, 1, &[]);
    install(&mut hub, "stage", None);
    install(&mut hub, "prod", None);
    hub
}

#[test]
fn minor_updates_are_automatic_in_stage_and_need_two_approvers_in_prod() {
    let mut hub = hub_with_installations();
    policy(
        &mut hub,
        env_scope("stage"),
        ApprovalPolicySpec {
            auto_approve: AutoApproval {
                up_to: Some(SemverPart::Minor),
                ..Default::default()
            },
            ..Default::default()
        },
    );
    policy(
        &mut hub,
        env_scope("prod"),
        ApprovalPolicySpec {
            approvers: 2,
            ..Default::default()
        },
    );
    publish(&mut hub, 2, &[]);
    let stage = hub.state.installation("stage/web-module").unwrap();
    assert_eq!(stage.version, v("0.2.0"), "merged by the stage policy");
    let merged = hub
        .state
        .change_requests()
        .find(|c| c.installation == "stage/web-module")
        .unwrap();
    assert_eq!(merged.status, ChangeRequestStatus::Merged);
    assert_eq!(
        merged.decided_by.as_deref(),
        Some("policy environment/stage")
    );

    let cr = only_open(&hub, "prod/web-module");
    let record = hub
        .state
        .change_request_approval(&cr)
        .expect("policy recorded");
    assert_eq!(record.approvals.policy.source, Some(env_scope("prod")));
    assert_eq!(record.approvals.requester, Some(operator("mo")));
    assert_eq!(
        record.approvals.outstanding_text(),
        "2 more: approver on prod"
    );
    assert!(
        hub.state
            .change_request(&cr)
            .unwrap()
            .message
            .contains("needs approval"),
        "{:?}",
        hub.state.change_request(&cr).unwrap().message
    );

    hub.ok(approve("ann", &cr));
    assert!(hub.state.change_request(&cr).unwrap().status.is_open());
    assert_eq!(
        hub.state
            .change_request_approval(&cr)
            .unwrap()
            .approvals
            .outstanding_text(),
        "1 more: approver on prod"
    );
    let err = hub.err(approve("ann", &cr)).to_string();
    assert!(
        err.contains("operator/ann") && err.contains("twice"),
        "{err}"
    );
    let err = hub.err(approve("vic", &cr));
    assert!(matches!(err, CommandError::PermissionDenied(_)), "{err:?}");
    assert!(err.to_string().contains("operator/vic"), "{err}");
    hub.ok(approve("bob", &cr));
    let c = hub.state.change_request(&cr).unwrap();
    assert_eq!(c.status, ChangeRequestStatus::Merged);
    assert_eq!(c.decided_by.as_deref(), Some("operator/bob"));
    assert_eq!(
        hub.state.installation("prod/web-module").unwrap().version,
        v("0.2.0")
    );
}

#[test]
fn auto_approval_stops_at_variable_changes_and_larger_parts() {
    let mut hub = hub_with_installations();
    policy(
        &mut hub,
        env_scope("stage"),
        ApprovalPolicySpec {
            auto_approve: AutoApproval {
                up_to: Some(SemverPart::Minor),
                variable_changes: false,
                entity_changes: false,
            },
            ..Default::default()
        },
    );
    // 0.2.0 declares a new variable: not automatic.
    publish(&mut hub, 2, &["extra"]);
    let cr = only_open(&hub, "stage/web-module");
    let message = hub.state.change_request(&cr).unwrap().message.clone();
    assert!(message.contains("variables"), "{message}");
    // With the same variables as the installed version it would have been: patch < minor.
    policy(
        &mut hub,
        env_scope("stage"),
        ApprovalPolicySpec {
            auto_approve: AutoApproval {
                up_to: Some(SemverPart::Patch),
                variable_changes: true,
                entity_changes: true,
            },
            ..Default::default()
        },
    );
    publish(&mut hub, 3, &["extra"]);
    let cr = only_open(&hub, "stage/web-module");
    let message = hub.state.change_request(&cr).unwrap().message.clone();
    assert!(message.contains("a minor update"), "{message}");
}

#[test]
fn required_groups_self_approval_and_expiry_on_change_requests() {
    let mut hub = hub_with_installations();
    // mo (the module's editor) is also an approver of prod; carl is in compliance only.
    bind(&mut hub, "mo", Role::Approver, &["prod"]);
    bind(&mut hub, "carl", Role::Viewer, &[]);
    hub.ok(as_(
        "root",
        Command::SetApproverGroup {
            name: "compliance".into(),
            members: [operator("carl")].into_iter().collect(),
        },
    ));
    policy(
        &mut hub,
        PolicyScope::Installation("prod/web-module".into()),
        ApprovalPolicySpec {
            approvers: 1,
            required_groups: vec![GroupRequirement {
                group: "compliance".into(),
                count: 1,
            }],
            expire_after_ms: Some(DAY as u64),
            ..Default::default()
        },
    );
    publish(&mut hub, 2, &[]);
    let cr = only_open(&hub, "prod/web-module");
    // The publisher cannot approve the update of their own module.
    let err = hub.err(approve("mo", &cr)).to_string();
    assert!(
        err.contains("operator/mo")
            && err.contains("they requested it")
            && err.contains("policy installation/prod/web-module"),
        "{err}"
    );
    hub.ok(approve("ann", &cr));
    assert_eq!(
        hub.state
            .change_request_approval(&cr)
            .unwrap()
            .approvals
            .outstanding_text(),
        "1 more: member of group compliance"
    );
    // A day later the request expired: carl's approval is refused and nothing merges.
    hub.advance(DAY);
    let err = hub.err(approve("carl", &cr)).to_string();
    assert!(
        err.contains("operator/carl") && err.contains("expired at"),
        "{err}"
    );
    assert_eq!(
        hub.state.installation("prod/web-module").unwrap().version,
        v("0.1.0")
    );
    // The next version's request is on time: carl (no approver role) completes it.
    publish(&mut hub, 3, &[]);
    let cr = only_open(&hub, "prod/web-module");
    hub.ok(approve("carl", &cr));
    hub.ok(approve("bob", &cr));
    assert_eq!(
        hub.state.installation("prod/web-module").unwrap().version,
        v("0.3.0")
    );
}

#[test]
fn a_new_version_reaches_an_installation_only_on_its_channel() {
    let mut hub = hub_with_installations();
    hub.ok(Command::CreateChannel {
        name: "STABLE".into(),
        description: String::new(),
    });
    // prod tracks STABLE, which holds no version yet: its installation now waits for one.
    hub.ok(as_(
        "root",
        Command::SetInstallationChannel {
            installation: "prod/web-module".into(),
            channel: Some("STABLE".into()),
            actor: String::new(),
        },
    ));
    assert_eq!(hub.state.tracked_channel("prod/web-module"), "STABLE");
    assert_eq!(hub.state.tracked_channel("stage/web-module"), "RELEASE");
    publish(&mut hub, 2, &[]);
    assert_eq!(
        open_crs(&hub, "stage/web-module").len(),
        1,
        "RELEASE has it"
    );
    assert!(
        open_crs(&hub, "prod/web-module").is_empty(),
        "STABLE has not"
    );
    let add = |member| {
        as_(
            "mo",
            Command::SetModuleChannel {
                module: MODULE.into(),
                version: "0.2.0".into(),
                channel: "STABLE".into(),
                member,
            },
        )
    };
    hub.ok(add(true));
    let cr = only_open(&hub, "prod/web-module");
    assert_eq!(
        hub.state.change_request(&cr).unwrap().to_version,
        v("0.2.0")
    );
    // Taken off the channel before approval: the request is cancelled.
    hub.ok(add(false));
    assert_eq!(
        hub.state.change_request(&cr).unwrap().status,
        ChangeRequestStatus::Cancelled
    );
    // A channel that does not exist is refused by name.
    let err = hub.err(as_(
        "root",
        Command::InstallModuleOnChannel {
            environment: "prod".into(),
            module: MODULE.into(),
            version: None,
            variables: BTreeMap::new(),
            channel: Some("NIGHTLY".into()),
            actor: String::new(),
        },
    ));
    assert_eq!(
        err.to_string(),
        "invalid channel: channel \"NIGHTLY\" does not exist"
    );
    // An environment's policy gives new installations their default channel.
    hub.env("qa");
    policy(
        &mut hub,
        env_scope("qa"),
        ApprovalPolicySpec {
            default_channel: Some("STABLE".into()),
            ..Default::default()
        },
    );
    hub.ok(add(true));
    let out = hub.ok(as_(
        "root",
        Command::InstallModuleOnChannel {
            environment: "qa".into(),
            module: MODULE.into(),
            version: None,
            variables: BTreeMap::new(),
            channel: None,
            actor: String::new(),
        },
    ));
    let CommandOutput::Changed { summary, .. } = out else {
        panic!("{out:?}");
    };
    assert!(summary.contains("tracking channel STABLE"), "{summary}");
    assert_eq!(
        hub.state.installation("qa/web-module").unwrap().version,
        v("0.2.0")
    );
}

#[test]
fn change_requests_without_a_policy_keep_one_approver_of_the_environment() {
    let mut hub = hub_with_installations();
    publish(&mut hub, 2, &[]);
    let cr = only_open(&hub, "prod/web-module");
    assert!(hub.state.change_request_approval(&cr).is_none());
    let err = hub.err(approve("vic", &cr));
    assert!(err.to_string().contains("needs approver on prod"), "{err}");
    hub.ok(approve("ann", &cr));
    assert_eq!(
        hub.state.change_request(&cr).unwrap().status,
        ChangeRequestStatus::Merged
    );
}

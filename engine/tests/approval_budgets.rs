//! Budgets of issue 55's commands (tags 59–67: approver groups, approval policies,
//! window-exception requests, module channels): every list and every name or id they carry is
//! accepted at its limit (or, where nothing that long can exist, passes its budget and is
//! looked up), and one over is refused naming the field and the limit. The [`Hub`] harness
//! checks that each refusal changes nothing but its audit row.

mod common;

use std::collections::BTreeMap;

use common::actors::*;
use common::*;
use hub_engine::access::Role;
use hub_engine::approval::{
    ApprovalPolicySpec, GroupRequirement, PolicyScope, MAX_GROUP_MEMBERS, MAX_MODULE_VERSION_LEN,
    MAX_REQUEST_ID_LEN, MAX_REQUIRED_GROUPS,
};
use hub_engine::entity::MAX_ENTITY_ID_LEN;
use hub_engine::name::{MAX_CHANNEL_NAME_LEN, MAX_NAME_LEN};
use hub_engine::suppression::Scope;
use hub_engine::{Command, CommandError};

/// `MAX_TEXT` of the engine's apply: the longest reason.
const MAX_REASON: usize = 1024;

/// A DNS label of `len` bytes.
fn label(len: usize) -> String {
    format!("l{}", "x".repeat(len - 1))
}

/// A custom channel name of `len` bytes.
fn channel(len: usize) -> String {
    format!("C{}", "X".repeat(len - 1))
}

/// `command` by `who` is refused by the budget of `field`, whose limit is `limit`.
fn over(hub: &mut Hub, who: &str, command: Command, field: &str, limit: usize) {
    match hub.err(as_(who, command)) {
        CommandError::InvalidField { field: f, reason } => {
            assert_eq!(f, field, "{reason}");
            assert!(
                reason.contains(&limit.to_string()),
                "{field}: the reason names the limit {limit}: {reason}"
            );
        }
        other => panic!("{field}: not refused by its budget: {other:?}"),
    }
}

/// `command` by `who` passes its budgets and is refused as naming nothing.
fn looked_up(hub: &mut Hub, who: &str, command: Command) {
    match hub.err(as_(who, command)) {
        CommandError::NotFound { .. } => {}
        other => panic!("refused before the lookup: {other:?}"),
    }
}

/// `root` admin, environment `prod` with entity `web`, `ann` approves in prod.
fn hub() -> (Hub, String) {
    let mut hub = Hub::new();
    bind(&mut hub, "root", Role::Admin, &[]);
    hub.env("prod");
    hub.product("com.example:web");
    let web = hub.helm("prod", "web", "com.example:web");
    bind(&mut hub, "ann", Role::Approver, &["prod"]);
    (hub, web)
}

fn group(name: &str, members: impl IntoIterator<Item = String>) -> Command {
    Command::SetApproverGroup {
        name: name.into(),
        members: members.into_iter().map(|m| operator(&m)).collect(),
    }
}

fn set_policy(scope: PolicyScope, spec: ApprovalPolicySpec) -> Command {
    Command::SetApprovalPolicy {
        scope,
        policy: Some(spec),
    }
}

fn requiring(groups: impl IntoIterator<Item = String>) -> ApprovalPolicySpec {
    ApprovalPolicySpec {
        required_groups: groups
            .into_iter()
            .map(|group| GroupRequirement { group, count: 1 })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn an_approver_groups_members_and_name() {
    let (mut hub, _) = hub();
    let names: Vec<String> = (0..=MAX_GROUP_MEMBERS).map(|i| format!("m{i}")).collect();
    for m in &names[..MAX_GROUP_MEMBERS] {
        bind(&mut hub, m, Role::Viewer, &[]);
    }
    let long = label(MAX_NAME_LEN);
    hub.ok(as_(
        "root",
        group(&long, names[..MAX_GROUP_MEMBERS].to_vec()),
    ));
    assert_eq!(
        hub.state.approver_group(&long).unwrap().members.len(),
        MAX_GROUP_MEMBERS
    );
    // One more member (the count is checked before whether each is known).
    let all = group(&label(5), names.clone());
    over(&mut hub, "root", all.clone(), "members", MAX_GROUP_MEMBERS);
    let said = hub.err(as_("root", all)).to_string();
    assert!(
        said.contains(&format!("{} identities", MAX_GROUP_MEMBERS + 1)),
        "{said}"
    );
    let one = || names[..1].to_vec();
    over(
        &mut hub,
        "root",
        group(&label(MAX_NAME_LEN + 1), one()),
        "name",
        MAX_NAME_LEN,
    );
    let delete = |name: String| Command::DeleteApproverGroup { name };
    over(
        &mut hub,
        "root",
        delete(label(MAX_NAME_LEN + 1)),
        "name",
        MAX_NAME_LEN,
    );
    hub.ok(as_("root", delete(long.clone())));
    assert!(hub.state.approver_group(&long).is_none());
}

#[test]
fn a_policys_required_groups_scope_and_channel() {
    let (mut hub, _) = hub();
    let groups: Vec<String> = (0..=MAX_REQUIRED_GROUPS).map(|i| format!("g{i}")).collect();
    for g in &groups {
        hub.ok(as_("root", group(g, ["ann".to_string()])));
    }
    let prod = || PolicyScope::Environment("prod".into());
    let most = requiring(groups[..MAX_REQUIRED_GROUPS].to_vec());
    hub.ok(as_("root", set_policy(prod(), most)));
    let too_many = set_policy(prod(), requiring(groups.clone()));
    over(
        &mut hub,
        "root",
        too_many.clone(),
        "required_groups",
        MAX_REQUIRED_GROUPS,
    );
    let said = hub.err(as_("root", too_many)).to_string();
    let count = format!("{} groups", MAX_REQUIRED_GROUPS + 1);
    assert!(said.contains(&count), "{said}");

    // A required group's name.
    let long = label(MAX_NAME_LEN);
    hub.ok(as_("root", group(&long, ["ann".to_string()])));
    hub.ok(as_("root", set_policy(prod(), requiring([long]))));
    let unnamed = set_policy(prod(), requiring([label(MAX_NAME_LEN + 1)]));
    let field = "required_groups[0].group";
    over(&mut hub, "root", unnamed, field, MAX_NAME_LEN);

    // The scope: an environment, a product (each part), an installation (each part).
    let env = label(MAX_NAME_LEN);
    hub.env(&env);
    let one = || requiring(["g0".to_string()]);
    hub.ok(as_(
        "root",
        set_policy(PolicyScope::Environment(env), one()),
    ));
    let scope = PolicyScope::Environment(label(MAX_NAME_LEN + 1));
    over(
        &mut hub,
        "root",
        set_policy(scope, one()),
        "scope",
        MAX_NAME_LEN,
    );
    let product = |len: usize| format!("com.example:{}", "p".repeat(len));
    hub.product(&product(128));
    let scope = PolicyScope::Product(product(128));
    hub.ok(as_("root", set_policy(scope, one())));
    let scope = PolicyScope::Product(product(129));
    over(&mut hub, "root", set_policy(scope, one()), "scope", 128);
    let installation = |len: usize| PolicyScope::Installation(format!("prod/{}", label(len)));
    looked_up(
        &mut hub,
        "root",
        set_policy(installation(MAX_NAME_LEN), one()),
    );
    over(
        &mut hub,
        "root",
        set_policy(installation(MAX_NAME_LEN + 1), one()),
        "scope",
        MAX_NAME_LEN,
    );

    // Its default channel.
    let c = channel(MAX_CHANNEL_NAME_LEN);
    hub.ok(Command::CreateChannel {
        name: c.clone(),
        description: String::new(),
    });
    let with_channel = |name: String| ApprovalPolicySpec {
        default_channel: Some(name),
        ..Default::default()
    };
    hub.ok(as_("root", set_policy(prod(), with_channel(c))));
    let long = with_channel(channel(MAX_CHANNEL_NAME_LEN + 1));
    let field = "default_channel";
    over(
        &mut hub,
        "root",
        set_policy(prod(), long),
        field,
        MAX_CHANNEL_NAME_LEN,
    );
}

#[test]
fn a_window_exceptions_scope_reason_and_id() {
    let (mut hub, web) = hub();
    let request = |scope: Scope, reason: String| Command::RequestWindowException {
        scope,
        start_ms: T0,
        end_ms: T0 + HOUR,
        reason,
        actor: String::new(),
    };
    let env = || Scope::Environment("prod".into());
    let reason = |len: usize| "r".repeat(len);
    let wx = match hub.ok(as_("root", request(env(), reason(MAX_REASON)))) {
        hub_engine::CommandOutput::Changed { id, .. } => id,
        other => panic!("{other:?}"),
    };
    let long = request(env(), reason(MAX_REASON + 1));
    over(&mut hub, "root", long, "reason", MAX_REASON);
    let scope = Scope::Environment(label(MAX_NAME_LEN + 1));
    over(
        &mut hub,
        "root",
        request(scope, reason(3)),
        "scope",
        MAX_NAME_LEN,
    );
    // Entity ids are shorter than MAX_ENTITY_ID_LEN.
    let entity = |len: usize| Scope::Entity(format!("{web}{}", "x".repeat(len - web.len())));
    looked_up(
        &mut hub,
        "root",
        request(entity(MAX_ENTITY_ID_LEN - 1), reason(3)),
    );
    over(
        &mut hub,
        "root",
        request(entity(MAX_ENTITY_ID_LEN), reason(3)),
        "scope",
        MAX_ENTITY_ID_LEN,
    );

    // Request ids, when approved or rejected.
    let id = |len: usize| format!("wx-{}", "9".repeat(len - 3));
    let approve = |id: String| Command::ApproveWindowException {
        id,
        actor: String::new(),
    };
    let reject = |id: String, reason: String| Command::RejectWindowException {
        id,
        reason,
        actor: String::new(),
    };
    looked_up(&mut hub, "ann", approve(id(MAX_REQUEST_ID_LEN)));
    let long = approve(id(MAX_REQUEST_ID_LEN + 1));
    over(&mut hub, "ann", long, "id", MAX_REQUEST_ID_LEN);
    looked_up(&mut hub, "ann", reject(id(MAX_REQUEST_ID_LEN), reason(3)));
    let long = reject(id(MAX_REQUEST_ID_LEN + 1), reason(3));
    over(&mut hub, "ann", long, "id", MAX_REQUEST_ID_LEN);
    let long = reject(wx.clone(), reason(MAX_REASON + 1));
    over(&mut hub, "ann", long, "reason", MAX_REASON);
    hub.ok(as_("ann", reject(wx, reason(MAX_REASON))));
}

/// A module named `name` with one helm chart entity.
fn module_yaml(name: &str) -> String {
    format!(
        "name: {name}\nvariables:\n  ns:\n    type: string\n    string:\n      \
         defaultValue: web\n      description: namespace\nentities:\n  - type: helmChart\n    \
         helmChart:\n      productId: com.example:web\n      k8sNamespace: \"{{{{ moduleVariable.ns }}}}\"\n"
    )
}

#[test]
fn module_channel_commands_names_and_versions() {
    let (mut hub, _) = hub();
    bind(&mut hub, "mo", Role::ModuleEditor, &[]);
    let (module, env, c) = (
        label(MAX_NAME_LEN),
        label(MAX_NAME_LEN),
        channel(MAX_CHANNEL_NAME_LEN),
    );
    hub.env(&env);
    hub.ok(as_(
        "mo",
        Command::PublishModule {
            file_name: None,
            yaml: module_yaml(&module),
        },
    ));
    hub.ok(Command::CreateChannel {
        name: c.clone(),
        description: String::new(),
    });
    let on_channel = |module: &str, version: &str, channel: &str| Command::SetModuleChannel {
        module: module.into(),
        version: version.into(),
        channel: channel.into(),
        member: true,
    };
    let version = |len: usize| format!("0.1.0-{}", "x".repeat(len - 6));
    let (long_name, long_channel) = (label(MAX_NAME_LEN + 1), channel(MAX_CHANNEL_NAME_LEN + 1));
    let long_version = version(MAX_MODULE_VERSION_LEN + 1);
    hub.ok(as_("mo", on_channel(&module, "0.1.0", &c)));
    looked_up(
        &mut hub,
        "mo",
        on_channel(&module, &version(MAX_MODULE_VERSION_LEN), &c),
    );
    let cmd = on_channel(&long_name, "0.1.0", &c);
    over(&mut hub, "mo", cmd, "module", MAX_NAME_LEN);
    let cmd = on_channel(&module, &long_version, &c);
    over(&mut hub, "mo", cmd, "version", MAX_MODULE_VERSION_LEN);
    let cmd = on_channel(&module, "0.1.0", &long_channel);
    over(&mut hub, "mo", cmd, "channel", MAX_CHANNEL_NAME_LEN);

    let install = |env: &str, module: &str, version: Option<&str>, channel: &str| {
        Command::InstallModuleOnChannel {
            environment: env.into(),
            module: module.into(),
            version: version.map(str::to_string),
            variables: BTreeMap::new(),
            channel: Some(channel.into()),
            actor: String::new(),
        }
    };
    let cmd = install(&long_name, &module, None, &c);
    over(&mut hub, "root", cmd, "environment", MAX_NAME_LEN);
    let cmd = install(&env, &long_name, None, &c);
    over(&mut hub, "root", cmd, "module", MAX_NAME_LEN);
    let cmd = install(&env, &module, Some(&long_version), &c);
    over(&mut hub, "root", cmd, "version", MAX_MODULE_VERSION_LEN);
    let cmd = install(&env, &module, None, &long_channel);
    over(&mut hub, "root", cmd, "channel", MAX_CHANNEL_NAME_LEN);
    let at_limit = version(MAX_MODULE_VERSION_LEN);
    looked_up(
        &mut hub,
        "root",
        install(&env, &module, Some(&at_limit), &c),
    );
    hub.ok(as_("root", install(&env, &module, None, &c)));

    let installation = format!("{env}/{module}");
    assert!(hub.state.installation(&installation).is_some());
    let track = |installation: &str, channel: Option<&str>| Command::SetInstallationChannel {
        installation: installation.into(),
        channel: channel.map(str::to_string),
        actor: String::new(),
    };
    hub.ok(as_("root", track(&installation, None)));
    hub.ok(as_("root", track(&installation, Some(&c))));
    let cmd = track(&format!("{env}/{long_name}"), None);
    over(&mut hub, "root", cmd, "installation", MAX_NAME_LEN);
    let cmd = track(&installation, Some(&long_channel));
    over(&mut hub, "root", cmd, "channel", MAX_CHANNEL_NAME_LEN);
}

//! Issue 55's approvals against real processes with mutual TLS, each person with their own
//! certificate: an approval policy with a required group, a window-exception request that
//! opens the window only once every requirement is met (the requester cannot approve their
//! own, nobody approves twice, a viewer cannot approve, and a refusal changes nothing), and a
//! module installation that follows a custom channel, its change request showing the policy,
//! who approved and who still must.

use hub_client::answer::{
    ApprovalPolicyView, ChangeRequestView, EntityView, ModuleInstallationView, WindowExceptionView,
};
use hub_tests::{poll_until, Cluster, CmdOutput, CONVERGE_TIMEOUT};
use hub_tls::Identity;

/// Exit code of a refused write.
const REFUSED: i32 = 1;

fn op(name: &str) -> Identity {
    Identity::Operator(name.into())
}

#[track_caller]
fn ok(out: CmdOutput, what: &str) -> CmdOutput {
    out.expect_ok(what)
}

/// The admin's answer to `args` (`-o json`: the hub's answer, or its rows, unchanged).
#[track_caller]
fn json<A: serde::de::DeserializeOwned>(c: &Cluster, args: &[&str]) -> A {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    ok(c.hubctl(&all), &args.join(" ")).answer()
}

/// The window-exception request `id` as the admin reads it.
fn request(c: &Cluster, id: &str) -> WindowExceptionView {
    let list: Vec<WindowExceptionView> = json(c, &["window", "override", "requests"]);
    list.iter()
        .find(|w| w.id == id)
        .cloned()
        .unwrap_or_else(|| panic!("request {id} not listed: {list:?}"))
}

/// Binds `who` to `role` on environment prod.
fn bind(c: &Cluster, who: &str, role: &str) {
    ok(
        c.hubctl(&[
            "role",
            "bind",
            &format!("operator/{who}"),
            role,
            "--env",
            "prod",
        ]),
        "role bind",
    );
}

#[test]
fn a_window_exception_opens_only_once_every_requirement_is_met() {
    let c = Cluster::up(3, "");
    ok(c.hubctl(&["env", "create", "prod"]), "env create");
    ok(
        c.hubctl(&["product", "create", "com.example:web"]),
        "product",
    );
    ok(
        c.hubctl(&[
            "entity",
            "create",
            "--env",
            "prod",
            "--kind",
            "helmChart",
            "--name",
            "web",
            "--product",
            "com.example:web",
            "--namespace",
            "web",
        ]),
        "entity create",
    );
    for who in ["alice", "bob", "carol"] {
        bind(&c, who, "approver");
    }
    ok(
        c.hubctl(&["role", "bind", "operator/vic", "viewer"]),
        "bind vic",
    );
    ok(
        c.hubctl(&[
            "approval",
            "group",
            "set",
            "compliance",
            "--member",
            "operator/carol",
        ]),
        "group set",
    );
    // Only an admin sets a policy.
    c.hubctl_as(
        &op("alice"),
        &[
            "approval",
            "policy",
            "set",
            "--env",
            "prod",
            "--require",
            "compliance",
        ],
    )
    .expect_err(REFUSED, "operator/alice may not SetApprovalPolicy");
    ok(
        c.hubctl(&[
            "approval",
            "policy",
            "set",
            "--env",
            "prod",
            "--approvers",
            "1",
            "--require",
            "compliance=1",
            "--expire-after",
            "1d",
        ]),
        "policy set",
    );
    let policies: Vec<ApprovalPolicyView> = json(&c, &["approval", "policy", "list"]);
    assert_eq!(policies[0].scope, "environment/prod", "{policies:?}");
    assert_eq!(policies[0].required_groups[0].group, "compliance");

    let asked = c
        .hubctl_as(
            &op("alice"),
            &[
                "window",
                "override",
                "request",
                "--entity",
                "prod/web",
                "--duration",
                "2h",
                "--reason",
                "hotfix",
                "-o",
                "json",
            ],
        )
        .expect_ok("request")
        .json();
    let id = asked["id"].as_str().expect("an id").to_string();
    let pending = request(&c, &id);
    assert_eq!(pending.status, "pending", "{pending:?}");
    assert_eq!(
        pending.approval.requester.as_deref(),
        Some("operator/alice")
    );

    // Refusals: one's own request, a viewer, the same approver twice. Nothing changes.
    c.hubctl_as(&op("alice"), &["window", "override", "approve", &id])
        .expect_err(REFUSED, "own request");
    c.hubctl_as(&op("vic"), &["window", "override", "approve", &id])
        .expect_err(REFUSED, "operator/vic");
    ok(
        c.hubctl_as(&op("bob"), &["window", "override", "approve", &id]),
        "bob approves",
    );
    let half = request(&c, &id);
    c.hubctl_as(&op("bob"), &["window", "override", "approve", &id])
        .expect_err(REFUSED, "already approved");
    assert_eq!(
        request(&c, &id),
        half,
        "a refused approval changed the request"
    );
    assert_eq!(half.status, "pending", "{half:?}");
    assert_eq!(
        half.approval.outstanding[0], "1 more: member of group compliance",
        "{half:?}"
    );
    let entity: EntityView = json(&c, &["entity", "get", "prod/web"]);
    assert!(entity.window_overrides.is_empty(), "{entity:?}");

    // The compliance member's approval meets the policy and opens the window.
    ok(
        c.hubctl_as(&op("carol"), &["window", "override", "approve", &id]),
        "carol approves",
    );
    let done = request(&c, &id);
    assert_eq!(done.status, "approved", "{done:?}");
    assert!(done.approval.outstanding.is_empty(), "{done:?}");
    let opened = done.override_id.as_deref().expect("an override id");
    let entity: EntityView = json(&c, &["entity", "get", "prod/web"]);
    assert_eq!(entity.window_overrides[0].id, opened, "{entity:?}");
    // The table a person reads says who approved.
    let table = ok(c.hubctl(&["window", "override", "requests"]), "requests").stdout;
    assert!(
        table.contains("operator/bob,operator/carol"),
        "the table names the approvers: {table}"
    );
}

const MODULE: &str = "\
name: web-module
variables:
  ns:
    type: string
    string:
      defaultValue: web
entities:
  - type: helmChart
    helmChart:
      productId: com.example:web
      k8sNamespace: \"{{ moduleVariable.ns }}\"
";

#[test]
fn an_installation_follows_its_channel_and_its_change_request_shows_the_policy() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = Cluster::up(3, "");
    ok(c.hubctl(&["env", "create", "prod"]), "env create");
    ok(
        c.hubctl(&["product", "create", "com.example:web"]),
        "product",
    );
    ok(c.hubctl(&["channel", "create", "STABLE"]), "channel create");
    bind(&c, "alice", "approver");
    let file = dir.path().join("web-module.yml");
    std::fs::write(&file, MODULE).expect("write module");
    let file = file.to_str().expect("utf-8");
    ok(c.hubctl(&["module", "create", "-f", file]), "publish 0.1.0");
    c.hubctl(&[
        "module",
        "install",
        "web-module",
        "-e",
        "prod",
        "--channel",
        "STABLE",
    ])
    .expect_err(
        REFUSED,
        "no version of module web-module is on channel STABLE",
    );
    ok(
        c.hubctl(&["module", "channel", "add", "web-module", "0.1.0", "STABLE"]),
        "0.1.0 on STABLE",
    );
    ok(
        c.hubctl(&[
            "module",
            "install",
            "web-module",
            "-e",
            "prod",
            "--channel",
            "STABLE",
        ]),
        "install on STABLE",
    );
    ok(
        c.hubctl(&[
            "approval",
            "policy",
            "set",
            "--env",
            "prod",
            "--approvers",
            "1",
        ]),
        "policy",
    );
    let installed: Vec<ModuleInstallationView> = json(&c, &["module", "installations"]);
    assert_eq!(installed[0].channel, "STABLE", "{installed:?}");
    assert_eq!(
        installed[0].policy.as_deref(),
        Some("environment/prod"),
        "{installed:?}"
    );

    // 0.2.0 is published but not on STABLE: no change request.
    std::fs::write(
        file,
        MODULE.replace(
            "defaultValue: web",
            "defaultValue: web\n      description: the namespace",
        ),
    )
    .expect("write module");
    ok(c.hubctl(&["module", "create", "-f", file]), "publish 0.2.0");
    let none: Vec<ChangeRequestView> = json(&c, &["changerequest", "list"]);
    assert!(none.is_empty(), "a version off the channel: {none:?}");

    // On STABLE, it reaches the installation as a change request under the policy.
    ok(
        c.hubctl(&["module", "channel", "add", "web-module", "0.2.0", "STABLE"]),
        "channel add",
    );
    let cr = poll_until(CONVERGE_TIMEOUT, || {
        let list: Vec<ChangeRequestView> = json(&c, &["changerequest", "list"]);
        list.first().cloned()
    })
    .expect("a change request once 0.2.0 is on STABLE");
    assert_eq!(cr.to_version, "0.2.0", "{cr:?}");
    let approval = cr.approval.as_ref().expect("an approval");
    assert_eq!(approval.policy, "policy environment/prod", "{cr:?}");
    assert_eq!(
        approval.outstanding[0], "1 more: approver on prod",
        "{cr:?}"
    );
    let id = cr.id.as_str();
    ok(
        c.hubctl_as(&op("alice"), &["changerequest", "approve", id]),
        "alice approves",
    );
    let merged: ChangeRequestView = json(&c, &["changerequest", "get", id]);
    assert_eq!(merged.status, "merged", "{merged:?}");
    assert_eq!(
        merged.approval.as_ref().expect("an approval").approvals[0].identity,
        "operator/alice",
        "{merged:?}"
    );
}

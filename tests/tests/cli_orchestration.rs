//! The orchestration side of hubctl end to end on a 3-node cluster: products, releases and
//! channels; bad input refused with the field named and nothing changed (SPEC S3); entity
//! settings, `entity explain` (SPEC P3), suppressions (SPEC C8), secrets (SPEC S4),
//! break-glass commands (SPEC C2), plans (SPEC P12) and the audit log.
//!
//! No agent runs here: the leader's orchestrator issues plans, which stay issued.

use std::path::{Path, PathBuf};
use std::time::Duration;

use hub_client::answer::{
    AuditEntryView, ChannelView, EntityView, EnvironmentSettingsView, Explanation,
    MeetsConstraints, PlanView, ProductView, RecallView, ReleaseView, SuppressionView,
};
use hub_tests::{poll_until, Cluster, CmdOutput, CONVERGE_TIMEOUT};
use serde_json::Value;

const PRODUCT: &str = "com.example:web";
const SHA: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

fn manifest(version: &str) -> String {
    format!(
        "product-group: com.example\nproduct-name: web\nproduct-version: {version}\n\
         artifacts:\n  - uri: charts/web-{version}.tgz\n    sha256: {SHA}\n"
    )
}

fn write_file(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

#[track_caller]
fn ok(cluster: &Cluster, args: &[&str]) -> CmdOutput {
    let what = args.join(" ");
    cluster.hubctl(args).expect_ok(&what)
}

#[track_caller]
fn ok_json(cluster: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    ok(cluster, &all).json()
}

/// `hubctl ARGS -o json` read as `A`: the hub's answer (or its list of rows) unchanged.
#[track_caller]
fn ok_answer<A: serde::de::DeserializeOwned>(cluster: &Cluster, args: &[&str]) -> A {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    ok(cluster, &all).answer()
}

/// Waits until the state digest stops changing (the orchestrator acts asynchronously).
#[track_caller]
fn wait_settled(cluster: &Cluster) {
    let digest = || {
        ok_json(cluster, &["digest"])["digest"]
            .as_str()
            .expect("digest")
            .to_string()
    };
    let mut last = String::new();
    poll_until(CONVERGE_TIMEOUT, || {
        let d = digest();
        std::thread::sleep(Duration::from_millis(700));
        last = digest();
        (d == last).then_some(())
    })
    .unwrap_or_else(|| panic!("the digest kept changing; last {last}"));
}

/// Every operator-visible view of the orchestration state. (Not the digest: it covers the
/// request-id records too, and a refused write's id is remembered so a retry gets the same
/// answer. The audit's refused rows are left out too: refusals are audited.)
fn domain_state(cluster: &Cluster) -> Value {
    let views: [&[&str]; 13] = [
        &["env", "list"],
        &["entity", "list"],
        &["env", "settings", "prod"],
        &["entity", "get", "prod/web"],
        &["entity", "activity", "prod/web"],
        &["product", "list"],
        &["release", "list"],
        &["release", "recalls"],
        &["channel", "list"],
        &["suppression", "list"],
        &["plan", "list"],
        &["audit"],
        &["entity", "explain", "prod/web"],
    ];
    let mut all = serde_json::Map::new();
    for args in views {
        let mut v = ok_json(cluster, args);
        if let Some(o) = v.as_object_mut() {
            o.remove("evaluated_at");
        }
        if args == ["audit"] {
            if let Some(rows) = v.as_array_mut() {
                rows.retain(|r| r["outcome"] == "applied");
            }
        }
        all.insert(args.join(" "), v);
    }
    Value::Object(all)
}

fn release<'a>(list: &'a [ReleaseView], version: &str) -> &'a ReleaseView {
    list.iter()
        .find(|r| r.version == version)
        .unwrap_or_else(|| panic!("no release {version} in {list:?}"))
}

/// Env `prod`, product, entity `prod/web` (helm chart).
fn base_setup(cluster: &Cluster) {
    ok(cluster, &["env", "create", "prod"]);
    ok(
        cluster,
        &["product", "create", PRODUCT, "--description", "web app"],
    );
    ok(
        cluster,
        &[
            "entity",
            "create",
            "--env",
            "prod",
            "--kind",
            "helmChart",
            "--name",
            "web",
            "--product",
            PRODUCT,
            "--namespace",
            "web",
        ],
    );
}

#[test]
fn products_releases_channels_and_recalls() {
    let cluster = Cluster::up(3, "");
    let dir = tempfile::tempdir().expect("tempdir");

    let out = ok_json(
        &cluster,
        &["product", "create", PRODUCT, "--description", "web app"],
    );
    assert_eq!(out["id"], PRODUCT, "{out}");
    let products: Vec<ProductView> = ok_answer(&cluster, &["product", "list"]);
    assert_eq!(products[0].id, PRODUCT, "{products:?}");

    for v in ["1.0.0", "1.1.0-rc1"] {
        let path = write_file(dir.path(), &format!("{v}.yml"), &manifest(v));
        let args = [
            "release",
            "publish",
            "-f",
            path.to_str().expect("utf-8 path"),
        ];
        let out = ok_json(&cluster, &args);
        assert_eq!(out["id"], format!("{PRODUCT}@{v}"), "{out}");
    }

    // A plain release is in every built-in channel, an -rc only in DEV and RELEASE_CANDIDATE.
    let list: Vec<ReleaseView> = ok_answer(&cluster, &["release", "list", PRODUCT]);
    assert_eq!(
        release(&list, "1.0.0").channels,
        ["DEV", "RELEASE_CANDIDATE", "RELEASE"]
    );
    assert_eq!(
        release(&list, "1.1.0-rc1").channels,
        ["DEV", "RELEASE_CANDIDATE"]
    );
    let table = ok(&cluster, &["release", "list"]);
    let lines: Vec<&str> = table.stdout.lines().collect();
    assert!(
        lines[0].starts_with("PRODUCT") && lines[0].contains("CHANNELS"),
        "{}",
        table.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("1.0.0") && l.contains("DEV,RELEASE_CANDIDATE,RELEASE")),
        "{}",
        table.stdout
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains("1.1.0-rc1") && !l.contains(",RELEASE ")),
        "{}",
        table.stdout
    );

    // Custom channel membership.
    ok(
        &cluster,
        &["channel", "create", "CANARY", "--description", "early"],
    );
    ok(
        &cluster,
        &["channel", "add", "CANARY", PRODUCT, "1.1.0-rc1"],
    );
    let channels: Vec<ChannelView> = ok_answer(&cluster, &["channel", "list"]);
    assert!(
        channels.iter().any(|c| c.name == "CANARY" && !c.builtin),
        "{channels:?}"
    );
    let list: Vec<ReleaseView> = ok_answer(&cluster, &["release", "list", PRODUCT]);
    assert!(
        release(&list, "1.1.0-rc1")
            .channels
            .contains(&"CANARY".to_string()),
        "{list:?}"
    );
    ok(
        &cluster,
        &["channel", "remove", "CANARY", PRODUCT, "1.1.0-rc1"],
    );

    // Recall, list, withdraw.
    let recall = ok_json(
        &cluster,
        &[
            "release",
            "recall",
            PRODUCT,
            "--version",
            "1.1.0-rc1",
            "--reason",
            "bad rc",
        ],
    );
    let rid = recall["id"].as_str().expect("recall id").to_string();
    assert!(rid.starts_with("r-"), "{recall}");
    let list: Vec<ReleaseView> = ok_answer(&cluster, &["release", "list", PRODUCT]);
    assert_eq!(
        release(&list, "1.1.0-rc1").recalled.as_deref(),
        Some(rid.as_str())
    );
    assert!(release(&list, "1.0.0").recalled.is_none(), "{list:?}");
    let recalls: Vec<RecallView> = ok_answer(&cluster, &["release", "recalls"]);
    assert_eq!(recalls[0].id, rid, "{recalls:?}");
    assert_eq!(recalls[0].reason, "bad rc", "{recalls:?}");
    ok(&cluster, &["release", "unrecall", &rid]);
    let list: Vec<ReleaseView> = ok_answer(&cluster, &["release", "list", PRODUCT]);
    assert!(release(&list, "1.1.0-rc1").recalled.is_none(), "{list:?}");

    // Product window.
    ok(
        &cluster,
        &[
            "product",
            "window",
            "set",
            PRODUCT,
            "--window",
            "SATURDAY/22:00-SUNDAY/04:00",
            "--time-zone",
            "Europe/Berlin",
        ],
    );
    let products: Vec<ProductView> = ok_answer(&cluster, &["product", "list"]);
    let window = products[0].maintenance_window.as_deref().unwrap_or("");
    assert!(window.contains("Europe/Berlin"), "{products:?}");
    ok(&cluster, &["product", "window", "clear", PRODUCT]);
    let products: Vec<ProductView> = ok_answer(&cluster, &["product", "list"]);
    assert!(products[0].maintenance_window.is_none(), "{products:?}");
}

#[test]
fn bad_input_is_refused_with_the_field_named_and_changes_nothing() {
    let cluster = Cluster::up(3, "");
    let dir = tempfile::tempdir().expect("tempdir");
    base_setup(&cluster);
    let good = write_file(dir.path(), "good.yml", &manifest("1.0.0"));
    ok(
        &cluster,
        &["release", "publish", "-f", good.to_str().expect("utf-8")],
    );
    wait_settled(&cluster);
    let before = domain_state(&cluster);

    // SPEC S3: an unknown manifest field is named.
    let bad = write_file(
        dir.path(),
        "bad.yml",
        &format!("{}colour: blue\n", manifest("2.0.0")),
    );
    cluster
        .hubctl(&["release", "publish", "-f", bad.to_str().expect("utf-8")])
        .expect_err(1, "colour");
    // A missing manifest file is named.
    let missing = dir.path().join("missing.yml");
    let missing = missing.to_str().expect("utf-8");
    cluster
        .hubctl(&["release", "publish", "--file", missing])
        .expect_err(1, missing);
    // Invalid semver, caught by the flag's parser.
    cluster
        .hubctl(&[
            "release",
            "recall",
            PRODUCT,
            "--version",
            "1.x",
            "--reason",
            "r",
        ])
        .expect_err(2, "--version");
    cluster
        .hubctl(&[
            "command",
            "prod/web",
            "install",
            "--version",
            "one",
            "--reason",
            "r",
        ])
        .expect_err(2, "--version");
    // Unknown channel: the server names the field.
    cluster
        .hubctl(&["entity", "set", "prod/web", "--channel", "NOPE"])
        .expect_err(1, "release_channel")
        .expect_err(1, "NOPE");
    // Bad window spec and unknown time zone.
    cluster
        .hubctl(&[
            "env",
            "settings",
            "prod",
            "--window",
            "FUNDAY/25:00-MONDAY/01:00",
        ])
        .expect_err(1, "maintenance_window")
        .expect_err(1, "FUNDAY");
    cluster
        .hubctl(&[
            "entity",
            "set",
            "prod/web",
            "--window",
            "all-time",
            "--time-zone",
            "Mars/Olympus",
        ])
        .expect_err(1, "unknown time zone \"Mars/Olympus\"");
    cluster
        .hubctl(&[
            "product",
            "window",
            "set",
            PRODUCT,
            "--window",
            "MONDAY/22:00",
        ])
        .expect_err(1, "window");
    // Bad durations and times are caught by the flag's parser.
    cluster
        .hubctl(&[
            "suppression",
            "create",
            "--env",
            "prod",
            "--duration",
            "10x",
            "--reason",
            "r",
        ])
        .expect_err(2, "--duration");
    cluster
        .hubctl(&[
            "window", "override", "add", "--env", "prod", "--end", "tomorrow", "--reason", "r",
        ])
        .expect_err(2, "--end");
    // Unknown entity, unknown environment, unknown product.
    cluster
        .hubctl(&["entity", "explain", "prod/nope"])
        .expect_err(1, "not found");
    cluster
        .hubctl(&[
            "suppression",
            "create",
            "--env",
            "nope",
            "--duration",
            "1h",
            "--reason",
            "r",
        ])
        .expect_err(1, "environment \"nope\" not found");
    cluster
        .hubctl(&["channel", "add", "CANARY", PRODUCT, "1.0.0"])
        .expect_err(1, "CANARY");
    // A secret needs a source; its name is validated by the server.
    cluster
        .hubctl(&["entity", "secret", "set", "prod/web", "pw"])
        .expect_err(2, "--value-file");
    let secret = write_file(dir.path(), "secret", "hunter2");
    cluster
        .hubctl(&[
            "entity",
            "secret",
            "set",
            "prod/web",
            "bad name!",
            "--value-file",
            secret.to_str().expect("utf-8"),
        ])
        .expect_err(1, "invalid name");
    // Break-glass commands need a reason.
    cluster
        .hubctl(&["command", "prod/web", "restart"])
        .expect_err(2, "--reason");

    let after = domain_state(&cluster);
    assert_eq!(before, after, "a refused command changed the state");
    // Every refusal the hub decided is in the audit, with the caller and the error.
    let refused: Vec<AuditEntryView> = ok_answer(&cluster, &["audit", "--limit", "1000"]);
    let refused: Vec<&AuditEntryView> = refused.iter().filter(|r| r.outcome == "refused").collect();
    assert!(
        refused
            .iter()
            .any(|r| r.command.as_deref() == Some("PutSecret")
                && r.actor.as_deref() == Some("operator/admin")
                && r.error.contains("invalid name")),
        "{refused:?}"
    );
}

#[test]
fn entity_settings_explain_suppression_secrets_plans_and_audit() {
    let cluster = Cluster::up(3, "");
    let dir = tempfile::tempdir().expect("tempdir");
    base_setup(&cluster);

    // A manual suppression first, so the candidate stays blocked and shows its constraints.
    let s = ok_json(
        &cluster,
        &[
            "suppression",
            "create",
            "--entity",
            "prod/web",
            "--duration",
            "1h",
            "--reason",
            "freeze for launch",
        ],
    );
    let sid = s["id"].as_str().expect("suppression id").to_string();
    let path = write_file(dir.path(), "m.yml", &manifest("1.0.0"));
    ok(
        &cluster,
        &["release", "publish", "-f", path.to_str().expect("utf-8")],
    );
    ok(
        &cluster,
        &[
            "entity",
            "set",
            "prod/web",
            "--channel",
            "RELEASE",
            "--dependency-groups",
            "frontend,edge",
            "--ignore-dependencies",
            "com.example:db",
            "--window",
            "all-time",
            "--time-zone",
            "UTC",
        ],
    );
    let e: EntityView = ok_answer(&cluster, &["entity", "get", "prod/web"]);
    assert_eq!(e.dependency_groups, ["edge", "frontend"], "{e:?}");
    assert_eq!(e.ignored_dependencies, ["com.example:db"], "{e:?}");
    assert!(e.maintenance_window.is_some(), "{e:?}");

    // SPEC P3: a candidate install, blocked by the suppression, every constraint listed.
    let mut last = None;
    let explain = poll_until(CONVERGE_TIMEOUT, || {
        let v: Explanation = ok_answer(&cluster, &["entity", "explain", "prod/web"]);
        last = Some(v.clone());
        let blocked = v
            .candidate
            .as_ref()
            .is_some_and(|c| c.kind == "install" && c.to_version.as_deref() == Some("1.0.0"))
            && v.meets_constraints == MeetsConstraints::No
            && v.constraints.iter().any(|c| {
                c.constraint == "suppression" && !c.passed && c.reason.contains("freeze for launch")
            });
        blocked.then_some(v)
    })
    .unwrap_or_else(|| panic!("explain never showed the suppression: {last:?}"));
    let constraints: Vec<&str> = explain
        .constraints
        .iter()
        .map(|c| c.constraint.as_str())
        .collect();
    for c in ["suppression", "maintenance-window", "artifacts"] {
        assert!(constraints.contains(&c), "{c} missing: {explain:?}");
    }
    assert!(explain.issued.is_none(), "{explain:?}");
    let table = ok(&cluster, &["entity", "explain", "prod/web"]).stdout;
    for needle in [
        "candidate: install",
        "meets constraints: no",
        "issued: no",
        "last execution: none",
        "CONSTRAINT",
        "MAY-CLEAR-AT",
        "freeze for launch",
    ] {
        assert!(table.contains(needle), "{needle:?} missing:\n{table}");
    }
    let activity = ok(&cluster, &["entity", "activity", "prod/web"]).stdout;
    assert!(activity.starts_with("TIME"), "{activity}");
    assert!(activity.contains("blocked by suppression"), "{activity}");

    // SPEC S4: the value comes from a file, is never printed, and only the name is listed.
    let value = "s3cr3t-VALUE-5f1c";
    let secret = write_file(dir.path(), "pw", value);
    let out = ok(
        &cluster,
        &[
            "entity",
            "secret",
            "set",
            "prod/web",
            "db-password",
            "--value-file",
            secret.to_str().expect("utf-8"),
        ],
    );
    assert!(
        !out.stdout.contains(value) && !out.stderr.contains(value),
        "{}",
        out.describe()
    );
    let got = ok(&cluster, &["entity", "get", "prod/web", "-o", "json"]);
    assert!(!got.stdout.contains(value), "{}", got.stdout);
    assert_eq!(got.answer::<EntityView>().secrets, ["db-password"]);
    let table = ok(&cluster, &["entity", "get", "prod/web"]).stdout;
    assert!(
        table.contains("secrets: db-password") && !table.contains(value),
        "{table}"
    );

    // Break-glass commands need a reason.
    cluster
        .hubctl(&["command", "prod/web", "restart"])
        .expect_err(2, "--reason");

    let sup: Vec<SuppressionView> = ok_answer(&cluster, &["suppression", "list", "--env", "prod"]);
    assert!(
        sup.iter()
            .any(|s| s.id == sid && s.active && s.source == "manual"),
        "{sup:?}"
    );

    // Lifting the suppression lets the orchestrator issue the install (no agent runs).
    ok(&cluster, &["suppression", "delete", &sid]);
    let plan = poll_until(CONVERGE_TIMEOUT, || {
        let plans: Vec<PlanView> = ok_answer(&cluster, &["plan", "list", "--entity", "prod/web"]);
        plans
            .into_iter()
            .find(|p| p.kind == "install" && p.status == "issued")
    })
    .expect("the install plan was never issued");
    let pid = plan.id.clone();
    assert_eq!(plan.to_version.as_deref(), Some("1.0.0"), "{plan:?}");
    let table = ok(&cluster, &["plan", "list", "--entity", "prod/web"]).stdout;
    assert!(table.starts_with("ID") && table.contains(&pid), "{table}");
    let explain: Explanation = ok_answer(&cluster, &["entity", "explain", "prod/web"]);
    assert_eq!(
        explain.issued.as_ref().map(|i| i.plan.as_str()),
        Some(pid.as_str()),
        "{explain:?}"
    );
    let got: PlanView = ok_answer(&cluster, &["plan", "get", &pid]);
    assert_eq!(got.status, "issued", "{got:?}");
    assert!(!got.tasks.as_ref().expect("tasks").is_empty(), "{got:?}");

    // SPEC P12: a bare cancel suggests a short suppression.
    let out = ok(
        &cluster,
        &["plan", "cancel", &pid, "--reason", "wrong build"],
    );
    assert!(
        out.stderr.contains("--suppress-for 30m"),
        "{}",
        out.describe()
    );
    let out = ok(
        &cluster,
        &[
            "plan",
            "cancel",
            "--entity",
            "prod/web",
            "--reason",
            "hold",
            "--suppress-for",
            "30m",
        ],
    );
    assert!(!out.stderr.contains("hint"), "{}", out.describe());
    let sup: Vec<SuppressionView> = ok_answer(&cluster, &["suppression", "list"]);
    assert!(
        sup.iter()
            .any(|s| s.reason == "after cancel: hold" && s.active),
        "{sup:?}"
    );

    // A break-glass command asks first: from a script (no terminal) without --yes it is
    // refused and sends nothing.
    cluster
        .hubctl(&["command", "prod/web", "restart", "--reason", "hotfix"])
        .expect_err(1, "pass --yes");
    let plans: Vec<PlanView> = ok_answer(&cluster, &["plan", "list", "--active"]);
    assert!(
        !plans
            .iter()
            .any(|p| p.command.as_deref() == Some("restart")),
        "an unconfirmed command was sent: {plans:?}"
    );
    // A break-glass command bypasses the suppression.
    let out = ok_json(
        &cluster,
        &[
            "command",
            "prod/web",
            "install",
            "--version",
            "1.0.0",
            "--reason",
            "hotfix",
            "--actor",
            "alice",
            "--yes",
        ],
    );
    let cid = out["id"].as_str().expect("command plan id").to_string();
    let plans: Vec<PlanView> = ok_answer(&cluster, &["plan", "list", "--active"]);
    assert!(
        plans
            .iter()
            .any(|p| p.id == cid && p.command.as_deref() == Some("install")),
        "{plans:?}"
    );

    // Window override and environment settings.
    let o = ok_json(
        &cluster,
        &[
            "window",
            "override",
            "add",
            "--env",
            "prod",
            "--duration",
            "2h",
            "--reason",
            "hotfix window",
        ],
    );
    let oid = o["id"].as_str().expect("override id").to_string();
    ok(
        &cluster,
        &[
            "env",
            "settings",
            "prod",
            "--auto-suppression",
            "2h",
            "--suppress-after-autosuppressions",
            "3",
            "--override-product-windows",
            "true",
        ],
    );
    ok(
        &cluster,
        &[
            "env",
            "registry",
            "set",
            "prod",
            "charts",
            "https://charts.example.com/repo",
            "--hub-access",
            "not-expected",
        ],
    );
    let settings: EnvironmentSettingsView = ok_answer(&cluster, &["env", "settings", "prod"]);
    assert_eq!(settings.auto_suppression_ms, 7_200_000, "{settings:?}");
    assert_eq!(
        settings.suppress_deployment_after_num_autosuppressions, 3,
        "{settings:?}"
    );
    assert!(settings.override_product_maintenance_windows);
    assert_eq!(settings.registries[0].hub_access, "not-expected");
    assert_eq!(settings.window_overrides[0].id, oid);
    ok(
        &cluster,
        &["window", "override", "remove", "--env", "prod", &oid],
    );
    ok(&cluster, &["env", "registry", "remove", "prod", "charts"]);

    // Every change above that SPEC S2 requires to be audited.
    let entries: Vec<AuditEntryView> = ok_answer(&cluster, &["audit"]);
    assert!(
        entries
            .iter()
            .any(|a| a.action.as_deref() == Some("suppression") && a.reason == "freeze for launch"),
        "{entries:?}"
    );
    assert!(
        entries
            .iter()
            // The certificate's identity, not the --actor the client typed (SPEC S4).
            .any(|a| a.actor.as_deref() == Some("operator/admin") && a.reason == "hotfix"),
        "{entries:?}"
    );
    let table = ok(&cluster, &["audit", "--limit", "50"]).stdout;
    assert!(table.contains("freeze for launch"), "{table}");
}

/// `--clear-window` must remove an entity's window. The engine's patch fields are
/// `Option<Option<WindowSpec>>`, and serde reads JSON `null` as `None` ("leave"), so the
/// "remove" (`Some(None)`) sent by hubctl is lost through `Hub.Submit`.
#[test]
fn clear_window_removes_the_entity_window() {
    let cluster = Cluster::up(3, "");
    base_setup(&cluster);
    ok(
        &cluster,
        &["entity", "set", "prod/web", "--window", "all-time"],
    );
    let e: EntityView = ok_answer(&cluster, &["entity", "get", "prod/web"]);
    assert!(e.maintenance_window.is_some(), "{e:?}");
    ok(&cluster, &["entity", "set", "prod/web", "--clear-window"]);
    let e: EntityView = ok_answer(&cluster, &["entity", "get", "prod/web"]);
    assert!(e.maintenance_window.is_none(), "{e:?}");
    ok(
        &cluster,
        &["env", "settings", "prod", "--window", "all-time"],
    );
    ok(&cluster, &["env", "settings", "prod", "--clear-window"]);
    let s: EnvironmentSettingsView = ok_answer(&cluster, &["env", "settings", "prod"]);
    assert!(s.maintenance_window.is_none(), "{s:?}");
}

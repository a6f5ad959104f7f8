//! Who may do what, against real processes with mutual TLS: for each command family an
//! identity with the role succeeds and one without it is refused with the missing role and
//! scope named and nothing changed; scopes hold; a viewer reads but never sees a secret; a
//! revoked binding stops working at once; the last admin stays; agents stay in their
//! environment.

use hub_client::answer::{AuditEntryView, RoleBindingView};
use hub_tests::tls::ADMIN;
use hub_tests::{poll_until, Cluster, CmdOutput, CONVERGE_TIMEOUT};
use hub_tls::Identity;

const PRODUCT: &str = "com.example:web";
/// Exit code of a refused write (`hubctl` exits 1 for any error the hub returns).
const REFUSED: i32 = 1;

fn op(name: &str) -> Identity {
    Identity::Operator(name.into())
}

/// What the refused writes would have changed (not the digest: refusals are audited, and
/// the audit is part of the state).
fn domain(cluster: &Cluster) -> Vec<String> {
    [
        &["env", "list", "-o", "json"][..],
        &["product", "list", "-o", "json"],
        &["channel", "list", "-o", "json"],
        &["suppression", "list", "-o", "json"],
        &["role", "list", "-o", "json"],
    ]
    .iter()
    .map(|args| ok(cluster.hubctl(args), "read").stdout)
    .collect()
}

fn ok(out: CmdOutput, what: &str) -> CmdOutput {
    out.expect_ok(what)
}

/// A cluster with environments prod and stage, product web and entity web in both, a secret
/// on prod/web, and the admin of `dev up`.
fn setup(dir: &std::path::Path) -> Cluster {
    let c = Cluster::up(3, "");
    for env in ["prod", "stage"] {
        ok(c.hubctl(&["env", "create", env]), "env create");
    }
    ok(c.hubctl(&["product", "create", PRODUCT]), "product create");
    for env in ["prod", "stage"] {
        ok(
            c.hubctl(&[
                "entity",
                "create",
                "--env",
                env,
                "--kind",
                "helmChart",
                "--name",
                "web",
                "--product",
                PRODUCT,
                "--namespace",
                "web",
            ]),
            "entity create",
        );
    }
    let secret = dir.join("secret");
    std::fs::write(&secret, "hunter2-value").expect("write secret");
    ok(
        c.hubctl(&[
            "entity",
            "secret",
            "set",
            "prod/web",
            "pw",
            "--value-file",
            secret.to_str().expect("utf-8"),
        ]),
        "secret set",
    );
    c
}

#[test]
fn every_family_needs_its_role_and_a_refusal_names_it_and_changes_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = setup(dir.path());
    let bob = op("bob");
    // Without any role, bob reads nothing and writes nothing.
    c.hubctl_as(&bob, &["env", "list"])
        .expect_err(REFUSED, "operator/bob may not read: it holds no role");
    ok(
        c.hubctl(&[
            "role",
            "bind",
            "operator/bob",
            "environment-operator",
            "--env",
            "stage",
        ]),
        "bind bob",
    );
    // (family, args, refusal) for bob, an environment operator of stage only.
    let window = ["--duration", "1h", "--reason", "maintenance"];
    let suppress = |env: &str| {
        let mut a = vec!["suppression", "create", "--env", env];
        a.extend_from_slice(&window);
        a.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let denied: Vec<(Vec<String>, &str)> = vec![
        (
            suppress("prod"),
            "operator/bob may not CreateSuppression in prod: needs environment-operator on prod",
        ),
        (
            ["product", "create", "com.example:api"]
                .map(String::from)
                .to_vec(),
            "operator/bob may not CreateProduct on com.example:api: needs product-editor on com.example:api",
        ),
        (
            ["channel", "create", "CANARY"].map(String::from).to_vec(),
            "operator/bob may not CreateChannel on *: needs product-editor on *",
        ),
        (
            ["env", "create", "dev"].map(String::from).to_vec(),
            "operator/bob may not CreateEnvironment: needs admin",
        ),
        (
            ["role", "bind", "operator/bob", "admin"]
                .map(String::from)
                .to_vec(),
            "operator/bob may not BindRole: needs admin",
        ),
    ];
    let before = domain(&c);
    for (args, refusal) in &denied {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        c.hubctl_as(&bob, &args).expect_err(REFUSED, refusal);
    }
    // Leadership moves only by an admin's hand: no leader change, and the refusal says why.
    let leader = c.wait_converged(CONVERGE_TIMEOUT)["leader"].clone();
    c.hubctl_as(&bob, &["cluster", "transfer-leader"])
        .expect_err(
            REFUSED,
            "operator/bob may not transfer the leadership: needs admin",
        );
    assert_eq!(c.wait_converged(CONVERGE_TIMEOUT)["leader"], leader);
    assert_eq!(domain(&c), before, "refusals changed the state");
    // In its own environment it may.
    let args = suppress("stage");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(c.hubctl_as(&bob, &args), "bob suppresses stage");
    // The audit shows both: each refusal (recorded by the refusing node, in the background)
    // and the write that was applied, all with bob as the actor.
    let audit = poll_until(CONVERGE_TIMEOUT, || {
        let rows: Vec<AuditEntryView> = ok(
            c.hubctl(&["audit", "--actor", "operator/bob", "-o", "json"]),
            "audit",
        )
        .answer();
        let refused = rows.iter().filter(|r| r.outcome == "refused").count();
        (refused >= denied.len()).then_some(rows)
    })
    .expect("every refusal reaches the audit");
    for (_, refusal) in &denied {
        assert!(
            audit
                .iter()
                .any(|r| r.outcome == "refused" && r.error == *refusal),
            "{refusal} not in the audit: {audit:?}"
        );
    }
    assert!(
        audit.iter().any(|r| r.outcome == "applied"
            && r.command.as_deref() == Some("CreateSuppression")
            && r.target.as_deref() == Some("environment stage")),
        "{audit:?}"
    );
    // A product editor of the group creates products, not environments.
    let pat = op("pat");
    ok(
        c.hubctl(&[
            "role",
            "bind",
            "operator/pat",
            "product-editor",
            "--product",
            "com.example:*",
        ]),
        "bind pat",
    );
    ok(
        c.hubctl_as(&pat, &["product", "create", "com.example:api"]),
        "pat creates a product in its group",
    );
    c.hubctl_as(&pat, &["product", "create", "org.other:db"])
        .expect_err(REFUSED, "needs product-editor on org.other:db");
    c.hubctl_as(
        &pat,
        &denied[0].0.iter().map(String::as_str).collect::<Vec<_>>(),
    )
    .expect_err(REFUSED, "needs environment-operator on prod");
}

#[test]
fn a_viewer_reads_everything_but_secrets_and_a_revoked_binding_stops_at_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = setup(dir.path());
    let vic = op("vic");
    ok(
        c.hubctl(&["role", "bind", "operator/vic", "viewer"]),
        "bind vic",
    );
    let env_list = ok(
        c.hubctl_as(&vic, &["env", "list", "-o", "json"]),
        "vic lists",
    );
    assert!(env_list.stdout.contains("prod"), "{}", env_list.describe());
    let entity = ok(
        c.hubctl_as(&vic, &["entity", "get", "prod/web", "-o", "json"]),
        "vic reads the entity",
    );
    assert!(entity.stdout.contains("pw"), "the secret's name is shown");
    for out in [&entity, &env_list] {
        assert!(
            !out.stdout.contains("hunter2"),
            "a secret value reached a viewer"
        );
    }
    // A viewer writes nothing.
    c.hubctl_as(&vic, &["env", "create", "dev"])
        .expect_err(REFUSED, "needs admin");
    // Unbound, vic reads nothing more, on every node.
    ok(
        c.hubctl(&["role", "unbind", "operator/vic", "viewer"]),
        "unbind vic",
    );
    for node in c.nodes() {
        let f = c.tls_files(&vic);
        let out = hub_tests::run_with_limit(
            std::process::Command::new(hub_tests::hubctl_bin())
                .env("HUBCTL_CA_FILE", &f.ca)
                .env("HUBCTL_CERT_FILE", &f.cert)
                .env("HUBCTL_KEY_FILE", &f.key)
                .args(["--endpoints", &node.addr, "env", "list"]),
            hub_tests::HUBCTL_LIMIT,
        );
        out.expect_err(REFUSED, "holds no role");
    }
}

#[test]
fn the_last_admin_stays_and_bad_bindings_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = setup(dir.path());
    let admin = format!("operator/{ADMIN}");
    let list: Vec<RoleBindingView> =
        ok(c.hubctl(&["role", "list", "-o", "json"]), "role list").answer();
    let bound: Vec<(&str, &str)> = list
        .iter()
        .map(|b| (b.identity.as_str(), b.role.as_str()))
        .collect();
    assert_eq!(bound, [(admin.as_str(), "admin")], "dev up binds its admin");
    let roles = || ok(c.hubctl(&["role", "list", "-o", "json"]), "role list").stdout;
    let before = roles();
    c.hubctl(&["role", "unbind", &admin, "admin"])
        .expect_err(REFUSED, "is the last admin");
    for (args, needle) in [
        (
            vec!["role", "bind", "operator/x", "superuser"],
            "unknown role \"superuser\"",
        ),
        (
            vec![
                "role",
                "bind",
                "operator/x",
                "environment-operator",
                "--env",
                "nowhere",
            ],
            "invalid environments: no environment \"nowhere\"",
        ),
        (
            vec![
                "role",
                "bind",
                "operator/x",
                "product-editor",
                "--product",
                "org.none:*",
            ],
            "invalid products: no product in group \"org.none\"",
        ),
        (
            vec!["role", "bind", "admin/x", "viewer"],
            "not a hub identity",
        ),
        (vec!["role", "bind", "node/2", "admin"], "invalid identity"),
    ] {
        let out = c.hubctl(&args);
        assert!(
            !out.success() && out.stderr.contains(needle),
            "{needle}: {}",
            out.describe()
        );
    }
    // (A refusal at apply remembers its request id, so the digest moves; the bindings not.)
    assert_eq!(roles(), before, "refused bindings changed the bindings");
    // Nobody, not even an admin, names a command's actor or records a refusal: the node
    // does. Both are refused and change nothing.
    let forged = serde_json::json!({"As": {"actor": {"Operator": "carol"},
        "command": {"CreateEnvironment": {"name": "forged", "description": ""}}}});
    let err = c.submit(forged).expect_err("a client's As");
    assert!(err.contains("never a field"), "{err}");
    let record = serde_json::json!({"RecordRefusal": {"actor": {"Operator": "carol"},
        "command": "CreateEnvironment", "target": "cluster", "error": "made up"}});
    let err = c.submit(record).expect_err("a client's RecordRefusal");
    assert!(
        err.contains("recorded refusals by the hub's nodes"),
        "{err}"
    );
    assert_eq!(roles(), before, "forged commands changed the bindings");
    let envs = ok(c.hubctl(&["env", "list", "-o", "json"]), "env list").stdout;
    assert!(!envs.contains("forged"), "{envs}");
    let audit = ok(
        c.hubctl(&["audit", "--limit", "1000", "-o", "json"]),
        "audit",
    )
    .stdout;
    assert!(!audit.contains("made up"), "{audit}");
    // Retention is an admin's, bounded, and says what it drops.
    c.hubctl_as(&op("carol"), &["audit", "--set-retention", "5"])
        .expect_err(REFUSED, "may not SetAuditRetention: needs admin");
    c.hubctl(&["audit", "--set-retention", "0"])
        .expect_err(REFUSED, "invalid entries: must be 1 to 1000000");
    ok(
        c.hubctl(&["audit", "--set-retention", "3"]),
        "set retention",
    );
    let rows: Vec<AuditEntryView> = ok(c.hubctl(&["audit", "-o", "json"]), "audit").answer();
    assert_eq!(rows.len(), 3, "{rows:?}");
    let table = ok(c.hubctl(&["audit"]), "audit table");
    assert!(
        table
            .stderr
            .contains("older entries dropped by retention, which keeps 3"),
        "{}",
        table.describe()
    );
    // With a second admin, the first may go.
    ok(
        c.hubctl(&["role", "bind", "operator/carol", "admin"]),
        "bind carol",
    );
    ok(
        c.hubctl_as(&op("carol"), &["role", "unbind", &admin, "admin"]),
        "carol unbinds the dev admin",
    );
    c.hubctl(&["env", "create", "dev"]).expect_err(
        REFUSED,
        "operator/admin may not CreateEnvironment: needs admin",
    );
}

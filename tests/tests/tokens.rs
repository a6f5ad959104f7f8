//! Operator tokens against real processes with TLS: a token caller presents no certificate,
//! acts with the token's roles on every node, is audited as the token, and is refused on
//! every node (and on a connection it keeps open) once the token is revoked; an expired
//! token is refused naming its expiry; bad input changes nothing; the secret is printed
//! once and appears in no log, list or audit row.

use std::time::Duration;

use hub_client::answer::{AuditEntryView, ListProducts, Typed};
use hub_proto::hub_client::HubClient;
use hub_proto::{QueryRequest, ReadOptions};
use hub_tests::{poll_until, Cluster, CmdOutput, CONVERGE_TIMEOUT};
use serde_json::Value;

/// Exit code of a refused call.
const REFUSED: i32 = 1;

/// `hubctl`'s exit status when the hub refused its credentials (`EXIT_CREDENTIALS_REFUSED`).
const CREDENTIALS_REFUSED: i32 = 77;

fn json(out: CmdOutput, what: &str) -> Value {
    let out = out.expect_ok(what);
    serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{what}: {e}: {}", out.stdout))
}

/// Creates token `name` with `args` (roles, ttl) and returns its secret.
fn create(c: &Cluster, name: &str, args: &[&str]) -> String {
    let mut all = vec!["token", "create", "--name", name, "-o", "json"];
    all.extend_from_slice(args);
    let v = json(c.hubctl(&all), "token create");
    let secret = v["secret"]
        .as_str()
        .expect("the secret is printed")
        .to_string();
    assert!(secret.starts_with("hubtok_") && secret.len() == 71, "{v}");
    assert_eq!(v["identity"], format!("token/{name}"));
    secret
}

/// A Hub.Query of the products on one open channel, with `secret` as the bearer.
async fn query_envs(
    client: &mut HubClient<tonic::transport::Channel>,
    secret: &str,
) -> Result<String, tonic::Status> {
    let mut req = tonic::Request::new(QueryRequest {
        query_json: serde_json::to_string(&ListProducts.query()).expect("JSON"),
        read: Some(ReadOptions { stale: true }),
    });
    req.metadata_mut().insert(
        "authorization",
        format!("Bearer {secret}").parse().expect("ascii"),
    );
    client.query(req).await.map(|r| r.into_inner().json)
}

/// Every node's log, concatenated.
fn all_logs(c: &Cluster) -> String {
    let mut text = String::new();
    for entry in std::fs::read_dir(c.dir())
        .expect("read the cluster dir")
        .flatten()
    {
        let p = entry.path();
        if p.extension().is_some_and(|x| x == "log") {
            text.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
    text
}

#[test]
fn a_token_acts_with_its_roles_on_every_node_until_revoked() {
    let c = Cluster::up(3, "");
    for env in ["prod", "stage"] {
        c.hubctl(&["env", "create", env]).expect_ok("env create");
    }
    let secret = create(
        &c,
        "ci",
        &["--role", "environment-operator=stage", "--ttl", "1h"],
    );
    let nodes = c.nodes();
    let suppress = |endpoints: &str, env: &str| {
        c.hubctl_with_token(
            &secret,
            endpoints,
            &[
                "suppression",
                "create",
                "--env",
                env,
                "--duration",
                "1h",
                "--reason",
                "token test",
            ],
        )
    };
    // Every node knows the token once it applied the commit that created it.
    for n in &nodes {
        poll_until(CONVERGE_TIMEOUT, || {
            c.hubctl_with_token(&secret, &n.addr, &["env", "list", "--stale"])
                .success()
                .then_some(())
        })
        .unwrap_or_else(|| panic!("node {} never accepted the token", n.id));
    }
    // Its roles, and only its roles, through any node.
    suppress(&nodes[1].addr, "stage").expect_ok("suppress stage as the token");
    suppress(&nodes[2].addr, "prod").expect_err(
        REFUSED,
        "token/ci may not CreateSuppression in prod: needs environment-operator on prod",
    );
    c.hubctl_with_token(&secret, &c.endpoints(), &["token", "list"])
        .expect_err(REFUSED, "token/ci may not read");
    // Audited as the token.
    let audit = c
        .hubctl(&["audit", "--actor", "token/ci", "-o", "json"])
        .expect_ok("audit");
    let rows: Vec<AuditEntryView> = audit.answer();
    assert!(
        rows.iter()
            .any(|r| r.command.as_deref() == Some("CreateSuppression")
                && r.method.as_deref() == Some("token")
                && r.outcome == "applied"),
        "{rows:?}"
    );
    // The list names it and its roles, never a secret.
    let list = c.hubctl(&["token", "list", "-o", "json"]).expect_ok("list");
    assert!(list.stdout.contains("\"ci\""), "{}", list.stdout);
    assert!(
        list.stdout.contains("environment-operator"),
        "{}",
        list.stdout
    );
    let digits = &secret["hubtok_".len()..];
    for text in [&list.stdout, &audit.stdout] {
        assert!(!text.contains(digits), "a secret leaked: {text}");
    }

    // A connection opened before the revoke and kept open.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let mut session = rt.block_on(async {
        let channel = c
            .anonymous_channel(&nodes[2].addr)
            .await
            .expect("connect without a certificate");
        HubClient::new(channel)
    });
    rt.block_on(query_envs(&mut session, &secret))
        .expect("the open session reads before the revoke");

    c.hubctl(&["token", "revoke", "ci"]).expect_ok("revoke");
    // A write by the token is refused on every node from the commit on: a node that has not
    // applied the revoke yet forwards the write, and apply refuses it.
    for n in &nodes {
        let out = suppress(&n.addr, "stage");
        // Refused by the node's own check once it applied the revoke (credentials refused),
        // or by apply after a forward (the write's actor may not write).
        assert!(
            matches!(out.code(), Some(REFUSED | CREDENTIALS_REFUSED)),
            "node {}: {}",
            n.id,
            out.describe()
        );
        assert!(
            out.stderr.contains("token/ci is revoked")
                || out.stderr.contains("not known to this hub"),
            "node {}: {}",
            n.id,
            out.describe()
        );
    }
    // And every node refuses it outright once it applied the revoke, the open session too.
    for n in &nodes {
        poll_until(CONVERGE_TIMEOUT, || {
            let out = c.hubctl_with_token(&secret, &n.addr, &["env", "list", "--stale"]);
            (out.code() == Some(CREDENTIALS_REFUSED)
                && out.stderr.contains("not known to this hub"))
            .then_some(())
        })
        .unwrap_or_else(|| panic!("node {} still accepts the revoked token", n.id));
    }
    let e = rt
        .block_on(query_envs(&mut session, &secret))
        .expect_err("the open session is refused after the revoke");
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert!(!e.message().contains(digits));
    // Its role went with it.
    let roles = c.hubctl(&["role", "list", "-o", "json"]).expect_ok("roles");
    assert!(!roles.stdout.contains("token/ci"), "{}", roles.stdout);
    // Nothing logged the secret, though every node saw it refused.
    assert!(!all_logs(&c).contains(digits), "a node logged the secret");
}

#[test]
fn an_expired_token_is_refused_naming_its_expiry() {
    let c = Cluster::up(3, "");
    let secret = create(&c, "short", &["--role", "viewer", "--ttl", "10s"]);
    c.hubctl_with_token(&secret, &c.endpoints(), &["env", "list"])
        .expect_ok("read before the expiry");
    let refused = poll_until(Duration::from_secs(60), || {
        let out = c.hubctl_with_token(&secret, &c.endpoints(), &["env", "list"]);
        (!out.success()).then_some(out)
    })
    .expect("the token expires");
    assert_eq!(
        refused.code(),
        Some(CREDENTIALS_REFUSED),
        "{}",
        refused.describe()
    );
    assert!(
        refused.stderr.contains("token/short expired at 20"),
        "{}",
        refused.describe()
    );
    let list = json(c.hubctl(&["token", "list", "-o", "json"]), "list");
    assert!(
        list.to_string().contains("(expired)") || list.to_string().contains("\"expired\":true"),
        "{list}"
    );
}

#[test]
fn token_bad_input_is_refused_by_field_and_changes_nothing() {
    let c = Cluster::up(3, "");
    c.hubctl(&["env", "create", "prod"]).expect_ok("env create");
    let secret = create(&c, "ci", &["--role", "viewer"]);
    let tokens = || {
        c.hubctl(&["token", "list", "-o", "json"])
            .expect_ok("list")
            .stdout
    };
    let before = tokens();
    for (args, needle) in [
        (
            &["token", "create", "--name", "x", "--ttl", "0s"][..],
            "zero",
        ),
        (
            &["token", "create", "--name", "ci"],
            "token \"ci\" already exists",
        ),
        (
            &["token", "create", "--name", "x", "--role", "root"],
            "unknown role \"root\"",
        ),
        (
            &[
                "token",
                "create",
                "--name",
                "x",
                "--role",
                "approver=nowhere",
            ],
            "invalid environments: no environment \"nowhere\"",
        ),
        (&["token", "create", "--name", "a/b"], "invalid name"),
        (&["token", "revoke", "nope"], "token \"nope\" not found"),
        (
            &["role", "bind", "token/nope", "viewer"],
            "invalid identity: no token \"nope\"",
        ),
    ] {
        let out = c.hubctl(args);
        assert!(
            !out.success() && out.stderr.contains(needle),
            "{args:?}: expected {needle:?}: {}",
            out.describe()
        );
    }
    assert_eq!(tokens(), before);
    // The client refuses to send a token anywhere but over verified TLS, and never repeats one.
    let plain = hub_tests::hubctl_raw(&[
        "--endpoints",
        &c.endpoints(),
        "--token",
        &secret,
        "env",
        "list",
    ]);
    assert!(
        !plain.success()
            && plain
                .stderr
                .contains("--token (HUBCTL_TOKEN) needs --ca-file"),
        "{}",
        plain.describe()
    );
    let mut both = c.hubctl_cmd();
    both.env("HUBCTL_TOKEN", &secret)
        .args(["--endpoints", &c.endpoints(), "env", "list"]);
    let both = hub_tests::run_with_limit(&mut both, hub_tests::HUBCTL_LIMIT);
    assert!(
        !both.success() && both.stderr.contains("replaces --cert-file and --key-file"),
        "{}",
        both.describe()
    );
    let mangled = format!("{}x", &secret[..secret.len() - 1]);
    let out = c.hubctl_with_token(&mangled, &c.endpoints(), &["env", "list"]);
    assert!(
        !out.success() && out.stderr.contains("hex digits") && !out.stderr.contains(&mangled[8..]),
        "{}",
        out.describe()
    );
    let unknown = format!("hubtok_{}", "0".repeat(64));
    c.hubctl_with_token(&unknown, &c.endpoints(), &["env", "list"])
        .expect_err(CREDENTIALS_REFUSED, "the token is not known to this hub");
}

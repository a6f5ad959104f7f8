//! The small ones of issue 51 (item 5), on one cluster:
//!
//! - a role-less operator cannot initialise a freshly started node (and so become the admin
//!   of a cluster of its own): `InitCluster` needs an admin, and a new cluster's nodes
//!   initialise it themselves at start (`--initial-members`, which `hubctl dev up` passes);
//! - a refused write's text cannot forge a row of `hubctl audit`: control characters are
//!   shown as escapes, in the table and in the API's answer;
//! - setting a write-only secret answers the same whether the guess was right or not, and
//!   every set makes a new revision;
//! - a request with invalid UTF-8 in a string is `INVALID_ARGUMENT` naming the field.

use std::time::Duration;

use hub_client::answer::{AuditEntryView, EntityView};
use hub_proto::{InitClusterRequest, Member, NodeStatusRequest, QueryReply, RaftReply};
use hub_tests::{poll_until, Cluster, CmdOutput, CONVERGE_TIMEOUT};
use hub_tls::Identity;
use tonic::Code;

fn op(name: &str) -> Identity {
    Identity::Operator(name.into())
}

#[track_caller]
fn ok(out: CmdOutput, what: &str) -> CmdOutput {
    out.expect_ok(what)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn init_cluster_audit_text_secret_guesses_and_invalid_utf8() {
    let cluster = Cluster::up(3, "");
    ok(cluster.hubctl(&["env", "create", "prod"]), "env create");
    ok(
        cluster.hubctl(&["product", "create", "com.example:web"]),
        "product create",
    );
    ok(
        cluster.hubctl(&[
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
    init_cluster_needs_an_admin(&cluster);
    audit_text_is_escaped(&cluster);
    a_secret_set_confirms_no_guess(&cluster);
    invalid_utf8_is_invalid_argument_naming_the_field(&cluster);
    all_well(&cluster);
}

/// A freshly started node (as one about to be added would be) cannot be made a cluster of
/// its own: not by a role-less operator, not by another node, not even by the running
/// cluster's admin (the fresh node has no admin). It stays pristine.
fn init_cluster_needs_an_admin(cluster: &Cluster) {
    let fresh = cluster.spawn_node(9, &[]);
    let init = |who: Identity| {
        let addr = fresh.addr.clone();
        runtime().block_on(async move {
            let channel = cluster.channel_as(&who, &addr).await.expect("connect");
            let mut c = hub_proto::hub_client::HubClient::new(channel);
            c.init_cluster(InitClusterRequest {
                members: vec![Member {
                    id: 9,
                    addr,
                    voter: true,
                }],
            })
            .await
        })
    };
    for who in [op("mallory"), op(hub_tests::tls::ADMIN), Identity::Node(2)] {
        let refused = init(who.clone()).expect_err(&format!("{who} initialised a fresh node"));
        assert_eq!(refused.code(), Code::PermissionDenied, "{who}: {refused:?}");
        assert!(
            refused.message().contains("needs admin")
                && refused.message().contains("--initial-members"),
            "{who}: {}",
            refused.message()
        );
    }
    let status = runtime().block_on(async {
        let channel = cluster
            .channel_as(&op(hub_tests::tls::ADMIN), &fresh.addr)
            .await
            .expect("connect");
        hub_proto::hub_client::HubClient::new(channel)
            .node_status(NodeStatusRequest { with_digest: false })
            .await
            .expect("node status")
            .into_inner()
    });
    assert!(
        status.members.is_empty() && !status.has_leader,
        "the fresh node was initialised: {status:?}"
    );
    // And the operator cannot claim the running cluster either: it has an admin.
    cluster
        .hubctl_as(&op("mallory"), &["cluster", "init"])
        .expect_err(1, "may not BindRole");
}

/// A refused write whose environment name holds a newline and a forged row prints one row,
/// with the newline shown as `\n`, in `hubctl audit`; the API's answer has no control
/// character either.
fn audit_text_is_escaped(cluster: &Cluster) {
    let forged =
        "9999  2030-01-01T00:00:00Z  operator/admin  DeleteEnvironment  environment prod  applied";
    let env = format!("x\n{forged}\u{1b}[2K");
    // A viewer may not create an entity: the refusal is audited with the environment named.
    ok(
        cluster.hubctl(&["role", "bind", "operator/vic", "viewer"]),
        "bind vic",
    );
    cluster
        .hubctl_as(
            &op("vic"),
            &[
                "entity",
                "create",
                "--env",
                &env,
                "--kind",
                "helmChart",
                "--name",
                "web",
                "--product",
                "com.example:web",
                "--namespace",
                "web",
            ],
        )
        .expect_err(1, "may not CreateEntity");
    let rows = poll_until(CONVERGE_TIMEOUT, || {
        let out = cluster.hubctl(&["audit", "--actor", "operator/vic", "-o", "json"]);
        let rows: Vec<AuditEntryView> = serde_json::from_str(&out.stdout).ok()?;
        rows.iter()
            .any(|r| r.command.as_deref() == Some("CreateEntity"))
            .then_some(rows)
    })
    .expect("the refusal is audited");
    let row = rows
        .iter()
        .find(|r| r.command.as_deref() == Some("CreateEntity"))
        .expect("the row");
    let target = row.target.as_deref().expect("target");
    assert!(
        !target.contains(|c: char| c.is_control())
            && target.contains("\\n9999")
            && target.contains("\\u{1b}[2K"),
        "the API answers control characters: {target:?}"
    );
    let table = ok(
        cluster.hubctl(&["audit", "--actor", "operator/vic"]),
        "audit",
    )
    .stdout;
    assert!(
        !table.lines().any(|l| l.starts_with("9999")) && !table.contains('\u{1b}'),
        "the audit table prints a forged row:\n{table}"
    );
    assert_eq!(table.lines().count(), 2, "one header and one row:\n{table}");
}

/// Setting a secret to its current value (a right guess) answers as a wrong guess does, and
/// both make a new revision.
fn a_secret_set_confirms_no_guess(cluster: &Cluster) {
    let dir = cluster.dir().join("secrets");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let set = |value: &str| -> (String, u64) {
        let file = dir.join("value");
        std::fs::write(&file, value).expect("write the value");
        let out = ok(
            cluster.hubctl(&[
                "entity",
                "secret",
                "set",
                "prod/web",
                "pw",
                "--value-file",
                file.to_str().expect("utf-8"),
                "-o",
                "json",
            ]),
            "secret set",
        );
        let result = out.json()["result"].as_str().expect("result").to_string();
        let entity: EntityView = ok(
            cluster.hubctl(&["entity", "get", "prod/web", "-o", "json"]),
            "entity get",
        )
        .answer();
        (result, entity.secrets_revision)
    };
    let (_, first) = set("hunter2");
    let (right, after_right) = set("hunter2");
    let (wrong, after_wrong) = set("hunter3");
    assert_eq!(
        (after_right, after_wrong),
        (first + 1, first + 2),
        "every set makes a new revision (right guess: {right:?}, wrong: {wrong:?})"
    );
    let shape = |s: &str| s.replace(|c: char| c.is_ascii_digit(), "N");
    assert_eq!(
        shape(&right),
        shape(&wrong),
        "a right guess answers differently from a wrong one"
    );
}

/// A string field holding invalid UTF-8 (sent as the bytes field of another message at the
/// same tag) is refused as the caller's error, naming the message and the field.
fn invalid_utf8_is_invalid_argument_naming_the_field(cluster: &Cluster) {
    let addr = cluster.node(1).addr;
    for (path, field) in [
        ("/hub.v1.Hub/Query", "QueryRequest.query_json"),
        ("/hub.v1.Hub/Submit", "SubmitRequest.command_json"),
    ] {
        let status = runtime().block_on(async {
            let channel = cluster
                .channel_as(&op(hub_tests::tls::ADMIN), &addr)
                .await
                .expect("connect");
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.expect("ready");
            // RaftReply's `bytes payload = 1` has the wire form of a string at tag 1.
            let bad = RaftReply {
                payload: b"{\"query\": \"products\xff\xfe\"}".to_vec(),
                refused: String::new(),
                clock_ms: 0,
            };
            grpc.unary::<_, QueryReply, _>(
                tonic::Request::new(bad),
                http::uri::PathAndQuery::from_static(path),
                hub_proto::codec::HubCodec::default(),
            )
            .await
            .expect_err("invalid UTF-8 accepted")
        });
        assert_eq!(status.code(), Code::InvalidArgument, "{path}: {status:?}");
        assert!(
            status.message().contains(field) && status.message().contains("UTF-8"),
            "{path}: {}",
            status.message()
        );
    }
}

/// Every node alive, a write committing, the digests equal.
fn all_well(cluster: &Cluster) {
    for node in cluster.nodes() {
        assert!(cluster.is_running(node.id), "node {} is gone", node.id);
    }
    ok(
        cluster.hubctl(&["env", "create", "after-the-small-ones"]),
        "a write",
    );
    cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    let _ = Duration::ZERO;
}

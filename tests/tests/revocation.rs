//! Certificate revocation (issue 56 item 6), with real processes over mutual TLS: an admin
//! revokes an operator's certificate with `hubctl pki revoke --cert`, and every node refuses
//! it on its next call; a certificate of another CA is refused and nothing changes.
//!
//! Run with `cargo build --workspace --bins && cargo test -p hub-tests --test revocation`.

use hub_tests::{hubctl_bin, hubctl_raw, poll_until, run_with_limit, Cluster, CmdOutput};
use hub_tests::{CONVERGE_TIMEOUT, HUBCTL_LIMIT};
use hub_tls::Identity;

/// `hubctl --endpoints ADDR ARGS` as `who`, at one node only.
fn hubctl_at_node(cluster: &Cluster, who: &Identity, addr: &str, args: &[&str]) -> CmdOutput {
    let f = cluster.tls_files(who);
    let mut cmd = std::process::Command::new(hubctl_bin());
    cmd.env("HUBCTL_CA_FILE", &f.ca)
        .env("HUBCTL_CERT_FILE", &f.cert)
        .env("HUBCTL_KEY_FILE", &f.key)
        .args(["--endpoints", addr])
        .args(args);
    run_with_limit(&mut cmd, HUBCTL_LIMIT)
}

#[test]
fn a_revoked_operator_certificate_is_refused_by_every_node() {
    let cluster = Cluster::up(3, "");
    let bob = Identity::Operator("bob".into());
    let bob_cert = cluster.tls_files(&bob).cert;
    cluster
        .hubctl_as(&bob, &["cluster", "status"])
        .expect_ok("bob's certificate works before");

    // Bad input: a certificate of another CA is refused, and nothing is revoked.
    let other = cluster.dir().join("other-ca");
    let other_dir = other.to_str().unwrap();
    hubctl_raw(&[
        "pki",
        "init",
        "--dir",
        other_dir,
        "--cluster-id",
        &cluster.cluster_id,
    ])
    .expect_ok("another CA");
    hubctl_raw(&[
        "pki", "issue", "operator", "--name", "bob", "--dir", other_dir,
    ])
    .expect_ok("bob of another CA");
    let foreign = other.join("operator-bob.pem");
    cluster
        .hubctl(&[
            "pki",
            "revoke",
            "--cert",
            foreign.to_str().unwrap(),
            "--reason",
            "x",
        ])
        .expect_err(1, "not signed by the cluster CA");
    cluster
        .hubctl_as(&bob, &["cluster", "status"])
        .expect_ok("still works");

    cluster
        .hubctl(&[
            "pki",
            "revoke",
            "--cert",
            bob_cert.to_str().unwrap(),
            "--reason",
            "laptop stolen",
        ])
        .expect_ok("revoke");
    // Every node refuses bob once it has applied the revocation.
    for node in cluster.nodes() {
        let refused = poll_until(CONVERGE_TIMEOUT, || {
            let out = hubctl_at_node(&cluster, &bob, &node.addr, &["digest"]);
            (!out.success()).then_some(out)
        })
        .unwrap_or_else(|| panic!("node {} still serves a revoked certificate", node.id));
        assert!(
            refused.describe().contains("is revoked"),
            "{}",
            refused.describe()
        );
    }
    let listed = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("pki revoked")
        .json();
    let rows = listed.as_array().expect("a list");
    assert_eq!(rows.len(), 1, "{listed}");
    assert_eq!(rows[0]["identity"], "operator/bob", "{listed}");
    assert_eq!(rows[0]["reason"], "laptop stolen", "{listed}");
    assert_eq!(rows[0]["revoked_by"], "operator/admin", "{listed}");
    assert!(
        rows[0]["not_after"].is_string(),
        "read from the certificate: {listed}"
    );
    // A repeat succeeds and changes nothing; the admin is unaffected.
    cluster
        .hubctl(&[
            "pki",
            "revoke",
            "--cert",
            bob_cert.to_str().unwrap(),
            "--reason",
            "again",
        ])
        .expect_ok("a repeat");
    cluster
        .hubctl(&["cluster", "status"])
        .expect_ok("the admin still works");
}

#[test]
fn an_agents_long_poll_ends_when_its_certificate_is_revoked() {
    use hub_proto::agent_client::AgentClient;
    use hub_proto::FetchPlansRequest;
    let cluster = Cluster::up(3, "");
    cluster
        .submit(serde_json::json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("env");
    let agent = Identity::Agent("prod".into());
    let addr = cluster.nodes()[0].addr.clone();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let fetch = |fingerprint: String, wait_ms: u32| {
        let channel = rt
            .block_on(cluster.channel_as(&agent, &addr))
            .expect("connect as the agent");
        let request = FetchPlansRequest {
            environment: "prod".into(),
            known_fingerprint: fingerprint,
            wait_ms,
            ..Default::default()
        };
        rt.spawn(async move { AgentClient::new(channel).fetch_plans(request).await })
    };
    let first = rt
        .block_on(fetch(String::new(), 0))
        .expect("join")
        .expect("first poll");
    // A poll that waits (nothing changes for 30 s), then the revocation.
    let started = std::time::Instant::now();
    let waiting = fetch(first.into_inner().fingerprint, 30_000);
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(!waiting.is_finished(), "the poll waits for a change");
    let cert = cluster.tls_files(&agent).cert;
    cluster
        .hubctl(&[
            "pki",
            "revoke",
            "--cert",
            cert.to_str().unwrap(),
            "--reason",
            "host lost",
        ])
        .expect_ok("revoke");
    let ended = rt.block_on(waiting).expect("join");
    let status = ended.expect_err("the revoked agent's poll is refused");
    assert_eq!(status.code(), tonic::Code::Unauthenticated, "{status:?}");
    assert!(status.message().contains("is revoked"), "{status:?}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "ended {:?} after it began, not at its 30 s timeout",
        started.elapsed()
    );
    // And it cannot come back.
    let again = rt.block_on(fetch(String::new(), 0)).expect("join");
    assert_eq!(
        again.expect_err("refused").code(),
        tonic::Code::Unauthenticated
    );
}

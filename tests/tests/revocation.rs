//! Certificate revocation (issue 56 item 6), with real processes over mutual TLS: an admin
//! revokes an operator's certificate with `hubctl pki revoke --cert`, and every node refuses
//! it on its next call; a certificate of another CA is refused and nothing changes.
//!
//! Run with `cargo build --workspace --bins && cargo test -p hub-tests --test revocation`.

use hub_tests::{hubctl_bin, hubctl_raw, poll_until, run_with_limit, Cluster, CmdOutput};
use hub_tests::{CONVERGE_TIMEOUT, HUBCTL_LIMIT};
use std::path::Path;

use hub_client::answer::RevokedCertificateView;
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

/// `hubctl --endpoints ENDPOINTS pki revoke --cert CERT --reason REASON`, as the admin.
fn revoke_cert(cluster: &Cluster, endpoints: &str, cert: &Path, reason: &str) -> CmdOutput {
    let cert = cert.to_str().expect("a UTF-8 path");
    cluster.hubctl_at(
        endpoints,
        &["pki", "revoke", "--cert", cert, "--reason", reason],
    )
}

/// Polls `call` until it fails, and checks it failed because a certificate is revoked.
fn refused_as_revoked(what: &str, mut call: impl FnMut() -> CmdOutput) -> CmdOutput {
    let refused = poll_until(CONVERGE_TIMEOUT, || {
        let out = call();
        (!out.success()).then_some(out)
    })
    .unwrap_or_else(|| panic!("{what}: still served"));
    assert!(
        refused.describe().contains("is revoked"),
        "{what}: {}",
        refused.describe()
    );
    refused
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
    revoke_cert(&cluster, &cluster.endpoints(), &foreign, "x")
        .expect_err(1, "not signed by the cluster CA");
    cluster
        .hubctl_as(&bob, &["cluster", "status"])
        .expect_ok("still works");

    revoke_cert(&cluster, &cluster.endpoints(), &bob_cert, "laptop stolen").expect_ok("revoke");
    // Every node refuses bob once it has applied the revocation.
    for node in cluster.nodes() {
        refused_as_revoked(&format!("bob at node {}", node.id), || {
            hubctl_at_node(&cluster, &bob, &node.addr, &["digest"])
        });
    }
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("pki revoked")
        .answer();
    let rows = &listed;
    assert_eq!(rows.len(), 1, "{listed:?}");
    assert_eq!(
        rows[0].identity.as_deref(),
        Some("operator/bob"),
        "{listed:?}"
    );
    assert_eq!(rows[0].reason, "laptop stolen", "{listed:?}");
    assert_eq!(rows[0].revoked_by, "operator/admin", "{listed:?}");
    assert!(
        rows[0].not_after.is_some(),
        "read from the certificate: {listed:?}"
    );
    // A repeat succeeds and changes nothing; the admin is unaffected.
    revoke_cert(&cluster, &cluster.endpoints(), &bob_cert, "again").expect_ok("a repeat");
    cluster
        .hubctl(&["cluster", "status"])
        .expect_ok("the admin still works");
}

#[test]
fn an_agents_long_poll_ends_when_its_certificate_is_revoked() {
    use hub_proto::agent_client::AgentClient;
    use hub_proto::FetchPlansRequest;
    let cluster = Cluster::up(3, "--metrics-listen 127.0.0.1:0");
    cluster
        .submit(serde_json::json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("env");
    let agent = Identity::Agent("prod".into());
    let addr = cluster.nodes()[0].addr.clone();
    let metrics_addr = cluster.logged_addrs("metrics at /metrics")[0].1.clone();
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
    let polls = "hub_agent_polls_in_flight{environment=\"prod\"}";
    hub_tests::metrics::wait_sample(&rt, &cluster, &metrics_addr, polls, 1.0);
    assert!(!waiting.is_finished(), "the poll waits for a change");
    let cert = cluster.tls_files(&agent).cert;
    revoke_cert(&cluster, &cluster.endpoints(), &cert, "host lost").expect_ok("revoke");
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

/// A CRL signed by the cluster CA's key in `pki`, listing `serials`.
fn crl_signed_in(pki: &std::path::Path, serials: &[Vec<u8>]) -> String {
    let read = |name: &str| std::fs::read_to_string(pki.join(name)).expect("the CA's files");
    let key = rcgen::KeyPair::from_pem(&read("ca-key.pem")).expect("the CA key");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&read("ca.pem"), key).expect("the CA");
    let params = rcgen::CertificateRevocationListParams {
        this_update: rcgen::date_time_ymd(2026, 1, 1),
        next_update: rcgen::date_time_ymd(2036, 1, 1),
        crl_number: rcgen::SerialNumber::from(1u64),
        issuing_distribution_point: None,
        revoked_certs: serials
            .iter()
            .map(|serial| rcgen::RevokedCertParams {
                serial_number: rcgen::SerialNumber::from_slice(serial),
                revocation_time: rcgen::date_time_ymd(2026, 1, 1),
                reason_code: Some(rcgen::RevocationReason::KeyCompromise),
                invalidity_date: None,
            })
            .collect(),
        key_identifier_method: rcgen::KeyIdMethod::Sha256,
    };
    params
        .signed_by(&issuer)
        .expect("sign the CRL")
        .pem()
        .expect("PEM")
}

/// The serial of the certificate at `path` (its DER INTEGER's content bytes).
fn serial_of(path: &std::path::Path) -> Vec<u8> {
    let text = std::fs::read(path).expect("a certificate");
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text).expect("PEM");
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents).expect("a certificate");
    cert.tbs_certificate.raw_serial().to_vec()
}

#[test]
fn a_crl_of_the_cluster_ca_revokes_what_it_lists_and_another_cas_is_refused() {
    let cluster = Cluster::up(3, "");
    let addr = cluster.nodes()[0].addr.clone();
    let carol = Identity::Operator("carol".into());
    let dave = Identity::Operator("dave".into());
    for who in [&carol, &dave] {
        hubctl_at_node(&cluster, who, &addr, &["digest"]).expect_ok("works before");
    }
    let carol_serial = serial_of(&cluster.tls_files(&carol).cert);

    // A CRL of another CA is refused and revokes nothing.
    let other = cluster.dir().join("other-ca");
    hubctl_raw(&[
        "pki",
        "init",
        "--dir",
        other.to_str().unwrap(),
        "--cluster-id",
        &cluster.cluster_id,
    ])
    .expect_ok("another CA");
    let foreign = cluster.dir().join("foreign.crl");
    std::fs::write(
        &foreign,
        crl_signed_in(&other, std::slice::from_ref(&carol_serial)),
    )
    .expect("write");
    cluster
        .hubctl(&["pki", "revoke", "--crl-file", foreign.to_str().unwrap()])
        .expect_err(1, "not signed by the cluster CA");

    let crl = cluster.dir().join("ours.crl");
    std::fs::write(&crl, crl_signed_in(&cluster.pki_dir(), &[carol_serial])).expect("write");
    // The CRL goes in one RevokeCertificates entry, a command of feature level 2.
    cluster.wait_feature_level(2);
    // Bob, who has no role, may not apply it: refused whole, nothing revoked.
    let bob = Identity::Operator("bob".into());
    cluster
        .hubctl_as(
            &bob,
            &["pki", "revoke", "--crl-file", crl.to_str().unwrap()],
        )
        .expect_err(1, "may not RevokeCertificates: needs admin");
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("list")
        .answer();
    assert!(listed.is_empty(), "{listed:?}");
    hubctl_at_node(&cluster, &carol, &addr, &["digest"]).expect_ok("bob revoked nothing");
    cluster
        .hubctl(&["pki", "revoke", "--crl-file", crl.to_str().unwrap()])
        .expect_ok("revoke from the CRL");
    refused_as_revoked("carol", || {
        hubctl_at_node(&cluster, &carol, &addr, &["digest"])
    });
    hubctl_at_node(&cluster, &dave, &addr, &["digest"]).expect_ok("dave was not listed");
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("list")
        .answer();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(
        listed[0].reason.starts_with("listed in a CRL"),
        "{listed:?}"
    );
}

#[test]
fn a_revoked_node_is_refused_by_its_peers() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let revoked = (1..=3).find(|&id| id != leader).expect("a follower");
    let at_revoked = cluster.node(revoked).addr;
    let at_leader = cluster.node(leader).addr;
    // A write sent to the follower is forwarded to the leader, as the follower.
    cluster
        .hubctl_at(&at_revoked, &["env", "create", "before"])
        .expect_ok("forwarded before the revocation");
    let node_cert = cluster.pki_dir().join(format!("node-{revoked}.pem"));
    revoke_cert(&cluster, &at_leader, &node_cert, "host decommissioned")
        .expect_ok("revoke the node's certificate");
    refused_as_revoked("the revoked node's forwarded write", || {
        cluster.hubctl_at(&at_revoked, &["env", "create", "after"])
    });
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl_at(&at_leader, &["pki", "revoked", "-o", "json"])
        .expect_ok("pki revoked")
        .answer();
    assert_eq!(
        listed[0].identity,
        Some(format!("node/{revoked}")),
        "{listed:?}"
    );
    // The others keep serving writes.
    cluster
        .hubctl_at(&at_leader, &["env", "create", "still"])
        .expect_ok("the leader still takes writes");
}

#[test]
fn a_revoked_operators_watch_ends_and_only_admins_revoke_and_list() {
    let cluster = Cluster::up(3, "");
    let bob = Identity::Operator("bob".into());
    // Bob has no role: he may not revoke, nor read the list.
    let bob_cert = cluster.tls_files(&bob).cert;
    cluster
        .hubctl_as(
            &bob,
            &[
                "pki",
                "revoke",
                "--serial",
                "0a",
                "--reason",
                "not his to do",
            ],
        )
        .expect_err(1, "may not RevokeCertificate: needs admin");
    cluster
        .hubctl_as(&bob, &["pki", "revoked"])
        .expect_err(1, "admin");
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("the admin lists")
        .answer();
    assert!(listed.is_empty(), "{listed:?}");

    // Bob watches the cluster's status (a pipe: each change printed), then is revoked.
    let f = cluster.tls_files(&bob);
    let mut watch = std::process::Command::new(hubctl_bin())
        .env("HUBCTL_CA_FILE", &f.ca)
        .env("HUBCTL_CERT_FILE", &f.cert)
        .env("HUBCTL_KEY_FILE", &f.key)
        .args(["--endpoints", &cluster.endpoints()])
        .args(["cluster", "status", "--watch"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start the watch");
    revoke_cert(&cluster, &cluster.endpoints(), &bob_cert, "left the team").expect_ok("revoke bob");
    let status = poll_until(CONVERGE_TIMEOUT, || watch.try_wait().expect("wait"));
    let Some(status) = status else {
        watch.kill().ok();
        panic!("the revoked operator's --watch still runs");
    };
    let out = watch.wait_with_output().expect("output");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status.code(), Some(77), "{said}");
    assert!(said.contains("is revoked"), "{said}");
    assert!(said.contains("--watch ends"), "{said}");
}

#[test]
fn the_metrics_listener_refuses_a_revoked_certificate() {
    let cluster = Cluster::up(3, "--metrics-listen 127.0.0.1:0");
    let metrics_addr = cluster.logged_addrs("metrics at /metrics")[0].1.clone();
    let vic = Identity::Operator("vic".into());
    cluster
        .hubctl(&["role", "bind", "operator/vic", "viewer"])
        .expect_ok("vic views");
    let vic_cert = cluster.tls_files(&vic).cert;
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let scrape = || {
        let channel = rt
            .block_on(cluster.channel_as(&vic, &metrics_addr))
            .expect("connect as vic");
        rt.block_on(hub_tests::metrics::get(channel, &metrics_addr, None))
    };
    let (status, _, body) = poll_until(CONVERGE_TIMEOUT, || {
        let answer = scrape();
        (answer.0 == 200).then_some(answer)
    })
    .expect("a viewer scrapes the metrics");
    assert!(body.contains("hub_"), "{status}: {body}");
    revoke_cert(&cluster, &cluster.endpoints(), &vic_cert, "left the team").expect_ok("revoke vic");
    let (status, _, body) = poll_until(CONVERGE_TIMEOUT, || {
        let answer = scrape();
        (answer.0 != 200).then_some(answer)
    })
    .expect("the revoked viewer is refused the metrics");
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("is revoked"), "{body}");
}

#[test]
fn a_large_crl_goes_in_batches_and_one_beyond_the_budget_is_refused_whole() {
    let cluster = Cluster::up(3, "");
    cluster.wait_feature_level(2);
    let serials = |range: std::ops::Range<u32>| -> Vec<Vec<u8>> {
        range
            .map(|i| (0x1000_0000 + i).to_be_bytes().to_vec())
            .collect()
    };
    // Beyond the list's budget: refused before anything is sent.
    let over = cluster.dir().join("over.crl");
    std::fs::write(
        &over,
        crl_signed_in(&cluster.pki_dir(), &serials(0..10_001)),
    )
    .expect("write");
    cluster
        .hubctl(&["pki", "revoke", "--crl-file", over.to_str().unwrap()])
        .expect_err(
            1,
            "lists 10001 certificates, more than the 10000 a hub keeps",
        );
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("pki revoked")
        .answer();
    assert!(listed.is_empty(), "nothing revoked");

    // 1,201 entries: three entries of at most 500 each.
    let big = cluster.dir().join("big.crl");
    std::fs::write(&big, crl_signed_in(&cluster.pki_dir(), &serials(0..1_201))).expect("write");
    let out = cluster
        .hubctl(&[
            "pki",
            "revoke",
            "--crl-file",
            big.to_str().unwrap(),
            "-o",
            "json",
        ])
        .expect_ok("revoke the CRL")
        .json();
    assert_eq!(out["listed"], 1_201, "{out}");
    assert_eq!(out["batches"], 3, "{out}");
    let listed: Vec<RevokedCertificateView> = cluster
        .hubctl(&["pki", "revoked", "-o", "json"])
        .expect_ok("pki revoked")
        .answer();
    let rows = &listed;
    assert_eq!(rows.len(), 1_201);
    assert!(rows.iter().any(|r| r.serial == "100004b0"), "the last one");
    // Again: every entry is already there, and it succeeds.
    cluster
        .hubctl(&["pki", "revoke", "--crl-file", big.to_str().unwrap()])
        .expect_ok("a repeat");
}

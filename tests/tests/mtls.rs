//! Only the hub's own parties can talk to it (SPEC S1, S2, S4), against real processes with
//! mutual TLS: every refused caller gets a code and a message and changes nothing, a rogue
//! node with its own CA cannot join or disturb the cluster, agents act only for their own
//! environment, the actor is the certificate's identity, and certificates rotate on SIGHUP
//! under a live agent.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hub_client::answer::{GetEntity, ListAudit};
use hub_proto::agent_client::AgentClient;
use hub_proto::hub_client::HubClient;
use hub_proto::raft_client::RaftClient;
use hub_proto::{FetchPlansRequest, RaftRequest, ReportStatesRequest, SubmitRequest};
use hub_tests::tls::ADMIN;
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use hub_tls::client::{ClientMode, ClientTls, Connector};
use hub_tls::pki::{file_stem, Ca};
use hub_tls::Identity;
use serde_json::json;

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

fn digest(cluster: &Cluster) -> String {
    let v = cluster.wait_converged(CONVERGE_TIMEOUT);
    v["members"][0]["digest"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn first(cluster: &Cluster) -> String {
    cluster.nodes()[0].addr.clone()
}

/// A connector presenting `identity`'s certificate from another CA made in `dir`.
fn rogue_connector(dir: &std::path::Path, cluster_id: &str, identity: &Identity) -> Connector {
    let ca = Ca::open(dir)
        .or_else(|_| Ca::init(dir, cluster_id, SystemTime::now()))
        .expect("rogue CA");
    let hosts = match identity {
        Identity::Node(_) => vec!["127.0.0.1".to_string()],
        _ => Vec::new(),
    };
    let w = ca
        .issue(identity, &hosts, 30, SystemTime::now())
        .unwrap()
        .write(dir, &file_stem(identity))
        .unwrap();
    let files = hub_tls::TlsFiles {
        ca: ca.cert_path(),
        cert: w.cert,
        key: w.key,
    };
    let tls = ClientTls::load(files, None, SystemTime::now()).expect("rogue TLS");
    Connector::new(ClientMode::Tls(Arc::new(tls)), Duration::from_secs(2))
}

/// A raw rustls client presenting `cert`/`key` without the checks `ClientTls` makes before
/// use (so the server's own refusal is what is tested), trusting the cluster CA.
fn unchecked_connector(
    cluster: &Cluster,
    cert: &std::path::Path,
    key: &std::path::Path,
) -> Connector {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cluster.pki_dir().join("ca.pem")).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let chain: Vec<_> = CertificateDer::pem_file_iter(cert)
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(key).unwrap();
    let mut cfg = rustls::ClientConfig::builder_with_provider(Arc::new(hub_tls::provider()))
        .with_protocol_versions(hub_tls::PROTOCOLS)
        .unwrap()
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .unwrap();
    cfg.alpn_protocols = vec![b"h2".to_vec()];
    Connector::new(ClientMode::Anonymous(Arc::new(cfg)), Duration::from_secs(2))
}

fn submit_with(
    connector: &Connector,
    addr: &str,
    command: serde_json::Value,
) -> Result<(), tonic::Status> {
    block_on(async {
        let ch = connector
            .channel(addr, |e| e)
            .await
            .map_err(|e| tonic::Status::unavailable(format!("{e:?}")))?;
        HubClient::new(ch)
            .submit(SubmitRequest {
                command_json: command.to_string(),
                request_id: String::new(),
            })
            .await
            .map(|_| ())
    })
}

/// One `Agent.FetchPlans` for `environment` (no wait) through `connector`.
fn fetch_plans(
    connector: &Connector,
    addr: &str,
    environment: &str,
) -> Result<tonic::Response<hub_proto::FetchPlansReply>, tonic::Status> {
    block_on(async {
        let ch = connector.channel(addr, |e| e).await.unwrap();
        AgentClient::new(ch)
            .fetch_plans(FetchPlansRequest {
                environment: environment.into(),
                known_fingerprint: String::new(),
                wait_ms: 0,
                known_plan_ids: Vec::new(),
            })
            .await
    })
}

#[test]
fn refused_callers_get_a_code_and_a_message_and_change_nothing() {
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("prod");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "stage", "description": ""}}))
        .expect("stage");
    let before = digest(&cluster);
    let addr = first(&cluster);
    let write = json!({"CreateEnvironment": {"name": "intruder", "description": ""}});

    // No certificate: TLS that verifies the node, but nobody to the hub.
    let anonymous = Connector::new(
        hub_tls::client::anonymous(&cluster.pki_dir().join("ca.pem")).unwrap(),
        Duration::from_secs(2),
    );
    let e = submit_with(&anonymous, &addr, write.clone()).unwrap_err();
    assert_eq!(e.code(), tonic::Code::Unauthenticated, "{e:?}");
    assert!(e.message().contains("no client certificate"), "{e:?}");

    // A certificate of another CA: the handshake is refused, and the client does not trust
    // the node either.
    let rogue_dir = cluster.dir().join("rogue-ca");
    let rogue = rogue_connector(
        &rogue_dir,
        &cluster.cluster_id,
        &Identity::Operator("mallory".into()),
    );
    let e = submit_with(&rogue, &addr, write.clone()).unwrap_err();
    assert_ne!(e.code(), tonic::Code::Ok);

    // An expired certificate of the cluster's own CA: refused by the node's verifier, which
    // logs the identity and its dates.
    let ca = Ca::open(&cluster.pki_dir()).unwrap();
    let old = ca
        .issue(
            &Identity::Operator("old".into()),
            &[],
            1,
            SystemTime::now() - Duration::from_secs(10 * 86_400),
        )
        .unwrap()
        .write(&cluster.dir().join("old"), "operator-old")
        .unwrap();
    let expired = unchecked_connector(&cluster, &old.cert, &old.key);
    assert!(submit_with(&expired, &addr, write.clone()).is_err());
    let logged = poll_until(CONVERGE_TIMEOUT, || {
        let log = std::fs::read_to_string(cluster.dir().join("node-1.log")).ok()?;
        log.lines()
            .find(|l| l.contains("client certificate refused") && l.contains("operator/old"))
            .map(String::from)
    })
    .expect("the refused expired certificate is logged");
    assert!(
        logged.contains("valid") && logged.contains(" to "),
        "{logged}"
    );

    // An operator calling the Raft service.
    let admin = cluster.connector(&Identity::Operator(ADMIN.into()));
    let e = block_on(async {
        let ch = admin.channel(&addr, |e| e).await.unwrap();
        RaftClient::new(ch)
            .append_entries(RaftRequest {
                cluster_id: cluster.cluster_id.clone(),
                payload: vec![1, 0],
            })
            .await
    })
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message()
            .contains("operator/admin may not call /hub.v1.Raft/AppendEntries"),
        "{e:?}"
    );
    // … its TransferLeader (a node's message: an operator asks through Hub/TransferLeader).
    let e = block_on(async {
        let ch = admin.channel(&addr, |e| e).await.unwrap();
        RaftClient::new(ch)
            .transfer_leader(RaftRequest {
                cluster_id: cluster.cluster_id.clone(),
                payload: vec![1, 0],
            })
            .await
    })
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message()
            .contains("operator/admin may not call /hub.v1.Raft/TransferLeader"),
        "{e:?}"
    );
    // … or the agent API, and an agent calling the operator API or Forward.
    let e = fetch_plans(&admin, &addr, "prod").unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    let prod_agent = cluster.connector(&Identity::Agent("prod".into()));
    let e = submit_with(&prod_agent, &addr, write.clone()).unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert!(
        e.message()
            .contains("agent/prod may not call /hub.v1.Hub/Submit"),
        "{e:?}"
    );

    // The agent of prod asking for stage's plans, or reporting for stage.
    let e = fetch_plans(&prod_agent, &addr, "stage").unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    assert_eq!(
        e.message(),
        "agent/prod may not act for environment \"stage\""
    );
    let e = block_on(async {
        let ch = prod_agent.channel(&addr, |e| e).await.unwrap();
        AgentClient::new(ch)
            .report_states(ReportStatesRequest {
                environment: "stage".into(),
                states: Vec::new(),
                request_id: "forged".into(),
            })
            .await
    })
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::PermissionDenied, "{e:?}");
    // Its own environment is fine.
    fetch_plans(&prod_agent, &addr, "prod").expect("the agent of prod fetches prod's plans");

    assert_eq!(digest(&cluster), before, "a refused call changed the state");
    let names = cluster.env_names().expect("envs");
    assert!(!names.iter().any(|n| n == "intruder"), "{names:?}");
}

#[test]
fn the_actor_is_the_certificate_identity() {
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("prod");
    // The client claims to be someone else; the audit records who it is.
    cluster
        .submit(
            json!({"CreateSuppression": {"scope": {"Environment": "prod"}, "start_ms": null,
            "end_ms": 4_102_444_800_000i64, "reason": "freeze", "cancel_active_plans": false,
            "actor": "somebody-else"}}),
        )
        .expect("suppression");
    let audit = cluster.ask(&ListAudit::default()).expect("audit");
    let rows = &audit.audit;
    assert!(
        rows.iter()
            .any(|r| r.actor.as_deref() == Some("operator/admin")),
        "{audit:?}"
    );
    assert!(
        !serde_json::to_string(&audit)
            .expect("JSON")
            .contains("somebody-else"),
        "the client's actor field was recorded: {audit:?}"
    );
}

#[test]
fn a_rogue_node_with_its_own_ca_cannot_join_or_disturb_the_cluster() {
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("prod");
    let status = cluster.wait_converged(CONVERGE_TIMEOUT);
    let (term, leader) = (status["term"].clone(), status["leader"].clone());
    let before = digest(&cluster);
    let addr = first(&cluster);

    // A node certificate from another CA, for this cluster's id and a member's id: every
    // Raft RPC is refused at the handshake.
    let rogue_dir = cluster.dir().join("rogue-ca");
    let rogue = rogue_connector(&rogue_dir, &cluster.cluster_id, &Identity::Node(2));
    for rpc in ["append", "vote", "snapshot"] {
        let r = block_on(async {
            let ch = rogue
                .channel(&addr, |e| e)
                .await
                .map_err(|e| tonic::Status::unavailable(format!("{e:?}")))?;
            let mut c = RaftClient::new(ch);
            let req = RaftRequest {
                cluster_id: cluster.cluster_id.clone(),
                payload: vec![1, 0],
            };
            match rpc {
                "append" => c.append_entries(req).await.map(|_| ()),
                "vote" => c.vote(req).await.map(|_| ()),
                _ => c
                    .install_snapshot(tokio_stream::iter(vec![hub_proto::SnapshotChunk {
                        cluster_id: cluster.cluster_id.clone(),
                        header: vec![1, 0],
                        data: vec![0; 16],
                        total_bytes: 16,
                    }]))
                    .await
                    .map(|_| ()),
            }
        });
        assert!(r.is_err(), "{rpc} by a rogue node was accepted");
    }

    // A real certificate of a node id this cluster has never seen: admitted to the Raft
    // layer (a member that missed a node's addition must follow that node as leader; only ids
    // the log has removed are refused, as in etcd), which decodes the message and refuses it.
    let stranger = cluster.connector(&Identity::Node(9));
    let e = block_on(async {
        let ch = stranger.channel(&addr, |e| e).await.unwrap();
        RaftClient::new(ch)
            .vote(RaftRequest {
                cluster_id: cluster.cluster_id.clone(),
                payload: vec![1, 0],
            })
            .await
    })
    .unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains("bad raft payload"), "{e:?}");

    // A rogue hub-node with its own CA cannot be added: the leader's probe does not trust it.
    let rogue_node_dir = cluster.dir().join("rogue-node");
    let ca = Ca::open(&rogue_dir).unwrap();
    let w = ca
        .issue(
            &Identity::Node(4),
            &["127.0.0.1".to_string()],
            30,
            SystemTime::now(),
        )
        .unwrap()
        .write(&rogue_dir, "node-4")
        .unwrap();
    let port = hub_tests::free_port();
    let log = std::fs::File::create(cluster.dir().join("rogue.log")).unwrap();
    let mut child = std::process::Command::new(hub_tests::hub_node_bin())
        .args(["--id", "4", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--cluster-id", &cluster.cluster_id])
        .arg("--data-dir")
        .arg(&rogue_node_dir)
        .arg("--ca-file")
        .arg(ca.cert_path())
        .arg("--cert-file")
        .arg(&w.cert)
        .arg("--key-file")
        .arg(&w.key)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start the rogue node");
    let out = cluster.hubctl(&[
        "cluster",
        "add-node",
        "--id",
        "4",
        "--addr",
        &format!("127.0.0.1:{port}"),
    ]);
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        !out.success(),
        "the rogue node was added: {}",
        out.describe()
    );
    let status = cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");
    assert_eq!(
        (status["term"].clone(), status["leader"].clone()),
        (term, leader)
    );
    assert_eq!(digest(&cluster), before);
}

#[test]
fn certificates_rotate_on_sighup_under_a_live_agent() {
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("prod");
    cluster
        .submit(json!({"CreateProduct": {"product_id": "com.example:web", "description": ""}}))
        .expect("product");
    let out = cluster
        .submit(
            json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart", "name": "web",
            "product_id": "com.example:web", "k8s_namespace": "web", "account_id": null,
            "release_channel": null}}),
        )
        .expect("entity");
    let entity = out["EntityCreated"].as_str().unwrap().to_string();
    let agent = cluster.start_hub_agent("prod", &["--driver", "sim"]);
    let publish = |v: &str| {
        cluster
            .submit(json!({"PublishRelease": {"manifest": format!(
                "product-group: com.example\nproduct-name: web\nproduct-version: {v}\n")}}))
            .unwrap_or_else(|e| panic!("publish {v}: {e}"));
    };
    let reported = |v: &str| {
        poll_until(CONVERGE_TIMEOUT * 2, || {
            let e = cluster.ask(&GetEntity(entity.clone())).ok()?;
            (e.reported.version.as_deref() == Some(v)).then_some(())
        })
        .unwrap_or_else(|| panic!("the agent never reported {v}:\n{}", agent.log_tail(20)))
    };
    publish("1.0.0");
    reported("1.0.0");

    // New certificates (shorter validity, so the reload is visible) for every node and the
    // agent, written over the old files; then SIGHUP.
    let ca = Ca::open(&cluster.pki_dir()).unwrap();
    let now = SystemTime::now();
    for n in cluster.nodes() {
        ca.issue(
            &Identity::Node(n.id),
            &["127.0.0.1".into(), "localhost".into()],
            7,
            now,
        )
        .unwrap()
        .write(&cluster.pki_dir(), &format!("node-{}", n.id))
        .unwrap();
        cluster.signal(n.id, libc::SIGHUP);
    }
    ca.issue(&Identity::Agent("prod".into()), &[], 7, now)
        .unwrap()
        .write(&cluster.pki_dir(), "agent-prod")
        .unwrap();
    agent.signal(libc::SIGHUP);
    for n in cluster.nodes() {
        poll_until(CONVERGE_TIMEOUT, || {
            let log =
                std::fs::read_to_string(cluster.dir().join(format!("node-{}.log", n.id))).ok()?;
            (log.matches("TLS certificate reloaded").count() >= 2).then_some(())
        })
        .unwrap_or_else(|| panic!("node {} did not reload its certificate", n.id));
    }
    poll_until(CONVERGE_TIMEOUT, || {
        agent
            .log_tail(50)
            .contains("TLS certificate reloaded")
            .then_some(())
    })
    .expect("the agent reloaded its certificate");
    // Plans keep flowing to the agent, over new connections too.
    publish("1.1.0");
    reported("1.1.0");

    // A bad rotation (a key that is not the certificate's) is refused and the node keeps
    // serving with the certificate it has.
    let n1 = cluster.nodes()[0].clone();
    let pki = cluster.pki_dir();
    std::fs::copy(pki.join("node-2-key.pem"), pki.join("node-1-key.pem")).unwrap();
    cluster.signal(n1.id, libc::SIGHUP);
    poll_until(CONVERGE_TIMEOUT, || {
        let log = std::fs::read_to_string(cluster.dir().join("node-1.log")).ok()?;
        log.contains("TLS reload refused").then_some(())
    })
    .expect("the bad rotation is refused");
    publish("1.2.0");
    reported("1.2.0");
    let s = cluster.status_at(&n1.addr).expect("node 1 still answers");
    assert!(s["leader"].as_u64().is_some(), "{s}");
}

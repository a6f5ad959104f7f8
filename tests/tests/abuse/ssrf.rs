//! Item 4: no blind SSRF, from the hub or the agents. One hub whose nodes deny loopback as a
//! production node does (`hubctl dev up --outbound-allow ''`), the demo service installed in
//! `prod` by a real agent, and an environment `edge` whose registry is an http one:
//!
//! - a canary whose webhook or Prometheus address carries `#` or `?` is refused, naming the
//!   field, and nothing is stored;
//! - the leader refuses to call a confirm-rollout gate on loopback (no connection reaches the
//!   listener; the canary waits, naming the denied range) until the nodes are restarted with
//!   `--outbound-allow 127.0.0.0/8`, when the gate is called;
//! - the edge agent refuses a `file:///etc/passwd` artifact, naming the refusal;
//! - a checksum mismatch names the expected digest, never the digest of what was read.
//!
//! It ends with every node alive, a write committed and the nodes' digests equal.

use std::time::Duration;

use hub_client::answer::{FailureView, GetActivity, ListPlans};
use hub_tests::agent::HubAgent;
use hub_tests::canary::CanaryHub;
use hub_tests::https::{Route, TestServer};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// Longest a canary or a plan takes to get where a case expects it.
const ROLLOUT: Duration = Duration::from_secs(120);

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A canary on the demo service: a 1 s analysis with `webhooks` and `metrics` (YAML list
/// items, indented for `analysis`), or none.
fn canary_yaml(port: u16, webhooks: &str, metrics: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: demo
  namespace: prod
spec:
  targetRef:
    kind: helmChart
    name: demo
  service:
    port: {port}
  progressDeadlineSeconds: 60
  analysis:
    interval: 1s
    threshold: 2
    maxWeight: 20
    stepWeight: 10
{webhooks}{metrics}"
    )
}

fn webhook(name: &str, kind: &str, url: &str) -> String {
    format!(
        "      - name: {name}\n        type: {kind}\n        url: '{url}'\n        timeout: 2s\n"
    )
}

/// `hubctl canary apply` of `yaml` in `prod`.
fn apply(hub: &CanaryHub, yaml: &str) -> hub_tests::CmdOutput {
    let path = hub.cluster.dir().join("canary.yml");
    std::fs::write(&path, yaml).expect("write canary.yml");
    let path = path.display().to_string();
    hub.cluster
        .hubctl(&["canary", "apply", "-f", &path, "-n", "prod"])
}

fn refuses_query_and_fragment_in_addresses(hub: &CanaryHub) {
    let webhooks = format!(
        "    webhooks:\n{}{}",
        webhook("fine", "rollout", "http://hooks.example/fine"),
        webhook("smuggle", "rollout", "http://127.0.0.1:1/internal/secret#")
    );
    let metrics = "    metrics:
      - name: budget
        provider:
          type: prometheus
          address: 'http://127.0.0.1:1/internal/secret?'
        query: up
        thresholdRange:
          min: 1
";
    let out = apply(hub, &canary_yaml(hub.port, &webhooks, metrics));
    assert!(
        !out.success(),
        "the canary was accepted: {}",
        out.describe()
    );
    for field in [
        "spec.analysis.webhooks[1].url: '#' is not allowed in an outbound address",
        "spec.analysis.metrics[0].provider.address: '?' is not allowed in an outbound address",
    ] {
        assert!(
            out.stderr.contains(field),
            "{field} missing: {}",
            out.describe()
        );
    }
    assert!(
        hub.canary("demo").is_none(),
        "a refused canary was stored: {:?}",
        hub.canary("demo")
    );
}

/// The activity of the demo entity as text.
fn activity(hub: &CanaryHub) -> String {
    hub.cluster
        .ask(&GetActivity(hub.entity.clone()))
        .map(|v| serde_json::to_string(&v.entries).expect("JSON"))
        .unwrap_or_default()
}

fn denies_a_loopback_gate_until_opened(hub: &mut CanaryHub) {
    let gate = TestServer::plain("127.0.0.1");
    gate.route("/gate", Route::Status(200));
    let webhooks = format!(
        "    webhooks:\n{}",
        webhook("gate", "confirm-rollout", &gate.url("/gate"))
    );
    apply(hub, &canary_yaml(hub.port, &webhooks, "")).expect_ok("canary apply");
    hub.wait_phase("demo", ROLLOUT, |p| p == "Initialized");
    hub.publish("1.1.0");
    // The gate is asked every tick: either the denial is recorded or the gate was called.
    poll_until(ROLLOUT, || {
        (gate.connections() > 0 || activity(hub).contains("in the denied range 127.0.0.0/8"))
            .then_some(())
    })
    .unwrap_or_else(|| panic!("the gate was neither called nor refused: {}", activity(hub)));
    assert_eq!(
        (gate.connections(), gate.requests("/gate")),
        (0, 0),
        "the leader called a loopback address its nodes deny by default"
    );
    let waiting = hub.wait_phase("demo", ROLLOUT, |p| p == "Waiting");
    assert_eq!(waiting.status, "Waiting", "{waiting:?}");

    // The operator opens loopback: the same gate is called and the analysis starts.
    hub.cluster
        .restart_all_with(&["--outbound-allow", "127.0.0.0/8"]);
    poll_until(ROLLOUT, || (gate.requests("/gate") > 0).then_some(()))
        .unwrap_or_else(|| panic!("the opened gate was never called: {}", activity(hub)));
    hub.wait_phase("demo", ROLLOUT, |p| p != "Waiting");
    hub.cluster
        .submit(json!({"DeleteCanary": {"id": "prod/demo"}}))
        .expect("delete the canary");
}

/// Environment `edge`: an http registry on loopback (which the hub does not check:
/// `not-expected`) and a process-driver agent. Returns the agent and the registry.
fn edge(cluster: &Cluster) -> (HubAgent, TestServer) {
    let registry = TestServer::plain("127.0.0.1");
    let submit = |v: Value| {
        cluster
            .submit(v.clone())
            .unwrap_or_else(|e| panic!("{v}: {e}"))
    };
    submit(json!({"CreateEnvironment": {"name": "edge", "description": ""}}));
    submit(
        json!({"SetRegistry": {"environment": "edge", "name": "main",
        "url": registry.url("/artifacts"), "hub_access": "not-expected"}}),
    );
    let agent = cluster.start_hub_agent("edge", &["--driver", "process"]);
    (agent, registry)
}

/// Creates product `com.example:<name>` with an entity in `edge` and publishes 1.0.0 with
/// one artifact; returns the entity id.
fn publish_probe(cluster: &Cluster, name: &str, uri: &str, sha256: &str) -> String {
    let product = format!("com.example:{name}");
    let submit = |v: Value| {
        cluster
            .submit(v.clone())
            .unwrap_or_else(|e| panic!("{v}: {e}"))
    };
    submit(json!({"CreateProduct": {"product_id": product, "description": "ssrf probe"}}));
    let out = submit(
        json!({"CreateEntity": {"environment": "edge", "kind": "HelmChart",
        "name": name, "product_id": product, "k8s_namespace": "edge", "account_id": null,
        "release_channel": null}}),
    );
    let manifest = format!(
        "product-group: com.example\nproduct-name: {name}\nproduct-version: 1.0.0\n\
         artifacts:\n  - uri: {uri}\n    sha256: {sha256}\n"
    );
    submit(json!({"PublishRelease": {"manifest": manifest}}));
    out["EntityCreated"]
        .as_str()
        .expect("entity id")
        .to_string()
}

/// The failure of `entity`'s first failed plan, once it has one.
fn failure(cluster: &Cluster, agent: &HubAgent, entity: &str) -> FailureView {
    poll_until(ROLLOUT, || {
        let v = cluster
            .ask(&ListPlans {
                entity: Some(entity.to_string()),
                limit: Some(10),
                ..ListPlans::default()
            })
            .ok()?;
        v.plans
            .into_iter()
            .find(|p| p.status == "failed")
            .and_then(|p| p.failure)
    })
    .unwrap_or_else(|| panic!("no failed plan for {entity}\n{}", agent.log_tail(30)))
}

/// What the manifests of the edge probes claim their artifacts' digest is.
fn claimed() -> String {
    sha256_hex(b"what the manifest claims")
}

fn agents_refuse_local_files(cluster: &Cluster, agent: &HubAgent) {
    let passwd = std::fs::read("/etc/passwd").expect("read /etc/passwd");
    let local = publish_probe(cluster, "local-file", "file:///etc/passwd", &claimed());
    let refused = failure(cluster, agent, &local);
    assert!(
        !serde_json::to_string(&refused)
            .expect("JSON")
            .contains(&sha256_hex(&passwd)),
        "the agent read /etc/passwd and showed its digest: {refused:?}"
    );
    assert_eq!(refused.stage, "fetch", "{refused:?}");
    assert!(
        refused
            .message
            .starts_with("file:///etc/passwd: refused: a file:// artifact"),
        "{refused:?}"
    );
}

fn a_mismatch_shows_only_the_expected_digest(
    cluster: &Cluster,
    agent: &HubAgent,
    registry: &TestServer,
) {
    let served = b"what the registry serves".to_vec();
    registry.route(
        "/artifacts/probe/probe-1.0.0.tar.gz",
        Route::Body(served.clone()),
    );
    let mismatch = publish_probe(cluster, "mismatch", "probe/probe-1.0.0.tar.gz", &claimed());
    let failed = failure(cluster, agent, &mismatch);
    assert_eq!(failed.stage, "verify", "{failed:?}");
    assert!(
        failed
            .message
            .contains(&format!("sha256 mismatch: expected {}", claimed())),
        "{failed:?}"
    );
    assert!(
        !serde_json::to_string(&failed)
            .expect("JSON")
            .contains(&sha256_hex(&served)),
        "the digest of what was read is shown: {failed:?}"
    );
}

/// The digest of every node's own state.
fn digests(cluster: &Cluster) -> Vec<String> {
    cluster
        .nodes()
        .iter()
        .map(|n| {
            cluster
                .digest_at(&n.addr)
                .unwrap_or_else(|| panic!("node {} does not answer", n.id))
                .1
        })
        .collect()
}

#[test]
fn outbound_addresses_cannot_reach_inward() {
    let cluster =
        Cluster::up_with_dev_args(3, "--artifact-ttl-ms 500", &[], &["--outbound-allow", ""]);
    let mut hub = CanaryHub::start_on(cluster);
    refuses_query_and_fragment_in_addresses(&hub);
    let (agent, registry) = edge(&hub.cluster);
    agents_refuse_local_files(&hub.cluster, &agent);
    a_mismatch_shows_only_the_expected_digest(&hub.cluster, &agent, &registry);
    drop(agent);
    denies_a_loopback_gate_until_opened(&mut hub);

    let cluster = &hub.cluster;
    for node in cluster.nodes() {
        assert!(cluster.is_running(node.id), "node {} died", node.id);
    }
    cluster
        .create_env(0, "after-ssrf")
        .expect_ok("a write after the cases");
    cluster.wait_converged(CONVERGE_TIMEOUT);
    poll_until(CONVERGE_TIMEOUT, || {
        let d = digests(cluster);
        d.windows(2).all(|w| w[0] == w[1]).then_some(())
    })
    .unwrap_or_else(|| panic!("the nodes' digests differ: {:?}", digests(cluster)));
}

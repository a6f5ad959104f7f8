//! HTTPS end to end (issue 16) with real TLS servers and CAs generated in the test: the hub's
//! checks of https registries (available, absent, redirected to another host without the
//! credentials, a redirect loop, an untrusted CA, a TLS handshake failure, refused
//! connections, insecure-skip-verify shown as a warning), bad registry input, a real
//! `hub-agent` installing the demo service from an https registry through an `HTTPS_PROXY`
//! (and failing cleanly with an untrusted CA), and a canary whose webhooks, alert and
//! Prometheus are https, reached through a proxy (except `NO_PROXY` hosts) on reused
//! connections, with a webhook to a denied address refused without a connection.

use hub_client::answer::{Explain, GetActivity, GetEnvironmentSettings, ListPlans};
use hub_tests::agent::http_get;
use hub_tests::canary::{CanaryHub, Traffic};
use hub_tests::https::{ConnectProxy, DevRegistry, Route, TestCa, TestServer};
use hub_tests::{free_port, poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::json;

const PRODUCT: &str = "com.example:web";

/// Release 1.0.0 of `com.example:web` with one artifact relative to the first registry.
fn manifest() -> String {
    format!(
        "product-group: com.example\nproduct-name: web\nproduct-version: 1.0.0\n\
         artifacts:\n  - uri: web/web-1.0.0.tgz\n    sha256: {}\n",
        "a".repeat(64)
    )
}

/// What the hub must conclude about an environment's registry.
enum Expect {
    /// The artifact is available: the install plan is issued.
    Issued,
    /// The artifacts constraint blocks, its reason containing this text.
    Blocked(&'static str),
}

fn install_plans(cluster: &Cluster, env: &str) -> Option<usize> {
    let v = cluster
        .ask(&ListPlans {
            environment: Some(env.to_string()),
            ..ListPlans::default()
        })
        .ok()?;
    Some(v.plans.iter().filter(|p| p.kind == "install").count())
}

/// The artifacts constraint's reason in `explain`, once it has been checked.
fn artifacts_reason(cluster: &Cluster, env: &str) -> Option<String> {
    let x = cluster.ask(&Explain(format!("{env}/web"))).ok()?;
    let c = x
        .constraints
        .into_iter()
        .find(|c| c.constraint == "artifacts")?;
    (!c.passed && c.reason.contains("unavailable")).then_some(c.reason)
}

#[test]
fn the_hub_checks_https_registries_and_names_every_failure() {
    let ca = TestCa::new("registry CA");
    let other = TestCa::new("another CA");
    let registry = TestServer::https(&ca, "127.0.0.1", &["127.0.0.1"]);
    // Another host (name and port) for redirects: it must never get the credentials.
    let cdn = TestServer::https(&ca, "127.0.0.1", &["localhost"]);
    let plain = TestServer::plain("127.0.0.1");
    let closed = free_port();
    registry.route("/repo/web/web-1.0.0.tgz", Route::Body(b"v1".to_vec()));
    registry.route(
        "/moved/web/web-1.0.0.tgz",
        Route::Redirect(302, cdn.url_as("localhost", "/blobs/web-1.0.0.tgz")),
    );
    cdn.route("/blobs/web-1.0.0.tgz", Route::Body(b"v1".to_vec()));
    registry.route(
        "/loop/web/web-1.0.0.tgz",
        Route::Redirect(302, "/loop/web/web-1.0.0.tgz".into()),
    );

    let cluster = Cluster::up(3, "--artifact-ttl-ms 500");
    cluster
        .submit(json!({"CreateProduct": {"product_id": PRODUCT, "description": ""}}))
        .expect("product");
    let creds = format!("https://agent:s3cret@127.0.0.1:{}", registry.port());
    let (ca_file, other_file) = (ca.pem_path(), other.pem_path());
    let cases: Vec<(&str, String, Vec<&str>, Expect)> = vec![
        (
            "ok",
            format!("{creds}/repo"),
            vec!["--ca-file", ca_file],
            Expect::Issued,
        ),
        (
            "moved",
            format!("{creds}/moved"),
            vec!["--ca-file", ca_file],
            Expect::Issued,
        ),
        (
            "absent",
            format!("{creds}/absent"),
            vec!["--ca-file", ca_file],
            Expect::Blocked("404 Not Found"),
        ),
        (
            "looping",
            format!("{creds}/loop"),
            vec!["--ca-file", ca_file],
            Expect::Blocked("redirect loop"),
        ),
        (
            "untrusted",
            format!("{creds}/repo"),
            vec!["--ca-file", other_file],
            Expect::Blocked("TLS certificate not trusted: it is not signed by a trusted CA"),
        ),
        (
            "system",
            format!("{creds}/repo"),
            vec![],
            Expect::Blocked("TLS certificate not trusted"),
        ),
        (
            "plaintext",
            format!("https://127.0.0.1:{}/repo", plain.port()),
            vec!["--ca-file", ca_file],
            Expect::Blocked("TLS handshake failed"),
        ),
        (
            "down",
            format!("https://127.0.0.1:{closed}/repo"),
            vec!["--ca-file", ca_file],
            Expect::Blocked("cannot connect: connection refused"),
        ),
        (
            "insecure",
            format!("{creds}/repo"),
            vec!["--insecure-skip-verify"],
            Expect::Issued,
        ),
    ];
    for (env, url, flags, _) in &cases {
        cluster
            .submit(json!({"CreateEnvironment": {"name": env, "description": ""}}))
            .expect("environment");
        let mut args = vec!["env", "registry", "set", env, "main", url.as_str()];
        args.extend(flags);
        cluster.hubctl(&args).expect_ok("registry set");
        cluster
            .submit(
                json!({"CreateEntity": {"environment": env, "kind": "HelmChart",
                "name": "web", "product_id": PRODUCT, "k8s_namespace": "web",
                "account_id": null, "release_channel": null}}),
            )
            .expect("entity");
    }
    cluster
        .submit(json!({"PublishRelease": {"manifest": manifest()}}))
        .expect("publish");

    for (env, _, _, expect) in &cases {
        match expect {
            Expect::Issued => {
                poll_until(CONVERGE_TIMEOUT, || {
                    (install_plans(&cluster, env)? == 1).then_some(())
                })
                .unwrap_or_else(|| {
                    panic!(
                        "{env}: no install plan; explain: {:?}",
                        cluster.ask(&Explain(format!("{env}/web")))
                    )
                });
            }
            Expect::Blocked(text) => {
                let reason = poll_until(CONVERGE_TIMEOUT, || artifacts_reason(&cluster, env))
                    .unwrap_or_else(|| panic!("{env}: the artifact never became unavailable"));
                assert!(reason.contains(text), "{env}: {reason}");
                assert!(!reason.contains("s3cret"), "{env}: {reason}");
                assert_eq!(install_plans(&cluster, env), Some(0), "{env}");
                // hubctl shows the same reason.
                let out = cluster
                    .hubctl(&["entity", "explain", &format!("{env}/web")])
                    .expect_ok("explain");
                assert!(out.stdout.contains(text), "{env}: {}", out.stdout);
            }
        }
    }

    // The credentials went to the registry, never to the host it redirected to.
    let basic = "Basic YWdlbnQ6czNjcmV0"; // agent:s3cret
    let moved: Vec<_> = registry
        .seen()
        .into_iter()
        .filter(|s| s.path == "/moved/web/web-1.0.0.tgz")
        .collect();
    assert!(!moved.is_empty(), "the hub asked the registry");
    assert!(
        moved
            .iter()
            .all(|s| s.authorization.as_deref() == Some(basic)),
        "{moved:?}"
    );
    let at_cdn = cdn.seen();
    assert!(!at_cdn.is_empty(), "the redirect was followed");
    assert!(
        at_cdn
            .iter()
            .all(|s| s.authorization.is_none() && s.method == "HEAD"),
        "{at_cdn:?}"
    );

    // insecure-skip-verify is shown wherever the entity is.
    for command in ["get", "explain"] {
        let out = cluster
            .hubctl(&["entity", command, "insecure/web"])
            .expect_ok("entity");
        assert!(
            out.stdout
                .contains("WARNING: registry main (https://127.0.0.1:")
                && out
                    .stdout
                    .contains("is insecure-skip-verify: its TLS certificate is NOT verified"),
            "{command}: {}",
            out.stdout
        );
        let out = cluster
            .hubctl(&["entity", command, "ok/web"])
            .expect_ok("entity");
        assert!(
            !out.stdout.contains("insecure"),
            "{command}: {}",
            out.stdout
        );
    }
    // On a terminal (a pty from util-linux's `script`, part of every Debian system) the
    // warning is red.
    let command = format!(
        "{} --endpoints {} entity get insecure/web",
        hub_tests::hubctl_bin().display(),
        cluster.endpoints()
    );
    let on_tty = hub_tests::run_with_limit(
        std::process::Command::new("script")
            .args(["-qec", &command, "/dev/null"])
            .envs(cluster.hubctl_env())
            .env_remove("NO_COLOR"),
        hub_tests::HUBCTL_LIMIT,
    );
    assert!(
        on_tty.stdout.contains("\x1b[1;31mWARNING: registry main"),
        "{}",
        on_tty.describe()
    );
    let settings = cluster
        .hubctl(&["env", "settings", "ok"])
        .expect_ok("settings");
    assert!(
        settings.stdout.contains("ca-bundle sha256:"),
        "{}",
        settings.stdout
    );
    assert!(!settings.stdout.contains("s3cret"), "{}", settings.stdout);
}

#[test]
fn bad_registry_input_is_refused_naming_the_field_and_changes_nothing() {
    let cluster = Cluster::up(3, "");
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("environment");
    let dir = tempfile::tempdir().expect("tmp");
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "# not a certificate\n").expect("write");
    let empty = empty.to_str().expect("utf-8");
    let url = "https://agent:s3cret@registry.example/repo";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["main", url, "--ca-file", empty],
            "holds no certificate",
        ),
        (
            vec!["main", url, "--ca-file", "/nonexistent/ca.pem"],
            "--ca-file /nonexistent/ca.pem",
        ),
        (
            vec!["main", "https://agent:s3cret@exa mple/repo"],
            "invalid url",
        ),
        (
            vec!["main", "ftp://agent:s3cret@registry.example/"],
            "scheme \"ftp\" is not supported",
        ),
        (
            vec![
                "main",
                "http://agent:s3cret@registry.example/",
                "--insecure-skip-verify",
            ],
            "insecure_skip_verify: only for https registries",
        ),
        (
            vec!["main", url, "--insecure-skip-verify", "--ca-file", empty],
            "cannot be used with",
        ),
    ];
    for (args, needle) in cases {
        let mut all = vec!["env", "registry", "set", "prod"];
        all.extend(&args);
        let out = cluster.hubctl(&all);
        assert!(
            !out.success() && out.stderr.contains(needle),
            "{args:?}: expected {needle:?}: {}",
            out.describe()
        );
        assert!(!out.stderr.contains("s3cret"), "{}", out.describe());
    }
    // The API refuses what hubctl would not send, naming the field.
    let err = cluster
        .submit(json!({"SetRegistry": {"environment": "prod", "name": "main", "url": url,
            "hub_access": "expected", "ca_pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"}}))
        .expect_err("a broken certificate");
    assert!(err.contains("ca_pem"), "{err}");
    let settings = cluster
        .ask(&GetEnvironmentSettings("prod".into()))
        .expect("settings");
    assert!(settings.registries.is_empty(), "{settings:?}");
}

/// The agent's process-driver download directory of the demo entity.
fn downloads(agent_data: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(agent_data.join("process/helmChart--demo/downloads"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn an_agent_installs_from_an_https_registry_through_a_proxy() {
    let cluster = Cluster::up(3, "--artifact-ttl-ms 500");
    let demo = cluster.package_demo();
    let registry = DevRegistry::start(&demo.join("registry"), &cluster.dir().join("registry-tls"));
    let proxy = ConnectProxy::start();
    let ca_file = registry.ca_file.to_str().expect("utf-8").to_string();
    cluster
        .submit(json!({"CreateEnvironment": {"name": "prod", "description": ""}}))
        .expect("environment");
    cluster
        .hubctl(&[
            "env",
            "registry",
            "set",
            "prod",
            "local",
            &registry.url,
            "--ca-file",
            &ca_file,
        ])
        .expect_ok("registry");
    cluster
        .submit(
            json!({"CreateProduct": {"product_id": "com.example:demo-service", "description": ""}}),
        )
        .expect("product");
    let entity = cluster
        .submit(
            json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart",
            "name": "demo", "product_id": "com.example:demo-service", "k8s_namespace": "demo",
            "account_id": null, "release_channel": null}}),
        )
        .expect("entity")["EntityCreated"]
        .as_str()
        .expect("id")
        .to_string();
    let port = free_port();
    cluster
        .submit(
            json!({"SetConfigOverrides": {"entity": entity, "version": "0.0.0",
            "config": format!("port: {port}\n")}}),
        )
        .expect("config");
    let agent = cluster.start_hub_agent_with_env(
        "prod",
        &["--driver", "process"],
        &[("HTTPS_PROXY", &proxy.url()), ("NO_PROXY", "")],
    );
    let publish = |version: &str| {
        let manifest =
            std::fs::read_to_string(demo.join(format!("manifests/demo-service-{version}.yml")))
                .expect("manifest");
        cluster
            .submit(json!({"PublishRelease": {"manifest": manifest}}))
            .expect("publish");
    };
    publish("1.0.0");
    poll_until(CONVERGE_TIMEOUT, || {
        let (status, body) = http_get(port, "/version")?;
        (status == 200 && body.trim() == "1.0.0").then_some(())
    })
    .unwrap_or_else(|| panic!("1.0.0 never served\n{}", agent.log_tail(40)));
    let registry_addr = registry.url.trim_start_matches("https://").to_string();
    assert!(
        proxy.tunnels().contains(&registry_addr),
        "the download went through HTTPS_PROXY: {:?}",
        proxy.tunnels()
    );
    assert_eq!(downloads(&agent.data_dir).len(), 1);

    // Another CA: the hub is told not to check (hub-access not-expected), so the plan is
    // issued and the agent's fetch fails on the certificate, before touching the service.
    let other = TestCa::new("not the registry's CA");
    cluster
        .hubctl(&[
            "env",
            "registry",
            "set",
            "prod",
            "local",
            &registry.url,
            "--ca-file",
            other.pem_path(),
            "--hub-access",
            "not-expected",
        ])
        .expect_ok("registry");
    publish("1.1.0");
    let failed = poll_until(CONVERGE_TIMEOUT, || {
        let v = cluster
            .ask(&ListPlans {
                environment: Some("prod".into()),
                ..ListPlans::default()
            })
            .ok()?;
        v.plans
            .into_iter()
            .find(|p| p.kind == "version-change" && p.status == "failed")
    })
    .unwrap_or_else(|| panic!("the upgrade never failed\n{}", agent.log_tail(40)));
    let failure = failed.failure.as_ref().expect("a failure");
    assert_eq!(failure.stage, "fetch", "{failed:?}");
    let message = failure.message.as_str();
    assert_eq!(
        message,
        format!(
            "{}/demo-service/demo-service-1.1.0.tar.gz: TLS certificate not trusted: it is not \
             signed by a trusted CA (unknown issuer)",
            registry.url
        )
    );
    let explain = cluster
        .hubctl(&["entity", "explain", "prod/demo"])
        .expect_ok("explain");
    assert!(
        explain.stdout.contains("TLS certificate not trusted"),
        "{}",
        explain.stdout
    );
    // Nothing half-installed: the service still serves 1.0.0, only 1.0.0 was downloaded.
    let (status, body) = http_get(port, "/version").expect("the service answers");
    assert_eq!((status, body.trim()), (200, "1.0.0"));
    assert_eq!(
        downloads(&agent.data_dir).len(),
        1,
        "{:?}",
        downloads(&agent.data_dir)
    );
}

/// A 1 s canary with a Prometheus metric, a confirm-promotion gate, a confirm-rollout gate
/// and an alert destination.
fn canary_yaml(
    port: u16,
    prometheus: &str,
    confirm: &str,
    alerts: &str,
    rollout_gate: &str,
) -> String {
    let gate = if rollout_gate.is_empty() {
        String::new()
    } else {
        format!("      - name: gate\n        type: confirm-rollout\n        url: {rollout_gate}\n        timeout: 2s\n")
    };
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
  progressDeadlineSeconds: 30
  analysis:
    interval: 1s
    threshold: 2
    maxWeight: 20
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: 2s
      - name: budget
        provider:
          type: prometheus
          address: {prometheus}
        query: sum(up)
        thresholdRange:
          min: 95
    webhooks:
      - name: promote
        type: confirm-promotion
        url: {confirm}
        timeout: 2s
{gate}    alerts:
      - name: on-call
        severity: info
        url: {alerts}
"
    )
}

#[test]
fn canary_calls_go_over_https_through_a_proxy_and_never_to_a_denied_address() {
    let ca = TestCa::new("webhook CA");
    let hooks = TestServer::https(&ca, "127.0.0.1", &["127.0.0.1"]);
    hooks.route("/confirm", Route::Status(403));
    hooks.route("/alerts", Route::Status(200));
    let prometheus = TestServer::https(&ca, "127.0.0.1", &["localhost"]);
    prometheus.route(
        "/api/v1/query",
        Route::Body(
            br#"{"status":"success","data":{"resultType":"vector","result":[{"metric":{},"value":[1,"99.9"]}]}}"#
                .to_vec(),
        ),
    );
    // 127.0.0.2 is loopback too; the hub is told never to connect there.
    let denied = TestServer::plain("127.0.0.2");
    let proxy = ConnectProxy::start();
    let node_args = format!(
        "--artifact-ttl-ms 500 --outbound-ca-file {} --outbound-deny 169.254.0.0/16,127.0.0.2/32",
        ca.pem_path()
    );
    let cluster = Cluster::up_with_env(
        3,
        &node_args,
        &[("HTTPS_PROXY", &proxy.url()), ("NO_PROXY", "localhost")],
    );
    let hub = CanaryHub::start_on(cluster);
    let prometheus_url = prometheus.url_as("localhost", "");
    let yaml = |gate: &str| {
        canary_yaml(
            hub.port,
            &prometheus_url,
            &hooks.url("/confirm"),
            &hooks.url("/alerts"),
            gate,
        )
    };
    hub.apply(&yaml(""));
    let _traffic = Traffic::start(hub.port);
    hub.wait_phase("demo", CONVERGE_TIMEOUT * 2, |p| p == "Initialized");

    hub.publish("1.1.0");
    hub.wait_phase("demo", CONVERGE_TIMEOUT * 2, |p| p == "WaitingPromotion");
    // The gate is asked every tick; let it refuse a few times, then confirm.
    poll_until(CONVERGE_TIMEOUT, || {
        (hooks.requests("/confirm") >= 3).then_some(())
    })
    .expect("the confirm-promotion gate is called");
    hooks.route("/confirm", Route::Status(200));
    hub.wait_phase("demo", CONVERGE_TIMEOUT * 2, |p| p == "Succeeded");
    hub.serves("1.1.0");
    poll_until(CONVERGE_TIMEOUT, || {
        (hooks.requests("/alerts") > 0).then_some(())
    })
    .expect("the waiting-for-approval alert was sent");
    assert!(
        prometheus.requests("/api/v1/query") > 0,
        "the metric was read from Prometheus over https"
    );

    // Through the proxy, except for NO_PROXY's localhost; connections reused.
    let tunnels = proxy.tunnels();
    let hooks_addr = format!("127.0.0.1:{}", hooks.port());
    assert!(tunnels.contains(&hooks_addr), "{tunnels:?}");
    assert!(
        !tunnels.iter().any(|t| t.starts_with("localhost")),
        "NO_PROXY=localhost goes direct: {tunnels:?}"
    );
    let calls = hooks.seen().len() as u64;
    assert!(
        hooks.connections() < calls,
        "{} connections for {calls} calls: connections are reused",
        hooks.connections()
    );

    // A confirm-rollout gate on a denied address holds the next revision, naming the range,
    // without a connection ever being made.
    let gate = denied.url("/gate");
    hub.apply(&yaml(&gate));
    hub.cluster
        .submit(
            json!({"SetConfigOverrides": {"entity": hub.entity, "version": "0.0.0",
            "config": format!("port: {}\nmessage: second\n", hub.port)}}),
        )
        .expect("config");
    hub.wait_phase("demo", CONVERGE_TIMEOUT * 2, |p| p == "Waiting");
    let activity = poll_until(CONVERGE_TIMEOUT, || {
        let v = hub.cluster.ask(&GetActivity(hub.entity.clone())).ok()?;
        let text = serde_json::to_string(&v.entries).expect("JSON");
        text.contains("in the denied range 127.0.0.2/32")
            .then_some(text)
    })
    .expect("the refusal is recorded");
    assert!(activity.contains(&gate), "{activity}");
    assert_eq!(denied.connections(), 0, "no connection to a denied address");
}

//! `hubctl canary` against a 3-node hub (SPEC K1, K7, K10): a resource applied to an entity,
//! listed like Flagger's `get canaries -A`, bad input refused with the path and the running
//! canary untouched, a manual abort, `wait` failing on timeout, deletion.
//!
//! The leader's analysis ticks and the agent's proxy are not exercised here.

use std::path::{Path, PathBuf};

use hub_client::answer::{
    CanaryView, ClusterSettingsAnswer, GetCanary, ListAudit, MetricTemplateView,
};
use hub_tests::{Cluster, CmdOutput};
use serde_json::json;

fn fixture() -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("../engine/tests/fixtures/canary/valid/podinfo.yml");
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| panic!("write {}: {e}", path.display()));
    path
}

#[track_caller]
fn ok(cluster: &Cluster, args: &[&str]) -> CmdOutput {
    cluster.hubctl(args).expect_ok(&args.join(" "))
}

/// The helmChart entity `podinfo` in `environment`, deployed to `namespace`.
fn create_podinfo(cluster: &Cluster, environment: &str, namespace: &str) {
    cluster
        .submit(json!({"CreateEntity": {"environment": environment, "kind": "HelmChart", "name": "podinfo",
            "product_id": "com.example:podinfo", "k8s_namespace": namespace, "account_id": null, "release_channel": null}}))
        .expect("entity");
}

fn list(cluster: &Cluster) -> Vec<CanaryView> {
    ok(cluster, &["canary", "get", "-A", "-o", "json"]).answer()
}

#[test]
fn canary_resources_through_hubctl() {
    let cluster = Cluster::up(3, "");
    let dir = cluster.dir().to_path_buf();
    ok(&cluster, &["env", "create", "prod"]);
    create_podinfo(&cluster, "prod", "podinfo");
    let good = write(&dir, "podinfo.yml", &fixture());
    ok(
        &cluster,
        &[
            "canary",
            "apply",
            "-f",
            good.to_str().unwrap(),
            "-n",
            "prod",
        ],
    );
    let rows = list(&cluster);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(
        (
            rows[0].namespace.as_str(),
            rows[0].name.as_str(),
            rows[0].status.as_str(),
            rows[0].weight
        ),
        ("prod", "podinfo", "Initializing", 0)
    );
    let table = ok(&cluster, &["canary", "get", "-A"]).stdout;
    assert!(table.contains("LASTTRANSITIONTIME"), "{table}");

    // Bad input: the error names the path; the canary is untouched.
    let before = ok(
        &cluster,
        &["canary", "get", "podinfo", "-n", "prod", "-o", "json"],
    )
    .json();
    let bad = write(
        &dir,
        "bad.yml",
        &fixture().replace("maxWeight: 50", "maxWeight: 101"),
    );
    let out = cluster.hubctl(&["canary", "apply", "-f", bad.to_str().unwrap(), "-n", "prod"]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("spec.analysis.maxWeight"),
        "{}",
        out.describe()
    );
    let after = ok(
        &cluster,
        &["canary", "get", "podinfo", "-n", "prod", "-o", "json"],
    )
    .json();
    assert_eq!(before, after);
    assert_eq!(after["status"]["phase"], "Initializing", "{after}");
    assert_eq!(
        after["status"]["conditions"][0]["type"], "Promoted",
        "{after}"
    );

    // `wait` fails on timeout with a non-zero exit.
    let out = cluster.hubctl(&[
        "canary",
        "wait",
        "podinfo",
        "-n",
        "prod",
        "--for",
        "promoted",
        "--timeout",
        "1s",
    ]);
    assert!(
        !out.success() && out.stderr.contains("still"),
        "{}",
        out.describe()
    );

    // A manual abort is one committed step, audited.
    ok(
        &cluster,
        &[
            "canary", "abort", "podinfo", "-n", "prod", "--actor", "alice",
        ],
    );
    let v = cluster
        .ask(&GetCanary("prod/podinfo".into()))
        .expect("canary");
    assert_eq!(v.step, Some(1), "{v:?}");
    let audit = cluster.ask(&ListAudit::default()).expect("audit");
    assert!(
        audit
            .audit
            .iter()
            .any(|a| a.action.as_deref() == Some("canary-abort")),
        "{audit:?}"
    );

    // Ticks are the leader's alone.
    let err = cluster
        .submit(
            json!({"CanaryTick": {"id": "prod/podinfo", "step": 1, "input": {
            "revision": "r", "primary_ready_percent": 100, "canary_ready_percent": 100,
            "primary_revision": null, "canary_revision": null, "webhooks": {}, "metrics": {},
            "manual": null}}}),
        )
        .expect_err("leader only");
    assert!(err.contains("leader only"), "{err}");
    // So are judged ticks, and agents' sample reports come through the Agent API only.
    let err = cluster
        .submit(
            json!({"CanaryJudgedTick": {"id": "prod/podinfo", "step": 1, "input": {
            "revision": "r", "primary_ready_percent": 100, "canary_ready_percent": 100,
            "primary_revision": null, "canary_revision": null, "webhooks": {}, "metrics": {},
            "manual": null}, "samples": {}}}),
        )
        .expect_err("leader only");
    assert!(err.contains("leader only"), "{err}");
    let err = cluster
        .submit(json!({"ReportCanariesWithSamples": {"environment": "prod",
            "observations": [], "samples": []}}))
        .expect_err("agents only");
    assert!(err.contains("Agent API"), "{err}");

    ok(&cluster, &["canary", "delete", "podinfo", "-n", "prod"]);
    assert!(list(&cluster).is_empty());
    let out = cluster.hubctl(&["canary", "promote", "podinfo", "-n", "prod"]);
    assert!(
        !out.success() && out.stderr.contains("not found"),
        "{}",
        out.describe()
    );
}

fn valid_fixture(name: &str) -> PathBuf {
    std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("../engine/tests/fixtures/canary/valid")
    .join(name)
}

/// Flagger resources as Flagger users write them: the seed's podinfo canary applies with no
/// edits once its entity exists; Kubernetes-only fields are accepted and reported back as
/// ignored, by path, in the dry run and in the applied result; a `targetRef` naming no entity
/// is refused with that path.
#[test]
fn flagger_resources_apply_as_written() {
    let cluster = Cluster::up(3, "");
    let seed = valid_fixture("flagger-podinfo.yml");
    let k8s = valid_fixture("flagger-kubernetes-fields.yml");
    ok(&cluster, &["env", "create", "test"]);
    // Before the entity exists: refused with the path, nothing applied.
    let out = cluster.hubctl(&[
        "canary",
        "apply",
        "-f",
        seed.to_str().unwrap(),
        "-n",
        "test",
    ]);
    assert!(
        !out.success()
            && out
                .stderr
                .contains("spec.targetRef: entity eid:test:helmChart:podinfo does not exist"),
        "{}",
        out.describe()
    );
    assert!(list(&cluster).is_empty());
    // The dry run validates here, sends nothing, and names each ignored field.
    let dry = ok(
        &cluster,
        &["canary", "apply", "--dry-run", "-f", k8s.to_str().unwrap()],
    );
    for path in [
        "spec.autoscalerRef",
        "spec.provider",
        "spec.service.portDiscovery",
        "spec.analysis.sessionAffinity",
    ] {
        assert!(
            dry.stdout.contains(&format!("warning: {path}: ignored (")),
            "{}",
            dry.stdout
        );
    }
    assert!(
        dry.stdout.contains("target entity: helmChart/podinfo"),
        "{}",
        dry.stdout
    );
    let json = ok(
        &cluster,
        &[
            "canary",
            "apply",
            "--dry-run",
            "-f",
            seed.to_str().unwrap(),
            "-o",
            "json",
        ],
    )
    .json();
    assert_eq!(json["target"], "helmChart/podinfo", "{json}");
    assert_eq!(json["ignored"], json!([]), "{json}");
    assert!(list(&cluster).is_empty(), "a dry run applied something");

    create_podinfo(&cluster, "test", "test");
    ok(
        &cluster,
        &[
            "canary",
            "apply",
            "-f",
            seed.to_str().unwrap(),
            "-n",
            "test",
        ],
    );
    let rows = list(&cluster);
    assert_eq!(rows.len(), 1, "{rows:?}");
    let narrow = ok(&cluster, &["canary", "get", "-A"]).stdout;
    let wide = ok(&cluster, &["canary", "get", "-A", "-o", "wide"]).stdout;
    assert!(
        !narrow.contains("ENTITY") && !narrow.contains("eid:test:helmChart:podinfo"),
        "{narrow}"
    );
    assert!(
        wide.contains("ENTITY") && wide.contains("eid:test:helmChart:podinfo"),
        "{wide}"
    );
    // The same canary with the Kubernetes fields: applied, the ignored ones in the result.
    let applied = ok(
        &cluster,
        &["canary", "apply", "-f", k8s.to_str().unwrap(), "-o", "json"],
    )
    .json();
    let result = applied["output"]["Changed"]["summary"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(result.contains("canary test/podinfo updated"), "{applied}");
    assert!(
        result.contains("spec.autoscalerRef: ignored ("),
        "{applied}"
    );
    assert!(
        result.contains("spec.service.trafficDistribution: ignored ("),
        "{applied}"
    );
    // The stored canary reports them too, under status.ignoredFields (issue 52).
    let got = ok(
        &cluster,
        &["canary", "get", "podinfo", "-n", "test", "-o", "json"],
    )
    .json();
    let ignored = got["status"]["ignoredFields"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        ignored.iter().any(|f| f["path"] == "spec.autoscalerRef"
            && f["reason"].as_str().is_some_and(|r| !r.is_empty())),
        "{got}"
    );

    // The hub's config tracking (issue 55): on by default, turned off by an admin, shown.
    let settings: ClusterSettingsAnswer =
        ok(&cluster, &["cluster", "settings", "-o", "json"]).answer();
    assert!(settings.canary_config_tracking, "{settings:?}");
    ok(
        &cluster,
        &["cluster", "settings", "--canary-config-tracking", "false"],
    );
    let settings: ClusterSettingsAnswer =
        ok(&cluster, &["cluster", "settings", "-o", "json"]).answer();
    assert!(!settings.canary_config_tracking, "{settings:?}");
}

fn flagger(name: &str) -> String {
    let path = std::path::PathBuf::from(
        std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo test sets CARGO_MANIFEST_DIR"),
    )
    .join("fixtures/flagger")
    .join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Flagger's Linkerd tutorial as its users apply it (issue 52 item 3): its canary's checks name
/// MetricTemplates, so alone it is refused at the first `templateRef`; in one file with its
/// two templates it applies (templates first); the templates are listed and shown, and one a
/// canary uses cannot be deleted until the canary is.
#[test]
fn metric_templates_through_hubctl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cluster = Cluster::up(3, "");
    ok(&cluster, &["env", "create", "test"]);
    create_podinfo(&cluster, "test", "test");
    let canary = flagger("linkerd-canary-tutorial.yaml");
    let alone = write(dir.path(), "canary.yaml", &canary);
    cluster
        .hubctl(&["canary", "apply", "-f", alone.to_str().unwrap()])
        .expect_err(
            1,
            "spec.analysis.metrics[0].templateRef: metric template success-rate not found in test",
        );
    assert!(list(&cluster).is_empty());

    let all = format!(
        "{}\n---\n{}\n---\n{canary}",
        flagger("metric-templates/linkerd-tutorial-success-rate.yaml"),
        flagger("metric-templates/linkerd-tutorial-latency.yaml"),
    );
    let all = write(dir.path(), "all.yaml", &all);
    let dry = ok(
        &cluster,
        &["canary", "apply", "--dry-run", "-f", all.to_str().unwrap()],
    );
    assert!(
        dry.stdout
            .contains("MetricTemplate test/latency, rendered when applied"),
        "{}",
        dry.stdout
    );
    ok(&cluster, &["canary", "apply", "-f", all.to_str().unwrap()]);
    assert_eq!(list(&cluster).len(), 1);
    let templates: Vec<MetricTemplateView> = ok(
        &cluster,
        &["metric-template", "get", "-n", "test", "-o", "json"],
    )
    .answer();
    let names: Vec<&str> = templates.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["latency", "success-rate"], "{templates:?}");
    assert_eq!(templates[0].provider.kind, "prometheus");
    let shown = ok(
        &cluster,
        &["metric-template", "get", "latency", "-n", "test"],
    )
    .stdout;
    assert!(shown.contains("kind: MetricTemplate"), "{shown}");

    let refused = cluster.hubctl(&["metric-template", "delete", "latency", "-n", "test"]);
    assert!(
        !refused.success() && refused.stderr.contains("podinfo"),
        "a template in use was deleted: {}",
        refused.describe()
    );
    ok(&cluster, &["canary", "delete", "podinfo", "-n", "test"]);
    ok(
        &cluster,
        &["metric-template", "delete", "latency", "-n", "test"],
    );
    let left: Vec<MetricTemplateView> =
        ok(&cluster, &["metric-template", "get", "-A", "-o", "json"]).answer();
    assert_eq!(left.len(), 1, "{left:?}");
}

//! Issue 52, item 1: every real Flagger Canary is accepted. The corpus in
//! `tests/fixtures/flagger/` holds Canary resources copied verbatim from Flagger's repository
//! (each file names its source); every one parses, and what the hub does not act on is
//! reported as ignored with its path and a reason.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use common::*;
use hub_engine::canary::{
    parse_canary, parse_canary_reporting, parse_canary_templated, HeaderMatch, IgnoredField,
    MetricSource, MetricTemplateSpec, StepWeights, Strategy,
};
use hub_engine::Command;

fn corpus_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flagger")
}

/// Every fixture, by file name, sorted.
fn corpus() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = fs::read_dir(corpus_dir())
        .expect("tests/fixtures/flagger exists")
        .map(|e| e.expect("readable directory").path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("yaml"))
        .map(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let text = fs::read_to_string(&p).expect("readable fixture");
            (name.to_string(), text)
        })
        .collect();
    out.sort();
    out
}

/// Whether a fixture has a metric with `templateRef`.
fn is_templated(text: &str) -> bool {
    text.contains("templateRef:")
}

/// Every canary of the corpus parses. Those with a MetricTemplate check (`templateRef`) have
/// it set aside, to be resolved against the hub's templates when applied
/// (`tests/metric_templates.rs` applies them with Flagger's templates); with no templates,
/// the resolution refuses them at the template reference, by name, and nowhere else.
#[test]
fn every_flagger_canary_of_the_corpus_is_accepted() {
    let all = corpus();
    assert!(all.len() >= 20, "only {} fixtures", all.len());
    let mut refused = Vec::new();
    let mut templated = 0;
    for (file, text) in &all {
        let parsed = match parse_canary_templated(text) {
            Ok(p) => p,
            Err(e) => {
                refused.push(format!("{file}: {}", e.first()));
                continue;
            }
        };
        assert_eq!(is_templated(text), !parsed.templated.is_empty(), "{file}");
        let env = parsed
            .spec
            .namespace
            .clone()
            .unwrap_or_else(|| "test".into());
        let none: BTreeMap<(String, String), MetricTemplateSpec> = BTreeMap::new();
        let result = parsed.resolve(&env, &none);
        if is_templated(text) {
            templated += 1;
            let errs = result.err().unwrap_or_else(|| panic!("{file}: accepted"));
            assert!(
                errs.iter().all(|e| e.path.ends_with(".templateRef")
                    && e.message.starts_with("metric template ")
                    && e.message.contains(" not found in ")),
                "{file}: {errs}"
            );
        } else if let Err(e) = result {
            refused.push(format!("{file}: {}", e.first()));
        }
    }
    assert!(
        refused.is_empty(),
        "{} of {} refused:\n{}",
        refused.len(),
        all.len(),
        refused.join("\n")
    );
    assert_eq!((all.len(), templated), (40, 12));
}

/// `text` without its metrics that reference a MetricTemplate, for the tests of the other
/// fields of a templated fixture.
fn without_templated_metrics(text: &str) -> String {
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).expect("YAML");
    if let Some(metrics) = doc
        .get_mut("spec")
        .and_then(|s| s.get_mut("analysis"))
        .and_then(|a| a.get_mut("metrics"))
        .and_then(|m| m.as_sequence_mut())
    {
        metrics.retain(|m| m.get("templateRef").is_none());
    }
    serde_yaml_ng::to_string(&doc).expect("YAML")
}

fn read(file: &str) -> String {
    let path = corpus_dir().join(file);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn ignored(text: &str) -> Vec<IgnoredField> {
    parse_canary_reporting(text)
        .unwrap_or_else(|e| panic!("{e}"))
        .1
}

fn paths(text: &str) -> Vec<String> {
    ignored(text).into_iter().map(|f| f.path).collect()
}

#[test]
fn every_fixture_names_its_source_and_licence() {
    for (file, text) in corpus() {
        assert!(
            text.starts_with("# Source: fluxcd/flagger "),
            "{file}: no source line"
        );
        assert!(text.contains("# Licence: Apache-2.0"), "{file}: no licence");
    }
}

#[test]
fn every_ignored_field_has_a_reason_and_proxy_work_says_not_yet() {
    for (file, text) in corpus() {
        for f in ignored(&without_templated_metrics(&text)) {
            assert!(!f.reason.trim().is_empty(), "{file}: {}", f.path);
            assert_eq!(f.to_string(), format!("{}: ignored ({})", f.path, f.reason));
            let proxy_work = [
                "spec.service.match",
                "spec.service.rewrite",
                "spec.service.timeout",
                "spec.service.retries",
                "spec.service.headers",
                "spec.analysis.mirror",
                "spec.analysis.sessionAffinity",
            ];
            if proxy_work.contains(&f.path.as_str()) {
                assert!(f.reason.starts_with("not acted on yet"), "{file}: {f}");
            }
        }
    }
}

/// Istio with a URI match, rewrite, timeout, a MetricTemplate and alert providers.
#[test]
fn istio_readme_reports_exactly_these_fields() {
    let text = without_templated_metrics(&read("istio-readme.yaml"));
    assert_eq!(
        paths(&text),
        [
            "spec.provider",
            "spec.autoscalerRef",
            "spec.service.portName",
            "spec.service.targetPort",
            "spec.service.portDiscovery",
            "spec.service.match",
            "spec.service.rewrite",
            "spec.service.timeout",
        ]
    );
    // Without the templated check, the two built-in ones run.
    let spec = parse_canary(&text).unwrap();
    let names: Vec<&str> = spec
        .analysis
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["request-success-rate", "request-duration"]);
}

/// Linkerd through the Gateway API with stepWeights whose last entry (60) is above
/// maxWeight (50): Flagger takes the last entry, and so does the hub.
#[test]
fn linkerd_steps_take_the_last_step_weight_as_flagger_does() {
    let text = without_templated_metrics(&read("linkerd-test-steps.yaml"));
    assert_eq!(
        paths(&text),
        [
            "spec.service.targetPort",
            "spec.service.portDiscovery",
            "spec.service.gatewayRefs",
            "spec.analysis.maxWeight",
        ]
    );
    let spec = parse_canary(&text).unwrap();
    assert_eq!(
        spec.analysis.strategy,
        Strategy::Canary {
            steps: StepWeights::List(vec![10, 20, 30, 40, 50, 60]),
            max_weight: 60
        }
    );
    // targetPort: http is a named port: accepted, not stored as a number.
    assert_eq!(spec.service.target_port, None);
    assert!(spec.analysis.metrics.is_empty());
}

/// Kuma with metadata annotations and service metadata for apex, primary and canary.
#[test]
fn kuma_example_reports_metadata_and_service_metadata() {
    assert_eq!(
        paths(&read("kuma-canary-example.yaml")),
        [
            "metadata.annotations",
            "spec.service.targetPort",
            "spec.service.apex",
            "spec.service.primary",
            "spec.service.canary",
        ]
    );
}

/// Knative gives no spec.service: the service is the target's, on port 80.
#[test]
fn a_knative_canary_is_reached_on_port_80() {
    let text = read("knative-tutorial.yaml");
    assert_eq!(paths(&text), ["spec.provider"]);
    let spec = parse_canary(&text).unwrap();
    assert_eq!(spec.target.name, "podinfo");
    assert_eq!(spec.service.name, "podinfo");
    assert_eq!(spec.service.port, 80);
}

/// Flagger's deprecated `metrics[].threshold`: a minimum success rate, a maximum duration.
#[test]
fn a_metric_threshold_is_read_as_flagger_reads_it() {
    let spec = parse_canary(&read("contour-test-ab.yaml")).unwrap();
    let ranges: Vec<(&str, Option<i64>, Option<i64>)> = spec
        .analysis
        .metrics
        .iter()
        .map(|m| (m.name.as_str(), m.range.min, m.range.max))
        .collect();
    assert_eq!(
        ranges,
        [
            ("request-success-rate", Some(99_000), None),
            ("request-duration", None, Some(500_000)),
        ]
    );
}

/// What Flagger's CRD allows that no file of the corpus shows: a `status:` block and
/// server-set metadata (as `kubectl get -o yaml` exports them), labels, `corsPolicy`,
/// `queryParams`, `sourceLabels` and `suffix` matches, `disableTLS`, empty `type` and
/// `severity`, `metricsServer` with a bare query.
const EXPORTED: &str = "\
apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: podinfo
  namespace: test
  labels: {app: podinfo}
  uid: 5c3d7e52-3ad1-4f49-8a0b-6f0b3b6f54a1
  resourceVersion: '4711'
  generation: 3
  creationTimestamp: '2026-01-02T03:04:05Z'
  finalizers: [finalizers.flagger.app]
spec:
  metricsServer: http://prometheus.istio-system:9090
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service:
    port: 9898
    corsPolicy: {allowOrigin: ['*'], allowMethods: [GET], maxAge: 24h}
    unmanagedMetadata: {labels: [team]}
  analysis:
    interval: 1m
    threshold: 5
    iterations: 10
    match:
      - headers: {user-agent: {suffix: Firefox}}
      - queryParams: {canary: {exact: 'true'}}
      - sourceLabels: {app: frontend}
    metrics:
      - name: error-rate
        query: sum(rate(errors[1m]))
        thresholdRange: {max: 1}
        threshold: 2
    webhooks:
      - {name: gate, type: '', url: 'https://gate.example/', disableTLS: true}
    alerts:
      - {name: on-call, severity: '', url: 'https://alerts.example/'}
status:
  phase: Succeeded
  canaryWeight: 0
  failedChecks: 0
  conditions:
    - {type: Promoted, status: 'True', reason: Succeeded}
";

#[test]
fn an_exported_resource_with_status_is_accepted_and_reported() {
    assert_eq!(
        paths(EXPORTED),
        [
            "metadata.labels",
            "metadata.uid",
            "metadata.resourceVersion",
            "metadata.generation",
            "metadata.creationTimestamp",
            "metadata.finalizers",
            "spec.service.unmanagedMetadata",
            "spec.service.corsPolicy",
            "spec.analysis.match[1].queryParams",
            "spec.analysis.match[2].sourceLabels",
            "spec.analysis.metrics[0].threshold",
            "spec.analysis.webhooks[0].disableTLS",
            "status",
        ]
    );
    let spec = parse_canary(EXPORTED).unwrap();
    // Only the header rule is acted on; a suffix is the regex that matches it.
    let Strategy::AbTesting { match_rules, .. } = &spec.analysis.strategy else {
        panic!("{:?}", spec.analysis.strategy)
    };
    assert_eq!(match_rules.len(), 1);
    assert_eq!(
        match_rules[0].headers["user-agent"],
        HeaderMatch::Regex(".*Firefox".into())
    );
    // A bare query is measured at spec.metricsServer.
    assert_eq!(
        spec.analysis.metrics[0].source,
        MetricSource::Prometheus {
            address: "http://prometheus.istio-system:9090".into(),
            query: "sum(rate(errors[1m]))".into()
        }
    );
    assert_eq!(spec.analysis.webhooks[0].kind.as_str(), "rollout");
}

/// Applied through the state, the ignored fields stay with the canary's record (read again
/// from the committed resource).
#[test]
fn the_record_reports_the_ignored_fields_of_its_resource() {
    let mut hub = Hub::new();
    hub.env("test");
    hub.helm("test", "podinfo", "com.example:podinfo");
    let text = without_templated_metrics(&read("istio-test-canary.yaml"));
    let applied = hub.apply(Command::ApplyCanary {
        environment: None,
        yaml: text.clone(),
    });
    let out = format!("{:?}", applied.result.expect("applied"));
    assert!(
        out.contains("spec.service.apex: ignored (no Kubernetes services are created"),
        "{out}"
    );
    let record = hub.state.canary("test/podinfo").expect("record");
    assert_eq!(record.ignored_fields(), ignored(&text));
    assert_eq!(
        record
            .ignored_fields()
            .iter()
            .map(|f| f.path.as_str())
            .collect::<Vec<_>>(),
        [
            "spec.service.portDiscovery",
            "spec.service.apex",
            "spec.service.headers",
        ]
    );
}

const BASE: &str = "\
apiVersion: flagger.app/v1beta1
kind: Canary
metadata: {name: podinfo}
spec:
  targetRef: {apiVersion: apps/v1, kind: Deployment, name: podinfo}
  service:
    port: 9898
  analysis: {interval: 1m, threshold: 5, stepWeight: 10}
";

/// A field of the wrong type is refused with its path (the first such error stops the parse).
#[test]
fn fields_of_the_wrong_type_are_refused_with_their_path() {
    for (from, to, path, message) in [
        (
            "    port: 9898\n",
            "    port: 9898\n    targetPort: [http]\n",
            "spec.service.targetPort",
            "a port number or a port name",
        ),
        (
            "    port: 9898\n",
            "    port: 9898\n    gateways: public-gateway\n",
            "spec.service.gateways",
            "invalid type: string",
        ),
        (
            "    port: 9898\n",
            "    port: 9898\n    retries: {attempts: three}\n",
            "spec.service.retries.attempts",
            "invalid type: string",
        ),
        (
            "    port: 9898\n",
            "    port: 9898\n    headers: {request: {add: [x]}}\n",
            "spec.service.headers.request.add",
            "invalid type: sequence",
        ),
        (
            "    port: 9898\n",
            "    port: 9898\n    trafficPolicy: ISTIO_MUTUAL\n",
            "spec.service.trafficPolicy",
            "invalid type: string",
        ),
        (
            "    port: 9898\n",
            "    port: 9898\n    portDiscovery: maybe\n",
            "spec.service.portDiscovery",
            "invalid type: string",
        ),
        (
            "metadata: {name: podinfo}",
            "metadata: {name: podinfo, labels: [a]}",
            "metadata.labels",
            "invalid type: sequence",
        ),
        (
            "stepWeight: 10}",
            "stepWeight: 10, sessionAffinity: {cookieName: c, maxAge: forever}}",
            "spec.analysis.sessionAffinity.maxAge",
            "invalid type: string",
        ),
        (
            "stepWeight: 10}",
            "stepWeight: 10, mirror: yes-please}",
            "spec.analysis.mirror",
            "invalid type: string",
        ),
        (
            "stepWeight: 10}",
            "stepWeight: 10, metrics: [{name: m, templateRef: {name: t}, templateVariables: [a]}]}",
            "spec.analysis.metrics[0].templateVariables",
            "invalid type: sequence",
        ),
    ] {
        let text = BASE.replace(from, to);
        assert_ne!(text, BASE, "{from:?} not in the base");
        let errs = parse_canary(&text)
            .err()
            .unwrap_or_else(|| panic!("{to:?}: accepted"));
        let e = errs.first();
        assert_eq!(e.path, path, "{errs}");
        assert!(e.message.contains(message), "{path}: {errs}");
    }
}

/// Fields Flagger's CRD does not declare are still refused, as Kubernetes refuses them.
#[test]
fn fields_flaggers_schema_does_not_declare_are_still_refused() {
    for (from, to, path) in [
        (
            "    port: 9898\n",
            "    port: 9898\n    gatway: [a]\n",
            "spec.service.gatway",
        ),
        (
            "metadata: {name: podinfo}",
            "metadata: {name: podinfo, label: {a: b}}",
            "metadata.label",
        ),
        (
            "stepWeight: 10}",
            "stepWeight: 10, canaryAnalysis: {}}",
            "spec.analysis.canaryAnalysis",
        ),
        (
            "stepWeight: 10}",
            "stepWeight: 10, match: [{uri: {prefix: /}}]}",
            "spec.analysis.match[0].uri",
        ),
    ] {
        let text = BASE.replace(from, to);
        assert_ne!(text, BASE, "{from:?} not in the base");
        let errs = parse_canary(&text)
            .err()
            .unwrap_or_else(|| panic!("{to:?}: accepted"));
        assert_eq!(errs.first().path, path, "{errs}");
        assert!(errs.first().message.contains("unknown field"), "{errs}");
    }
}

/// Values the hub does read are still checked: a template reference needs a name, a match
/// rule a condition, a suffix rule no second kind. (A reference to a template the hub does
/// not have is refused when the canary is applied: `tests/metric_templates.rs`.)
#[test]
fn bad_values_of_newly_accepted_fields_are_refused_with_their_path() {
    for (to, path, message) in [
        (
            "stepWeight: 10, metrics: [{name: m, templateRef: {namespace: x}}]}",
            "spec.analysis.metrics[0].templateRef.name",
            "required",
        ),
        (
            "stepWeight: 10, metrics: [{name: m, templateRef: {name: t}, query: up}]}",
            "spec.analysis.metrics[0].templateRef",
            "not both",
        ),
        (
            "iterations: 5, match: [{}]}",
            "spec.analysis.match[0]",
            "needs a condition",
        ),
        (
            "iterations: 5, match: [{headers: {a: {suffix: x, exact: y}}}]}",
            "spec.analysis.match[0].headers.a",
            "exactly one of exact, prefix, suffix or regex",
        ),
        (
            "stepWeight: 10, metrics: [{name: m, query: up, thresholdRange: {max: 1}}]}",
            "spec.analysis.metrics[0].provider",
            "spec.metricsServer",
        ),
    ] {
        let text = BASE.replace("stepWeight: 10}", to);
        let errs = parse_canary(&text)
            .err()
            .unwrap_or_else(|| panic!("{to:?}: accepted"));
        assert!(
            errs.iter()
                .any(|e| e.path == path && e.message.contains(message)),
            "want {path}: ..{message}.., got\n{errs}"
        );
    }
}

//! Issue 52, item 3 (the engine's part): Flagger's MetricTemplates, applied and deleted as
//! replicated commands, referenced by canary metrics (`templateRef`, `templateVariables`)
//! and rendered as Flagger renders them. The templates in
//! `tests/fixtures/flagger/metric-templates/` are copied verbatim from Flagger's repository
//! (each names its source), the ones its canaries of `tests/fixtures/flagger/` use.

mod common;

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use common::*;
use hub_engine::access::{need, Need, Role, Target};
use hub_engine::canary::{
    parse_canary_templated, parse_metric_template, render_query, MetricSource, MetricTemplateSpec,
    ModelField, ProviderKind, RenderError, TemplateModel,
};
use hub_engine::{Command, CommandError, EntityKind};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/flagger")
}

fn read(file: &str) -> String {
    let path = fixtures().join(file);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn template(file: &str) -> String {
    read(&format!("metric-templates/{file}"))
}

/// The corpus canaries with `templateRef`, each with the templates (from the same tutorial
/// or test script of Flagger's) it references.
const TEMPLATED: &[(&str, &[&str])] = &[
    (
        "gatewayapi-ab-tutorial.yaml",
        &[
            "gatewayapi-tutorial-latency.yaml",
            "gatewayapi-tutorial-error-rate.yaml",
        ],
    ),
    (
        "gatewayapi-canary-tutorial.yaml",
        &[
            "gatewayapi-tutorial-latency.yaml",
            "gatewayapi-tutorial-error-rate.yaml",
        ],
    ),
    (
        "gatewayapi-session-affinity-tutorial.yaml",
        &[
            "gatewayapi-tutorial-latency.yaml",
            "gatewayapi-tutorial-error-rate.yaml",
        ],
    ),
    (
        "gatewayapi-test-blue-green.yaml",
        &["gatewayapi-test-request-duration.yaml"],
    ),
    (
        "gatewayapi-test-session-affinity.yaml",
        &[
            "gatewayapi-test-latency.yaml",
            "gatewayapi-test-error-rate.yaml",
        ],
    ),
    ("istio-test-ab-revert.yaml", &["istio-test-latency.yaml"]),
    ("istio-test-canary.yaml", &["istio-test-latency.yaml"]),
    (
        "linkerd-canary-tutorial.yaml",
        &[
            "linkerd-tutorial-success-rate.yaml",
            "linkerd-tutorial-latency.yaml",
        ],
    ),
    (
        "linkerd-test-steps.yaml",
        &[
            "linkerd-test-success-rate.yaml",
            "linkerd-test-latency.yaml",
        ],
    ),
    ("nginx-test-ab.yaml", &["nginx-test-latency.yaml"]),
    (
        "prometheus-operator-tutorial.yaml",
        &[
            "prometheus-operator-error-rate.yaml",
            "prometheus-operator-latency.yaml",
        ],
    ),
];

/// Flagger's README canary references `db-connections`, a template Flagger's repository
/// does not contain: it stays refused, at that reference.
const WITHOUT_TEMPLATE: &str = "istio-readme.yaml";

/// A hub with the canary's environment, its target entity and the environments of `templates`.
fn hub_for(canary: &str, templates: &[String]) -> (Hub, String) {
    let parsed = parse_canary_templated(canary).unwrap_or_else(|e| panic!("{e}"));
    let env = parsed
        .spec
        .namespace
        .clone()
        .expect("corpus canaries name their namespace");
    let mut hub = Hub::new();
    hub.env(&env);
    let mut envs = std::collections::BTreeSet::from([env.clone()]);
    for t in templates {
        let ns = parse_metric_template(t).unwrap().namespace.unwrap();
        if envs.insert(ns.clone()) {
            hub.env(&ns);
        }
    }
    hub.product("com.example:podinfo");
    assert_eq!(parsed.spec.target.kind, EntityKind::HelmChart);
    hub.helm(&env, &parsed.spec.target.name, "com.example:podinfo");
    (hub, env)
}

fn apply_template(hub: &mut Hub, yaml: &str) {
    hub.ok(Command::ApplyMetricTemplate {
        environment: None,
        yaml: yaml.to_string(),
    });
}

fn apply_canary(yaml: &str) -> Command {
    Command::ApplyCanary {
        environment: None,
        yaml: yaml.to_string(),
    }
}

fn invalid(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { reason, .. } => reason,
        other => panic!("not an invalid field: {other}"),
    }
}

#[test]
fn every_template_of_the_corpus_parses_and_names_its_source() {
    let dir = fixtures().join("metric-templates");
    let mut count = 0;
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let text = fs::read_to_string(&path).unwrap();
        let file = path.display();
        assert!(text.starts_with("# Source: fluxcd/flagger "), "{file}");
        assert!(text.contains("# Licence: Apache-2.0"), "{file}");
        count += 1;
        if text.contains("type: graphite") {
            let e = parse_metric_template(&text).unwrap_err().to_string();
            assert!(
                e.contains("spec.provider.type: provider graphite is not supported yet"),
                "{file}: {e}"
            );
            continue;
        }
        let t = parse_metric_template(&text).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(t.spec.provider.kind, ProviderKind::Prometheus, "{file}");
    }
    assert!(count >= 16, "{count} templates");
}

/// The 11 corpus canaries that reference Flagger's templates: refused at the reference while
/// the template is missing, accepted once it is applied, each templated check carrying its
/// rendered query and its provider.
#[test]
fn templated_corpus_canaries_apply_once_their_templates_exist() {
    let mut accepted = 0;
    for (file, templates) in TEMPLATED {
        let canary = read(file);
        let texts: Vec<String> = templates.iter().map(|t| template(t)).collect();
        let (mut hub, env) = hub_for(&canary, &texts);
        let e = invalid(hub.err(apply_canary(&canary)));
        assert!(
            e.contains(".templateRef: metric template ") && e.contains(" not found in "),
            "{file}: {e}"
        );
        for t in &texts {
            apply_template(&mut hub, t);
        }
        hub.ok(apply_canary(&canary));
        let name = parse_canary_templated(&canary).unwrap().spec.name;
        let c = hub.state.canary(&format!("{env}/{name}")).unwrap();
        let checks: Vec<_> = c
            .spec
            .analysis
            .metrics
            .iter()
            .filter_map(|m| m.source.prometheus().map(|p| (m, p)))
            .collect();
        assert!(!checks.is_empty(), "{file}");
        for (m, p) in checks {
            assert!(p.template.is_some(), "{file}: {}", m.name);
            assert!(
                p.address.starts_with("http://prometheus")
                    || p.address.starts_with("http://flagger-prometheus"),
                "{file}: {}",
                p.address
            );
            assert!(!p.query.contains("{{"), "{file}: {}", p.query);
            assert!(
                p.query.contains(&env),
                "{file}: namespace not rendered: {}",
                p.query
            );
            assert!(
                !p.query.contains("[]"),
                "{file}: interval not rendered: {}",
                p.query
            );
        }
        accepted += 1;
    }
    assert_eq!(accepted, 11);
    let canary = read(WITHOUT_TEMPLATE);
    let (mut hub, _) = hub_for(&canary, &[]);
    let e = invalid(hub.err(apply_canary(&canary)));
    assert!(
        e.contains("spec.analysis.metrics[2].templateRef: metric template db-connections not found in test"),
        "{e}"
    );
}

/// The Linkerd tutorial's success-rate check, rendered for its canary (podinfo in test,
/// `direction: inbound`, interval 1m), is Flagger's query with the values in place, and the
/// metric keeps its place among the analysis's metrics.
#[test]
fn the_linkerd_tutorial_check_renders_as_flagger_renders_it() {
    let canary = read("linkerd-canary-tutorial.yaml");
    let texts = [
        template("linkerd-tutorial-success-rate.yaml"),
        template("linkerd-tutorial-latency.yaml"),
    ];
    let (mut hub, _) = hub_for(&canary, &texts);
    for t in &texts {
        apply_template(&mut hub, t);
    }
    hub.ok(apply_canary(&canary));
    let c = hub.state.canary("test/podinfo").unwrap();
    let names: Vec<&str> = c
        .spec
        .analysis
        .metrics
        .iter()
        .map(|m| m.name.as_str())
        .collect();
    assert_eq!(names, ["success-rate", "latency"]);
    let MetricSource::Template {
        template,
        provider,
        query,
    } = &c.spec.analysis.metrics[0].source
    else {
        panic!("{:?}", c.spec.analysis.metrics[0].source)
    };
    assert_eq!(template, "test/success-rate");
    assert_eq!(provider.address, "http://prometheus.linkerd-viz:9090");
    let want = "sum(
  rate(
    response_total{
      namespace=\"test\",
      deployment=~\"podinfo\",
      classification!=\"failure\",
      direction=\"inbound\"
    }[1m]
  )
) 
/ 
sum(
  rate(
    response_total{
      namespace=\"test\",
      deployment=~\"podinfo\",
      direction=\"inbound\"
    }[1m]
  )
) 
* 100
";
    assert_eq!(query, want);
    assert_eq!(
        hub_engine::canary::prometheus_query_text(query),
        "sum( rate( response_total{ namespace=\"test\", deployment=~\"podinfo\", \
         classification!=\"failure\", direction=\"inbound\" }[1m] ) ) / sum( rate( \
         response_total{ namespace=\"test\", deployment=~\"podinfo\", direction=\"inbound\" \
         }[1m] ) ) * 100 "
    );
}

fn model(namespace: &str, target: &str, interval: &str, vars: &[(&str, &str)]) -> TemplateModel {
    let mut m = TemplateModel::default();
    m.fields.insert(ModelField::Name, "standard".into());
    m.fields.insert(ModelField::Namespace, namespace.into());
    m.fields.insert(ModelField::Target, target.into());
    m.fields.insert(ModelField::Interval, interval.into());
    m.variables = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    m
}

/// The examples of Flagger's own rendering tests (`pkg/metrics/observers/render_test.go`).
#[test]
fn flaggers_rendering_examples_render_the_same() {
    assert_eq!(
        render_query(
            r#"sum(envoy_cluster_upstream_rq{envoy_cluster_name=~"{{ namespace }}_{{ target }}"})"#,
            &model("default", "myapp", "1m", &[])
        )
        .unwrap(),
        r#"sum(envoy_cluster_upstream_rq{envoy_cluster_name=~"default_myapp"})"#
    );
    let kafka = r#"delta(max by (consumer_group) (kafka_consumer_current_offset{cluster="{{ variables.cluster }}", consumer_group="{{ variables.consumer_group }}"}[{{ interval }}]))"#;
    assert_eq!(
        render_query(
            kafka,
            &model(
                "default",
                "",
                "1m",
                &[("cluster", "dev"), ("consumer_group", "my_consumer")]
            )
        )
        .unwrap(),
        r#"delta(max by (consumer_group) (kafka_consumer_current_offset{cluster="dev", consumer_group="my_consumer"}[1m]))"#
    );
    assert_eq!(
        render_query(
            kafka,
            &model(
                "default",
                "",
                "1m",
                &[("invalid", "dev"), ("consumer_group", "my_consumer")]
            )
        ),
        Err(RenderError::UndefinedVariable {
            name: "cluster".into()
        })
    );
}

/// The canary of the hub's tests, in environment `test`, with one templated metric.
fn canary_with(reference: &str, extra: &str) -> String {
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata: {{name: podinfo, namespace: test}}
spec:
  targetRef: {{kind: Deployment, name: podinfo}}
  service: {{port: 9898}}
  analysis:
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange: {{min: 99}}
      - name: latency
        templateRef: {reference}
        thresholdRange: {{max: 0.5}}
        interval: 30s
{extra}"
    )
}

fn my_metric(namespace: &str) -> String {
    template("usage-my-metric.yaml").replace(
        "  name: my-metric\n",
        &format!("  name: my-metric\n  namespace: {namespace}\n"),
    )
}

fn hub() -> Hub {
    let mut hub = Hub::new();
    hub.env("test");
    hub.env("flagger");
    hub.product("com.example:podinfo");
    hub.helm("test", "podinfo", "com.example:podinfo");
    hub
}

fn stored_query(hub: &Hub) -> String {
    match &hub
        .state
        .canary("test/podinfo")
        .unwrap()
        .spec
        .analysis
        .metrics[1]
        .source
    {
        MetricSource::Template { query, .. } => query.clone(),
        other => panic!("{other:?}"),
    }
}

/// Flagger's documented template (`my-metric`, in another namespace) with the variable the
/// documentation's canary gives; the interval as the metric writes it.
#[test]
fn a_template_of_another_environment_renders_with_the_canarys_values() {
    let mut hub = hub();
    apply_template(&mut hub, &my_metric("flagger"));
    hub.ok(apply_canary(&canary_with(
        "{name: my-metric, namespace: flagger}",
        "        templateVariables: {direction: inbound}\n",
    )));
    let q = stored_query(&hub);
    assert!(q.contains("namespace=\"test\",\n"), "{q}");
    assert!(q.contains("deployment=~\"podinfo\",\n"), "{q}");
    assert!(q.contains("direction=\"inbound\"\n"), "{q}");
    assert!(q.contains("}[30s]\n"), "{q}");
}

#[test]
fn bad_references_are_refused_with_their_path_and_change_nothing() {
    let mut hub = hub();
    apply_template(&mut hub, &my_metric("flagger"));
    // Missing: the reference's namespace defaults to the canary's (test), which has none.
    let e = invalid(hub.err(apply_canary(&canary_with("{name: my-metric}", ""))));
    assert!(
        e.contains(
            "spec.analysis.metrics[1].templateRef: metric template my-metric not found in test"
        ),
        "{e}"
    );
    // An undefined variable.
    let e = invalid(hub.err(apply_canary(&canary_with(
        "{name: my-metric, namespace: flagger}",
        "        templateVariables: {direction_: inbound}\n",
    ))));
    assert!(
        e.contains(
            "spec.analysis.metrics[1].templateVariables: variable \"direction\" is not defined: \
             metric template flagger/my-metric uses {{ variables.direction }}"
        ),
        "{e}"
    );
    // Wrong types.
    for (extra, path) in [
        (
            "        templateVariables: [direction]\n",
            "spec.analysis.metrics[1].templateVariables",
        ),
        (
            "        templateVariables: {direction: {a: b}}\n",
            "spec.analysis.metrics[1].templateVariables.direction",
        ),
    ] {
        let e = invalid(hub.err(apply_canary(&canary_with(
            "{name: my-metric, namespace: flagger}",
            extra,
        ))));
        assert!(e.contains(path), "{path}: {e}");
    }
    let e = invalid(hub.err(apply_canary(&canary_with("{name: 7}", ""))));
    assert!(
        e.contains("spec.analysis.metrics[1].templateRef.name"),
        "{e}"
    );
    assert!(hub.state.canary("test/podinfo").is_none());
}

#[test]
fn bad_templates_are_refused_with_their_path_and_change_nothing() {
    let mut hub = hub();
    let good = my_metric("test");
    for (from, to, want) in [
        (
            "type: prometheus",
            "type: promql",
            "spec.provider.type: unknown provider \"promql\"",
        ),
        (
            "type: prometheus",
            "type: datadog",
            "spec.provider.type: provider datadog is not supported yet",
        ),
        (
            "    address: http://prometheus.linkerd-viz:9090\n",
            "",
            "spec.provider.address: required",
        ),
        (
            "type: prometheus",
            "type: prometheus\n    insecureSkipVerify: yes-please",
            "spec.provider.insecureSkipVerify",
        ),
        (
            "{{ target }}",
            "{{ target | printf }}",
            "spec.query: {{ target | printf }} is not supported",
        ),
        (
            "{{ target }}",
            "{{ cluster }}",
            "spec.query: function \"cluster\" not defined",
        ),
        (
            "by (le)\n",
            "by (le) {{ target\n",
            "spec.query: unclosed action",
        ),
    ] {
        let yaml = good.replace(from, to);
        assert_ne!(yaml, good, "{from}");
        let e = invalid(hub.err(Command::ApplyMetricTemplate {
            environment: None,
            yaml,
        }));
        assert!(e.contains(want), "{want}: {e}");
    }
    let e = hub.err(Command::ApplyMetricTemplate {
        environment: None,
        yaml: my_metric("nowhere"),
    });
    assert!(matches!(e, CommandError::NotFound { .. }), "{e}");
    let e = invalid(hub.err(Command::ApplyMetricTemplate {
        environment: Some("flagger".into()),
        yaml: good.clone(),
    }));
    assert!(e.contains("differs from the environment given"), "{e}");
    // Without metadata.namespace, the environment given is the template's.
    hub.ok(Command::ApplyMetricTemplate {
        environment: Some("flagger".into()),
        yaml: template("usage-my-metric.yaml"),
    });
    assert!(hub.state.metric_template("flagger", "my-metric").is_some());
}

/// A changed template is rendered again for every canary that uses it, in the same entry;
/// a change one of them cannot render is refused naming the canary and the metric.
#[test]
fn a_changed_template_is_rendered_again_for_its_canaries() {
    let mut hub = hub();
    apply_template(&mut hub, &my_metric("test"));
    hub.ok(apply_canary(&canary_with(
        "{name: my-metric}",
        "        templateVariables: {direction: inbound}\n",
    )));
    assert!(stored_query(&hub).contains("response_latency_ms_bucket"));
    let changed = my_metric("test").replace("response_latency_ms_bucket", "request_latency_bucket");
    let out = hub.ok(Command::ApplyMetricTemplate {
        environment: None,
        yaml: changed.clone(),
    });
    assert!(
        format!("{out:?}").contains("rendered again for 1 canaries"),
        "{out:?}"
    );
    let q = stored_query(&hub);
    assert!(
        q.contains("request_latency_bucket") && q.contains("direction=\"inbound\""),
        "{q}"
    );
    // A variable the canary does not define.
    let e = hub.err(Command::ApplyMetricTemplate {
        environment: None,
        yaml: changed.replace("{{ target }}", "{{ variables.deployment }}"),
    });
    let text = e.to_string();
    assert!(
        matches!(e, CommandError::FailedPrecondition(_))
            && text.contains("used by canary test/podinfo")
            && text.contains("spec.analysis.metrics[1].templateVariables: variable \"deployment\" is not defined"),
        "{text}"
    );
    // Unchanged text changes nothing.
    let applied = hub.apply(Command::ApplyMetricTemplate {
        environment: None,
        yaml: changed,
    });
    assert!(applied.changed.is_empty(), "{:?}", applied.changed);
}

/// Deleting a template a canary uses is refused, naming the canary and the metric (Flagger
/// allows it, and every later check of the canary fails); once the canary is gone, it goes.
#[test]
fn a_template_in_use_is_not_deleted() {
    let mut hub = hub();
    apply_template(&mut hub, &my_metric("flagger"));
    hub.ok(apply_canary(&canary_with(
        "{name: my-metric, namespace: flagger}",
        "        templateVariables: {direction: inbound}\n",
    )));
    let delete = || Command::DeleteMetricTemplate {
        id: "flagger/my-metric".into(),
    };
    let e = hub.err(delete()).to_string();
    assert!(
        e.contains("metric template flagger/my-metric is used by canary test/podinfo (spec.analysis.metrics[1])"),
        "{e}"
    );
    // Nor does its environment go while the template is in use.
    let e = hub
        .err(Command::DeleteEnvironment {
            name: "flagger".into(),
        })
        .to_string();
    assert!(
        e.contains("metric templates used by canary test/podinfo"),
        "{e}"
    );
    hub.ok(Command::DeleteCanary {
        id: "test/podinfo".into(),
    });
    hub.ok(delete());
    assert!(hub.state.metric_template("flagger", "my-metric").is_none());
    let e = hub.err(delete());
    assert!(matches!(e, CommandError::NotFound { .. }), "{e}");
    // An environment's unused templates go with it.
    apply_template(&mut hub, &my_metric("flagger"));
    hub.ok(Command::DeleteEnvironment {
        name: "flagger".into(),
    });
    assert!(hub.state.metric_template("flagger", "my-metric").is_none());
}

/// Applying and deleting a template need what applying and deleting a canary of that
/// environment need.
#[test]
fn templates_need_the_role_canaries_need() {
    let hub = hub();
    let operator =
        |env: &str| Need::Role(Role::EnvironmentOperator, Target::Environment(env.into()));
    assert_eq!(
        need(
            &hub.state,
            &Command::ApplyMetricTemplate {
                environment: None,
                yaml: my_metric("flagger"),
            }
        ),
        operator("flagger")
    );
    assert_eq!(
        need(
            &hub.state,
            &Command::ApplyMetricTemplate {
                environment: Some("test".into()),
                yaml: template("usage-my-metric.yaml"),
            }
        ),
        operator("test")
    );
    assert_eq!(
        need(
            &hub.state,
            &Command::DeleteMetricTemplate {
                id: "flagger/my-metric".into()
            }
        ),
        operator("flagger")
    );
    assert_eq!(
        need(&hub.state, &apply_canary(&canary_with("{name: x}", ""))),
        operator("test")
    );
}

/// The typed contract the leader runs a templated check from.
#[test]
fn a_templated_check_carries_provider_and_secret_for_the_leader() {
    let mut hub = hub();
    let with_secret = my_metric("flagger").replace(
        "    address: http://prometheus.linkerd-viz:9090\n",
        "    address: https://prometheus.linkerd-viz:9090\n    secretRef: {name: prom-auth}\n    insecureSkipVerify: true\n",
    );
    apply_template(&mut hub, &with_secret);
    hub.ok(apply_canary(&canary_with(
        "{name: my-metric, namespace: flagger}",
        "        templateVariables: {direction: inbound}\n",
    )));
    let c = hub.state.canary("test/podinfo").unwrap();
    let p = c.spec.analysis.metrics[1].source.prometheus().unwrap();
    assert_eq!(p.address, "https://prometheus.linkerd-viz:9090");
    assert_eq!(p.template, Some("flagger/my-metric"));
    assert_eq!(p.secret_ref, Some("prom-auth"));
    assert_eq!(p.secret_environment(), Some("flagger"));
    assert!(p.insecure_skip_verify);
    assert!(c.spec.analysis.metrics[0].source.prometheus().is_none());
    assert!(c.spec.analysis.metrics[0].source.is_proxy());
    assert!(!c.spec.analysis.metrics[1].source.is_proxy());
}

/// `MetricTemplates` for a plain map, as the CLI's dry run could use it.
#[test]
fn a_canary_resolves_against_any_template_source() {
    let t = parse_metric_template(&my_metric("test")).unwrap();
    let mut templates: BTreeMap<(String, String), MetricTemplateSpec> = BTreeMap::new();
    templates.insert(("test".into(), t.name.clone()), t.spec);
    let parsed = parse_canary_templated(&canary_with(
        "{name: my-metric}",
        "        templateVariables: {direction: inbound}\n",
    ))
    .unwrap();
    assert_eq!(parsed.templated.len(), 1);
    assert_eq!(parsed.spec.analysis.metrics.len(), 1);
    let (spec, _, _) = parsed.resolve("test", &templates).unwrap();
    assert_eq!(spec.analysis.metrics.len(), 2);
    assert_eq!(spec.analysis.metrics[1].interval_ms, 30_000);
}

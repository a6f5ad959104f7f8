//! The fields of a Flagger Canary the hub accepts but does not act on ([`IgnoredField`]),
//! each with its YAML path and the reason, collected from the resource as read
//! ([`ignored_fields`]). `hubctl canary apply` (and its `--dry-run`) shows them, and
//! `canary get -o yaml` shows them as `status.ignoredFields`
//! ([`crate::canary_record::Canary::ignored_fields`]). The table of every field is in
//! `docs/CANARY.md`.

use super::raw::{
    RawAnalysis, RawCanary, RawMatch, RawMetadata, RawMetric, RawService, RawSpec, RawWebhook,
};

/// A field of a canary resource the hub accepts but does not act on, with why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct IgnoredField {
    /// Its YAML path: `spec.service.gateways`, `spec.analysis.metrics[2].templateRef`.
    pub path: String,
    /// Why the hub does not act on it.
    pub reason: String,
}

impl std::fmt::Display for IgnoredField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ignored ({})", self.path, self.reason)
    }
}

/// A Kubernetes object the hub has no counterpart of.
const NO_KUBERNETES_SERVICES: &str =
    "no Kubernetes services are created: the agent's canary proxy serves spec.service.port";
/// Mesh or ingress routing the agent's proxy replaces.
const NO_MESH: &str = "traffic is shifted by the agent's canary proxy, not a mesh, gateway or \
                       ingress";
/// Issue 52 item 2: the proxy will act on it.
const PROXY_NOT_YET: &str = "not acted on yet: the agent's canary proxy does not implement it \
                             yet (issue 52)";

/// Collects the ignored fields of `raw`, in document order.
pub(super) fn ignored_fields(raw: &RawCanary) -> Vec<IgnoredField> {
    let mut out = Fields(Vec::new());
    if let Some(m) = &raw.metadata {
        metadata(&mut out, m);
    }
    if let Some(spec) = &raw.spec {
        self::spec(&mut out, spec);
    }
    out.add(
        raw.status.is_some(),
        "status",
        "the hub keeps the canary's status itself (canary get -o yaml shows it)",
    );
    out.0
}

/// The list being collected.
struct Fields(Vec<IgnoredField>);

impl Fields {
    fn add(&mut self, set: bool, path: impl Into<String>, reason: impl Into<String>) {
        if set {
            self.0.push(IgnoredField {
                path: path.into(),
                reason: reason.into(),
            });
        }
    }
}

fn metadata(out: &mut Fields, m: &RawMetadata) {
    const KEPT: &str = "kept in the stored resource; the hub does not select or act by them";
    out.add(m.labels.is_some(), "metadata.labels", KEPT);
    out.add(
        m.annotations.is_some(),
        "metadata.annotations",
        "kept in the stored resource; of them the hub acts only on flagger.app/config-tracking",
    );
    const SERVER: &str = "set by the Kubernetes API server; the hub keeps its own record";
    for (set, name) in [
        (m.uid.is_some(), "uid"),
        (m.resource_version.is_some(), "resourceVersion"),
        (m.generation.is_some(), "generation"),
        (m.creation_timestamp.is_some(), "creationTimestamp"),
        (m.deletion_timestamp.is_some(), "deletionTimestamp"),
        (
            m.deletion_grace_period_seconds.is_some(),
            "deletionGracePeriodSeconds",
        ),
        (m.generate_name.is_some(), "generateName"),
        (m.self_link.is_some(), "selfLink"),
        (m.owner_references.is_some(), "ownerReferences"),
        (m.finalizers.is_some(), "finalizers"),
        (m.managed_fields.is_some(), "managedFields"),
    ] {
        out.add(set, format!("metadata.{name}"), SERVER);
    }
}

fn spec(out: &mut Fields, s: &RawSpec) {
    out.add(s.provider.is_some(), "spec.provider", NO_MESH);
    out.add(
        s.autoscaler_ref.is_some(),
        "spec.autoscalerRef",
        "the hub runs no autoscaler: the entity's own settings scale its workloads",
    );
    out.add(s.ingress_ref.is_some(), "spec.ingressRef", NO_MESH);
    out.add(s.route_ref.is_some(), "spec.routeRef", NO_MESH);
    out.add(s.upstream_ref.is_some(), "spec.upstreamRef", NO_MESH);
    let queries_use_it = s.analysis.as_ref().is_some_and(|a| {
        a.metrics
            .iter()
            .flatten()
            .any(|m| m.query.is_some() && m.provider.is_none() && m.template_ref.is_none())
    });
    out.add(
        s.metrics_server.is_some() && !queries_use_it,
        "spec.metricsServer",
        "it is the Prometheus address of metrics given as a query without a provider, and this \
         resource has none; the built-in metrics are measured by the agent's proxy",
    );
    if let Some(service) = &s.service {
        self::service(out, service);
    }
    if let Some(analysis) = &s.analysis {
        self::analysis(out, analysis);
    }
}

fn service(out: &mut Fields, s: &RawService) {
    const P: &str = "spec.service";
    out.add(
        s.port_name.is_some(),
        format!("{P}.portName"),
        "names the Kubernetes service port; the agent's proxy serves spec.service.port",
    );
    out.add(
        s.target_port.is_some(),
        format!("{P}.targetPort"),
        "the container port (a number or a name) of a Kubernetes pod: the agent's proxy reaches \
         each workload on the port the agent gives it",
    );
    out.add(
        s.port_discovery.is_some(),
        format!("{P}.portDiscovery"),
        "the agent's proxy routes the one service port",
    );
    for (set, name) in [
        (s.headless.is_some(), "headless"),
        (s.app_protocol.is_some(), "appProtocol"),
        (s.traffic_distribution.is_some(), "trafficDistribution"),
        (s.apex.is_some(), "apex"),
        (s.primary.is_some(), "primary"),
        (s.canary.is_some(), "canary"),
        (s.unmanaged_metadata.is_some(), "unmanagedMetadata"),
    ] {
        out.add(set, format!("{P}.{name}"), NO_KUBERNETES_SERVICES);
    }
    for (set, name) in [
        (s.gateways.is_some(), "gateways"),
        (s.gateway_refs.is_some(), "gatewayRefs"),
        (s.hosts.is_some(), "hosts"),
        (s.delegation.is_some(), "delegation"),
        (s.mesh_name.is_some(), "meshName"),
        (s.backends.is_some(), "backends"),
    ] {
        out.add(set, format!("{P}.{name}"), NO_MESH);
    }
    out.add(
        s.traffic_policy.is_some(),
        format!("{P}.trafficPolicy"),
        "Istio destination rules (TLS mode, connection pool, load balancer, outlier detection) \
         have no counterpart in the agent's proxy",
    );
    out.add(
        s.cors_policy.is_some(),
        format!("{P}.corsPolicy"),
        "the agent's proxy adds no CORS headers; the workloads' own answers pass through",
    );
    out.add(
        s.backend_timeout.is_some(),
        format!("{P}.backendTimeout"),
        "a Gateway API per-backend timeout; the proxy's one request timeout is \
         spec.service.timeout",
    );
    out.add(
        s.mirror.is_some(),
        format!("{P}.mirror"),
        "Gateway API mirrors to other services; the hub mirrors to the canary only \
         (spec.analysis.mirror)",
    );
    for (set, name) in [
        (s.match_rules.is_some(), "match"),
        (s.rewrite.is_some(), "rewrite"),
        (s.timeout.is_some(), "timeout"),
        (s.retries.is_some(), "retries"),
        (s.headers.is_some(), "headers"),
    ] {
        out.add(set, format!("{P}.{name}"), PROXY_NOT_YET);
    }
}

fn analysis(out: &mut Fields, a: &RawAnalysis) {
    const P: &str = "spec.analysis";
    let last_step = a.step_weights.as_ref().and_then(|l| l.last().copied());
    if let (Some(max), Some(last)) = (a.max_weight, last_step) {
        out.add(
            max != last,
            format!("{P}.maxWeight"),
            format!(
                "stepWeights is given, so its last entry ({last}) is the highest canary weight, \
                 as in Flagger"
            ),
        );
    }
    out.add(a.mirror == Some(true), format!("{P}.mirror"), PROXY_NOT_YET);
    out.add(
        a.mirror_weight.is_some(),
        format!("{P}.mirrorWeight"),
        PROXY_NOT_YET,
    );
    for (i, rule) in a.match_rules.iter().flatten().enumerate() {
        match_rule(out, &format!("{P}.match[{i}]"), rule);
    }
    for (i, m) in a.metrics.iter().flatten().enumerate() {
        metric(out, &format!("{P}.metrics[{i}]"), m);
    }
    for (i, w) in a.webhooks.iter().flatten().enumerate() {
        webhook(out, &format!("{P}.webhooks[{i}]"), w);
    }
    out.add(
        a.session_affinity.is_some(),
        format!("{P}.sessionAffinity"),
        PROXY_NOT_YET,
    );
}

/// A match rule with a condition the proxy does not evaluate is left out entirely: leaving
/// out only that condition would send more requests to the canary than the rule selects.
fn match_rule(out: &mut Fields, path: &str, rule: &RawMatch) {
    let dropped = "not acted on yet: the agent's proxy matches headers only, so this rule is \
                   left out (it sends no request to the canary)";
    out.add(
        rule.query_params.is_some(),
        format!("{path}.queryParams"),
        dropped,
    );
    out.add(
        rule.source_labels.is_some(),
        format!("{path}.sourceLabels"),
        "the labels of a calling Kubernetes pod, which the agent's proxy cannot know; this rule \
         is left out (it sends no request to the canary)",
    );
}

/// Whether a match rule has a condition the proxy does not evaluate (and is left out).
pub(super) fn match_rule_is_left_out(rule: &RawMatch) -> bool {
    rule.query_params.is_some() || rule.source_labels.is_some()
}

fn metric(out: &mut Fields, path: &str, m: &RawMetric) {
    // A metric with templateRef renders its template with templateVariables when the canary
    // is applied (templated.rs).
    out.add(
        m.template_ref.is_none() && m.template_variables.is_some(),
        format!("{path}.templateVariables"),
        "used only with templateRef, and this metric has none",
    );
    out.add(
        m.threshold.is_some() && m.threshold_range.is_some(),
        format!("{path}.threshold"),
        "thresholdRange is given and wins, as in Flagger",
    );
}

fn webhook(out: &mut Fields, path: &str, w: &RawWebhook) {
    out.add(
        w.disable_tls.is_some(),
        format!("{path}.disableTLS"),
        "the hub's outbound client always verifies TLS (trust is configured on the node)",
    );
}

//! The YAML shape of a canary resource, as serde reads it: camelCase field names, every field
//! optional so that validation ([`super::parse`]) can report all missing and bad values at
//! once with their paths. Numbers are read wide (`i64`, `f64`) so that a weight of 150 gets a
//! range message rather than a type error.
//!
//! The shape is Flagger's Canary CRD (`flagger.app/v1beta1`): every field its schema declares
//! is read here with the type the schema gives it, so a resource Kubernetes would take is
//! never refused for a field the hub does not know, while a field of the wrong type is
//! refused with its path. A field the schema does not declare is refused, as Kubernetes'
//! strict field validation refuses it. Fields the hub does not act on are reported back as
//! ignored with their path and a reason ([`super::ignored`]); those with an open-ended shape
//! (Istio's `trafficPolicy`, `corsPolicy`, ...) are read as mappings ([`AnyMap`]) without
//! looking inside.

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

/// A mapping whose contents the hub does not read (a Kubernetes-only object).
pub(super) type AnyMap = BTreeMap<String, IgnoredAny>;

/// Kubernetes labels or annotations.
pub(super) type StringMap = BTreeMap<String, String>;

/// The document.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    expecting = "a canary resource: a mapping with apiVersion, kind, metadata and spec"
)]
pub(super) struct RawCanary {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub metadata: Option<RawMetadata>,
    pub spec: Option<RawSpec>,
    /// Flagger's status, as `kubectl get -o yaml` shows it: the hub keeps its own.
    pub status: Option<IgnoredAny>,
}

/// Kubernetes' `ObjectMeta`: name and namespace are read; the rest is accepted as written.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMetadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub labels: Option<StringMap>,
    pub annotations: Option<StringMap>,
    // The fields the Kubernetes API server sets or owns, present in a resource exported with
    // `kubectl get -o yaml`.
    pub uid: Option<String>,
    pub resource_version: Option<String>,
    pub generation: Option<i64>,
    pub creation_timestamp: Option<String>,
    pub deletion_timestamp: Option<String>,
    pub deletion_grace_period_seconds: Option<i64>,
    pub generate_name: Option<String>,
    pub self_link: Option<String>,
    pub owner_references: Option<Vec<AnyMap>>,
    pub finalizers: Option<Vec<String>>,
    pub managed_fields: Option<Vec<AnyMap>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSpec {
    pub target_ref: Option<RawTargetRef>,
    pub service: Option<RawService>,
    pub autoscaler_ref: Option<RawAutoscalerRef>,
    pub ingress_ref: Option<RawObjectRef>,
    pub route_ref: Option<RawObjectRef>,
    pub upstream_ref: Option<RawObjectRef>,
    pub provider: Option<String>,
    pub metrics_server: Option<String>,
    pub progress_deadline_seconds: Option<i64>,
    pub skip_analysis: Option<bool>,
    pub suspend: Option<bool>,
    pub revert_on_deletion: Option<bool>,
    pub analysis: Option<RawAnalysis>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawTargetRef {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
}

/// `ingressRef`, `routeRef`, `upstreamRef`: a Kubernetes object of the mesh or ingress.
#[expect(
    dead_code,
    reason = "read for its shape only: a Kubernetes-only object the hub reports as ignored"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawObjectRef {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub namespace: Option<String>,
}

/// `autoscalerRef`: an HPA or a KEDA ScaledObject.
#[expect(
    dead_code,
    reason = "read for its shape only: a Kubernetes-only object the hub reports as ignored"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawAutoscalerRef {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub name: Option<String>,
    pub primary_scaler_queries: Option<StringMap>,
    pub primary_scaler_replicas: Option<RawScalerReplicas>,
}

#[expect(
    dead_code,
    reason = "read for its shape only: a Kubernetes-only object the hub reports as ignored"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawScalerReplicas {
    pub min_replicas: Option<i64>,
    pub max_replicas: Option<i64>,
}

/// `service.targetPort`: Kubernetes' int-or-string, a port number or a container port's name.
/// Read by a visitor rather than an untagged enum, so that a wrong type is reported at this
/// field's path and line.
pub(super) enum RawPort {
    Number(i64),
    Name(#[expect(dead_code, reason = "a named port is Kubernetes' to resolve")] String),
}

impl<'de> Deserialize<'de> for RawPort {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct PortVisitor;
        impl serde::de::Visitor<'_> for PortVisitor {
            type Value = RawPort;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a port number or a port name")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<RawPort, E> {
                Ok(RawPort::Number(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<RawPort, E> {
                // Beyond i64: out of the port range all the same.
                Ok(RawPort::Number(i64::try_from(v).unwrap_or(i64::MAX)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<RawPort, E> {
                Ok(RawPort::Name(v.to_string()))
            }
        }
        d.deserialize_any(PortVisitor)
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawService {
    pub port: Option<i64>,
    pub name: Option<String>,
    pub port_name: Option<String>,
    pub target_port: Option<RawPort>,
    pub port_discovery: Option<bool>,
    pub headless: Option<bool>,
    pub app_protocol: Option<String>,
    pub traffic_distribution: Option<String>,
    pub timeout: Option<String>,
    pub backend_timeout: Option<String>,
    pub gateways: Option<Vec<String>>,
    pub gateway_refs: Option<Vec<AnyMap>>,
    pub hosts: Option<Vec<String>>,
    pub delegation: Option<bool>,
    pub traffic_policy: Option<AnyMap>,
    #[serde(rename = "match")]
    pub match_rules: Option<Vec<AnyMap>>,
    pub rewrite: Option<RawRewrite>,
    pub retries: Option<RawRetries>,
    pub headers: Option<RawHeaders>,
    pub mirror: Option<Vec<AnyMap>>,
    pub cors_policy: Option<AnyMap>,
    pub mesh_name: Option<String>,
    pub backends: Option<Vec<String>>,
    pub apex: Option<RawCustomMetadata>,
    pub primary: Option<RawCustomMetadata>,
    pub canary: Option<RawCustomMetadata>,
    pub unmanaged_metadata: Option<AnyMap>,
}

/// `service.rewrite`.
#[expect(
    dead_code,
    reason = "read for its shape only until the proxy acts on it (issue 52 item 2)"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRewrite {
    pub uri: Option<String>,
    pub authority: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
}

/// `service.retries`.
#[expect(
    dead_code,
    reason = "read for its shape only until the proxy acts on it (issue 52 item 2)"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRetries {
    pub attempts: Option<i64>,
    pub per_try_timeout: Option<String>,
    pub retry_on: Option<String>,
}

/// `service.headers`.
#[expect(
    dead_code,
    reason = "read for its shape only until the proxy acts on it (issue 52 item 2)"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawHeaders {
    pub request: Option<RawHeaderOperations>,
    pub response: Option<RawHeaderOperations>,
}

/// `service.headers.request` and `.response`.
#[expect(
    dead_code,
    reason = "read for its shape only until the proxy acts on it (issue 52 item 2)"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawHeaderOperations {
    pub add: Option<StringMap>,
    pub set: Option<StringMap>,
    pub remove: Option<Vec<String>>,
}

/// `service.apex`, `.primary`, `.canary`: labels and annotations of Kubernetes services.
#[expect(
    dead_code,
    reason = "read for its shape only: a Kubernetes-only object the hub reports as ignored"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawCustomMetadata {
    pub labels: Option<StringMap>,
    pub annotations: Option<StringMap>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawAnalysis {
    pub interval: Option<String>,
    pub threshold: Option<i64>,
    pub max_weight: Option<i64>,
    pub step_weight: Option<i64>,
    pub step_weights: Option<Vec<i64>>,
    pub step_weight_promotion: Option<i64>,
    pub iterations: Option<i64>,
    pub primary_ready_threshold: Option<i64>,
    pub canary_ready_threshold: Option<i64>,
    pub mirror: Option<bool>,
    pub mirror_weight: Option<i64>,
    #[serde(rename = "match")]
    pub match_rules: Option<Vec<RawMatch>>,
    pub metrics: Option<Vec<RawMetric>>,
    pub webhooks: Option<Vec<RawWebhook>>,
    pub alerts: Option<Vec<RawAlert>>,
    pub session_affinity: Option<RawSessionAffinity>,
    pub inconclusive_limit: Option<i64>,
    pub on_failure: Option<String>,
}

/// `analysis.sessionAffinity`.
#[expect(
    dead_code,
    reason = "read for its shape only until the proxy acts on it (issue 52 item 2)"
)]
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSessionAffinity {
    pub cookie_name: Option<String>,
    pub primary_cookie_name: Option<String>,
    pub domain: Option<String>,
    pub http_only: Option<bool>,
    pub max_age: Option<i64>,
    pub partitioned: Option<bool>,
    pub path: Option<String>,
    pub same_site: Option<String>,
    pub secure: Option<bool>,
}

/// `match[i]`: request conditions, all of which must hold.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMatch {
    pub headers: Option<BTreeMap<String, RawHeaderMatch>>,
    pub query_params: Option<BTreeMap<String, RawHeaderMatch>>,
    pub source_labels: Option<StringMap>,
}

/// `match[i].headers.<name>`: exactly one of `exact`, `prefix`, `suffix`, `regex`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawHeaderMatch {
    pub exact: Option<String>,
    pub prefix: Option<String>,
    pub suffix: Option<String>,
    pub regex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMetric {
    pub name: Option<String>,
    pub threshold_range: Option<RawRange>,
    /// Flagger's deprecated single threshold, read when `thresholdRange` is absent.
    pub threshold: Option<f64>,
    pub interval: Option<String>,
    pub provider: Option<RawProvider>,
    pub query: Option<String>,
    pub template_ref: Option<RawTemplateRef>,
    pub template_variables: Option<StringMap>,
    pub judge: Option<RawJudge>,
}

/// `metrics[i].templateRef`: a MetricTemplate.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawTemplateRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
}

/// `metrics[i].judge` (issue 20).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawJudge {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub baseline: Option<String>,
    pub direction: Option<String>,
    pub effect_size: Option<f64>,
    pub confidence: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawRange {
    pub min: Option<f64>,
    pub max: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawProvider {
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub address: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawWebhook {
    pub name: Option<String>,
    #[serde(rename = "type")]
    pub kind: Option<String>,
    pub url: Option<String>,
    pub timeout: Option<String>,
    pub retries: Option<i64>,
    pub metadata: Option<BTreeMap<String, String>>,
    pub mute_alert: Option<bool>,
    #[serde(rename = "disableTLS")]
    pub disable_tls: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawAlert {
    pub name: Option<String>,
    pub severity: Option<String>,
    pub provider_ref: Option<RawProviderRef>,
    pub url: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawProviderRef {
    pub name: Option<String>,
    pub namespace: Option<String>,
}

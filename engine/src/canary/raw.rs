//! The YAML shape of a canary resource, as serde reads it: camelCase field names, unknown
//! fields refused everywhere, every field optional so that validation ([`super::parse`]) can
//! report all missing and bad values at once with their paths. Numbers are read wide (`i64`,
//! `f64`) so that a weight of 150 gets a range message rather than a type error.
//!
//! Fields that only mean something to Flagger on Kubernetes (autoscalers, service discovery
//! options, mesh providers) are read as [`IgnoredAny`]: accepted as Flagger users write them,
//! and reported back as ignored with their path ([`super::parse::IgnoredField`]).

use std::collections::BTreeMap;

use serde::de::IgnoredAny;
use serde::Deserialize;

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
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMetadata {
    pub name: Option<String>,
    pub namespace: Option<String>,
    pub annotations: Option<BTreeMap<String, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawSpec {
    pub target_ref: Option<RawTargetRef>,
    pub service: Option<RawService>,
    pub autoscaler_ref: Option<IgnoredAny>,
    pub provider: Option<IgnoredAny>,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawService {
    pub port: Option<i64>,
    pub name: Option<String>,
    pub port_name: Option<String>,
    pub target_port: Option<i64>,
    pub port_discovery: Option<IgnoredAny>,
    pub headless: Option<IgnoredAny>,
    pub app_protocol: Option<IgnoredAny>,
    pub traffic_distribution: Option<IgnoredAny>,
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
    #[serde(rename = "match")]
    pub match_rules: Option<Vec<RawMatch>>,
    pub metrics: Option<Vec<RawMetric>>,
    pub webhooks: Option<Vec<RawWebhook>>,
    pub alerts: Option<Vec<RawAlert>>,
    pub session_affinity: Option<IgnoredAny>,
    pub inconclusive_limit: Option<i64>,
    pub on_failure: Option<String>,
}

/// `match[i]`: HTTP header conditions, all of which must hold.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMatch {
    pub headers: Option<BTreeMap<String, RawHeaderMatch>>,
}

/// `match[i].headers.<name>`: exactly one of `exact`, `prefix`, `regex`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawHeaderMatch {
    pub exact: Option<String>,
    pub prefix: Option<String>,
    pub regex: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub(super) struct RawMetric {
    pub name: Option<String>,
    pub threshold_range: Option<RawRange>,
    pub interval: Option<String>,
    pub provider: Option<RawProvider>,
    pub query: Option<String>,
    pub judge: Option<RawJudge>,
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

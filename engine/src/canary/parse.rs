//! Parsing and validation of a canary resource (SPEC K1, K4–K6, S3).
//!
//! [`parse_canary`] refuses an oversized text, reads the YAML (syntax errors and duplicate
//! keys), lets serde read the shape (unknown fields, wrong types: the first such error is
//! reported with its line), then validates every field, collecting all problems with their
//! YAML paths, and fills in the defaults of SPEC K1.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;

use super::duration::{format_duration, parse_duration, MAX_DURATION_MS};
use super::error::{from_serde, quote, CanaryError, CanaryErrors};
use super::judge::{
    AnalysisPolicy, Baseline, Direction, Judge, OnFailure, DEFAULT_CONFIDENCE_MILLI,
    MAX_CONFIDENCE_MILLI, MIN_CONFIDENCE_MILLI,
};
use super::raw::{
    RawAlert, RawAnalysis, RawCanary, RawJudge, RawMatch, RawMetadata, RawMetric, RawService,
    RawSpec, RawTargetRef, RawWebhook,
};
use super::spec::{
    AlertSpec, AlertTarget, Analysis, CanarySpec, HeaderMatch, MatchRule, Metric, MetricSource,
    ServiceSpec, Severity, StepWeights, Strategy, TargetRef, ThresholdRange, Webhook, WebhookType,
    DEFAULT_INTERVAL_MS, DEFAULT_METRIC_INTERVAL_MS, DEFAULT_PROGRESS_DEADLINE_SECONDS,
    DEFAULT_READY_THRESHOLD, DEFAULT_THRESHOLD, DEFAULT_WEBHOOK_TIMEOUT_MS, MILLI, MIN_INTERVAL_MS,
    TOTAL_WEIGHT,
};
use crate::entity::EntityKind;
use crate::error::CommandError;
use crate::name::validate_name;
use crate::yaml_budget::{self, Document};

/// Largest resource text accepted, in bytes; a larger one is refused before parsing.
pub const MAX_CANARY_BYTES: usize = 64 * 1024;
/// The only `apiVersion` accepted (when given).
pub const API_VERSION: &str = "flagger.app/v1beta1";
/// The only `kind` accepted (when given).
pub const KIND: &str = "Canary";
/// The `apiVersion` of a Kubernetes workload a Flagger `targetRef` names.
pub const WORKLOAD_API_VERSION: &str = "apps/v1";
/// Most retries of one webhook call.
pub const MAX_WEBHOOK_RETRIES: u32 = 10;
/// Longest webhook timeout, in milliseconds.
pub const MAX_WEBHOOK_TIMEOUT_MS: i64 = 10 * 60_000;
/// Most entries in each list of the analysis (metrics, webhooks, alerts, match, stepWeights).
pub const MAX_LIST_LEN: usize = 64;

/// Flagger's annotation that turns config tracking off for one canary (`disabled`): a change
/// of config or secrets alone is then promoted without analysis
/// ([`super::AnalysisPolicy::config_tracking_disabled`]). Other annotations are accepted and
/// ignored.
pub const CONFIG_TRACKING_ANNOTATION: &str = "flagger.app/config-tracking";

const BUILTIN_SUCCESS_RATE: &str = "request-success-rate";
const BUILTIN_DURATION: &str = "request-duration";

/// Parses and validates a canary resource. Every problem is reported with its YAML path;
/// shape errors (unknown fields, wrong types, bad YAML) stop at the first and carry a line.
pub fn parse_canary(yaml: &str) -> Result<CanarySpec, CanaryErrors> {
    parse_canary_reporting(yaml).map(|(spec, _)| spec)
}

/// A field of a Flagger resource the hub accepts but does not act on (it only means
/// something on Kubernetes), with why.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IgnoredField {
    /// Its path, `spec.autoscalerRef`.
    pub path: &'static str,
    /// Why the hub ignores it.
    pub why: &'static str,
}

impl std::fmt::Display for IgnoredField {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: ignored ({})", self.path, self.why)
    }
}

/// [`parse_canary`], with the fields it accepted and ignores.
pub fn parse_canary_reporting(yaml: &str) -> Result<(CanarySpec, Vec<IgnoredField>), CanaryErrors> {
    parse_canary_with_policy(yaml).map(|(spec, _, ignored)| (spec, ignored))
}

/// [`parse_canary_reporting`], with the analysis policy of issue 20 (metric judges,
/// `inconclusiveLimit`, `onFailure`), which the stored [`CanarySpec`] does not hold.
pub fn parse_canary_with_policy(
    yaml: &str,
) -> Result<(CanarySpec, AnalysisPolicy, Vec<IgnoredField>), CanaryErrors> {
    if yaml.len() > MAX_CANARY_BYTES {
        return Err(CanaryErrors::single(CanaryError::new(
            "",
            format!(
                "resource is {} bytes, at most {MAX_CANARY_BYTES} bytes allowed",
                yaml.len()
            ),
        )));
    }
    let yaml = yaml_budget::check(Document::CanaryResource, yaml)
        .map_err(|e| CanaryErrors::single(e.to_yaml_error()))?;
    // Syntax and duplicate keys first: the struct parse reports some syntax errors as type
    // errors.
    let shape = yaml
        .shape()
        .map_err(|e| CanaryErrors::single(from_serde(&e)))?;
    match shape {
        crate::yaml_error::YamlShape::Mapping => {}
        crate::yaml_error::YamlShape::Null => {
            return Err(CanaryErrors::single(CanaryError::new(
                "",
                "resource is empty: expected a mapping with apiVersion, kind, metadata and spec",
            )))
        }
        _ => {
            return Err(CanaryErrors::single(CanaryError::new(
                "",
                "a canary resource must be a YAML mapping with apiVersion, kind, metadata and spec",
            )))
        }
    }
    let raw: RawCanary = yaml
        .parse()
        .map_err(|e| CanaryErrors::single(from_serde(&e)))?;
    let ignored = ignored_fields(&raw);
    let mut v = Validator {
        errors: Vec::new(),
        policy: AnalysisPolicy::default(),
    };
    let spec = v.canary(raw);
    match (spec, CanaryErrors::from_vec(v.errors)) {
        (Some(spec), None) => Ok((spec, v.policy, ignored)),
        (_, Some(errors)) => Err(errors),
        // Not reached: every path that yields no spec records an error first.
        (None, None) => Err(CanaryErrors::single(CanaryError::new(
            "",
            "invalid canary resource",
        ))),
    }
}

/// The Kubernetes-only fields `raw` sets, in document order.
fn ignored_fields(raw: &RawCanary) -> Vec<IgnoredField> {
    let Some(spec) = &raw.spec else {
        return Vec::new();
    };
    let service = spec.service.as_ref();
    let analysis = spec.analysis.as_ref();
    [
        (
            spec.autoscaler_ref.is_some(),
            "spec.autoscalerRef",
            "the hub runs no autoscaler: the entity's own settings scale its workloads",
        ),
        (
            spec.provider.is_some(),
            "spec.provider",
            "traffic is shifted by the agent's canary proxy, not a mesh or ingress",
        ),
        (
            service.is_some_and(|s| s.port_discovery.is_some()),
            "spec.service.portDiscovery",
            "the agent's proxy routes the one service port",
        ),
        (
            service.is_some_and(|s| s.headless.is_some()),
            "spec.service.headless",
            "no Kubernetes services are created",
        ),
        (
            service.is_some_and(|s| s.app_protocol.is_some()),
            "spec.service.appProtocol",
            "no Kubernetes services are created",
        ),
        (
            service.is_some_and(|s| s.traffic_distribution.is_some()),
            "spec.service.trafficDistribution",
            "no Kubernetes services are created",
        ),
        (
            analysis.is_some_and(|a| a.session_affinity.is_some()),
            "spec.analysis.sessionAffinity",
            "the agent's proxy routes by weight and header matches only",
        ),
    ]
    .into_iter()
    .filter(|(set, _, _)| *set)
    .map(|(_, path, why)| IgnoredField { path, why })
    .collect()
}

/// The reason of a name-validation error, without the field it names.
fn reason(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// Checks an address the leader calls (a webhook, an alert destination, a Prometheus server):
/// an absolute `http://` or `https://` URL with a host, without whitespace, and without `?`
/// or `#` — the hub appends paths and queries to some addresses, and a `#` or `?` in the
/// address would turn what it appends into a fragment or a query (SSRF to an arbitrary path).
/// The reason names the problem, not the field.
fn check_outbound_address(address: &str) -> Result<(), String> {
    if let Some(c) = address.chars().find(|c| matches!(c, '#' | '?')) {
        return Err(format!("'{c}' is not allowed in an outbound address"));
    }
    let parsed = url::Url::parse(address).ok().filter(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host_str().is_some_and(|h| !h.is_empty())
            && !address.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    match parsed {
        Some(_) => Ok(()),
        None => Err(format!(
            "{} is not an http:// or https:// URL with a host",
            quote(address)
        )),
    }
}

/// A YAML number as thousandths, if finite and not absurdly large.
fn to_milli(x: f64) -> Option<i64> {
    const LIMIT: f64 = 1e15;
    if !x.is_finite() || x.abs() > LIMIT {
        return None;
    }
    // In range by the check above, so the cast neither saturates nor wraps.
    Some((x * MILLI as f64).round() as i64)
}

struct Validator {
    errors: Vec<CanaryError>,
    /// The issue-20 settings read so far.
    policy: AnalysisPolicy,
}

/// Which strategy fields the resource gives (valid or not).
struct Given {
    max_weight: bool,
    step_weight: bool,
    step_weights: bool,
    step_weights_ok: bool,
    step_weight_promotion: bool,
    iterations: bool,
    match_rules: bool,
}

/// Strategy inputs, validated one by one before they are combined.
struct StrategyInputs {
    max_weight: Option<u8>,
    step_weight: Option<u8>,
    step_weights: Option<Vec<u8>>,
    iterations: Option<u32>,
    match_rules: Option<Vec<MatchRule>>,
    step_weight_promotion: Option<u8>,
}

impl Validator {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(CanaryError::new(path, message));
    }

    fn name(&mut self, path: &str, value: Option<String>) -> Option<String> {
        match value {
            None => {
                self.err(path, "required");
                None
            }
            Some(n) => match validate_name(path, &n) {
                Ok(()) => Some(n),
                Err(e) => {
                    self.err(path, reason(e));
                    None
                }
            },
        }
    }

    /// A percentage in `min..=100`.
    fn weight(&mut self, path: &str, value: Option<i64>, min: u8) -> Option<u8> {
        let v = value?;
        match u8::try_from(v) {
            Ok(w) if (min..=TOTAL_WEIGHT).contains(&w) => Some(w),
            _ => {
                self.err(path, format!("must be between {min} and 100, got {v}"));
                None
            }
        }
    }

    /// A count in `1..=u32::MAX`.
    fn positive(&mut self, path: &str, value: Option<i64>) -> Option<u32> {
        let v = value?;
        match u32::try_from(v) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                self.err(
                    path,
                    format!("must be a whole number of at least 1, got {v}"),
                );
                None
            }
        }
    }

    /// A duration of at least `min_ms`, or `default` when absent.
    fn duration(&mut self, path: &str, value: Option<&str>, default: i64, min_ms: i64) -> i64 {
        let Some(text) = value else {
            return default;
        };
        match parse_duration(text) {
            Ok(ms) if ms < min_ms => {
                self.err(
                    path,
                    format!(
                        "{} is below the minimum of {}",
                        quote(text),
                        format_duration(min_ms)
                    ),
                );
                default
            }
            Ok(ms) => ms,
            Err(e) => {
                self.err(path, e);
                default
            }
        }
    }

    fn url(&mut self, path: &str, value: Option<String>) -> Option<String> {
        match value {
            None => {
                self.err(path, "required");
                None
            }
            Some(u) => match check_outbound_address(&u) {
                Ok(()) => Some(u),
                Err(reason) => {
                    self.err(path, reason);
                    None
                }
            },
        }
    }

    fn canary(&mut self, raw: RawCanary) -> Option<CanarySpec> {
        if let Some(api) = &raw.api_version {
            if api != API_VERSION {
                self.err(
                    "apiVersion",
                    format!("must be {API_VERSION:?}, got {}", quote(api)),
                );
            }
        }
        if let Some(kind) = &raw.kind {
            if kind != KIND {
                self.err("kind", format!("must be {KIND:?}, got {}", quote(kind)));
            }
        }
        let metadata = match raw.metadata {
            Some(m) => self.metadata(m),
            None => {
                self.err("metadata", "required: a mapping with name (and namespace)");
                None
            }
        };
        let spec = match raw.spec {
            Some(s) => self.spec(s),
            None => {
                self.err(
                    "spec",
                    "required: a mapping with targetRef, service and analysis",
                );
                None
            }
        };
        let (name, namespace) = metadata?;
        let spec = spec?;
        Some(CanarySpec {
            name,
            namespace,
            ..spec
        })
    }

    fn metadata(&mut self, raw: RawMetadata) -> Option<(String, Option<String>)> {
        if let Some(value) = raw
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_TRACKING_ANNOTATION))
        {
            match value.as_str() {
                "disabled" => self.policy.config_tracking_disabled = true,
                "enabled" => {}
                other => self.err(
                    format!("metadata.annotations.{CONFIG_TRACKING_ANNOTATION}"),
                    format!("must be \"enabled\" or \"disabled\", got {}", quote(other)),
                ),
            }
        }
        let name = self.name("metadata.name", raw.name);
        let namespace = match raw.namespace {
            None => Some(None),
            Some(ns) => self.name("metadata.namespace", Some(ns)).map(Some),
        };
        Some((name?, namespace?))
    }

    /// The spec with an empty name: [`Self::canary`] fills in `metadata`.
    fn spec(&mut self, raw: RawSpec) -> Option<CanarySpec> {
        let target = match raw.target_ref {
            Some(t) => self.target(t),
            None => {
                self.err("spec.targetRef", "required: a mapping with kind and name");
                None
            }
        };
        let service = match raw.service {
            Some(s) => self.service(s, target.as_ref().map(|t| t.name.as_str())),
            None => {
                self.err("spec.service", "required: a mapping with port (and name)");
                None
            }
        };
        let progress_deadline_seconds = match raw.progress_deadline_seconds {
            None => Some(DEFAULT_PROGRESS_DEADLINE_SECONDS),
            Some(s) => {
                let max = MAX_DURATION_MS / 1_000;
                match u32::try_from(s) {
                    Ok(n) if n >= 1 && i64::from(n) <= max => Some(n),
                    _ => {
                        self.err(
                            "spec.progressDeadlineSeconds",
                            format!("must be between 1 and {max}, got {s}"),
                        );
                        None
                    }
                }
            }
        };
        let analysis = match raw.analysis {
            Some(a) => self.analysis(a),
            None => {
                self.err(
                    "spec.analysis",
                    "required: a mapping with interval, threshold and the strategy's fields",
                );
                None
            }
        };
        Some(CanarySpec {
            name: String::new(),
            namespace: None,
            target: target?,
            service: service?,
            progress_deadline_seconds: progress_deadline_seconds?,
            skip_analysis: raw.skip_analysis.unwrap_or(false),
            suspend: raw.suspend.unwrap_or(false),
            revert_on_deletion: raw.revert_on_deletion.unwrap_or(false),
            analysis: analysis?,
        })
    }

    /// `spec.targetRef`: a hub entity kind (`helmChart`, `terraformModule`), or a Kubernetes
    /// workload as Flagger users write it (`apiVersion: apps/v1`, `kind: Deployment` or
    /// `DaemonSet`), which names the helmChart entity that deploys it.
    fn target(&mut self, raw: RawTargetRef) -> Option<TargetRef> {
        let workload = matches!(raw.kind.as_deref(), Some("Deployment" | "DaemonSet"));
        let api_ok = match raw.api_version.as_deref() {
            None => true,
            Some(WORKLOAD_API_VERSION) if workload => true,
            Some(api) => {
                self.err(
                    "spec.targetRef.apiVersion",
                    format!(
                        "{} is not supported: only {WORKLOAD_API_VERSION:?}, with kind Deployment or DaemonSet",
                        quote(api)
                    ),
                );
                false
            }
        };
        let kind = match raw.kind.as_deref() {
            None | Some("helmChart" | "Deployment" | "DaemonSet") => Some(EntityKind::HelmChart),
            Some("terraformModule") => Some(EntityKind::TerraformModule),
            Some(other) => {
                self.err(
                    "spec.targetRef.kind",
                    format!(
                        "{} is not a hub entity kind: use helmChart or terraformModule (or Deployment or DaemonSet, for the helmChart entity of that name)",
                        quote(other)
                    ),
                );
                None
            }
        };
        if !api_ok {
            return None;
        }
        let name = self.name("spec.targetRef.name", raw.name);
        Some(TargetRef {
            kind: kind?,
            name: name?,
        })
    }

    fn service(&mut self, raw: RawService, target_name: Option<&str>) -> Option<ServiceSpec> {
        let port = match raw.port {
            None => {
                self.err("spec.service.port", "required");
                None
            }
            Some(p) => self.port("spec.service.port", p),
        };
        let target_port = match raw.target_port {
            None => Some(None),
            Some(p) => self.port("spec.service.targetPort", p).map(Some),
        };
        let name = match raw.name {
            Some(n) => self.name("spec.service.name", Some(n)),
            // Defaults to the target's name; a missing target is reported there.
            None => target_name.map(str::to_string),
        };
        let port_name = match raw.port_name {
            None => Some("http".to_string()),
            Some(n) => self.name("spec.service.portName", Some(n)),
        };
        Some(ServiceSpec {
            name: name?,
            port: port?,
            port_name: port_name?,
            target_port: target_port?,
        })
    }

    fn port(&mut self, path: &str, p: i64) -> Option<u16> {
        match u16::try_from(p) {
            Ok(port) if port >= 1 => Some(port),
            _ => {
                self.err(path, format!("must be a port between 1 and 65535, got {p}"));
                None
            }
        }
    }

    fn list_len<T>(&mut self, path: &str, list: &Option<Vec<T>>) {
        if let Some(l) = list {
            if l.len() > MAX_LIST_LEN {
                self.err(
                    path,
                    format!("{} entries, at most {MAX_LIST_LEN} allowed", l.len()),
                );
            }
        }
    }

    fn analysis(&mut self, raw: RawAnalysis) -> Option<Analysis> {
        const P: &str = "spec.analysis";
        self.list_len(&format!("{P}.stepWeights"), &raw.step_weights);
        self.list_len(&format!("{P}.match"), &raw.match_rules);
        self.list_len(&format!("{P}.metrics"), &raw.metrics);
        self.list_len(&format!("{P}.webhooks"), &raw.webhooks);
        self.list_len(&format!("{P}.alerts"), &raw.alerts);
        let errors_before = self.errors.len();

        let interval_ms = self.duration(
            &format!("{P}.interval"),
            raw.interval.as_deref(),
            DEFAULT_INTERVAL_MS,
            MIN_INTERVAL_MS,
        );
        let threshold = match raw.threshold {
            None => DEFAULT_THRESHOLD,
            Some(t) => self
                .positive(&format!("{P}.threshold"), Some(t))
                .unwrap_or(DEFAULT_THRESHOLD),
        };
        let primary_ready_threshold = self
            .weight(
                &format!("{P}.primaryReadyThreshold"),
                raw.primary_ready_threshold,
                0,
            )
            .unwrap_or(DEFAULT_READY_THRESHOLD);
        let canary_ready_threshold = self
            .weight(
                &format!("{P}.canaryReadyThreshold"),
                raw.canary_ready_threshold,
                0,
            )
            .unwrap_or(DEFAULT_READY_THRESHOLD);

        let given = Given {
            max_weight: raw.max_weight.is_some(),
            step_weight: raw.step_weight.is_some(),
            step_weights: raw.step_weights.is_some(),
            step_weights_ok: raw.step_weights_ok(),
            step_weight_promotion: raw.step_weight_promotion.is_some(),
            iterations: raw.iterations.is_some(),
            match_rules: raw.match_rules.is_some(),
        };
        let inputs = StrategyInputs {
            max_weight: self.weight(&format!("{P}.maxWeight"), raw.max_weight, 1),
            step_weight: self.weight(&format!("{P}.stepWeight"), raw.step_weight, 1),
            step_weights: raw.step_weights.as_ref().map(|l| self.step_weights(l)),
            iterations: self.positive(&format!("{P}.iterations"), raw.iterations),
            match_rules: raw.match_rules.map(|rules| self.match_rules(rules)),
            step_weight_promotion: self.weight(
                &format!("{P}.stepWeightPromotion"),
                raw.step_weight_promotion,
                1,
            ),
        };
        let strategy = self.strategy(&given, &inputs);

        let metrics = self.metrics(raw.metrics.unwrap_or_default(), strategy.as_ref());
        self.policy.inconclusive_limit =
            self.positive(&format!("{P}.inconclusiveLimit"), raw.inconclusive_limit);
        match raw.on_failure.as_deref().map(|o| (o, OnFailure::parse(o))) {
            None => {}
            Some((_, Some(o))) => self.policy.on_failure = o,
            Some((o, None)) => self.err(
                format!("{P}.onFailure"),
                format!("unknown policy {}: use rollback or hold", quote(o)),
            ),
        }
        let webhooks = self.webhooks(raw.webhooks.unwrap_or_default());
        let alerts = self.alerts(raw.alerts.unwrap_or_default());

        if self.errors.len() > errors_before {
            return None;
        }
        Some(Analysis {
            interval_ms,
            threshold,
            strategy: strategy?,
            step_weight_promotion: inputs.step_weight_promotion,
            primary_ready_threshold,
            canary_ready_threshold,
            metrics,
            webhooks,
            alerts,
        })
    }

    /// `stepWeights`: every entry 1–100 and greater than the one before. Bad entries are
    /// reported and left out of the returned list.
    fn step_weights(&mut self, raw: &[i64]) -> Vec<u8> {
        const P: &str = "spec.analysis.stepWeights";
        if raw.is_empty() {
            self.err(P, "must not be empty");
        }
        let mut out = Vec::with_capacity(raw.len());
        let mut prev: Option<i64> = None;
        for (i, &w) in raw.iter().enumerate() {
            let path = format!("{P}[{i}]");
            let Some(weight) = self.weight(&path, Some(w), 1) else {
                continue;
            };
            if let Some(p) = prev {
                if w <= p {
                    self.err(
                        path,
                        format!("must be greater than {p} (weights must rise)"),
                    );
                    continue;
                }
            }
            prev = Some(w);
            out.push(weight);
        }
        out
    }

    fn strategy(&mut self, given: &Given, s: &StrategyInputs) -> Option<Strategy> {
        const P: &str = "spec.analysis";
        let has_steps = given.step_weight || given.step_weights;
        let has_match = given.match_rules;
        let has_iterations = given.iterations;
        if !has_steps && !has_iterations {
            self.err(
                P,
                if has_match {
                    "match selects A/B testing, which needs iterations"
                } else {
                    "no strategy: set stepWeight or stepWeights (canary), iterations (blue/green), \
                     or match and iterations (A/B testing)"
                },
            );
            return None;
        }
        if has_steps && has_iterations {
            let which = if given.step_weight {
                "stepWeight"
            } else {
                "stepWeights"
            };
            self.err(
                format!("{P}.iterations"),
                format!(
                    "cannot be combined with {which}: iterations select blue/green (or A/B \
                     testing with match), step weights the canary strategy"
                ),
            );
            return None;
        }
        if has_match && has_steps {
            self.err(
                format!("{P}.match"),
                "A/B testing routes by match and iterations, not by stepWeight/stepWeights",
            );
            return None;
        }
        if has_iterations {
            if given.max_weight {
                self.err(
                    format!("{P}.maxWeight"),
                    "applies to the canary strategy (stepWeight/stepWeights) only",
                );
            }
            let iterations = s.iterations?;
            if has_match {
                if given.step_weight_promotion {
                    self.err(
                        format!("{P}.stepWeightPromotion"),
                        "A/B testing promotes by switching the match route; stepWeightPromotion \
                         applies to the canary and blue/green strategies",
                    );
                }
                let match_rules = s.match_rules.clone()?;
                return Some(Strategy::AbTesting {
                    iterations,
                    match_rules,
                });
            }
            return Some(Strategy::BlueGreen { iterations });
        }
        // Canary: stepWeight wins when both are given (as in Flagger).
        let steps = match (s.step_weight, &s.step_weights, given.step_weight) {
            (Some(step), _, _) => StepWeights::Fixed(step),
            (None, Some(list), false) if !list.is_empty() => StepWeights::List(list.clone()),
            // Reported already (a bad stepWeight or list).
            _ => return None,
        };
        let last_listed = s.step_weights.as_ref().and_then(|l| l.last().copied());
        let max_weight = match (s.max_weight, last_listed, given.max_weight) {
            (Some(max), Some(last), _) if max != last && given.step_weights_ok => {
                self.err(
                    format!("{P}.maxWeight"),
                    format!(
                        "must equal the last stepWeights entry ({last}) when stepWeights is \
                         given, got {max}"
                    ),
                );
                return None;
            }
            (Some(max), _, _) => max,
            (None, Some(last), false) => last,
            (None, None, false) => TOTAL_WEIGHT,
            // A bad maxWeight, reported already.
            (None, _, true) => return None,
        };
        Some(Strategy::Canary { steps, max_weight })
    }

    fn match_rules(&mut self, rules: Vec<RawMatch>) -> Vec<MatchRule> {
        const P: &str = "spec.analysis.match";
        if rules.is_empty() {
            self.err(P, "must not be empty");
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, rule) in rules.into_iter().enumerate() {
            let path = format!("{P}[{i}].headers");
            let Some(headers) = rule.headers else {
                self.err(path, "required: header name → {exact|prefix|regex: value}");
                continue;
            };
            if headers.is_empty() {
                self.err(path, "must name at least one header");
                continue;
            }
            let mut parsed = BTreeMap::new();
            for (name, m) in headers {
                let hpath = format!("{path}.{name}");
                if name.trim().is_empty() {
                    self.err(hpath, "header name must not be empty");
                    continue;
                }
                let given = [
                    m.exact.map(HeaderMatch::Exact),
                    m.prefix.map(HeaderMatch::Prefix),
                    m.regex.map(HeaderMatch::Regex),
                ];
                let mut given: Vec<HeaderMatch> = given.into_iter().flatten().collect();
                if given.len() != 1 {
                    self.err(hpath, "needs exactly one of exact, prefix or regex");
                    continue;
                }
                let Some(m) = given.pop() else { continue };
                if let HeaderMatch::Regex(re) = &m {
                    if let Err(e) = Regex::new(re) {
                        self.err(
                            format!("{hpath}.regex"),
                            format!("invalid regular expression: {e}"),
                        );
                        continue;
                    }
                }
                parsed.insert(name, m);
            }
            out.push(MatchRule { headers: parsed });
        }
        out
    }

    fn metrics(&mut self, raw: Vec<RawMetric>, strategy: Option<&Strategy>) -> Vec<Metric> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, mut m) in raw.into_iter().enumerate() {
            let path = format!("spec.analysis.metrics[{i}]");
            let raw_judge = m.judge.take();
            let judged = raw_judge.is_some();
            let Some(metric) = self.metric(&path, m, judged, &mut seen) else {
                continue;
            };
            if let Some(raw_judge) = raw_judge {
                let jpath = format!("{path}.judge");
                if let Some(judge) = self.judge(&jpath, raw_judge, &metric.source, strategy) {
                    self.policy.judges.insert(metric.name.clone(), judge);
                }
            }
            out.push(metric);
        }
        out
    }

    /// `metrics[i].judge` of a metric measured from `source`, under `strategy`.
    fn judge(
        &mut self,
        path: &str,
        raw: RawJudge,
        source: &MetricSource,
        strategy: Option<&Strategy>,
    ) -> Option<Judge> {
        let errors_before = self.errors.len();
        if matches!(source, MetricSource::Prometheus { .. }) {
            self.err(
                path,
                format!(
                    "a judge compares per-request samples, which only the agent's proxy \
                     measures: use it on {BUILTIN_SUCCESS_RATE} or {BUILTIN_DURATION}"
                ),
            );
        }
        match raw.kind.as_deref() {
            Some("mann-whitney") => {}
            None => self.err(format!("{path}.type"), "required: mann-whitney"),
            Some(other) => self.err(
                format!("{path}.type"),
                format!("unknown judge {}: use mann-whitney", quote(other)),
            ),
        }
        let baseline = match raw.baseline.as_deref() {
            None => Baseline::Primary,
            Some(b) => Baseline::parse(b).unwrap_or_else(|| {
                self.err(
                    format!("{path}.baseline"),
                    format!("unknown baseline {}: use primary or fresh", quote(b)),
                );
                Baseline::Primary
            }),
        };
        if baseline == Baseline::Fresh {
            match strategy {
                Some(Strategy::Canary { max_weight, .. }) if *max_weight > TOTAL_WEIGHT / 2 => self
                    .err(
                        format!("{path}.baseline"),
                        format!(
                            "a fresh baseline takes as much traffic as the canary, so \
                             spec.analysis.maxWeight must be at most 50 (it is {max_weight})"
                        ),
                    ),
                Some(Strategy::AbTesting { .. } | Strategy::BlueGreen { .. }) => self.err(
                    format!("{path}.baseline"),
                    "a fresh baseline runs at the canary's weight: only the canary strategy \
                     (stepWeight or stepWeights) has one",
                ),
                _ => {}
            }
        }
        let direction = self.judge_direction(path, raw.direction.as_deref());
        let effect_size_milli = self.judge_effect_size(path, raw.effect_size);
        let confidence_milli = self.judge_confidence(path, raw.confidence);
        (self.errors.len() == errors_before).then_some(Judge {
            baseline,
            direction,
            effect_size_milli,
            confidence_milli,
        })
    }

    /// `judge.direction`: which way a canary value is bad (required).
    fn judge_direction(&mut self, path: &str, raw: Option<&str>) -> Direction {
        match raw {
            None => {
                self.err(
                    format!("{path}.direction"),
                    "required: increase (a higher canary value is bad), decrease or either",
                );
                Direction::Either
            }
            Some(d) => Direction::parse(d).unwrap_or_else(|| {
                self.err(
                    format!("{path}.direction"),
                    format!(
                        "unknown direction {}: use increase, decrease or either",
                        quote(d)
                    ),
                );
                Direction::Either
            }),
        }
    }

    /// `judge.effectSize`: the smallest bad Cliff's delta that fails, in thousandths (required).
    fn judge_effect_size(&mut self, path: &str, raw: Option<f64>) -> u32 {
        match raw {
            None => {
                self.err(
                    format!("{path}.effectSize"),
                    "required: the smallest bad Cliff's delta that fails, in (0, 1]",
                );
                0
            }
            Some(x) => match to_milli(x) {
                Some(m) if (1..=MILLI).contains(&m) => m as u32,
                _ => {
                    self.err(
                        format!("{path}.effectSize"),
                        format!("{x} is out of range: a Cliff's delta in (0, 1], at least 0.001"),
                    );
                    0
                }
            },
        }
    }

    /// `judge.confidence` in thousandths, defaulted when absent.
    fn judge_confidence(&mut self, path: &str, raw: Option<f64>) -> u32 {
        match raw {
            None => DEFAULT_CONFIDENCE_MILLI,
            Some(x) => match to_milli(x) {
                Some(m)
                    if (i64::from(MIN_CONFIDENCE_MILLI)..=i64::from(MAX_CONFIDENCE_MILLI))
                        .contains(&m) =>
                {
                    m as u32
                }
                _ => {
                    self.err(
                        format!("{path}.confidence"),
                        format!("{x} is out of range: 0.5 to 0.999"),
                    );
                    DEFAULT_CONFIDENCE_MILLI
                }
            },
        }
    }

    // Long: every field of a metric checked in turn, each problem reported with its path.
    fn metric(
        &mut self,
        path: &str,
        m: RawMetric,
        judged: bool,
        seen: &mut BTreeSet<String>,
    ) -> Option<Metric> {
        let name = match m.name {
            Some(n) if !n.trim().is_empty() => {
                if !seen.insert(n.clone()) {
                    self.err(
                        format!("{path}.name"),
                        format!("{} is listed twice", quote(&n)),
                    );
                }
                Some(n)
            }
            _ => {
                self.err(format!("{path}.name"), "required");
                None
            }
        };
        let range = match m.threshold_range {
            // A judged metric needs no range: the judge decides.
            None if judged => Some(ThresholdRange {
                min: None,
                max: None,
            }),
            None => {
                self.err(
                    format!("{path}.thresholdRange"),
                    "required: {min: ..} and/or {max: ..}",
                );
                None
            }
            Some(r) => {
                let rpath = format!("{path}.thresholdRange");
                let bound = |v: &mut Self, key: &str, x: Option<f64>| match x {
                    None => Some(None),
                    Some(x) => match to_milli(x) {
                        Some(milli) => Some(Some(milli)),
                        None => {
                            v.err(
                                format!("{rpath}.{key}"),
                                format!("{x} is not a usable number"),
                            );
                            None
                        }
                    },
                };
                let min = bound(self, "min", r.min);
                let max = bound(self, "max", r.max);
                match (min, max) {
                    (Some(None), Some(None)) => {
                        self.err(rpath, "needs min, max or both");
                        None
                    }
                    (Some(Some(lo)), Some(Some(hi))) if lo > hi => {
                        self.err(
                            format!("{rpath}.min"),
                            format!(
                                "must not be greater than max ({} > {})",
                                r.min.unwrap_or_default(),
                                r.max.unwrap_or_default()
                            ),
                        );
                        None
                    }
                    (Some(min), Some(max)) => Some(ThresholdRange { min, max }),
                    _ => None,
                }
            }
        };
        let interval_ms = self.duration(
            &format!("{path}.interval"),
            m.interval.as_deref(),
            DEFAULT_METRIC_INTERVAL_MS,
            MIN_INTERVAL_MS,
        );
        let source = match name.as_deref() {
            Some(n @ (BUILTIN_SUCCESS_RATE | BUILTIN_DURATION)) => {
                if m.provider.is_some() || m.query.is_some() {
                    self.err(
                        format!("{path}.query"),
                        format!(
                            "{n} is built in and measured by the agent; give a custom metric \
                             another name"
                        ),
                    );
                    None
                } else if n == BUILTIN_SUCCESS_RATE {
                    Some(MetricSource::RequestSuccessRate)
                } else {
                    Some(MetricSource::RequestDuration)
                }
            }
            Some(n) => match (m.provider, m.query) {
                (None, None) => {
                    self.err(
                        format!("{path}.name"),
                        format!(
                            "{} is not a built-in metric ({BUILTIN_SUCCESS_RATE}, \
                             {BUILTIN_DURATION}); a custom metric needs provider and query",
                            quote(n)
                        ),
                    );
                    None
                }
                (None, Some(_)) => {
                    self.err(format!("{path}.provider"), "required with query");
                    None
                }
                (Some(_), None) => {
                    self.err(format!("{path}.query"), "required with provider");
                    None
                }
                (Some(p), Some(q)) => {
                    let mut ok = true;
                    match p.kind.as_deref() {
                        Some("prometheus") => {}
                        None => {
                            self.err(format!("{path}.provider.type"), "required: prometheus");
                            ok = false;
                        }
                        Some(other) => {
                            self.err(
                                format!("{path}.provider.type"),
                                format!("unknown provider {}: use prometheus", quote(other)),
                            );
                            ok = false;
                        }
                    }
                    let address = self.url(&format!("{path}.provider.address"), p.address);
                    if q.trim().is_empty() {
                        self.err(format!("{path}.query"), "must not be empty");
                        ok = false;
                    }
                    match (ok, address) {
                        (true, Some(address)) => {
                            Some(MetricSource::Prometheus { address, query: q })
                        }
                        _ => None,
                    }
                }
            },
            None => None,
        };
        Some(Metric {
            name: name?,
            interval_ms,
            range: range?,
            source: source?,
        })
    }

    fn webhooks(&mut self, raw: Vec<RawWebhook>) -> Vec<Webhook> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, w) in raw.into_iter().enumerate() {
            let path = format!("spec.analysis.webhooks[{i}]");
            let name = match w.name {
                Some(n) if !n.trim().is_empty() => {
                    if !seen.insert(n.clone()) {
                        self.err(
                            format!("{path}.name"),
                            format!("{} is listed twice", quote(&n)),
                        );
                    }
                    Some(n)
                }
                _ => {
                    self.err(format!("{path}.name"), "required");
                    None
                }
            };
            let kind = match w.kind.as_deref() {
                None => Some(WebhookType::Rollout),
                Some(t) => match WebhookType::parse(t) {
                    Some(k) => Some(k),
                    None => {
                        let all: Vec<&str> = WebhookType::ALL.iter().map(|t| t.as_str()).collect();
                        self.err(
                            format!("{path}.type"),
                            format!(
                                "unknown webhook type {}: use one of {}",
                                quote(t),
                                all.join(", ")
                            ),
                        );
                        None
                    }
                },
            };
            let url = self.url(&format!("{path}.url"), w.url);
            let timeout_ms = self.duration(
                &format!("{path}.timeout"),
                w.timeout.as_deref(),
                DEFAULT_WEBHOOK_TIMEOUT_MS,
                1,
            );
            if timeout_ms > MAX_WEBHOOK_TIMEOUT_MS {
                self.err(
                    format!("{path}.timeout"),
                    format!(
                        "must be at most {}",
                        format_duration(MAX_WEBHOOK_TIMEOUT_MS)
                    ),
                );
            }
            let retries = match w.retries {
                None => Some(0),
                Some(r) => match u32::try_from(r) {
                    Ok(n) if n <= MAX_WEBHOOK_RETRIES => Some(n),
                    _ => {
                        self.err(
                            format!("{path}.retries"),
                            format!("must be between 0 and {MAX_WEBHOOK_RETRIES}, got {r}"),
                        );
                        None
                    }
                },
            };
            if let (Some(name), Some(kind), Some(url), Some(retries)) = (name, kind, url, retries) {
                out.push(Webhook {
                    name,
                    kind,
                    url,
                    timeout_ms,
                    retries,
                    metadata: w.metadata.unwrap_or_default(),
                    mute_alert: w.mute_alert.unwrap_or(false),
                });
            }
        }
        out
    }

    fn alerts(&mut self, raw: Vec<RawAlert>) -> Vec<AlertSpec> {
        let mut out = Vec::with_capacity(raw.len());
        for (i, a) in raw.into_iter().enumerate() {
            let path = format!("spec.analysis.alerts[{i}]");
            let name = match a.name {
                Some(n) if !n.trim().is_empty() => Some(n),
                _ => {
                    self.err(format!("{path}.name"), "required");
                    None
                }
            };
            let severity = match a.severity.as_deref() {
                None => Some(Severity::Info),
                Some(s) => match Severity::parse(s) {
                    Some(s) => Some(s),
                    None => {
                        self.err(
                            format!("{path}.severity"),
                            format!("{} is not a severity: use info, warn or error", quote(s)),
                        );
                        None
                    }
                },
            };
            let target = match (a.provider_ref, a.url) {
                (Some(_), Some(_)) => {
                    self.err(path.clone(), "give providerRef or url, not both");
                    None
                }
                (None, None) => {
                    self.err(path.clone(), "needs providerRef or url");
                    None
                }
                (None, Some(u)) => self
                    .url(&format!("{path}.url"), Some(u))
                    .map(AlertTarget::Url),
                (Some(p), None) => {
                    let name = self.name(&format!("{path}.providerRef.name"), p.name);
                    let namespace = match p.namespace {
                        None => Some(None),
                        Some(ns) => self
                            .name(&format!("{path}.providerRef.namespace"), Some(ns))
                            .map(Some),
                    };
                    match (name, namespace) {
                        (Some(name), Some(namespace)) => {
                            Some(AlertTarget::Provider { name, namespace })
                        }
                        _ => None,
                    }
                }
            };
            if let (Some(name), Some(severity), Some(target)) = (name, severity, target) {
                out.push(AlertSpec {
                    name,
                    severity,
                    target,
                });
            }
        }
        out
    }
}

impl RawAnalysis {
    /// Whether `stepWeights` is given and every entry is in range and rising, so that its
    /// last entry can be compared with `maxWeight`.
    fn step_weights_ok(&self) -> bool {
        self.step_weights.as_ref().is_some_and(|l| {
            !l.is_empty()
                && l.iter().all(|w| (1..=i64::from(TOTAL_WEIGHT)).contains(w))
                && l.windows(2).all(|p| p[0] < p[1])
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = "\
metadata: {name: demo}
spec:
  targetRef: {name: demo}
  service: {port: 9898}
  analysis: {stepWeight: 10}
";

    #[test]
    fn minimal_resource_gets_the_defaults_of_k1() {
        let spec = parse_canary(MINIMAL).unwrap();
        assert_eq!(spec.name, "demo");
        assert_eq!(spec.namespace, None);
        assert_eq!(spec.target.kind, EntityKind::HelmChart);
        assert_eq!(spec.service.name, "demo");
        assert_eq!(spec.service.port_name, "http");
        assert_eq!(spec.progress_deadline_seconds, 600);
        let a = &spec.analysis;
        assert_eq!(a.interval_ms, 60_000);
        assert_eq!(a.threshold, 1);
        assert_eq!(
            (a.primary_ready_threshold, a.canary_ready_threshold),
            (100, 100)
        );
        assert_eq!(
            a.strategy,
            Strategy::Canary {
                steps: StepWeights::Fixed(10),
                max_weight: 100
            }
        );
        assert!(!spec.skip_analysis && !spec.suspend && !spec.revert_on_deletion);
    }

    #[test]
    fn step_weight_wins_over_step_weights() {
        let yaml = MINIMAL.replace("{stepWeight: 10}", "{stepWeight: 10, stepWeights: [5, 40]}");
        let spec = parse_canary(&yaml).unwrap();
        assert_eq!(
            spec.analysis.strategy,
            Strategy::Canary {
                steps: StepWeights::Fixed(10),
                max_weight: 40
            }
        );
    }

    #[test]
    fn every_problem_is_reported() {
        let yaml = "\
metadata: {name: Demo}
spec:
  targetRef: {kind: StatefulSet}
  service: {port: 0}
  analysis:
    interval: 10ms
    stepWeights: [10, 150, 5]
    maxWeight: 0
";
        let errs = parse_canary(yaml).unwrap_err();
        let paths: Vec<&str> = errs.iter().map(|e| e.path.as_str()).collect();
        for want in [
            "metadata.name",
            "spec.targetRef.kind",
            "spec.targetRef.name",
            "spec.service.port",
            "spec.analysis.interval",
            "spec.analysis.maxWeight",
            "spec.analysis.stepWeights[1]",
            "spec.analysis.stepWeights[2]",
        ] {
            assert!(paths.contains(&want), "{want} missing from\n{errs}");
        }
    }

    #[test]
    fn outbound_addresses_need_scheme_and_host_and_no_query_or_fragment() {
        for good in [
            "http://loadtester.test/",
            "https://a:8080/x",
            "http://127.0.0.1:9090",
            "https://u:p@prometheus.example/prefix/",
            "http://[::1]:80/hook",
        ] {
            assert_eq!(check_outbound_address(good), Ok(()), "{good}");
        }
        for (bad, why) in [
            ("ftp://a", "is not an http"),
            ("http://", "is not an http"),
            ("http:// a", "is not an http"),
            ("http://a/\tb", "is not an http"),
            ("http://a:99999/", "is not an http"),
            ("loadtester/", "is not an http"),
            (
                "https://a:8080/x?y",
                "'?' is not allowed in an outbound address",
            ),
            ("http://127.0.0.1:1/internal/secret#", "'#' is not allowed"),
            ("http://p/#/x?y", "'#' is not allowed"),
        ] {
            let err = check_outbound_address(bad).unwrap_err();
            assert!(err.contains(why), "{bad}: {err}");
        }
    }

    #[test]
    fn a_query_or_fragment_in_an_outbound_address_is_refused_naming_the_field() {
        let yaml = "apiVersion: flagger.app/v1beta1
kind: Canary
metadata: {name: web, namespace: prod}
spec:
  targetRef: {kind: helmChart, name: web}
  service: {port: 8080}
  analysis:
    metrics:
      - name: budget
        provider: {type: prometheus, address: 'http://127.0.0.1:9/internal/secret#'}
        query: up
        thresholdRange: {min: 1}
    webhooks:
      - {name: ok, url: 'http://hooks.example/ok'}
      - {name: gate, url: 'http://hooks.example/gate?x=1'}
    alerts:
      - {name: on-call, url: 'http://alerts.example/#'}
";
        let errs = parse_canary(yaml).unwrap_err().to_string();
        for want in [
            "spec.analysis.metrics[0].provider.address: '#' is not allowed in an outbound address",
            "spec.analysis.webhooks[1].url: '?' is not allowed in an outbound address",
            "spec.analysis.alerts[0].url: '#' is not allowed in an outbound address",
        ] {
            assert!(errs.contains(want), "{want} missing from\n{errs}");
        }
        assert!(!errs.contains("webhooks[0]"), "{errs}");
    }

    #[test]
    fn thresholds_become_thousandths() {
        assert_eq!(to_milli(99.0), Some(99_000));
        assert_eq!(to_milli(99.5), Some(99_500));
        assert_eq!(to_milli(0.0005), Some(1));
        assert_eq!(to_milli(f64::NAN), None);
        assert_eq!(to_milli(1e300), None);
    }
}

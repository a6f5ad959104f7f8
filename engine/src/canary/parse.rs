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
use super::ignored::{ignored_fields, match_rule_is_left_out, IgnoredField};
use super::judge::{
    AnalysisPolicy, Baseline, Direction, Judge, OnFailure, DEFAULT_CONFIDENCE_MILLI,
    MAX_CONFIDENCE_MILLI, MIN_CONFIDENCE_MILLI,
};
use super::provider::supported_provider;
use super::raw::{
    RawAlert, RawAnalysis, RawCanary, RawHeaderMatch, RawJudge, RawMatch, RawMetadata, RawMetric,
    RawPort, RawProvider, RawRange, RawService, RawSpec, RawTargetRef, RawWebhook,
};
use super::spec::{
    AlertSpec, AlertTarget, Analysis, CanarySpec, HeaderMatch, MatchRule, Metric, MetricSource,
    ServiceSpec, Severity, StepWeights, Strategy, TargetRef, ThresholdRange, Webhook, WebhookType,
    DEFAULT_INTERVAL_MS, DEFAULT_METRIC_INTERVAL_MS, DEFAULT_PROGRESS_DEADLINE_SECONDS,
    DEFAULT_READY_THRESHOLD, DEFAULT_THRESHOLD, DEFAULT_WEBHOOK_TIMEOUT_MS, MILLI, MIN_INTERVAL_MS,
    TOTAL_WEIGHT,
};
use super::templated::{ModelRefs, ParsedCanary, TemplatedMetric};
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
/// The `apiVersion` of a Kubernetes workload a Flagger `targetRef` usually names (not checked:
/// Flagger reads the kind and name only).
pub const WORKLOAD_API_VERSION: &str = "apps/v1";
/// The `targetRef.kind` of a Knative service (`serving.knative.dev/v1`).
const KNATIVE_SERVICE_KIND: &str = "Service";
/// The port a Knative service is reached on, used when a canary of one gives no
/// `spec.service` (Flagger's Knative canaries give none).
const KNATIVE_SERVICE_PORT: u16 = 80;
/// `spec.service.portName` when none is given.
const DEFAULT_PORT_NAME: &str = "http";
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

/// [`parse_canary`], with the fields it accepted and ignores.
pub fn parse_canary_reporting(yaml: &str) -> Result<(CanarySpec, Vec<IgnoredField>), CanaryErrors> {
    parse_canary_with_policy(yaml).map(|(spec, _, ignored)| (spec, ignored))
}

/// [`parse_canary_reporting`], with the analysis policy of issue 20 (metric judges,
/// `inconclusiveLimit`, `onFailure`), which the stored [`CanarySpec`] does not hold.
///
/// A metric that references a MetricTemplate is checked and left out of the spec: only
/// [`parse_canary_templated`] and [`ParsedCanary::resolve`], against the hub's templates, give
/// the complete spec a canary runs with.
pub fn parse_canary_with_policy(
    yaml: &str,
) -> Result<(CanarySpec, AnalysisPolicy, Vec<IgnoredField>), CanaryErrors> {
    parse_canary_templated(yaml).map(|p| (p.spec, p.policy, p.ignored))
}

/// Parses and validates a canary resource, setting its metrics with `templateRef` aside
/// ([`ParsedCanary::templated`]) for [`ParsedCanary::resolve`].
pub fn parse_canary_templated(yaml: &str) -> Result<ParsedCanary, CanaryErrors> {
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
    let refs = model_refs(&raw);
    let mut v = Validator {
        errors: Vec::new(),
        policy: AnalysisPolicy::default(),
        metrics_server: raw.spec.as_ref().and_then(|s| s.metrics_server.clone()),
        templated: Vec::new(),
    };
    let spec = v.canary(raw);
    match (spec, CanaryErrors::from_vec(v.errors)) {
        (Some(spec), None) => Ok(ParsedCanary {
            spec,
            policy: v.policy,
            ignored,
            templated: v.templated,
            refs,
        }),
        (_, Some(errors)) => Err(errors),
        // Not reached: every path that yields no spec records an error first.
        (None, None) => Err(CanaryErrors::single(CanaryError::new(
            "",
            "invalid canary resource",
        ))),
    }
}

/// The names a MetricTemplate's model takes from the resource besides the spec.
fn model_refs(raw: &RawCanary) -> ModelRefs {
    let spec = raw.spec.as_ref();
    ModelRefs {
        ingress: spec
            .and_then(|s| s.ingress_ref.as_ref())
            .and_then(|r| r.name.clone()),
        route: spec
            .and_then(|s| s.route_ref.as_ref())
            .and_then(|r| r.name.clone()),
        knative: spec
            .and_then(|s| s.target_ref.as_ref())
            .is_some_and(|t| t.kind.as_deref() == Some(KNATIVE_SERVICE_KIND)),
    }
}

/// The reason of a name-validation error, without the field it names.
fn reason(e: CommandError) -> String {
    match e {
        CommandError::InvalidField { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// Why an outbound address is refused ([`check_outbound_address`]). The message names the
/// problem, not the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum OutboundAddressError {
    /// A `?` or `#`.
    #[error("'{0}' is not allowed in an outbound address")]
    QueryOrFragment(char),
    /// Not an absolute `http(s)://` URL with a host (the address, quoted).
    #[error("{0} is not an http:// or https:// URL with a host")]
    NotHttpUrl(String),
}

/// Checks an address the leader calls (a webhook, an alert destination, a Prometheus server):
/// an absolute `http://` or `https://` URL with a host, without whitespace, and without `?`
/// or `#` — the hub appends paths and queries to some addresses, and a `#` or `?` in the
/// address would turn what it appends into a fragment or a query (SSRF to an arbitrary path).
/// The reason names the problem, not the field.
pub(super) fn check_outbound_address(address: &str) -> Result<(), OutboundAddressError> {
    if let Some(c) = address.chars().find(|c| matches!(c, '#' | '?')) {
        return Err(OutboundAddressError::QueryOrFragment(c));
    }
    let parsed = url::Url::parse(address).ok().filter(|u| {
        matches!(u.scheme(), "http" | "https")
            && u.host_str().is_some_and(|h| !h.is_empty())
            && !address.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    match parsed {
        Some(_) => Ok(()),
        None => Err(OutboundAddressError::NotHttpUrl(quote(address))),
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
    /// `spec.metricsServer`: the Prometheus address of a metric given as a query without a
    /// provider (as Flagger reads it).
    metrics_server: Option<String>,
    /// The metrics with `templateRef`, checked and set aside.
    templated: Vec<TemplatedMetric>,
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
                self.err(path, e.to_string());
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
                    self.err(path, reason.to_string());
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
        let knative = raw
            .target_ref
            .as_ref()
            .is_some_and(|t| t.kind.as_deref() == Some(KNATIVE_SERVICE_KIND));
        let target = match raw.target_ref {
            Some(t) => self.target(t),
            None => {
                self.err("spec.targetRef", "required: a mapping with kind and name");
                None
            }
        };
        let service = match raw.service {
            Some(s) => self.service(s, target.as_ref().map(|t| t.name.as_str())),
            // A Knative service is reached on port 80; Flagger's Knative canaries give no
            // spec.service.
            None if knative => target.as_ref().map(|t| ServiceSpec {
                name: t.name.clone(),
                port: KNATIVE_SERVICE_PORT,
                port_name: DEFAULT_PORT_NAME.to_string(),
                target_port: None,
            }),
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
    /// workload as Flagger users write it (`kind: Deployment`, `DaemonSet`, or a Knative
    /// `Service`), which names the helmChart entity that deploys it. A workload's `apiVersion`
    /// is not checked, as Flagger does not check it; a hub kind takes none.
    fn target(&mut self, raw: RawTargetRef) -> Option<TargetRef> {
        let kind = match raw.kind.as_deref() {
            None | Some("helmChart") => Some((EntityKind::HelmChart, false)),
            Some("terraformModule") => Some((EntityKind::TerraformModule, false)),
            Some("Deployment" | "DaemonSet" | KNATIVE_SERVICE_KIND) => {
                Some((EntityKind::HelmChart, true))
            }
            Some(other) => {
                self.err(
                    "spec.targetRef.kind",
                    format!(
                        "{} is not a hub entity kind: use helmChart or terraformModule (or \
                         Deployment, DaemonSet or a Knative Service, for the helmChart entity of \
                         that name)",
                        quote(other)
                    ),
                );
                None
            }
        };
        if let (Some(api), Some((_, false))) = (raw.api_version.as_deref(), kind) {
            self.err(
                "spec.targetRef.apiVersion",
                format!(
                    "{} is not supported with a hub entity kind: give apiVersion only with a \
                     Kubernetes kind (Deployment, DaemonSet, Service)",
                    quote(api)
                ),
            );
            return None;
        }
        let name = self.name("spec.targetRef.name", raw.name);
        Some(TargetRef {
            kind: kind?.0,
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
        // A named container port is Kubernetes' to resolve: the hub does not use targetPort
        // (it is reported as ignored), and stores a number only.
        let target_port = match raw.target_port {
            None | Some(RawPort::Name(_)) => Some(None),
            Some(RawPort::Number(p)) => self.port("spec.service.targetPort", p).map(Some),
        };
        let name = match raw.name {
            Some(n) => self.name("spec.service.name", Some(n)),
            // Defaults to the target's name; a missing target is reported there.
            None => target_name.map(str::to_string),
        };
        let port_name = match raw.port_name {
            None => Some(DEFAULT_PORT_NAME.to_string()),
            Some(n) if n.trim().is_empty() => {
                self.err("spec.service.portName", "must not be empty");
                None
            }
            Some(n) => Some(n),
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
        // As in Flagger, the last stepWeights entry is the highest weight whenever stepWeights
        // is given; a maxWeight that differs is reported as ignored.
        let max_weight = match (s.max_weight, last_listed, given.max_weight) {
            (_, Some(last), _) if given.step_weights_ok => last,
            (Some(max), _, _) => max,
            (None, Some(last), false) => last,
            (None, None, false) => TOTAL_WEIGHT,
            // A bad maxWeight, reported already.
            (None, _, true) => return None,
        };
        Some(Strategy::Canary { steps, max_weight })
    }

    /// `analysis.match`. A rule with a condition the agent's proxy does not evaluate
    /// (`queryParams`, `sourceLabels`) is checked and left out (reported as ignored): it
    /// sends no request to the canary, never more than it selects.
    fn match_rules(&mut self, rules: Vec<RawMatch>) -> Vec<MatchRule> {
        const P: &str = "spec.analysis.match";
        if rules.is_empty() {
            self.err(P, "must not be empty");
        }
        let mut out = Vec::with_capacity(rules.len());
        for (i, rule) in rules.into_iter().enumerate() {
            let left_out = match_rule_is_left_out(&rule);
            let path = format!("{P}[{i}]");
            if rule.headers.is_none() && rule.query_params.is_none() && rule.source_labels.is_none()
            {
                self.err(
                    path,
                    "needs a condition (headers, queryParams or sourceLabels): a rule without \
                     one would send every request to the canary",
                );
                continue;
            }
            if let Some(params) = rule.query_params {
                self.conditions(&format!("{path}.queryParams"), params);
            }
            let headers = match rule.headers {
                Some(h) => self.conditions(&format!("{path}.headers"), h),
                None => BTreeMap::new(),
            };
            if !left_out {
                out.push(MatchRule { headers });
            }
        }
        out
    }

    /// `headers` or `queryParams` of a match rule: name → exactly one of `exact`, `prefix`,
    /// `suffix` or `regex`. A suffix is kept as the regular expression that matches it (the
    /// proxy matches a whole value against a regex).
    fn conditions(
        &mut self,
        path: &str,
        conditions: BTreeMap<String, RawHeaderMatch>,
    ) -> BTreeMap<String, HeaderMatch> {
        if conditions.is_empty() {
            self.err(path, "must name at least one condition");
        }
        let mut parsed = BTreeMap::new();
        for (name, m) in conditions {
            let hpath = format!("{path}.{name}");
            if name.trim().is_empty() {
                self.err(hpath, "name must not be empty");
                continue;
            }
            let given = [
                m.exact.map(HeaderMatch::Exact),
                m.prefix.map(HeaderMatch::Prefix),
                m.suffix
                    .map(|s| HeaderMatch::Regex(format!(".*{}", regex::escape(&s)))),
                m.regex.map(HeaderMatch::Regex),
            ];
            let mut given: Vec<HeaderMatch> = given.into_iter().flatten().collect();
            if given.len() != 1 {
                self.err(hpath, "needs exactly one of exact, prefix, suffix or regex");
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
        parsed
    }

    fn metrics(&mut self, raw: Vec<RawMetric>, strategy: Option<&Strategy>) -> Vec<Metric> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::with_capacity(raw.len());
        for (i, mut m) in raw.into_iter().enumerate() {
            let path = format!("spec.analysis.metrics[{i}]");
            if m.template_ref.is_some() {
                // Resolved against the hub's templates when the canary is applied.
                if let Some(t) = self.templated_metric(i, m, &mut seen) {
                    self.templated.push(t);
                }
                continue;
            }
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

    /// A metric with `templateRef`: its own fields are checked here; the template it names
    /// is looked up, and its query rendered, by [`ParsedCanary::resolve`].
    fn templated_metric(
        &mut self,
        index: usize,
        mut m: RawMetric,
        seen: &mut BTreeSet<String>,
    ) -> Option<TemplatedMetric> {
        let path = format!("spec.analysis.metrics[{index}]");
        let errors_before = self.errors.len();
        let t = m.template_ref.take()?;
        let template = self.name(&format!("{path}.templateRef.name"), t.name);
        let template_namespace = match t.namespace {
            None => None,
            Some(ns) => self.name(&format!("{path}.templateRef.namespace"), Some(ns)),
        };
        if m.provider.is_some() || m.query.is_some() {
            self.err(
                format!("{path}.templateRef"),
                "give templateRef, or provider and query, not both",
            );
        }
        if m.judge.is_some() {
            self.err(
                format!("{path}.judge"),
                format!(
                    "a judge needs a built-in metric ({BUILTIN_SUCCESS_RATE}, {BUILTIN_DURATION})"
                ),
            );
        }
        let variables = m.template_variables.take().unwrap_or_default();
        let interval = m.interval.clone();
        let name = self.metric_name(&path, m.name.take(), seen);
        let interval_ms = self.duration(
            &format!("{path}.interval"),
            m.interval.as_deref(),
            DEFAULT_METRIC_INTERVAL_MS,
            MIN_INTERVAL_MS,
        );
        let range = self.metric_range(&path, name.as_deref(), &m, false);
        if self.errors.len() > errors_before {
            return None;
        }
        Some(TemplatedMetric {
            index,
            name: name?,
            interval_ms,
            interval,
            range: range?,
            template: template?,
            template_namespace,
            variables,
        })
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

    /// `metrics[i].name`: required, unique.
    fn metric_name(
        &mut self,
        path: &str,
        name: Option<String>,
        seen: &mut BTreeSet<String>,
    ) -> Option<String> {
        match name {
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
        }
    }

    fn metric(
        &mut self,
        path: &str,
        m: RawMetric,
        judged: bool,
        seen: &mut BTreeSet<String>,
    ) -> Option<Metric> {
        let name = self.metric_name(path, m.name.clone(), seen);
        let range = self.metric_range(path, name.as_deref(), &m, judged);
        let interval_ms = self.duration(
            &format!("{path}.interval"),
            m.interval.as_deref(),
            DEFAULT_METRIC_INTERVAL_MS,
            MIN_INTERVAL_MS,
        );
        let source = match name.as_deref() {
            Some(n) => self.metric_source(path, n, m.provider, m.query),
            None => None,
        };
        Some(Metric {
            name: name?,
            interval_ms,
            range: range?,
            source: source?,
        })
    }

    /// `metrics[i].thresholdRange`, or Flagger's deprecated `threshold`, of metric `name`.
    fn metric_range(
        &mut self,
        path: &str,
        name: Option<&str>,
        m: &RawMetric,
        judged: bool,
    ) -> Option<ThresholdRange> {
        match (&m.threshold_range, m.threshold) {
            (Some(r), _) => self.threshold_range(&format!("{path}.thresholdRange"), r),
            // Flagger's deprecated `threshold`: a minimum success rate, else a maximum.
            (None, Some(t)) => match to_milli(t) {
                Some(milli) if name == Some(BUILTIN_SUCCESS_RATE) => Some(ThresholdRange {
                    min: Some(milli),
                    max: None,
                }),
                Some(milli) => Some(ThresholdRange {
                    min: None,
                    max: Some(milli),
                }),
                None => {
                    self.err(
                        format!("{path}.threshold"),
                        format!("{t} is not a usable number"),
                    );
                    None
                }
            },
            // A judged metric needs no range: the judge decides.
            (None, None) if judged => Some(ThresholdRange {
                min: None,
                max: None,
            }),
            (None, None) => {
                self.err(
                    format!("{path}.thresholdRange"),
                    "required: {min: ..} and/or {max: ..}",
                );
                None
            }
        }
    }

    /// `metrics[i].thresholdRange`.
    fn threshold_range(&mut self, rpath: &str, r: &RawRange) -> Option<ThresholdRange> {
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

    /// Where metric `name` is measured: built in (the agent's proxy), or a Prometheus query
    /// (at `provider.address`, else at `spec.metricsServer`, as Flagger reads a bare query).
    fn metric_source(
        &mut self,
        path: &str,
        name: &str,
        provider: Option<RawProvider>,
        query: Option<String>,
    ) -> Option<MetricSource> {
        if matches!(name, BUILTIN_SUCCESS_RATE | BUILTIN_DURATION) {
            if provider.is_some() || query.is_some() {
                self.err(
                    format!("{path}.query"),
                    format!(
                        "{name} is built in and measured by the agent; give a custom metric \
                         another name"
                    ),
                );
                return None;
            }
            return Some(if name == BUILTIN_SUCCESS_RATE {
                MetricSource::RequestSuccessRate
            } else {
                MetricSource::RequestDuration
            });
        }
        let query = match query {
            Some(q) if q.trim().is_empty() => {
                self.err(format!("{path}.query"), "must not be empty");
                None
            }
            Some(q) => Some(q),
            None if provider.is_some() => {
                self.err(format!("{path}.query"), "required with provider");
                return None;
            }
            None => {
                self.err(
                    format!("{path}.name"),
                    format!(
                        "{} is not a built-in metric ({BUILTIN_SUCCESS_RATE}, \
                         {BUILTIN_DURATION}); a custom metric needs a query (with provider, or \
                         spec.metricsServer)",
                        quote(name)
                    ),
                );
                return None;
            }
        };
        let address = match provider {
            Some(p) => self.prometheus_provider(path, p),
            None => match self.metrics_server.clone() {
                Some(server) => self.url("spec.metricsServer", Some(server)),
                None => {
                    self.err(
                        format!("{path}.provider"),
                        "required with query (or set spec.metricsServer)",
                    );
                    None
                }
            },
        };
        Some(MetricSource::Prometheus {
            address: address?,
            query: query?,
        })
    }

    /// `metrics[i].provider`: `prometheus` with an address.
    fn prometheus_provider(&mut self, path: &str, p: RawProvider) -> Option<String> {
        let kind_ok = match supported_provider(&format!("{path}.provider.type"), p.kind.as_deref())
        {
            Ok(_) => true,
            Err(e) => {
                self.errors.push(e);
                false
            }
        };
        let address = self.url(&format!("{path}.provider.address"), p.address);
        address.filter(|_| kind_ok)
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
                // Flagger's schema allows an empty type: a rollout hook.
                None | Some("") => Some(WebhookType::Rollout),
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
                let webhook = Webhook {
                    name,
                    kind,
                    url,
                    timeout_ms,
                    retries,
                    metadata: w.metadata.unwrap_or_default(),
                    mute_alert: w.mute_alert.unwrap_or(false),
                };
                // A command for the built-in load tester is read now, so one it cannot run
                // is refused by name rather than failing every tick.
                if let Some(Err(e)) = super::load_tester::load_tester_call(&webhook) {
                    self.err(format!("{path}.metadata.cmd"), e.to_string());
                }
                out.push(webhook);
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
                // Flagger's schema allows an empty severity: info.
                None | Some("") => Some(Severity::Info),
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
            let err = check_outbound_address(bad).unwrap_err().to_string();
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

//! The canary resource as the hub stores it (SPEC K1, K2, K4–K6): validated, defaults filled
//! in, the deployment strategy derived. Produced by [`super::parse_canary`].
//!
//! Every type here is stored in the replicated state (bincode through serde): no floats (metric
//! thresholds are fixed-point thousandths), no untagged or internally tagged enums.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::provider::{MetricProvider, ProviderKind};
use crate::entity::EntityKind;

/// Smallest analysis interval accepted, in milliseconds.
pub const MIN_INTERVAL_MS: i64 = 1_000;
/// Analysis interval when none is given (SPEC K1: 60 s).
pub const DEFAULT_INTERVAL_MS: i64 = 60_000;
/// Failed checks before rollback when none is given (SPEC K1).
pub const DEFAULT_THRESHOLD: u32 = 1;
/// Ready percentage of primary and canary when none is given (SPEC K1).
pub const DEFAULT_READY_THRESHOLD: u8 = 100;
/// Progress deadline when none is given (SPEC K1: 600 s).
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: u32 = 600;
/// Webhook timeout when none is given (Flagger: 10 s).
pub const DEFAULT_WEBHOOK_TIMEOUT_MS: i64 = 10_000;
/// Metric query window when none is given (Flagger: 1 m).
pub const DEFAULT_METRIC_INTERVAL_MS: i64 = 60_000;
/// All traffic, in percent: primary weight + canary weight.
pub const TOTAL_WEIGHT: u8 = 100;
pub use hub_wire::canary_units::MILLI;

/// A validated canary resource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanarySpec {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`: the hub environment, when the resource names it.
    pub namespace: Option<String>,
    /// The hub entity under canary control.
    pub target: TargetRef,
    /// How the workloads are addressed (SPEC K2).
    pub service: ServiceSpec,
    /// Seconds a workload the analysis waits for may stay not ready before the canary fails.
    pub progress_deadline_seconds: u32,
    /// Promote every new revision at once, without analysis.
    pub skip_analysis: bool,
    /// Freeze the canary: no tick runs (SPEC K8).
    pub suspend: bool,
    /// On deletion, restore the routing and workload the canary took over (SPEC K8).
    pub revert_on_deletion: bool,
    /// `spec.analysis`.
    pub analysis: Analysis,
}

impl CanarySpec {
    /// The progress deadline in milliseconds.
    pub fn progress_deadline_ms(&self) -> i64 {
        i64::from(self.progress_deadline_seconds) * 1_000
    }

    /// The highest canary weight of the analysis: `maxWeight` (or the last `stepWeights`
    /// entry) for the canary strategy, 100 for A/B and blue/green (whose weights are 0 or 100).
    pub fn max_weight(&self) -> u8 {
        match &self.analysis.strategy {
            Strategy::Canary { max_weight, .. } => *max_weight,
            Strategy::AbTesting { .. } | Strategy::BlueGreen { .. } => TOTAL_WEIGHT,
        }
    }

    /// The MetricTemplates its metrics reference (`<environment>/<name>`), in metric order
    /// (a template used twice is listed twice).
    pub fn metric_templates(&self) -> impl Iterator<Item = &str> {
        self.analysis
            .metrics
            .iter()
            .filter_map(|m| match &m.source {
                MetricSource::Template { template, .. } => Some(template.as_str()),
                MetricSource::RequestSuccessRate
                | MetricSource::RequestDuration
                | MetricSource::Prometheus { .. } => None,
            })
    }

    /// The AlertProviders its alerts reference, each with its alert's index and the
    /// provider's id (`<environment>/<name>`: `providerRef.namespace`, else the canary's
    /// namespace, which a stored canary always has).
    pub fn alert_providers(&self) -> impl Iterator<Item = (usize, String)> + '_ {
        self.analysis
            .alerts
            .iter()
            .enumerate()
            .filter_map(|(i, a)| match &a.target {
                AlertTarget::Provider { name, namespace } => {
                    let env = namespace.as_deref().or(self.namespace.as_deref())?;
                    Some((i, format!("{env}/{name}")))
                }
                AlertTarget::Url(_) => None,
            })
    }

    /// The webhooks of one type, in the order they are listed.
    pub fn webhooks_of(&self, kind: WebhookType) -> impl Iterator<Item = &Webhook> {
        self.analysis
            .webhooks
            .iter()
            .filter(move |w| w.kind == kind)
    }
}

/// `spec.targetRef`: the entity whose new revisions are analysed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TargetRef {
    /// `helmChart` (default) or `terraformModule`.
    pub kind: EntityKind,
    /// The entity's name in the environment.
    pub name: String,
}

/// `spec.service` (SPEC K2): `<name>` and `<name>-primary` reach the primary, `<name>-canary`
/// the canary during analysis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServiceSpec {
    /// Service name; defaults to the target's name.
    pub name: String,
    /// Port the service exposes.
    pub port: u16,
    /// Name of the port (default `http`).
    pub port_name: String,
    /// Container port, when it differs from `port`.
    pub target_port: Option<u16>,
}

impl ServiceSpec {
    /// The address that reaches the primary only: `<name>-primary`.
    pub fn primary_name(&self) -> String {
        format!("{}-primary", self.name)
    }

    /// The address that reaches the canary only, during analysis: `<name>-canary`.
    pub fn canary_name(&self) -> String {
        format!("{}-canary", self.name)
    }
}

/// `spec.analysis`, with defaults filled in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Analysis {
    /// Time between ticks, in milliseconds (at least [`MIN_INTERVAL_MS`]).
    pub interval_ms: i64,
    /// Failed checks (cumulative for a revision) that roll the canary back; at least 1.
    pub threshold: u32,
    /// How traffic reaches the canary (SPEC K4).
    pub strategy: Strategy,
    /// Percent moved from the canary back to the primary per tick during promotion; `None`
    /// moves all traffic at once.
    pub step_weight_promotion: Option<u8>,
    /// Percent of primary replicas that must be ready.
    pub primary_ready_threshold: u8,
    /// Percent of canary replicas that must be ready.
    pub canary_ready_threshold: u8,
    /// Checks run on every analysis step after the first.
    pub metrics: Vec<Metric>,
    /// Gates and notifications (SPEC K5).
    pub webhooks: Vec<Webhook>,
    /// Where alerts go.
    pub alerts: Vec<AlertSpec>,
}

/// The deployment strategy (SPEC K4), derived from the analysis fields.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Strategy {
    /// Progressive traffic shifting by weight (`stepWeight` or `stepWeights`).
    Canary {
        /// How the weight rises.
        steps: StepWeights,
        /// Highest canary weight before promotion.
        max_weight: u8,
    },
    /// Requests matching `match` go to the canary for `iterations` successful checks.
    AbTesting {
        /// Successful checks before promotion.
        iterations: u32,
        /// Header conditions; a request matching any rule goes to the canary.
        match_rules: Vec<MatchRule>,
    },
    /// The canary gets no live traffic (only `<svc>-canary`) for `iterations` successful
    /// checks, then all traffic switches to it and it is promoted.
    BlueGreen {
        /// Successful checks before the switch.
        iterations: u32,
    },
}

impl Strategy {
    /// The name operators see: `canary`, `ab-testing`, `blue-green`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Strategy::Canary { .. } => "canary",
            Strategy::AbTesting { .. } => "ab-testing",
            Strategy::BlueGreen { .. } => "blue-green",
        }
    }
}

/// How the canary weight rises on each successful step.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StepWeights {
    /// `stepWeight`: by this much each time (it wins when `stepWeights` is also given).
    Fixed(u8),
    /// `stepWeights`: to the next entry each time; strictly increasing, 1–100.
    List(Vec<u8>),
}

impl StepWeights {
    /// The weight after `current`, capped at `max_weight` (and 100).
    pub fn next(&self, current: u8, max_weight: u8) -> u8 {
        let cap = max_weight.min(TOTAL_WEIGHT);
        let next = match self {
            StepWeights::Fixed(step) => current.saturating_add(*step),
            StepWeights::List(list) => list.iter().copied().find(|w| *w > current).unwrap_or(cap),
        };
        next.min(cap)
    }
}

/// One `match` entry: every header condition must hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatchRule {
    /// Header name (as written) → condition.
    pub headers: BTreeMap<String, HeaderMatch>,
}

/// A condition on one HTTP header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum HeaderMatch {
    /// The value equals this.
    Exact(String),
    /// The value starts with this.
    Prefix(String),
    /// The value matches this regular expression (validated, Rust `regex` syntax).
    Regex(String),
}

/// A check run on each analysis step after the first (SPEC K6).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metric {
    /// Unique within the canary; the key of its value in [`super::TickInput::metrics`].
    pub name: String,
    /// Window the measurement covers, in milliseconds.
    pub interval_ms: i64,
    /// Accepted values.
    pub range: ThresholdRange,
    /// What to measure.
    pub source: MetricSource,
}

/// Accepted metric values, inclusive, in thousandths ([`MILLI`]); at least one bound is set,
/// except for a metric with a judge ([`super::AnalysisPolicy::judges`]) and no `thresholdRange`,
/// whose range is unbounded and whose value is not checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThresholdRange {
    /// Lowest accepted value.
    pub min: Option<i64>,
    /// Highest accepted value.
    pub max: Option<i64>,
}

impl ThresholdRange {
    /// Whether `value` (thousandths) is within the range.
    pub fn contains(&self, value: i64) -> bool {
        self.min.is_none_or(|min| value >= min) && self.max.is_none_or(|max| value <= max)
    }
}

/// Where a metric's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MetricSource {
    /// `request-success-rate`: percent of requests to the canary not answered with a 5xx,
    /// measured by the agent's proxy.
    RequestSuccessRate,
    /// `request-duration`: 99th percentile request duration in milliseconds, measured by the
    /// agent's proxy.
    RequestDuration,
    /// A Prometheus query whose result is the value.
    Prometheus {
        /// Server address (`http://...`).
        address: String,
        /// PromQL; the result must be a single number.
        query: String,
    },
    /// A MetricTemplate's query (issue 52 item 3), rendered for this metric when the canary
    /// or the template was last applied, with the template's provider: what the leader runs.
    Template {
        /// The template, `<environment>/<name>`.
        template: String,
        /// Where and how the query runs (only supported providers are stored).
        provider: MetricProvider,
        /// The rendered query, as Flagger renders it (Flagger's Prometheus provider sends it
        /// with every run of whitespace made one space: [`super::prometheus_query_text`]).
        query: String,
    },
}

impl MetricSource {
    /// Whether the agent's proxy measures it (a built-in metric), rather than the leader.
    pub fn is_proxy(&self) -> bool {
        match self {
            MetricSource::RequestSuccessRate | MetricSource::RequestDuration => true,
            MetricSource::Prometheus { .. } | MetricSource::Template { .. } => false,
        }
    }

    /// The Prometheus query the leader runs for this metric, if it is one: a bare query
    /// against `provider.address` or `spec.metricsServer`, or a template's with the
    /// prometheus provider.
    pub fn prometheus(&self) -> Option<PrometheusCheck<'_>> {
        match self {
            MetricSource::RequestSuccessRate | MetricSource::RequestDuration => None,
            MetricSource::Prometheus { address, query } => Some(PrometheusCheck {
                address,
                query,
                template: None,
                secret_ref: None,
                insecure_skip_verify: false,
                headers: None,
            }),
            MetricSource::Template {
                template,
                provider,
                query,
            } => match provider.kind {
                ProviderKind::Prometheus => Some(PrometheusCheck {
                    address: &provider.address,
                    query,
                    template: Some(template),
                    secret_ref: provider.secret_ref.as_deref(),
                    insecure_skip_verify: provider.insecure_skip_verify,
                    headers: Some(&provider.headers),
                }),
                ProviderKind::Influxdb
                | ProviderKind::Datadog
                | ProviderKind::ExternalMetrics
                | ProviderKind::Stackdriver
                | ProviderKind::Cloudwatch
                | ProviderKind::Newrelic
                | ProviderKind::Graphite
                | ProviderKind::Dynatrace
                | ProviderKind::Keptn
                | ProviderKind::Splunk => None,
            },
        }
    }
}

/// A Prometheus check as the leader runs it ([`MetricSource::prometheus`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PrometheusCheck<'a> {
    /// The server's address.
    pub address: &'a str,
    /// The query, rendered (send [`super::prometheus_query_text`] of it, as Flagger does).
    pub query: &'a str,
    /// The MetricTemplate it comes from, `<environment>/<name>`.
    pub template: Option<&'a str>,
    /// The secret with the credentials (`token`, else `username` and `password`), in the
    /// template's environment.
    pub secret_ref: Option<&'a str>,
    /// Whether the server's TLS certificate goes unverified.
    pub insecure_skip_verify: bool,
    /// Headers sent with the query.
    pub headers: Option<&'a BTreeMap<String, Vec<String>>>,
}

impl PrometheusCheck<'_> {
    /// The environment of the template's secret (`secret_ref`), if it comes from a template.
    pub fn secret_environment(&self) -> Option<&str> {
        self.template
            .and_then(|t| t.split_once('/'))
            .map(|(env, _)| env)
    }
}

/// A webhook (SPEC K5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Webhook {
    /// Unique within the canary; the key of its result in [`super::TickInput::webhooks`].
    pub name: String,
    /// When it is called and what its answer means.
    pub kind: WebhookType,
    /// `http://` or `https://` URL the payload is POSTed to.
    pub url: String,
    /// Request timeout in milliseconds (default 10 s).
    pub timeout_ms: i64,
    /// Retries after a failed call.
    pub retries: u32,
    /// Sent in the payload.
    pub metadata: BTreeMap<String, String>,
    /// Whether a gate held by this webhook raises no alert.
    pub mute_alert: bool,
}

/// The webhook types (SPEC K5), spelled as in the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum WebhookType {
    /// Gate before a new revision starts; failure → Waiting.
    ConfirmRollout,
    /// Run on the first analysis step; failure → failed check.
    PreRollout,
    /// Run on every later analysis step (the default type); failure → failed check.
    Rollout,
    /// Gate before each weight increase; failure holds the weight.
    ConfirmTrafficIncrease,
    /// Gate before promotion; failure → WaitingPromotion.
    ConfirmPromotion,
    /// Notified after the canary succeeds or fails.
    PostRollout,
    /// Polled during analysis; a *success* rolls the canary back.
    Rollback,
    /// Notified of every event.
    Event,
}

impl WebhookType {
    /// Every type, in the order of SPEC K5.
    pub const ALL: [WebhookType; 8] = [
        WebhookType::ConfirmRollout,
        WebhookType::PreRollout,
        WebhookType::Rollout,
        WebhookType::ConfirmTrafficIncrease,
        WebhookType::ConfirmPromotion,
        WebhookType::PostRollout,
        WebhookType::Rollback,
        WebhookType::Event,
    ];

    /// The spelling in the resource (`confirm-rollout`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookType::ConfirmRollout => "confirm-rollout",
            WebhookType::PreRollout => "pre-rollout",
            WebhookType::Rollout => "rollout",
            WebhookType::ConfirmTrafficIncrease => "confirm-traffic-increase",
            WebhookType::ConfirmPromotion => "confirm-promotion",
            WebhookType::PostRollout => "post-rollout",
            WebhookType::Rollback => "rollback",
            WebhookType::Event => "event",
        }
    }

    /// The type spelled `s`, if any.
    pub fn parse(s: &str) -> Option<WebhookType> {
        WebhookType::ALL.into_iter().find(|t| t.as_str() == s)
    }
}

/// Alert severity: `info`, `warn` or `error`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Severity {
    /// Progress and success.
    Info,
    /// Gates holding, manual rollbacks.
    Warn,
    /// Failures.
    Error,
}

impl Severity {
    /// The spelling in the resource.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Error => "error",
        }
    }

    /// The severity spelled `s`, if any.
    pub fn parse(s: &str) -> Option<Severity> {
        [Severity::Info, Severity::Warn, Severity::Error]
            .into_iter()
            .find(|v| v.as_str() == s)
    }
}

/// An alert destination (`spec.analysis.alerts[i]`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AlertSpec {
    /// Its name.
    pub name: String,
    /// The least severe alert it receives (`info` receives all, `error` only errors).
    pub severity: Severity,
    /// Where alerts are sent.
    pub target: AlertTarget,
}

impl AlertSpec {
    /// Whether an alert of `severity` goes to this destination.
    pub fn receives(&self, severity: Severity) -> bool {
        severity >= self.severity
    }
}

/// Where an alert goes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AlertTarget {
    /// A provider configured in the hub (`providerRef`).
    Provider {
        /// Provider name.
        name: String,
        /// Its environment, when not the canary's.
        namespace: Option<String>,
    },
    /// A webhook URL receiving the alert as JSON.
    Url(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_steps_rise_and_cap() {
        let s = StepWeights::Fixed(10);
        assert_eq!(s.next(0, 50), 10);
        assert_eq!(s.next(40, 50), 50);
        assert_eq!(s.next(45, 50), 50);
        assert_eq!(StepWeights::Fixed(200).next(0, 100), 100);
        assert_eq!(StepWeights::Fixed(255).next(250, 255), 100);
    }

    #[test]
    fn listed_steps_take_the_next_entry() {
        let s = StepWeights::List(vec![1, 5, 10, 50]);
        assert_eq!(s.next(0, 50), 1);
        assert_eq!(s.next(1, 50), 5);
        assert_eq!(s.next(5, 50), 10);
        assert_eq!(s.next(10, 50), 50);
        // A weight not in the list (the list changed mid-analysis): the next larger entry.
        assert_eq!(s.next(7, 50), 10);
        assert_eq!(s.next(50, 50), 50);
    }

    #[test]
    fn ranges_are_inclusive() {
        let r = ThresholdRange {
            min: Some(99_000),
            max: None,
        };
        assert!(r.contains(99_000) && r.contains(100_000) && !r.contains(98_999));
        let r = ThresholdRange {
            min: None,
            max: Some(500_000),
        };
        assert!(r.contains(500_000) && !r.contains(500_001));
    }

    #[test]
    fn severities_order_alert_filters() {
        let a = AlertSpec {
            name: "on-call".into(),
            severity: Severity::Warn,
            target: AlertTarget::Url("http://x".into()),
        };
        assert!(!a.receives(Severity::Info));
        assert!(a.receives(Severity::Warn) && a.receives(Severity::Error));
    }

    #[test]
    fn webhook_types_round_trip() {
        for t in WebhookType::ALL {
            assert_eq!(WebhookType::parse(t.as_str()), Some(t));
        }
        assert_eq!(WebhookType::parse("pre-rolout"), None);
    }
}

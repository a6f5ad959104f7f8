//! Where a MetricTemplate's queries run (issue 52 item 3): Flagger's provider types and the
//! provider a stored check carries. A leaf module: the stored canary spec
//! ([`super::spec::MetricSource`]) names these types without depending on the parser.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::error::{quote, CanaryError};

/// The provider types of Flagger's MetricTemplate CRD.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum ProviderKind {
    /// `prometheus`: an instant query against `/api/v1/query` (run by the hub).
    Prometheus,
    /// `influxdb`.
    Influxdb,
    /// `datadog`.
    Datadog,
    /// `externalmetrics` (Kubernetes' external metrics API).
    ExternalMetrics,
    /// `stackdriver`.
    Stackdriver,
    /// `cloudwatch`.
    Cloudwatch,
    /// `newrelic`.
    Newrelic,
    /// `graphite`.
    Graphite,
    /// `dynatrace`.
    Dynatrace,
    /// `keptn`.
    Keptn,
    /// `splunk`.
    Splunk,
}

impl ProviderKind {
    /// Every provider type, in the CRD's order.
    pub const ALL: [ProviderKind; 11] = [
        ProviderKind::Prometheus,
        ProviderKind::Influxdb,
        ProviderKind::Datadog,
        ProviderKind::ExternalMetrics,
        ProviderKind::Stackdriver,
        ProviderKind::Cloudwatch,
        ProviderKind::Newrelic,
        ProviderKind::Graphite,
        ProviderKind::Dynatrace,
        ProviderKind::Keptn,
        ProviderKind::Splunk,
    ];

    /// As written in a resource.
    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Prometheus => "prometheus",
            ProviderKind::Influxdb => "influxdb",
            ProviderKind::Datadog => "datadog",
            ProviderKind::ExternalMetrics => "externalmetrics",
            ProviderKind::Stackdriver => "stackdriver",
            ProviderKind::Cloudwatch => "cloudwatch",
            ProviderKind::Newrelic => "newrelic",
            ProviderKind::Graphite => "graphite",
            ProviderKind::Dynatrace => "dynatrace",
            ProviderKind::Keptn => "keptn",
            ProviderKind::Splunk => "splunk",
        }
    }

    /// The type named `s`, if it is one of Flagger's.
    pub fn parse(s: &str) -> Option<ProviderKind> {
        ProviderKind::ALL.into_iter().find(|k| k.as_str() == s)
    }

    /// Whether the hub runs queries of this provider.
    pub fn is_supported(self) -> bool {
        self == ProviderKind::Prometheus
    }
}

/// Where a template's queries run, as the leader needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricProvider {
    /// The provider's type (only supported ones are stored).
    pub kind: ProviderKind,
    /// Its address (`http://` or `https://`, no query or fragment).
    pub address: String,
    /// `secretRef.name`: the secret holding the credentials (`token` for a bearer token,
    /// else `username` and `password` for basic authentication), in the template's
    /// environment.
    pub secret_ref: Option<String>,
    /// `insecureSkipVerify`: the provider's TLS certificate is not verified.
    pub insecure_skip_verify: bool,
    /// `headers`: sent with every query (name → values).
    pub headers: BTreeMap<String, Vec<String>>,
}

/// Checks a provider type as written at `path`: refused when unknown or not supported yet.
pub(super) fn supported_provider(
    path: &str,
    kind: Option<&str>,
) -> Result<ProviderKind, CanaryError> {
    match kind.map(|k| (k, ProviderKind::parse(k))) {
        None => Err(CanaryError::new(path, "required: prometheus")),
        Some((_, Some(k))) if k.is_supported() => Ok(k),
        Some((k, Some(_))) => Err(CanaryError::new(
            path,
            format!("provider {k} is not supported yet: the hub runs prometheus queries only"),
        )),
        Some((k, None)) => {
            let all: Vec<&str> = ProviderKind::ALL.iter().map(|k| k.as_str()).collect();
            Err(CanaryError::new(
                path,
                format!(
                    "unknown provider {}: Flagger's are {}",
                    quote(k),
                    all.join(", ")
                ),
            ))
        }
    }
}

/// A validated MetricTemplate's spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricTemplateSpec {
    /// `spec.provider`.
    pub provider: MetricProvider,
    /// `spec.query`, the template as written (its syntax checked).
    pub query: String,
}

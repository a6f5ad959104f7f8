//! `metric_templates` and `metric_template` (issue 52): Flagger MetricTemplates, which a
//! canary's `metrics[].templateRef` names.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// Where a template's query runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricProviderView {
    /// The server's address.
    pub address: String,
    /// Header names sent with each query (never their values).
    pub headers: Vec<String>,
    /// Whether the server's certificate goes unverified.
    pub insecure_skip_verify: bool,
    /// The secret with the credentials, by name (never its value).
    pub secret_ref: Option<String>,
    /// `prometheus`, ….
    #[serde(rename = "type")]
    pub kind: String,
}

/// One MetricTemplate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricTemplateView {
    /// When it was first applied.
    pub created: String,
    /// Its environment (the resource's namespace).
    pub environment: String,
    /// `<environment>/<name>`.
    pub id: String,
    /// Its name.
    pub name: String,
    /// Where its query runs.
    pub provider: MetricProviderView,
    /// The query template, as written.
    pub query: String,
    /// When it last changed.
    pub updated: String,
    /// The resource as applied (only for one template).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yaml: Option<String>,
}

/// The answer to `metric_templates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricTemplatesAnswer {
    /// By id.
    pub metric_templates: Vec<MetricTemplateView>,
}

/// Asks for MetricTemplates, optionally of one environment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListMetricTemplates {
    /// Only this environment's.
    pub environment: Option<String>,
}

impl Typed for ListMetricTemplates {
    type Answer = MetricTemplatesAnswer;
    fn query(&self) -> Query {
        Query::MetricTemplates {
            environment: self.environment.clone(),
        }
    }
}

/// Asks for one MetricTemplate, by `<environment>/<name>`, with its YAML.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetMetricTemplate(pub String);

impl Typed for GetMetricTemplate {
    type Answer = MetricTemplateView;
    fn query(&self) -> Query {
        Query::MetricTemplate { id: self.0.clone() }
    }
}

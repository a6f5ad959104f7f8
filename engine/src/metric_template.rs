//! The replicated `MetricTemplate` record (issue 52 item 3): a Flagger MetricTemplate applied
//! to an environment, which canary metrics reference with `templateRef`. The resource format
//! and its validation are in [`crate::canary`] ([`crate::canary::parse_metric_template`]);
//! applying and deleting are in `apply/metric_templates.rs`.

use serde::{Deserialize, Serialize};

use crate::canary::MetricTemplateSpec;
use crate::TimestampMs;

/// A metric template of an environment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetricTemplate {
    /// `<environment>/<name>`.
    pub id: String,
    /// The environment (the resource's namespace).
    pub environment: String,
    /// The resource's name.
    pub name: String,
    /// The validated spec: provider and query template.
    pub spec: MetricTemplateSpec,
    /// The resource as applied.
    pub yaml: String,
    /// Entry time of the first apply.
    pub created_ms: TimestampMs,
    /// Entry time of the last apply that changed it.
    pub updated_ms: TimestampMs,
}

impl MetricTemplate {
    /// The id of template `name` in `environment`.
    pub fn id_of(environment: &str, name: &str) -> String {
        format!("{environment}/{name}")
    }
}

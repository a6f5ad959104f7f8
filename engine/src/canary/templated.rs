//! Canary metrics that reference a MetricTemplate (`metrics[i].templateRef`), resolved against
//! the stored templates when the canary is applied (issue 52 item 3).
//!
//! The parser ([`super::parse_canary_templated`]) checks such a metric on its own (name,
//! threshold, interval, the reference's names, `templateVariables`) and sets it aside as a
//! [`TemplatedMetric`]: it cannot know the hub's templates. [`ParsedCanary::resolve`] then
//! looks each one up in the canary's environment (or the reference's namespace), renders the
//! template's query with the canary's model ([`super::render`]), and puts the metric back in
//! its place with a [`MetricSource::Template`] source, which carries everything the leader
//! needs to run the check: the rendered query and the provider. A template that does not exist,
//! or a query that does not render (a variable `templateVariables` does not define), is
//! refused with the metric's path, as Flagger would fail that check on every tick.

use std::collections::BTreeMap;

use super::error::{CanaryError, CanaryErrors};
use super::ignored::IgnoredField;
use super::judge::AnalysisPolicy;
use super::provider::MetricTemplateSpec;
use super::render::{render_query, ModelField, RenderError, TemplateModel};
use super::spec::{CanarySpec, Metric, MetricSource, ThresholdRange};

/// Flagger's `{{ interval }}` when a metric gives none. (Flagger itself renders an empty
/// string there, since it applies its 1m default only to the built-in checks; the query
/// `[...][]` could never run. The hub renders the window it measures with.)
pub const DEFAULT_TEMPLATE_INTERVAL: &str = "1m";

/// A metric with `templateRef`, checked by the parser and not yet resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplatedMetric {
    /// Its place in `spec.analysis.metrics`.
    pub index: usize,
    /// `name`.
    pub name: String,
    /// `interval`, in milliseconds (defaulted).
    pub interval_ms: i64,
    /// `interval` as written, which `{{ interval }}` renders.
    pub interval: Option<String>,
    /// Accepted values.
    pub range: ThresholdRange,
    /// `templateRef.name`.
    pub template: String,
    /// `templateRef.namespace`; the canary's when absent.
    pub template_namespace: Option<String>,
    /// `templateVariables`.
    pub variables: BTreeMap<String, String>,
}

impl TemplatedMetric {
    /// The metric's YAML path.
    pub fn path(&self) -> String {
        format!("spec.analysis.metrics[{}]", self.index)
    }

    /// The environment of the template it references, for a canary in `environment`.
    pub fn template_environment<'a>(&'a self, environment: &'a str) -> &'a str {
        self.template_namespace.as_deref().unwrap_or(environment)
    }
}

/// The names a query template's model takes from the canary besides its spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ModelRefs {
    /// `spec.ingressRef.name`.
    pub ingress: Option<String>,
    /// `spec.routeRef.name`.
    pub route: Option<String>,
    /// Whether the target is a Knative service (whose `{{ route }}` Flagger fills with its
    /// latest revision's name, which the hub does not know).
    pub knative: bool,
}

/// A canary resource as the parser reads it, before its templated metrics are resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedCanary {
    /// The spec, without the templated metrics.
    pub spec: CanarySpec,
    /// The issue-20 analysis policy.
    pub policy: AnalysisPolicy,
    /// Fields accepted and not acted on.
    pub ignored: Vec<IgnoredField>,
    /// The metrics that reference a MetricTemplate, in order.
    pub templated: Vec<TemplatedMetric>,
    /// Names the templates' model needs.
    pub refs: ModelRefs,
}

/// The stored MetricTemplates, as the resolution reads them.
pub trait MetricTemplates {
    /// Template `name` of environment `environment`.
    fn metric_template(&self, environment: &str, name: &str) -> Option<&MetricTemplateSpec>;
}

impl MetricTemplates for BTreeMap<(String, String), MetricTemplateSpec> {
    fn metric_template(&self, environment: &str, name: &str) -> Option<&MetricTemplateSpec> {
        self.get(&(environment.to_string(), name.to_string()))
    }
}

impl ParsedCanary {
    /// Resolves the templated metrics of a canary in `environment` against `templates`: the
    /// complete spec, or every metric's problem with its path.
    pub fn resolve(
        self,
        environment: &str,
        templates: &dyn MetricTemplates,
    ) -> Result<(CanarySpec, AnalysisPolicy, Vec<IgnoredField>), CanaryErrors> {
        let ParsedCanary {
            mut spec,
            policy,
            ignored,
            templated,
            refs,
        } = self;
        let mut errors = Vec::new();
        let mut resolved = Vec::with_capacity(templated.len());
        for t in &templated {
            match resolve_one(&spec, environment, &refs, t, templates) {
                Ok(metric) => resolved.push((t.index, metric)),
                Err(e) => errors.push(e),
            }
        }
        if let Some(errors) = CanaryErrors::from_vec(errors) {
            return Err(errors);
        }
        // In increasing index order, each metric goes back to its place.
        for (index, metric) in resolved {
            let at = index.min(spec.analysis.metrics.len());
            spec.analysis.metrics.insert(at, metric);
        }
        Ok((spec, policy, ignored))
    }
}

/// The model of metric `t` of canary `spec` in `environment` (Flagger's `toMetricModel`).
pub fn template_model(
    spec: &CanarySpec,
    environment: &str,
    refs: &ModelRefs,
    t: &TemplatedMetric,
) -> TemplateModel {
    let target = spec.target.name.clone();
    let mut fields = BTreeMap::new();
    fields.insert(ModelField::Name, spec.name.clone());
    fields.insert(ModelField::Namespace, environment.to_string());
    fields.insert(ModelField::Target, target.clone());
    fields.insert(ModelField::Service, spec.service.name.clone());
    fields.insert(
        ModelField::Ingress,
        refs.ingress.clone().unwrap_or_else(|| target.clone()),
    );
    let mut unavailable = BTreeMap::new();
    if refs.knative {
        unavailable.insert(
            ModelField::Route,
            "for a Knative service Flagger renders its latest revision's name, which the hub \
             does not know"
                .to_string(),
        );
    } else {
        fields.insert(ModelField::Route, refs.route.clone().unwrap_or(target));
    }
    fields.insert(
        ModelField::Interval,
        t.interval
            .clone()
            .unwrap_or_else(|| DEFAULT_TEMPLATE_INTERVAL.to_string()),
    );
    TemplateModel {
        fields,
        unavailable,
        variables: t.variables.clone(),
    }
}

fn resolve_one(
    spec: &CanarySpec,
    environment: &str,
    refs: &ModelRefs,
    t: &TemplatedMetric,
    templates: &dyn MetricTemplates,
) -> Result<Metric, CanaryError> {
    let path = t.path();
    let template_env = t.template_environment(environment);
    let Some(template) = templates.metric_template(template_env, &t.template) else {
        return Err(CanaryError::new(
            format!("{path}.templateRef"),
            format!("metric template {} not found in {template_env}", t.template),
        ));
    };
    let id = format!("{template_env}/{}", t.template);
    let model = template_model(spec, environment, refs, t);
    let query = render_query(&template.query, &model).map_err(|e| match e {
        RenderError::UndefinedVariable { name } => CanaryError::new(
            format!("{path}.templateVariables"),
            format!(
                "variable {name:?} is not defined: metric template {id} uses \
                 {{{{ variables.{name} }}}}"
            ),
        ),
        other => CanaryError::new(
            format!("{path}.templateRef"),
            format!("metric template {id}: {other}"),
        ),
    })?;
    Ok(Metric {
        name: t.name.clone(),
        interval_ms: t.interval_ms,
        range: t.range,
        source: MetricSource::Template {
            template: id,
            provider: template.provider.clone(),
            query,
        },
    })
}

//! MetricTemplates (issue 52 item 3): applying one to an environment, which renders again the
//! query of every canary metric that references it, and deleting one no canary references.
//!
//! A canary stores each templated metric with the query rendered from the template when it
//! was applied ([`crate::canary::MetricSource::Template`]), so the leader runs exactly what
//! the committed state says. A template changed later is rendered again for every canary
//! that uses it in the same entry; a change that one of them could not render (a variable it
//! does not define) is refused naming the canary and the metric, and changes nothing.
//! Deleting a template that a canary references is refused, naming the canaries: Flagger
//! allows it and then fails that check on every tick, which rolls every release back.

use crate::canary::{
    parse_canary_templated, parse_metric_template, CanaryErrors, CanarySpec, MetricTemplateSpec,
    MetricTemplates,
};
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::metric_template::MetricTemplate;
use crate::state::State;

use super::{not_found, Tx};

impl MetricTemplates for State {
    fn metric_template(&self, environment: &str, name: &str) -> Option<&MetricTemplateSpec> {
        self.metric_templates
            .get(&MetricTemplate::id_of(environment, name))
            .map(|t| &t.spec)
    }
}

/// The stored templates with one of them replaced by a new spec.
struct WithTemplate<'a> {
    state: &'a State,
    environment: &'a str,
    name: &'a str,
    spec: &'a MetricTemplateSpec,
}

impl MetricTemplates for WithTemplate<'_> {
    fn metric_template(&self, environment: &str, name: &str) -> Option<&MetricTemplateSpec> {
        if environment == self.environment && name == self.name {
            Some(self.spec)
        } else {
            MetricTemplates::metric_template(self.state, environment, name)
        }
    }
}

impl State {
    /// `ApplyMetricTemplate`: creates or updates a template and renders it again for the
    /// canaries that use it. Invalid resources are refused with every problem's path.
    pub(super) fn apply_metric_template(
        &mut self,
        environment: Option<&str>,
        yaml: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let parsed = parse_metric_template(yaml)
            .map_err(|errors| CommandError::invalid("metric template", format!("\n{errors}")))?;
        let env = resource_environment(
            parsed.namespace.as_deref(),
            environment,
            "required: the environment of the template",
        )?;
        if !self.environments.contains_key(&env) {
            return Err(not_found("environment", &env));
        }
        let id = MetricTemplate::id_of(&env, &parsed.name);
        let ignored: Vec<String> = parsed.ignored.iter().map(ToString::to_string).collect();
        let with_ignored = |summary: String| {
            if ignored.is_empty() {
                summary
            } else {
                format!("{summary}; {}", ignored.join("; "))
            }
        };
        if self
            .metric_templates
            .get(&id)
            .is_some_and(|t| t.yaml == yaml)
        {
            return Ok(CommandOutput::Changed {
                id,
                summary: with_ignored("metric template unchanged".into()),
            });
        }
        let overlay = WithTemplate {
            state: self,
            environment: &env,
            name: &parsed.name,
            spec: &parsed.spec,
        };
        let rendered = self.render_users(&id, &overlay)?;
        let now = tx.now;
        let summary = match self.metric_templates.get_mut(&id, &mut tx.changed) {
            Some(t) => {
                t.spec = parsed.spec;
                t.yaml = yaml.to_string();
                t.updated_ms = now;
                format!("metric template {id} updated")
            }
            None => {
                self.metric_templates.put(
                    MetricTemplate {
                        id: id.clone(),
                        environment: env.clone(),
                        name: parsed.name,
                        spec: parsed.spec,
                        yaml: yaml.to_string(),
                        created_ms: now,
                        updated_ms: now,
                    },
                    &mut tx.changed,
                );
                format!("metric template {id} created")
            }
        };
        let count = rendered.len();
        for (canary, spec) in rendered {
            let Some(mut c) = self.canaries.get_mut(&canary, &mut tx.changed) else {
                continue;
            };
            c.spec.analysis.metrics = spec.analysis.metrics;
            let entity = c.entity.clone();
            drop(c);
            let note =
                format!("canary {canary}: metric template {id} changed, query rendered again");
            self.note(&entity, "canary", note, tx);
        }
        let summary = match count {
            0 => summary,
            n => format!("{summary}; rendered again for {n} canaries"),
        };
        Ok(CommandOutput::Changed {
            id,
            summary: with_ignored(summary),
        })
    }

    /// The canaries that reference template `id`, each with its spec resolved against
    /// `templates`; the first that does not resolve refuses the change, naming the canary and
    /// every problem's path.
    fn render_users(
        &self,
        id: &str,
        templates: &dyn MetricTemplates,
    ) -> Result<Vec<(String, CanarySpec)>, CommandError> {
        let mut out = Vec::new();
        for c in self.canaries.values() {
            if !c.spec.metric_templates().any(|t| t == id) {
                continue;
            }
            let refused = |errors: CanaryErrors| {
                CommandError::FailedPrecondition(format!(
                    "metric template {id} is used by canary {}, which it would break:\n{errors}",
                    c.id
                ))
            };
            let (spec, _, _) = parse_canary_templated(&c.yaml)
                .map_err(refused)?
                .resolve(&c.environment, templates)
                .map_err(refused)?;
            out.push((c.id.clone(), spec));
        }
        Ok(out)
    }

    /// `DeleteMetricTemplate`: refused while a canary references the template.
    pub(super) fn delete_metric_template(
        &mut self,
        id: &str,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        if !self.metric_templates.contains_key(id) {
            return Err(not_found("metric template", id));
        }
        if let Some(users) = self.template_users(|t| t == id) {
            return Err(CommandError::FailedPrecondition(format!(
                "metric template {id} is used by {users}; change or delete them first"
            )));
        }
        self.metric_templates.remove(id, &mut tx.changed);
        Ok(CommandOutput::Changed {
            id: id.to_string(),
            summary: format!("metric template {id} deleted"),
        })
    }

    /// The canaries whose metrics reference a template `is_used` picks, each with the paths
    /// of those metrics (`canary test/podinfo (spec.analysis.metrics[1])`); `None` when no
    /// canary does.
    pub(super) fn template_users(&self, is_used: impl Fn(&str) -> bool) -> Option<String> {
        use crate::canary::MetricSource;
        let mut users = Vec::new();
        for c in self.canaries.values() {
            let paths: Vec<String> = c
                .spec
                .analysis
                .metrics
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    matches!(&m.source, MetricSource::Template { template, .. } if is_used(template))
                })
                .map(|(i, _)| format!("spec.analysis.metrics[{i}]"))
                .collect();
            if !paths.is_empty() {
                users.push(format!("canary {} ({})", c.id, paths.join(", ")));
            }
        }
        (!users.is_empty()).then(|| users.join(", "))
    }

    /// Removes the templates of environment `name` (being deleted); refused while a canary
    /// references one of them.
    pub(super) fn delete_environment_templates(
        &mut self,
        name: &str,
        tx: &mut Tx,
    ) -> Result<(), CommandError> {
        let prefix = format!("{name}/");
        if let Some(users) = self.template_users(|t| t.starts_with(&prefix)) {
            return Err(CommandError::FailedPrecondition(format!(
                "environment {name:?} has metric templates used by {users}; change or delete \
                 them first"
            )));
        }
        let ids: Vec<String> = self
            .metric_templates
            .values()
            .filter(|t| t.environment == name)
            .map(|t| t.id.clone())
            .collect();
        for id in ids {
            self.metric_templates.remove(&id, &mut tx.changed);
        }
        Ok(())
    }
}

/// The environment of a resource: its `metadata.namespace`, else the one the command gives;
/// the two must agree when both are given.
pub(super) fn resource_environment(
    namespace: Option<&str>,
    environment: Option<&str>,
    missing: &str,
) -> Result<String, CommandError> {
    match (namespace, environment) {
        (Some(ns), Some(env)) if ns != env => Err(CommandError::invalid(
            "metadata.namespace",
            format!("{ns:?} differs from the environment given, {env:?}"),
        )),
        (Some(ns), _) | (None, Some(ns)) => Ok(ns.to_string()),
        (None, None) => Err(CommandError::invalid("metadata.namespace", missing)),
    }
}

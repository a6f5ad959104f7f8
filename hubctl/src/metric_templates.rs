//! `hubctl metric-template …` (issue 52): Flagger MetricTemplates, which canaries' checks name
//! with `metrics[].templateRef`: apply (`--dry-run` validates here), get and delete. A file
//! given to `hubctl canary apply -f` may hold them too ([`split_documents`]).

use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use hub_engine::Command;
use serde_json::json;

use super::args::{read_file, ReadArgs};
use super::calls::{ask, submit_and_print};
use super::output::{print, print_list, Format};
use hub_client::answer::{GetMetricTemplate, ListMetricTemplates};
use hub_client::FailoverClient;

/// `hubctl metric-template …`.
#[derive(Subcommand, Debug)]
pub enum MetricTemplateCmd {
    /// Create or update a MetricTemplate from its resource (YAML); the canaries that use it
    /// are rendered again in the same write (refused, naming them, if one cannot be).
    Apply {
        /// The resource.
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// The environment, when `metadata.namespace` does not name it.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Validate here and show the fields the hub ignores; send nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List an environment's templates (`-A`: every environment's), or show one.
    Get {
        /// The template's name (omit to list).
        name: Option<String>,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Every environment.
        #[arg(long, short = 'A')]
        all_namespaces: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Delete a template no canary uses (refused naming the canaries that do).
    Delete {
        /// The template's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
    },
}

/// Runs a `hubctl metric-template` command.
pub async fn run(
    client: &FailoverClient,
    cmd: MetricTemplateCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        MetricTemplateCmd::Apply {
            file,
            namespace,
            dry_run,
        } => {
            let yaml = read_file(&file, "metric template")?;
            if dry_run {
                return dry_run_apply(&file, &yaml, fmt);
            }
            Command::ApplyMetricTemplate {
                environment: namespace,
                yaml,
            }
        }
        MetricTemplateCmd::Get {
            name: Some(name),
            namespace,
            read,
            ..
        } => {
            let namespace = namespace.context("-n ENVIRONMENT: required with a name")?;
            let t = ask(
                client,
                &GetMetricTemplate(format!("{namespace}/{name}")),
                read,
            )
            .await?;
            if fmt.is_table() {
                if let Some(yaml) = &t.yaml {
                    print!("{yaml}");
                    return Ok(());
                }
            }
            return print(
                fmt,
                &serde_json::to_value(&t)?,
                &["id", "provider", "query", "updated"],
            );
        }
        MetricTemplateCmd::Get {
            name: None,
            namespace,
            all_namespaces,
            read,
        } => {
            if namespace.is_none() && !all_namespaces {
                anyhow::bail!("give -n ENVIRONMENT, or -A for every environment");
            }
            let environment = if all_namespaces { None } else { namespace };
            let answer = ask(client, &ListMetricTemplates { environment }, read).await?;
            return print_list(
                fmt,
                &answer.metric_templates,
                &["NAMESPACE", "NAME", "PROVIDER", "ADDRESS", "UPDATED"],
                |t| {
                    json!({"NAMESPACE": t.environment, "NAME": t.name,
                        "PROVIDER": t.provider.kind, "ADDRESS": t.provider.address,
                        "UPDATED": t.updated, "QUERY": t.query})
                },
            );
        }
        MetricTemplateCmd::Delete { name, namespace } => Command::DeleteMetricTemplate {
            id: format!("{namespace}/{name}"),
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// `metric-template apply --dry-run`: parsed here; an invalid one is an error naming every
/// path.
fn dry_run_apply(file: &std::path::Path, yaml: &str, fmt: Format) -> anyhow::Result<()> {
    let parsed = hub_engine::canary::parse_metric_template(yaml).map_err(|errors| {
        anyhow::anyhow!(
            "{}: invalid metric template resource:\n{errors}",
            file.display()
        )
    })?;
    if fmt.is_table() {
        println!(
            "metric template {} is valid (dry run: nothing was sent)",
            parsed.name
        );
        println!(
            "  provider: {} at {}",
            parsed.spec.provider.kind.as_str(),
            hub_engine::artifact::redact_url(&parsed.spec.provider.address)
        );
        for f in &parsed.ignored {
            println!("  warning: {f}");
        }
        return Ok(());
    }
    print(
        fmt,
        &json!({"valid": true, "name": parsed.name, "namespace": parsed.namespace,
            "provider": parsed.spec.provider.kind.as_str(), "ignored": parsed.ignored}),
        &[],
    )
}

/// One YAML document of a file, with the `kind` it declares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Document {
    /// `kind:` (`Canary`, `MetricTemplate`); empty when the document names none.
    pub kind: String,
    /// The document's text.
    pub text: String,
}

/// Splits a file into its YAML documents (at `---` lines), dropping empty ones, each with
/// its `kind`. A document that is not YAML is kept with an empty kind: the hub's parser
/// reports its error with the path.
pub fn split_documents(yaml: &str) -> Vec<Document> {
    #[derive(serde::Deserialize)]
    struct Kind {
        #[serde(default)]
        kind: Option<String>,
    }
    let mut docs = Vec::new();
    let mut current = String::new();
    let mut flush = |text: &mut String| {
        let doc = std::mem::take(text);
        let meaningful = doc
            .lines()
            .any(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'));
        if meaningful {
            let kind = serde_yaml_ng::from_str::<Kind>(&doc)
                .ok()
                .and_then(|k| k.kind)
                .unwrap_or_default();
            docs.push(Document { kind, text: doc });
        }
    };
    for line in yaml.lines() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            flush(&mut current);
            continue;
        }
        current.push_str(line);
        current.push('\n');
    }
    flush(&mut current);
    docs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_splits_into_its_documents_with_their_kinds() {
        let file = "# header\n---\napiVersion: flagger.app/v1beta1\nkind: MetricTemplate\n\
                    metadata: {name: latency}\n---\n\n---\nkind: Canary\nmetadata: {name: web}\n";
        let docs = split_documents(file);
        let kinds: Vec<&str> = docs.iter().map(|d| d.kind.as_str()).collect();
        assert_eq!(kinds, ["MetricTemplate", "Canary"]);
        assert!(docs[1].text.starts_with("kind: Canary"), "{:?}", docs[1]);
        assert_eq!(split_documents("kind: Canary\n").len(), 1);
        assert_eq!(split_documents(": not yaml [")[0].kind, "");
    }
}

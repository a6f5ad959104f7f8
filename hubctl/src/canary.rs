//! `hubctl canary …` (SPEC K1, K7, K10): apply a canary resource to an entity, list and show
//! canaries (the status block as in Flagger), wait for promotion in CI, promote, abort, retry
//! and delete.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Subcommand;
use hub_engine::canary::Manual;
use hub_engine::Command;
use serde_json::json;

use super::args::{read_file, ActorArg, ReadArgs, FRESH};
use super::calls::{ask, submit_and_print};
use super::metric_templates::split_documents;
use super::output::{print, print_list, Format};
use super::timeparse::parse_duration;
use hub_client::answer::{CanaryEventView, GetCanary, ListCanaries};
use hub_client::FailoverClient;

/// `hubctl canary …`.
#[derive(Subcommand, Debug)]
pub enum CanaryCmd {
    /// Create or update a canary from its resource (YAML). The file may hold several
    /// documents: its MetricTemplates and AlertProviders are applied first, then its Canaries,
    /// in order.
    Apply {
        /// The resource(s).
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// The environment, when `metadata.namespace` does not name it.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Validate here and show the parsed resource and the fields the hub ignores; send
        /// nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List canaries (`-A` for every environment), or show one (`-o yaml` for its status).
    Get {
        /// The canary's name (omit to list).
        name: Option<String>,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Every environment.
        #[arg(long, short = 'A')]
        all_namespaces: bool,
        #[command(flatten)]
        read: ReadArgs,
        #[command(flatten)]
        watch: super::args::WatchArgs,
    },
    /// The canary's events, oldest first, as `kubectl describe canary` shows them: what each
    /// tick decided and why, in Flagger's words (the last 100).
    Events {
        /// The canary's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Wait until the canary is promoted; non-zero on failure or timeout.
    Wait {
        /// The canary's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
        /// The condition: `promoted`.
        #[arg(long = "for", default_value = "promoted")]
        condition: String,
        /// How long to wait (e.g. `5m`).
        #[arg(long, default_value = "5m")]
        timeout: String,
    },
    /// Promote the revision under analysis now (skipping the remaining steps).
    Promote {
        /// The canary's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Abort the analysis: all traffic back to the primary, the canary fails.
    Abort {
        /// The canary's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Analyse a failed revision again.
    Retry {
        /// The canary's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Delete the canary (`revertOnDeletion` restores the original routing).
    Delete {
        /// The canary's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
    },
}

fn id(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Runs a `hubctl canary` command.
// Long: one arm per `hubctl canary` subcommand.
pub async fn run(client: &FailoverClient, cmd: CanaryCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        CanaryCmd::Apply {
            file,
            namespace,
            dry_run,
        } => {
            let yaml = read_file(&file, "canary")?;
            return apply(client, &file, &yaml, namespace, dry_run, fmt).await;
        }
        CanaryCmd::Get {
            name: None,
            namespace,
            all_namespaces,
            read,
            ..
        } => {
            if namespace.is_none() && !all_namespaces {
                anyhow::bail!("give -n ENVIRONMENT, or -A for every environment");
            }
            let environment = if all_namespaces { None } else { namespace };
            let v = ask(client, &ListCanaries { environment }, read).await?;
            return print_list(
                fmt,
                &v.canaries,
                &[
                    "NAMESPACE",
                    "NAME",
                    "STATUS",
                    "WEIGHT",
                    "LASTTRANSITIONTIME",
                ],
                |c| {
                    // ENTITY, PROMOTED and the proxy's stable addresses only in `-o wide`.
                    let a = c.addresses.as_ref();
                    json!({"NAMESPACE": c.namespace, "NAME": c.name, "STATUS": c.status,
                        "WEIGHT": c.weight, "LASTTRANSITIONTIME": c.last_transition,
                        "ENTITY": c.entity, "PROMOTED": c.promoted,
                        "PRIMARY": a.map(|a| a.primary.as_str()),
                        "CANARY": a.map(|a| a.canary.as_str())})
                },
            );
        }
        CanaryCmd::Get {
            name: Some(name),
            namespace,
            read,
            ..
        } => {
            let namespace = namespace.context("-n ENVIRONMENT: required with a name")?;
            let v = ask(client, &GetCanary(id(&namespace, &name)), read).await?;
            if matches!(fmt, Format::Yaml | Format::Json) {
                let out = json!({"metadata": {"name": v.name, "namespace": v.namespace},
                    "spec": {"entity": v.entity}, "status": v.status_block});
                return print(fmt, &out, &[]);
            }
            return print(
                fmt,
                &json!(v),
                &[
                    "namespace",
                    "name",
                    "status",
                    "weight",
                    "last_transition",
                    "step",
                ],
            );
        }
        CanaryCmd::Events {
            name,
            namespace,
            read,
        } => {
            let v = ask(client, &GetCanary(id(&namespace, &name)), read).await?;
            let events = v.status_block.map(|b| b.events).unwrap_or_default();
            let now = super::timeparse::now_ms();
            return print_list(fmt, &events, &["TYPE", "REASON", "AGE", "MESSAGE"], |e| {
                json!({"TYPE": e.kind, "REASON": e.reason, "AGE": age(e, now),
                    "MESSAGE": e.message})
            });
        }
        CanaryCmd::Wait {
            name,
            namespace,
            condition,
            timeout,
        } => return wait(client, &id(&namespace, &name), &condition, &timeout).await,
        CanaryCmd::Promote {
            name,
            namespace,
            actor,
        } => Command::CanaryManual {
            id: id(&namespace, &name),
            action: Manual::Promote,
            actor: actor.name(),
        },
        CanaryCmd::Abort {
            name,
            namespace,
            actor,
        } => Command::CanaryManual {
            id: id(&namespace, &name),
            action: Manual::Abort,
            actor: actor.name(),
        },
        CanaryCmd::Retry {
            name,
            namespace,
            actor,
        } => Command::CanaryManual {
            id: id(&namespace, &name),
            action: Manual::Retry,
            actor: actor.name(),
        },
        CanaryCmd::Delete { name, namespace } => Command::DeleteCanary {
            id: id(&namespace, &name),
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// `canary apply -f`: each document of the file, MetricTemplates and AlertProviders first,
/// then Canaries; a document of another kind is refused, naming it, before anything is sent.
async fn apply(
    client: &FailoverClient,
    file: &std::path::Path,
    yaml: &str,
    namespace: Option<String>,
    dry_run: bool,
    fmt: Format,
) -> anyhow::Result<()> {
    let docs = split_documents(yaml);
    if docs.is_empty() {
        anyhow::bail!("{}: no resource in the file", file.display());
    }
    for (n, d) in docs.iter().enumerate() {
        if !matches!(
            d.kind.as_str(),
            "Canary" | "MetricTemplate" | "AlertProvider" | ""
        ) {
            anyhow::bail!(
                "{}: document {}: kind {:?}: only Canary, MetricTemplate and AlertProvider \
                 resources are applied here",
                file.display(),
                n + 1,
                d.kind
            );
        }
    }
    let (providers, docs): (Vec<_>, Vec<_>) =
        docs.into_iter().partition(|d| d.kind == "AlertProvider");
    let (templates, canaries): (Vec<_>, Vec<_>) =
        docs.into_iter().partition(|d| d.kind == "MetricTemplate");
    for p in providers {
        if dry_run {
            super::alert_providers::dry_run_apply(file, &p.text, fmt)?;
            continue;
        }
        let command = Command::ApplyAlertProvider {
            environment: namespace.clone(),
            yaml: p.text,
        };
        submit_and_print(client, &command, fmt).await?;
    }
    for t in templates {
        if dry_run {
            let parsed = hub_engine::canary::parse_metric_template(&t.text).map_err(|errors| {
                anyhow::anyhow!("{}: invalid metric template:\n{errors}", file.display())
            })?;
            if fmt.is_table() {
                println!(
                    "metric template {} is valid (dry run: nothing was sent)",
                    parsed.name
                );
            }
            continue;
        }
        let command = Command::ApplyMetricTemplate {
            environment: namespace.clone(),
            yaml: t.text,
        };
        submit_and_print(client, &command, fmt).await?;
    }
    for c in canaries {
        if dry_run {
            dry_run_apply(file, &c.text, namespace.as_deref(), fmt)?;
            continue;
        }
        let command = Command::ApplyCanary {
            environment: namespace.clone(),
            yaml: c.text,
        };
        submit_and_print(client, &command, fmt).await?;
    }
    Ok(())
}

/// `canary apply --dry-run`: the resource parsed here, with the Kubernetes-only fields the
/// hub would ignore; an invalid one is an error naming every path.
fn dry_run_apply(
    file: &std::path::Path,
    yaml: &str,
    namespace: Option<&str>,
    fmt: Format,
) -> anyhow::Result<()> {
    let parsed = hub_engine::canary::parse_canary_templated(yaml).map_err(|errors| {
        anyhow::anyhow!("{}: invalid canary resource:\n{errors}", file.display())
    })?;
    let (spec, ignored) = (parsed.spec, parsed.ignored);
    // Checks from MetricTemplates are rendered by the hub when applied, against its templates.
    let templated: Vec<String> = parsed
        .templated
        .iter()
        .map(|m| {
            let ns = m
                .template_namespace
                .as_deref()
                .or(spec.namespace.as_deref())
                .or(namespace)
                .unwrap_or("-");
            format!(
                "spec.analysis.metrics[{}] {}: MetricTemplate {ns}/{}, rendered when applied",
                m.index, m.name, m.template
            )
        })
        .collect();
    let environment = match (spec.namespace.as_deref(), namespace) {
        (Some(ns), Some(env)) if ns != env => anyhow::bail!(
            "{}: metadata.namespace {ns:?} differs from -n {env:?}",
            file.display()
        ),
        (Some(ns), _) | (None, Some(ns)) => Some(ns.to_string()),
        (None, None) => None,
    };
    let target = format!("{}/{}", spec.target.kind, spec.target.name);
    if fmt.is_table() {
        println!("canary {} is valid (dry run: nothing was sent)", spec.name);
        println!(
            "  environment: {}",
            environment
                .as_deref()
                .unwrap_or("- (give -n ENV when applying)")
        );
        println!("  target entity: {target}");
        println!(
            "  analysis: every {} ms, threshold {}",
            spec.analysis.interval_ms, spec.analysis.threshold
        );
        for t in &templated {
            println!("  {t}");
        }
        for f in &ignored {
            println!("  warning: {f}");
        }
        return Ok(());
    }
    print(
        fmt,
        &json!({
            "valid": true,
            "name": spec.name,
            "environment": environment,
            "target": target,
            "spec": serde_json::to_value(&spec)?,
            "templated_metrics": templated,
            "ignored": ignored,
        }),
        &["valid", "name", "environment", "target"],
    )
}

/// An event's age as `kubectl describe` shows it: `42s`, or `3m (x5 over 10m)` for a repeated
/// one.
fn age(event: &CanaryEventView, now_ms: i64) -> String {
    let since = |time: &str| {
        super::timeparse::parse_time(time)
            .ok()
            .map(|t| short_duration((now_ms - t.ms()) / 1000))
    };
    let last = since(&event.last_timestamp).unwrap_or_else(|| "-".into());
    match since(&event.first_timestamp) {
        Some(first) if event.count > 1 => format!("{last} (x{} over {first})", event.count),
        _ => last,
    }
}

/// `42s`, `3m`, `5h`, `2d`.
fn short_duration(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..=119 => format!("{s}s"),
        120..=7_199 => format!("{}m", s / 60),
        7_200..=172_799 => format!("{}h", s / 3_600),
        _ => format!("{}d", s / 86_400),
    }
}

/// Polls the canary until it is promoted (exit 0), failed, or the timeout passes.
async fn wait(
    client: &FailoverClient,
    id: &str,
    condition: &str,
    timeout: &str,
) -> anyhow::Result<()> {
    if condition != "promoted" && condition != "condition=promoted" {
        anyhow::bail!("--for {condition:?}: only `promoted` can be waited for");
    }
    let timeout_ms = parse_duration(timeout).map_err(|e| anyhow::anyhow!("--timeout: {e}"))?;
    let timeout = Duration::from_millis(u64::try_from(timeout_ms).unwrap_or(0));
    let started = Instant::now();
    let deadline = started + timeout;
    // Progress on a terminal only: a script sees the verdict line and nothing else.
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    loop {
        let v = ask(client, &GetCanary(id.to_string()), FRESH).await?;
        let phase = v.status.as_str();
        let block = v.status_block.as_ref();
        if terminal {
            eprint!(
                "\r\x1b[2Kwaiting for canary {id}: {phase}, weight {}%, failed checks {} ({}s)",
                v.weight,
                json!(block.map(|b| b.failed_checks)),
                started.elapsed().as_secs()
            );
        }
        if v.promoted && phase == "Succeeded" {
            if terminal {
                eprintln!();
            }
            println!("canary {id} promoted");
            return Ok(());
        }
        if terminal && (phase == "Failed" || Instant::now() >= deadline) {
            eprintln!();
        }
        if phase == "Failed" {
            // As JSON text: quoted, or `null` when the canary has no condition yet.
            let message = block.and_then(|b| b.conditions.first()).map(|c| &c.message);
            anyhow::bail!("canary {id} failed: {}", json!(message));
        }
        if Instant::now() >= deadline {
            anyhow::bail!("canary {id}: still {phase} after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

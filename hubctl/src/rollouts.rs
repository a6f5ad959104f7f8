//! `hubctl env label`, `hubctl rollout-policy …` and `hubctl rollout …` (issue 20,
//! docs/FLEET.md): environment labels, a product's rollout policy (waves with selectors,
//! soak, `maxParallel`, `onFailure`), and a release's rollout across the fleet: its status
//! wave by wave, and the operator's promote-wave, halt and resume (audited, role-checked by
//! the hub like every write).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use hub_engine::Command;
use serde_json::{json, Value};

use super::args::{read_file, ActorArg, ReadArgs, WatchArgs};
use super::calls::{ask, submit_and_print};
use super::output::{print_answer, print_list, table, Format};
use hub_client::answer::{
    GetRolloutPolicy, GetRolloutStatus, ListRolloutPolicies, RolloutStatusView, WaveView,
};
use hub_client::FailoverClient;

/// What `rollout-policy apply --dry-run -o json` prints: the policy as it would be applied
/// (the fields of a rollout policy's answer that a file gives).
#[derive(serde::Serialize)]
struct DryRunPolicy {
    product: String,
    products: Vec<String>,
    waves: Vec<WaveView>,
}

/// `hubctl rollout-policy …`.
#[derive(Subcommand, Debug)]
pub enum RolloutPolicyCmd {
    /// Create or replace a product's rollout policy from its YAML (docs/FLEET.md).
    Apply {
        /// The policy.
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// Validate here and show the waves; send nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// List the policies, or show the one governing a product (with `-o yaml` its YAML).
    Get {
        /// A product (`group:name`) of the policy's group; omit to list.
        product: Option<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Delete a product's rollout policy (and what was committed about its rollouts).
    Delete {
        /// The policy's product (`group:name`).
        product: String,
    },
}

/// `hubctl rollout …`.
#[derive(Subcommand, Debug)]
pub enum RolloutCmd {
    /// A release's rollout wave by wave: environments, entities, what each runs, health,
    /// canary phase, soak and halt.
    Status {
        /// A product (`group:name`) under a rollout policy.
        product: String,
        /// The release.
        version: String,
        #[command(flatten)]
        read: ReadArgs,
        #[command(flatten)]
        watch: WatchArgs,
    },
    /// Let the release's current wave pass now, without waiting for its soak.
    PromoteWave {
        /// A product of the policy's group.
        product: String,
        /// The release.
        version: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Halt the release's rollout: no new plan to it until it is resumed.
    Halt {
        /// A product of the policy's group.
        product: String,
        /// The release.
        version: String,
        /// Why (required; audited).
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Resume a halted rollout; the failures that halted it do not halt it again.
    Resume {
        /// A product of the policy's group.
        product: String,
        /// The release.
        version: String,
        #[command(flatten)]
        actor: ActorArg,
    },
}

/// Parses `KEY=VALUE` (set) and `KEY-` (remove), as `kubectl label` does.
pub fn parse_label_changes(args: &[String]) -> anyhow::Result<BTreeMap<String, Option<String>>> {
    if args.is_empty() {
        anyhow::bail!("labels: give at least one KEY=VALUE (set) or KEY- (remove)");
    }
    let mut changes = BTreeMap::new();
    for (i, a) in args.iter().enumerate() {
        let (key, value) = match (a.split_once('='), a.strip_suffix('-')) {
            (Some((k, v)), _) => (k, Some(v.to_string())),
            (None, Some(k)) => (k, None),
            (None, None) => {
                anyhow::bail!("labels[{i}]: {a:?} is neither KEY=VALUE (set) nor KEY- (remove)")
            }
        };
        if changes.insert(key.to_string(), value).is_some() {
            anyhow::bail!("labels[{i}]: label {key:?} is named twice");
        }
    }
    Ok(changes)
}

/// `hubctl env label ENV KEY=VALUE… KEY-…`.
pub async fn label(
    client: &FailoverClient,
    environment: String,
    labels: &[String],
    fmt: Format,
) -> anyhow::Result<()> {
    let labels = parse_label_changes(labels)?;
    let command = Command::SetEnvironmentLabels {
        environment,
        labels,
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// Runs a `hubctl rollout-policy` command.
pub async fn policy(
    client: &FailoverClient,
    cmd: RolloutPolicyCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        RolloutPolicyCmd::Apply { file, dry_run } => {
            let yaml = read_file(&file, "rollout policy")?;
            if dry_run {
                let spec =
                    hub_engine::rollout_policy::parse_rollout_policy(&yaml).map_err(|errors| {
                        anyhow::anyhow!("{}: invalid rollout policy:\n{errors}", file.display())
                    })?;
                let out = DryRunPolicy {
                    product: spec.product,
                    products: spec.products,
                    waves: spec.waves.iter().map(WaveView::from).collect(),
                };
                if fmt.is_table() {
                    println!(
                        "rollout policy of {} is valid (dry run: nothing was sent)",
                        out.product
                    );
                    let rows: Vec<Value> = out
                        .waves
                        .iter()
                        .map(|w| {
                            json!({"WAVE": w.name, "ENVIRONMENTS": w.environments,
                            "LABELS": w.labels, "SOAK MS": w.soak_ms,
                            "MAX PARALLEL": w.max_parallel, "ON FAILURE": w.on_failure})
                        })
                        .collect();
                    return table(
                        &rows,
                        &[
                            "WAVE",
                            "ENVIRONMENTS",
                            "LABELS",
                            "SOAK MS",
                            "MAX PARALLEL",
                            "ON FAILURE",
                        ],
                    );
                }
                return print_answer(fmt, &out);
            }
            Command::ApplyRolloutPolicy { yaml }
        }
        RolloutPolicyCmd::Get {
            product: None,
            read,
        } => {
            let v = ask(client, &ListRolloutPolicies, read).await?;
            return print_list(
                fmt,
                &v.policies,
                &["PRODUCT", "GROUP", "WAVES", "UPDATED"],
                |p| {
                    let waves: Vec<&str> = p.waves.iter().map(|w| w.name.as_str()).collect();
                    json!({"PRODUCT": p.product, "GROUP": p.products, "WAVES": waves.join(" -> "),
                        "UPDATED": p.updated})
                },
            );
        }
        RolloutPolicyCmd::Get {
            product: Some(product),
            read,
        } => {
            let v = ask(client, &GetRolloutPolicy(product), read).await?;
            if fmt.is_table() {
                println!("{}", v.yaml.as_deref().unwrap_or_default().trim_end());
                return Ok(());
            }
            return print_answer(fmt, &v);
        }
        RolloutPolicyCmd::Delete { product } => Command::DeleteRolloutPolicy { product },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// Runs a `hubctl rollout` command.
pub async fn rollout(client: &FailoverClient, cmd: RolloutCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        RolloutCmd::Status {
            product,
            version,
            read,
            ..
        } => {
            let v = ask(
                client,
                &GetRolloutStatus {
                    product: product.clone(),
                    version: version.clone(),
                },
                read,
            )
            .await
            .with_context(|| format!("rollout of {product} {version}"))?;
            return print_status(&v, fmt);
        }
        RolloutCmd::PromoteWave {
            product,
            version,
            actor,
        } => Command::PromoteWave {
            product,
            version,
            actor: actor.name(),
        },
        RolloutCmd::Halt {
            product,
            version,
            reason,
            actor,
        } => Command::HaltRollout {
            product,
            version,
            reason,
            actor: actor.name(),
        },
        RolloutCmd::Resume {
            product,
            version,
            actor,
        } => Command::ResumeRollout {
            product,
            version,
            actor: actor.name(),
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// The status as a header line, one row per wave, then one row per entity.
fn print_status(v: &RolloutStatusView, fmt: Format) -> anyhow::Result<()> {
    if !fmt.is_table() {
        return print_answer(fmt, v);
    }
    let halted = match &v.halted {
        None => "rolling".to_string(),
        Some(h) => format!("HALTED at {}: {}", h.at, h.cause),
    };
    println!("rollout of {} {} ({halted})", v.policy, v.version);
    let rows: Vec<Value> = v
        .waves
        .iter()
        .map(|w| {
            json!({"WAVE": w.wave, "STATE": w.state,
                "DONE": format!("{}/{}", w.done, w.entities_total),
                "IN FLIGHT": w.in_flight, "SOAK UNTIL": w.soak_until})
        })
        .collect();
    table(&rows, &["WAVE", "STATE", "DONE", "IN FLIGHT", "SOAK UNTIL"])?;
    println!();
    let rows: Vec<Value> = v
        .waves
        .iter()
        .flat_map(|w| {
            w.entities.iter().map(move |e| {
                json!({"WAVE": w.wave, "ENVIRONMENT": e.environment, "ENTITY": e.entity,
                    "PRODUCT": e.product, "RUNS": e.runs, "HEALTH": e.health,
                    "CANARY": e.canary, "STATE": e.state})
            })
        })
        .collect();
    table(
        &rows,
        &[
            "WAVE",
            "ENVIRONMENT",
            "ENTITY",
            "PRODUCT",
            "RUNS",
            "HEALTH",
            "CANARY",
            "STATE",
        ],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_changes_set_and_remove_and_refuse_what_is_neither() {
        let args = ["region=eu".to_string(), "tier-".to_string()];
        let c = parse_label_changes(&args).unwrap();
        assert_eq!(c["region"], Some("eu".to_string()));
        assert_eq!(c["tier"], None);
        let e = parse_label_changes(&["region".to_string()]).unwrap_err();
        assert!(e.to_string().contains("labels[0]"), "{e}");
        let e = parse_label_changes(&["a=1".to_string(), "a-".to_string()]).unwrap_err();
        assert!(e.to_string().contains("named twice"), "{e}");
        assert!(parse_label_changes(&[]).is_err());
    }
}

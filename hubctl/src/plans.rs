//! `hubctl plan …` and the plan-related entity views: `entity explain` (SPEC P3's four
//! questions) and `entity activity`.

use clap::{ArgGroup, Subcommand};
use hub_engine::command::CancelTarget;
use hub_engine::Command;
use serde_json::{json, Value};

use super::args::{ActorArg, ReadArgs};
use super::calls::{ask, resolve, submit};
use super::output::{
    or_dash, print, print_answer, print_insecure_registries, print_list, table, Format,
};
use super::timeparse::parse_duration;
use hub_client::answer::{
    Explain, FailureView, GetActivity, GetPlan, ListPlans, MeetsConstraints, PlanView,
};
use hub_client::FailoverClient;

/// `hubctl plan …`
#[derive(Subcommand, Debug)]
pub enum PlanCmd {
    /// List plans, newest first.
    List {
        /// Only this environment.
        #[arg(long = "env", value_name = "ENV")]
        environment: Option<String>,
        /// Only this entity: ENV/NAME, ENV/KIND/NAME or eid:….
        #[arg(long, value_name = "REF")]
        entity: Option<String>,
        /// Only issued or running plans.
        #[arg(long)]
        active: bool,
        /// At most this many.
        #[arg(long, default_value_t = 100)]
        limit: usize,
        #[command(flatten)]
        watch: super::args::WatchArgs,
        #[command(flatten)]
        read: ReadArgs,
    },
    // SPEC P6
    /// Show one plan: its record, tasks, failure and the agent's output.
    Get {
        /// The plan's id (p-…).
        id: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    // SPEC P12
    /// Cancel one plan, or every active plan of an environment or an entity.
    #[command(group(ArgGroup::new("target").required(true).args(["id", "environment", "entity"])))]
    Cancel {
        /// The plan's id (p-…).
        id: Option<String>,
        /// Every active plan of this environment.
        #[arg(long = "env", value_name = "ENV")]
        environment: Option<String>,
        /// The active plan of this entity.
        #[arg(long, value_name = "REF")]
        entity: Option<String>,
        /// Why (required; audited).
        #[arg(long)]
        reason: String,
        /// Also suppress the scope for this long (e.g. 30m), so the plan is not re-issued at once.
        #[arg(long, value_parser = parse_duration)]
        suppress_for: Option<i64>,
        #[command(flatten)]
        actor: ActorArg,
    },
}

/// Runs a `plan` command.
pub async fn run(client: &FailoverClient, cmd: PlanCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        PlanCmd::List {
            environment,
            entity,
            active,
            limit,
            read,
            ..
        } => {
            let v = ask(
                client,
                &ListPlans {
                    environment,
                    entity,
                    active,
                    limit: Some(limit),
                },
                read,
            )
            .await?;
            print_list(
                fmt,
                &v.plans,
                &["id", "entity", "kind", "from", "to", "status", "issued"],
                |p| {
                    // The last four only in `-o wide`.
                    json!({"id": p.id, "entity": p.entity, "kind": plan_kind(p),
                        "from": p.from_version, "to": p.to_version,
                        "status": p.status, "issued": p.issued,
                        "started": p.started, "ended": p.ended,
                        "reason": p.reason,
                        "failure": p.failure.as_ref().map(|f| &f.message)})
                },
            )
        }
        PlanCmd::Get { id, read } => {
            let p = ask(client, &GetPlan(id), read).await?;
            if !fmt.is_table() {
                return print_answer(fmt, &p);
            }
            print_plan(&p)
        }
        PlanCmd::Cancel {
            id,
            environment,
            entity,
            reason,
            suppress_for,
            actor,
        } => {
            let entity_id = match &entity {
                Some(r) => Some(resolve(client, r).await?),
                None => None,
            };
            let command = Command::CancelPlans {
                target: cancel_target(id, environment, entity_id)?,
                reason,
                suppress_for_ms: suppress_for,
                actor: actor.name(),
            };
            let v = submit(client, &command).await?;
            print(fmt, &json!(v), &["index", "leader", "result"])?;
            if suppress_for.is_none() {
                // SPEC P12: the orchestrator may issue the same plan again right away.
                eprintln!(
                    "hint: a cancelled plan may be issued again at once; to hold it back, cancel \
                     with --suppress-for 30m (a short manual suppression on the same scope)"
                );
            }
            Ok(())
        }
    }
}

/// A cancel target for `plan cancel`.
fn cancel_target(
    plan: Option<String>,
    environment: Option<String>,
    entity_id: Option<String>,
) -> anyhow::Result<CancelTarget> {
    match (plan, environment, entity_id) {
        (Some(p), None, None) => Ok(CancelTarget::Plan(p)),
        (None, Some(e), None) => Ok(CancelTarget::Environment(e)),
        (None, None, Some(id)) => Ok(CancelTarget::Entity(id)),
        _ => anyhow::bail!("give exactly one of PLAN_ID, --env ENV or --entity REF"),
    }
}

/// A plan's kind for tables: `command:restart` for break-glass commands.
fn plan_kind(p: &PlanView) -> String {
    match &p.command {
        Some(c) => format!("command:{c}"),
        None => p.kind.clone(),
    }
}

/// A plan's fields as `key: value` lines: `None` is a field the answer leaves out (not
/// shown), `Some(None)` one that is empty (`-`).
fn plan_fields(p: &PlanView) -> Vec<(&'static str, Option<Option<String>>)> {
    let always = |v: &str| Some(Some(v.to_string()));
    let nullable = |v: &Option<String>| Some(v.clone());
    let optional = |v: &Option<String>| v.clone().map(Some);
    vec![
        ("id", always(&p.id)),
        ("entity", always(&p.entity)),
        ("environment", always(&p.environment)),
        ("kind", always(&p.kind)),
        ("command", optional(&p.command)),
        ("actor", optional(&p.actor)),
        ("rolls_back", optional(&p.rolls_back)),
        ("status", always(&p.status)),
        ("from_version", nullable(&p.from_version)),
        ("to_version", nullable(&p.to_version)),
        ("reason", always(&p.reason)),
        ("cancel_reason", optional(&p.cancel_reason)),
        ("created", always(&p.created)),
        ("issued", always(&p.issued)),
        ("started", nullable(&p.started)),
        ("ended", nullable(&p.ended)),
        (
            "secrets_revision",
            p.secrets_revision.map(|r| Some(r.to_string())),
        ),
        ("from_config_sha256", p.from_config_sha256.clone()),
    ]
}

fn print_plan(p: &PlanView) -> anyhow::Result<()> {
    for (key, value) in plan_fields(p) {
        if let Some(value) = value {
            println!("{key}: {}", or_dash(value.as_deref()));
        }
    }
    let artifacts = p.artifacts.as_deref().unwrap_or_default();
    if !artifacts.is_empty() {
        println!("artifacts:");
        for a in artifacts {
            println!("  {} (sha256 {})", a.uri, a.sha256);
        }
    }
    let tasks = p.tasks.as_deref().unwrap_or_default();
    println!("tasks:");
    if tasks.is_empty() {
        println!("  none");
    } else {
        let rows: Vec<Value> = tasks
            .iter()
            .map(|t| serde_json::to_value(t).map_err(anyhow::Error::from))
            .collect::<anyhow::Result<_>>()?;
        table(
            &rows,
            &["name", "state", "attempt", "started", "ended", "error"],
        )?;
    }
    print_failure(p.failure.as_ref());
    if let Some(config) = p
        .to_config
        .as_ref()
        .and_then(|c| c.as_deref())
        .filter(|c| !c.trim().is_empty())
    {
        println!("config:");
        for line in config.lines() {
            println!("  {line}");
        }
    }
    match p.output.as_deref().filter(|o| !o.is_empty()) {
        Some(out) => {
            println!("output:");
            for line in out.lines() {
                println!("  {line}");
            }
        }
        None => println!("output: -"),
    }
    Ok(())
}

/// A plan's failure: its stage and message, and what never became ready or did not validate.
fn print_failure(failure: Option<&FailureView>) {
    let Some(f) = failure else {
        println!("failure: -");
        return;
    };
    println!("failure:");
    println!("  stage: {}", f.stage);
    println!("  message: {}", f.message);
    for (list, label) in [
        (&f.not_ready, "never became ready"),
        (&f.validation_errors, "validation errors"),
    ] {
        if !list.is_empty() {
            println!("  {label}:");
            for x in list {
                println!("    - {x}");
            }
        }
    }
}

/// `entity explain REF`: SPEC P3's four questions, then every constraint.
pub async fn explain(
    client: &FailoverClient,
    reference: &str,
    read: ReadArgs,
    fmt: Format,
) -> anyhow::Result<()> {
    let v = ask(client, &Explain(reference.to_string()), read).await?;
    if !fmt.is_table() {
        return print_answer(fmt, &v);
    }
    println!("entity: {}", v.entity);
    print_insecure_registries(&v.insecure_registries);
    println!("evaluated at: {}", v.evaluated_at);
    println!("summary: {}", v.summary);
    match &v.candidate {
        None => println!("candidate: none"),
        Some(c) => println!(
            "candidate: {} {} -> {} ({})",
            c.kind,
            or_dash(c.from_version.as_deref()),
            or_dash(c.to_version.as_deref()),
            c.reason
        ),
    }
    let meets = match v.meets_constraints {
        MeetsConstraints::Yes => "yes".to_string(),
        MeetsConstraints::No => match &v.may_clear_at {
            Some(t) => format!("no (may clear at {t})"),
            None => "no".to_string(),
        },
        MeetsConstraints::Issued => "yes (already issued)".to_string(),
        MeetsConstraints::Undecided => "- (no candidate)".to_string(),
    };
    println!("meets constraints: {meets}");
    match &v.issued {
        None => println!("issued: no"),
        Some(issued) => println!("issued: plan {} ({})", issued.plan, issued.status),
    }
    match &v.last_execution {
        None => println!("last execution: none"),
        Some(last) => {
            let failure = last
                .failure
                .as_ref()
                .map(|f| format!(": {f}"))
                .unwrap_or_default();
            println!(
                "last execution: plan {} {} {}{failure}",
                last.plan, last.kind, last.status
            );
        }
    }
    for s in &v.skipped {
        println!("skipped: {s}");
    }
    let rows: Vec<Value> = v
        .constraints
        .iter()
        .map(|c| {
            json!({"constraint": c.constraint,
                "passed": if c.passed { "yes" } else { "no" },
                "reason": c.reason, "may-clear-at": c.may_clear_at})
        })
        .collect();
    if rows.is_empty() {
        if v.issued.is_none() {
            println!("constraints: none (no candidate)");
        } else {
            println!("constraints: not re-checked while the plan is active");
        }
        return Ok(());
    }
    println!();
    table(&rows, &["constraint", "passed", "reason", "may-clear-at"])
}

/// `entity activity REF`: the entity's timeline, newest first.
pub async fn activity(
    client: &FailoverClient,
    reference: &str,
    read: ReadArgs,
    fmt: Format,
) -> anyhow::Result<()> {
    let v = ask(client, &GetActivity(reference.to_string()), read).await?;
    if !fmt.is_table() {
        return print_answer(fmt, &v);
    }
    print_list(fmt, &v.entries, &["time", "kind", "message"], |e| json!(e))
}

//! `hubctl plan …` and the plan-related entity views: `entity explain` (SPEC P3's four
//! questions) and `entity activity`.

use clap::{ArgGroup, Subcommand};
use hub_engine::command::CancelTarget;
use hub_engine::Command;
use serde_json::{json, Value};

use super::args::{ActorArg, ReadArgs};
use super::calls::{query, resolve, submit};
use super::output::{items, print, print_insecure_registries, print_list, table, Format};
use super::timeparse::parse_duration;
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
            let v = query(
                client,
                json!({"query": "plans", "environment": environment, "entity": entity,
                    "active": active, "limit": limit}),
                read,
            )
            .await?;
            print_list(
                fmt,
                items(&v, "plans"),
                &["id", "entity", "kind", "from", "to", "status", "issued"],
                |p| {
                    // The last four only in `-o wide`.
                    json!({"id": p["id"], "entity": p["entity"], "kind": plan_kind(p),
                        "from": p["from_version"], "to": p["to_version"],
                        "status": p["status"], "issued": p["issued"],
                        "started": p["started"], "ended": p["ended"],
                        "reason": p["reason"], "failure": p["failure"]["message"]})
                },
            )
        }
        PlanCmd::Get { id, read } => {
            let p = query(client, json!({"query": "plan", "id": id}), read).await?;
            if !fmt.is_table() {
                return print(fmt, &p, &[]);
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
            print(fmt, &v, &["index", "leader", "result"])?;
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
fn plan_kind(p: &Value) -> Value {
    match p["command"].as_str() {
        Some(c) => json!(format!("command:{c}")),
        None => p["kind"].clone(),
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn print_plan(p: &Value) -> anyhow::Result<()> {
    for key in [
        "id",
        "entity",
        "environment",
        "kind",
        "command",
        "actor",
        "rolls_back",
        "status",
        "from_version",
        "to_version",
        "reason",
        "cancel_reason",
        "created",
        "issued",
        "started",
        "ended",
        "secrets_revision",
        "from_config_sha256",
    ] {
        if key == "kind" || p.get(key).is_some() {
            println!("{key}: {}", text(&p[key]));
        }
    }
    let artifacts = items(p, "artifacts");
    if !artifacts.is_empty() {
        println!("artifacts:");
        for a in artifacts {
            println!("  {} (sha256 {})", text(&a["uri"]), text(&a["sha256"]));
        }
    }
    let tasks = items(p, "tasks");
    println!("tasks:");
    if tasks.is_empty() {
        println!("  none");
    } else {
        table(
            &tasks,
            &["name", "state", "attempt", "started", "ended", "error"],
        )?;
    }
    match p.get("failure") {
        Some(f) if !f.is_null() => {
            println!("failure:");
            println!("  stage: {}", text(&f["stage"]));
            println!("  message: {}", text(&f["message"]));
            for (key, label) in [
                ("not_ready", "never became ready"),
                ("validation_errors", "validation errors"),
            ] {
                let list = items(f, key);
                if !list.is_empty() {
                    println!("  {label}:");
                    for x in list {
                        println!("    - {}", text(&x));
                    }
                }
            }
        }
        _ => println!("failure: -"),
    }
    if let Some(config) = p["to_config"].as_str().filter(|c| !c.trim().is_empty()) {
        println!("config:");
        for line in config.lines() {
            println!("  {line}");
        }
    }
    match p["output"].as_str().filter(|o| !o.is_empty()) {
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

/// `entity explain REF`: SPEC P3's four questions, then every constraint.
pub async fn explain(
    client: &FailoverClient,
    reference: &str,
    read: ReadArgs,
    fmt: Format,
) -> anyhow::Result<()> {
    let v = query(
        client,
        json!({"query": "explain", "entity": reference}),
        read,
    )
    .await?;
    if !fmt.is_table() {
        return print(fmt, &v, &[]);
    }
    println!("entity: {}", text(&v["entity"]));
    print_insecure_registries(&v);
    println!("evaluated at: {}", text(&v["evaluated_at"]));
    println!("summary: {}", text(&v["summary"]));
    let c = &v["candidate"];
    if c.is_null() {
        println!("candidate: none");
    } else {
        println!(
            "candidate: {} {} -> {} ({})",
            text(&c["kind"]),
            text(&c["from_version"]),
            text(&c["to_version"]),
            text(&c["reason"])
        );
    }
    let meets = match &v["meets_constraints"] {
        Value::Bool(true) => "yes".to_string(),
        Value::Bool(false) => match v["may_clear_at"].as_str() {
            Some(t) => format!("no (may clear at {t})"),
            None => "no".to_string(),
        },
        Value::String(s) if s == "issued" => "yes (already issued)".to_string(),
        Value::Null => "- (no candidate)".to_string(),
        other => text(other),
    };
    println!("meets constraints: {meets}");
    let issued = &v["issued"];
    if issued.is_null() {
        println!("issued: no");
    } else {
        println!(
            "issued: plan {} ({})",
            text(&issued["plan"]),
            text(&issued["status"])
        );
    }
    let last = &v["last_execution"];
    if last.is_null() {
        println!("last execution: none");
    } else {
        let failure = last["failure"]
            .as_str()
            .map(|f| format!(": {f}"))
            .unwrap_or_default();
        println!(
            "last execution: plan {} {} {}{failure}",
            text(&last["plan"]),
            text(&last["kind"]),
            text(&last["status"])
        );
    }
    let skipped = items(&v, "skipped");
    for s in &skipped {
        println!("skipped: {}", text(s));
    }
    let rows: Vec<Value> = items(&v, "constraints")
        .iter()
        .map(|c| {
            json!({"constraint": c["constraint"],
                "passed": if c["passed"] == true { "yes" } else { "no" },
                "reason": c["reason"], "may-clear-at": c["may_clear_at"]})
        })
        .collect();
    if rows.is_empty() {
        if issued.is_null() {
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
    let v = query(
        client,
        json!({"query": "activity", "entity": reference}),
        read,
    )
    .await?;
    if !fmt.is_table() {
        return print(fmt, &v, &[]);
    }
    print_list(
        fmt,
        items(&v, "entries"),
        &["time", "kind", "message"],
        Value::clone,
    )
}

//! `chaos`: fault injection against a hub of real `hub-node` processes with checked
//! histories (SPEC R6). See `chaos run --help` and the README's "Chaos testing".

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hub_chaos::runner::{self, faults, Config, Report};

#[derive(Parser)]
#[command(
    name = "chaos",
    about = "Kill, pause and restart hub nodes mid-workload; check the history"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Start a hub, run the register workload under seeded faults, heal, check, report.
    Run {
        /// 3 or 5 nodes.
        #[arg(long, default_value_t = 3)]
        nodes: u64,
        /// How long the workload and the faults run, e.g. 180s or 10m.
        #[arg(long, default_value = "180s")]
        duration: String,
        /// The schedule's seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Faults to draw from: kill-leader, kill-any, pause, restart-all, partition (see
        /// --network), latency (the agents' links to the hub), kill-agent and pause-agent
        /// (an agent of the rollout workload, mid-task), clock-skew (a node's wall clock;
        /// needs a chaos build of hub-node).
        #[arg(long, default_value = "kill-leader,kill-any,pause,restart-all")]
        faults: String,
        /// Register keys.
        #[arg(long, default_value_t = 8)]
        keys: usize,
        /// Concurrent register clients.
        #[arg(long, default_value_t = 6)]
        clients: usize,
        /// Output directory (the cluster, history.json, report.json); must not hold a
        /// previous run.
        #[arg(long)]
        out: PathBuf,
        /// Replay the run a report.json describes (seed, nodes, faults, duration, workload).
        #[arg(long)]
        replay: Option<PathBuf>,
        /// Sim agents of the rollout workload (releases and module updates), one environment
        /// each; 0 leaves them out.
        #[arg(long, default_value_t = 2)]
        agents: usize,
        /// Leave out the process agent with the demo service and its canary revisions.
        #[arg(long)]
        no_canary: bool,
        /// How partitions are made: netns (root, iproute2, nftables), transport (a chaos
        /// build of hub-node: --features hub-node/chaos-faults), or auto (netns if possible).
        #[arg(long, default_value = "auto")]
        network: String,
    },
    /// Run the checkers on a saved history.json (exit 1 on a violation).
    Check {
        /// The history.
        history: PathBuf,
    },
}

fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .with_context(|| format!("--duration: {s:?} is not like 180s or 10m"))?;
    Ok(match unit {
        "s" | "" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => anyhow::bail!("--duration: {s:?} is not like 180s or 10m"),
    })
}

fn print(report: &Report) {
    println!(
        "\nchaos report (seed {}, {} nodes)",
        report.seed, report.nodes
    );
    println!("  mechanism             {}", report.mechanism);
    for (kind, n) in &report.faults_by_kind {
        println!("  faults {kind:<15}{n}");
    }
    println!("  operations            {}", report.operations);
    println!("  acknowledged writes   {}", report.acknowledged_writes);
    println!("  unknown outcomes      {}", report.unknown);
    println!("  lost                  {}", report.check.summary.lost);
    println!(
        "  duplicates            {}",
        report.check.summary.duplicates
    );
    println!(
        "  longest without a committed write  {} ms",
        report.longest_unavailable_ms
    );
    println!(
        "  failover p50 / p99    {} / {} ms",
        report.failover_p50_ms.map_or("-".into(), |v| v.to_string()),
        report.failover_p99_ms.map_or("-".into(), |v| v.to_string())
    );
    if let Some(a) = &report.partition_answers {
        println!(
            "  waits during partitions  p50 {} / p99 {} / max {} ms over {} operations",
            a.p50_ms, a.p99_ms, a.max_ms, a.operations
        );
    }
    if let Some(r) = &report.rollouts {
        println!("  agents                {}", r.agents);
        println!("  releases published    {}", r.releases_published);
        println!(
            "  module versions       {} ({} change requests approved)",
            r.module_versions, r.change_requests_approved
        );
        println!(
            "  canary revisions      {} ({} promoted, {} rolled back)",
            r.canary_revisions, r.canary_promoted, r.canary_rolled_back
        );
        println!(
            "  plans executed        {} ({} failed-plan suppressions lifted)",
            r.plans_executed, r.suppressions_lifted
        );
        println!(
            "  hub plans             {}",
            r.hub_plans_by_status
                .iter()
                .map(|(s, n)| format!("{n} {s}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "  rollouts terminal     {} of {}",
            r.rollouts_terminal, r.rollouts
        );
        let t = &report.check.entry_times;
        println!(
            "  entry times           {} plans, {} against their first start (max ahead {} ms; bound {} ms)",
            t.plans,
            t.checked_against_agents,
            t.max_ahead_ms.map_or("-".to_string(), |m| m.to_string()),
            hub_chaos::check::ENTRY_TIME_BOUND_MS
        );
        let f = &r.agent_faults;
        if f.kills + f.pauses > 0 {
            println!(
                "  agent faults          {} kills ({} mid-task), {} pauses ({} mid-task)",
                f.kills, f.kills_mid_task, f.pauses, f.pauses_mid_task
            );
        }
        for n in &r.notes {
            println!("    note: {n}");
        }
    }
    println!(
        "  verdict               {}",
        if report.check.ok { "OK" } else { "VIOLATIONS" }
    );
    for v in report.check.messages.iter().take(20) {
        println!("    {v}");
    }
    println!("  replay: chaos run --replay report.json --out NEW_DIR");
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    // On Ctrl-C or SIGTERM the run is dropped, and with it every process, namespace and link
    // it created (their owners clean up on drop).
    let interrupted = async {
        use tokio::signal::unix::{signal, SignalKind};
        match (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) {
            (Ok(mut int), Ok(mut term)) => {
                tokio::select! {
                    _ = int.recv() => "SIGINT",
                    _ = term.recv() => "SIGTERM",
                }
            }
            _ => std::future::pending().await,
        }
    };
    let result = tokio::select! {
        r = real_main() => r,
        sig = interrupted => Err(anyhow::anyhow!("interrupted by {sig}; everything the run started was stopped")),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("chaos: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn real_main() -> anyhow::Result<bool> {
    let command = Cli::parse().command;
    // The rollout workload's flags (separate from the register workload's tuple below).
    let (agents, no_canary, network) = match &command {
        Cmd::Run {
            agents,
            no_canary,
            network,
            ..
        } => (
            *agents,
            *no_canary,
            network.parse().map_err(anyhow::Error::msg)?,
        ),
        Cmd::Check { .. } => (0, true, runner::NetMode::Auto),
    };
    let (nodes, duration, seed, fault_list, keys, clients, out, replay) = match command {
        Cmd::Check { history } => {
            let h: hub_chaos::check::History = serde_json::from_slice(
                &std::fs::read(&history).with_context(|| history.display().to_string())?,
            )
            .with_context(|| format!("{}: not a chaos history", history.display()))?;
            let report = hub_chaos::check::check_all(&h);
            println!("{}", serde_json::to_string_pretty(&report.summary)?);
            for m in &report.messages {
                println!("{m}");
            }
            return Ok(report.ok);
        }
        Cmd::Run {
            nodes,
            duration,
            seed,
            faults,
            keys,
            clients,
            out,
            replay,
            ..
        } => (nodes, duration, seed, faults, keys, clients, out, replay),
    };
    let hubctl = std::env::current_exe()?.with_file_name("hubctl");
    let mut cfg = Config {
        nodes,
        duration: parse_duration(&duration)?,
        seed,
        faults: faults::parse_faults(&fault_list).map_err(anyhow::Error::msg)?,
        keys: keys.max(1),
        clients: clients.max(1),
        out,
        hubctl,
        agents,
        canary: !no_canary,
        network,
    };
    if let Some(path) = replay {
        let v: serde_json::Value = serde_json::from_slice(
            &std::fs::read(&path).with_context(|| path.display().to_string())?,
        )
        .with_context(|| format!("{}: not a chaos report", path.display()))?;
        let field = |k: &str| {
            v.get(k)
                .cloned()
                .with_context(|| format!("{}: no {k:?}", path.display()))
        };
        cfg.seed = serde_json::from_value(field("seed")?)?;
        cfg.nodes = serde_json::from_value(field("nodes")?)?;
        cfg.faults = serde_json::from_value(field("faults")?)?;
        cfg.duration = Duration::from_millis(serde_json::from_value(field("duration_ms")?)?);
        cfg.keys = serde_json::from_value(field("keys")?)?;
        cfg.clients = serde_json::from_value(field("clients")?)?;
        // Reports from before the rollout workload have neither: no agents then.
        cfg.agents = v.get("agents").and_then(|a| a.as_u64()).unwrap_or(0) as usize;
        cfg.canary = v.get("canary").and_then(|c| c.as_bool()).unwrap_or(false);
    }
    let report = runner::run(cfg).await?;
    print(&report);
    Ok(report.check.ok)
}

//! `chaos`: fault injection against a hub of real `hub-node` processes with checked
//! histories (SPEC R6). See `chaos run --help` and the README's "Chaos testing".

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use hub_chaos::runner::{self, faults, Config, Report};
use serde::Deserialize;

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
        #[command(flatten)]
        workload: Workload,
        /// The schedule's seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Replay the run a report.json describes (seed, nodes, faults, duration, workload).
        #[arg(long)]
        replay: Option<PathBuf>,
    },
    /// Run seeds A..B (inclusive) one after another, each in OUT/seed-N, and print one table;
    /// exit 1 when any seed has a violation.
    Sweep {
        #[command(flatten)]
        workload: Workload,
        /// The seeds, `A..B` (inclusive, A ≤ B).
        #[arg(long)]
        seeds: String,
    },
    /// Run the checkers on a saved history.json (exit 1 on a violation).
    Check {
        /// The history.
        history: PathBuf,
    },
}

/// What a run does, whatever its seed.
#[derive(clap::Args)]
struct Workload {
    /// 3 or 5 nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// How long the workload and the faults run, e.g. 180s or 10m.
    #[arg(long, default_value = "180s")]
    duration: String,
    /// Faults to draw from: kill-leader, kill-any, pause, restart-all, partition (see
    /// --network), latency (the agents' links to the hub), kill-agent and pause-agent
    /// (an agent of the rollout workload, mid-task), clock-skew (a node's wall clock;
    /// needs a chaos build of hub-node), upgrade (the next node of --upgrade-from restarted
    /// on this build).
    #[arg(long, default_value = "kill-leader,kill-any,pause,restart-all")]
    faults: String,
    /// Register keys.
    #[arg(long, default_value_t = 8)]
    keys: usize,
    /// Concurrent register clients.
    #[arg(long, default_value_t = 6)]
    clients: usize,
    /// Output directory (the cluster, history.json, report.json; for a sweep one
    /// directory per seed); must not hold a previous run.
    #[arg(long)]
    out: PathBuf,
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
    /// A previous release's binaries (a directory with its `hub-node`): the nodes start on
    /// it, and each `upgrade` fault restarts the next of them on this build
    /// (scripts/upgrade-test.sh).
    #[arg(long, value_name = "DIR")]
    upgrade_from: Option<PathBuf>,
}

impl Workload {
    /// The run's configuration for `seed`, its output in `out`.
    fn config(&self, seed: u64, out: PathBuf) -> anyhow::Result<Config> {
        Ok(Config {
            nodes: self.nodes,
            duration: parse_duration(&self.duration)?,
            seed,
            faults: faults::parse_faults(&self.faults).map_err(anyhow::Error::msg)?,
            keys: self.keys.max(1),
            clients: self.clients.max(1),
            out,
            hubctl: std::env::current_exe()?.with_file_name("hubctl"),
            agents: self.agents,
            canary: !self.no_canary,
            network: self.network.parse().map_err(anyhow::Error::msg)?,
            upgrade_from: self.upgrade_from.clone(),
        })
    }
}

/// Parses `--seeds A..B`: both numbers, A ≤ B.
fn parse_seeds(s: &str) -> anyhow::Result<std::ops::RangeInclusive<u64>> {
    let bad = || anyhow::anyhow!("--seeds: {s:?} is not like 1..20");
    let (a, b) = s.split_once("..").ok_or_else(bad)?;
    let (a, b): (u64, u64) = (
        a.trim().parse().map_err(|_| bad())?,
        b.trim().parse().map_err(|_| bad())?,
    );
    if a > b {
        anyhow::bail!("--seeds: {s:?} is reversed (the first seed must not exceed the last)");
    }
    Ok(a..=b)
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

/// The resource figures: per node, then per fault kind.
fn print_budgets(b: &hub_chaos::check::BudgetReport) {
    let cores = |m: Option<i64>| m.map_or("-".to_string(), |m| format!("{:.3}", m as f64 / 1000.0));
    for n in &b.nodes {
        println!(
            "  node {:<3} pre-fault CPU {} cores; busiest 10 s of log {} lines; log {} B/s; peak RSS {} MiB; peak fds {}",
            n.node,
            cores(n.baseline_millicores),
            n.max_log_lines_10s,
            n.log_bytes_per_s,
            n.max_rss_kib / 1024,
            n.max_fds
        );
    }
    for f in &b.faults {
        println!(
            "  budget {:<15}{} faults; spared nodes' CPU at most {} cores above pre-fault ({} judged); at most {} log lines in 10 s from a fault",
            f.fault,
            f.windows,
            cores(f.max_excess_millicores),
            f.judged,
            f.max_log_lines_10s
        );
    }
}

/// The rollout workload's part of the report.
fn print_rollouts(
    r: &hub_chaos::runner::rollouts::RolloutSummary,
    check: &hub_chaos::check::CheckReport,
) {
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
    let t = &check.entry_times;
    println!(
        "  entry times           {} plans, {} against their first start (max ahead {} ms; bound {} ms)",
        t.plans,
        t.checked_against_agents,
        t.max_ahead_ms.map_or("-".to_string(), |m| m.to_string()),
        hub_chaos::check::ENTRY_TIME_BOUND_MS
    );
    let w = &check.fleet;
    if w.releases > 0 {
        println!(
            "  fleet waves           {} releases ({} rolled out, {} halted: {} by the driver, {} before wave 2 opened), {} waves passed, {} of {} plans checked against a soak end (min margin {} ms), {} soaks ({} crossed by a leader fault)",
            w.releases,
            w.rolled_out,
            w.halted,
            r.fleet_halted_by_operator,
            w.halted_before_later_waves,
            w.waves_passed,
            w.plans_checked,
            w.plans,
            w.min_margin_ms.map_or("-".to_string(), |m| m.to_string()),
            w.soaks,
            w.soaks_crossed_by_leader_fault
        );
    }
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
        print_rollouts(r, &report.check);
    }
    print_budgets(&report.check.budgets);
    let u = &report.check.upgrade;
    if u.upgraded > 0 {
        println!(
            "  upgrade               {} nodes upgraded; the level rose {} after the last",
            u.upgraded,
            u.level_raised_ms
                .map_or("never".to_string(), |ms| format!("{ms} ms"))
        );
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
    match Cli::parse().command {
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
            Ok(report.ok)
        }
        Cmd::Run {
            workload,
            seed,
            replay,
        } => {
            let mut cfg = workload.config(seed, workload.out.clone())?;
            if let Some(path) = replay {
                replay_into(&mut cfg, &path)?;
            }
            let report = runner::run(cfg).await?;
            print(&report);
            Ok(report.check.ok)
        }
        Cmd::Sweep { workload, seeds } => sweep(&workload, parse_seeds(&seeds)?).await,
    }
}

/// Takes the seed, nodes, faults, duration and workload of the run `path` (a report.json)
/// describes.
fn replay_into(cfg: &mut Config, path: &std::path::Path) -> anyhow::Result<()> {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path).with_context(|| path.display().to_string())?)
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
    Ok(())
}

/// Runs every seed as its own `chaos run` process (a run owns process-wide state: its
/// cluster, its namespaces), each in `OUT/seed-N`, then prints one table of all of them.
async fn sweep(workload: &Workload, seeds: std::ops::RangeInclusive<u64>) -> anyhow::Result<bool> {
    // Bad flags are refused before the first run starts anything.
    workload.config(*seeds.start(), workload.out.clone())?;
    std::fs::create_dir_all(&workload.out).with_context(|| workload.out.display().to_string())?;
    let exe = std::env::current_exe()?;
    let mut rows = Vec::new();
    for seed in seeds {
        let out = workload.out.join(format!("seed-{seed}"));
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.arg("run")
            .args(["--seed", &seed.to_string()])
            .args(["--nodes", &workload.nodes.to_string()])
            .args(["--duration", &workload.duration])
            .args(["--faults", &workload.faults])
            .args(["--keys", &workload.keys.to_string()])
            .args(["--clients", &workload.clients.to_string()])
            .args(["--agents", &workload.agents.to_string()])
            .args(["--network", &workload.network])
            .arg("--out")
            .arg(&out);
        if workload.no_canary {
            cmd.arg("--no-canary");
        }
        let child = Terminated(cmd.spawn().context("start chaos run")?);
        let status = child.wait().await?;
        let report = out.join("report.json");
        let row = match std::fs::read(&report) {
            Ok(bytes) => SweepRow::of(
                seed,
                &serde_json::from_slice(&bytes)
                    .with_context(|| format!("{}: not a chaos report", report.display()))?,
            ),
            // A run that failed before checking (exit 2) wrote no report.
            Err(_) => SweepRow::failed(seed, status.code()),
        };
        rows.push(row);
    }
    println!("\n{}", SweepRow::HEADER);
    for r in &rows {
        println!("{r}");
    }
    let failed = rows.iter().filter(|r| !r.ok).count();
    println!("{} seeds, {} with violations or errors", rows.len(), failed);
    Ok(failed == 0)
}

/// A child run that gets SIGTERM when dropped (the sweep interrupted), so that it stops
/// everything it started itself, as a run does on SIGTERM.
struct Terminated(tokio::process::Child);

impl Terminated {
    async fn wait(mut self) -> anyhow::Result<std::process::ExitStatus> {
        let status = self.0.wait().await.context("wait for chaos run")?;
        Ok(status)
    }
}

impl Drop for Terminated {
    fn drop(&mut self) {
        if let Some(pid) = self.0.id().and_then(|p| i32::try_from(p).ok()) {
            // SAFETY: kill(2) on our own child's pid, not yet reaped (`id` is `None` once
            // it has been waited for).
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
    }
}

/// One line of the sweep's table.
struct SweepRow {
    seed: u64,
    /// The columns after the seed, already formatted.
    cells: Vec<String>,
    ok: bool,
}

impl SweepRow {
    const HEADER: &'static str = "| seed | faults | operations | lost | duplicates | linearizable | canary exact | entry times | rollouts terminal | fleet waves | verdict |\n|---|---|---|---|---|---|---|---|---|---|---|";

    /// The row of a run's `report.json`.
    fn of(seed: u64, r: &SweepReport) -> SweepRow {
        let n = |v: Option<u64>| v.map_or("-".to_string(), |n| n.to_string());
        let yes = |v: &Verdict| match v.ok {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        let check = &r.check;
        let ok = check.ok == Some(true);
        SweepRow {
            seed,
            cells: vec![
                r.injected.len().to_string(),
                n(r.operations),
                n(check.summary.lost),
                n(check.summary.duplicates),
                yes(&check.linearizability).into(),
                yes(&check.canary).into(),
                yes(&check.entry_times).into(),
                match &r.rollouts {
                    None => "-".into(),
                    Some(rollouts) => format!(
                        "{} of {}",
                        n(rollouts.rollouts_terminal),
                        n(rollouts.rollouts)
                    ),
                },
                fleet_cell(&check.fleet),
                if ok { "OK" } else { "VIOLATIONS" }.into(),
            ],
            ok,
        }
    }

    /// The row of a run that ended without a report.
    fn failed(seed: u64, code: Option<i32>) -> SweepRow {
        let mut cells = vec!["-".to_string(); 9];
        cells.push(format!(
            "ERROR (exit {})",
            code.map_or("signal".into(), |c| c.to_string())
        ));
        SweepRow {
            seed,
            cells,
            ok: false,
        }
    }
}

/// The fleet column: verdict, releases, plans checked against a soak end, soaks crossed by a
/// leader fault (`-` without the fleet workload).
fn fleet_cell(f: &SweepFleet) -> String {
    if f.releases == 0 {
        return "-".into();
    }
    format!(
        "{} ({} releases, {} plans, {} soaks hit)",
        if f.ok == Some(true) { "yes" } else { "NO" },
        f.releases,
        f.plans_checked,
        f.soaks_crossed_by_leader_fault
    )
}

/// What the sweep's table reads of a run's `report.json` (the runner's own [`Report`]);
/// what a report lacks (an older one, or a run without the rollout workload) shows as `-`.
#[derive(Deserialize)]
struct SweepReport {
    /// Every fault injected (only counted).
    #[serde(default)]
    injected: Vec<serde::de::IgnoredAny>,
    /// Register operations.
    operations: Option<u64>,
    /// The rollout workload's counts.
    #[serde(default)]
    rollouts: Option<SweepRollouts>,
    /// The checkers' verdict.
    #[serde(default)]
    check: SweepCheck,
}

/// The rollout counts of a report.
#[derive(Deserialize)]
struct SweepRollouts {
    /// Rollouts.
    rollouts: Option<u64>,
    /// Rollouts that reached a terminal state.
    rollouts_terminal: Option<u64>,
}

/// The checkers' verdict, as far as the table shows it.
#[derive(Default, Deserialize)]
#[serde(default)]
struct SweepCheck {
    /// The overall verdict.
    ok: Option<bool>,
    /// The register counts.
    summary: SweepSummary,
    /// The linearizability checker.
    linearizability: Verdict,
    /// The canary checker.
    canary: Verdict,
    /// The Activity entry-time checker.
    entry_times: Verdict,
    /// The fleet checker.
    fleet: SweepFleet,
}

/// Lost and duplicated register writes.
#[derive(Default, Deserialize)]
#[serde(default)]
struct SweepSummary {
    /// Acknowledged writes lost.
    lost: Option<u64>,
    /// Writes applied twice.
    duplicates: Option<u64>,
}

/// One checker's verdict.
#[derive(Default, Deserialize)]
#[serde(default)]
struct Verdict {
    /// Whether it passed.
    ok: Option<bool>,
}

/// The fleet checker's counts (all 0 without the fleet workload).
#[derive(Default, Deserialize)]
#[serde(default)]
struct SweepFleet {
    /// Its verdict.
    ok: Option<bool>,
    /// Releases checked.
    releases: u64,
    /// Plans checked against a soak end.
    plans_checked: u64,
    /// Soaks crossed by a leader fault.
    soaks_crossed_by_leader_fault: u64,
}

impl std::fmt::Display for SweepRow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "| {} | {} |", self.seed, self.cells.join(" | "))
    }
}

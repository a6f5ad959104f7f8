//! `chaos run`: a hub of real `hub-node` processes under a register workload while faults hit
//! it on a seeded schedule; then heal, wait for convergence, check the history and report.
//!
//! - [`clock`]: skewed node clocks (a chaos build's fault layer).
//! - [`cluster`]: the nodes (`hubctl dev`), signals, leader and digests.
//! - [`disk`]: the nodes' data directories on disks that fill up or fail to sync.
//! - [`register`]: the concurrent register clients and their history.
//! - [`faults`]: fault names and the seeded schedule.
//! - [`membership`]: nodes added, removed and replaced under load.
//! - [`net`]: nodes on their own hosts (network namespaces) and partitions between them.
//! - [`relay`]: the delaying relay between agents and the hub.
//! - [`resources`]: the nodes' CPU, memory, descriptors and log growth, sampled through the
//!   run for the resource budgets.
//! - [`upgrade`]: the `upgrade` fault's probes of the feature-level gate.
//! - [`rollouts`]: agents executing continuous rollouts (releases, module updates, canary
//!   revisions); their logs and the hub's records feed the plan, canary and rollout checkers.
//!
//! Everything the runner starts (processes, namespaces, links) is removed when it returns,
//! on success or error.

pub mod clock;
pub mod cluster;
pub mod disk;
pub mod endpoints;
pub mod faults;
pub mod membership;
pub mod net;
pub mod process;
pub mod register;
pub mod relay;
pub mod resources;
pub mod rollouts;
mod steps;
pub mod upgrade;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde::Serialize;

use crate::check::{check_all, CheckReport, NodeDigest, Outcome};
use cluster::Cluster;
use faults::{Fault, Scheduled};

/// How long the healed cluster may take to converge.
const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// How long the workloads run, once started, before the fault schedule's clock starts: with
/// the schedule's own 3 s before its first fault, the nodes' pre-fault CPU is measured over
/// about 7 s of workload (from [`BASELINE_SETTLE`] on).
const BASELINE: Duration = Duration::from_secs(5);

/// The start of the workloads left out of the pre-fault CPU (connections, first plans).
const BASELINE_SETTLE: Duration = Duration::from_secs(1);

/// What to run.
#[derive(Debug, Clone)]
pub struct Config {
    /// 3 or 5.
    pub nodes: u64,
    /// How long the workload and the faults run.
    pub duration: Duration,
    /// The schedule's seed.
    pub seed: u64,
    /// Faults to draw from.
    pub faults: Vec<Fault>,
    /// Register keys.
    pub keys: usize,
    /// Concurrent register clients.
    pub clients: usize,
    /// Where the cluster, `history.json` and `report.json` go.
    pub out: PathBuf,
    /// `hubctl` (next to the runner by default).
    pub hubctl: PathBuf,
    /// Sim agents of the rollout workload (0 and no `canary`: no rollout workload).
    pub agents: usize,
    /// Whether the rollout workload runs the process agent with the demo service's canary.
    pub canary: bool,
    /// How partitions are made.
    pub network: NetMode,
    /// The previous release's binaries (`hub-node` in it) the nodes start on, for the
    /// `upgrade` fault.
    pub upgrade_from: Option<PathBuf>,
}

/// How partitions are made (`--network`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NetMode {
    /// Network namespaces when the machine allows them, else the transport fault layer when
    /// hub-node is a chaos build.
    Auto,
    /// Network namespaces and nftables (root).
    Netns,
    /// The nodes' transport fault layer (a chaos build of hub-node).
    Transport,
}

impl std::str::FromStr for NetMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(NetMode::Auto),
            "netns" => Ok(NetMode::Netns),
            "transport" => Ok(NetMode::Transport),
            _ => Err(format!("--network: {s:?} is not auto, netns or transport")),
        }
    }
}

/// `Err` with what to do when the hub-node next to `hubctl` (or `HUB_NODE_BIN`) is not a chaos
/// build (one with the `--chaos-faults` flag).
fn chaos_build(hubctl: &std::path::Path) -> Result<(), String> {
    let hub_node = std::env::var_os("HUB_NODE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| hubctl.with_file_name("hub-node"));
    let layer = std::process::Command::new(&hub_node)
        .arg("--help")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("--chaos-faults"));
    if layer {
        return Ok(());
    }
    Err(format!(
        "{} is not a chaos build (cargo build --workspace --bins --features \
         hub-node/chaos-faults)",
        hub_node.display()
    ))
}

/// The partition backend `mode` resolves to on this machine, or why there is none.
fn choose_backend(mode: NetMode, hubctl: &std::path::Path) -> anyhow::Result<NetMode> {
    let build = chaos_build(hubctl);
    let layer = build.is_ok();
    let no_layer = build.err().unwrap_or_default();
    match (mode, net::unavailable()) {
        (NetMode::Netns, Some(why)) => {
            bail!("--faults: partition needs network namespaces (--network netns), and {why}")
        }
        (NetMode::Netns, None) | (NetMode::Auto, None) => Ok(NetMode::Netns),
        (NetMode::Transport, _) | (NetMode::Auto, Some(_)) if layer => Ok(NetMode::Transport),
        (NetMode::Transport, _) => {
            bail!("--faults: partition through the transport fault layer (--network transport): {no_layer}")
        }
        (NetMode::Auto, Some(why)) => bail!(
            "--faults: partition needs network namespaces, and {why}; nor can it fall back on \
             the nodes' transport fault layer: {no_layer}"
        ),
    }
}

/// One fault as injected.
#[derive(Debug, Clone, Serialize)]
pub struct Injected {
    /// The schedule entry.
    pub scheduled: Scheduled,
    /// The node hit (all for restart-all and latency).
    pub node: Option<u64>,
    /// What exactly happened ("isolate leader 2", "delay 250 ms", …).
    pub detail: String,
    /// Whether it hit the leader.
    pub was_leader: bool,
    /// Milliseconds from a fault that cut off the leader (kill, pause, partition, restart-all)
    /// to the first acknowledgement of a write sent after it, if any.
    pub failover_ms: Option<u64>,
    /// Nanoseconds on the runner's clock when it took effect (the kill, the stop).
    pub at_ns: u64,
    /// For a partition: how long the operations in flight while it held waited for answers.
    pub answers: Option<AnswerTimes>,
}

/// How long register clients waited for answers (a result, an error or the 2 s timeout) to
/// the operations in flight during some window: the stall a partition causes them.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct AnswerTimes {
    /// Operations in flight at some time in the window (sent before its end, answered after
    /// its start).
    pub operations: usize,
    /// Waited at most this long, for half of them (ms).
    pub p50_ms: u64,
    /// … for 99% of them.
    pub p99_ms: u64,
    /// The longest wait.
    pub max_ms: u64,
}

impl AnswerTimes {
    /// The answer times of the operations in flight during `[from_ns, to_ns)`.
    fn of(answers: &[register::Answer], from_ns: u64, to_ns: u64) -> Option<AnswerTimes> {
        let mut waits: Vec<u64> = answers
            .iter()
            .filter(|a| a.invoke_ns < to_ns && a.answered_ns > from_ns)
            .map(|a| a.answered_ns.saturating_sub(a.invoke_ns) / 1_000_000)
            .collect();
        waits.sort_unstable();
        let at = |p: f64| waits[((waits.len() as f64 - 1.0) * p).round() as usize];
        (!waits.is_empty()).then(|| AnswerTimes {
            operations: waits.len(),
            p50_ms: at(0.5),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        })
    }
}

/// The run's report (`report.json`).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The seed to replay.
    pub seed: u64,
    /// Nodes.
    pub nodes: u64,
    /// The faults drawn from (`--faults`).
    pub faults: Vec<Fault>,
    /// The run's duration in milliseconds.
    pub duration_ms: u64,
    /// Register keys and clients.
    pub keys: usize,
    /// See `keys`.
    pub clients: usize,
    /// How faults were injected.
    pub mechanism: String,
    /// Faults injected by kind.
    pub faults_by_kind: Vec<(String, usize)>,
    /// Every fault.
    pub injected: Vec<Injected>,
    /// Register operations.
    pub operations: usize,
    /// Acknowledged writes.
    pub acknowledged_writes: usize,
    /// Operations with an unknown outcome.
    pub unknown: usize,
    /// Longest time without an acknowledged write, in milliseconds.
    pub longest_unavailable_ms: u64,
    /// Failover times (a kill, partition or restart-all that cut off the leader → first
    /// acknowledgement of a write sent after it; pauses left out): p50 and p99, in ms.
    pub failover_p50_ms: Option<u64>,
    /// See `failover_p50_ms`.
    pub failover_p99_ms: Option<u64>,
    /// Sim agents of the rollout workload.
    pub agents: usize,
    /// Whether the rollout workload ran the canary.
    pub canary: bool,
    /// The rollout workload's counts (`None` without it).
    pub rollouts: Option<rollouts::RolloutSummary>,
    /// How long the register clients waited for answers to operations sent while a
    /// partition held (all partitions together).
    pub partition_answers: Option<AnswerTimes>,
    /// The checkers' verdict.
    pub check: CheckReport,
}

/// Runs the whole thing; `Ok` carries the report (check it: violations do not make an `Err`).
/// The steps are in [`steps`].
pub async fn run(cfg: Config) -> anyhow::Result<Report> {
    let needs = steps::check_config(&cfg)?;
    std::fs::create_dir_all(&cfg.out).with_context(|| cfg.out.display().to_string())?;
    let schedule = faults::schedule(cfg.seed, &cfg.faults, cfg.duration);
    let hub_dir = cfg.out.join("hub");
    if hub_dir.exists() {
        bail!("{} exists: use a fresh --out directory", hub_dir.display());
    }
    println!(
        "chaos: {} nodes, {} faults scheduled over {:?}, seed {}",
        cfg.nodes,
        schedule.len(),
        cfg.duration,
        cfg.seed
    );
    let mut world = steps::start_world(&cfg, &needs, &schedule, hub_dir)?;
    let mut upgrade = needs
        .previous
        .map(|(_, from)| crate::check::UpgradeHistory {
            from,
            nodes: world.ids.clone(),
            ..Default::default()
        });
    let mut workloads = steps::start_workloads(&cfg, &world).await?;
    let epoch_wall_ms = workloads.epoch_wall_ms;
    // The workloads run alone for a while: each node's pre-fault CPU.
    let schedule_start = workloads.ready + BASELINE;
    let mut struck = steps::inject_faults(
        &cfg,
        &schedule,
        schedule_start,
        &mut world,
        &mut workloads,
        &mut upgrade,
    )
    .await?;
    let healed = steps::heal(&cfg, schedule_start, &mut world, workloads, &mut struck).await?;
    let partition_answers = healed.partition_answers;
    let availability = steps::availability(&healed.ops, &mut struck.injected);
    let (operations, unknown) = (
        healed.ops.len(),
        healed
            .ops
            .iter()
            .filter(|o| matches!(o.outcome, Outcome::Unknown))
            .count(),
    );
    let (history, rollouts) =
        steps::history(&cfg, &world, healed, &mut struck, upgrade, epoch_wall_ms).await?;
    std::fs::write(
        cfg.out.join("history.json"),
        serde_json::to_vec_pretty(&history)?,
    )?;
    let report = Report {
        seed: cfg.seed,
        nodes: cfg.nodes,
        faults: cfg.faults.clone(),
        duration_ms: cfg.duration.as_millis() as u64,
        keys: cfg.keys,
        clients: cfg.clients,
        mechanism: mechanism(&cfg.faults, world.network.as_ref()),
        faults_by_kind: steps::faults_by_kind(&struck.injected),
        injected: struck.injected,
        operations,
        acknowledged_writes: availability.acknowledged,
        unknown,
        longest_unavailable_ms: availability.longest_unavailable_ms,
        failover_p50_ms: availability.failover_p50_ms,
        failover_p99_ms: availability.failover_p99_ms,
        agents: cfg.agents,
        canary: cfg.canary,
        rollouts,
        partition_answers,
        check: check_all(&history),
    };
    std::fs::write(
        cfg.out.join("report.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    drop(world);
    Ok(report)
}

/// The previous release's `hub-node` and its `--version`, for `--faults upgrade`; `None`
/// without it. Each needs the other.
fn previous_release(cfg: &Config) -> anyhow::Result<Option<(PathBuf, String)>> {
    let dir = match (cfg.faults.contains(&Fault::Upgrade), &cfg.upgrade_from) {
        (false, None) => return Ok(None),
        (false, Some(_)) => bail!("--upgrade-from: only with --faults upgrade"),
        (true, None) => {
            bail!("--faults upgrade: needs --upgrade-from DIR, the previous release's binaries")
        }
        (true, Some(dir)) => dir,
    };
    let bin = dir.join("hub-node");
    let out = std::process::Command::new(&bin)
        .arg("--version")
        .output()
        .with_context(|| format!("--upgrade-from: {}", bin.display()))?;
    if !out.status.success() {
        bail!("--upgrade-from: {} --version failed", bin.display());
    }
    let version = String::from_utf8_lossy(&out.stdout).trim().to_string();
    Ok(Some((bin, version)))
}

/// The `upgrade` fault on node `n`: the new release's command submitted first (to a member
/// already upgraded if there is one), then `n` stopped and started on this build.
async fn upgrade_one(
    cluster: &mut Cluster,
    n: u64,
    members: &[u64],
    was_leader: bool,
    epoch: Instant,
    history: &crate::check::UpgradeHistory,
) -> anyhow::Result<crate::check::UpgradeStep> {
    let upgraded = members.iter().copied().find(|id| cluster.is_upgraded(*id));
    let addr = cluster.node(upgraded.unwrap_or(n))?.addr;
    let gate = upgrade::probe(&addr, history.steps.len() as u64).await;
    let at_ns = epoch.elapsed().as_nanos() as u64;
    tokio::task::block_in_place(|| cluster.upgrade(n))?;
    Ok(crate::check::UpgradeStep {
        node: n,
        was_leader,
        at_ns,
        gate,
        probed_upgraded: upgraded.is_some(),
    })
}

/// Once every member runs this build: how long the leader took to raise the level, the new
/// release's command submitted then (to each member in turn until one answers), and a node
/// of the previous release asking to join.
async fn after_upgrade(cluster: &mut Cluster) -> anyhow::Result<crate::check::AfterUpgrade> {
    let raised = upgrade::wait_level_raised(cluster).await?;
    let mut command = crate::check::GateProbe::NoAnswer {
        error: "the level was never raised".into(),
    };
    if raised.is_some() {
        for node in cluster.nodes()? {
            command = upgrade::probe(&node.addr, 1_000).await;
            if !matches!(command, crate::check::GateProbe::NoAnswer { .. }) {
                break;
            }
        }
    }
    let previous_release_join =
        match tokio::task::block_in_place(|| cluster.add_previous_release_node())? {
            Ok(id) => {
                // A member that cannot apply the log: out again before it stops the run.
                tokio::task::block_in_place(|| cluster.remove_node(id, false))?;
                crate::check::GateProbe::Accepted
            }
            Err(failed) => crate::check::GateProbe::Refused {
                message: failed.message,
                feature_level_too_low: failed.feature_level_too_low,
            },
        };
    Ok(crate::check::AfterUpgrade {
        level_raised_ms: raised.map(|d| d.as_millis() as u64),
        command,
        previous_release_join,
    })
}

/// Where fault `s` held: from `hit_ns` for its hold (three times it for the faults held
/// longer), with the nodes it struck itself (of `nodes`, the members when it fired) and
/// whether the others' CPU is judged. A membership change lasts as long as the change took.
fn fault_window(
    s: &Scheduled,
    node: Option<u64>,
    nodes: &[u64],
    hit_ns: u64,
    epoch: Instant,
) -> crate::check::FaultWindow {
    let held = match s.fault {
        Fault::ClockSkew | Fault::DiskFull => 3 * s.hold_ms,
        _ => s.hold_ms,
    };
    let struck = match s.fault {
        Fault::KillLeader
        | Fault::KillAny
        | Fault::Pause
        | Fault::DiskFull
        | Fault::FsyncError
        | Fault::Membership
        | Fault::Upgrade => node.into_iter().collect(),
        Fault::RestartAll => nodes.to_vec(),
        Fault::Partition
        | Fault::Latency
        | Fault::KillAgent
        | Fault::PauseAgent
        | Fault::ClockSkew => Vec::new(),
    };
    let to_ns = if matches!(s.fault, Fault::Membership | Fault::Upgrade) {
        epoch.elapsed().as_nanos() as u64
    } else {
        hit_ns + held * 1_000_000
    };
    crate::check::FaultWindow {
        fault: s.fault.as_str().to_string(),
        from_ns: hit_ns,
        to_ns,
        struck,
        cpu_judged: s.fault != Fault::Membership,
    }
}

/// Cuts the network for a `partition` fault; `pick` chooses the shape. Returns what was cut
/// and whether the leader lost its majority.
fn partition(
    net: &mut net::Partitions,
    nodes: &[u64],
    target: u64,
    leader: Option<u64>,
    pick: u64,
) -> anyhow::Result<(String, bool)> {
    let others: Vec<u64> = nodes.iter().copied().filter(|n| *n != target).collect();
    tokio::task::block_in_place(|| match (pick >> 8) % 3 {
        0 => {
            net.split(&[target])?;
            Ok((
                format!("node {target} isolated from {others:?}"),
                leader == Some(target),
            ))
        }
        1 => {
            // A minority (1 of 3, 2 of 5) drawn from `pick`, away from the majority.
            let start = (pick >> 16) as usize % nodes.len();
            let minority: Vec<u64> = (0..nodes.len() / 2)
                .map(|i| nodes[(start + i) % nodes.len()])
                .collect();
            let majority: Vec<u64> = nodes
                .iter()
                .copied()
                .filter(|n| !minority.contains(n))
                .collect();
            net.split(&minority)?;
            Ok((
                format!("minority {minority:?} split from majority {majority:?}"),
                leader.is_some_and(|l| minority.contains(&l)),
            ))
        }
        _ => {
            for o in &others {
                net.cut(target, *o)?;
            }
            Ok((
                format!("one-way: node {target}'s packets to {others:?} dropped"),
                leader == Some(target),
            ))
        }
    })
}

/// The report's description of how faults were injected.
fn mechanism(faults: &[Fault], partitions: Option<&net::Partitions>) -> String {
    let mut parts = vec![
        "process faults as signals to real hub-node processes (SIGKILL and restart, SIGSTOP/SIGCONT)"
            .to_string(),
    ];
    if let Some(p) = partitions {
        parts.push(p.mechanism().into());
    }
    if faults.iter().any(|f| f.hits_agents()) {
        parts.push(
            "agent faults as SIGKILL (restart on the same data directory) and SIGSTOP/SIGCONT \
             of real hub-agent processes, struck while their execution log shows a task running"
                .into(),
        );
    }
    if faults.contains(&Fault::ClockSkew) {
        parts.push(
            "clock faults as an offset or drift of one node's wall clock in its fault layer \
             (chaos build; the monotonic clock untouched)"
                .into(),
        );
    }
    if faults.contains(&Fault::DiskFull) {
        parts.push(
            "full disks as a ballast file filling each node's own loop-mounted ext4 (512 MiB, \
             no reserved blocks), kept full while the fault holds"
                .into(),
        );
    }
    if faults.contains(&Fault::FsyncError) {
        parts.push(
            "failed syncs as EIO from fsync, fdatasync and directory syncs in a FUSE \
             pass-through filesystem under each node's data directory"
                .into(),
        );
    }
    if faults.contains(&Fault::Membership) {
        parts.push(
            "membership changes through hubctl dev add-node / remove-node (the hub's AddNode and \
             RemoveNode): a node added, a member removed and left running, or a member killed \
             and replaced by a new id"
                .into(),
        );
    }
    if faults.contains(&Fault::Latency) {
        parts.push(
            "latency as a delaying TCP relay in front of the agents' hub endpoints (this \
             kernel has no sch_netem for tc)"
                .into(),
        );
    }
    parts.join("; ")
}

/// The rollout workload's configuration: its files under `<out>/rollouts`, binaries next to
/// `hubctl`.
fn rollout_config(
    cfg: &Config,
    endpoints: &endpoints::SharedEndpoints,
    agent_endpoints: &[String],
    sim_agents: Vec<rollouts::AgentHost>,
    epoch: Instant,
) -> rollouts::RolloutConfig {
    rollouts::RolloutConfig {
        endpoints: endpoints.clone(),
        agent_endpoints: agent_endpoints.to_vec(),
        dir: cfg.out.join("rollouts"),
        sim_agents,
        process_agent: cfg.canary,
        seed: cfg.seed,
        epoch,
        bin_dir: cfg.hubctl.parent().map(PathBuf::from).unwrap_or_default(),
    }
}

/// What every running process (members, and removed nodes left running) says of the
/// cluster now.
async fn sample_members(
    cluster: &Cluster,
    epoch: Instant,
    settled: bool,
) -> Vec<crate::check::MemberSample> {
    let views = cluster.member_views().await;
    let at_ns = epoch.elapsed().as_nanos() as u64;
    views
        .into_iter()
        .map(|v| crate::check::MemberSample {
            at_ns,
            node: v.id,
            role: v.role,
            leader: v.leader,
            voters: v.voters,
            settled,
        })
        .collect()
}

/// Waits until every node reports the same digest at the same applied index.
async fn converge(cluster: &Cluster, nodes: u64) -> anyhow::Result<Vec<NodeDigest>> {
    let deadline = Instant::now() + CONVERGE_TIMEOUT;
    loop {
        let views = cluster.views().await;
        let same = views.len() as u64 == nodes
            && views
                .windows(2)
                .all(|w| w[0].applied == w[1].applied && w[0].digest == w[1].digest);
        if !same && Instant::now() > deadline {
            bail!(
                "the healed cluster did not converge within {CONVERGE_TIMEOUT:?}: {} of {nodes} nodes answer, views {views:?}",
                views.len()
            );
        }
        if same {
            return Ok(views
                .into_iter()
                .map(|v| NodeDigest {
                    node: v.id,
                    applied_index: v.applied,
                    digest: v.digest,
                })
                .collect());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Fills each partition's answer times (operations in flight between the cut and the heal)
/// and returns those of every operation in flight while any partition held.
fn partition_answer_times(
    injected: &mut [Injected],
    answers: &[register::Answer],
) -> Option<AnswerTimes> {
    let mut windows = Vec::new();
    for i in injected
        .iter_mut()
        .filter(|i| i.scheduled.fault == Fault::Partition)
    {
        let to_ns = i.at_ns + i.scheduled.hold_ms * 1_000_000;
        i.answers = AnswerTimes::of(answers, i.at_ns, to_ns);
        windows.push((i.at_ns, to_ns));
    }
    let inside: Vec<register::Answer> = answers
        .iter()
        .filter(|a| {
            windows
                .iter()
                .any(|(f, t)| a.invoke_ns < *t && a.answered_ns > *f)
        })
        .copied()
        .collect();
    AnswerTimes::of(&inside, 0, u64::MAX)
}

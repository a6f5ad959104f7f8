//! The steps of `chaos run` ([`super::run`]), in the order it takes them: check what the
//! configuration needs of the machine, start the world (hosts, disks, nodes, network), start
//! the workloads, strike with each scheduled fault, heal and let the workloads finish, then
//! build the history the checkers judge and the report.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use super::cluster::Cluster;
use super::faults::{Fault, Rng, Scheduled};
use super::{
    after_upgrade, chaos_build, choose_backend, clock, converge, disk, endpoints, fault_window,
    membership, net, partition, partition_answer_times, previous_release, register, relay,
    resources, rollout_config, rollouts, sample_members, upgrade_one, AnswerTimes, Config,
    Injected, NetMode, BASELINE_SETTLE,
};
use crate::check::{
    AckedWrite, DiskFault, DiskStrike, FaultWindow, History, MemberSample, MembershipChange,
    NodeDigest, OpKind, Outcome, RegisterOp, ResourceHistory, UpgradeHistory,
};

/// What the configuration needs of the machine, checked before anything starts.
pub(super) struct Needs {
    /// Whether the nodes run with their fault layer (`--chaos-faults`).
    pub fault_layer: bool,
    /// The previous release's `hub-node` and its version (`--faults upgrade`).
    pub previous: Option<(PathBuf, String)>,
    /// The disks under the nodes.
    pub disk_plan: disk::DiskPlan,
    /// Whether the nodes' data directories are on the runner's disks.
    pub uses_disks: bool,
    /// How partitions are made, when a fault needs them.
    pub backend: Option<NetMode>,
}

/// Checks the configuration against the machine: every fault it draws from must be
/// possible here, or the run is refused naming the flag.
pub(super) fn check_config(cfg: &Config) -> anyhow::Result<Needs> {
    if cfg.nodes != 3 && cfg.nodes != 5 {
        bail!("--nodes: {} is not 3 or 5", cfg.nodes);
    }
    if !cfg.hubctl.exists() {
        bail!(
            "{} not found (cargo build --workspace --bins)",
            cfg.hubctl.display()
        );
    }
    if let Some(f) = cfg.faults.iter().find(|f| f.hits_agents()) {
        if cfg.agents == 0 && !cfg.canary {
            bail!("--faults {f}: needs agents to strike (--agents N, or the canary's process agent without --no-canary)");
        }
    }
    let needs_layer = cfg.faults.iter().find(|f| f.needs_chaos_build());
    if let Some(f) = needs_layer {
        if let Err(why) = chaos_build(&cfg.hubctl) {
            bail!("--faults {f}: needs the nodes' fault layer, and {why}");
        }
    }
    let previous = previous_release(cfg)?;
    let disk_plan = disk::DiskPlan {
        small_disk: cfg.faults.contains(&Fault::DiskFull),
        sync_faults: cfg.faults.contains(&Fault::FsyncError),
    };
    let uses_disks = disk_plan.small_disk || disk_plan.sync_faults;
    if let Some(why) = uses_disks.then(|| disk::unavailable(disk_plan)).flatten() {
        let f = cfg.faults.iter().find(|f| f.disk().is_some()).copied();
        bail!(
            "--faults {}: needs a disk of the runner's under every node, and {why}",
            f.map_or("", Fault::as_str)
        );
    }
    let backend = if cfg.faults.iter().any(|f| f.needs_netns()) {
        Some(choose_backend(cfg.network, &cfg.hubctl)?)
    } else {
        None
    };
    Ok(Needs {
        fault_layer: needs_layer.is_some(),
        previous,
        disk_plan,
        uses_disks,
        backend,
    })
}

/// The run's nodes and what they run on. Fields drop in declaration order, on success and
/// on error alike: the nodes first, then the disks they wrote to, then the hosts and links
/// they ran on.
pub(super) struct World {
    /// The nodes.
    pub cluster: Cluster,
    /// The runner's disks under the nodes, for disk faults.
    pub disks: Option<disk::Disks>,
    /// Partitions between the nodes, for network faults.
    pub network: Option<net::Partitions>,
    /// The first members.
    pub ids: Vec<u64>,
    /// The cluster's directory.
    pub hub_dir: PathBuf,
}

/// Makes the hosts and disks of every node the run may have (the first members and one
/// per membership change of `schedule`), starts the first members, and the partitions.
pub(super) fn start_world(
    cfg: &Config,
    needs: &Needs,
    schedule: &[Scheduled],
    hub_dir: PathBuf,
) -> anyhow::Result<World> {
    let ids: Vec<u64> = (1..=cfg.nodes).collect();
    let all_ids: Vec<u64> = ids
        .iter()
        .copied()
        .chain(membership::spare_ids(cfg.nodes, schedule))
        .collect();
    // Dropped after the cluster (moved into the partitions, which `World` drops last).
    let namespaces = match needs.backend {
        Some(NetMode::Netns) => Some(tokio::task::block_in_place(|| {
            net::Network::create(&all_ids)
        })?),
        _ => None,
    };
    let disks = if needs.uses_disks {
        Some(tokio::task::block_in_place(|| {
            disk::Disks::create(&hub_dir, &cfg.out.join("disks"), &all_ids, needs.disk_plan)
        })?)
    } else {
        None
    };
    // Snapshots and log compaction every 10,000 entries (the default is 100,000): a run of a
    // few minutes then builds, installs and compacts through its faults too.
    let node_args = if needs.backend == Some(NetMode::Transport) || needs.fault_layer {
        "--chaos-faults --snapshot-logs 10000 --keep-logs 1000"
    } else {
        "--snapshot-logs 10000 --keep-logs 1000"
    };
    let cluster = tokio::task::block_in_place(|| {
        Cluster::start(
            &hub_dir,
            cfg.nodes,
            &cfg.hubctl,
            namespaces.as_ref(),
            node_args,
            needs.previous.as_ref().map(|(bin, _)| bin.as_path()),
        )
    })?;
    let network = match (needs.backend, namespaces) {
        (Some(NetMode::Netns), Some(ns)) => {
            Some(net::Partitions::new(net::Backend::Netns(ns), &ids))
        }
        (Some(NetMode::Transport), _) => Some(transport_partitions(&cluster, &all_ids, &ids)?),
        _ => None,
    };
    Ok(World {
        cluster,
        disks,
        network,
        ids,
        hub_dir,
    })
}

/// Partitions made by the nodes' fault layer: each node reads its own file of peers to drop.
fn transport_partitions(
    cluster: &Cluster,
    all_ids: &[u64],
    ids: &[u64],
) -> anyhow::Result<net::Partitions> {
    // `dev` keeps node N's data in DIR/node-N, new nodes' too.
    let dir = cluster
        .nodes()?
        .first()
        .and_then(|n| n.data_dir.parent().map(std::path::Path::to_path_buf))
        .context("a cluster without nodes")?;
    let files = all_ids
        .iter()
        .map(|id| {
            (
                *id,
                dir.join(format!("node-{id}")).join("chaos-faults.json"),
            )
        })
        .collect();
    Ok(net::Partitions::new(net::Backend::Transport(files), ids))
}

/// The workloads, and the clocks the history is measured on.
pub(super) struct Workloads {
    /// The agents' delaying relay to the hub ("another region").
    pub relay: relay::DelayRelay,
    /// The members' endpoints, followed by every client of the runner.
    pub endpoints: endpoints::SharedEndpoints,
    /// The register clients.
    pub register: register::Workload,
    /// The rollout workload, when the run has agents or a canary.
    pub rollouts: Option<rollouts::Rollouts>,
    /// The nodes' resources, sampled through the run.
    pub sampler: resources::Sampler,
    /// Time zero of every recorded time.
    pub epoch: Instant,
    /// The true wall time of `epoch`: the runner's clock is the machine's, which no fault
    /// skews (a clock fault moves a node's own readings only).
    pub epoch_wall_ms: i64,
    /// When the workloads were running, since `epoch`.
    pub ready: Duration,
}

/// Creates the register keys and starts the register clients, the rollout workload and the
/// resource sampler.
pub(super) async fn start_workloads(cfg: &Config, world: &World) -> anyhow::Result<Workloads> {
    let endpoints = world.cluster.endpoints()?;
    let relay = relay::DelayRelay::start(&endpoints).await?;
    register::create_keys(&endpoints, cfg.keys).await?;
    let epoch = Instant::now();
    let sampler = resources::Sampler::start(&world.hub_dir, epoch);
    let epoch_wall_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let shared = endpoints::SharedEndpoints::new(endpoints.clone());
    let register =
        register::Workload::start(shared.clone(), cfg.keys, cfg.clients, cfg.seed, epoch);
    // Rollout workload: agents run on the runner's host (empty prefix) and reach the hub
    // through the latency relay.
    let rollouts = if cfg.agents > 0 || cfg.canary {
        let hosts = (0..cfg.agents)
            .map(|k| rollouts::AgentHost {
                name: format!("sim-{k}"),
                prefix: Vec::new(),
            })
            .collect();
        let rc = rollout_config(cfg, &shared, relay.endpoints(), hosts, epoch);
        Some(rollouts::Rollouts::start(rc).await?)
    } else {
        None
    };
    Ok(Workloads {
        relay,
        endpoints: shared,
        register,
        rollouts,
        sampler,
        epoch,
        epoch_wall_ms,
        ready: epoch.elapsed(),
    })
}

/// What the faults did, for the history and the report.
#[derive(Default)]
pub(super) struct Struck {
    /// Each fault's span and the nodes it struck, for the resource budgets.
    pub windows: Vec<FaultWindow>,
    /// Every fault, as reported.
    pub injected: Vec<Injected>,
    /// The disk faults' outcomes.
    pub disk_strikes: Vec<DiskStrike>,
    /// The membership changes made.
    pub membership_changes: Vec<MembershipChange>,
    /// What the members said of the cluster before each fault (membership runs only).
    pub member_samples: Vec<MemberSample>,
}

/// How one fault struck.
struct Hit {
    /// When it took effect, since the epoch (failover is measured from here).
    at_ns: u64,
    /// What it did, in words (empty: the node names it).
    detail: String,
    /// Whether it cut off the leader.
    leader: bool,
}

/// Strikes with each fault of `schedule` at its time from `schedule_start`.
pub(super) async fn inject_faults(
    cfg: &Config,
    schedule: &[Scheduled],
    schedule_start: Duration,
    world: &mut World,
    w: &mut Workloads,
    upgrade: &mut Option<UpgradeHistory>,
) -> anyhow::Result<Struck> {
    let changes_membership = cfg.faults.contains(&Fault::Membership);
    let mut struck = Struck::default();
    let mut rng = Rng::new(cfg.seed ^ 0xFA17);
    for s in schedule {
        let at = schedule_start + Duration::from_millis(s.at_ms);
        if let Some(wait) = at.checked_sub(w.epoch.elapsed()) {
            tokio::time::sleep(wait).await;
        }
        let nodes: Vec<u64> = world.cluster.nodes()?.iter().map(|n| n.id).collect();
        // Faults strike members only: a removed node left running is outside the cluster
        // (a disk fault on it would be judged as a member's, with no supervisor to restart it).
        let leader = world.cluster.leader().await.filter(|l| nodes.contains(l));
        if let Some(net) = world.network.as_mut() {
            net.set_nodes(&nodes);
        }
        if changes_membership {
            let samples = sample_members(&world.cluster, w.epoch, false).await;
            struck.member_samples.extend(samples);
        }
        let node = target(s, &world.cluster, &nodes, leader, &mut rng)?;
        let hit = strike(s, node, &nodes, leader, world, w, upgrade, &mut struck).await?;
        println!(
            "[{:>6.1}s] {} {}",
            hit.at_ns as f64 / 1e9,
            s.fault,
            describe(s.fault, node, &hit.detail)
        );
        struck
            .windows
            .push(fault_window(s, node, &nodes, hit.at_ns, w.epoch));
        struck.injected.push(Injected {
            scheduled: s.clone(),
            node,
            detail: hit.detail,
            was_leader: hit.leader,
            failover_ms: None,
            at_ns: hit.at_ns,
            answers: None,
        });
    }
    Ok(struck)
}

/// The node fault `s` strikes (`None`: all nodes, an agent or a link).
fn target(
    s: &Scheduled,
    cluster: &Cluster,
    nodes: &[u64],
    leader: Option<u64>,
    rng: &mut Rng,
) -> anyhow::Result<Option<u64>> {
    let any = nodes[(s.pick % nodes.len() as u64) as usize];
    Ok(match s.fault {
        Fault::KillLeader => leader,
        Fault::KillAny => Some(any),
        // The leader half the time.
        Fault::Pause if rng.next_u64().is_multiple_of(2) => leader.or(Some(any)),
        Fault::Pause => Some(any),
        Fault::ClockSkew if rng.next_u64().is_multiple_of(2) => leader.or(Some(any)),
        Fault::ClockSkew => Some(any),
        Fault::DiskFull | Fault::FsyncError if rng.next_u64().is_multiple_of(2) => {
            leader.or(Some(any))
        }
        Fault::DiskFull | Fault::FsyncError => Some(any),
        Fault::Membership if rng.next_u64().is_multiple_of(2) => leader.or(Some(any)),
        Fault::Membership => Some(any),
        Fault::RestartAll | Fault::Latency | Fault::KillAgent | Fault::PauseAgent => None,
        // The node the partition is about (isolated, cut one way, or ignored by a split).
        Fault::Partition => leader.or(Some(any)),
        // Followers first, the leader last, as an operator upgrades.
        Fault::Upgrade => {
            let old = cluster.not_upgraded()?;
            old.iter()
                .copied()
                .find(|id| Some(*id) != leader)
                .or(old.first().copied())
        }
    })
}

/// How a fault is printed: its detail, or the node it struck.
fn describe(fault: Fault, node: Option<u64>, detail: &str) -> String {
    match (fault, node) {
        (
            Fault::Partition
            | Fault::Latency
            | Fault::KillAgent
            | Fault::PauseAgent
            | Fault::ClockSkew
            | Fault::DiskFull
            | Fault::FsyncError
            | Fault::Membership
            | Fault::Upgrade,
            _,
        ) => detail.to_string(),
        (_, Some(n)) => format!("node {n}"),
        (_, None) => "all nodes".to_string(),
    }
}

/// Strikes with fault `s` at `node`, holds it, and ends it.
// Long: one arm per kind of fault; the larger ones are their own functions.
#[allow(clippy::too_many_arguments)]
async fn strike(
    s: &Scheduled,
    node: Option<u64>,
    nodes: &[u64],
    leader: Option<u64>,
    world: &mut World,
    w: &mut Workloads,
    upgrade: &mut Option<UpgradeHistory>,
    struck: &mut Struck,
) -> anyhow::Result<Hit> {
    let epoch = w.epoch;
    let now_ns = || epoch.elapsed().as_nanos() as u64;
    let hold = Duration::from_millis(s.hold_ms);
    let mut hit = Hit {
        at_ns: now_ns(),
        detail: String::new(),
        leader: node.is_some() && node == leader,
    };
    let cluster = &mut world.cluster;
    match (s.fault, node) {
        (Fault::KillLeader | Fault::KillAny, Some(n)) => {
            tokio::task::block_in_place(|| cluster.kill(n))?;
            hit.at_ns = now_ns();
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| cluster.restart(n))?;
        }
        (Fault::Pause, Some(n)) => {
            cluster.pause(n)?;
            hit.at_ns = now_ns();
            tokio::time::sleep(hold).await;
            cluster.resume(n);
        }
        (Fault::Upgrade, Some(n)) => {
            let history = upgrade.as_mut().context("upgrade without --upgrade-from")?;
            (hit.at_ns, hit.detail) =
                strike_upgrade(cluster, n, nodes, hit.leader, epoch, history).await?;
        }
        (Fault::Upgrade, None) => hit.detail = "every node runs this build already".into(),
        (Fault::RestartAll, _) => {
            for n in nodes {
                tokio::task::block_in_place(|| cluster.kill(*n))?;
            }
            hit.at_ns = now_ns();
            tokio::time::sleep(hold).await;
            for n in nodes {
                tokio::task::block_in_place(|| cluster.restart(*n))?;
            }
        }
        (Fault::Partition, Some(target)) => {
            let net = world
                .network
                .as_mut()
                .context("partition without a test network")?;
            let (what, leader_cut) = partition(net, nodes, target, leader, s.pick)?;
            hit.at_ns = now_ns();
            hit.detail = what;
            hit.leader = leader_cut;
            tokio::time::sleep(hold).await;
            tokio::task::block_in_place(|| net.heal())?;
        }
        (Fault::Latency, _) => {
            let delay = Duration::from_millis(100 + s.pick % 301);
            w.relay.set_delay(delay);
            hit.at_ns = now_ns();
            hit.detail = format!("agents' links delayed {} ms each way", delay.as_millis());
            tokio::time::sleep(hold).await;
            w.relay.set_delay(Duration::ZERO);
        }
        (Fault::ClockSkew, Some(n)) => {
            let dir = cluster.node(n)?.data_dir;
            let skew = clock::Skew::pick(s.pick);
            tokio::task::block_in_place(|| clock::skew(&dir, skew))?;
            hit.at_ns = now_ns();
            let role = if hit.leader { " (leader)" } else { "" };
            hit.detail = format!("node {n}{role} {skew}");
            tokio::time::sleep(hold * 3).await;
            tokio::task::block_in_place(|| clock::restore(&dir))?;
        }
        (Fault::DiskFull | Fault::FsyncError, Some(n)) => {
            let (strike, at, detail) = strike_disk(s, n, hit.leader, world, hold).await?;
            hit.at_ns = at.duration_since(epoch).as_nanos() as u64;
            hit.detail = detail;
            struck.disk_strikes.push(strike);
        }
        (Fault::Membership, Some(n)) => {
            let net = world.network.as_ref().and_then(net::Partitions::network);
            let (change, what) = membership::change(cluster, net, n, s.pick, epoch).await?;
            hit.at_ns = change.at_ns;
            hit.leader = hit.leader && change.removed == Some(n);
            hit.detail = what;
            struck.membership_changes.push(change);
            follow_members(world, w)?;
        }
        (Fault::KillAgent | Fault::PauseAgent, _) => {
            let r = w
                .rollouts
                .as_mut()
                .context("agent fault without the rollout workload")?;
            let kind = if s.fault == Fault::KillAgent {
                rollouts::AgentFault::Kill
            } else {
                rollouts::AgentFault::Pause
            };
            let (strike, what) = r.strike_agent(kind, s.pick).await?;
            hit.at_ns = now_ns();
            hit.detail = what;
            tokio::time::sleep(hold).await;
            r.heal_agent(strike)?;
        }
        (
            Fault::KillLeader
            | Fault::KillAny
            | Fault::Pause
            | Fault::Partition
            | Fault::ClockSkew
            | Fault::DiskFull
            | Fault::FsyncError
            | Fault::Membership,
            None,
        ) => {}
    }
    Ok(hit)
}

/// Restarts node `n` on this build; after the last node, checks what the new level allows.
/// Returns when the restart took effect and what it did.
async fn strike_upgrade(
    cluster: &mut Cluster,
    n: u64,
    nodes: &[u64],
    was_leader: bool,
    epoch: Instant,
    history: &mut UpgradeHistory,
) -> anyhow::Result<(u64, String)> {
    let step = upgrade_one(cluster, n, nodes, was_leader, epoch, history).await?;
    let at_ns = step.at_ns;
    let mut detail = format!("node {n} to this build (the gate before: {})", step.gate);
    history.steps.push(step);
    if cluster.not_upgraded()?.is_empty() {
        let after = after_upgrade(cluster).await?;
        detail.push_str(&format!(
            "; every node upgraded, the level raised after {:?} ms, the new command {}, a node of the previous release joining {}",
            after.level_raised_ms, after.command, after.previous_release_join
        ));
        history.after = Some(after);
    }
    Ok((at_ns, detail))
}

/// Fills node `n`'s disk, or fails its syncs, for `hold` (a full disk three times as long),
/// restarting the node if it stopped. Returns the outcome, when it took effect, and words.
async fn strike_disk(
    s: &Scheduled,
    n: u64,
    was_leader: bool,
    world: &mut World,
    hold: Duration,
) -> anyhow::Result<(DiskStrike, Instant, String)> {
    let d = world
        .disks
        .as_ref()
        .context("disk fault without the runner's disks")?;
    let kind = s.fault.disk().context("a disk fault")?;
    // A full disk is held longer: a node may write into space it allocated before (RocksDB
    // preallocates its log files).
    let held = if kind == DiskFault::DiskFull {
        hold * 3
    } else {
        hold
    };
    let (strike, hit) = disk::strike(d, &mut world.cluster, &world.hub_dir, n, kind, held).await?;
    let what = match kind {
        DiskFault::DiskFull => format!("filled ({} MiB of ballast)", strike.ballast_bytes >> 20),
        DiskFault::FsyncError => format!("{} syncs failed", strike.syncs_failed),
    };
    let after = match (strike.stopped, strike.clean_stop, strike.served_again) {
        (false, _, true) => ", served on",
        (true, true, true) => ", crash-stopped and served again",
        (true, false, _) => ", DIED UNCLEANLY",
        (_, _, false) => ", DID NOT SERVE AGAIN",
    };
    let role = if was_leader { " (leader)" } else { "" };
    Ok((strike, hit, format!("node {n}{role}: {what}{after}")))
}

/// After a membership change: the partitions, the agents' relay and the runner's clients
/// follow the new members.
fn follow_members(world: &mut World, w: &Workloads) -> anyhow::Result<()> {
    let now: Vec<u64> = world.cluster.nodes()?.iter().map(|n| n.id).collect();
    if let Some(net) = world.network.as_mut() {
        net.set_nodes(&now);
    }
    let current = world.cluster.endpoints()?;
    w.relay.set_upstreams(&current);
    w.endpoints.set(current);
    Ok(())
}

/// What the run left once healed and finished.
pub(super) struct Healed {
    /// The register operations.
    pub ops: Vec<RegisterOp>,
    /// Answer times of the operations in flight while a partition held.
    pub partition_answers: Option<AnswerTimes>,
    /// Every node's digest, converged.
    pub digests: Vec<NodeDigest>,
    /// The rollout workload's records, when it ran.
    pub rollouts: Option<rollouts::RolloutHistory>,
    /// The nodes' resources through the run.
    pub resources: ResourceHistory,
}

/// Runs out the schedule's duration, stops the register clients, heals every fault, waits
/// for the nodes to converge and for every rollout to finish.
pub(super) async fn heal(
    cfg: &Config,
    schedule_start: Duration,
    world: &mut World,
    w: Workloads,
    struck: &mut Struck,
) -> anyhow::Result<Healed> {
    let epoch = w.epoch;
    if let Some(rest) = (schedule_start + cfg.duration).checked_sub(epoch.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    let (ops, answers) = w.register.stop().await;
    let partition_answers = partition_answer_times(&mut struck.injected, &answers);
    let mut rollouts = w.rollouts;
    if let Some(r) = rollouts.as_mut() {
        r.stop_issuing().await;
    }
    println!("[{:>6.1}s] healing", epoch.elapsed().as_secs_f64());
    w.relay.set_delay(Duration::ZERO);
    if let Some(net) = world.network.as_mut() {
        tokio::task::block_in_place(|| net.heal())?;
    }
    tokio::task::block_in_place(|| world.cluster.heal())?;
    let members = world.cluster.nodes()?.len() as u64;
    let digests = converge(&world.cluster, members).await?;
    if cfg.faults.contains(&Fault::Membership) {
        let samples = sample_members(&world.cluster, epoch, true).await;
        struck.member_samples.extend(samples);
    }
    let rollouts = match rollouts {
        Some(r) => {
            println!(
                "[{:>6.1}s] waiting for every rollout to finish",
                epoch.elapsed().as_secs_f64()
            );
            w.endpoints.set(world.cluster.endpoints()?);
            Some(r.finish(w.endpoints.clone()).await?)
        }
        None => None,
    };
    let windows = std::mem::take(&mut struck.windows);
    let resources = ResourceHistory {
        samples: w.sampler.stop(),
        baseline_ns: {
            let from = (w.ready + BASELINE_SETTLE).as_nanos() as u64;
            let to = windows
                .first()
                .map_or(epoch.elapsed().as_nanos() as u64, |w| w.from_ns);
            (to > from).then_some((from, to))
        },
        windows,
    };
    Ok(Healed {
        ops,
        partition_answers,
        digests,
        rollouts,
        resources,
    })
}

/// The write availability the register clients saw.
pub(super) struct Availability {
    /// Acknowledged writes.
    pub acknowledged: usize,
    /// Failover p50, in ms (see [`super::Report::failover_p50_ms`]).
    pub failover_p50_ms: Option<u64>,
    /// Failover p99, in ms.
    pub failover_p99_ms: Option<u64>,
    /// Longest time without an acknowledged write, in ms.
    pub longest_unavailable_ms: u64,
}

/// Failover: from a fault that cut off the leader to the first acknowledgement of a write
/// sent after it (a write already committed when the fault hit may still be answered).
/// Fills each such fault's `failover_ms`.
pub(super) fn availability(ops: &[RegisterOp], injected: &mut [Injected]) -> Availability {
    let acked: Vec<(u64, u64)> = ops
        .iter()
        .filter(|o| {
            matches!(o.kind, OpKind::Write { .. }) && matches!(o.outcome, Outcome::Ok { .. })
        })
        .filter_map(|o| o.complete_ns.map(|c| (o.invoke_ns, c)))
        .collect();
    let mut acks: Vec<u64> = acked.iter().map(|(_, c)| *c).collect();
    acks.sort_unstable();
    for i in injected.iter_mut() {
        if i.was_leader || i.scheduled.fault == Fault::RestartAll {
            let next = acked
                .iter()
                .filter(|(invoke, _)| *invoke > i.at_ns)
                .map(|(_, complete)| *complete)
                .min();
            i.failover_ms = next.map(|t| (t - i.at_ns) / 1_000_000);
        }
    }
    let mut failovers: Vec<u64> = injected
        .iter()
        .filter(|i| i.scheduled.fault != Fault::Pause)
        .filter_map(|i| i.failover_ms)
        .collect();
    failovers.sort_unstable();
    let pct = |p: f64| -> Option<u64> {
        (!failovers.is_empty()).then(|| {
            let idx = ((failovers.len() as f64 - 1.0) * p).round() as usize;
            failovers[idx.min(failovers.len() - 1)]
        })
    };
    Availability {
        acknowledged: acks.len(),
        failover_p50_ms: pct(0.5),
        failover_p99_ms: pct(0.99),
        longest_unavailable_ms: acks.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0) / 1_000_000,
    }
}

/// The history the checkers judge: the register operations, what every node holds after
/// healing, the faults' outcomes and the rollout workload's records. Returns the rollout
/// workload's summary too.
pub(super) async fn history(
    cfg: &Config,
    world: &World,
    healed: Healed,
    struck: &mut Struck,
    upgrade: Option<UpgradeHistory>,
    epoch_wall_ms: i64,
) -> anyhow::Result<(History, Option<rollouts::RolloutSummary>)> {
    let acked_writes: Vec<AckedWrite> = healed
        .ops
        .iter()
        .filter(|o| matches!(o.outcome, Outcome::Ok { .. }))
        .filter_map(|o| match o.kind {
            OpKind::Write { value } => Some(AckedWrite {
                id: o.id,
                key: o.key.clone(),
                value,
            }),
            OpKind::Read | OpKind::Cas { .. } => None,
        })
        .collect();
    // What every node holds after healing (each node's own state, converged).
    let mut final_reads = Vec::new();
    for n in world.cluster.nodes()? {
        match register::final_reads(&n.addr, cfg.keys).await {
            Ok(r) => final_reads.extend(r),
            Err(e) => eprintln!("chaos: final read from node {} failed: {e:#}", n.id),
        }
    }
    let changes_membership = cfg.faults.contains(&Fault::Membership);
    let mut history = History {
        register_ops: healed.ops,
        acked_writes,
        final_reads,
        node_digests: healed.digests,
        disk_strikes: std::mem::take(&mut struck.disk_strikes),
        initial_members: if changes_membership {
            world.ids.clone()
        } else {
            Vec::new()
        },
        membership_changes: std::mem::take(&mut struck.membership_changes),
        member_samples: std::mem::take(&mut struck.member_samples),
        resources: healed.resources,
        upgrade,
        ..History::default()
    };
    let summary = healed.rollouts.map(|r| {
        history.task_executions = r.task_executions;
        history.hub_plans = r.hub_plans;
        history.canary_runs = r.canary_runs;
        history.rollouts = r.rollouts;
        history.epoch_wall_ms = Some(epoch_wall_ms);
        history.fleet = r.fleet;
        // Faults that struck the leader, on the hub's clock (the true wall time): the fleet
        // checker counts the soaks they fell in.
        history.fleet.leader_faults_ms = struck
            .injected
            .iter()
            .filter(|i| i.was_leader || i.scheduled.fault == Fault::RestartAll)
            .map(|i| epoch_wall_ms + (i.at_ns / 1_000_000) as i64)
            .collect();
        r.summary
    });
    Ok((history, summary))
}

/// How many faults of each kind struck, in the order each kind first did.
pub(super) fn faults_by_kind(injected: &[Injected]) -> Vec<(String, usize)> {
    let mut by_kind: Vec<(String, usize)> = Vec::new();
    for i in injected {
        match by_kind
            .iter_mut()
            .find(|(k, _)| k == i.scheduled.fault.as_str())
        {
            Some((_, n)) => *n += 1,
            None => by_kind.push((i.scheduled.fault.as_str().to_string(), 1)),
        }
    }
    by_kind
}

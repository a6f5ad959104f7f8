//! `hub-bench`: write throughput/latency and leader-failover timing against a real cluster.
//!
//! - `hub-bench writes --cluster DIR --concurrency 1,16,64 --seconds 10`
//! - `hub-bench failover --cluster DIR --kills 20`
//! - `hub-bench agents --cluster DIR --agents 1000 --seconds 60`: many simulated agents (the
//!   real agent code with the sim driver, in this one process) syncing every second; hub CPU
//!   and memory, and the time from a plan's commit to its delivery
//! - `hub-bench decide --cluster DIR --entities 1000 --rounds 50`: how fast a trigger becomes
//!   an issued plan (SPEC P2, P11: event-driven, not polled)
//! - `hub-bench trigger --cluster DIR --idle-agents 1000 --rounds 100`: from a release's commit
//!   to the plan at a long-polling agent, with 1,000 more agents connected and idle
//!
//! - `hub-bench compare-etcd`: a 3-node hub and a 3-member etcd 3.4 side by side in one run
//!   (writes at 1, 16, 64 and 256 clients with and without TLS, alternating; leader-kill
//!   failover), `hub_chaos::compare`
//!
//! - `hub-bench history --entities 1000,10000,100000`: memory, store size, open time and
//!   snapshot build and install when every entity carries its finished plans and Activity
//!   (in process, no cluster), `hub_chaos::history`
//!
//! - `hub-bench catch-up --entities 100000`: a new follower's catch-up by snapshot with that
//!   history, end to end in real processes, `hub_chaos::catch_up`
//!
//! `DIR` is a `hubctl dev up` directory (its `cluster.json` gives addresses and pids).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use futures::StreamExt;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use hub_chaos::compare::hub::{connect_with, leader_among};
use hub_chaos::runner::process::is_alive;
use hub_chaos::stats::Latencies;
use hub_client::answer::{ListPlans, Typed};
use hub_proto::hub_client::HubClient;
use hub_proto::{
    CreateEnvironmentRequest, NodeStatusRequest, QueryRequest, ReadOptions, SubmitRequest,
};
use hubctl::dev::{ClusterFile, NodeEntry};
use tonic::transport::Channel;

#[derive(Parser)]
#[command(name = "hub-bench")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Concurrent writers against the leader: throughput and commit latency.
    Writes {
        /// `hubctl dev up` directory.
        #[arg(long)]
        cluster: PathBuf,
        /// Writer counts to run, one after the other.
        #[arg(long, value_delimiter = ',', default_value = "1,16,64")]
        concurrency: Vec<usize>,
        /// Seconds per run.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Entities to create first (in environments of 100, not timed as writes), so the
        /// writes run against a hub that holds that many.
        #[arg(long, default_value_t = 0)]
        entities: usize,
    },
    /// Kill the leader N times; time from kill to the first committed write.
    Failover {
        /// `hubctl dev up` directory.
        #[arg(long)]
        cluster: PathBuf,
        /// Number of leader kills.
        #[arg(long, default_value_t = 20)]
        kills: usize,
    },
    /// Simulated agents (one environment and entity each) syncing every second while new
    /// releases roll out to all of them.
    Agents {
        /// `hubctl dev up` directory.
        #[arg(long)]
        cluster: PathBuf,
        /// Number of agents (and environments).
        #[arg(long, default_value_t = 1000)]
        agents: usize,
        /// Seconds of measurement.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        /// A new release every this many seconds.
        #[arg(long, default_value_t = 15)]
        release_every: u64,
        /// Longest wait of one plan fetch (the agent's `--poll-wait-ms`; its default).
        #[arg(long, default_value_t = 10_000)]
        poll_wait_ms: u64,
        /// How often each agent compares and reports its observed state (the agent's
        /// `--state-interval-ms`; its default).
        #[arg(long, default_value_t = 1_000)]
        state_interval_ms: u64,
        /// How long a task report waits for the ones that follow it (the agent's
        /// `--report-linger-ms`; its default).
        #[arg(long, default_value_t = hub_agent::executor::DEFAULT_REPORT_LINGER.as_millis() as u64)]
        report_linger_ms: u64,
        /// How long each simulated task takes (at most 60,000).
        #[arg(long, default_value_t = 1)]
        task_ms: u64,
    },
    /// The hub against etcd 3.4 on this machine, in one run: writes at each client count
    /// with and without TLS (alternating, each round on fresh clusters), then leader-kill
    /// failover. Installs Debian's etcd-server when etcd is missing (as root).
    CompareEtcd {
        /// Client counts.
        #[arg(long, value_delimiter = ',', default_value = "1,16,64,256")]
        clients: Vec<usize>,
        /// Seconds per client count and round.
        #[arg(long, default_value_t = 10)]
        seconds: u64,
        /// Rounds (each system goes first in every other one).
        #[arg(long, default_value_t = 2)]
        rounds: usize,
        /// Bytes per written value.
        #[arg(long, default_value_t = 256)]
        value_bytes: usize,
        /// Leader kills of the hub (0: no failover comparison).
        #[arg(long, default_value_t = 30)]
        hub_kills: usize,
        /// Leader kills of etcd.
        #[arg(long, default_value_t = 10)]
        etcd_kills: usize,
        /// `tls`, `plaintext`, or both in the order given; failover runs with the first.
        #[arg(long, value_delimiter = ',', default_value = "tls,plaintext")]
        security: Vec<SecurityArg>,
        /// The etcd server to run (default: etcd on PATH, else Debian's etcd-server installed).
        #[arg(long)]
        etcd: Option<PathBuf>,
        /// Where the clusters' directories go (default: a temporary directory).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// A rolling restart under load: a fresh 3-node hub (mutual TLS), closed-loop writers
    /// spread over the nodes, each node stopped with SIGTERM and started again in turn; the
    /// longest gap between acknowledged writes.
    RollingRestart {
        /// Writers.
        #[arg(long, default_value_t = 64)]
        clients: usize,
        /// Seconds of load before the first restart and after each.
        #[arg(long, default_value_t = 5)]
        settle: u64,
        /// Rolling restarts, one after the other (each on a fresh cluster).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where each run's cluster goes, kept with its logs as `DIR/run-N` (default: a
        /// temporary directory, removed).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// Time from a release's commit to the plan at a long-polling agent, with `idle-agents`
    /// more agents connected and idle.
    Trigger {
        /// `hubctl dev up` directory.
        #[arg(long)]
        cluster: PathBuf,
        /// Agents connected with nothing to do.
        #[arg(long, default_value_t = 1000)]
        idle_agents: usize,
        /// Releases, one after the other.
        #[arg(long, default_value_t = 100)]
        rounds: usize,
    },
    /// Memory, store and snapshots when every entity carries its history: generated by the
    /// engine in this process (no cluster), each size in its own processes.
    History {
        /// Entity counts to run, one after the other.
        #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
        entities: Vec<usize>,
        /// Entities per environment.
        #[arg(long, default_value_t = 100)]
        per_environment: usize,
        /// Release rounds: finished plans and Activity lines per entity.
        #[arg(long, default_value_t = 40)]
        rounds: usize,
        /// Where the stores go (default: a temporary directory, removed).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// A new follower's catch-up by snapshot at that size, end to end: node 1 started on a
    /// store seeded with the history, then two nodes added (real processes, mutual TLS).
    CatchUp {
        /// Entities.
        #[arg(long, default_value_t = 10000)]
        entities: usize,
        /// Entities per environment.
        #[arg(long, default_value_t = 100)]
        per_environment: usize,
        /// Release rounds: finished plans and Activity lines per entity.
        #[arg(long, default_value_t = 50)]
        rounds: usize,
        /// Where the cluster goes, kept with its logs (default: a temporary directory,
        /// removed).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
    /// What journaling a task step costs an agent on DIR's file system: the journal's log
    /// against rewriting the whole journal per change (the design before the log), with
    /// journals remembering each number of finished plans.
    Journal {
        /// Where the journals go (default: the current directory).
        #[arg(long, default_value = ".")]
        dir: PathBuf,
        /// Task steps per measurement (each a record and an acknowledgement).
        #[arg(long, default_value_t = 500)]
        steps: usize,
        /// Finished plans the journal remembers (the agent keeps up to 10,000).
        #[arg(long, value_delimiter = ',', default_value = "0,10000")]
        finished: Vec<usize>,
    },
    /// `history`'s first phase for one size (its own process): prints a JSON report.
    #[command(hide = true)]
    HistoryBuild {
        #[arg(long)]
        entities: usize,
        #[arg(long)]
        per_environment: usize,
        #[arg(long)]
        rounds: usize,
        #[arg(long)]
        dir: PathBuf,
        /// Seed the store as node 1 of this cluster (default: the benchmark's own id).
        #[arg(long)]
        cluster_id: Option<String>,
        /// Node 1's Raft address in the seeded membership.
        #[arg(long)]
        node_addr: Option<String>,
    },
    /// `history`'s second phase for one size (its own process): prints a JSON report.
    #[command(hide = true)]
    HistoryLoad {
        #[arg(long)]
        dir: PathBuf,
    },
    /// `history`'s third phase for one size (its own process): prints a JSON report.
    #[command(hide = true)]
    HistoryInstall {
        #[arg(long)]
        from: PathBuf,
        #[arg(long)]
        empty: PathBuf,
    },
    /// Time from a trigger's commit to the issued plan: a new entity (one decision) `rounds`
    /// times, then a release published to `entities` waiting entities (fan-out).
    Decide {
        /// `hubctl dev up` directory.
        #[arg(long)]
        cluster: PathBuf,
        /// Entities waiting for the fan-out release.
        #[arg(long, default_value_t = 1000)]
        entities: usize,
        /// Single-entity rounds.
        #[arg(long, default_value_t = 50)]
        rounds: usize,
    },
}

/// `--security` values.
#[derive(Clone, Copy, Debug, clap::ValueEnum)]
enum SecurityArg {
    /// Mutual TLS on both systems.
    Tls,
    /// Plaintext on both.
    Plaintext,
}

impl From<SecurityArg> for hub_chaos::compare::Security {
    fn from(arg: SecurityArg) -> Self {
        match arg {
            SecurityArg::Tls => hub_chaos::compare::Security::Tls,
            SecurityArg::Plaintext => hub_chaos::compare::Security::Plaintext,
        }
    }
}

impl Cmd {
    /// The dev cluster the command measures (`--cluster`), for those that run against one.
    fn cluster(&self) -> Option<&Path> {
        match self {
            Cmd::Writes { cluster, .. }
            | Cmd::Failover { cluster, .. }
            | Cmd::Decide { cluster, .. }
            | Cmd::Trigger { cluster, .. }
            | Cmd::Agents { cluster, .. } => Some(cluster),
            Cmd::CompareEtcd { .. }
            | Cmd::RollingRestart { .. }
            | Cmd::History { .. }
            | Cmd::CatchUp { .. }
            | Cmd::HistoryBuild { .. }
            | Cmd::HistoryLoad { .. }
            | Cmd::HistoryInstall { .. }
            | Cmd::Journal { .. } => None,
        }
    }
}

/// The benchmarked cluster's directory and how its admin dials it (mutual TLS unless the
/// cluster was started with `dev up --insecure`). One cluster per run: set once in `main`.
static HUB: std::sync::OnceLock<(PathBuf, hub_tls::client::Connector)> = std::sync::OnceLock::new();

fn use_cluster(dir: &Path) -> anyhow::Result<()> {
    let file = hubctl::read_cluster_file(dir)?;
    let connector = hubctl::dev::dev_connector(dir, &file)?;
    HUB.set((dir.to_path_buf(), connector))
        .map_err(|_| anyhow::anyhow!("one cluster per run"))
}

fn connector() -> anyhow::Result<&'static hub_tls::client::Connector> {
    Ok(&HUB.get().context("no cluster")?.1)
}

async fn connect(addr: &str) -> anyhow::Result<HubClient<Channel>> {
    connect_with(connector()?, addr).await
}

async fn leader(cluster: &ClusterFile, skip: Option<u64>) -> Option<NodeEntry> {
    leader_among(connector().ok()?, &cluster.nodes, skip).await
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn next_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates `n` entities of a new product, in new environments of 100 each, 64 writes at a
/// time on the leader at `addr`. Returns how long it took.
async fn fill_entities(addr: &str, n: usize) -> anyhow::Result<Duration> {
    const PER_ENVIRONMENT: usize = 100;
    let started = Instant::now();
    let run = next_name("fill");
    let product = format!("com.bench:{run}");
    let c = connect(addr).await?;
    submit(
        &mut c.clone(),
        serde_json::json!({"CreateProduct": {"product_id": product, "description": ""}}),
    )
    .await?;
    let envs: Vec<String> = (0..n.div_ceil(PER_ENVIRONMENT))
        .map(|e| format!("{run}-{e}"))
        .collect();
    let environments = envs
        .iter()
        .map(|env| serde_json::json!({"CreateEnvironment": {"name": env, "description": ""}}));
    submit_all(&c, environments.collect())
        .await
        .context("creating the fill's environments")?;
    let entities =
        (0..n).map(|i| entity(&envs[i / PER_ENVIRONMENT], &format!("svc-{i}"), &product));
    submit_all(&c, entities.collect())
        .await
        .context("creating the fill's entities")?;
    Ok(started.elapsed())
}

/// Submits `commands`, 64 at a time over `c`'s connection; the first error, if any.
async fn submit_all(
    c: &HubClient<Channel>,
    commands: Vec<serde_json::Value>,
) -> anyhow::Result<()> {
    futures::stream::iter(commands)
        .map(|command| {
            let mut c = c.clone();
            async move { submit(&mut c, command).await }
        })
        .buffer_unordered(64)
        .collect::<Vec<anyhow::Result<()>>>()
        .await
        .into_iter()
        .collect()
}

async fn writes(
    dir: &Path,
    concurrency: &[usize],
    seconds: u64,
    entities: usize,
) -> anyhow::Result<()> {
    let cluster = hubctl::read_cluster_file(dir)?;
    let leader = leader(&cluster, None).await.context("no leader")?;
    if entities > 0 {
        let took = fill_entities(&leader.addr, entities).await?;
        eprintln!(
            "writes: created {entities} entities first in {:.1} s",
            took.as_secs_f64()
        );
    }
    println!("| writers | writes | throughput (w/s) | p50 (ms) | p99 (ms) | errors |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for &n in concurrency {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let errors = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..n {
            let addr = leader.addr.clone();
            let errors = errors.clone();
            tasks.push(tokio::spawn(async move {
                let mut lat = Latencies::default();
                let Ok(mut c) = connect(&addr).await else {
                    errors.fetch_add(1, Ordering::Relaxed);
                    return lat;
                };
                while Instant::now() < deadline {
                    let req = CreateEnvironmentRequest {
                        name: next_name("b"),
                        description: String::new(),
                        request_id: String::new(),
                    };
                    let t = Instant::now();
                    match c.create_environment(req).await {
                        Ok(_) => lat.push(t.elapsed()),
                        Err(_) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                lat
            }));
        }
        let start = Instant::now();
        let mut all = Latencies::default();
        for t in tasks {
            all.extend(t.await?);
        }
        let elapsed = start.elapsed().as_secs_f64();
        println!(
            "| {n} | {} | {:.0} | {:.2} | {:.2} | {} |",
            all.len(),
            all.len() as f64 / elapsed,
            all.percentile(50.0).as_secs_f64() * 1e3,
            all.percentile(99.0).as_secs_f64() * 1e3,
            errors.load(Ordering::Relaxed)
        );
    }
    Ok(())
}

async fn failover(dir: &Path, kills: usize) -> anyhow::Result<()> {
    let hubctl = std::env::current_exe()?.with_file_name("hubctl");
    let mut samples = Latencies::default();
    for round in 1..=kills {
        let cluster = hubctl::read_cluster_file(dir)?;
        let Some(old) = leader(&cluster, None).await else {
            bail!("round {round}: no leader")
        };
        let survivors: Vec<NodeEntry> = cluster
            .nodes
            .iter()
            .filter(|n| n.id != old.id)
            .cloned()
            .collect();
        let mut clients = Vec::new();
        for s in &survivors {
            clients.push(connect(&s.addr).await?);
        }
        // A committed write before the kill: the cluster is healthy.
        clients[0]
            .create_environment(CreateEnvironmentRequest {
                name: next_name("pre"),
                ..Default::default()
            })
            .await
            .context("write before kill")?;
        // SAFETY: kill(2) on a pid from cluster.json.
        unsafe { libc::kill(old.pid as i32, libc::SIGKILL) };
        let killed = Instant::now();
        let mut i = 0;
        let took = loop {
            let k = i % clients.len();
            let c = &mut clients[k];
            i += 1;
            let mut req = tonic::Request::new(CreateEnvironmentRequest {
                name: next_name("fo"),
                ..Default::default()
            });
            req.set_timeout(Duration::from_secs(3));
            if let Ok(r) = c.create_environment(req).await {
                if r.into_inner().leader_id != old.id {
                    break killed.elapsed();
                }
            }
            if killed.elapsed() > Duration::from_secs(30) {
                bail!("round {round}: no write committed within 30s of the kill");
            }
        };
        samples.push(took);
        println!(
            "round {round}: killed leader {} -> first commit after {:.0} ms",
            old.id,
            took.as_secs_f64() * 1e3
        );
        restart_and_catch_up(&hubctl, dir, &old, &survivors[0].addr).await?;
    }
    println!(
        "\nfailover over {} kills: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        samples.len(),
        samples.percentile(50.0).as_secs_f64() * 1e3,
        samples.percentile(99.0).as_secs_f64() * 1e3,
        samples.percentile(100.0).as_secs_f64() * 1e3
    );
    Ok(())
}

/// Restarts the killed node `old` once its process is gone, and waits until it has applied
/// what the survivor at `survivor` has, so a quorum survives the next kill.
async fn restart_and_catch_up(
    hubctl: &Path,
    dir: &Path,
    old: &NodeEntry,
    survivor: &str,
) -> anyhow::Result<()> {
    while is_alive(old.pid) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let st = Command::new(hubctl)
        .args(["dev", "restart-node", "--data-dir"])
        .arg(dir)
        .args(["--id", &old.id.to_string(), "-o", "json"])
        .output()?;
    if !st.status.success() {
        bail!(
            "restart node {}: {}",
            old.id,
            String::from_utf8_lossy(&st.stderr)
        );
    }
    let target = survivor;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let want = connect(target)
            .await?
            .node_status(NodeStatusRequest::default())
            .await?
            .into_inner()
            .last_applied;
        let got = hub_chaos::compare::hub::applied_via(connect(&old.addr)).await;
        if got >= want {
            break;
        }
        if Instant::now() > deadline {
            bail!("node {} did not catch up", old.id);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Fan-out: `entities` entities of a fresh product wait with nothing to install; its first
/// release is published, and the time until every one of them has an install plan is
/// returned.
async fn fan_out(c: &mut HubClient<Channel>, entities: usize) -> anyhow::Result<Duration> {
    let fan = next_name("fan");
    let product = format!("com.bench:{fan}");
    submit(
        c,
        serde_json::json!({"CreateEnvironment": {"name": fan, "description": ""}}),
    )
    .await?;
    submit(
        c,
        serde_json::json!({"CreateProduct": {"product_id": product, "description": ""}}),
    )
    .await?;
    for i in 0..entities {
        submit(c, entity(&fan, &format!("e{i}"), &product)).await?;
    }
    let manifest =
        format!("product-group: com.bench\nproduct-name: {fan}\nproduct-version: 1.0.0\n");
    let started = Instant::now();
    submit(
        c,
        serde_json::json!({"PublishRelease": {"manifest": manifest}}),
    )
    .await?;
    let mut seen = 0;
    while seen < entities {
        let all = ListPlans {
            environment: Some(fan.clone()),
            limit: Some(1_000_000),
            ..ListPlans::default()
        };
        seen = ask(c, &all).await?.plans.len();
        if started.elapsed() > Duration::from_secs(120) {
            bail!("only {seen} of {entities} plans after 120 s");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(started.elapsed())
}

/// Waits until the `idle` agents counted by `idle_metrics` and the one counted by `hot` all
/// wait in a long poll.
async fn wait_long_polling(
    idle_metrics: &hub_agent::metrics::Metrics,
    idle: usize,
    hot: &hub_agent::metrics::Metrics,
) -> anyhow::Result<()> {
    use hub_agent::metrics::Metrics;
    use std::sync::atomic::Ordering::Relaxed;
    // An agent's first fetch returns at once (it knows no fingerprint yet); the one it sends
    // after that success is the long poll. So every agent is connected and waiting once the
    // fetches sent, less the failed ones, reach two per agent.
    let connected = Instant::now();
    // Failures are read first: a fetch is counted before its failure, so the later read of
    // `fetches` is never below them.
    let waiting = |m: &Metrics| {
        let failed = m.fetch_errors.load(Relaxed);
        m.fetches.load(Relaxed).saturating_sub(failed)
    };
    while waiting(idle_metrics) < 2 * idle as u64 || waiting(hot) < 2 {
        if connected.elapsed() > Duration::from_secs(120) {
            bail!(
                "idle agents not all long-polling within 120 s: {} fetches, {} failed",
                idle_metrics.fetches.load(Relaxed),
                idle_metrics.fetch_errors.load(Relaxed)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "{idle} idle agents long-polling after {:?} ({} failed fetches)",
        connected.elapsed(),
        idle_metrics.fetch_errors.load(Relaxed)
    );
    Ok(())
}

/// What the simulated agents' calls were, besides their deliveries (to stderr).
fn print_agent_calls(metrics: &hub_agent::metrics::Metrics) {
    use std::sync::atomic::Ordering::Relaxed;
    let (reports, writes) = (
        metrics.reports_sent.load(Relaxed),
        metrics.report_writes.load(Relaxed),
    );
    let plans = metrics.plans_succeeded.load(Relaxed).max(1);
    eprintln!(
        "task reports: {reports} in {writes} writes ({:.2} writes per succeeded plan)",
        writes as f64 / plans as f64
    );
    // The calls an agent makes besides its task reports: every plan fetch that returned
    // (a plan set changed, or a long poll's wait ran out) and every state report.
    let (fetches, states) = (
        metrics.fetches.load(Relaxed),
        metrics.state_reports.load(Relaxed),
    );
    eprintln!(
        "plan fetches: {fetches} ({:.2} per succeeded plan); state reports: {states} ({:.2} per succeeded plan)",
        fetches as f64 / plans as f64,
        states as f64 / plans as f64
    );
    // Calls that failed and were retried (after a backoff, or on another node): a delivery
    // that waited for one shows in the tail.
    eprintln!(
        "failed plan fetches: {}; endpoint failovers: {}; report retries: {}",
        metrics.fetch_errors.load(Relaxed),
        metrics.endpoint_failovers.load(Relaxed),
        metrics.report_retries.load(Relaxed)
    );
}

/// Each release's deliveries (`marks`: how many were recorded when each was published, and
/// the total), to stderr.
fn print_release_deliveries(all: &[u64], marks: &[usize]) {
    for (i, w) in marks.windows(2).enumerate() {
        let mut part = all[w[0]..w[1]].to_vec();
        part.sort_unstable();
        if let (Some(first), false) = (part.first(), part.is_empty()) {
            let at = |p: f64| part[((p / 100.0) * (part.len() - 1) as f64).round() as usize];
            eprintln!(
                "release {}: {} deliveries, min {first} ms, p50 {} ms, p99 {} ms",
                i + 1,
                part.len(),
                at(50.0),
                at(99.0)
            );
        }
    }
}

/// Submits `command`, reconnecting to whoever leads after a failure (a reset connection or
/// an overloaded leader), up to 5 retries.
async fn publish_with_retries(
    c: &mut HubClient<Channel>,
    cluster: &ClusterFile,
    command: serde_json::Value,
) -> anyhow::Result<()> {
    let mut tries = 0;
    while let Err(e) = submit(c, command.clone()).await {
        tries += 1;
        if tries > 5 {
            return Err(e);
        }
        let l = leader(cluster, None).await.context("no leader")?;
        *c = connect(&l.addr).await?;
    }
    Ok(())
}

async fn submit(c: &mut HubClient<Channel>, command: serde_json::Value) -> anyhow::Result<()> {
    c.submit(SubmitRequest {
        command_json: command.to_string(),
        request_id: next_name("bench"),
    })
    .await
    .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
    Ok(())
}

/// Asks a typed query of the node behind `c`, from its own (stale) state.
async fn ask<T: Typed>(c: &mut HubClient<Channel>, typed: &T) -> anyhow::Result<T::Answer> {
    let r = c
        .query(QueryRequest {
            query_json: serde_json::to_string(&typed.query())?,
            read: Some(ReadOptions { stale: true }),
        })
        .await
        .map_err(|s| anyhow::anyhow!("{}", s.message()))?;
    Ok(serde_json::from_str(&r.into_inner().json)?)
}

fn manifest(version: &str) -> String {
    format!("product-group: com.bench\nproduct-name: svc\nproduct-version: {version}\n")
}

/// The product of `decide`'s entities (its releases are [`manifest`]'s).
const BENCH_PRODUCT: &str = "com.bench:svc";

/// The command creating helm-chart entity `name` of `product` in `env`.
fn entity(env: &str, name: &str, product: &str) -> serde_json::Value {
    serde_json::json!({"CreateEntity": {"environment": env, "kind": "HelmChart", "name": name,
        "product_id": product, "k8s_namespace": "svc", "account_id": null, "release_channel": null}})
}

/// Plans are issued on the leader; polling its own (stale, so local) state sees them at the
/// moment they are applied there.
async fn decide(dir: &Path, entities: usize, rounds: usize) -> anyhow::Result<()> {
    let cluster = hubctl::read_cluster_file(dir)?;
    let Some(l) = leader(&cluster, None).await else {
        bail!("no leader");
    };
    let mut c = connect(&l.addr).await?;
    let env = next_name("decide");
    submit(
        &mut c,
        serde_json::json!({"CreateEnvironment": {"name": env, "description": ""}}),
    )
    .await?;
    let _ = submit(
        &mut c,
        serde_json::json!({"CreateProduct": {"product_id": BENCH_PRODUCT, "description": ""}}),
    )
    .await;
    let _ = submit(
        &mut c,
        serde_json::json!({"PublishRelease": {"manifest": manifest("1.0.0")}}),
    )
    .await;
    let mut single = Latencies::default();
    let mut committed = Latencies::default();
    for i in 0..rounds {
        let name = format!("one{i}");
        let id = format!("eid:{env}:helmChart:{name}");
        let started = Instant::now();
        submit(&mut c, entity(&env, &name, BENCH_PRODUCT)).await?;
        committed.push(started.elapsed());
        loop {
            let of_entity = ListPlans {
                entity: Some(id.clone()),
                ..ListPlans::default()
            };
            if !ask(&mut c, &of_entity).await?.plans.is_empty() {
                break;
            }
            if started.elapsed() > Duration::from_secs(30) {
                bail!("no plan for {id} after 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        single.push(started.elapsed());
    }
    let fan_out = fan_out(&mut c, entities).await?;
    println!("| trigger | decisions | p50 (ms) | p99 (ms) | max (ms) |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| new entity (commit + evaluate + Evaluate commit) | {} | {:.1} | {:.1} | {:.1} |",
        single.len(),
        single.percentile(50.0).as_secs_f64() * 1e3,
        single.percentile(99.0).as_secs_f64() * 1e3,
        single.percentile(100.0).as_secs_f64() * 1e3,
    );
    println!(
        "| (of which: the trigger's own commit) | {} | {:.1} | {:.1} | {:.1} |",
        committed.len(),
        committed.percentile(50.0).as_secs_f64() * 1e3,
        committed.percentile(99.0).as_secs_f64() * 1e3,
        committed.percentile(100.0).as_secs_f64() * 1e3,
    );
    println!(
        "| release published to {entities} waiting entities | {entities} | - | - | {:.1} (all issued) |",
        fan_out.as_secs_f64() * 1e3
    );
    Ok(())
}

/// Creates `product` and, 16 writers at a time on the leader at `addr`, one environment per
/// name of `envs` holding one entity of it (what one simulated agent serves).
async fn create_agent_environments(
    addr: &str,
    product: &str,
    envs: &[String],
) -> anyhow::Result<()> {
    let mut c = connect(addr).await?;
    submit(
        &mut c,
        serde_json::json!({"CreateProduct": {"product_id": product, "description": ""}}),
    )
    .await?;
    futures::stream::iter(envs.to_vec())
        .map(|env| async move {
            let mut c = connect(addr).await?;
            submit(
                &mut c,
                serde_json::json!({"CreateEnvironment": {"name": env, "description": ""}}),
            )
            .await?;
            submit(&mut c, entity(&env, "svc", product)).await
        })
        .buffer_unordered(16)
        .collect::<Vec<anyhow::Result<()>>>()
        .await
        .into_iter()
        .collect::<anyhow::Result<Vec<()>>>()?;
    Ok(())
}

/// Issue 18's trigger-to-plan time: `idle` agents long-poll with nothing to do while one more
/// agent's product gets a new release `rounds` times; each round is timed from sending the
/// release (so its own commit is included) to that agent holding the plan, and the next
/// round starts once the plan succeeded.
async fn trigger_bench(dir: &Path, idle: usize, rounds: usize) -> anyhow::Result<()> {
    use hub_agent::metrics::Metrics;
    use std::sync::atomic::Ordering::Relaxed;

    let cluster = hubctl::read_cluster_file(dir)?;
    let Some(l) = leader(&cluster, None).await else {
        bail!("no leader");
    };
    let endpoints: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let run = next_name("trig");
    let idle_envs: Vec<String> = (0..idle).map(|i| format!("{run}-idle-{i}")).collect();
    let hot_env = vec![format!("{run}-hot")];
    let product = format!("com.bench:{run}");
    create_agent_environments(&l.addr, &format!("{product}-idle"), &idle_envs).await?;
    create_agent_environments(&l.addr, &product, &hot_env).await?;
    // The agent's defaults: a fetch waits up to 10 s for a change, state compared each second.
    let settings = hub_chaos::sim_agents::SimSettings {
        poll_wait: Duration::from_secs(10),
        state_interval: Duration::from_secs(1),
        report_linger: hub_agent::executor::DEFAULT_REPORT_LINGER,
        task_latency: Duration::from_millis(1),
    };
    let idle_metrics = Arc::new(Metrics::default());
    let _idle =
        hub_chaos::sim_agents::spawn(dir, &endpoints, &idle_envs, &settings, &idle_metrics)?;
    let hot = Arc::new(Metrics::default());
    let _hot = hub_chaos::sim_agents::spawn(dir, &endpoints, &hot_env, &settings, &hot)?;
    wait_long_polling(&idle_metrics, idle, &hot).await?;
    let waiting_since = Instant::now();
    let mut c = connect(&l.addr).await?;
    let mut committed = Latencies::default();
    let mut delivered = Latencies::default();
    for round in 1..=rounds {
        let before = hot.delivery.samples().len();
        let manifest = format!(
            "product-group: com.bench\nproduct-name: {run}\nproduct-version: 1.{round}.0\n"
        );
        let started = Instant::now();
        submit(
            &mut c,
            serde_json::json!({"PublishRelease": {"manifest": manifest}}),
        )
        .await?;
        committed.push(started.elapsed());
        // Polled every half millisecond: the figure is at most that late.
        while hot.delivery.samples().len() == before {
            if started.elapsed() > Duration::from_secs(30) {
                bail!("round {round}: no plan at the agent after 30 s");
            }
            tokio::time::sleep(Duration::from_micros(500)).await;
        }
        let took = started.elapsed();
        delivered.push(took);
        if took > Duration::from_millis(50) {
            eprintln!(
                "round {round}: {:.1} ms, {:.1} s after the idle agents were all waiting",
                took.as_secs_f64() * 1e3,
                waiting_since.elapsed().as_secs_f64()
            );
        }
        while hot.plans_succeeded.load(Relaxed) < round as u64 {
            if started.elapsed() > Duration::from_secs(60) {
                bail!("round {round}: the plan did not succeed within 60 s");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
    let failed = idle_metrics.fetch_errors.load(Relaxed) + hot.fetch_errors.load(Relaxed);
    eprintln!("failed fetches over the run: {failed}");
    let ms = |l: &Latencies, p: f64| l.percentile(p).as_secs_f64() * 1e3;
    println!("| idle agents | rounds | release commit p50 / p99 (ms) | release → plan at agent p50 (ms) | p99 (ms) | max (ms) |");
    println!("|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {idle} | {rounds} | {:.1} / {:.1} | {:.1} | {:.1} | {:.1} |",
        ms(&committed, 50.0),
        ms(&committed, 99.0),
        ms(&delivered, 50.0),
        ms(&delivered, 99.0),
        ms(&delivered, 100.0),
    );
    Ok(())
}

/// CPU seconds (user + system) and resident memory (KiB) of a process.
fn proc_usage(pid: u32) -> Option<(f64, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let rss = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some((ticks / hz, rss))
}

async fn agents_bench(
    dir: &Path,
    n: usize,
    seconds: u64,
    release_every: u64,
    settings: &hub_chaos::sim_agents::SimSettings,
) -> anyhow::Result<()> {
    use hub_agent::metrics::Metrics;

    let cluster = hubctl::read_cluster_file(dir)?;
    let Some(l) = leader(&cluster, None).await else {
        bail!("no leader");
    };
    let endpoints: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    let run = next_name("sim");
    let product = format!("com.bench:{run}");
    let mut c = connect(&l.addr).await?;
    let setup = Instant::now();
    let envs: Vec<String> = (0..n).map(|i| format!("{run}-{i}")).collect();
    create_agent_environments(&l.addr, &product, &envs).await?;
    eprintln!(
        "setup: {n} environments and entities in {:?}",
        setup.elapsed()
    );
    let metrics = Arc::new(Metrics::default());
    let _agents = hub_chaos::sim_agents::spawn(dir, &endpoints, &envs, settings, &metrics)?;
    let before: Vec<(f64, u64)> = cluster
        .nodes
        .iter()
        .filter_map(|n| proc_usage(n.pid))
        .collect();
    let own_before = proc_usage(std::process::id());
    let started = Instant::now();
    let mut releases = 0u64;
    let mut next_release = Instant::now();
    let mut peak_rss = 0u64;
    // How many deliveries were recorded when each release was published, to split them.
    let mut marks: Vec<usize> = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        if Instant::now() >= next_release {
            marks.push(metrics.delivery.samples().len());
            releases += 1;
            let manifest = format!(
                "product-group: com.bench\nproduct-name: {run}\nproduct-version: 1.{releases}.0\n"
            );
            let command = serde_json::json!({"PublishRelease": {"manifest": manifest}});
            publish_with_retries(&mut c, &cluster, command)
                .await
                .with_context(|| format!("publishing release {releases}"))?;
            next_release += Duration::from_secs(release_every);
        }
        let rss: u64 = cluster
            .nodes
            .iter()
            .filter_map(|n| proc_usage(n.pid))
            .map(|u| u.1)
            .sum();
        peak_rss = peak_rss.max(rss);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let after: Vec<(f64, u64)> = cluster
        .nodes
        .iter()
        .filter_map(|n| proc_usage(n.pid))
        .collect();
    let cpu: f64 = after.iter().zip(&before).map(|(a, b)| a.0 - b.0).sum();
    let own_cpu = match (own_before, proc_usage(std::process::id())) {
        (Some(b), Some(a)) => (a.0 - b.0) / elapsed,
        _ => f64::NAN,
    };
    eprintln!("load generator CPU: {own_cpu:.2} cores");
    print_agent_calls(&metrics);
    let all = metrics.delivery.samples();
    marks.push(all.len());
    print_release_deliveries(&all, &marks);
    let mut samples = all;
    samples.sort_unstable();
    let pct = |p: f64| {
        if samples.is_empty() {
            0
        } else {
            samples[((p / 100.0) * (samples.len() - 1) as f64).round() as usize]
        }
    };
    use std::sync::atomic::Ordering::Relaxed;
    println!("| agents | releases | plans delivered | plans succeeded | delivery p50 (ms) | p99 (ms) | max (ms) | hub CPU (cores, 3 nodes) | hub RSS (MiB, 3 nodes, peak) |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    println!(
        "| {n} | {releases} | {} | {} | {} | {} | {} | {:.2} | {} |",
        samples.len(),
        metrics.plans_succeeded.load(Relaxed),
        pct(50.0),
        pct(99.0),
        pct(100.0),
        cpu / elapsed,
        peak_rss / 1024
    );
    Ok(())
}

/// Runs `hub-bench` again with `args` and parses the JSON it prints.
fn child<T: serde::de::DeserializeOwned>(args: &[String]) -> anyhow::Result<T> {
    let out = Command::new(std::env::current_exe()?)
        .args(args)
        .stderr(std::process::Stdio::inherit())
        .output()?;
    if !out.status.success() {
        bail!("hub-bench {} failed: {}", args.join(" "), out.status);
    }
    serde_json::from_slice(&out.stdout).with_context(|| format!("hub-bench {}", args.join(" ")))
}

/// `hub-bench history`: each size's build and load in their own processes, then one table.
fn history(
    sizes: &[usize],
    per_environment: usize,
    rounds: usize,
    dir: Option<&Path>,
) -> anyhow::Result<()> {
    use hub_chaos::history::{BuildReport, InstallReport, LoadReport};
    if sizes.is_empty() || sizes.contains(&0) || per_environment == 0 || rounds == 0 {
        bail!("--entities, --per-environment and --rounds: at least 1");
    }
    let tmp = tempfile::Builder::new().prefix("history").tempdir()?;
    let dir = dir.unwrap_or(tmp.path());
    let mut rows = Vec::new();
    for &n in sizes {
        let store = dir.join(format!("store-{n}"));
        let empty = dir.join(format!("follower-{n}"));
        eprintln!("history: {n} entities: generating {rounds} rounds");
        let built: BuildReport = child(&[
            "history-build".into(),
            format!("--entities={n}"),
            format!("--per-environment={per_environment}"),
            format!("--rounds={rounds}"),
            format!("--dir={}", store.display()),
        ])?;
        // A store the snapshot could not seed holds nothing worth opening.
        let loaded: Option<(LoadReport, InstallReport)> = match built.install {
            Ok(_) => {
                eprintln!("history: {n} entities: opening the store");
                let load: LoadReport =
                    child(&["history-load".into(), format!("--dir={}", store.display())])?;
                eprintln!("history: {n} entities: installing its snapshot in a new follower");
                let install: InstallReport = child(&[
                    "history-install".into(),
                    format!("--from={}", store.display()),
                    format!("--empty={}", empty.display()),
                ])?;
                Some((load, install))
            }
            Err(_) => None,
        };
        std::fs::remove_dir_all(&store).ok();
        std::fs::remove_dir_all(&empty).ok();
        rows.push((n, built, loaded));
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    let secs = |r: &Result<f64, String>| match r {
        Ok(s) => format!("{s:.1} s"),
        Err(e) => format!("failed: {e}"),
    };
    println!("| entities | entries | finished plans | Activity lines | apply | RSS after apply | encoded state | per entity | snapshot | store on disk | open | RSS open (node restart) | RSS open per entity | snapshot build | snapshot install (new follower) | follower's peak RSS |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (n, b, l) in &rows {
        let encoded: usize = b.tables.iter().map(|t| t.2).sum();
        let opened = match l {
            Some((l, i)) => {
                let build = match &l.build {
                    Ok((s, bytes)) => format!("{s:.1} s ({:.0} MiB)", *bytes as f64 / 1048576.0),
                    Err(e) => format!("failed: {e}"),
                };
                format!(
                    "{:.0} MiB | {:.1} s | {:.0} MiB | {:.1} KiB | {build} | {} | {:.0} MiB |",
                    l.disk_bytes as f64 / 1048576.0,
                    l.open_seconds,
                    mib(l.rss_open_kib.saturating_sub(l.rss_before_kib)),
                    l.rss_open_kib.saturating_sub(l.rss_before_kib) as f64 / *n as f64,
                    secs(&i.install),
                    mib(i.peak_kib),
                )
            }
            None => "not seeded | - | - | - | - | - | - |".to_string(),
        };
        println!(
            "| {n} | {} | {} | {} | {:.1} s | {:.0} MiB | {:.0} MiB | {:.1} KiB | {:.0} MiB | {opened}",
            b.entries,
            b.finished_plans,
            b.activity_lines,
            b.apply_seconds,
            mib(b.rss_after_kib.saturating_sub(b.rss_before_kib)),
            encoded as f64 / 1048576.0,
            encoded as f64 / 1024.0 / *n as f64,
            b.snapshot_bytes as f64 / 1048576.0,
        );
        if let Err(e) = &b.install {
            println!("\nseeding the {n}-entity store through a snapshot install failed: {e}\n");
        }
    }
    println!("\nencoded bytes per table (largest first):\n");
    println!("| entities | table | records | bytes | per entity |");
    println!("|---:|---|---:|---:|---:|");
    for (n, b, _) in &rows {
        for (table, records, bytes) in b.tables.iter().take(6) {
            println!(
                "| {n} | {table} | {records} | {:.1} MiB | {:.2} KiB |",
                *bytes as f64 / 1048576.0,
                *bytes as f64 / 1024.0 / *n as f64
            );
        }
    }
    Ok(())
}

/// `hub-bench catch-up`: one size, then one table.
fn catch_up(
    entities: usize,
    per_environment: usize,
    rounds: usize,
    dir: Option<&Path>,
) -> anyhow::Result<()> {
    if entities == 0 || per_environment == 0 || rounds == 0 {
        bail!("--entities, --per-environment and --rounds: at least 1");
    }
    let tmp = tempfile::Builder::new().prefix("catch-up").tempdir()?;
    let dir = dir.unwrap_or(tmp.path());
    let exe = std::env::current_exe()?;
    let shape = hub_chaos::history::Shape {
        entities,
        per_environment,
        rounds,
    };
    let r = hub_chaos::catch_up::run(&exe.with_file_name("hubctl"), &exe, shape, dir)?;
    let mib = |kib: u64| kib as f64 / 1024.0;
    let secs = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.1} s"));
    println!(
        "{entities} entities, {} finished plans, {} Activity lines; node 1 started on the seeded store in {:.1} s, RSS {:.0} MiB\n",
        r.built.finished_plans,
        r.built.activity_lines,
        r.leader_start_seconds,
        mib(r.leader_rss_kib)
    );
    println!("| node added | snapshot | add-node (start to voter) | transfer | staging and install | new node's peak RSS | leader's peak RSS |");
    println!("|---:|---:|---:|---:|---:|---:|---:|");
    for a in &r.added {
        println!(
            "| {} | {} | {:.1} s | {} | {} | {:.0} MiB | {:.0} MiB |",
            a.id,
            a.snapshot_bytes.map_or("-".to_string(), |b| format!(
                "{:.0} MiB",
                b as f64 / 1048576.0
            )),
            a.add_seconds,
            secs(a.transfer_seconds),
            secs(a.install_seconds),
            mib(a.peak_kib),
            mib(a.leader_peak_kib),
        );
    }
    println!(
        "\nevery member's state digest equal at applied index {}",
        r.agreed_at
    );
    Ok(())
}

/// jemalloc, as hub-node: `hub-bench agents` runs thousands of real agents (TLS, HTTP/2,
/// journals) in this process, on the cores of the nodes it measures; with glibc's malloc the
/// load generator took 13 % more CPU for the same run (docs/BENCHMARKS.md, "The allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

// Long: one arm per subcommand, each handing its flags to the function that runs it.
#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cmd = Args::parse().cmd;
    if let Some(cluster) = cmd.cluster() {
        use_cluster(cluster)?;
    }
    match cmd {
        Cmd::Writes {
            cluster,
            concurrency,
            seconds,
            entities,
        } => writes(&cluster, &concurrency, seconds, entities).await,
        Cmd::Failover { cluster, kills } => failover(&cluster, kills).await,
        Cmd::Decide {
            cluster,
            entities,
            rounds,
        } => decide(&cluster, entities, rounds).await,
        Cmd::Trigger {
            cluster,
            idle_agents,
            rounds,
        } => {
            if rounds == 0 {
                bail!("--rounds: at least 1");
            }
            trigger_bench(&cluster, idle_agents, rounds).await
        }
        Cmd::Agents {
            cluster,
            agents,
            seconds,
            release_every,
            poll_wait_ms,
            state_interval_ms,
            report_linger_ms,
            task_ms,
        } => {
            // The agent's own bounds (`hub-agent` clamps the same way).
            let settings = hub_chaos::sim_agents::SimSettings {
                poll_wait: Duration::from_millis(poll_wait_ms.clamp(100, 30_000)),
                state_interval: Duration::from_millis(state_interval_ms.max(100)),
                report_linger: Duration::from_millis(report_linger_ms.min(1_000)),
                task_latency: Duration::from_millis(task_ms.min(60_000)),
            };
            agents_bench(&cluster, agents, seconds, release_every, &settings).await
        }
        Cmd::RollingRestart {
            clients,
            settle,
            runs,
            dir,
        } => rolling_restart(clients, settle, runs, dir.as_deref()).await,
        Cmd::History {
            entities,
            per_environment,
            rounds,
            dir,
        } => history(&entities, per_environment, rounds, dir.as_deref()),
        Cmd::CatchUp {
            entities,
            per_environment,
            rounds,
            dir,
        } => catch_up(entities, per_environment, rounds, dir.as_deref()),
        Cmd::HistoryBuild {
            entities,
            per_environment,
            rounds,
            dir,
            cluster_id,
            node_addr,
        } => {
            let shape = hub_chaos::history::Shape {
                entities,
                per_environment,
                rounds,
            };
            history_build(shape, &dir, cluster_id, node_addr).await
        }
        Cmd::Journal {
            dir,
            steps,
            finished,
        } => journal(&dir, steps, &finished),
        Cmd::HistoryLoad { dir } => {
            let report = hub_chaos::history::load(&dir).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Cmd::HistoryInstall { from, empty } => {
            let report = hub_chaos::history::install(&from, &empty).await?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Cmd::CompareEtcd {
            clients,
            seconds,
            rounds,
            value_bytes,
            hub_kills,
            etcd_kills,
            security,
            etcd,
            dir,
        } => {
            let security = security.into_iter().map(Into::into).collect();
            let settings = hub_chaos::compare::Settings {
                clients,
                seconds,
                rounds,
                value_bytes,
                hub_kills,
                etcd_kills,
                security,
                dir: dir.unwrap_or_default(),
                hubctl: std::env::current_exe()?.with_file_name("hubctl"),
                etcd: PathBuf::new(),
            };
            compare_etcd(settings, etcd.as_deref()).await
        }
    }
}

/// `hub-bench rolling-restart`: `runs` rolling restarts of a fresh 3-node cluster under
/// `clients` writers, as a table of each run's longest write stall.
async fn rolling_restart(
    clients: usize,
    settle: u64,
    runs: usize,
    dir: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    if clients == 0 || runs == 0 || settle == 0 {
        bail!("--clients, --runs and --settle: at least 1");
    }
    let hubctl = std::env::current_exe()?.with_file_name("hubctl");
    println!("| run | writes | failed calls | longest stall before the restarts (ms) | per node in restart order: id, longest stall (ms) at its start, events (ms after SIGTERM) | longest stall (ms) |");
    println!("|---:|---:|---:|---:|---|---:|");
    let mut worst = Duration::ZERO;
    for run in 1..=runs {
        let tmp = tempfile::Builder::new().prefix("rolling").tempdir()?;
        let at = match &dir {
            Some(d) => d.join(format!("run-{run}")),
            None => tmp.path().to_path_buf(),
        };
        let s = hub_chaos::rolling_restart::run(
            &hubctl,
            &at,
            clients,
            Duration::from_secs(settle),
            256,
        )
        .await?;
        let per: Vec<String> = s
            .per_node
            .iter()
            .map(|r| {
                let ms = |d: Duration| d.as_secs_f64() * 1e3;
                format!(
                    "{}{}: {:.0} at +{:.0} (exited +{:.0}, serving +{:.0}, caught up +{:.0})",
                    r.id,
                    if r.led { " (leader)" } else { "" },
                    ms(r.stall),
                    ms(r.stall_at),
                    ms(r.exited),
                    ms(r.started),
                    ms(r.caught_up)
                )
            })
            .collect();
        println!(
            "| {run} | {} | {} | {:.0} | {} | {:.0} |",
            s.writes,
            s.errors,
            s.baseline.as_secs_f64() * 1e3,
            per.join(", "),
            s.longest.as_secs_f64() * 1e3
        );
        worst = worst.max(s.longest);
    }
    println!(
        "\nlongest write stall over {runs} rolling restarts: {:.0} ms",
        worst.as_secs_f64() * 1e3
    );
    Ok(())
}

/// `hub-bench history-build`: the state of a hub whose entities carry their history, written
/// into `dir` as a node's data directory, seated as `cluster_id`'s node at `node_addr`.
async fn history_build(
    shape: hub_chaos::history::Shape,
    dir: &std::path::Path,
    cluster_id: Option<String>,
    node_addr: Option<String>,
) -> anyhow::Result<()> {
    let mut seat = hub_chaos::history::Seat::default();
    if let Some(id) = cluster_id {
        seat.cluster_id = id;
    }
    if let Some(addr) = node_addr {
        seat.node_addr = addr;
    }
    let report = hub_chaos::history::build(shape, dir, &seat).await?;
    println!("{}", serde_json::to_string(&report)?);
    Ok(())
}

/// `hub-bench journal`: what journaling a task step costs an agent, per design, as a table.
fn journal(dir: &std::path::Path, steps: usize, finished: &[usize]) -> anyhow::Result<()> {
    if steps == 0 {
        bail!("--steps: at least 1");
    }
    println!("| design | finished plans held | changes | µs per change | changes/s |");
    println!("|---|---:|---:|---:|---:|");
    for r in hub_chaos::journal_bench::run(dir, steps, finished)? {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} |",
            r.design,
            r.finished,
            r.changes,
            r.per_change.as_secs_f64() * 1e6,
            1.0 / r.per_change.as_secs_f64().max(1e-9)
        );
    }
    Ok(())
}

/// `hub-bench compare-etcd`: the hub beside etcd in one run (`settings.dir` empty: a
/// temporary directory). Bad flags are refused before anything is installed or started.
async fn compare_etcd(
    mut settings: hub_chaos::compare::Settings,
    etcd: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let tmp = tempfile::Builder::new().prefix("compare-etcd").tempdir()?;
    if settings.dir.as_os_str().is_empty() {
        settings.dir = tmp.path().to_path_buf();
    }
    settings.check()?;
    settings.etcd = hub_chaos::compare::etcd::find_or_install(etcd)?;
    if !hub_chaos::compare::run(&settings).await? {
        bail!("some writes failed: the tables above say where");
    }
    Ok(())
}

//! `hub-bench`: write throughput/latency and leader-failover timing against a real cluster.
//!
//! - `hub-bench writes --cluster DIR --concurrency 1,16,64 --seconds 10`
//! - `hub-bench failover --cluster DIR --kills 20`
//!
//! `DIR` is a `hubctl dev up` directory (its `cluster.json` gives addresses and pids).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use hub_chaos::stats::Latencies;
use hub_proto::hub_client::HubClient;
use hub_proto::{CreateEnvironmentRequest, NodeStatusRequest};
use serde::Deserialize;
use tonic::transport::{Channel, Endpoint};

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
}

#[derive(Deserialize, Clone)]
struct ClusterFile {
    nodes: Vec<NodeEntry>,
}

#[derive(Deserialize, Clone)]
struct NodeEntry {
    id: u64,
    addr: String,
    pid: u32,
}

fn read_cluster(dir: &Path) -> anyhow::Result<ClusterFile> {
    let p = dir.join("cluster.json");
    serde_json::from_slice(&std::fs::read(&p).with_context(|| p.display().to_string())?)
        .with_context(|| p.display().to_string())
}

async fn connect(addr: &str) -> anyhow::Result<HubClient<Channel>> {
    let ch = Endpoint::from_shared(format!("http://{addr}"))?
        .connect_timeout(Duration::from_millis(300))
        .tcp_nodelay(true)
        .connect()
        .await?;
    Ok(HubClient::new(ch))
}

async fn leader(cluster: &ClusterFile, skip: Option<u64>) -> Option<NodeEntry> {
    for n in cluster.nodes.iter().filter(|n| Some(n.id) != skip) {
        if let Ok(mut c) = connect(&n.addr).await {
            if let Ok(s) = c.node_status(NodeStatusRequest {}).await {
                let s = s.into_inner();
                if s.has_leader && Some(s.leader_id) != skip {
                    return cluster.nodes.iter().find(|m| m.id == s.leader_id).cloned();
                }
            }
        }
    }
    None
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn next_name(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

async fn writes(dir: &Path, concurrency: &[usize], seconds: u64) -> anyhow::Result<()> {
    let cluster = read_cluster(dir)?;
    let leader = leader(&cluster, None).await.context("no leader")?;
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

fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
                .unwrap_or(false)
        })
        .unwrap_or(false)
}

async fn failover(dir: &Path, kills: usize) -> anyhow::Result<()> {
    let hubctl = std::env::current_exe()?.with_file_name("hubctl");
    let mut samples = Latencies::default();
    for round in 1..=kills {
        let cluster = read_cluster(dir)?;
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
        while is_alive(old.pid) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let st = Command::new(&hubctl)
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
        // Let the restarted node catch up before the next kill, so a quorum survives it.
        let target = survivors[0].addr.clone();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let want = connect(&target)
                .await?
                .node_status(NodeStatusRequest {})
                .await?
                .into_inner()
                .last_applied;
            let got = match connect(&old.addr).await {
                Ok(mut c) => c
                    .node_status(NodeStatusRequest {})
                    .await
                    .map(|s| s.into_inner().last_applied)
                    .unwrap_or(0),
                Err(_) => 0,
            };
            if got >= want {
                break;
            }
            if Instant::now() > deadline {
                bail!("node {} did not catch up", old.id);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
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

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Args::parse().cmd {
        Cmd::Writes {
            cluster,
            concurrency,
            seconds,
        } => writes(&cluster, &concurrency, seconds).await,
        Cmd::Failover { cluster, kills } => failover(&cluster, kills).await,
    }
}

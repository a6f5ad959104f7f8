//! `hub-bench catch-up`: how long a new follower takes to catch up by snapshot when every
//! entity carries its history (issue 18, item 6), end to end: real `hub-node` processes,
//! the snapshot sent over mutual TLS, staged and installed by the new node.
//!
//! 1. `hubctl dev up --nodes 3` makes the cluster's PKI, ids and ports; `hubctl dev down`
//!    stops it. Nodes 2 and 3 move to the cluster file's `removed` list (never started
//!    again, their ids never reused) and their data directories go.
//! 2. `hub-bench history-build` (its own process) seeds node 1's store with the generated
//!    history ([`crate::history`]) as a one-node cluster with node 1's id, cluster id and
//!    address.
//! 3. `hubctl dev up` starts node 1 on that store; it elects itself. The generated state has
//!    no role bindings, so the dev operator binds itself admin (the bootstrap rule).
//! 4. `hubctl dev add-node`, twice: each new node starts empty, receives the leader's current
//!    snapshot, stages and installs it, catches up the log, and becomes a voter. The call is
//!    timed from start to return; the nodes' own log lines split it into the transfer and
//!    the install; `/proc` gives each process's peak resident size.
//!
//! The leader sends the snapshot it already has (the seeded one): this is the catch-up from
//! a current snapshot. When a leader must build one first, `hub-bench history` measures the
//! build.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{bail, Context};
use chrono::{DateTime, FixedOffset};
use serde::{Deserialize, Serialize};

use crate::history::{BuildReport, Shape};

/// One added node's catch-up.
#[derive(Debug, Clone, Serialize)]
pub struct Added {
    /// Its node id.
    pub id: u64,
    /// Seconds `hubctl dev add-node` took: start, snapshot, log, voter.
    pub add_seconds: f64,
    /// The leader's "sending snapshot" to the new node's "received snapshot", seconds.
    pub transfer_seconds: Option<f64>,
    /// The new node's "received snapshot" to its "installed snapshot", seconds.
    pub install_seconds: Option<f64>,
    /// The snapshot's bytes as the leader logged them.
    pub snapshot_bytes: Option<u64>,
    /// The new node's peak resident size, KiB.
    pub peak_kib: u64,
    /// The leader's peak resident size since it started, KiB.
    pub leader_peak_kib: u64,
}

/// What [`run`] measured.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The seeding process's report (the generated history).
    pub built: BuildReport,
    /// Seconds for node 1 to start on the seeded store and win its election.
    pub leader_start_seconds: f64,
    /// Node 1's resident size once it serves, KiB.
    pub leader_rss_kib: u64,
    /// The added nodes, in order.
    pub added: Vec<Added>,
    /// The applied index at which every member reported the same state digest.
    pub agreed_at: u64,
}

/// Runs the catch-up benchmark in `dir` (which must not exist or be empty). `hubctl` and
/// `hub_bench` are the binaries to run.
pub fn run(hubctl: &Path, hub_bench: &Path, shape: Shape, dir: &Path) -> anyhow::Result<Report> {
    if dir.join("cluster.json").exists() {
        bail!("--dir {}: already holds a cluster", dir.display());
    }
    hubctl_ok(
        hubctl,
        &["dev", "up", "--nodes", "3", "--base-port", "0"],
        dir,
    )?;
    let result = measure(hubctl, hub_bench, shape, dir);
    // Every node this run started, whatever happened.
    let down = hubctl_ok(hubctl, &["dev", "down"], dir);
    let report = result?;
    down?;
    Ok(report)
}

fn measure(hubctl: &Path, hub_bench: &Path, shape: Shape, dir: &Path) -> anyhow::Result<Report> {
    hubctl_ok(hubctl, &["dev", "down"], dir)?;
    let mut cluster = hubctl::read_cluster_file(dir)?;
    let rest = cluster.nodes.split_off(1);
    for node in &rest {
        std::fs::remove_dir_all(&node.data_dir)
            .with_context(|| format!("removing {}", node.data_dir.display()))?;
    }
    cluster.removed.extend(rest);
    let first = cluster.nodes[0].clone();
    std::fs::remove_dir_all(&first.data_dir)
        .with_context(|| format!("removing {}", first.data_dir.display()))?;
    hubctl::dev::write_cluster_file(dir, &cluster)?;

    eprintln!(
        "catch-up: {} entities: generating {} rounds and seeding node 1",
        shape.entities, shape.rounds
    );
    let out = Command::new(hub_bench)
        .arg("history-build")
        .arg(format!("--entities={}", shape.entities))
        .arg(format!("--per-environment={}", shape.per_environment))
        .arg(format!("--rounds={}", shape.rounds))
        .arg(format!("--dir={}", first.data_dir.display()))
        .arg(format!("--cluster-id={}", cluster.cluster_id))
        .arg(format!("--node-addr={}", first.addr))
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("run {}", hub_bench.display()))?;
    if !out.status.success() {
        bail!("hub-bench history-build failed: {}", out.status);
    }
    let built: BuildReport =
        serde_json::from_slice(&out.stdout).context("hub-bench history-build's report")?;
    if let Err(e) = &built.install {
        bail!("seeding node 1's store failed: {e}");
    }

    eprintln!("catch-up: starting node 1 on the seeded store");
    let started = Instant::now();
    hubctl_ok(hubctl, &["dev", "up"], dir)?;
    let leader_start_seconds = started.elapsed().as_secs_f64();
    let leader_pid = hubctl::read_cluster_file(dir)?.nodes[0].pid;
    let leader_rss_kib = proc_kib(leader_pid, "VmRSS:");
    hubctl_ok(hubctl, &["role", "bind", "operator/admin", "admin"], dir)?;

    let mut added = Vec::new();
    for _ in 0..2 {
        eprintln!("catch-up: adding a node");
        let started = Instant::now();
        hubctl_ok(hubctl, &["dev", "add-node"], dir)?;
        let add_seconds = started.elapsed().as_secs_f64();
        let cluster = hubctl::read_cluster_file(dir)?;
        let node = cluster
            .nodes
            .last()
            .context("cluster.json lists no node after add-node")?
            .clone();
        let leader_log = read_log(dir, first.id)?;
        let node_log = read_log(dir, node.id)?;
        let sending = leader_log.lines().rfind(|l| {
            l.contains("sending snapshot") && l.contains(&format!("target={} ", node.id))
        });
        let received = node_log.lines().find(|l| l.contains("received snapshot"));
        let installed = node_log.lines().find(|l| l.contains("installed snapshot"));
        added.push(Added {
            id: node.id,
            add_seconds,
            transfer_seconds: between(sending, received),
            install_seconds: between(received, installed),
            snapshot_bytes: sending.and_then(|l| field(l, "bytes=")),
            peak_kib: proc_kib(node.pid, "VmHWM:"),
            leader_peak_kib: proc_kib(leader_pid, "VmHWM:"),
        });
    }
    eprintln!("catch-up: comparing the members' state digests");
    let agreed_at = digests_agree(hubctl, dir)?;
    Ok(Report {
        built,
        leader_start_seconds,
        leader_rss_kib,
        added,
        agreed_at,
    })
}

/// Waits until every member reports the same applied index, then checks that their state
/// digests are equal. Each member hashes its own store (`hubctl digest --stale`, with a long
/// timeout: at 100,000 entities with history a hash takes seconds). Returns that index.
fn digests_agree(hubctl: &Path, dir: &Path) -> anyhow::Result<u64> {
    let deadline = Instant::now() + std::time::Duration::from_secs(300);
    let cluster = hubctl::read_cluster_file(dir)?;
    loop {
        let mut own = Vec::new();
        for node in &cluster.nodes {
            let out = hubctl_out(
                hubctl,
                &[
                    "--endpoints",
                    &node.addr,
                    "--timeout-ms",
                    "120000",
                    "-o",
                    "json",
                    "digest",
                    "--stale",
                ],
                dir,
            )?;
            let d: Digest = serde_json::from_slice(&out).context("hubctl digest -o json")?;
            own.push((d.applied_index, d.digest));
        }
        if own.iter().all(|o| o.0 == own[0].0) {
            if own.iter().any(|o| o.1 != own[0].1 || o.1.is_empty()) {
                bail!(
                    "the members' state digests differ at index {}: {own:?}",
                    own[0].0
                );
            }
            return Ok(own[0].0);
        }
        if Instant::now() > deadline {
            bail!("the members did not reach one applied index within 300 s: {own:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// What `hubctl digest -o json` prints, as far as the benchmark reads it (missing fields
/// read as 0 and empty; an empty digest never counts as agreeing).
#[derive(Deserialize)]
struct Digest {
    /// The index the digest was taken at.
    #[serde(default)]
    applied_index: u64,
    /// The state digest.
    #[serde(default)]
    digest: String,
}

/// Runs `hubctl ARGS --data-dir DIR` (with the dev cluster's client files for the calls
/// that need them) and fails with its error output if it fails.
fn hubctl_ok(hubctl: &Path, args: &[&str], dir: &Path) -> anyhow::Result<()> {
    hubctl_out(hubctl, args, dir).map(drop)
}

/// [`hubctl_ok`], returning what it printed.
fn hubctl_out(hubctl: &Path, args: &[&str], dir: &Path) -> anyhow::Result<Vec<u8>> {
    let mut cmd = Command::new(hubctl);
    cmd.args(args);
    if args[0] == "dev" {
        cmd.arg("--data-dir").arg(dir);
    } else {
        for (k, v) in dev_env(dir)? {
            cmd.env(k, v);
        }
    }
    let out = cmd
        .output()
        .with_context(|| format!("run {}", hubctl.display()))?;
    if !out.status.success() {
        bail!(
            "hubctl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// The `HUBCTL_*` variables `hubctl dev up` wrote to `DIR/hubctl.env`.
fn dev_env(dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let path = dir.join("hubctl.env");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("export ")?.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect())
}

/// Node `id`'s log in a dev cluster.
fn read_log(dir: &Path, id: u64) -> anyhow::Result<String> {
    let path: PathBuf = dir.join(format!("node-{id}.log"));
    std::fs::read_to_string(&path).with_context(|| path.display().to_string())
}

/// The time of a log line (its first word, RFC 3339).
fn stamp(line: &str) -> Option<DateTime<FixedOffset>> {
    DateTime::parse_from_rfc3339(line.split_whitespace().next()?).ok()
}

/// Seconds from one log line to another.
fn between(from: Option<&str>, to: Option<&str>) -> Option<f64> {
    let d = stamp(to?)? - stamp(from?)?;
    Some(d.num_microseconds()? as f64 / 1e6)
}

/// The number after `key` in a log line.
fn field(line: &str, key: &str) -> Option<u64> {
    let (_, rest) = line.split_once(key)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// A size line of process `pid`'s status, KiB (0 if it is gone).
fn proc_kib(pid: u32, key: &str) -> u64 {
    crate::history::process_status_kib(&pid.to_string(), key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_give_their_time_and_fields() {
        let sending = "2026-12-04T23:08:18.420082Z  INFO hub_node::network: sending snapshot target=6 bytes=28891761";
        let received = "2026-12-04T23:08:18.480010Z  INFO hub_node::raft_service: received snapshot bytes=28891761";
        assert_eq!(field(sending, "bytes="), Some(28_891_761));
        assert_eq!(field(sending, "target="), Some(6));
        let s = between(Some(sending), Some(received)).unwrap();
        assert!((s - 0.059928).abs() < 1e-9, "{s}");
        assert_eq!(between(None, Some(received)), None);
        assert_eq!(stamp("not a time"), None);
    }
}

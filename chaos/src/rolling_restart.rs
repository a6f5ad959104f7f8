//! `hub-bench rolling-restart`: the longest write stall while every node of a 3-node hub is
//! restarted in turn under a closed-loop write load.
//!
//! Each node is stopped with SIGTERM (a leader hands its leadership over first), started
//! again on its data, and given time to catch up before the next; followers go first and the
//! leader last, as an operator rolls a cluster. The writers spread over
//! the nodes and move to the next one when a call fails, as `hubctl` and agents do. A stall
//! is a gap between two consecutive acknowledged writes of the whole load: the longest one
//! is what clients felt.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hub_proto::hub_client::HubClient;
use hub_proto::CreateEnvironmentRequest;
use tonic::transport::Channel;

use crate::compare::hub::HubCluster;
use hubctl::dev::NodeEntry;

/// What the run measured.
#[derive(Debug, Clone)]
pub struct Stalls {
    /// Acknowledged writes.
    pub writes: usize,
    /// Failed calls (each moved its writer to the next node).
    pub errors: u64,
    /// For each restarted node (in order), what happened when.
    pub per_node: Vec<NodeRestart>,
    /// The longest gap over the whole run.
    pub longest: Duration,
    /// The longest gap before the first restart (the load's own jitter).
    pub baseline: Duration,
}

/// One node's restart, its times measured from its SIGTERM.
#[derive(Debug, Clone)]
pub struct NodeRestart {
    /// The node.
    pub id: u64,
    /// Whether it led when stopped.
    pub led: bool,
    /// The longest gap between acknowledgements from its SIGTERM until it caught up.
    pub stall: Duration,
    /// When that gap began.
    pub stall_at: Duration,
    /// When its process had exited.
    pub exited: Duration,
    /// When `hubctl dev restart-node` returned (the node serves).
    pub started: Duration,
    /// When its applied index had caught up with the others'.
    pub caught_up: Duration,
}

/// Writes through one node at a time, moving to the next on any failure.
struct FailoverWriter {
    clients: Vec<HubClient<Channel>>,
    at: usize,
    name: String,
}

impl FailoverWriter {
    async fn write(&mut self, seq: u64, value: &str) -> bool {
        let mut req = tonic::Request::new(CreateEnvironmentRequest {
            name: format!("{}-{seq}", self.name),
            description: value.to_string(),
            request_id: String::new(),
        });
        req.set_timeout(Duration::from_secs(3));
        let ok = self.clients[self.at].create_environment(req).await.is_ok();
        if !ok {
            self.at = (self.at + 1) % self.clients.len();
        }
        ok
    }
}

/// The longest gap between consecutive times in `acks` (sorted here) within `[from, to]`,
/// and when it began.
pub fn longest_gap(acks: &mut [Instant], from: Instant, to: Instant) -> (Duration, Instant) {
    acks.sort_unstable();
    let inside: Vec<Instant> = acks
        .iter()
        .copied()
        .filter(|t| *t >= from && *t <= to)
        .collect();
    let mut longest = (Duration::ZERO, from);
    let mut prev = from;
    for t in inside.into_iter().chain(std::iter::once(to)) {
        let gap = t.saturating_duration_since(prev);
        if gap > longest.0 {
            longest = (gap, prev);
        }
        prev = t;
    }
    longest
}

/// Stops node `n` with SIGTERM, restarts it, and waits until it has caught up with the
/// others of `nodes`; returns when it exited and when it was started again.
async fn restart_one(
    hub: &HubCluster,
    n: &NodeEntry,
    nodes: &[NodeEntry],
) -> anyhow::Result<(Instant, Instant)> {
    let pid = hub
        .nodes()?
        .into_iter()
        .find(|m| m.id == n.id)
        .context("node left cluster.json")?
        .pid;
    // SAFETY: kill(2) on the pid `hubctl dev up` recorded for a node it started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(30);
    while crate::runner::process::is_alive(pid) {
        if Instant::now() > deadline {
            bail!("node {} did not stop within 30 s of SIGTERM", n.id);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let exited = Instant::now();
    hub.restart(n.id)?;
    let started = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let others: Vec<u64> = {
            let mut v = Vec::new();
            for m in nodes.iter().filter(|m| m.id != n.id) {
                v.push(hub.applied(&m.addr).await);
            }
            v
        };
        let want = others.into_iter().max().unwrap_or(0);
        if want > 0 && hub.applied(&n.addr).await + 64 >= want {
            break;
        }
        if Instant::now() > deadline {
            bail!("node {} did not catch up within 60 s of its restart", n.id);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((exited, started))
}

/// Starts a 3-node hub in `dir` (mutual TLS), runs `clients` writers, and after `settle`
/// restarts each node in turn (waiting `settle` between restarts).
pub async fn run(
    hubctl: &Path,
    dir: &Path,
    clients: usize,
    settle: Duration,
    value_bytes: usize,
) -> anyhow::Result<Stalls> {
    let hub = HubCluster::start(hubctl, dir, true)?;
    hub.wait_leader(Duration::from_secs(30), None).await?;
    let nodes = hub.nodes()?;
    let value = "v".repeat(value_bytes);
    let acks: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let errors = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tasks = Vec::new();
    for w in 0..clients {
        let mut conns = Vec::new();
        for n in &nodes {
            conns.push(hub.connect(&n.addr).await?);
        }
        let mut writer = FailoverWriter {
            clients: conns,
            at: w % nodes.len(),
            name: format!("r{w}"),
        };
        let (acks, errors, stop, value) =
            (acks.clone(), errors.clone(), stop.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut seq = 0u64;
            let mut mine = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if writer.write(seq, &value).await {
                    mine.push(Instant::now());
                } else {
                    errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                seq += 1;
                if mine.len() >= 256 {
                    acks.lock().expect("acks lock").append(&mut mine);
                }
            }
            acks.lock().expect("acks lock").append(&mut mine);
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(settle).await;
    let first_restart = Instant::now();
    let mut windows = Vec::new();
    // Followers first, the leader last, as an operator rolls a cluster: only the last restart
    // hands the leadership over, to a node already restarted.
    let mut pending: Vec<_> = nodes.clone();
    while !pending.is_empty() {
        let leader = hub.leader(None).await.map(|l| l.id);
        let at = pending
            .iter()
            .position(|n| Some(n.id) != leader)
            .unwrap_or(0);
        let n = pending.remove(at);
        let n = &n;
        let led = leader == Some(n.id);
        let from = Instant::now();
        let (exited, started) = restart_one(&hub, n, &nodes).await?;
        windows.push((n.id, led, from, exited, started, Instant::now()));
        tokio::time::sleep(settle).await;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let ended = Instant::now();
    for t in tasks {
        t.await?;
    }
    let mut acks = std::mem::take(&mut *acks.lock().expect("acks lock"));
    let per_node = windows
        .iter()
        .map(|&(id, led, from, exited, started, to)| {
            let (stall, at) = longest_gap(&mut acks, from, to);
            NodeRestart {
                id,
                led,
                stall,
                stall_at: at.saturating_duration_since(from),
                exited: exited - from,
                started: started - from,
                caught_up: to - from,
            }
        })
        .collect();
    Ok(Stalls {
        writes: acks.len(),
        errors: errors.load(std::sync::atomic::Ordering::Relaxed),
        per_node,
        longest: longest_gap(&mut acks, first_restart, ended).0,
        baseline: longest_gap(&mut acks, started + settle / 4, first_restart).0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_gap_counts_the_window_edges() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut acks = vec![at(30), at(10), at(100), at(120)];
        assert_eq!(
            longest_gap(&mut acks, at(0), at(130)),
            (Duration::from_millis(70), at(30))
        );
        // Nothing acknowledged inside: the whole window is one stall.
        assert_eq!(
            longest_gap(&mut acks, at(40), at(90)),
            (Duration::from_millis(50), at(40))
        );
        // The edges count: from the last ack to the window's end.
        assert_eq!(
            longest_gap(&mut acks, at(105), at(200)),
            (Duration::from_millis(80), at(120))
        );
    }
}

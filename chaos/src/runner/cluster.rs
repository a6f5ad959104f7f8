//! The hub under test: real `hub-node` processes started and restarted with `hubctl dev`
//! (`cluster.json` names every node's pid, address and namespace), killed with SIGKILL,
//! paused with SIGSTOP / SIGCONT, and asked for their leader and state digests over gRPC.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hub_proto::hub_client::HubClient;
use hub_proto::NodeStatusRequest;
use serde::Deserialize;
use tonic::transport::Channel;

use super::process::is_alive;

/// Why `hubctl dev add-node` failed.
#[derive(Debug, Clone)]
pub struct AddNodeFailed {
    /// What `hubctl` said (for people).
    pub message: String,
    /// Whether the hub refused the node as below the cluster's feature level (`hubctl`'s
    /// exit status [`hubctl::EXIT_FEATURE_LEVEL_TOO_LOW`]).
    pub feature_level_too_low: bool,
}

/// The cluster the runner drives: its directory, whose PKI (`dev up` makes one) gives the
/// runner its admin certificate and every agent it starts a certificate of its environment.
/// A runner process drives exactly one cluster, so this is set once, when it starts.
static HUB: std::sync::OnceLock<(PathBuf, hub_tls::client::Connector)> = std::sync::OnceLock::new();

/// `--ca-file --cert-file --key-file` for an agent of `environment` of the running cluster.
pub fn agent_tls_args(environment: &str) -> anyhow::Result<Vec<std::ffi::OsString>> {
    let (dir, _) = HUB.get().context("the cluster has not been started")?;
    let files = hubctl::dev::dev_issue(dir, &hub_tls::Identity::Agent(environment.into()), &[])?;
    Ok(files.flags())
}

/// One node as `cluster.json` records it.
#[derive(Debug, Clone, Deserialize)]
pub struct Node {
    /// Raft id.
    pub id: u64,
    /// `host:port`.
    pub addr: String,
    /// Process id of the running (or last) process.
    pub pid: u32,
    /// Its data directory.
    pub data_dir: PathBuf,
}

#[derive(Deserialize)]
struct ClusterFile {
    nodes: Vec<Node>,
    /// Nodes removed from the cluster (`hubctl dev remove-node`), possibly still running.
    #[serde(default)]
    removed: Vec<Node>,
}

/// What `hubctl dev add-node -o json` prints, as far as the runner reads it.
#[derive(Deserialize)]
struct AddedNode {
    /// The new node's id.
    id: u64,
}

/// What one process (a member, or a removed node still running) says of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberView {
    /// Raft id.
    pub id: u64,
    /// `leader`, `follower`, `candidate`, `learner` or `shutdown`.
    pub role: String,
    /// Its term.
    pub term: u64,
    /// Its leader, if it knows one.
    pub leader: Option<u64>,
    /// The voters in its membership.
    pub voters: Vec<u64>,
}

/// A node's view of the replicated state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeView {
    /// Raft id.
    pub id: u64,
    /// Its leader, if it knows one.
    pub leader: Option<u64>,
    /// Last applied log index.
    pub applied: u64,
    /// Digest of its state.
    pub digest: String,
}

/// A `hubctl dev` cluster in a directory.
pub struct Cluster {
    dir: PathBuf,
    hubctl: PathBuf,
    /// Node ids currently stopped with SIGSTOP.
    paused: Vec<u64>,
    /// The previous release's `hub-node` the first members start on (`--upgrade-from`),
    /// and the nodes already restarted on this build's.
    previous: Option<(PathBuf, std::collections::BTreeSet<u64>)>,
}

impl Cluster {
    /// Starts `nodes` nodes in `dir` and waits for a leader: on loopback with free ports, or
    /// with `net` each node on its own host (namespace and address).
    pub fn start(
        dir: &Path,
        nodes: u64,
        hubctl: &Path,
        net: Option<&super::net::Network>,
        node_args: &str,
        previous: Option<&Path>,
    ) -> anyhow::Result<Cluster> {
        let mut cmd = Command::new(hubctl);
        if let Some(bin) = previous {
            cmd.env("HUB_NODE_BIN", bin);
        }
        cmd.args([
            "dev",
            "up",
            "--nodes",
            &nodes.to_string(),
            "--base-port",
            "0",
        ]);
        if !node_args.is_empty() {
            cmd.arg(format!("--node-args={node_args}"));
        }
        if let Some(net) = net {
            let ids = 1..=nodes;
            let hosts: Vec<String> = ids.clone().map(|i| net.addr(i).to_string()).collect();
            let netns: Vec<String> = ids.map(|i| net.netns(i)).collect();
            cmd.arg("--hosts").arg(hosts.join(","));
            cmd.arg("--netns").arg(netns.join(","));
        }
        let out = cmd
            .arg("--data-dir")
            .arg(dir)
            .args(["-o", "json"])
            .output()
            .with_context(|| format!("run {}", hubctl.display()))?;
        if !out.status.success() {
            bail!(
                "the cluster never became healthy: hubctl dev up: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let file = hubctl::read_cluster_file(dir)?;
        let connector = hubctl::dev::dev_connector(dir, &file)?;
        if HUB.set((dir.to_path_buf(), connector)).is_err() {
            bail!("this runner already drives a cluster");
        }
        Ok(Cluster {
            dir: dir.to_path_buf(),
            hubctl: hubctl.to_path_buf(),
            paused: Vec::new(),
            previous: previous.map(|bin| (bin.to_path_buf(), Default::default())),
        })
    }

    /// `hubctl dev` for node `id`: with `HUB_NODE_BIN` the previous release's `hub-node` while
    /// `id` was not upgraded, else this build's (next to `hubctl`).
    fn dev_for(&self, id: Option<u64>) -> Command {
        let mut cmd = Command::new(&self.hubctl);
        cmd.env_remove("HUB_NODE_BIN");
        if let (Some((bin, upgraded)), Some(id)) = (&self.previous, id) {
            if !upgraded.contains(&id) {
                cmd.env("HUB_NODE_BIN", bin);
            }
        }
        cmd
    }

    /// The members still on the previous release (none without `--upgrade-from`).
    pub fn not_upgraded(&self) -> anyhow::Result<Vec<u64>> {
        let Some((_, upgraded)) = &self.previous else {
            return Ok(Vec::new());
        };
        Ok(self
            .nodes()?
            .iter()
            .map(|n| n.id)
            .filter(|id| !upgraded.contains(id))
            .collect())
    }

    /// Whether node `id` runs this build (always, without `--upgrade-from`).
    pub fn is_upgraded(&self, id: u64) -> bool {
        self.previous
            .as_ref()
            .is_none_or(|(_, upgraded)| upgraded.contains(&id))
    }

    /// Stops node `id` with SIGTERM, as an operator does (a leader hands its leadership over
    /// first; SIGKILL after 30 s), and starts it on this build's `hub-node` on its data.
    pub fn upgrade(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.node(id)?;
        self.resume(id);
        if !signal_and_wait(node.pid, libc::SIGTERM, Duration::from_secs(30)) {
            signal_and_wait(node.pid, libc::SIGKILL, Duration::from_secs(10));
        }
        if let Some((_, upgraded)) = self.previous.as_mut() {
            upgraded.insert(id);
        }
        self.restart(id)
    }

    /// Node `id`'s status (its feature levels), as [`Cluster::views`] asks it.
    pub async fn status_of(&self, id: u64) -> Option<hub_proto::NodeStatusReply> {
        let node = self.node(id).ok()?;
        self.status(&node).await
    }

    fn file(&self) -> anyhow::Result<ClusterFile> {
        let p = self.dir.join("cluster.json");
        serde_json::from_slice(&std::fs::read(&p).with_context(|| p.display().to_string())?)
            .with_context(|| p.display().to_string())
    }

    /// The members as `cluster.json` records them now.
    pub fn nodes(&self) -> anyhow::Result<Vec<Node>> {
        Ok(self.file()?.nodes)
    }

    /// The nodes removed from the cluster, running or not.
    pub fn removed(&self) -> anyhow::Result<Vec<Node>> {
        Ok(self.file()?.removed)
    }

    /// Starts a node of the previous release (`--upgrade-from`) with the next unused id and
    /// asks the cluster to add it, on loopback: its id, or why `hubctl dev add-node` failed
    /// (the node is then stopped and its id never used again).
    pub fn add_previous_release_node(&mut self) -> anyhow::Result<Result<u64, AddNodeFailed>> {
        let (bin, _) = self.previous.as_ref().context("no --upgrade-from")?;
        let mut cmd = Command::new(&self.hubctl);
        cmd.env("HUB_NODE_BIN", bin);
        Ok(self.run_add_node(cmd, None))
    }

    /// Starts a node with the next unused id and adds it to the cluster (on loopback, or at
    /// `host` in namespace `netns`); returns its id.
    pub fn add_node(&mut self, place: Option<(String, String)>) -> anyhow::Result<u64> {
        // A node added during the run runs this build.
        let cmd = self.dev_for(None);
        self.run_add_node(cmd, place)
            .map_err(|e| anyhow::anyhow!("add a node: {}", e.message))
    }

    /// `hubctl dev add-node` with `cmd`'s environment: the new node's id, or why it failed.
    fn run_add_node(
        &self,
        mut cmd: Command,
        place: Option<(String, String)>,
    ) -> Result<u64, AddNodeFailed> {
        cmd.args(["dev", "add-node", "--data-dir"]).arg(&self.dir);
        if let Some((host, netns)) = place {
            cmd.args(["--host", &host, "--netns", &netns]);
        }
        let failed = |message: String| AddNodeFailed {
            message,
            feature_level_too_low: false,
        };
        let out = cmd
            .args(["-o", "json"])
            .output()
            .map_err(|e| failed(format!("run {}: {e}", self.hubctl.display())))?;
        if !out.status.success() {
            return Err(AddNodeFailed {
                message: String::from_utf8_lossy(&out.stderr).trim().to_string(),
                feature_level_too_low: out.status.code()
                    == Some(hubctl::EXIT_FEATURE_LEVEL_TOO_LOW),
            });
        }
        let added: AddedNode = serde_json::from_slice(&out.stdout)
            .map_err(|_| failed("hubctl dev add-node printed no node id".to_string()))?;
        Ok(added.id)
    }

    /// Removes node `id` from the cluster; stops it unless `keep_running`.
    pub fn remove_node(&mut self, id: u64, keep_running: bool) -> anyhow::Result<()> {
        let mut cmd = Command::new(&self.hubctl);
        cmd.args(["dev", "remove-node", "--id", &id.to_string(), "--data-dir"])
            .arg(&self.dir);
        if keep_running {
            cmd.arg("--keep-running");
        }
        let out = cmd.args(["-o", "json"]).output()?;
        if !out.status.success() {
            bail!(
                "remove node {id}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// What every running process says: the members and the removed nodes still running.
    pub async fn member_views(&self) -> Vec<MemberView> {
        let Ok(f) = self.file() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for n in f.nodes.iter().chain(&f.removed) {
            if let Some(s) = self.status(n).await {
                out.push(MemberView {
                    id: n.id,
                    role: s.role,
                    term: s.term,
                    leader: s.has_leader.then_some(s.leader_id),
                    voters: s.members.iter().filter(|m| m.voter).map(|m| m.id).collect(),
                });
            }
        }
        out
    }

    /// Node `n`'s status, unless it is paused, dead or does not answer within 1 s.
    async fn status(&self, n: &Node) -> Option<hub_proto::NodeStatusReply> {
        if self.paused.contains(&n.id) || !is_alive(n.pid) {
            return None;
        }
        let mut c = connect(&n.addr).await.ok()?;
        // The checkers compare the nodes' digests.
        let mut req = tonic::Request::new(NodeStatusRequest { with_digest: true });
        req.set_timeout(Duration::from_secs(1));
        c.node_status(req)
            .await
            .ok()
            .map(tonic::Response::into_inner)
    }

    /// Every node's address.
    pub fn endpoints(&self) -> anyhow::Result<Vec<String>> {
        Ok(self.nodes()?.into_iter().map(|n| n.addr).collect())
    }

    /// SIGKILLs node `id` and waits until it is gone.
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.node(id)?;
        self.resume(id);
        signal_and_wait(node.pid, libc::SIGKILL, Duration::from_secs(10));
        Ok(())
    }

    /// Starts node `id` again on its data (it must not be running).
    pub fn restart(&mut self, id: u64) -> anyhow::Result<()> {
        let out = self
            .dev_for(Some(id))
            .args(["dev", "restart-node", "--id", &id.to_string()])
            .arg("--data-dir")
            .arg(&self.dir)
            .args(["-o", "json"])
            .output()?;
        if !out.status.success() {
            bail!(
                "restart node {id}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }

    /// SIGSTOPs node `id`.
    pub fn pause(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.node(id)?;
        signal(node.pid, libc::SIGSTOP);
        self.paused.push(id);
        Ok(())
    }

    /// SIGCONTs node `id` if it was paused.
    pub fn resume(&mut self, id: u64) {
        if let Some(pos) = self.paused.iter().position(|p| *p == id) {
            self.paused.remove(pos);
            if let Ok(n) = self.node(id) {
                signal(n.pid, libc::SIGCONT);
            }
        }
    }

    /// Whether node `id`'s process runs.
    pub fn is_running(&self, id: u64) -> bool {
        self.node(id).is_ok_and(|n| is_alive(n.pid))
    }

    /// Resumes every paused node and restarts every dead one.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        for id in self.paused.clone() {
            self.resume(id);
        }
        for n in self.nodes()? {
            if !is_alive(n.pid) {
                self.restart(n.id)?;
            }
        }
        Ok(())
    }

    /// Node `id` as `cluster.json` records it.
    pub fn node(&self, id: u64) -> anyhow::Result<Node> {
        self.nodes()?
            .into_iter()
            .find(|n| n.id == id)
            .with_context(|| format!("no node {id}"))
    }

    /// Every reachable node's view (unreachable ones are left out).
    pub async fn views(&self) -> Vec<NodeView> {
        let mut out = Vec::new();
        for n in self.nodes().unwrap_or_default() {
            if let Some(s) = self.status(&n).await {
                out.push(NodeView {
                    id: n.id,
                    leader: s.has_leader.then_some(s.leader_id),
                    applied: s.last_applied,
                    digest: s.digest,
                });
            }
        }
        out
    }

    /// The leader most reachable nodes agree on.
    pub async fn leader(&self) -> Option<u64> {
        let views = self.views().await;
        let mut votes: Vec<(u64, usize)> = Vec::new();
        for l in views.iter().filter_map(|v| v.leader) {
            match votes.iter_mut().find(|(id, _)| *id == l) {
                Some((_, n)) => *n += 1,
                None => votes.push((l, 1)),
            }
        }
        votes.into_iter().max_by_key(|(_, n)| *n).map(|(id, _)| id)
    }

    /// Stops every node (SIGCONT first, then SIGKILL): the runner's cleanup.
    pub fn stop_all(&mut self) {
        for id in self.paused.clone() {
            self.resume(id);
        }
        let nodes: Vec<Node> = self
            .file()
            .map(|f| f.nodes.into_iter().chain(f.removed).collect())
            .unwrap_or_default();
        for n in &nodes {
            if is_alive(n.pid) {
                signal(n.pid, libc::SIGKILL);
            }
        }
        // Gone before anything under them (their disks) is taken away.
        let deadline = Instant::now() + Duration::from_secs(10);
        while nodes.iter().any(|n| is_alive(n.pid)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// A gRPC client to `addr` as the cluster's admin (short connect timeout).
pub async fn connect(addr: &str) -> anyhow::Result<HubClient<Channel>> {
    let (_, connector) = HUB.get().context("the cluster has not been started")?;
    crate::compare::hub::connect_with(connector, addr).await
}

/// Sends `sig` to `pid` and waits up to `limit` for it to be gone; whether it is.
fn signal_and_wait(pid: u32, sig: i32, limit: Duration) -> bool {
    signal(pid, sig);
    let deadline = Instant::now() + limit;
    while is_alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    !is_alive(pid)
}

fn signal(pid: u32, sig: i32) {
    if let Ok(pid) = i32::try_from(pid) {
        // SAFETY: kill(2) on a pid from the cluster file of a cluster this runner started.
        unsafe { libc::kill(pid, sig) };
    }
}

//! A 3-node hub started with `hubctl dev up` (mutual TLS, or `--insecure`), for the
//! side-by-side benchmark; dropping it stops every node (`hubctl dev down`).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hub_proto::hub_client::HubClient;
use hub_proto::{CreateEnvironmentRequest, NodeStatusRequest};
use hub_tls::client::Connector;
use hubctl::dev::{ClusterFile, NodeEntry};
use tonic::transport::{Channel, Endpoint};

use super::load::Writer;

/// A running dev cluster and how its admin dials it.
pub struct HubCluster {
    dir: PathBuf,
    hubctl: PathBuf,
    connector: Connector,
}

impl HubCluster {
    /// Starts 3 nodes in `dir` (`--insecure` unless `tls`) and waits for a leader.
    pub fn start(hubctl: &Path, dir: &Path, tls: bool) -> anyhow::Result<HubCluster> {
        let mut cmd = Command::new(hubctl);
        cmd.args([
            "dev",
            "up",
            "--nodes",
            "3",
            "--base-port",
            "0",
            "-o",
            "json",
        ])
        .arg("--data-dir")
        .arg(dir);
        if !tls {
            cmd.arg("--insecure");
        }
        let out = cmd
            .output()
            .with_context(|| format!("run {}", hubctl.display()))?;
        if !out.status.success() {
            bail!(
                "hubctl dev up: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let file = hubctl::read_cluster_file(dir)?;
        let connector = hubctl::dev::dev_connector(dir, &file)?;
        Ok(HubCluster {
            dir: dir.to_path_buf(),
            hubctl: hubctl.to_path_buf(),
            connector,
        })
    }

    fn file(&self) -> anyhow::Result<ClusterFile> {
        hubctl::read_cluster_file(&self.dir)
    }

    /// The nodes as `cluster.json` has them now.
    pub fn nodes(&self) -> anyhow::Result<Vec<NodeEntry>> {
        Ok(self.file()?.nodes)
    }

    /// A client of `addr` (its own connection).
    pub async fn connect(&self, addr: &str) -> anyhow::Result<HubClient<Channel>> {
        connect_with(&self.connector, addr).await
    }

    /// The leader as the first reachable node other than `skip` knows it.
    pub async fn leader(&self, skip: Option<u64>) -> Option<NodeEntry> {
        leader_among(&self.connector, &self.nodes().ok()?, skip).await
    }

    /// Waits until a leader other than `skip` is known.
    pub async fn wait_leader(
        &self,
        timeout: Duration,
        skip: Option<u64>,
    ) -> anyhow::Result<NodeEntry> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader(skip).await {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!("the hub elected no leader within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The applied index node `addr` reports (0 when it does not answer).
    pub async fn applied(&self, addr: &str) -> u64 {
        applied_via(self.connect(addr)).await
    }

    /// Starts node `id` again on its data (`hubctl dev restart-node`).
    pub fn restart(&self, id: u64) -> anyhow::Result<()> {
        let out = Command::new(&self.hubctl)
            .args(["dev", "restart-node", "--data-dir"])
            .arg(&self.dir)
            .args(["--id", &id.to_string(), "-o", "json"])
            .output()?;
        if !out.status.success() {
            bail!(
                "restart node {id}: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(())
    }
}

/// The applied index the node reached by `client` reports (0 when it cannot be reached or
/// does not answer). `hub-bench failover` waits on it too, with its own connector.
pub async fn applied_via(
    client: impl std::future::Future<Output = anyhow::Result<HubClient<Channel>>>,
) -> u64 {
    match client.await {
        Ok(mut c) => c
            .node_status(NodeStatusRequest::default())
            .await
            .map(|s| s.into_inner().last_applied)
            .unwrap_or(0),
        Err(_) => 0,
    }
}

impl Drop for HubCluster {
    fn drop(&mut self) {
        let _ = Command::new(&self.hubctl)
            .args(["dev", "down", "--data-dir"])
            .arg(&self.dir)
            .output();
    }
}

/// Creates one environment per write, its description the value.
pub struct HubWriter {
    client: HubClient<Channel>,
    prefix: String,
    value: String,
}

impl HubWriter {
    /// A writer of environments `<prefix><seq>` on its own connection to `addr`; `prefix`
    /// must keep the names DNS labels.
    pub async fn connect(
        hub: &HubCluster,
        addr: &str,
        prefix: String,
        value: &str,
    ) -> anyhow::Result<HubWriter> {
        Ok(HubWriter {
            client: hub.connect(addr).await?,
            prefix,
            value: value.to_string(),
        })
    }

    /// Writes record `seq` and returns the leader that committed it.
    pub async fn write_with_leader(&mut self, seq: u64) -> Result<u64, String> {
        let mut req = tonic::Request::new(CreateEnvironmentRequest {
            name: format!("{}{seq}", self.prefix),
            description: self.value.clone(),
            request_id: String::new(),
        });
        req.set_timeout(Duration::from_secs(3));
        self.client
            .create_environment(req)
            .await
            .map(|r| r.into_inner().leader_id)
            .map_err(|s| s.message().to_string())
    }
}

impl Writer for HubWriter {
    async fn write(&mut self, seq: u64) -> Result<(), String> {
        self.write_with_leader(seq).await.map(|_| ())
    }
}

/// A client of node `addr` dialled through `connector` (its own connection; 500 ms to
/// connect).
pub async fn connect_with(connector: &Connector, addr: &str) -> anyhow::Result<HubClient<Channel>> {
    let ch = connector
        .channel(addr, |ep: Endpoint| {
            ep.connect_timeout(Duration::from_millis(500))
                .tcp_nodelay(true)
        })
        .await?;
    Ok(HubClient::new(ch))
}

/// The leader of `nodes` as the first reachable one other than `skip` knows it (each asked
/// with a 1 s deadline), or `None` when none knows one.
pub async fn leader_among(
    connector: &Connector,
    nodes: &[NodeEntry],
    skip: Option<u64>,
) -> Option<NodeEntry> {
    for n in nodes.iter().filter(|n| Some(n.id) != skip) {
        let Ok(mut c) = connect_with(connector, &n.addr).await else {
            continue;
        };
        let mut req = tonic::Request::new(NodeStatusRequest::default());
        req.set_timeout(Duration::from_secs(1));
        if let Ok(s) = c.node_status(req).await {
            let s = s.into_inner();
            if s.has_leader && Some(s.leader_id) != skip {
                return nodes.iter().find(|m| m.id == s.leader_id).cloned();
            }
        }
    }
    None
}

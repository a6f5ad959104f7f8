//! `hubctl dev add-node` and `dev remove-node`: grow and shrink a running dev cluster.
//!
//! `add-node` gives the new node the next id never used in the cluster (ids are never
//! reused: a removed node's log and votes must never be mistaken for a new member's), a
//! certificate from the cluster's PKI, a port and a data directory; starts it, waits until it
//! serves, and asks the cluster to add it (`AddNode`: a learner that catches up, then a
//! voter). `remove-node` asks the cluster to remove a member and then stops its process, or
//! with `--keep-running` leaves it running, cut out of the cluster, as a removed node that
//! must never again vote or be counted (the chaos runner's `membership` fault). Either way
//! the node moves to `cluster.json`'s `removed` list, which `dev down` also stops.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hub_proto::{AddNodeRequest, RemoveNodeRequest};

use super::dev::{
    dev_connector, dev_issue, is_alive, pick_ports, read_cluster_file, spawn_node, stop_pids,
    wait_until_serving, write_cluster_file, write_env_file, ClusterFile, NodeEntry,
};
use super::output::{print, Format};
use hub_client::FailoverClient;

/// How long one membership call may take, beyond a new node's catch-up.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How long `dev add-node` waits for the new node's catch-up: a bounded fault in a chaos run
/// (a node added across a partition fails after it, as before); `hubctl cluster add-node
/// --catch-up-timeout-ms` waits longer.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(60);

/// Where a new node runs: on loopback, or at `host` (inside `netns`).
#[derive(Debug, Default, Clone)]
pub struct NewNodePlace {
    /// Its address (port 7401); loopback with a free port when `None`.
    pub host: Option<String>,
    /// Its network namespace.
    pub netns: Option<String>,
}

/// The next id never used in `cluster` (members and removed nodes alike).
pub fn next_id(cluster: &ClusterFile) -> u64 {
    cluster
        .nodes
        .iter()
        .chain(&cluster.removed)
        .map(|n| n.id)
        .max()
        .unwrap_or(0)
        + 1
}

fn client(dir: &Path, cluster: &ClusterFile, except: u64) -> anyhow::Result<FailoverClient> {
    let endpoints: Vec<String> = cluster
        .nodes
        .iter()
        .filter(|n| n.id != except)
        .map(|n| n.addr.clone())
        .collect();
    if endpoints.is_empty() {
        bail!(
            "the cluster in {} has no other member to ask",
            dir.display()
        );
    }
    Ok(FailoverClient::new(
        endpoints,
        CALL_TIMEOUT,
        dev_connector(dir, cluster)?,
    ))
}

/// `dev add-node`: starts a node with the next id and adds it to the cluster.
pub async fn add_node(dir: &Path, place: &NewNodePlace, fmt: Format) -> anyhow::Result<()> {
    let dir = &dir
        .canonicalize()
        .with_context(|| format!("--data-dir {}", dir.display()))?;
    let mut cluster = read_cluster_file(dir)?;
    if place.netns.is_some() && place.host.is_none() {
        bail!("--netns: needs --host (the node's address in that namespace)");
    }
    if let Some(h) = place
        .host
        .as_deref()
        .filter(|h| h.parse::<std::net::IpAddr>().is_err())
    {
        bail!("--host: {h:?} is not an IP address");
    }
    let id = next_id(&cluster);
    let addr = match &place.host {
        Some(h) => format!("{h}:7401"),
        None => format!("127.0.0.1:{}", pick_ports(1, 0)?[0]),
    };
    if !cluster.insecure {
        let hosts: Vec<String> = place.host.iter().cloned().collect();
        dev_issue(dir, &hub_tls::Identity::Node(id), &hosts)?;
    }
    let mut node = NodeEntry {
        id,
        addr: addr.clone(),
        pid: 0,
        data_dir: dir.join(format!("node-{id}")),
        netns: place.netns.clone(),
    };
    node.pid = spawn_node(dir, &cluster, &node, false)?;
    cluster.nodes.push(node.clone());
    // Recorded before it joins, so `dev down` stops it whatever happens next.
    write_cluster_file(dir, &cluster)?;
    let joined = async {
        let connector = dev_connector(dir, &cluster)?;
        wait_until_serving(
            dir,
            &node,
            node.pid,
            &connector,
            Instant::now() + CALL_TIMEOUT,
        )
        .await?;
        let mut waiting = client(dir, &cluster, id)?;
        waiting.timeout += CATCH_UP_TIMEOUT;
        waiting
            .call(|mut c| {
                let addr = addr.clone();
                async move {
                    c.add_node(AddNodeRequest {
                        id,
                        addr,
                        learner_only: false,
                        catch_up_timeout_ms: CATCH_UP_TIMEOUT.as_millis() as u64,
                    })
                    .await
                }
            })
            .await
            .with_context(|| format!("add node {id} to the cluster"))
    }
    .await;
    if let Err(e) = joined {
        // Not a member: stopped, and kept in `removed` so its id is never used again.
        stop_pids(&[node.pid]);
        cluster.nodes.retain(|n| n.id != id);
        cluster.removed.push(node);
        write_cluster_file(dir, &cluster)?;
        return Err(e);
    }
    write_env_file(dir, &cluster)?;
    print(
        fmt,
        &serde_json::to_value(&node)?,
        &["id", "addr", "pid", "data_dir"],
    )
}

/// `dev remove-node`: removes node `id` from the cluster, then stops it unless
/// `keep_running`.
pub async fn remove_node(
    dir: &Path,
    id: u64,
    keep_running: bool,
    fmt: Format,
) -> anyhow::Result<()> {
    let mut cluster = read_cluster_file(dir)?;
    let Some(i) = cluster.nodes.iter().position(|n| n.id == id) else {
        bail!(
            "--id: node {id} is not a member in {}",
            dir.join("cluster.json").display()
        );
    };
    client(dir, &cluster, id)?
        .call(|mut c| async move { c.remove_node(RemoveNodeRequest { id }).await })
        .await
        .with_context(|| format!("remove node {id} from the cluster"))?;
    let node = cluster.nodes.remove(i);
    if !keep_running && is_alive(node.pid) {
        stop_pids(&[node.pid]);
    }
    cluster.removed.push(node.clone());
    write_cluster_file(dir, &cluster)?;
    write_env_file(dir, &cluster)?;
    print(
        fmt,
        &serde_json::to_value(&node)?,
        &["id", "addr", "pid", "data_dir"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: u64) -> NodeEntry {
        NodeEntry {
            id,
            addr: format!("127.0.0.1:{}", 7400 + id),
            pid: 0,
            data_dir: format!("/tmp/node-{id}").into(),
            netns: None,
        }
    }

    #[test]
    fn ids_are_never_reused() {
        let mut c = ClusterFile {
            cluster_id: "dev-1".into(),
            node_args: Vec::new(),
            nodes: vec![entry(1), entry(2), entry(3)],
            insecure: true,
            removed: Vec::new(),
        };
        assert_eq!(next_id(&c), 4);
        // Node 3 removed: 4 still, not 3.
        let three = c.nodes.pop().expect("node 3");
        c.removed.push(three);
        assert_eq!(next_id(&c), 4);
        c.removed.push(entry(7));
        assert_eq!(next_id(&c), 8);
    }
}

//! `hubctl dev`: start, stop and restart a local cluster of `hub-node` processes; serve a
//! directory as an https registry (`dev registry`, see [`super::dev_registry`]).
//!
//! `dev up` writes `DIR/cluster.json` (`{"cluster_id":…,"nodes":[{"id","addr","pid","data_dir"}]}`);
//! each node logs to `DIR/node-N.log` and keeps its data in `DIR/node-N`.
//!
//! A new cluster gets its own PKI in `DIR/pki/` (the CA, one certificate per node, and an
//! operator `admin`), every node runs with mutual TLS, and `DIR/hubctl.env` exports what
//! `hubctl` needs to talk to it as that admin (`source DIR/hubctl.env`). `--insecure` starts
//! plaintext nodes instead (loopback only).

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use hub_proto::{NodeStatusRequest, SubmitRequest};
use serde::{Deserialize, Serialize};
use serde_json::json;

use hub_tls::client::{ClientMode, ClientTls, Connector};

use super::output::{print, Format};
use hub_client::FailoverClient;

/// `cluster.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClusterFile {
    /// The cluster id every node was started with.
    pub cluster_id: String,
    /// Extra hub-node arguments.
    #[serde(default)]
    pub node_args: Vec<String>,
    /// The nodes.
    pub nodes: Vec<NodeEntry>,
    /// Plaintext nodes (`--insecure`); otherwise the PKI is in `DIR/pki`.
    #[serde(default)]
    pub insecure: bool,
    /// Nodes removed from the cluster (`dev remove-node`), possibly still running; their ids
    /// are never used again.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub removed: Vec<NodeEntry>,
}

/// The PKI directory of a dev cluster.
pub fn pki_dir(dir: &Path) -> PathBuf {
    dir.join("pki")
}

/// The name of the operator `dev up` issues a certificate for.
pub const DEV_ADMIN: &str = "admin";

/// The TLS files of `identity` in a dev cluster's PKI.
pub fn dev_files(dir: &Path, identity: &hub_tls::Identity) -> hub_tls::TlsFiles {
    let pki = pki_dir(dir);
    let stem = hub_tls::pki::file_stem(identity);
    hub_tls::TlsFiles {
        ca: pki.join(hub_tls::pki::CA_CERT),
        cert: pki.join(format!("{stem}.pem")),
        key: pki.join(format!("{stem}-key.pem")),
    }
}

/// How an operator tool dials the dev cluster in `dir`: as its admin over TLS, or plaintext.
pub fn dev_connector(dir: &Path, cluster: &ClusterFile) -> anyhow::Result<Connector> {
    let mode = if cluster.insecure {
        ClientMode::Plaintext
    } else {
        let files = dev_files(dir, &hub_tls::Identity::Operator(DEV_ADMIN.into()));
        ClientMode::Tls(std::sync::Arc::new(ClientTls::load(
            files,
            None,
            std::time::SystemTime::now(),
        )?))
    };
    Ok(Connector::new(mode, Duration::from_secs(5)))
}

/// Issues `identity`'s certificate in the dev cluster's PKI unless it exists; returns its
/// files. Nodes are valid for `hosts` plus loopback.
pub fn dev_issue(
    dir: &Path,
    identity: &hub_tls::Identity,
    hosts: &[String],
) -> anyhow::Result<hub_tls::TlsFiles> {
    let files = dev_files(dir, identity);
    if files.cert.exists() && files.key.exists() {
        return Ok(files);
    }
    let ca = hub_tls::pki::Ca::open(&pki_dir(dir))?;
    let mut all: Vec<String> = hosts.to_vec();
    if matches!(identity, hub_tls::Identity::Node(_)) {
        for h in ["127.0.0.1", "localhost"] {
            if !all.iter().any(|x| x == h) {
                all.push(h.to_string());
            }
        }
    }
    let days = match identity {
        hub_tls::Identity::Operator(_) => hub_tls::pki::DEFAULT_OPERATOR_DAYS,
        _ => hub_tls::pki::DEFAULT_SERVICE_DAYS,
    };
    ca.issue(identity, &all, days, std::time::SystemTime::now())?
        .write(&pki_dir(dir), &hub_tls::pki::file_stem(identity))?;
    Ok(files)
}

/// `DIR/hubctl.env`: the endpoints and the admin's TLS files, as shell exports.
pub(crate) fn write_env_file(dir: &Path, cluster: &ClusterFile) -> anyhow::Result<PathBuf> {
    let endpoints: Vec<&str> = cluster.nodes.iter().map(|n| n.addr.as_str()).collect();
    let mut text = format!("export HUBCTL_ENDPOINTS={}\n", endpoints.join(","));
    if cluster.insecure {
        text.push_str("unset HUBCTL_CA_FILE HUBCTL_CERT_FILE HUBCTL_KEY_FILE\n");
    } else {
        let f = dev_files(dir, &hub_tls::Identity::Operator(DEV_ADMIN.into()));
        text.push_str(&format!(
            "export HUBCTL_CA_FILE={}\nexport HUBCTL_CERT_FILE={}\nexport HUBCTL_KEY_FILE={}\n",
            f.ca.display(),
            f.cert.display(),
            f.key.display()
        ));
    }
    let path = dir.join("hubctl.env");
    std::fs::write(&path, text).with_context(|| path.display().to_string())?;
    Ok(path)
}

/// One node in `cluster.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct NodeEntry {
    /// Raft node id.
    pub id: u64,
    /// host:port.
    pub addr: String,
    /// Process id of the last start.
    pub pid: u32,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// The network namespace it runs in, if not the caller's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub netns: Option<String>,
}

pub(crate) fn hub_node_binary() -> anyhow::Result<PathBuf> {
    if let Ok(p) = std::env::var("HUB_NODE_BIN") {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe().context("locate hubctl")?;
    let bin = exe.with_file_name("hub-node");
    if !bin.exists() {
        bail!(
            "hub-node not found next to hubctl at {} (set HUB_NODE_BIN)",
            bin.display()
        );
    }
    Ok(bin)
}

/// True while process `pid` runs or still holds what it had open: not gone, and not a
/// zombie whose threads have all exited. (The chaos runner uses it too.)
pub fn is_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| stat_is_alive(&stat))
}

/// [`is_alive`] on the text of `/proc/PID/stat`. The fields after the parenthesised command
/// name are the state, then (17 later) the number of threads. A SIGKILLed process's first
/// thread can be a zombie while its other threads are still exiting and still hold its files
/// (a listening socket among them, so a restart on its port would fail): only a zombie left
/// alone is dead.
fn stat_is_alive(stat: &str) -> bool {
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    match fields.first() {
        None => false,
        Some(&"Z") => fields
            .get(17)
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|threads| threads > 1),
        Some(_) => true,
    }
}

/// Reads `DIR/cluster.json`.
pub fn read_cluster_file(dir: &Path) -> anyhow::Result<ClusterFile> {
    let path = dir.join("cluster.json");
    let bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{}: not a cluster file", path.display()))
}

/// Writes `DIR/cluster.json` (through a temporary file and a rename).
pub fn write_cluster_file(dir: &Path, file: &ClusterFile) -> anyhow::Result<()> {
    let path = dir.join("cluster.json");
    let tmp = dir.join("cluster.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(file)?)
        .with_context(|| tmp.display().to_string())?;
    std::fs::rename(&tmp, &path).with_context(|| path.display().to_string())?;
    Ok(())
}

/// Starts `node` of `cluster` in the background, logging to `DIR/node-ID.log`; a `founding`
/// node is given every node of `cluster` as `--initial-members` (see
/// `hub_node::founding`).
pub(crate) fn spawn_node(
    dir: &Path,
    cluster: &ClusterFile,
    node: &NodeEntry,
    founding: bool,
) -> anyhow::Result<u32> {
    let log_path = dir.join(format!("node-{}.log", node.id));
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .with_context(|| log_path.display().to_string())?;
    let mut cmd = match &node.netns {
        Some(ns) => {
            // `ip netns exec` execs hub-node: the pid stays the node's.
            let mut c = Command::new("ip");
            c.args(["netns", "exec", ns]).arg(hub_node_binary()?);
            c
        }
        None => Command::new(hub_node_binary()?),
    };
    let child = cmd
        .arg("--id")
        .arg(node.id.to_string())
        .arg("--listen")
        .arg(&node.addr)
        .arg("--data-dir")
        .arg(&node.data_dir)
        .arg("--cluster-id")
        .arg(&cluster.cluster_id)
        .args(node_tls_args(dir, cluster, node.id))
        .args(
            founding
                .then(|| initial_members(cluster))
                .into_iter()
                .flatten(),
        )
        .args(&cluster.node_args)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own process group: a Ctrl-C aimed at hubctl does not stop the cluster.
        .process_group(0)
        .spawn()
        .context("start hub-node")?;
    Ok(child.id())
}

/// `--initial-members ID=ADDR,...` naming every node of `cluster`.
fn initial_members(cluster: &ClusterFile) -> [String; 2] {
    let members: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("{}={}", n.id, n.addr))
        .collect();
    ["--initial-members".into(), members.join(",")]
}

/// `--insecure`, or the node's `--ca-file --cert-file --key-file` in the dev PKI.
fn node_tls_args(dir: &Path, cluster: &ClusterFile, id: u64) -> Vec<std::ffi::OsString> {
    if cluster.insecure {
        return vec!["--insecure".into()];
    }
    dev_files(dir, &hub_tls::Identity::Node(id)).flags()
}

/// The end of a node's log for an error message: from its last `Error:` line (what
/// `hub-node` exited with, before any backtrace) if there is one near the end, else the last
/// five lines.
fn log_tail(dir: &Path, id: u64) -> String {
    let text = std::fs::read_to_string(dir.join(format!("node-{id}.log"))).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let recent = lines.len().saturating_sub(200);
    let start = lines[recent..]
        .iter()
        .rposition(|l| l.starts_with("Error: "))
        .map_or(lines.len().saturating_sub(5), |i| recent + i);
    lines[start..lines.len().min(start + 8)].join("\n")
}

/// Waits until `node` answers, failing early if its process died.
pub(crate) async fn wait_until_serving(
    dir: &Path,
    node: &NodeEntry,
    pid: u32,
    connector: &Connector,
    deadline: Instant,
) -> anyhow::Result<()> {
    loop {
        if let Ok(mut c) = FailoverClient::connect(&node.addr, connector).await {
            if c.node_status(NodeStatusRequest::default()).await.is_ok() {
                return Ok(());
            }
        }
        if !is_alive(pid) {
            bail!(
                "node {} exited during start-up:\n{}",
                node.id,
                log_tail(dir, node.id)
            );
        }
        if Instant::now() > deadline {
            bail!(
                "node {} did not start serving at {} in time",
                node.id,
                node.addr
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `n` ports for a new cluster: `base`, `base + 1`, … checked free, or (`base` 0) free ports
/// picked at random below the kernel's ephemeral range. Outside that range because a node is
/// restarted on its port: an ephemeral port, freed while its node is down, can be taken by
/// the local end of any outgoing connection (a peer reconnecting, a `hubctl` call), and the
/// node then cannot bind it again.
pub(crate) fn pick_ports(n: u64, base: u16) -> anyhow::Result<Vec<u16>> {
    let mut ports = Vec::new();
    let mut holders = Vec::new();
    for i in 0..n {
        if base == 0 {
            let l = bind_below_ephemeral().context("pick a free port")?;
            ports.push(l.local_addr()?.port());
            holders.push(l);
        } else {
            let port = base
                .checked_add(i as u16)
                .context("--base-port: port range overflows 65535")?;
            std::net::TcpListener::bind(("127.0.0.1", port))
                .with_context(|| format!("--base-port: port {port} is in use"))?;
            ports.push(port);
        }
    }
    Ok(ports)
}

/// A loopback listener on a random free port in `10000..` the first ephemeral port (read from
/// `/proc/sys/net/ipv4/ip_local_port_range`, 32768 if unreadable); an ephemeral one if the
/// range leaves no room or 100 tries find nothing free.
fn bind_below_ephemeral() -> std::io::Result<std::net::TcpListener> {
    const LOWEST: u16 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    if ephemeral > LOWEST {
        for _ in 0..100 {
            let port = rand::random_range(LOWEST..ephemeral);
            if let Ok(l) = std::net::TcpListener::bind(("127.0.0.1", port)) {
                return Ok(l);
            }
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
}

/// Where the nodes of a new cluster run: their own addresses and namespaces, or (both empty)
/// loopback in the caller's namespace.
#[derive(Debug, Default, Clone)]
pub(crate) struct Placement {
    /// One address per node, or empty.
    pub hosts: Vec<String>,
    /// One network namespace per node, or empty.
    pub netns: Vec<String>,
    /// Plaintext nodes.
    pub insecure: bool,
}

/// `node_args` after `--outbound-allow RANGES` (nothing added for an empty list): what `dev
/// up --outbound-allow` and the demo give every node. The ranges are checked here, naming the
/// flag.
pub(crate) fn opening_outbound(ranges: &str, node_args: &str) -> anyhow::Result<String> {
    let ranges =
        hub_http::parse_ranges(ranges).map_err(|e| anyhow::anyhow!("--outbound-allow: {e}"))?;
    if ranges.is_empty() {
        return Ok(node_args.to_string());
    }
    let list: Vec<String> = ranges.iter().map(ToString::to_string).collect();
    Ok(format!("--outbound-allow {} {node_args}", list.join(",")))
}

/// The ranges a cluster's nodes open with `--outbound-allow` (from its `node_args`).
pub(crate) fn opened_ranges(node_args: &[String]) -> Vec<String> {
    node_args
        .windows(2)
        .filter(|pair| pair[0] == "--outbound-allow")
        .flat_map(|pair| pair[1].split(','))
        .map(str::to_string)
        .chain(
            node_args
                .iter()
                .filter_map(|a| a.strip_prefix("--outbound-allow="))
                .flat_map(|list| list.split(','))
                .map(str::to_string),
        )
        .collect()
}

/// The line `dev up` and the demo print about outbound calls: which ranges the nodes open,
/// and what a production node does instead.
pub(crate) fn outbound_notice(opened: &[String]) -> String {
    if opened.is_empty() {
        return "outbound calls (webhooks, alerts, Prometheus, registries) deny loopback and \
                private addresses, as on a production node"
            .to_string();
    }
    format!(
        "outbound calls (webhooks, alerts, Prometheus, registries) may reach {} \
         (hub-node --outbound-allow); a production node denies loopback and private \
         addresses unless an operator opens them",
        opened.join(", ")
    )
}

pub(crate) async fn up(
    nodes: Option<u64>,
    dir: &Path,
    base_port: u16,
    node_args: &str,
    placement: &Placement,
    fmt: Format,
) -> anyhow::Result<()> {
    let (cluster, leader) = start_cluster(nodes, dir, base_port, node_args, placement).await?;
    let opened = opened_ranges(&cluster.node_args);
    let v = json!({"cluster_id": cluster.cluster_id, "leader": leader, "nodes": cluster.nodes,
        "outbound_allow": opened});
    if fmt.is_table() {
        println!("cluster {} up, leader {leader}", cluster.cluster_id);
        println!("{}", outbound_notice(&opened));
        let rows: Vec<_> = cluster
            .nodes
            .iter()
            .map(|n| serde_json::to_value(n).unwrap_or_default())
            .collect();
        return super::output::table(&rows, &["id", "addr", "pid", "data_dir"]);
    }
    print(fmt, &v, &[])
}

/// Starts (or restarts) the cluster in `dir` and waits for a leader; returns the cluster
/// file and the leader's id.
// Long: the dev cluster's start-up sequence: ports, certificates, processes, the wait for a
// leader.
pub(crate) async fn start_cluster(
    nodes: Option<u64>,
    dir: &Path,
    base_port: u16,
    node_args: &str,
    placement: &Placement,
) -> anyhow::Result<(ClusterFile, u64)> {
    let n = nodes.unwrap_or(3);
    if n != 3 && n != 5 {
        bail!("--nodes: {n} is not 3 or 5");
    }
    for (flag, list) in [("--hosts", &placement.hosts), ("--netns", &placement.netns)] {
        if !list.is_empty() && list.len() as u64 != n {
            bail!("{flag}: {} entries for {n} nodes", list.len());
        }
    }
    if let Some(bad) = placement
        .hosts
        .iter()
        .find(|h| h.parse::<std::net::IpAddr>().is_err())
    {
        bail!("--hosts: {bad:?} is not an IP address");
    }
    // Fail before anything is written if the node binary is missing.
    hub_node_binary()?;
    let existing = dir.join("cluster.json").exists();
    let (cluster, fresh) = if existing {
        let cluster = read_cluster_file(dir)?;
        let running: Vec<_> = cluster
            .nodes
            .iter()
            .filter(|n| is_alive(n.pid))
            .map(|n| n.pid)
            .collect();
        if !running.is_empty() {
            bail!("a cluster is already running in {} (pids {running:?}); run `hubctl dev down --data-dir {}` first", dir.display(), dir.display());
        }
        if let Some(n) = nodes.filter(|n| *n != cluster.nodes.len() as u64) {
            bail!(
                "--nodes: the cluster in {} has {} nodes, not {n}; use cluster add-node/remove-node to resize it",
                dir.display(),
                cluster.nodes.len()
            );
        }
        (cluster, false)
    } else {
        let ports = if placement.hosts.is_empty() {
            pick_ports(n, base_port)?
        } else {
            // Every node has its own address: one port for all.
            vec![if base_port == 0 { 7401 } else { base_port }; n as usize]
        };
        std::fs::create_dir_all(dir).with_context(|| dir.display().to_string())?;
        let dir = dir.canonicalize()?;
        let cluster = ClusterFile {
            cluster_id: format!("dev-{:08x}", rand::random::<u32>()),
            insecure: placement.insecure,
            removed: Vec::new(),
            node_args: node_args.split_whitespace().map(String::from).collect(),
            nodes: (1..=n)
                .zip(ports)
                .map(|(id, port)| {
                    let i = id as usize - 1;
                    let host = placement.hosts.get(i).map_or("127.0.0.1", String::as_str);
                    NodeEntry {
                        id,
                        addr: format!("{host}:{port}"),
                        pid: 0,
                        data_dir: dir.join(format!("node-{id}")),
                        netns: placement.netns.get(i).cloned(),
                    }
                })
                .collect(),
        };
        if !cluster.insecure {
            hub_tls::pki::Ca::init(
                &pki_dir(&dir),
                &cluster.cluster_id,
                std::time::SystemTime::now(),
            )?;
            for (i, node) in cluster.nodes.iter().enumerate() {
                let host = placement
                    .hosts
                    .get(i)
                    .cloned()
                    .into_iter()
                    .collect::<Vec<_>>();
                dev_issue(&dir, &hub_tls::Identity::Node(node.id), &host)?;
            }
            dev_issue(&dir, &hub_tls::Identity::Operator(DEV_ADMIN.into()), &[])?;
        }
        (cluster, true)
    };
    let mut cluster = cluster;
    let dir = &dir.canonicalize()?;
    write_env_file(dir, &cluster)?;
    let connector = dev_connector(dir, &cluster)?;
    let mut started = Ok(());
    for i in 0..cluster.nodes.len() {
        match spawn_node(dir, &cluster, &cluster.nodes[i], fresh) {
            Ok(pid) => cluster.nodes[i].pid = pid,
            Err(e) => {
                started = Err(e);
                break;
            }
        }
    }
    // Written with every pid started so far, so a failed start-up can stop them.
    write_cluster_file(dir, &cluster)?;
    let ready = match started {
        Ok(()) => wait_ready(dir, &cluster, &connector, fresh).await,
        Err(e) => Err(e),
    };
    match ready {
        Ok(leader) => Ok((cluster, leader)),
        Err(e) => {
            // Nothing of a cluster that did not come up is left running.
            if let Err(stop) = stop_cluster(dir) {
                eprintln!("warning: stopping the nodes of a failed start-up: {stop:#}");
            }
            Err(e)
        }
    }
}

/// Waits until every node of a just-started `cluster` serves and a leader is elected (a
/// `fresh` cluster's nodes initialise it themselves; this binds its first admin); returns the
/// leader's id.
async fn wait_ready(
    dir: &Path,
    cluster: &ClusterFile,
    connector: &Connector,
    fresh: bool,
) -> anyhow::Result<u64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    // Progress on a terminal only; scripts get the final answer alone.
    let progress = |what: &str| {
        if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            eprintln!("dev up: {what}");
        }
    };
    for node in &cluster.nodes {
        progress(&format!("waiting for node {} at {}", node.id, node.addr));
        wait_until_serving(dir, node, node.pid, connector, deadline).await?;
    }
    progress("electing a leader");
    let first = &cluster.nodes[0];
    let mut c = FailoverClient::connect(&first.addr, connector).await?;
    let leader = loop {
        let s = c
            .node_status(NodeStatusRequest::default())
            .await?
            .into_inner();
        if s.has_leader {
            break s.leader_id;
        }
        if Instant::now() > deadline {
            bail!(
                "no leader was elected within 60s; see the logs in {}",
                dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    if fresh {
        // The dev admin becomes the cluster's first admin (plaintext clusters have no roles).
        if let Some(me) = connector.identity() {
            let command = super::roles::bootstrap_admin(&me);
            let command_json = serde_json::to_string(&command)?;
            // A leader elected a moment ago may not have its lease yet (UNAVAILABLE: "cut
            // off", or no leader after all): retried until the deadline. The request id makes
            // a retry of a write that did commit return its first result.
            loop {
                let reply = c
                    .submit(SubmitRequest {
                        command_json: command_json.clone(),
                        request_id: "dev-up-bootstrap-admin".into(),
                    })
                    .await;
                match reply {
                    Ok(_) => break,
                    Err(status)
                        if status.code() == tonic::Code::Unavailable
                            && Instant::now() < deadline =>
                    {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    Err(status) => {
                        return Err(status).with_context(|| format!("bind {me} admin"));
                    }
                }
            }
        }
    }
    Ok(leader)
}

pub(crate) fn down(dir: &Path, fmt: Format) -> anyhow::Result<()> {
    let stopped = stop_cluster(dir)?;
    print(fmt, &json!({"stopped": stopped}), &["stopped"])
}

/// Stops every node of the cluster in `dir`, removed ones still running included (SIGTERM,
/// then SIGKILL after 10 s); returns the pids stopped.
pub(crate) fn stop_cluster(dir: &Path) -> anyhow::Result<Vec<u32>> {
    let cluster = read_cluster_file(dir)?;
    let pids: Vec<u32> = cluster
        .nodes
        .iter()
        .chain(&cluster.removed)
        .map(|n| n.pid)
        .filter(|p| is_alive(*p))
        .collect();
    stop_pids(&pids);
    Ok(pids)
}

/// Stops `pids` (nodes this tool started): SIGTERM, then SIGKILL to any still alive after
/// 10 s.
pub(crate) fn stop_pids(pids: &[u32]) {
    for p in pids {
        // SAFETY: plain kill(2) on a pid we started; no memory is involved.
        unsafe { libc::kill(*p as i32, libc::SIGTERM) };
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while pids.iter().any(|p| is_alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in pids.iter().filter(|p| is_alive(**p)) {
        // SAFETY: as above.
        unsafe { libc::kill(*p as i32, libc::SIGKILL) };
    }
}

pub(crate) async fn restart(dir: &Path, id: u64, fmt: Format) -> anyhow::Result<()> {
    let mut cluster = read_cluster_file(dir)?;
    let Some(i) = cluster.nodes.iter().position(|n| n.id == id) else {
        bail!(
            "--id: no node {id} in {}",
            dir.join("cluster.json").display()
        );
    };
    if is_alive(cluster.nodes[i].pid) {
        bail!("node {id} is still running (pid {})", cluster.nodes[i].pid);
    }
    let pid = spawn_node(dir, &cluster, &cluster.nodes[i], false)?;
    cluster.nodes[i].pid = pid;
    write_cluster_file(dir, &cluster)?;
    let connector = dev_connector(dir, &cluster)?;
    wait_until_serving(
        dir,
        &cluster.nodes[i],
        pid,
        &connector,
        Instant::now() + Duration::from_secs(60),
    )
    .await?;
    print(
        fmt,
        &serde_json::to_value(&cluster.nodes[i])?,
        &["id", "addr", "pid", "data_dir"],
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/proc/PID/stat` of a process in `state` with `threads` threads, named with a `) Z`
    /// of its own to show the name is skipped.
    fn stat(state: &str, threads: u32) -> String {
        format!("4242 (hub-node) Z x) {state} 1 4242 4242 0 -1 4194560 10 0 0 0 5 3 0 0 20 0 {threads} 0 99 123456 789")
    }

    #[test]
    fn a_zombie_is_dead_only_once_its_threads_have_exited() {
        assert!(stat_is_alive(&stat("S", 12)), "running");
        assert!(stat_is_alive(&stat("D", 1)), "in uninterruptible sleep");
        // SIGKILLed: the first thread is a zombie, 11 others still hold the sockets.
        assert!(
            stat_is_alive(&stat("Z", 12)),
            "zombie first thread, threads exiting"
        );
        assert!(!stat_is_alive(&stat("Z", 1)), "zombie left alone");
        assert!(!stat_is_alive("garbage"), "unreadable");
        assert!(is_alive(std::process::id()), "this test");
        assert!(!is_alive(u32::MAX), "no such pid");
    }

    #[test]
    fn picked_ports_are_distinct_and_below_the_ephemeral_range() {
        let ephemeral: u16 = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
            .expect("Linux port range")
            .split_whitespace()
            .next()
            .and_then(|s| s.parse().ok())
            .expect("first ephemeral port");
        for _ in 0..20 {
            let ports = pick_ports(5, 0).expect("five free ports");
            let distinct: std::collections::BTreeSet<_> = ports.iter().collect();
            assert_eq!(distinct.len(), 5, "{ports:?}");
            assert!(
                ports.iter().all(|p| (10_000..ephemeral).contains(p)),
                "{ports:?} not in 10000..{ephemeral}"
            );
        }
    }

    #[test]
    fn dev_clusters_open_loopback_and_say_so() {
        let args = opening_outbound(hub_http::DenyList::LOOPBACK, "--snapshot-logs 100").unwrap();
        assert_eq!(
            args,
            "--outbound-allow 127.0.0.0/8,::1/128 --snapshot-logs 100"
        );
        let split: Vec<String> = args.split_whitespace().map(String::from).collect();
        assert_eq!(opened_ranges(&split), ["127.0.0.0/8", "::1/128"]);
        assert!(outbound_notice(&opened_ranges(&split)).contains("may reach 127.0.0.0/8, ::1/128"));
        assert_eq!(opening_outbound("", "--x").unwrap(), "--x");
        assert!(outbound_notice(&[]).contains("as on a production node"));
        let also = ["--outbound-allow=10.0.0.0/8".to_string()];
        assert_eq!(opened_ranges(&also), ["10.0.0.0/8"]);
        let err = opening_outbound("127.0.0.1/8", "").unwrap_err().to_string();
        assert!(
            err.starts_with("--outbound-allow: \"127.0.0.1/8\""),
            "{err}"
        );
    }
}

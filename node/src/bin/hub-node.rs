//! `hub-node`: one node of the hub cluster.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::Parser;
use hub_node::api::HubService;
use hub_node::node::{HubNode, NodeConfig};
use hub_node::peers::MAX_MESSAGE_BYTES;
use hub_node::raft_service::RaftService;
use hub_proto::agent_server::AgentServer;
use hub_proto::hub_server::HubServer;
use hub_proto::raft_server::RaftServer;
use tokio::net::TcpListener;

/// jemalloc, not glibc's malloc: a node allocates and frees many small buffers per call and
/// per applied entry from several threads, and glibc's arenas spent a fifth of the nodes' CPU
/// on it in a 5,000-agent burst (docs/BENCHMARKS.md, "The allocator").
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// How long a leader that received SIGTERM waits for another voter to take the leadership
/// before it stops anyway (the others then elect a leader after their election timeout).
const SHUTDOWN_TRANSFER_TIMEOUT: Duration = Duration::from_secs(2);

/// A node of the hub: replicates the hub's state with Raft onto RocksDB and serves the API.
#[derive(Parser, Debug)]
#[command(name = "hub-node", version)]
struct Args {
    /// Raft node id (1 or more; never reuse the id of a removed node).
    #[arg(long)]
    id: u64,
    /// Address to listen on (gRPC for clients and peers).
    #[arg(long)]
    listen: SocketAddr,
    /// Address the other nodes and clients reach this node at (default: --listen).
    #[arg(long)]
    advertise: Option<String>,
    /// Data directory (created on first start; refused if it belongs to another node).
    #[arg(long)]
    data_dir: PathBuf,
    /// Cluster id; a node refuses data and peers of another cluster.
    #[arg(long)]
    cluster_id: String,
    /// The cluster its parties' certificates name (`hub://<cluster>/…`; default:
    /// --cluster-id). A cluster restored from a backup of cluster OLD with `hubctl snapshot
    /// restore --keep-ca` runs every node with `--certificate-cluster OLD`: its agents' and
    /// operators' certificates keep working, while its nodes' Raft traffic carries the new
    /// --cluster-id, which the old cluster's members never do.
    #[arg(long, value_name = "CLUSTER", env = "HUB_CERTIFICATE_CLUSTER")]
    certificate_cluster: Option<String>,
    /// Found a new cluster with these voters (ID=HOST:PORT, comma-separated, this node
    /// among them): give every founding node the same list. The one with the lowest id
    /// initialises the cluster at start while its data directory holds none, the others
    /// take its log when it reaches them; the flag is ignored once the data directory holds
    /// the cluster. A node to be added to a running cluster is started without it.
    #[arg(long, value_name = "ID=HOST:PORT,...", env = "HUB_INITIAL_MEMBERS")]
    initial_members: Option<String>,
    /// Leader heartbeat period.
    #[arg(long, default_value_t = 100)]
    heartbeat_ms: u64,
    /// Minimum election timeout. A follower also refuses votes until `--election-max-ms` has
    /// passed since it last heard from the leader (leader lease), so a failover takes about
    /// one to two election timeouts, or one when the leader's process is gone (its followers
    /// see its port refuse connections and drop their leases: `dead_leader.rs`); pre-vote
    /// keeps spurious timeouts from disrupting a leader.
    /// The defaults (heartbeat 100, election 300–600 ms) keep a loaded node's scheduling
    /// stalls from causing elections: with 50/150–300 ms, 5,000 agents on two shared cores
    /// caused four leader changes in 90 s; with these, none (docs/BENCHMARKS.md).
    #[arg(long, default_value_t = 300)]
    election_min_ms: u64,
    /// Maximum election timeout.
    #[arg(long, default_value_t = 600)]
    election_max_ms: u64,
    /// How long a write or linearizable read waits for a leader and a quorum before failing.
    #[arg(long, default_value_t = 5000)]
    request_timeout_ms: u64,
    /// Build a snapshot every this many log entries. Every node builds one at about the same
    /// index, and a build copies the whole state, so a short cadence stalls writes under load
    /// (at 10,000 entries: a build every 3 s at 64 writers, heartbeats timing out;
    /// docs/BENCHMARKS.md). etcd's default snapshot count is the same 100,000.
    #[arg(long, default_value_t = 100_000)]
    snapshot_logs: u64,
    /// Log entries kept behind the last snapshot for lagging followers: a follower that is
    /// fewer entries behind catches up from the log, not by a whole snapshot (a node restarted
    /// under load falls this far behind in about 2 s; etcd keeps 5,000).
    #[arg(long, default_value_t = 10_000)]
    keep_logs: u64,
    // SPEC C9
    /// How long the leader trusts an artifact-existence check.
    #[arg(long, default_value_t = 60_000)]
    artifact_ttl_ms: u64,
    /// Timeout of one artifact-existence check (HTTP HEAD or file stat).
    #[arg(long, default_value_t = 5_000)]
    artifact_timeout_ms: u64,
    /// Address ranges (CIDR, comma-separated) that outbound HTTP calls — webhooks, alerts,
    /// Prometheus queries, registry checks — never connect to. Host names are checked on the
    /// addresses they resolve to, IP literals on every URL and redirect hop. The default
    /// denies loopback, private (10/8, 172.16/12, 192.168/16), shared (100.64/10), link-local
    /// and 0.0.0.0/8 addresses and their IPv6 equivalents (::1, fc00::/7, fe80::/10), and the
    /// cloud metadata addresses 169.254.169.254, 100.100.100.200 and fd00:ec2::254 by name.
    /// The list replaces the default (`--outbound-deny ''` denies nothing); to reach a
    /// Prometheus or a registry on a private network, keep it and open that range with
    /// `--outbound-allow`.
    #[arg(long, default_value = hub_http::DenyList::DEFAULT)]
    outbound_deny: String,
    /// An address range (CIDR) opened inside the `--outbound-deny` ranges, e.g.
    /// `--outbound-allow 10.20.0.0/16` for a registry on that network; repeat the flag or
    /// separate ranges with commas. The most specific range decides: opening 169.254.0.0/16
    /// leaves 169.254.169.254/32 denied. `hubctl dev up` and `hubctl demo` open loopback
    /// (127.0.0.0/8, ::1/128).
    #[arg(
        long,
        value_name = "CIDR",
        value_delimiter = ',',
        env = "HUB_OUTBOUND_ALLOW"
    )]
    outbound_allow: Vec<String>,
    /// PEM file of CA certificates that canary webhooks, alerts and Prometheus queries trust
    /// besides the system's roots (registries have their own: `hubctl env registry set
    /// --ca-file`).
    #[arg(long, value_name = "PEM_FILE")]
    outbound_ca_file: Option<PathBuf>,
    /// Log format.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// The cluster CA's certificate (PEM): peers, agents and operators are verified against it.
    #[arg(long, env = "HUB_CA_FILE")]
    ca_file: Option<PathBuf>,
    /// This node's certificate (PEM), naming `hub://<cluster>/node/<id>` and the hosts it is
    /// dialled at (`hubctl pki issue node`).
    #[arg(long, env = "HUB_CERT_FILE")]
    cert_file: Option<PathBuf>,
    /// This node's private key (PEM).
    #[arg(long, env = "HUB_KEY_FILE")]
    key_file: Option<PathBuf>,
    /// Plaintext, unauthenticated gRPC, for development only: refused unless the listen and
    /// advertise addresses are loopback. Anyone who can reach the port may do anything.
    #[arg(long, conflicts_with_all = ["ca_file", "cert_file", "key_file"])]
    insecure: bool,
    /// Most open connections of identified parties (agents, operators, token holders) on
    /// the gRPC listener; more are closed at once. Nodes and unidentified connections have
    /// budgets of their own (docs/SECURITY.md "Budgets").
    #[arg(long, default_value_t = 4096)]
    max_connections: usize,
    /// Most open connections of this cluster's nodes on the gRPC listener.
    #[arg(long, default_value_t = 64)]
    max_peer_connections: usize,
    /// Most open connections that have not proved who they are yet (in their TLS handshake,
    /// or without a certificate and no valid token so far); a new one closes the oldest.
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..))]
    max_unadmitted: u32,
    /// Most such connections from one source address (an IPv6 /64 counts as one); a new one
    /// closes that source's oldest.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    max_unadmitted_per_source: u32,
    /// Serve Prometheus metrics at https://ADDR/metrics, with this node's certificate, to a
    /// caller with a cluster certificate or an operator token holding any role (plain HTTP
    /// on loopback with --insecure).
    #[arg(long, value_name = "ADDR", env = "HUB_METRICS_LISTEN")]
    metrics_listen: Option<SocketAddr>,
    /// Serve the web dashboard at https://ADDR/, with this node's certificate, to operators
    /// who log in with a token (docs/DASHBOARD.md); plain HTTP on loopback with --insecure.
    #[arg(long, value_name = "ADDR", env = "HUB_HTTP_LISTEN")]
    http_listen: Option<SocketAddr>,
    /// Chaos builds only: read partitions from DATA/chaos-faults.json (`{"cut_to":[ids]}`)
    /// and drop every message to those nodes. For the chaos runner without root.
    #[cfg(feature = "chaos-faults")]
    #[arg(long)]
    chaos_faults: bool,
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,openraft=warn,h2=warn,tower=warn")
    });
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    // Colours only on a terminal: a log file or journal gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    // openraft's line per failed call to a peer is left out: `peer_health` says it once.
    let filter = hub_node::raft_log_filter::RaftLogFilter;
    if format == "json" {
        builder.json().finish().with(filter).init();
    } else {
        builder.finish().with(filter).init();
    }
}

#[tokio::main]
async fn main() {
    // The error and its causes on one line, without a backtrace (RUST_BACKTRACE may be set
    // on an operator's machine): what a supervisor's log should show.
    if let Err(e) = run().await {
        eprintln!("Error: {e:#}");
        std::process::exit(1);
    }
}

// Long: the node's start-up sequence, step by step, each step's failure named.
async fn run() -> anyhow::Result<()> {
    // Owner-only files (SECURITY "At rest"): RocksDB creates its SST, WAL and MANIFEST files
    // with the process umask, and they hold every secret of the hub in plaintext.
    raft_store::private::restrict_umask();
    let args = Args::parse();
    init_tracing(&args.log_format);
    if args.id == 0 {
        anyhow::bail!("--id: node ids start at 1");
    }
    if args.heartbeat_ms == 0 {
        anyhow::bail!("--heartbeat-ms: must be at least 1");
    }
    if args.request_timeout_ms == 0 {
        anyhow::bail!("--request-timeout-ms: must be at least 1");
    }
    if args.artifact_ttl_ms == 0 || args.artifact_timeout_ms == 0 {
        anyhow::bail!("--artifact-ttl-ms and --artifact-timeout-ms: must be at least 1");
    }
    let initial_members = args
        .initial_members
        .as_deref()
        .map(|m| hub_node::founding::parse_initial_members(m, args.id))
        .transpose()
        .map_err(|e| anyhow::anyhow!("--initial-members: {e}"))?;
    let outbound_deny = hub_http::DenyList::parse(&args.outbound_deny)
        .map_err(|e| anyhow::anyhow!("--outbound-deny: {e}"))?
        .allowing(
            hub_http::parse_ranges(&args.outbound_allow.join(","))
                .map_err(|e| anyhow::anyhow!("--outbound-allow: {e}"))?,
        );
    let outbound_ca_pem = args
        .outbound_ca_file
        .as_deref()
        .map(hub_client::ca_file::read_ca_file)
        .transpose()
        .map_err(|e| anyhow::anyhow!("--outbound-ca-file {e}"))?;
    if args.snapshot_logs == 0 {
        anyhow::bail!("--snapshot-logs: must be at least 1");
    }
    if args.election_min_ms >= args.election_max_ms || args.heartbeat_ms * 2 > args.election_min_ms
    {
        anyhow::bail!(
            "--election-min-ms must be below --election-max-ms and at least twice --heartbeat-ms"
        );
    }
    if args.advertise.is_none() && args.listen.ip().is_unspecified() {
        anyhow::bail!(
            "--advertise: required when --listen is {} (peers cannot dial an unspecified address)",
            args.listen
        );
    }
    let transport = hub_node::transport::Transport::from_flags(
        hub_node::transport::TlsFlags {
            ca: args.ca_file.clone(),
            cert: args.cert_file.clone(),
            key: args.key_file.clone(),
            insecure: args.insecure,
        },
        args.id,
        args.certificate_cluster
            .as_deref()
            .unwrap_or(&args.cluster_id),
        args.listen,
        args.advertise.as_deref(),
    )?;
    for (flag, addr) in [
        ("--metrics-listen", args.metrics_listen),
        ("--http-listen", args.http_listen),
    ] {
        if let Some(addr) = addr.filter(|a| args.insecure && !a.ip().is_loopback()) {
            anyhow::bail!(
                "{flag}: refused because {addr} is not a loopback address and --insecure serves it to anyone"
            );
        }
    }
    // Bind first: a port in use fails before the data directory is touched.
    let listener = TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("--listen {}: cannot bind", args.listen))?;
    let metrics_listener = match args.metrics_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("--metrics-listen {addr}: cannot bind"))?,
        ),
        None => None,
    };
    let http_listener = match args.http_listen {
        Some(addr) => Some(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("--http-listen {addr}: cannot bind"))?,
        ),
        None => None,
    };
    let cfg = NodeConfig {
        id: args.id,
        listen: args.listen,
        advertise: args
            .advertise
            .clone()
            .unwrap_or_else(|| args.listen.to_string()),
        data_dir: args.data_dir.clone(),
        cluster_id: args.cluster_id.clone(),
        heartbeat_ms: args.heartbeat_ms,
        election_min_ms: args.election_min_ms,
        election_max_ms: args.election_max_ms,
        request_timeout: Duration::from_millis(args.request_timeout_ms),
        snapshot_logs: args.snapshot_logs,
        keep_logs: args.keep_logs,
        artifact_ttl: Duration::from_millis(args.artifact_ttl_ms),
        artifact_timeout: Duration::from_millis(args.artifact_timeout_ms),
        connector: transport.connector.clone(),
        outbound_deny,
        outbound_ca_pem,
    };
    let node = HubNode::start(&cfg).await?;
    // After the store has opened its directory: the layer acknowledges into it, and a new
    // store refuses a directory that already holds files (the chaos runner's disks are
    // mount points, so the directory exists before the node does).
    #[cfg(feature = "chaos-faults")]
    if args.chaos_faults {
        hub_node::fault_layer::install(cfg.id, &cfg.data_dir);
    }
    // From here on a failed write or sync of the store stops the process (crash-stop).
    hub_node::crash_stop::watch(&node.raft);
    if let Some(members) = initial_members {
        hub_node::founding::initialize_at_start(&node, members).await?;
    }
    tracing::info!(id = cfg.id, addr = %cfg.advertise, cluster = %cfg.cluster_id,
        outbound_deny = %cfg.outbound_deny, "hub-node started");

    let raft_svc = RaftServer::new(RaftService::new(
        node.raft.clone(),
        node.cluster_id.clone(),
        node.leader_contact.clone(),
        node.sm.clone(),
        node.stopping.clone(),
    ))
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let hub_svc = HubServer::new(HubService { node: node.clone() })
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES);
    let agent_svc = AgentServer::new(hub_node::agent_api::AgentService {
        node: node.clone(),
        plans: hub_node::agent_api::PlanWatch::start(&node),
    })
    .max_decoding_message_size(MAX_MESSAGE_BYTES)
    .max_encoding_message_size(MAX_MESSAGE_BYTES);
    // The leader-only loops, started once per term of this node's leadership.
    let _leader = hub_node::leader::spawn(node.clone());
    let _dead_leader =
        hub_node::dead_leader::spawn(node.clone(), Duration::from_millis(args.heartbeat_ms));

    let shutdown = {
        let node = node.clone();
        async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("install SIGTERM handler");
            tokio::select! {
                _ = term.recv() => {},
                _ = tokio::signal::ctrl_c() => {},
            }
            // A leader that stops hands its leadership over first, while it still serves the
            // votes and appends that need: the cluster then waits one round of votes, not an
            // election timeout (a rolling restart stalls writes for milliseconds).
            if node.leader().map(|(id, _)| id) == Some(node.id) {
                match node.transfer_leader(None, SHUTDOWN_TRANSFER_TIMEOUT).await {
                    Ok((to, term)) => tracing::info!(to, term, "handed the leadership over"),
                    Err(e) => tracing::warn!(error = %e.message(), "leadership not handed over"),
                }
            }
            // Ends the replication streams and the agents' long-polls, which would hold the
            // listener's drain open (`hub_node::stopping`).
            node.stopping.begin();
            tracing::info!("shutting down");
        }
    };
    let _reload = hub_tls::reload::reload_on_sighup(transport.reloadable.clone())
        .context("install the SIGHUP handler")?;
    let policy = hub_node::auth::Policy {
        insecure: transport.insecure,
        is_member: {
            let node = node.clone();
            std::sync::Arc::new(move |id| node.is_member(id))
        },
        tokens: {
            let node = node.clone();
            std::sync::Arc::new(move |hash| {
                hub_node::auth::token_verdict(
                    &node.state.read().state,
                    hash,
                    hub_node::propose::now_ms(),
                )
            })
        },
        revoked: {
            let node = node.clone();
            std::sync::Arc::new(move |serial: &[u8]| {
                !serial.is_empty()
                    && node
                        .state
                        .read()
                        .state
                        .is_revoked(&hub_engine::revocation::serial_from_der_bytes(serial))
            })
        },
        stats: node.auth_stats.clone(),
    };
    node.metrics.attach(hub_node::metrics::Sources {
        auth: node.auth_stats.clone(),
        listener: match &transport.listener {
            hub_tls::server::ListenerMode::Tls { tls, .. } => Some(tls.stats().clone()),
            hub_tls::server::ListenerMode::Plaintext => None,
        },
        snapshots: node.sm.snapshot_stats(),
        clock: node.clock.clone(),
    });
    hub_node::metrics::watch_leader(&node.raft, node.metrics.clone());
    if let Some(l) = metrics_listener {
        tracing::info!(addr = %l.local_addr()?, "metrics at /metrics");
        tokio::spawn(hub_node::metrics_server::serve(
            l,
            transport.http_listener.clone(),
            node.clone(),
            policy.clone(),
        ));
    }
    if let Some(l) = http_listener {
        tracing::info!(addr = %l.local_addr()?, "dashboard at /");
        let dashboard = hub_node::dashboard::Dashboard::new(node.clone(), policy.clone());
        tokio::spawn(dashboard.serve(l, transport.http_listener.clone()));
    }
    let incoming = hub_tls::server::incoming(
        listener,
        transport.listener.clone(),
        hub_tls::server::Limits {
            max_connections: args.max_connections,
            max_peer_connections: args.max_peer_connections,
            max_unadmitted: args.max_unadmitted as usize,
            max_unadmitted_per_source: args.max_unadmitted_per_source as usize,
            ..Default::default()
        },
    );
    let serve = tonic::transport::Server::builder()
        // Bounds per connection and per request, so one client cannot exhaust the node.
        .concurrency_limit_per_connection(256)
        .max_concurrent_streams(1024)
        .http2_max_header_list_size(64 << 10)
        .http2_keepalive_interval(Some(Duration::from_secs(10)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        // Longer than the longest call (an agent's long poll waits at most 30 s).
        .timeout(Duration::from_secs(120))
        .layer(hub_node::metrics::ApiMetricsLayer::new(
            node.metrics.clone(),
        ))
        .layer(hub_node::auth::AuthLayer::new(policy))
        .add_service(raft_svc)
        .add_service(hub_svc)
        .add_service(agent_svc)
        .serve_with_incoming_shutdown(incoming, shutdown);
    // The drain after the stop is bounded: a call still open after the grace is cut (its
    // client retries elsewhere) rather than keep the process from exiting.
    let grace_over = {
        let stopping = node.stopping.clone();
        async move {
            stopping.begun().await;
            tokio::time::sleep(hub_node::stopping::DRAIN_GRACE).await;
        }
    };
    tokio::select! {
        served = serve => served.context("serve")?,
        () = grace_over => tracing::warn!(
            grace_ms = hub_node::stopping::DRAIN_GRACE.as_millis() as u64,
            "calls still open after the drain's grace: closing them"
        ),
    }
    let _ = node.raft.shutdown().await;
    Ok(())
}

//! The `hubctl dev` command line: each subcommand and the module that carries it out
//! ([`super::dev`] for the cluster's life cycle, [`super::dev_members`] for growing and
//! shrinking it, [`super::dev_registry`] for the test registry).

use std::path::PathBuf;

use clap::Subcommand;

use super::output::Format;
use super::{dev, dev_members};

/// `hubctl dev …`
#[derive(Subcommand, Debug)]
pub enum DevCmd {
    /// Start N hub-node processes in the background and wait for a leader.
    Up {
        /// Number of nodes: 3 or 5 (default 3; an existing cluster keeps its size).
        #[arg(long)]
        nodes: Option<u64>,
        /// Directory for cluster.json, node logs and node data.
        #[arg(long)]
        data_dir: PathBuf,
        /// First port; node N listens on base-port + N - 1. 0 picks free ports.
        #[arg(long, default_value_t = 7401)]
        base_port: u16,
        /// Extra arguments for every hub-node (e.g. "--snapshot-logs 100").
        #[arg(long, default_value = "", allow_hyphen_values = true)]
        node_args: String,
        /// One address per node (`10.77.0.11,10.77.0.12,…`): node N listens on the Nth at
        /// base-port (7401 when 0) instead of on 127.0.0.1. For test networks.
        #[arg(long, value_delimiter = ',')]
        hosts: Vec<String>,
        /// One network namespace per node: node N runs in the Nth (`ip netns exec`). For
        /// test networks; requires root.
        #[arg(long, value_delimiter = ',')]
        netns: Vec<String>,
        /// Plaintext nodes with no authentication (`hub-node --insecure`; loopback only).
        #[arg(long)]
        insecure: bool,
        /// Address ranges (CIDR, comma-separated) every node may call although its default
        /// `--outbound-deny` denies them (`hub-node --outbound-allow`): loopback by default,
        /// so webhooks, Prometheus and registries on this machine answer. `''` opens
        /// nothing, as on a production node. Kept with the cluster.
        #[arg(long, value_name = "CIDRS", default_value = hub_http::DenyList::LOOPBACK)]
        outbound_allow: String,
    },
    /// Stop every node of the cluster (data is kept).
    Down {
        /// The cluster's directory.
        #[arg(long)]
        data_dir: PathBuf,
    },
    /// Serve a directory as an https artifact registry with a CA generated on the spot
    /// (written to TLS_DIR/ca.pem for `hubctl env registry set … --ca-file`). Runs until
    /// SIGTERM or Ctrl-C.
    Registry(super::dev_registry::RegistryArgs),
    /// Start a node with the next unused id and add it to the running cluster (it catches
    /// up as a learner, then becomes a voter).
    AddNode {
        /// The cluster's directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// The node's address (it listens on port 7401 there); loopback with a free port
        /// without it. For test networks.
        #[arg(long)]
        host: Option<String>,
        /// The network namespace it runs in (`ip netns exec`); needs --host and root.
        #[arg(long)]
        netns: Option<String>,
    },
    /// Remove a node from the running cluster and stop it.
    RemoveNode {
        /// The cluster's directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// Node id.
        #[arg(long)]
        id: u64,
        /// Leave the removed node's process running (it must never again vote or be
        /// counted; `dev down` stops it).
        #[arg(long)]
        keep_running: bool,
    },
    /// Start one node again on its data.
    RestartNode {
        /// The cluster's directory.
        #[arg(long)]
        data_dir: PathBuf,
        /// Node id.
        #[arg(long)]
        id: u64,
    },
}

/// Runs a `dev` subcommand.
pub async fn run(cmd: DevCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        DevCmd::Up {
            nodes,
            data_dir,
            base_port,
            node_args,
            hosts,
            netns,
            insecure,
            outbound_allow,
        } => {
            let placement = dev::Placement {
                hosts,
                netns,
                insecure,
            };
            let node_args = dev::opening_outbound(&outbound_allow, &node_args)?;
            dev::up(nodes, &data_dir, base_port, &node_args, &placement, fmt).await
        }
        DevCmd::Down { data_dir } => dev::down(&data_dir, fmt),
        DevCmd::Registry(args) => super::dev_registry::run(args).await,
        DevCmd::RestartNode { data_dir, id } => dev::restart(&data_dir, id, fmt).await,
        DevCmd::AddNode {
            data_dir,
            host,
            netns,
        } => {
            let place = dev_members::NewNodePlace { host, netns };
            dev_members::add_node(&data_dir, &place, fmt).await
        }
        DevCmd::RemoveNode {
            data_dir,
            id,
            keep_running,
        } => dev_members::remove_node(&data_dir, id, keep_running, fmt).await,
    }
}

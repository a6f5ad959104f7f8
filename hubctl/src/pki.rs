//! `hubctl pki`: the cluster's certificate authority, on local files (`revoke` alone talks
//! to the hub).

use std::path::PathBuf;
use std::time::SystemTime;

use clap::Subcommand;
use hub_tls::pki::{file_stem, Ca, DEFAULT_OPERATOR_DAYS, DEFAULT_SERVICE_DAYS};
use hub_tls::Identity;
use serde_json::json;

use super::output::{print, Format};

#[derive(Subcommand, Debug)]
pub enum PkiCmd {
    /// Create the cluster CA in DIR (made 0700; the CA key is written 0600). Refuses if a CA
    /// is already there.
    Init {
        /// The CA directory.
        #[arg(long)]
        dir: PathBuf,
        /// The cluster id every certificate will name (hub-node --cluster-id).
        #[arg(long)]
        cluster_id: String,
    },
    /// Issue a certificate and key signed by the CA in DIR.
    #[command(subcommand)]
    Issue(IssueCmd),
    /// Revoke a certificate (admins): every node refuses it from the commit on, on every
    /// call of every connection. This one talks to the hub.
    Revoke(super::revoke::RevokeArgs),
    /// The revoked certificates (admins): serial, whom each names, why, who revoked it and
    /// when. This one talks to the hub.
    Revoked {
        #[command(flatten)]
        read: super::args::ReadArgs,
    },
}

#[derive(clap::Args, Debug)]
pub struct IssueArgs {
    /// The CA directory.
    #[arg(long)]
    dir: PathBuf,
    /// Where to write the certificate and key (default: the CA directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Validity in days (default: 365 for nodes and agents, 90 for operators).
    #[arg(long)]
    days: Option<u32>,
}

#[derive(Subcommand, Debug)]
pub enum IssueCmd {
    /// A hub node: `hub://<cluster>/node/<id>`, valid for the hosts it is dialled at.
    Node {
        /// Raft node id.
        #[arg(long)]
        id: u64,
        /// A DNS name or IP address clients and peers dial the node at; repeat for each.
        #[arg(long = "host", required = true)]
        hosts: Vec<String>,
        #[command(flatten)]
        args: IssueArgs,
    },
    /// The agent of an environment: `hub://<cluster>/agent/<environment>`.
    Agent {
        /// The environment the agent serves (it may act for no other).
        #[arg(long)]
        environment: String,
        #[command(flatten)]
        args: IssueArgs,
    },
    /// An operator: `hub://<cluster>/operator/<name>`.
    Operator {
        /// The operator's name (recorded as the actor of every change it makes).
        #[arg(long)]
        name: String,
        #[command(flatten)]
        args: IssueArgs,
    },
}

fn identity(kind: &str, name: &str) -> anyhow::Result<Identity> {
    Identity::parse(&format!("{kind}/{name}")).map_err(|e| anyhow::anyhow!("--{kind}: {e}"))
}

/// Runs `hubctl pki …`: every command works on local files except `revoke`, which
/// connects (`connect`) and checks a certificate against `ca_file`.
pub async fn run(
    cmd: PkiCmd,
    fmt: Format,
    connect: impl FnOnce() -> anyhow::Result<hub_client::FailoverClient>,
    ca_file: Option<&std::path::Path>,
) -> anyhow::Result<()> {
    let now = SystemTime::now();
    match cmd {
        PkiCmd::Revoke(args) => super::revoke::run(&connect()?, args, ca_file, fmt).await,
        PkiCmd::Revoked { read } => super::revoke::list(&connect()?, read, fmt).await,
        PkiCmd::Init { dir, cluster_id } => {
            let ca = Ca::init(&dir, &cluster_id, now)?;
            print(
                fmt,
                &json!({"cluster": ca.cluster(), "ca": ca.cert_path().display().to_string()}),
                &["cluster", "ca"],
            )
        }
        PkiCmd::Issue(issue) => {
            let (identity, hosts, args, default_days) = match issue {
                IssueCmd::Node { id, hosts, args } => {
                    (Identity::Node(id), hosts, args, DEFAULT_SERVICE_DAYS)
                }
                IssueCmd::Agent { environment, args } => (
                    identity("agent", &environment)?,
                    Vec::new(),
                    args,
                    DEFAULT_SERVICE_DAYS,
                ),
                IssueCmd::Operator { name, args } => (
                    identity("operator", &name)?,
                    Vec::new(),
                    args,
                    DEFAULT_OPERATOR_DAYS,
                ),
            };
            if matches!(identity, Identity::Node(0)) {
                anyhow::bail!("--id: node ids start at 1");
            }
            let ca = Ca::open(&args.dir)?;
            let issued = ca.issue(&identity, &hosts, args.days.unwrap_or(default_days), now)?;
            let out = args.out.unwrap_or_else(|| args.dir.clone());
            let written = issued.write(&out, &file_stem(&identity))?;
            print(
                fmt,
                &json!({
                    "identity": identity.uri(ca.cluster()),
                    "cert": written.cert.display().to_string(),
                    "key": written.key.display().to_string(),
                }),
                &["identity", "cert", "key"],
            )
        }
    }
}

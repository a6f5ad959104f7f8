//! `hubctl`: the operator CLI. Global `--endpoints` (any nodes; the CLI fails over between
//! them) and `-o table|json|yaml`. It talks to the hub only through `hub-client`.
//!
//! The crate is also a library for its dev-cluster launcher ([`dev`], [`dev_cmd`],
//! [`dev_members`], [`dev_registry`]), which the chaos runner starts its clusters with.
//!
//! This module parses the command line and dispatches every command to its module. The
//! command modules (`canary`, `demo`, `dev`, `modules`, `orch`, `pki`, `plans`, `rollouts`,
//! `settings`)
//! use the helper modules (`args`, `calls`, `output`, `timeparse`) and none of each other's
//! commands, except that `demo` starts its hub through `dev`'s and `dev_registry`'s functions;
//! the helpers use no command module.

mod alert_providers;
mod approvals;
mod args;
mod calls;
mod canary;
mod demo;
mod metric_templates;
pub use demo::package as package_demo_service;
pub mod dev;
pub mod dev_cmd;
pub mod dev_members;
pub use dev::read_cluster_file;
pub mod dev_registry;
mod modules;
mod orch;
mod output;
mod pki;
mod plans;
mod revoke;
mod roles;
mod rollouts;
mod settings;
mod snapshot;
mod timeparse;
mod tokens;
mod watch;

use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use hub_proto::*;
use serde_json::{json, Value};

use ::hub_client::request_id::new_request_id;
use ::hub_client::FailoverClient;
use args::ReadArgs;
use output::{print, Format};

/// Operator CLI for the hub.
#[derive(Parser, Debug)]
#[command(name = "hubctl", version)]
pub struct Cli {
    /// Hub endpoints, host:port,... (any nodes). Default: $HUBCTL_ENDPOINTS, else the local
    /// dev cluster's first three ports. (No short form: `-e` names an environment, as in
    /// `hubctl module install NAME -e ENV`.)
    #[arg(long, global = true, value_delimiter = ',', env = "HUBCTL_ENDPOINTS")]
    endpoints: Vec<String>,
    /// Output format.
    #[arg(short, long, global = true, default_value = "table")]
    output: Format,
    /// Per-call timeout in milliseconds.
    #[arg(long, global = true, default_value_t = 15_000)]
    timeout_ms: u64,
    /// The cluster CA's certificate (PEM). With --cert-file and --key-file: mutual TLS, as
    /// the identity the certificate names. Without any of the three, plaintext (a hub run
    /// with --insecure). These three go before the command (`hubctl --ca-file F env list`),
    /// so a command's own `--ca-file` (a registry's CA) stays its own.
    #[arg(long, env = "HUBCTL_CA_FILE")]
    ca_file: Option<std::path::PathBuf>,
    /// Your certificate (PEM), e.g. from `hubctl pki issue operator`.
    #[arg(long, env = "HUBCTL_CERT_FILE")]
    cert_file: Option<std::path::PathBuf>,
    /// Your private key (PEM).
    #[arg(long, env = "HUBCTL_KEY_FILE")]
    key_file: Option<std::path::PathBuf>,
    /// An operator token (`hubctl token create`), instead of --cert-file and --key-file: sent
    /// as `authorization: Bearer` over TLS, after the hub's certificate is verified against
    /// --ca-file.
    #[arg(long, env = "HUBCTL_TOKEN", hide_env_values = true, value_parser = token_arg)]
    token: Option<TokenArg>,
    #[command(subcommand)]
    command: Cmd,
}

impl Cli {
    /// The clap command: global options are accepted after any subcommand but described
    /// once, at the end of `hubctl --help`; every subcommand's help points there.
    pub fn command_with_global_options_once() -> clap::Command {
        use clap::CommandFactory;
        let cmd = Cli::command();
        let mut listed = String::from("Global options (after any command):\n");
        for a in cmd.get_arguments().filter(|a| a.is_global_set()) {
            let flag = match (a.get_short(), a.get_long()) {
                (Some(s), Some(l)) => format!("-{s}, --{l}"),
                (None, Some(l)) => format!("    --{l}"),
                (Some(s), None) => format!("-{s}"),
                (None, None) => continue,
            };
            let value = a
                .get_value_names()
                .and_then(|v| v.first())
                .map(|v| format!(" <{v}>"))
                .unwrap_or_else(|| format!(" <{}>", a.get_id().as_str().to_uppercase()));
            let mut help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let values: Vec<String> = a
                .get_possible_values()
                .iter()
                .map(|v| v.get_name().to_string())
                .collect();
            if !values.is_empty() {
                help.push_str(&format!(" [{}]", values.join(", ")));
            }
            if let Some(d) = a.get_default_values().first() {
                help.push_str(&format!(" [default: {}]", d.to_string_lossy()));
            }
            if let Some(e) = a.get_env() {
                help.push_str(&format!(" [env: {}]", e.to_string_lossy()));
            }
            listed.push_str(&format!("  {flag}{value}\n          {help}\n"));
        }
        // Hidden before the command is built, so every subcommand inherits them hidden.
        let cmd = cmd
            .mut_args(|a| if a.is_global_set() { a.hide(true) } else { a })
            .after_help(listed);
        fn point_to_root(cmd: clap::Command) -> clap::Command {
            let names: Vec<String> = cmd
                .get_subcommands()
                .map(|s| s.get_name().to_string())
                .collect();
            let mut cmd = cmd;
            for name in names {
                cmd = cmd.mut_subcommand(name, |s| {
                    point_to_root(s.after_help(
                        "Global options (--endpoints, -o/--output, --timeout-ms): hubctl --help",
                    ))
                });
            }
            cmd
        }
        point_to_root(cmd)
    }

    /// Parses the process's arguments with [`Cli::command_with_global_options_once`].
    pub fn parse_with_global_options_once() -> Cli {
        use clap::FromArgMatches;
        let matches = Self::command_with_global_options_once().get_matches();
        Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit())
    }
}

/// `--token` as typed; parsed by [`client_mode`], whose errors never repeat it (clap's would).
#[derive(Clone)]
pub struct TokenArg(String);

impl std::fmt::Debug for TokenArg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenArg(redacted)")
    }
}

fn token_arg(s: &str) -> Result<TokenArg, String> {
    Ok(TokenArg(s.to_string()))
}

/// The bearer of `--token`: TLS to the hub verified against `--ca-file`, and no certificate
/// of the caller's own.
pub fn token_bearer(
    token: Option<&TokenArg>,
    ca: Option<&std::path::Path>,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> anyhow::Result<Option<::hub_client::Bearer>> {
    let Some(TokenArg(text)) = token else {
        return Ok(None);
    };
    if cert.is_some() || key.is_some() {
        bail!("--token (HUBCTL_TOKEN) replaces --cert-file and --key-file: give one of them");
    }
    if ca.is_none() {
        bail!("--token (HUBCTL_TOKEN) needs --ca-file (HUBCTL_CA_FILE): a token is only sent to a hub whose certificate the cluster CA signed");
    }
    let secret = hub_engine::token::TokenSecret::parse(text.trim())
        .map_err(|e| anyhow::anyhow!("--token (HUBCTL_TOKEN): {e}"))?;
    Ok(Some(::hub_client::Bearer::new(&secret)))
}

/// The client TLS of `--ca-file/--cert-file/--key-file`: all three or none (plaintext).
pub fn client_mode(
    ca: Option<&std::path::Path>,
    cert: Option<&std::path::Path>,
    key: Option<&std::path::Path>,
) -> anyhow::Result<hub_tls::client::ClientMode> {
    use hub_tls::client::{ClientMode, ClientTls};
    match (ca, cert, key) {
        (None, None, None) => Ok(ClientMode::Plaintext),
        // Server-authenticated TLS only: the hub answers such a caller UNAUTHENTICATED.
        (Some(ca), None, None) => Ok(hub_tls::client::anonymous(ca)?),
        (Some(ca), Some(cert), Some(key)) => {
            let files = hub_tls::TlsFiles {
                ca: ca.to_path_buf(),
                cert: cert.to_path_buf(),
                key: key.to_path_buf(),
            };
            let tls = ClientTls::load(files, None, std::time::SystemTime::now())?;
            Ok(ClientMode::Tls(std::sync::Arc::new(tls)))
        }
        _ => bail!(
            "--cert-file and --key-file (or HUBCTL_CERT_FILE, HUBCTL_KEY_FILE) go together, with --ca-file (HUBCTL_CA_FILE); give none for a hub run with --insecure"
        ),
    }
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// A guided canary rollout on this machine: a local 3-node hub and agent, the demo
    /// service's 1.1.0 promoted and its faulty 1.2.0 rolled back.
    Demo(demo::DemoArgs),
    /// A local development cluster of hub-node processes.
    #[command(subcommand)]
    Dev(dev_cmd::DevCmd),
    /// Cluster membership and health.
    #[command(subcommand)]
    Cluster(ClusterCmd),
    /// Environments.
    #[command(subcommand)]
    Env(EnvCmd),
    /// Entities.
    #[command(subcommand)]
    Entity(EntityCmd),
    /// The replicated state's digest as seen by the contacted node.
    Digest(ReadArgs),
    /// Backups: save the replicated state from a live node, check a backup, restore one into
    /// a new cluster.
    #[command(subcommand)]
    Snapshot(snapshot::SnapshotCmd),
    /// The cluster's certificate authority: create it, issue node, agent and operator
    /// certificates (all local files; nothing is sent anywhere).
    #[command(subcommand)]
    Pki(pki::PkiCmd),
    /// Products (group:name) and their maintenance windows.
    #[command(subcommand)]
    Product(orch::ProductCmd),
    /// Releases: publish from a manifest, list, recall.
    #[command(subcommand)]
    Release(orch::ReleaseCmd),
    /// Custom release channels.
    #[command(subcommand)]
    Channel(orch::ChannelCmd),
    // SPEC C5
    /// One-off maintenance-window overrides.
    #[command(subcommand)]
    Window(orch::WindowCmd),
    // SPEC C8
    /// Suppression windows.
    #[command(subcommand)]
    Suppression(orch::SuppressionCmd),
    // SPEC P6, P12
    /// Change plans: list, show, cancel.
    #[command(subcommand)]
    Plan(plans::PlanCmd),
    // SPEC M8–M16
    /// Modules: publish definitions, install them, pause and resume updates.
    #[command(subcommand)]
    Module(modules::ModuleCmd),
    // SPEC K
    /// Canaries: apply, get (-A), wait --for=promoted, promote, abort, retry, delete.
    #[command(subcommand)]
    Canary(canary::CanaryCmd),
    // SPEC M9
    /// Module change requests: list, approve, reject.
    #[command(subcommand, name = "changerequest")]
    ChangeRequest(modules::ChangeRequestCmd),
    /// Flagger MetricTemplates that canaries' checks name: apply, get (-A), delete.
    #[command(subcommand, name = "metric-template")]
    MetricTemplate(metric_templates::MetricTemplateCmd),
    /// Flagger AlertProviders that canaries' alerts name: apply, delete.
    #[command(subcommand, name = "alert-provider")]
    AlertProvider(alert_providers::AlertProviderCmd),
    /// Approver groups and approval policies: who must approve module updates and window
    /// exceptions (admins).
    #[command(subcommand)]
    Approval(approvals::ApprovalCmd),
    // SPEC P1, C2
    /// Issue a break-glass command to an entity: bypasses every constraint.
    Command(orch::CommandArgs),
    /// Role bindings: who may do what (bind, unbind, list).
    #[command(subcommand)]
    Role(roles::RoleCmd),
    /// Print a shell completion script: `source <(hubctl completion bash)`, or write it to
    /// your shell's completion directory.
    Completion {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Operator tokens: create (the secret is shown once), list, revoke.
    #[command(subcommand)]
    Token(tokens::TokenCmd),
    /// The audit log, newest first: every write with who, what, on what and its outcome.
    Audit(orch::AuditArgs),
    /// Rollout policies: a product's waves across the fleet (apply -f, get, delete).
    #[command(subcommand, name = "rollout-policy")]
    RolloutPolicy(rollouts::RolloutPolicyCmd),
    /// A release's rollout across the fleet: status (--watch), promote-wave, halt, resume.
    #[command(subcommand)]
    Rollout(rollouts::RolloutCmd),
}

#[derive(Subcommand, Debug)]
enum ClusterCmd {
    /// Leader, term and every member's role, applied index and digest.
    Status {
        #[command(flatten)]
        watch: args::WatchArgs,
    },
    /// Claim a new cluster: bind yourself (your certificate's operator) as its first admin.
    /// The cluster's founding nodes initialised it at start (hub-node --initial-members);
    /// once the cluster has an admin, only an admin may bind one.
    Init,
    /// Add a node (start its hub-node first); it catches up, then becomes a voter.
    AddNode {
        /// New node id (never reuse one).
        #[arg(long)]
        id: u64,
        /// Its address, host:port.
        #[arg(long)]
        addr: String,
        /// Add as a non-voting learner only.
        #[arg(long)]
        learner: bool,
        /// How long to wait for the new node to catch up (a large state arrives as a
        /// snapshot) before it becomes a voter; at most one hour. A node still catching up
        /// then stays a learner and keeps catching up: run add-node again to promote it.
        #[arg(long, default_value_t = 600_000,
              value_parser = clap::value_parser!(u64).range(1_000..=3_600_000))]
        catch_up_timeout_ms: u64,
    },
    /// Remove a node from the cluster.
    RemoveNode {
        /// Node id.
        #[arg(long)]
        id: u64,
    },
    /// Hand the leadership to another voter (before maintenance on the leader's machine).
    TransferLeader {
        /// The voter to lead next (default: the one whose log is furthest along).
        #[arg(long)]
        to: Option<u64>,
    },
    /// Show (no flags) or change the hub's cluster-wide settings (admin to change).
    Settings {
        /// Whether a change of an entity's config or secrets alone starts a canary analysis
        /// (Flagger's config tracking; default true). A canary can turn it off for itself
        /// with the annotation `flagger.app/config-tracking: disabled`.
        #[arg(long, value_parser = args::parse_bool)]
        canary_config_tracking: Option<bool>,
        #[command(flatten)]
        read: args::ReadArgs,
    },
}

#[derive(Subcommand, Debug)]
enum EnvCmd {
    /// Create an environment.
    Create {
        /// Name (a DNS label).
        name: String,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// Show one environment.
    Get {
        /// Name.
        name: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// List environments.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Delete an environment (it must have no entities).
    Delete {
        /// Name.
        name: String,
    },
    /// Set labels (KEY=VALUE) or remove them (KEY-); rollout-policy selectors match them.
    Label {
        /// Name.
        name: String,
        /// KEY=VALUE to set, KEY- to remove.
        #[arg(required = true)]
        labels: Vec<String>,
    },
    #[command(flatten)]
    Orch(settings::EnvOrchCmd),
}

#[derive(Subcommand, Debug)]
enum EntityCmd {
    /// Create an entity.
    Create {
        /// Environment.
        #[arg(long = "env")]
        environment: String,
        /// helmChart or terraformModule.
        #[arg(long)]
        kind: String,
        /// Name.
        #[arg(long)]
        name: String,
        /// Product id, group:name.
        #[arg(long)]
        product: String,
        /// Kubernetes namespace (helmChart).
        #[arg(long, default_value = "")]
        namespace: String,
        /// Cloud account (terraformModule).
        #[arg(long, default_value = "")]
        account: String,
        /// Release channel (default RELEASE).
        #[arg(long, default_value = "")]
        channel: String,
    },
    /// List entities (of one environment, or all).
    List {
        /// Environment.
        #[arg(long = "env", default_value = "")]
        environment: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    #[command(flatten)]
    Orch(settings::EntityOrchCmd),
    /// The entity's activity: decisions and their reasons, newest first.
    Activity {
        /// The entity.
        entity: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    // SPEC P3
    /// Is there a candidate plan, does it meet its constraints, was it issued, did the last
    /// execution succeed?
    Explain {
        /// The entity.
        entity: String,
        #[command(flatten)]
        read: ReadArgs,
        #[command(flatten)]
        watch: args::WatchArgs,
    },
}

/// Default endpoints: the dev cluster's default ports.
pub const DEFAULT_ENDPOINTS: &str = "127.0.0.1:7401,127.0.0.1:7402,127.0.0.1:7403";

/// Runs the CLI; the error is printed by `main` with a non-zero exit.
/// `hubctl`'s exit status when the hub refused the caller's credentials (a revoked or unknown
/// certificate, a revoked or expired token): 77, sysexits' `EX_NOPERM`. A `--watch` ends on
/// it, since no later run would be let in. Any other failure exits 1.
pub const EXIT_CREDENTIALS_REFUSED: i32 = 77;

/// `hubctl`'s exit status when the cluster does not run the feature level the call needs yet
/// (the typed refusal `feature-level-too-low`: a command of a newer release before every node
/// runs it, or a node of an older release asking to join): 75, sysexits' `EX_TEMPFAIL`, as
/// the same call succeeds once the upgrade is done.
pub const EXIT_FEATURE_LEVEL_TOO_LOW: i32 = 75;

/// `hubctl cluster status`'s exit status when the answer shows an unhealthy cluster (no
/// leader, or a member that did not answer): 3, after printing the answer, as `etcdctl
/// endpoint health` fails when an endpoint is down.
pub const EXIT_UNHEALTHY: i32 = 3;

/// The cluster `cluster status` asked about is unhealthy: what is wrong, member by member.
#[derive(Debug, thiserror::Error)]
#[error("the cluster is unhealthy: {0}")]
pub struct Unhealthy(String);

/// The exit status for `hubctl`'s error `e`.
pub fn exit_code(e: &anyhow::Error) -> i32 {
    let status = |cause: &(dyn std::error::Error + 'static)| match cause
        .downcast_ref::<::hub_client::ClientError>()
    {
        Some(::hub_client::ClientError::Status(s)) => Some(s.clone()),
        _ => None,
    };
    let refused = e.chain().any(|cause| {
        status(cause).is_some_and(|s| s.code() == tonic::Code::Unauthenticated)
            || cause.downcast_ref::<watch::CredentialsRefused>().is_some()
    });
    let too_low = e.chain().any(|cause| {
        status(cause).is_some_and(|s| {
            hub_proto::refusal::Refusal::of(&s)
                == Some(hub_proto::refusal::Refusal::FeatureLevelTooLow)
        })
    });
    let unhealthy = e
        .chain()
        .any(|cause| cause.downcast_ref::<Unhealthy>().is_some());
    if refused {
        EXIT_CREDENTIALS_REFUSED
    } else if unhealthy {
        EXIT_UNHEALTHY
    } else if too_low {
        EXIT_FEATURE_LEVEL_TOO_LOW
    } else {
        1
    }
}

pub async fn run(cli: Cli) -> anyhow::Result<()> {
    let endpoints = if cli.endpoints.is_empty() {
        DEFAULT_ENDPOINTS.split(',').map(String::from).collect()
    } else {
        cli.endpoints.clone()
    };
    for e in &endpoints {
        if !e.contains(':') {
            bail!("--endpoints: {e:?} is not host:port");
        }
    }
    let fmt = cli.output;
    let timeout = Duration::from_millis(cli.timeout_ms);
    let (ca, cert, key, token) = (cli.ca_file, cli.cert_file, cli.key_file, cli.token);
    let ca_file = ca.clone();
    // Only commands that talk to a hub load the client's TLS material.
    let connect = move || -> anyhow::Result<FailoverClient> {
        let bearer = token_bearer(
            token.as_ref(),
            ca.as_deref(),
            cert.as_deref(),
            key.as_deref(),
        )?;
        let mode = client_mode(ca.as_deref(), cert.as_deref(), key.as_deref())?;
        let connector = hub_tls::client::Connector::new(mode, timeout);
        let client = FailoverClient::new(endpoints, timeout, connector);
        Ok(match bearer {
            Some(b) => client.with_bearer(b),
            None => client,
        })
    };
    if watching(&cli.command) {
        return watch::run().await;
    }
    match cli.command {
        Cmd::Completion { shell } => {
            let mut cmd = Cli::command_with_global_options_once();
            let mut script = Vec::new();
            clap_complete::generate(shell, &mut cmd, "hubctl", &mut script);
            // A closed pipe (`| head`) is the reader's choice, not an error worth a panic.
            let _ = std::io::Write::write_all(&mut std::io::stdout(), &script);
            Ok(())
        }
        Cmd::Pki(cmd) => pki::run(cmd, fmt, connect, ca_file.as_deref()).await,
        Cmd::Dev(cmd) => dev_cmd::run(cmd, fmt).await,
        Cmd::Demo(args) => demo::run(args).await,
        Cmd::Cluster(cmd) => cluster(&connect()?, cmd, fmt).await,
        Cmd::Snapshot(cmd) => snapshot::run(connect, cmd, fmt).await,
        Cmd::Env(cmd) => env(&connect()?, cmd, fmt).await,
        Cmd::Entity(cmd) => entity(&connect()?, cmd, fmt).await,
        Cmd::Product(cmd) => orch::product(&connect()?, cmd, fmt).await,
        Cmd::Release(cmd) => orch::release(&connect()?, cmd, fmt).await,
        Cmd::Channel(cmd) => orch::channel(&connect()?, cmd, fmt).await,
        Cmd::Window(orch::WindowCmd::Override(cmd)) => {
            orch::window_override(&connect()?, cmd, fmt).await
        }
        Cmd::Suppression(cmd) => orch::suppression(&connect()?, cmd, fmt).await,
        Cmd::Plan(cmd) => plans::run(&connect()?, cmd, fmt).await,
        Cmd::Module(cmd) => modules::module(&connect()?, cmd, fmt).await,
        Cmd::Canary(cmd) => canary::run(&connect()?, cmd, fmt).await,
        Cmd::ChangeRequest(cmd) => modules::change_request(&connect()?, cmd, fmt).await,
        Cmd::Approval(cmd) => approvals::approval(&connect()?, cmd, fmt).await,
        Cmd::MetricTemplate(cmd) => metric_templates::run(&connect()?, cmd, fmt).await,
        Cmd::AlertProvider(cmd) => alert_providers::run(&connect()?, cmd, fmt).await,
        Cmd::Command(cmd) => orch::emergency(&connect()?, cmd, fmt).await,
        Cmd::Role(cmd) => roles::run(&connect()?, cmd, fmt).await,
        Cmd::Token(cmd) => tokens::run(&connect()?, cmd, fmt).await,
        Cmd::Audit(args) => orch::audit(&connect()?, args, fmt).await,
        Cmd::RolloutPolicy(cmd) => rollouts::policy(&connect()?, cmd, fmt).await,
        Cmd::Rollout(cmd) => rollouts::rollout(&connect()?, cmd, fmt).await,
        Cmd::Digest(read) => {
            let d = connect()?
                .call(
                    |mut c| async move { c.state_digest(ReadOptions { stale: read.stale }).await },
                )
                .await?;
            print(
                fmt,
                &json!({"applied_index": d.applied_index, "digest": d.digest}),
                &["applied_index", "digest"],
            )
        }
    }
}

/// Whether the command asks for `--watch`.
fn watching(cmd: &Cmd) -> bool {
    match cmd {
        Cmd::Cluster(ClusterCmd::Status { watch })
        | Cmd::Entity(EntityCmd::Explain { watch, .. })
        | Cmd::Plan(plans::PlanCmd::List { watch, .. })
        | Cmd::Canary(canary::CanaryCmd::Get { watch, .. })
        | Cmd::Rollout(rollouts::RolloutCmd::Status { watch, .. }) => watch.watch,
        _ => false,
    }
}

fn write_json(r: &WriteReply) -> Value {
    json!({"index": r.index, "leader": r.leader_id, "result": r.result})
}

async fn cluster(client: &FailoverClient, cmd: ClusterCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        ClusterCmd::Status { .. } => cluster_status(client, fmt).await,
        ClusterCmd::Init => {
            // The first admin: allowed only while the cluster has none (the bootstrap rule).
            let Some(me) = client.connector().identity() else {
                bail!(
                    "cluster init binds your certificate's operator as the first admin: this \
                     hubctl presents no certificate (an --insecure cluster has no roles)"
                );
            };
            calls::submit(client, &roles::bootstrap_admin(&me))
                .await
                .with_context(|| {
                    format!(
                        "binding {me} as the cluster's first admin (its nodes initialise it at \
                         start with hub-node --initial-members)"
                    )
                })?;
            print(fmt, &json!({"admin": me.to_string()}), &["admin"])
        }
        ClusterCmd::AddNode {
            id,
            addr,
            learner,
            catch_up_timeout_ms,
        } => {
            // The call lasts as long as the catch-up may, plus the usual per-call time.
            let mut waiting = client.clone();
            waiting.timeout = Duration::from_millis(catch_up_timeout_ms) + client.timeout;
            let r = waiting
                .call(|mut c| {
                    let addr = addr.clone();
                    async move {
                        c.add_node(AddNodeRequest {
                            id,
                            addr,
                            learner_only: learner,
                            catch_up_timeout_ms,
                        })
                        .await
                    }
                })
                .await?;
            print_members(fmt, &r)
        }
        ClusterCmd::TransferLeader { to } => transfer_leader(client, to, fmt).await,
        ClusterCmd::Settings {
            canary_config_tracking,
            read,
        } => cluster_settings(client, canary_config_tracking, read, fmt).await,
        ClusterCmd::RemoveNode { id } => {
            let r = client
                .call(|mut c| async move { c.remove_node(RemoveNodeRequest { id }).await })
                .await?;
            print_members(fmt, &r)
        }
    }
}

/// `hubctl cluster settings`: shows the cluster-wide settings, or changes the one given.
async fn cluster_settings(
    client: &FailoverClient,
    canary_config_tracking: Option<bool>,
    read: args::ReadArgs,
    fmt: Format,
) -> anyhow::Result<()> {
    match canary_config_tracking {
        Some(enabled) => {
            let command = hub_engine::Command::SetCanaryConfigTracking { enabled };
            calls::submit_and_print(client, &command, fmt).await?;
            Ok(())
        }
        None => {
            let settings = client
                .ask(
                    &::hub_client::answer::ClusterSettings,
                    calls::freshness(read),
                )
                .await?;
            output::print(
                fmt,
                &serde_json::to_value(&settings)?,
                &["canary_config_tracking"],
            )
        }
    }
}

/// `hubctl cluster status`: the leader, the term and every member's row.
async fn cluster_status(client: &FailoverClient, fmt: Format) -> anyhow::Result<()> {
    let s = client
        .call(|mut c| async move { c.cluster_status(ClusterStatusRequest {}).await })
        .await?;
    let members: Vec<Value> = s
        .members
        .iter()
        .map(|m| {
            let mut v = json!({"id": m.id, "addr": m.addr, "role": m.role,
                "last_applied": m.last_applied, "digest": m.digest,
                "version": m.version, "feature_level": m.feature_level});
            if let (false, Value::Object(o)) = (m.error.is_empty(), &mut v) {
                o.insert("error".into(), json!(m.error));
            }
            v
        })
        .collect();
    let leader = if s.has_leader {
        json!(s.leader)
    } else {
        Value::Null
    };
    let v = json!({
        "leader": leader,
        "term": s.term,
        "cluster_feature_level": s.cluster_feature_level,
        "members": members,
    });
    let mut problems: Vec<String> = s
        .members
        .iter()
        .filter(|m| !m.error.is_empty())
        .map(|m| format!("member {} ({}): {}", m.id, m.addr, m.error))
        .collect();
    if !s.has_leader {
        problems.insert(0, "no leader".into());
    }
    print_cluster_status(&s, (&leader, &members), &v, fmt)?;
    match problems.is_empty() {
        true => Ok(()),
        false => Err(Unhealthy(problems.join("; ")).into()),
    }
}

/// Prints `cluster status`'s answer: `v` as JSON or YAML, else a header with the leader and
/// the members' table.
fn print_cluster_status(
    s: &hub_proto::ClusterStatusReply,
    (leader, members): (&Value, &[Value]),
    v: &Value,
    fmt: Format,
) -> anyhow::Result<()> {
    if fmt.is_table() {
        println!(
            "leader: {}  term: {}  feature level: {}",
            leader, s.term, s.cluster_feature_level
        );
        let mut columns = vec![
            "id",
            "addr",
            "role",
            "last_applied",
            "digest",
            "version",
            "feature_level",
        ];
        if s.members.iter().any(|m| !m.error.is_empty()) {
            columns.push("error");
        }
        return output::table(members, &columns);
    }
    print(fmt, v, &[])
}

/// `hubctl cluster transfer-leader [--to ID]`.
async fn transfer_leader(
    client: &FailoverClient,
    to: Option<u64>,
    fmt: Format,
) -> anyhow::Result<()> {
    if to == Some(0) {
        anyhow::bail!("--to: node ids start at 1");
    }
    let r = client
        .call(|mut c| async move {
            c.transfer_leader(TransferLeaderRequest {
                to: to.unwrap_or(0),
            })
            .await
        })
        .await?;
    print(
        fmt,
        &json!({"from": r.from, "leader": r.leader, "term": r.term}),
        &["from", "leader", "term"],
    )
}

fn print_members(fmt: Format, r: &MembershipReply) -> anyhow::Result<()> {
    let members: Vec<Value> = r
        .members
        .iter()
        .map(|m| json!({"id": m.id, "addr": m.addr, "voter": m.voter}))
        .collect();
    if fmt.is_table() {
        return output::table(&members, &["id", "addr", "voter"]);
    }
    print(fmt, &json!({"index": r.index, "members": members}), &[])
}

fn env_json(e: &Environment) -> Value {
    json!({"name": e.name, "description": e.description, "entities": e.entity_count, "created_at_ms": e.created_at_ms})
}

async fn env(client: &FailoverClient, cmd: EnvCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        EnvCmd::Create { name, description } => {
            let req = CreateEnvironmentRequest {
                name,
                description,
                request_id: new_request_id(),
            };
            let r = client
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.create_environment(req).await }
                })
                .await?;
            print(fmt, &write_json(&r), &["index", "leader", "result"])
        }
        EnvCmd::Get { name, read } => {
            let req = GetEnvironmentRequest {
                name,
                read: read.options(),
            };
            let e = client
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.get_environment(req).await }
                })
                .await?;
            print(
                fmt,
                &env_json(&e),
                &["name", "description", "entities", "created_at_ms"],
            )
        }
        EnvCmd::List { read } => {
            let l = client
                .call(|mut c| async move {
                    c.list_environments(ListRequest {
                        read: read.options(),
                    })
                    .await
                })
                .await?;
            let v: Vec<Value> = l.environments.iter().map(env_json).collect();
            if fmt.is_table() {
                return output::table(&v, &["name", "entities", "description"]);
            }
            print(fmt, &Value::Array(v), &[])
        }
        EnvCmd::Delete { name } => {
            let req = DeleteEnvironmentRequest {
                name,
                request_id: new_request_id(),
            };
            let r = client
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.delete_environment(req).await }
                })
                .await?;
            print(fmt, &write_json(&r), &["index", "leader", "result"])
        }
        EnvCmd::Label { name, labels } => rollouts::label(client, name, &labels, fmt).await,
        EnvCmd::Orch(cmd) => settings::env(client, cmd, fmt).await,
    }
}

fn entity_json(e: &Entity) -> Value {
    json!({"id": e.id, "environment": e.environment, "kind": e.kind, "name": e.name,
        "product_id": e.product_id, "k8s_namespace": e.k8s_namespace, "account_id": e.account_id,
        "release_channel": e.release_channel, "created_at_ms": e.created_at_ms})
}

async fn entity(client: &FailoverClient, cmd: EntityCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        EntityCmd::Create {
            environment,
            kind,
            name,
            product,
            namespace,
            account,
            channel,
        } => {
            let req = CreateEntityRequest {
                environment,
                kind,
                name,
                product_id: product,
                k8s_namespace: namespace,
                account_id: account,
                release_channel: channel,
                request_id: new_request_id(),
            };
            let r = client
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.create_entity(req).await }
                })
                .await?;
            print(fmt, &write_json(&r), &["index", "leader", "result"])
        }
        EntityCmd::List { environment, read } => {
            let req = ListEntitiesRequest {
                environment,
                read: read.options(),
            };
            let l = client
                .call(|mut c| {
                    let req = req.clone();
                    async move { c.list_entities(req).await }
                })
                .await?;
            let v: Vec<Value> = l.entities.iter().map(entity_json).collect();
            if fmt.is_table() {
                return output::table(&v, &["id", "product_id", "release_channel"]);
            }
            print(fmt, &Value::Array(v), &[])
        }
        EntityCmd::Orch(cmd) => settings::entity(client, cmd, fmt).await,
        EntityCmd::Activity { entity, read } => plans::activity(client, &entity, read, fmt).await,
        EntityCmd::Explain { entity, read, .. } => plans::explain(client, &entity, read, fmt).await,
    }
}

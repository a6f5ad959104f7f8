//! `hubctl` commands for orchestration: products, releases, channels, recalls, window
//! overrides, suppressions, break-glass commands and the audit log. Entity and environment
//! settings live in [`super::settings`], plans and `entity explain` in [`super::plans`].
//!
//! Every write is one `hub_engine::Command` sent through `Hub.Submit` with a fresh request id
//! (a retry through another node applies once); every read is a `Hub.Query`. Entity references
//! (`ENV/NAME`, `ENV/KIND/NAME`, `eid:…`) are resolved by the server.

use anyhow::Context;
use clap::{ArgGroup, Args, Subcommand};
use hub_engine::command::WindowSpec;
use hub_engine::plan::EmergencyCommand;
use hub_engine::suppression::Scope;
use hub_engine::Command;
use semver::Version;
use serde_json::{json, Value};

use super::args::{parse_version, read_file, ActorArg, ReadArgs};
use super::calls::{ask, resolve, submit_and_print};
use super::output::{print_list, Format};
use super::timeparse::{parse_duration, parse_time, TimeArg};
use hub_client::answer::{
    ApprovalView, ListAudit, ListChannels, ListProducts, ListRecalls, ListReleases,
    ListSuppressions, ListWindowExceptions, RecallView,
};
use hub_client::FailoverClient;

/// An environment or an entity (exactly one).
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct ScopeArgs {
    /// The environment.
    #[arg(long = "env", value_name = "ENV")]
    environment: Option<String>,
    /// The entity: ENV/NAME, ENV/KIND/NAME or eid:….
    #[arg(long, value_name = "REF")]
    entity: Option<String>,
}

impl ScopeArgs {
    /// The engine's scope; an entity reference is resolved to its id.
    pub async fn resolve(&self, client: &FailoverClient) -> anyhow::Result<Scope> {
        match (&self.environment, &self.entity) {
            (Some(env), _) => Ok(Scope::Environment(env.clone())),
            (None, Some(reference)) => Ok(Scope::Entity(resolve(client, reference).await?)),
            (None, None) => anyhow::bail!("give --env ENV or --entity REF"),
        }
    }
}

/// Joins strings with `,` for a cell (`null`, shown as "-", when there are none).
pub(crate) fn join<S: AsRef<str>>(parts: &[S]) -> Value {
    if parts.is_empty() {
        Value::Null
    } else {
        let parts: Vec<&str> = parts.iter().map(AsRef::as_ref).collect();
        json!(parts.join(","))
    }
}

/// `hubctl product …`
#[derive(Subcommand, Debug)]
pub enum ProductCmd {
    /// Create a product.
    Create {
        /// Product id, group:name (e.g. com.example:web).
        id: String,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List products.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
    /// A product's maintenance window.
    #[command(subcommand)]
    Window(ProductWindowCmd),
}

/// `hubctl product window …`
#[derive(Subcommand, Debug)]
pub enum ProductWindowCmd {
    // SPEC C3, C4
    /// Set the product's maintenance window.
    Set {
        /// Product id.
        id: String,
        /// Weekly ranges like MONDAY/22:00-TUESDAY/06:00 (comma-separated), or all-time.
        #[arg(long)]
        window: String,
        /// IANA time zone, e.g. America/New_York.
        #[arg(long, default_value = "UTC")]
        time_zone: String,
    },
    /// Remove the product's maintenance window.
    Clear {
        /// Product id.
        id: String,
    },
}

/// `hubctl release …`
#[derive(Subcommand, Debug)]
pub enum ReleaseCmd {
    /// Publish a release from its manifest (YAML).
    Publish {
        /// The manifest file.
        #[arg(short = 'f', long = "file", visible_alias = "manifest")]
        file: std::path::PathBuf,
    },
    /// List releases (of one product, or all), newest first.
    List {
        /// Product id.
        product: Option<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Recall one version or an inclusive range of versions.
    #[command(group(ArgGroup::new("versions").required(true).args(["version", "from"])))]
    Recall {
        /// Product id.
        product: String,
        /// The version to recall.
        #[arg(long, value_parser = parse_version, conflicts_with_all = ["from", "to"])]
        version: Option<Version>,
        /// Lowest version of the range.
        #[arg(long, value_parser = parse_version, requires = "to")]
        from: Option<Version>,
        /// Highest version of the range (inclusive).
        #[arg(long, value_parser = parse_version, requires = "from")]
        to: Option<Version>,
        /// Why.
        #[arg(long)]
        reason: String,
    },
    /// Withdraw a recall.
    Unrecall {
        /// The recall's id (r-…).
        id: String,
    },
    /// List recalls (of one product, or all).
    Recalls {
        /// Product id.
        product: Option<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// `hubctl channel …`
#[derive(Subcommand, Debug)]
pub enum ChannelCmd {
    /// Create a custom release channel.
    Create {
        /// Upper-case name (A-Z, 0-9, _).
        name: String,
        /// Description.
        #[arg(long, default_value = "")]
        description: String,
    },
    /// List channels (built-in and custom).
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Add a release to a custom channel.
    Add {
        /// Channel.
        name: String,
        /// Product id.
        product: String,
        /// Version.
        #[arg(value_parser = parse_version)]
        version: Version,
    },
    /// Remove a release from a custom channel.
    Remove {
        /// Channel.
        name: String,
        /// Product id.
        product: String,
        /// Version.
        #[arg(value_parser = parse_version)]
        version: Version,
    },
}

/// `hubctl window …`
#[derive(Subcommand, Debug)]
pub enum WindowCmd {
    /// Maintenance-window overrides.
    #[command(subcommand)]
    Override(OverrideCmd),
}

/// `hubctl window override …`
#[derive(Subcommand, Debug)]
pub enum OverrideCmd {
    // SPEC C5
    /// Let plans pass the window constraint (only) during a one-off range.
    #[command(group(ArgGroup::new("until").required(true).args(["end", "duration"])))]
    Add {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Start: RFC 3339 (2026-11-30T22:00:00Z) or now.
        #[arg(long, value_parser = parse_time, default_value = "now")]
        start: TimeArg,
        /// End (exclusive): RFC 3339 or now.
        #[arg(long, value_parser = parse_time)]
        end: Option<TimeArg>,
        /// Length from the start, e.g. 30m, 2h, 1d.
        #[arg(long, value_parser = parse_duration)]
        duration: Option<i64>,
        /// Why.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Remove a window override.
    Remove {
        #[command(flatten)]
        scope: ScopeArgs,
        /// The override's id (o-…).
        id: String,
    },
    /// Ask for an exception (issue 55): it opens the window only once the approvals its
    /// policy requires are given (`approve`). Anyone with a role binding may ask.
    #[command(group(ArgGroup::new("until").required(true).args(["end", "duration"])))]
    Request {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Start: RFC 3339 (2026-11-30T22:00:00Z) or now.
        #[arg(long, value_parser = parse_time, default_value = "now")]
        start: TimeArg,
        /// End (exclusive): RFC 3339 or now.
        #[arg(long, value_parser = parse_time)]
        end: Option<TimeArg>,
        /// Length from the start, e.g. 30m, 2h, 1d.
        #[arg(long, value_parser = parse_duration)]
        duration: Option<i64>,
        /// Why.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Approve a pending exception request; the last approval it needs opens the window.
    Approve {
        /// The request's id (wx-…).
        id: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Reject a pending exception request.
    Reject {
        /// The request's id (wx-…).
        id: String,
        /// Why.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Exception requests with their approvals and who still must approve.
    Requests {
        /// Only those in this environment.
        #[arg(long = "env", value_name = "ENV")]
        environment: Option<String>,
        /// Only those still approvable.
        #[arg(long)]
        open: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// `hubctl suppression …`
#[derive(Subcommand, Debug)]
pub enum SuppressionCmd {
    /// Create a manual suppression window: no plans are issued in scope until it ends.
    #[command(group(ArgGroup::new("until").required(true).args(["end", "duration"])))]
    Create {
        #[command(flatten)]
        scope: ScopeArgs,
        /// Start: RFC 3339 or now (default: when the hub applies it).
        #[arg(long, value_parser = parse_time)]
        start: Option<TimeArg>,
        /// End (exclusive): RFC 3339.
        #[arg(long, value_parser = parse_time)]
        end: Option<TimeArg>,
        /// Length from the start, e.g. 30m, 2h, 1d.
        #[arg(long, value_parser = parse_duration)]
        duration: Option<i64>,
        /// Why.
        #[arg(long)]
        reason: String,
        // SPEC P12
        /// Also cancel the active plans in scope.
        #[arg(long)]
        cancel_active_plans: bool,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// List suppression windows.
    List {
        /// Only this environment.
        #[arg(long = "env", value_name = "ENV")]
        environment: Option<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Delete a suppression window (manual or automatic).
    Delete {
        /// The suppression's id (s-…).
        id: String,
        #[command(flatten)]
        actor: ActorArg,
    },
}

/// What a break-glass command does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Action {
    /// Install --version (with its config overrides).
    Install,
    /// Remove the product.
    Uninstall,
    /// Re-apply the config overrides of the current version.
    EnforceConfig,
    /// Move to --version with its config overrides.
    EnforceConfigAndVersion,
    /// Restart the workload as it is.
    Restart,
}

/// `hubctl command REF ACTION …`
#[derive(Args, Debug)]
pub struct CommandArgs {
    /// The entity: ENV/NAME, ENV/KIND/NAME or eid:….
    entity: String,
    /// What to do.
    #[arg(value_enum)]
    action: Action,
    /// The version (install and enforce-config-and-version only).
    #[arg(long, value_parser = parse_version)]
    version: Option<Version>,
    /// Why (required; audited).
    #[arg(long)]
    reason: String,
    /// Do not ask for confirmation (required when not run on a terminal, e.g. in scripts).
    #[arg(long)]
    yes: bool,
    #[command(flatten)]
    actor: ActorArg,
}

/// What a break-glass command skips, as `hubctl command` warns before sending it.
const BYPASSED: &str = "every constraint: maintenance windows, suppressions, and the health, \
dependency, dependents, artifact and secrets checks";

/// Says what `action` on `entity` bypasses and, on a terminal, asks to go on; without a
/// terminal `--yes` must say so. Nothing is sent unless confirmed.
fn confirm_break_glass(entity: &str, action: &str, yes: bool) -> anyhow::Result<()> {
    use std::io::{BufRead, IsTerminal, Write};
    eprintln!("break-glass: {action} on {entity} is issued at once, bypassing {BYPASSED}.");
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "not confirmed: hubctl command asks on a terminal; pass --yes to confirm from a script (nothing was sent)"
        );
    }
    eprint!("Type yes to issue it: ");
    std::io::stderr().flush()?;
    let mut answer = String::new();
    std::io::stdin().lock().read_line(&mut answer)?;
    if answer.trim() != "yes" {
        anyhow::bail!("not confirmed (nothing was sent)");
    }
    Ok(())
}

/// `hubctl audit [--actor] [--env] [--kind] [--since]`
#[derive(Args, Debug)]
pub struct AuditArgs {
    /// At most this many entries.
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Only this actor, e.g. operator/alice.
    #[arg(long)]
    actor: Option<String>,
    /// Only writes on this environment.
    #[arg(long = "env", value_name = "ENV")]
    environment: Option<String>,
    /// Only this command (PutSecret, CreateSuppression, …) or action (suppression, cancel, …).
    #[arg(long)]
    kind: Option<String>,
    /// Only entries since this long ago (30m, 2h, 7d) or this RFC 3339 time.
    #[arg(long, value_parser = parse_since)]
    since: Option<i64>,
    /// Instead of listing: keep the newest N rows from now on (admins; older rows are
    /// dropped and counted).
    #[arg(long, value_name = "N", conflicts_with_all = ["actor", "environment", "kind", "since"])]
    set_retention: Option<u64>,
    #[command(flatten)]
    read: ReadArgs,
}

/// `--since`: a duration ago, or an instant; milliseconds since the epoch.
fn parse_since(s: &str) -> Result<i64, String> {
    if let Ok(ago) = super::timeparse::parse_duration(s) {
        return Ok(super::timeparse::now_ms() - ago);
    }
    super::timeparse::parse_time(s)
        .map(|t| t.ms())
        .map_err(|e| format!("{e}; or a duration such as 30m"))
}

/// `hubctl audit`: the audit log, newest first.
pub async fn audit(client: &FailoverClient, a: AuditArgs, fmt: Format) -> anyhow::Result<()> {
    if let Some(entries) = a.set_retention {
        let command = Command::SetAuditRetention { entries };
        return submit_and_print(client, &command, fmt).await.map(drop);
    }
    let q = ListAudit {
        limit: Some(a.limit),
        actor: a.actor,
        environment: a.environment,
        kind: a.kind,
        since_ms: a.since,
    };
    let v = ask(client, &q, a.read).await?;
    if fmt.is_table() && v.dropped > 0 {
        eprintln!(
            "({} older entries dropped by retention, which keeps {})",
            v.dropped, v.retention
        );
    }
    print_list(
        fmt,
        &v.audit,
        &[
            "index", "time", "actor", "action", "target", "outcome", "reason",
        ],
        |e| json!(e),
    )
}

pub async fn product(client: &FailoverClient, cmd: ProductCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        ProductCmd::Create { id, description } => Command::CreateProduct {
            product_id: id,
            description,
        },
        ProductCmd::List { read } => {
            let v = ask(client, &ListProducts, read).await?;
            return print_list(
                fmt,
                &v.products,
                &["id", "releases", "window", "description"],
                |p| {
                    json!({"id": p.id, "releases": p.releases,
                        "window": p.maintenance_window, "description": p.description})
                },
            );
        }
        ProductCmd::Window(ProductWindowCmd::Set {
            id,
            window,
            time_zone,
        }) => Command::SetProductWindow {
            product_id: id,
            window: Some(WindowSpec {
                spec: window,
                time_zone,
            }),
        },
        ProductCmd::Window(ProductWindowCmd::Clear { id }) => Command::SetProductWindow {
            product_id: id,
            window: None,
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

pub async fn release(client: &FailoverClient, cmd: ReleaseCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        ReleaseCmd::Publish { file } => Command::PublishRelease {
            manifest: read_file(&file, "manifest")?,
        },
        ReleaseCmd::List { product, read } => {
            let v = ask(client, &ListReleases { product }, read).await?;
            return print_list(
                fmt,
                &v.releases,
                &["product", "version", "channels", "recalled", "published"],
                |r| {
                    json!({"product": r.product, "version": r.version,
                        "channels": join(&r.channels), "recalled": r.recalled,
                        "published": r.published})
                },
            );
        }
        ReleaseCmd::Recall {
            product,
            version,
            from,
            to,
            reason,
        } => {
            let (from, to) = match (version, from, to) {
                (Some(v), _, _) => (v.clone(), v),
                (None, Some(from), Some(to)) => (from, to),
                _ => anyhow::bail!("give --version V, or --from A and --to B"),
            };
            Command::RecallReleases {
                product_id: product,
                from: from.to_string(),
                to: to.to_string(),
                reason,
            }
        }
        ReleaseCmd::Unrecall { id } => Command::DeleteRecall { id },
        ReleaseCmd::Recalls { product, read } => {
            let v = ask(client, &ListRecalls, read).await?;
            let list: Vec<RecallView> = v
                .recalls
                .into_iter()
                .filter(|r| product.as_ref().is_none_or(|p| &r.product == p))
                .collect();
            return print_list(
                fmt,
                &list,
                &["id", "product", "versions", "reason", "created"],
                |r| json!(r),
            );
        }
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

pub async fn channel(client: &FailoverClient, cmd: ChannelCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        ChannelCmd::Create { name, description } => Command::CreateChannel { name, description },
        ChannelCmd::List { read } => {
            let v = ask(client, &ListChannels, read).await?;
            return print_list(fmt, &v.channels, &["name", "builtin", "description"], |c| {
                json!(c)
            });
        }
        ChannelCmd::Add {
            name,
            product,
            version,
        } => Command::SetReleaseChannel {
            channel: name,
            product_id: product,
            version: version.to_string(),
            member: true,
        },
        ChannelCmd::Remove {
            name,
            product,
            version,
        } => Command::SetReleaseChannel {
            channel: name,
            product_id: product,
            version: version.to_string(),
            member: false,
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// The end of a range given as `--end T` or `--duration D` from `start`.
fn end_of(start_ms: i64, end: Option<TimeArg>, duration: Option<i64>) -> anyhow::Result<i64> {
    match (end, duration) {
        (Some(end), _) => Ok(end.ms()),
        (None, Some(d)) => start_ms
            .checked_add(d)
            .context("--duration: the end lies too far in the future"),
        (None, None) => anyhow::bail!("give --end T or --duration D"),
    }
}

pub async fn window_override(
    client: &FailoverClient,
    cmd: OverrideCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        OverrideCmd::Add {
            scope,
            start,
            end,
            duration,
            reason,
            actor,
        } => {
            let start_ms = start.ms();
            let end_ms = end_of(start_ms, end, duration)?;
            if end_ms <= start_ms {
                anyhow::bail!("--end must be after --start");
            }
            Command::AddWindowOverride {
                scope: scope.resolve(client).await?,
                start_ms,
                end_ms,
                reason,
                actor: actor.name(),
            }
        }
        OverrideCmd::Remove { scope, id } => Command::RemoveWindowOverride {
            scope: scope.resolve(client).await?,
            id,
        },
        OverrideCmd::Request {
            scope,
            start,
            end,
            duration,
            reason,
            actor,
        } => {
            let start_ms = start.ms();
            let end_ms = end_of(start_ms, end, duration)?;
            if end_ms <= start_ms {
                anyhow::bail!("--end must be after --start");
            }
            Command::RequestWindowException {
                scope: scope.resolve(client).await?,
                start_ms,
                end_ms,
                reason,
                actor: actor.name(),
            }
        }
        OverrideCmd::Approve { id, actor } => Command::ApproveWindowException {
            id,
            actor: actor.name(),
        },
        OverrideCmd::Reject { id, reason, actor } => Command::RejectWindowException {
            id,
            reason,
            actor: actor.name(),
        },
        OverrideCmd::Requests {
            environment,
            open,
            read,
        } => return window_exceptions(client, environment, open, read, fmt).await,
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// `hubctl window override requests`: one row per request, with who still must approve.
async fn window_exceptions(
    client: &FailoverClient,
    environment: Option<String>,
    open: bool,
    read: ReadArgs,
    fmt: Format,
) -> anyhow::Result<()> {
    let answer = ask(client, &ListWindowExceptions { environment, open }, read).await?;
    print_list(
        fmt,
        &answer.window_exceptions,
        &[
            "id",
            "scope",
            "start",
            "end",
            "status",
            "requester",
            "approved_by",
            "outstanding",
        ],
        |w| with_approval(json!(w), &w.approval),
    )
}

/// A row of a request that needs approval (`row`, with its `approval` object) with that
/// object replaced by its columns: requester, approved by, outstanding, policy, expires.
pub(crate) fn with_approval(mut row: Value, a: &ApprovalView) -> Value {
    let approved_by: Vec<&str> = a.approvals.iter().map(|g| g.identity.as_str()).collect();
    if let Value::Object(o) = &mut row {
        o.remove("approval");
        o.insert("requester".into(), json!(a.requester));
        o.insert("approved_by".into(), join(&approved_by));
        o.insert("outstanding".into(), outstanding(a));
        o.insert("policy".into(), json!(a.policy));
        o.insert("expires".into(), json!(a.expires));
    }
    row
}

/// Who still must approve, `;`-separated (`-` when nobody must).
fn outstanding(approval: &ApprovalView) -> Value {
    if approval.outstanding.is_empty() {
        Value::Null
    } else {
        json!(approval.outstanding.join("; "))
    }
}

pub async fn suppression(
    client: &FailoverClient,
    cmd: SuppressionCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        SuppressionCmd::Create {
            scope,
            start,
            end,
            duration,
            reason,
            cancel_active_plans,
            actor,
        } => {
            let start_ms = start.map(TimeArg::ms);
            let end_ms = end_of(
                start_ms.unwrap_or_else(super::timeparse::now_ms),
                end,
                duration,
            )?;
            if start_ms.is_some_and(|s| end_ms <= s) {
                anyhow::bail!("--end must be after --start");
            }
            Command::CreateSuppression {
                scope: scope.resolve(client).await?,
                // `now` (or no --start) is the entry's time on the hub.
                start_ms: match start {
                    Some(TimeArg::At(ms)) => Some(ms),
                    _ => None,
                },
                end_ms,
                reason,
                cancel_active_plans,
                actor: actor.name(),
            }
        }
        SuppressionCmd::List { environment, read } => {
            let v = ask(client, &ListSuppressions { environment }, read).await?;
            return print_list(
                fmt,
                &v.suppressions,
                &["id", "scope", "source", "start", "end", "active", "reason"],
                |s| json!(s),
            );
        }
        SuppressionCmd::Delete { id, actor } => Command::DeleteSuppression {
            id,
            actor: actor.name(),
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

pub async fn emergency(client: &FailoverClient, c: CommandArgs, fmt: Format) -> anyhow::Result<()> {
    let command = match (c.action, c.version) {
        (Action::Install, Some(version)) => EmergencyCommand::Install { version },
        (Action::EnforceConfigAndVersion, Some(version)) => {
            EmergencyCommand::EnforceConfigAndVersion { version }
        }
        (Action::Install | Action::EnforceConfigAndVersion, None) => {
            anyhow::bail!("--version is required for install and enforce-config-and-version")
        }
        (_, Some(_)) => anyhow::bail!(
            "--version is only for install and enforce-config-and-version (the entity keeps its version)"
        ),
        (Action::Uninstall, None) => EmergencyCommand::Uninstall,
        (Action::EnforceConfig, None) => EmergencyCommand::EnforceConfig,
        (Action::Restart, None) => EmergencyCommand::Restart,
    };
    if c.reason.trim().is_empty() {
        anyhow::bail!("--reason must not be empty: break-glass commands are audited");
    }
    let entity = resolve(client, &c.entity).await?;
    let action = clap::ValueEnum::to_possible_value(&c.action)
        .map(|v| v.get_name().to_string())
        .unwrap_or_default();
    confirm_break_glass(&entity, &action, c.yes)?;
    let command = Command::IssueCommand {
        entity,
        command,
        reason: c.reason,
        actor: c.actor.name(),
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

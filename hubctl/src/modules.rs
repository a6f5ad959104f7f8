//! `hubctl module …` and `hubctl changerequest …` (SPEC M8–M16): publish module definitions,
//! install them into environments, and approve the change requests that update installations.
//!
//! Writes are one `hub_engine::Command` each through [`super::calls::submit`] (one request id
//! per invocation, so a publish retried across a leader failover creates one version);
//! reads are `Hub.Query` views (node/src/query.rs).

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use hub_engine::Command;
use serde_json::{json, Value};

use super::args::{read_file, ActorArg, ReadArgs, FRESH};
use super::calls::{ask, submit_and_print};
use super::output::{print, print_list, Format};
use hub_client::answer::{
    ChangeRequestView, GetChangeRequest, GetModule, GetModuleInstallation, ListChangeRequests,
    ListModuleInstallations, ListModules, ModuleDryRun,
};
use hub_client::FailoverClient;

/// `hubctl module …`.
#[derive(Subcommand, Debug)]
pub enum ModuleCmd {
    /// Publish a definition as the module's next version (0.1.0, then 0.2.0, …).
    Create {
        /// The definition, `<name>.yml` or `<name>.yaml`.
        #[arg(long = "module-definition-file", short = 'f')]
        file: PathBuf,
        /// Validate and show the version it would get, without publishing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Every module, its versions and how many installations it has.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
    /// One module version (the latest by default).
    Get {
        /// The module's name.
        name: String,
        /// The version.
        #[arg(long)]
        version: Option<String>,
        /// Write the published YAML to this file.
        #[arg(long)]
        download: Option<PathBuf>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Delete a module that has no installations (its versions go; nothing is uninstalled).
    Delete {
        /// The module's name.
        name: String,
    },
    /// Install a module into an environment, creating or adopting its entities.
    Install {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        /// The version (the latest by default).
        #[arg(long)]
        version: Option<String>,
        /// An installer value, `NAME=VALUE` (`SUBMODULE.NAME=VALUE` for a submodule's).
        #[arg(long = "variable", value_name = "NAME=VALUE")]
        variables: Vec<String>,
        /// The release channel the installation tracks (`RELEASE`, `STABLE`, …): new module
        /// versions reach it only once on that channel. Default: the governing approval
        /// policy's default channel, else `RELEASE`.
        #[arg(long)]
        channel: Option<String>,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Release channels of modules: the channel an installation tracks, and which module
    /// versions a custom channel holds.
    #[command(subcommand)]
    Channel(ModuleChannelCmd),
    /// Installations, optionally of one environment or module.
    Installations {
        /// Only this environment.
        #[arg(long, short = 'e')]
        env: Option<String>,
        /// Only this module.
        #[arg(long)]
        module: Option<String>,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// One installation with its values and entities.
    Installation {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Set or clear installer values; they apply at the installation's next update.
    SetVariable {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        /// `NAME=VALUE` to set.
        #[arg(value_name = "NAME=VALUE")]
        set: Vec<String>,
        /// A value to clear.
        #[arg(long = "unset", value_name = "NAME")]
        unset: Vec<String>,
    },
    /// Pause module updates: open change requests are cancelled, module keys unlock.
    Pause {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Resume module updates: one change request to the latest version reconciles drift.
    Resume {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Remove an installation; its entities stay installed, unmanaged.
    Unlink {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        #[command(flatten)]
        actor: ActorArg,
    },
}

/// `hubctl module channel …`.
#[derive(Subcommand, Debug)]
pub enum ModuleChannelCmd {
    /// Choose the channel an installation tracks (or `--clear` it back to the default).
    Set {
        /// The module's name.
        name: String,
        /// The environment.
        #[arg(long, short = 'e')]
        env: String,
        /// The channel.
        #[arg(required_unless_present = "clear", conflicts_with = "clear")]
        channel: Option<String>,
        /// Track the default channel again.
        #[arg(long)]
        clear: bool,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Put a published module version on a custom channel.
    Add {
        /// The module's name.
        name: String,
        /// The version.
        version: String,
        /// The custom channel (created with `hubctl channel create`).
        channel: String,
    },
    /// Take a module version off a custom channel.
    Remove {
        /// The module's name.
        name: String,
        /// The version.
        version: String,
        /// The custom channel.
        channel: String,
    },
}

/// `hubctl changerequest …`.
#[derive(Subcommand, Debug)]
pub enum ChangeRequestCmd {
    /// Change requests (all, or one installation's; `--open` for pending ones).
    List {
        /// Only this installation, `ENV/MODULE`.
        #[arg(long)]
        installation: Option<String>,
        /// Only those pending approval.
        #[arg(long)]
        open: bool,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// One change request.
    Get {
        /// `cr-…`.
        id: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Approve: the installation is updated to the request's version at once.
    Approve {
        /// `cr-…`.
        id: String,
        #[command(flatten)]
        actor: ActorArg,
    },
    /// Reject.
    Reject {
        /// `cr-…`.
        id: String,
        /// Why.
        #[arg(long)]
        reason: String,
        #[command(flatten)]
        actor: ActorArg,
    },
}

/// Parses `NAME=VALUE` arguments; the error names the flag and the argument.
fn parse_assignments(flag: &str, args: &[String]) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for a in args {
        let (k, v) = a
            .split_once('=')
            .with_context(|| format!("{flag} {a:?}: expected NAME=VALUE"))?;
        if k.is_empty() {
            anyhow::bail!("{flag} {a:?}: the name is empty");
        }
        if out.insert(k.to_string(), v.to_string()).is_some() {
            anyhow::bail!("{flag} {k}: given twice");
        }
    }
    Ok(out)
}

fn installation_id(env: &str, name: &str) -> String {
    format!("{env}/{name}")
}

/// Runs a `hubctl module` command.
// Long: one arm per `hubctl module` subcommand.
pub async fn module(client: &FailoverClient, cmd: ModuleCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        ModuleCmd::Create { file, dry_run } => {
            let yaml = read_file(&file, "module definition")?;
            let file_name = file.file_name().map(|n| n.to_string_lossy().into_owned());
            if dry_run {
                let v = ask(client, &ModuleDryRun { file_name, yaml }, FRESH).await?;
                return print(
                    fmt,
                    &json!(v),
                    &["valid", "name", "version", "entities", "variables"],
                );
            }
            Command::PublishModule { file_name, yaml }
        }
        ModuleCmd::List { read } => {
            let v = ask(client, &ListModules, read).await?;
            return print_list(
                fmt,
                &v.modules,
                &["name", "latest", "versions", "installations"],
                |m| {
                    json!({"name": m.name, "latest": m.latest,
                        "versions": m.versions.len(), "installations": m.installations})
                },
            );
        }
        ModuleCmd::Get {
            name,
            version,
            download,
            read,
        } => {
            let v = ask(client, &GetModule { name, version }, read).await?;
            if let Some(path) = download {
                std::fs::write(&path, &v.yaml)
                    .with_context(|| format!("--download {}: cannot write", path.display()))?;
                eprintln!("wrote {} {} to {}", v.name, v.version, path.display());
                return Ok(());
            }
            return print(
                fmt,
                &json!(v),
                &[
                    "name",
                    "version",
                    "published",
                    "display_name",
                    "variables",
                    "entities",
                    "submodules",
                ],
            );
        }
        ModuleCmd::Delete { name } => Command::DeleteModule { name },
        ModuleCmd::Install {
            name,
            env,
            version,
            variables,
            channel: None,
            actor,
        } => Command::InstallModule {
            environment: env,
            module: name,
            version,
            variables: parse_assignments("--variable", &variables)?,
            actor: actor.name(),
        },
        ModuleCmd::Install {
            name,
            env,
            version,
            variables,
            channel: Some(channel),
            actor,
        } => Command::InstallModuleOnChannel {
            environment: env,
            module: name,
            version,
            variables: parse_assignments("--variable", &variables)?,
            channel: Some(channel),
            actor: actor.name(),
        },
        ModuleCmd::Channel(cmd) => module_channel(cmd),
        ModuleCmd::Installations { env, module, read } => {
            let v = ask(
                client,
                &ListModuleInstallations {
                    environment: env,
                    module,
                },
                read,
            )
            .await?;
            return print_list(
                fmt,
                &v.installations,
                &["id", "version", "channel", "status", "entities", "updated"],
                |i| json!(i),
            );
        }
        ModuleCmd::Installation { name, env, read } => {
            let v = ask(
                client,
                &GetModuleInstallation(installation_id(&env, &name)),
                read,
            )
            .await?;
            return print(
                fmt,
                &json!(v),
                &[
                    "id",
                    "version",
                    "channel",
                    "policy",
                    "status",
                    "variables",
                    "entities",
                    "updated",
                ],
            );
        }
        ModuleCmd::SetVariable {
            name,
            env,
            set,
            unset,
        } => {
            let mut variables: BTreeMap<String, Option<String>> =
                parse_assignments("NAME=VALUE", &set)?
                    .into_iter()
                    .map(|(k, v)| (k, Some(v)))
                    .collect();
            for k in unset {
                if variables.insert(k.clone(), None).is_some() {
                    anyhow::bail!("--unset {k}: also set");
                }
            }
            if variables.is_empty() {
                anyhow::bail!("nothing to change: give NAME=VALUE or --unset NAME");
            }
            Command::SetModuleVariables {
                installation: installation_id(&env, &name),
                variables,
            }
        }
        ModuleCmd::Pause { name, env, actor } => Command::SetModuleUpdatesPaused {
            installation: installation_id(&env, &name),
            paused: true,
            actor: actor.name(),
        },
        ModuleCmd::Resume { name, env, actor } => Command::SetModuleUpdatesPaused {
            installation: installation_id(&env, &name),
            paused: false,
            actor: actor.name(),
        },
        ModuleCmd::Unlink { name, env, actor } => Command::UnlinkModule {
            installation: installation_id(&env, &name),
            actor: actor.name(),
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// Runs a `hubctl changerequest` command.
/// The command of a `hubctl module channel` subcommand.
fn module_channel(cmd: ModuleChannelCmd) -> Command {
    match cmd {
        ModuleChannelCmd::Set {
            name,
            env,
            channel,
            clear: _,
            actor,
        } => Command::SetInstallationChannel {
            installation: installation_id(&env, &name),
            channel,
            actor: actor.name(),
        },
        ModuleChannelCmd::Add {
            name,
            version,
            channel,
        } => Command::SetModuleChannel {
            module: name,
            version,
            channel,
            member: true,
        },
        ModuleChannelCmd::Remove {
            name,
            version,
            channel,
        } => Command::SetModuleChannel {
            module: name,
            version,
            channel,
            member: false,
        },
    }
}

/// One change request as a table row: the approval state flattened (who approved, who still
/// must, the policy, the expiry).
fn change_request_row(c: &ChangeRequestView) -> Value {
    match &c.approval {
        Some(a) => {
            let mut row = super::orch::with_approval(json!(c), a);
            if let Value::Object(o) = &mut row {
                o.insert("expired".into(), json!(a.expired));
            }
            row
        }
        None => json!(c),
    }
}

pub async fn change_request(
    client: &FailoverClient,
    cmd: ChangeRequestCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        ChangeRequestCmd::List {
            installation,
            open,
            read,
        } => {
            let v = ask(client, &ListChangeRequests { installation, open }, read).await?;
            return print_list(
                fmt,
                &v.change_requests,
                &[
                    "id",
                    "installation",
                    "from_version",
                    "to_version",
                    "status",
                    "outstanding",
                    "blocked",
                ],
                change_request_row,
            );
        }
        ChangeRequestCmd::Get { id, read } => {
            let v = ask(client, &GetChangeRequest(id), read).await?;
            let v = if fmt.is_table() {
                change_request_row(&v)
            } else {
                json!(v)
            };
            return print(
                fmt,
                &v,
                &[
                    "id",
                    "installation",
                    "from_version",
                    "to_version",
                    "status",
                    "reason",
                    "blocked",
                    "message",
                    "decided_by",
                    "policy",
                    "requester",
                    "approved_by",
                    "outstanding",
                    "expires",
                ],
            );
        }
        ChangeRequestCmd::Approve { id, actor } => Command::ApproveChangeRequest {
            id,
            actor: actor.name(),
        },
        ChangeRequestCmd::Reject { id, reason, actor } => Command::RejectChangeRequest {
            id,
            actor: actor.name(),
            reason,
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

//! `hubctl entity …` and `hubctl env …` commands for management settings: channels,
//! dependency groups, windows, config overrides, secrets, registries and the environment's
//! suppression and window flags. Secret values are read from a file or an environment
//! variable, never from the command line, and never printed (SPEC S4).

use std::path::PathBuf;

use clap::{ArgGroup, Subcommand};
use hub_engine::command::{EntitySettingsPatch, EnvironmentSettingsPatch, WindowSpec};
use hub_engine::entity::SecretValue;
use hub_engine::Command;
use semver::Version;
use serde_json::{json, Value};

use super::args::{parse_bool, parse_version, read_file, ReadArgs};
use super::calls::{ask, resolve, submit_and_print};
use super::output::{
    or_dash, print_answer, print_insecure_registries, red, red_stderr, table, Format,
};
use super::timeparse::{format_duration, parse_duration};
use hub_client::answer::{
    EntityView, EnvironmentSettingsView, GetEntity, GetEnvironmentSettings, WindowOverrideView,
};
use hub_client::FailoverClient;

/// Orchestration commands under `hubctl entity`.
#[derive(Subcommand, Debug)]
pub enum EntityOrchCmd {
    /// Show an entity's settings, secret names (never values) and reported state.
    Get {
        /// The entity: ENV/NAME, ENV/KIND/NAME or eid:….
        entity: String,
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Change an entity's management settings (at least one flag).
    #[command(group(ArgGroup::new("change").required(true).multiple(true).args([
        "channel", "dependency_groups", "ignore_dependencies", "window", "clear_window",
        "marked_for_uninstall",
    ])))]
    Set {
        /// The entity.
        entity: String,
        /// The release channel to follow.
        #[arg(long)]
        channel: Option<String>,
        /// Dependency groups, comma-separated (replaces the list).
        #[arg(long, value_delimiter = ',')]
        dependency_groups: Option<Vec<String>>,
        /// Product ids whose dependency checks are skipped, comma-separated (replaces the list;
        /// "" clears it).
        #[arg(long, value_delimiter = ',')]
        ignore_dependencies: Option<Vec<String>>,
        /// The entity's maintenance window, e.g. MONDAY/22:00-TUESDAY/06:00 or all-time.
        #[arg(long, conflicts_with = "clear_window")]
        window: Option<String>,
        /// The window's IANA time zone (default UTC).
        #[arg(long, requires = "window")]
        time_zone: Option<String>,
        /// Remove the entity's own window (the environment's applies).
        #[arg(long)]
        clear_window: bool,
        /// Mark (true) or unmark (false) the entity for uninstallation.
        #[arg(long, value_parser = parse_bool)]
        marked_for_uninstall: Option<bool>,
    },
    /// Config overrides (YAML) per version.
    #[command(subcommand)]
    Config(ConfigCmd),
    /// Secrets (values are never shown).
    #[command(subcommand)]
    Secret(SecretCmd),
}

/// `hubctl entity config …`
#[derive(Subcommand, Debug)]
pub enum ConfigCmd {
    /// Set the config overrides that apply from --version on.
    Set {
        /// The entity.
        entity: String,
        /// The lowest version they apply to.
        #[arg(long, value_parser = parse_version, default_value = "0.0.0")]
        version: Version,
        /// A YAML file with the overrides (a mapping).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
    },
    /// Remove the config overrides of --version.
    Clear {
        /// The entity.
        entity: String,
        /// The version they were set for.
        #[arg(long, value_parser = parse_version, default_value = "0.0.0")]
        version: Version,
    },
}

/// `hubctl entity secret …`
#[derive(Subcommand, Debug)]
pub enum SecretCmd {
    /// Set a secret from a file's exact content or an environment variable.
    #[command(group(ArgGroup::new("source").required(true).args(["value_file", "from_env"])))]
    Set {
        /// The entity.
        entity: String,
        /// The secret's name.
        name: String,
        /// A file holding the value (used exactly, trailing newline included).
        #[arg(long)]
        value_file: Option<PathBuf>,
        /// An environment variable holding the value.
        #[arg(long)]
        from_env: Option<String>,
    },
    /// Delete a secret.
    Delete {
        /// The entity.
        entity: String,
        /// The secret's name.
        name: String,
    },
}

/// Orchestration commands under `hubctl env`.
#[derive(Subcommand, Debug)]
pub enum EnvOrchCmd {
    /// Show (no flags) or change an environment's settings.
    Settings {
        /// The environment.
        environment: String,
        /// The environment's maintenance window, e.g. MONDAY/22:00-TUESDAY/06:00 or all-time.
        #[arg(long, conflicts_with = "clear_window")]
        window: Option<String>,
        /// The window's IANA time zone (default UTC).
        #[arg(long, requires = "window")]
        time_zone: Option<String>,
        /// Remove the environment's window.
        #[arg(long)]
        clear_window: bool,
        // SPEC P9
        /// Suppress the whole environment when more than N entities are auto-suppressed.
        #[arg(long)]
        suppress_after_autosuppressions: Option<u32>,
        // SPEC P8
        /// How long a failed plan suppresses its entity, e.g. 1h.
        #[arg(long, value_parser = parse_duration)]
        auto_suppression: Option<i64>,
        // SPEC C4
        /// Use entity/environment windows instead of product windows: true|false.
        #[arg(long, value_parser = parse_bool)]
        override_product_windows: Option<bool>,
        // SPEC C6
        /// Recall roll-offs wait for maintenance windows too: true|false.
        #[arg(long, value_parser = parse_bool)]
        require_windows_for_recall_roll_offs: Option<bool>,
        #[command(flatten)]
        read: ReadArgs,
    },
    // SPEC C9
    /// Artifact registries.
    #[command(subcommand)]
    Registry(RegistryCmd),
}

/// `hubctl env registry …`
#[derive(Subcommand, Debug)]
pub enum RegistryCmd {
    /// Add or replace a registry.
    Set {
        /// The environment.
        environment: String,
        /// The registry's name.
        name: String,
        /// http(s)://… or file:///…
        url: String,
        /// Whether the hub can reach it (not-expected: the hub skips its check).
        #[arg(long, default_value = "expected", value_parser = ["expected", "not-expected"])]
        hub_access: String,
        /// PEM file of CA certificates trusted for this https registry, besides the system's
        /// roots (replicated with the registry to the hub's nodes and the agents).
        #[arg(long, value_name = "PEM_FILE")]
        ca_file: Option<PathBuf>,
        /// Do not verify the https registry's certificate at all. Anyone on the network path
        /// can then serve its artifacts; hubctl shows it in red wherever the registry matters.
        #[arg(long, conflicts_with = "ca_file")]
        insecure_skip_verify: bool,
    },
    /// Remove a registry.
    Remove {
        /// The environment.
        environment: String,
        /// The registry's name.
        name: String,
    },
}

fn window_patch(
    window: Option<String>,
    time_zone: Option<String>,
    clear: bool,
) -> Option<hub_engine::command::WindowChange> {
    use hub_engine::command::WindowChange;
    match (window, clear) {
        (Some(spec), _) => Some(WindowChange::Set(WindowSpec {
            spec,
            time_zone: time_zone.unwrap_or_else(|| "UTC".to_string()),
        })),
        (None, true) => Some(WindowChange::Remove),
        (None, false) => None,
    }
}

/// Runs an entity settings command.
pub async fn entity(
    client: &FailoverClient,
    cmd: EntityOrchCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        EntityOrchCmd::Get { entity, read } => {
            let v = ask(client, &GetEntity(entity), read).await?;
            return print_entity(fmt, &v);
        }
        EntityOrchCmd::Set {
            entity,
            channel,
            dependency_groups,
            ignore_dependencies,
            window,
            time_zone,
            clear_window,
            marked_for_uninstall,
        } => {
            let clean = |list: Vec<String>| -> Vec<String> {
                list.into_iter()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
                    .collect()
            };
            Command::SetEntitySettings {
                entity: resolve(client, &entity).await?,
                patch: EntitySettingsPatch {
                    release_channel: channel,
                    dependency_groups: dependency_groups.map(clean),
                    ignored_dependencies: ignore_dependencies.map(clean),
                    maintenance_window: window_patch(window, time_zone, clear_window),
                    marked_for_uninstall,
                },
            }
        }
        EntityOrchCmd::Config(ConfigCmd::Set {
            entity,
            version,
            file,
        }) => {
            let config = read_file(&file, "config")?;
            Command::SetConfigOverrides {
                entity: resolve(client, &entity).await?,
                version: version.to_string(),
                config: Some(config),
            }
        }
        EntityOrchCmd::Config(ConfigCmd::Clear { entity, version }) => {
            Command::SetConfigOverrides {
                entity: resolve(client, &entity).await?,
                version: version.to_string(),
                config: None,
            }
        }
        EntityOrchCmd::Secret(SecretCmd::Set {
            entity,
            name,
            value_file,
            from_env,
        }) => {
            let value = match (value_file, from_env) {
                (Some(path), _) => read_file(&path, "secret value")?,
                // The error never shows the variable's content (VarError's Display would).
                (None, Some(var)) => match std::env::var(&var) {
                    Ok(v) => v,
                    Err(std::env::VarError::NotPresent) => {
                        anyhow::bail!("--from-env: environment variable {var:?} is not set")
                    }
                    Err(std::env::VarError::NotUnicode(_)) => {
                        anyhow::bail!("--from-env: environment variable {var:?} is not UTF-8")
                    }
                },
                (None, None) => anyhow::bail!("give --value-file FILE or --from-env VAR"),
            };
            if value.is_empty() {
                anyhow::bail!(
                    "the secret value is empty (use `entity secret delete` to remove it)"
                );
            }
            if value.ends_with('\n') {
                eprintln!(
                    "note: the secret value ends with a newline, which is kept as part of it"
                );
            }
            Command::SetSecret {
                entity: resolve(client, &entity).await?,
                name,
                value: Some(SecretValue(value)),
            }
        }
        EntityOrchCmd::Secret(SecretCmd::Delete { entity, name }) => Command::SetSecret {
            entity: resolve(client, &entity).await?,
            name,
            value: None,
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) if a.is_empty() => "-".into(),
        Value::Array(a) => a.iter().map(text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

fn print_entity(fmt: Format, v: &EntityView) -> anyhow::Result<()> {
    if !fmt.is_table() {
        return print_answer(fmt, v);
    }
    let fields = [
        ("id", json!(v.id)),
        ("environment", json!(v.environment)),
        ("kind", json!(v.kind)),
        ("name", json!(v.name)),
        ("product_id", json!(v.product_id)),
        ("k8s_namespace", json!(v.k8s_namespace)),
        ("account_id", json!(v.account_id)),
        ("release_channel", json!(v.release_channel)),
        ("dependency_groups", json!(v.dependency_groups)),
        ("ignored_dependencies", json!(v.ignored_dependencies)),
        ("maintenance_window", json!(v.maintenance_window)),
        ("secrets", json!(v.secrets)),
        ("secrets_revision", json!(v.secrets_revision)),
        ("marked_for_uninstall", json!(v.marked_for_uninstall)),
        ("owner_module", json!(v.owner_module)),
    ];
    for (key, value) in fields {
        println!("{key}: {}", text(&value));
    }
    print_insecure_registries(&v.insecure_registries);
    let r = &v.reported;
    println!(
        "reported: version {} health {} at {}",
        or_dash(r.version.as_deref()),
        r.health,
        or_dash(r.at.as_deref())
    );
    if !r.message.is_empty() {
        println!("reported message: {}", r.message);
    }
    if v.config_overrides.is_empty() {
        println!("config overrides: -");
    } else {
        println!("config overrides:");
        for (version, text) in &v.config_overrides {
            println!("  from {version}:");
            for line in text.lines() {
                println!("    {line}");
            }
        }
    }
    print_overrides(&v.window_overrides)
}

fn print_overrides(overrides: &[WindowOverrideView]) -> anyhow::Result<()> {
    if overrides.is_empty() {
        println!("window overrides: -");
        return Ok(());
    }
    println!("window overrides:");
    let rows: Vec<Value> = overrides.iter().map(|o| json!(o)).collect();
    table(&rows, &["id", "start", "end", "reason"])
}

/// Runs an environment settings command.
pub async fn env(client: &FailoverClient, cmd: EnvOrchCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        EnvOrchCmd::Settings {
            environment,
            window,
            time_zone,
            clear_window,
            suppress_after_autosuppressions,
            auto_suppression,
            override_product_windows,
            require_windows_for_recall_roll_offs,
            read,
        } => {
            let patch = EnvironmentSettingsPatch {
                maintenance_window: window_patch(window, time_zone, clear_window),
                autosuppression_threshold: suppress_after_autosuppressions,
                auto_suppression_ms: auto_suppression,
                override_product_maintenance_windows: override_product_windows,
                require_windows_for_recall_roll_offs,
            };
            if patch == EnvironmentSettingsPatch::default() {
                let v = ask(client, &GetEnvironmentSettings(environment), read).await?;
                return print_env_settings(fmt, &v);
            }
            Command::SetEnvironmentSettings { environment, patch }
        }
        EnvOrchCmd::Registry(RegistryCmd::Set {
            environment,
            name,
            url,
            hub_access,
            ca_file,
            insecure_skip_verify,
        }) => {
            let ca_pem = ca_file
                .as_deref()
                .map(hub_client::ca_file::read_ca_file)
                .transpose()
                .map_err(|e| anyhow::anyhow!("--ca-file {e}"))?;
            if insecure_skip_verify {
                eprintln!(
                    "{}",
                    red_stderr(&format!(
                        "WARNING: registry {name}'s TLS certificate will NOT be verified \
                         (--insecure-skip-verify)"
                    ))
                );
            }
            Command::SetRegistry {
                environment,
                name,
                url,
                hub_access,
                ca_pem,
                insecure_skip_verify,
            }
        }
        EnvOrchCmd::Registry(RegistryCmd::Remove { environment, name }) => {
            Command::RemoveRegistry { environment, name }
        }
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

fn print_env_settings(fmt: Format, v: &EnvironmentSettingsView) -> anyhow::Result<()> {
    if !fmt.is_table() {
        return print_answer(fmt, v);
    }
    println!("environment: {}", v.environment);
    println!(
        "maintenance_window: {}",
        or_dash(v.maintenance_window.as_deref())
    );
    println!(
        "suppress_deployment_after_num_autosuppressions: {}",
        v.suppress_deployment_after_num_autosuppressions
    );
    println!(
        "auto_suppression: {}",
        format_duration(v.auto_suppression_ms)
    );
    println!(
        "override_product_maintenance_windows: {}",
        v.override_product_maintenance_windows
    );
    println!(
        "require_maintenance_windows_for_no_downtime_recalled_release_roll_offs: {}",
        v.require_maintenance_windows_for_no_downtime_recalled_release_roll_offs
    );
    println!("autosuppressed_entities: {}", v.autosuppressed_entities);
    if v.registries.is_empty() {
        println!("registries: -");
    } else {
        println!("registries:");
        let rows: Vec<Value> = v.registries.iter().map(|r| json!(r)).collect();
        table(&rows, &["name", "url", "hub_access", "tls"])?;
        for r in v.registries.iter().filter(|r| r.insecure_skip_verify) {
            println!(
                "{}",
                red(&format!(
                    "WARNING: registry {} is insecure-skip-verify: its TLS certificate is NOT verified",
                    r.name
                ))
            );
        }
    }
    print_overrides(&v.window_overrides)
}

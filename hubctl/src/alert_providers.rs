//! `hubctl alert-provider …` (issue 52 item 6): Flagger AlertProviders, which canaries'
//! alerts name with `alerts[].providerRef`: apply (`--dry-run` validates here) and delete. A
//! file given to `hubctl canary apply -f` may hold them too (applied before its Canaries).

use std::path::PathBuf;

use clap::Subcommand;
use hub_engine::canary::{parse_alert_provider, ParsedAlertProvider};
use hub_engine::Command;
use serde_json::json;

use super::args::read_file;
use super::calls::submit_and_print;
use super::output::{print, Format};
use hub_client::FailoverClient;

/// `hubctl alert-provider …`.
#[derive(Subcommand, Debug)]
pub enum AlertProviderCmd {
    /// Create or update an AlertProvider from its resource (YAML).
    Apply {
        /// The resource.
        #[arg(long, short = 'f')]
        file: PathBuf,
        /// The environment, when `metadata.namespace` does not name it.
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Validate here and show the fields the hub ignores; send nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Delete a provider no canary uses (refused naming the canaries that do).
    Delete {
        /// The provider's name.
        name: String,
        /// Its environment.
        #[arg(long, short = 'n')]
        namespace: String,
    },
}

/// Runs a `hubctl alert-provider` command.
pub async fn run(
    client: &FailoverClient,
    cmd: AlertProviderCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match cmd {
        AlertProviderCmd::Apply {
            file,
            namespace,
            dry_run,
        } => {
            let yaml = read_file(&file, "alert provider")?;
            if dry_run {
                return dry_run_apply(&file, &yaml, fmt);
            }
            Command::ApplyAlertProvider {
                environment: namespace,
                yaml,
            }
        }
        AlertProviderCmd::Delete { name, namespace } => Command::DeleteAlertProvider {
            id: format!("{namespace}/{name}"),
        },
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// Parses an AlertProvider document here; an invalid one is an error naming every path.
pub fn parse_here(file: &std::path::Path, yaml: &str) -> anyhow::Result<ParsedAlertProvider> {
    parse_alert_provider(yaml).map_err(|errors| {
        anyhow::anyhow!(
            "{}: invalid alert provider resource:\n{errors}",
            file.display()
        )
    })
}

/// `alert-provider apply --dry-run`: parsed here. The address is not shown (a Slack webhook
/// URL is a credential).
pub fn dry_run_apply(file: &std::path::Path, yaml: &str, fmt: Format) -> anyhow::Result<()> {
    let parsed = parse_here(file, yaml)?;
    if fmt.is_table() {
        println!(
            "alert provider {} ({}) is valid (dry run: nothing was sent)",
            parsed.name,
            parsed.spec.kind.as_str()
        );
        for f in &parsed.ignored {
            println!("  warning: {f}");
        }
        return Ok(());
    }
    print(
        fmt,
        &json!({"valid": true, "name": parsed.name, "namespace": parsed.namespace,
            "type": parsed.spec.kind.as_str(), "ignored": parsed.ignored}),
        &[],
    )
}

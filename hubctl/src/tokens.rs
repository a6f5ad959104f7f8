//! `hubctl token …`: operator tokens for people, scripts and the dashboard (see
//! docs/SECURITY.md). The secret is generated here, from the OS's random number generator,
//! and printed once; the hub only ever receives its hash.

use std::collections::BTreeSet;

use anyhow::{anyhow, Context};
use clap::Subcommand;
use hub_engine::access::{Role, ScopeKind};
use hub_engine::command::TokenRole;
use hub_engine::token::{TokenSecret, SECRET_BYTES};
use hub_engine::{Command, CommandOutput};
use rand::TryRngCore;
use serde_json::json;

use super::args::ReadArgs;
use super::calls::{ask, submit};
use super::output::{print, print_list, Format};
use super::roles::parse_role;
use super::timeparse::parse_duration;
use hub_client::answer::{ListTokens, TokenRoleView};
use hub_client::FailoverClient;

/// A token's time to live: a duration, or `never`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl(Option<u64>);

/// `hubctl token …`
#[derive(Subcommand, Debug)]
pub enum TokenCmd {
    /// Create a token acting as token/NAME with the given roles, and print its secret once.
    /// Use it as `hubctl --token SECRET …` or HUBCTL_TOKEN, with --ca-file and no
    /// certificate.
    Create {
        /// Its name, unique in the cluster (A-Z, a-z, 0-9, '.', '_', '-').
        #[arg(long)]
        name: String,
        /// How long it is accepted: 30m, 12h, 30d, … or `never`.
        #[arg(long, default_value = "30d", value_parser = parse_ttl)]
        ttl: Ttl,
        /// A role, with its scope for scoped roles: viewer, environment-operator=prod,stage,
        /// product-editor=com.example:* (repeat for more roles).
        #[arg(long = "role", value_name = "ROLE[=SCOPE,…]", value_parser = parse_token_role)]
        roles: Vec<TokenRole>,
    },
    /// Every token: name, creator, expiry and roles (never a secret). Admins only.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
    /// Revoke a token and its roles: no node accepts it from the commit on.
    Revoke {
        /// The token's name.
        name: String,
    },
}

/// Parses `--ttl`.
fn parse_ttl(s: &str) -> Result<Ttl, String> {
    if s == "never" {
        return Ok(Ttl(None));
    }
    let ms = parse_duration(s)?;
    // parse_duration refuses zero and anything negative.
    Ok(Ttl(Some(ms.unsigned_abs())))
}

/// Parses `--role ROLE[=SCOPE,…]`.
fn parse_token_role(s: &str) -> Result<TokenRole, String> {
    let (name, scope) = match s.split_once('=') {
        Some((name, scope)) => (name, Some(scope)),
        None => (s, None),
    };
    let role: Role = parse_role(name)?;
    let entries: BTreeSet<String> = scope
        .into_iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    let mut r = TokenRole {
        role,
        environments: BTreeSet::new(),
        products: BTreeSet::new(),
    };
    match role.scope_kind() {
        ScopeKind::Unscoped if entries.is_empty() => {}
        ScopeKind::Unscoped => return Err(format!("{role} takes no scope")),
        ScopeKind::Environments if !entries.is_empty() => r.environments = entries,
        ScopeKind::Products if !entries.is_empty() => r.products = entries,
        ScopeKind::Environments | ScopeKind::Products => {
            return Err(format!(
                "{role} needs a scope: {role}=NAME[,NAME…] (or {role}=* for all)"
            ))
        }
    }
    Ok(r)
}

/// A new secret from the OS's random number generator.
fn new_secret() -> anyhow::Result<TokenSecret> {
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .context("read the OS's random number generator")?;
    Ok(TokenSecret::from_bytes(bytes))
}

/// Runs a `hubctl token` command.
pub async fn run(client: &FailoverClient, cmd: TokenCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        TokenCmd::Create { name, ttl, roles } => {
            let secret = new_secret()?;
            let command = Command::CreateToken {
                name: name.clone(),
                hash: secret.hash(),
                ttl_ms: ttl.0,
                roles,
            };
            let v = submit(client, &command).await?;
            let summary = match v.command_output {
                Some(CommandOutput::Changed { summary, .. }) => Some(summary),
                _ => None,
            };
            print(
                fmt,
                &json!({
                    "name": name,
                    "identity": format!("token/{name}"),
                    "index": v.index,
                    "result": summary,
                    "secret": secret.reveal(),
                }),
                &["identity", "index", "result", "secret"],
            )?;
            if fmt.is_table() {
                eprintln!(
                    "The secret is shown once and the hub keeps only its hash: store it now."
                );
            }
            Ok(())
        }
        TokenCmd::List { read } => {
            let v = ask(client, &ListTokens, read).await?;
            print_list(
                fmt,
                &v.tokens,
                &["name", "roles", "expires", "created_by", "created"],
                |t| {
                    let roles: Vec<String> = t.roles.iter().map(role_text).collect();
                    let expires = match (&t.expires, t.expired) {
                        (Some(at), true) => format!("{at} (expired)"),
                        (Some(at), false) => at.clone(),
                        (None, _) => "never".to_string(),
                    };
                    // `identity` only in `-o wide`.
                    json!({
                        "name": t.name,
                        "identity": t.identity,
                        "roles": if roles.is_empty() { "-".to_string() } else { roles.join(" ") },
                        "expires": expires,
                        "created_by": t.created_by,
                        "created": t.created,
                    })
                },
            )
            .map_err(|e| anyhow!(e))
        }
        TokenCmd::Revoke { name } => {
            let v = submit(client, &Command::RevokeToken { name }).await?;
            print(fmt, &json!(v), &["index", "leader", "result", "id"])
        }
    }
}

/// `environment-operator=prod,stage` from a listed role.
fn role_text(r: &TokenRoleView) -> String {
    let scope: Vec<&str> = r
        .environments
        .iter()
        .chain(&r.products)
        .map(String::as_str)
        .collect();
    if scope.is_empty() {
        r.role.clone()
    } else {
        format!("{}={}", r.role, scope.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn role_arguments_parse_with_their_scopes() {
        let r = parse_token_role("environment-operator=prod,stage").unwrap();
        assert_eq!(r.role, Role::EnvironmentOperator);
        assert_eq!(r.environments.len(), 2);
        let r = parse_token_role("product-editor=com.example:*").unwrap();
        assert!(r.products.contains("com.example:*"));
        assert_eq!(parse_token_role("viewer").unwrap().role, Role::Viewer);
        assert!(parse_token_role("viewer=prod").is_err());
        assert!(parse_token_role("approver")
            .unwrap_err()
            .contains("needs a scope"));
        assert!(parse_token_role("root")
            .unwrap_err()
            .contains("unknown role"));
        assert_eq!(parse_ttl("never").unwrap(), Ttl(None));
        assert_eq!(parse_ttl("2h").unwrap(), Ttl(Some(7_200_000)));
        assert!(parse_ttl("0s").is_err());
    }
}

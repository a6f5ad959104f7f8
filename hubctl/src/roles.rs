//! `hubctl role …`: who holds which role (see docs/SECURITY.md for what each role may do).

use anyhow::anyhow;
use clap::Subcommand;
use hub_engine::access::{Role, ROLES};
use hub_engine::Command;
use hub_tls::Identity;
use serde_json::json;

use super::args::ReadArgs;
use super::calls::{ask, submit_and_print};
use super::output::{print_list, Format};
use hub_client::answer::ListRoleBindings;
use hub_client::FailoverClient;

/// `hubctl role …`
#[derive(Subcommand, Debug)]
pub enum RoleCmd {
    /// Give IDENTITY a role (replacing the scope of the same role it already holds).
    Bind {
        /// Who: operator/NAME or agent/ENV.
        #[arg(value_parser = parse_identity)]
        identity: Identity,
        /// admin, environment-operator, product-editor, module-editor, approver or viewer.
        #[arg(value_parser = parse_role)]
        role: Role,
        /// For environment-operator and approver: an environment, or * for all (repeat).
        #[arg(long = "env", value_name = "ENV")]
        environments: Vec<String>,
        /// For product-editor: group:name, group:* or * (repeat).
        #[arg(long = "product", value_name = "PRODUCT")]
        products: Vec<String>,
    },
    /// Take a role from IDENTITY (the last admin keeps theirs).
    Unbind {
        /// Who: operator/NAME or agent/ENV.
        #[arg(value_parser = parse_identity)]
        identity: Identity,
        /// The role.
        #[arg(value_parser = parse_role)]
        role: Role,
    },
    /// Every role binding.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// Parses an identity argument (`operator/alice`).
pub(crate) fn parse_identity(s: &str) -> Result<Identity, String> {
    Identity::parse(s).map_err(|e| e.to_string())
}

/// Parses a role argument, naming the roles there are.
pub(crate) fn parse_role(s: &str) -> Result<Role, String> {
    Role::parse(s).ok_or_else(|| {
        let names: Vec<&str> = ROLES.iter().map(|r| r.as_str()).collect();
        format!("unknown role {s:?} (roles: {})", names.join(", "))
    })
}

/// The bootstrap binding: `identity` becomes the cluster's first admin (refused once an
/// admin exists).
pub(crate) fn bootstrap_admin(identity: &Identity) -> Command {
    Command::BindRole {
        identity: identity.clone(),
        role: Role::Admin,
        environments: Default::default(),
        products: Default::default(),
    }
}

/// Runs a `hubctl role` command.
pub async fn run(client: &FailoverClient, cmd: RoleCmd, fmt: Format) -> anyhow::Result<()> {
    match cmd {
        RoleCmd::Bind {
            identity,
            role,
            environments,
            products,
        } => {
            let command = Command::BindRole {
                identity,
                role,
                environments: environments.into_iter().collect(),
                products: products.into_iter().collect(),
            };
            submit_and_print(client, &command, fmt).await.map(drop)
        }
        RoleCmd::Unbind { identity, role } => {
            submit_and_print(client, &Command::UnbindRole { identity, role }, fmt)
                .await
                .map(drop)
        }
        RoleCmd::List { read } => {
            let v = ask(client, &ListRoleBindings, read).await?;
            print_list(
                fmt,
                &v.bindings,
                &["identity", "role", "scope", "bound_by", "bound"],
                |b| {
                    let mut s = b.environments.join(",");
                    if s.is_empty() {
                        s = b.products.join(",");
                    }
                    json!({
                        "identity": b.identity, "role": b.role,
                        "scope": if s.is_empty() { "-".to_string() } else { s },
                        "bound_by": b.bound_by, "bound": b.bound,
                    })
                },
            )
            .map_err(|e| anyhow!(e))
        }
    }
}

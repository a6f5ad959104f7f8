//! `hubctl approval …` (issue 55): approver groups (named sets of identities a policy may
//! require approvals from) and approval policies (per environment, product or module
//! installation: what is approved automatically, how many approvers, which groups, self
//! approval, expiry, the default module channel). Admins only; the hub refuses anyone else.
//!
//! Writes are one `hub_engine::Command` each; reads are typed `hub-client` answers.

use std::collections::BTreeSet;

use anyhow::Context;
use clap::{Args, Subcommand, ValueEnum};
use hub_engine::approval::{
    ApprovalPolicySpec, AutoApproval, GroupRequirement, PolicyScope, SemverPart,
};
use hub_engine::Command;
use hub_tls::Identity;
use serde_json::{json, Value};

use super::args::ReadArgs;
use super::calls::{ask, submit_and_print};
use super::output::{print_list, Format};
use super::timeparse::parse_duration;
use hub_client::answer::{ApprovalPolicyView, ListApprovalPolicies, ListApproverGroups};
use hub_client::FailoverClient;

/// `hubctl approval …`.
#[derive(Subcommand, Debug)]
pub enum ApprovalCmd {
    /// Approver groups: named sets of identities (a compliance team).
    #[command(subcommand)]
    Group(GroupCmd),
    /// Approval policies of environments, products and module installations.
    #[command(subcommand)]
    Policy(PolicyCmd),
}

/// `hubctl approval group …`.
#[derive(Subcommand, Debug)]
pub enum GroupCmd {
    /// Create or replace a group with exactly these members (each must hold a role binding).
    Set {
        /// The group's name (a DNS label).
        name: String,
        /// A member: `operator/alice` (repeat for more).
        #[arg(long = "member", value_name = "IDENTITY", required = true)]
        members: Vec<String>,
    },
    /// Delete a group no policy requires.
    Delete {
        /// The group's name.
        name: String,
    },
    /// Every group with its members.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// Which scope a policy governs.
#[derive(Args, Debug, Clone)]
#[group(required = true, multiple = false)]
pub struct PolicyScopeArgs {
    /// Every installation and window exception of this environment.
    #[arg(long = "env", value_name = "ENV")]
    environment: Option<String>,
    /// Exceptions to this product's maintenance window (`group:name`).
    #[arg(long, value_name = "PRODUCT")]
    product: Option<String>,
    /// One module installation, `ENV/MODULE` (before its environment's policy).
    #[arg(long, value_name = "ENV/MODULE")]
    installation: Option<String>,
}

impl PolicyScopeArgs {
    fn scope(&self) -> anyhow::Result<PolicyScope> {
        match (&self.environment, &self.product, &self.installation) {
            (Some(e), None, None) => Ok(PolicyScope::Environment(e.clone())),
            (None, Some(p), None) => Ok(PolicyScope::Product(p.clone())),
            (None, None, Some(i)) => Ok(PolicyScope::Installation(i.clone())),
            _ => anyhow::bail!("give one of --env, --product or --installation"),
        }
    }
}

/// The largest semver part approved automatically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum UpTo {
    /// Nothing is approved automatically.
    None,
    /// Patch updates.
    Patch,
    /// Patch and minor updates.
    Minor,
    /// Every update.
    Major,
}

/// `hubctl approval policy …`.
#[derive(Subcommand, Debug)]
pub enum PolicyCmd {
    /// Set the policy of a scope (replacing any it had).
    Set {
        #[command(flatten)]
        scope: PolicyScopeArgs,
        /// Distinct approvers of the scope required (0 to 16).
        #[arg(long, default_value_t = 1)]
        approvers: u32,
        /// A group whose approval is required besides: `GROUP` or `GROUP=COUNT` (repeat).
        #[arg(long = "require", value_name = "GROUP[=COUNT]")]
        required: Vec<String>,
        /// Module updates approved without a person, up to this version part.
        #[arg(long, value_enum, default_value_t = UpTo::None)]
        auto_approve: UpTo,
        /// Updates that change the module's variables may still be approved automatically.
        #[arg(long)]
        auto_approve_variable_changes: bool,
        /// Updates that change the installation's entities may still be approved
        /// automatically.
        #[arg(long)]
        auto_approve_entity_changes: bool,
        /// The requester may approve their own request.
        #[arg(long)]
        allow_self_approval: bool,
        /// Requests expire this long after they were opened (30m, 2d, …).
        #[arg(long, value_parser = parse_duration)]
        expire_after: Option<i64>,
        /// The module channel installations in scope track unless one was chosen.
        #[arg(long)]
        default_channel: Option<String>,
    },
    /// Remove the policy of a scope (requests then follow the next policy up, or the hub's
    /// default: one approver of the environment).
    Remove {
        #[command(flatten)]
        scope: PolicyScopeArgs,
    },
    /// Every policy.
    List {
        #[command(flatten)]
        read: ReadArgs,
    },
}

/// Parses `GROUP` or `GROUP=COUNT`; the error names the flag and the argument.
fn parse_requirement(text: &str) -> anyhow::Result<GroupRequirement> {
    let (group, count) = match text.split_once('=') {
        Some((g, c)) => (
            g,
            c.trim()
                .parse::<u32>()
                .with_context(|| format!("--require {text:?}: COUNT must be a number"))?,
        ),
        None => (text, 1),
    };
    if group.trim().is_empty() {
        anyhow::bail!("--require {text:?}: the group's name is empty");
    }
    Ok(GroupRequirement {
        group: group.trim().to_string(),
        count,
    })
}

/// Runs `hubctl approval …`.
pub async fn approval(
    client: &FailoverClient,
    cmd: ApprovalCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    match cmd {
        ApprovalCmd::Group(cmd) => group(client, cmd, fmt).await,
        ApprovalCmd::Policy(cmd) => policy(client, cmd, fmt).await,
    }
}

async fn group(client: &FailoverClient, cmd: GroupCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        GroupCmd::Set { name, members } => {
            let members = members
                .iter()
                .map(|m| Identity::parse(m).with_context(|| format!("--member {m:?}")))
                .collect::<anyhow::Result<BTreeSet<Identity>>>()?;
            Command::SetApproverGroup { name, members }
        }
        GroupCmd::Delete { name } => Command::DeleteApproverGroup { name },
        GroupCmd::List { read } => {
            let answer = ask(client, &ListApproverGroups, read).await?;
            return print_list(fmt, &answer.groups, &["name", "members", "updated"], |g| {
                json!({"name": g.name, "members": super::orch::join(&g.members),
                        "updated": g.updated})
            });
        }
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

async fn policy(client: &FailoverClient, cmd: PolicyCmd, fmt: Format) -> anyhow::Result<()> {
    let command = match cmd {
        PolicyCmd::Set {
            scope,
            approvers,
            required,
            auto_approve,
            auto_approve_variable_changes,
            auto_approve_entity_changes,
            allow_self_approval,
            expire_after,
            default_channel,
        } => {
            let required_groups = required
                .iter()
                .map(|r| parse_requirement(r))
                .collect::<anyhow::Result<Vec<_>>>()?;
            let up_to = match auto_approve {
                UpTo::None => None,
                UpTo::Patch => Some(SemverPart::Patch),
                UpTo::Minor => Some(SemverPart::Minor),
                UpTo::Major => Some(SemverPart::Major),
            };
            let expire_after_ms = expire_after
                .map(|d| u64::try_from(d).context("--expire-after must be positive"))
                .transpose()?;
            Command::SetApprovalPolicy {
                scope: scope.scope()?,
                policy: Some(ApprovalPolicySpec {
                    auto_approve: AutoApproval {
                        up_to,
                        variable_changes: auto_approve_variable_changes,
                        entity_changes: auto_approve_entity_changes,
                    },
                    approvers,
                    required_groups,
                    allow_self_approval,
                    expire_after_ms,
                    default_channel,
                }),
            }
        }
        PolicyCmd::Remove { scope } => Command::SetApprovalPolicy {
            scope: scope.scope()?,
            policy: None,
        },
        PolicyCmd::List { read } => {
            let answer = ask(client, &ListApprovalPolicies, read).await?;
            return print_list(
                fmt,
                &answer.policies,
                &[
                    "scope",
                    "approvers",
                    "required",
                    "auto_approve",
                    "self_approval",
                    "expire_after",
                    "default_channel",
                ],
                policy_row,
            );
        }
    };
    submit_and_print(client, &command, fmt).await.map(drop)
}

/// One policy as a table row: requirements as `group=count`, auto-approval as one word.
fn policy_row(p: &ApprovalPolicyView) -> Value {
    let required: Vec<String> = p
        .required_groups
        .iter()
        .map(|g| format!("{}={}", g.group, g.count))
        .collect();
    let auto = &p.auto_approve;
    let mut auto_text = auto.up_to.as_deref().unwrap_or("none").to_string();
    if auto.variable_changes {
        auto_text.push_str("+variables");
    }
    if auto.entity_changes {
        auto_text.push_str("+entities");
    }
    json!({
        "scope": p.scope,
        "approvers": p.approvers,
        "required": if required.is_empty() { Value::Null } else { json!(required.join(",")) },
        "auto_approve": auto_text,
        "self_approval": p.allow_self_approval,
        "expire_after": p.expire_after_ms.map(|ms| format!("{}s", ms / 1000)),
        "default_channel": p.default_channel,
        "set": p.set,
    })
}

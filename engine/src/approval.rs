//! Approvals (issue 55): named groups of approvers, approval policies, and the approvals a
//! pending request (a module change request or a window-exception request) collected.
//!
//! Who approves is decided by data the hub replicates, never by a request's own fields:
//! - **the scope's approvers**: identities holding the `approver` role on the request's
//!   environment (admins count as every role), or, for an exception to an entity whose
//!   maintenance window is its product's, identities holding `product-editor` on that product;
//! - **required groups**: [`ApproverGroup`]s, named sets of identities (admins define them),
//!   of which a policy may require approvals besides the scope's approvers.
//!
//! A request copies the rule that applied when it was opened ([`AppliedPolicy`]) and records
//! each approval with the requirements its approver could fill at that moment
//! ([`Approval::counts_for`]), so later changes of roles, groups or policies do not change
//! what a recorded approval was worth. A request is approved when the approvals can be
//! assigned to the requirements with every requirement filled and **each identity filling
//! at most one place** ([`RequestApprovals::outstanding`], a bipartite matching): an identity
//! in two required groups counts once.
//!
//! Every type here is its own record or part of one: none of them adds a field to a record
//! that existed before, so old logs and snapshots decode as they did.

use std::collections::BTreeSet;
use std::fmt;

use hub_identity::Identity;
use semver::Version;
use serde::{Deserialize, Serialize};

use crate::TimestampMs;

// Budgets of issue 55's commands (`SetApproverGroup` to `SetModuleChannel`), each checked at
// apply before anything is looked up and refused naming the field and the limit, nothing
// changed. Besides the lists and ids below: names are bounded by the validators that
// created what they name ([`crate::name`]: environments, approver groups and modules
// [`crate::name::MAX_NAME_LEN`], channels [`crate::name::MAX_CHANNEL_NAME_LEN`], product ids
// 128 a part, an installation `<environment>/<module>` each part), entity ids by
// [`crate::entity::MAX_ENTITY_ID_LEN`], reasons by the engine's free-text limit (1,024
// bytes), variables and actors as `InstallModule`'s. A name over its budget names nothing the
// hub holds, so each of these refuses only what was refused before (as not found).

/// Most members of one approver group.
pub const MAX_GROUP_MEMBERS: usize = 256;
/// Most groups one policy requires.
pub const MAX_REQUIRED_GROUPS: usize = 16;
/// Longest module version a command names: the hub numbers module versions itself
/// (`<major>.<minor>.0`), so a longer text names none.
pub const MAX_MODULE_VERSION_LEN: usize = 64;
/// Longest request id a command names: the hub makes them (`wx-<index>`, at most 23 bytes).
pub const MAX_REQUEST_ID_LEN: usize = 64;
/// Most approvals one requirement asks for.
pub const MAX_APPROVALS_PER_REQUIREMENT: u32 = 16;
/// Most approvals one request records.
pub const MAX_APPROVALS: usize = 64;
/// Shortest expiry a policy may set (one minute).
pub const MIN_EXPIRY_MS: u64 = 60_000;
/// Longest expiry a policy may set (one year).
pub const MAX_EXPIRY_MS: u64 = 366 * 24 * 3600 * 1000;

/// A named group of identities whose approval a policy may require (a compliance team).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApproverGroup {
    /// The group's name (a DNS label).
    pub name: String,
    /// Its members; each held a role binding when it was added.
    pub members: BTreeSet<Identity>,
    /// Entry time of the last change.
    pub updated_ms: TimestampMs,
}

/// What an approval policy governs.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PolicyScope {
    /// Every installation and window exception of an environment.
    Environment(String),
    /// Exceptions to the product's maintenance window, by `group:name`.
    Product(String),
    /// One module installation, by `<environment>/<module>` (before its environment's).
    Installation(String),
}

impl PolicyScope {
    /// The record key name: `environment/prod`, `product/com.example:web`,
    /// `installation/prod/control-plane`.
    pub fn key_name(&self) -> String {
        match self {
            PolicyScope::Environment(n) => format!("environment/{n}"),
            PolicyScope::Product(n) => format!("product/{n}"),
            PolicyScope::Installation(n) => format!("installation/{n}"),
        }
    }
}

impl fmt::Display for PolicyScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.key_name())
    }
}

/// A part of a semantic version, from the smallest change to the largest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum SemverPart {
    /// Only the patch number changed.
    Patch,
    /// The minor number changed (every ordinary module publish).
    Minor,
    /// The major number changed.
    Major,
}

impl SemverPart {
    /// The largest part that differs from `from` to `to` (`Patch` when only pre-release or
    /// build differ, or nothing does).
    pub fn of_change(from: &Version, to: &Version) -> SemverPart {
        if from.major != to.major {
            SemverPart::Major
        } else if from.minor != to.minor {
            SemverPart::Minor
        } else {
            SemverPart::Patch
        }
    }

    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            SemverPart::Patch => "patch",
            SemverPart::Minor => "minor",
            SemverPart::Major => "major",
        }
    }
}

/// Which module updates a policy approves without a person. The default approves none.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AutoApproval {
    /// The largest version change approved automatically (`Minor`: patch and minor
    /// updates); `None`: no update is.
    pub up_to: Option<SemverPart>,
    /// Whether an update that changes the module's variables (declares other variables, or
    /// drops a value the installation set) may still be approved automatically.
    pub variable_changes: bool,
    /// Whether an update that changes which entities the installation manages (creates,
    /// adopts or lets go of one) may still be approved automatically.
    pub entity_changes: bool,
}

/// What a module update changes, as an auto-approval rule reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateChange {
    /// The largest version part that changes.
    pub part: SemverPart,
    /// The variables change.
    pub variables: bool,
    /// The managed entities change.
    pub entities: bool,
}

impl AutoApproval {
    /// Why `change` is not approved automatically; `None` when it is.
    pub fn refuses(&self, change: &UpdateChange) -> Option<String> {
        let Some(up_to) = self.up_to else {
            return Some("the policy approves no update automatically".into());
        };
        if change.part > up_to {
            return Some(format!(
                "a {} update; the policy approves up to {} updates",
                change.part.as_str(),
                up_to.as_str()
            ));
        }
        if change.variables && !self.variable_changes {
            return Some("the update changes the module's variables".into());
        }
        if change.entities && !self.entity_changes {
            return Some("the update changes the entities the installation manages".into());
        }
        None
    }
}

/// Approvals required from one named group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupRequirement {
    /// The group's name.
    pub group: String,
    /// How many distinct members must approve (1 to 16).
    pub count: u32,
}

/// An approval policy as an admin sets it ([`crate::Command::SetApprovalPolicy`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicySpec {
    /// Which module updates need no person (installations only).
    pub auto_approve: AutoApproval,
    /// Distinct approvers of the scope required (0 to 16).
    pub approvers: u32,
    /// Groups whose approvals are required besides.
    pub required_groups: Vec<GroupRequirement>,
    /// Whether the requester may approve their own request (default: no).
    pub allow_self_approval: bool,
    /// How long a request stays approvable after it was opened; `None`: until decided.
    pub expire_after_ms: Option<u64>,
    /// The channel installations in scope track unless one was chosen for them.
    pub default_channel: Option<String>,
}

impl Default for ApprovalPolicySpec {
    /// One approver of the scope, nothing automatic, no self-approval, no expiry.
    fn default() -> Self {
        Self {
            auto_approve: AutoApproval::default(),
            approvers: 1,
            required_groups: Vec::new(),
            allow_self_approval: false,
            expire_after_ms: None,
            default_channel: None,
        }
    }
}

/// An approval policy in force for a scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalPolicy {
    /// What it governs.
    pub scope: PolicyScope,
    /// The policy.
    pub spec: ApprovalPolicySpec,
    /// Entry time it was set.
    pub set_ms: TimestampMs,
}

/// Whose approvals are "the scope's approvers" of a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Approvers {
    /// Holders of the `approver` role on this environment.
    Environment(String),
    /// Holders of the `product-editor` role on this product (its window's owners).
    Product(String),
}

impl fmt::Display for Approvers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Approvers::Environment(e) => write!(f, "approver on {e}"),
            Approvers::Product(p) => write!(f, "product-editor on {p}"),
        }
    }
}

/// The rule a request was opened under: a copy of its policy's approval part.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AppliedPolicy {
    /// The policy it came from; `None`: the hub's default (one approver, no self-approval).
    pub source: Option<PolicyScope>,
    /// Who the scope's approvers are.
    pub approvers: Approvers,
    /// Distinct approvers of the scope required.
    pub count: u32,
    /// Groups required besides.
    pub required_groups: Vec<GroupRequirement>,
    /// Whether the requester may approve.
    pub allow_self_approval: bool,
}

impl AppliedPolicy {
    /// The rule of `spec` from `source`, over `approvers`.
    pub fn of(
        source: Option<PolicyScope>,
        approvers: Approvers,
        spec: &ApprovalPolicySpec,
    ) -> Self {
        AppliedPolicy {
            source,
            approvers,
            count: spec.approvers,
            required_groups: spec.required_groups.clone(),
            allow_self_approval: spec.allow_self_approval,
        }
    }

    /// The requirements in order: index 0 the scope's approvers, index `i` the group
    /// `required_groups[i - 1]`.
    pub fn requirements(&self) -> Vec<(Requirement, u32)> {
        std::iter::once((Requirement::Approvers(self.approvers.clone()), self.count))
            .chain(
                self.required_groups
                    .iter()
                    .map(|g| (Requirement::Group(g.group.clone()), g.count)),
            )
            .collect()
    }

    /// Where the rule came from, for people.
    pub fn source_text(&self) -> String {
        match &self.source {
            Some(scope) => format!("policy {scope}"),
            None => "the hub's default policy".to_string(),
        }
    }
}

/// One requirement of a rule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Requirement {
    /// The scope's approvers.
    Approvers(Approvers),
    /// Members of a named group.
    Group(String),
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Requirement::Approvers(a) => write!(f, "{a}"),
            Requirement::Group(g) => write!(f, "member of group {g}"),
        }
    }
}

/// One recorded approval.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// Who approved (the verified identity of the entry).
    pub identity: Identity,
    /// Entry time.
    pub time_ms: TimestampMs,
    /// The requirements (indexes into [`AppliedPolicy::requirements`]) the approver could
    /// fill when approving.
    pub counts_for: Vec<u32>,
}

/// A requirement not yet filled, and by how many approvals.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Missing {
    /// What is required.
    pub requirement: Requirement,
    /// How many more approvals it needs.
    pub count: u32,
}

impl fmt::Display for Missing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} more: {}", self.count, self.requirement)
    }
}

/// The approval state of one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestApprovals {
    /// The rule it was opened under.
    pub policy: AppliedPolicy,
    /// Who asked (the verified identity of the entry that opened it), if a person did.
    pub requester: Option<Identity>,
    /// The approvals so far, in order.
    pub approvals: Vec<Approval>,
    /// When it stops being approvable, if ever.
    pub expires_ms: Option<TimestampMs>,
}

impl RequestApprovals {
    /// Whether it can no longer be approved at `t`.
    pub fn expired_at(&self, t: TimestampMs) -> bool {
        self.expires_ms.is_some_and(|e| t >= e)
    }

    /// The requirements the best assignment of the approvals leaves unfilled; empty when the
    /// request is approved. Each approval fills at most one place (an identity counts once).
    pub fn outstanding(&self) -> Vec<Missing> {
        let requirements = self.policy.requirements();
        let filled = assign(&self.approvals, &requirements);
        requirements
            .into_iter()
            .zip(filled)
            .filter(|((_, need), got)| got < need)
            .map(|((requirement, need), got)| Missing {
                requirement,
                count: need - got,
            })
            .collect()
    }

    /// Whether every requirement is filled.
    pub fn is_met(&self) -> bool {
        self.outstanding().is_empty()
    }

    /// Who still must approve, for people: `1 more: approver on prod; 2 more: member of
    /// group compliance`, or `nobody`.
    pub fn outstanding_text(&self) -> String {
        let missing = self.outstanding();
        if missing.is_empty() {
            return "nobody".to_string();
        }
        let each: Vec<String> = missing.iter().map(Missing::to_string).collect();
        each.join("; ")
    }
}

/// How many approvals each requirement gets in a maximum assignment of `approvals` to the
/// places of `requirements` (each approval to at most one place of a requirement it counts
/// for): augmenting paths over at most 64 approvals and 272 places.
fn assign(approvals: &[Approval], requirements: &[(Requirement, u32)]) -> Vec<u32> {
    // The place each approval holds, as a requirement index.
    let mut holds: Vec<Option<usize>> = vec![None; approvals.len()];
    let mut load: Vec<u32> = vec![0; requirements.len()];
    for start in 0..approvals.len() {
        let mut visited = vec![false; requirements.len()];
        augment(
            start,
            approvals,
            requirements,
            &mut holds,
            &mut load,
            &mut visited,
        );
    }
    load
}

/// Tries to give approval `a` a place, moving others along an augmenting path.
fn augment(
    a: usize,
    approvals: &[Approval],
    requirements: &[(Requirement, u32)],
    holds: &mut [Option<usize>],
    load: &mut [u32],
    visited: &mut [bool],
) -> bool {
    for &r in &approvals[a].counts_for {
        let r = r as usize;
        if r >= requirements.len() || visited[r] {
            continue;
        }
        visited[r] = true;
        if load[r] < requirements[r].1 {
            load[r] += 1;
            holds[a] = Some(r);
            return true;
        }
        // Full: move one of its holders elsewhere.
        let holders: Vec<usize> = (0..approvals.len())
            .filter(|&o| holds[o] == Some(r))
            .collect();
        for o in holders {
            if augment(o, approvals, requirements, holds, load, visited) {
                // `o` moved to another place; its place here goes to `a` (the load of `r`
                // stays as it was).
                holds[a] = Some(r);
                return true;
            }
        }
    }
    false
}

/// The approval state of a module change request opened under a policy (a change request
/// without one predates policies or had none: one approver of its environment decides).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChangeRequestApproval {
    /// The change request's id.
    pub change_request: String,
    /// Its approvals.
    pub approvals: RequestApprovals,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(name: &str) -> Identity {
        Identity::parse(&format!("operator/{name}")).unwrap()
    }

    fn approvals(policy: AppliedPolicy, list: &[(&str, &[u32])]) -> RequestApprovals {
        RequestApprovals {
            policy,
            requester: None,
            approvals: list
                .iter()
                .map(|(who, counts)| Approval {
                    identity: op(who),
                    time_ms: 0,
                    counts_for: counts.to_vec(),
                })
                .collect(),
            expires_ms: None,
        }
    }

    fn policy(count: u32, groups: &[(&str, u32)]) -> AppliedPolicy {
        AppliedPolicy {
            source: None,
            approvers: Approvers::Environment("prod".into()),
            count,
            required_groups: groups
                .iter()
                .map(|(g, c)| GroupRequirement {
                    group: g.to_string(),
                    count: *c,
                })
                .collect(),
            allow_self_approval: false,
        }
    }

    #[test]
    fn an_identity_in_several_groups_counts_once() {
        // alice is an approver and in compliance: alone she fills one place of two.
        let p = policy(1, &[("compliance", 1)]);
        let one = approvals(p.clone(), &[("alice", &[0, 1])]);
        assert_eq!(one.outstanding().len(), 1, "{}", one.outstanding_text());
        // bob, an approver only, arrives: alice moves to compliance, bob fills approvers.
        let two = approvals(p, &[("alice", &[0, 1]), ("bob", &[0])]);
        assert!(two.is_met(), "{}", two.outstanding_text());
    }

    #[test]
    fn outstanding_names_each_requirement_with_its_count() {
        let p = policy(2, &[("compliance", 1), ("security", 2)]);
        let a = approvals(p, &[("alice", &[0]), ("carol", &[2])]);
        assert_eq!(
            a.outstanding_text(),
            "1 more: approver on prod; 1 more: member of group compliance; \
             1 more: member of group security"
        );
    }

    #[test]
    fn auto_approval_reads_part_variables_and_entities() {
        let rule = AutoApproval {
            up_to: Some(SemverPart::Minor),
            variable_changes: false,
            entity_changes: true,
        };
        let change = |part, variables| UpdateChange {
            part,
            variables,
            entities: true,
        };
        assert_eq!(rule.refuses(&change(SemverPart::Minor, false)), None);
        assert!(rule.refuses(&change(SemverPart::Major, false)).is_some());
        assert!(rule.refuses(&change(SemverPart::Patch, true)).is_some());
        assert!(AutoApproval::default()
            .refuses(&change(SemverPart::Patch, false))
            .is_some());
        let v = |s| Version::parse(s).unwrap();
        assert_eq!(
            SemverPart::of_change(&v("0.1.0"), &v("0.2.0")),
            SemverPart::Minor
        );
        assert_eq!(
            SemverPart::of_change(&v("0.9.0"), &v("1.0.0")),
            SemverPart::Major
        );
        assert_eq!(
            SemverPart::of_change(&v("1.0.0"), &v("1.0.1")),
            SemverPart::Patch
        );
    }
}

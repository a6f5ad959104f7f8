//! Commands as verified operators propose them (`Command::As`), for tests where the roles,
//! the approver groups and the approval policies decide: identities, role bindings, groups and
//! policies set by the admin `operator/root`.

use std::collections::BTreeSet;

use hub_engine::access::Role;
use hub_engine::approval::{ApprovalPolicySpec, PolicyScope};
use hub_engine::Command;
use hub_identity::Identity;

use super::Hub;

/// `operator/<name>`.
pub fn operator(name: &str) -> Identity {
    Identity::parse(&format!("operator/{name}")).unwrap()
}

/// `command` as the node proposes it for verified operator `who`: actor stamped, wrapped.
pub fn as_(who: &str, mut command: Command) -> Command {
    command.stamp_actor(&operator(who).to_string());
    Command::As {
        actor: operator(who),
        command: Box::new(command),
    }
}

/// Binds `role` to operator `who`, by `root` (the first binding of `root` as admin is the
/// bootstrap): `scope` is the products of a product editor, else the environments.
pub fn bind(hub: &mut Hub, who: &str, role: Role, scope: &[&str]) {
    let set: BTreeSet<String> = scope.iter().map(|s| s.to_string()).collect();
    let (environments, products) = match role {
        Role::ProductEditor => (BTreeSet::new(), set),
        _ => (set, BTreeSet::new()),
    };
    hub.ok(as_(
        "root",
        Command::BindRole {
            identity: operator(who),
            role,
            environments,
            products,
        },
    ));
}

/// Sets the approval policy of `scope`, by `root`.
pub fn policy(hub: &mut Hub, scope: PolicyScope, spec: ApprovalPolicySpec) {
    hub.ok(as_(
        "root",
        Command::SetApprovalPolicy {
            scope,
            policy: Some(spec),
        },
    ));
}

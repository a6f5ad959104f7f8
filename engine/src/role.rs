//! Roles and the bindings that give them to identities: replicated data, no transitions
//! (what each role may do is the `access` module).

use std::collections::BTreeSet;
use std::fmt;

use hub_identity::Identity;
use serde::{Deserialize, Serialize};

/// What a role binding lets its identity do. Part of the replicated format: variants keep
/// their order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Role {
    /// Everything, including role bindings and cluster membership.
    Admin,
    /// Environment settings, entities, config, secrets, suppressions, window overrides,
    /// cancels, break-glass commands, canaries and module installations, in its
    /// environments.
    EnvironmentOperator,
    /// Products, releases, recalls, channels and product windows, for its products.
    ProductEditor,
    /// Module definitions.
    ModuleEditor,
    /// Approving and rejecting module change requests, in its environments.
    Approver,
    /// Every read (never a secret value).
    Viewer,
}

/// Every role, in order.
pub const ROLES: [Role; 6] = [
    Role::Admin,
    Role::EnvironmentOperator,
    Role::ProductEditor,
    Role::ModuleEditor,
    Role::Approver,
    Role::Viewer,
];

/// What a role's bindings are scoped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScopeKind {
    /// Nothing: the role holds everywhere.
    Unscoped,
    /// Environments (`--env`).
    Environments,
    /// Products or product groups (`--product`).
    Products,
}

impl Role {
    /// The role's name as operators write it (`environment-operator`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::EnvironmentOperator => "environment-operator",
            Role::ProductEditor => "product-editor",
            Role::ModuleEditor => "module-editor",
            Role::Approver => "approver",
            Role::Viewer => "viewer",
        }
    }

    /// Parses a role's name; `None` for an unknown one.
    pub fn parse(name: &str) -> Option<Role> {
        ROLES.into_iter().find(|r| r.as_str() == name)
    }

    /// What the role's bindings are scoped by.
    pub fn scope_kind(self) -> ScopeKind {
        match self {
            Role::Admin | Role::ModuleEditor | Role::Viewer => ScopeKind::Unscoped,
            Role::EnvironmentOperator | Role::Approver => ScopeKind::Environments,
            Role::ProductEditor => ScopeKind::Products,
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The scope entry that stands for every environment or every product.
pub const ALL: &str = "*";

/// One role given to one identity, over a scope. At most one binding per identity and role:
/// binding again replaces the scope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBinding {
    /// Who holds the role.
    pub identity: Identity,
    /// The role.
    pub role: Role,
    /// For environment-scoped roles: environment names, or `*` for all.
    pub environments: BTreeSet<String>,
    /// For product-scoped roles: `group:name`, `group:*` for a product group, or `*`.
    pub products: BTreeSet<String>,
    /// When it was bound (entry time).
    pub bound_ms: crate::TimestampMs,
    /// Who bound it.
    pub bound_by: String,
}

impl RoleBinding {
    /// The record key name of `identity`'s binding of `role`: `operator/alice#admin`.
    pub fn key_name(identity: &Identity, role: Role) -> String {
        format!("{identity}#{role}")
    }

    /// Inverse of [`RoleBinding::key_name`].
    pub fn parse_key_name(name: &str) -> Option<(Identity, Role)> {
        let (identity, role) = name.rsplit_once('#')?;
        Some((Identity::parse(identity).ok()?, Role::parse(role)?))
    }

    /// Whether the binding covers environment `env`.
    pub fn covers_environment(&self, env: &str) -> bool {
        self.environments.contains(ALL) || self.environments.contains(env)
    }

    /// Whether the binding covers product `product` (`group:name`): by name, by its group
    /// (`group:*`) or all (`*`).
    pub fn covers_product(&self, product: &str) -> bool {
        if self.products.contains(ALL) || self.products.contains(product) {
            return true;
        }
        product
            .split_once(':')
            .is_some_and(|(group, _)| self.products.contains(&format!("{group}:*")))
    }

    /// The scope as operators read it: `on prod, stage`, `on *`, or nothing.
    pub fn scope_text(&self) -> String {
        let list = match self.role.scope_kind() {
            ScopeKind::Unscoped => return String::new(),
            ScopeKind::Environments => &self.environments,
            ScopeKind::Products => &self.products,
        };
        let names: Vec<&str> = list.iter().map(String::as_str).collect();
        format!("on {}", names.join(", "))
    }
}

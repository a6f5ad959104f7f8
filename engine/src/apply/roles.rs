//! Role bindings: who holds which role over what ([`crate::access`]).

use std::collections::BTreeSet;

use hub_identity::Identity;

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::name::validate_product_id;
use crate::role::{Role, RoleBinding, ScopeKind, ALL};
use crate::state::State;

use super::{changed, Tx};

/// Most environments or products one binding may list.
pub const MAX_SCOPE_ENTRIES: usize = 256;

impl State {
    /// `BindRole`: gives `identity` `role` over a validated scope. The need table admits
    /// admins only; while no admin exists, an operator may bind itself admin (bootstrap).
    pub(super) fn bind_role(
        &mut self,
        identity: &Identity,
        role: Role,
        environments: &BTreeSet<String>,
        products: &BTreeSet<String>,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let Some(actor) = tx.actor.clone() else {
            return Err(CommandError::invalid(
                "actor",
                "a role binding must name who made it",
            ));
        };
        if matches!(identity, Identity::Node(_)) {
            return Err(CommandError::invalid(
                "identity",
                "hub nodes hold no roles: they act as nodes",
            ));
        }
        if let Identity::Token(name) = identity {
            // A binding must not outlive its token, nor wait for a token of that name.
            if !self.tokens.contains_key(name) {
                return Err(CommandError::invalid(
                    "identity",
                    format!("no token {name:?} (hubctl token create)"),
                ));
            }
        }
        self.check_scope(role, environments, products)?;
        let binding = RoleBinding {
            identity: identity.clone(),
            role,
            environments: environments.clone(),
            products: products.clone(),
            bound_ms: tx.now,
            bound_by: actor.to_string(),
        };
        let summary = format!("{identity} is {role} {}", binding.scope_text())
            .trim_end()
            .to_string();
        let id = RoleBinding::key_name(identity, role);
        self.role_bindings.put(binding, &mut tx.changed);
        Ok(changed(id, summary))
    }

    /// `UnbindRole`: takes `role` from `identity`, never the last certificate admin's.
    pub(super) fn unbind_role(
        &mut self,
        identity: &Identity,
        role: Role,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let key = (identity.clone(), role);
        if !self.role_bindings.contains_key(&key) {
            return Err(CommandError::NotFound {
                kind: "role binding".into(),
                name: RoleBinding::key_name(identity, role),
            });
        }
        // Tokens' admin bindings never count as the last admin (see `State::admin_count`).
        if role == Role::Admin && identity.is_certificate_identity() && self.admin_count() == 1 {
            return Err(CommandError::FailedPrecondition(format!(
                "{identity} is the last admin: bind another admin first"
            )));
        }
        self.role_bindings.remove(&key, &mut tx.changed);
        Ok(changed(
            RoleBinding::key_name(identity, role),
            format!("{identity} is no longer {role}"),
        ))
    }

    /// A binding's scope fits its role and names what exists: environments by name or `*`,
    /// products by `group:name`, `group:*` (a group with a product) or `*`.
    pub(super) fn check_scope(
        &self,
        role: Role,
        environments: &BTreeSet<String>,
        products: &BTreeSet<String>,
    ) -> Result<(), CommandError> {
        for (field, list) in [("environments", environments), ("products", products)] {
            if list.len() > MAX_SCOPE_ENTRIES {
                return Err(CommandError::invalid(
                    field,
                    format!("at most {MAX_SCOPE_ENTRIES} entries"),
                ));
            }
        }
        let kind = role.scope_kind();
        for (field, list, fits) in [
            (
                "environments",
                environments,
                kind == ScopeKind::Environments,
            ),
            ("products", products, kind == ScopeKind::Products),
        ] {
            if !fits && !list.is_empty() {
                return Err(CommandError::invalid(
                    field,
                    format!("{role} is not scoped by {field}"),
                ));
            }
        }
        let (field, list) = match kind {
            ScopeKind::Unscoped => return Ok(()),
            ScopeKind::Environments => ("environments", environments),
            ScopeKind::Products => ("products", products),
        };
        if list.is_empty() {
            return Err(CommandError::invalid(
                field,
                format!("{role} needs at least one (or {ALL} for all)"),
            ));
        }
        for entry in list.iter().filter(|e| *e != ALL) {
            match kind {
                ScopeKind::Environments => {
                    if !self.environments.contains_key(entry) {
                        return Err(CommandError::invalid(
                            field,
                            format!("no environment {entry:?}"),
                        ));
                    }
                }
                ScopeKind::Products => match entry.strip_suffix(":*") {
                    Some(group) => {
                        let prefix = format!("{group}:");
                        if !self.products.keys().any(|p| p.starts_with(&prefix)) {
                            return Err(CommandError::invalid(
                                field,
                                format!("no product in group {group:?}"),
                            ));
                        }
                    }
                    None => {
                        validate_product_id(field, entry)?;
                        if !self.products.contains_key(entry) {
                            return Err(CommandError::invalid(
                                field,
                                format!("no product {entry:?}"),
                            ));
                        }
                    }
                },
                // Returned above.
                ScopeKind::Unscoped => {}
            }
        }
        Ok(())
    }
}

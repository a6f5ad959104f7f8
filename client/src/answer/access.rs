//! `role_bindings` and `tokens`: who may do what, and the operator tokens (never a token's
//! secret or hash).

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One role binding.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBindingView {
    /// When it was bound.
    pub bound: String,
    /// Who bound it.
    pub bound_by: String,
    /// For an environment-scoped role: the environments, or `*` for all.
    pub environments: Vec<String>,
    /// Who holds the role (`operator/alice`, `token/ci`).
    pub identity: String,
    /// For a product-scoped role: `group:name`, `group:*` or `*`.
    pub products: Vec<String>,
    /// The role (`admin`, `viewer`, `approver`, …).
    pub role: String,
}

/// The answer to `role_bindings`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleBindingsAnswer {
    /// Every binding.
    pub bindings: Vec<RoleBindingView>,
}

/// Asks for every role binding.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListRoleBindings;

impl Typed for ListRoleBindings {
    type Answer = RoleBindingsAnswer;
    fn query(&self) -> Query {
        Query::RoleBindings
    }
}

/// A role a token holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRoleView {
    /// For an environment-scoped role: the environments, or `*` for all.
    pub environments: Vec<String>,
    /// For a product-scoped role: `group:name`, `group:*` or `*`.
    pub products: Vec<String>,
    /// The role.
    pub role: String,
}

/// One operator token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenView {
    /// When it was created.
    pub created: String,
    /// Who created it.
    pub created_by: String,
    /// Whether it has expired.
    pub expired: bool,
    /// When it stops being accepted (`None`: never).
    pub expires: Option<String>,
    /// The identity it acts as: `token/<name>`.
    pub identity: String,
    /// Its name.
    pub name: String,
    /// The roles bound to its identity.
    pub roles: Vec<TokenRoleView>,
}

/// The answer to `tokens`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokensAnswer {
    /// Every token, by name.
    pub tokens: Vec<TokenView>,
}

/// Asks for every operator token (admins).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ListTokens;

impl Typed for ListTokens {
    type Answer = TokensAnswer;
    fn query(&self) -> Query {
        Query::Tokens
    }
}

//! `resolve_entity`: an entity reference resolved to its id.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// The answer to `resolve_entity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedEntity {
    /// The entity's id (`eid:…`).
    pub id: String,
}

/// Resolves a reference (`eid:…`, `ENV/NAME` or `ENV/KIND/NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveEntity(pub String);

impl Typed for ResolveEntity {
    type Answer = ResolvedEntity;
    fn query(&self) -> Query {
        Query::ResolveEntity {
            entity: self.0.clone(),
        }
    }
}

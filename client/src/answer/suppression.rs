//! `suppressions`: windows in which the hub issues no plans for an entity or environment.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One suppression window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuppressionView {
    /// Whether it holds now.
    pub active: bool,
    /// When it ends (`None`: when it is deleted).
    pub end: Option<String>,
    /// `s-…`.
    pub id: String,
    /// Why.
    pub reason: String,
    /// `entity eid:…` or `environment NAME`.
    pub scope: String,
    /// `manual`, `failed-plan`, …
    pub source: String,
    /// When it starts.
    pub start: String,
}

/// The answer to `suppressions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SuppressionsAnswer {
    /// Every window, of one environment when asked so.
    pub suppressions: Vec<SuppressionView>,
}

/// Asks for suppression windows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListSuppressions {
    /// Only this environment.
    pub environment: Option<String>,
}

impl Typed for ListSuppressions {
    type Answer = SuppressionsAnswer;
    fn query(&self) -> Query {
        Query::Suppressions {
            environment: self.environment.clone(),
        }
    }
}

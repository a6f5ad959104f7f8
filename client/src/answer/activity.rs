//! `activity`: an entity's timeline (decisions, plans, reports, …), as Activity shows it.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// One line of an entity's activity.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityEntry {
    /// The log index that wrote it.
    pub index: u64,
    /// `decision`, `plan`, `recheck`, `canary`, `command`, `suppression`, `report`, …
    pub kind: String,
    /// What happened and why.
    pub message: String,
    /// When.
    pub time: String,
}

/// The answer to `activity`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityAnswer {
    /// The entity's id.
    pub entity: String,
    /// Its newest lines (at most 100), newest first.
    pub entries: Vec<ActivityEntry>,
}

/// Asks for an entity's activity, by reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GetActivity(pub String);

impl Typed for GetActivity {
    type Answer = ActivityAnswer;
    fn query(&self) -> Query {
        Query::Activity {
            entity: self.0.clone(),
        }
    }
}

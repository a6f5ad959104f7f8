//! A plan's and a task's state, as the hub records them and the agent reports them.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A plan's state (SPEC P7). `candidate` and `blocked` are states of the evaluation and live in
/// the entity's Activity; a plan record exists from the moment it is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum PlanStatus {
    /// Committed and visible to the agent.
    Issued,
    /// The agent reported a task started.
    Running,
    /// Every task succeeded.
    Succeeded,
    /// A task failed.
    Failed,
    /// Cancelled by an operator or superseded by a command.
    Cancelled,
}

impl PlanStatus {
    /// Issued or running.
    pub fn is_active(self) -> bool {
        matches!(self, PlanStatus::Issued | PlanStatus::Running)
    }

    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            PlanStatus::Issued => "issued",
            PlanStatus::Running => "running",
            PlanStatus::Succeeded => "succeeded",
            PlanStatus::Failed => "failed",
            PlanStatus::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for PlanStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A task's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum TaskState {
    /// Not started.
    Pending,
    /// Started.
    Running,
    /// Finished well.
    Succeeded,
    /// Finished badly; the plan fails.
    Failed,
}

impl TaskState {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TaskState::Pending => "pending",
            TaskState::Running => "running",
            TaskState::Succeeded => "succeeded",
            TaskState::Failed => "failed",
        }
    }

    /// Parses a lower-case name.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => TaskState::Pending,
            "running" => TaskState::Running,
            "succeeded" => TaskState::Succeeded,
            "failed" => TaskState::Failed,
            _ => return None,
        })
    }
}

//! The openraft type configuration shared by the store and the node.

use hub_engine::{CommandError, CommandOutput, Request};
use serde::{Deserialize, Serialize};

/// Raft node ids.
pub type NodeId = u64;

/// What a node is known by in the membership: its gRPC address.
pub type Node = openraft::BasicNode;

/// The state machine's answer to one applied entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Response {
    /// The command's output, or why it was refused.
    pub result: Result<CommandOutput, CommandError>,
}

pub use crate::snapshot_data::SnapshotData;

openraft::declare_raft_types!(
    /// The hub's Raft types.
    pub TypeConfig:
        D = Request,
        R = Response,
        NodeId = NodeId,
        Node = Node,
);

/// A log id.
pub type LogId = openraft::type_config::alias::LogIdOf<TypeConfig>;
/// A vote.
pub type Vote = openraft::type_config::alias::VoteOf<TypeConfig>;
/// A log entry.
pub type Entry = openraft::type_config::alias::EntryOf<TypeConfig>;
/// A membership config with the log id that set it.
pub type StoredMembership = openraft::type_config::alias::StoredMembershipOf<TypeConfig>;
/// Snapshot metadata.
pub type SnapshotMeta = openraft::type_config::alias::SnapshotMetaOf<TypeConfig>;
/// A snapshot with its data.
pub type Snapshot = openraft::type_config::alias::SnapshotOf<TypeConfig, SnapshotData>;
/// The Raft handle.
pub type Raft = openraft::Raft<TypeConfig, StateMachine>;

use crate::StateMachine;

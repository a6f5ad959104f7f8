//! The hub's pure domain: types, [`Command`]s, the replicated [`State`] and its decisions.
//!
//! Nothing here does I/O or reads a clock. Every command is applied with the time stamped on
//! its Raft entry ([`State::apply`]), so every node that applies the same log reaches the same
//! state, byte for byte ([`State::digest`]). Decisions ([`evaluate::evaluate`]) are pure
//! functions of the state, a time and the artifact checks the leader observed.

pub mod activity;
pub mod artifact;
pub mod canary;
pub mod canary_lifecycle;
pub mod canary_rollout;
pub mod cluster_key;
pub mod command;
pub mod entity;
pub mod environment;
pub mod error;
pub mod evaluate;
mod handlers;
pub mod installation;
mod lifecycle;
pub mod module;
mod module_lifecycle;
pub mod name;
pub mod plan;
pub mod product;
pub mod record;
pub mod release;
pub mod settings;
pub mod state;
pub mod suppression;
pub mod window;
pub mod yaml_error;

pub use command::{Command, CommandOutput, Request};
pub use entity::{Entity, EntityId, EntityKind};
pub use environment::Environment;
pub use error::CommandError;
pub use evaluate::{evaluate, Evaluation};
pub use record::{Record, RecordKey};
pub use state::{Applied, State, Trigger};

/// Milliseconds since the Unix epoch, as stamped by the leader on each Raft entry.
pub type TimestampMs = i64;

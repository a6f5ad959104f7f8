//! Records: the unit in which the state is persisted and snapshotted.
//!
//! The state is a set of records, each under a [`RecordKey`]. Applying a command reports which
//! keys it changed, so storage writes exactly those (in the same batch as `last_applied`). Keys
//! encode to bytes that sort in a stable order, which also fixes the order of the digest.

use serde::{Deserialize, Serialize};

use crate::command::CommandOutput;
use crate::entity::Entity;
use crate::environment::Environment;
use crate::error::CommandError;
use crate::TimestampMs;

/// Where a record lives.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum RecordKey {
    /// An environment, by name.
    Environment(String),
    /// An entity, by id.
    Entity(String),
    /// The remembered result of an idempotent request, by request id.
    Request(String),
}

const TAG_ENVIRONMENT: u8 = 1;
const TAG_ENTITY: u8 = 2;
const TAG_REQUEST: u8 = 3;

impl RecordKey {
    /// Stable byte encoding: a table tag, then the UTF-8 name.
    pub fn to_bytes(&self) -> Vec<u8> {
        let (tag, name) = match self {
            RecordKey::Environment(n) => (TAG_ENVIRONMENT, n),
            RecordKey::Entity(n) => (TAG_ENTITY, n),
            RecordKey::Request(n) => (TAG_REQUEST, n),
        };
        let mut out = Vec::with_capacity(1 + name.len());
        out.push(tag);
        out.extend_from_slice(name.as_bytes());
        out
    }

    /// Inverse of [`RecordKey::to_bytes`]; `None` for bytes it never produces.
    pub fn from_bytes(bytes: &[u8]) -> Option<Self> {
        let (&tag, rest) = bytes.split_first()?;
        let name = String::from_utf8(rest.to_vec()).ok()?;
        match tag {
            TAG_ENVIRONMENT => Some(RecordKey::Environment(name)),
            TAG_ENTITY => Some(RecordKey::Entity(name)),
            TAG_REQUEST => Some(RecordKey::Request(name)),
            _ => None,
        }
    }
}

/// The remembered outcome of a request that carried a request id.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestRecord {
    /// The request id.
    pub id: String,
    /// Log index at which it was first applied.
    pub index: u64,
    /// When it was first applied (entry time); forgotten after [`crate::state::REQUEST_TTL_MS`].
    pub time_ms: TimestampMs,
    /// Its result, returned again to a retry.
    pub result: Result<CommandOutput, CommandError>,
}

/// One persisted record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Record {
    /// See [`Environment`].
    Environment(Environment),
    /// See [`Entity`].
    Entity(Entity),
    /// See [`RequestRecord`].
    Request(RequestRecord),
}

impl Record {
    /// The key this record is stored under.
    pub fn key(&self) -> RecordKey {
        match self {
            Record::Environment(e) => RecordKey::Environment(e.name.clone()),
            Record::Entity(e) => RecordKey::Entity(e.id.0.clone()),
            Record::Request(r) => RecordKey::Request(r.id.clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip() {
        for k in [
            RecordKey::Environment("prod".into()),
            RecordKey::Entity("eid:prod:helmChart:web".into()),
            RecordKey::Request("r-1".into()),
        ] {
            assert_eq!(RecordKey::from_bytes(&k.to_bytes()), Some(k));
        }
        assert_eq!(RecordKey::from_bytes(&[]), None);
        assert_eq!(RecordKey::from_bytes(&[9, b'x']), None);
    }
}

//! Cluster keys: secrets every node must hold identically, such as the key of the canary
//! revision hash (SPEC K3, docs/SECURITY.md). The engine draws no randomness: a leader that
//! finds a key missing generates its bytes and proposes [`Command::SetClusterKey`]; the first
//! one committed wins and is never replaced, so every node, every replay and every snapshot
//! has the same key.
//!
//! [`Command::SetClusterKey`]: crate::Command::SetClusterKey

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::TimestampMs;

/// Length of every cluster key.
pub const KEY_BYTES: usize = 32;

/// The key of the canary revision hash ([`crate::canary::revision_hash`]).
pub const CANARY_REVISION_KEY: &str = "canary-revision";

/// Every key name a cluster may hold.
pub const KNOWN_KEYS: &[&str] = &[CANARY_REVISION_KEY];

/// Secret key bytes. `Debug` never shows them.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretKey([u8; KEY_BYTES]);

impl SecretKey {
    /// A key of these bytes (the leader draws them from the OS's CSPRNG).
    pub fn from_bytes(bytes: [u8; KEY_BYTES]) -> Self {
        Self(bytes)
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8; KEY_BYTES] {
        &self.0
    }
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(<redacted>)")
    }
}

/// One cluster key (a record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterKey {
    /// One of [`KNOWN_KEYS`].
    pub name: String,
    /// The key.
    pub key: SecretKey,
    /// Entry time of the command that set it.
    pub set_at_ms: TimestampMs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_key() {
        let k = ClusterKey {
            name: CANARY_REVISION_KEY.into(),
            key: SecretKey::from_bytes([0xab; KEY_BYTES]),
            set_at_ms: 1,
        };
        let shown = format!("{k:?} {:#?}", k.key);
        assert!(!shown.contains("171") && !shown.contains("ab"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }
}

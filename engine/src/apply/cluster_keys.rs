//! Cluster keys: set once, never replaced.

use crate::cluster_key::{ClusterKey, SecretKey, CANARY_REVISION_KEY, KNOWN_KEYS};
use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::state::{State, Trigger};

use super::Tx;

impl State {
    /// Sets cluster key `name` once; a second attempt is refused (the first key stays).
    pub(super) fn set_cluster_key(
        &mut self,
        name: &str,
        key: &SecretKey,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let now = tx.now;
        if !KNOWN_KEYS.contains(&name) {
            return Err(CommandError::invalid(
                "name",
                format!("{name:?} is not a cluster key (known: {KNOWN_KEYS:?})"),
            ));
        }
        if self.cluster_keys.contains_key(name) {
            return Err(CommandError::AlreadyExists {
                kind: "cluster key".into(),
                name: name.to_string(),
            });
        }
        self.cluster_keys.put(
            ClusterKey {
                name: name.to_string(),
                key: key.clone(),
                set_at_ms: now,
            },
            &mut tx.changed,
        );
        if name == CANARY_REVISION_KEY {
            // Entities under a canary waited for the key to get a target revision.
            tx.triggers.extend(
                self.canaries
                    .values()
                    .map(|c| Trigger::EntityOnly(c.entity.clone())),
            );
        }
        Ok(CommandOutput::Done)
    }
}

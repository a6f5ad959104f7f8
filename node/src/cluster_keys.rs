//! The leader gives the cluster its keys (`hub_engine::cluster_key`): a leader that finds the
//! canary revision key missing draws 32 bytes from the operating system's CSPRNG and proposes
//! `SetClusterKey`. The first key committed wins (a second proposal, from a racing or later
//! leader, is refused by apply), so the engine stays deterministic and every node hashes
//! revisions with the same key. Once the replicated state holds the key, the task ends.

use std::time::Duration;

use hub_engine::cluster_key::{SecretKey, CANARY_REVISION_KEY, KEY_BYTES};
use hub_engine::Command;
use rand::TryRngCore;

use crate::node::HubNode;
use crate::term::{Term, TermEnded};

/// Pause after a failed attempt (no quorum, lost leadership).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Sets the key during one term of leadership (started by [`crate::leader`] only while the
/// state has none); returns once the replicated state holds a key.
pub(crate) async fn run(term: &Term) -> Result<(), TermEnded> {
    let node = &term.node;
    while !has_key(node) {
        let key = match fresh_key() {
            Ok(k) => k,
            Err(e) => {
                tracing::error!(error = %e, "cluster keys: the OS random source failed");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
        };
        let command = Command::SetClusterKey {
            name: CANARY_REVISION_KEY.to_string(),
            key,
        };
        // The node proposes for itself: its own identity is the origin.
        let origin = crate::auth::Caller::Verified(hub_tls::Identity::Node(node.id));
        match node.propose(command, None, &origin).await {
            Ok(_) => tracing::info!("cluster keys: set the canary revision key"),
            // Refused: another leader's key was committed first; the loop sees it.
            Err(e) => {
                tracing::debug!(error = %e.message(), "cluster keys: not set");
                tokio::time::sleep(RETRY_AFTER).await;
            }
        }
    }
    Ok(())
}

/// Whether the replicated state holds the canary revision key.
pub(crate) fn has_key(node: &HubNode) -> bool {
    node.state.read().state.revision_key().is_some()
}

fn fresh_key() -> Result<SecretKey, rand::rand_core::OsError> {
    let mut bytes = [0u8; KEY_BYTES];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes)?;
    Ok(SecretKey::from_bytes(bytes))
}

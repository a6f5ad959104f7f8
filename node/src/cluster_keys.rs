//! The leader gives the cluster its keys (`hub_engine::cluster_key`): a leader that finds the
//! canary revision key missing draws 32 bytes from the operating system's CSPRNG and proposes
//! `SetClusterKey`. The first key committed wins (a second proposal, from a racing or later
//! leader, is refused by apply), so the engine stays deterministic and every node hashes
//! revisions with the same key. Once the replicated state holds the key, the task ends.

use std::sync::Arc;
use std::time::Duration;

use hub_engine::cluster_key::{SecretKey, CANARY_REVISION_KEY, KEY_BYTES};
use hub_engine::Command;
use rand::TryRngCore;

use crate::node::HubNode;
use crate::orchestrator::wait_for_leadership;

/// Pause after a failed attempt (no quorum, lost leadership).
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Starts the task; it acts only while this node leads and stops once the key is set.
pub fn spawn(node: Arc<HubNode>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if has_key(&node) {
                return;
            }
            wait_for_leadership(&node).await;
            // Decide from a state that includes everything committed before this term.
            if let Err(e) = node.read_barrier(false).await {
                tracing::debug!(error = %e.message(), "cluster keys: read barrier failed");
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
            if has_key(&node) {
                return;
            }
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
    })
}

fn has_key(node: &HubNode) -> bool {
    node.state.read().state.revision_key().is_some()
}

fn fresh_key() -> Result<SecretKey, rand::rand_core::OsError> {
    let mut bytes = [0u8; KEY_BYTES];
    rand::rngs::OsRng.try_fill_bytes(&mut bytes)?;
    Ok(SecretKey::from_bytes(bytes))
}

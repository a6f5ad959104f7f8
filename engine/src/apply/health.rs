//! The never-healthy rows ([`crate::never_healthy`]): created with an entity, given the
//! attempt a failed plan made, removed for good the first time the entity is healthy on a
//! version.

use crate::entity::{config_sha256, Health};
use crate::never_healthy::{FailedAttempt, NeverHealthy};
use crate::plan::Plan;
use crate::state::State;

use super::Tx;

impl State {
    /// Starts entity `id`'s never-healthy row (the entity was just created).
    pub(super) fn start_never_healthy(&mut self, id: &str, tx: &mut Tx) {
        self.never_healthy.put(
            NeverHealthy {
                entity: id.to_string(),
                since_ms: tx.now,
                failed_attempt: None,
            },
            &mut tx.changed,
        );
    }

    /// Removes entity `id`'s never-healthy row if it is now healthy on a version. Called
    /// after every change of its reported state.
    pub(super) fn end_never_healthy_if_healthy(&mut self, id: &str, tx: &mut Tx) {
        let healthy = self
            .entities
            .get(id)
            .is_some_and(|e| e.reported.health == Health::Healthy && e.reported.version.is_some());
        if healthy && self.never_healthy.contains_key(id) {
            self.never_healthy.remove(id, &mut tx.changed);
        }
    }

    /// Records `attempt` ([`failed_attempt`]) on `entity`'s never-healthy row (nothing for an
    /// entity that was healthy once).
    pub(super) fn record_failed_attempt(
        &mut self,
        entity: &str,
        attempt: Option<FailedAttempt>,
        tx: &mut Tx,
    ) {
        let Some(attempt) = attempt else {
            return;
        };
        if let Some(row) = self.never_healthy.get_mut(entity, &mut tx.changed) {
            row.failed_attempt = Some(attempt);
        }
    }
}

/// What `plan`, which failed after touching the workload, tried to deploy; `None` for a
/// plan that deploys no version (an uninstall, a command).
pub(super) fn failed_attempt(plan: &Plan) -> Option<FailedAttempt> {
    let (Some(version), Some(config)) = (&plan.to_version, &plan.to_config) else {
        return None;
    };
    Some(FailedAttempt {
        plan: plan.id.clone(),
        version: version.clone(),
        config_sha256: config_sha256(config),
        secrets_revision: plan.secrets_revision,
    })
}

//! The leader raises the cluster's feature level (`hub_engine::feature_level`) once every
//! member runs a release that has it: it asks each member for the level its binary applies
//! (`NodeStatus.feature_level`) and proposes `SetClusterLevel` with the lowest, never above
//! its own. Commands of a higher level are refused until then (`feature_gate`), so a newer
//! leader never proposes an entry an older member cannot apply; an upgrade is done node by
//! node, and the new commands are allowed once the last node runs the new release.
//!
//! Started by [`crate::leader`] only while the state's level is below this binary's; ends
//! once the cluster runs at this binary's level. A member that does not answer holds the
//! level where it is (it may run an older release); the loop asks again every
//! [`PROBE_EVERY`].

use std::time::Duration;

use hub_engine::feature_level::{FeatureLevel, BASELINE_LEVEL, SUPPORTED_LEVEL};
use hub_engine::Command;

use crate::term::Term;

/// How often the members are asked while the cluster's level is below this binary's.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The level to raise the cluster to, from the levels its members advertise (`None`: a
/// member did not answer), if it is above `current`. A member of a release before feature
/// levels advertises 0, which is the baseline. Never above this binary's own level.
pub fn level_to_raise(current: FeatureLevel, advertised: &[Option<u32>]) -> Option<FeatureLevel> {
    let lowest = advertised
        .iter()
        .map(|a| a.map(|level| FeatureLevel(level.max(BASELINE_LEVEL.0))))
        .min()?;
    // A member that did not answer holds the level (`None` sorts first).
    let target = lowest?.min(SUPPORTED_LEVEL);
    (target > current).then_some(target)
}

/// Raises the level during one term of leadership; returns once the cluster runs at this
/// binary's level.
pub(crate) async fn run(term: &Term) -> Result<(), String> {
    let node = &term.node;
    let mut logged: Option<String> = None;
    loop {
        let current = node.state.read().state.cluster_level();
        if current >= SUPPORTED_LEVEL {
            return Ok(());
        }
        let members = node.members();
        let probes = members.iter().map(|(id, addr, _)| async move {
            if *id == node.id {
                return Some(SUPPORTED_LEVEL.0);
            }
            crate::api::probe_member(node, addr, false)
                .await
                .ok()
                .map(|s| s.feature_level)
        });
        let advertised = futures::future::join_all(probes).await;
        match level_to_raise(current, &advertised) {
            Some(level) => match term.propose(Command::SetClusterLevel { level }).await? {
                Ok(_) => tracing::info!(%level, "raised the cluster's feature level"),
                Err(e) => {
                    tracing::warn!(%level, error = %e, "raising the feature level was refused")
                }
            },
            None => {
                let why = format!("members advertise {advertised:?}; the cluster runs {current}");
                if logged.as_deref() != Some(why.as_str()) {
                    tracing::info!(%why, "feature level: waiting for every member to run level {SUPPORTED_LEVEL}");
                    logged = Some(why);
                }
            }
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lowest_answering_level_wins_and_a_silent_member_holds_it() {
        let one = FeatureLevel(1);
        // Every member at this binary's level (1 today): nothing to raise from 1.
        assert_eq!(level_to_raise(one, &[Some(1), Some(1), Some(1)]), None);
        // A member of a release before feature levels counts as the baseline.
        assert_eq!(
            level_to_raise(FeatureLevel(0), &[Some(0), Some(1)]),
            Some(one)
        );
        // A member that did not answer holds the level.
        assert_eq!(level_to_raise(FeatureLevel(0), &[Some(1), None]), None);
        // No member at all: nothing.
        assert_eq!(level_to_raise(FeatureLevel(0), &[]), None);
        // Members newer than this binary: never above its own level.
        assert_eq!(
            level_to_raise(FeatureLevel(0), &[Some(SUPPORTED_LEVEL.0 + 5)]),
            Some(SUPPORTED_LEVEL)
        );
    }
}

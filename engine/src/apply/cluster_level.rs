//! The cluster's feature level ([`crate::feature_level`]): raised, never lowered.

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::feature_level::{supported_level, ClusterLevel, FeatureLevel, CLUSTER_LEVEL_KEY};
use crate::state::State;

use super::{changed, Tx};

impl State {
    /// `SetClusterLevel`: raises the cluster's level to `level`. A level at or below the
    /// cluster's changes nothing and succeeds (two leaders may propose the same raise); one
    /// above the level this binary applies is refused, naming it: the proposing node saw
    /// every member advertise it, so a binary that cannot apply it is not one of them.
    pub(super) fn set_cluster_level(
        &mut self,
        level: FeatureLevel,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let current = self.cluster_level();
        if level <= current {
            return Ok(changed(
                CLUSTER_LEVEL_KEY,
                format!("the cluster runs feature level {current} already"),
            ));
        }
        let supported = supported_level();
        if level > supported {
            return Err(CommandError::invalid(
                "level",
                format!(
                    "feature level {level} is above {supported}, the highest this node's binary \
                     applies: a level is set only once every member advertises it"
                ),
            ));
        }
        let record = ClusterLevel {
            level,
            set_at_ms: tx.now,
            set_index: tx.index,
        };
        self.cluster_level.put(record, &mut tx.changed);
        Ok(changed(
            CLUSTER_LEVEL_KEY,
            format!("the cluster runs feature level {level} (was {current})"),
        ))
    }
}

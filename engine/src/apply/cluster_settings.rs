//! The hub's settings ([`crate::settings::ClusterSettings`]).

use crate::command::CommandOutput;
use crate::error::CommandError;
use crate::settings::CLUSTER_SETTINGS_KEY;
use crate::state::State;

use super::Tx;

impl State {
    /// `SetCanaryConfigTracking`: whether a change of config or secrets alone is analysed by
    /// a canary. Setting the value it already has changes nothing.
    pub(super) fn set_canary_config_tracking(
        &mut self,
        enabled: bool,
        tx: &mut Tx,
    ) -> Result<CommandOutput, CommandError> {
        let mut settings = self.cluster_settings();
        let summary = if enabled {
            "canary config tracking on: config and secret changes are analysed"
        } else {
            "canary config tracking off: config and secret changes are promoted without analysis"
        };
        if settings.canary_config_tracking != enabled {
            settings.canary_config_tracking = enabled;
            self.cluster_settings.put(settings, &mut tx.changed);
        }
        Ok(CommandOutput::Changed {
            id: CLUSTER_SETTINGS_KEY.to_string(),
            summary: summary.to_string(),
        })
    }
}

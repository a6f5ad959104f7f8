//! The feature-level gate ([`crate::feature_level`]): a command whose level is above the
//! cluster's is refused. Apply runs it on every command of every entry (so every node
//! refuses such an entry alike and it changes nothing), and a node runs it before proposing,
//! so a write the cluster cannot take yet is refused without a log entry.

use crate::command::Command;
use crate::error::CommandError;
use crate::state::State;

/// Whether `state`'s cluster runs a feature level at or above what `command` needs
/// ([`Command::level`]; an `As` envelope needs what it wraps). The refusal names both levels
/// and the command: `the cluster runs feature level 1; set_cluster_level needs 2: upgrade
/// every node first`.
pub fn check_level(state: &State, command: &Command) -> Result<(), CommandError> {
    let (cluster, needed) = (state.cluster_level(), command.level());
    if needed > cluster {
        return Err(CommandError::FeatureLevelTooLow {
            cluster,
            needed,
            command: command.kind().to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;

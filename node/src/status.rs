//! gRPC statuses for commands the engine refused.

use hub_engine::CommandError;
use tonic::Status;

/// Maps a refused command to a gRPC status that names the problem.
pub fn command_status(e: &CommandError) -> Status {
    let msg = e.to_string();
    match e {
        CommandError::InvalidField { .. } => Status::invalid_argument(msg),
        CommandError::AlreadyExists { .. } => Status::already_exists(msg),
        CommandError::NotFound { .. } => Status::not_found(msg),
        CommandError::FailedPrecondition(_) => Status::failed_precondition(msg),
        // Typed: a client (and the upgrade test) tells "upgrade every node first" from any
        // other refusal without reading the message.
        CommandError::FeatureLevelTooLow { .. } => {
            hub_proto::refusal::Refusal::FeatureLevelTooLow.status(msg)
        }
        CommandError::PermissionDenied(_) => Status::permission_denied(msg),
    }
}

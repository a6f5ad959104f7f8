//! Who may put a command in the log, and by which path: the one classification the
//! client API's submit filter ([`crate::api::parse_submitted`]) and the leader's check of a
//! forwarded write ([`crate::node::HubNode::propose_as_leader`]) both read.
//!
//! An exhaustive `match` with no wildcard arm: a new [`Command`] variant does not compile
//! until someone decides who may send it, so none reaches operators by default.

use hub_engine::Command;

/// Where a command comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// An operator, a token or the dashboard, through `Submit` (and forwarded to the leader
    /// by the node that took it). Authorized at the node and at apply by the caller's roles.
    Client,
    /// An agent's report, through the Agent API only.
    AgentReport,
    /// A node's own record (a cluster key, a refused caller): proposed by any node for
    /// itself, forwarded to the leader like a client's write, never submitted by a client.
    NodeRecord,
    /// A decision of the leader's term (an evaluation, a canary tick, the feature level):
    /// proposed by the leader on itself only, never submitted and never forwarded, so a
    /// deposed leader's decision cannot reach the log through another node.
    LeaderDecision,
    /// The wrapper that records the verified caller (`Command::As`): built by the node from
    /// the caller's certificate or token, never taken from a request.
    ActorWrapper,
}

/// Where `command` may come from.
// Long: one arm per command; the list is the point.
pub fn origin(command: &Command) -> Origin {
    match command {
        Command::CreateEnvironment { .. }
        | Command::DeleteEnvironment { .. }
        | Command::CreateEntity { .. }
        | Command::SetEnvironmentSettings { .. }
        | Command::SetRegistry { .. }
        | Command::RemoveRegistry { .. }
        | Command::SetEntitySettings { .. }
        | Command::SetConfigOverrides { .. }
        | Command::SetSecret { .. }
        | Command::PutSecret { .. }
        | Command::CreateProduct { .. }
        | Command::SetProductWindow { .. }
        | Command::PublishRelease { .. }
        | Command::CreateChannel { .. }
        | Command::SetReleaseChannel { .. }
        | Command::RecallReleases { .. }
        | Command::DeleteRecall { .. }
        | Command::AddWindowOverride { .. }
        | Command::RemoveWindowOverride { .. }
        | Command::CreateSuppression { .. }
        | Command::DeleteSuppression { .. }
        | Command::PublishModule { .. }
        | Command::DeleteModule { .. }
        | Command::InstallModule { .. }
        | Command::SetModuleVariables { .. }
        | Command::SetModuleUpdatesPaused { .. }
        | Command::UnlinkModule { .. }
        | Command::ApproveChangeRequest { .. }
        | Command::RejectChangeRequest { .. }
        | Command::ApplyCanary { .. }
        | Command::DeleteCanary { .. }
        | Command::CanaryManual { .. }
        | Command::CancelPlans { .. }
        | Command::IssueCommand { .. }
        | Command::BindRole { .. }
        | Command::UnbindRole { .. }
        | Command::SetAuditRetention { .. }
        | Command::CreateToken { .. }
        | Command::RevokeToken { .. }
        | Command::SetEnvironmentLabels { .. }
        | Command::ApplyRolloutPolicy { .. }
        | Command::DeleteRolloutPolicy { .. }
        | Command::PromoteWave { .. }
        | Command::HaltRollout { .. }
        | Command::ResumeRollout { .. }
        | Command::SetCanaryConfigTracking { .. }
        | Command::SetApproverGroup { .. }
        | Command::DeleteApproverGroup { .. }
        | Command::SetApprovalPolicy { .. }
        | Command::RequestWindowException { .. }
        | Command::ApproveWindowException { .. }
        | Command::RejectWindowException { .. }
        | Command::InstallModuleOnChannel { .. }
        | Command::SetInstallationChannel { .. }
        | Command::SetModuleChannel { .. }
        | Command::ApplyMetricTemplate { .. }
        | Command::DeleteMetricTemplate { .. }
        | Command::RevokeCertificate { .. }
        | Command::RevokeCertificates { .. }
        | Command::ApplyAlertProvider { .. }
        | Command::DeleteAlertProvider { .. } => Origin::Client,
        Command::ReportEntityStates { .. }
        | Command::ReportSampledEntityStates { .. }
        | Command::ReportTasks { .. }
        | Command::ReportCanaries { .. }
        | Command::ReportCanariesWithSamples { .. }
        | Command::ReportTask { .. } => Origin::AgentReport,
        Command::SetClusterKey { .. } | Command::RecordRefusal { .. } => Origin::NodeRecord,
        Command::Evaluate { .. }
        | Command::ExpireSuppressions
        | Command::CanaryTick { .. }
        | Command::CanaryJudgedTick { .. }
        | Command::SetClusterLevel { .. } => Origin::LeaderDecision,
        Command::As { .. } => Origin::ActorWrapper,
    }
}

/// The command an entry carries, through the actor wrapper: `As { command }`'s command.
pub fn inner(command: &Command) -> &Command {
    if let Command::As { command, .. } = command {
        command
    } else {
        command
    }
}

/// Whether a client may submit `command` (`Submit`): only [`Origin::Client`] commands; the
/// refusal says which path the command takes instead.
pub fn check_submitted(command: &Command) -> Result<(), tonic::Status> {
    match origin(command) {
        Origin::Client => Ok(()),
        Origin::LeaderDecision | Origin::NodeRecord => Err(tonic::Status::permission_denied(
            "evaluations, canary ticks, cluster keys and the cluster's feature level are proposed by the leader only, recorded refusals by the hub's nodes",
        )),
        Origin::AgentReport => Err(tonic::Status::permission_denied(
            "agent reports go through the Agent API",
        )),
        Origin::ActorWrapper => Err(tonic::Status::permission_denied(
            "a command's actor is the caller's verified identity, never a field",
        )),
    }
}

/// Whether the leader takes `command` forwarded by another node (`Forward`): anything but a
/// leader's decision, judged on the command inside the actor wrapper (a decision wrapped in
/// a node's `As` is still a decision), and one wrapper at most.
pub fn check_forwarded(command: &Command) -> Result<(), tonic::Status> {
    let refused = |why: &str| Err(tonic::Status::permission_denied(why.to_string()));
    match origin(inner(command)) {
        Origin::Client | Origin::AgentReport | Origin::NodeRecord => Ok(()),
        Origin::LeaderDecision => refused(
            "evaluations, canary ticks and the feature level are proposed by the leader only, never forwarded",
        ),
        Origin::ActorWrapper => refused("a forwarded command carries one actor wrapper at most"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hub_engine::feature_level::LEVEL_2;
    use hub_tls::Identity;

    fn wrapped(actor: Identity, command: Command) -> Command {
        Command::As {
            actor,
            command: Box::new(command),
        }
    }

    /// A leader's decision is refused when forwarded, bare or inside a node's `As` (a
    /// deposed leader's decision must not reach the log through another node); a client's
    /// write and a node's record are taken, and a wrapper inside a wrapper is refused.
    #[test]
    fn a_leaders_decision_is_never_forwarded_even_wrapped() {
        let level = Command::SetClusterLevel { level: LEVEL_2 };
        let node = Identity::Node(2);
        for decision in [
            level.clone(),
            wrapped(node.clone(), level.clone()),
            Command::ExpireSuppressions,
            wrapped(node.clone(), Command::ExpireSuppressions),
        ] {
            let e = check_forwarded(&decision).expect_err("a decision forwarded");
            assert_eq!(e.code(), tonic::Code::PermissionDenied);
            assert!(e.message().contains("never forwarded"), "{}", e.message());
        }
        let client = Command::CreateEnvironment {
            name: "prod".into(),
            description: String::new(),
        };
        check_forwarded(&wrapped(Identity::Operator("ana".into()), client.clone()))
            .expect("an operator's write, forwarded");
        check_forwarded(&client).expect("a write, bare");
        let twice = wrapped(node.clone(), wrapped(node, client));
        assert!(check_forwarded(&twice).is_err());
    }

    /// Only a client's command is submitted; each other origin is refused with the path it
    /// takes instead.
    #[test]
    fn only_a_clients_command_is_submitted() {
        let cases = [
            (Command::ExpireSuppressions, "leader only"),
            (
                Command::ReportTasks {
                    environment: "prod".into(),
                    reports: vec![],
                },
                "Agent API",
            ),
            (
                wrapped(Identity::Node(1), Command::ExpireSuppressions),
                "never a field",
            ),
        ];
        for (command, why) in cases {
            let e = check_submitted(&command).expect_err("refused");
            assert!(e.message().contains(why), "{}", e.message());
        }
        check_submitted(&Command::DeleteEnvironment {
            name: "prod".into(),
        })
        .expect("a client's command");
    }
}

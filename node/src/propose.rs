//! The node's one way into the replicated log. Every proposal, whether a client's write, a
//! forwarded write or a leader loop's decision, goes through [`propose`]: it stamps the
//! entry's time and calls openraft's `client_write`. Nothing else in the node does either,
//! so the time every decision is made at comes from one clock read, in one place: the
//! cluster's time ([`crate::cluster_clock`]), which a skewed clock of this node cannot move.

use hub_engine::{Command, CommandError, CommandOutput, Request};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::errors::{ClientWriteError, RaftError};
use raft_store::{NodeId, Raft};
use tokio::time::Instant;

use crate::cluster_clock::ClusterClock;

/// This node's wall clock in milliseconds ([`crate::cluster_clock::local_ms`]): for what is
/// local to the node (token expiry at the listener, log lines). Proposals and the leader's
/// loops use the cluster's time instead ([`crate::node::HubNode::cluster_now_ms`]).
pub fn now_ms() -> i64 {
    crate::cluster_clock::local_ms()
}

/// The voters of `raft`'s current membership.
pub fn voters(raft: &Raft) -> Vec<NodeId> {
    let m = raft.metrics();
    let m = m.borrow_watched();
    m.membership_config.membership().voter_ids().collect()
}

/// What became of one proposal.
#[derive(Debug)]
pub enum Proposal {
    /// Committed and applied: what the command produced or why apply refused it, and the
    /// entry's log index.
    Applied {
        /// The command's result.
        result: Result<CommandOutput, CommandError>,
        /// The entry's index.
        index: u64,
    },
    /// This node is not the leader, or a leader change discarded the entry: nothing was
    /// applied; ask the leader.
    NotLeader,
    /// Not committed before the deadline (no quorum?). It may still commit later.
    TimedOut,
    /// Raft failed otherwise (shutting down, storage error).
    Failed(String),
}

/// Stamps `command` (in its current form) with the cluster's time as `clock` estimates it and
/// proposes it, waiting until `deadline`; counts it and its latency in `metrics`.
pub async fn propose(
    raft: &Raft,
    metrics: &crate::metrics::NodeMetrics,
    clock: &ClusterClock,
    command: Command,
    request_id: Option<String>,
    deadline: Instant,
) -> Proposal {
    let started = Instant::now();
    let time_ms = clock.now_ms(voters(raft));
    // A command whose meaning changed is proposed as its successor here, on the leader, so a
    // follower upgraded before its leader forwards what the leader understands (`SetSecret`
    // becomes `PutSecret`: see `Command::current_form`).
    let command = command.current_form();
    let proposal = propose_once(raft, command, time_ms, request_id, deadline).await;
    let outcome = match &proposal {
        Proposal::Applied { result: Ok(_), .. } => "applied",
        Proposal::Applied { result: Err(_), .. } => "refused",
        Proposal::NotLeader => "not_leader",
        Proposal::TimedOut => "timed_out",
        Proposal::Failed(_) => "failed",
    };
    if let Proposal::Applied { .. } = proposal {
        crate::metrics::observe(&metrics.proposal_seconds, started.elapsed());
    }
    metrics
        .proposals
        .get_or_create(&crate::metrics::OutcomeLabel {
            outcome: outcome.to_string(),
        })
        .inc();
    proposal
}

async fn propose_once(
    raft: &Raft,
    command: Command,
    time_ms: i64,
    request_id: Option<String>,
    deadline: Instant,
) -> Proposal {
    let request = Request {
        command,
        time_ms,
        request_id,
    };
    match tokio::time::timeout_at(deadline, raft.client_write(request)).await {
        Err(_) => Proposal::TimedOut,
        Ok(Ok(response)) => Proposal::Applied {
            result: response.data.result,
            index: response.log_id.index,
        },
        Ok(Err(RaftError::APIError(
            ClientWriteError::ForwardToLeader(_) | ClientWriteError::LogEntryDiscarded(_),
        ))) => Proposal::NotLeader,
        Ok(Err(e)) => Proposal::Failed(e.to_string()),
    }
}

//! One term of this node's leadership, as the leader-only loops see it: whether it still
//! lasts, and the loops' way to propose (through [`crate::propose`]).

use std::sync::Arc;

use hub_engine::{Command, CommandError, CommandOutput};
use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;
use tokio::time::Instant;

use crate::node::HubNode;
use crate::propose::{propose, Proposal};

/// One term of this node's leadership, as the leader-only loops see it.
#[derive(Clone)]
pub struct Term {
    /// This node.
    pub node: Arc<HubNode>,
    /// The Raft term.
    pub term: u64,
}

impl Term {
    /// Whether this node still leads this term.
    pub fn is_current(&self) -> bool {
        let m = self.node.raft.metrics();
        let m = m.borrow_watched();
        m.state == ServerState::Leader
            && m.current_leader == Some(self.node.id)
            && m.current_term == self.term
    }

    /// Proposes a leader decision and waits for it to apply (up to the request timeout).
    /// `Err` when it was not applied: the node no longer leads, or there was no quorum.
    pub async fn propose(
        &self,
        command: Command,
    ) -> Result<Result<CommandOutput, CommandError>, TermEnded> {
        if !self.is_current() {
            return Err(TermEnded::LostLeadership);
        }
        let deadline = Instant::now() + self.node.request_timeout;
        match propose(
            &self.node.raft,
            &self.node.metrics,
            &self.node.clock,
            command,
            None,
            deadline,
        )
        .await
        {
            Proposal::Applied { result, .. } => Ok(result),
            Proposal::NotLeader => Err(TermEnded::LostLeadership),
            Proposal::TimedOut => Err(TermEnded::TimedOut),
            Proposal::Failed(e) => Err(TermEnded::ProposalFailed(e)),
        }
    }
}

/// Why a leader loop stopped before its term ended: [`crate::leader`] then restarts the
/// term's loops, or stops them when the term is over.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TermEnded {
    /// This node no longer leads the term.
    #[error("lost leadership")]
    LostLeadership,
    /// A decision was not committed within the request timeout (no quorum?).
    #[error("proposal timed out (no quorum?)")]
    TimedOut,
    /// Raft refused the proposal (its error, as text).
    #[error("proposal failed: {0}")]
    ProposalFailed(String),
    /// The state machine's event stream closed: the node is stopping.
    #[error("state machine closed")]
    StateMachineClosed,
}

//! What a node logs about reaching its peers: once per change of state, then a reminder.
//!
//! Every Raft call to a peer (replication, heartbeats, votes, snapshots) ends as an answer or
//! as a failure, and [`crate::network`] reports each here. A peer whose calls keep failing is
//! logged when the failures have lasted [`GRACE`] (`peer unreachable`, `peer does not answer
//! in time` or `peer answers with errors`), then at most once per
//! [`hub_log_limit::Limits::remind_every`] (30 s) with the count of failed calls since, and
//! once more when it answers again (`peer reachable again`). openraft's own line per failed
//! call is dropped ([`crate::raft_log_filter`]): a dead follower cost its leader 25,000 of
//! them a second.

use std::time::{Duration, Instant};

use hub_log_limit::{Change, Limits, SharedLogLimiter};
use raft_store::NodeId;

/// How long a peer's calls must have failed before the node says so: a peer restarting
/// (a rolling restart takes it away for about a second) or a single slow answer is not news.
pub const GRACE: Duration = Duration::from_secs(1);

/// Why calls to a peer fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trouble {
    /// Refused or reset connections, or a refusal of this cluster: its process is gone, or
    /// it is not this cluster's.
    Unreachable,
    /// Calls time out: it is paused, overloaded, or cut off.
    Silent,
    /// It answers with errors (a bad reply, an unexpected status).
    Erring,
}

impl Trouble {
    fn began(self) -> &'static str {
        match self {
            Trouble::Unreachable => "peer unreachable; calls to it are retried with back-off",
            Trouble::Silent => "peer does not answer in time",
            Trouble::Erring => "peer answers with errors",
        }
    }

    fn still(self) -> &'static str {
        match self {
            Trouble::Unreachable => "peer still unreachable",
            Trouble::Silent => "peer still does not answer in time",
            Trouble::Erring => "peer still answers with errors",
        }
    }
}

/// The peers' states as this node's log shows them.
#[derive(Debug)]
pub struct PeerHealth {
    peers: SharedLogLimiter<NodeId, Trouble>,
}

impl Default for PeerHealth {
    fn default() -> Self {
        Self {
            peers: SharedLogLimiter::new(Limits::with_grace(GRACE)),
        }
    }
}

impl PeerHealth {
    /// A call to `peer` at `addr` failed with `trouble`; `error` says how.
    pub fn failed(&self, peer: NodeId, addr: &str, trouble: Trouble, error: &str) {
        let Some(n) = self.peers.failed(&peer, trouble, Instant::now()) else {
            return;
        };
        let failed_calls = n.repeats;
        let for_ms = n.lasted.as_millis() as u64;
        match n.change {
            Change::Began => {
                tracing::warn!(
                    peer,
                    addr,
                    for_ms,
                    failed_calls,
                    error,
                    "{}",
                    trouble.began()
                )
            }
            Change::Still => {
                tracing::warn!(
                    peer,
                    addr,
                    for_ms,
                    failed_calls,
                    error,
                    "{}",
                    trouble.still()
                )
            }
            Change::Ended => {}
        }
    }

    /// `peer` answered a call.
    pub fn answered(&self, peer: NodeId, addr: &str) {
        if let Some(n) = self.peers.succeeded(&peer, Instant::now()) {
            let after_ms = n.lasted.as_millis() as u64;
            tracing::info!(
                peer,
                addr,
                after_ms,
                failed_calls = n.repeats,
                "peer reachable again"
            );
        }
    }

    /// Whether calls to `peer` fail now.
    pub fn is_failing(&self, peer: NodeId) -> bool {
        self.peers.is_failing(&peer)
    }
}

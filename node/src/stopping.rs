//! The node's stop, as one signal that its long-lived calls watch.
//!
//! On SIGTERM `hub-node` hands its leadership over (if it leads), raises [`Stopping`], and
//! then lets its listener drain: it accepts no new connection and waits for the calls in
//! flight. Two kinds of call would otherwise hold that drain open for as long as their
//! other side likes:
//! - the leader's replication stream (`Raft.StreamAppend`), which the leader keeps open
//!   while idle and never ends on its own;
//! - an agent's plan long-poll, which waits up to 30 s for a change.
//!
//! Both watch [`Stopping::begun`]: the stream stops reading requests, answers the ones it
//! took and ends with UNAVAILABLE (the leader backs off and finds the port closed), and the
//! long-poll answers UNAVAILABLE at once (the agent moves to another node). What is left in
//! flight after that (unary calls) has [`DRAIN_GRACE`], after which the process exits anyway.

use std::sync::Arc;
use std::time::Duration;

use hub_proto::refusal::Refusal;
use tokio::sync::watch;

/// The longest a stopping node waits for the calls still in flight once [`Stopping`] is
/// raised, before it exits with them open. A write cut off here is retried by its client
/// with the same request id, so it applies at most once.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// The UNAVAILABLE message of a call that a stopping node ends.
pub const STOPPING_MESSAGE: &str = "this node is stopping: try another member";

/// The answer to a call that a stopping node ends or refuses: [`Refusal::Stopping`], so its
/// caller tries another node.
pub fn refusal() -> tonic::Status {
    Refusal::Stopping.status(STOPPING_MESSAGE)
}

/// Whether this node has begun to stop. Cheap to clone; every clone sees the same signal.
#[derive(Clone, Debug)]
pub struct Stopping(Arc<watch::Sender<bool>>);

impl Default for Stopping {
    fn default() -> Self {
        Stopping(Arc::new(watch::Sender::new(false)))
    }
}

impl Stopping {
    /// Raises the signal. Idempotent.
    pub fn begin(&self) {
        self.0.send_replace(true);
    }

    /// Whether the signal is raised.
    pub fn has_begun(&self) -> bool {
        *self.0.borrow()
    }

    /// Resolves once the signal is raised (at once if it already is).
    pub async fn begun(&self) {
        let mut rx = self.0.subscribe();
        // The sender lives in `self`, so the channel cannot close while this waits.
        let _ = rx.wait_for(|stopping| *stopping).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_clone_sees_the_stop_and_a_late_waiter_returns_at_once() {
        let stopping = Stopping::default();
        let waiter = {
            let s = stopping.clone();
            tokio::spawn(async move { s.begun().await })
        };
        assert!(!stopping.has_begun());
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "returned before the stop");
        stopping.clone().begin();
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter woke")
            .expect("the waiter did not panic");
        assert!(stopping.has_begun());
        tokio::time::timeout(Duration::from_secs(5), stopping.begun())
            .await
            .expect("a waiter after the stop returns at once");
        stopping.begin();
        assert!(stopping.has_begun());
    }
}

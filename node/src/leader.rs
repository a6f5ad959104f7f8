//! The leader runtime: the leader-only loops start and stop here, once per term.
//!
//! On every node one task watches Raft's metrics. When this node becomes leader of a term it
//!
//! 1. passes a read barrier, so every loop decides on a state that includes everything
//!    committed before the term (the leader's blank entry is applied);
//! 2. starts the term's loops, each with its own subscription to apply events taken before
//!    the barrier (so no committed change between the barrier and the loop's first look is
//!    missed): the [`crate::orchestrator`] (evaluations and plans), the
//!    [`crate::canary_controller`] (canary ticks), while the cluster has no revision key
//!    [`crate::cluster_keys`], and while the cluster's feature level is below this binary's
//!    [`crate::cluster_level`];
//! 3. stops them all when the node stops leading or the term changes. The loops share one
//!    fate: if one fails while the node still leads (a proposal that found no quorum), all
//!    are stopped and the term's start is repeated, rebuilding their queues from the
//!    replicated state.
//!
//! Nothing the loops hold is authoritative; everything they decide goes through
//! [`Term::propose`](crate::term::Term::propose), which refuses to propose once the node no longer leads the term.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::ServerState;
use raft_store::StateEvent;
use tokio::sync::broadcast::Receiver;
use tokio::task::JoinSet;

use crate::node::HubNode;
use crate::term::{Term, TermEnded};

/// Pause before the term's start is repeated after a failed barrier or loop.
const RESTART_AFTER: Duration = Duration::from_millis(200);

/// One of a term's loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Loop {
    Orchestrator,
    Canaries,
    ClusterKeys,
    ClusterLevel,
}

/// Starts the runtime; it runs for the life of the process and starts the loops whenever
/// this node leads.
pub fn spawn(node: Arc<HubNode>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let term = Term {
                term: wait_for_leadership(&node).await,
                node: node.clone(),
            };
            lead(&term).await;
            if term.is_current() {
                tokio::time::sleep(RESTART_AFTER).await;
            }
        }
    })
}

/// Runs the loops of `term` until the node stops leading it or one of them fails.
async fn lead(term: &Term) {
    let node = &term.node;
    let subscribe = || -> Receiver<StateEvent> { node.sm.subscribe() };
    let (orchestration_events, canary_events) = (subscribe(), subscribe());
    if let Err(e) = node.read_barrier(false).await {
        tracing::info!(node = node.id, term = term.term, error = %e.message(), "leader: no read barrier");
        return;
    }
    tracing::info!(
        node = node.id,
        term = term.term,
        "leader: starting the leader loops"
    );
    let mut loops: JoinSet<(Loop, Result<(), TermEnded>)> = JoinSet::new();
    let t = term.clone();
    loops.spawn(async move {
        let r = crate::orchestrator::run(&t, orchestration_events).await;
        (Loop::Orchestrator, r)
    });
    let t = term.clone();
    loops.spawn(async move {
        let r = crate::canary_controller::run(&t, canary_events).await;
        (Loop::Canaries, r)
    });
    if !crate::cluster_keys::has_key(node) {
        let t = term.clone();
        loops.spawn(async move { (Loop::ClusterKeys, crate::cluster_keys::run(&t).await) });
    }
    let below =
        node.state.read().state.cluster_level() < hub_engine::feature_level::SUPPORTED_LEVEL;
    if below {
        let t = term.clone();
        loops.spawn(async move { (Loop::ClusterLevel, crate::cluster_level::run(&t).await) });
    }
    let mut server = node.raft.server_metrics();
    loop {
        tokio::select! {
            changed = server.changed() => {
                if changed.is_err() || !term.is_current() {
                    tracing::info!(node = node.id, term = term.term, "leader: term over, stopping the leader loops");
                    break;
                }
            }
            ended = loops.join_next() => match ended {
                // Setting the cluster key and raising the feature level are done once; the
                // other loops run for the term.
                Some(Ok((Loop::ClusterKeys | Loop::ClusterLevel, Ok(())))) => continue,
                Some(Ok((which, result))) => {
                    tracing::info!(node = node.id, term = term.term, ?which, ?result,
                        "leader: a leader loop stopped; restarting the term's loops");
                    break;
                }
                Some(Err(e)) => {
                    tracing::error!(node = node.id, term = term.term, error = %e,
                        "leader: a leader loop panicked; restarting the term's loops");
                    break;
                }
                None => break,
            },
        }
    }
    loops.shutdown().await;
}

/// Returns the term once this node is the leader.
async fn wait_for_leadership(node: &HubNode) -> u64 {
    let mut rx = node.raft.metrics();
    loop {
        {
            let m = rx.borrow_and_update();
            if m.state == ServerState::Leader && m.current_leader == Some(node.id) {
                return m.current_term;
            }
        }
        if rx.changed().await.is_err() {
            // Raft shut down: never leader again.
            std::future::pending::<()>().await;
        }
    }
}

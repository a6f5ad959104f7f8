//! Noticing a leader whose process is gone, so that a failover takes one election timeout
//! instead of two.
//!
//! A follower refuses votes while its leader lease lasts (openraft: the longest election
//! timeout since it last heard from its leader). That keeps a follower that merely lost touch
//! from deposing a healthy leader, but after a leader crashes the first follower to time out
//! is refused by the other, whose lease still runs, and wins only at its next timeout: a
//! failover took one to two election timeouts (p99 1.2 s at the default 300–600 ms).
//!
//! A crashed leader's port refuses connections at once (the kernel answers for a process
//! that is gone), while the port of a leader that is paused, overloaded or cut off does not:
//! a connection times out, or is accepted. So a follower that has not heard from its leader
//! for two heartbeats dials the leader's address once; if the connection is refused, it drops
//! its own lease, through openraft's transfer-leader message addressed to the dead leader (a
//! recipient other than the target drops its lease and starts no election). Nothing else
//! changes: it still votes only for a candidate whose log is at least its own, and it
//! campaigns only when its own election timer fires, after a pre-vote. The first candidate
//! then wins instead of being refused. A follower that is refused while its leader lives (a
//! firewall's reset) only becomes willing to vote; the other followers' leases still protect
//! that leader.

use std::sync::Arc;
use std::time::Duration;

use openraft::async_runtime::watch::WatchReceiver;
use openraft::raft::TransferLeaderRequest;
use openraft::ServerState;

use crate::node::HubNode;
use crate::port_probe::refuses_connections;

/// Watches for a dead leader on this node until the Raft core stops. `heartbeat` is the
/// leader's heartbeat period.
pub fn spawn(node: Arc<HubNode>, heartbeat: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(heartbeat / 2);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        // The last contact a probe was made after: one probe per silence.
        let mut probed_after: Option<u64> = None;
        loop {
            tick.tick().await;
            let (leader, addr, vote) = {
                let m = node.raft.metrics();
                let m = m.borrow_watched();
                match (m.state, m.current_leader) {
                    (ServerState::Shutdown, _) => return,
                    (ServerState::Follower, Some(leader))
                        if leader != node.id && m.vote.is_committed() =>
                    {
                        let Some(n) = m.membership_config.membership().get_node(&leader) else {
                            continue;
                        };
                        (leader, n.addr.clone(), m.vote)
                    }
                    _ => continue,
                }
            };
            let contact = node.leader_contact.last_contact_ms();
            if node.leader_contact.silence() < heartbeat * 2 || probed_after == Some(contact) {
                continue;
            }
            probed_after = Some(contact);
            if !refuses_connections(&addr, heartbeat).await {
                continue;
            }
            // Addressed to the dead leader: this node only drops its lease (openraft checks
            // that the vote is still the one it holds, so a stale request changes nothing).
            let req = TransferLeaderRequest::new(vote, leader, None);
            match node.raft.handle_transfer_leader(req).await {
                Ok(_) => tracing::info!(
                    leader,
                    %addr,
                    "the leader's port refuses connections (its process is gone): this node no longer holds its leader lease"
                ),
                Err(e) => {
                    tracing::debug!(error = %e, "raft stopped");
                    return;
                }
            }
        }
    })
}

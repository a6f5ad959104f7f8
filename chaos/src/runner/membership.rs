//! The `membership` fault: the cluster's membership changed under load, through
//! `hubctl dev add-node` and `dev remove-node` (the hub's `AddNode` and `RemoveNode`).
//!
//! Three shapes, drawn from the fault's pick and the cluster's size (kept within 3..=5):
//! - **add**: a node with the next unused id is started and added (a learner that catches
//!   up, then a voter);
//! - **remove**: a member (the leader half the time) is removed and its process left running,
//!   so that it may try to campaign: it must never again be leader or be followed;
//! - **replace**: a member is killed (it "died"), removed, and a new node with a new id is
//!   added in its place.
//!
//! New nodes get ids after the initial ones; in network namespaces each has a host the
//! runner provisioned before the run ([`spare_ids`]).

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::task::block_in_place;

use super::cluster::Cluster;
use super::faults::{Fault, Scheduled};
use super::net::Network;
use crate::check::MembershipChange;

/// A membership change's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Add a node.
    Add,
    /// Remove a member, leaving its process running.
    Remove,
    /// Kill a member, remove it, add a new node.
    Replace,
}

/// The shape `pick` gives a cluster of `members` voters: add only below 5, remove only
/// above 3.
pub fn shape(pick: u64, members: usize) -> Shape {
    let wanted = match (pick >> 24) % 3 {
        0 => Shape::Add,
        1 => Shape::Remove,
        _ => Shape::Replace,
    };
    match wanted {
        Shape::Add if members >= 5 => Shape::Replace,
        Shape::Remove if members <= 3 => Shape::Replace,
        other => other,
    }
}

/// The ids new nodes may take in a run of `nodes` with `schedule`: one per membership fault
/// (each adds at most one node), after the initial ids.
pub fn spare_ids(nodes: u64, schedule: &[Scheduled]) -> Vec<u64> {
    let changes = schedule
        .iter()
        .filter(|s| s.fault == Fault::Membership)
        .count() as u64;
    (nodes + 1..=nodes + changes).collect()
}

/// How long the surviving members may take to elect a leader after a member was killed.
const ELECTION_WAIT: Duration = Duration::from_secs(20);

/// Makes one membership change; returns it (stamped when the cluster had taken it) and a
/// description. `target` is the member a remove or replace hits.
pub async fn change(
    cluster: &mut Cluster,
    net: Option<&Network>,
    target: u64,
    pick: u64,
    epoch: Instant,
) -> anyhow::Result<(MembershipChange, String)> {
    let members = cluster.nodes()?.len();
    let place = |cluster: &Cluster| -> anyhow::Result<Option<(String, String)>> {
        let Some(net) = net else { return Ok(None) };
        // The id `dev add-node` will give: one above every id used so far.
        let next = cluster
            .nodes()?
            .iter()
            .chain(&cluster.removed()?)
            .map(|n| n.id)
            .max()
            .context("a cluster without nodes")?
            + 1;
        Ok(Some((net.addr(next).to_string(), net.netns(next))))
    };
    let (added, removed, kept_running, what) = match shape(pick, members) {
        Shape::Add => {
            wait_leader(cluster, None).await?;
            let p = place(cluster)?;
            let id = block_in_place(|| cluster.add_node(p))?;
            (Some(id), None, false, format!("node {id} added"))
        }
        Shape::Remove => {
            wait_leader(cluster, None).await?;
            remove_when_led(cluster, target, true).await?;
            (
                None,
                Some(target),
                true,
                format!("node {target} removed (left running)"),
            )
        }
        Shape::Replace => {
            block_in_place(|| cluster.kill(target))?;
            // Membership changes run on the leader: when the dead node led, the others
            // first elect another (an operator would wait for it too).
            wait_leader(cluster, Some(target)).await?;
            remove_when_led(cluster, target, false).await?;
            let p = place(cluster)?;
            let id = block_in_place(|| cluster.add_node(p))?;
            (
                Some(id),
                Some(target),
                false,
                format!("node {target} killed and replaced by node {id}"),
            )
        }
    };
    Ok((
        MembershipChange {
            at_ns: epoch.elapsed().as_nanos() as u64,
            added,
            removed,
            kept_running,
        },
        what,
    ))
}

/// Waits (at most [`ELECTION_WAIT`]) until the cluster has a leader other than `not`:
/// membership changes run on the leader, and a fault just before (a whole-cluster restart, a
/// paused leader) may have left the cluster electing one, as an operator would find it.
async fn wait_leader(cluster: &Cluster, not: Option<u64>) -> anyhow::Result<()> {
    let deadline = Instant::now() + ELECTION_WAIT;
    while cluster.leader().await.is_none_or(|l| Some(l) == not) {
        if Instant::now() > deadline {
            match not {
                Some(n) => bail!("no leader other than the dead node {n} within {ELECTION_WAIT:?}"),
                None => bail!("no leader within {ELECTION_WAIT:?}"),
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// How a node's answer to a membership change begins when it knew no leader for the whole
/// request timeout: nothing was proposed.
const NO_LEADER: &str = "no leader: ";

/// Removes node `id`, again while the node `hubctl` reached knew no leader within its request
/// timeout (it waits for an election's outcome, but a whole-cluster restart may take longer),
/// within [`ELECTION_WAIT`].
async fn remove_when_led(cluster: &mut Cluster, id: u64, keep_running: bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + ELECTION_WAIT;
    loop {
        match block_in_place(|| cluster.remove_node(id, keep_running)) {
            Err(e) if e.to_string().contains(NO_LEADER) && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cluster_stays_between_three_and_five_voters() {
        let add = 0u64;
        let remove = 1u64 << 24;
        let replace = 2u64 << 24;
        assert_eq!(shape(add, 3), Shape::Add);
        assert_eq!(shape(add, 5), Shape::Replace);
        assert_eq!(shape(remove, 4), Shape::Remove);
        assert_eq!(shape(remove, 3), Shape::Replace);
        assert_eq!(shape(replace, 4), Shape::Replace);
        let s = |fault| Scheduled {
            at_ms: 0,
            fault,
            hold_ms: 0,
            pick: 0,
        };
        assert_eq!(
            spare_ids(
                3,
                &[s(Fault::Membership), s(Fault::Pause), s(Fault::Membership)]
            ),
            [4, 5]
        );
    }
}

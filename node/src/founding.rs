//! How a new cluster comes to be: its founding nodes are started with the same
//! `--initial-members 1=HOST:PORT,2=HOST:PORT,3=HOST:PORT`. The one with the lowest id
//! initialises the cluster at start while its data directory holds none; the others start
//! empty and take the founder's log when it reaches them, as any node being added does.
//! Once the directory holds a cluster, the flag is ignored. (openraft admits several nodes
//! initialised alike, but each writes its own first entry: their logs then differ at index
//! 0, and a follower that missed entries needed extra rounds to catch up.)
//!
//! This is the only way a cluster is initialised. The `InitCluster` call needs an admin, and
//! a node that holds no cluster has none: before, any operator's certificate could make a
//! freshly started node (one about to be added to a running cluster, too) a cluster of its
//! own and then bind itself its admin (issue 51). The first admin of a new cluster is still
//! the first operator to bind itself admin (`hubctl cluster init`, Nomad's ACL bootstrap).

use std::collections::BTreeMap;

use raft_store::NodeId;

use crate::node::HubNode;

/// Parses one member, `ID=HOST:PORT` (an id of 1 or more).
pub fn parse_member(s: &str) -> Result<(NodeId, String), MembersError> {
    let not_a_member = || MembersError::NotAMember(s.to_string());
    let (id, addr) = s.split_once('=').ok_or_else(not_a_member)?;
    let id: NodeId = id
        .trim()
        .parse()
        .map_err(|_| MembersError::NotAnId(id.to_string()))?;
    let addr = addr.trim();
    if id == 0 || !addr.contains(':') {
        return Err(not_a_member());
    }
    Ok((id, addr.to_string()))
}

/// Parses `--initial-members` (`ID=HOST:PORT`, comma-separated) for node `me`: every id
/// once, `me` among them.
pub fn parse_initial_members(
    s: &str,
    me: NodeId,
) -> Result<BTreeMap<NodeId, String>, MembersError> {
    let mut members = BTreeMap::new();
    for m in s.split(',').filter(|m| !m.trim().is_empty()) {
        let (id, addr) = parse_member(m)?;
        if members.insert(id, addr).is_some() {
            return Err(MembersError::Twice(id));
        }
    }
    if !members.contains_key(&me) {
        return Err(MembersError::NotListed(me));
    }
    Ok(members)
}

/// What is wrong with a `--initial-members` list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MembersError {
    /// An entry that is not `ID=HOST:PORT` with an id of 1 or more.
    #[error("{0:?} is not ID=HOST:PORT with an id of 1 or more")]
    NotAMember(String),
    /// An id that is not a number.
    #[error("{0:?} is not a node id")]
    NotAnId(String),
    /// An id listed twice.
    #[error("node {0} is listed twice")]
    Twice(NodeId),
    /// This node is not among them.
    #[error(
        "this node ({0}) is not listed: only a founding member is started with \
         --initial-members (a node to add to a running cluster is started without it)"
    )]
    NotListed(NodeId),
}

/// Initialises a new cluster of `members` on `node` if it is the founder (the lowest id) and
/// its store holds no cluster yet. Returns whether it did.
pub async fn initialize_at_start(
    node: &HubNode,
    members: BTreeMap<NodeId, String>,
) -> anyhow::Result<bool> {
    if node.raft.is_initialized().await? {
        tracing::info!("--initial-members ignored: the data directory holds a cluster");
        return Ok(false);
    }
    let founder = founder(&members);
    if founder != Some(node.id) {
        tracing::info!(
            founder,
            "--initial-members: the founder initialises the cluster; this node joins when it is reached"
        );
        return Ok(false);
    }
    node.initialize(members)
        .await
        .map_err(|e| anyhow::anyhow!("--initial-members: {}", e.message()))?;
    tracing::info!("initialised a new cluster from --initial-members");
    Ok(true)
}

/// The founding member that initialises the cluster: the lowest id.
pub fn founder(members: &BTreeMap<NodeId, String>) -> Option<NodeId> {
    members.keys().next().copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_members_name_each_node_once_and_this_one() {
        let m = parse_initial_members("3=c:3, 2=b:2,1=a:1", 2).expect("valid");
        assert_eq!(m.len(), 3);
        assert_eq!(m[&2], "b:2");
        assert_eq!(founder(&m), Some(1), "the lowest id, whatever the order");
        for (bad, want) in [
            ("1=a:1,1=b:2", MembersError::Twice(1)),
            ("1=a:1,2=b:2", MembersError::NotListed(3)),
            ("0=a:1", MembersError::NotAMember("0=a:1".into())),
            ("1=nohost", MembersError::NotAMember("1=nohost".into())),
            ("x=a:1", MembersError::NotAnId("x".into())),
            ("a:1", MembersError::NotAMember("a:1".into())),
        ] {
            assert_eq!(parse_initial_members(bad, 3), Err(want), "{bad}");
        }
        assert_eq!(
            MembersError::NotListed(3).to_string(),
            "this node (3) is not listed: only a founding member is started with \
             --initial-members (a node to add to a running cluster is started without it)"
        );
    }
}

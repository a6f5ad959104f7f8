//! The state digest a node serves is computed from the stored records, off the state lock;
//! it must equal the in-memory state's own digest at the same applied index.

use hub_engine::{Command as HubCommand, Request};
use openraft::storage::RaftStateMachine;
use openraft::vote::RaftLeaderId;
use openraft::{Entry, EntryPayload, LogId};
use raft_store::DigestFreshness;
use raft_store::NodeIdentity;

fn entry(index: u64, command: HubCommand, request_id: Option<&str>) -> raft_store::Entry {
    Entry {
        log_id: LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
            index,
        ),
        payload: EntryPayload::Normal(Request {
            command,
            time_ms: 1_000 + index as i64,
            request_id: request_id.map(str::to_string),
        }),
    }
}

#[tokio::test]
async fn the_stored_digest_equals_the_states_at_every_applied_index() {
    let dir = tempfile::tempdir().expect("tempdir");
    let identity = NodeIdentity {
        node_id: 1,
        cluster_id: "digest".into(),
    };
    let (_store, _log, mut sm) = raft_store::open(dir.path(), &identity).expect("open");
    // Records of several tables (environments, products, request ids, the entry clock),
    // names out of byte order, so the stored key order is checked against the state's.
    let commands = [
        (
            HubCommand::CreateEnvironment {
                name: "prod-b".into(),
                description: String::new(),
            },
            Some("req-2"),
        ),
        (
            HubCommand::CreateProduct {
                product_id: "com.example:zeta".into(),
                description: "z".into(),
            },
            None,
        ),
        (
            HubCommand::CreateEnvironment {
                name: "a-prod".into(),
                description: "first by name".into(),
            },
            Some("req-1"),
        ),
        (
            HubCommand::CreateProduct {
                product_id: "com.example:alpha".into(),
                description: String::new(),
            },
            Some("req-3"),
        ),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for (i, (command, request_id)) in commands.into_iter().enumerate() {
        let index = i as u64 + 1;
        sm.apply(futures::stream::iter([Ok((
            entry(index, command, request_id),
            None,
        ))]))
        .await
        .expect("apply");
        let (at, digest) = sm
            .digest(DigestFreshness::AtLeast(index))
            .await
            .expect("digest");
        let expected = sm.shared().read().state.digest();
        assert_eq!(at, index, "the digest's index is the applied one");
        assert_eq!(digest, expected, "after entry {index}");
        // Cached for the same index, and a new one after every change.
        assert_eq!(
            sm.digest(DigestFreshness::Probe)
                .await
                .expect("digest again"),
            (at, digest.clone())
        );
        assert!(seen.insert(digest), "entry {index} changed the digest");
    }
}

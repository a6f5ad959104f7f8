//! A node never applies a feature level its binary does not have (issue 56 item 4): an entry
//! raising the cluster beyond it stops the node (an error from apply, which `crash_stop`
//! turns into an exit) instead of being refused here and accepted elsewhere, and a data
//! directory a newer release left at a higher level is refused at open, before anything in
//! it is served.

use hub_engine::feature_level::{ClusterLevel, FeatureLevel, SUPPORTED_LEVEL};
use hub_engine::{Command, Record, Request};
use hub_identity::Identity;
use openraft::storage::{RaftLogStorage, RaftLogStorageExt, RaftStateMachine};
use openraft::vote::RaftLeaderId;
use openraft::{Entry, EntryPayload, LogId};
use raft_store::{NodeIdentity, StoreError, Vote};

mod common;
use common::{entry, write_raw};

fn identity() -> NodeIdentity {
    NodeIdentity {
        node_id: 1,
        cluster_id: "levels".into(),
    }
}

fn next_level() -> FeatureLevel {
    FeatureLevel(SUPPORTED_LEVEL.0 + 1)
}

#[tokio::test]
async fn an_entry_raising_the_cluster_beyond_this_binary_stops_apply() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_store, mut log, mut sm) = raft_store::open(tmp.path(), &identity()).expect("open");
    log.save_vote(&Vote::new(1, 1)).await.expect("vote");
    let first = entry(1, 1);
    log.blocking_append([first.clone()]).await.expect("append");
    sm.apply(futures::stream::iter([Ok((first, None))]))
        .await
        .expect("an ordinary entry applies");
    let raise = Entry {
        log_id: LogId::new(
            openraft::vote::leader_id_adv::CommittedLeaderId::new(1, 1),
            2,
        ),
        payload: EntryPayload::Normal(Request {
            command: Command::As {
                actor: Identity::Node(1),
                command: Box::new(Command::SetClusterLevel {
                    level: next_level(),
                }),
            },
            time_ms: 2,
            request_id: None,
        }),
    };
    let e = sm
        .apply(futures::stream::iter([Ok((raise, None))]))
        .await
        .expect_err("this binary cannot apply the next level");
    assert!(
        e.to_string()
            .contains(&format!("feature level {}", next_level())),
        "{e}"
    );
    assert_eq!(
        sm.shared().read().applied_index(),
        1,
        "nothing of it applied"
    );
}

#[tokio::test]
async fn a_state_at_a_newer_level_is_refused_at_open() {
    let tmp = tempfile::tempdir().expect("tempdir");
    drop(raft_store::open(tmp.path(), &identity()).expect("create"));
    write_raw(
        tmp.path(),
        &Record::ClusterLevel(ClusterLevel {
            level: next_level(),
            set_at_ms: 1,
            set_index: 7,
        }),
    );
    match raft_store::open(tmp.path(), &identity()) {
        Err(e @ StoreError::NewerFeatureLevel { .. }) => {
            let text = e.to_string();
            assert!(text.contains("downgrades are not supported"), "{text}");
        }
        Err(e) => panic!("another error: {e}"),
        Ok(_) => panic!("a state of a newer release was opened"),
    }
}

//! Feature levels (issue 56 item 4), with real processes: `cluster status` shows each
//! member's release and the feature level its binary applies, and the cluster's level; the
//! level is the leader's to raise, never a client's.
//!
//! Run with `cargo build --workspace --bins && cargo test -p hub-tests --test feature_level`.

use hub_tests::Cluster;

#[test]
fn cluster_status_shows_every_members_release_and_level_and_clients_cannot_set_it() {
    let cluster = Cluster::up(3, "");
    let status = cluster.wait_all_converged(hub_tests::CONVERGE_TIMEOUT, 3);
    assert_eq!(status["cluster_feature_level"], 1, "{status}");
    let members = status["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{status}");
    for m in members {
        assert_eq!(m["version"], env!("CARGO_PKG_VERSION"), "{m}");
        assert_eq!(m["feature_level"], 1, "{m}");
    }
    let table = cluster
        .hubctl(&["cluster", "status"])
        .expect_ok("table")
        .stdout;
    assert!(table.contains("feature level: 1"), "{table}");
    let refused = cluster
        .submit(serde_json::json!({"SetClusterLevel": {"level": 2}}))
        .expect_err("a client never sets the level");
    assert!(refused.contains("leader only"), "{refused}");
}

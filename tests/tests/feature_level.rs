//! Feature levels (issue 56 item 4), with real processes: `cluster status` shows each
//! member's release and the feature level its binary applies, and the cluster's level; the
//! leader raises the cluster to the level every member runs, a command of that level is then
//! accepted, and the level is the leader's to raise, never a client's. (A cluster of two
//! releases, upgraded node by node under load, is `scripts/upgrade-test.sh`.)
//!
//! Run with `cargo build --workspace --bins && cargo test -p hub-tests --test feature_level`.

use hub_engine::feature_level::SUPPORTED_LEVEL;
use hub_tests::Cluster;

#[test]
fn the_leader_raises_the_level_every_member_runs_and_clients_cannot_set_it() {
    let cluster = Cluster::up(3, "");
    let supported = u64::from(SUPPORTED_LEVEL.0);
    assert!(
        supported >= 2,
        "this binary adds commands to v0.3.0's level 1"
    );
    let status = cluster.wait_feature_level(SUPPORTED_LEVEL.0);
    let members = status["members"].as_array().expect("members");
    assert_eq!(members.len(), 3, "{status}");
    for m in members {
        assert_eq!(m["version"], env!("CARGO_PKG_VERSION"), "{m}");
        assert_eq!(m["feature_level"], supported, "{m}");
    }
    let table = cluster
        .hubctl(&["cluster", "status"])
        .expect_ok("table")
        .stdout;
    assert!(
        table.contains(&format!("feature level: {supported}")),
        "{table}"
    );
    // A command of level 2 applies now.
    cluster
        .submit(serde_json::json!({"RevokeCertificates": {"certificates": [
            {"serial": "7e57", "reason": "the level-2 batch applies", "identity": null, "not_after": null}
        ]}}))
        .expect("a level-2 command once the cluster runs level 2");
    let refused = cluster
        .submit(serde_json::json!({"SetClusterLevel": {"level": supported + 1}}))
        .expect_err("a client never sets the level");
    assert!(refused.contains("leader only"), "{refused}");
}

//! Bad input to `hubctl` and `hub-node` gets a clear error, a non-zero exit, and changes
//! nothing (SPEC S3).

use std::process::Command;
use std::time::Duration;

use hub_tests::{hub_node_bin, hubctl_raw, run_with_limit, Cluster, CONVERGE_TIMEOUT};

/// SPEC S3: an unknown flag is refused by the argument parser, naming the flag.
#[test]
fn unknown_hubctl_flag_is_refused() {
    let out = hubctl_raw(&["env", "list", "--no-such-flag"]);
    assert!(!out.success(), "{}", out.describe());
    assert_eq!(out.code(), Some(2), "clap exits 2 on usage errors: {}", out.describe());
    assert!(
        out.stderr.contains("unexpected argument") && out.stderr.contains("--no-such-flag"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.is_empty(), "{}", out.describe());

    let out = hubctl_raw(&["no-such-command"]);
    assert!(!out.success(), "{}", out.describe());
    assert!(out.stderr.contains("no-such-command"), "{}", out.describe());
}

/// An unreachable endpoint fails quickly with an error naming it.
#[test]
fn unreachable_endpoint_fails_fast_with_clear_error() {
    let out = hubctl_raw(&["-e", "127.0.0.1:1", "env", "list", "-o", "json"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.elapsed < Duration::from_secs(5),
        "took {:?}: {}",
        out.elapsed,
        out.describe()
    );
    assert!(
        out.stderr.starts_with("error: ") && out.stderr.contains("127.0.0.1:1"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.is_empty(), "{}", out.describe());

    // A malformed endpoint is refused before anything is contacted.
    let out = hubctl_raw(&["-e", "localhost", "env", "list"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("--endpoints"), "{}", out.describe());
}

/// A hub-node refuses a data directory that belongs to another node id, and the directory
/// stays usable by its owner.
#[test]
fn node_refuses_data_dir_of_another_node() {
    let mut cluster = Cluster::up(3, "");
    let out = cluster.create_env(0, "before-mismatch");
    assert!(out.success(), "{}", out.describe());
    cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);

    let node1 = cluster.node(1);
    cluster.kill9(1);
    let identity = node1.data_dir.join("hub-node.json");
    let identity_before = std::fs::read(&identity).expect("node 1 has an identity file");
    let addr = format!("127.0.0.1:{}", hub_tests::free_port());
    let out = run_with_limit(
        Command::new(hub_node_bin())
            .args(["--id", "9", "--listen", &addr])
            .arg("--data-dir")
            .arg(&node1.data_dir)
            .args(["--cluster-id", &cluster.cluster_id]),
        Duration::from_secs(60),
    );
    assert!(!out.success(), "hub-node accepted another node's data dir: {}", out.describe());
    assert!(!out.timed_out, "{}", out.describe());
    assert!(out.stderr.contains("belongs to node"), "{}", out.describe());
    assert_eq!(
        std::fs::read(&identity).unwrap(),
        identity_before,
        "the identity file was changed"
    );

    // Another cluster id on the right node id is refused too.
    let out = run_with_limit(
        Command::new(hub_node_bin())
            .args(["--id", "1", "--listen", &addr])
            .arg("--data-dir")
            .arg(&node1.data_dir)
            .args(["--cluster-id", "some-other-cluster"]),
        Duration::from_secs(60),
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(out.stderr.contains("belongs to cluster"), "{}", out.describe());

    // Its owner still starts on it, with its data.
    cluster.restart(1);
    cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    let listed = cluster
        .env_names_at(&cluster.node(1).addr, true)
        .expect("env list at node 1");
    assert_eq!(listed, ["before-mismatch"]);
}

/// A hub-node whose port is taken exits with an error naming the port, before creating its
/// data directory.
#[test]
fn node_on_port_in_use_fails_before_touching_data_dir() {
    let holder = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = holder.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("fresh-node");
    let out = run_with_limit(
        Command::new(hub_node_bin())
            .args(["--id", "1", "--listen", &format!("127.0.0.1:{port}")])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--cluster-id", "test-port-in-use"]),
        Duration::from_secs(60),
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(!out.timed_out, "hub-node kept running: {}", out.describe());
    assert!(out.stderr.contains(&port.to_string()), "{}", out.describe());
    assert!(
        !data_dir.exists(),
        "the data dir was created although the node could not start"
    );
    drop(holder);
}

/// SPEC S3: an invalid environment name is refused with a clear error and changes nothing.
#[test]
fn invalid_environment_name_changes_nothing() {
    let cluster = Cluster::up(3, "");
    let out = cluster.create_env(0, "good-one");
    assert!(out.success(), "{}", out.describe());
    let before = cluster.env_names().expect("env list");

    for bad in ["Bad Name", "", "trailing-", "9starts-with-digit", "under_score"] {
        let out = cluster.hubctl(&["env", "create", bad, "-o", "json"]);
        assert_eq!(out.code(), Some(1), "name {bad:?}: {}", out.describe());
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains("name"),
            "name {bad:?}: the error does not name the field: {}",
            out.describe()
        );
        assert!(out.stdout.is_empty(), "{}", out.describe());
    }
    let after = cluster.env_names().expect("env list");
    assert_eq!(after, before, "a refused write changed the environments");

    // A duplicate is refused the same way.
    let out = cluster.hubctl(&["env", "create", "good-one", "-o", "json"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("already exists"), "{}", out.describe());
    assert_eq!(cluster.env_names().expect("env list"), before);
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(status["members"].as_array().unwrap().len(), 3);
}

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
    assert_eq!(
        out.code(),
        Some(2),
        "clap exits 2 on usage errors: {}",
        out.describe()
    );
    assert!(
        out.stderr.contains("unexpected argument") && out.stderr.contains("--no-such-flag"),
        "{}",
        out.describe()
    );
    assert!(out.stdout.is_empty(), "{}", out.describe());

    let out = hubctl_raw(&["no-such-command"]);
    assert!(!out.success(), "{}", out.describe());
    assert!(out.stderr.contains("no-such-command"), "{}", out.describe());

    // `-o` only takes table, json or yaml.
    let out = hubctl_raw(&["-o", "xml", "env", "list"]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(out.stderr.contains("xml"), "{}", out.describe());

    // `dev up` only makes 3- or 5-node clusters, and refuses before creating anything.
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().join("cluster");
    let dir_s = dir.display().to_string();
    let out = hubctl_raw(&[
        "dev",
        "up",
        "--nodes",
        "4",
        "--data-dir",
        &dir_s,
        "--base-port",
        "0",
    ]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("--nodes"), "{}", out.describe());
    assert!(!dir.exists(), "dev up --nodes 4 created {}", dir.display());

    // `dev down` / `restart-node` on a directory without a cluster say so.
    let out = hubctl_raw(&["dev", "down", "--data-dir", &dir_s]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("cluster.json"), "{}", out.describe());
}

/// An unreachable endpoint fails quickly with an error naming it.
#[test]
fn unreachable_endpoint_fails_fast_with_clear_error() {
    let out = hubctl_raw(&["--endpoints", "127.0.0.1:1", "env", "list", "-o", "json"]);
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
    let out = hubctl_raw(&["--endpoints", "localhost", "env", "list"]);
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

    // restart-node refuses a node that is still running; so does dev up on a running cluster.
    let dir = cluster.dir().display().to_string();
    let out = hubctl_raw(&["dev", "up", "--data-dir", &dir, "--base-port", "0"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("already running"), "{}", out.describe());
    let out = hubctl_raw(&["dev", "restart-node", "--data-dir", &dir, "--id", "1"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("still running"), "{}", out.describe());
    let out = hubctl_raw(&["dev", "restart-node", "--data-dir", &dir, "--id", "7"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("no node 7"), "{}", out.describe());

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
            .args(["--cluster-id", &cluster.cluster_id, "--insecure"]),
        Duration::from_secs(60),
    );
    assert!(
        !out.success(),
        "hub-node accepted another node's data dir: {}",
        out.describe()
    );
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
            .args(["--cluster-id", "some-other-cluster", "--insecure"]),
        Duration::from_secs(60),
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("belongs to cluster"),
        "{}",
        out.describe()
    );

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
            .args(["--cluster-id", "test-port-in-use", "--insecure"]),
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

    for bad in [
        "Bad Name",
        "",
        "trailing-",
        "9starts-with-digit",
        "under_score",
    ] {
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

/// SPEC S3: bad entity input names the field at fault and changes nothing; a good entity is
/// created and listed.
#[test]
fn invalid_entity_input_changes_nothing() {
    let cluster = Cluster::up(3, "");
    let out = cluster.create_env(0, "prod");
    assert!(out.success(), "{}", out.describe());
    let entity = |extra: &[&str]| {
        let mut args = vec!["entity", "create", "-o", "json"];
        args.extend_from_slice(extra);
        cluster.hubctl(&args)
    };
    let out = entity(&[
        "--env",
        "prod",
        "--kind",
        "helmChart",
        "--name",
        "web",
        "--product",
        "acme:web",
        "--namespace",
        "web",
    ]);
    assert!(out.success(), "{}", out.describe());
    let list = || {
        let out = cluster.hubctl(&["entity", "list", "--env", "prod", "-o", "json"]);
        assert!(out.success(), "{}", out.describe());
        out.json()
    };
    let before = list();
    let entities = before.as_array().expect("entity list is an array");
    assert_eq!(entities.len(), 1, "{before}");
    assert_eq!(entities[0]["id"], "eid:prod:helmChart:web", "{before}");
    assert_eq!(entities[0]["product_id"], "acme:web", "{before}");
    assert_eq!(entities[0]["k8s_namespace"], "web", "{before}");

    let cases: [(&[&str], &str); 6] = [
        // Unknown kind.
        (
            &[
                "--env",
                "prod",
                "--kind",
                "docker",
                "--name",
                "a",
                "--product",
                "acme:a",
                "--namespace",
                "a",
            ],
            "kind",
        ),
        // helmChart without a namespace.
        (
            &[
                "--env",
                "prod",
                "--kind",
                "helmChart",
                "--name",
                "a",
                "--product",
                "acme:a",
            ],
            "k8s_namespace",
        ),
        // Product id without a group.
        (
            &[
                "--env",
                "prod",
                "--kind",
                "helmChart",
                "--name",
                "a",
                "--product",
                "nogroup",
                "--namespace",
                "a",
            ],
            "product_id",
        ),
        // Unknown environment.
        (
            &[
                "--env",
                "nowhere",
                "--kind",
                "helmChart",
                "--name",
                "a",
                "--product",
                "acme:a",
                "--namespace",
                "a",
            ],
            "not found",
        ),
        // Account on a helmChart.
        (
            &[
                "--env",
                "prod",
                "--kind",
                "helmChart",
                "--name",
                "a",
                "--product",
                "acme:a",
                "--namespace",
                "a",
                "--account",
                "123",
            ],
            "account_id",
        ),
        // Duplicate.
        (
            &[
                "--env",
                "prod",
                "--kind",
                "helmChart",
                "--name",
                "web",
                "--product",
                "acme:web",
                "--namespace",
                "web",
            ],
            "already exists",
        ),
    ];
    for (args, needle) in cases {
        let out = entity(args);
        assert_eq!(out.code(), Some(1), "{args:?}: {}", out.describe());
        assert!(
            out.stderr.starts_with("error: ") && out.stderr.contains(needle),
            "{args:?}: expected an error mentioning {needle:?}: {}",
            out.describe()
        );
    }
    assert_eq!(
        list(),
        before,
        "a refused entity write changed the entities"
    );

    // Listing entities of an unknown environment is an error, not an empty list.
    let out = cluster.hubctl(&["entity", "list", "--env", "nowhere", "-o", "json"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("not found"), "{}", out.describe());
    // So is getting an unknown environment; and an environment with entities cannot be deleted.
    let out = cluster.hubctl(&["env", "get", "nowhere", "-o", "json"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("not found"), "{}", out.describe());
    let out = cluster.hubctl(&["env", "delete", "prod", "-o", "json"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("entities"), "{}", out.describe());
    let out = cluster.hubctl(&["env", "get", "prod", "-o", "json"]);
    assert!(out.success(), "{}", out.describe());
    assert_eq!(out.json()["entities"], 1, "{}", out.stdout);
}

/// Runs hub-node with `args` on a fresh data dir and a free port; returns the output and
/// whether the data dir exists afterwards.
fn hub_node_once(args: &[&str]) -> (hub_tests::CmdOutput, bool) {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("node");
    let addr = format!("127.0.0.1:{}", hub_tests::free_port());
    let out = run_with_limit(
        Command::new(hub_node_bin())
            .args(["--id", "1", "--listen", &addr, "--cluster-id", "bad-flags"])
            .args(
                if args
                    .iter()
                    .any(|a| a.ends_with("-file") || *a == "--insecure")
                {
                    &[][..]
                } else {
                    &["--insecure"][..]
                },
            )
            .arg("--data-dir")
            .arg(&data_dir)
            .args(args)
            .env("RUST_BACKTRACE", "0"),
        Duration::from_secs(20),
    );
    (out, data_dir.exists())
}

/// SPEC S3: hub-node refuses bad flags with an error naming the flag, before touching its
/// data dir.
#[test]
fn hub_node_refuses_bad_flags_before_touching_data_dir() {
    let cases: [(&[&str], &str); 4] = [
        (&["--id", "0"], "--id"),
        (
            &["--election-min-ms", "100", "--election-max-ms", "50"],
            "--election-min-ms",
        ),
        (
            &["--heartbeat-ms", "200", "--election-min-ms", "300"],
            "--heartbeat-ms",
        ),
        (&["--log-format", "xml"], "--log-format"),
    ];
    for (args, needle) in cases {
        let (out, dir_exists) = hub_node_once(args);
        assert!(!out.success(), "{args:?} accepted: {}", out.describe());
        assert!(
            !out.timed_out,
            "{args:?}: hub-node kept running: {}",
            out.describe()
        );
        assert!(out.stderr.contains(needle), "{args:?}: {}", out.describe());
        assert!(!dir_exists, "{args:?}: the data dir was created");
    }
}

/// SPEC S3: timing flags that pass hub-node's own check but that Raft refuses must also fail
/// before the data dir is created, with an error naming the flags.
/// Regression: the store used to be opened before the Raft config was validated.
#[test]
fn hub_node_refuses_zero_timings_before_touching_data_dir() {
    let (out, dir_exists) = hub_node_once(&[
        "--heartbeat-ms",
        "0",
        "--election-min-ms",
        "0",
        "--election-max-ms",
        "1",
    ]);
    assert!(!out.success(), "{}", out.describe());
    assert!(!dir_exists, "the data dir was created: {}", out.describe());
    assert!(
        out.stderr.contains("--heartbeat-ms") || out.stderr.contains("--election-min-ms"),
        "the error does not name the flag: {}",
        out.describe()
    );
    for args in [
        ["--heartbeat-ms", "0"],
        ["--snapshot-logs", "0"],
        ["--request-timeout-ms", "0"],
    ] {
        let (out, _) = hub_node_once(&args);
        assert!(
            !out.success() && !out.timed_out,
            "{args:?} accepted: {}",
            out.describe()
        );
    }
}

/// SPEC S3: a node listening on an unspecified address must say which address peers should
/// dial; it refuses to start (before touching its data dir) instead of advertising 0.0.0.0.
#[test]
fn hub_node_on_unspecified_address_needs_advertise() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data_dir = tmp.path().join("node");
    let listen = format!("0.0.0.0:{}", hub_tests::free_port());
    let out = run_with_limit(
        Command::new(hub_node_bin())
            .args([
                "--id",
                "1",
                "--listen",
                &listen,
                "--cluster-id",
                "c",
                "--insecure",
            ])
            .arg("--data-dir")
            .arg(&data_dir)
            .env("RUST_BACKTRACE", "0"),
        Duration::from_secs(20),
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(out.stderr.contains("--advertise"), "{}", out.describe());
    assert!(!data_dir.exists(), "the data dir was created");
}

/// SPEC S1: hub-node refuses unusable TLS material, naming the file and the problem, and
/// `--insecure` anywhere but loopback, before it touches its data dir.
#[test]
fn hub_node_refuses_bad_tls_material_before_touching_data_dir() {
    use hub_tls::pki::Ca;
    use hub_tls::Identity;
    let tmp = tempfile::tempdir().expect("tempdir");
    let now = std::time::SystemTime::now();
    let pki = tmp.path().join("pki");
    let ca = Ca::init(&pki, "bad-flags", now).unwrap();
    let other = Ca::init(&tmp.path().join("other"), "bad-flags", now).unwrap();
    let host = ["127.0.0.1".to_string()];
    let n1 = ca
        .issue(&Identity::Node(1), &host, 1, now)
        .unwrap()
        .write(&pki, "node-1")
        .unwrap();
    let n2 = ca
        .issue(&Identity::Node(2), &host, 1, now)
        .unwrap()
        .write(&pki, "node-2")
        .unwrap();
    let rogue = other
        .issue(&Identity::Node(1), &host, 1, now)
        .unwrap()
        .write(&tmp.path().join("other"), "node-1")
        .unwrap();
    let empty = tmp.path().join("empty.pem");
    std::fs::write(&empty, "no certificate here\n").unwrap();
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let ca_pem = s(&ca.cert_path());
    let cases: Vec<(Vec<String>, String)> = vec![
        (
            vec![
                "--ca-file".into(),
                ca_pem.clone(),
                "--cert-file".into(),
                s(&tmp.path().join("missing.pem")),
                "--key-file".into(),
                s(&n1.key),
            ],
            "missing.pem: cannot read".into(),
        ),
        (
            vec![
                "--ca-file".into(),
                ca_pem.clone(),
                "--cert-file".into(),
                s(&n1.cert),
                "--key-file".into(),
                s(&n2.key),
            ],
            "does not match the certificate".into(),
        ),
        (
            vec![
                "--ca-file".into(),
                ca_pem.clone(),
                "--cert-file".into(),
                s(&rogue.cert),
                "--key-file".into(),
                s(&rogue.key),
            ],
            "not signed by the CA".into(),
        ),
        (
            vec![
                "--ca-file".into(),
                s(&empty),
                "--cert-file".into(),
                s(&n1.cert),
                "--key-file".into(),
                s(&n1.key),
            ],
            "empty.pem: holds no certificate".into(),
        ),
        (
            vec![
                "--ca-file".into(),
                ca_pem.clone(),
                "--cert-file".into(),
                s(&n2.cert),
                "--key-file".into(),
                s(&n2.key),
            ],
            "the certificate is for hub://bad-flags/node/2".into(),
        ),
        (
            vec!["--ca-file".into(), ca_pem.clone()],
            "missing: --cert-file, --key-file".into(),
        ),
        (
            vec![
                "--insecure".into(),
                "--advertise".into(),
                "10.0.0.1:7401".into(),
            ],
            "--insecure: refused because --advertise 10.0.0.1:7401 is not a loopback address"
                .into(),
        ),
    ];
    for (args, needle) in cases {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (out, created) = hub_node_once(&args);
        assert!(!out.success(), "{args:?}: {}", out.describe());
        assert!(
            out.stderr.contains(&needle),
            "{args:?}: want {needle:?}: {}",
            out.describe()
        );
        assert!(!created, "{args:?}: the data dir was created");
    }
}

/// SPEC S1: hub-agent refuses a certificate that is not its environment's, and plaintext
/// without `--insecure`, naming the problem, before it creates its data dir.
#[test]
fn hub_agent_refuses_bad_tls_material_before_touching_data_dir() {
    use hub_tls::pki::Ca;
    use hub_tls::Identity;
    let tmp = tempfile::tempdir().expect("tempdir");
    let now = std::time::SystemTime::now();
    let pki = tmp.path().join("pki");
    let ca = Ca::init(&pki, "c1", now).unwrap();
    let stage = ca
        .issue(&Identity::Agent("stage".into()), &[], 1, now)
        .unwrap()
        .write(&pki, "agent-stage")
        .unwrap();
    let data_dir = tmp.path().join("agent");
    let s = |p: &std::path::Path| p.to_str().unwrap().to_string();
    let base = [
        "--environment".to_string(),
        "prod".into(),
        "--endpoints".into(),
        "127.0.0.1:1".into(),
        "--data-dir".into(),
        s(&data_dir),
    ];
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--ca-file".into(),
                s(&ca.cert_path()),
                "--cert-file".into(),
                s(&stage.cert),
                "--key-file".into(),
                s(&stage.key),
            ],
            "the certificate is for hub://c1/agent/stage, but this is agent/prod",
        ),
        (Vec::new(), "--ca-file, --cert-file and --key-file"),
        (
            vec!["--insecure".into(), "--ca-file".into(), s(&ca.cert_path())],
            "--insecure: plaintext takes no --ca-file",
        ),
    ];
    for (extra, needle) in cases {
        let out = run_with_limit(
            Command::new(hub_tests::bin_dir().join("hub-agent"))
                .args(&base)
                .args(&extra)
                .env("RUST_BACKTRACE", "0"),
            Duration::from_secs(20),
        );
        assert!(!out.success(), "{extra:?}: {}", out.describe());
        assert!(
            out.stderr.contains(needle),
            "{extra:?}: want {needle:?}: {}",
            out.describe()
        );
        assert!(!data_dir.exists(), "{extra:?}: the data dir was created");
    }
}

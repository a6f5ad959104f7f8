//! Backups and restore (issue 56, docs/PRODUCTION.md "Backups"), with real processes over
//! mutual TLS: `hubctl snapshot save` from a live cluster under write load and mid-rollout,
//! every node's data directory destroyed, `hubctl snapshot restore` into a new cluster id that
//! keeps the old CA, two nodes added; the state is the backup's, the old operator's and
//! agent's certificates keep working, and the rollout in flight at the backup finishes once.
//!
//! Run with `cargo build --workspace --bins && cargo test -p hub-tests --test backup`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use hub_client::answer::ListPlans;
use hub_tests::agent::http_get;
use hub_tests::{free_port, poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::{json, Value};

const PRODUCT: &str = "com.example:demo-service";
const NEW_CLUSTER: &str = "restored";

/// A hub with environment `prod`, the demo product with its file registry, and one entity
/// whose service takes `ready_after_ms` to become ready. Returns the cluster, the entity id,
/// the service's port, the start counter and the demo package directory.
fn demo(ready_after_ms: u64) -> (Cluster, String, u16, std::path::PathBuf, std::path::PathBuf) {
    let cluster = Cluster::up(3, "--artifact-ttl-ms 500");
    let dir = cluster.package_demo();
    for command in [
        json!({"CreateEnvironment": {"name": "prod", "description": ""}}),
        json!({"SetRegistry": {"environment": "prod", "name": "local",
            "url": format!("file://{}", dir.join("registry").display()), "hub_access": "expected"}}),
        json!({"CreateProduct": {"product_id": PRODUCT, "description": "demo"}}),
    ] {
        cluster.submit(command).expect("setup");
    }
    let out = cluster
        .submit(json!({"CreateEntity": {"environment": "prod", "kind": "HelmChart", "name": "demo",
            "product_id": PRODUCT, "k8s_namespace": "demo", "account_id": null, "release_channel": null}}))
        .expect("entity");
    let entity = out["EntityCreated"].as_str().expect("id").to_string();
    let port = free_port();
    let starts = cluster.dir().join("starts.log");
    cluster
        .submit(json!({"SetConfigOverrides": {"entity": entity, "version": "0.0.0", "config": format!(
            "port: {port}\nstarts_file: {}\nready_after_ms: {ready_after_ms}\n", starts.display())}}))
        .expect("config");
    (cluster, entity, port, starts, dir)
}

fn publish(cluster: &Cluster, dir: &Path, version: &str) {
    let manifest =
        std::fs::read_to_string(dir.join(format!("manifests/demo-service-{version}.yml")))
            .expect("manifest");
    cluster
        .submit(json!({"PublishRelease": {"manifest": manifest}}))
        .unwrap_or_else(|e| panic!("publish {version}: {e}"));
}

/// Waits until one of `entity`'s plans is of `kind` to `to` in `status`.
fn wait_plan(cluster: &Cluster, entity: &str, kind: &str, to: &str, status: &str) {
    let query = ListPlans {
        entity: Some(entity.to_string()),
        limit: Some(100),
        ..ListPlans::default()
    };
    poll_until(CONVERGE_TIMEOUT * 2, || {
        let v = cluster.ask(&query).ok()?;
        v.plans
            .iter()
            .any(|p| p.kind == kind && p.to_version.as_deref() == Some(to) && p.status == status)
            .then_some(())
    })
    .unwrap_or_else(|| {
        panic!(
            "no {kind} plan to {to} {status}: {:?}\n{}",
            cluster.ask(&query),
            cluster.log_tails(20)
        )
    });
}

/// Start lines of `version` in the service's start counter.
fn starts(path: &Path, version: &str) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.split_whitespace().next() == Some(version))
        .count()
}

/// Creates environments `load-N` until `stop`, recording each one acknowledged.
fn write_load(cluster: Arc<Cluster>, stop: Arc<AtomicBool>, acked: Arc<Mutex<Vec<String>>>) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("load-{n}");
        n += 1;
        let command = json!({"CreateEnvironment": {"name": name, "description": ""}});
        if cluster.submit(command).is_ok() {
            acked.lock().unwrap().push(name);
        }
    }
}

fn env_names(cluster: &Cluster) -> Vec<String> {
    cluster.env_names().expect("env list")
}

#[test]
fn a_backup_taken_under_load_and_mid_rollout_restores_into_a_new_cluster() {
    // The service takes 8 s to become ready (a plan waits 10 s at most): the upgrade stays in
    // flight while the cluster is saved and destroyed, and ends while it is being restored.
    let (cluster, entity, port, start_log, dir) = demo(8_000);
    let cluster = Arc::new(cluster);
    let agent = cluster.start_hub_agent("prod", &[]);
    publish(&cluster, &dir, "1.0.0");
    wait_plan(&cluster, &entity, "install", "1.0.0", "succeeded");

    // Bad input first: nothing is written.
    let backup = cluster.dir().join("hub.snap");
    let viewer = hub_tls::Identity::Operator("visitor".into());
    cluster
        .hubctl_as(&viewer, &["snapshot", "save", backup.to_str().unwrap()])
        .expect_err(1, "needs admin");
    assert!(!backup.exists());

    // Saved under write load while the upgrade is running.
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let load = {
        let (c, s, a) = (cluster.clone(), stop.clone(), acked.clone());
        std::thread::spawn(move || write_load(c, s, a))
    };
    publish(&cluster, &dir, "1.1.0");
    wait_plan(&cluster, &entity, "version-change", "1.1.0", "running");
    poll_until(CONVERGE_TIMEOUT, || {
        (acked.lock().unwrap().len() >= 5).then_some(())
    })
    .expect("writes under load");
    let acked_before: Vec<String> = acked.lock().unwrap().clone();
    let saved = cluster
        .hubctl(&["snapshot", "save", backup.to_str().unwrap(), "-o", "json"])
        .expect_ok("snapshot save")
        .json();
    stop.store(true, Ordering::Relaxed);
    load.join().expect("load thread");
    let mode = std::fs::metadata(&backup)
        .expect("backup")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the backup holds secrets: owner-only");
    let status = cluster
        .hubctl(&["snapshot", "status", backup.to_str().unwrap(), "-o", "json"])
        .expect_ok("snapshot status")
        .json();
    assert_eq!(status["digest"], saved["digest"]);
    assert_eq!(status["cluster_id"], json!(cluster.cluster_id));

    // Every node's disk is lost. The agent is paused meanwhile (it keeps its connections and
    // its plan), so nothing writes to the restored node before its state is compared.
    agent.signal(libc::SIGSTOP);
    for node in cluster.nodes() {
        cluster.kill9(node.id);
        std::fs::remove_dir_all(&node.data_dir).expect("destroy a data directory");
    }

    let restored = restore_into_new_cluster(&cluster, &backup, &saved);
    agent.signal(libc::SIGCONT);

    // The state is the backup's: every write acknowledged before the save is there.
    let listed = env_names(&cluster);
    for name in &acked_before {
        assert!(
            listed.contains(name),
            "{name} was acknowledged before the save: {listed:?}"
        );
    }
    // The rollout that was in flight finishes, once, through the agent's old certificate.
    wait_plan(&cluster, &entity, "version-change", "1.1.0", "succeeded");
    poll_until(CONVERGE_TIMEOUT, || {
        let (code, body) = http_get(port, "/version")?;
        (code == 200 && body.trim() == "1.1.0").then_some(())
    })
    .expect("the service serves 1.1.0");
    assert_eq!(starts(&start_log, "1.1.0"), 1, "the upgrade ran once");
    assert_eq!(starts(&start_log, "1.0.0"), 1, "the install ran once");
    drop(restored);
}

/// Restores `backup` into node 1 of cluster [`NEW_CLUSTER`] at the old node 1's address,
/// keeping the CA, checks the digest before any write, and adds nodes 2 and 3 at their old
/// addresses. Returns the status of the converged three-node cluster.
fn restore_into_new_cluster(cluster: &Cluster, backup: &Path, saved: &Value) -> Value {
    let old = cluster.cluster_id.clone();
    let nodes = cluster.nodes();
    let data = |id: u64| cluster.dir().join(format!("restored-{id}"));
    let restore = |args: &[&str]| {
        let mut all = vec![
            "snapshot",
            "restore",
            "--snapshot",
            backup.to_str().unwrap(),
            "--id",
            "1",
            "--advertise",
            &nodes[0].addr,
            "-o",
            "json",
        ];
        all.extend_from_slice(args);
        cluster.hubctl(&all)
    };
    let dir1 = data(1);
    let dir1 = dir1.to_str().unwrap();
    // Bad input: no CA decision, the old cluster's id, a damaged file. Nothing is created.
    restore(&["--data-dir", dir1, "--cluster-id", NEW_CLUSTER]).expect_err(1, "--keep-ca");
    restore(&["--data-dir", dir1, "--cluster-id", &old, "--keep-ca"]).expect_err(1, "new id");
    // --new-ca must name a CA of the new cluster id: not the old cluster's, not a leaf.
    let pki = cluster.pki_dir();
    let old_ca = pki.join("ca.pem");
    let with_ca = |ca: &Path| {
        restore(&[
            "--data-dir",
            dir1,
            "--cluster-id",
            NEW_CLUSTER,
            "--new-ca",
            ca.to_str().unwrap(),
        ])
    };
    with_ca(&old_ca).expect_err(1, "not of the new cluster \"restored\"");
    with_ca(&pki.join("node-1.pem")).expect_err(1, "not a CA certificate");
    assert!(!data(1).exists());
    // With a CA of the new id the restore runs (into another directory, left unused).
    let fresh = cluster.dir().join("new-ca");
    hub_tests::hubctl_raw(&[
        "pki",
        "init",
        "--dir",
        fresh.to_str().unwrap(),
        "--cluster-id",
        NEW_CLUSTER,
    ])
    .expect_ok("a CA of the new cluster");
    let elsewhere = cluster.dir().join("restored-new-ca");
    let out = restore(&[
        "--data-dir",
        elsewhere.to_str().unwrap(),
        "--cluster-id",
        NEW_CLUSTER,
        "--new-ca",
        fresh.join("ca.pem").to_str().unwrap(),
    ])
    .expect_ok("a restore trusting a new CA")
    .json();
    assert_eq!(out["digest"], saved["digest"]);
    assert!(
        out["next"].as_str().unwrap_or("").contains("--ca-file"),
        "{out}"
    );
    let out = restore(&["--data-dir", dir1, "--cluster-id", NEW_CLUSTER, "--keep-ca"])
        .expect_ok("snapshot restore")
        .json();
    assert_eq!(out["digest"], saved["digest"]);

    let keep = ["--certificate-cluster", old.as_str()];
    let first = cluster.spawn_node_of(1, &nodes[0].addr, &data(1), NEW_CLUSTER, &keep);
    let (index, digest) = poll_until(CONVERGE_TIMEOUT, || cluster.digest_at(&first.addr))
        .expect("the restored node serves");
    // Its own first entry as leader (a blank one) may already be applied: the index may be
    // past the backup's; the state is the same.
    assert_eq!(
        json!(digest),
        saved["digest"],
        "the restored node holds the backup's state"
    );
    assert!(
        index >= saved["index"].as_u64().expect("index"),
        "{index} {saved}"
    );
    for node in &nodes[1..] {
        cluster.spawn_node_of(node.id, &node.addr, &data(node.id), NEW_CLUSTER, &keep);
        let id = node.id.to_string();
        cluster
            .hubctl(&["cluster", "add-node", "--id", &id, "--addr", &node.addr])
            .expect_ok("add-node");
    }
    cluster.wait_all_converged(CONVERGE_TIMEOUT * 2, 3)
}

#[test]
fn hub_node_refuses_peers_of_the_old_cluster_id() {
    // The restored cluster's Raft traffic carries its new id: a node still running with the
    // old one is refused, so the two are never mixed.
    let cluster = Cluster::up(3, "");
    let backup = cluster.dir().join("one.snap");
    cluster
        .hubctl(&["snapshot", "save", backup.to_str().unwrap()])
        .expect_ok("save");
    let addr = format!("127.0.0.1:{}", free_port());
    let dir = cluster.dir().join("restored-7");
    cluster
        .hubctl(&[
            "snapshot",
            "restore",
            "--snapshot",
            backup.to_str().unwrap(),
            "--data-dir",
            dir.to_str().unwrap(),
            "--id",
            "7",
            "--cluster-id",
            NEW_CLUSTER,
            "--advertise",
            &addr,
            "--keep-ca",
        ])
        .expect_ok("restore");
    let old = cluster.cluster_id.clone();
    let restored = cluster.spawn_node_of(
        7,
        &addr,
        &dir,
        NEW_CLUSTER,
        &["--certificate-cluster", &old],
    );
    // The old cluster's leader is told to add the restored node: its Raft calls carry the
    // old id, which the restored node refuses, so it never becomes a member of the old one.
    let out = cluster.hubctl(&[
        "cluster",
        "add-node",
        "--id",
        "7",
        "--addr",
        &restored.addr,
        "--catch-up-timeout-ms",
        "5000",
    ]);
    assert!(!out.success(), "{}", out.describe());
    let log = std::fs::read_to_string(cluster.dir().join("node-7.log")).unwrap_or_default();
    assert!(
        !log.contains("panicked"),
        "the restored node survives the old cluster's calls:\n{log}"
    );
    let status = cluster.status().expect("status");
    let members: Vec<u64> = status["members"]
        .as_array()
        .expect("members")
        .iter()
        .filter_map(|m| m["id"].as_u64())
        .collect();
    assert!(!members.contains(&7), "{status}");
}

#[test]
fn a_served_backup_is_counted_and_timestamped_in_the_metrics() {
    use hub_tests::metrics::{get, sample};
    let cluster = Cluster::up(3, "--metrics-listen 127.0.0.1:0");
    let addrs = cluster.logged_addrs("metrics at /metrics");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let admin = hub_tls::Identity::Operator(hub_tests::tls::ADMIN.into());
    // (backups served, newest success) over every node.
    let totals = || {
        let mut served = 0.0;
        let mut newest = 0.0f64;
        for (_, addr) in &addrs {
            let (status, _, body) = rt.block_on(async {
                let ch = cluster.channel_as(&admin, addr).await.expect("connect");
                get(ch, addr, None).await
            });
            assert_eq!(status, 200, "{body}");
            served += sample(&body, "hub_raft_backups_total{outcome=\"ok\"}").unwrap_or(0.0);
            let at = sample(&body, "hub_raft_backup_last_success_timestamp_seconds");
            newest = newest.max(at.expect("the gauge is always there"));
        }
        (served, newest)
    };
    assert_eq!(totals(), (0.0, 0.0));
    let backup = cluster.dir().join("m.snap");
    cluster
        .hubctl(&["snapshot", "save", backup.to_str().unwrap()])
        .expect_ok("save");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs_f64();
    let (served, newest) = totals();
    assert_eq!(served, 1.0);
    assert!((now - newest).abs() < 120.0, "newest {newest}, now {now}");
}

/// `deploy/hub-backup DIR KEEP…` with the cluster's admin credentials and this build's hubctl
/// first on PATH, as hub-backup.service runs it.
fn hub_backup(cluster: &Cluster, endpoints: &str, args: &[&str]) -> hub_tests::CmdOutput {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/hub-backup");
    let bin_dir = hub_tests::hubctl_bin()
        .parent()
        .expect("hubctl's directory")
        .to_path_buf();
    let path = std::env::join_paths(std::iter::once(bin_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))
    .expect("PATH");
    let mut cmd = std::process::Command::new(script);
    cmd.envs(cluster.hubctl_env())
        .env("HUBCTL_ENDPOINTS", endpoints)
        .env("PATH", path)
        .args(args);
    hub_tests::run_with_limit(&mut cmd, hub_tests::HUBCTL_LIMIT)
}

#[test]
fn the_scheduled_backup_keeps_the_newest_whole_backups() {
    let cluster = Cluster::up(3, "");
    let dir = cluster.dir().join("backups");
    let dir_arg = dir.to_str().unwrap();
    let names = || -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(&dir)
            .map(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    };
    let mut made = Vec::new();
    for _ in 0..3 {
        let before = names();
        hub_backup(&cluster, &cluster.endpoints(), &[dir_arg, "2"]).expect_ok("a backup");
        let after = names();
        let new: Vec<&String> = after.iter().filter(|n| !before.contains(n)).collect();
        assert_eq!(new.len(), 1, "one new backup: {after:?}");
        made.push(new[0].clone());
    }
    // The newest two are kept, each whole.
    assert_eq!(names(), made[1..].to_vec());
    for name in &made[1..] {
        let file = dir.join(name);
        cluster
            .hubctl(&["snapshot", "status", file.to_str().unwrap()])
            .expect_ok("a whole backup");
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{name}");
    }
    // A failed save removes nothing; a bad KEEP is refused.
    let out = hub_backup(&cluster, "127.0.0.1:1", &[dir_arg, "1"]);
    assert!(!out.success(), "{}", out.describe());
    assert_eq!(
        names(),
        made[1..].to_vec(),
        "nothing removed after a failure"
    );
    hub_backup(&cluster, &cluster.endpoints(), &[dir_arg, "0"])
        .expect_err(2, "KEEP must be a positive number");
}

//! Black-box cluster tests: failover, quorum loss, snapshot catch-up of a new node, and a
//! full-cluster crash. They drive `hubctl` and `hub-node` processes only.
//!
//! Run with `cargo build --workspace --bins && cargo test --workspace --test cluster --
//! --test-threads=1` (the tests start several processes each and are timing-sensitive on a
//! small machine, so run them one at a time).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use hub_client::answer::{ListProducts, Typed};
use hub_proto::refusal::Refusal;
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};

fn names(prefix: &str, range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("{prefix}-{i}")).collect()
}

/// Every name in `acked` is in `listed`; panics naming the missing ones.
#[track_caller]
fn assert_all_present(acked: &[String], listed: &[String], context: &str) {
    let listed: BTreeSet<&String> = listed.iter().collect();
    let missing: Vec<&String> = acked.iter().filter(|n| !listed.contains(n)).collect();
    assert!(
        missing.is_empty(),
        "{context}: {} acknowledged writes lost: {missing:?}",
        missing.len()
    );
}

/// Every node's local state (`env list --stale` asked at that node) lists exactly `expected`.
#[track_caller]
fn assert_every_node_lists(cluster: &Cluster, expected: &[String]) {
    let mut expected = expected.to_vec();
    expected.sort();
    for node in cluster.nodes() {
        let listed = cluster
            .env_names_at(&node.addr, true)
            .unwrap_or_else(|| panic!("env list --stale at node {} failed", node.id));
        assert_eq!(
            listed, expected,
            "node {} holds a different set of environments",
            node.id
        );
    }
}

/// The digest every member reports in a converged `cluster status`.
fn digests(status: &serde_json::Value) -> BTreeSet<String> {
    status["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["digest"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// SPEC R1, R3, R6: killing the leader mid-stream loses no acknowledged write; a new leader is
/// elected, writes continue, and the killed node catches up after a restart.
#[test]
fn leader_kill_loses_no_acknowledged_write() {
    let started = Instant::now();
    let mut cluster = Cluster::up(3, "");
    let old_leader = cluster.leader_id();

    // 500 writes from 8 concurrent writers (each a sequence of hubctl processes, entering at
    // different nodes so followers forward to the leader). SPEC R3.
    const THREADS: usize = 8;
    let all = names("w", 0..500);
    let acked = Mutex::new(Vec::new());
    let failed = Mutex::new(Vec::new());
    let acked_count = AtomicUsize::new(0);
    let killed = AtomicBool::new(false);
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (acked, failed, acked_count, all, cluster) =
                (&acked, &failed, &acked_count, &all, &cluster);
            s.spawn(move || {
                for name in all.iter().skip(t).step_by(THREADS) {
                    let out = cluster.create_env(t, name);
                    if out.success() {
                        acked.lock().unwrap().push(name.clone());
                        acked_count.fetch_add(1, Ordering::SeqCst);
                    } else {
                        failed
                            .lock()
                            .unwrap()
                            .push((name.clone(), out.stderr.clone()));
                    }
                }
            });
        }
        // SPEC R6: kill -9 the leader while the writers are running.
        let reached = poll_until(Duration::from_secs(120), || {
            (acked_count.load(Ordering::SeqCst) >= 200).then_some(())
        });
        assert!(
            reached.is_some(),
            "fewer than 200 writes acknowledged in 120 s"
        );
        let at_kill = acked_count.load(Ordering::SeqCst);
        cluster.kill9(old_leader);
        killed.store(true, Ordering::SeqCst);
        eprintln!("killed leader {old_leader} after {at_kill} acknowledged writes");
        assert!(
            at_kill < 480,
            "the writers were (nearly) done before the leader was killed"
        );
    });
    assert!(killed.load(Ordering::SeqCst));
    let mut acked = acked.into_inner().unwrap();
    let failed = failed.into_inner().unwrap();
    eprintln!(
        "phase 1: {} acknowledged, {} failed around the failover ({:?})",
        acked.len(),
        failed.len(),
        started.elapsed()
    );
    // Writes failing around the failover are allowed, but most must have gone through.
    assert!(
        acked.len() >= 400,
        "only {} of 500 writes acknowledged; failures: {:?}",
        acked.len(),
        &failed[..failed.len().min(5)]
    );
    for (name, stderr) in &failed {
        assert!(
            stderr.starts_with("error: "),
            "write {name} failed without a clear error: {stderr:?}"
        );
    }

    // A new leader (another node) is elected.
    let new_leader = cluster.wait_leader(CONVERGE_TIMEOUT, |id| id != old_leader);
    assert_ne!(new_leader, old_leader);

    // Writes continue with one node down: 50 more, every one acknowledged.
    let more = names("x", 0..50);
    let (more_acked, more_failed) = cluster.create_envs_parallel(&more, 4);
    assert!(
        more_failed.is_empty(),
        "writes failed after the new leader was elected: {more_failed:?}"
    );
    acked.extend(more_acked);

    // The killed node restarts on its data and catches up: all three digests equal. SPEC R1.
    cluster.restart(old_leader);
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");

    // No acknowledged write was lost (linearizable read), and every node's local copy holds
    // exactly the same environments.
    let listed = cluster.env_names().expect("env list");
    assert_all_present(&acked, &listed, "after leader kill and restart");
    assert_every_node_lists(&cluster, &listed);
    // Nothing that was never written appears.
    let known: BTreeSet<String> = all.iter().chain(more.iter()).cloned().collect();
    let unknown: Vec<&String> = listed.iter().filter(|n| !known.contains(*n)).collect();
    assert!(unknown.is_empty(), "unexpected environments: {unknown:?}");
    eprintln!(
        "leader_kill_loses_no_acknowledged_write took {:?}",
        started.elapsed()
    );
}

/// SPEC R1, R3: a 5-node cluster serves with any 2 nodes down, fails writes cleanly (within the
/// request timeout, naming the cause) without a majority, and recovers when they return.
#[test]
fn five_nodes_survive_two_failures_and_fail_cleanly_without_quorum() {
    let started = Instant::now();
    let mut cluster = Cluster::up(5, "");
    let (before, failed) = cluster.create_envs_parallel(&names("b", 0..20), 4);
    assert!(
        failed.is_empty(),
        "writes failed on a healthy cluster: {failed:?}"
    );
    let mut acked = before;

    // Kill the leader and one follower.
    let leader = cluster.leader_id();
    let follower = (1..=5).find(|id| *id != leader).unwrap();
    cluster.kill9(leader);
    cluster.kill9(follower);
    let down = [leader, follower];

    // Three of five is a majority: a new leader, writes and reads succeed.
    let new_leader = cluster.wait_leader(CONVERGE_TIMEOUT, |id| !down.contains(&id));
    for (i, name) in names("c", 0..10).into_iter().enumerate() {
        let out = cluster.create_env(i, &name);
        assert!(out.success(), "write with 2 of 5 down: {}", out.describe());
        acked.push(name);
    }
    let listed = cluster
        .env_names()
        .expect("linearizable read with 2 of 5 down");
    assert_all_present(&acked, &listed, "with 2 of 5 nodes down");
    let get = cluster.hubctl(&["env", "get", "c-3", "-o", "json"]);
    assert!(
        get.success(),
        "env get with 2 of 5 down: {}",
        get.describe()
    );
    assert_eq!(get.json()["name"], "c-3");

    // Kill a third node (a follower, so the surviving leader must notice it has no quorum).
    let third = (1..=5)
        .find(|id| !down.contains(id) && *id != new_leader)
        .unwrap();
    cluster.kill9(third);
    let out = cluster.hubctl(&["env", "create", "no-quorum-write", "-o", "json"]);
    assert!(
        !out.success(),
        "a write succeeded with 2 of 5 nodes up: {}",
        out.describe()
    );
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.elapsed < Duration::from_secs(20),
        "the failing write took {:?} (should fail within the request timeout)",
        out.elapsed
    );
    assert!(
        out.stderr.contains("no leader")
            || out.stderr.contains("no quorum")
            || out.stderr.contains("cut off"),
        "the error does not say why: {}",
        out.describe()
    );

    // Bring all three back: the cluster converges on all 5 nodes and accepts writes.
    for id in [leader, follower, third] {
        cluster.restart(id);
    }
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 5);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    let out = cluster.create_env(0, "after-recovery");
    assert!(out.success(), "write after recovery: {}", out.describe());
    acked.push("after-recovery".into());
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 5);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    let listed = cluster.env_names().expect("env list after recovery");
    assert_all_present(&acked, &listed, "after recovery");
    assert_every_node_lists(&cluster, &listed);
    eprintln!("five_nodes_… took {:?}", started.elapsed());
}

/// SPEC R5: a node added after the log prefix was purged catches up by snapshot and becomes a
/// voting follower with the same state.
#[test]
fn new_node_catches_up_by_snapshot_after_log_purge() {
    let started = Instant::now();
    let cluster = Cluster::up(3, "--snapshot-logs 50 --keep-logs 5");
    // `dev up` opens loopback for outbound calls first (docs/SECURITY.md "Outbound addresses").
    assert_eq!(
        cluster.node_args,
        [
            "--outbound-allow",
            "127.0.0.0/8,::1/128",
            "--snapshot-logs",
            "50",
            "--keep-logs",
            "5"
        ]
    );
    let (acked, failed) = cluster.create_envs_parallel(&names("s", 0..300), 6);
    assert!(
        failed.is_empty(),
        "writes failed on a healthy cluster: {failed:?}"
    );
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);

    // >300 entries with a snapshot every 50: every node has built a snapshot (and purged the
    // log behind it, keeping 5 entries).
    for node in cluster.nodes() {
        let snap = node.data_dir.join("snapshots").join("current.snap");
        let built = poll_until(CONVERGE_TIMEOUT, || snap.exists().then_some(()));
        assert!(
            built.is_some(),
            "node {} never wrote {}",
            node.id,
            snap.display()
        );
    }
    let leader = cluster.leader_id();
    let (leader_applied, _) = cluster
        .digest_at(&cluster.node(leader).addr)
        .expect("leader digest");
    assert!(
        leader_applied > 300,
        "leader applied only {leader_applied}: {status}"
    );

    // Start node 4 (fresh data dir, free port, same cluster id and node args) and add it.
    let new = cluster.spawn_node(4, &[]);
    let out = cluster.hubctl(&[
        "cluster", "add-node", "--id", "4", "--addr", &new.addr, "-o", "json",
    ]);
    assert!(out.success(), "add-node: {}", out.describe());
    let reply = out.json();
    let member4 = reply["members"]
        .as_array()
        .expect("members in add-node reply")
        .iter()
        .find(|m| m["id"] == 4)
        .unwrap_or_else(|| panic!("add-node reply lacks node 4: {reply}"));
    assert_eq!(member4["voter"], true, "{reply}");

    // Node 4 reaches the leader's state (as of before it was added, or later).
    let leader_addr = cluster.node(leader).addr;
    let mut last = None;
    let caught_up = poll_until(CONVERGE_TIMEOUT, || {
        let mine = cluster.digest_at(&new.addr)?;
        let theirs = cluster.digest_at(&leader_addr)?;
        last = Some((mine.clone(), theirs.clone()));
        (mine.1 == theirs.1 && mine.0 >= leader_applied).then_some(mine)
    });
    assert!(
        caught_up.is_some(),
        "node 4 did not catch up within {CONVERGE_TIMEOUT:?}: (node 4, leader) = {last:?}\n{}",
        cluster.log_tails(20)
    );

    // It caught up by snapshot: the log prefix it needed was purged on the leader.
    let snap = new.data_dir.join("snapshots").join("current.snap");
    assert!(snap.exists(), "node 4 has no {}", snap.display());
    let log = std::fs::read_to_string(cluster.dir().join("node-4.log")).unwrap_or_default();
    assert!(
        log.contains("installed snapshot"),
        "node 4 did not install a snapshot; its log:\n{log}"
    );

    // `cluster status` lists 4 members, node 4 a follower, all converged.
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 4);
    let role4 = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == 4)
        .map(|m| m["role"].clone());
    assert_eq!(role4, Some("follower".into()), "{status}");
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");

    // Node 4 serves reads of the full state, and a write through it commits.
    let listed = cluster
        .env_names_at(&new.addr, false)
        .expect("linearizable read at node 4");
    assert_all_present(&acked, &listed, "at node 4");
    let out = cluster.hubctl_at(&new.addr, &["env", "create", "via-node-4", "-o", "json"]);
    assert!(out.success(), "write through node 4: {}", out.describe());

    // A node that caught up by snapshot keeps that state across kill -9 and restart (its log
    // starts after the snapshot). SPEC R1.
    cluster.kill9(4);
    let restarted = cluster.restart_spawned(4);
    assert_eq!(restarted.addr, new.addr);
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 4);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    let listed = cluster
        .env_names_at(&new.addr, true)
        .expect("env list --stale at node 4");
    assert_all_present(&acked, &listed, "at node 4 after its restart");
    assert!(listed.contains(&"via-node-4".to_string()));
    eprintln!("new_node_… took {:?}", started.elapsed());
}

/// SPEC R5: a follower that was down while the leader purged the entries it lacks catches up
/// by snapshot when it returns, replacing its older state.
#[test]
fn lagging_node_catches_up_by_snapshot() {
    let mut cluster = Cluster::up(3, "--snapshot-logs 50 --keep-logs 5");
    let (mut acked, failed) = cluster.create_envs_parallel(&names("l", 0..40), 4);
    assert!(failed.is_empty(), "{failed:?}");
    cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    let leader = cluster.leader_id();
    let lagging = (1..=3).find(|id| *id != leader).unwrap();
    cluster.kill9(lagging);
    // The lagging node has applied at most what the leader had when it was killed.
    let (lagging_applied, _) = cluster
        .digest_at(&cluster.node(leader).addr)
        .expect("leader digest");

    // 200 more writes with one node down: 4 snapshots later, its log position is purged.
    let (more, failed) = cluster.create_envs_parallel(&names("m", 0..200), 6);
    assert!(
        failed.is_empty(),
        "writes with 2 of 3 up: {:?}",
        &failed[..failed.len().min(5)]
    );
    acked.extend(more);
    let (leader_applied, _) = cluster
        .digest_at(&cluster.node(leader).addr)
        .expect("leader digest");
    assert!(
        leader_applied >= lagging_applied + 200,
        "{leader_applied} vs {lagging_applied}"
    );

    let log_path = cluster.dir().join(format!("node-{lagging}.log"));
    let log_start = std::fs::metadata(&log_path).map(|m| m.len()).unwrap_or(0) as usize;
    cluster.restart(lagging);
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    let text = std::fs::read(&log_path).unwrap_or_default();
    let new_log = String::from_utf8_lossy(&text[log_start.min(text.len())..]).into_owned();
    assert!(
        new_log.contains("installed snapshot"),
        "node {lagging} caught up without installing a snapshot although the log was purged:\n{new_log}"
    );
    let listed = cluster
        .env_names_at(&cluster.node(lagging).addr, true)
        .expect("env list --stale at the lagging node");
    assert_all_present(&acked, &listed, "at the node that lagged");
    assert_every_node_lists(&cluster, &listed);

    // And it keeps that state across another crash and restart.
    cluster.kill9(lagging);
    cluster.restart(lagging);
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    assert_every_node_lists(&cluster, &listed);
}

/// SPEC R1, R6: every node killed at once while writes are in flight (and, separately, all
/// stopped gracefully) loses no acknowledged write; `dev up` on the same directory restarts
/// the nodes on their data without re-initializing.
#[test]
fn whole_cluster_crash_and_restart_keeps_acknowledged_writes() {
    let started = Instant::now();
    let mut cluster = Cluster::up(3, "");

    // Writers running; once 60 writes are acknowledged, kill -9 every node at once.
    const THREADS: usize = 4;
    let all = names("d", 0..400);
    let acked = Mutex::new(Vec::new());
    let acked_count = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let nodes = cluster.nodes();
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (acked, acked_count, stop, all, cluster) =
                (&acked, &acked_count, &stop, &all, &cluster);
            s.spawn(move || {
                for name in all.iter().skip(t).step_by(THREADS) {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if cluster.create_env(t, name).success() {
                        acked.lock().unwrap().push(name.clone());
                        acked_count.fetch_add(1, Ordering::SeqCst);
                    }
                }
            });
        }
        let reached = poll_until(Duration::from_secs(120), || {
            (acked_count.load(Ordering::SeqCst) >= 60).then_some(())
        });
        assert!(
            reached.is_some(),
            "fewer than 60 writes acknowledged in 120 s"
        );
        std::thread::scope(|k| {
            for n in &nodes {
                let cluster = &cluster;
                k.spawn(move || cluster.kill9(n.id));
            }
        });
        stop.store(true, Ordering::SeqCst);
    });
    let mut acked = acked.into_inner().unwrap();
    eprintln!(
        "{} writes acknowledged before every node was killed",
        acked.len()
    );
    for n in &nodes {
        assert!(!cluster.is_running(n.id), "node {} still running", n.id);
    }

    // Reads fail while everything is down (a clear error, not a hang).
    let out = cluster.hubctl(&["env", "list", "-o", "json"]);
    assert!(
        !out.success(),
        "env list with every node down: {}",
        out.describe()
    );
    assert!(out.stderr.starts_with("error: "), "{}", out.describe());

    // `dev up` on the existing directory restarts the nodes without re-initializing.
    let dir = cluster.dir().display().to_string();
    let up = dev_up(&dir);
    cluster.reload();
    assert!(up.success(), "dev up on existing dir: {}", up.describe());
    for n in cluster.nodes() {
        assert!(
            cluster.is_running(n.id),
            "node {} not running after dev up",
            n.id
        );
    }
    let after = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(digests(&after).len(), 1, "digests differ: {after}");
    let listed = cluster.env_names().expect("env list after restart");
    assert_all_present(&acked, &listed, "after kill -9 of every node");
    // Only names that were sent may appear (unacknowledged ones may or may not have committed).
    assert!(listed.iter().all(|n| all.contains(n)), "{listed:?}");
    assert_every_node_lists(&cluster, &listed);
    let survived = listed.clone();

    // Writes work again; then a graceful `dev down` + `dev up` keeps everything too.
    let (more, failed) = cluster.create_envs_parallel(&names("e", 0..20), 4);
    assert!(failed.is_empty(), "writes failed after restart: {failed:?}");
    acked.extend(more.iter().cloned());
    let before_down = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    let down = dev_down(&dir);
    assert!(down.success(), "dev down: {}", down.describe());
    for n in cluster.nodes() {
        assert!(!cluster.is_running(n.id), "node {} survived dev down", n.id);
    }
    let up = dev_up(&dir);
    cluster.reload();
    assert!(up.success(), "dev up after dev down: {}", up.describe());
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    // Nothing was written in between: the very same state as before `dev down`.
    assert_eq!(
        digests(&status),
        digests(&before_down),
        "state changed across down/up"
    );
    let listed = cluster.env_names().expect("env list after dev down/up");
    let mut expected = survived;
    expected.extend(more);
    expected.sort();
    assert_eq!(
        listed, expected,
        "environments changed across dev down + dev up"
    );
    assert_all_present(&acked, &listed, "after dev down + dev up");
    assert_every_node_lists(&cluster, &listed);
    eprintln!("whole_cluster_… took {:?}", started.elapsed());
}

/// SPEC R3: a write acknowledged through one node is visible to a (default, linearizable)
/// read through any other node right away.
#[test]
fn reads_on_any_node_see_acknowledged_writes() {
    let cluster = Cluster::up(3, "");
    let nodes = cluster.nodes();
    for i in 0..30 {
        let name = format!("r-{i}");
        let writer = &nodes[i % 3];
        let reader = &nodes[(i + 1) % 3];
        let out = cluster.hubctl_at(&writer.addr, &["env", "create", &name, "-o", "json"]);
        assert!(
            out.success(),
            "write at node {}: {}",
            writer.id,
            out.describe()
        );
        let reply = out.json();
        assert!(reply["index"].as_u64().is_some_and(|i| i > 0), "{reply}");
        let out = cluster.hubctl_at(&reader.addr, &["env", "get", &name, "-o", "json"]);
        assert!(
            out.success(),
            "write {name} acknowledged at node {} but not visible at node {}: {}",
            writer.id,
            reader.id,
            out.describe()
        );
        assert_eq!(out.json()["name"], name.as_str());
        // The digest read at the reader is at least at the write's index.
        let out = cluster.hubctl_at(&reader.addr, &["digest", "-o", "json"]);
        assert!(out.success(), "{}", out.describe());
        assert!(
            out.json()["applied_index"].as_u64() >= reply["index"].as_u64(),
            "linearizable digest at node {} is behind write {reply}: {}",
            reader.id,
            out.stdout
        );
    }
}

/// A leader asked to remove itself hands the leadership over first and the new leader
/// removes it: the members are never left following a removed node (which they would refuse
/// to hear from) for an election timeout.
#[test]
fn a_leader_removing_itself_hands_over_first() {
    let cluster = Cluster::up(3, "");
    let (_, failed) = cluster.create_envs_parallel(&names("h", 0..5), 3);
    assert!(failed.is_empty(), "{failed:?}");
    let leader = cluster.leader_id();
    let out = cluster.hubctl(&[
        "cluster",
        "remove-node",
        "--id",
        &leader.to_string(),
        "-o",
        "json",
    ]);
    assert!(out.success(), "remove-node {leader}: {}", out.describe());
    // At once, not eventually: every remaining member already follows another leader.
    for n in cluster.nodes().iter().filter(|n| n.id != leader) {
        let s = cluster.status_at(&n.addr).expect("status of a member");
        assert_ne!(
            s["leader"], leader,
            "node {} still follows the removed leader: {s}",
            n.id
        );
        assert!(
            s["leader"].as_u64().is_some(),
            "node {} has no leader: {s}",
            n.id
        );
    }
    let rest = cluster.endpoints_except(leader);
    let out = cluster.hubctl_at(&rest, &["env", "create", "after-self-removal"]);
    assert!(out.success(), "{}", out.describe());
    // The removed node still runs. Its clients hear that it is no member (UNAVAILABLE: move
    // on), not the leader's refusal of the node, which a client would take as final: a
    // write through it alone fails naming the reason, and with another node listed after it
    // the write goes through that one.
    let removed = cluster
        .nodes()
        .iter()
        .find(|n| n.id == leader)
        .expect("the removed node")
        .addr
        .clone();
    let out = cluster.hubctl_at(&removed, &["env", "create", "through-the-removed-node"]);
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("not a member of the cluster") && !out.stderr.contains("may not call"),
        "{}",
        out.describe()
    );
    let both = format!("{removed},{rest}");
    let out = cluster.hubctl_at(&both, &["env", "create", "past-the-removed-node"]);
    assert!(out.success(), "{}", out.describe());
}

/// SPEC R5: a dead node is replaced at runtime: removed, a new node added, and the new node is
/// a real voter (the cluster keeps a majority with it when another original node dies).
#[test]
fn dead_node_is_replaced() {
    let cluster = Cluster::up(3, "");
    let (mut acked, failed) = cluster.create_envs_parallel(&names("p", 0..30), 3);
    assert!(failed.is_empty(), "{failed:?}");
    let leader = cluster.leader_id();
    let dead = (1..=3).find(|id| *id != leader).unwrap();
    cluster.kill9(dead);

    let dead_s = dead.to_string();
    let out = cluster.hubctl(&["cluster", "remove-node", "--id", &dead_s, "-o", "json"]);
    assert!(out.success(), "remove-node {dead}: {}", out.describe());
    let ids: Vec<u64> = out.json()["members"]
        .as_array()
        .expect("members")
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert!(
        !ids.contains(&dead),
        "node {dead} still a member: {}",
        out.stdout
    );
    assert_eq!(ids.len(), 2, "{}", out.stdout);
    // Removing it again is refused with a clear error.
    let out = cluster.hubctl(&["cluster", "remove-node", "--id", &dead_s]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("not a member"), "{}", out.describe());

    let out = cluster.create_env(0, "after-removal");
    assert!(
        out.success(),
        "write with 2 of 2 voters: {}",
        out.describe()
    );
    acked.push("after-removal".into());

    let new = cluster.spawn_node(4, &[]);
    let out = cluster.hubctl(&[
        "cluster", "add-node", "--id", "4", "--addr", &new.addr, "-o", "json",
    ]);
    assert!(out.success(), "add-node 4: {}", out.describe());
    // Adding it again with the same address is idempotent (a retried add-node is safe)...
    let out = cluster.hubctl(&["cluster", "add-node", "--id", "4", "--addr", &new.addr]);
    assert!(out.success(), "{}", out.describe());
    // ...but the same id at another address is refused: node ids are never reused.
    let elsewhere = format!("127.0.0.1:{}", hub_tests::free_port());
    let out = cluster.hubctl(&["cluster", "add-node", "--id", "4", "--addr", &elsewhere]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("already a member"),
        "{}",
        out.describe()
    );
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    let ids: BTreeSet<u64> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    let other = (1..=3).find(|id| *id != leader && *id != dead).unwrap();
    assert_eq!(ids, BTreeSet::from([leader, other, 4]), "{status}");

    // Kill the remaining original follower: {leader, 4} is a majority of 3 only if node 4
    // votes and acknowledges.
    cluster.kill9(other);
    let out = cluster.hubctl_at(
        &cluster.node(leader).addr,
        &["env", "create", "with-new-voter", "-o", "json"],
    );
    assert!(
        out.success(),
        "write with the leader and node 4 only: {}",
        out.describe()
    );
    acked.push("with-new-voter".into());
    let listed = cluster
        .env_names_at(&new.addr, false)
        .expect("linearizable read at node 4");
    assert_all_present(&acked, &listed, "after replacing a node");
}

fn dev_up(dir: &str) -> hub_tests::CmdOutput {
    hub_tests::hubctl_raw(&[
        "dev",
        "up",
        "--nodes",
        "3",
        "--data-dir",
        dir,
        "--base-port",
        "0",
        "-o",
        "json",
    ])
}

fn dev_down(dir: &str) -> hub_tests::CmdOutput {
    hub_tests::hubctl_raw(&["dev", "down", "--data-dir", dir, "-o", "json"])
}

/// SPEC R2, R3, R6: a leader paused (SIGSTOP) long enough to be replaced does not serve
/// stale linearizable reads or commit anything once it resumes.
#[test]
fn paused_leader_does_not_serve_stale_reads() {
    let cluster = Cluster::up(3, "");
    let out = cluster.create_env(0, "p-0");
    assert!(out.success(), "{}", out.describe());
    for round in 1..=3 {
        let old = cluster.leader_id();
        let others = cluster.endpoints_except(old);
        cluster.signal(old, libc::SIGSTOP);
        let new = cluster.wait_leader_at(&others, CONVERGE_TIMEOUT, |id| id != old);
        let name = format!("p-{round}");
        let out = cluster.hubctl_at(&others, &["env", "create", &name, "-o", "json"]);
        assert!(
            out.success(),
            "write while {old} is paused: {}",
            out.describe()
        );
        cluster.signal(old, libc::SIGCONT);
        // Right after it resumes, the old leader may still believe it leads: a linearizable
        // read through it must see the write (or fail), never miss it.
        let addr = cluster.node(old).addr;
        let out = cluster.hubctl_at(&addr, &["env", "get", &name, "-o", "json"]);
        if out.success() {
            assert_eq!(out.json()["name"], name.as_str());
        } else {
            assert!(
                !out.stderr.contains("not found"),
                "stale read at the deposed leader {old} (new leader {new}): {}",
                out.describe()
            );
        }
        let listed = cluster
            .env_names_at(&addr, false)
            .expect("linearizable list at the old leader");
        assert!(listed.contains(&name), "old leader {old} lists {listed:?}");
        let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
        assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
    }
}

/// SPEC R1, R5: adding a node that is not reachable (not started yet, wrong address) must not
/// make it a voter before it has caught up: the cluster must keep tolerating the loss of one
/// of its original three nodes.
///
/// Regression: `add_learner(.., blocking = true)` treats any learner within
/// `replication_lag_threshold` entries as caught up, even one that never answered, so an
/// unreachable node used to become a voter at once (4 voters, 1 dead).
#[test]
fn add_node_of_unreachable_address_keeps_fault_tolerance() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let nowhere = format!("127.0.0.1:{}", hub_tests::free_port());
    let out = cluster.hubctl(&[
        "--timeout-ms",
        "10000",
        "cluster",
        "add-node",
        "--id",
        "4",
        "--addr",
        &nowhere,
        "-o",
        "json",
    ]);
    eprintln!("add-node of an unreachable node: {}", out.describe());
    assert!(
        !out.success() && out.stderr.contains("not reachable"),
        "add-node of an unreachable node must fail clearly: {}",
        out.describe()
    );
    // Losing one original follower must leave a working majority.
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.kill9(follower);
    // A fresh name per attempt: a timed-out attempt may still commit later.
    let mut attempt = 0;
    let ok = poll_until(Duration::from_secs(30), || {
        attempt += 1;
        let name = format!("still-writable-{attempt}");
        cluster.create_env(0, &name).success().then_some(())
    });
    assert!(
        ok.is_some(),
        "after add-node of an unreachable node, one dead follower of three stops all writes; \
         status: {:?}",
        cluster.status()
    );
}

/// SPEC R1, R5: with one of three nodes down (a working majority), `add-node` of a node that
/// is not reachable must not wedge the cluster.
///
/// Regression: the promotion to voter (joint configuration {1,2,3} + {1,2,3,4}) needs 3 of 4
/// acknowledgements; with only 2 nodes answering it never committed, and every later write
/// failed with "no quorum".
#[test]
fn add_node_of_unreachable_address_does_not_wedge_degraded_cluster() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let follower = (1..=3).find(|id| *id != leader).unwrap();
    cluster.kill9(follower);
    let out = cluster.create_env(0, "before-add");
    assert!(out.success(), "write with 2 of 3 up: {}", out.describe());

    let nowhere = format!("127.0.0.1:{}", hub_tests::free_port());
    let out = cluster.hubctl(&[
        "--timeout-ms",
        "10000",
        "cluster",
        "add-node",
        "--id",
        "4",
        "--addr",
        &nowhere,
        "-o",
        "json",
    ]);
    eprintln!("add-node of an unreachable node: {}", out.describe());
    // A fresh name per attempt: a timed-out attempt may still commit later.
    let mut attempt = 0;
    let ok = poll_until(Duration::from_secs(30), || {
        attempt += 1;
        let name = format!("after-add-{attempt}");
        cluster.create_env(0, &name).success().then_some(())
    });
    assert!(
        ok.is_some(),
        "the cluster stopped accepting writes after add-node of an unreachable node; status: {:?}",
        cluster.status()
    );
    assert!(
        out.success() || !out.stderr.contains("already a member"),
        "hubctl retried add-node on another endpoint and reported a misleading error: {}",
        out.describe()
    );
}

/// Sends `signal` to a node the test spawned itself (outside `cluster.json`).
fn signal_spawned(node: &hub_tests::Node, signal: i32) {
    // SAFETY: kill(2) on the pid of a hub-node process this test started and has not reaped.
    let rc = unsafe { libc::kill(node.pid as i32, signal) };
    assert_eq!(rc, 0, "kill({}, {signal}) failed", node.pid);
}

/// Whether node `id` is a voter (`None`: not a member), from the member list that
/// `add-node --learner` of the existing learner or voter 4 at `addr4` answers with (for a
/// member, a call that changes nothing).
fn voter(cluster: &Cluster, addr4: &str, id: u64) -> Option<bool> {
    let out = add_learner_4(cluster, addr4);
    assert!(out.success(), "member list: {}", out.describe());
    out.json()["members"]
        .as_array()
        .expect("members in add-node reply")
        .iter()
        .find(|m| m["id"] == id)
        .map(|m| m["voter"] == true)
}

/// `hubctl cluster add-node --id 4 --addr ADDR --learner -o json`.
fn add_learner_4(cluster: &Cluster, addr: &str) -> hub_tests::CmdOutput {
    cluster.hubctl(&[
        "cluster",
        "add-node",
        "--id",
        "4",
        "--addr",
        addr,
        "--learner",
        "-o",
        "json",
    ])
}

/// `hubctl --timeout-ms TIMEOUT cluster add-node --id 4 --addr ADDR --catch-up-timeout-ms
/// CATCH_UP -o json`.
fn promote_4(cluster: &Cluster, addr: &str, timeout: &str, catch_up: &str) -> hub_tests::CmdOutput {
    cluster.hubctl(&[
        "--timeout-ms",
        timeout,
        "cluster",
        "add-node",
        "--id",
        "4",
        "--addr",
        addr,
        "--catch-up-timeout-ms",
        catch_up,
        "-o",
        "json",
    ])
}

/// SPEC R1, R5: `hubctl cluster add-node` waits for the new node's catch-up as long as
/// `--catch-up-timeout-ms` allows, not just one call's `--timeout-ms`: a large state arrives
/// as a snapshot that can take longer than a call (25-30 s at 100k entities with history,
/// docs/BENCHMARKS.md). A shorter bound than the catch-up fails clearly and leaves the node a
/// learner, changing nothing else.
///
/// Regression: the call ended after `--timeout-ms` (15 s by default) on each endpoint; the
/// leader's wait for the catch-up was dropped with it, so the node stayed a learner.
#[test]
fn add_node_waits_for_a_catch_up_longer_than_one_call() {
    let cluster = Cluster::up(3, "");
    let new = cluster.spawn_node(4, &[]);
    let out = add_learner_4(&cluster, &new.addr);
    assert!(out.success(), "add-node --learner: {}", out.describe());
    // Paused, the learner falls behind the writes that follow; its promotion has to wait.
    signal_spawned(&new, libc::SIGSTOP);
    for i in 0..5 {
        let out = cluster.create_env(0, &format!("behind-{i}"));
        assert!(
            out.success(),
            "write with a paused learner: {}",
            out.describe()
        );
    }

    // A catch-up bound shorter than the pause: a clear error, node 4 still a learner.
    let out = promote_4(&cluster, &new.addr, "2000", "1000");
    assert!(
        !out.success()
            && out.stderr.contains("did not catch up")
            && out.stderr.contains("stays a learner"),
        "add-node with a catch-up bound shorter than the catch-up: {}",
        out.describe()
    );
    assert_eq!(voter(&cluster, &new.addr, 4), Some(false));

    // The learner resumes 4 s from now, longer than three endpoints' 1 s calls.
    let resume = {
        let new = new.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(4));
            signal_spawned(&new, libc::SIGCONT);
        })
    };
    let began = Instant::now();
    let out = promote_4(&cluster, &new.addr, "1000", "60000");
    resume.join().expect("resume thread");
    assert!(
        out.success(),
        "add-node of a paused learner: {}",
        out.describe()
    );
    assert!(
        began.elapsed() >= Duration::from_secs(3),
        "add-node returned before the learner resumed: {}",
        out.describe()
    );
    let reply = out.json();
    let member4 = reply["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == 4).cloned())
        .unwrap_or_else(|| panic!("add-node reply lacks node 4: {reply}"));
    assert_eq!(member4["voter"], true, "{reply}");
    cluster.wait_all_converged(CONVERGE_TIMEOUT, 4);

    // A bound above one hour is refused by hubctl, naming the flag, and changes nothing.
    let out = cluster.hubctl(&[
        "cluster",
        "add-node",
        "--id",
        "5",
        "--addr",
        "127.0.0.1:1",
        "--catch-up-timeout-ms",
        "3600001",
    ]);
    assert_eq!(out.code(), Some(2), "{}", out.describe());
    assert!(
        out.stderr.contains("--catch-up-timeout-ms"),
        "{}",
        out.describe()
    );
    // So is one sent to the hub directly, by the hub, naming the field.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let refused = rt.block_on(async {
        let admin = hub_tls::Identity::Operator(hub_tests::tls::ADMIN.into());
        let channel = cluster
            .channel_as(&admin, &cluster.node(1).addr)
            .await
            .expect("connect");
        hub_proto::hub_client::HubClient::new(channel)
            .add_node(hub_proto::AddNodeRequest {
                id: 5,
                addr: new.addr.clone(),
                learner_only: false,
                catch_up_timeout_ms: 3_600_001,
            })
            .await
    });
    match refused {
        Err(s)
            if s.code() == tonic::Code::InvalidArgument
                && s.message().contains("catch_up_timeout_ms") => {}
        other => panic!("AddNode with a catch-up bound above one hour: {other:?}"),
    }
    assert_eq!(voter(&cluster, &new.addr, 5), None);
    assert_eq!(voter(&cluster, &new.addr, 4), Some(true));
}

/// CPU seconds (user + system) a process has used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .collect();
    // utime and stime are fields 14 and 15 of stat; 12 and 13 after the command name.
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    ticks / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64
}

/// A node holding a write while there is no leader waits on Raft's metrics instead of
/// spinning. Regression: a fresh metrics receiver counted the current value as unseen, so the
/// wait returned at once and the node burned a full core for the whole request timeout.
#[test]
fn a_node_without_leader_waits_without_spinning() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let mut others = (1..=3).filter(|id| *id != leader);
    let (survivor, other) = (others.next().unwrap(), others.next().unwrap());
    cluster.kill9(leader);
    cluster.kill9(other);
    let node = cluster.node(survivor);
    let before = cpu_seconds(node.pid);
    let started = std::time::Instant::now();
    let out = cluster.hubctl_at(&node.addr, &["env", "create", "no-leader"]);
    let elapsed = started.elapsed();
    let used = cpu_seconds(node.pid) - before;
    assert!(!out.success(), "{}", out.describe());
    assert!(
        out.stderr.contains("no leader")
            || out.stderr.contains("no quorum")
            || out.stderr.contains("cut off"),
        "{}",
        out.describe()
    );
    assert!(
        used < elapsed.as_secs_f64() / 2.0,
        "the node used {used:.2} s of CPU while waiting {elapsed:?} for a leader"
    );
}

/// Waits until a linearizable read at `addr` (no side effect) is refused as cut off.
fn wait_cut_off(cluster: &Cluster, addr: &str, what: &str) -> tonic::Status {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    poll_until(CONVERGE_TIMEOUT, || {
        let e = rt
            .block_on(async {
                let admin = hub_tls::Identity::Operator(hub_tests::tls::ADMIN.into());
                let channel = cluster.channel_as(&admin, addr).await.expect("connect");
                hub_proto::hub_client::HubClient::new(channel)
                    .query(hub_proto::QueryRequest {
                        query_json: serde_json::to_string(&ListProducts.query())
                            .expect("a query is JSON"),
                        read: None,
                    })
                    .await
            })
            .err()?;
        (Refusal::of(&e) == Some(Refusal::CutOff)).then_some(e)
    })
    .unwrap_or_else(|| panic!("{what} never said it is cut off"))
}

/// One write submitted straight to `addr` as the admin, without failover.
fn submit_at(cluster: &Cluster, addr: &str, name: &str) -> Result<(), tonic::Status> {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    rt.block_on(async {
        let admin = hub_tls::Identity::Operator(hub_tests::tls::ADMIN.into());
        let channel = cluster.channel_as(&admin, addr).await.expect("connect");
        let mut client = hub_proto::hub_client::HubClient::new(channel);
        let command = serde_json::json!({"CreateEnvironment": {"name": name, "description": ""}});
        client
            .submit(hub_proto::SubmitRequest {
                command_json: command.to_string(),
                request_id: String::new(),
            })
            .await
            .map(|_| ())
    })
}

/// Issue 19: a node cut off from the leader (or a leader cut off from every follower)
/// answers a write with UNAVAILABLE "cut off" and the members at once, instead of holding it
/// for the request timeout, so clients move to another node; once healed, writes go through
/// the same node again and nothing refused was applied.
#[test]
fn a_cut_off_node_says_so_at_once_naming_the_members() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let followers: Vec<u64> = (1..=3).filter(|id| *id != leader).collect();
    let leader_addr = cluster.node(leader).addr;

    // The leader with both followers paused: no majority acknowledges it.
    for id in &followers {
        cluster.signal(*id, libc::SIGSTOP);
    }
    // Reads first (no side effect), so no write is proposed before the node knows.
    wait_cut_off(&cluster, &leader_addr, "the isolated leader");
    let refused = submit_at(&cluster, &leader_addr, "lonely-leader").expect_err("refused");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert!(
        refused
            .message()
            .contains("no majority has acknowledged this leader"),
        "{refused:?}"
    );
    for id in 1..=3 {
        let member = format!("{id}={}", cluster.node(id).addr);
        assert!(refused.message().contains(&member), "{refused:?}");
    }
    for id in &followers {
        cluster.signal(*id, libc::SIGCONT);
    }

    // A follower alone: the leader and the other follower paused; it hears from no leader.
    let alone = followers[0];
    let alone_addr = cluster.node(alone).addr;
    for id in (1..=3).filter(|id| *id != alone) {
        cluster.signal(id, libc::SIGSTOP);
    }
    wait_cut_off(&cluster, &alone_addr, "the lone follower");
    let refused = submit_at(&cluster, &alone_addr, "lonely-follower").expect_err("refused");
    assert!(
        refused
            .message()
            .contains("this node has not heard from a leader"),
        "{refused:?}"
    );
    // hubctl against that node alone keeps trying while it is cut off, then says why.
    let out = cluster.hubctl_at(
        &alone_addr,
        &["env", "create", "via-hubctl", "--timeout-ms", "3000"],
    );
    assert!(!out.success(), "{}", out.describe());
    assert!(out.stderr.contains("cut off"), "{}", out.describe());
    for id in (1..=3).filter(|id| *id != alone) {
        cluster.signal(id, libc::SIGCONT);
    }

    // Healed: the same node takes writes again, and no refused write was applied.
    let out = cluster.hubctl_at(&alone_addr, &["env", "create", "healed", "-o", "json"]);
    assert!(out.success(), "{}", out.describe());
    let names = cluster.env_names().expect("env list");
    assert!(names.contains(&"healed".to_string()), "{names:?}");
    for refused in ["lonely-leader", "lonely-follower", "via-hubctl"] {
        assert!(
            !names.contains(&refused.to_string()),
            "{refused} applied: {names:?}"
        );
    }
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 3);
    assert_eq!(digests(&status).len(), 1, "digests differ: {status}");
}

/// A member that was down while a node was added, and comes back when that node leads, follows
/// it: the transport admits any node of the cluster the receiver's log has not removed, not
/// only the members it has heard of (it lags behind the addition). Before, it refused the new
/// leader's every append and never caught up.
#[test]
fn a_member_that_missed_an_addition_follows_the_added_leader() {
    let mut cluster = Cluster::up(3, "");
    let (_, failed) = cluster.create_envs_parallel(&names("m", 0..10), 2);
    assert!(failed.is_empty(), "{failed:?}");
    let leader = cluster.leader_id();
    let behind = (1..=3).find(|id| *id != leader).unwrap();
    cluster.kill9(behind);

    let new = cluster.spawn_node(4, &[]);
    let out = cluster.hubctl(&["cluster", "add-node", "--id", "4", "--addr", &new.addr]);
    assert!(out.success(), "add-node 4: {}", out.describe());
    let out = cluster.hubctl(&["cluster", "transfer-leader", "--to", "4", "-o", "json"]);
    assert!(out.success(), "transfer-leader: {}", out.describe());
    assert_eq!(out.json()["leader"], 4, "{}", out.stdout);
    assert_eq!(out.json()["from"], leader, "{}", out.stdout);

    cluster.restart(behind);
    let out = cluster.create_env(0, "after-the-addition");
    assert!(out.success(), "{}", out.describe());
    let status = cluster.wait_all_converged(CONVERGE_TIMEOUT, 4);
    assert_eq!(status["leader"], 4, "{status}");
    let listed = cluster
        .env_names_at(&cluster.node(behind).addr, true)
        .expect("stale read at the node that was down");
    assert!(
        listed.contains(&"after-the-addition".to_string()),
        "node {behind} did not catch up from leader 4: {listed:?}"
    );
}

/// `cluster transfer-leader` hands the leadership over in one round of votes and refuses what
/// it cannot do; a leader stopped with SIGTERM hands it over before it exits.
#[test]
fn leadership_is_handed_over_on_request_and_on_sigterm() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let status = cluster.status().expect("status");
    let term = status["term"].as_u64().expect("term");

    let out = cluster.hubctl(&["cluster", "transfer-leader", "--to", "9"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("not a voter"), "{}", out.describe());
    let leader_s = leader.to_string();
    let out = cluster.hubctl(&["cluster", "transfer-leader", "--to", &leader_s]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(out.stderr.contains("already leads"), "{}", out.describe());

    // No target named: the voter furthest along takes it, at the next term (no election
    // rounds lost to split votes or timeouts).
    let out = cluster.hubctl(&["cluster", "transfer-leader", "-o", "json"]);
    assert!(out.success(), "{}", out.describe());
    let next = out.json()["leader"].as_u64().expect("leader");
    assert_ne!(next, leader, "{}", out.stdout);
    assert_eq!(out.json()["term"], term + 1, "{}", out.stdout);
    let out = cluster.create_env(0, "after-transfer");
    assert!(out.success(), "{}", out.describe());

    // SIGTERM on the leader: it hands the leadership over, then exits.
    cluster.signal(next, libc::SIGTERM);
    let third = cluster.wait_leader(CONVERGE_TIMEOUT, |id| id != next);
    poll_until(CONVERGE_TIMEOUT, || {
        (!cluster.is_running(next)).then_some(())
    })
    .unwrap_or_else(|| panic!("node {next} still running after SIGTERM"));
    let log = std::fs::read_to_string(cluster.dir().join(format!("node-{next}.log")))
        .expect("the stopped leader's log");
    assert!(
        log.contains("handed the leadership over"),
        "node {next} did not hand over on SIGTERM:\n{}",
        hub_tests::tail(&cluster.dir().join(format!("node-{next}.log")), 20)
    );
    let status = cluster
        .status_at(&cluster.endpoints_except(next))
        .expect("status");
    assert_eq!(status["leader"], third, "{status}");
    let out = cluster.hubctl_at(
        &cluster.endpoints_except(next),
        &["env", "create", "after-sigterm"],
    );
    assert!(out.success(), "{}", out.describe());
}

/// A follower stopped with SIGTERM ends the calls that would hold its listener open, and
/// exits without cutting any at the drain's grace: the leader's replication stream to it
/// (which the leader keeps open while idle) and an agent's plan long-poll on it, which is told
/// to try another member. The cluster writes on without it and it rejoins.
#[test]
fn a_stopping_follower_ends_the_replication_stream_and_long_polls() {
    let mut cluster = Cluster::up(3, "--metrics-listen 127.0.0.1:0");
    let metrics = cluster.logged_addrs("metrics at /metrics");
    let leader = cluster.leader_id();
    let follower = (1..=3).find(|&id| id != leader).expect("a follower");
    let addr = cluster.node(follower).addr;
    let metrics_addr = metrics
        .iter()
        .find(|(id, _)| *id == follower)
        .map(|(_, a)| a.clone())
        .expect("the follower's metrics address");
    // The entries open the leader's replication stream to each follower; it stays open.
    let out = cluster.create_env(0, "prod");
    assert!(out.success(), "{}", out.describe());
    cluster.wait_converged(CONVERGE_TIMEOUT);

    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let agent = hub_tls::Identity::Agent("prod".into());
    let fetch = |wait_ms: u32, fingerprint: String| {
        let ch = rt
            .block_on(cluster.channel_as(&agent, &addr))
            .expect("connect as prod's agent");
        let mut c = hub_proto::agent_client::AgentClient::new(ch);
        let mut req = tonic::Request::new(hub_proto::FetchPlansRequest {
            environment: "prod".into(),
            known_fingerprint: fingerprint,
            wait_ms,
            known_plan_ids: Vec::new(),
        });
        req.set_timeout(Duration::from_secs(60));
        async move { c.fetch_plans(req).await.map(|r| r.into_inner()) }
    };
    let now = rt
        .block_on(fetch(0, String::new()))
        .expect("a fetch that does not wait");
    // A poll that knows the plans waits for a change, up to 30 s.
    let poll = rt.spawn(fetch(30_000, now.fingerprint));
    let polls = "hub_agent_polls_in_flight{environment=\"prod\"}";
    // The long poll is open on the follower.
    hub_tests::metrics::wait_sample(&rt, &cluster, &metrics_addr, polls, 1.0);

    cluster.signal(follower, libc::SIGTERM);
    let answer = rt
        .block_on(poll)
        .expect("the poll's task did not panic")
        .expect_err("a stopping node does not keep the poll for its 30 s");
    assert_eq!(answer.code(), tonic::Code::Unavailable, "{answer:?}");
    assert!(
        answer.message().contains("this node is stopping"),
        "{answer:?}"
    );
    poll_until(CONVERGE_TIMEOUT, || {
        (!cluster.is_running(follower)).then_some(())
    })
    .unwrap_or_else(|| panic!("node {follower} still running after SIGTERM"));
    let log_path = cluster.dir().join(format!("node-{follower}.log"));
    let log = std::fs::read_to_string(&log_path).expect("the stopped follower's log");
    assert!(
        log.contains("shutting down"),
        "{}",
        hub_tests::tail(&log_path, 20)
    );
    assert!(
        !log.contains("still open after the drain's grace"),
        "a call held the drain open until its grace:\n{}",
        hub_tests::tail(&log_path, 20)
    );

    let out = cluster.hubctl_at(
        &cluster.endpoints_except(follower),
        &["env", "create", "without-the-follower"],
    );
    assert!(out.success(), "{}", out.describe());
    cluster.restart(follower);
    cluster.wait_converged(CONVERGE_TIMEOUT);
}

/// What a follower logs when its leader's port refuses connections (`dead_leader.rs`).
const DEAD_LEADER_LINE: &str = "its process is gone";

fn logs_with(cluster: &Cluster, needle: &str) -> Vec<u64> {
    (1..=3)
        .filter(|id| {
            std::fs::read_to_string(cluster.dir().join(format!("node-{id}.log")))
                .map(|log| log.contains(needle))
                .unwrap_or(false)
        })
        .collect()
}

/// A crashed leader's port refuses connections and its followers drop their leader leases at
/// once (the first candidate wins: one election timeout, not two); a paused leader's port does
/// not refuse, and no follower takes it for dead.
#[test]
fn followers_tell_a_crashed_leader_from_a_paused_one() {
    let cluster = Cluster::up(3, "");
    let paused = cluster.leader_id();
    cluster.signal(paused, libc::SIGSTOP);
    let others = cluster.endpoints_except(paused);
    let next = cluster.wait_leader_at(&others, CONVERGE_TIMEOUT, |id| id != paused);
    cluster.signal(paused, libc::SIGCONT);
    assert_eq!(
        logs_with(&cluster, DEAD_LEADER_LINE),
        Vec::<u64>::new(),
        "a paused leader was taken for dead"
    );

    cluster.kill9(next);
    let survivors = cluster.endpoints_except(next);
    cluster.wait_leader_at(&survivors, CONVERGE_TIMEOUT, |id| id != next);
    let noticed = poll_until(CONVERGE_TIMEOUT, || {
        let ids = logs_with(&cluster, DEAD_LEADER_LINE);
        (!ids.is_empty()).then_some(ids)
    })
    .unwrap_or_else(|| panic!("no follower noticed the crashed leader {next}"));
    assert!(!noticed.contains(&next), "{noticed:?}");
}

//! The hubctl contract end to end on a 3-node cluster: environment and entity lifecycles,
//! output formats, reads through followers, and leader forwarding (SPEC R3, S3).

use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use serde_json::Value;

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .expect("a JSON array")
        .iter()
        .map(|e| e["name"].as_str().expect("name").to_string())
        .collect()
}

#[test]
fn environment_and_entity_lifecycle_through_any_node() {
    let cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let follower = cluster
        .nodes()
        .into_iter()
        .find(|n| n.id != leader)
        .expect("a follower");

    // SPEC R3: a write sent to a follower is forwarded; the reply names the leader.
    let out = cluster
        .hubctl_at(
            &follower.addr,
            &[
                "env",
                "create",
                "prod",
                "--description",
                "production",
                "-o",
                "json",
            ],
        )
        .expect_ok("create via follower");
    let reply = out.json();
    assert_eq!(reply["leader"].as_u64(), Some(leader), "{}", out.stdout);
    assert_eq!(reply["result"], "environment prod created");
    assert!(reply["index"].as_u64().unwrap() > 0);

    cluster
        .hubctl(&["env", "create", "dev", "-o", "json"])
        .expect_ok("create dev");

    // Reads (linearizable by default) from the follower see both writes at once.
    let list = cluster
        .hubctl_at(&follower.addr, &["env", "list", "-o", "json"])
        .expect_ok("list");
    assert_eq!(names(&list.json()), ["dev", "prod"]);
    let get = cluster
        .hubctl_at(&follower.addr, &["env", "get", "prod", "-o", "json"])
        .expect_ok("get");
    let env = get.json();
    assert_eq!(env["description"], "production");
    assert_eq!(env["entities"].as_u64(), Some(0));

    // YAML and table outputs carry the same data.
    let yaml = cluster
        .hubctl(&["env", "get", "prod", "-o", "yaml"])
        .expect_ok("yaml");
    assert!(yaml.stdout.contains("name: prod"), "{}", yaml.stdout);
    let table = cluster.hubctl(&["env", "list"]).expect_ok("table");
    assert!(table.stdout.starts_with("NAME"), "{}", table.stdout);
    assert!(table.stdout.contains("prod"), "{}", table.stdout);

    // Entities: ids follow eid:<env>:<kind>:<name>.
    let out = cluster
        .hubctl(&[
            "entity",
            "create",
            "--env",
            "prod",
            "--kind",
            "helmChart",
            "--name",
            "web",
            "--product",
            "com.example:web",
            "--namespace",
            "web",
            "-o",
            "json",
        ])
        .expect_ok("create entity");
    assert_eq!(out.json()["result"], "eid:prod:helmChart:web");
    let out = cluster
        .hubctl(&[
            "entity",
            "create",
            "--env",
            "prod",
            "--kind",
            "terraformModule",
            "--name",
            "db",
            "--product",
            "com.example:db",
            "--account",
            "acct-1",
            "--channel",
            "DEV",
            "-o",
            "json",
        ])
        .expect_ok("create terraform entity");
    assert_eq!(out.json()["result"], "eid:prod:terraformModule:db");

    // The hub-client example (client/examples/explain.rs) asks the same hub from Rust, typed,
    // failing over from a node that is not listening to the cluster's own.
    let mut example = std::process::Command::new(hub_tests::bin_dir().join("examples/explain"));
    example
        .arg(format!("127.0.0.1:1,{}", cluster.endpoints()))
        .arg("prod/web");
    if !cluster.insecure() {
        let f = cluster.tls_files(&hub_tls::Identity::Operator(hub_tests::tls::ADMIN.into()));
        example.arg(f.ca).arg(f.cert).arg(f.key);
    }
    let out = example.output().expect("run the explain example");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.starts_with("eid:prod:helmChart:web: "),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list = cluster
        .hubctl_at(
            &follower.addr,
            &["entity", "list", "--env", "prod", "-o", "json"],
        )
        .expect_ok("entities");
    let entities = list.json();
    let ids: Vec<&str> = entities
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        ["eid:prod:helmChart:web", "eid:prod:terraformModule:db"]
    );
    assert_eq!(entities[0]["release_channel"], "RELEASE");
    assert_eq!(entities[1]["release_channel"], "DEV");
    assert_eq!(entities[1]["account_id"], "acct-1");

    // An environment with entities is not deleted, and says why.
    let out = cluster.hubctl(&["env", "delete", "prod"]);
    out.expect_err(1, "still has 2 entities");

    // An empty one is; afterwards get says not found.
    cluster
        .hubctl_at(&follower.addr, &["env", "delete", "dev"])
        .expect_ok("delete dev");
    let out = cluster.hubctl(&["env", "get", "dev"]);
    out.expect_err(1, "environment \"dev\" not found");
    let list = cluster
        .hubctl(&["env", "list", "-o", "json"])
        .expect_ok("list");
    assert_eq!(names(&list.json()), ["prod"]);

    // Every node reports the same digest for the same applied index.
    let status = cluster.wait_converged(std::time::Duration::from_secs(30));
    let digests: std::collections::BTreeSet<&str> = status["members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap())
        .collect();
    assert_eq!(digests.len(), 1, "{status}");
}

#[test]
fn hubctl_fails_over_past_dead_endpoints() {
    let cluster = Cluster::up(3, "");
    // SPEC R3: the first endpoints do not answer; hubctl moves on to a live node.
    let dead = format!(
        "127.0.0.1:{},127.0.0.1:{}",
        hub_tests::free_port(),
        hub_tests::free_port()
    );
    let endpoints = format!("{dead},{}", cluster.endpoints());
    let out = cluster.hubctl_at(&endpoints, &["env", "create", "via-failover", "-o", "json"]);
    assert!(out.success(), "{}", out.describe());
    let list = cluster
        .hubctl_at(&endpoints, &["env", "list", "-o", "json"])
        .expect_ok("list");
    assert_eq!(names(&list.json()), ["via-failover"]);
}

/// `cluster status` exits 0 on a healthy cluster and 3 with a member down, still printing the
/// answer (issue 58 item 5: as `etcdctl endpoint health` fails), so a probe can rely on it.
#[test]
fn cluster_status_exits_3_with_a_member_down() {
    let cluster = Cluster::up(3, "");
    cluster.wait_leader(CONVERGE_TIMEOUT, |_| true);
    let healthy = poll_until(CONVERGE_TIMEOUT, || {
        let out = cluster.hubctl(&["cluster", "status"]);
        out.success().then_some(out)
    });
    assert!(healthy.is_some(), "a healthy cluster never exited 0");
    let leader = cluster.wait_leader(CONVERGE_TIMEOUT, |_| true);
    let down = if leader == 3 { 2 } else { 3 };
    cluster.kill9(down);
    let out = poll_until(CONVERGE_TIMEOUT, || {
        let out = cluster.hubctl(&["cluster", "status", "-o", "json"]);
        (out.status.code() == Some(3)).then_some(out)
    })
    .unwrap_or_else(|| {
        panic!(
            "cluster status never exited 3 with node {down} down: {}",
            cluster.hubctl(&["cluster", "status"]).describe()
        )
    });
    let v = out.json();
    let member = v["members"]
        .as_array()
        .and_then(|m| m.iter().find(|m| m["id"] == down))
        .unwrap_or_else(|| panic!("member {down} missing: {v}"));
    assert!(member["error"].is_string(), "{v}");
    assert!(
        out.stderr.contains(&format!("unhealthy: member {down}")),
        "{}",
        out.describe()
    );
}

#[test]
fn dev_up_on_an_existing_cluster_keeps_its_size() {
    let cluster = Cluster::up(3, "");
    let dir = cluster.dir().to_str().unwrap().to_string();
    hub_tests::hubctl_raw(&["dev", "down", "--data-dir", &dir]).expect_ok("dev down");
    // A different size is refused, with the reason, and nothing is started.
    let out = hub_tests::hubctl_raw(&["dev", "up", "--nodes", "5", "--data-dir", &dir]);
    out.expect_err(1, "has 3 nodes, not 5");
    assert!(cluster.nodes().iter().all(|n| !hub_tests::is_alive(n.pid)));
}

/// Kills the processes it holds when dropped, so a failing test leaks nothing.
struct Procs(Vec<std::process::Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// hub-node processes started by hand (as systemd would) with the same `--initial-members`
/// found a cluster, which `hubctl cluster init` claims, after `hubctl pki` made the cluster's
/// CA and certificates: the production bootstrap of docs/SECURITY.md, step by step.
#[test]
fn cluster_init_bootstraps_hand_started_nodes() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let pki = tmp.path().join("pki");
    let pki_s = pki.to_str().unwrap().to_string();
    hub_tests::hubctl_raw(&["pki", "init", "--dir", &pki_s, "--cluster-id", "by-hand"])
        .expect_ok("pki init");
    let addrs: Vec<String> = (0..3)
        .map(|_| format!("127.0.0.1:{}", hub_tests::free_port()))
        .collect();
    for i in 1..=3 {
        hub_tests::hubctl_raw(&[
            "pki",
            "issue",
            "node",
            "--dir",
            &pki_s,
            "--id",
            &i.to_string(),
            "--host",
            "127.0.0.1",
        ])
        .expect_ok("pki issue node");
    }
    for name in ["alice", "bob"] {
        hub_tests::hubctl_raw(&["pki", "issue", "operator", "--dir", &pki_s, "--name", name])
            .expect_ok("pki issue operator");
    }
    let mut procs = Procs(Vec::new());
    // The founding members, the same on every node: each initialises the cluster at start.
    let initial: Vec<String> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| format!("{}={a}", i + 1))
        .collect();
    let initial = initial.join(",");
    for (i, addr) in addrs.iter().enumerate() {
        let id = i + 1;
        let log = std::fs::File::create(tmp.path().join(format!("node-{id}.log"))).unwrap();
        let child = std::process::Command::new(hub_tests::hub_node_bin())
            .args([
                "--id",
                &id.to_string(),
                "--listen",
                addr,
                "--cluster-id",
                "by-hand",
                "--initial-members",
                &initial,
            ])
            .arg("--data-dir")
            .arg(tmp.path().join(format!("node-{id}")))
            .arg("--ca-file")
            .arg(pki.join("ca.pem"))
            .arg("--cert-file")
            .arg(pki.join(format!("node-{id}.pem")))
            .arg("--key-file")
            .arg(pki.join(format!("node-{id}-key.pem")))
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start hub-node");
        procs.0.push(child);
    }
    let operator = |name: &str, args: &[&str]| {
        hub_tests::run_with_limit(
            std::process::Command::new(hub_tests::hubctl_bin())
                .env("HUBCTL_CA_FILE", pki.join("ca.pem"))
                .env("HUBCTL_CERT_FILE", pki.join(format!("operator-{name}.pem")))
                .env(
                    "HUBCTL_KEY_FILE",
                    pki.join(format!("operator-{name}-key.pem")),
                )
                .args(args),
            hub_tests::HUBCTL_LIMIT,
        )
    };
    let alice = |args: &[&str]| operator("alice", args);
    let endpoints = addrs.join(",");
    // Without a certificate (TLS that verifies the node, but no identity) the nodes refuse
    // the caller.
    let anonymous = hub_tests::poll_until(std::time::Duration::from_secs(30), || {
        let out = hub_tests::run_with_limit(
            std::process::Command::new(hub_tests::hubctl_bin())
                .env("HUBCTL_CA_FILE", pki.join("ca.pem"))
                .args(["--endpoints", addrs[0].as_str(), "env", "list"]),
            hub_tests::HUBCTL_LIMIT,
        );
        out.stderr.contains("no client certificate").then_some(out)
    });
    assert!(
        anonymous.is_some(),
        "a caller without a certificate was not refused"
    );
    // Alice claims the cluster the nodes founded: she becomes its first admin. The nodes may
    // still be binding their ports or electing: retry until one answers.
    let init = hub_tests::poll_until(std::time::Duration::from_secs(30), || {
        let out = alice(&["--endpoints", &endpoints, "cluster", "init"]);
        out.success().then_some(out)
    });
    assert!(init.is_some(), "cluster init never succeeded");
    // Another operator's claim is refused: the cluster has its admin.
    operator("bob", &["--endpoints", &endpoints, "cluster", "init"])
        .expect_err(1, "operator/bob may not BindRole");

    let created = hub_tests::poll_until(std::time::Duration::from_secs(30), || {
        alice(&["--endpoints", &endpoints, "env", "create", "bootstrapped"])
            .success()
            .then_some(())
    });
    assert!(created.is_some(), "no write succeeded after init");
    let out =
        alice(&["--endpoints", &endpoints, "cluster", "status", "-o", "json"]).expect_ok("status");
    let status = out.json();
    assert_eq!(status["members"].as_array().unwrap().len(), 3, "{status}");
    assert!(status["leader"].as_u64().is_some(), "{status}");

    // A bad founding list is refused by the node at start, naming the flag.
    let out = hub_tests::run_with_limit(
        std::process::Command::new(hub_tests::hub_node_bin())
            .args([
                "--id",
                "4",
                "--listen",
                "127.0.0.1:0",
                "--cluster-id",
                "by-hand",
            ])
            .arg("--data-dir")
            .arg(tmp.path().join("node-4"))
            .args(["--insecure", "--initial-members", "1=127.0.0.1:1"]),
        hub_tests::HUBCTL_LIMIT,
    );
    out.expect_err(1, "--initial-members: this node (4) is not listed");
}

/// The subcommands listed under `Commands:` in a help text.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(String::from)
        .collect()
}

/// Every help page, at every depth: no requirement ids, and the global options described
/// once, in `hubctl --help`, with every other page pointing there.
#[test]
fn help_speaks_the_operators_language_and_lists_global_options_once() {
    let root = hub_tests::hubctl_raw(&["--help"]).expect_ok("hubctl --help");
    assert!(
        root.stdout.contains("Global options (after any command):"),
        "{}",
        root.stdout
    );
    for flag in [
        "--endpoints <ENDPOINTS>",
        "-o, --output <OUTPUT>",
        "--timeout-ms",
    ] {
        assert_eq!(
            root.stdout.matches(flag).count(),
            1,
            "{flag}: {}",
            root.stdout
        );
    }
    let mut pending: Vec<Vec<String>> = subcommands(&root.stdout)
        .into_iter()
        .map(|c| vec![c])
        .collect();
    let mut pages = 0;
    while let Some(path) = pending.pop() {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        args.push("--help");
        let out = hub_tests::hubctl_raw(&args).expect_ok(&args.join(" "));
        let page = &out.stdout;
        pages += 1;
        let spec_id = page
            .split(|c: char| !c.is_ascii_alphanumeric())
            .collect::<Vec<_>>()
            .windows(2)
            .any(|w| w[0] == "SPEC" && w[1].chars().next().is_some_and(|c| c.is_ascii_uppercase()));
        assert!(
            !spec_id,
            "hubctl {}: cites a requirement id:\n{page}",
            path.join(" ")
        );
        assert!(
            !page.contains("--endpoints <"),
            "hubctl {}: repeats the global options:\n{page}",
            path.join(" ")
        );
        assert!(
            page.contains("Global options (--endpoints, -o/--output, --timeout-ms): hubctl --help"),
            "{page}"
        );
        for sub in subcommands(page) {
            let mut next = path.clone();
            next.push(sub);
            pending.push(next);
        }
    }
    assert!(pages >= 100, "only {pages} help pages");
    // Global options still work after any subcommand.
    let out = hub_tests::hubctl_raw(&["completion", "bash", "-o", "json"]).expect_ok("completion");
    assert!(out.stdout.contains("_hubctl()"), "{}", out.stdout);
}

/// `--watch` in a pipe prints the answer, then prints it again when it changes.
#[test]
fn watch_prints_again_when_the_answer_changes() {
    use std::io::BufRead;
    let cluster = Cluster::up(3, "");
    let mut child = cluster
        .hubctl_cmd()
        .args([
            "--endpoints",
            &cluster.endpoints(),
            "cluster",
            "status",
            "--watch",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start hubctl --watch");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let next_answer = || loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) if line.starts_with("leader:") => return true,
            Ok(_) => continue,
            Err(_) => return false,
        }
    };
    let first = next_answer();
    // A write moves every member's applied index: the answer changes.
    cluster
        .hubctl(&["env", "create", "watched"])
        .expect_ok("env create");
    let second = next_answer();
    let _ = child.kill();
    let _ = child.wait();
    assert!(first, "no first answer");
    assert!(second, "the changed answer was not printed again");
}

/// `hubctl … | head` ends quietly when its reader goes away, as Unix tools do (SIGPIPE), never
/// with a panic (exit 101). The pipe's read end is closed before hubctl starts, so its first
/// write meets a closed pipe whatever the timing.
#[test]
fn a_closed_pipe_ends_hubctl_quietly() {
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let cluster = Cluster::up(3, "");
    let (reader, writer) = std::io::pipe().expect("a pipe");
    drop(reader);
    let out = cluster
        .hubctl_cmd()
        .args(["--endpoints", &cluster.endpoints(), "env", "list"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("hubctl ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        (out.status.code(), out.status.signal()),
        (None, Some(libc::SIGPIPE)),
        "{stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

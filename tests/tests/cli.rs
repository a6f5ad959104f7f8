//! The hubctl contract end to end on a 3-node cluster: environment and entity lifecycles,
//! output formats, reads through followers, and leader forwarding (SPEC R3, S3).

use hub_tests::Cluster;
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
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("still has 2 entities"),
        "{}",
        out.describe()
    );

    // An empty one is; afterwards get says not found.
    cluster
        .hubctl_at(&follower.addr, &["env", "delete", "dev"])
        .expect_ok("delete dev");
    let out = cluster.hubctl(&["env", "get", "dev"]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("environment \"dev\" not found"),
        "{}",
        out.describe()
    );
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

#[test]
fn dev_up_on_an_existing_cluster_keeps_its_size() {
    let cluster = Cluster::up(3, "");
    let dir = cluster.dir().to_str().unwrap().to_string();
    hub_tests::hubctl_raw(&["dev", "down", "--data-dir", &dir]).expect_ok("dev down");
    // A different size is refused, with the reason, and nothing is started.
    let out = hub_tests::hubctl_raw(&["dev", "up", "--nodes", "5", "--data-dir", &dir]);
    assert_eq!(out.code(), Some(1), "{}", out.describe());
    assert!(
        out.stderr.contains("has 3 nodes, not 5"),
        "{}",
        out.describe()
    );
    assert!(cluster.nodes().iter().all(|n| !hub_tests::is_alive(n.pid)));
}

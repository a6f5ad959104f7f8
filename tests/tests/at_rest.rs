//! Files at rest (docs/SECURITY.md "At rest"): every file and directory a running `hub-node`
//! creates in its data directory — RocksDB's SST, WAL, MANIFEST and LOG files included, which
//! the node cannot chmod itself — is readable by its owner only, whatever the umask the node
//! was started with.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use hub_tests::{Cluster, CONVERGE_TIMEOUT};

/// Every path under `dir` with a group or other permission bit, with its mode.
fn loose(dir: &Path) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(p) = stack.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&p) else {
            continue; // RocksDB removed it meanwhile (a compacted file).
        };
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            out.push((p.display().to_string(), mode));
        }
        if meta.is_dir() {
            if let Ok(entries) = std::fs::read_dir(&p) {
                stack.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
            }
        }
    }
    out
}

#[test]
fn every_file_of_a_running_node_is_owner_only() {
    // Snapshots every 5 entries, so each node writes snapshot files too.
    let cluster = Cluster::up(3, "--snapshot-logs 5 --keep-logs 2");
    for i in 0..12 {
        cluster
            .create_env(i, &format!("env-{i}"))
            .expect_ok("create an environment");
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let mut snapshots = 0;
    for node in cluster.nodes() {
        let dir = &node.data_dir;
        assert!(dir.join("db").is_dir(), "{}", dir.display());
        if dir.join("snapshots/current.snap").exists() {
            snapshots += 1;
        }
        assert_eq!(loose(dir), Vec::<(String, u32)>::new(), "node {}", node.id);
    }
    assert!(snapshots > 0, "no node wrote a snapshot");
}

//! `chaos run` bad input (issue 7): an unknown fault, a fault this runner cannot provide and a
//! bad duration each give a clear error and a non-zero exit, and start nothing. And a short run
//! with the rollout workload: agents execute plans while leaders die and agents are killed and
//! paused mid-task, the checkers are fed and pass, `chaos check` agrees on the saved history,
//! and nothing the run started (restarted agents included) is left.

use std::process::Command;
use std::time::Duration;

use hub_tests::{bin_dir, run_with_limit};

fn chaos(args: &[&str], env: &[(&str, &str)]) -> hub_tests::CmdOutput {
    run_with_limit(
        Command::new(bin_dir().join("chaos"))
            .args(args)
            .envs(env.iter().copied()),
        Duration::from_secs(60),
    )
}

#[test]
fn bad_faults_and_durations_are_refused_before_anything_starts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let out_s = out.to_str().unwrap();
    for (args, needle) in [
        (
            vec!["run", "--faults", "kill-leader,explode", "--out", out_s],
            "unknown fault \"explode\"",
        ),
        (
            vec!["run", "--duration", "soon", "--out", out_s],
            "--duration",
        ),
        (
            vec!["run", "--nodes", "4", "--out", out_s],
            "--nodes: 4 is not 3 or 5",
        ),
        (
            vec!["sweep", "--seeds", "5..3", "--out", out_s],
            "--seeds: \"5..3\" is reversed",
        ),
        (
            vec!["sweep", "--seeds", "7", "--out", out_s],
            "--seeds: \"7\" is not like 1..20",
        ),
        (
            vec![
                "sweep", "--seeds", "1..2", "--faults", "boom", "--out", out_s,
            ],
            "unknown fault \"boom\"",
        ),
        (
            vec!["run", "--network", "wifi", "--out", out_s],
            "--network: \"wifi\" is not auto, netns or transport",
        ),
        (
            vec![
                "run",
                "--faults",
                "kill-agent",
                "--agents",
                "0",
                "--no-canary",
                "--out",
                out_s,
            ],
            "--faults kill-agent: needs agents to strike",
        ),
        (
            // The test build of hub-node is not a chaos build.
            vec!["run", "--faults", "kill-leader,clock-skew", "--out", out_s],
            "--faults clock-skew: needs the nodes' fault layer",
        ),
        (
            // The test build of hub-node is not a chaos build.
            vec![
                "run",
                "--faults",
                "partition",
                "--network",
                "transport",
                "--out",
                out_s,
            ],
            "is not a chaos build",
        ),
    ] {
        let r = chaos(&args, &[]);
        assert_eq!(r.code(), Some(2), "{args:?}: {}", r.describe());
        assert!(r.describe().contains(needle), "{args:?}: {}", r.describe());
        assert!(
            !out.join("hub").exists(),
            "{args:?}: a refused run started a cluster"
        );
    }
}

/// Faults this machine cannot provide (here: nothing on PATH, so no iproute2, nftables or
/// mkfs.ext4) are refused with what is missing, and nothing starts. (On root with the tools,
/// the CI runs inject partitions and disk faults for real.)
#[test]
fn faults_the_machine_cannot_provide_are_refused() {
    for (faults, needles) in [
        (
            "kill-leader,partition",
            ["partition needs network namespaces", "not installed"],
        ),
        (
            "kill-any,disk-full",
            [
                "--faults disk-full: needs a disk of the runner's",
                "mkfs.ext4 is not installed",
            ],
        ),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("run");
        let r = chaos(
            &["run", "--faults", faults, "--out", out.to_str().unwrap()],
            &[("PATH", "/nonexistent")],
        );
        assert_eq!(r.code(), Some(2), "{}", r.describe());
        let text = r.describe();
        assert!(
            text.contains(needles[0]) && (text.contains(needles[1]) || text.contains("not root")),
            "{text}"
        );
        assert!(!out.exists(), "a refused run wrote {}", out.display());
    }
}

/// Mount points under `dir` still mounted.
fn mounts_under(dir: &str) -> Vec<String> {
    std::fs::read_to_string("/proc/mounts")
        .unwrap_or_default()
        .lines()
        .filter(|l| l.contains(dir))
        .map(String::from)
        .collect()
}

/// Full disks and failing syncs under real nodes: every node's data directory on its own
/// loop-mounted ext4 under the runner's FUSE pass-through. A node whose syncs fail stops
/// the clean way and serves again after restart, nothing acknowledged is lost, and no
/// process or mount is left. (Root only: the disks need mounting.)
#[test]
fn disk_faults_crash_stop_a_node_that_recovers_and_leave_nothing_mounted() {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: disk faults need root (CI runs as root)");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let out_s = out.to_str().unwrap();
    let r = run_with_limit(
        Command::new(bin_dir().join("chaos")).args([
            "run",
            "--duration",
            "25s",
            "--seed",
            // Seed 12's schedule: fsync-error, disk-full, fsync-error.
            "12",
            "--faults",
            "fsync-error,disk-full",
            "--agents",
            "0",
            "--no-canary",
            "--out",
            out_s,
        ]),
        Duration::from_secs(300),
    );
    assert!(r.success(), "{}", r.describe());
    let report = read_json(&out.join("report.json"));
    let check = &report["check"];
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["summary"]["lost"], 0, "{check}");
    let disks = &check["disks"];
    assert!(disks["strikes"].as_u64() >= Some(2), "{disks}");
    let history = read_json(&out.join("history.json"));
    let strikes = history["disk_strikes"].as_array().expect("disk_strikes");
    // Under the register workload every node syncs its log many times a second: a node
    // whose syncs fail must have stopped, cleanly, and come back.
    let sync_faults: Vec<_> = strikes
        .iter()
        .filter(|s| s["fault"] == "fsync-error")
        .collect();
    assert!(!sync_faults.is_empty(), "{strikes:?}");
    for s in &sync_faults {
        assert!(
            s["syncs_failed"].as_u64() > Some(0)
                && s["stopped"] == true
                && s["clean_stop"] == true
                && s["served_again"] == true,
            "{s}"
        );
    }
    assert!(
        strikes
            .iter()
            .any(|s| s["fault"] == "disk-full" && s["ballast_bytes"].as_u64() > Some(0)),
        "{strikes:?}"
    );
    assert_nothing_left_running(out_s);
    assert!(
        mounts_under(out_s).is_empty(),
        "left mounted: {:?}",
        mounts_under(out_s)
    );
}

/// Membership changes mid-rollout: seed 4's schedule adds node 4, replaces a member by a
/// new node, and removes one while leaving it running. Nothing acknowledged is lost, the
/// healed members agree on the voters, the removed node is never leader or followed again,
/// and nothing is left running (the removed node included).
#[test]
fn membership_changes_under_load_keep_every_write_and_forget_removed_nodes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let out_s = out.to_str().unwrap();
    let r = run_with_limit(
        Command::new(bin_dir().join("chaos")).args([
            "run",
            "--duration",
            "30s",
            "--seed",
            "4",
            "--faults",
            "membership",
            "--agents",
            "1",
            "--no-canary",
            "--out",
            out_s,
        ]),
        Duration::from_secs(300),
    );
    assert!(r.success(), "{}", r.describe());
    let report = read_json(&out.join("report.json"));
    let check = &report["check"];
    assert_eq!(check["ok"], true, "{check}");
    assert_eq!(check["summary"]["lost"], 0, "{check}");
    assert_eq!(check["membership"]["changes"], 3, "{check}");
    let history = read_json(&out.join("history.json"));
    let changes = history["membership_changes"].as_array().expect("changes");
    let shapes: Vec<(bool, bool, bool)> = changes
        .iter()
        .map(|c| {
            (
                c["added"].is_u64(),
                c["removed"].is_u64(),
                c["kept_running"] == true,
            )
        })
        .collect();
    assert_eq!(
        shapes,
        [
            (true, false, false),
            (true, true, false),
            (false, true, true)
        ],
        "{changes:?}"
    );
    // The healed members (3: +1, ±0, -1) were sampled, and the removed node left running too.
    let removed = changes[2]["removed"].as_u64().expect("removed id");
    let settled: Vec<&serde_json::Value> = history["member_samples"]
        .as_array()
        .expect("samples")
        .iter()
        .filter(|s| s["settled"] == true)
        .collect();
    assert!(
        settled.iter().filter(|s| s["node"] != removed).count() == 3
            && settled.iter().any(|s| s["node"] == removed),
        "{settled:?}"
    );
    assert_nothing_left_running(out_s);
}

/// The JSON file at `path`.
fn read_json(path: &std::path::Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                out.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    out
}

/// Asserts that, within 10 s, no process's command line names `dir` (SIGKILLed processes
/// may take a moment to disappear from /proc).
fn assert_nothing_left_running(dir: &str) {
    let gone = hub_tests::poll_until(Duration::from_secs(10), || {
        processes_mentioning(dir).is_empty().then_some(())
    });
    assert!(
        gone.is_some(),
        "left running: {:?}",
        processes_mentioning(dir)
    );
}

#[test]
fn a_short_run_with_agents_feeds_every_checker_and_leaves_nothing_running() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let out_s = out.to_str().unwrap();
    let r = run_with_limit(
        Command::new(bin_dir().join("chaos")).args([
            "run",
            "--duration",
            "30s",
            "--seed",
            "7",
            "--faults",
            "kill-leader,pause,kill-agent,pause-agent",
            "--agents",
            "1",
            "--out",
            out_s,
        ]),
        Duration::from_secs(300),
    );
    assert!(r.success(), "{}", r.describe());
    let report = read_json(&out.join("report.json"));
    let rollouts = &report["rollouts"];
    assert!(rollouts["plans_executed"].as_u64() > Some(0), "{rollouts}");
    assert!(
        rollouts["releases_published"].as_u64() > Some(1),
        "{rollouts}"
    );
    assert!(
        rollouts["canary_revisions"].as_u64() >= Some(1),
        "{rollouts}"
    );
    assert_eq!(
        rollouts["rollouts"], rollouts["rollouts_terminal"],
        "{rollouts}"
    );
    // Seed 7's schedule: pause-agent twice, kill-agent, kill-leader, pause. Each agent fault
    // waits (at most 2 s) for a task to be running; whether one is depends on the machine's
    // pace, so only the strikes themselves are asserted.
    let struck = &rollouts["agent_faults"];
    assert!(
        struck["kills"].as_u64() == Some(1) && struck["pauses"].as_u64() == Some(2),
        "{struck}"
    );
    let check = &report["check"];
    assert_eq!(check["ok"], true, "{check}");
    assert!(
        check["plans"]["succeeded_tasks"].as_u64() > Some(0),
        "{check}"
    );
    assert!(
        check["canary"]["committed_steps"].as_u64() > Some(0),
        "{check}"
    );
    assert!(check["rollouts"]["rollouts"].as_u64() > Some(0), "{check}");
    // The saved history gives the same verdict.
    let again = run_with_limit(
        Command::new(bin_dir().join("chaos"))
            .arg("check")
            .arg(out.join("history.json")),
        Duration::from_secs(60),
    );
    assert!(again.success(), "{}", again.describe());
    // Agents, demo services and nodes are gone (their command lines name the run's directory).
    // (SIGKILLed processes may take a moment to disappear from /proc.)
    assert_nothing_left_running(out_s);
}

/// A sweep runs each seed in its own directory and prints one table row per seed.
#[test]
fn a_sweep_runs_every_seed_and_prints_one_table() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sweep");
    let r = run_with_limit(
        Command::new(bin_dir().join("chaos")).args([
            "sweep",
            "--seeds",
            "4..5",
            "--duration",
            "9s",
            "--faults",
            "kill-leader",
            "--agents",
            "0",
            "--no-canary",
            "--out",
            out.to_str().unwrap(),
        ]),
        Duration::from_secs(300),
    );
    assert!(r.success(), "{}", r.describe());
    let text = r.describe();
    assert!(text.contains("| seed | faults | operations |"), "{text}");
    for seed in [4, 5] {
        assert!(
            out.join(format!("seed-{seed}/report.json")).exists(),
            "seed {seed}: {text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with(&format!("| {seed} | ")) && l.ends_with("| OK |")),
            "seed {seed}: {text}"
        );
    }
    assert!(text.contains("2 seeds, 0 with violations"), "{text}");
    let out_s = out.to_str().unwrap();
    assert_nothing_left_running(out_s);
}

/// A cluster that never becomes healthy (here every hub-node exits at once) is a clear error
/// with exit 2, and nothing is left running.
#[test]
fn a_cluster_that_never_becomes_healthy_is_refused_and_cleaned_up() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let out_s = out.to_str().unwrap();
    // Node 1 starts for real; node 2 dies at once: the start-up fails with node 1 (and
    // node 3) already running, and none of them may be left.
    let wrapper = dir.path().join("half-a-hub-node");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\ncase \"$*\" in *\"--id 2 \"*) exit 1;; esac\nexec {} \"$@\"\n",
            bin_dir().join("hub-node").display()
        ),
    )
    .expect("write the wrapper");
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .expect("chmod the wrapper");
    for bin in ["/bin/false", wrapper.to_str().unwrap()] {
        let _ = std::fs::remove_dir_all(&out);
        let r = chaos(
            &["run", "--duration", "20s", "--out", out_s],
            &[("HUB_NODE_BIN", bin)],
        );
        assert_eq!(r.code(), Some(2), "{bin}: {}", r.describe());
        assert!(
            r.describe().contains("the cluster never became healthy"),
            "{bin}: {}",
            r.describe()
        );
        assert_nothing_left_running(out_s);
    }
}

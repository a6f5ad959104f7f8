//! `chaos run` bad input (issue 7): an unknown fault, a fault this runner cannot provide and a
//! bad duration each give a clear error and a non-zero exit, and start nothing.

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

/// A partition needs network namespaces: without `ip` and `nft` (here: not on PATH) the run
/// is refused with the reason, and nothing starts. (On root with both, the seed-fixed CI run
/// injects partitions for real.)
#[test]
fn partitions_the_machine_cannot_provide_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let r = chaos(
        &[
            "run",
            "--faults",
            "kill-leader,partition",
            "--out",
            out.to_str().unwrap(),
        ],
        &[("PATH", "/nonexistent")],
    );
    assert_eq!(r.code(), Some(2), "{}", r.describe());
    let text = r.describe();
    assert!(
        text.contains("partition needs network namespaces")
            && (text.contains("not installed") || text.contains("not root")),
        "{text}"
    );
    assert!(!out.exists(), "a refused run wrote {}", out.display());
}

//! `chaos run` bad input (issue 7): an unknown fault, a fault this runner cannot provide and a
//! bad duration each give a clear error and a non-zero exit, and start nothing.

use std::process::Command;
use std::time::Duration;

use hub_tests::{bin_dir, run_with_limit};

fn chaos(args: &[&str]) -> hub_tests::CmdOutput {
    run_with_limit(
        Command::new(bin_dir().join("chaos")).args(args),
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
            vec!["run", "--faults", "partition", "--out", out_s],
            "partition needs network namespaces",
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
        let r = chaos(&args);
        assert_eq!(r.code(), Some(2), "{args:?}: {}", r.describe());
        assert!(r.describe().contains(needle), "{args:?}: {}", r.describe());
        assert!(
            !out.join("hub").exists(),
            "{args:?}: a refused run started a cluster"
        );
    }
}

//! `hubctl demo`, the README's main command, end to end (issue 6, Deliver 5): it must finish
//! with 1.1.0 promoted and the faulty 1.2.0 rolled back, print its progress and summary, and
//! leave no process behind.

use std::process::Command;
use std::time::Duration;

use hub_tests::{hubctl_bin, run_with_limit};

#[test]
fn the_demo_promotes_the_healthy_release_and_rolls_back_the_faulty_one() {
    let dir = tempfile::Builder::new()
        .prefix("hub-demo-test-")
        .tempdir()
        .expect("tempdir");
    let out = run_with_limit(
        Command::new(hubctl_bin())
            .arg("demo")
            .arg("--dir")
            .arg(dir.path())
            .args(["--interval", "1s"]),
        Duration::from_secs(600),
    );
    let text = out.describe();
    assert!(
        out.success(),
        "{text}\n{}",
        tail(&dir.path().join("agent.log"))
    );
    for needle in [
        "1.1.0  Succeeded",
        "1.2.0  Failed",
        "the service now serves 1.1.0",
        "Progressing",
        "failed checks",
        "may reach loopback (127.0.0.0/8, ::1/128",
    ] {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
    // Everything it started is gone: no process runs from the demo's directory.
    let root = dir.path().display().to_string();
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .expect("/proc")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .chars()
                .all(|c| c.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
        .filter(|c| c.contains(&root) && !c.contains("hubctl"))
        .collect();
    let cleaned = hub_tests::poll_until(Duration::from_secs(15), || {
        let alive: Vec<&String> = leftovers
            .iter()
            .filter(|c| {
                std::fs::read_dir("/proc").is_ok_and(|mut d| {
                    d.any(|e| {
                        e.ok()
                            .and_then(|e| std::fs::read(e.path().join("cmdline")).ok())
                            .is_some_and(|x| String::from_utf8_lossy(&x).replace('\0', " ") == **c)
                    })
                })
            })
            .collect();
        alive.is_empty().then_some(())
    });
    assert!(cleaned.is_some(), "processes left running: {leftovers:?}");
}

fn tail(path: &std::path::Path) -> String {
    hub_tests::tail(path, 40)
}

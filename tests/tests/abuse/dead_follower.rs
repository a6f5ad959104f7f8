//! A dead follower costs its leader nothing (issue 51, item 6).
//!
//! With a follower SIGKILLed, its port refuses connections at once; the leader used to
//! reconnect in a busy loop and log every attempt (about 25,000 WARN lines a second, half a
//! core). Now it backs off (at most a second between tries), logs the peer's trouble once and
//! its recovery once, and the restarted follower is caught up at once. A paused follower
//! (calls time out instead) is as quiet.

use std::path::Path;
use std::time::{Duration, Instant};

use hub_tests::{poll_until, Cluster};

/// How long each fault is watched.
const WINDOW: Duration = Duration::from_secs(10);

/// The most lines the leader may write in [`WINDOW`] with a follower down (it wrote about
/// 250,000 before).
const MAX_LINES: usize = 100;

/// The most CPU the leader may use with a follower down, in cores (it used about half a core
/// before; an idle leader uses almost nothing, and a write a few milliseconds).
const MAX_CORES: f64 = 0.1;

/// How long a restarted follower may take to hold the leader's state.
const CATCH_UP: Duration = Duration::from_secs(15);

/// Lines in the file at `path`.
fn lines(path: &Path) -> usize {
    std::fs::read(path)
        .map(|b| b.iter().filter(|c| **c == b'\n').count())
        .unwrap_or(0)
}

/// The lines of `path` after its first `skip`.
fn lines_after(path: &Path, skip: usize) -> Vec<String> {
    let text = String::from_utf8_lossy(&std::fs::read(path).unwrap_or_default()).into_owned();
    text.lines().skip(skip).map(str::to_string).collect()
}

/// CPU time `pid` has used (user and system).
fn cpu_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("the leader runs");
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .expect("a stat line")
        .1
        .split_whitespace()
        .collect();
    // After the command: state is field 3, utime 14 and stime 15 (proc(5)).
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: sysconf(3) only reads a system constant.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

/// What the leader did while a follower was down for [`WINDOW`].
struct Cost {
    lines: Vec<String>,
    cores: f64,
}

/// Watches the leader (`pid`, logging to `log`) for [`WINDOW`] while `cluster` commits a write
/// named `env`.
fn watch_leader(cluster: &Cluster, pid: u32, log: &Path, env: &str) -> Cost {
    let (lines0, cpu0, t0) = (lines(log), cpu_time(pid), Instant::now());
    cluster
        .create_env(0, env)
        .expect_ok("a write with a follower down");
    // A measurement window, not a synchronisation: the leader is watched for this long.
    std::thread::sleep(WINDOW.saturating_sub(t0.elapsed()));
    let cores = (cpu_time(pid) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    Cost {
        lines: lines_after(log, lines0),
        cores,
    }
}

/// Asserts the leader was quiet and idle, showing what it wrote if not.
fn assert_cheap(what: &str, cost: &Cost) {
    let n = cost.lines.len();
    let sample = cost.lines.iter().take(20).cloned().collect::<Vec<_>>();
    eprintln!(
        "{what}: the leader wrote {n} lines ({:.1}/s) and used {:.3} cores over {WINDOW:?}; first lines:\n{}",
        n as f64 / WINDOW.as_secs_f64(),
        cost.cores,
        sample.join("\n")
    );
    assert!(
        n < MAX_LINES,
        "{what}: the leader wrote {n} lines in {WINDOW:?}, first ones:\n{}",
        sample.join("\n")
    );
    assert!(
        cost.cores < MAX_CORES,
        "{what}: the leader used {:.3} cores",
        cost.cores
    );
}

#[test]
fn a_dead_or_paused_follower_costs_its_leader_nothing() {
    let mut cluster = Cluster::up(3, "");
    let leader = cluster.leader_id();
    let follower = cluster
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|id| *id != leader)
        .expect("a follower");
    let pid = cluster.node(leader).pid;
    let log = cluster.dir().join(format!("node-{leader}.log"));

    cluster.kill9(follower);
    let dead = watch_leader(&cluster, pid, &log, "while-dead");
    assert_cheap("follower killed", &dead);
    let peer = format!("peer={follower}");
    let said = |needle: &str, lines: &[String]| {
        lines
            .iter()
            .filter(|l| l.contains(needle) && l.contains(&peer))
            .count()
    };
    assert_eq!(
        said("peer unreachable", &dead.lines),
        1,
        "the leader says once that the follower is unreachable:\n{}",
        dead.lines.join("\n")
    );

    let before_restart = lines(&log);
    let restarted = Instant::now();
    cluster.restart(follower);
    cluster.wait_all_converged(CATCH_UP, 3);
    eprintln!(
        "the restarted follower holds the leader's state {:?} after its restart began",
        restarted.elapsed()
    );
    let back = poll_until(CATCH_UP, || {
        let after = lines_after(&log, before_restart);
        (said("peer reachable again", &after) == 1).then_some(())
    });
    assert!(
        back.is_some(),
        "the leader never said the follower is reachable again:\n{}",
        lines_after(&log, before_restart).join("\n")
    );

    cluster.signal(follower, libc::SIGSTOP);
    let paused = watch_leader(&cluster, pid, &log, "while-paused");
    cluster.signal(follower, libc::SIGCONT);
    assert_cheap("follower paused", &paused);
    cluster.wait_all_converged(CATCH_UP, 3);
}

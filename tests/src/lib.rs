//! Harness for black-box tests of a hub cluster: it drives the `hub-node` and `hubctl`
//! binaries as processes, exactly as an operator would.
//!
//! Build the binaries first: `cargo build --workspace --bins`. The tests find them next to the
//! test executable (`target/debug`).
//!
//! Every cluster lives in a fresh temporary directory with dynamically chosen ports, and
//! [`Cluster`]'s `Drop` SIGKILLs every node it knows of, so nothing leaks even when a test
//! panics. Set `HUB_TESTS_KEEP=1` to keep the directories (node logs, data) of failed tests.
//!
//! Synchronisation is always by polling an observable condition with a deadline
//! ([`poll_until`]); sleeps only appear as the back-off inside polling loops.

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

pub mod agent;
pub mod canary;
pub mod https;
pub mod metrics;
pub mod prometheus;
pub mod tls;
pub use agent::{Execution, TestAgent};

/// Generous deadline for convergence on a loaded 2-core machine.
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(60);

/// Hard wall-clock limit for any single `hubctl` invocation (its own per-call timeout is 15 s
/// per endpoint; this only stops a hung process from hanging the test).
pub const HUBCTL_LIMIT: Duration = Duration::from_secs(120);

// ---------------------------------------------------------------------------------------------
// Binaries

/// `target/debug` (or wherever the test executable lives), checked to hold both binaries.
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("locate the test executable");
    let mut dir = exe
        .parent()
        .expect("the test executable has a directory")
        .to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    for bin in ["hub-node", "hubctl"] {
        if !dir.join(bin).exists() {
            panic!(
                "{bin} not found in {}: run `cargo build --workspace --bins` first \
                 (with the same CARGO_TARGET_DIR as the tests)",
                dir.display()
            );
        }
    }
    dir
}

/// Path of `hubctl`.
pub fn hubctl_bin() -> PathBuf {
    bin_dir().join("hubctl")
}

/// Path of `hub-node`.
pub fn hub_node_bin() -> PathBuf {
    bin_dir().join("hub-node")
}

// ---------------------------------------------------------------------------------------------
// Processes

/// The result of one finished (or killed) command.
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// Exit status.
    pub status: ExitStatus,
    /// Stdout, lossily decoded.
    pub stdout: String,
    /// Stderr, lossily decoded.
    pub stderr: String,
    /// Wall-clock time the command took.
    pub elapsed: Duration,
    /// True if the harness killed it for exceeding its limit.
    pub timed_out: bool,
    /// The command line, for messages.
    pub cmdline: String,
}

impl CmdOutput {
    /// Exit code 0.
    pub fn success(&self) -> bool {
        self.status.success()
    }

    /// The exit code (None if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with the whole output unless the command succeeded.
    #[track_caller]
    pub fn expect_ok(self, what: &str) -> Self {
        if !self.success() {
            panic!("{what}: {}", self.describe());
        }
        self
    }

    /// Panics with the whole output unless the command exited with `code` and its stderr
    /// contains `needle`.
    #[track_caller]
    pub fn expect_err(self, code: i32, needle: &str) -> Self {
        if self.code() != Some(code) || !self.stderr.contains(needle) {
            panic!("expected exit {code} with {needle:?}: {}", self.describe());
        }
        self
    }

    /// Stdout parsed as JSON; panics with the output if it is not.
    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!("stdout is not JSON ({e}): {}", self.describe());
        })
    }

    /// Stdout read as `A`, a hub answer (for `hubctl` outputs that print the hub's answer to
    /// a query unchanged); panics with the output if it is not one.
    #[track_caller]
    pub fn answer<A: serde::de::DeserializeOwned>(&self) -> A {
        serde_json::from_str(&self.stdout).unwrap_or_else(|e| {
            panic!(
                "stdout is not a {} ({e}): {}",
                std::any::type_name::<A>(),
                self.describe()
            );
        })
    }

    /// A one-paragraph description for assertion messages.
    pub fn describe(&self) -> String {
        format!(
            "`{}` exited with {}{} after {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.cmdline,
            self.status,
            if self.timed_out {
                " (killed by the harness: too slow)"
            } else {
                ""
            },
            self.elapsed,
            self.stdout.trim_end(),
            self.stderr.trim_end()
        )
    }
}

fn cmdline(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    s
}

/// Runs `cmd` to completion (stdin closed, stdout/stderr captured), killing it after `limit`.
pub fn run_with_limit(cmd: &mut Command, limit: Duration) -> CmdOutput {
    let line = cmdline(cmd);
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start `{line}`: {e}"));
    // Drain both pipes concurrently so a large output cannot block the child.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut r) = r {
                let _ = r.read_to_end(&mut buf);
            }
            String::from_utf8_lossy(&buf).into_owned()
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    );
    let mut timed_out = false;
    let mut backoff = Duration::from_millis(2);
    let status = loop {
        match child.try_wait().expect("wait for child") {
            Some(status) => break status,
            None if start.elapsed() > limit => {
                timed_out = true;
                let _ = child.kill();
                break child.wait().expect("wait for killed child");
            }
            None => {
                std::thread::sleep(backoff);
                backoff = (backoff * 2).min(Duration::from_millis(50));
            }
        }
    };
    CmdOutput {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        elapsed: start.elapsed(),
        timed_out,
        cmdline: line,
    }
}

/// Runs `hubctl ARGS` (no endpoints added).
pub fn hubctl_raw<S: AsRef<std::ffi::OsStr>>(args: &[S]) -> CmdOutput {
    run_with_limit(Command::new(hubctl_bin()).args(args), HUBCTL_LIMIT)
}

/// Polls `f` (with a short growing back-off) until it returns `Some`, or `timeout` passes.
pub fn poll_until<T>(timeout: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    let mut backoff = Duration::from_millis(50);
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(backoff.min(deadline.saturating_duration_since(Instant::now())));
        backoff = (backoff * 2).min(Duration::from_millis(500));
    }
}

/// True while process `pid` runs or still holds what it had open: not gone, and not a
/// zombie whose threads have all exited.
pub fn is_alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    // The fields after the parenthesised command name: the state, then (17 later) the
    // number of threads. A SIGKILLed process's first thread can be a zombie while its other
    // threads are still exiting and still hold its files (a listening socket among them):
    // only a zombie left alone is dead.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    match fields.first() {
        None => false,
        Some(&"Z") => fields
            .get(17)
            .and_then(|n| n.parse::<u64>().ok())
            .is_some_and(|threads| threads > 1),
        Some(_) => true,
    }
}

/// True if `pid` is a live hub-node whose command line mentions `data_dir` (so a recycled pid
/// of an unrelated process is never signalled).
fn is_our_node(pid: u32, data_dir: &Path) -> bool {
    if pid == 0 || !is_alive(pid) {
        return false;
    }
    let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    let dir = data_dir.to_string_lossy();
    args.first().is_some_and(|a| a.ends_with("hub-node")) && args.iter().any(|a| *a == dir)
}

/// SIGKILLs `pid` and waits until it is gone.
fn kill_and_wait(pid: u32, timeout: Duration) -> bool {
    // SAFETY: kill(2) on a pid we checked is one of our hub-node processes.
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    poll_until(timeout, || (!is_alive(pid)).then_some(())).is_some()
}

/// A loopback port that was free a moment ago (the listener is closed before returning),
/// picked at random below the kernel's ephemeral range as `hubctl dev up` picks its nodes'
/// ports: a node restarted on an ephemeral port can find it taken by the local end of some
/// outgoing connection made while it was down.
pub fn free_port() -> u16 {
    use std::hash::{BuildHasher, Hasher};
    const LOWEST: u64 = 10_000;
    let ephemeral = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(32_768);
    for attempt in 0..100u64 {
        if ephemeral <= LOWEST {
            break;
        }
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u64(attempt);
        let port = (LOWEST + h.finish() % (ephemeral - LOWEST)) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind an ephemeral port")
        .port()
}

/// Last `n` lines of a file ("" if unreadable).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

// ---------------------------------------------------------------------------------------------
// Cluster

/// One node as recorded in `cluster.json` (or started by the test itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// Raft node id.
    pub id: u64,
    /// host:port.
    pub addr: String,
    /// Pid of its last start.
    pub pid: u32,
    /// Data directory.
    pub data_dir: PathBuf,
}

/// A node process the test started itself (outside `cluster.json`).
struct ExtraNode {
    child: Child,
    node: Node,
    /// Arguments beyond the cluster's node args.
    args: Vec<String>,
    /// The cluster id it runs with.
    cluster_id: String,
}

/// A local cluster started with `hubctl dev up` in a temporary directory.
pub struct Cluster {
    dir: tempfile::TempDir,
    /// The cluster id every node runs with.
    pub cluster_id: String,
    /// Extra hub-node arguments from `cluster.json`.
    pub node_args: Vec<String>,
    nodes: Mutex<Vec<Node>>,
    extra: Mutex<Vec<ExtraNode>>,
}

fn parse_cluster_file(path: &Path) -> (String, Vec<String>, Vec<Node>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let v: Value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    let cluster_id = v["cluster_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{}: no cluster_id: {v}", path.display()))
        .to_string();
    let node_args = v["node_args"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| x.as_str().expect("node_args are strings").to_string())
                .collect()
        })
        .unwrap_or_default();
    let nodes = v["nodes"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no nodes: {v}", path.display()))
        .iter()
        .map(|n| Node {
            id: n["id"].as_u64().expect("node id"),
            addr: n["addr"].as_str().expect("node addr").to_string(),
            pid: n["pid"].as_u64().expect("node pid") as u32,
            data_dir: PathBuf::from(n["data_dir"].as_str().expect("node data_dir")),
        })
        .collect();
    (cluster_id, node_args, nodes)
}

impl Cluster {
    /// Starts `nodes` hub-nodes with `hubctl dev up --base-port 0` in a fresh temporary
    /// directory (`extra_node_args` is passed as `--node-args`, "" for none) and waits for the
    /// command, which returns once a leader is elected.
    pub fn up(nodes: usize, extra_node_args: &str) -> Cluster {
        Self::up_with_env(nodes, extra_node_args, &[])
    }

    /// [`Cluster::up`] with environment variables for `hubctl dev up`, which every node
    /// inherits (e.g. `HTTPS_PROXY`).
    pub fn up_with_env(nodes: usize, extra_node_args: &str, env: &[(&str, &str)]) -> Cluster {
        Self::up_with_dev_args(nodes, extra_node_args, env, &[])
    }

    /// [`Cluster::up_with_env`] with more `hubctl dev up` arguments, e.g.
    /// `["--outbound-allow", ""]` for nodes that deny loopback as production nodes do (by
    /// default `dev up` opens loopback, where the tests' webhooks, Prometheus and registries
    /// listen).
    pub fn up_with_dev_args(
        nodes: usize,
        extra_node_args: &str,
        env: &[(&str, &str)],
        dev_args: &[&str],
    ) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("hub-test-")
            .tempdir()
            .expect("create a temporary directory");
        let mut cluster = Cluster {
            dir,
            cluster_id: String::new(),
            node_args: Vec::new(),
            nodes: Mutex::new(Vec::new()),
            extra: Mutex::new(Vec::new()),
        };
        let mut args: Vec<String> = vec![
            "dev".into(),
            "up".into(),
            "--nodes".into(),
            nodes.to_string(),
            "--data-dir".into(),
            cluster.dir().display().to_string(),
            "--base-port".into(),
            "0".into(),
            "-o".into(),
            "json".into(),
        ];
        if !extra_node_args.is_empty() {
            args.push("--node-args".into());
            args.push(extra_node_args.into());
        }
        args.extend(dev_args.iter().map(|a| a.to_string()));
        let out = run_with_limit(
            Command::new(hubctl_bin())
                .args(&args)
                .envs(env.iter().copied()),
            HUBCTL_LIMIT,
        );
        // Load cluster.json before checking the result: if `dev up` failed after spawning
        // nodes, Drop must still find and kill them.
        if cluster.dir().join("cluster.json").exists() {
            cluster.reload();
        }
        if !out.success() {
            panic!("hubctl dev up failed: {}", out.describe());
        }
        let v = out.json();
        assert_eq!(
            v["cluster_id"].as_str(),
            Some(cluster.cluster_id.as_str()),
            "dev up output and cluster.json disagree: {v}"
        );
        assert_eq!(cluster.nodes().len(), nodes, "cluster.json: {v}");
        cluster
    }

    /// The cluster's directory (cluster.json, node-N.log, node-N/).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Re-reads `cluster.json`.
    pub fn reload(&mut self) {
        let (cluster_id, node_args, nodes) = parse_cluster_file(&self.dir().join("cluster.json"));
        self.cluster_id = cluster_id;
        self.node_args = node_args;
        *self.nodes.lock().unwrap() = nodes;
    }

    /// The nodes of `cluster.json`.
    pub fn nodes(&self) -> Vec<Node> {
        self.nodes.lock().unwrap().clone()
    }

    /// One node of `cluster.json`, or one the test started with [`Cluster::spawn_node`].
    pub fn node(&self, id: u64) -> Node {
        self.nodes()
            .into_iter()
            // The latest start of a node the test spawned itself.
            .chain(
                self.extra
                    .lock()
                    .unwrap()
                    .iter()
                    .rev()
                    .map(|e| e.node.clone()),
            )
            .find(|n| n.id == id)
            .unwrap_or_else(|| panic!("no node {id}"))
    }

    /// `host:port,…` of every `cluster.json` node.
    pub fn endpoints(&self) -> String {
        self.endpoints_from(0)
    }

    /// The endpoints rotated to start at the `k`-th node (spreads clients over the nodes).
    pub fn endpoints_from(&self, k: usize) -> String {
        let nodes = self.nodes();
        let n = nodes.len().max(1);
        (0..nodes.len())
            .map(|i| nodes[(i + k) % n].addr.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `hubctl -e <all endpoints> ARGS`.
    pub fn hubctl(&self, args: &[&str]) -> CmdOutput {
        self.hubctl_at(&self.endpoints(), args)
    }

    /// `hubctl -e <endpoints> ARGS` (`endpoints` is one `host:port` or a comma list).
    pub fn hubctl_at(&self, endpoints: &str, args: &[&str]) -> CmdOutput {
        let mut all = vec!["--endpoints", endpoints];
        all.extend_from_slice(args);
        run_with_limit(self.hubctl_cmd().args(&all), HUBCTL_LIMIT)
    }

    /// A `hubctl` command that talks to this cluster as its admin (no arguments yet).
    pub fn hubctl_cmd(&self) -> Command {
        let mut cmd = Command::new(hubctl_bin());
        cmd.envs(self.hubctl_env());
        cmd
    }

    /// `hubctl env create NAME -o json` against every endpoint, starting at node `k`.
    pub fn create_env(&self, k: usize, name: &str) -> CmdOutput {
        self.hubctl_at(
            &self.endpoints_from(k),
            &["env", "create", name, "-o", "json"],
        )
    }

    /// Creates `names` with `threads` concurrent sequential writers; returns the names whose
    /// write was acknowledged (exit 0) and the failures (name, stderr).
    pub fn create_envs_parallel(
        &self,
        names: &[String],
        threads: usize,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let acked = Mutex::new(Vec::new());
        let failed = Mutex::new(Vec::new());
        std::thread::scope(|s| {
            for t in 0..threads {
                let (acked, failed) = (&acked, &failed);
                s.spawn(move || {
                    for name in names.iter().skip(t).step_by(threads) {
                        let out = self.create_env(t, name);
                        if out.success() {
                            acked.lock().unwrap().push(name.clone());
                        } else {
                            failed
                                .lock()
                                .unwrap()
                                .push((name.clone(), out.stderr.clone()));
                        }
                    }
                });
            }
        });
        (acked.into_inner().unwrap(), failed.into_inner().unwrap())
    }

    /// `env list -o json` (linearizable) as names; None if the call failed.
    pub fn env_names(&self) -> Option<Vec<String>> {
        self.env_names_at(&self.endpoints(), false)
    }

    /// `env list [--stale] -o json` at `endpoints`, as sorted names; None if the call failed.
    pub fn env_names_at(&self, endpoints: &str, stale: bool) -> Option<Vec<String>> {
        let mut args = vec!["env", "list", "-o", "json"];
        if stale {
            args.push("--stale");
        }
        let out = self.hubctl_at(endpoints, &args);
        if !out.success() {
            return None;
        }
        let mut names: Vec<String> = out
            .json()
            .as_array()
            .unwrap_or_else(|| panic!("env list is not an array: {}", out.describe()))
            .iter()
            .map(|e| e["name"].as_str().expect("env name").to_string())
            .collect();
        names.sort();
        Some(names)
    }

    /// `cluster status -o json`, or None if no node answered.
    pub fn status(&self) -> Option<Value> {
        self.status_at(&self.endpoints())
    }

    /// `cluster status -o json` asked at `endpoints` (also when it exits 3: the answer shows
    /// a member down or no leader).
    pub fn status_at(&self, endpoints: &str) -> Option<Value> {
        let out = self.hubctl_at(endpoints, &["cluster", "status", "-o", "json"]);
        if !(out.success() || out.status.code() == Some(3)) {
            return None;
        }
        serde_json::from_str(&out.stdout).ok()
    }

    /// `(applied_index, digest)` of one node's local state (`digest --stale` at `addr`).
    pub fn digest_at(&self, addr: &str) -> Option<(u64, String)> {
        let out = self.hubctl_at(addr, &["digest", "--stale", "-o", "json"]);
        if !out.success() {
            return None;
        }
        let v: Value = serde_json::from_str(&out.stdout).ok()?;
        Some((
            v["applied_index"].as_u64()?,
            v["digest"].as_str()?.to_string(),
        ))
    }

    /// Polls until some node reports a leader that accepts `pred` and that leader itself
    /// reports the role "leader"; returns its id. Panics after `timeout`.
    #[track_caller]
    pub fn wait_leader(&self, timeout: Duration, pred: impl Fn(u64) -> bool) -> u64 {
        self.wait_leader_at(&self.endpoints(), timeout, pred)
    }

    /// [`Cluster::wait_leader`] asking only `endpoints` (e.g. to avoid a paused node, which
    /// accepts connections but never answers).
    #[track_caller]
    pub fn wait_leader_at(
        &self,
        endpoints: &str,
        timeout: Duration,
        pred: impl Fn(u64) -> bool,
    ) -> u64 {
        let mut last = None;
        poll_until(timeout, || {
            let s = self.status_at(endpoints)?;
            last = Some(s.clone());
            let leader = s["leader"].as_u64()?;
            let confirmed = s["members"]
                .as_array()?
                .iter()
                .any(|m| m["id"].as_u64() == Some(leader) && m["role"] == "leader");
            (confirmed && pred(leader)).then_some(leader)
        })
        .unwrap_or_else(|| {
            panic!(
                "no (acceptable) leader within {timeout:?}; last status: {}\n{}",
                last.map(|v| v.to_string()).unwrap_or_else(|| "none".into()),
                self.log_tails(15)
            )
        })
    }

    /// The current leader's id (polls up to [`CONVERGE_TIMEOUT`]).
    #[track_caller]
    pub fn leader_id(&self) -> u64 {
        self.wait_leader(CONVERGE_TIMEOUT, |_| true)
    }

    /// Polls `cluster status` until there is a leader and every reachable member has the same
    /// non-empty digest and the same `last_applied`. Returns that status.
    #[track_caller]
    pub fn wait_converged(&self, timeout: Duration) -> Value {
        self.wait_converged_with(timeout, None)
    }

    /// `cluster status` once the cluster runs feature `level` (the leader raises it within a
    /// second or so of every member advertising it); panics after [`CONVERGE_TIMEOUT`].
    pub fn wait_feature_level(&self, level: u32) -> Value {
        poll_until(CONVERGE_TIMEOUT, || {
            self.status()
                .filter(|s| s["cluster_feature_level"] == u64::from(level))
        })
        .unwrap_or_else(|| panic!("the cluster never ran level {level}: {:?}", self.status()))
    }

    /// Like [`Cluster::wait_converged`], but also requires exactly `members` members, all
    /// reachable (none "unreachable").
    #[track_caller]
    pub fn wait_all_converged(&self, timeout: Duration, members: usize) -> Value {
        self.wait_converged_with(timeout, Some(members))
    }

    #[track_caller]
    fn wait_converged_with(&self, timeout: Duration, all: Option<usize>) -> Value {
        let mut last = None;
        poll_until(timeout, || {
            let s = self.status()?;
            last = Some(s.clone());
            s["leader"].as_u64()?;
            let members = s["members"].as_array()?;
            if let Some(n) = all {
                if members.len() != n || members.iter().any(|m| m["role"] == "unreachable") {
                    return None;
                }
            }
            let reachable: Vec<&Value> = members
                .iter()
                .filter(|m| m["role"] != "unreachable")
                .collect();
            let first = reachable.first()?;
            let digest = first["digest"].as_str().filter(|d| !d.is_empty())?;
            let applied = first["last_applied"].as_u64()?;
            reachable
                .iter()
                .all(|m| m["digest"] == digest && m["last_applied"].as_u64() == Some(applied))
                .then_some(s)
        })
        .unwrap_or_else(|| {
            panic!(
                "cluster did not converge within {timeout:?}; last status: {}\n{}",
                last.map(|v| v.to_string()).unwrap_or_else(|| "none".into()),
                self.log_tails(15)
            )
        })
    }

    /// SIGKILLs node `id` (from `cluster.json` or started by the test) and waits until it is
    /// gone.
    #[track_caller]
    pub fn kill9(&self, id: u64) {
        {
            let mut extra = self.extra.lock().unwrap();
            if let Some(e) = extra.iter_mut().rev().find(|e| e.node.id == id) {
                let _ = e.child.kill();
                let _ = e.child.wait();
                return;
            }
        }
        let node = self.node(id);
        assert!(
            is_our_node(node.pid, &node.data_dir),
            "node {id} (pid {}) is not running",
            node.pid
        );
        assert!(
            kill_and_wait(node.pid, Duration::from_secs(30)),
            "node {id} (pid {}) survived SIGKILL",
            node.pid
        );
    }

    /// Sends `signal` (e.g. `libc::SIGSTOP` to pause, `libc::SIGCONT` to resume) to node `id`.
    #[track_caller]
    pub fn signal(&self, id: u64, signal: i32) {
        let node = self.node(id);
        assert!(
            is_our_node(node.pid, &node.data_dir),
            "node {id} (pid {}) is not running",
            node.pid
        );
        // SAFETY: kill(2) on a pid we checked is one of our hub-node processes.
        let rc = unsafe { libc::kill(node.pid as i32, signal) };
        assert_eq!(rc, 0, "kill({}, {signal}) failed", node.pid);
    }

    /// The endpoints of every `cluster.json` node except `id`.
    pub fn endpoints_except(&self, id: u64) -> String {
        self.nodes()
            .iter()
            .filter(|n| n.id != id)
            .map(|n| n.addr.clone())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `hubctl dev restart-node --id ID` (starts the node again on its data, waits until it
    /// serves), then re-reads `cluster.json`.
    #[track_caller]
    pub fn restart(&mut self, id: u64) {
        let dir = self.dir().display().to_string();
        let id_s = id.to_string();
        let out = hubctl_raw(&[
            "dev",
            "restart-node",
            "--data-dir",
            dir.as_str(),
            "--id",
            id_s.as_str(),
            "-o",
            "json",
        ]);
        // Re-read even on failure: a node may have been started.
        self.reload();
        if !out.success() {
            panic!(
                "restart of node {id} failed: {}\n{}",
                out.describe(),
                self.log_tails(15)
            );
        }
        let pid = self.node(id).pid;
        assert!(
            is_alive(pid),
            "node {id} (pid {pid}) is not running after restart"
        );
    }

    /// Adds `args` to the `node_args` of `cluster.json` (what `dev restart-node` starts a node
    /// with), as an operator changing the nodes' flags would, then restarts every node, the
    /// leader last, waiting for the cluster to converge after each.
    #[track_caller]
    pub fn restart_all_with(&mut self, args: &[&str]) {
        let path = self.dir().join("cluster.json");
        let mut file: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read cluster.json"))
                .expect("cluster.json is JSON");
        let node_args = file["node_args"]
            .as_array_mut()
            .expect("cluster.json has node_args");
        node_args.extend(args.iter().map(|a| Value::from(*a)));
        std::fs::write(&path, serde_json::to_vec_pretty(&file).expect("JSON"))
            .expect("write cluster.json");
        self.reload();
        let leader = self.leader_id();
        let mut order: Vec<u64> = self
            .nodes()
            .iter()
            .map(|n| n.id)
            .filter(|id| *id != leader)
            .collect();
        order.push(leader);
        for id in order {
            self.kill9(id);
            self.restart(id);
            self.wait_converged(CONVERGE_TIMEOUT);
        }
    }

    /// True if node `id`'s process is running.
    pub fn is_running(&self, id: u64) -> bool {
        let node = self.node(id);
        is_our_node(node.pid, &node.data_dir)
    }

    /// Starts a hub-node outside `cluster.json` (as an operator adding a node would): id `id`,
    /// a free port, a fresh data dir `DIR/node-ID`, this cluster's id and node args plus
    /// `extra_args`, logging to `DIR/node-ID.log`. Waits until it serves; Drop kills it.
    #[track_caller]
    pub fn spawn_node(&self, id: u64, extra_args: &[&str]) -> Node {
        let data_dir = self.dir().join(format!("node-{id}"));
        let extra_args: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
        // The port is free when picked but could be taken before hub-node binds it: retry.
        for _attempt in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            match self.start_extra(id, &addr, &data_dir, &self.cluster_id, &extra_args) {
                Ok(node) => return node,
                Err(log) if log.contains("cannot bind") => continue,
                Err(log) => panic!("hub-node {id} exited during start-up:\n{log}"),
            }
        }
        panic!("hub-node {id}: no free port after 5 attempts");
    }

    /// Starts a node that [`Cluster::spawn_node`] started before (and that has been killed)
    /// again, on the same address, data dir and arguments.
    #[track_caller]
    pub fn restart_spawned(&self, id: u64) -> Node {
        let (node, args) = {
            let extra = self.extra.lock().unwrap();
            let e = extra
                .iter()
                .rev()
                .find(|e| e.node.id == id)
                .unwrap_or_else(|| panic!("node {id} was not started by spawn_node"));
            (e.node.clone(), (e.args.clone(), e.cluster_id.clone()))
        };
        let (args, cluster_id) = args;
        assert!(
            !is_alive(node.pid),
            "node {id} (pid {}) is still running",
            node.pid
        );
        self.start_extra(id, &node.addr, &node.data_dir, &cluster_id, &args)
            .unwrap_or_else(|log| panic!("hub-node {id} exited during restart:\n{log}"))
    }

    /// Starts a hub-node of cluster `cluster_id` (with this cluster's certificates and node
    /// args plus `extra_args`) at `addr` on `data_dir`, as an operator bringing up a cluster
    /// restored from a backup would. Waits until it serves; Drop kills it.
    #[track_caller]
    pub fn spawn_node_of(
        &self,
        id: u64,
        addr: &str,
        data_dir: &Path,
        cluster_id: &str,
        extra_args: &[&str],
    ) -> Node {
        let extra_args: Vec<String> = extra_args.iter().map(|a| a.to_string()).collect();
        self.start_extra(id, addr, data_dir, cluster_id, &extra_args)
            .unwrap_or_else(|log| panic!("hub-node {id} exited during start-up:\n{log}"))
    }

    /// Spawns one hub-node and waits until it serves; Err(its new log output) if it exited.
    fn start_extra(
        &self,
        id: u64,
        addr: &str,
        data_dir: &Path,
        cluster_id: &str,
        extra_args: &[String],
    ) -> Result<Node, String> {
        let log_path = self.dir().join(format!("node-{id}.log"));
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .expect("open node log");
        let log_start = log.metadata().map(|m| m.len()).unwrap_or(0) as usize;
        let child = Command::new(hub_node_bin())
            .args(["--id", &id.to_string(), "--listen", addr])
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--cluster-id", cluster_id])
            .args(self.tls_args(&hub_tls::Identity::Node(id)))
            .args(&self.node_args)
            .args(extra_args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("dup log"))
            .stderr(log)
            .process_group(0)
            .spawn()
            .expect("start hub-node");
        let node = Node {
            id,
            addr: addr.to_string(),
            pid: child.id(),
            data_dir: data_dir.to_path_buf(),
        };
        self.extra.lock().unwrap().push(ExtraNode {
            child,
            node: node.clone(),
            args: extra_args.to_vec(),
            cluster_id: cluster_id.to_string(),
        });
        let serving = poll_until(CONVERGE_TIMEOUT, || {
            if !is_alive(node.pid) {
                return Some(false);
            }
            self.digest_at(addr).map(|_| true)
        });
        match serving {
            Some(true) => Ok(node),
            Some(false) => {
                // Reap it; the entry stays in `extra` (killing a reaped child is a no-op).
                if let Some(e) = self
                    .extra
                    .lock()
                    .unwrap()
                    .iter_mut()
                    .find(|e| e.node.pid == node.pid)
                {
                    let _ = e.child.wait();
                }
                let text = std::fs::read(&log_path).unwrap_or_default();
                Err(String::from_utf8_lossy(&text[log_start.min(text.len())..]).into_owned())
            }
            None => panic!(
                "hub-node {id} did not serve at {addr} within {CONVERGE_TIMEOUT:?}:\n{}",
                tail(&log_path, 10)
            ),
        }
    }

    /// The `addr=` of each node's first log line containing `needle` (e.g. a listener's
    /// "metrics at /metrics"), by node id; panics if a node never logs it.
    pub fn logged_addrs(&self, needle: &str) -> Vec<(u64, String)> {
        self.nodes()
            .iter()
            .map(|n| {
                let log = self.dir().join(format!("node-{}.log", n.id));
                let addr = poll_until(CONVERGE_TIMEOUT, || {
                    let text = std::fs::read_to_string(&log).ok()?;
                    let line = text.lines().find(|l| l.contains(needle))?;
                    let addr = line.split("addr=").nth(1)?.split_whitespace().next()?;
                    Some(addr.to_string())
                })
                .unwrap_or_else(|| panic!("node {} never logged {needle:?}", n.id));
                (n.id, addr)
            })
            .collect()
    }

    /// The last `n` lines of every node log, for failure messages.
    pub fn log_tails(&self, n: usize) -> String {
        let mut logs: Vec<PathBuf> = std::fs::read_dir(self.dir())
            .map(|rd| {
                rd.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|x| x == "log"))
                    .collect()
            })
            .unwrap_or_default();
        logs.sort();
        logs.iter()
            .map(|p| format!("=== {} ===\n{}", p.display(), tail(p, n)))
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let nodes = self.nodes.get_mut().map(|n| n.clone()).unwrap_or_default();
        for n in &nodes {
            if is_our_node(n.pid, &n.data_dir) {
                kill_and_wait(n.pid, Duration::from_secs(10));
            }
        }
        if let Ok(extra) = self.extra.get_mut() {
            for e in extra.iter_mut() {
                let _ = e.child.kill();
                let _ = e.child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "--- node logs of the failed test ({}) ---\n{}",
                self.dir().display(),
                self.log_tails(40)
            );
            if std::env::var_os("HUB_TESTS_KEEP").is_some() {
                self.dir.disable_cleanup(true);
                eprintln!("kept {}", self.dir().display());
            }
        }
    }
}

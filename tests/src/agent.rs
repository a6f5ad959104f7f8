//! The minimal test agent (`test-agent`) as a child process, and direct calls to the hub's
//! gRPC API (`Submit`, `Query`) for tests that need many writes or structured answers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hub_proto::hub_client::HubClient;
use hub_proto::{QueryRequest, ReadOptions, SubmitRequest};
use serde_json::Value;

use crate::{bin_dir, Cluster};

/// How long [`Cluster::submit`] keeps trying while no node can take the write.
const SUBMIT_DEADLINE: Duration = Duration::from_secs(30);

/// A running `test-agent` process; SIGKILLed on drop.
pub struct TestAgent {
    child: Child,
    /// Its execution log: one line per plan started.
    pub log: PathBuf,
}

/// One line of the test agent's execution log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Execution {
    /// Plan id.
    pub plan: String,
    /// Entity id.
    pub entity: String,
    /// Plan kind.
    pub kind: String,
    /// Target version or `-`.
    pub to_version: String,
}

impl TestAgent {
    /// The plans it has started, in order.
    pub fn executions(&self) -> Vec<Execution> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split(' ').collect();
                (f.len() == 4).then(|| Execution {
                    plan: f[0].into(),
                    entity: f[1].into(),
                    kind: f[2].into(),
                    to_version: f[3].into(),
                })
            })
            .collect()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for TestAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Cluster {
    /// Starts `test-agent` for `environment` against every node (`extra` are more flags).
    pub fn start_test_agent(&self, environment: &str, extra: &[&str]) -> TestAgent {
        let log = self.dir().join(format!("agent-{environment}.exec"));
        let stderr = std::fs::File::create(self.dir().join(format!("agent-{environment}.log")))
            .expect("create the agent's log");
        let child = Command::new(bin_dir().join("test-agent"))
            .args([
                "--environment",
                environment,
                "--endpoints",
                &self.endpoints(),
            ])
            .args(self.tls_args(&hub_tls::Identity::Agent(environment.to_string())))
            .arg("--log")
            .arg(&log)
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start test-agent (build it with cargo build --workspace --bins)");
        TestAgent { child, log }
    }

    /// A typed query through [`Cluster::query`] (the same `Hub.Query` call, as JSON on the
    /// wire): its answer read as the query's answer type; `Err` carries the server's message.
    /// Panics if the answer is not of that type (the hub and `hub-client` disagree).
    #[track_caller]
    pub fn ask<T: hub_client::answer::Typed>(&self, q: &T) -> Result<T::Answer, String> {
        let query = serde_json::to_value(q.query()).expect("a query is JSON");
        let v = self.query(query.clone())?;
        Ok(serde_json::from_value(v.clone()).unwrap_or_else(|e| {
            panic!(
                "the answer to {query} is not a {} ({e}): {v}",
                std::any::type_name::<T::Answer>()
            )
        }))
    }

    /// `Hub.Query` against the first node that answers; `Err` carries the server's message.
    pub fn query(&self, query: Value) -> Result<Value, String> {
        let endpoints: Vec<String> = self.endpoints().split(',').map(String::from).collect();
        let admin = hub_tls::Identity::Operator(crate::tls::ADMIN.into());
        block_on(async move {
            let mut last = String::from("no endpoint");
            for addr in endpoints {
                let Ok(Ok(ch)) =
                    tokio::time::timeout(Duration::from_secs(2), self.channel_as(&admin, &addr))
                        .await
                else {
                    last = format!("{addr}: unreachable");
                    continue;
                };
                let mut c = HubClient::new(ch);
                let req = QueryRequest {
                    query_json: query.to_string(),
                    read: Some(ReadOptions { stale: false }),
                };
                match tokio::time::timeout(Duration::from_secs(10), c.query(req)).await {
                    Ok(Ok(r)) => {
                        return serde_json::from_str(&r.into_inner().json)
                            .map_err(|e| e.to_string())
                    }
                    Ok(Err(s)) if s.code() == tonic::Code::Unavailable => {
                        last = format!("{addr}: {}", s.message())
                    }
                    Ok(Err(s)) => return Err(s.message().to_string()),
                    Err(_) => last = format!("{addr}: timed out"),
                }
            }
            Err(last)
        })
    }

    /// `Hub.Submit` of one engine command (JSON) with a request id, against the first node
    /// that answers; retried on other nodes with the same id (applied once).
    pub fn submit(&self, command: Value) -> Result<Value, String> {
        let request_id = format!("test-{}-{}", std::process::id(), unique());
        self.submit_with_id(command, &request_id)
    }

    /// [`Cluster::submit`] with a given idempotency key (what a client retrying one request
    /// across a failover sends); only live nodes are tried. While every node answers
    /// "unavailable" (an election under way, a node cut off from its leader) it tries them
    /// all again until [`SUBMIT_DEADLINE`]: on a loaded machine an election can outlast a
    /// few quick rounds. Any other refusal is returned at once.
    pub fn submit_with_id(&self, command: Value, request_id: &str) -> Result<Value, String> {
        let endpoints: Vec<String> = self.endpoints().split(',').map(String::from).collect();
        let request_id = request_id.to_string();
        let admin = hub_tls::Identity::Operator(crate::tls::ADMIN.into());
        block_on(async move {
            let deadline = tokio::time::Instant::now() + SUBMIT_DEADLINE;
            let mut last = String::from("no endpoint");
            loop {
                if tokio::time::Instant::now() >= deadline {
                    return Err(last);
                }
                for addr in &endpoints {
                    let Ok(Ok(ch)) =
                        tokio::time::timeout(Duration::from_secs(2), self.channel_as(&admin, addr))
                            .await
                    else {
                        last = format!("{addr}: unreachable");
                        continue;
                    };
                    let mut c = HubClient::new(ch);
                    let req = SubmitRequest {
                        command_json: command.to_string(),
                        request_id: request_id.clone(),
                    };
                    match tokio::time::timeout(Duration::from_secs(10), c.submit(req)).await {
                        Ok(Ok(r)) => {
                            let r = r.into_inner();
                            return Ok(serde_json::from_str(&r.output_json).unwrap_or(Value::Null));
                        }
                        Ok(Err(s)) if s.code() == tonic::Code::Unavailable => {
                            last = format!("{addr}: {}", s.message())
                        }
                        Ok(Err(s)) => return Err(s.message().to_string()),
                        Err(_) => last = format!("{addr}: timed out"),
                    }
                }
                // Every node said no for now: give an election a moment before the next round.
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime")
        .block_on(f)
}

/// A running `hub-agent` process; SIGKILLed on drop.
pub struct HubAgent {
    child: Child,
    /// Its data directory.
    pub data_dir: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    log: PathBuf,
}

impl HubAgent {
    /// Sends `signal` (e.g. `libc::SIGHUP`: reload the TLS files) to the agent.
    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on the pid of a child this handle owns and has not reaped.
        let rc = unsafe { libc::kill(self.child.id() as i32, signal) };
        assert_eq!(rc, 0, "kill({}, {signal}) failed", self.child.id());
    }

    /// Waits up to `timeout` for the agent to exit on its own: its exit status, or `None`.
    pub fn wait_exit(&mut self, timeout: std::time::Duration) -> Option<std::process::ExitStatus> {
        crate::poll_until(timeout, || self.child.try_wait().ok().flatten())
    }

    /// SIGKILLs the agent (its services keep running: they are in their own sessions).
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts it again with the same arguments and data directory.
    pub fn restart(&mut self) {
        self.kill9();
        self.child = spawn_agent(&self.args, &self.env, &self.log);
    }

    /// The agent's log (stderr).
    pub fn log_tail(&self, n: usize) -> String {
        crate::tail(&self.log, n)
    }
}

impl Drop for HubAgent {
    fn drop(&mut self) {
        self.kill9();
        // Stop the services it started (they run in their own sessions).
        for pid in service_pids(&self.data_dir) {
            // SAFETY: plain syscall on a pid read from the agent's own state file.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        if std::thread::panicking() {
            eprintln!("--- hub-agent log ---\n{}", self.log_tail(60));
        }
    }
}

/// Pids recorded in the process driver's state files under `data_dir`.
fn service_pids(data_dir: &std::path::Path) -> Vec<i32> {
    let mut pids = Vec::new();
    let Ok(entries) = std::fs::read_dir(data_dir.join("process")) else {
        return pids;
    };
    for e in entries.flatten() {
        let Ok(bytes) = std::fs::read(e.path().join("state.json")) else {
            continue;
        };
        if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
            if let Some(pid) = v["pid"].as_i64() {
                pids.push(pid as i32);
            }
        }
    }
    pids
}

fn spawn_agent(args: &[String], env: &[(String, String)], log: &std::path::Path) -> Child {
    let stderr = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .expect("open the agent log");
    Command::new(bin_dir().join("hub-agent"))
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .expect("start hub-agent (build it with cargo build --workspace --bins)")
}

impl Cluster {
    /// Starts `hub-agent` for `environment` (data in the cluster's directory) with `extra`
    /// flags, against every node.
    pub fn start_hub_agent(&self, environment: &str, extra: &[&str]) -> HubAgent {
        self.start_hub_agent_with_env(environment, extra, &[])
    }

    /// [`Cluster::start_hub_agent`] with environment variables (e.g. `HTTPS_PROXY`), kept
    /// across restarts.
    pub fn start_hub_agent_with_env(
        &self,
        environment: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> HubAgent {
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let data_dir = self.dir().join(format!("agent-{environment}"));
        let log = self.dir().join(format!("hub-agent-{environment}.log"));
        let mut args: Vec<String> = vec![
            "--environment".into(),
            environment.into(),
            "--endpoints".into(),
            self.endpoints(),
            "--data-dir".into(),
            data_dir.display().to_string(),
        ];
        // Frequent samples and short polls, unless the test sets its own.
        if !extra.contains(&"--state-interval-ms") {
            args.extend(["--state-interval-ms".into(), "300".into()]);
        }
        if !extra.contains(&"--poll-wait-ms") {
            args.extend(["--poll-wait-ms".into(), "2000".into()]);
        }
        // The tests' registries listen on loopback, which an agent denies by default.
        if !extra.contains(&"--outbound-allow") && !extra.contains(&"--outbound-deny") {
            args.extend([
                "--outbound-allow".into(),
                hub_http::DenyList::LOOPBACK.into(),
            ]);
        }
        args.extend(
            self.tls_args(&hub_tls::Identity::Agent(environment.to_string()))
                .into_iter()
                .map(|a| a.to_string_lossy().into_owned()),
        );
        args.extend(extra.iter().map(|s| s.to_string()));
        let child = spawn_agent(&args, &env, &log);
        HubAgent {
            child,
            data_dir,
            args,
            env,
            log,
        }
    }

    /// Packages the demo service (1.0.0, 1.1.0, 1.2.0, broken 2.0.0) with `scripts/demo-package.sh`
    /// into `<cluster dir>/demo`; returns that directory (`registry/`, `manifests/`).
    pub fn package_demo(&self) -> PathBuf {
        let out = self.dir().join("demo");
        // The runtime variable (set by `cargo test`) names this checkout; the compiled-in one
        // may name another clone that shared the target directory.
        let manifest_dir = std::env::var("CARGO_MANIFEST_DIR")
            .unwrap_or_else(|_| env!("CARGO_MANIFEST_DIR").to_string());
        let script = std::path::Path::new(&manifest_dir).join("../scripts/demo-package.sh");
        let status = Command::new("bash")
            .arg(&script)
            .arg(&out)
            .args(["1.0.0", "1.1.0", "1.2.0", "2.0.0:broken"])
            .env("DEMO_SERVICE_BIN", bin_dir().join("demo-service"))
            .stdout(Stdio::null())
            .status()
            .expect("run scripts/demo-package.sh");
        assert!(status.success(), "demo-package.sh failed");
        out
    }
}

/// `GET http://127.0.0.1:<port><path>`: status and body, or `None` if nothing answers.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    http_get_at(std::net::SocketAddr::from(([127, 0, 0, 1], port)), path)
}

/// [`http_get`] on any address (a canary's stable `127.0.0.2`/`127.0.0.3` addresses).
pub fn http_get_at(addr: std::net::SocketAddr, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let status = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default();
    Some((status, body))
}

impl Cluster {
    /// `Agent.ReportTask` as an agent of `environment` would send it; `Err` carries the
    /// server's message.
    pub fn agent_report_task(
        &self,
        environment: &str,
        plan_id: &str,
        task: &str,
        state: &str,
    ) -> Result<(), String> {
        let addr = self
            .endpoints()
            .split(',')
            .next()
            .unwrap_or_default()
            .to_string();
        let req = hub_proto::ReportTaskRequest {
            environment: environment.to_string(),
            plan_id: plan_id.to_string(),
            task: task.to_string(),
            attempt: 1,
            state: hub_proto::TaskState::from_str_name(&format!(
                "TASK_STATE_{}",
                state.to_uppercase()
            ))
            .unwrap_or_else(|| panic!("{state:?} is not a task state")) as i32,
            output: String::new(),
            failure: None,
            request_id: String::new(),
        };
        block_on(async move {
            let ch = self
                .channel_as(&hub_tls::Identity::Agent(environment.to_string()), &addr)
                .await
                .map_err(|e| e.to_string())?;
            let mut c = hub_proto::agent_client::AgentClient::new(ch);
            c.report_task(req)
                .await
                .map(|_| ())
                .map_err(|s| s.message().to_string())
        })
    }
}

impl Cluster {
    /// `Agent.ReportTasks` as an agent of `environment` would send it, to node `node`
    /// (0-based); returns the reply (its `refused` lists the reports the hub refused), or the
    /// server's message.
    pub fn agent_report_tasks(
        &self,
        node: usize,
        environment: &str,
        reports: Vec<hub_proto::ReportTaskRequest>,
    ) -> Result<hub_proto::AgentReply, String> {
        let addr = self
            .endpoints()
            .split(',')
            .nth(node)
            .unwrap_or_default()
            .to_string();
        let req = hub_proto::ReportTasksRequest {
            environment: environment.to_string(),
            reports,
            request_id: format!("test-{}", rand_suffix()),
        };
        block_on(async move {
            let ch = self
                .channel_as(&hub_tls::Identity::Agent(environment.to_string()), &addr)
                .await
                .map_err(|e| e.to_string())?;
            let mut c = hub_proto::agent_client::AgentClient::new(ch);
            c.report_tasks(req)
                .await
                .map(|r| r.into_inner())
                .map_err(|s| s.message().to_string())
        })
    }
}

impl Cluster {
    /// `Agent.ReportStates` for one entity as an agent of `environment` would send it, to
    /// node `node` (0-based); returns the reply's `result` (`"unchanged"` when no write was
    /// needed), or the server's message.
    pub fn agent_report_state(
        &self,
        node: usize,
        environment: &str,
        entity: &str,
        version: &str,
        health: &str,
    ) -> Result<String, String> {
        let addr = self
            .endpoints()
            .split(',')
            .nth(node)
            .unwrap_or_default()
            .to_string();
        let req = hub_proto::ReportStatesRequest {
            environment: environment.to_string(),
            states: vec![hub_proto::EntityState {
                entity: entity.to_string(),
                version: version.to_string(),
                health: hub_proto::Health::from_str_name(&format!(
                    "HEALTH_{}",
                    health.to_uppercase()
                ))
                .unwrap_or_else(|| panic!("{health:?} is not a health"))
                    as i32,
                ..Default::default()
            }],
            request_id: format!("test-{}", rand_suffix()),
        };
        block_on(async move {
            let ch = self
                .channel_as(&hub_tls::Identity::Agent(environment.to_string()), &addr)
                .await
                .map_err(|e| e.to_string())?;
            let mut c = hub_proto::agent_client::AgentClient::new(ch);
            c.report_states(req)
                .await
                .map(|r| r.into_inner().result)
                .map_err(|s| s.message().to_string())
        })
    }
}

fn rand_suffix() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or_default()
}

//! The minimal test agent (`test-agent`) as a child process, and direct calls to the hub's
//! gRPC API (`Submit`, `Query`) for tests that need many writes or structured answers.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use hub_proto::hub_client::HubClient;
use hub_proto::{QueryRequest, ReadOptions, SubmitRequest};
use serde_json::Value;

use crate::{bin_dir, Cluster};

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

    /// `Hub.Query` against the first node that answers; `Err` carries the server's message.
    pub fn query(&self, query: Value) -> Result<Value, String> {
        let endpoints: Vec<String> = self.endpoints().split(',').map(String::from).collect();
        block_on(async move {
            let mut last = String::from("no endpoint");
            for addr in endpoints {
                let Ok(Ok(mut c)) = tokio::time::timeout(
                    Duration::from_secs(2),
                    HubClient::connect(format!("http://{addr}")),
                )
                .await
                else {
                    last = format!("{addr}: unreachable");
                    continue;
                };
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
        let endpoints: Vec<String> = self.endpoints().split(',').map(String::from).collect();
        let request_id = format!("test-{}-{}", std::process::id(), unique());
        block_on(async move {
            let mut last = String::from("no endpoint");
            for _round in 0..3 {
                for addr in &endpoints {
                    let Ok(Ok(mut c)) = tokio::time::timeout(
                        Duration::from_secs(2),
                        HubClient::connect(format!("http://{addr}")),
                    )
                    .await
                    else {
                        last = format!("{addr}: unreachable");
                        continue;
                    };
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
            }
            Err(last)
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

//! The register workload: concurrent clients writing and reading a few keys through the hub's
//! client API, each operation recorded with its invocation and completion time (a history the
//! linearizability checker can judge).
//!
//! A key is an environment `reg-<k>`; its value is the environment's `auto_suppression_ms`
//! setting: a write is `SetEnvironmentSettings` with `60 000 + value` (values are unique and
//! never the default's), a read is the linearizable `environment_settings` query. An answered
//! write is acknowledged; a refused one (the hub answered that it did not apply it) failed;
//! anything else (timeout, lost connection, no leader) may or may not have happened.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hub_client::answer::{EnvironmentSettingsView, GetEnvironmentSettings, Typed};
use hub_proto::{QueryRequest, ReadOptions, SubmitRequest};
use serde_json::json;
use tonic::Code;

use super::cluster::connect;
use crate::check::{OpKind, Outcome, RegisterOp};

/// `auto_suppression_ms` = this + value.
const VALUE_BASE_MS: u64 = 60_000;
/// Values start here, far from the default setting (1 hour) minus the base.
const FIRST_VALUE: u64 = 10_000_000;
/// Timeout of one operation.
const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// The environment holding key `k`.
pub fn key_env(k: usize) -> String {
    format!("reg-{k}")
}

/// When an operation was sent and when its client had an answer of any kind (a result, an
/// error or its timeout): how long the client waited, which the checked history does not
/// keep for operations with an unknown outcome.
#[derive(Debug, Clone, Copy)]
pub struct Answer {
    /// When the client sent it (runner's clock, ns).
    pub invoke_ns: u64,
    /// When the client had its answer.
    pub answered_ns: u64,
}

/// A running register workload.
pub struct Workload {
    stop: Arc<AtomicBool>,
    ops: Arc<Mutex<Vec<RegisterOp>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Nanoseconds of the runner's clock at the last acknowledged write.
    pub last_ack_ns: Arc<AtomicU64>,
}

impl Workload {
    /// Starts `clients` clients over `keys` keys against `endpoints`; times are nanoseconds
    /// since `epoch`.
    pub fn start(
        endpoints: crate::runner::endpoints::SharedEndpoints,
        keys: usize,
        clients: usize,
        seed: u64,
        epoch: Instant,
    ) -> Workload {
        let stop = Arc::new(AtomicBool::new(false));
        let ops = Arc::new(Mutex::new(Vec::new()));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let next_id = Arc::new(AtomicU64::new(0));
        let last_ack_ns = Arc::new(AtomicU64::new(0));
        let tasks = (0..clients)
            .map(|c| {
                let client = Client {
                    id: c as u32,
                    endpoints: endpoints.clone(),
                    keys,
                    rng: seed ^ (0x9E37_79B9_7F4A_7C15u64.wrapping_mul(c as u64 + 1)),
                    epoch,
                    seq: 0,
                    ops: ops.clone(),
                    answers: answers.clone(),
                    next_id: next_id.clone(),
                    last_ack_ns: last_ack_ns.clone(),
                };
                tokio::spawn(client.run(stop.clone()))
            })
            .collect();
        Workload {
            stop,
            ops,
            answers,
            tasks,
            last_ack_ns,
        }
    }

    /// Stops the clients (in-flight operations finish or time out) and returns the history
    /// and every operation's answer time.
    pub async fn stop(self) -> (Vec<RegisterOp>, Vec<Answer>) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.tasks {
            let _ = t.await;
        }
        let mut ops = std::mem::take(&mut *self.ops.lock().unwrap_or_else(|p| p.into_inner()));
        ops.sort_by_key(|o| o.id);
        let answers = std::mem::take(&mut *self.answers.lock().unwrap_or_else(|p| p.into_inner()));
        (ops, answers)
    }
}

/// Creates the key environments (retrying until the hub takes them).
pub async fn create_keys(endpoints: &[String], keys: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    for k in 0..keys {
        loop {
            let r = submit(
                endpoints,
                k,
                json!({"CreateEnvironment": {"name": key_env(k), "description": "chaos register"}}),
                &format!("chaos-key-{k}"),
            )
            .await;
            match r {
                Ok(()) => break,
                Err(e) if e.code() == Code::AlreadyExists => break,
                Err(e) if Instant::now() > deadline => {
                    anyhow::bail!("cannot create register key {k}: {}", e.message())
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}

struct Client {
    id: u32,
    endpoints: crate::runner::endpoints::SharedEndpoints,
    keys: usize,
    rng: u64,
    epoch: Instant,
    seq: u64,
    ops: Arc<Mutex<Vec<RegisterOp>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
    next_id: Arc<AtomicU64>,
    last_ack_ns: Arc<AtomicU64>,
}

impl Client {
    fn next(&mut self) -> u64 {
        // xorshift64*: deterministic per seed and client.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    async fn run(mut self, stop: Arc<AtomicBool>) {
        while !stop.load(Ordering::Relaxed) {
            let key = (self.next() % self.keys as u64) as usize;
            let write = self.next().is_multiple_of(2);
            let id = self.next_id.fetch_add(1, Ordering::Relaxed);
            let endpoints = self.endpoints.get();
            let endpoint = (self.next() % endpoints.len().max(1) as u64) as usize;
            let invoke_ns = self.now_ns();
            let (kind, outcome) = if write {
                self.seq += 1;
                let value = FIRST_VALUE + u64::from(self.id) * 1_000_000 + self.seq;
                let cmd = json!({"SetEnvironmentSettings": {"environment": key_env(key),
                    "patch": {"auto_suppression_ms": VALUE_BASE_MS + value}}});
                let r = submit(
                    &endpoints,
                    endpoint,
                    cmd,
                    &format!("reg-{}-{}", self.id, self.seq),
                )
                .await;
                let outcome = match r {
                    Ok(()) => {
                        self.last_ack_ns.fetch_max(self.now_ns(), Ordering::Relaxed);
                        Outcome::Ok { read_value: None }
                    }
                    Err(e) if definitely_not_applied(&e) => Outcome::Failed,
                    Err(_) => Outcome::Unknown,
                };
                (OpKind::Write { value }, outcome)
            } else {
                let outcome = match read(&endpoints, endpoint, key).await {
                    Ok(v) => Outcome::Ok { read_value: v },
                    Err(_) => Outcome::Unknown,
                };
                (OpKind::Read, outcome)
            };
            let answered_ns = self.now_ns();
            self.answers
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Answer {
                    invoke_ns,
                    answered_ns,
                });
            let unknown = matches!(outcome, Outcome::Unknown);
            let complete_ns = (!unknown).then_some(answered_ns);
            let op = RegisterOp {
                id,
                client: self.id,
                key: key_env(key),
                kind,
                invoke_ns,
                complete_ns,
                outcome,
            };
            self.ops.lock().unwrap_or_else(|p| p.into_inner()).push(op);
            if unknown {
                // Back off a little after a failure so a dead node is not hammered.
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Whether an error proves the write was not applied: the hub validated and refused it.
fn definitely_not_applied(e: &tonic::Status) -> bool {
    matches!(
        e.code(),
        Code::InvalidArgument | Code::NotFound | Code::FailedPrecondition | Code::PermissionDenied
    )
}

async fn submit(
    endpoints: &[String],
    first: usize,
    command: serde_json::Value,
    request_id: &str,
) -> Result<(), tonic::Status> {
    let addr = &endpoints[first % endpoints.len()];
    let mut c = connect(addr)
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut req = tonic::Request::new(SubmitRequest {
        command_json: command.to_string(),
        request_id: request_id.to_string(),
    });
    req.set_timeout(OP_TIMEOUT);
    c.submit(req).await.map(|_| ())
}

async fn read(endpoints: &[String], first: usize, key: usize) -> anyhow::Result<Option<u64>> {
    read_key(&endpoints[first % endpoints.len()], key, false).await
}

/// Key `key` as node `addr` reads it: linearizable, or its local state with `stale`.
async fn read_key(addr: &str, key: usize, stale: bool) -> anyhow::Result<Option<u64>> {
    let mut c = connect(addr).await?;
    let mut req = tonic::Request::new(QueryRequest {
        query_json: serde_json::to_string(&GetEnvironmentSettings(key_env(key)).query())?,
        read: Some(ReadOptions { stale }),
    });
    req.set_timeout(OP_TIMEOUT);
    let r = c.query(req).await?.into_inner();
    let v: EnvironmentSettingsView = serde_json::from_str(&r.json)?;
    let ms = u64::try_from(v.auto_suppression_ms)
        .map_err(|_| anyhow::anyhow!("negative auto_suppression_ms in {v:?}"))?;
    Ok(ms.checked_sub(VALUE_BASE_MS).filter(|v| *v >= FIRST_VALUE))
}

/// Reads every key from node `addr`'s local state (after healing and convergence).
pub async fn final_reads(addr: &str, keys: usize) -> anyhow::Result<Vec<(String, Option<u64>)>> {
    let mut out = Vec::new();
    for k in 0..keys {
        out.push((key_env(k), read_key(addr, k, true).await?));
    }
    Ok(out)
}

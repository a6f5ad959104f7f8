//! A minimal agent for black-box tests of plan issuance (the real agent is `hub-agent`).
//!
//! It long-polls the hub for its environment's plans, "executes" each task by reporting it
//! running and then succeeded (or failed, for a chosen version), and appends one line per plan
//! it starts to `--log`, so a test can prove that no plan ran twice. It fails over between
//! endpoints like a real agent: a failed call rotates to the next endpoint after a short,
//! jittered back-off, and every report is idempotent (the hub keys it by plan, task, attempt
//! and state), so a report retried after a failover counts once.

use std::collections::HashSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Parser;
use hub_proto::agent_client::AgentClient;
use hub_proto::{FetchPlansRequest, PlanFailure, PlanKind, ReportTaskRequest, TaskState};
use tonic::transport::{Channel, Endpoint};

#[derive(Parser, Debug, Clone)]
struct Args {
    /// The environment it serves.
    #[arg(long)]
    environment: String,
    /// Hub endpoints, host:port,...
    #[arg(long, value_delimiter = ',')]
    endpoints: Vec<String>,
    /// One line per plan started: `<plan id> <entity> <kind> <to version>`.
    #[arg(long)]
    log: std::path::PathBuf,
    /// Fail the `readiness` task of plans moving to this version.
    #[arg(long, default_value = "")]
    fail_version: String,
    /// Time each task takes.
    #[arg(long, default_value_t = 20)]
    task_ms: u64,
    /// Plans run at once.
    #[arg(long, default_value_t = 16)]
    parallel: usize,
    /// The cluster CA (PEM).
    #[arg(long)]
    ca_file: Option<std::path::PathBuf>,
    /// Its agent certificate (PEM).
    #[arg(long)]
    cert_file: Option<std::path::PathBuf>,
    /// Its key (PEM).
    #[arg(long)]
    key_file: Option<std::path::PathBuf>,
    /// Plaintext, to an --insecure hub.
    #[arg(long)]
    insecure: bool,
}

/// Endpoint rotation shared by every call.
struct Hub {
    endpoints: Mutex<Vec<String>>,
    connector: hub_tls::client::Connector,
}

impl Hub {
    fn current(&self) -> String {
        self.endpoints.lock().expect("lock")[0].clone()
    }

    fn rotate(&self, failed: &str) {
        let mut e = self.endpoints.lock().expect("lock");
        if e[0] == failed {
            e.rotate_left(1);
        }
    }

    async fn client(&self) -> Result<(String, AgentClient<Channel>), String> {
        let addr = self.current();
        let connected = self
            .connector
            .channel(&addr, |ep: Endpoint| {
                ep.connect_timeout(Duration::from_millis(500))
            })
            .await;
        match connected {
            Ok(ch) => Ok((addr, AgentClient::new(ch))),
            Err(e) => {
                self.rotate(&addr);
                Err(format!("{addr}: {e}"))
            }
        }
    }

    /// Retries `report` until some node accepts it (safe: reports are idempotent).
    async fn report(&self, req: ReportTaskRequest) {
        let mut backoff = 50u64;
        loop {
            match self.client().await {
                Ok((addr, mut c)) => {
                    let mut r = tonic::Request::new(req.clone());
                    r.set_timeout(Duration::from_secs(10));
                    match c.report_task(r).await {
                        Ok(_) => return,
                        Err(s)
                            if s.code() == tonic::Code::NotFound
                                || s.code() == tonic::Code::InvalidArgument =>
                        {
                            eprintln!("report refused: {}", s.message());
                            return;
                        }
                        Err(s) => {
                            eprintln!("report via {addr} failed: {}", s.message());
                            self.rotate(&addr);
                        }
                    }
                }
                Err(e) => eprintln!("connect: {e}"),
            }
            tokio::time::sleep(Duration::from_millis(backoff + jitter(backoff))).await;
            backoff = (backoff * 2).min(1_000);
        }
    }
}

/// The engine's label of a plan kind, for the log; `?<value>` for one this binary does not
/// know.
fn kind_label(kind: i32) -> String {
    match PlanKind::try_from(kind) {
        Ok(PlanKind::Install) => "install".into(),
        Ok(PlanKind::ConfigChange) => "config-change".into(),
        Ok(PlanKind::VersionChange) => "version-change".into(),
        Ok(PlanKind::Uninstall) => "uninstall".into(),
        Ok(PlanKind::SecretsChange) => "secrets-change".into(),
        Ok(PlanKind::Rollback) => "rollback".into(),
        Ok(PlanKind::RecallRollOff) => "recall-roll-off".into(),
        Ok(PlanKind::Command) => "command".into(),
        Ok(PlanKind::CanaryStep) => "canary-step".into(),
        Ok(PlanKind::Unspecified) | Err(_) => format!("?{kind}"),
    }
}

fn jitter(max: u64) -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos() as u64)
        .unwrap_or(0);
    nanos % max.max(1)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let mode = match (
        &args.ca_file,
        &args.cert_file,
        &args.key_file,
        args.insecure,
    ) {
        (Some(ca), Some(cert), Some(key), false) => {
            let files = hub_tls::TlsFiles {
                ca: ca.clone(),
                cert: cert.clone(),
                key: key.clone(),
            };
            let tls = hub_tls::client::ClientTls::load(
                files,
                Some(hub_tls::Identity::Agent(args.environment.clone())),
                std::time::SystemTime::now(),
            )
            .unwrap_or_else(|e| panic!("test-agent: {e}"));
            hub_tls::client::ClientMode::Tls(Arc::new(tls))
        }
        (None, None, None, true) => hub_tls::client::ClientMode::Plaintext,
        _ => panic!("test-agent: --ca-file, --cert-file and --key-file, or --insecure"),
    };
    let hub = Arc::new(Hub {
        endpoints: Mutex::new(args.endpoints.clone()),
        connector: hub_tls::client::Connector::new(mode, Duration::from_millis(500)),
    });
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&args.log)
            .expect("open --log"),
    ));
    let started: Arc<Mutex<HashSet<String>>> = Arc::default();
    let permits = Arc::new(tokio::sync::Semaphore::new(args.parallel.max(1)));
    let mut fingerprint = String::new();
    loop {
        let (addr, mut c) = match hub.client().await {
            Ok(c) => c,
            Err(e) => {
                eprintln!("connect: {e}");
                tokio::time::sleep(Duration::from_millis(100 + jitter(100))).await;
                continue;
            }
        };
        let mut req = tonic::Request::new(FetchPlansRequest {
            environment: args.environment.clone(),
            known_fingerprint: fingerprint.clone(),
            wait_ms: 2_000,
            known_plan_ids: Vec::new(),
        });
        req.set_timeout(Duration::from_secs(10));
        let reply = match c.fetch_plans(req).await {
            Ok(r) => r.into_inner(),
            Err(s) => {
                eprintln!("fetch via {addr} failed: {}", s.message());
                hub.rotate(&addr);
                tokio::time::sleep(Duration::from_millis(100 + jitter(100))).await;
                continue;
            }
        };
        fingerprint = reply.fingerprint.clone();
        // The hub's endpoint list replaces ours (current one first).
        if !reply.endpoints.is_empty() {
            let mut e = hub.endpoints.lock().expect("lock");
            let cur = e[0].clone();
            let mut fresh = reply.endpoints.clone();
            if let Some(pos) = fresh.iter().position(|x| *x == cur) {
                fresh.rotate_left(pos);
            }
            *e = fresh;
        }
        for plan in reply.plans {
            if !started.lock().expect("lock").insert(plan.id.clone()) {
                continue;
            }
            writeln!(
                log.lock().expect("lock"),
                "{} {} {} {}",
                plan.id,
                plan.entity,
                kind_label(plan.kind),
                if plan.to_version.is_empty() {
                    "-"
                } else {
                    &plan.to_version
                }
            )
            .expect("write --log");
            let hub = hub.clone();
            let args = args.clone();
            let permit = permits.clone().acquire_owned().await.expect("semaphore");
            tokio::spawn(async move {
                let _permit = permit;
                for task in &plan.tasks {
                    if task.state == TaskState::Succeeded as i32 {
                        continue;
                    }
                    let base = ReportTaskRequest {
                        environment: args.environment.clone(),
                        plan_id: plan.id.clone(),
                        task: task.name.clone(),
                        attempt: 1,
                        state: TaskState::Running as i32,
                        output: format!("{} started\n", task.name),
                        failure: None,
                        request_id: String::new(),
                    };
                    hub.report(base.clone()).await;
                    tokio::time::sleep(Duration::from_millis(args.task_ms)).await;
                    let fail = task.name == "readiness" && plan.to_version == args.fail_version;
                    let done = ReportTaskRequest {
                        state: if fail {
                            TaskState::Failed
                        } else {
                            TaskState::Succeeded
                        } as i32,
                        output: format!("{} {}\n", task.name, if fail { "failed" } else { "done" }),
                        failure: fail.then(|| PlanFailure {
                            stage: "readiness".into(),
                            message: "never became ready".into(),
                            not_ready: vec![format!("{}:http", plan.entity)],
                            validation_errors: vec![],
                        }),
                        ..base
                    };
                    hub.report(done).await;
                    if fail {
                        break;
                    }
                }
            });
        }
    }
}

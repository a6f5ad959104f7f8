//! Tests of the canary runner: with the sim driver (a whole canary from initialisation to
//! scale-down and restore, checking every driver task and the applied log), and with a
//! driver that runs tiny in-process HTTP servers on the configs' ports (the proxy taking the
//! service port over, weighted routing, resuming after a restart, restoring the original).

use std::collections::BTreeMap;
use std::sync::Mutex;

use futures::future::BoxFuture;
use futures::FutureExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use super::*;
use crate::driver::sim::{SimConfig, SimDriver};
use crate::plan::CanaryHeaderMatchSpec;

const TARGET: &str = "eid:prod:helmChart:web";
const PRIMARY: &str = "eid:prod:helmChart:web-primary";
const CANARY: &str = "eid:prod:helmChart:web-canary";
const SECRET: &str = "s3cret-token";

/// One driver task as the driver saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Call {
    plan: String,
    entity: String,
    task: String,
    version: String,
    config: String,
    secrets: Vec<(String, String)>,
}

/// The sim driver, recording every task.
struct Recording {
    sim: SimDriver,
    calls: Mutex<Vec<Call>>,
}

impl Recording {
    fn new() -> Self {
        Self {
            sim: SimDriver::new(SimConfig {
                task_latency: Duration::ZERO,
                failure_rate: 0.0,
                seed: 1,
            }),
            calls: Mutex::new(Vec::new()),
        }
    }

    fn take(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }
}

fn call(plan: &PlanSpec, task: &str) -> Call {
    Call {
        plan: plan.id.clone(),
        entity: plan.entity.clone(),
        task: task.to_string(),
        version: plan.to_version.clone(),
        config: plan.config.clone(),
        secrets: plan.secrets.clone(),
    }
}

impl Driver for Recording {
    fn run_task<'a>(
        &'a self,
        plan: &'a PlanSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<TaskOutcome, TaskFailure>> {
        self.calls.lock().unwrap().push(call(plan, task));
        self.sim.run_task(plan, task)
    }

    fn observe(&self) -> BoxFuture<'_, Vec<Observed>> {
        self.sim.observe()
    }

    fn simulated(&self) -> bool {
        true
    }
}

fn fast() -> RunnerSettings {
    RunnerSettings {
        ready_timeout: Duration::from_secs(10),
        bind_timeout: Duration::from_secs(5),
        poll: Duration::from_millis(20),
    }
}

fn workload(revision: &str, version: &str) -> CanaryWorkloadSpec {
    CanaryWorkloadSpec {
        revision: revision.into(),
        version: version.into(),
        config: format!("message: hello {version}\nport: 8080\n"),
        artifacts: Vec::new(),
        secrets_revision: 4,
    }
}

fn plain_plan(id: &str, entity: &str, version: &str, config: &str, tasks: &[&str]) -> PlanSpec {
    PlanSpec {
        id: id.into(),
        entity: entity.into(),
        kind: PlanKind::Install,
        from_version: String::new(),
        to_version: version.into(),
        config: config.into(),
        secrets_revision: 4,
        secrets: vec![("token".into(), SECRET.into())],
        artifacts: Vec::new(),
        registries: Vec::new(),
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        canary: None,
    }
}

struct Step {
    n: u64,
    phase: &'static str,
    primary: Option<CanaryWorkloadSpec>,
    canary: Option<CanaryWorkloadSpec>,
    weight: u32,
}

fn step_plan(s: &Step, port: u16) -> PlanSpec {
    let mut p = plain_plan(
        &format!("canary-prod-web-{}", s.n),
        TARGET,
        "",
        "",
        &[APPLY_TASK],
    );
    p.kind = PlanKind::CanaryStep;
    p.canary = Some(CanaryStepSpec {
        canary: "prod/web".into(),
        service: "web".into(),
        port: u32::from(port),
        step: s.n,
        phase: s.phase.into(),
        primary: s.primary.clone(),
        canary_workload: s.canary.clone(),
        canary_weight: s.weight,
        match_routing: false,
        match_rules: Vec::new(),
        restore_original: false,
        metric_windows_ms: vec![60_000, 30_500],
        baseline: None,
        loads: Vec::new(),
    });
    p
}

fn applied(data: &Path) -> Vec<AppliedLine> {
    let path = data.join("canary/prod--web/applied.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// (entity, task, version) of each call.
fn brief(calls: &[Call]) -> Vec<(String, String, String)> {
    calls
        .iter()
        .map(|c| (c.entity.clone(), c.task.clone(), c.version.clone()))
        .collect()
}

fn deploy(entity: &str, version: &str) -> Vec<(String, String, String)> {
    DEPLOY_TASKS
        .iter()
        .map(|t| (entity.to_string(), t.to_string(), version.to_string()))
        .collect()
}

fn stop(entity: &str) -> (String, String, String) {
    (entity.to_string(), "stop".to_string(), String::new())
}

#[tokio::test]
async fn sim_runner_applies_every_step_from_initialisation_to_scale_down_and_restore() {
    let tmp = tempfile::tempdir().unwrap();
    let driver = Arc::new(Recording::new());
    // The original entity, installed as usual.
    let original_config = workload("r1", "1.0.0").config;
    driver
        .run_task(
            &plain_plan("install", TARGET, "1.0.0", &original_config, &["start"]),
            "start",
        )
        .await
        .unwrap();
    driver.take();
    let runner = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
    let (v1, v2) = (workload("r1", "1.0.0"), workload("r2", "2.0.0"));
    let steps = [
        (1, "Initialized", Some(&v1), None, 0),
        (2, "Progressing", Some(&v1), Some(&v2), 0),
        (3, "Progressing", Some(&v1), Some(&v2), 10),
        (4, "Progressing", Some(&v1), Some(&v2), 20),
        (5, "Promoting", Some(&v2), Some(&v2), 20),
        (6, "Finalising", Some(&v2), Some(&v2), 0),
        (7, "Succeeded", Some(&v2), None, 0),
    ]
    .map(|(n, phase, primary, canary, weight)| Step {
        n,
        phase,
        primary: primary.cloned(),
        canary: canary.cloned(),
        weight,
    });
    for s in &steps {
        let out = runner
            .run_task(&step_plan(s, 8080), APPLY_TASK)
            .await
            .unwrap_or_else(|f| panic!("step {}: {f:?}", s.n));
        assert!(
            out.output.contains(&format!("step {} ", s.n)),
            "{}",
            out.output
        );
        assert!(runner.proxy("prod/web").is_none(), "no proxy with the sim");
        if s.n == 4 {
            let obs = runner.observations().await;
            assert_eq!(obs.len(), 1);
            let o = &obs[0];
            assert_eq!(o.canary, "prod/web");
            assert_eq!(o.applied_step, 4);
            assert_eq!(
                (o.primary_revision.as_str(), o.primary_ready_percent),
                ("r1", 100)
            );
            assert_eq!(
                (o.canary_revision.as_str(), o.canary_ready_percent),
                ("r2", 100)
            );
            let windows: Vec<_> = o
                .windows
                .iter()
                .map(|w| {
                    (
                        w.interval_ms,
                        w.requests,
                        w.success_rate_milli,
                        w.p99_ms_milli,
                    )
                })
                .collect();
            assert_eq!(
                windows,
                vec![
                    (60_000, 600, Some(100_000), Some(1_000)),
                    (30_500, 310, Some(100_000), Some(1_000)),
                ]
            );
        }
    }
    let st = runner.state("prod/web").unwrap();
    let (pp, cp) = (st.ports.primary_workload, st.ports.canary_workload);
    assert_ne!(pp, cp);

    // The driver saw each workload deployed once per revision, the original stopped once
    // the primary was ready, and the canary stopped at the end.
    let calls = driver.take();
    let mut want = deploy(PRIMARY, "1.0.0");
    want.push(stop(TARGET));
    want.extend(deploy(CANARY, "2.0.0"));
    want.extend(deploy(PRIMARY, "2.0.0"));
    want.push(stop(CANARY));
    assert_eq!(brief(&calls), want);
    // Workloads get the hub's config with their own port, and the plan's secrets.
    let configure: Vec<&Call> = calls.iter().filter(|c| c.task == "configure").collect();
    assert_eq!(
        configure[0].config,
        format!("message: hello 1.0.0\nport: {pp}\n")
    );
    assert_eq!(
        configure[1].config,
        format!("message: hello 2.0.0\nport: {cp}\n")
    );
    assert_eq!(configure[0].plan, "canary-prod-web-1/primary");
    assert_eq!(configure[1].plan, "canary-prod-web-2/canary");
    assert!(calls
        .iter()
        .filter(|c| c.task != "stop")
        .all(|c| c.secrets == vec![("token".to_string(), SECRET.to_string())]));
    assert!(
        calls.iter().all(|c| c.task != "readiness"),
        "readiness is observed, never run"
    );

    // The applied log has each step once, with its weight.
    let log = applied(tmp.path());
    assert_eq!(
        log.iter()
            .map(|l| (l.step, l.canary_weight))
            .collect::<Vec<_>>(),
        vec![(1, 0), (2, 0), (3, 10), (4, 20), (5, 20), (6, 0), (7, 0)]
    );
    assert_eq!(
        (
            log[1].primary_revision.as_str(),
            log[1].canary_revision.as_str()
        ),
        ("r1", "r2")
    );
    assert_eq!(log[6].canary_revision, "");

    // Applying the last step again (after an agent kill) changes nothing and logs nothing.
    runner
        .run_task(&step_plan(&steps[6], 8080), APPLY_TASK)
        .await
        .unwrap();
    assert!(driver.take().is_empty());
    assert_eq!(applied(tmp.path()).len(), 7);

    // The hub sees the target as the primary, and not the pseudo-entities.
    let reported = runner.overlay(driver.observe().await);
    assert_eq!(reported.len(), 1, "{reported:?}");
    let target = &reported[0];
    assert_eq!(target.entity, TARGET);
    assert_eq!(target.version.as_deref(), Some("2.0.0"));
    assert_eq!(target.health, Health::Healthy);
    assert_eq!(
        target.config_sha256.as_deref(),
        Some(sha256_hex(&v2.config).as_str()),
        "the hub config's hash, not the port-rewritten one"
    );
    assert_eq!(target.secrets_revision, Some(4));

    // A restarted agent loads the same state.
    let again = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
    assert_eq!(again.state("prod/web"), Some(st));
    drop(again);

    // Restore: the original comes back at the primary's version with the hub's config, the
    // workloads are removed and the canary is forgotten.
    let mut restore = step_plan(
        &Step {
            n: 8,
            phase: "Terminated",
            primary: Some(v2.clone()),
            canary: None,
            weight: 0,
        },
        8080,
    );
    if let Some(c) = restore.canary.as_mut() {
        c.restore_original = true;
    }
    runner.run_task(&restore, APPLY_TASK).await.unwrap();
    let calls = driver.take();
    let mut want = deploy(TARGET, "2.0.0");
    want.push(stop(PRIMARY));
    want.push((PRIMARY.into(), "remove".into(), String::new()));
    assert_eq!(brief(&calls), want);
    assert_eq!(calls[2].config, v2.config, "the hub config unchanged");
    assert!(runner.canary_ids().is_empty());
    assert!(runner.observations().await.is_empty());
    assert!(!tmp.path().join("canary/prod--web/state.json").exists());
    assert_eq!(applied(tmp.path()).len(), 8);
    let reported = runner.overlay(driver.observe().await);
    assert_eq!(
        reported
            .iter()
            .map(|o| (o.entity.as_str(), o.version.as_deref()))
            .collect::<Vec<_>>(),
        vec![(TARGET, Some("2.0.0"))]
    );
    // Re-running the restore is harmless.
    runner.run_task(&restore, APPLY_TASK).await.unwrap();
    assert_eq!(applied(tmp.path()).len(), 8);
}

#[tokio::test]
async fn bad_steps_are_refused_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let driver = Arc::new(Recording::new());
    let runner = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
    let good = Step {
        n: 1,
        phase: "Initialized",
        primary: Some(workload("r1", "1.0.0")),
        canary: None,
        weight: 0,
    };
    type Edit = Box<dyn Fn(&mut PlanSpec)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(|p| p.canary.as_mut().unwrap().canary = "dev/web".into()),
            "environment",
        ),
        (
            Box::new(|p| p.canary.as_mut().unwrap().canary = "prod/../x".into()),
            "canary id",
        ),
        (
            Box::new(|p| p.entity = "eid:prod:helmChart:We b".into()),
            "canary target",
        ),
        (Box::new(|p| p.canary.as_mut().unwrap().port = 0), "port"),
        (
            Box::new(|p| {
                let c = p.canary.as_mut().unwrap();
                c.match_routing = true;
                c.match_rules = vec![vec![CanaryHeaderMatchSpec {
                    name: "x".into(),
                    op: "regex".into(),
                    value: "(".into(),
                }]];
            }),
            "match rule",
        ),
        (Box::new(|p| p.canary = None), "without its canary step"),
    ];
    for (edit, want) in cases {
        let mut plan = step_plan(&good, 8080);
        edit(&mut plan);
        let f = runner.run_task(&plan, APPLY_TASK).await.unwrap_err();
        assert!(f.message.contains(want), "{want}: {}", f.message);
    }
    let f = runner
        .run_task(&step_plan(&good, 8080), "start")
        .await
        .unwrap_err();
    assert!(f.message.contains("unknown task"), "{}", f.message);
    assert!(driver.take().is_empty());
    assert!(applied(tmp.path()).is_empty());

    // A config that is no mapping is refused naming it.
    let mut bad = good;
    if let Some(p) = bad.primary.as_mut() {
        p.config = "- a\n".into();
    }
    let f = runner
        .run_task(&step_plan(&bad, 8080), APPLY_TASK)
        .await
        .unwrap_err();
    assert_eq!(f.stage, "configure");
    assert!(
        f.message.contains("primary workload config of revision r1"),
        "{}",
        f.message
    );
    assert!(applied(tmp.path()).is_empty());
}

/// A driver (not simulated) whose `start` serves `<entity name> <version>` over HTTP on
/// the config's port from inside the test process; `stop` closes it.
#[derive(Default)]
struct Servers {
    running: Mutex<BTreeMap<String, (Observed, tokio::task::JoinHandle<()>)>>,
}

async fn serve(listener: TcpListener, body: String) {
    loop {
        let Ok((mut s, _)) = listener.accept().await else {
            return;
        };
        let body = body.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(reply.as_bytes()).await;
        });
    }
}

impl Servers {
    async fn start(&self, plan: &PlanSpec) -> Result<TaskOutcome, TaskFailure> {
        let config: serde_yaml_ng::Value = serde_yaml_ng::from_str(&plan.config).unwrap();
        let port = config["port"].as_u64().unwrap() as u16;
        if let Some((_, task)) = self.running.lock().unwrap().remove(&plan.entity) {
            task.abort();
        }
        let deadline = Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(loopback(port)).await {
                Ok(l) => break l,
                Err(e) if Instant::now() > deadline => {
                    return Err(TaskFailure::new("start", format!("bind {port}: {e}")))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        };
        let name = plan.entity.rsplit(':').next().unwrap_or_default();
        let task = tokio::spawn(serve(listener, format!("{name} {}", plan.to_version)));
        let observed = Observed {
            entity: plan.entity.clone(),
            version: Some(plan.to_version.clone()),
            health: Health::Healthy,
            config_sha256: Some(sha256_hex(&plan.config)),
            secrets_revision: Some(plan.secrets_revision),
            message: String::new(),
        };
        self.running
            .lock()
            .unwrap()
            .insert(plan.entity.clone(), (observed, task));
        Ok(TaskOutcome::default())
    }
}

impl Driver for Servers {
    fn run_task<'a>(
        &'a self,
        plan: &'a PlanSpec,
        task: &'a str,
    ) -> BoxFuture<'a, Result<TaskOutcome, TaskFailure>> {
        async move {
            match task {
                "start" => self.start(plan).await,
                "stop" | "remove" => {
                    if let Some((_, t)) = self.running.lock().unwrap().remove(&plan.entity) {
                        t.abort();
                    }
                    Ok(TaskOutcome::default())
                }
                _ => Ok(TaskOutcome::default()),
            }
        }
        .boxed()
    }

    fn observe(&self) -> BoxFuture<'_, Vec<Observed>> {
        let list = self
            .running
            .lock()
            .unwrap()
            .values()
            .map(|(o, _)| o.clone())
            .collect();
        async move { list }.boxed()
    }
}

async fn get(port: u16) -> String {
    get_with(port, "").await
}

/// GET / with `extra` header lines (each ending in CRLF).
async fn get_with(port: u16, extra: &str) -> String {
    get_at(loopback(port), extra).await
}

/// [`get_with`] on any address.
async fn get_at(addr: std::net::SocketAddr, extra: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET / HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out.split_once("\r\n\r\n")
        .map(|x| x.1.to_string())
        .unwrap_or_default()
}

/// How many of `n` requests to `port` each body answered.
async fn spread(port: u16, n: usize) -> BTreeMap<String, usize> {
    let mut seen = BTreeMap::new();
    for _ in 0..n {
        *seen.entry(get(port).await).or_insert(0) += 1;
    }
    seen
}

#[tokio::test]
async fn the_proxy_takes_the_service_port_over_routes_by_weight_resumes_and_gives_it_back() {
    let tmp = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let driver = Arc::new(Servers::default());
    let config = format!("message: hi\nport: {port}\n");
    let v1 = CanaryWorkloadSpec {
        config: config.clone(),
        ..workload("r1", "1.0.0")
    };
    let v2 = CanaryWorkloadSpec {
        config: config.clone(),
        ..workload("r2", "2.0.0")
    };
    driver
        .run_task(
            &plain_plan("install", TARGET, "1.0.0", &config, &["start"]),
            "start",
        )
        .await
        .unwrap();
    assert_eq!(get(port).await, "web 1.0.0");

    let runner = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
    let mut step = Step {
        n: 1,
        phase: "Initialized",
        primary: Some(v1.clone()),
        canary: None,
        weight: 0,
    };
    runner
        .run_task(&step_plan(&step, port), APPLY_TASK)
        .await
        .unwrap();
    assert!(runner.proxy("prod/web").is_some());
    assert_eq!(get(port).await, "web-primary 1.0.0");

    step.n = 2;
    step.phase = "Progressing";
    step.canary = Some(v2.clone());
    step.weight = 30;
    runner
        .run_task(&step_plan(&step, port), APPLY_TASK)
        .await
        .unwrap();
    let seen = spread(port, 10).await;
    assert_eq!(seen.get("web-canary 2.0.0"), Some(&3), "{seen:?}");
    assert_eq!(seen.get("web-primary 1.0.0"), Some(&7), "{seen:?}");
    let obs = runner.observations().await;
    let w = &obs[0].windows[0];
    assert_eq!(
        (w.requests, w.success_rate_milli),
        (3, Some(100_000)),
        "{w:?}"
    );
    assert_eq!(obs[0].canary_ready_percent, 100);
    // The fixed addresses reach their workload.
    let st = runner.state("prod/web").unwrap();
    let stable = hub_wire::canary_addresses::StableAddresses::of(st.port);
    assert_eq!(get_at(stable.canary.into(), "").await, "web-canary 2.0.0");
    assert_eq!(get_at(stable.primary.into(), "").await, "web-primary 1.0.0");

    // An agent restart: the proxy comes back with the last applied routing.
    runner.shutdown();
    drop(runner);
    let runner = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
    runner.resume().await;
    assert!(runner.proxy("prod/web").is_some());
    let seen = spread(port, 10).await;
    assert_eq!(seen.get("web-canary 2.0.0"), Some(&3), "{seen:?}");

    // A/B: matching requests go to the canary whatever the weight.
    step.n = 3;
    step.weight = 0;
    let mut ab = step_plan(&step, port);
    if let Some(c) = ab.canary.as_mut() {
        c.match_routing = true;
        c.match_rules = vec![vec![CanaryHeaderMatchSpec {
            name: "x-canary".into(),
            op: "exact".into(),
            value: "insider".into(),
        }]];
    }
    runner.run_task(&ab, APPLY_TASK).await.unwrap();
    assert_eq!(get(port).await, "web-primary 1.0.0");
    assert_eq!(
        get_with(port, "X-Canary: insider\r\n").await,
        "web-canary 2.0.0"
    );

    // Restore: the original serves the port again at the primary's version.
    step.n = 4;
    step.phase = "Terminated";
    step.canary = None;
    let mut restore = step_plan(&step, port);
    if let Some(c) = restore.canary.as_mut() {
        c.restore_original = true;
    }
    runner.run_task(&restore, APPLY_TASK).await.unwrap();
    assert!(runner.proxy("prod/web").is_none());
    assert_eq!(get(port).await, "web 1.0.0");
    let entities: Vec<String> = driver
        .observe()
        .await
        .into_iter()
        .map(|o| o.entity)
        .collect();
    assert_eq!(entities, vec![TARGET.to_string()]);
    assert_eq!(
        applied(tmp.path())
            .iter()
            .map(|l| (l.step, l.canary_weight, l.match_routing))
            .collect::<Vec<_>>(),
        vec![(1, 0, false), (2, 30, false), (3, 0, true), (4, 0, false)]
    );
}

/// Runs `plan`'s tasks as the executor does: each task after [`CanaryRunner::hand_over`].
/// Returns the output, or the first failure.
async fn run_ordinary(
    runner: &CanaryRunner,
    driver: &Servers,
    plan: &PlanSpec,
) -> Result<String, TaskFailure> {
    let mut output = String::new();
    for task in &plan.tasks {
        output.push_str(&runner.hand_over(plan, task).await?);
        output.push_str(&driver.run_task(plan, task).await?.output);
    }
    Ok(output)
}

#[tokio::test]
async fn a_deleted_canarys_leftovers_keep_serving_until_the_next_plan_takes_the_port() {
    // Issue 52: a canary deleted without revertOnDeletion left its proxy on the service port;
    // the hub's next plan for the entity failed "Address already in use", and so did its
    // rollback. Both orders: deleted after the primary took the port over, and before.
    for taken_over in [true, false] {
        let tmp = tempfile::tempdir().unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = Arc::new(Servers::default());
        let config = format!("message: hi\nport: {port}\n");
        let v1 = CanaryWorkloadSpec {
            config: config.clone(),
            ..workload("r1", "1.0.0")
        };
        let v2 = CanaryWorkloadSpec {
            config: config.clone(),
            ..workload("r2", "2.0.0")
        };
        driver
            .run_task(
                &plain_plan("install", TARGET, "1.0.0", &config, &["start"]),
                "start",
            )
            .await
            .unwrap();
        let runner = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
        let mut step = Step {
            n: 1,
            phase: "Initialized",
            primary: Some(v1.clone()),
            canary: None,
            weight: 0,
        };
        if taken_over {
            runner
                .run_task(&step_plan(&step, port), APPLY_TASK)
                .await
                .unwrap();
            step.n = 2;
            step.phase = "Progressing";
            step.canary = Some(v2.clone());
            step.weight = 30;
            runner
                .run_task(&step_plan(&step, port), APPLY_TASK)
                .await
                .unwrap();
        } else {
            // The first step was cut short: the primary deployed, the original never stopped.
            let ids = WorkloadIds::of(TARGET, "prod").unwrap();
            let managed = runner.managed(&CanaryId::parse("prod/web").unwrap());
            let st = CanaryState::new("prod/web", TARGET, "web", port, Ports::pick().unwrap());
            managed.save(&st).unwrap();
            let mut out = Vec::new();
            runner
                .deploy(
                    &step_plan(&step, port),
                    &ids.primary,
                    "primary",
                    &v1,
                    st.ports.primary_workload,
                    &mut out,
                )
                .await
                .unwrap();
            let mut st = st;
            st.primary.started = true;
            managed.save(&st).unwrap();
        }
        // The canary is deleted on the hub (no plan reaches the agent): what was left keeps
        // serving the port, and the hub sees the target as what serves it.
        let serving = if taken_over {
            "web-primary 1.0.0"
        } else {
            "web 1.0.0"
        };
        let seen = spread(port, 10).await;
        assert_eq!(seen.get(serving), Some(&(if taken_over { 7 } else { 10 })));
        let reported = runner.overlay(driver.observe().await);
        assert_eq!(
            reported
                .iter()
                .map(|o| (o.entity.as_str(), o.version.as_deref()))
                .collect::<Vec<_>>(),
            vec![(TARGET, Some("1.0.0"))]
        );

        // A break-glass command leaves the canary alone.
        let mut restart = plain_plan("restart", TARGET, "", "", &["stop"]);
        restart.kind = PlanKind::Command(crate::plan::CommandKind::Restart);
        assert_eq!(runner.hand_over(&restart, "stop").await.unwrap(), "");
        assert_eq!(runner.canary_ids(), ["prod/web"]);

        // The hub's next plan: from what the agent reported to 3.0.0 on the service port.
        let mut upgrade = plain_plan(
            "p-9-0",
            TARGET,
            "3.0.0",
            &config,
            &["fetch", "verify", "configure", "start", "readiness"],
        );
        upgrade.kind = PlanKind::VersionChange;
        upgrade.from_version = "1.0.0".into();
        // Tasks before the workload leave the leftovers serving.
        assert_eq!(runner.hand_over(&upgrade, "fetch").await.unwrap(), "");
        assert_eq!(runner.canary_ids(), ["prod/web"]);
        let output = run_ordinary(&runner, &driver, &upgrade)
            .await
            .unwrap_or_else(|f| panic!("taken over: {taken_over}: {f:?}"));
        assert!(
            output.contains("canary prod/web is deleted on the hub"),
            "{output}"
        );
        assert_eq!(
            output.contains("canary proxy stopped"),
            taken_over,
            "{output}"
        );
        assert_eq!(get(port).await, "web 3.0.0");
        assert!(runner.canary_ids().is_empty());
        assert!(runner.proxy("prod/web").is_none());
        assert!(!tmp.path().join("canary/prod--web/state.json").exists());
        let entities: Vec<String> = driver
            .observe()
            .await
            .into_iter()
            .map(|o| o.entity)
            .collect();
        assert_eq!(entities, vec![TARGET.to_string()], "workloads removed");
        // A plan run again (after an agent kill) finds nothing left to hand over.
        assert_eq!(runner.hand_over(&upgrade, "start").await.unwrap(), "");
        // And an agent restart does not bring a proxy back.
        drop(runner);
        let again = CanaryRunner::with_settings(tmp.path(), "prod", driver.clone(), fast());
        again.resume().await;
        assert!(again.canary_ids().is_empty());
        assert_eq!(get(port).await, "web 3.0.0");
    }
}

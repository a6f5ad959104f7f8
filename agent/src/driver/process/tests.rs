//! End-to-end tests of the process driver with real processes: small Python HTTP services
//! packed into artifacts in the test, served from a `file://` registry and from a local HTTP
//! server. Every process a test starts is killed by the fixture's `Drop`.

use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hub_http::DenyList;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::state::RunState;
use super::{config_sha256, ProcessDriver};
use crate::driver::Driver;
use crate::plan::{
    Artifact, CommandKind, Health, Observed, PlanKind, PlanSpec, Registry, TaskFailure, TaskOutcome,
};

const ENV: &str = "test";
const WEB: &str = "eid:test:helmChart:web";
const WEB_DIR: &str = "helmChart--web";
const INSTALL: [&str; 5] = ["fetch", "verify", "configure", "start", "readiness"];
const SECRET: &str = "s3cret-VALUE-never-logged";
const WAIT: Duration = Duration::from_secs(30);

const SERVER_PY: &str = r#"import http.server, sys
port, version, health = int(sys.argv[1]), sys.argv[2], sys.argv[3]
class Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/healthz":
            code, body = (200, b"ok") if health == "healthy" else (503, b"broken")
        elif self.path == "/version":
            code, body = 200, version.encode()
        else:
            code, body = 404, b"not found"
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
print("demo", version, "on port", port, flush=True)
http.server.HTTPServer(("127.0.0.1", port), Handler).serve_forever()
"#;

fn python() -> &'static str {
    // The distribution's interpreter starts in tens of milliseconds (a pyenv shim does not).
    if Path::new("/usr/bin/python3").exists() {
        "/usr/bin/python3"
    } else {
        "python3"
    }
}

/// A `.tar.gz` of `files` (path, content, mode).
fn targz(files: &[(&str, &[u8], u32)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content, mode) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(*mode);
        header.set_cksum();
        builder.append_data(&mut header, path, *content).unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    gz.finish().unwrap()
}

/// The demo service: appends its version to `${DATA}/starts`, then serves `/healthz`
/// (200, or 503 when not `healthy`) and `/version` on `${PORT}`.
fn service_artifact(version: &str, healthy: bool) -> Vec<u8> {
    let health = if healthy { "healthy" } else { "broken" };
    let script = format!(
        "echo \"$3\" >> \"$1/starts\"; exec {} server.py \"$2\" \"$3\" {health}",
        python()
    );
    let service = json!({
        "command": "/bin/sh",
        "args": ["-c", script, "sh", "${DATA}", "${PORT}", "${VERSION}"],
        "env": {"DEMO_SECRETS": "${SECRETS_DIR}", "DEMO_CONFIG": "${CONFIG}"},
        "readiness": {"http": "/healthz"},
        "ready_timeout_ms": if healthy { 15_000 } else { 1_500 },
        "stop_timeout_ms": 3_000,
    });
    let service = serde_json::to_vec_pretty(&service).unwrap();
    targz(&[
        ("service.json", &service, 0o644),
        ("server.py", SERVER_PY.as_bytes(), 0o644),
        ("VERSION", version.as_bytes(), 0o644),
    ])
}

fn sha(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn config(port: u16) -> String {
    format!("port: {port}\nmessage: hello\n")
}

fn plan(
    id: &str,
    kind: PlanKind,
    version: &str,
    config: &str,
    artifacts: Vec<Artifact>,
    registries: Vec<Registry>,
    tasks: &[&str],
) -> PlanSpec {
    PlanSpec {
        id: id.into(),
        entity: WEB.into(),
        kind,
        from_version: String::new(),
        to_version: version.into(),
        config: config.into(),
        secrets_revision: 3,
        secrets: vec![("db_password".into(), SECRET.into())],
        artifacts,
        registries,
        tasks: tasks.iter().map(|t| t.to_string()).collect(),
        canary: None,
    }
}

async fn run(driver: &ProcessDriver, plan: &PlanSpec) -> Result<Vec<TaskOutcome>, TaskFailure> {
    let mut outcomes = Vec::new();
    for task in &plan.tasks {
        outcomes.push(driver.run_task(plan, task).await?);
    }
    Ok(outcomes)
}

async fn observe_web(driver: &ProcessDriver) -> Option<Observed> {
    driver.observe().await.into_iter().find(|o| o.entity == WEB)
}

/// Polls `observe` until `pred` holds for the web entity (panics after `WAIT`).
async fn wait_observed(
    driver: &ProcessDriver,
    what: &str,
    pred: impl Fn(&Observed) -> bool,
) -> Observed {
    let deadline = Instant::now() + WAIT;
    loop {
        let o = observe_web(driver).await;
        if let Some(o) = o.as_ref().filter(|o| pred(o)) {
            return o.clone();
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last {o:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `GET http://127.0.0.1:port/path` → (status, body).
async fn get(port: u16, path: &str) -> Result<(u16, String), hub_http::ErrorKind> {
    let client = super::http::probes()?;
    let url = format!("http://127.0.0.1:{port}{path}");
    let answer = client
        .call(
            hub_http::Method::GET,
            &url,
            None,
            Duration::from_secs(2),
            1 << 20,
        )
        .await
        .map_err(|e| e.kind)?;
    Ok((
        answer.status.as_u16(),
        String::from_utf8_lossy(&answer.body).into_owned(),
    ))
}

fn all_output(outcomes: &[TaskOutcome]) -> String {
    outcomes
        .iter()
        .map(|o| o.output.as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// A data directory, a `file://` registry and a driver; kills every process whose working
/// directory is inside its temporary directory when dropped.
struct Fixture {
    tmp: PathBuf,
    _dir: tempfile::TempDir,
    data: PathBuf,
    registry: PathBuf,
    driver: Option<ProcessDriver>,
}

impl Fixture {
    fn new() -> Self {
        Self::with_grace(super::START_GRACE)
    }

    fn with_grace(grace: Duration) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let tmp = std::fs::canonicalize(dir.path()).unwrap();
        let data = tmp.join("data");
        let registry = tmp.join("registry");
        std::fs::create_dir_all(registry.join("demo")).unwrap();
        let driver =
            ProcessDriver::with_start_grace(data.clone(), ENV.into(), DenyList::none(), grace)
                .unwrap();
        Self {
            tmp,
            _dir: dir,
            data,
            registry,
            driver: Some(driver),
        }
    }

    fn driver(&self) -> &ProcessDriver {
        self.driver.as_ref().unwrap()
    }

    /// Drops the driver (as a killed agent would) and creates a new one on the same data.
    fn recreate_driver(&mut self) {
        drop(self.driver.take());
        self.driver =
            Some(ProcessDriver::new(self.data.clone(), ENV.into(), DenyList::none()).unwrap());
    }

    fn registries(&self) -> Vec<Registry> {
        vec![Registry {
            name: "files".into(),
            url: format!("file://{}/", self.registry.display()),
            ..Registry::default()
        }]
    }

    /// Publishes `bytes` as `demo/<name>` in the file registry.
    fn publish(&self, name: &str, bytes: &[u8]) -> Artifact {
        std::fs::write(self.registry.join("demo").join(name), bytes).unwrap();
        Artifact {
            uri: format!("demo/{name}"),
            sha256: sha(bytes),
        }
    }

    fn release(&self, version: &str, healthy: bool) -> Artifact {
        self.publish(
            &format!("demo-{version}.tar.gz"),
            &service_artifact(version, healthy),
        )
    }

    fn install_plan(
        &self,
        id: &str,
        kind: PlanKind,
        version: &str,
        port: u16,
        healthy: bool,
    ) -> PlanSpec {
        let artifact = self.release(version, healthy);
        plan(
            id,
            kind,
            version,
            &config(port),
            vec![artifact],
            self.registries(),
            &INSTALL,
        )
    }

    fn entity_dir(&self) -> PathBuf {
        self.data.join("process").join(WEB_DIR)
    }

    fn state(&self) -> RunState {
        RunState::load(&self.entity_dir().join("state.json"))
            .unwrap()
            .expect("state.json")
    }

    fn starts(&self) -> Vec<String> {
        std::fs::read_to_string(self.entity_dir().join("data/starts"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    fn versions(&self) -> Vec<String> {
        super::list_names(&self.entity_dir().join("versions")).unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        drop(self.driver.take());
        let Ok(procs) = std::fs::read_dir("/proc") else {
            return;
        };
        for entry in procs.flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let in_tmp = std::fs::read_link(entry.path().join("cwd"))
                .is_ok_and(|cwd| cwd.starts_with(&self.tmp));
            if in_tmp && pid > 1 && pid as u32 != std::process::id() {
                // SAFETY: plain kill(2) of a process this test started (its cwd is ours).
                unsafe {
                    libc::kill(pid, libc::SIGKILL);
                }
            }
        }
    }
}

/// A tiny HTTP/1.1 server for artifacts: serves `files` by path, 404 otherwise, and records
/// the `Authorization` headers it receives.
struct ArtifactServer {
    port: u16,
    auth: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ArtifactServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn artifact_server(files: HashMap<String, Vec<u8>>) -> ArtifactServer {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let auth = Arc::new(Mutex::new(Vec::new()));
    let files = Arc::new(files);
    let seen = auth.clone();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let files = files.clone();
            let seen = seen.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&head).into_owned();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                for line in head.lines() {
                    if let Some((name, value)) = line.split_once(':') {
                        if name.eq_ignore_ascii_case("authorization") {
                            seen.lock().unwrap().push(value.trim().to_string());
                        }
                    }
                }
                let (status, body) = match files.get(&path) {
                    Some(body) => ("200 OK", body.clone()),
                    None => ("404 Not Found", b"not found".to_vec()),
                };
                let response = format!(
                    "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.write_all(&body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    ArtifactServer { port, auth, task }
}

#[tokio::test]
async fn install_runs_every_task_and_observes_healthy() {
    let fx = Fixture::new();
    let port = free_port();
    let p = fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true);
    let outcomes = run(fx.driver(), &p).await.unwrap();
    let output = all_output(&outcomes);
    assert!(output.contains("fetched file://"), "{output}");
    assert!(output.contains("started 1.0.0"), "{output}");

    let o = observe_web(fx.driver()).await.unwrap();
    assert_eq!(o.health, Health::Healthy, "{o:?}");
    assert_eq!(o.version.as_deref(), Some("1.0.0"));
    assert_eq!(o.config_sha256, Some(config_sha256(&config(port))));
    assert_eq!(o.secrets_revision, Some(3));
    assert_eq!(get(port, "/version").await.unwrap(), (200, "1.0.0".into()));

    // The layout.
    let dir = fx.entity_dir();
    assert!(dir
        .join("downloads")
        .join(format!("{}.tar.gz", p.artifacts[0].sha256))
        .is_file());
    assert!(dir.join("versions/1.0.0/.hub-unpacked").is_file());
    let cfg = dir.join(format!(
        "config/1.0.0-{}.yaml",
        &config_sha256(&config(port))[..16]
    ));
    assert_eq!(std::fs::read_to_string(cfg).unwrap(), config(port));
    let secret = dir.join("secrets/1.0.0-r3/db_password");
    assert_eq!(std::fs::read_to_string(&secret).unwrap(), SECRET);
    assert_eq!(
        std::fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
        0o600
    );
    let state = fx.state();
    assert_eq!(state.current.version, "1.0.0");
    assert_eq!(state.started_by, "p-1");
    let pid = state.pid.unwrap();
    assert!(super::os::is_alive(pid));
    // Its own process group (and session): killing the agent's group does not reach it.
    assert_eq!(super::os::proc_stat(pid).unwrap().pgrp, pid as i32);
    assert_ne!(
        super::os::proc_stat(std::process::id()).unwrap().pgrp,
        pid as i32
    );
    assert_eq!(fx.starts(), ["1.0.0"]);

    // Secret values appear nowhere but in the secret file.
    for file in ["state.json", "service.log"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        assert!(!text.contains(SECRET), "{file} holds the secret");
    }
    assert!(!output.contains(SECRET));

    // The whole plan again (an agent that restarts mid-plan re-runs tasks): a no-op.
    let again = all_output(&run(fx.driver(), &p).await.unwrap());
    assert!(again.contains("already downloaded"), "{again}");
    assert!(again.contains("already unpacked"), "{again}");
    assert!(again.contains("adopted"), "{again}");
    assert_eq!(fx.starts(), ["1.0.0"]);
}

/// A registry password no path or log line contains by chance.
const REGISTRY_PASSWORD: &str = "registry-Pa55-q7Zk";

#[tokio::test]
async fn http_registry_with_credentials_and_404() {
    let fx = Fixture::new();
    let port = free_port();
    let bytes = service_artifact("1.0.0", true);
    let files = HashMap::from([("/repo/demo/demo-1.0.0.tar.gz".to_string(), bytes.clone())]);
    let server = artifact_server(files).await;
    let registries = vec![Registry {
        name: "http".into(),
        url: format!(
            "http://agent:{REGISTRY_PASSWORD}@127.0.0.1:{}/repo/",
            server.port
        ),
        ..Registry::default()
    }];
    let artifact = Artifact {
        uri: "demo/demo-1.0.0.tar.gz".into(),
        sha256: sha(&bytes),
    };
    let p = plan(
        "p-1",
        PlanKind::Install,
        "1.0.0",
        &config(port),
        vec![artifact],
        registries.clone(),
        &INSTALL,
    );
    let output = all_output(&run(fx.driver(), &p).await.unwrap());
    assert!(
        output.contains(&format!(
            "fetched http://127.0.0.1:{}/repo/demo/demo-1.0.0.tar.gz",
            server.port
        )),
        "{output}"
    );
    // The password is distinctive: a short one ("pw") also turned up by chance
    // inside the random temporary directory names the output prints.
    assert!(!output.contains(REGISTRY_PASSWORD), "{output}");
    // base64 of "agent:registry-Pa55-q7Zk".
    assert_eq!(
        server.auth.lock().unwrap().as_slice(),
        ["Basic YWdlbnQ6cmVnaXN0cnktUGE1NS1xN1pr"]
    );
    assert_eq!(
        observe_web(fx.driver()).await.unwrap().health,
        Health::Healthy
    );

    let missing = Artifact {
        uri: "demo/missing.tar.gz".into(),
        sha256: sha(b"missing"),
    };
    let p2 = plan(
        "p-2",
        PlanKind::VersionChange,
        "2.0.0",
        &config(port),
        vec![missing],
        registries,
        &INSTALL,
    );
    let f = run(fx.driver(), &p2).await.unwrap_err();
    assert_eq!(f.stage, "fetch", "{f:?}");
    assert_eq!(
        f.message,
        format!(
            "http://127.0.0.1:{}/repo/demo/missing.tar.gz: HTTP 404 Not Found",
            server.port
        )
    );
    // 1.0.0 is untouched.
    assert_eq!(get(port, "/version").await.unwrap(), (200, "1.0.0".into()));
}

#[tokio::test]
async fn https_registry_with_its_ca_and_an_untrusted_one() {
    use hub_http::local::{Handler, LocalCa, LocalServer, Reply};

    let fx = Fixture::new();
    let port = free_port();
    let bytes = service_artifact("1.0.0", true);
    let ca = LocalCa::generate("registry CA").unwrap();
    let served = bytes.clone();
    let auth: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
    let seen = auth.clone();
    let handler: Handler = Arc::new(move |r| {
        seen.lock().unwrap().push(
            r.headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string()),
        );
        match r.path.as_str() {
            "/repo/demo/demo-1.0.0.tar.gz" => Reply::redirect(302, "/blobs/1"),
            "/repo/demo/loop.tar.gz" => Reply::redirect(302, "/repo/demo/loop.tar.gz"),
            "/blobs/1" => Reply {
                status: 200,
                headers: vec![],
                body: served.clone().into(),
            },
            _ => Reply::text(404, "no"),
        }
    });
    let server = LocalServer::loopback_https(&ca, handler).await.unwrap();
    let url = format!("https://agent:{REGISTRY_PASSWORD}@{}/repo/", server.addr());
    let artifact = Artifact {
        uri: "demo/demo-1.0.0.tar.gz".into(),
        sha256: sha(&bytes),
    };
    assert_eq!(
        fetch_failure(&fx, "p-1", &artifact, url.clone()).await,
        format!(
            "https://{}/repo/demo/demo-1.0.0.tar.gz: TLS certificate not trusted: it is not \
             signed by a trusted CA (unknown issuer)",
            server.addr()
        )
    );
    assert!(auth.lock().unwrap().is_empty(), "nothing sent before trust");
    assert!(
        observe_web(fx.driver()).await.is_none(),
        "nothing installed"
    );

    // A redirect loop on a trusted registry: refused, named, nothing left behind.
    let looping = Artifact {
        uri: "demo/loop.tar.gz".into(),
        sha256: sha(b"loop"),
    };
    let trusted = Registry {
        name: "tls".into(),
        url: url.clone(),
        ca_pem: Some(ca.ca_pem().to_string()),
        ..Registry::default()
    };
    let p = plan(
        "p-0",
        PlanKind::Install,
        "1.0.0",
        &config(port),
        vec![looping],
        vec![trusted.clone()],
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "fetch");
    assert_eq!(
        f.message,
        format!(
            "https://{0}/repo/demo/loop.tar.gz: redirect loop: https://{0}/repo/demo/loop.tar.gz \
             was already visited",
            server.addr()
        )
    );
    let downloads = fx.data.join("process").join(WEB_DIR).join("downloads");
    let left: Vec<_> = std::fs::read_dir(&downloads)
        .map(|rd| rd.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "{left:?}");
    auth.lock().unwrap().clear();

    let p = plan(
        "p-2",
        PlanKind::Install,
        "1.0.0",
        &config(port),
        vec![artifact],
        vec![trusted],
        &INSTALL,
    );
    let output = all_output(&run(fx.driver(), &p).await.unwrap());
    assert!(
        output.contains(&format!(
            "fetched https://{}/repo/demo/demo-1.0.0.tar.gz",
            server.addr()
        )),
        "{output}"
    );
    assert!(!output.contains(REGISTRY_PASSWORD), "{output}");
    // The same-host redirect keeps the credentials.
    let basic = Some("Basic YWdlbnQ6cmVnaXN0cnktUGE1NS1xN1pr".to_string());
    assert_eq!(auth.lock().unwrap().clone(), vec![basic.clone(), basic]);
    assert_eq!(get(port, "/version").await.unwrap(), (200, "1.0.0".into()));
}

#[tokio::test]
async fn upgrade_keeps_previous_and_failed_readiness_restores_it() {
    let fx = Fixture::new();
    let port = free_port();
    run(
        fx.driver(),
        &fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true),
    )
    .await
    .unwrap();
    let out = all_output(
        &run(
            fx.driver(),
            &fx.install_plan("p-2", PlanKind::VersionChange, "2.0.0", port, true),
        )
        .await
        .unwrap(),
    );
    assert!(out.contains("stopped pid"), "{out}");
    assert_eq!(get(port, "/version").await.unwrap(), (200, "2.0.0".into()));
    assert_eq!(fx.versions(), ["1.0.0", "2.0.0"]);
    assert_eq!(fx.state().previous.unwrap().version, "1.0.0");

    // 3.0.0 never becomes ready: 2.0.0 is restored and answers again.
    let broken = fx.install_plan("p-3", PlanKind::VersionChange, "3.0.0", port, false);
    let f = run(fx.driver(), &broken).await.unwrap_err();
    assert_eq!(f.stage, "readiness", "{f:?}");
    assert_eq!(f.message, "3.0.0 not ready after 1500 ms");
    assert_eq!(
        f.not_ready,
        [format!(
            "{WEB} http http://127.0.0.1:{port}/healthz (last: 503)"
        )]
    );
    assert!(
        f.output.contains("restored previous version 2.0.0") && f.output.contains("ready"),
        "{}",
        f.output
    );
    assert_eq!(get(port, "/version").await.unwrap(), (200, "2.0.0".into()));
    let o = observe_web(fx.driver()).await.unwrap();
    assert_eq!(
        (o.version.as_deref(), o.health),
        (Some("2.0.0"), Health::Healthy),
        "{o:?}"
    );
    assert_eq!(fx.starts(), ["1.0.0", "2.0.0", "3.0.0", "2.0.0"]);

    // The hub's rollback plan to 2.0.0 is a quick no-op adopt, then prunes 3.0.0.
    let rollback = fx.install_plan("p-4", PlanKind::Rollback, "2.0.0", port, true);
    let out = all_output(&run(fx.driver(), &rollback).await.unwrap());
    assert!(out.contains("adopted"), "{out}");
    assert!(out.contains("pruned versions 3.0.0"), "{out}");
    assert_eq!(fx.starts().len(), 4);
    assert_eq!(fx.versions(), ["1.0.0", "2.0.0"]);
    assert_eq!(get(port, "/version").await.unwrap(), (200, "2.0.0".into()));
}

#[tokio::test]
async fn checksum_mismatch_fails_verify_and_deletes_download() {
    let fx = Fixture::new();
    let mut p = fx.install_plan("p-1", PlanKind::Install, "1.0.0", free_port(), true);
    let actual = p.artifacts[0].sha256.clone();
    let expected = sha(b"something else");
    p.artifacts[0].sha256 = expected.clone();
    fx.driver().run_task(&p, "fetch").await.unwrap();
    let download = fx.entity_dir().join(format!("downloads/{expected}.tar.gz"));
    assert!(download.is_file());
    let f = fx.driver().run_task(&p, "verify").await.unwrap_err();
    assert_eq!(f.stage, "verify");
    assert!(
        f.message
            .contains(&format!("sha256 mismatch: expected {expected};")),
        "{}",
        f.message
    );
    // What was read is never shown (issue 51: a viewer could learn a file's digest).
    assert!(!f.message.contains(&actual), "{}", f.message);
    assert!(f.message.contains("download was deleted"), "{}", f.message);
    assert!(!download.exists());
    assert!(fx.driver().observe().await.is_empty());
}

#[tokio::test]
async fn configure_refuses_corrupt_artifacts_and_invalid_configs() {
    let fx = Fixture::new();
    let port = free_port();
    // Not a gzip'd tarball, with a matching checksum.
    let garbage = fx.publish("demo-1.0.0.tar.gz", b"\x1f\x8b this is not a tarball");
    let p = plan(
        "p-1",
        PlanKind::Install,
        "1.0.0",
        &config(port),
        vec![garbage],
        fx.registries(),
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "configure", "{f:?}");
    assert!(
        f.message
            .starts_with("corrupt artifact demo/demo-1.0.0.tar.gz: "),
        "{}",
        f.message
    );
    assert!(fx.versions().is_empty(), "{:?}", fx.versions());

    // A path escaping the version directory.
    let evil = {
        let mut builder = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"../escape");
        h.set_cksum();
        builder.append(&h, &b"x"[..]).unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &builder.into_inner().unwrap()).unwrap();
        gz.finish().unwrap()
    };
    let evil = fx.publish("demo-1.0.1.tar.gz", &evil);
    let p = plan(
        "p-2",
        PlanKind::Install,
        "1.0.1",
        &config(port),
        vec![evil],
        fx.registries(),
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "configure");
    assert!(f.message.contains("'..' is not allowed"), "{}", f.message);
    assert!(!fx.entity_dir().join("versions/escape").exists());

    // A config that is not a YAML mapping.
    let good = fx.release("1.1.0", true);
    let p = plan(
        "p-3",
        PlanKind::Install,
        "1.1.0",
        "- port\n- 80\n",
        vec![good.clone()],
        fx.registries(),
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "configure");
    assert_eq!(
        f.validation_errors,
        ["config: must be a YAML mapping, got a sequence"]
    );
    // No port for an HTTP readiness probe.
    let p = plan(
        "p-4",
        PlanKind::Install,
        "1.1.0",
        "message: hi\n",
        vec![good],
        fx.registries(),
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert!(
        f.validation_errors[0].starts_with("config: port: required"),
        "{f:?}"
    );

    // A service.json with an unknown field.
    let bad = targz(&[(
        "service.json",
        br#"{"command": "/bin/sh", "restart": "always"}"#,
        0o644,
    )]);
    let bad = fx.publish("demo-1.2.0.tar.gz", &bad);
    let p = plan(
        "p-5",
        PlanKind::Install,
        "1.2.0",
        &config(port),
        vec![bad],
        fx.registries(),
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "configure");
    assert!(
        f.validation_errors[0].contains("unknown field `restart`"),
        "{f:?}"
    );

    // A config change for a version that is not installed.
    let p = plan(
        "p-6",
        PlanKind::ConfigChange,
        "9.9.9",
        &config(port),
        vec![],
        fx.registries(),
        &["configure", "start", "readiness"],
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "configure");
    assert!(f.message.contains("not unpacked"), "{}", f.message);
    assert!(fx.driver().observe().await.is_empty());
}

/// Runs an install of `artifact` from `url` (one registry) that must fail in `fetch`; the
/// failure's message.
async fn fetch_failure(fx: &Fixture, id: &str, artifact: &Artifact, url: String) -> String {
    let registries = vec![Registry {
        name: "r".into(),
        url,
        ..Registry::default()
    }];
    let p = plan(
        id,
        PlanKind::Install,
        "1.0.0",
        &config(80),
        vec![artifact.clone()],
        registries,
        &INSTALL,
    );
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "fetch", "{f:?}");
    f.message
}

#[tokio::test]
async fn downloads_from_denied_addresses_are_refused_unless_opened() {
    use hub_http::local::{Handler, LocalServer, Reply};

    let fx = Fixture::new();
    let bytes = b"an artifact on loopback".to_vec();
    let served = bytes.clone();
    let handler: Handler = Arc::new(move |_| Reply {
        status: 200,
        headers: vec![],
        body: served.clone().into(),
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = LocalServer::start(listener, None, handler).unwrap();
    let registries = vec![Registry {
        name: "r".into(),
        url: format!("http://{}/", server.addr()),
        ..Registry::default()
    }];
    let artifact = Artifact {
        uri: "demo/x.tar.gz".into(),
        sha256: sha(&bytes),
    };
    let p = plan(
        "p-1",
        PlanKind::Install,
        "1.0.0",
        &config(80),
        vec![artifact],
        registries,
        &["fetch"],
    );
    let default = DenyList::parse(DenyList::DEFAULT).unwrap();
    let denying = ProcessDriver::new(fx.tmp.join("denying"), ENV.into(), default.clone()).unwrap();
    let f = denying.run_task(&p, "fetch").await.unwrap_err();
    assert_eq!(
        f.message,
        format!(
            "http://{}/demo/x.tar.gz: refused without connecting: 127.0.0.1 is 127.0.0.1, in \
             the denied range 127.0.0.0/8 (--outbound-deny; --outbound-allow opens a range)",
            server.addr()
        )
    );
    assert_eq!(server.connections(), 0);
    let opened = default.allowing(hub_http::parse_ranges("127.0.0.0/8").unwrap());
    let opening = ProcessDriver::new(fx.tmp.join("opening"), ENV.into(), opened).unwrap();
    let done = opening.run_task(&p, "fetch").await.unwrap();
    assert!(done.output.contains("fetched http://"), "{}", done.output);
}

#[tokio::test]
async fn unreachable_registry_fails_fetch() {
    let fx = Fixture::new();
    let closed = free_port();
    let artifact = Artifact {
        uri: "demo/demo-1.0.0.tar.gz".into(),
        sha256: sha(b"x"),
    };
    let down = format!("http://user:hunter2@127.0.0.1:{closed}");
    assert_eq!(
        fetch_failure(&fx, "p-1", &artifact, down).await,
        format!(
            "http://127.0.0.1:{closed}/demo/demo-1.0.0.tar.gz: cannot connect: connection refused"
        )
    );
    let bad = fetch_failure(
        &fx,
        "p-2",
        &artifact,
        "http://user:hunter2@exa mple/".into(),
    )
    .await;
    assert!(
        bad.contains("malformed URL") && !bad.contains("hunter2"),
        "{bad}"
    );
    let ftp = fetch_failure(&fx, "p-3", &artifact, "ftp://user:hunter2@r/".into()).await;
    assert!(
        ftp.contains("unsupported URL scheme") && !ftp.contains("hunter2"),
        "{ftp}"
    );
    let missing = format!("file://{}", fx.tmp.join("nowhere").display());
    let missing = fetch_failure(&fx, "p-4", &artifact, missing).await;
    assert!(missing.contains("No such file or directory"), "{missing}");
    assert!(
        observe_web(fx.driver()).await.is_none(),
        "nothing installed"
    );
}

#[tokio::test]
async fn port_in_use_fails_start_with_log_tail() {
    // A long grace period: the failing process is detected as soon as it exits, and a slow
    // machine cannot turn the start failure into a readiness failure.
    let fx = Fixture::with_grace(Duration::from_secs(10));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let p = fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true);
    let f = run(fx.driver(), &p).await.unwrap_err();
    assert_eq!(f.stage, "start", "{f:?}");
    assert!(
        f.message
            .starts_with("1.0.0 exited within 10000 ms (exit status 1): "),
        "{}",
        f.message
    );
    assert!(
        f.message.contains("Address already in use"),
        "{}",
        f.message
    );
    assert!(f.output.contains("Traceback"), "{}", f.output);
    assert!(
        f.output.contains("no previous version to restore"),
        "{}",
        f.output
    );
    let o = observe_web(fx.driver()).await.unwrap();
    assert_eq!(o.health, Health::Error);
    assert!(
        o.message.starts_with("failed: 1.0.0 exited within"),
        "{o:?}"
    );
    // Not restarted by the supervisor: it never ran.
    tokio::time::sleep(super::supervisor::TICK * 3).await;
    assert_eq!(fx.starts(), ["1.0.0"]);
    drop(listener);
}

#[tokio::test]
async fn second_start_of_same_deployment_adopts() {
    let fx = Fixture::new();
    let port = free_port();
    let p = fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true);
    run(fx.driver(), &p).await.unwrap();
    let pid = fx.state().pid;
    let out = fx.driver().run_task(&p, "start").await.unwrap().output;
    assert!(out.contains("adopted"), "{out}");
    // Another plan with the same version, config and secrets (enforce-config) adopts too.
    let mut enforce = p.clone();
    enforce.id = "p-2".into();
    enforce.kind = PlanKind::Command(CommandKind::EnforceConfig);
    enforce.artifacts.clear();
    enforce.tasks = vec!["configure".into(), "start".into(), "readiness".into()];
    run(fx.driver(), &enforce).await.unwrap();
    assert_eq!(fx.starts(), ["1.0.0"]);
    assert_eq!(fx.state().pid, pid);

    // A restart command restarts once, even when its start runs twice.
    let mut restart = enforce.clone();
    restart.id = "p-3".into();
    restart.kind = PlanKind::Command(CommandKind::Restart);
    restart.tasks = vec!["start".into(), "readiness".into()];
    run(fx.driver(), &restart).await.unwrap();
    assert_eq!(fx.starts(), ["1.0.0", "1.0.0"]);
    assert_ne!(fx.state().pid, pid);
    let out = fx
        .driver()
        .run_task(&restart, "start")
        .await
        .unwrap()
        .output;
    assert!(out.contains("adopted"), "{out}");
    assert_eq!(fx.starts().len(), 2);

    // A config change restarts with the new config.
    let mut change = p.clone();
    change.id = "p-4".into();
    change.kind = PlanKind::ConfigChange;
    change.config = format!("{}extra: 1\n", config(port));
    change.artifacts.clear();
    change.tasks = vec!["configure".into(), "start".into(), "readiness".into()];
    run(fx.driver(), &change).await.unwrap();
    assert_eq!(fx.starts().len(), 3);
    let o = observe_web(fx.driver()).await.unwrap();
    assert_eq!(o.config_sha256, Some(config_sha256(&change.config)));
    assert_eq!(o.health, Health::Healthy);
}

#[tokio::test]
async fn recreated_driver_adopts_running_service() {
    let mut fx = Fixture::new();
    let port = free_port();
    let p = fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true);
    run(fx.driver(), &p).await.unwrap();
    let pid = fx.state().pid.unwrap();

    fx.recreate_driver();
    let o = wait_observed(fx.driver(), "healthy after adoption", |o| {
        o.health == Health::Healthy
    })
    .await;
    assert_eq!(o.version.as_deref(), Some("1.0.0"));
    assert_eq!(fx.state().pid, Some(pid));
    // The plan resumed by the restarted agent does not start a second process.
    let out = all_output(&run(fx.driver(), &p).await.unwrap());
    assert!(out.contains(&format!("(pid {pid}): adopted")), "{out}");
    assert_eq!(fx.starts(), ["1.0.0"]);

    // The adopted process (not a child of this driver) crashes: noticed by pid, restarted.
    // SAFETY: kill(2) of the service this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    // A failed health check ("not ready") may be observed before the crash.
    let o = wait_observed(fx.driver(), "adopted crash noticed", |o| {
        o.message.starts_with("crashed (")
    })
    .await;
    assert_eq!(o.health, Health::Error, "{o:?}");
    assert!(
        o.message.starts_with("crashed (exited; status unknown"),
        "{o:?}"
    );
    wait_observed(fx.driver(), "healthy again", |o| {
        o.health == Health::Healthy
    })
    .await;
    assert_eq!(fx.starts(), ["1.0.0", "1.0.0"]);

    // Once more adopted, then stopped by pid.
    let pid = fx.state().pid.unwrap();
    fx.recreate_driver();
    let out = all_output(&run(fx.driver(), &uninstall_plan()).await.unwrap());
    assert!(out.contains(&format!("stopped pid {pid}")), "{out}");
    assert!(!super::os::is_alive(pid));
}

#[tokio::test]
async fn a_service_the_agent_did_not_record_is_stopped_before_the_next_launch() {
    // An agent SIGKILLed between spawning a service and saving its pid leaves a service
    // nobody tracks, holding the port. Simulated: the service runs, state.json is gone, the
    // agent restarts. The next start stops the leftover and binds the port itself.
    let mut fx = Fixture::new();
    let port = free_port();
    run(
        fx.driver(),
        &fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true),
    )
    .await
    .unwrap();
    let leftover = fx.state().pid.unwrap();
    std::fs::remove_file(fx.entity_dir().join("state.json")).unwrap();
    fx.recreate_driver();
    assert!(super::os::is_alive(leftover));
    let out = all_output(
        &run(
            fx.driver(),
            &fx.install_plan("p-2", PlanKind::Install, "1.0.0", port, true),
        )
        .await
        .unwrap(),
    );
    assert!(!super::os::is_alive(leftover), "the leftover still runs");
    let pid = fx.state().pid.unwrap();
    assert_ne!(pid, leftover);
    assert!(out.contains(&format!("started 1.0.0 (pid {pid})")), "{out}");
    assert_eq!(get(port, "/version").await.unwrap(), (200, "1.0.0".into()));
    assert_eq!(fx.starts(), ["1.0.0", "1.0.0"]);
    run(fx.driver(), &uninstall_plan()).await.unwrap();
}

fn uninstall_plan() -> PlanSpec {
    plan(
        "p-u",
        PlanKind::Uninstall,
        "",
        "",
        vec![],
        vec![],
        &["stop", "remove"],
    )
}

/// Processes whose working directory is under `dir`.
fn processes_under(dir: &Path) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let alive = super::os::proc_stat(pid as u32).is_some_and(|s| s.state != 'Z');
        if alive && std::fs::read_link(entry.path().join("cwd")).is_ok_and(|c| c.starts_with(dir)) {
            pids.push(pid);
        }
    }
    pids
}

#[tokio::test]
async fn stop_kills_the_whole_group_after_the_stop_timeout() {
    let fx = Fixture::new();
    // SIGTERM is ignored (also by the forked `sleep`); no readiness probe: alive for 1 s.
    let service = json!({
        "command": "/bin/sh",
        "args": ["-c", "trap '' TERM; echo up; sleep 1000; echo never"],
        "readiness": null,
        "stop_timeout_ms": 500,
    });
    let bytes = targz(&[(
        "service.json",
        &serde_json::to_vec(&service).unwrap(),
        0o644,
    )]);
    let artifact = fx.publish("stubborn-1.0.0.tar.gz", &bytes);
    let p = plan(
        "p-1",
        PlanKind::Install,
        "1.0.0",
        "",
        vec![artifact],
        fx.registries(),
        &INSTALL,
    );
    let out = all_output(&run(fx.driver(), &p).await.unwrap());
    assert!(out.contains("ready: process alive for 1 s"), "{out}");
    let version_dir = fx.entity_dir().join("versions/1.0.0");
    let deadline = Instant::now() + WAIT;
    while processes_under(&version_dir).len() < 2 {
        assert!(Instant::now() < deadline, "sh and sleep never both ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let began = Instant::now();
    let out = all_output(&run(fx.driver(), &uninstall_plan()).await.unwrap());
    assert!(began.elapsed() >= Duration::from_millis(500));
    assert!(
        out.contains("killed by signal 9 (SIGKILL) after 500 ms"),
        "{out}"
    );
    let deadline = Instant::now() + WAIT;
    while !processes_under(&fx.tmp).is_empty() {
        assert!(
            Instant::now() < deadline,
            "left behind: {:?}",
            processes_under(&fx.tmp)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn supervisor_restarts_crashed_service() {
    let fx = Fixture::new();
    let port = free_port();
    run(
        fx.driver(),
        &fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true),
    )
    .await
    .unwrap();
    let pid = fx.state().pid.unwrap();
    // What a tool stopping the agent's services finds.
    assert_eq!(super::recorded_service_pids(&fx.data), vec![pid]);
    // SAFETY: kill(2) of the service this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);

    // Before the supervisor reaps the process, an observation may already
    // see the health check fail ("not ready"); what must follow is the crash.
    let o = wait_observed(fx.driver(), "crash noticed", |o| {
        o.message.starts_with("crashed (")
    })
    .await;
    assert_eq!(o.health, Health::Error, "{o:?}");
    assert!(
        o.message
            .starts_with("crashed (killed by signal 9 (SIGKILL)), restarted"),
        "{o:?}"
    );
    let o = wait_observed(fx.driver(), "healthy again", |o| {
        o.health == Health::Healthy
    })
    .await;
    assert_eq!(o.version.as_deref(), Some("1.0.0"));
    assert_eq!(fx.starts(), ["1.0.0", "1.0.0"]);
    let state = fx.state();
    assert_ne!(state.pid, Some(pid));
    assert_eq!(state.started_by, "supervisor");
    assert_eq!(get(port, "/version").await.unwrap(), (200, "1.0.0".into()));

    // A second crash: the message counts the restart.
    // SAFETY: as above.
    assert_eq!(
        unsafe { libc::kill(state.pid.unwrap() as i32, libc::SIGKILL) },
        0
    );
    let o = wait_observed(fx.driver(), "second crash", |o| {
        o.message.contains("restarted 1 times")
    })
    .await;
    assert_eq!(o.health, Health::Error);
    wait_observed(fx.driver(), "healthy after the second restart", |o| {
        o.health == Health::Healthy
    })
    .await;
    assert_eq!(fx.starts().len(), 3);
}

#[tokio::test]
async fn uninstall_stops_and_removes() {
    let fx = Fixture::new();
    let port = free_port();
    run(
        fx.driver(),
        &fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true),
    )
    .await
    .unwrap();
    let pid = fx.state().pid.unwrap();
    let uninstall = plan(
        "p-2",
        PlanKind::Uninstall,
        "",
        "",
        vec![],
        vec![],
        &["stop", "remove"],
    );
    let out = all_output(&run(fx.driver(), &uninstall).await.unwrap());
    assert!(out.contains(&format!("stopped pid {pid}")), "{out}");
    assert!(!super::os::is_alive(pid));
    assert!(get(port, "/healthz").await.is_err());
    let dir = fx.entity_dir();
    for gone in ["versions", "config", "secrets", "state.json"] {
        assert!(!dir.join(gone).exists(), "{gone} still exists");
    }
    for kept in ["downloads", "service.log", "data"] {
        assert!(dir.join(kept).exists(), "{kept} was removed");
    }
    assert!(fx.driver().observe().await.is_empty());
    // Idempotent.
    let out = all_output(&run(fx.driver(), &uninstall).await.unwrap());
    assert!(out.contains("not installed"), "{out}");
    // Not restarted.
    tokio::time::sleep(super::supervisor::TICK * 3).await;
    assert_eq!(fx.starts().len(), 1);
}

#[tokio::test]
async fn refuses_foreign_entities_and_unknown_tasks() {
    let fx = Fixture::new();
    let mut p = plan(
        "p-1",
        PlanKind::Install,
        "1.0.0",
        "",
        vec![],
        vec![],
        &INSTALL,
    );
    let f = fx.driver().run_task(&p, "deploy").await.unwrap_err();
    assert_eq!(f.stage, "deploy");
    assert!(f.message.starts_with("unknown task"), "{}", f.message);
    p.entity = "eid:prod:helmChart:web".into();
    let f = fx.driver().run_task(&p, "fetch").await.unwrap_err();
    assert!(
        f.message.contains("belongs to environment \"prod\""),
        "{}",
        f.message
    );
    p.entity = "eid:test:helmChart:..".into();
    assert!(fx.driver().run_task(&p, "configure").await.is_err());
    p.entity = WEB.into();
    p.to_version = "../1".into();
    let f = fx.driver().run_task(&p, "configure").await.unwrap_err();
    assert_eq!(f.stage, "configure");
    assert!(!fx.data.join("process").join("1").exists());
    assert!(ProcessDriver::new(fx.data.clone(), "Bad Env".into(), DenyList::none()).is_err());
}

/// Plan `n` of canary `test/web` bringing it to `primary`, `canary` and `weight`.
fn canary_step_plan(
    fx: &Fixture,
    n: u64,
    port: u16,
    primary: &crate::plan::CanaryWorkloadSpec,
    canary: Option<&crate::plan::CanaryWorkloadSpec>,
    weight: u32,
) -> PlanSpec {
    let mut p = plan(
        &format!("canary-{n}"),
        PlanKind::CanaryStep,
        "",
        "",
        vec![],
        fx.registries(),
        &["apply"],
    );
    p.canary = Some(crate::plan::CanaryStepSpec {
        canary: "test/web".into(),
        service: "web".into(),
        port: u32::from(port),
        step: n,
        phase: "Progressing".into(),
        primary: Some(primary.clone()),
        canary_workload: canary.cloned(),
        canary_weight: weight,
        metric_windows_ms: vec![60_000],
        baseline: None,
        ..Default::default()
    });
    p
}

/// `n` GETs of `/version` on `port`, counted by answer.
async fn versions_served(port: u16, n: usize) -> std::collections::BTreeMap<String, usize> {
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..n {
        let (status, body) = get(port, "/version").await.unwrap();
        assert_eq!(status, 200, "{body}");
        *seen.entry(body).or_insert(0) += 1;
    }
    seen
}

#[tokio::test]
async fn a_canary_runs_its_workloads_as_processes_behind_the_proxy() {
    use crate::canary::CanaryRunner;
    use crate::plan::CanaryWorkloadSpec;

    let mut fx = Fixture::new();
    let port = free_port();
    let install = fx.install_plan("p-1", PlanKind::Install, "1.0.0", port, true);
    run(fx.driver(), &install).await.unwrap();
    assert_eq!(get(port, "/version").await.unwrap().1, "1.0.0");
    let workload = |revision: &str, version: &str, artifacts: Vec<Artifact>| CanaryWorkloadSpec {
        revision: revision.into(),
        version: version.into(),
        config: config(port),
        artifacts,
        secrets_revision: 3,
    };
    let v1 = workload("r1", "1.0.0", install.artifacts.clone());
    let v2 = workload("r2", "2.0.0", vec![fx.release("2.0.0", true)]);

    let driver: Arc<dyn Driver> = Arc::new(fx.driver.take().unwrap());
    let runner = CanaryRunner::new(&fx.data, ENV, driver.clone());
    runner
        .run_task(&canary_step_plan(&fx, 1, port, &v1, None, 0), "apply")
        .await
        .unwrap();
    // The proxy owns the port now, in front of the primary workload.
    assert!(runner.proxy("test/web").is_some());
    assert_eq!(versions_served(port, 3).await.get("1.0.0"), Some(&3));
    runner
        .run_task(&canary_step_plan(&fx, 2, port, &v1, Some(&v2), 50), "apply")
        .await
        .unwrap();
    // The canary is not necessarily ready yet: wait as the hub would.
    let deadline = Instant::now() + WAIT;
    while runner.observations().await[0].canary_ready_percent != 100 {
        assert!(Instant::now() < deadline, "the canary never became ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let seen = versions_served(port, 10).await;
    assert_eq!(seen.get("2.0.0"), Some(&5), "{seen:?}");
    let obs = runner.observations().await;
    assert_eq!(
        (
            obs[0].primary_revision.as_str(),
            obs[0].primary_ready_percent
        ),
        ("r1", 100)
    );
    assert_eq!(obs[0].windows[0].requests, 5);
    assert_eq!(obs[0].windows[0].success_rate_milli, Some(100_000));
    // The hub sees the entity as the primary, with its own config's hash.
    let reported = runner.overlay(driver.observe().await);
    assert_eq!(
        reported
            .iter()
            .map(|o| (o.entity.as_str(), o.version.as_deref(), o.health))
            .collect::<Vec<_>>(),
        vec![(WEB, Some("1.0.0"), Health::Healthy)]
    );
    assert_eq!(
        reported[0].config_sha256.as_deref(),
        Some(config_sha256(&config(port)).as_str())
    );

    // An agent restart: a new driver adopts the workloads, the proxy comes back.
    runner.shutdown();
    drop(runner);
    drop(driver);
    let driver: Arc<dyn Driver> =
        Arc::new(ProcessDriver::new(fx.data.clone(), ENV.into(), DenyList::none()).unwrap());
    let runner = CanaryRunner::new(&fx.data, ENV, driver.clone());
    runner.resume().await;
    let seen = versions_served(port, 10).await;
    assert_eq!(seen.get("2.0.0"), Some(&5), "{seen:?}");

    // Restore: the original serves the port again at the primary's version.
    let mut restore = canary_step_plan(&fx, 3, port, &v1, None, 0);
    if let Some(c) = restore.canary.as_mut() {
        c.restore_original = true;
    }
    runner.run_task(&restore, "apply").await.unwrap();
    assert!(runner.proxy("test/web").is_none());
    let o = wait_observed_in(&*driver, WEB, |o| o.health == Health::Healthy).await;
    assert_eq!(o.version.as_deref(), Some("1.0.0"));
    assert_eq!(get(port, "/version").await.unwrap().1, "1.0.0");
    let ids: Vec<String> = driver
        .observe()
        .await
        .into_iter()
        .map(|o| o.entity)
        .collect();
    assert_eq!(ids, vec![WEB.to_string()], "the workloads are removed");
}

/// Polls `observe` until `pred` holds for `entity` (panics after `WAIT`).
async fn wait_observed_in(
    driver: &dyn Driver,
    entity: &str,
    pred: impl Fn(&Observed) -> bool,
) -> Observed {
    let deadline = Instant::now() + WAIT;
    loop {
        let o = driver
            .observe()
            .await
            .into_iter()
            .find(|o| o.entity == entity);
        if let Some(o) = o.as_ref().filter(|o| pred(o)) {
            return o.clone();
        }
        assert!(Instant::now() < deadline, "timed out; last {o:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

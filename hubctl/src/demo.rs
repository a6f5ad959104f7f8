//! `hubctl demo`: a guided canary rollout on this machine. It starts a local 3-node hub and a
//! `hub-agent` (process driver), publishes the demo service's releases, installs 1.0.0, then
//! rolls out a healthy 1.1.0 by canary (promoted) and a faulty 1.2.0 (20% of its answers are
//! 500s: rolled back), printing phase, weight and the proxy's metrics as they change and a
//! summary at the end. Everything it starts is stopped when it ends (unless `--keep`).
//!
//! The binaries `hub-node`, `hub-agent` and `demo-service` must sit next to `hubctl`
//! (`cargo build --workspace --bins`). Releases are packaged on the fly into the demo's
//! directory, which serves as a `file://` registry, or with `--https` as an https registry
//! (`hubctl dev registry`'s server, in this process) whose generated CA the environment's
//! registry trusts.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command as Process, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::Args;
use hub_engine::Command;
use serde_json::json;
use sha2::{Digest, Sha256};

use super::args::FRESH;
use super::calls::{ask, submit};
use hub_client::answer::{GetCanary, MetricWindowView};
use hub_client::FailoverClient;

/// The demo product.
const PRODUCT: &str = "com.example:demo-service";
/// The environment the demo creates.
const ENV: &str = "demo";
/// Longest a single rollout may take before the demo gives up.
const ROLLOUT_TIMEOUT: Duration = Duration::from_secs(300);

/// `hubctl demo`
#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Directory for the hub's, the agent's and the registry's files (default: a new one
    /// under the system's temporary directory). It is kept after the demo.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Canary analysis interval (at least 1s).
    #[arg(long, default_value = "2s")]
    interval: String,
    /// Leave the hub, the agent and the services running at the end (an `--https`
    /// registry stops with the demo).
    #[arg(long)]
    keep: bool,
    /// Serve the releases over HTTPS with a CA generated for the demo (its certificate in
    /// DIR/tls/ca.pem), instead of as a file:// registry.
    #[arg(long)]
    https: bool,
}

/// Everything the demo started, stopped on drop.
struct Running {
    dir: PathBuf,
    hub_dir: PathBuf,
    agent: Option<Child>,
    agent_dir: PathBuf,
    keep: bool,
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.keep {
            return;
        }
        if let Some(mut a) = self.agent.take() {
            let _ = a.kill();
            let _ = a.wait();
        }
        // The services run in their own sessions: stop them by the pids the agent recorded.
        for pid in service_pids(&self.agent_dir) {
            // SAFETY: plain kill(2) on a pid from the demo's own agent state files.
            unsafe { libc::kill(pid, libc::SIGTERM) };
        }
        if self.hub_dir.join("cluster.json").exists() {
            let _ = super::dev::stop_cluster(&self.hub_dir);
        }
        eprintln!("demo files kept in {}", self.dir.display());
    }
}

/// The one field of the process driver's state file (`hub-agent`'s) the demo reads.
#[derive(serde::Deserialize)]
struct ServiceState {
    /// The running service's process id.
    pid: Option<i64>,
}

/// How one release's canary ended in the demo.
struct DemoResult {
    release: &'static str,
    result: String,
    seconds: u64,
    weights: Vec<u64>,
}

/// Pids in the process driver's state files under the agent's data directory.
fn service_pids(agent_dir: &Path) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir(agent_dir.join("process")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("state.json")).ok())
        .filter_map(|b| serde_json::from_slice::<ServiceState>(&b).ok())
        .filter_map(|v| v.pid)
        .filter_map(|p| i32::try_from(p).ok())
        .collect()
}

/// Runs the demo.
// Long: a scripted walkthrough, its steps in the order the operator sees them.
pub async fn run(args: DemoArgs) -> anyhow::Result<()> {
    let interval_ms = hub_engine::canary::parse_duration(&args.interval)
        .map_err(|e| anyhow::anyhow!("--interval: {e}"))?;
    if interval_ms < hub_engine::canary::MIN_INTERVAL_MS {
        bail!("--interval: {} is below 1s", args.interval);
    }
    let bins = binaries()?;
    let dir = match args.dir {
        Some(d) => d,
        None => std::env::temp_dir().join(format!("hub-demo-{:08x}", rand::random::<u32>())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("--dir {}", dir.display()))?;
    let dir = dir.canonicalize()?;
    let started = Instant::now();
    let say = |msg: &str| println!("[{:>6.1}s] {msg}", started.elapsed().as_secs_f64());

    say(&format!(
        "packaging demo-service 1.0.0, 1.1.0, 1.2.0 into {}",
        dir.display()
    ));
    let registry = dir.join("registry");
    let mut manifests = Vec::new();
    for v in ["1.0.0", "1.1.0", "1.2.0"] {
        manifests.push(package(&bins.demo_service, &registry, v)?);
    }

    let mut running = Running {
        dir: dir.clone(),
        hub_dir: dir.join("hub"),
        agent: None,
        agent_dir: dir.join("agent"),
        keep: args.keep,
    };
    say("starting a 3-node hub");
    let node_args = super::dev::opening_outbound(hub_http::DenyList::LOOPBACK, "")?;
    let (cluster, leader) = super::dev::start_cluster(
        Some(3),
        &running.hub_dir,
        0,
        &node_args,
        &super::dev::Placement::default(),
    )
    .await?;
    let endpoints: Vec<String> = cluster.nodes.iter().map(|n| n.addr.clone()).collect();
    say(&format!(
        "hub up ({}), leader node {leader}",
        endpoints.join(", ")
    ));
    say(&format!(
        "the hub's outbound calls and the agent's downloads may reach loopback ({}: \
         --outbound-allow); a production hub and agent deny loopback and private addresses \
         unless an operator opens them",
        super::dev::opened_ranges(&cluster.node_args).join(", ")
    ));
    let client = FailoverClient::new(
        endpoints.clone(),
        Duration::from_secs(15),
        super::dev::dev_connector(&running.hub_dir, &cluster)?,
    );
    let agent_tls =
        super::dev::dev_issue(&running.hub_dir, &hub_tls::Identity::Agent(ENV.into()), &[])?;

    // With --https the server lives as long as this function.
    let (registry_set, _https_registry) = if args.https {
        let served = super::dev_registry::start(&registry, "127.0.0.1:0".parse()?).await?;
        let tls = dir.join("tls");
        std::fs::create_dir_all(&tls)?;
        std::fs::write(tls.join("ca.pem"), &served.ca_pem)?;
        say(&format!(
            "registry: {} over https (CA generated for the demo: {})",
            served.url,
            tls.join("ca.pem").display()
        ));
        let set = local_registry(served.url.clone(), Some(served.ca_pem.clone()));
        (set, Some(served))
    } else {
        let set = local_registry(format!("file://{}", registry.display()), None);
        (set, None)
    };
    let port = free_port()?;
    for command in [
        Command::CreateEnvironment {
            name: ENV.into(),
            description: "hubctl demo".into(),
        },
        registry_set,
        Command::CreateProduct {
            product_id: PRODUCT.into(),
            description: "the demo service".into(),
        },
        Command::CreateEntity {
            environment: ENV.into(),
            kind: hub_engine::EntityKind::HelmChart,
            name: "demo-service".into(),
            product_id: PRODUCT.into(),
            k8s_namespace: Some("demo".into()),
            account_id: None,
            release_channel: None,
        },
    ] {
        submit(&client, &command).await?;
    }
    let entity = format!("eid:{ENV}:helmChart:demo-service");
    for (version, config) in [
        ("0.0.0", format!("port: {port}\n")),
        ("1.2.0", format!("port: {port}\nerror_rate: 0.2\n")),
    ] {
        submit(
            &client,
            &Command::SetConfigOverrides {
                entity: entity.clone(),
                version: version.into(),
                config: Some(config),
            },
        )
        .await?;
    }
    say(&format!(
        "environment {ENV}: demo-service on 127.0.0.1:{port}; releases from 1.2.0 on answer 20% of requests with 500"
    ));

    let log = std::fs::File::create(dir.join("agent.log"))?;
    running.agent = Some(
        Process::new(&bins.agent)
            .args(["--environment", ENV, "--endpoints", &endpoints.join(",")])
            .arg("--data-dir")
            .arg(&running.agent_dir)
            .args(["--driver", "process", "--state-interval-ms", "300"])
            .args(["--outbound-allow", hub_http::DenyList::LOOPBACK])
            .arg("--ca-file")
            .arg(&agent_tls.ca)
            .arg("--cert-file")
            .arg(&agent_tls.cert)
            .arg("--key-file")
            .arg(&agent_tls.key)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("start {}", bins.agent.display()))?,
    );
    say("hub-agent started (process driver); installing 1.0.0");
    publish(&client, &manifests[0]).await?;
    wait_serving(port, "1.0.0", Duration::from_secs(120)).await?;
    say("1.0.0 installed and serving");

    let canary = canary_yaml(port, &args.interval, interval_ms);
    std::fs::write(dir.join("canary.yml"), &canary)?;
    submit(
        &client,
        &Command::ApplyCanary {
            environment: Some(ENV.into()),
            yaml: canary,
        },
    )
    .await?;
    say(&format!(
        "canary applied ({}/canary.yml): interval {}, weight +10% up to 50%, success rate >= 99%, p99 <= 500 ms, 2 failed checks roll back",
        dir.display(),
        args.interval
    ));
    let traffic = Traffic::start(port);
    say("sending traffic to the service (about 50 requests/s)");
    follow(&client, started, "Initialized", None).await?;

    let mut results = Vec::new();
    for (i, (version, expect)) in [("1.1.0", "Succeeded"), ("1.2.0", "Failed")]
        .iter()
        .enumerate()
    {
        say(&format!("publishing {version}: the canary analyses it"));
        let t = Instant::now();
        publish(&client, &manifests[i + 1]).await?;
        let (phase, weights) = follow(&client, started, expect, Some(*expect)).await?;
        results.push(DemoResult {
            release: version,
            result: phase,
            seconds: t.elapsed().as_secs(),
            weights,
        });
    }
    let serving = current_version(port).await.unwrap_or_else(|| "-".into());
    let (ok, errors, failed) = traffic.stop();

    println!("\nsummary");
    for r in &results {
        println!(
            "  {:<6} {:<10} in {:>3}s  weights {}",
            r.release,
            r.result,
            r.seconds,
            json!(r.weights)
        );
    }
    println!("  the service now serves {serving}");
    println!("  traffic: {ok} answered, {errors} with 5xx, {failed} without an answer");
    if args.keep {
        println!(
            "  left running: source {} && hubctl canary get -A",
            running.hub_dir.join("hubctl.env").display()
        );
    }
    let expected = results
        .iter()
        .map(|r| r.result.as_str())
        .eq(["Succeeded", "Failed"]);
    drop(running);
    if !expected || serving != "1.1.0" {
        bail!("the demo did not end as expected (1.1.0 promoted, 1.2.0 rolled back)");
    }
    Ok(())
}

/// Paths of the binaries the demo runs.
struct Binaries {
    agent: PathBuf,
    demo_service: PathBuf,
}

fn binaries() -> anyhow::Result<Binaries> {
    super::dev::hub_node_binary()?;
    let exe = std::env::current_exe().context("locate hubctl")?;
    let find = |name: &str| {
        let p = exe.with_file_name(name);
        if p.exists() {
            Ok(p)
        } else {
            Err(anyhow::anyhow!(
                "{name} not found next to hubctl at {} (cargo build --workspace --bins)",
                p.display()
            ))
        }
    };
    Ok(Binaries {
        agent: find("hub-agent")?,
        demo_service: find("demo-service")?,
    })
}

/// Packages `version` of the demo-service binary `bin` as a process-driver artifact in
/// `registry/demo-service/` (a `file://` registry); returns the release manifest of
/// `com.example:demo-service`. Also used by the chaos runner.
pub fn package(bin: &Path, registry: &Path, version: &str) -> anyhow::Result<String> {
    let dir = registry.join("demo-service");
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let name = format!("demo-service-{version}.tar.gz");
    let service = json!({
        "command": "bin/demo-service",
        "args": ["--config", "${CONFIG}", "--version", version],
        "env": {},
        "readiness": {"http": "/healthz"},
        "ready_timeout_ms": 10000,
        "stop_timeout_ms": 5000
    });
    let binary = std::fs::read(bin).with_context(|| {
        format!(
            "{} (cargo build --workspace --bins builds it)",
            bin.display()
        )
    })?;
    let mut tarball = Vec::new();
    {
        let gz = flate2::write::GzEncoder::new(&mut tarball, flate2::Compression::default());
        let mut tar = tar::Builder::new(gz);
        let mut add = |path: &str, mode: u32, data: &[u8], kind: tar::EntryType| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(data.len() as u64);
            h.set_mtime(1_704_067_200);
            tar.append_data(&mut h, path, data)
        };
        add("bin", 0o755, &[], tar::EntryType::Directory)?;
        add("bin/demo-service", 0o755, &binary, tar::EntryType::Regular)?;
        add(
            "service.json",
            0o644,
            serde_json::to_string_pretty(&service)?.as_bytes(),
            tar::EntryType::Regular,
        )?;
        tar.into_inner()?.finish()?;
    }
    std::fs::write(dir.join(&name), &tarball)?;
    let sha = hex::encode(Sha256::digest(&tarball));
    Ok(format!(
        "product-group: com.example\nproduct-name: demo-service\nproduct-version: {version}\n\
         artifacts:\n  - uri: demo-service/{name}\n    sha256: {sha}\n"
    ))
}

/// The demo's canary resource.
fn canary_yaml(port: u16, interval: &str, interval_ms: i64) -> String {
    let window = format!("{}s", ((interval_ms * 2 + 999) / 1000).max(2));
    format!(
        "apiVersion: flagger.app/v1beta1
kind: Canary
metadata:
  name: demo-service
  namespace: {ENV}
spec:
  targetRef:
    kind: helmChart
    name: demo-service
  service:
    port: {port}
  progressDeadlineSeconds: 120
  analysis:
    interval: {interval}
    threshold: 2
    maxWeight: 50
    stepWeight: 10
    metrics:
      - name: request-success-rate
        thresholdRange:
          min: 99
        interval: {window}
      - name: request-duration
        thresholdRange:
          max: 500
        interval: {window}
"
    )
}

/// The demo environment's registry, `local`, at `url`; with `ca_pem` when served over https.
fn local_registry(url: String, ca_pem: Option<String>) -> Command {
    Command::SetRegistry {
        environment: ENV.into(),
        name: "local".into(),
        url,
        hub_access: "expected".into(),
        ca_pem,
        insecure_skip_verify: false,
    }
}

async fn publish(client: &FailoverClient, manifest: &str) -> anyhow::Result<()> {
    submit(
        client,
        &Command::PublishRelease {
            manifest: manifest.to_string(),
        },
    )
    .await
    .map(|_| ())
}

/// Prints the canary's progress whenever its phase or weight changes, until its phase is
/// `until` (or, with `done`, any resting phase after analysis started). Returns the final
/// phase and the weights seen.
async fn follow(
    client: &FailoverClient,
    started: Instant,
    until: &str,
    done: Option<&str>,
) -> anyhow::Result<(String, Vec<u64>)> {
    let deadline = Instant::now() + ROLLOUT_TIMEOUT;
    let mut last = (String::new(), u64::MAX, 0);
    let mut weights: Vec<u64> = Vec::new();
    let mut analysing = false;
    loop {
        let v = ask(client, &GetCanary(format!("{ENV}/demo-service")), FRESH).await?;
        let phase = v.status.clone();
        let weight = u64::from(v.weight);
        let failed = v
            .status_block
            .as_ref()
            .map_or(0, |b| u64::from(b.failed_checks));
        if matches!(
            phase.as_str(),
            "Progressing" | "WaitingPromotion" | "Promoting"
        ) {
            analysing = true;
        }
        if (phase.clone(), weight, failed) != last {
            let w = v
                .observation
                .flatten()
                .and_then(|o| o.windows.into_iter().next());
            let window = |f: fn(&MetricWindowView) -> Option<f64>| w.as_ref().and_then(f);
            let mut metrics = match (window(|w| w.success_rate), window(|w| w.p99_ms)) {
                (Some(s), Some(p)) => format!("  canary: success {s:.1}%, p99 {p:.0} ms"),
                _ => String::new(),
            };
            if failed > 0 {
                metrics.push_str(&format!("  failed checks {failed}"));
            }
            println!(
                "[{:>6.1}s]   {phase:<17} weight {weight:>3}%{metrics}",
                started.elapsed().as_secs_f64()
            );
            if weights.last() != Some(&weight) {
                weights.push(weight);
            }
            last = (phase.clone(), weight, failed);
        }
        let finished = match done {
            None => phase == until,
            Some(_) => analysing && matches!(phase.as_str(), "Succeeded" | "Failed"),
        };
        if finished {
            return Ok((phase, weights));
        }
        if Instant::now() > deadline {
            bail!("the canary did not reach {until} within {ROLLOUT_TIMEOUT:?} (phase {phase})");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// A free TCP port on 127.0.0.1.
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// One `GET` to the service: status and body.
async fn get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let fut = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(
            format!("GET {path} HTTP/1.1\r\nHost: demo\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf);
        let status = text.split_whitespace().nth(1)?.parse().ok()?;
        let body = text
            .split_once("\r\n\r\n")
            .map(|x| x.1.to_string())
            .unwrap_or_default();
        Some((status, body))
    };
    tokio::time::timeout(Duration::from_secs(5), fut)
        .await
        .ok()
        .flatten()
}

async fn current_version(port: u16) -> Option<String> {
    get(port, "/version")
        .await
        .map(|(_, b)| b.trim().to_string())
}

async fn wait_serving(port: u16, version: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if current_version(port).await.as_deref() == Some(version) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    bail!("the service on port {port} never served {version}; see the agent log")
}

/// Background traffic to the service's address.
struct Traffic {
    stop: Arc<AtomicBool>,
    ok: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

impl Traffic {
    fn start(port: u16) -> Traffic {
        let t = Traffic {
            stop: Arc::new(AtomicBool::new(false)),
            ok: Arc::default(),
            errors: Arc::default(),
            failed: Arc::default(),
        };
        let (stop, ok, errors, failed) = (
            t.stop.clone(),
            t.ok.clone(),
            t.errors.clone(),
            t.failed.clone(),
        );
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                match get(port, "/").await {
                    Some((s, _)) if s >= 500 => errors.fetch_add(1, Ordering::Relaxed),
                    Some(_) => ok.fetch_add(1, Ordering::Relaxed),
                    None => failed.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        t
    }

    /// Stops sending; returns (answered, 5xx, unanswered).
    fn stop(&self) -> (u64, u64, u64) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = std::io::stdout().flush();
        (
            self.ok.load(Ordering::Relaxed) + self.errors.load(Ordering::Relaxed),
            self.errors.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
        )
    }
}

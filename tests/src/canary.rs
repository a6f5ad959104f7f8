//! Helpers for black-box canary tests: a hub with the demo service installed through a real
//! `hub-agent` (process driver) and a canary attached, a traffic generator for the `<svc>`
//! address, a webhook server whose answers a test controls, and the agent's applied-weights
//! log read back for comparison with the committed steps.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use hub_client::answer::{CanaryView, GetCanary};
use serde_json::{json, Value};

use crate::agent::{http_get, HubAgent};
use crate::{free_port, poll_until, Cluster, CONVERGE_TIMEOUT};

/// The demo product.
pub const PRODUCT: &str = "com.example:demo-service";

/// A hub with environment `prod`, the demo service installed at 1.0.0 by a process-driver
/// agent on [`CanaryHub::port`], ready for a canary.
pub struct CanaryHub {
    /// The agent. Declared first so it drops first: its drop stops the services it started,
    /// by pids under its data directory, which the cluster's drop deletes.
    pub agent: HubAgent,
    /// The hub (dropped last: it kills its nodes and deletes the directory).
    pub cluster: Cluster,
    /// The entity id.
    pub entity: String,
    /// The environment (the canary's namespace).
    pub environment: String,
    /// The service port (`<svc>`).
    pub port: u16,
    /// The packaged releases (`registry/`, `manifests/`).
    pub dir: PathBuf,
}

impl CanaryHub {
    /// Starts everything and installs 1.0.0. Releases 1.1.0, 1.2.0 (20% errors through its
    /// config) and 2.0.0 (never ready) are packaged, not published.
    pub fn start() -> CanaryHub {
        Self::start_on(Cluster::up(3, "--artifact-ttl-ms 500"))
    }

    /// [`CanaryHub::start`] on a hub the test started (e.g. with more node flags).
    pub fn start_on(cluster: Cluster) -> CanaryHub {
        Self::start_with_agent_args(cluster, &[])
    }

    /// [`CanaryHub::start_on`] with more `hub-agent` arguments (e.g. `--metrics-listen`).
    pub fn start_with_agent_args(cluster: Cluster, agent_args: &[&str]) -> CanaryHub {
        Self::start_in(cluster, "prod", "demo", free_port(), agent_args)
    }

    /// [`CanaryHub::start_with_agent_args`] with the entity `name` in `environment`, its
    /// service on `port`.
    pub fn start_in(
        cluster: Cluster,
        environment: &str,
        name: &str,
        port: u16,
        agent_args: &[&str],
    ) -> CanaryHub {
        let dir = cluster.package_demo();
        let submit =
            |what: &str, v: Value| cluster.submit(v).unwrap_or_else(|e| panic!("{what}: {e}"));
        submit(
            "env",
            json!({"CreateEnvironment": {"name": environment, "description": ""}}),
        );
        submit(
            "registry",
            json!({"SetRegistry": {"environment": environment, "name": "local",
            "url": format!("file://{}", dir.join("registry").display()), "hub_access": "expected"}}),
        );
        submit(
            "product",
            json!({"CreateProduct": {"product_id": PRODUCT, "description": "demo"}}),
        );
        let out = submit(
            "entity",
            json!({"CreateEntity": {"environment": environment, "kind": "HelmChart", "name": name,
            "product_id": PRODUCT, "k8s_namespace": "demo", "account_id": null, "release_channel": null}}),
        );
        let entity = out["EntityCreated"].as_str().expect("id").to_string();
        submit(
            "config",
            json!({"SetConfigOverrides": {"entity": entity, "version": "0.0.0",
            "config": format!("port: {port}\n")}}),
        );
        submit(
            "faulty config",
            json!({"SetConfigOverrides": {"entity": entity, "version": "1.2.0",
            "config": format!("port: {port}\nerror_rate: 0.2\n")}}),
        );
        let mut args = vec!["--driver", "process"];
        args.extend_from_slice(agent_args);
        let agent = cluster.start_hub_agent(environment, &args);
        let hub = CanaryHub {
            cluster,
            agent,
            entity,
            environment: environment.to_string(),
            port,
            dir,
        };
        hub.publish("1.0.0");
        hub.serves("1.0.0");
        hub
    }

    /// Publishes packaged release `version`.
    pub fn publish(&self, version: &str) {
        let manifest = std::fs::read_to_string(
            self.dir
                .join(format!("manifests/demo-service-{version}.yml")),
        )
        .unwrap_or_else(|e| panic!("manifest {version}: {e}"));
        self.cluster
            .submit(json!({"PublishRelease": {"manifest": manifest}}))
            .unwrap_or_else(|e| panic!("publish {version}: {e}"));
    }

    /// Waits until `GET /version` on the service port answers `version`.
    pub fn serves(&self, version: &str) {
        poll_until(CONVERGE_TIMEOUT, || {
            let (status, body) = http_get(self.port, "/version")?;
            (status == 200 && body.trim() == version).then_some(())
        })
        .unwrap_or_else(|| {
            panic!(
                "the service never answered {version}: {:?}\n{}\n{}",
                http_get(self.port, "/version"),
                self.agent.log_tail(30),
                self.cluster.log_tails(10)
            )
        });
    }

    /// Applies canary YAML `yaml` in `prod`.
    pub fn apply(&self, yaml: &str) {
        let path = self.cluster.dir().join("canary.yml");
        std::fs::write(&path, yaml).expect("write canary.yml");
        self.cluster
            .hubctl(&[
                "canary",
                "apply",
                "-f",
                path.to_str().unwrap(),
                "-n",
                &self.environment,
            ])
            .expect_ok("canary apply");
    }

    /// The canary's full view (the `canary` query `hubctl canary get` reads): `status` is the
    /// phase, `weight` the canary weight, plus `status_block`, `committed_weights`, ...
    pub fn canary(&self, name: &str) -> Option<CanaryView> {
        self.cluster
            .ask(&GetCanary(format!("{}/{name}", self.environment)))
            .ok()
    }

    /// Waits until the canary's phase satisfies `f`; returns its view.
    pub fn wait_phase(
        &self,
        name: &str,
        timeout: Duration,
        f: impl Fn(&str) -> bool,
    ) -> CanaryView {
        poll_until(timeout, || {
            let v = self.canary(name)?;
            f(&v.status).then_some(v)
        })
        .unwrap_or_else(|| {
            panic!(
                "canary {name} never reached the phase: {}\n{}\n{}",
                self.canary(name)
                    .map(|v| serde_json::to_string_pretty(&v).unwrap_or_default())
                    .unwrap_or_default(),
                self.agent.log_tail(40),
                self.cluster.log_tails(20)
            )
        })
    }

    /// The agent's applied-weights log of canary `prod/<name>`: (step, canary weight, phase).
    pub fn applied(&self, name: &str) -> Vec<(u64, u64, String)> {
        let path = self
            .agent
            .data_dir
            .join(format!("canary/{}--{name}/applied.jsonl", self.environment));
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .map(|v| {
                (
                    v["step"].as_u64().unwrap_or(0),
                    v["canary_weight"].as_u64().unwrap_or(0),
                    v["phase"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect()
    }

    /// The committed weights of the canary's view: (step, canary weight).
    pub fn committed(view: &CanaryView) -> Vec<(u64, u64)> {
        view.committed_weights
            .iter()
            .flatten()
            .map(|w| (w.step, u64::from(w.canary_weight)))
            .collect()
    }

    /// Asserts that the agent applied exactly the committed weights: every committed step's
    /// weight appears at that step in the applied log, the applied log has no step twice and
    /// steps only grow, and both sequences of distinct consecutive weights are equal.
    #[track_caller]
    pub fn assert_applied_equals_committed(&self, name: &str) -> Vec<u64> {
        // The agent applies the last step plan shortly after it is committed.
        let (committed, applied) = poll_until(CONVERGE_TIMEOUT, || {
            let committed = Self::committed(&self.canary(name)?);
            let applied = self.applied(name);
            let last = committed.last()?.0;
            applied
                .iter()
                .any(|a| a.0 >= last)
                .then_some((committed, applied))
        })
        .unwrap_or_else(|| {
            panic!(
                "the agent never applied the last committed step of {name}: {:?}\n{}",
                self.applied(name),
                self.agent.log_tail(30)
            )
        });
        assert!(
            applied.windows(2).all(|w| w[0].0 < w[1].0),
            "applied steps must strictly grow: {applied:?}"
        );
        let first = committed.first().map_or(0, |c| c.0);
        for (step, weight) in &committed {
            let got = applied.iter().find(|a| a.0 == *step);
            assert_eq!(
                got.map(|a| a.1),
                Some(*weight),
                "step {step}: committed weight {weight}, applied {got:?}\ncommitted {committed:?}\napplied {applied:?}"
            );
        }
        let collapse = |v: Vec<u64>| {
            let mut out: Vec<u64> = Vec::new();
            for w in v {
                if out.last() != Some(&w) {
                    out.push(w);
                }
            }
            out
        };
        let a = collapse(
            applied
                .iter()
                .filter(|a| a.0 >= first)
                .map(|a| a.1)
                .collect(),
        );
        let c = collapse(committed.iter().map(|c| c.1).collect());
        assert_eq!(a, c, "applied {applied:?}\ncommitted {committed:?}");
        c
    }
}

/// Sends `GET /` to a port continuously (about 100 requests per second) until dropped,
/// counting answers by status.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Status → count (0: no answer).
    pub counts: Arc<Mutex<BTreeMap<u16, u64>>>,
}

impl Traffic {
    /// Starts sending to `127.0.0.1:port`.
    pub fn start(port: u16) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let counts = Arc::new(Mutex::new(BTreeMap::new()));
        let (s, c) = (stop.clone(), counts.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                let status = http_get(port, "/").map_or(0, |(status, _)| status);
                *c.lock().unwrap().entry(status).or_insert(0) += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Traffic {
            stop,
            thread: Some(thread),
            counts,
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A webhook receiver: answers each path with the status a test sets (200 by default) and
/// counts calls per path.
pub struct WebhookServer {
    /// The port.
    pub port: u16,
    statuses: Arc<Mutex<BTreeMap<String, u16>>>,
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
    stop: Arc<AtomicBool>,
    served: Arc<AtomicU64>,
}

impl WebhookServer {
    /// Starts listening on a free port.
    pub fn start() -> WebhookServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind webhook server");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let statuses: Arc<Mutex<BTreeMap<String, u16>>> = Arc::default();
        let calls: Arc<Mutex<BTreeMap<String, u64>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        let (st, ca, sp, sv) = (
            statuses.clone(),
            calls.clone(),
            stop.clone(),
            served.clone(),
        );
        std::thread::spawn(move || {
            while !sp.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((stream, _)) => {
                        let _ = answer(stream, &st, &ca);
                        sv.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        WebhookServer {
            port,
            statuses,
            calls,
            stop,
            served,
        }
    }

    /// The URL of `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// Answers `path` with `status` from now on.
    pub fn set(&self, path: &str, status: u16) {
        self.statuses
            .lock()
            .unwrap()
            .insert(path.to_string(), status);
    }

    /// Calls of `path` so far.
    pub fn calls(&self, path: &str) -> u64 {
        self.calls.lock().unwrap().get(path).copied().unwrap_or(0)
    }
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.served.load(Ordering::Relaxed);
    }
}

fn answer(
    stream: TcpStream,
    statuses: &Mutex<BTreeMap<String, u16>>,
    calls: &Mutex<BTreeMap<String, u64>>,
) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut length = 0usize;
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h)? == 0 || h == "\r\n" {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                length = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; length.min(1 << 20)];
    reader.read_exact(&mut body)?;
    *calls.lock().unwrap().entry(path.clone()).or_insert(0) += 1;
    let status = statuses.lock().unwrap().get(&path).copied().unwrap_or(200);
    let mut s = stream;
    write!(
        s,
        "HTTP/1.1 {status} X\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    )?;
    s.flush()
}

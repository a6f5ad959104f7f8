//! Helpers for black-box HTTPS tests: a CA generated in the test, HTTP(S) servers whose
//! answers a test controls (registries, webhooks, alerts, Prometheus) and that record what
//! they were asked and how many connections they accepted, a CONNECT proxy that records the
//! tunnels it opened, and `hubctl dev registry` as a process.
//!
//! Servers run on one tokio runtime shared by the test process; ports are always picked by
//! the system.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use hub_http::local::{Handler, LocalCa, LocalServer, Reply, Request, ServerConfig};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::{bin_dir, poll_until};

/// The runtime every helper server runs on.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a runtime for the test servers")
    })
}

/// A CA generated for one test, its certificate also written to a PEM file.
pub struct TestCa {
    ca: LocalCa,
    /// The CA certificate (PEM), for `--ca-file` and `--outbound-ca-file`.
    pub pem_file: PathBuf,
    _dir: tempfile::TempDir,
}

impl TestCa {
    /// A new CA named `name`.
    pub fn new(name: &str) -> TestCa {
        let ca = LocalCa::generate(name).expect("generate a CA");
        let dir = tempfile::tempdir().expect("a directory for the CA");
        let pem_file = dir.path().join("ca.pem");
        std::fs::write(&pem_file, ca.ca_pem()).expect("write ca.pem");
        TestCa {
            ca,
            pem_file,
            _dir: dir,
        }
    }

    /// The path of the PEM file as text.
    pub fn pem_path(&self) -> &str {
        self.pem_file.to_str().expect("a UTF-8 temporary path")
    }
}

/// How a [`TestServer`] answers one path.
#[derive(Debug, Clone)]
pub enum Route {
    /// This status with a short text body.
    Status(u16),
    /// 200 with this body.
    Body(Vec<u8>),
    /// A redirect (status, `Location`).
    Redirect(u16, String),
}

/// One request a [`TestServer`] answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// `GET`, `HEAD`, `POST`, ...
    pub method: String,
    /// Path and query.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The body.
    pub body: Vec<u8>,
}

/// An HTTP or HTTPS server answering paths by [`Route`] (404 for any other), recording
/// every request.
pub struct TestServer {
    server: LocalServer,
    scheme: &'static str,
    routes: Arc<Mutex<BTreeMap<String, Route>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl TestServer {
    /// An HTTPS server on `ip` with a certificate of `ca` for `names`.
    pub fn https(ca: &TestCa, ip: &str, names: &[&str]) -> TestServer {
        let tls = ca.ca.server_config(names).expect("a server certificate");
        Self::start(ip, Some(tls))
    }

    /// A plain HTTP server on `ip` (e.g. 127.0.0.2, also loopback on Linux).
    pub fn plain(ip: &str) -> TestServer {
        Self::start(ip, None)
    }

    fn start(ip: &str, tls: Option<Arc<ServerConfig>>) -> TestServer {
        let routes: Arc<Mutex<BTreeMap<String, Route>>> = Arc::default();
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let (r, s) = (routes.clone(), seen.clone());
        let handler: Handler = Arc::new(move |request: Request| {
            s.lock().unwrap().push(Seen {
                method: request.method.to_string(),
                path: request.path.clone(),
                authorization: request
                    .headers
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_string),
                body: request.body.to_vec(),
            });
            let path = request.path.split('?').next().unwrap_or_default();
            match r.lock().unwrap().get(path).cloned() {
                Some(Route::Status(status)) => Reply::text(status, format!("status {status}")),
                Some(Route::Body(body)) => Reply {
                    status: 200,
                    headers: vec![],
                    body: body.into(),
                },
                Some(Route::Redirect(status, location)) => Reply::redirect(status, &location),
                None => Reply::text(404, "not found"),
            }
        });
        let scheme = if tls.is_some() { "https" } else { "http" };
        let server = runtime().block_on(async {
            let listener = tokio::net::TcpListener::bind((ip, 0))
                .await
                .unwrap_or_else(|e| panic!("bind {ip}:0: {e}"));
            LocalServer::start(listener, tls, handler).expect("start a test server")
        });
        TestServer {
            server,
            scheme,
            routes,
            seen,
        }
    }

    /// Answers `path` with `route` from now on.
    pub fn route(&self, path: &str, route: Route) {
        self.routes.lock().unwrap().insert(path.to_string(), route);
    }

    /// Its port.
    pub fn port(&self) -> u16 {
        self.server.addr().port()
    }

    /// `scheme://ip:port`.
    pub fn base(&self) -> String {
        format!("{}://{}", self.scheme, self.server.addr())
    }

    /// `scheme://ip:port<path>`.
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base())
    }

    /// `scheme://host:port<path>` with another host name for the same server (`localhost`).
    pub fn url_as(&self, host: &str, path: &str) -> String {
        format!("{}://{host}:{}{path}", self.scheme, self.port())
    }

    /// Every request so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    /// Requests of `path` (without its query) so far.
    pub fn requests(&self, path: &str) -> usize {
        self.seen()
            .iter()
            .filter(|s| s.path.split('?').next() == Some(path))
            .count()
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.server.connections()
    }
}

/// An HTTP proxy that only tunnels (`CONNECT host:port`), as `HTTPS_PROXY` uses it, and
/// records each tunnel's target.
pub struct ConnectProxy {
    port: u16,
    tunnels: Arc<Mutex<Vec<String>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl ConnectProxy {
    /// Starts on a free port of 127.0.0.1.
    pub fn start() -> ConnectProxy {
        let tunnels: Arc<Mutex<Vec<String>>> = Arc::default();
        let seen = tunnels.clone();
        let (port, accept) = runtime().block_on(async {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind the proxy");
            let port = listener.local_addr().expect("proxy address").port();
            let accept = tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    tokio::spawn(tunnel(client, seen.clone()));
                }
            });
            (port, accept)
        });
        ConnectProxy {
            port,
            tunnels,
            accept,
        }
    }

    /// `http://127.0.0.1:PORT`, for `HTTPS_PROXY`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The targets (`host:port`) of every tunnel opened so far.
    pub fn tunnels(&self) -> Vec<String> {
        self.tunnels.lock().unwrap().clone()
    }
}

impl Drop for ConnectProxy {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Serves one proxy connection: `CONNECT target HTTP/1.1`, then bytes both ways.
async fn tunnel(client: tokio::net::TcpStream, tunnels: Arc<Mutex<Vec<String>>>) {
    let mut client = BufReader::new(client);
    let mut line = String::new();
    if client.read_line(&mut line).await.is_err() {
        return;
    }
    let mut parts = line.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (parts.next(), parts.next()) else {
        let _ = client
            .get_mut()
            .write_all(b"HTTP/1.1 405 Method Not Allowed\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    let target = target.to_string();
    loop {
        let mut header = String::new();
        match client.read_line(&mut header).await {
            Ok(0) | Err(_) => return,
            Ok(_) if header == "\r\n" => break,
            Ok(_) => {}
        }
    }
    tunnels.lock().unwrap().push(target.clone());
    let Ok(mut upstream) = tokio::net::TcpStream::connect(&target).await else {
        let _ = client
            .get_mut()
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await;
        return;
    };
    if client
        .get_mut()
        .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await
        .is_err()
    {
        return;
    }
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
}

/// `hubctl dev registry DIR` as a process (killed on drop): an https registry with a CA it
/// generated.
pub struct DevRegistry {
    child: Child,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The CA certificate it wrote.
    pub ca_file: PathBuf,
}

impl DevRegistry {
    /// Serves `dir` on a free port; TLS files go to `tls_dir`.
    pub fn start(dir: &Path, tls_dir: &Path) -> DevRegistry {
        let child = Command::new(bin_dir().join("hubctl"))
            .args(["dev", "registry"])
            .arg(dir)
            .args(["--listen", "127.0.0.1:0", "--tls-dir"])
            .arg(tls_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start hubctl dev registry");
        let mut registry = DevRegistry {
            child,
            url: String::new(),
            ca_file: tls_dir.join("ca.pem"),
        };
        registry.url = poll_until(Duration::from_secs(30), || {
            std::fs::read_to_string(tls_dir.join("url")).ok()
        })
        .expect("hubctl dev registry writes its URL");
        registry
    }
}

impl Drop for DevRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

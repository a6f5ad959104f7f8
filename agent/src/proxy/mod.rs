//! The canary proxy the agent owns for one service (docs/ARCHITECTURE.md "The agent", SPEC K2): three HTTP
//! listeners — `<svc>` (the main address: split between primary and canary by the committed
//! weight and A/B rules, and to a fresh baseline at the canary's weight when one runs),
//! `<svc>-primary` and `<svc>-canary` — forwarding to the workloads and measuring each
//! workload's success rate and latency, the metrics and samples the hub's canary analysis
//! reads (SPEC K6, issue 20).
//!
//! HTTP/1.1 only; one upstream connection per request (loopback to local workloads).
//!
//! The listeners face the service's clients, so they are bounded ([`ProxyLimits`]): a client
//! must send a request's headers within [`HEADER_READ_TIMEOUT`] (slow-header clients cannot
//! pin connections) and keep a request body flowing ([`BODY_IDLE_TIMEOUT`] between frames),
//! one source address holds at most [`MAX_CONNECTIONS_PER_SOURCE`] connections, and at most
//! [`MAX_CONNECTIONS`] connections are served at once across the three listeners; a
//! connection beyond either is closed at once and counted (per proxy, and in all in
//! [`CONNECTIONS_REFUSED`], served as `hub_agent_proxy_connections_refused_total`).

mod idle_body;
pub mod route;
pub mod stats;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use http_body_util::{combinators::BoxBody, BodyExt, Full};
use hub_log_limit::{Limits, LogLimiter};
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;

pub use route::{HeaderMatch, InvalidHeaderMatch, Routing, Workload};
pub use stats::WindowStats;

use hub_tls::budget::PerSource;
use idle_body::IdleTimeoutBody;
use route::Selector;
use stats::WorkloadStats;

/// How long the proxy waits for a workload's answer headers.
pub const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a client may take to send a request's headers (also the idle time of a kept-alive
/// connection before its next request).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a request body may send nothing before the proxy gives up on it.
pub const BODY_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Connections served at once by one proxy (all three listeners together).
pub const MAX_CONNECTIONS: usize = 1024;

/// Connections one source address may hold at once on one proxy (an IPv6 /64 counts as one).
pub const MAX_CONNECTIONS_PER_SOURCE: usize = 256;

/// Connections any proxy of this process closed at once because all its permits were taken.
pub static CONNECTIONS_REFUSED: AtomicU64 = AtomicU64::new(0);

/// The bounds of a proxy's listeners.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// See [`HEADER_READ_TIMEOUT`].
    pub header_read_timeout: Duration,
    /// See [`BODY_IDLE_TIMEOUT`].
    pub body_idle_timeout: Duration,
    /// See [`MAX_CONNECTIONS`].
    pub max_connections: usize,
    /// See [`MAX_CONNECTIONS_PER_SOURCE`].
    pub max_connections_per_source: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        Self {
            header_read_timeout: HEADER_READ_TIMEOUT,
            body_idle_timeout: BODY_IDLE_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            max_connections_per_source: MAX_CONNECTIONS_PER_SOURCE,
        }
    }
}

/// Which of the three listeners a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    Main,
    Primary,
    Canary,
}

type ProxyBody = BoxBody<Bytes, hyper::Error>;

/// The addresses the proxy listens on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyAddrs {
    /// `<svc>`: weighted.
    pub main: SocketAddr,
    /// `<svc>-primary`.
    pub primary: SocketAddr,
    /// `<svc>-canary`.
    pub canary: SocketAddr,
}

/// Where the workloads listen (`None`: not running).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Upstreams {
    /// The primary workload.
    pub primary: Option<SocketAddr>,
    /// The canary workload.
    pub canary: Option<SocketAddr>,
    /// The fresh baseline (issue 20), reached only through the main address.
    pub baseline: Option<SocketAddr>,
}

/// One service's canary proxy. Dropping the last handle does not stop it; call
/// [`CanaryProxy::shutdown`].
#[derive(Debug)]
pub struct CanaryProxy {
    service: String,
    addrs: ProxyAddrs,
    routing: RwLock<Routing>,
    upstreams: RwLock<Upstreams>,
    selector: Selector,
    stats: Mutex<BTreeMap<Workload, WorkloadStats>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    limits: ProxyLimits,
    /// One permit per connection being served.
    connections: Arc<Semaphore>,
    /// Connections per source address.
    per_source: PerSource,
    /// Connections closed at once because every permit was taken.
    refused: AtomicU64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn text(status: StatusCode, body: String) -> Response<ProxyBody> {
    let mut r = Response::new(Full::new(Bytes::from(body)).map_err(|e| match e {}).boxed());
    *r.status_mut() = status;
    r
}

impl CanaryProxy {
    /// Binds the three listeners (port 0 picks a free port) and starts serving, with the
    /// default [`ProxyLimits`].
    pub async fn start(service: &str, addrs: ProxyAddrs) -> std::io::Result<Arc<Self>> {
        Self::start_with_limits(service, addrs, ProxyLimits::default()).await
    }

    /// [`CanaryProxy::start`] with explicit limits.
    pub async fn start_with_limits(
        service: &str,
        addrs: ProxyAddrs,
        limits: ProxyLimits,
    ) -> std::io::Result<Arc<Self>> {
        let main = TcpListener::bind(addrs.main).await?;
        let primary = TcpListener::bind(addrs.primary).await?;
        let canary = TcpListener::bind(addrs.canary).await?;
        let proxy = Arc::new(CanaryProxy {
            service: service.to_string(),
            addrs: ProxyAddrs {
                main: main.local_addr()?,
                primary: primary.local_addr()?,
                canary: canary.local_addr()?,
            },
            routing: RwLock::new(Routing::default()),
            upstreams: RwLock::new(Upstreams::default()),
            selector: Selector::default(),
            stats: Mutex::new(BTreeMap::new()),
            tasks: Mutex::new(Vec::new()),
            limits,
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            per_source: PerSource::new(limits.max_connections_per_source),
            refused: AtomicU64::new(0),
        });
        let mut tasks = Vec::new();
        for (listener, entry) in [
            (main, Entry::Main),
            (primary, Entry::Primary),
            (canary, Entry::Canary),
        ] {
            tasks.push(tokio::spawn(accept_loop(proxy.clone(), listener, entry)));
        }
        *proxy.tasks.lock().unwrap_or_else(|p| p.into_inner()) = tasks;
        tracing::info!(
            service,
            main = %proxy.addrs.main,
            primary = %proxy.addrs.primary,
            canary = %proxy.addrs.canary,
            "canary proxy listening"
        );
        Ok(proxy)
    }

    /// The bound addresses.
    pub fn addrs(&self) -> ProxyAddrs {
        self.addrs
    }

    /// Applies a committed routing (weight and A/B rules).
    pub fn set_routing(&self, routing: Routing) {
        *self.routing.write().unwrap_or_else(|p| p.into_inner()) = routing;
    }

    /// The routing in force.
    pub fn canary_weight(&self) -> u8 {
        self.routing
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .canary_weight
    }

    /// Points the proxy at the workloads.
    pub fn set_upstreams(&self, upstreams: Upstreams) {
        *self.upstreams.write().unwrap_or_else(|p| p.into_inner()) = upstreams;
    }

    /// One workload's traffic over the last `window_secs` seconds.
    pub fn window(&self, workload: Workload, window_secs: u64) -> WindowStats {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&workload)
            .map(|s| s.window(now_secs(), window_secs))
            .unwrap_or_default()
    }

    /// Connections closed at once because [`ProxyLimits::max_connections`] were open, or
    /// their source held [`ProxyLimits::max_connections_per_source`].
    pub fn refused_connections(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }

    /// The canary weight and each workload's totals since the proxy started, for the agent's
    /// `/metrics` ([`render_prometheus`]).
    pub fn totals(&self) -> ProxyTotals {
        let stats = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        ProxyTotals {
            canary_weight: self.canary_weight(),
            workloads: stats.iter().map(|(w, s)| (*w, s.totals.clone())).collect(),
        }
    }

    /// Stops the listeners (requests in flight finish).
    pub fn shutdown(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            t.abort();
        }
    }

    fn record(&self, workload: Workload, status: u16, latency: Duration) {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(workload)
            .or_default()
            .record(now_secs(), status, latency);
    }

    async fn handle(self: Arc<Self>, entry: Entry, req: Request<Incoming>) -> Response<ProxyBody> {
        let workload = match entry {
            Entry::Primary => Workload::Primary,
            Entry::Canary => Workload::Canary,
            Entry::Main => {
                let routing = self
                    .routing
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                let headers: Vec<(&str, &str)> = req
                    .headers()
                    .iter()
                    .filter_map(|(k, v)| Some((k.as_str(), v.to_str().ok()?)))
                    .collect();
                self.selector.pick(&routing, headers.iter().copied())
            }
        };
        let upstream = {
            let u = self.upstreams.read().unwrap_or_else(|p| p.into_inner());
            match workload {
                Workload::Primary => u.primary,
                Workload::Canary => u.canary,
                Workload::Baseline => u.baseline,
            }
        };
        let started = Instant::now();
        let response = match upstream {
            None => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{}: no {} workload running\n",
                    self.service,
                    workload.as_str()
                ),
            ),
            Some(addr) => match tokio::time::timeout(
                UPSTREAM_TIMEOUT,
                forward(addr, req, self.limits.body_idle_timeout),
            )
            .await
            {
                Ok(Ok(r)) => r,
                Ok(Err(e)) => text(
                    StatusCode::BAD_GATEWAY,
                    format!("{} {}: {e}\n", self.service, workload.as_str()),
                ),
                Err(_) => text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!(
                        "{} {}: no answer within {UPSTREAM_TIMEOUT:?}\n",
                        self.service,
                        workload.as_str()
                    ),
                ),
            },
        };
        self.record(workload, response.status().as_u16(), started.elapsed());
        response
    }
}

/// What one proxy serves on the agent's `/metrics`: see [`CanaryProxy::totals`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyTotals {
    /// The canary weight in force (0–100).
    pub canary_weight: u8,
    /// Each workload that answered a request since the proxy started.
    pub workloads: Vec<(Workload, stats::Totals)>,
}

/// A label value in Prometheus's text format (backslash, double quote and newline escaped).
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The proxies' metric families in Prometheus's text format (docs/METRICS.md "The agent"),
/// each proxy given with its canary's name; the labels are bounded: `environment` (the
/// agent's), `canary`, `workload` (`primary`, `canary`, `baseline`), `code` (a status class,
/// [`stats::STATUS_CLASSES`]) and the histogram's `le`. A workload that answered anything
/// has every class, zeros included, so a ratio of two classes is never an empty vector.
pub fn render_prometheus(environment: &str, proxies: &[(String, ProxyTotals)]) -> String {
    use std::fmt::Write;
    let env = label_value(environment);
    let mut out = String::from(
        "# HELP hub_agent_canary_weight the canary weight the agent's proxy applies\n\
         # TYPE hub_agent_canary_weight gauge\n",
    );
    for (canary, p) in proxies {
        let canary = label_value(canary);
        let _ = writeln!(
            out,
            "hub_agent_canary_weight{{environment=\"{env}\",canary=\"{canary}\"}} {}",
            p.canary_weight
        );
    }
    out.push_str(
        "# HELP hub_agent_proxy_requests_total requests the canary proxy answered, by workload and status class\n\
         # TYPE hub_agent_proxy_requests_total counter\n",
    );
    for (canary, p) in proxies {
        let canary = label_value(canary);
        for (w, t) in &p.workloads {
            for (class, n) in stats::STATUS_CLASSES.iter().zip(t.by_class) {
                let _ = writeln!(
                    out,
                    "hub_agent_proxy_requests_total{{environment=\"{env}\",canary=\"{canary}\",workload=\"{}\",code=\"{class}\"}} {n}",
                    w.as_str()
                );
            }
        }
    }
    out.push_str(
        "# HELP hub_agent_proxy_request_duration_seconds time from a request's head to the workload's answer head, by workload\n\
         # TYPE hub_agent_proxy_request_duration_seconds histogram\n",
    );
    for (canary, p) in proxies {
        let canary = label_value(canary);
        for (w, t) in &p.workloads {
            let labels = format!(
                "environment=\"{env}\",canary=\"{canary}\",workload=\"{}\"",
                w.as_str()
            );
            let mut cumulative = 0;
            for (bound, n) in stats::LATENCY_BOUNDS_MS.iter().zip(t.latency) {
                cumulative += n;
                let le = *bound as f64 / 1000.0;
                let _ = writeln!(
                    out,
                    "hub_agent_proxy_request_duration_seconds_bucket{{{labels},le=\"{le}\"}} {cumulative}"
                );
            }
            let count = t.requests();
            let sum = t.latency_sum_us as f64 / 1e6;
            let _ = writeln!(
                out,
                "hub_agent_proxy_request_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {count}\n\
                 hub_agent_proxy_request_duration_seconds_sum{{{labels}}} {sum}\n\
                 hub_agent_proxy_request_duration_seconds_count{{{labels}}} {count}"
            );
        }
    }
    out
}

async fn accept_loop(proxy: Arc<CanaryProxy>, listener: TcpListener, entry: Entry) {
    // Out of descriptors, accept fails at every try: said once, then every 30 s.
    let mut failing: LogLimiter<(), std::io::ErrorKind> = LogLimiter::new(Limits::DEFAULT);
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(s) => {
                if let Some(n) = failing.succeeded(&(), Instant::now()) {
                    tracing::info!(
                        after_ms = n.lasted.as_millis() as u64,
                        "canary proxy accepts again"
                    );
                }
                s
            }
            Err(e) => {
                if let Some(n) = failing.failed(&(), e.kind(), Instant::now()) {
                    tracing::warn!(error = %e, failures = n.repeats, "canary proxy accept failed");
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // At capacity the connection is closed at once (dropped): waiting clients would
        // only queue behind connections that may be hostile.
        let admitted = proxy
            .per_source
            .try_enter(remote.ip())
            .and_then(|of_source| {
                let permit = proxy.connections.clone().try_acquire_owned().ok()?;
                Some((of_source, permit))
            });
        let Some(permit) = admitted else {
            proxy.refused.fetch_add(1, Ordering::Relaxed);
            CONNECTIONS_REFUSED.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let proxy = proxy.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let header_read_timeout = proxy.limits.header_read_timeout;
            let service = service_fn(move |req| {
                let proxy = proxy.clone();
                async move { Ok::<_, std::convert::Infallible>(proxy.handle(entry, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(header_read_timeout)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Why a request could not be forwarded to a workload (the 502's text).
#[derive(Debug, thiserror::Error)]
enum ForwardError {
    /// No connection to the workload.
    #[error("connect {addr}: {source}")]
    Connect {
        /// The workload's address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// The HTTP/1 handshake failed.
    #[error("handshake {addr}: {source}")]
    Handshake {
        /// The workload's address.
        addr: SocketAddr,
        /// The error.
        source: hyper::Error,
    },
    /// The request failed.
    #[error("request to {addr}: {source}")]
    Request {
        /// The workload's address.
        addr: SocketAddr,
        /// The error.
        source: hyper::Error,
    },
}

/// Sends `req` to the workload at `addr` over a fresh connection; its body fails when the
/// client sends nothing for `body_idle`.
async fn forward(
    addr: SocketAddr,
    req: Request<Incoming>,
    body_idle: Duration,
) -> Result<Response<ProxyBody>, ForwardError> {
    let req = req.map(|b| IdleTimeoutBody::new(b, body_idle));
    let stream = TcpStream::connect(addr)
        .await
        .map_err(|source| ForwardError::Connect { addr, source })?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|source| ForwardError::Handshake { addr, source })?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let response = sender
        .send_request(req)
        .await
        .map_err(|source| ForwardError::Request { addr, source })?;
    Ok(response.map(|b| b.boxed()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A tiny upstream answering `status` with `name` as the body.
    async fn upstream(name: &'static str, status: u16) -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let _ = s.read(&mut buf).await;
                    let reply = format!(
                        "HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{name}",
                        name.len()
                    );
                    let _ = s.write_all(reply.as_bytes()).await;
                });
            }
        });
        addr
    }

    async fn get(addr: SocketAddr, header: Option<(&str, &str)>) -> (u16, String) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let extra = header
            .map(|(k, v)| format!("{k}: {v}\r\n"))
            .unwrap_or_default();
        s.write_all(
            format!("GET / HTTP/1.1\r\nhost: x\r\n{extra}connection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        let status = out.split_whitespace().nth(1).unwrap().parse().unwrap();
        let body = out
            .split_once("\r\n\r\n")
            .map(|x| x.1.to_string())
            .unwrap_or_default();
        (status, body)
    }

    fn local() -> ProxyAddrs {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        ProxyAddrs {
            main: any,
            primary: any,
            canary: any,
        }
    }

    #[tokio::test]
    async fn splits_by_weight_and_measures_each_workload() {
        let proxy = CanaryProxy::start("demo", local()).await.unwrap();
        proxy.set_upstreams(Upstreams {
            primary: Some(upstream("primary", 200).await),
            canary: Some(upstream("canary", 500).await),
            ..Upstreams::default()
        });
        proxy.set_routing(Routing {
            canary_weight: 20,
            match_rules: Vec::new(),
            ..Routing::default()
        });
        let mut canary = 0;
        for _ in 0..50 {
            let (status, body) = get(proxy.addrs().main, None).await;
            if body == "canary" {
                assert_eq!(status, 500);
                canary += 1;
            }
        }
        assert_eq!(canary, 10, "20% of 50");
        let c = proxy.window(Workload::Canary, 60);
        assert_eq!((c.requests, c.errors, c.success_rate), (10, 10, Some(0.0)));
        let p = proxy.window(Workload::Primary, 60);
        assert_eq!((p.requests, p.success_rate), (40, Some(100.0)));
        // The fixed addresses always reach their workload.
        assert_eq!(get(proxy.addrs().primary, None).await.1, "primary");
        assert_eq!(get(proxy.addrs().canary, None).await.1, "canary");
        // Served on the agent's /metrics: every class of each workload, a cumulative histogram.
        let text = render_prometheus("prod", &[("demo".to_string(), proxy.totals())]);
        for want in [
            "hub_agent_canary_weight{environment=\"prod\",canary=\"demo\"} 20\n",
            "hub_agent_proxy_requests_total{environment=\"prod\",canary=\"demo\",workload=\"canary\",code=\"5xx\"} 11\n",
            "hub_agent_proxy_requests_total{environment=\"prod\",canary=\"demo\",workload=\"canary\",code=\"2xx\"} 0\n",
            "hub_agent_proxy_requests_total{environment=\"prod\",canary=\"demo\",workload=\"primary\",code=\"2xx\"} 41\n",
            "hub_agent_proxy_request_duration_seconds_bucket{environment=\"prod\",canary=\"demo\",workload=\"primary\",le=\"+Inf\"} 41\n",
            "hub_agent_proxy_request_duration_seconds_count{environment=\"prod\",canary=\"demo\",workload=\"canary\"} 11\n",
            "# TYPE hub_agent_proxy_request_duration_seconds histogram\n",
        ] {
            assert!(text.contains(want), "{want:?} not in:\n{text}");
        }
        assert_eq!(text.matches("# TYPE ").count(), 3, "{text}");
        // Buckets are cumulative, `le` in seconds, and the last finite one is at most +Inf.
        let buckets: Vec<(String, u64)> = text
            .lines()
            .filter(|l| l.contains("workload=\"primary\",le="))
            .map(|l| {
                let le = l.split("le=\"").nth(1).unwrap().split('"').next().unwrap();
                (
                    le.to_string(),
                    l.rsplit(' ').next().unwrap().parse().unwrap(),
                )
            })
            .collect();
        assert_eq!(buckets.len(), stats::LATENCY_BOUNDS_MS.len() + 1);
        assert_eq!(buckets[0].0, "0.001");
        assert_eq!(buckets[6].0, "0.075");
        assert_eq!(buckets[13].0, "1");
        assert!(buckets.windows(2).all(|w| w[0].1 <= w[1].1), "{buckets:?}");
        proxy.shutdown();
    }

    /// Reads until the peer closes; true if it closed within `within`.
    async fn closed_within(s: &mut TcpStream, within: Duration) -> bool {
        let mut buf = [0u8; 256];
        let deadline = tokio::time::Instant::now() + within;
        loop {
            match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                Ok(Ok(_)) => continue,
            }
        }
    }

    /// An upstream that answers only once it has read a request's whole body (ten bytes when
    /// its head says so, else none).
    async fn whole_body_upstream() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut got = Vec::new();
                    let mut buf = [0u8; 1024];
                    loop {
                        let head_end = got.windows(4).position(|w| w == b"\r\n\r\n");
                        if let Some(h) = head_end {
                            let head = String::from_utf8_lossy(&got[..h]).to_lowercase();
                            let body = if head.contains("content-length: 10") {
                                10
                            } else {
                                0
                            };
                            if got.len() >= h + 4 + body {
                                break;
                            }
                        }
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => got.extend_from_slice(&buf[..n]),
                        }
                    }
                    let _ = s
                        .write_all(b"HTTP/1.1 200 X\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                });
            }
        });
        addr
    }

    /// A client connection to `to` from the loopback address `from`.
    async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket
            .bind(SocketAddr::from((from, 0)))
            .expect("bind a loopback source address");
        socket.connect(to).await.unwrap()
    }

    #[tokio::test]
    async fn one_source_cannot_take_every_connection_nor_trickle_a_body() {
        let limits = ProxyLimits {
            max_connections_per_source: 2,
            body_idle_timeout: Duration::from_secs(2),
            ..ProxyLimits::default()
        };
        let proxy = CanaryProxy::start_with_limits("demo", local(), limits)
            .await
            .unwrap();
        proxy.set_upstreams(Upstreams {
            primary: Some(whole_body_upstream().await),
            ..Upstreams::default()
        });
        // Two connections from 127.0.0.2 whose bodies stall after one byte of ten.
        let mut trickling = Vec::new();
        for _ in 0..2 {
            let mut s = connect_from([127, 0, 0, 2], proxy.addrs().primary).await;
            s.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\na")
                .await
                .unwrap();
            trickling.push(s);
        }
        // A third from that source is closed at once; another source is served.
        let refused = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let mut s = connect_from([127, 0, 0, 2], proxy.addrs().main).await;
                let _ = s
                    .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    .await;
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out).await;
                if out.is_empty() && proxy.refused_connections() >= 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(
            refused.await.is_ok(),
            "a third connection of one source was served"
        );
        let mut other = connect_from([127, 0, 0, 3], proxy.addrs().primary).await;
        other
            .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = String::new();
        let _ = other.read_to_string(&mut out).await;
        assert!(out.starts_with("HTTP/1.1 200"), "{out}");
        // The stalled bodies are given up on, which closes their connections.
        for s in &mut trickling {
            assert!(closed_within(s, Duration::from_secs(10)).await);
        }
        proxy.shutdown();
    }

    #[tokio::test]
    async fn slow_headers_time_out_and_excess_connections_are_refused() {
        let limits = ProxyLimits {
            header_read_timeout: Duration::from_millis(300),
            max_connections: 2,
            ..ProxyLimits::default()
        };
        let proxy = CanaryProxy::start_with_limits("demo", local(), limits)
            .await
            .unwrap();
        proxy.set_upstreams(Upstreams {
            primary: Some(upstream("primary", 200).await),
            canary: None,
            ..Upstreams::default()
        });
        // Two clients that send half a request line and stall take both permits.
        let mut slow = Vec::new();
        for _ in 0..2 {
            let mut s = TcpStream::connect(proxy.addrs().primary).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n").await.unwrap();
            slow.push(s);
        }
        // A third connection (on another listener: the cap is the proxy's) is closed at once
        // and counted. The accept loop may not have taken both slow ones yet: poll.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            let mut s = TcpStream::connect(proxy.addrs().main).await.unwrap();
            let _ = s.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n").await;
            let mut out = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut out)).await;
            if out.is_empty() && proxy.refused_connections() >= 1 {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never refused");
        }
        assert!(CONNECTIONS_REFUSED.load(Ordering::Relaxed) >= 1);
        assert!(crate::metrics::Metrics::default()
            .render("prod")
            .contains("hub_agent_proxy_connections_refused_total{environment=\"prod\"} "));
        // The stalled clients are cut off by the header timeout...
        for s in &mut slow {
            assert!(closed_within(s, Duration::from_secs(5)).await);
        }
        // ...which frees their permits.
        let ok = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                let mut s = TcpStream::connect(proxy.addrs().primary).await.unwrap();
                let _ = s
                    .write_all(b"GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
                    .await;
                let mut out = String::new();
                let _ = s.read_to_string(&mut out).await;
                if out.starts_with("HTTP/1.1 200") {
                    return out
                        .rsplit("\r\n\r\n")
                        .next()
                        .unwrap_or_default()
                        .to_string();
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert_eq!(ok.ok().as_deref(), Some("primary"));
        proxy.shutdown();
    }

    #[tokio::test]
    async fn ab_rules_and_missing_workloads() {
        let proxy = CanaryProxy::start("demo", local()).await.unwrap();
        proxy.set_upstreams(Upstreams {
            primary: Some(upstream("primary", 200).await),
            canary: None,
            ..Upstreams::default()
        });
        proxy.set_routing(Routing {
            canary_weight: 0,
            match_rules: vec![vec![
                HeaderMatch::new("x-canary", "exact", "insider").unwrap()
            ]],
            ..Routing::default()
        });
        assert_eq!(get(proxy.addrs().main, None).await.1, "primary");
        // Matching traffic goes to the canary, which is not running: 503, counted.
        let (status, _) = get(proxy.addrs().main, Some(("X-Canary", "insider"))).await;
        assert_eq!(status, 503);
        assert_eq!(proxy.window(Workload::Canary, 60).errors, 1);
        // A workload that refuses connections: 502.
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            l.local_addr().unwrap()
        };
        proxy.set_upstreams(Upstreams {
            primary: Some(dead),
            canary: None,
            ..Upstreams::default()
        });
        assert_eq!(get(proxy.addrs().primary, None).await.0, 502);
        proxy.shutdown();
    }
}

//! Prometheus metrics of the agent, served as text on `/metrics` over HTTP/1.1 ([`serve`]):
//! its own counters, and the canary proxies' per-workload counters and latency histograms
//! ([`crate::proxy::render_prometheus`]) once the agent's canary runner is attached
//! ([`Metrics::serve_canaries`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use http_body_util::Full;
use hub_tls::budget::PerSource;
use hyper::body::{Bytes, Incoming};
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::canary::CanaryRunner;
use crate::proxy::ProxyTotals;

/// Counters and gauges.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Plan fetches sent.
    pub fetches: AtomicU64,
    /// Plan fetches that failed.
    pub fetch_errors: AtomicU64,
    /// Times an endpoint was rotated to the back after a failure.
    pub endpoint_failovers: AtomicU64,
    /// Plans started (or resumed).
    pub plans_started: AtomicU64,
    /// Plans whose tasks all succeeded.
    pub plans_succeeded: AtomicU64,
    /// Plans with a failed task.
    pub plans_failed: AtomicU64,
    /// Tasks run (every attempt).
    pub tasks_run: AtomicU64,
    /// Reports acknowledged by the hub.
    pub reports_sent: AtomicU64,
    /// Writes of task reports acknowledged by the hub (each carries one or more reports).
    pub report_writes: AtomicU64,
    /// Report attempts that had to be retried.
    pub report_retries: AtomicU64,
    /// Reports the hub refused.
    pub reports_refused: AtomicU64,
    /// Reports waiting for the hub.
    pub outbox: AtomicU64,
    /// State reports acknowledged.
    pub state_reports: AtomicU64,
    /// Entity state samples taken (once a plan fetch has answered), sent or not.
    pub state_samples: AtomicU64,
    /// Time from a plan's commit (its `issued_ms`) to the agent receiving it, in ms: a
    /// histogram, and the newest raw samples for benchmarks.
    pub delivery: Delivery,
    /// The canary runner whose proxies' traffic is served too (weak: the metrics outlive
    /// nothing they serve).
    canaries: OnceLock<Weak<CanaryRunner>>,
}

/// Upper bounds (ms) of the delivery histogram's buckets.
pub const DELIVERY_BUCKETS_MS: [u64; 10] = [5, 10, 25, 50, 100, 250, 500, 1_000, 2_500, 10_000];

/// Most raw delivery samples kept.
const DELIVERY_SAMPLES: usize = 100_000;

/// The plan-delivery histogram.
#[derive(Debug, Default)]
pub struct Delivery {
    buckets: [AtomicU64; 10],
    count: AtomicU64,
    sum_ms: AtomicU64,
    samples: std::sync::Mutex<Vec<u64>>,
}

impl Delivery {
    /// Records one delivery.
    pub fn observe(&self, ms: u64) {
        for (bound, bucket) in DELIVERY_BUCKETS_MS.iter().zip(&self.buckets) {
            if ms <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ms.fetch_add(ms, Ordering::Relaxed);
        let mut samples = self.samples.lock().unwrap_or_else(|p| p.into_inner());
        if samples.len() < DELIVERY_SAMPLES {
            samples.push(ms);
        }
    }

    /// The raw samples recorded so far (up to 100,000).
    pub fn samples(&self) -> Vec<u64> {
        self.samples
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Metrics {
    /// Adds one.
    pub fn inc(&self, c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Serves the traffic of `runner`'s canary proxies from now on (the first runner given
    /// stays: an agent has one).
    pub fn serve_canaries(&self, runner: &Arc<CanaryRunner>) {
        let _ = self.canaries.set(Arc::downgrade(runner));
    }

    /// Each running proxy's totals, with its canary's name (the id after `<environment>/`).
    fn proxies(&self) -> Vec<(String, ProxyTotals)> {
        let Some(runner) = self.canaries.get().and_then(Weak::upgrade) else {
            return Vec::new();
        };
        runner
            .canary_ids()
            .into_iter()
            .filter_map(|id| {
                let proxy = runner.proxy(&id)?;
                let name = id.rsplit_once('/').map_or(id.as_str(), |(_, n)| n);
                Some((name.to_string(), proxy.totals()))
            })
            .collect()
    }

    /// The Prometheus text exposition.
    // Long: the table of every metric the agent exposes.
    pub fn render(&self, environment: &str) -> String {
        let rows: [(&str, &str, &AtomicU64, &str); 15] = [
            (
                "hub_agent_fetches_total",
                "counter",
                &self.fetches,
                "plan fetches sent",
            ),
            (
                "hub_agent_fetch_errors_total",
                "counter",
                &self.fetch_errors,
                "plan fetches that failed",
            ),
            (
                "hub_agent_endpoint_failovers_total",
                "counter",
                &self.endpoint_failovers,
                "endpoints rotated after a failure",
            ),
            (
                "hub_agent_plans_started_total",
                "counter",
                &self.plans_started,
                "plans started or resumed",
            ),
            (
                "hub_agent_plans_succeeded_total",
                "counter",
                &self.plans_succeeded,
                "plans that succeeded",
            ),
            (
                "hub_agent_plans_failed_total",
                "counter",
                &self.plans_failed,
                "plans that failed",
            ),
            (
                "hub_agent_tasks_run_total",
                "counter",
                &self.tasks_run,
                "task attempts run",
            ),
            (
                "hub_agent_reports_sent_total",
                "counter",
                &self.reports_sent,
                "task reports acknowledged",
            ),
            (
                "hub_agent_report_writes_total",
                "counter",
                &self.report_writes,
                "writes of task reports acknowledged (each one or more reports)",
            ),
            (
                "hub_agent_report_retries_total",
                "counter",
                &self.report_retries,
                "task report attempts retried",
            ),
            (
                "hub_agent_reports_refused_total",
                "counter",
                &self.reports_refused,
                "task reports the hub refused",
            ),
            (
                "hub_agent_outbox",
                "gauge",
                &self.outbox,
                "task reports waiting for the hub",
            ),
            (
                "hub_agent_state_reports_total",
                "counter",
                &self.state_reports,
                "entity state reports acknowledged",
            ),
            (
                "hub_agent_state_samples_total",
                "counter",
                &self.state_samples,
                "entity state samples taken, sent or not (a sample the hub records already is not sent)",
            ),
            (
                "hub_agent_proxy_connections_refused_total",
                "counter",
                &crate::proxy::CONNECTIONS_REFUSED,
                "canary proxy connections closed at once: the proxy served its maximum",
            ),
        ];
        let mut out = String::new();
        out.push_str("# HELP hub_agent_plan_delivery_ms time from a plan's commit to its delivery\n# TYPE hub_agent_plan_delivery_ms histogram\n");
        for (bound, bucket) in DELIVERY_BUCKETS_MS.iter().zip(&self.delivery.buckets) {
            out.push_str(&format!(
                "hub_agent_plan_delivery_ms_bucket{{environment=\"{environment}\",le=\"{bound}\"}} {}\n",
                bucket.load(Ordering::Relaxed)
            ));
        }
        let count = self.delivery.count.load(Ordering::Relaxed);
        out.push_str(&format!(
            "hub_agent_plan_delivery_ms_bucket{{environment=\"{environment}\",le=\"+Inf\"}} {count}\nhub_agent_plan_delivery_ms_sum{{environment=\"{environment}\"}} {}\nhub_agent_plan_delivery_ms_count{{environment=\"{environment}\"}} {count}\n",
            self.delivery.sum_ms.load(Ordering::Relaxed)
        ));
        for (name, kind, value, help) in rows {
            out.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} {kind}\n{name}{{environment=\"{environment}\"}} {}\n",
                value.load(Ordering::Relaxed)
            ));
        }
        out.push_str(&crate::proxy::render_prometheus(
            environment,
            &self.proxies(),
        ));
        out
    }
}

/// Connections the metrics listener serves at once (a scraper holds one).
const MAX_CONNECTIONS: usize = 64;
/// Connections one source address may hold at once.
const MAX_CONNECTIONS_PER_SOURCE: usize = 8;
/// How long a client may take to send a request's head (also a kept-alive connection's idle
/// time before its next request).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection is kept.
const CONNECTION_LIFETIME: Duration = Duration::from_secs(60);

/// Serves `/metrics` on `listener` forever, over HTTP/1.1, bounded like the node's listeners:
/// [`MAX_CONNECTIONS`] in all, [`MAX_CONNECTIONS_PER_SOURCE`] per source, a request head within
/// [`HEADER_READ_TIMEOUT`], a connection at most [`CONNECTION_LIFETIME`]. A connection over a
/// limit is closed at once.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, environment: String) {
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let per_source = PerSource::new(MAX_CONNECTIONS_PER_SOURCE);
    loop {
        let (stream, remote) = match listener.accept().await {
            Ok(s) => s,
            Err(_) => {
                // EMFILE and the like: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Some(of_source) = per_source.try_enter(remote.ip()) else {
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            continue;
        };
        let (metrics, environment) = (metrics.clone(), environment.clone());
        tokio::spawn(async move {
            let _held = (of_source, permit);
            let service = service_fn(move |req: Request<Incoming>| {
                let answer = answer(&metrics, &environment, &req);
                async move { Ok::<_, std::convert::Infallible>(answer) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(8 << 10)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_LIFETIME, conn).await;
        });
    }
}

/// `GET /metrics`: the text format; anything else: 404.
fn answer(metrics: &Metrics, environment: &str, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, content_type, body) =
        if req.method() == Method::GET && req.uri().path() == "/metrics" {
            (
                StatusCode::OK,
                "text/plain; version=0.0.4",
                metrics.render(environment),
            )
        } else {
            (
                StatusCode::NOT_FOUND,
                "text/plain",
                "not found\n".to_string(),
            )
        };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static(content_type),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::from((from, 0))).unwrap();
        socket.connect(to).await.unwrap()
    }

    /// What the listener answers `request` with, from `from` (empty: closed unanswered).
    async fn ask(from: [u8; 4], to: SocketAddr, request: &[u8]) -> String {
        let mut s = connect_from(from, to).await;
        let _ = s.write_all(request).await;
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).into_owned()
    }

    #[tokio::test]
    async fn slow_clients_hold_a_few_slots_of_their_own_source_for_seconds_only() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, Arc::default(), "prod".into()));
        let get = b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n";
        // One source's slow clients take its share of the slots...
        let mut slow = Vec::new();
        for _ in 0..MAX_CONNECTIONS_PER_SOURCE {
            let mut s = connect_from([127, 0, 0, 2], addr).await;
            s.write_all(b"GET /metrics HTTP/1.1\r\nhost").await.unwrap();
            slow.push(s);
        }
        // ...so one more from it is closed unanswered (polled: the accept loop may lag)...
        let refused = tokio::time::timeout(Duration::from_secs(10), async {
            while !ask([127, 0, 0, 2], addr, get).await.is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        assert!(refused.await.is_ok(), "a source took more than its share");
        // ...while another source is served.
        let answer = ask([127, 0, 0, 3], addr, get).await;
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.contains("hub_agent_fetches_total"), "{answer}");
        // The slow ones are closed at the header deadline.
        let started = std::time::Instant::now();
        for s in &mut slow {
            let mut buf = [0u8; 256];
            let closed = tokio::time::timeout(Duration::from_secs(15), async {
                loop {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            });
            assert!(closed.await.is_ok(), "a slow client was kept");
        }
        assert!(started.elapsed() < HEADER_READ_TIMEOUT + Duration::from_secs(5));
    }
}

//! Prometheus metrics of the agent, served as text on `/metrics` by a minimal HTTP
//! responder (one request per connection).

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

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
        out
    }
}

/// Serves `/metrics` on `listener` forever.
pub async fn serve(listener: TcpListener, metrics: std::sync::Arc<Metrics>, environment: String) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        let environment = environment.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            let n = match tokio::time::timeout(
                std::time::Duration::from_secs(5),
                stream.read(&mut buf),
            )
            .await
            {
                Ok(Ok(n)) => n,
                _ => return,
            };
            let request = String::from_utf8_lossy(&buf[..n]);
            let (status, body) = if request.starts_with("GET /metrics") {
                ("200 OK", metrics.render(&environment))
            } else {
                ("404 Not Found", "not found\n".to_string())
            };
            let response = format!(
                "HTTP/1.1 {status}\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

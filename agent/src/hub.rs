//! The agent's connection to the hub: an endpoint list refreshed from every reply, rotation
//! to the next endpoint on failure with jittered exponential back-off, and a split between
//! errors worth retrying (the node is down, no leader yet) and refusals (retrying cannot help).
//! Only safe calls are retried: plan fetches (reads) and reports (idempotent by request id).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use hub_proto::agent_client::AgentClient;
use hub_proto::{
    CanaryObservation, EntityState, FetchPlansReply, FetchPlansRequest, ReportCanariesRequest,
    ReportStatesRequest, ReportTasksRequest,
};
use tonic::transport::{Channel, Endpoint};
use tonic::{Code, Status};

use crate::journal::PendingReport;
use crate::metrics::Metrics;
use crate::wire::{self, RefusedReport, WireError};

/// Largest gRPC message the agent accepts (plans carry configs and secrets).
const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// What the hub answered a `ReportTasks` write.
#[derive(Debug, Default)]
pub struct TasksAck {
    /// The reports it refused (it applied the others).
    pub refused: Vec<Result<RefusedReport, WireError>>,
    /// What it records, as of `recorded_index`, for the entities whose plans the batch names
    /// and which are no longer active ([`wire::recorded`]).
    pub recorded: Vec<(String, hub_wire::entity_state::ReportedState)>,
    /// The log index `recorded` is read at (0 with none).
    pub recorded_index: u64,
}

/// How a call failed.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// Worth retrying on another endpoint (unreachable, no leader, timeout).
    #[error("{0}")]
    Retry(String),
    /// The hub refused the request; retrying cannot help.
    #[error("{0}")]
    Refused(String),
}

fn classify(addr: &str, s: Status) -> CallError {
    match s.code() {
        Code::InvalidArgument
        | Code::NotFound
        | Code::PermissionDenied
        | Code::AlreadyExists
        | Code::FailedPrecondition
        | Code::Unauthenticated => CallError::Refused(format!("{addr}: {}", s.message())),
        _ => CallError::Retry(format!("{addr}: {}", s.message())),
    }
}

/// Jittered exponential back-off: full jitter over `base * 2^attempt`, capped.
pub fn backoff(attempt: u32) -> Duration {
    let cap_ms = 5_000u64;
    let exp = 100u64.saturating_mul(1u64 << attempt.min(10)).min(cap_ms);
    Duration::from_millis(rand::random_range(exp / 2..=exp))
}

/// Endpoints and cached channels.
pub struct HubConnection {
    endpoints: Mutex<Vec<String>>,
    connector: hub_tls::client::Connector,
    leader: Mutex<String>,
    channels: Mutex<HashMap<String, Channel>>,
    metrics: std::sync::Arc<Metrics>,
}

impl HubConnection {
    /// A connection over `endpoints` (tried in order, the first one first).
    /// Channels dial through `connector` (the agent's certificate over TLS).
    pub fn new(
        endpoints: Vec<String>,
        metrics: std::sync::Arc<Metrics>,
        connector: hub_tls::client::Connector,
    ) -> Self {
        Self {
            endpoints: Mutex::new(endpoints),
            connector,
            leader: Mutex::new(String::new()),
            channels: Mutex::new(HashMap::new()),
            metrics,
        }
    }

    /// The current endpoint list, current first.
    pub fn endpoints(&self) -> Vec<String> {
        lock(&self.endpoints).clone()
    }

    /// The leader the hub last named.
    pub fn leader(&self) -> String {
        lock(&self.leader).clone()
    }

    fn current(&self) -> Option<String> {
        lock(&self.endpoints).first().cloned()
    }

    /// Moves a failed endpoint to the back of the list.
    fn failed(&self, addr: &str) {
        lock(&self.channels).remove(addr);
        let mut e = lock(&self.endpoints);
        if let Some(pos) = e.iter().position(|x| x == addr) {
            let failed = e.remove(pos);
            e.push(failed);
            self.metrics.inc(&self.metrics.endpoint_failovers);
        }
    }

    /// Replaces the endpoint list with the hub's (keeping the current endpoint first).
    fn refresh(&self, fresh: &[String], leader: &str) {
        if !leader.is_empty() {
            *lock(&self.leader) = leader.to_string();
        }
        if fresh.is_empty() {
            return;
        }
        let mut e = lock(&self.endpoints);
        let current = e.first().cloned();
        let mut next: Vec<String> = fresh.to_vec();
        if let Some(cur) = current {
            if let Some(pos) = next.iter().position(|x| *x == cur) {
                next.rotate_left(pos);
            }
        }
        *e = next;
    }

    fn client(&self) -> Result<(String, AgentClient<Channel>), CallError> {
        let addr = self
            .current()
            .ok_or_else(|| CallError::Refused("no hub endpoints configured".into()))?;
        let channel = {
            let mut cache = lock(&self.channels);
            match cache.get(&addr) {
                Some(c) => c.clone(),
                None => {
                    let c = self
                        .connector
                        .channel_lazy(&addr, |ep: Endpoint| {
                            ep.connect_timeout(Duration::from_millis(500))
                                .tcp_nodelay(true)
                                .http2_keep_alive_interval(Duration::from_secs(5))
                                .keep_alive_timeout(Duration::from_secs(5))
                        })
                        .map_err(|e| CallError::Refused(format!("bad endpoint {addr}: {e}")))?;
                    cache.insert(addr.clone(), c.clone());
                    c
                }
            }
        };
        Ok((
            addr,
            AgentClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_BYTES)
                .max_encoding_message_size(MAX_MESSAGE_BYTES),
        ))
    }

    fn outcome<T>(&self, addr: &str, r: Result<T, Status>) -> Result<T, CallError> {
        match r {
            Ok(v) => Ok(v),
            Err(s) => {
                let e = classify(addr, s);
                if matches!(e, CallError::Retry(_)) {
                    self.failed(addr);
                }
                Err(e)
            }
        }
    }

    /// One long-poll for the environment's plans: waits up to `wait` for a change of
    /// `fingerprint`, the fingerprint of `known_ids` (a change that only ends some of those
    /// as succeeded or failed, which this agent did itself, does not answer it).
    pub async fn fetch(
        &self,
        environment: &str,
        fingerprint: &str,
        known_ids: &[String],
        wait: Duration,
    ) -> Result<FetchPlansReply, CallError> {
        let (addr, mut c) = self.client()?;
        let mut req = tonic::Request::new(FetchPlansRequest {
            environment: environment.to_string(),
            known_fingerprint: fingerprint.to_string(),
            wait_ms: wait.as_millis() as u32,
            known_plan_ids: known_ids.to_vec(),
        });
        req.set_timeout(wait + Duration::from_secs(10));
        self.metrics.inc(&self.metrics.fetches);
        let r = self.outcome(&addr, c.fetch_plans(req).await.map(|r| r.into_inner()));
        if let Ok(reply) = &r {
            self.refresh(&reply.endpoints, &reply.leader);
        } else {
            self.metrics.inc(&self.metrics.fetch_errors);
        }
        r
    }

    /// Sends several task reports in one write (each idempotent on its own; the batch's key
    /// is its first report's key and its length). Returns the reports the hub refused (it
    /// applied the others) and what it records for the entities whose plans ended.
    pub async fn report_tasks(
        &self,
        environment: &str,
        reports: &[PendingReport],
    ) -> Result<TasksAck, CallError> {
        let (addr, mut c) = self.client()?;
        let request_id = match reports.first() {
            Some(r) => format!("tasks:{}:{}", r.request_id(), reports.len()),
            None => return Ok(TasksAck::default()),
        };
        let mut req = tonic::Request::new(ReportTasksRequest {
            environment: environment.to_string(),
            reports: reports
                .iter()
                .map(|r| wire::task_report(environment, r))
                .collect(),
            request_id,
        });
        req.set_timeout(Duration::from_secs(15));
        let r = self.outcome(&addr, c.report_tasks(req).await.map(|r| r.into_inner()));
        if let Ok(reply) = &r {
            self.refresh(&reply.endpoints, &reply.leader);
        }
        r.map(|reply| TasksAck {
            refused: wire::refused(&reply),
            recorded: wire::recorded(&reply),
            recorded_index: reply.recorded_index,
        })
    }

    /// Sends one task report (idempotent by its request id).
    pub async fn report_task(
        &self,
        environment: &str,
        report: &PendingReport,
    ) -> Result<(), CallError> {
        let (addr, mut c) = self.client()?;
        let mut req = tonic::Request::new(wire::task_report(environment, report));
        req.set_timeout(Duration::from_secs(15));
        let r = self.outcome(&addr, c.report_task(req).await.map(|r| r.into_inner()));
        if let Ok(reply) = &r {
            self.refresh(&reply.endpoints, &reply.leader);
        }
        r.map(|_| ())
    }

    /// Sends the entities' observed state (idempotent by `request_id`). Returns the hub's log
    /// index the report is applied at (or, when it changed nothing, was read at).
    pub async fn report_states(
        &self,
        environment: &str,
        states: Vec<EntityState>,
        request_id: &str,
    ) -> Result<u64, CallError> {
        let (addr, mut c) = self.client()?;
        let mut req = tonic::Request::new(ReportStatesRequest {
            environment: environment.to_string(),
            states,
            request_id: request_id.to_string(),
        });
        req.set_timeout(Duration::from_secs(15));
        let r = self.outcome(&addr, c.report_states(req).await.map(|r| r.into_inner()));
        if let Ok(reply) = &r {
            self.refresh(&reply.endpoints, &reply.leader);
        }
        r.map(|reply| reply.index)
    }

    /// Sends what the agent observes of its canaries (idempotent by `request_id`).
    pub async fn report_canaries(
        &self,
        environment: &str,
        observations: Vec<CanaryObservation>,
        request_id: &str,
    ) -> Result<(), CallError> {
        let (addr, mut c) = self.client()?;
        let mut req = tonic::Request::new(ReportCanariesRequest {
            environment: environment.to_string(),
            observations,
            request_id: request_id.to_string(),
        });
        req.set_timeout(Duration::from_secs(15));
        let r = self.outcome(&addr, c.report_canaries(req).await.map(|r| r.into_inner()));
        if let Ok(reply) = &r {
            self.refresh(&reply.endpoints, &reply.leader);
        }
        r.map(|_| ())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A poisoned lock only means another task panicked mid-update of a plain list.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_endpoints_rotate_to_the_back_and_replies_refresh_the_list() {
        let m = std::sync::Arc::new(Metrics::default());
        let h = HubConnection::new(
            vec!["a:1".into(), "b:1".into(), "c:1".into()],
            m,
            hub_tls::client::Connector::new(
                hub_tls::client::ClientMode::Plaintext,
                Duration::from_millis(500),
            ),
        );
        h.failed("a:1");
        assert_eq!(h.endpoints(), ["b:1", "c:1", "a:1"]);
        h.refresh(&["a:1".into(), "b:1".into(), "d:1".into()], "d:1");
        assert_eq!(h.endpoints(), ["b:1", "d:1", "a:1"]);
        assert_eq!(h.leader(), "d:1");
    }

    #[test]
    fn backoff_is_jittered_and_capped() {
        for attempt in 0..20 {
            let d = backoff(attempt).as_millis() as u64;
            assert!((50..=5_000).contains(&d), "{attempt}: {d}");
        }
    }
}

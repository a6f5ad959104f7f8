//! A fault-tolerant client of the hub for the rollout workload: every call has a bounded
//! timeout and fails over along the endpoint list; writes carry request ids, so a retry after
//! an unknown outcome is applied at most once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hub_client::answer::Typed;
use hub_proto::hub_client::HubClient;
use hub_proto::{QueryRequest, ReadOptions, SubmitRequest};
use serde_json::Value;
use tonic::transport::Channel;
use tonic::Code;

use crate::runner::cluster::connect;
use crate::runner::endpoints::SharedEndpoints;

/// Timeout of one call on one node.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Pause between two rounds over every endpoint.
const ROUND_PAUSE: Duration = Duration::from_millis(250);

/// Why a call failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CallError {
    /// The hub answered and refused (bad input, not found, already exists, …): retrying
    /// cannot help.
    #[error("refused ({code:?}): {message}")]
    Refused {
        /// The gRPC code.
        code: Code,
        /// The hub's message.
        message: String,
    },
    /// No node answered in time (or none had a leader): may be retried.
    #[error("unavailable: {0}")]
    Unavailable(String),
}

impl CallError {
    /// Whether the hub refused because the thing exists already: by the refusal's code,
    /// never its words.
    pub fn already_exists(&self) -> bool {
        matches!(self, CallError::Refused { code, .. } if *code == Code::AlreadyExists)
    }
}

/// The hub's nodes, tried in turn.
#[derive(Clone)]
pub struct Hub {
    endpoints: SharedEndpoints,
    next: Arc<AtomicUsize>,
}

fn refused(s: &tonic::Status) -> bool {
    matches!(
        s.code(),
        Code::InvalidArgument
            | Code::NotFound
            | Code::AlreadyExists
            | Code::FailedPrecondition
            | Code::PermissionDenied
            | Code::OutOfRange
    )
}

impl Hub {
    /// A client of `endpoints` (`host:port`), which the runner keeps current.
    pub fn new(endpoints: SharedEndpoints) -> Hub {
        Hub {
            endpoints,
            next: Arc::new(AtomicUsize::new(0)),
        }
    }

    fn current(&self) -> Option<String> {
        let endpoints = self.endpoints.get();
        let n = endpoints.len();
        (n > 0).then(|| endpoints[self.next.load(Ordering::Relaxed) % n].clone())
    }

    fn advance(&self) {
        self.next.fetch_add(1, Ordering::Relaxed);
    }

    /// Calls the current node, then each next one, until a node answers or refuses: one try
    /// on every node at most. Returns the answering node and its reply.
    async fn on_some_node<R, F, Fut>(&self, call: F) -> Result<(String, R), CallError>
    where
        F: Fn(HubClient<Channel>) -> Fut,
        Fut: std::future::Future<Output = Result<tonic::Response<R>, tonic::Status>>,
    {
        let mut last = String::from("no endpoint");
        for _ in 0..self.endpoints.get().len() {
            let Some(addr) = self.current() else { break };
            let attempt = async {
                let c = connect(&addr)
                    .await
                    .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
                call(c).await
            };
            match tokio::time::timeout(CALL_TIMEOUT + Duration::from_secs(1), attempt).await {
                Ok(Ok(r)) => return Ok((addr, r.into_inner())),
                Ok(Err(s)) if refused(&s) => {
                    return Err(CallError::Refused {
                        code: s.code(),
                        message: s.message().to_string(),
                    })
                }
                Ok(Err(s)) => last = format!("{addr}: {}", s.message()),
                Err(_) => last = format!("{addr}: timed out"),
            }
            self.advance();
        }
        Err(CallError::Unavailable(last))
    }

    /// `Hub.Submit` of one engine command; one try on every node at most. The output is the
    /// command's output JSON (`Null` when empty).
    pub async fn submit(&self, command: &Value, request_id: &str) -> Result<Value, CallError> {
        let (_, reply) = self
            .on_some_node(|mut c| async move {
                let mut req = tonic::Request::new(SubmitRequest {
                    command_json: command.to_string(),
                    request_id: request_id.to_string(),
                });
                req.set_timeout(CALL_TIMEOUT);
                c.submit(req).await
            })
            .await?;
        Ok(serde_json::from_str(&reply.output_json).unwrap_or(Value::Null))
    }

    /// [`Hub::submit`] retried (same request id) until it is answered or `timeout` passes.
    pub async fn submit_until(
        &self,
        command: &Value,
        request_id: &str,
        timeout: Duration,
    ) -> Result<Value, CallError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.submit(command, request_id).await {
                Err(CallError::Unavailable(e)) if Instant::now() < deadline => {
                    tracing_free_pause(&e).await
                }
                other => return other,
            }
        }
    }

    /// A linearizable `Hub.Query` of a typed query; one try on every node at most. An answer
    /// that does not read as the query's answer type counts as no answer (like bad JSON).
    pub async fn ask<T: Typed>(&self, typed: &T) -> Result<T::Answer, CallError> {
        let query_json = serde_json::to_string(&typed.query())
            .map_err(|e| CallError::Unavailable(format!("query not encoded: {e}")))?;
        let (addr, reply) = self
            .on_some_node(|mut c| {
                let query_json = query_json.clone();
                async move {
                    let mut req = tonic::Request::new(QueryRequest {
                        query_json,
                        read: Some(ReadOptions { stale: false }),
                    });
                    req.set_timeout(CALL_TIMEOUT);
                    c.query(req).await
                }
            })
            .await?;
        serde_json::from_str(&reply.json)
            .map_err(|e| CallError::Unavailable(format!("{addr}: bad answer: {e}")))
    }

    /// [`Hub::ask`] retried until it is answered or `timeout` passes.
    pub async fn ask_until<T: Typed>(
        &self,
        typed: &T,
        timeout: Duration,
    ) -> Result<T::Answer, CallError> {
        let deadline = Instant::now() + timeout;
        loop {
            match self.ask(typed).await {
                Err(CallError::Unavailable(e)) if Instant::now() < deadline => {
                    tracing_free_pause(&e).await
                }
                other => return other,
            }
        }
    }
}

/// The pause between rounds (the error is not logged: unavailability is expected under
/// faults and would flood the runner's output).
async fn tracing_free_pause(_error: &str) {
    tokio::time::sleep(ROUND_PAUSE).await;
}

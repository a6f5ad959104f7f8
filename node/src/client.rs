//! A client of the hub API that fails over between endpoints.
//!
//! It connects to the endpoints in turn; a node that cannot be reached, or whose connection
//! breaks mid-call, is skipped for the next one. An answer from a node (including "no leader"
//! and "no quorum") is returned as it is: any other node would give the same answer. Writes
//! sent through it carry request ids, so a write retried on another node applies once.

use std::future::Future;
use std::time::Duration;

use hub_proto::hub_client::HubClient;
use tonic::transport::Channel;
use tonic::{Response, Status};

use hub_tls::client::Connector;

use crate::peers::{configure, MAX_MESSAGE_BYTES};

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No endpoint answered (each failure is listed).
    #[error("no hub endpoint answered ({0})")]
    Unreachable(String),
    /// A node answered with an error.
    #[error("{}", .0.message())]
    Status(Status),
}

/// Failover client over a list of `host:port` endpoints.
#[derive(Debug, Clone)]
pub struct FailoverClient {
    endpoints: Vec<String>,
    connector: Connector,
    /// Per-call deadline.
    pub timeout: Duration,
}

fn connection_lost(s: &Status) -> bool {
    // tonic reports a broken or refused connection as Unavailable/Unknown with a transport
    // message; the hub's own "no leader"/"no quorum" answers are not connection failures.
    matches!(
        s.code(),
        tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled
    ) && !s.message().starts_with("no leader")
        && !s.message().starts_with("no quorum")
        && !s.message().starts_with("this node")
}

impl FailoverClient {
    /// A client for `endpoints` (tried in order), dialling through `connector`.
    pub fn new(endpoints: Vec<String>, timeout: Duration, connector: Connector) -> Self {
        Self {
            endpoints,
            connector,
            timeout,
        }
    }

    /// The connector it dials through.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The endpoints, in the order they are tried.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// A client connected to one specific endpoint.
    pub async fn connect(
        addr: &str,
        connector: &Connector,
    ) -> Result<HubClient<Channel>, tonic::transport::Error> {
        let channel = connector.channel(addr, configure).await?;
        Ok(HubClient::new(channel)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Calls `f` on the first endpoint that answers.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, ClientError>
    where
        F: FnMut(HubClient<Channel>) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let mut errors = Vec::new();
        for addr in &self.endpoints {
            let client = match tokio::time::timeout(
                self.timeout,
                Self::connect(addr, &self.connector),
            )
            .await
            {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => {
                    errors.push(format!("{addr}: {e}"));
                    continue;
                }
                Err(_) => {
                    errors.push(format!("{addr}: connect timed out"));
                    continue;
                }
            };
            match tokio::time::timeout(self.timeout, f(client)).await {
                Ok(Ok(r)) => return Ok(r.into_inner()),
                Ok(Err(s)) if connection_lost(&s) => {
                    errors.push(format!("{addr}: {}", s.message()))
                }
                Ok(Err(s)) => return Err(ClientError::Status(s)),
                Err(_) => errors.push(format!("{addr}: no answer within {:?}", self.timeout)),
            }
        }
        Err(ClientError::Unreachable(errors.join("; ")))
    }
}

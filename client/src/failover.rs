//! A client of the hub API that fails over between endpoints.
//!
//! It connects to the endpoints in turn; a node that cannot be reached, or whose connection
//! breaks mid-call, is skipped for the next one, and so is a node that refuses the call because
//! it is stopping, cut off from the majority or not a member ([`Refusal`], typed on the wire:
//! no decision reads a message). Any other answer (including "no leader" and "no quorum") is
//! returned as it is: any other node would give the same answer. Writes
//! sent through it carry request ids, so a write retried on another node applies once.

use std::future::Future;
use std::time::Duration;

use hub_proto::hub_client::HubClient;
use hub_proto::refusal::Refusal;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::Channel;
use tonic::{Response, Status};

use hub_tls::client::Connector;

use hub_proto::MAX_MESSAGE_BYTES;

use crate::bearer::Bearer;
use crate::channel::configure;

/// Why a call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No endpoint answered (each failure is listed).
    #[error("no hub endpoint answered ({0})")]
    Unreachable(String),
    /// A node answered with an error.
    #[error("{}", .0.message())]
    Status(Status),
    /// A request could not be encoded (a bug of this client).
    #[error("encoding the request failed: {0}")]
    Encode(serde_json::Error),
    /// A node's answer is not what this client reads (a node of another version?).
    #[error("the hub's answer to {query} is not what this client reads: {error}")]
    Answer {
        /// The query's kind.
        query: String,
        /// What did not read.
        error: serde_json::Error,
    },
}

/// A Hub API client as [`FailoverClient`] dials it.
pub type HubApi = HubClient<InterceptedService<Channel, Bearer>>;

/// Failover client over a list of `host:port` endpoints.
#[derive(Debug, Clone)]
pub struct FailoverClient {
    endpoints: Vec<String>,
    connector: Connector,
    bearer: Bearer,
    /// Per-call deadline.
    pub timeout: Duration,
}

/// What a client does after a node's error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    /// Give it to the caller: any other node would answer the same.
    Answer,
    /// Try the next node.
    TryAnother,
    /// Try the next node; if none answers, try them all again while the call's time lasts:
    /// this node is up but cut off from the majority, so the cluster may be electing a leader.
    TryAnotherAndWait,
}

/// Decides by the node's typed refusal ([`Refusal`]), never by the words of its message; a
/// status without one is a transport error (a broken or refused connection, reported by
/// tonic as UNAVAILABLE, UNKNOWN or CANCELLED), or a node's answer about the request.
fn next_after(s: &Status) -> Next {
    match Refusal::of(s) {
        // Every node would answer the same (a caller that is a removed node is refused by all).
        Some(
            Refusal::NoLeader
            | Refusal::NoQuorum
            | Refusal::NotCaughtUp
            | Refusal::CallerNotAMember
            | Refusal::FeatureLevelTooLow,
        ) => Next::Answer,
        Some(Refusal::CutOff) => Next::TryAnotherAndWait,
        Some(Refusal::Stopping | Refusal::NodeNotAMember) => Next::TryAnother,
        None => match s.code() {
            tonic::Code::Unavailable | tonic::Code::Unknown | tonic::Code::Cancelled => {
                Next::TryAnother
            }
            _ => Next::Answer,
        },
    }
}

impl FailoverClient {
    /// A client for `endpoints` (tried in order), dialling through `connector`.
    pub fn new(endpoints: Vec<String>, timeout: Duration, connector: Connector) -> Self {
        Self {
            endpoints,
            connector,
            bearer: Bearer::default(),
            timeout,
        }
    }

    /// The same client, sending `bearer` with every call (an operator token).
    pub fn with_bearer(mut self, bearer: Bearer) -> Self {
        self.bearer = bearer;
        self
    }

    /// The connector it dials through.
    pub fn connector(&self) -> &Connector {
        &self.connector
    }

    /// The endpoints, in the order they are tried.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// A client connected to one specific endpoint, as the connector's certificate (or
    /// nobody).
    pub async fn connect(
        addr: &str,
        connector: &Connector,
    ) -> Result<HubApi, tonic::transport::Error> {
        Self::connect_with(addr, connector, Bearer::default()).await
    }

    /// A client connected to `addr` as this client calls it (certificate or token).
    pub async fn dial(&self, addr: &str) -> Result<HubApi, tonic::transport::Error> {
        Self::connect_with(addr, &self.connector, self.bearer.clone()).await
    }

    async fn connect_with(
        addr: &str,
        connector: &Connector,
        bearer: Bearer,
    ) -> Result<HubApi, tonic::transport::Error> {
        let channel = connector.channel(addr, configure).await?;
        Ok(HubClient::with_interceptor(channel, bearer)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Calls `f` on the first endpoint that answers. When every endpoint fails and one of
    /// them answered that it is cut off from the leader (it is up, so the cluster may be
    /// electing one), the endpoints are tried again, with a growing pause, until the client's
    /// timeout has passed since the call began.
    pub async fn call<T, F, Fut>(&self, mut f: F) -> Result<T, ClientError>
    where
        F: FnMut(HubApi) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let began = tokio::time::Instant::now();
        let mut pause = Duration::from_millis(100);
        loop {
            let (errors, cut_off) = match self.one_pass(&mut f).await {
                Ok(r) => return r,
                Err(failed) => failed,
            };
            if !cut_off || began.elapsed() + pause >= self.timeout {
                return Err(ClientError::Unreachable(errors.join("; ")));
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(1));
        }
    }

    /// One pass over the endpoints: the first answer, or every endpoint's error and whether
    /// one of them said it is cut off.
    async fn one_pass<T, F, Fut>(
        &self,
        f: &mut F,
    ) -> Result<Result<T, ClientError>, (Vec<String>, bool)>
    where
        F: FnMut(HubApi) -> Fut,
        Fut: Future<Output = Result<Response<T>, Status>>,
    {
        let mut errors = Vec::new();
        let mut cut_off = false;
        for addr in &self.endpoints {
            let client = match tokio::time::timeout(self.timeout, self.dial(addr)).await {
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
                Ok(Ok(r)) => return Ok(Ok(r.into_inner())),
                Ok(Err(s)) => match next_after(&s) {
                    Next::Answer => return Ok(Err(ClientError::Status(s))),
                    Next::TryAnother => errors.push(format!("{addr}: {}", s.message())),
                    Next::TryAnotherAndWait => {
                        cut_off = true;
                        errors.push(format!("{addr}: {}", s.message()))
                    }
                },
                Err(_) => errors.push(format!("{addr}: no answer within {:?}", self.timeout)),
            }
        }
        Err((errors, cut_off))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rewording every message changes no decision: each refusal is judged alike under its
    /// own words, another refusal's words and none.
    #[test]
    fn decisions_follow_the_typed_refusal_not_the_message() {
        let expected = |r: Refusal| match r {
            Refusal::NoLeader
            | Refusal::NoQuorum
            | Refusal::NotCaughtUp
            | Refusal::CallerNotAMember
            | Refusal::FeatureLevelTooLow => Next::Answer,
            Refusal::CutOff => Next::TryAnotherAndWait,
            Refusal::Stopping | Refusal::NodeNotAMember => Next::TryAnother,
        };
        for r in Refusal::ALL {
            for message in [
                "",
                "cut off: x",
                "no leader: x",
                "this node is stopping",
                "zz",
            ] {
                assert_eq!(
                    next_after(&r.status(message)),
                    expected(r),
                    "{r:?} {message:?}"
                );
            }
        }
        // Untyped: the code decides, whatever the words.
        for message in ["cut off: x", "no leader: x", "this node is stopping", ""] {
            assert_eq!(
                next_after(&Status::unavailable(message)),
                Next::TryAnother,
                "{message:?}"
            );
            assert_eq!(next_after(&Status::invalid_argument(message)), Next::Answer);
            assert_eq!(
                next_after(&Status::permission_denied(message)),
                Next::Answer
            );
        }
    }
}

//! A client of the hub API that fails over between endpoints.
//!
//! It connects to the endpoints in turn; a node that cannot be reached, or whose connection
//! breaks mid-call, is skipped for the next one. An answer from a node (including "no leader"
//! and "no quorum") is returned as it is: any other node would give the same answer. Writes
//! sent through it carry request ids, so a write retried on another node applies once.

use std::future::Future;
use std::time::Duration;

use hub_engine::token::TokenSecret;
use hub_proto::hub_client::HubClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
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

/// The `authorization: Bearer` header of an operator token, added to every call; none for a
/// caller with a certificate. Marked sensitive, and never shown by `Debug`.
#[derive(Clone, Default)]
pub struct Bearer(Option<MetadataValue<Ascii>>);

impl Bearer {
    /// The header of `secret`.
    pub fn new(secret: &TokenSecret) -> Bearer {
        // `Bearer hubtok_` and hex digits: always a valid header value.
        let mut value = MetadataValue::try_from(format!("Bearer {}", secret.reveal()))
            .expect("a token's text is ASCII");
        value.set_sensitive(true);
        Bearer(Some(value))
    }
}

impl std::fmt::Debug for Bearer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bearer(redacted)"
        } else {
            "Bearer(none)"
        })
    }
}

impl Interceptor for Bearer {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, Status> {
        if let Some(value) = &self.0 {
            req.metadata_mut().insert("authorization", value.clone());
        }
        Ok(req)
    }
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

fn connection_lost(s: &Status) -> bool {
    // tonic reports a broken or refused connection as Unavailable/Unknown with a transport
    // message; the hub's own "no leader"/"no quorum" answers are not connection failures. A
    // node's "cut off" answer is one: that node cannot reach the leader, another may.
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
                Ok(Err(s)) if connection_lost(&s) => {
                    cut_off |= s.message().starts_with("cut off");
                    errors.push(format!("{addr}: {}", s.message()))
                }
                Ok(Err(s)) => return Ok(Err(ClientError::Status(s))),
                Err(_) => errors.push(format!("{addr}: no answer within {:?}", self.timeout)),
            }
        }
        Err((errors, cut_off))
    }
}

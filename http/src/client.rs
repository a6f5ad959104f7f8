//! [`HttpClient`]: one long-lived reqwest client with its connection pool, and the calls
//! built on it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use reqwest::header::{HeaderMap, AUTHORIZATION, CONTENT_TYPE};
use reqwest::{Method, StatusCode};

use crate::deny::{DenyList, FilteringResolver};
use crate::error::{classify, ErrorKind, HttpError};
use crate::target::{shown, Target};
use crate::tls::{client_config, Trust};

/// How long an idle pooled connection is kept for the next call to its host.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// Idle pooled connections kept per host.
const POOL_PER_HOST: usize = 8;

/// What a client does with a 3xx answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Not followed: the 3xx is the answer.
    Refuse,
    /// Followed, at most `max` hops (see the crate documentation for what is refused).
    Follow {
        /// The most hops.
        max: usize,
    },
}

/// Where a client's proxies come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Proxies {
    /// `HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, `NO_PROXY` (upper case first, then lower
    /// case), read when the client is built.
    FromEnvironment,
    /// Always direct (e.g. readiness probes of local services).
    None,
    /// Every call through this proxy URL (for tests; operators use the environment).
    Only(String),
}

/// How a process's clients behave, whatever their trust.
#[derive(Debug, Clone)]
pub struct ClientSettings {
    /// The `User-Agent` header.
    pub user_agent: String,
    /// Redirect handling.
    pub redirects: Redirects,
    /// Proxies.
    pub proxies: Proxies,
    /// Addresses never connected to.
    pub deny: Arc<DenyList>,
}

/// A request body with its content type.
#[derive(Clone)]
pub struct Body {
    /// The `Content-Type` header.
    pub content_type: &'static str,
    /// The bytes.
    pub bytes: Bytes,
}

impl Body {
    /// A JSON body.
    pub fn json(bytes: impl Into<Bytes>) -> Self {
        Self {
            content_type: "application/json",
            bytes: bytes.into(),
        }
    }
}

/// A complete answer: the status and the body (within the caller's cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The final status (after any redirects followed).
    pub status: StatusCode,
    /// The body.
    pub body: Bytes,
}

/// A long-lived HTTP(S) client: one connection pool, one trust setting. Cheap to clone
/// (clones share the pool).
#[derive(Clone)]
pub struct HttpClient {
    client: reqwest::Client,
    deny: Arc<DenyList>,
    trust: Arc<Trust>,
}

impl fmt::Debug for HttpClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpClient")
            .field("trust", &self.trust)
            .field("deny", &self.deny.to_string())
            .finish_non_exhaustive()
    }
}

impl HttpClient {
    /// Builds a client; its pool lives as long as the client and its clones.
    pub fn new(settings: &ClientSettings, trust: &Trust) -> Result<Self, ErrorKind> {
        let redirect = match settings.redirects {
            Redirects::Refuse => reqwest::redirect::Policy::none(),
            Redirects::Follow { max } => crate::redirect::policy(max, settings.deny.clone()),
        };
        let mut builder = reqwest::Client::builder()
            .user_agent(settings.user_agent.clone())
            .tls_backend_preconfigured(client_config(trust)?)
            .dns_resolver(Arc::new(FilteringResolver {
                deny: settings.deny.clone(),
            }))
            .redirect(redirect)
            .referer(false)
            .pool_idle_timeout(POOL_IDLE)
            .pool_max_idle_per_host(POOL_PER_HOST)
            .tcp_nodelay(true);
        builder = match &settings.proxies {
            Proxies::FromEnvironment => builder,
            Proxies::None => builder.no_proxy(),
            Proxies::Only(url) => builder.proxy(
                reqwest::Proxy::all(url.as_str())
                    .map_err(|e| ErrorKind::Setup(format!("proxy {url}: {e}")))?,
            ),
        };
        let client = builder
            .build()
            .map_err(|e| ErrorKind::Setup(e.without_url().to_string()))?;
        Ok(Self {
            client,
            deny: settings.deny.clone(),
            trust: Arc::new(trust.clone()),
        })
    }

    /// Sends one request and returns once the answer's head has arrived (redirects
    /// followed per the client's settings). No deadline: wrap it, or use [`HttpClient::call`].
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
    ) -> Result<Response, HttpError> {
        self.send_with_headers(method, url, body, &HeaderMap::new())
            .await
    }

    /// [`HttpClient::send`] with `headers` added to the request (a header of the same name as
    /// one the client sets, `Authorization` from the URL's userinfo say, is added beside it).
    /// Their values may be credentials: nothing here shows them.
    pub async fn send_with_headers(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
        headers: &HeaderMap,
    ) -> Result<Response, HttpError> {
        let target = Target::parse(url)?;
        target.check_literal(&self.deny)?;
        let mut request = self.client.request(method, target.url.clone());
        if let Some(authorization) = target.authorization.clone() {
            request = request.header(AUTHORIZATION, authorization);
        }
        for (name, value) in headers {
            let mut value = value.clone();
            value.set_sensitive(true);
            request = request.header(name, value);
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, body.content_type)
                .body(body.bytes);
        }
        let response = request
            .send()
            .await
            .map_err(|e| HttpError::new(target.shown.clone(), classify(e)))?;
        Ok(Response {
            shown: target.shown,
            inner: response,
        })
    }

    /// Sends one request and reads the whole answer, at most `cap` body bytes, all within
    /// `timeout`.
    pub async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
        timeout: Duration,
        cap: usize,
    ) -> Result<Answer, HttpError> {
        self.call_with_headers(method, url, body, &HeaderMap::new(), timeout, cap)
            .await
    }

    /// [`HttpClient::call`] with `headers` added ([`HttpClient::send_with_headers`]).
    pub async fn call_with_headers(
        &self,
        method: Method,
        url: &str,
        body: Option<Body>,
        headers: &HeaderMap,
        timeout: Duration,
        cap: usize,
    ) -> Result<Answer, HttpError> {
        let exchange = async {
            let response = self.send_with_headers(method, url, body, headers).await?;
            let status = response.status();
            let body = response.read_capped(cap).await?;
            Ok(Answer { status, body })
        };
        match tokio::time::timeout(timeout, exchange).await {
            Ok(result) => result,
            Err(_) => Err(HttpError::new(
                hub_wire::url_credentials::redact_url(url),
                ErrorKind::Timeout(timeout),
            )),
        }
    }
}

/// An answer whose head has arrived; the body is read on demand.
pub struct Response {
    /// The URL requested, without credentials.
    shown: String,
    inner: reqwest::Response,
}

impl fmt::Debug for Response {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Response")
            .field("url", &self.shown)
            .field("status", &self.inner.status())
            .finish_non_exhaustive()
    }
}

impl Response {
    /// The status (of the last hop, when redirects were followed).
    pub fn status(&self) -> StatusCode {
        self.inner.status()
    }

    /// The `Content-Length` the server announced, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.inner.content_length()
    }

    /// The URL that answered (the last hop), without credentials.
    pub fn final_url(&self) -> String {
        shown(self.inner.url())
    }

    /// A header's value as text, if present and printable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.inner.headers().get(name)?.to_str().ok()
    }

    /// The next piece of the body; `None` at its end. Bounded by the server's framing and
    /// the client's read buffer, never by the body's size.
    pub async fn chunk(&mut self) -> Result<Option<Bytes>, HttpError> {
        self.inner
            .chunk()
            .await
            .map_err(|e| HttpError::new(self.shown.clone(), classify(e)))
    }

    /// The whole body, refused as soon as it exceeds `cap` bytes (announced or read).
    pub async fn read_capped(mut self, cap: usize) -> Result<Bytes, HttpError> {
        let cap64 = u64::try_from(cap).unwrap_or(u64::MAX);
        let too_large = |shown: &str| HttpError::new(shown, ErrorKind::TooLarge(cap64));
        if self.content_length().is_some_and(|l| l > cap64) {
            return Err(too_large(&self.shown));
        }
        let mut body = BytesMut::new();
        while let Some(chunk) = self.chunk().await? {
            if body.len() + chunk.len() > cap {
                return Err(too_large(&self.shown));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    }
}

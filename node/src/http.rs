//! A minimal HTTP/1.1 client for the hub's own outbound calls: artifact checks (`HEAD`),
//! canary webhooks (`POST` JSON) and Prometheus queries (`GET`). Plain `http://` only, one
//! connection per request, credentials in a URL sent as Basic authentication and never shown
//! in errors.

use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{header, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// `User-Agent` of every request the hub sends.
pub const USER_AGENT: &str = concat!("hub-node/", env!("CARGO_PKG_VERSION"));

/// Most bytes of a response body read.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// The parts of an `http://` URL a request needs.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Target<'a> {
    /// `user:password` as written (percent-encoded).
    pub(crate) userinfo: Option<&'a str>,
    /// `host[:port]`, for the `Host` header.
    pub(crate) host_port: &'a str,
    /// Host to connect to (IPv6 without brackets).
    pub(crate) host: &'a str,
    pub(crate) port: u16,
    /// Path to request; never empty.
    pub(crate) path: &'a str,
}

/// Splits an `http://` URL. Errors never contain the credentials.
pub(crate) fn parse_http(url: &str) -> Result<Target<'_>, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| "not an http:// URL".to_string())?;
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let (userinfo, host_port) = match authority.rsplit_once('@') {
        Some((userinfo, host_port)) => (Some(userinfo), host_port),
        None => (None, authority),
    };
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| "malformed IPv6 host".to_string())?;
        (host, after.strip_prefix(':'))
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err("no host".to_string());
    }
    let port = match port {
        None => 80,
        Some(port) => port
            .parse::<u16>()
            .map_err(|_| format!("bad port {port:?}"))?,
    };
    Ok(Target {
        userinfo,
        host_port,
        host,
        port,
        path: if path.is_empty() { "/" } else { path },
    })
}

/// Aborts the connection task when the request ends (or times out).
pub(crate) struct AbortOnDrop(pub(crate) JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// An error and its sources, `: `-separated.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// Sends `method` to an `http://` URL with an optional `(content type, body)`, within
/// `timeout`; the status and up to [`MAX_BODY_BYTES`] of the body.
pub(crate) async fn request(
    method: Method,
    url: &str,
    body: Option<(&str, Vec<u8>)>,
    timeout: Duration,
) -> Result<(StatusCode, Bytes), String> {
    match tokio::time::timeout(timeout, request_inner(method, url, body)).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

async fn request_inner(
    method: Method,
    url: &str,
    body: Option<(&str, Vec<u8>)>,
) -> Result<(StatusCode, Bytes), String> {
    let target = parse_http(url)?;
    let stream = TcpStream::connect((target.host, target.port))
        .await
        .map_err(|error| format!("connect to {}: {error}", target.host_port))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|error| error_chain(&error))?;
    let _connection = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    let mut builder = Request::builder()
        .method(method)
        .uri(target.path)
        .header(header::HOST, target.host_port)
        .header(header::USER_AGENT, USER_AGENT);
    if let Some(userinfo) = target.userinfo {
        builder = builder.header(
            header::AUTHORIZATION,
            hub_engine::artifact::basic_authorization(userinfo),
        );
    }
    let (content_type, bytes) = body.unwrap_or(("", Vec::new()));
    if !content_type.is_empty() {
        builder = builder.header(header::CONTENT_TYPE, content_type);
    }
    let request = builder
        .body(Full::new(Bytes::from(bytes)))
        .map_err(|error| format!("invalid request: {error}"))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| error_chain(&error))?;
    let status = response.status();
    let limited = http_body_util::Limited::new(response.into_body(), MAX_BODY_BYTES);
    let body = limited
        .collect()
        .await
        .map_err(|error| format!("reading the answer: {error}"))?
        .to_bytes();
    Ok((status, body))
}

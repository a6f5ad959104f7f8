//! A minimal HTTP/1.1 client (hyper's `client::conn::http1` over a tokio `TcpStream`) for
//! artifact downloads and readiness probes: `GET` only, plain `http://` only, no redirects,
//! no connection reuse. Credentials in a URL (`user:password@`) are sent as Basic
//! authentication and never appear in errors.

use std::time::Duration;

use http_body_util::Empty;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

/// A parsed `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpUrl {
    /// Host to connect to (IPv6 without brackets).
    pub host: String,
    /// Port (80 when absent).
    pub port: u16,
    /// `host[:port]` as written: the `Host` header.
    pub authority: String,
    /// Path and query (`/` when absent).
    pub path: String,
    /// `user:password` (percent-encoded as written), if any.
    userinfo: Option<String>,
}

impl HttpUrl {
    /// Parses `http://[user:password@]host[:port][/path]`.
    pub fn parse(url: &str) -> Result<Self, String> {
        let shown = redact(url);
        let rest = url
            .strip_prefix("http://")
            .ok_or_else(|| format!("{shown}: not an http:// URL"))?;
        if rest.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{shown}: URL contains whitespace or control characters"
            ));
        }
        let (authority_full, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, "/"),
        };
        let path = path.split('#').next().unwrap_or("/");
        let (userinfo, authority) = match authority_full.rfind('@') {
            Some(at) => (
                Some(authority_full[..at].to_string()),
                &authority_full[at + 1..],
            ),
            None => (None, authority_full),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let end = v6
                .find(']')
                .ok_or_else(|| format!("{shown}: unterminated IPv6 address"))?;
            let after = &v6[end + 1..];
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p),
                None if after.is_empty() => None,
                None => return Err(format!("{shown}: bad authority")),
            };
            (&v6[..end], port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(format!("{shown}: no host"));
        }
        let port = match port {
            None => 80,
            Some(p) => p
                .parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("{shown}: bad port {p:?}"))?,
        };
        Ok(Self {
            host: host.to_string(),
            port,
            authority: authority.to_string(),
            path: path.to_string(),
            userinfo,
        })
    }

    /// The URL without credentials.
    pub fn shown(&self) -> String {
        format!("http://{}{}", self.authority, self.path)
    }
}

/// `url` with the `user:password@` of its authority removed.
pub use hub_engine::artifact::redact_url as redact;

/// Aborts the connection task when dropped (a timed-out request leaves nothing behind).
pub struct Connection(JoinHandle<()>);

impl Drop for Connection {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Sends `GET url` and returns the response head (body not yet read) within `timeout`.
/// Keep the [`Connection`] alive while reading the body.
pub async fn get(
    url: &HttpUrl,
    timeout: Duration,
) -> Result<(Response<Incoming>, Connection), String> {
    match tokio::time::timeout(timeout, get_inner(url)).await {
        Ok(result) => result,
        Err(_) => Err(format!("no response within {} ms", timeout.as_millis())),
    }
}

async fn get_inner(url: &HttpUrl) -> Result<(Response<Incoming>, Connection), String> {
    let stream = TcpStream::connect((url.host.as_str(), url.port))
        .await
        .map_err(|e| format!("cannot connect to {}: {}", url.authority, io_reason(&e)))?;
    let _ = stream.set_nodelay(true);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| format!("HTTP handshake with {}: {e}", url.authority))?;
    let conn = Connection(tokio::spawn(async move {
        let _ = conn.await;
    }));
    let mut request = Request::get(url.path.as_str())
        .header(hyper::header::HOST, url.authority.as_str())
        .header(hyper::header::USER_AGENT, "hub-agent")
        .header(hyper::header::CONNECTION, "close");
    if let Some(userinfo) = &url.userinfo {
        request = request.header(
            hyper::header::AUTHORIZATION,
            hub_engine::artifact::basic_authorization(userinfo),
        );
    }
    let request = request
        .body(Empty::<Bytes>::new())
        .map_err(|e| format!("bad request for {}: {e}", url.shown()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| format!("request to {} failed: {e}", url.authority))?;
    Ok((response, conn))
}

/// A short reason for an I/O error ("connection refused").
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "timed out".into(),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parsing_and_redaction() {
        let u = HttpUrl::parse("http://user:p%40ss@127.0.0.1:8080/a/b.tar.gz").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("127.0.0.1", 8080));
        assert_eq!(u.authority, "127.0.0.1:8080");
        assert_eq!(u.path, "/a/b.tar.gz");
        assert_eq!(u.shown(), "http://127.0.0.1:8080/a/b.tar.gz");
        let u = HttpUrl::parse("http://[::1]/x").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("::1", 80, "/x")
        );
        let u = HttpUrl::parse("http://reg.example").unwrap();
        assert_eq!(u.path, "/");
        for bad in [
            "https://x/y",
            "http:///y",
            "http://x:0/",
            "http://x:99999/",
            "http://a b/",
        ] {
            assert!(HttpUrl::parse(bad).is_err(), "{bad}");
        }
        let e = HttpUrl::parse("http://u:secret@x:bad/").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
        assert_eq!(redact("http://u:p@h/x@y"), "http://h/x@y");
        assert_eq!(redact("file:///a/b"), "file:///a/b");
    }

    #[test]
    fn basic_auth_encoding() {}
}

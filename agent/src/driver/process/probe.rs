//! Readiness probes (one attempt each): `GET http://127.0.0.1:PORT/path` answering 2xx
//! (through the agent's long-lived probe client: direct, redirects not followed), a TCP
//! connection to `127.0.0.1:PORT`, or — without a probe — the process being alive for 1 s.

use std::time::Duration;

use hub_http::{ErrorKind, Method, StatusCode};

use super::http::{self, io_reason};
use super::spec::Readiness;

/// How long a service without a probe must stay alive to count as ready.
pub const ALIVE_FOR: Duration = Duration::from_secs(1);

/// Why one probe failed. The message is short (it follows `last:` in a readiness report):
/// the HTTP status (`503`) or why the connection failed.
#[derive(Debug, thiserror::Error)]
pub enum ProbeFailure {
    /// No probe, and the process has not been alive for [`ALIVE_FOR`] yet.
    #[error("alive for {} ms", .0.as_millis())]
    AliveFor(Duration),
    /// A probe needs the config's port, and it has none.
    #[error("the config has no port")]
    NoPort,
    /// The probe client cannot be built.
    #[error("{0}")]
    Client(#[source] ErrorKind),
    /// No HTTP response in time.
    #[error("no response within {} ms", .0.as_millis())]
    NoResponse(Duration),
    /// The HTTP connection failed: why ("connection refused", not the whole
    /// "http://…: cannot connect: …").
    #[error("{0}")]
    Connect(String),
    /// The HTTP request failed otherwise.
    #[error("{0}")]
    Request(#[source] ErrorKind),
    /// The HTTP status is not a success.
    #[error("{}", .0.as_u16())]
    Status(StatusCode),
    /// The TCP connection failed.
    #[error("{}", io_reason(.0))]
    Tcp(#[source] std::io::Error),
    /// No TCP connection in time.
    #[error("no connection within {} ms", .0.as_millis())]
    NoConnection(Duration),
}

/// What is probed, for messages: `http http://127.0.0.1:8080/healthz`, `tcp 127.0.0.1:8080`,
/// `process alive for 1 s`.
pub fn describe(readiness: Option<&Readiness>, port: Option<u16>) -> String {
    let port = port.map(|p| p.to_string()).unwrap_or_else(|| "?".into());
    match readiness {
        Some(Readiness::Http(path)) => format!("http http://127.0.0.1:{port}{path}"),
        Some(Readiness::Tcp(_)) => format!("tcp 127.0.0.1:{port}"),
        None => "process alive for 1 s".to_string(),
    }
}

/// One probe within `timeout`. `alive_for` is how long the process has been running. The
/// error is short: the HTTP status (`503`) or why the connection failed.
pub async fn probe_once(
    readiness: Option<&Readiness>,
    port: Option<u16>,
    alive_for: Duration,
    timeout: Duration,
) -> Result<(), ProbeFailure> {
    let readiness = match readiness {
        None if alive_for >= ALIVE_FOR => return Ok(()),
        None => return Err(ProbeFailure::AliveFor(alive_for)),
        Some(r) => r,
    };
    let Some(port) = port else {
        return Err(ProbeFailure::NoPort);
    };
    match readiness {
        Readiness::Http(path) => {
            let url = format!("http://127.0.0.1:{port}{path}");
            let client = http::probes().map_err(|e| ProbeFailure::Client(e.clone()))?;
            let response = tokio::time::timeout(timeout, client.send(Method::GET, &url, None))
                .await
                .map_err(|_| ProbeFailure::NoResponse(timeout))?
                .map_err(|e| match e.kind {
                    ErrorKind::Connect(reason) => ProbeFailure::Connect(reason),
                    other => ProbeFailure::Request(other),
                })?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(ProbeFailure::Status(status))
            }
        }
        Readiness::Tcp(_) => {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(("127.0.0.1", port)))
                .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(ProbeFailure::Tcp(e)),
                Err(_) => Err(ProbeFailure::NoConnection(timeout)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: Duration = Duration::from_millis(500);

    #[tokio::test]
    async fn tcp_http_and_alive_probes() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap().port();
        let tcp = Readiness::Tcp(true);
        assert!(probe_once(Some(&tcp), Some(open), Duration::ZERO, T)
            .await
            .is_ok());
        drop(listener);
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let refused = probe_once(Some(&tcp), Some(closed), Duration::ZERO, T)
            .await
            .unwrap_err();
        assert!(
            matches!(&refused, ProbeFailure::Tcp(e) if e.kind() == std::io::ErrorKind::ConnectionRefused),
            "{refused:?}"
        );
        assert_eq!(refused.to_string(), "connection refused");
        let http = Readiness::Http("/healthz".into());
        let refused = probe_once(Some(&http), Some(closed), Duration::ZERO, T)
            .await
            .unwrap_err();
        assert!(matches!(&refused, ProbeFailure::Connect(_)), "{refused:?}");
        assert_eq!(refused.to_string(), "connection refused");
        let no_port = probe_once(Some(&http), None, Duration::ZERO, T).await;
        assert!(matches!(no_port, Err(ProbeFailure::NoPort)), "{no_port:?}");
        assert_eq!(ProbeFailure::NoPort.to_string(), "the config has no port");
        assert!(matches!(
            probe_once(None, None, Duration::from_millis(200), T).await,
            Err(ProbeFailure::AliveFor(_))
        ));
        assert!(probe_once(None, None, ALIVE_FOR, T).await.is_ok());
        assert_eq!(
            describe(Some(&http), Some(8080)),
            "http http://127.0.0.1:8080/healthz"
        );
        assert_eq!(describe(Some(&tcp), Some(8080)), "tcp 127.0.0.1:8080");
        assert_eq!(describe(None, None), "process alive for 1 s");
    }
}

//! Readiness probes (one attempt each): `GET http://127.0.0.1:PORT/path` answering 2xx
//! (through the agent's long-lived probe client: direct, redirects not followed), a TCP
//! connection to `127.0.0.1:PORT`, or — without a probe — the process being alive for 1 s.

use std::time::Duration;

use hub_http::{ErrorKind, Method};

use super::http::{self, io_reason};
use super::spec::Readiness;

/// How long a service without a probe must stay alive to count as ready.
pub const ALIVE_FOR: Duration = Duration::from_secs(1);

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
) -> Result<(), String> {
    let readiness = match readiness {
        None if alive_for >= ALIVE_FOR => return Ok(()),
        None => return Err(format!("alive for {} ms", alive_for.as_millis())),
        Some(r) => r,
    };
    let Some(port) = port else {
        return Err("the config has no port".into());
    };
    match readiness {
        Readiness::Http(path) => {
            let url = format!("http://127.0.0.1:{port}{path}");
            let client = http::probes().map_err(|e| e.to_string())?;
            let response = tokio::time::timeout(timeout, client.send(Method::GET, &url, None))
                .await
                .map_err(|_| format!("no response within {} ms", timeout.as_millis()))?
                // "connection refused", not the whole "http://…: cannot connect: …".
                .map_err(|e| match e.kind {
                    ErrorKind::Connect(reason) => reason,
                    other => other.to_string(),
                })?;
            let status = response.status();
            if status.is_success() {
                Ok(())
            } else {
                Err(status.as_u16().to_string())
            }
        }
        Readiness::Tcp(_) => {
            match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(("127.0.0.1", port)))
                .await
            {
                Ok(Ok(_)) => Ok(()),
                Ok(Err(e)) => Err(io_reason(&e)),
                Err(_) => Err(format!("no connection within {} ms", timeout.as_millis())),
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
        assert_eq!(
            probe_once(Some(&tcp), Some(open), Duration::ZERO, T).await,
            Ok(())
        );
        drop(listener);
        let closed = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let refused = probe_once(Some(&tcp), Some(closed), Duration::ZERO, T).await;
        assert_eq!(refused, Err("connection refused".into()));
        let http = Readiness::Http("/healthz".into());
        let refused = probe_once(Some(&http), Some(closed), Duration::ZERO, T).await;
        assert_eq!(refused, Err("connection refused".into()));
        assert_eq!(
            probe_once(Some(&http), None, Duration::ZERO, T).await,
            Err("the config has no port".into())
        );
        assert!(probe_once(None, None, Duration::from_millis(200), T)
            .await
            .is_err());
        assert_eq!(probe_once(None, None, ALIVE_FOR, T).await, Ok(()));
        assert_eq!(
            describe(Some(&http), Some(8080)),
            "http http://127.0.0.1:8080/healthz"
        );
        assert_eq!(describe(Some(&tcp), Some(8080)), "tcp 127.0.0.1:8080");
        assert_eq!(describe(None, None), "process alive for 1 s");
    }
}

//! Canary webhooks (SPEC K5) as the leader calls them: an HTTP(S) `POST` of the JSON
//! payload `{name, namespace, phase, checksum, metadata}` through the hub's outbound client
//! (pooled connections, redirects not followed), success when the status is at most 202,
//! with a timeout per attempt and a number of retries. Only the result goes into the Raft
//! entry — with at most a short excerpt of the answer; the call itself happens once per
//! tick on the leader.

use std::time::Duration;

use hub_http::{Body, HttpClient, Method};

use crate::outbound::MAX_ANSWER_BYTES;

/// Longest timeout a webhook may ask for.
pub const MAX_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// The body sent to a webhook (Flagger's payload), as the engine plans it.
pub use hub_engine::canary::WebhookPayload;

/// What one webhook call came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookOutcome {
    /// Status ≤ 202 on some attempt.
    pub ok: bool,
    /// The last HTTP status, if any answer came.
    pub status: Option<u16>,
    /// Why it failed (naming the URL without credentials), or the start of the answer's
    /// body (at most [`hub_http::EXCERPT_BYTES`]).
    pub message: String,
}

/// Calls `url` with `payload` through `client` up to `1 + retries` times, each within
/// `timeout`; stops at the first success.
pub async fn call(
    client: &HttpClient,
    url: &str,
    payload: &WebhookPayload,
    timeout: Duration,
    retries: u32,
) -> WebhookOutcome {
    let body = match serde_json::to_vec(payload) {
        Ok(b) => b,
        Err(e) => {
            return WebhookOutcome {
                ok: false,
                status: None,
                message: format!("cannot encode the payload: {e}"),
            }
        }
    };
    let timeout = timeout.min(MAX_WEBHOOK_TIMEOUT);
    let mut last = WebhookOutcome {
        ok: false,
        status: None,
        message: "not called".into(),
    };
    for attempt in 0..=retries.min(10) {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 * u64::from(attempt))).await;
        }
        last = match client
            .call(
                Method::POST,
                url,
                Some(Body::json(body.clone())),
                timeout,
                MAX_ANSWER_BYTES,
            )
            .await
        {
            Ok(answer) => {
                let status = answer.status.as_u16();
                WebhookOutcome {
                    ok: status <= 202,
                    status: Some(status),
                    message: format!("HTTP {status}: {}", hub_http::excerpt(&answer.body)),
                }
            }
            Err(e) => WebhookOutcome {
                ok: false,
                status: None,
                // The client's errors never carry credentials.
                message: e.to_string(),
            },
        };
        if last.ok {
            break;
        }
    }
    last
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use std::collections::BTreeMap;

    use super::*;

    /// Answers with `statuses` in turn (the last one repeats); records the bodies.
    async fn server(
        statuses: Vec<u16>,
    ) -> (String, Arc<std::sync::Mutex<Vec<String>>>, Arc<AtomicUsize>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/hook", l.local_addr().unwrap());
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let calls = Arc::new(AtomicUsize::new(0));
        let (b, c) = (bodies.clone(), calls.clone());
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let n = c.fetch_add(1, Ordering::SeqCst);
                let status = *statuses.get(n).or(statuses.last()).unwrap();
                let mut buf = vec![0u8; 8192];
                let mut got = 0;
                // Read until the body (after the blank line) is complete.
                loop {
                    let k = s.read(&mut buf[got..]).await.unwrap_or(0);
                    if k == 0 {
                        break;
                    }
                    got += k;
                    let text = String::from_utf8_lossy(&buf[..got]).to_string();
                    if let Some((head, body)) = text.split_once("\r\n\r\n") {
                        let len: usize = head
                            .lines()
                            .find_map(|l| {
                                l.to_ascii_lowercase()
                                    .strip_prefix("content-length: ")
                                    .map(|v| v.trim().parse().unwrap_or(0))
                            })
                            .unwrap_or(0);
                        if body.len() >= len {
                            b.lock().unwrap().push(body.to_string());
                            break;
                        }
                    }
                }
                let reply = format!(
                    "HTTP/1.1 {status} X\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                );
                let _ = s.write_all(reply.as_bytes()).await;
            }
        });
        (url, bodies, calls)
    }

    fn client() -> HttpClient {
        crate::outbound::Outbound::new(hub_http::DenyList::none(), None)
            .unwrap()
            .calls()
            .clone()
    }

    fn payload() -> WebhookPayload {
        WebhookPayload {
            name: "demo".into(),
            namespace: "prod".into(),
            phase: "Progressing".into(),
            checksum: "abc".into(),
            metadata: BTreeMap::from([("cmd".to_string(), "hey".to_string())]),
        }
    }

    #[tokio::test]
    async fn success_is_a_status_up_to_202_and_the_payload_is_sent() {
        let (url, bodies, _) = server(vec![202]).await;
        let out = call(&client(), &url, &payload(), Duration::from_secs(5), 0).await;
        assert!(out.ok, "{out:?}");
        let body: serde_json::Value = serde_json::from_str(&bodies.lock().unwrap()[0]).unwrap();
        assert_eq!(body["name"], "demo");
        assert_eq!(body["metadata"]["cmd"], "hey");
        let (url, _, _) = server(vec![203]).await;
        assert!(
            !call(&client(), &url, &payload(), Duration::from_secs(5), 0)
                .await
                .ok
        );
    }

    #[tokio::test]
    async fn retries_until_success_and_reports_unreachable() {
        let (url, _, calls) = server(vec![500, 500, 200]).await;
        let out = call(&client(), &url, &payload(), Duration::from_secs(5), 2).await;
        assert!(out.ok, "{out:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            format!("http://user:secret@{}/", l.local_addr().unwrap())
        };
        let out = call(&client(), &dead, &payload(), Duration::from_secs(1), 1).await;
        assert!(!out.ok && out.status.is_none(), "{out:?}");
        assert!(!out.message.contains("secret"), "{out:?}");
    }

    #[tokio::test]
    async fn https_webhooks_keep_a_short_excerpt_and_reuse_the_connection() {
        use hub_http::local::{LocalCa, LocalServer, Reply};
        let ca = LocalCa::generate("webhook CA").unwrap();
        let handler: hub_http::local::Handler =
            Arc::new(|_| Reply::text(200, format!("accepted {}", "x".repeat(5000))));
        let server = LocalServer::loopback_https(&ca, handler).await.unwrap();
        let client = crate::outbound::test_client_trusting(ca.ca_pem());
        let url = format!("https://{}/hook", server.addr());
        for _ in 0..3 {
            let out = call(&client, &url, &payload(), Duration::from_secs(5), 0).await;
            assert!(out.ok, "{out:?}");
            assert!(out.message.starts_with("HTTP 200: accepted xxx"), "{out:?}");
            let most = "HTTP 200: ".len() + hub_http::EXCERPT_BYTES;
            assert!(out.message.len() <= most, "{}", out.message.len());
        }
        assert_eq!(server.connections(), 1);
        // The system's roots alone do not trust the test CA.
        let out = call(
            &super::tests::client(),
            &url,
            &payload(),
            Duration::from_secs(5),
            0,
        )
        .await;
        assert!(
            out.message.contains("TLS certificate not trusted"),
            "{out:?}"
        );
    }

    #[tokio::test]
    async fn a_denied_webhook_is_refused_without_a_connection() {
        let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let url = format!("http://{}/hook", listener.local_addr().unwrap());
        let outbound =
            crate::outbound::Outbound::new(hub_http::DenyList::parse("127.0.0.0/8").unwrap(), None)
                .unwrap();
        let out = call(
            outbound.calls(),
            &url,
            &payload(),
            Duration::from_secs(5),
            2,
        )
        .await;
        assert!(!out.ok && out.status.is_none(), "{out:?}");
        assert!(
            out.message.contains("in the denied range 127.0.0.0/8"),
            "{out:?}"
        );
        // Nothing ever connected: the accept queue is empty now that the call is over.
        let accepted = futures::FutureExt::now_or_never(listener.accept());
        assert!(accepted.is_none(), "a connection was made");
    }
}

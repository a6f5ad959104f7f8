//! Canary webhooks (SPEC K5) as the leader calls them: an HTTP `POST` of the JSON payload
//! `{name, namespace, phase, checksum, metadata}`, success when the status is at most 202,
//! with a timeout per attempt and a number of retries. Only the result goes into the Raft
//! entry; the call itself happens once per tick on the leader.

use std::time::Duration;

use hyper::Method;

use crate::http;

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
    /// Why it failed, or the start of the answer's body.
    pub message: String,
}

/// Calls `url` with `payload` up to `1 + retries` times, each within `timeout`; stops at the
/// first success.
pub async fn call(
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
        last = match http::request(
            Method::POST,
            url,
            Some(("application/json", body.clone())),
            timeout,
        )
        .await
        {
            Ok((status, answer)) => {
                let text = String::from_utf8_lossy(&answer);
                let text: String = text.chars().take(200).collect();
                WebhookOutcome {
                    ok: status.as_u16() <= 202,
                    status: Some(status.as_u16()),
                    message: format!("HTTP {}: {}", status.as_u16(), text.trim()),
                }
            }
            Err(e) => WebhookOutcome {
                ok: false,
                status: None,
                // `http` never puts credentials in its errors.
                message: e,
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
        let out = call(&url, &payload(), Duration::from_secs(5), 0).await;
        assert!(out.ok, "{out:?}");
        let body: serde_json::Value = serde_json::from_str(&bodies.lock().unwrap()[0]).unwrap();
        assert_eq!(body["name"], "demo");
        assert_eq!(body["metadata"]["cmd"], "hey");
        let (url, _, _) = server(vec![203]).await;
        assert!(!call(&url, &payload(), Duration::from_secs(5), 0).await.ok);
    }

    #[tokio::test]
    async fn retries_until_success_and_reports_unreachable() {
        let (url, _, calls) = server(vec![500, 500, 200]).await;
        let out = call(&url, &payload(), Duration::from_secs(5), 2).await;
        assert!(out.ok, "{out:?}");
        assert_eq!(calls.load(Ordering::SeqCst), 3);
        let dead = {
            let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
            format!("http://user:secret@{}/", l.local_addr().unwrap())
        };
        let out = call(&dead, &payload(), Duration::from_secs(1), 1).await;
        assert!(!out.ok && out.status.is_none(), "{out:?}");
        assert!(!out.message.contains("secret"), "{out:?}");
    }
}

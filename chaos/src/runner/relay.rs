//! Latency for an agent "in another region": a TCP relay per hub node that the agent uses as
//! its hub endpoints, delaying every chunk of bytes by the current delay in each direction
//! (order kept). The `latency` fault raises the delay for a while; at 0 it is a plain relay.
//!
//! A relay rather than `tc netem`: the kernels this runs on may not have `sch_netem` (this
//! project's CI machine has not), and a relay needs neither root nor kernel modules.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// Relays to every hub node, sharing one delay. Each relay port is a slot that follows the
/// members (as a DNS name would): after a membership change slot `i` leads to the `i`-th
/// member (modulo their number).
pub struct DelayRelay {
    delay_ms: Arc<AtomicU64>,
    endpoints: Vec<String>,
    upstreams: Arc<RwLock<Vec<String>>>,
    tasks: Vec<JoinHandle<()>>,
}

impl DelayRelay {
    /// Listens on a free loopback port per upstream (`host:port`).
    pub async fn start(upstreams: &[String]) -> anyhow::Result<DelayRelay> {
        let delay_ms = Arc::new(AtomicU64::new(0));
        let shared = Arc::new(RwLock::new(upstreams.to_vec()));
        let mut endpoints = Vec::new();
        let mut tasks = Vec::new();
        for slot in 0..upstreams.len() {
            let listener = TcpListener::bind("127.0.0.1:0")
                .await
                .context("relay: bind a loopback port")?;
            endpoints.push(listener.local_addr()?.to_string());
            tasks.push(tokio::spawn(accept(
                listener,
                slot,
                shared.clone(),
                delay_ms.clone(),
            )));
        }
        Ok(DelayRelay {
            delay_ms,
            endpoints,
            upstreams: shared,
            tasks,
        })
    }

    /// Points the slots at the current members (new connections only; an empty list is
    /// ignored).
    pub fn set_upstreams(&self, upstreams: &[String]) {
        if !upstreams.is_empty() {
            *self.upstreams.write().unwrap_or_else(|p| p.into_inner()) = upstreams.to_vec();
        }
    }

    /// The relay's addresses, one per upstream, in the same order.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// Sets the one-way delay (applied to bytes read from now on).
    pub fn set_delay(&self, delay: Duration) {
        self.delay_ms
            .store(delay.as_millis() as u64, Ordering::Relaxed);
    }
}

impl Drop for DelayRelay {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

async fn accept(
    listener: TcpListener,
    slot: usize,
    upstreams: Arc<RwLock<Vec<String>>>,
    delay_ms: Arc<AtomicU64>,
) {
    // Connections of this listener; aborted with it.
    let mut conns = tokio::task::JoinSet::new();
    while let Ok((down, _)) = listener.accept().await {
        let upstream = {
            let u = upstreams.read().unwrap_or_else(|p| p.into_inner());
            match u.len() {
                0 => continue,
                n => u[slot % n].clone(),
            }
        };
        let delay_ms = delay_ms.clone();
        conns.spawn(async move {
            let Ok(Ok(up)) =
                tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(&upstream)).await
            else {
                return; // the node is down: the client sees the connection close
            };
            let _ = down.set_nodelay(true);
            let _ = up.set_nodelay(true);
            let (dr, dw) = down.into_split();
            let (ur, uw) = up.into_split();
            tokio::select! {
                _ = pump(dr, uw, delay_ms.clone()) => {}
                _ = pump(ur, dw, delay_ms) => {}
            }
        });
        // Reap finished connections.
        while conns.try_join_next().is_some() {}
    }
}

/// Copies `r` to `w`, each chunk held until `delay` after it was read.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    delay_ms: Arc<AtomicU64>,
) {
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(1024);
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let due =
                        Instant::now() + Duration::from_millis(delay_ms.load(Ordering::Relaxed));
                    if tx.send((due, buf[..n].to_vec())).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let writer = async move {
        while let Some((due, bytes)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            if w.write_all(&bytes).await.is_err() {
                return;
            }
        }
        let _ = w.shutdown().await;
    };
    // The writer drains what was read before the reader saw end of stream.
    let (_, _) = tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> String {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        addr
    }

    async fn round_trip(addr: &str, msg: &[u8]) -> (Vec<u8>, Duration) {
        let mut s = TcpStream::connect(addr).await.unwrap();
        let began = Instant::now();
        s.write_all(msg).await.unwrap();
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got).await.unwrap();
        (got, began.elapsed())
    }

    #[tokio::test]
    async fn relays_in_order_and_delays_both_ways() {
        let relay = DelayRelay::start(&[echo_server().await]).await.unwrap();
        let addr = relay.endpoints()[0].clone();
        let (got, _) = round_trip(&addr, b"hello").await;
        assert_eq!(got, b"hello");

        // Margins wide enough for a loaded 2-core machine.
        relay.set_delay(Duration::from_millis(1_000));
        let msg: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let (got, took) = round_trip(&addr, &msg).await;
        assert_eq!(got, msg, "bytes relayed in order");
        // 1 s out and 1 s back, at least.
        assert!(took >= Duration::from_millis(2_000), "{took:?}");

        relay.set_delay(Duration::ZERO);
        let (_, took) = round_trip(&addr, b"x").await;
        assert!(took < Duration::from_millis(1_000), "{took:?}");
    }

    #[tokio::test]
    async fn a_dead_upstream_closes_the_connection() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let relay = DelayRelay::start(&[format!("127.0.0.1:{port}")])
            .await
            .unwrap();
        let mut s = TcpStream::connect(&relay.endpoints()[0]).await.unwrap();
        let mut buf = [0u8; 1];
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("closed, not hung")
            .unwrap_or(0);
        assert_eq!(n, 0);
    }
}

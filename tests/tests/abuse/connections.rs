//! Connection budgets (issue 51, item 1): a stranger without a certificate cannot spend the
//! connections the cluster's own parties need, on the gRPC listener or the HTTP ones.
//!
//! Before the budgets, 300 idle HTTP/2 connections without a certificate, answering the
//! server's keep-alive pings, filled a leader started with `--max-connections 300`: the admin
//! got UNAVAILABLE from it and every write through the other nodes failed, because a follower
//! could not open a new connection to the leader; and slow-header clients held every slot of
//! the dashboard and the metrics listener for the connections' whole lifetimes.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hub_tests::metrics::{get, sample};
use hub_tests::{poll_until, Cluster, CONVERGE_TIMEOUT};
use hub_tls::client::ClientMode;
use hub_tls::Identity;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

/// The first bytes of an HTTP/2 connection: the preface and an empty SETTINGS frame.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";

/// A TCP connection to `to` from the loopback address `from` (all of 127/8 is loopback).
async fn tcp_from(from: Ipv4Addr, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::from((from, 0)))?;
    socket.connect(to).await
}

/// The cluster CA's client configuration without a certificate, speaking `alpn`.
fn anonymous_config(c: &Cluster, alpn: &[u8]) -> Arc<ClientConfig> {
    let ClientMode::Anonymous(config) =
        hub_tls::client::anonymous(&c.pki_dir().join("ca.pem")).expect("the cluster CA")
    else {
        panic!("an anonymous client mode")
    };
    let mut config = (*config).clone();
    config.alpn_protocols = vec![alpn.to_vec()];
    Arc::new(config)
}

/// What became of the strangers' connections.
#[derive(Default)]
struct Strangers {
    /// Connections that got through their handshake or failed to.
    tried: AtomicUsize,
    /// Handshakes finished.
    established: AtomicUsize,
    /// How long each connection lived, from its handshake to the server closing it.
    lifetimes: Mutex<Vec<Duration>>,
}

/// A stranger's connection: TLS without a certificate, then HTTP/2's preface; from then on
/// it only acknowledges the server's SETTINGS and answers its keep-alive PINGs, and returns
/// when the server closes the connection.
async fn idle_h2(config: Arc<ClientConfig>, from: Ipv4Addr, to: SocketAddr, seen: Arc<Strangers>) {
    let connected = match tcp_from(from, to).await {
        Ok(tcp) => {
            let name = ServerName::from(to.ip());
            let connector = tokio_rustls::TlsConnector::from(config);
            connector.connect(name, tcp).await.ok()
        }
        Err(_) => None,
    };
    if connected.is_some() {
        seen.established.fetch_add(1, Ordering::Relaxed);
    }
    seen.tried.fetch_add(1, Ordering::Relaxed);
    let Some(mut tls) = connected else {
        return;
    };
    let opened = Instant::now();
    if tls.write_all(H2_PREFACE).await.is_ok() {
        answer_frames(&mut tls).await;
    }
    seen.lifetimes.lock().unwrap().push(opened.elapsed());
}

/// Reads HTTP/2 frames until the connection ends, acknowledging SETTINGS and PINGs.
async fn answer_frames<S: AsyncReadExt + AsyncWriteExt + Unpin>(s: &mut S) {
    loop {
        let mut head = [0u8; 9];
        if s.read_exact(&mut head).await.is_err() {
            return;
        }
        let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
        let (kind, flags) = (head[3], head[4]);
        let mut payload = vec![0u8; len];
        if s.read_exact(&mut payload).await.is_err() {
            return;
        }
        let reply: Option<Vec<u8>> = match (kind, flags & 1) {
            // SETTINGS: acknowledge.
            (4, 0) => Some(vec![0, 0, 0, 4, 1, 0, 0, 0, 0]),
            // PING: the same payload back, acknowledged.
            (6, 0) => Some([&[0, 0, 8, 6, 1, 0, 0, 0, 0][..], &payload].concat()),
            _ => None,
        };
        if let Some(r) = reply {
            if s.write_all(&r).await.is_err() {
                return;
            }
        }
    }
}

/// The leader's gRPC address.
fn leader_addr(c: &Cluster) -> (u64, SocketAddr) {
    let id = c.leader_id();
    let addr = c.node(id).addr.parse().expect("a socket address");
    (id, addr)
}

#[test]
fn a_stranger_cannot_spend_the_connections_of_nodes_operators_or_token_holders() {
    let mut c = Cluster::up(3, "--max-connections 300");
    let (leader, addr) = leader_addr(&c);
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let config = anonymous_config(&c, b"h2");
    let seen = Arc::new(Strangers::default());
    // The review's 300 from one address, then 20 more addresses with 30 each.
    let mut sources = vec![Ipv4Addr::new(127, 0, 0, 1); 300];
    for i in 1..=20 {
        sources.extend(std::iter::repeat_n(Ipv4Addr::new(127, 0, 1, i), 30));
    }
    let started = Instant::now();
    let strangers = sources.len();
    for from in sources {
        rt.spawn(idle_h2(config.clone(), from, addr, seen.clone()));
    }
    poll_until(Duration::from_secs(60), || {
        (seen.tried.load(Ordering::Relaxed) == strangers).then_some(())
    })
    .expect("the strangers connect");
    assert!(seen.established.load(Ordering::Relaxed) >= 300);

    // The admin reads from the leader.
    let out = c.hubctl_at(&addr.to_string(), &["env", "list"]);
    assert!(out.success(), "the admin at the leader: {}", out.describe());
    // A follower restarted now must open new connections to the leader; writes through it
    // commit.
    let follower = c
        .nodes()
        .iter()
        .map(|n| n.id)
        .find(|&id| id != leader)
        .unwrap();
    c.kill9(follower);
    c.restart(follower);
    let through = c.node(follower).addr;
    let out = c.hubctl_at(&through, &["env", "create", "during-the-strangers"]);
    assert!(
        out.success(),
        "a write through node {follower}: {}",
        out.describe()
    );
    // A token holder (no certificate) is admitted by its token.
    let token = c.hubctl(&[
        "token", "create", "--name", "robot", "--role", "viewer", "-o", "json",
    ]);
    assert!(token.success(), "{}", token.describe());
    let secret = token.json()["secret"]
        .as_str()
        .expect("the secret")
        .to_string();
    let out = c.hubctl_with_token(&secret, &addr.to_string(), &["env", "list"]);
    assert!(out.success(), "the token holder: {}", out.describe());
    assert_eq!(c.leader_id(), leader, "the leader did not change");

    // Every stranger's connection is closed: the newest took the place of the oldest, and
    // the rest went at the admission deadline (10 s), pings or not.
    let closed = poll_until(Duration::from_secs(60), || {
        let lifetimes = seen.lifetimes.lock().unwrap();
        (lifetimes.len() == seen.established.load(Ordering::Relaxed)).then(|| lifetimes.clone())
    })
    .unwrap_or_else(|| {
        panic!(
            "{} of {} stranger connections still open {:?} after they started",
            seen.established.load(Ordering::Relaxed) - seen.lifetimes.lock().unwrap().len(),
            seen.established.load(Ordering::Relaxed),
            started.elapsed()
        )
    });
    let longest = closed.iter().max().copied().unwrap_or_default();
    assert!(
        longest < Duration::from_secs(20),
        "a stranger's connection lived {longest:?}"
    );

    // A client that connects and never starts its handshake is closed at the handshake
    // deadline (5 s).
    let silent_for = rt.block_on(async {
        let mut s = tcp_from(Ipv4Addr::new(127, 0, 2, 1), addr)
            .await
            .expect("connect");
        let t = Instant::now();
        let mut buf = [0u8; 64];
        let _ = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf)).await;
        t.elapsed()
    });
    assert!(
        silent_for < Duration::from_secs(9),
        "a silent client was kept {silent_for:?}"
    );

    let out = c.create_env(0, "after-the-strangers");
    assert!(out.success(), "{}", out.describe());
    c.wait_converged(CONVERGE_TIMEOUT);
}

/// A stranger's HTTP/1.1 request over TLS without a certificate, one header byte per
/// `pause`; returns how long the server kept the connection.
async fn slow_header(
    config: Arc<ClientConfig>,
    from: Ipv4Addr,
    to: SocketAddr,
    pause: Duration,
    tried: Arc<AtomicUsize>,
) -> Option<Duration> {
    let connected = match tcp_from(from, to).await {
        Ok(tcp) => tokio_rustls::TlsConnector::from(config)
            .connect(ServerName::from(to.ip()), tcp)
            .await
            .ok(),
        Err(_) => None,
    };
    tried.fetch_add(1, Ordering::Relaxed);
    let mut tls = connected?;
    let opened = Instant::now();
    let request = b"GET /metrics HTTP/1.1\r\nhost: x\r\nx-slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    for b in request {
        if tls.write_all(&[*b]).await.is_err() {
            break;
        }
        tokio::time::sleep(pause).await;
    }
    Some(opened.elapsed())
}

#[test]
fn slow_clients_do_not_hold_the_dashboard_or_the_metrics_listener() {
    let c = Cluster::up(3, "--metrics-listen 127.0.0.1:0 --http-listen 127.0.0.1:0");
    let metrics: SocketAddr = c.logged_addrs("metrics at /metrics")[0].1.parse().unwrap();
    let dashboard: SocketAddr = c.logged_addrs("dashboard at /")[0].1.parse().unwrap();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let config = anonymous_config(&c, b"http/1.1");
    // The review's numbers: 64 on the metrics listener and 256 on the dashboard, one byte a
    // second, from one address; the same again from eight more.
    let mut held = Vec::new();
    let tried = Arc::new(AtomicUsize::new(0));
    for (to, n) in [(metrics, 64), (dashboard, 256)] {
        for source in 1..=9u8 {
            let from = Ipv4Addr::new(127, 0, 3, source);
            let n = if source == 1 { n } else { n / 8 };
            for _ in 0..n {
                let slow = slow_header(
                    config.clone(),
                    from,
                    to,
                    Duration::from_secs(1),
                    tried.clone(),
                );
                held.push(rt.spawn(slow));
            }
        }
    }
    poll_until(Duration::from_secs(60), || {
        (tried.load(Ordering::Relaxed) == held.len()).then_some(())
    })
    .expect("the slow clients connect");
    // Valid requests are answered while they trickle.
    let admin = Identity::Operator(hub_tests::tls::ADMIN.into());
    for _ in 0..5 {
        let (status, _, body) = rt.block_on(async {
            let ch = c
                .channel_as(&admin, &metrics.to_string())
                .await
                .expect("connect");
            get(ch, &metrics.to_string(), None).await
        });
        assert_eq!(status, 200, "{body}");
        assert!(sample(&body, "hub_raft_is_leader").is_some());
        std::thread::sleep(Duration::from_millis(500));
    }
    let page = rt.block_on(async {
        let ch = c
            .channel_as(&admin, &dashboard.to_string())
            .await
            .expect("connect");
        let req = http::Request::get(format!("https://{dashboard}/"))
            .body(tonic::body::Body::empty())
            .unwrap();
        tower::ServiceExt::oneshot(ch, req)
            .await
            .map(|r| r.status().as_u16())
    });
    assert_eq!(page.ok(), Some(200), "the dashboard's page");
    // Each slow client was cut off well before its request was done (about 160 s).
    let kept: Vec<Duration> = rt.block_on(async {
        let mut kept = Vec::new();
        for h in held {
            if let Ok(Some(d)) = h.await {
                kept.push(d);
            }
        }
        kept
    });
    assert!(!kept.is_empty());
    let longest = kept.iter().max().copied().unwrap_or_default();
    assert!(
        longest < Duration::from_secs(20),
        "a slow client was kept {longest:?}"
    );
}

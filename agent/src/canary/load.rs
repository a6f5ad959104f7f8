//! The built-in load tester's `hey` loads (issue 52 item 4; docs/CANARY.md "The built-in
//! load tester"): what Flagger's `flagger-loadtester` does for a canary's `hey` webhooks, run
//! natively by the agent of the canary's environment while the hub says the canary is
//! progressing.
//!
//! Each load is a set of `workers` tasks sending HTTP/1.1 requests over kept-alive
//! connections, each at most `rate` requests per second; with `-z` the round lasts that long
//! and starts again while the load is wanted (Flagger's tester restarts it at the next
//! rollout webhook), with `-n` it sends that many requests once. A host naming `<svc>`,
//! `<svc>-primary` or `<svc>-canary` (with any `.<namespace>…`) is the proxy's stable
//! address on the URL's port; any other host is looked up. Failures are counted, never
//! logged per request: one line per round says how it went.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hub_wire::canary_addresses::StableAddresses;
use hyper::body::Bytes;
use hyper::{Request, Uri};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{info, warn};

use crate::plan::LoadSpec;

/// Most workers of one load (the hub refuses more).
const MAX_WORKERS: u32 = 256;
/// Longest a connection attempt may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The shortest time between the starts of two rounds of one load.
const MIN_ROUND: Duration = Duration::from_secs(1);
/// Pause of a worker after a failed connection, so a target that is down is not spun on.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// The loads of one canary that run.
#[derive(Debug, Default)]
pub struct Loads {
    running: BTreeMap<String, (LoadSpec, JoinHandle<()>)>,
}

impl Loads {
    /// Makes exactly `wanted` run for the canary of `service` on `port`: a load that runs
    /// with the same spec keeps running, any other is stopped. Returns a line per change.
    pub fn set(&mut self, service: &str, port: u16, wanted: &[LoadSpec]) -> Vec<String> {
        let mut out = Vec::new();
        let keep: BTreeMap<&str, &LoadSpec> = wanted.iter().map(|l| (l.name.as_str(), l)).collect();
        self.running.retain(|name, (spec, task)| {
            let same = keep.get(name.as_str()) == Some(&&*spec);
            if !same {
                task.abort();
                out.push(format!("load test {name} stopped"));
            }
            same
        });
        for (name, spec) in keep {
            if self.running.contains_key(name) {
                continue;
            }
            let task = tokio::spawn(run(spec.clone(), service.to_string(), port));
            out.push(format!(
                "load test {name} started: {} {}",
                spec.method, spec.url
            ));
            self.running.insert(name.to_string(), (spec.clone(), task));
        }
        out
    }

    /// Stops every load.
    pub fn stop_all(&mut self) {
        for (_, (_, task)) in std::mem::take(&mut self.running) {
            task.abort();
        }
    }

    /// The names of the loads that run.
    #[cfg(test)]
    pub fn names(&self) -> Vec<String> {
        self.running.keys().cloned().collect()
    }
}

impl Drop for Loads {
    fn drop(&mut self) {
        self.stop_all();
    }
}

/// Where a load's requests go.
#[derive(Debug, Clone)]
struct Target {
    uri: Uri,
    addr: SocketAddr,
    host_header: String,
}

/// Counts of one round.
#[derive(Debug, Default)]
struct Tally {
    ok: AtomicU64,
    http_errors: AtomicU64,
    failed: AtomicU64,
}

/// Runs `load` until aborted (with `-z`) or once (with `-n`).
async fn run(load: LoadSpec, service: String, port: u16) {
    let target = match target(&load, &service, port).await {
        Ok(t) => t,
        Err(e) => {
            warn!(load = %load.name, url = %load.url, error = %e, "load test cannot start");
            return;
        }
    };
    info!(load = %load.name, url = %load.url, to = %target.addr, workers = load.workers,
          "load test running");
    loop {
        let tally = Arc::new(Tally::default());
        let began = Instant::now();
        round(&load, &target, &tally).await;
        info!(
            load = %load.name,
            ok = tally.ok.load(Ordering::Relaxed),
            http_errors = tally.http_errors.load(Ordering::Relaxed),
            failed = tally.failed.load(Ordering::Relaxed),
            elapsed_ms = began.elapsed().as_millis() as u64,
            "load test round done"
        );
        if load.duration_ms <= 0 {
            return;
        }
        // A round starts at most once a second, so a tiny `-z` neither spins nor floods the
        // log with round lines.
        tokio::time::sleep_until(began + MIN_ROUND).await;
    }
}

/// Resolves the URL of `load`.
async fn target(load: &LoadSpec, service: &str, port: u16) -> Result<Target, String> {
    let uri: Uri = load.url.parse().map_err(|e| format!("{e}"))?;
    if uri.scheme_str() != Some("http") {
        return Err("only http:// URLs are requested by the built-in load tester".into());
    }
    let host = uri.host().ok_or("the URL has no host")?.to_string();
    let url_port = uri.port_u16().unwrap_or(80);
    let addr = match StableAddresses::resolve(service, port, &host) {
        Some(ip) => SocketAddr::from((ip, url_port)),
        None => tokio::net::lookup_host((host.as_str(), url_port))
            .await
            .map_err(|e| format!("{host}: {e}"))?
            .next()
            .ok_or_else(|| format!("{host}: no address"))?,
    };
    let host_header = if load.host.is_empty() {
        uri.authority().map(|a| a.to_string()).unwrap_or(host)
    } else {
        load.host.clone()
    };
    Ok(Target {
        uri,
        addr,
        host_header,
    })
}

/// One round: every worker until the duration ends or the requests are sent.
async fn round(load: &LoadSpec, target: &Target, tally: &Arc<Tally>) {
    let workers = load.workers.clamp(1, MAX_WORKERS);
    let deadline = (load.duration_ms > 0)
        .then(|| Instant::now() + Duration::from_millis(load.duration_ms as u64));
    let per_worker = (load.requests / u64::from(workers)).max(1);
    let tasks: Vec<JoinHandle<()>> = (0..workers)
        .map(|_| {
            let (load, target, tally) = (load.clone(), target.clone(), tally.clone());
            tokio::spawn(async move { worker(&load, &target, &tally, deadline, per_worker).await })
        })
        .collect();
    for t in tasks {
        let _ = t.await;
    }
}

/// One worker: requests one after another on a kept-alive connection, paced to the rate.
async fn worker(
    load: &LoadSpec,
    target: &Target,
    tally: &Tally,
    deadline: Option<Instant>,
    requests: u64,
) {
    let pace = (load.rate_milli_per_worker > 0)
        .then(|| Duration::from_micros(1_000_000_000 / load.rate_milli_per_worker));
    let timeout = Duration::from_millis(load.timeout_ms.max(1) as u64);
    let mut sender: Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> = None;
    let mut sent = 0u64;
    let mut next = Instant::now();
    loop {
        let done = match deadline {
            Some(d) => Instant::now() >= d,
            None => sent >= requests,
        };
        if done {
            return;
        }
        if let Some(p) = pace {
            tokio::time::sleep_until(next).await;
            next += p;
        }
        sent += 1;
        if sender.as_ref().is_none_or(|s| s.is_closed()) {
            sender = connect(target.addr).await;
            if sender.is_none() {
                tally.failed.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(RECONNECT_PAUSE).await;
                continue;
            }
        }
        let Some(s) = sender.as_mut() else { continue };
        match tokio::time::timeout(timeout, send(s, load, target)).await {
            Ok(Ok(status)) if status < 500 => tally.ok.fetch_add(1, Ordering::Relaxed),
            Ok(Ok(_)) => tally.http_errors.fetch_add(1, Ordering::Relaxed),
            Ok(Err(())) | Err(_) => {
                sender = None;
                tally.failed.fetch_add(1, Ordering::Relaxed)
            }
        };
    }
}

async fn connect(addr: SocketAddr) -> Option<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr))
        .await
        .ok()?
        .ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Some(sender)
}

/// Sends one request and reads its answer; the status, or `Err` on a transport failure.
async fn send(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    load: &LoadSpec,
    target: &Target,
) -> Result<u16, ()> {
    sender.ready().await.map_err(|_| ())?;
    let path = target
        .uri
        .path_and_query()
        .map(|p| p.as_str())
        .unwrap_or("/");
    let mut req = Request::builder()
        .method(load.method.as_str())
        .uri(path)
        .header(hyper::header::HOST, target.host_header.as_str())
        .header(hyper::header::USER_AGENT, "hub-agent-loadtester");
    for (k, v) in &load.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(Full::new(Bytes::from(load.body.clone())))
        .map_err(|_| ())?;
    let answer = sender.send_request(req).await.map_err(|_| ())?;
    let status = answer.status().as_u16();
    answer.into_body().collect().await.map_err(|_| ())?;
    Ok(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// A server on `addr` counting the requests it answers.
    async fn counting_server(addr: SocketAddr) -> (SocketAddr, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        let bound = listener.local_addr().expect("addr");
        let count = Arc::new(AtomicUsize::new(0));
        let c = count.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let c = c.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |_req| {
                        c.fetch_add(1, Ordering::Relaxed);
                        async {
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(Full::new(
                                Bytes::from("ok"),
                            )))
                        }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        (bound, count)
    }

    fn load(url: String) -> LoadSpec {
        LoadSpec {
            name: "load-test".into(),
            url,
            duration_ms: 0,
            requests: 20,
            workers: 2,
            rate_milli_per_worker: 0,
            method: "GET".into(),
            ..LoadSpec::default()
        }
    }

    #[tokio::test]
    async fn a_canary_host_means_the_stable_canary_address() {
        let canary = StableAddresses::of(0).canary;
        let (addr, count) = counting_server(SocketAddr::from((*canary.ip(), 0))).await;
        let l = load(format!("http://web-canary.prod:{}/", addr.port()));
        run(l, "web".into(), addr.port()).await;
        assert_eq!(count.load(Ordering::Relaxed), 20);
    }

    #[tokio::test]
    async fn a_paced_load_keeps_its_rate() {
        let (addr, count) = counting_server("127.0.0.1:0".parse().unwrap()).await;
        let mut l = load(format!("http://127.0.0.1:{}/", addr.port()));
        l.duration_ms = 1000;
        l.rate_milli_per_worker = 10_000;
        let t = target(&l, "web", addr.port()).await.expect("target");
        let tally = Arc::new(Tally::default());
        round(&l, &t, &tally).await;
        // Two workers at 10/s for 1 s: about 20 (the first of each at once).
        let n = count.load(Ordering::Relaxed);
        assert!((15..=24).contains(&n), "{n}");
    }

    #[tokio::test]
    async fn set_starts_changes_and_stops_loads() {
        let (addr, _count) = counting_server("127.0.0.1:0".parse().unwrap()).await;
        let mut l = load(format!("http://127.0.0.1:{}/", addr.port()));
        l.duration_ms = 60_000;
        let mut loads = Loads::default();
        assert_eq!(loads.set("web", 1, std::slice::from_ref(&l)).len(), 1);
        assert!(loads.set("web", 1, std::slice::from_ref(&l)).is_empty());
        l.workers = 3;
        assert_eq!(loads.set("web", 1, std::slice::from_ref(&l)).len(), 2);
        assert_eq!(loads.names(), vec!["load-test".to_string()]);
        assert_eq!(loads.set("web", 1, &[]).len(), 1);
        assert!(loads.names().is_empty());
    }
}

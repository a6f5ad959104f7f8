//! The leader's artifact checker (SPEC C9): a cache of artifact existence checks that never
//! blocks its caller.
//!
//! [`ArtifactChecker::status`] answers from the cache at once and, when the cached answer is
//! missing or older than the TTL, schedules a background probe (at most one in flight per
//! location, at most `max_in_flight` in all). Each completed probe bumps the generation
//! counter of [`ArtifactChecker::subscribe`], so the caller can re-evaluate its plans.
//!
//! Probes:
//! - [`ArtifactLocation::File`]: `metadata` of the path; a regular file is
//!   [`Availability::Available`].
//! - [`ArtifactLocation::Http`]: an HTTP `HEAD` through the hub's outbound client for the
//!   location's trust ([`crate::outbound::Outbound::registry`]: system roots, the registry's
//!   CA bundle, or no verification; pooled connections; redirects followed up to 5 hops;
//!   proxies and the outbound deny list honoured). 2xx is available; any other status, a
//!   connection or TLS error (an untrusted certificate is named as such) or the timeout is
//!   [`Availability::Unavailable`]. `user:password@` in the URL is sent as HTTP Basic
//!   authentication, never to another host after a redirect, and never logged nor put in a
//!   reason. A location names its CA bundle by SHA-256; the bundle's text comes from the
//!   replicated registries ([`CaSource`]).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use hub_engine::artifact::{ArtifactLocation, Availability, TlsTrust};
use hub_http::{ErrorKind, Method};
use tokio::runtime::Handle;
use tokio::sync::{watch, Semaphore};

use crate::outbound::Outbound;

/// The PEM text of the CA bundle with a SHA-256 (lowercase hex), from the replicated
/// registries; `None` when no registry has it (any more).
pub type CaSource = Arc<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Entries nobody asked about for this long (and at least ten TTLs) are dropped.
const MIN_IDLE_EVICTION: Duration = Duration::from_secs(600);

/// A cache of artifact existence checks, refreshed in the background. Cheap to clone: clones
/// share the cache.
#[derive(Clone)]
pub struct ArtifactChecker {
    inner: Arc<Inner>,
}

struct Inner {
    ttl: Duration,
    timeout: Duration,
    outbound: Arc<Outbound>,
    ca_source: CaSource,
    /// The runtime probes run on: the one current at [`ArtifactChecker::new`], if any.
    runtime: Option<Handle>,
    permits: Arc<Semaphore>,
    cache: Mutex<Cache>,
    generation: watch::Sender<u64>,
}

struct Cache {
    entries: HashMap<ArtifactLocation, Entry>,
    /// Bumped by [`ArtifactChecker::clear`]: results of probes started before are dropped.
    epoch: u64,
    last_sweep: Instant,
}

struct Entry {
    /// The last result and when it was obtained.
    result: Option<(Availability, Instant)>,
    /// A probe is scheduled or running.
    probing: bool,
    last_asked: Instant,
}

impl fmt::Debug for ArtifactChecker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ArtifactChecker")
            .field("ttl", &self.inner.ttl)
            .field("timeout", &self.inner.timeout)
            .field("entries", &self.inner.lock().entries.len())
            .finish_non_exhaustive()
    }
}

impl ArtifactChecker {
    /// `ttl`: how long a result is trusted; `timeout`: per probe (connect, TLS, request,
    /// redirects and response head); `max_in_flight`: concurrent probes (e.g. 16; 0 counts
    /// as 1); `outbound`: the hub's clients; `ca_source`: the registries' CA bundles.
    ///
    /// Probes run on the tokio runtime current here; created outside a runtime, the checker
    /// uses the runtime current at each [`ArtifactChecker::status`] call instead.
    pub fn new(
        ttl: Duration,
        timeout: Duration,
        max_in_flight: usize,
        outbound: Arc<Outbound>,
        ca_source: CaSource,
    ) -> Self {
        let (generation, _) = watch::channel(0);
        Self {
            inner: Arc::new(Inner {
                ttl,
                timeout,
                outbound,
                ca_source,
                runtime: Handle::try_current().ok(),
                permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
                cache: Mutex::new(Cache {
                    entries: HashMap::new(),
                    epoch: 0,
                    last_sweep: Instant::now(),
                }),
                generation,
            }),
        }
    }

    /// The cached availability of `location` if fresh; otherwise the stale cached value (or
    /// `None` if never checked), after scheduling a background probe (at most one in flight
    /// per location). Never awaits; callable from any thread, inside or outside the runtime.
    pub fn status(&self, location: &ArtifactLocation) -> Option<Availability> {
        let now = Instant::now();
        let (cached, epoch, runtime) = {
            let mut cache = self.inner.lock();
            self.inner.sweep(&mut cache, now);
            let epoch = cache.epoch;
            let entry = cache
                .entries
                .entry(location.clone())
                .or_insert_with(|| Entry {
                    result: None,
                    probing: false,
                    last_asked: now,
                });
            entry.last_asked = now;
            let cached = entry.result.as_ref().map(|(value, _)| value.clone());
            let fresh = entry
                .result
                .as_ref()
                .is_some_and(|(_, at)| now.saturating_duration_since(*at) < self.inner.ttl);
            if fresh || entry.probing {
                return cached;
            }
            let Some(runtime) = self.inner.runtime() else {
                tracing::warn!(
                    location = %location,
                    "no tokio runtime to probe the artifact on; answering from the cache"
                );
                return cached;
            };
            entry.probing = true;
            (cached, epoch, runtime)
        };
        runtime.spawn(probe_task(self.inner.clone(), location.clone(), epoch));
        cached
    }

    /// How long a result is trusted.
    pub fn ttl(&self) -> Duration {
        self.inner.ttl
    }

    /// A generation counter, incremented each time a probe's result is recorded. Await
    /// `changed()` on it to learn when to re-evaluate.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.generation.subscribe()
    }

    /// Drops every cached entry (e.g. on losing leadership). Probes in flight finish but their
    /// results are discarded.
    pub fn clear(&self) {
        let mut cache = self.inner.lock();
        cache.entries.clear();
        cache.epoch = cache.epoch.wrapping_add(1);
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, Cache> {
        // The cache stays consistent even if a holder panicked: every update is one
        // assignment.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn runtime(&self) -> Option<Handle> {
        self.runtime.clone().or_else(|| Handle::try_current().ok())
    }

    /// Drops entries nobody asked about for a long time (not those being probed).
    fn sweep(&self, cache: &mut Cache, now: Instant) {
        let idle = self.ttl.saturating_mul(10).max(MIN_IDLE_EVICTION);
        if now.saturating_duration_since(cache.last_sweep) < idle / 10 {
            return;
        }
        cache.last_sweep = now;
        cache.entries.retain(|_, entry| {
            entry.probing || now.saturating_duration_since(entry.last_asked) < idle
        });
    }

    /// Stores a probe's result unless the cache was cleared since it started; returns the
    /// previous result, or `None` when nothing was stored.
    fn record(
        &self,
        location: &ArtifactLocation,
        epoch: u64,
        value: Availability,
    ) -> Option<Option<Availability>> {
        let mut cache = self.lock();
        if cache.epoch != epoch {
            return None;
        }
        let now = Instant::now();
        let entry = cache.entries.entry(location.clone()).or_insert(Entry {
            result: None,
            probing: false,
            last_asked: now,
        });
        entry.probing = false;
        let previous = entry.result.replace((value, now)).map(|(value, _)| value);
        Some(previous)
    }

    /// Forgets that a probe is in flight (the probe was dropped without a result, e.g. at
    /// runtime shutdown), so the next `status` schedules another.
    fn abandon(&self, location: &ArtifactLocation, epoch: u64) {
        let mut cache = self.lock();
        if cache.epoch == epoch {
            if let Some(entry) = cache.entries.get_mut(location) {
                entry.probing = false;
            }
        }
    }
}

/// Clears the entry's `probing` flag if the probe task ends without recording a result.
struct ProbeGuard {
    inner: Arc<Inner>,
    location: ArtifactLocation,
    epoch: u64,
    done: bool,
}

impl Drop for ProbeGuard {
    fn drop(&mut self) {
        if !self.done {
            self.inner.abandon(&self.location, self.epoch);
        }
    }
}

async fn probe_task(inner: Arc<Inner>, location: ArtifactLocation, epoch: u64) {
    let mut guard = ProbeGuard {
        inner: inner.clone(),
        location,
        epoch,
        done: false,
    };
    let location = &guard.location;
    // The semaphore is never closed, so acquiring fails only if it were; probe anyway then.
    let permit = inner.permits.clone().acquire_owned().await.ok();
    let started = Instant::now();
    let value = match tokio::time::timeout(inner.timeout, probe(&inner, location)).await {
        Ok(value) => value,
        Err(_) => Availability::Unavailable {
            reason: match location {
                ArtifactLocation::Http { .. } => {
                    format!("HEAD {location}: timed out after {:?}", inner.timeout)
                }
                ArtifactLocation::File(_) => {
                    format!("{location}: timed out after {:?}", inner.timeout)
                }
            },
        },
    };
    drop(permit);
    let elapsed_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    let Some(previous) = inner.record(location, epoch, value.clone()) else {
        tracing::debug!(location = %location, "artifact cache cleared during the probe; result dropped");
        return;
    };
    guard.done = true;
    let changed =
        previous.as_ref().map(std::mem::discriminant) != Some(std::mem::discriminant(&value));
    match &value {
        Availability::Available => {
            if changed {
                tracing::info!(location = %location, elapsed_ms, "artifact available");
            } else {
                tracing::debug!(location = %location, elapsed_ms, "artifact available");
            }
        }
        Availability::Unavailable { reason } | Availability::Unchecked { reason } => {
            if changed {
                tracing::warn!(location = %location, elapsed_ms, %reason, "artifact unavailable");
            } else {
                tracing::debug!(location = %location, elapsed_ms, %reason, "artifact unavailable");
            }
        }
    }
    inner
        .generation
        .send_modify(|generation| *generation = generation.wrapping_add(1));
}

/// One existence check, without the timeout.
async fn probe(inner: &Inner, location: &ArtifactLocation) -> Availability {
    match location {
        ArtifactLocation::File(path) => probe_file(path).await,
        ArtifactLocation::Http { url, trust } => probe_http(inner, url, trust, location).await,
    }
}

async fn probe_file(path: &str) -> Availability {
    match tokio::fs::metadata(path).await {
        Ok(metadata) if metadata.is_file() => Availability::Available,
        Ok(_) => Availability::Unavailable {
            reason: format!("not a regular file: {path}"),
        },
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Availability::Unavailable {
            reason: format!("no such file: {path}"),
        },
        Err(error) => Availability::Unavailable {
            reason: format!("{path}: {error}"),
        },
    }
}

async fn probe_http(
    inner: &Inner,
    url: &str,
    trust: &TlsTrust,
    location: &ArtifactLocation,
) -> Availability {
    // `location` displays without credentials, and so do the client's errors.
    let ca_pem = match trust {
        TlsTrust::ExtraCa { sha256 } => (inner.ca_source)(sha256),
        _ => None,
    };
    let client = match inner.outbound.registry(trust, ca_pem.as_deref()) {
        Ok(client) => client,
        Err(kind) => {
            return Availability::Unavailable {
                reason: format!("HEAD {location}: {kind}"),
            }
        }
    };
    match client.send(Method::HEAD, url, None).await {
        Ok(response) if response.status().is_success() => Availability::Available,
        Ok(response) => Availability::Unavailable {
            reason: format!("HEAD {location}: {}", response.status()),
        },
        Err(error) => {
            let hint = match error.kind {
                ErrorKind::CertificateNotTrusted(_) => {
                    " (give the registry the CA that signed it: hubctl env registry set … --ca-file)"
                }
                _ => "",
            };
            Availability::Unavailable {
                reason: format!("HEAD {error}{hint}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use hub_http::local::{LocalCa, LocalServer, Reply};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    const WAIT: Duration = Duration::from_secs(10);
    const LONG_TTL: Duration = Duration::from_secs(3600);

    /// A checker with the hub's clients (nothing denied) and no CA bundles.
    fn checker(ttl: Duration, timeout: Duration, max_in_flight: usize) -> ArtifactChecker {
        let outbound = Arc::new(Outbound::new(hub_http::DenyList::none(), None).unwrap());
        ArtifactChecker::new(
            ttl,
            timeout,
            max_in_flight,
            outbound,
            Arc::new(|_: &str| None),
        )
    }

    /// A tiny HTTP/1.1 server: `/present` 200, `/absent` 404, `/gone` 410, `/error` 500,
    /// `/slow` never answers, `/delayed/*` 200 after 100 ms, `/auth` 200 with
    /// `Basic dXNlcjpwYXNz` (user:pass) and 401 otherwise. Counts requests per path and the
    /// most `/delayed/*` requests being answered at once.
    struct Server {
        port: u16,
        requests: Arc<Mutex<HashMap<String, usize>>>,
        authorization: Arc<Mutex<Vec<String>>>,
        active: Arc<AtomicUsize>,
        max_active: Arc<AtomicUsize>,
    }

    impl Server {
        async fn start() -> Self {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let server = Server {
                port: listener.local_addr().unwrap().port(),
                requests: Arc::default(),
                authorization: Arc::default(),
                active: Arc::default(),
                max_active: Arc::default(),
            };
            let (requests, authorization) = (server.requests.clone(), server.authorization.clone());
            let (active, max_active) = (server.active.clone(), server.max_active.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        return;
                    };
                    let (requests, authorization) = (requests.clone(), authorization.clone());
                    let (active, max_active) = (active.clone(), max_active.clone());
                    tokio::spawn(serve(stream, requests, authorization, active, max_active));
                }
            });
            server
        }

        fn url(&self, path: &str) -> ArtifactLocation {
            ArtifactLocation::http(format!("http://127.0.0.1:{}{path}", self.port))
        }

        fn count(&self, path: &str) -> usize {
            self.requests
                .lock()
                .unwrap()
                .get(path)
                .copied()
                .unwrap_or(0)
        }
    }

    async fn serve(
        mut stream: TcpStream,
        requests: Arc<Mutex<HashMap<String, usize>>>,
        authorization: Arc<Mutex<Vec<String>>>,
        active: Arc<AtomicUsize>,
        max_active: Arc<AtomicUsize>,
    ) {
        let mut buf = Vec::new();
        let mut chunk = [0u8; 1024];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let head = String::from_utf8_lossy(&buf).to_string();
        let mut lines = head.lines();
        let first = lines.next().unwrap_or_default().to_string();
        let mut parts = first.split(' ');
        let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        assert_eq!(method, "HEAD", "{first}");
        let auth = lines
            .find_map(|line| line.strip_prefix("authorization: "))
            .map(str::to_string);
        *requests
            .lock()
            .unwrap()
            .entry(path.to_string())
            .or_default() += 1;
        if let Some(auth) = &auth {
            authorization.lock().unwrap().push(auth.clone());
        }
        let status = match path {
            "/present" => "200 OK",
            "/absent" => "404 Not Found",
            "/gone" => "410 Gone",
            "/error" => "500 Internal Server Error",
            "/auth" if auth.as_deref() == Some("Basic dXNlcjpwYXNz") => "200 OK",
            "/auth" => "401 Unauthorized",
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(3600)).await;
                return;
            }
            p if p.starts_with("/delayed/") => {
                // Counted between reading the request and answering it: strictly inside the
                // time the client holds its probe permit.
                let now = active.fetch_add(1, Ordering::SeqCst) + 1;
                max_active.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(100)).await;
                active.fetch_sub(1, Ordering::SeqCst);
                "200 OK"
            }
            _ => "404 Not Found",
        };
        let response =
            format!("HTTP/1.1 {status}\r\nContent-Length: 1234\r\nConnection: close\r\n\r\n");
        let _ = stream.write_all(response.as_bytes()).await;
        let _ = stream.shutdown().await;
    }

    /// Polls `f` until it returns `Some`, failing after [`WAIT`].
    async fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(value) = f() {
                return value;
            }
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls `status` until the location has a result.
    async fn settle(checker: &ArtifactChecker, location: &ArtifactLocation) -> Availability {
        wait_for(&format!("a result for {location}"), || {
            checker.status(location)
        })
        .await
    }

    fn unavailable_reason(value: Availability) -> String {
        match value {
            Availability::Unavailable { reason } => reason,
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }

    fn temp_path(tag: &str) -> std::path::PathBuf {
        static COUNTER: AtomicUsize = AtomicUsize::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        std::env::temp_dir().join(format!(
            "hub-artifacts-{tag}-{}-{nanos}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::SeqCst)
        ))
    }

    #[tokio::test]
    async fn first_status_is_none_then_available_after_notification() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let mut generations = checker.subscribe();
        let present = server.url("/present");
        assert_eq!(checker.status(&present), None);
        tokio::time::timeout(WAIT, generations.changed())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(*generations.borrow_and_update(), 1);
        assert_eq!(checker.status(&present), Some(Availability::Available));
        assert_eq!(server.count("/present"), 1);
    }

    #[tokio::test]
    async fn fresh_results_are_served_from_the_cache() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let present = server.url("/present");
        assert_eq!(settle(&checker, &present).await, Availability::Available);
        for _ in 0..20 {
            assert_eq!(checker.status(&present), Some(Availability::Available));
            tokio::task::yield_now().await;
        }
        // Give a (wrong) extra probe a chance to reach the server.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(server.count("/present"), 1);
        assert_eq!(*checker.subscribe().borrow(), 1);
    }

    #[tokio::test]
    async fn stale_results_are_served_while_reprobing() {
        let server = Server::start().await;
        let ttl = Duration::from_millis(100);
        let checker = checker(ttl, WAIT, 16);
        let present = server.url("/present");
        assert_eq!(settle(&checker, &present).await, Availability::Available);
        assert_eq!(server.count("/present"), 1);
        // Once the TTL has passed, status() still answers (stale) and probes again.
        wait_for("a second probe", || {
            assert_eq!(checker.status(&present), Some(Availability::Available));
            (server.count("/present") >= 2).then_some(())
        })
        .await;
        wait_for("the second result", || {
            (*checker.subscribe().borrow() >= 2).then_some(())
        })
        .await;
    }

    #[tokio::test]
    async fn http_statuses() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let port = server.port;
        for (path, want) in [
            ("/absent", "404 Not Found"),
            ("/gone", "410 Gone"),
            ("/error", "500 Internal Server Error"),
        ] {
            let reason = unavailable_reason(settle(&checker, &server.url(path)).await);
            assert_eq!(
                reason,
                format!("HEAD http://127.0.0.1:{port}{path}: {want}")
            );
        }
        // The request line carries the path only.
        assert_eq!(server.count("/absent"), 1);
    }

    #[tokio::test]
    async fn timeout_is_unavailable() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, Duration::from_millis(200), 16);
        let slow = server.url("/slow");
        let started = Instant::now();
        let reason = unavailable_reason(settle(&checker, &slow).await);
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert_eq!(
            reason,
            format!(
                "HEAD http://127.0.0.1:{}/slow: timed out after 200ms",
                server.port
            )
        );
        assert_eq!(server.count("/slow"), 1);
    }

    #[tokio::test]
    async fn connection_refused_is_unavailable() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        drop(listener);
        let checker = checker(LONG_TTL, WAIT, 16);
        let location = ArtifactLocation::http(format!("http://127.0.0.1:{port}/x.tgz"));
        let reason = unavailable_reason(settle(&checker, &location).await);
        assert_eq!(
            reason,
            format!("HEAD http://127.0.0.1:{port}/x.tgz: cannot connect: connection refused")
        );
    }

    #[tokio::test]
    async fn files() {
        let checker = checker(LONG_TTL, WAIT, 16);
        let file = temp_path("file");
        std::fs::write(&file, b"artifact").unwrap();
        let dir = temp_path("dir");
        std::fs::create_dir(&dir).unwrap();
        let absent = temp_path("absent");
        let location =
            |path: &std::path::Path| ArtifactLocation::File(path.to_str().unwrap().to_string());

        assert_eq!(
            settle(&checker, &location(&file)).await,
            Availability::Available
        );
        assert_eq!(
            unavailable_reason(settle(&checker, &location(&absent)).await),
            format!("no such file: {}", absent.display())
        );
        assert_eq!(
            unavailable_reason(settle(&checker, &location(&dir)).await),
            format!("not a regular file: {}", dir.display())
        );
        std::fs::remove_file(&file).unwrap();
        std::fs::remove_dir(&dir).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_probe_in_flight_per_location() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let delayed = server.url("/delayed/one");
        for _ in 0..100 {
            assert_eq!(checker.status(&delayed), None);
            tokio::task::yield_now().await;
        }
        assert_eq!(settle(&checker, &delayed).await, Availability::Available);
        assert_eq!(server.count("/delayed/one"), 1);
        assert_eq!(*checker.subscribe().borrow(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn max_in_flight_limits_concurrent_probes() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 2);
        let locations: Vec<_> = (0..6)
            .map(|i| server.url(&format!("/delayed/{i}")))
            .collect();
        for location in &locations {
            assert_eq!(checker.status(location), None);
        }
        for location in &locations {
            assert_eq!(settle(&checker, location).await, Availability::Available);
        }
        let max = server.max_active.load(Ordering::SeqCst);
        assert!((1..=2).contains(&max), "{max} concurrent probes");
    }

    #[tokio::test]
    async fn clear_forgets_results() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let present = server.url("/present");
        assert_eq!(settle(&checker, &present).await, Availability::Available);
        checker.clear();
        assert_eq!(checker.status(&present), None);
        assert_eq!(settle(&checker, &present).await, Availability::Available);
        assert_eq!(server.count("/present"), 2);
    }

    #[tokio::test]
    async fn clear_discards_probes_in_flight() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, Duration::from_millis(200), 16);
        let slow = server.url("/slow");
        assert_eq!(checker.status(&slow), None);
        wait_for("the probe to reach the server", || {
            (server.count("/slow") == 1).then_some(())
        })
        .await;
        checker.clear();
        // The old probe times out; its result is dropped, and a new status() probes again.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(*checker.subscribe().borrow(), 0);
        assert_eq!(checker.status(&slow), None);
        let reason = unavailable_reason(settle(&checker, &slow).await);
        assert!(reason.contains("timed out"), "{reason}");
        assert_eq!(server.count("/slow"), 2);
    }

    #[tokio::test]
    async fn https_registries_with_a_ca_bundle_an_untrusted_ca_and_skipped_verification() {
        let ca = LocalCa::generate("registry CA").unwrap();
        let handler: hub_http::local::Handler =
            Arc::new(|r: hub_http::local::Request| match r.path.as_str() {
                "/present.tgz" => Reply::text(200, "x"),
                "/moved.tgz" => Reply::redirect(301, "/present.tgz"),
                _ => Reply::text(404, "no"),
            });
        let server = LocalServer::loopback_https(&ca, handler).await.unwrap();
        let bundle = hub_engine::artifact::CaBundle::parse(ca.ca_pem()).unwrap();
        let (sha, pem) = (bundle.sha256().to_string(), ca.ca_pem().to_string());
        let source: CaSource = Arc::new(move |want: &str| (want == sha).then(|| pem.clone()));
        let checker = ArtifactChecker::new(
            LONG_TTL,
            WAIT,
            16,
            Arc::new(Outbound::new(hub_http::DenyList::none(), None).unwrap()),
            source,
        );
        let at = |path: &str, trust: TlsTrust| ArtifactLocation::Http {
            url: format!("https://user:secret@{}{path}", server.addr()),
            trust,
        };
        let with_ca = TlsTrust::ExtraCa {
            sha256: bundle.sha256().to_string(),
        };
        assert_eq!(
            settle(&checker, &at("/present.tgz", with_ca.clone())).await,
            Availability::Available
        );
        // A redirect is followed.
        assert_eq!(
            settle(&checker, &at("/moved.tgz", with_ca.clone())).await,
            Availability::Available
        );
        let absent = unavailable_reason(settle(&checker, &at("/absent.tgz", with_ca)).await);
        assert_eq!(
            absent,
            format!("HEAD https://{}/absent.tgz: 404 Not Found", server.addr())
        );
        let untrusted =
            unavailable_reason(settle(&checker, &at("/present.tgz", TlsTrust::SystemRoots)).await);
        assert!(
            untrusted.starts_with(&format!(
                "HEAD https://{}/present.tgz: TLS certificate not trusted: it is not signed by a \
                 trusted CA (unknown issuer) (give the registry the CA that signed it",
                server.addr()
            )),
            "{untrusted}"
        );
        assert_eq!(
            settle(&checker, &at("/present.tgz", TlsTrust::InsecureSkipVerify)).await,
            Availability::Available
        );
        // A bundle no registry has any more (changed meanwhile).
        let gone = TlsTrust::ExtraCa {
            sha256: "00".repeat(32),
        };
        let reason = unavailable_reason(settle(&checker, &at("/present.tgz", gone)).await);
        assert!(reason.contains("no registry has the CA bundle"), "{reason}");
        for reason in [absent, untrusted, reason] {
            assert!(!reason.contains("secret"), "{reason}");
        }
    }

    #[tokio::test]
    async fn credentials_are_sent_but_never_shown() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let port = server.port;
        let good = ArtifactLocation::http(format!("http://user:pass@127.0.0.1:{port}/auth"));
        let bad = ArtifactLocation::http(format!("http://user:s%65cret@127.0.0.1:{port}/auth"));
        assert_eq!(settle(&checker, &good).await, Availability::Available);
        let reason = unavailable_reason(settle(&checker, &bad).await);
        assert_eq!(
            reason,
            format!("HEAD http://127.0.0.1:{port}/auth: 401 Unauthorized")
        );
        assert!(!format!("{checker:?}").contains("secret"));
        let sent = server.authorization.lock().unwrap().clone();
        assert_eq!(
            sent,
            vec![
                "Basic dXNlcjpwYXNz".to_string(),
                hub_engine::artifact::basic_authorization("user:secret")
            ]
        );
    }

    #[test]
    fn status_outside_a_runtime_does_not_panic() {
        let checker = checker(LONG_TTL, WAIT, 16);
        let file = temp_path("outside");
        std::fs::write(&file, b"x").unwrap();
        let location = ArtifactLocation::File(file.to_str().unwrap().to_string());
        // No runtime at new() nor here: nothing is scheduled.
        assert_eq!(checker.status(&location), None);
        // Inside a runtime later, status() uses that runtime.
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let got = runtime.block_on(async { settle(&checker, &location).await });
        assert_eq!(got, Availability::Available);
        std::fs::remove_file(&file).unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn status_from_a_plain_thread_uses_the_captured_runtime() {
        let server = Server::start().await;
        let checker = checker(LONG_TTL, WAIT, 16);
        let present = server.url("/present");
        let (c, p) = (checker.clone(), present.clone());
        let first = std::thread::spawn(move || c.status(&p)).join().unwrap();
        assert_eq!(first, None);
        wait_for("the probe", || {
            (server.count("/present") == 1).then_some(())
        })
        .await;
        assert_eq!(settle(&checker, &present).await, Availability::Available);
        assert_eq!(server.count("/present"), 1);
    }
}

//! The listener side: TLS 1.3 handshakes with optional client certificates, off the accept
//! loop and under a deadline, connections held to the budgets of their class
//! ([`crate::budget`]: peers, identified parties, and connections that have not proved who
//! they are, which are closed when they do not in time), and connections that tell the gRPC
//! layer who is calling ([`ConnInfo`]).
//!
//! A client certificate is verified against the cluster CA during the handshake: one signed
//! by another CA, expired or not yet valid ends the handshake (logged with the identity it
//! names and its dates). A connection without a certificate is accepted as
//! [`Authenticated::NoCertificate`]: the gRPC layer answers UNAUTHENTICATED with a message,
//! which a refused handshake cannot carry. The identity is read once per connection.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::WebPkiClientVerifier;
use rustls::{DigitallySignedStruct, DistinguishedName, ServerConfig, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tracing::{debug, warn};

use crate::budget::{Admission, Budget, BudgetStats, Class, Slot};
use crate::identity::Identity;
use crate::log_gate::LogGate;
use crate::material::{certificate_identity, format_time, Material, TlsFiles};
use crate::stream::MaybeTls;
use crate::{arc_provider, TlsError, ALPN_H2, ALPN_HTTP1, PROTOCOLS};

/// What the transport established about a caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Authenticated {
    /// A plaintext listener (`--insecure`, loopback only): nobody is identified.
    Plaintext,
    /// TLS without a client certificate.
    NoCertificate,
    /// A certificate of this cluster, verified against its CA.
    Identity(Identity),
    /// A certificate signed by the CA that is not usable here (another cluster's identity,
    /// or none); the reason says which.
    Unusable(String),
}

/// What a connection carries to every request on it (tonic puts it in the request's
/// extensions).
#[derive(Debug, Clone)]
pub struct ConnInfo {
    /// The peer's address.
    pub remote: Option<SocketAddr>,
    /// Who the peer is.
    pub auth: Authenticated,
    /// Whether the connection proved who is calling: a request carrying a valid operator
    /// token admits a connection without a certificate ([`Admission::admit`]).
    pub admission: Arc<Admission>,
    /// The serial number of the client certificate as its DER INTEGER's content bytes
    /// (empty without one): what revocation is checked against, on every request.
    pub serial: Vec<u8>,
}

pub use crate::budget::Limits;

/// Counts of what the listener refused.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Handshakes that failed (bad or foreign certificate, not TLS, other protocol errors).
    pub handshakes_refused: AtomicU64,
    /// Handshakes that did not finish in time.
    pub handshakes_timed_out: AtomicU64,
    /// Client certificates refused by the verifier.
    pub certificates_refused: AtomicU64,
    /// What the connection budgets closed ([`crate::budget`]).
    pub budget: Arc<BudgetStats>,
}

/// A client verifier that logs and counts what it refuses, naming the identity and dates.
#[derive(Debug)]
struct LoggingVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    stats: Arc<ListenerStats>,
}

/// `operator/alice (valid 2026-01-01T00:00:00Z to 2026-04-01T00:00:00Z)`, or what is known.
pub fn describe_certificate(cert: &CertificateDer<'_>) -> String {
    match certificate_identity(cert) {
        Ok((id, v)) => format!(
            "{} (valid {} to {})",
            id,
            format_time(v.not_before),
            format_time(v.not_after)
        ),
        Err(e) => format!("a certificate that {e}"),
    }
}

impl ClientCertVerifier for LoggingVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.inner
            .verify_client_cert(end_entity, intermediates, now)
            .inspect_err(|e| {
                self.stats
                    .certificates_refused
                    .fetch_add(1, Ordering::Relaxed);
                warn!(
                    certificate = %describe_certificate(end_entity),
                    error = %e,
                    "client certificate refused"
                );
            })
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

/// What a listener speaks over TLS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocols {
    /// gRPC: HTTP/2 only.
    Grpc,
    /// HTTP for metrics and web pages: HTTP/2 or HTTP/1.1.
    Http,
}

impl Protocols {
    fn alpn(self) -> Vec<Vec<u8>> {
        match self {
            Protocols::Grpc => vec![ALPN_H2.to_vec()],
            Protocols::Http => vec![ALPN_H2.to_vec(), ALPN_HTTP1.to_vec()],
        }
    }
}

/// A node's server TLS: its certificate and the CA clients are verified against, reloadable.
pub struct ServerTls {
    files: TlsFiles,
    expected: Identity,
    protocols: Protocols,
    stats: Arc<ListenerStats>,
    current: RwLock<(Arc<ServerConfig>, Material)>,
}

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("files", &self.files)
            .field("identity", &self.expected)
            .finish_non_exhaustive()
    }
}

fn server_config(
    m: &Material,
    stats: &Arc<ListenerStats>,
    protocols: Protocols,
) -> Result<ServerConfig, TlsError> {
    let inner = WebPkiClientVerifier::builder_with_provider(m.roots.clone(), arc_provider())
        .allow_unauthenticated()
        .build()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let verifier = Arc::new(LoggingVerifier {
        inner,
        stats: stats.clone(),
    });
    let mut cfg = ServerConfig::builder_with_provider(arc_provider())
        .with_protocol_versions(PROTOCOLS)
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(
            (*m.certified).clone(),
        )));
    cfg.alpn_protocols = protocols.alpn();
    Ok(cfg)
}

/// Loads `files` and checks they name `expected` (any identity when `None`) of `cluster`
/// (any cluster when `None`).
pub(crate) fn load_as_any(
    files: &TlsFiles,
    expected: Option<&Identity>,
    cluster: Option<&str>,
    now: SystemTime,
) -> Result<Material, TlsError> {
    let m = files.load(now)?;
    let cluster_ok = cluster.is_none_or(|c| c == m.identity.cluster);
    let identity_ok = expected.is_none_or(|e| *e == m.identity.identity);
    if !identity_ok || !cluster_ok {
        let who = expected.map_or_else(|| "any identity".to_string(), |e| e.to_string());
        let want = match cluster {
            Some(c) => format!("{who} of cluster {c:?}"),
            None => who,
        };
        return Err(TlsError::WrongIdentity {
            file: files.cert.clone(),
            expected: want,
            found: m.identity.to_string(),
        });
    }
    Ok(m)
}

impl ServerTls {
    /// Loads the files of `expected` (a node of `cluster`) at `now`, for gRPC.
    pub fn load(
        files: TlsFiles,
        expected: Identity,
        cluster: &str,
        now: SystemTime,
    ) -> Result<ServerTls, TlsError> {
        Self::load_for(files, expected, cluster, now, Protocols::Grpc)
    }

    /// [`ServerTls::load`] for a listener speaking `protocols`.
    pub fn load_for(
        files: TlsFiles,
        expected: Identity,
        cluster: &str,
        now: SystemTime,
        protocols: Protocols,
    ) -> Result<ServerTls, TlsError> {
        let m = load_as_any(&files, Some(&expected), Some(cluster), now)?;
        let stats = Arc::new(ListenerStats::default());
        let cfg = server_config(&m, &stats, protocols)?;
        Ok(ServerTls {
            files,
            expected,
            protocols,
            stats,
            current: RwLock::new((Arc::new(cfg), m)),
        })
    }

    /// Re-reads the files; on any error the current configuration stays. New handshakes use
    /// the new one; open connections keep theirs.
    pub fn reload(&self, now: SystemTime) -> Result<Material, TlsError> {
        let cluster = self.material().identity.cluster;
        let m = load_as_any(&self.files, Some(&self.expected), Some(&cluster), now)?;
        let cfg = server_config(&m, &self.stats, self.protocols)?;
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = (Arc::new(cfg), m.clone());
        Ok(m)
    }

    /// The material in use.
    pub fn material(&self) -> Material {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .1
            .clone()
    }

    /// What the listener refused so far.
    pub fn stats(&self) -> &Arc<ListenerStats> {
        &self.stats
    }

    fn config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .0
            .clone()
    }
}

/// How a listener speaks.
#[derive(Debug, Clone)]
pub enum ListenerMode {
    /// Plaintext (`--insecure`).
    Plaintext,
    /// TLS with client certificates of `cluster`.
    Tls {
        /// The node's TLS.
        tls: Arc<ServerTls>,
        /// The cluster whose identities are accepted.
        cluster: String,
    },
}

/// One accepted connection.
pub struct Conn {
    io: ConnIo,
    info: ConnInfo,
    guard: Guard,
}

/// What closes a connection that its budget no longer holds: it was closed to make room for
/// a newer one, or it is still unadmitted at its deadline.
struct Guard {
    slot: Slot,
    admission: Arc<Admission>,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    stats: Arc<BudgetStats>,
}

/// One line per 10 s for each kind of closed connection (a flood would repeat them).
static EVICTED_LOG: LogGate = LogGate::new(Duration::from_secs(10));
static DEADLINE_LOG: LogGate = LogGate::new(Duration::from_secs(10));
static OVER_CAP_LOG: LogGate = LogGate::new(Duration::from_secs(10));
static HANDSHAKE_LOG: LogGate = LogGate::new(Duration::from_secs(10));

impl Guard {
    /// An error once the connection must close; registers the task to be woken for it.
    fn check(&mut self, cx: &mut Context<'_>, remote: Option<SocketAddr>) -> io::Result<()> {
        if self.deadline.is_none() {
            return Ok(());
        }
        if self.admission.is_admitted() {
            self.deadline = None;
            return Ok(());
        }
        if self.slot.poll_evicted(cx).is_ready() {
            if let Some(held) = EVICTED_LOG.pass() {
                warn!(remote = ?remote, held_back = held, "unadmitted connection closed to make room for a newer one");
            }
            return Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "closed to make room for a newer connection",
            ));
        }
        if let Some(d) = &mut self.deadline {
            if d.as_mut().poll(cx).is_ready() {
                self.stats
                    .admission_timeouts
                    .fetch_add(1, Ordering::Relaxed);
                if let Some(held) = DEADLINE_LOG.pass() {
                    warn!(remote = ?remote, held_back = held, "connection closed: no certificate and no valid token in time");
                }
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "no certificate and no valid token in time",
                ));
            }
        }
        Ok(())
    }
}

type ConnIo = MaybeTls<tokio_rustls::server::TlsStream<TcpStream>>;

impl Conn {
    /// What the connection established.
    pub fn info(&self) -> &ConnInfo {
        &self.info
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = ConnInfo;

    fn connect_info(&self) -> ConnInfo {
        self.info.clone()
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        this.guard.check(cx, this.info.remote)?;
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.guard.check(cx, this.info.remote)?;
        Pin::new(&mut this.io).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        this.guard.check(cx, this.info.remote)?;
        Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// The serial number of the peer's certificate (its DER INTEGER's content bytes), or
/// nothing without a parsable one.
fn peer_serial(tls: &tokio_rustls::server::TlsStream<TcpStream>) -> Vec<u8> {
    tls.get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|leaf| x509_parser::parse_x509_certificate(leaf.as_ref()).ok())
        .map(|(_, x509)| x509.tbs_certificate.raw_serial().to_vec())
        .unwrap_or_default()
}

/// Who the peer of a finished handshake is.
fn authenticate(tls: &tokio_rustls::server::TlsStream<TcpStream>, cluster: &str) -> Authenticated {
    let Some(leaf) = tls.get_ref().1.peer_certificates().and_then(|c| c.first()) else {
        return Authenticated::NoCertificate;
    };
    match certificate_identity(leaf) {
        Ok((id, _)) if id.cluster == cluster => Authenticated::Identity(id.identity),
        Ok((id, _)) => Authenticated::Unusable(format!(
            "the certificate is for {id}, of cluster {:?}, not {cluster:?}",
            id.cluster
        )),
        Err(e) => Authenticated::Unusable(format!("the certificate {e}")),
    }
}

/// The connections of `listener`, handshaken in `mode` and held to the budgets of `limits`
/// ([`crate::budget`]), for tonic's `serve_with_incoming_shutdown`. Handshakes run in their
/// own tasks, so a slow or silent client never holds up the next one; a failed handshake is
/// logged (one line per 10 s) and dropped.
pub fn incoming(
    listener: TcpListener,
    mode: ListenerMode,
    limits: Limits,
) -> tokio_stream::wrappers::ReceiverStream<Result<Conn, io::Error>> {
    let (tx, rx) = mpsc::channel(256);
    let stats = match &mode {
        ListenerMode::Tls { tls, .. } => tls.stats().clone(),
        ListenerMode::Plaintext => Arc::new(ListenerStats::default()),
    };
    let budget = Budget::new(limits, stats.budget.clone());
    tokio::spawn(async move {
        loop {
            let (stream, remote) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    // EMFILE and the like: back off instead of spinning.
                    warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            if tx.is_closed() {
                return;
            }
            let slot = budget.enter(remote.ip());
            if let Err(e) = stream.set_nodelay(true) {
                debug!(error = %e, "cannot set TCP_NODELAY");
            }
            let opening = Opening {
                remote,
                slot,
                limits,
                stats: stats.clone(),
            };
            tokio::spawn(opening.open(stream, mode.clone(), tx.clone()));
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// A connection between its accept and its handshake's end.
struct Opening {
    remote: SocketAddr,
    slot: Slot,
    limits: Limits,
    stats: Arc<ListenerStats>,
}

impl Opening {
    /// Handshakes, places the connection in its budget class and hands it to `tx`.
    async fn open(
        mut self,
        stream: TcpStream,
        mode: ListenerMode,
        tx: mpsc::Sender<Result<Conn, io::Error>>,
    ) {
        let remote = self.remote;
        let mut serial = Vec::new();
        let (io, auth) = match mode {
            ListenerMode::Plaintext => (MaybeTls::Plain(stream), Authenticated::Plaintext),
            ListenerMode::Tls { tls, cluster } => {
                let acceptor = tokio_rustls::TlsAcceptor::from(tls.config());
                let handshake =
                    tokio::time::timeout(self.limits.handshake_timeout, acceptor.accept(stream));
                let slot = &mut self.slot;
                let evicted = std::future::poll_fn(|cx| slot.poll_evicted(cx));
                let tls_stream = tokio::select! {
                    done = handshake => match done {
                        Ok(Ok(s)) => s,
                        Ok(Err(e)) => {
                            self.stats.handshakes_refused.fetch_add(1, Ordering::Relaxed);
                            if let Some(held) = HANDSHAKE_LOG.pass() {
                                warn!(%remote, error = %e, held_back = held, "TLS handshake refused");
                            }
                            return;
                        }
                        Err(_) => {
                            self.stats.handshakes_timed_out.fetch_add(1, Ordering::Relaxed);
                            if let Some(held) = HANDSHAKE_LOG.pass() {
                                warn!(%remote, timeout = ?self.limits.handshake_timeout, held_back = held, "TLS handshake timed out");
                            }
                            return;
                        }
                    },
                    () = evicted => {
                        if let Some(held) = EVICTED_LOG.pass() {
                            warn!(%remote, held_back = held, "handshake abandoned to make room for a newer connection");
                        }
                        return;
                    }
                };
                self.slot.handshaken();
                let auth = authenticate(&tls_stream, &cluster);
                serial = peer_serial(&tls_stream);
                (MaybeTls::Tls(Box::new(tls_stream)), auth)
            }
        };
        let admission = self.slot.admission();
        let class = match &auth {
            Authenticated::Plaintext => Some(Class::Admitted),
            Authenticated::Identity(Identity::Node(_)) => Some(Class::Peer),
            Authenticated::Identity(_) => Some(Class::Admitted),
            Authenticated::NoCertificate | Authenticated::Unusable(_) => None,
        };
        if let Some(class) = class {
            if let Err(e) = admission.admit_as(class) {
                if let Some(held) = OVER_CAP_LOG.pass() {
                    warn!(%remote, caller = ?auth, error = %e, held_back = held, "connection refused");
                }
                return;
            }
        }
        let deadline = (!admission.is_admitted())
            .then(|| Box::pin(tokio::time::sleep(self.limits.admission_timeout)));
        let conn = Conn {
            io,
            info: ConnInfo {
                remote: Some(remote),
                auth,
                admission: admission.clone(),
                serial,
            },
            guard: Guard {
                slot: self.slot,
                admission,
                deadline,
                stats: self.stats.budget.clone(),
            },
        };
        let _ = tx.send(Ok(conn)).await;
    }
}
